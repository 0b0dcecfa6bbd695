"""The run file: one training run saved as TOML (as torchtitan's job configs) or JSON, to re-ask, diff and launch. Pure.

A run file is a document of sections:

    version = 1                        # RUN_FILE_VERSION; a file of another version is refused
    [model]     name = "llama-2-7b"    # a preset or a config.json path (or params = 7e9: a parameter count)
    [hardware]  gpu, num_gpus, and optionally memory_per_gpu, gpus_per_node, intra/inter_node_bandwidth, calibration
    [batch] [numerics] [layout] [layout.fsdp] [layout.experts] [levers] [kernels]   the Run (specs/run.py)
    [train]                            settings only `train` reads (steps, lr, data...: train/config.py)
    derived = ["layout.dp", ...]       the settings that were decided from the rest (the data-parallel size from the
                                       GPU count, the ZeRO stage a user of the layout runs...): kept as written, and
                                       decided again when a flag on the command line changes the run

`--save-config FILE` writes the resolved run with every default filled in (a setting whose default is decided later,
such as "dropless" or the device's reserve policy, is written as a comment); `--config FILE` reads one, and flags on
the command line override it. The same document, as JSON, is the `run` of a command's --json answer and of each
`layout` candidate. Reading is strict: an unknown key, a value of the wrong type or out of range, or another version
is one line naming the key (and its flag). The writer is ours: the standard library reads TOML but does not write it,
and the file carries each setting's help as a comment, which TOML writers do not.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from trainledger.errors import TrainledgerError, first_line
from trainledger.specs import run as run_mod
from trainledger.specs.run_table import fields_by_path, run_from_dict, run_to_dict

MAX_RUN_FILE_BYTES = 1 << 20          # a run file is a few KB; a larger one is refused unread
SECTIONS = ("train",)                 # sections of one command, validated by that command
# [model] and [hardware]: key -> (flag, types, help)
MODEL_KEYS = {"name": ("--model", (str,), "a preset name (`trainledger models`) or a Hugging Face config.json path"),
              "params": ("--params", (int, float), "a parameter count instead of a model (model states only)"),
              "vocab_size": ("(file only)", (int,), "the model's vocabulary where it is not the named model's: a "
                                                    "trained run's, which follows its tokenizer")}
HARDWARE_KEYS = {
    "gpu": ("--gpu", (str,), "accelerator (`trainledger hardware`)"),
    "num_gpus": ("--num-gpus", (int,), "GPUs of the job"),
    "memory_per_gpu": ("--memory-per-gpu", (int, float), "bytes per GPU, if not the GPU's own"),
    "gpus_per_node": ("--gpus-per-node", (int,), "GPUs sharing the fast link inside a node"),
    "intra_node_bandwidth": ("--intra-node-bandwidth", (int, float), "achieved bus bandwidth inside a node, bytes/s"),
    "inter_node_bandwidth": ("--inter-node-bandwidth", (int, float), "achieved bus bandwidth between nodes, bytes/s"),
    "calibration": ("--calibration", (str,), "a calibration profile (`bench --calibrate --out FILE`)"),
}


def document(model: dict, hardware: dict, run, sections: dict | None = None, derived=()) -> dict:
    """The run file's content as plain data: version, [model], [hardware], the run's groups, command sections, and
    the paths of the values that were derived (module docstring)."""
    doc = {"version": run_mod.RUN_FILE_VERSION, "model": dict(model),
           "hardware": {k: v for k, v in hardware.items() if v is not None}, **run_to_dict(run)}
    if derived:
        doc["derived"] = sorted(derived)
    for name, values in (sections or {}).items():
        doc[name] = dict(values)
    return doc


def _check_keys(table, name: str, known: dict, source: str) -> dict:
    if not isinstance(table, dict):
        raise TrainledgerError(f"{source}: [{name}] must be a table of keys, got {type(table).__name__}")
    for key, value in table.items():
        if key not in known:
            raise TrainledgerError(f"{source}: unknown key '{name}.{key}' (the keys of [{name}]: {', '.join(known)})")
        flag, types, _ = known[key]
        if isinstance(value, bool) or not isinstance(value, types) or (
                isinstance(value, float) and not math.isfinite(value)):
            raise TrainledgerError(f"{source}: {name}.{key} ({flag}) has the wrong type: {type(value).__name__} "
                                   f"{value!r}")
    return dict(table)


@dataclass(frozen=True)
class RunFile:
    """A run file read: its [model] and [hardware] keys, the run (defaults where a key is absent), the command
    sections, and `given`: the run's groups exactly as the file wrote them (what a command's defaults yield to)."""

    model: dict
    hardware: dict
    run: object
    sections: dict
    given: dict
    derived: tuple = ()


def read_document(data: dict, source: str) -> RunFile:
    """The RunFile of a run file's content; strict (module docstring)."""
    if not isinstance(data, dict):
        raise TrainledgerError(f"{source}: a run file is a table of sections, got {type(data).__name__}")
    version = data.get("version")
    if version != run_mod.RUN_FILE_VERSION:
        said = "has no version" if version is None else f"has version {version!r}"
        raise TrainledgerError(f"{source} {said}; this trainledger reads run files of version "
                               f"{run_mod.RUN_FILE_VERSION} (write one with --save-config)", "--config")
    model = _check_keys(data.get("model", {}), "model", MODEL_KEYS, source)
    hardware = _check_keys(data.get("hardware", {}), "hardware", HARDWARE_KEYS, source)
    groups = {name: data[name] for name in run_mod.GROUPS if name in data}
    run = run_from_dict(groups, source)
    sections = {}
    for name in SECTIONS:
        if name in data:
            if not isinstance(data[name], dict):
                raise TrainledgerError(f"{source}: [{name}] must be a table of keys")
            sections[name] = dict(data[name])
    derived = data.get("derived", [])
    paths = set(fields_by_path()) | {f"hardware.{key}" for key in HARDWARE_KEYS}
    if not isinstance(derived, list) or not all(isinstance(p, str) and p in paths for p in derived):
        bad = next((p for p in derived if p not in paths), derived) if isinstance(derived, list) else derived
        raise TrainledgerError(f"{source}: derived must list settings of the run (like \"layout.dp\"), got {bad!r}")
    unknown = sorted(set(data) - {"version", "model", "hardware", "derived", *run_mod.GROUPS, *SECTIONS})
    if unknown:
        raise TrainledgerError(f"{source}: unknown key {unknown[0]!r} (a run file holds version, model, hardware, "
                               f"{', '.join(run_mod.GROUPS)} and {', '.join(SECTIONS)})", "--config")
    return RunFile(model, hardware, run, sections, groups, tuple(derived))


def load(path) -> RunFile:
    """The RunFile at `path`: TOML, or JSON when it ends in .json. The file must
    be a regular file (a FIFO or a device is refused unread, a symlink is not followed) of at most MAX_RUN_FILE_BYTES."""
    import tomllib                    # only when a file is read: planning commands start fast

    from trainledger.files import read_regular_file
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise TrainledgerError(f"run file {path} does not exist", "--config")
    raw = read_regular_file(path, "--config", MAX_RUN_FILE_BYTES)
    try:
        text = raw.decode("utf-8")
        data = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        kind = "JSON" if path.suffix.lower() == ".json" else "TOML"
        raise TrainledgerError(f"run file {path} is not valid {kind}: {first_line(error)[:160]}", "--config") from None
    return read_document(data, f"run file {path}")


# ----- writing -----------------------------------------------------------------------------------------------------
def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else "nan"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)      # a TOML basic string is a JSON string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _comment(text: str, width: int = 100) -> str:
    return " ".join(text.split())[:width]


def to_toml(doc: dict) -> str:
    """The run file `doc` (document()) as TOML, each setting with its flag and help as a comment; unset optional
    settings (None) appear as comments, so the file lists every setting of the run."""
    known = fields_by_path()
    lines = [f"{HEADER} (docs/conventions.md#the-run-file): `trainledger step --config FILE`,",
             "# `train --config FILE`; flags on the command line override what is here.",
             f"version = {doc['version']}", ""] + _derived_line(doc)

    def table(name: str, values: dict, helps=None) -> None:
        lines.append(f"[{name}]")
        nested = []
        for key, value in values.items():
            if isinstance(value, dict):
                nested.append((f"{name}.{key}", value))
                continue
            f = known.get(f"{name}.{key}")
            s = f.metadata.get("setting") if f is not None else None
            note = (f"{s.flag}: {s.help}" if s else (f.metadata.get("help", "") if f is not None else "")) \
                or (helps or {}).get(key, "")
            if value is None:
                lines.append(f"# {key} = (unset: {_comment(note, 90)})")
            else:
                lines.append(f"{key} = {_toml_value(value)}" + (f"    # {_comment(note)}" if note else ""))
        lines.append("")
        for inner, values_inner in nested:
            table(inner, values_inner)

    table("model", doc["model"], {k: f"{v[0]}: {v[2]}" for k, v in MODEL_KEYS.items()})
    table("hardware", doc["hardware"], {k: f"{v[0]}: {v[2]}" for k, v in HARDWARE_KEYS.items()})
    for name in run_mod.GROUPS:
        if name in doc:
            table(name, doc[name])
    for name in SECTIONS:
        if name in doc:
            table(name, {k: v for k, v in doc[name].items()})
    return "\n".join(lines)


def _derived_line(doc: dict) -> list[str]:
    if not doc.get("derived"):
        return []
    return ["# decided from the model, the hardware or the rest of the run; decided again when a flag changes the run",
            f"derived = {_toml_value(list(doc['derived']))}", ""]


def dumps(doc: dict, path) -> str:
    """`doc` as the text of a run file named `path`: JSON for .json, TOML otherwise."""
    if Path(path).suffix.lower() == ".json":
        return json.dumps(doc, indent=2) + "\n"
    return to_toml(doc)


# ----- saving: never over a file that is not a run file, never through a link --------------------------------------
HEADER = "# A trainledger run"


def is_run_file(path: Path) -> bool:
    """Whether the regular file at `path` is a run file: TOML beginning with our header, or a JSON document with a
    version and a model (a layout candidate's `run` saved as it is)."""
    from trainledger.files import read_regular_file
    try:
        text = read_regular_file(path, "--save-config", MAX_RUN_FILE_BYTES).decode("utf-8", "replace")
    except TrainledgerError:
        return False
    if text.startswith(HEADER):
        return True
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and "version" in data and "model" in data


def save(path, doc: dict, flag: str) -> None:
    """`doc` written to `path` as dumps() gives it, atomically (files.atomic_path: a reader sees the old file or the
    whole new one); refuses a symbolic link, a non-regular file, an existing file that is not a run file, and a
    folder that does not exist, each in one line naming `flag`."""
    from trainledger.files import atomic_path
    path = Path(path)
    if path.is_symlink():
        raise TrainledgerError(f"{flag} {path} is a symbolic link; give the path of a file", flag)
    if path.exists():
        if not path.is_file():
            raise TrainledgerError(f"{flag} {path} is not a regular file", flag)
        if not is_run_file(path):
            raise TrainledgerError(f"{flag} {path} exists and is not a trainledger run file; it is left as it is "
                                   "(give a new path, or remove it)", flag)
    if not path.parent.is_dir():
        raise TrainledgerError(f"{flag} {path}: the directory {path.parent} does not exist", flag)
    try:
        with atomic_path(path) as temporary:
            temporary.write_text(dumps(doc, path), encoding="utf-8")
    except OSError as error:          # a full disk, a file-size limit, a read-only folder: one line, nothing half-written
        raise TrainledgerError(f"{flag}: cannot write the run file {path}: {error.strerror or error}", flag) from None
