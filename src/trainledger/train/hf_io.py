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
    if spec.with_(name=ours.name, source=ours.source) != ours:
        raise TrainledgerError(f"{flag} {directory}: its config.json describes another model than --model "
                               f"'{ours.name}'; leave --model out (the model comes from {directory}/config.json)")
    load_into(model, from_hf(spec, tensors, family, flag), flag)


def check_out_dir(out_dir: Path, force: bool, sources: list[Path]) -> None:
    """Refuses an OUT_DIR that is a file, non-empty without --force, or holds (or is) what is being exported."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise TrainledgerError(f"OUT_DIR {out_dir} is a file; give a directory")
    resolved = out_dir.resolve()
    for source in sources:
        source = Path(source).resolve()
        if source == resolved or resolved in source.parents:
            raise TrainledgerError(f"OUT_DIR {out_dir} holds the run being exported ({source}); writing there would "
                                   "delete it: give another directory")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not force:
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
