"""The run's flags, made from the one table (specs/run_table.py), and `--config` / `--save-config`.

`add_run_flags(parser, command)` adds every setting of the run that `command` takes, with the kind's argparse type
and a help text that states the command's default and unit; `add_config_flags` adds --config FILE and
--save-config FILE. Before a command computes, `apply_config(args)` (called by cli/main.py) merges, lowest first:
the run's defaults (specs/run.py), the command's own (COMMAND_DEFAULTS), a --config file, then the flags given on
the command line; and sets every flag's attribute of `args` to the merged value, so the command reads one set of
values. `asked(args)` is the run that results (a specs.run.Run); `save_config(args, result)` writes the resolved run
of an answer (`result["run"]`, a run file document) to --save-config FILE.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainledger.cli import common
from trainledger.errors import TrainledgerError
from trainledger.specs import run_file, run_table
from trainledger.specs.run import Run

# A command's defaults where they differ from the run's (each with the reason in its command's DESCRIPTION).
COMMAND_DEFAULTS = {
    "memory": {"layout.zero": 3, "layout.dp": 1},    # as in `fit` (cli/memory.py DEFAULT_ZERO): FSDP's full shard
    "fit": {"layout.zero": 3, "numerics.precision": "fp32", "levers.reserve": 0.0},   # the lecture's naive AdamW
}
# Choices argparse does not check: the run's group refuses a wrong one with its own line, naming them all
CHECKED_BY_THE_RUN = ("--ep-dispatcher",)
# The [model] and [hardware] keys of a run file, as the flags' attributes of `args`
FILE_FLAGS = {("model", "name"): "model", ("model", "params"): "params", ("hardware", "gpu"): "gpu",
              ("hardware", "num_gpus"): "num_gpus", ("hardware", "memory_per_gpu"): "memory_per_gpu",
              ("hardware", "gpus_per_node"): "gpus_per_node",
              ("hardware", "intra_node_bandwidth"): "intra_node_bandwidth",
              ("hardware", "inter_node_bandwidth"): "inter_node_bandwidth",
              ("hardware", "calibration"): "calibration"}


def dest(setting) -> str:
    """The attribute of `args` a setting's flag fills: the flag without dashes (`--batch-size` -> batch_size)."""
    return setting.flag[2:].replace("-", "_")


def reserve_choice(text: str):
    """An argparse type for --reserve: 'auto', 'cuda' or 'expandable' (specs.run.RESERVE_WORDS), or a non-negative size
    like 2GiB in bytes."""
    from trainledger import units
    from trainledger.specs.run import RESERVE_WORDS
    word = str(text).strip().lower()
    if word in RESERVE_WORDS:
        return word
    try:
        value = units.parse_bytes(text)
    except TrainledgerError:
        value = None
    if value is None or not value >= 0:
        raise argparse.ArgumentTypeError(f"must be {', '.join(map(repr, RESERVE_WORDS))} or a non-negative size like "
                                         f"2GiB, got {text!r}")
    return value


def _type(setting):
    from trainledger.cli.experts import unit_interval
    kind = setting.kind.rstrip("?")
    return {"count": common.positive_int, "positive": common.positive_float, "at_least_one": common.positive_float,
            "fraction": unit_interval, "reserve": reserve_choice, "zero": int, "name": str, "roles": str,
            "choice": str.lower if setting.choices and all(isinstance(c, str) for c in setting.choices) else None}[kind]


def _default_words(value, setting) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return f" (default {'on' if value else 'off'})"
    if setting.kind.rstrip("?") == "reserve" and isinstance(value, float):
        from trainledger import units
        return f" (default {units.format_bytes(value)})"
    return f" (default {value})"


def defaults_of(command: str) -> Run:
    """The run a command starts from: the run's defaults with the command's own (COMMAND_DEFAULTS)."""
    data = run_table.run_to_dict(Run())
    for path, value in COMMAND_DEFAULTS.get(command, {}).items():
        *groups, name = path.split(".")
        table = data
        for group in groups:
            table = table[group]
        table[name] = value
    return run_table.run_from_dict(data, f"defaults of {command}")


def _value_at(run: Run, path: str):
    value = run
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _mark(namespace, action) -> None:
    """Record on the parsed namespace that `action`'s flag was given on the command line."""
    given = getattr(namespace, "_flags_given", None)
    if given is None:
        given = set()
        setattr(namespace, "_flags_given", given)
    given.add(action.dest)


class _Store(argparse._StoreAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self)


class _StoreConst(argparse._StoreConstAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self)


class _Switch(argparse.BooleanOptionalAction):
    def __call__(self, parser, namespace, values, option_string=None):
        super().__call__(parser, namespace, values, option_string)
        _mark(namespace, self)


def add_run_flags(parser: argparse.ArgumentParser, command: str, skip: tuple = (), helps: dict | None = None,
                  types: dict | None = None) -> None:
    """The run settings `command` takes (specs.run_table.for_command), each with the command's default; a flag given
    on the command line is recorded (so it overrides --config, and a default does not); FSDP2's and the experts' in
    groups of their own. `skip`: flags the command declares itself; `helps`, `types`: a command's own help or
    argparse type for a flag."""
    base = defaults_of(command)
    groups = {}
    for s in run_table.for_command(command):
        if s.flag in skip:
            continue
        where = s.path.rsplit(".", 1)[0]
        target = parser
        if where in ("layout.fsdp", "layout.experts"):
            title = ("FSDP2 with --zero 3 (account/memory/fsdp.py)" if where == "layout.fsdp"
                     else "mixture of experts (account/time/expert_parallel.py)")
            target = groups.setdefault(where, parser.add_argument_group(title))
        default = _value_at(base, s.path)
        text = (helps or {}).get(s.flag) or s.help
        text = text.replace("%", "%%") + ("" if "default" in text else _default_words(default, s))
        kind = s.kind.rstrip("?")
        if kind == "switch":
            action = target.add_argument(s.flag, dest=dest(s), action=_Switch, default=default, help=text)
        elif kind == "flag":
            action = target.add_argument(s.flag, dest=dest(s), action=_StoreConst, const=True, default=default,
                                         help=text)
        else:
            choices = s.choices if kind == "choice" else ((0, 1, 2, 3) if kind == "zero" else None)
            if s.flag in CHECKED_BY_THE_RUN:
                choices = None
            action = target.add_argument(s.flag, dest=dest(s), action=_Store, type=(types or {}).get(s.flag, _type(s)),
                                         choices=choices, default=default, metavar=_metavar(s), help=text)
        action.run_setting = s            # the web schema reads the table's entry from the parser (web/api.py)
        action.run_default = default


def bind(action, flag: str, command: str) -> None:
    """Make a command's own flag (its own type or help) the setting `flag` of the run, so that --config fills it and
    the merged value reaches it (apply_config): given on the command line when it differs from its default None."""
    s = run_table.by_flag()[flag]
    action.run_setting, action.run_default = s, _value_at(defaults_of(command), s.path)
    action.run_given_if_set = True


def _metavar(s) -> str | None:
    kind = s.kind.rstrip("?")
    if kind == "choice" and len(s.choices) > 5:
        return "NAME"
    return {"reserve": "SIZE", "count": "N", "positive": "X", "at_least_one": "X", "fraction": "F",
            "roles": "ROLES"}.get(kind)


def add_config_flags(parser: argparse.ArgumentParser) -> None:
    """--config FILE and --save-config FILE (specs/run_file.py)."""
    parser.add_argument("--config", metavar="FILE", default=None,
                        help="a run file (TOML, or JSON ending in .json: written by --save-config, a train run's "
                             "run.toml or a `layout --json` candidate's run); flags given here override it")
    parser.add_argument("--save-config", metavar="FILE", default=None,
                        help="also write the resolved run, every default filled in, to FILE (TOML; JSON for .json)")


def _is_run_action(action) -> bool:
    return hasattr(action, "run_setting")


def apply_config(args) -> None:
    """Merge defaults < COMMAND_DEFAULTS < --config < the flags given (module docstring) into `args`, and keep the
    run in `args._run` and the file's model/hardware/sections in `args._file`."""
    parser = getattr(args, "_parser", None)
    command = parser.prog.split()[-1] if parser is not None else ""
    data = run_table.run_to_dict(defaults_of(command))
    file_model, file_hardware, sections = {}, {}, {}
    args._file_derived = None
    args._hardware_given = {name for (table, _), name in FILE_FLAGS.items() if table == "hardware"
                            and getattr(args, name, None) is not None}   # before the file's fill them in

    if getattr(args, "config", None):
        read = run_file.load(args.config)
        file_model, file_hardware, sections = read.model, read.hardware, read.sections
        file_given = read.given
        if _changes_the_run(args, parser):       # what the file derived is derived again from the changed run
            file_given = _without(file_given, {p for p in read.derived if not p.startswith("hardware.")})
            file_hardware = {k: v for k, v in file_hardware.items() if f"hardware.{k}" not in read.derived}
        else:
            args._file_derived = list(read.derived)           # asked again as it was: what it derived, still
        data = _merge(data, file_given)
    model_given = getattr(args, "model", None) is not None or getattr(args, "params", None) is not None
    args._model_vocab = None if model_given else file_model.get("vocab_size")
    for (table, key), name in FILE_FLAGS.items():
        source = file_model if table == "model" else file_hardware
        if table == "model" and model_given:          # --model or --params on the command line replaces [model]
            continue
        if key in source and hasattr(args, name) and getattr(args, name) is None:
            setattr(args, name, source[key])
    given = set(_paths(file_given)) if getattr(args, "config", None) else set()
    flags_given = getattr(args, "_flags_given", set())
    for action in (parser._actions if parser is not None else []):
        if not _is_run_action(action):
            continue
        value = getattr(args, action.dest, None)
        if action.dest not in flags_given and not (getattr(action, "run_given_if_set", False) and value is not None):
            continue
        given.add(action.run_setting.path)
        *groups, name = action.run_setting.path.split(".")
        table = data
        for group in groups:
            table = table[group]
        table[name] = value
    run = run_table.run_from_dict(data, f"--config {args.config}" if getattr(args, "config", None) else "")
    for action in (parser._actions if parser is not None else []):
        # a command's own flag (bind) keeps its own "not given" (None) unless a flag or the file gave it
        if _is_run_action(action) and (not getattr(action, "run_given_if_set", False)
                                       or action.run_setting.path in given):
            setattr(args, action.dest, _value_at(run, action.run_setting.path))
    args._run, args._file = run, {"model": file_model, "hardware": file_hardware, "sections": sections}
    args._given = given          # the settings given by a flag or the file (dotted paths), not by a default
    module = getattr(args, "_module", None)
    for name, value in getattr(module, "HARDWARE_DEFAULTS", {}).items():     # the command's --gpu, --num-gpus
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def _paths(groups: dict, prefix: str = ""):
    for key, value in groups.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            yield from _paths(value, path)
        else:
            yield path


def given(args, path: str) -> bool:
    """Whether the setting at `path` ("batch.batch_size") was given by a flag or by --config (not a default)."""
    return path in getattr(args, "_given", set())


def _changes_the_run(args, parser) -> bool:
    """Whether a flag given on the command line changes the run of a --config file: a run flag, --model, or one of
    the hardware's (the GPU, their count and memory, the interconnect)."""
    hardware = ("model", "params", "gpu", "num_gpus", "memory_per_gpu", "gpus_per_node", "intra_node_bandwidth",
                "inter_node_bandwidth", "calibration")
    return bool(getattr(args, "_flags_given", set())) or any(getattr(args, name, None) is not None for name in hardware)


def _without(groups: dict, paths: set, prefix: str = "") -> dict:
    out = {}
    for key, value in groups.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out[key] = _without(value, paths, path)
        elif path not in paths:
            out[key] = value
    return out


def derived_paths(args) -> list[str]:
    """The settings of `args`'s run that were decided by resolve() (None before it) and the GPU count when it was
    not given: what a saved run file lists as `derived`."""
    if getattr(args, "_file_derived", None) is not None:
        return args._file_derived
    asked_run = asked(args)
    paths = [p for p, f in run_table.fields_by_path().items()
             if f.default is None and _value_at(asked_run, p) is None]
    if "num_gpus" not in getattr(args, "_hardware_given", set()):
        paths.append("hardware.num_gpus")
    return paths


def _merge(base: dict, over: dict) -> dict:
    """`over` on top of `base`, group by group."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _merge(base.get(key, {}), value) if isinstance(value, dict) else value
    return out


def asked(args) -> Run:
    """The run of `args` after apply_config (the Run the command is asked about)."""
    run = getattr(args, "_run", None)
    if run is None:
        raise TrainledgerError("internal: the run flags were not merged (apply_config)")
    return run


def hardware_of(args, gpu, num_gpus=None):
    """specs.run.Hardware of the resolved `gpu` (common.resolve_gpu + apply_hardware_flags), the GPU count and
    --memory-per-gpu (where the command has it)."""
    from trainledger.specs.run import Hardware
    return Hardware(gpu, num_gpus, getattr(args, "memory_per_gpu", None))


def document_of(args, run, num_gpus=None, model_name=None, derived=None) -> dict:
    """The run file document (specs.run_file.document) of `run` as `args` asked it: the model as named, the GPU as
    named (a datasheet entry by its table name), the GPU count, the interconnect and memory overrides given, and
    what was derived (derived_paths; `derived` [] for a run chosen whole, as a layout candidate is)."""
    model = {"name": model_name if model_name is not None else getattr(args, "model", None)}
    if getattr(args, "_model_vocab", None) is not None:
        model["vocab_size"] = args._model_vocab
    if getattr(args, "params", None) is not None and model["name"] is None:
        model = {"params": args.params}
    gpu = getattr(args, "gpu", None)
    if gpu is not None and str(gpu).strip().lower() not in ("cpu", "cuda") and not getattr(args, "calibration", None):
        from trainledger.specs.hardware import get_gpu
        gpu = get_gpu(gpu).name
    hardware = {"gpu": gpu, "num_gpus": num_gpus}
    for name in ("memory_per_gpu", "gpus_per_node", "intra_node_bandwidth", "inter_node_bandwidth", "calibration"):
        value = getattr(args, name, None)
        if value is not None:
            hardware[name] = value
    return run_file.document({k: v for k, v in model.items() if v is not None}, hardware, run,
                             (getattr(args, "_file", None) or {}).get("sections"),
                             derived_paths(args) if derived is None else derived)


def save_config(args, result) -> None:
    """Write `result["run"]` (a run file document) to --save-config FILE, atomically, never through a symlink and
    never over a file that is not a run file; one line on stderr says where."""
    path = getattr(args, "save_config", None)
    if not path or not isinstance(result, dict) or not isinstance(result.get("run"), dict):
        if path:
            raise TrainledgerError("--save-config: this answer has no run to save", "--save-config")
        return
    run_file.save(Path(path), result["run"], "--save-config")
    sys.stderr.write(f"wrote the run to {path} (`trainledger {args._parser.prog.split()[-1]} --config {path}` "
                     "asks it again)\n")
