"""The one table of a run's settings, read from the fields of specs/run.py's groups. Pure, no torch.

`settings()` lists every field that carries a `setting` (its flag, kind, help, unit, the commands that take it) with
its dotted path in the run ("layout.tp", "layout.fsdp.replicate"). The CLI makes its flags from it (cli/run_flags.py),
the web API's schema and form follow the CLI's parsers, a command's JSON carries the resolved run as `run_to_dict`,
and the run file (specs/run_file.py) reads and writes the same paths. A new setting is one field in specs/run.py.

The table is read from `specs.run.GROUPS` each time it is asked, so what a test puts there appears everywhere.
"""

from __future__ import annotations

import dataclasses
from dataclasses import fields

from trainledger.errors import TrainledgerError
from trainledger.specs import run as run_mod
from trainledger.specs.run import _nested_group, fields_by_path, locate  # noqa: F401 (the table's walk of the groups)


def settings() -> list:
    """Every field with a flag, as a specs.run.Setting with its `path` filled in, in the groups' order."""
    return [dataclasses.replace(f.metadata["setting"], path=path)
            for path, f in fields_by_path().items() if "setting" in f.metadata]


def by_flag() -> dict:
    """{"--tp": its Setting, ...}."""
    return {s.flag: s for s in settings()}


def for_command(command: str) -> list:
    """The settings `command` takes, in the table's order."""
    return [s for s in settings() if command in s.commands]


# ----- a run as plain data (the JSON `run`, the run file's sections) ------------------------------------------------
def run_to_dict(run) -> dict:
    """The run as nested plain values ({"batch": {...}, "layout": {"tp": 1, ..., "fsdp": {...}}, ...})."""
    return dataclasses.asdict(run)


def _where(path: str, f) -> str:
    s = f.metadata.get("setting")
    return f"{path} ({s.flag})" if s else path


def _check_type(path: str, f, value, source: str):
    """`value` read from a file for the field at `path`, checked for its type (the group checks its range)."""
    s = f.metadata.get("setting")
    kind = s.kind.rstrip("?") if s else None
    expected = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    if value is None and ((s is not None and s.kind.endswith("?")) or "None" in expected):
        return None                   # unset: decided from the model, hardware or layout (JSON null)
    if kind == "reserve" and isinstance(value, str) and value.strip().lower() not in run_mod.RESERVE_WORDS:
        from trainledger import units
        try:
            return units.parse_bytes(value)
        except TrainledgerError:
            raise TrainledgerError(f"{source}: {_where(path, f)} must be 'auto', 'cuda', 'expandable' or a size like 2GiB, "
                                   f"got {value!r}") from None
    ok = {"count": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "zero": lambda v: isinstance(v, int) and not isinstance(v, bool),
          "flag": lambda v: isinstance(v, bool), "switch": lambda v: isinstance(v, bool),
          "choice": lambda v: isinstance(v, str), "name": lambda v: isinstance(v, str),
          "roles": lambda v: isinstance(v, str),
          "positive": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "at_least_one": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "fraction": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
          "reserve": lambda v: isinstance(v, (int, float, str)) and not isinstance(v, bool)}.get(kind)
    if ok is None:          # a file-only field: its type from the annotation
        ok = (lambda v: isinstance(v, bool)) if "bool" in expected else (lambda v: isinstance(v, str))
    if not ok(value):
        raise TrainledgerError(f"{source}: {_where(path, f)} has the wrong type: {type(value).__name__} {value!r} "
                               f"(expected {expected.replace(' | None', '')})")
    return value


def run_from_dict(data: dict, source: str = "run") -> "run_mod.Run":
    """A Run from nested plain values (run_to_dict's form; any group or field may be left out: its default), checked
    key by key: an unknown key, a value of the wrong type or out of range is an error naming the key and its flag."""
    if not isinstance(data, dict):
        raise TrainledgerError(f"{source}: the run must be a table of groups ({', '.join(run_mod.GROUPS)})")
    known = fields_by_path()
    groups = {}
    for name, group in run_mod.GROUPS.items():
        groups[name] = _group_from(group, data.get(name, {}), name, known, source)
    unknown = sorted(set(data) - set(run_mod.GROUPS))
    if unknown:
        raise TrainledgerError(f"{source}: unknown key {unknown[0]!r} (the groups of a run: {', '.join(run_mod.GROUPS)})")
    return run_mod.Run(**groups)


def _group_from(group: type, values, prefix: str, known: dict, source: str):
    if not isinstance(values, dict):
        raise TrainledgerError(f"{source}: {prefix} must be a table of settings, got {type(values).__name__}")
    names = {f.name: f for f in fields(group)}
    unknown = sorted(set(values) - set(names))
    if unknown:
        close = ", ".join(sorted(names))
        raise TrainledgerError(f"{source}: unknown key '{prefix}.{unknown[0]}' (the keys of {prefix}: {close})")
    kwargs = {}
    for name, value in values.items():
        f, path = names[name], f"{prefix}.{name}"
        inner = _nested_group(f)
        kwargs[name] = (_group_from(inner, value, path, known, source) if inner is not None
                        else _check_type(path, f, value, source))
    try:
        return group(**kwargs)
    except TrainledgerError as error:
        if not source:               # flags on the command line: the message names the flag already
            raise
        raise TrainledgerError(f"{source}: {error}", getattr(error, "flag", None)) from None
