"""Hugging Face checkpoints on disk: read a local directory (config.json + safetensors) and write one, never pickle.

Reading (`train --init-from DIR`, `generate DIR`): DIR/config.json gives the spec (specs/hf_config.py) and the
weights come from DIR/model.safetensors, or the shards a model.safetensors.index.json names (each a plain file
name inside DIR). safetensors is a JSON header plus raw tensor bytes: loading it runs no code, unlike
pytorch_model.bin (a pickle, which can run anything when unpickled): such a directory is refused with the way
out. Only the GPT-2 and Llama families map onto our Transformer exactly (models/hf_weights.py).

Writing (`export`): model.safetensors + config.json (+ tokenizer.json when the run has a tokenizer file) go
into a temporary directory beside OUT_DIR, each file fsynced, then the directory is renamed to OUT_DIR
(an existing OUT_DIR, empty or with --force, is first moved aside and deleted after the rename): a reader sees
no OUT_DIR or a complete one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from trainledger.errors import TrainledgerError, first_line

WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
PICKLE_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth", "model.ckpt")
_SHARD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*\.safetensors$")
CONVERT_HINT = ("convert it to safetensors first (in Python: AutoModelForCausalLM.from_pretrained(DIR)"
                ".save_pretrained(OUT, safe_serialization=True), on a machine where loading that pickle is safe)")


def weight_files(directory: Path, flag: str) -> list[Path]:
    """The safetensors files holding a Hugging Face model in `directory`; refuses pickled-only checkpoints."""
    directory = Path(directory)
    for name in (WEIGHTS_FILE, INDEX_FILE):       # a FIFO or a device under the name: said, never opened
        _regular_or_absent(directory / name, flag)
    if (directory / WEIGHTS_FILE).is_file():
        return [directory / WEIGHTS_FILE]
    if (directory / INDEX_FILE).is_file():
        try:
            index = json.loads((directory / INDEX_FILE).read_text(encoding="utf-8"))
            shards = sorted(set(index["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise TrainledgerError(f"{directory / INDEX_FILE} is not a safetensors index ({flag}): "
                                   f"{first_line(error)[:120]}") from None
        bad = [s for s in shards if not isinstance(s, str) or not _SHARD.match(s)]
        if bad:
            raise TrainledgerError(f"{directory / INDEX_FILE} names {str(bad[0])[:60]!r}, not a .safetensors file "
                                   f"inside {directory} ({flag})")
        for shard in shards:
            _regular_or_absent(directory / shard, flag)
        missing = [s for s in shards if not (directory / s).is_file()]
        if missing:
            raise TrainledgerError(f"{directory / INDEX_FILE} names {missing[0]!r}, which is missing ({flag})")
        return [directory / s for s in shards]
    pickled = [name for name in PICKLE_NAMES if (directory / name).exists()]
    pickled += sorted(p.name for p in directory.glob("*.bin"))[:1] if not pickled else []
    if pickled:
        raise TrainledgerError(f"{directory} holds its weights as {pickled[0]}, a pickle that can run code when "
                               f"loaded; trainledger loads safetensors only ({flag}): {CONVERT_HINT}")
    raise TrainledgerError(f"{directory} has no {WEIGHTS_FILE} (nor {INDEX_FILE}) ({flag}); give a directory written "
                           "by `trainledger export` or by transformers' save_pretrained(..., safe_serialization=True)")


def _regular_or_absent(path: Path, flag: str) -> None:
    """A one-line error when `path` exists (links followed: the Hub's cache links its files) as something other
    than a regular file (a FIFO "had no model.safetensors"; opening it would wait for a writer)."""
    import stat

    from trainledger.files import not_regular
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        raise not_regular(flag, path, mode, "a Hugging Face directory holds its weights in regular files")


def read_hf_dir(directory, flag: str = "--init-from"):
    """(spec, family, {name: tensor}) of a local Hugging Face GPT-2 or Llama checkpoint directory (module doc)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from trainledger.specs.hf_config import read_config_file, spec_from_config_file
    directory = Path(directory)
    if not directory.is_dir():
        raise TrainledgerError(f"{flag} {str(directory)!r} is not a directory; give a folder with config.json and "
                               f"{WEIGHTS_FILE}")
    if not (directory / CONFIG_FILE).is_file():
        raise TrainledgerError(f"{directory} has no {CONFIG_FILE} ({flag}); give a Hugging Face model directory")
    config = read_config_file(directory, flag)
    family = config.get("model_type")
    if family not in ("gpt2", "llama"):
        raise TrainledgerError(f"{directory} holds a {family!r} model ({flag}); weights convert for model_type gpt2 "
                               "and llama only (other families' layouts differ)")
    spec = spec_from_config_file(directory, flag)
    tensors = {}
    for path in weight_files(directory, flag):
        try:
            tensors.update(load_file(path))
        except (SafetensorError, OSError, ValueError, RuntimeError) as error:
            raise TrainledgerError(f"cannot read {path} ({flag}): {first_line(error)[:160]}") from None
    return spec, family, tensors


def load_hf_model(directory, flag: str = "--init-from", device="cpu"):
    """(our Transformer with the directory's weights, spec) — logits equal to transformers' own model's."""
    from trainledger.models import Transformer
    from trainledger.models.hf_weights import from_hf, load_into
    spec, family, tensors = read_hf_dir(directory, flag)
    model = Transformer(spec, device=device)
    load_into(model, from_hf(spec, tensors, family, flag), flag)
    return model, spec


def init_from(model, directory, flag: str = "--init-from") -> None:
    """Copies the weights of a Hugging Face directory into `model` (built from that directory's config.json)."""
    from trainledger.models.hf_weights import from_hf, load_into
    spec, family, tensors = read_hf_dir(directory, flag)
    ours = model.spec
    if spec.vocab_size != ours.vocab_size:
        raise TrainledgerError(f"{flag} {directory}: its model has a vocabulary of {spec.vocab_size:,} tokens, the run's "
                               f"tokenizer (and --vocab-multiple) give {ours.vocab_size:,}: train with the checkpoint's "
                               f"own tokenizer (--tokenizer {directory}/tokenizer.json, the default when it is there) "
                               "and without --vocab-multiple")
    if spec.with_(name=ours.name, source=ours.source, rope_layout=ours.rope_layout) != ours:
        raise TrainledgerError(f"{flag} {directory}: its config.json describes another model than --model "
                               f"'{ours.name}'; leave --model out (the model comes from {directory}/config.json)")
    from trainledger.models.hf_weights import to_layout       # its weights' RoPE layout -> the model's
    load_into(model, to_layout(ours, from_hf(spec, tensors, family, flag), spec.rope_layout, ours.rope_layout), flag)


# What a training run, its checkpoint directory or one checkpoint holds: an OUT_DIR holding any of these is never
# replaced, --force or not (export's OUT_DIR replaced a run's checkpoints/ and deleted every checkpoint of it).
RUN_MARKERS = (".lock", "checkpoints", "metrics.jsonl", "manifest.json", "trainer.pt", "run.toml")


def read_dirs(source: Path) -> list[Path]:
    """The directories an export of `source` reads: itself; for a checkpoint (step_NNNNNNNN) the checkpoint
    directory holding it (its siblings are that run's other checkpoints); for a checkpoint directory named
    `checkpoints` (train's default, <out-dir>/checkpoints) the run around it. export adds the run's own --out-dir
    and --checkpoint-dir as its checkpoint records them."""
    source = Path(source).resolve()
    dirs = [source]
    if source.name.startswith("step_") or (source / "manifest.json").exists() or (source / "trainer.pt").exists():
        dirs.append(source.parent)
    if dirs[-1].name == "checkpoints":
        dirs.append(dirs[-1].parent)
    return dirs


def _children(path: Path) -> list[Path]:
    try:
        return list(path.iterdir())
    except OSError:
        return []


def check_out_dir(out_dir: Path, force: bool, sources: list[Path]) -> None:
    """Refuses an OUT_DIR that is a file, non-empty without --force, lies inside (or around) a directory being
    read (the run, its checkpoint directory, the checkpoint: read_dirs), or looks like a run or a checkpoint
    (RUN_MARKERS, step_* directories) even with --force."""
    out_dir = Path(out_dir)
    if out_dir.is_symlink():
        raise TrainledgerError(f"OUT_DIR {out_dir} is a symbolic link; give the directory itself (the export replaces "
                               "OUT_DIR, and never a link)")
    if out_dir.exists() and not out_dir.is_dir():
        raise TrainledgerError(f"OUT_DIR {out_dir} is a file; give a directory")
    resolved = out_dir.resolve()
    for source in sources:
        for read in read_dirs(source):
            if read == resolved or resolved in read.parents or read in resolved.parents:
                raise TrainledgerError(f"OUT_DIR {out_dir} holds the run being exported, or lies inside it ({read}); "
                                       "writing there would delete or mix into its checkpoints: give a directory "
                                       "outside the run")
    children = _children(out_dir) if out_dir.is_dir() else []
    marker = next((c for c in children if c.name in RUN_MARKERS or c.name.startswith("step_")), None)
    if marker is not None:
        raise TrainledgerError(f"OUT_DIR {out_dir} holds {marker.name}: it is a training run or a checkpoint, not an "
                               "export; it is never replaced, even with --force: give another directory")
    if children and not force:
        raise TrainledgerError(f"OUT_DIR {out_dir} exists and is not empty; pass --force to replace it, or give a "
                               "new directory")


def write_hf_dir(out_dir, tensors: dict, config: dict, tokenizer_file: Path | None = None,
                 metadata: dict | None = None, weights_name: str = WEIGHTS_FILE,
                 config_name: str = CONFIG_FILE) -> list[Path]:
    """Writes model.safetensors, config.json (and tokenizer.json) atomically into `out_dir` (module doc); a PEFT
    adapter is the same with `weights_name` adapter_model.safetensors and `config_name` adapter_config.json."""
    from safetensors.torch import save_file
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)                 # mkdtemp's 0700 would hide the export from other users
        save_file(tensors, tmp / weights_name, metadata={"format": "pt", **(metadata or {})})
        (tmp / config_name).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        if tokenizer_file is not None:
            shutil.copyfile(tokenizer_file, tmp / TOKENIZER_FILE)
        for path in tmp.iterdir():
            os.chmod(path, 0o666 & ~umask)            # safetensors writes 0600: the mode of a plain new file instead
            with open(path, "rb+") as handle:
                os.fsync(handle.fileno())
        trash = None
        if out_dir.exists():
            trash = out_dir.parent / f".{out_dir.name}.old-{os.getpid()}"
            os.replace(out_dir, trash)
        os.replace(tmp, out_dir)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return sorted(out_dir.iterdir())
