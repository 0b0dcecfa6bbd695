"""Data trainledger knows: hardware, dtypes, model presets, precision and optimizer recipes. No torch."""

from __future__ import annotations

from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.specs import names
from trainledger.specs.dtypes import DTYPES, DType, bytes_per_element, get_dtype, round_to_dtype
from trainledger.specs.hardware import GPUS, GPUSpec, get_gpu
from trainledger.specs.model import CruncherSpec, ModelSpec, TransformerSpec
from trainledger.specs.presets import ALIASES as PRESET_ALIASES
from trainledger.specs.presets import PRESETS


def get_model(name_or_path: str, flag: str = "--model") -> ModelSpec:
    """A preset by name (`trainledger models` lists them) or a spec read from a Hugging Face config.json path."""
    key = str(name_or_path).strip()
    if not key:
        raise TrainledgerError(f"{flag} needs a preset name (see `trainledger models`) or a path to a Hugging Face "
                               "config.json, got ''")
    if key.lower() in PRESETS:
        return PRESETS[key.lower()]
    if key.lower() in PRESET_ALIASES:
        return PRESETS[PRESET_ALIASES[key.lower()]]
    path = Path(key)
    try:
        is_path = key.endswith(".json") or path.is_file() or path.is_dir()
    except OSError as error:  # a name too long for the file system, for one
        raise TrainledgerError(f"unknown model {key[:60]!r}... ({flag}): not a preset, and not a readable path "
                               f"({error.strerror or error})") from None
    if is_path:
        from trainledger.specs.hf_config import spec_from_config_file
        return spec_from_config_file(path, flag)          # sizes checked there (specs/bounds.py)
    known = ", ".join(PRESETS)
    raise TrainledgerError(f"unknown model {name_or_path!r} ({flag}).{names.did_you_mean(key, [*PRESETS, *PRESET_ALIASES])} "
                           f"Known presets: {known}; or give a path to a Hugging Face config.json")


__all__ = ["get_model", "get_gpu", "get_dtype", "GPUS", "GPUSpec", "DTYPES", "DType", "bytes_per_element",
           "round_to_dtype", "TransformerSpec", "CruncherSpec", "ModelSpec", "PRESETS", "PRESET_ALIASES",
           "TrainledgerError"]
