"""Fine-tuning runs: `train --finetune lora|qlora [--init-from HF_DIR]`, their base model, adapters and checkpoints.

The model of a fine-tuning run is built in this order, by the trainer and again by `export` / `generate`:
  1. the base: our Transformer with the weights of --init-from HF_DIR (train/hf_io.py: safetensors only), or,
     without --init-from, GPT-2's random initialization drawn from a generator seeded with --seed alone (so that
     export rebuilds the same base without it being stored);
  2. the adapters (models/lora.py apply_lora: everything else frozen), drawn from the run's seeded generator;
  3. the cast to the precision recipe's parameter dtype, on the run's device;
  4. the frozen Linears quantized (--quantize nf4-dq / int8: models/quantize.py, torchao), the head excepted.

A checkpoint holds the adapters and their optimizer state, never the frozen base (its size would be the model's):
instead it records the base's identity, the sha256 and size of HF_DIR's config.json and safetensors files (or, for
a random base, the seed and torch version that drew it), and a resume or an export checks it before loading
anything: a base that changed under the adapters would silently give another model.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import torch

from trainledger.errors import TrainledgerError
from trainledger.models import build_model
from trainledger.models.lora import LoRASettings, adapter_state_dict, apply_lora, parse_targets, trainable_counts
from trainledger.models.quantize import check_quantize, quantize_frozen_linears


def is_finetune(config) -> bool:
    """Whether a run (a TrainConfig or a checkpoint's config dict) trains adapters on a frozen base."""
    value = config.get("finetune", "full") if isinstance(config, dict) else config.finetune
    return value not in (None, "full")


def _get(config, name: str, default=None):
    return config.get(name, default) if isinstance(config, dict) else getattr(config, name)


def lora_settings(config) -> LoRASettings:
    """The LoRASettings of a run (a TrainConfig or a checkpoint's config dict)."""
    return LoRASettings(rank=int(_get(config, "lora_rank", 8)), alpha=float(_get(config, "lora_alpha", 16.0)),
                        targets=parse_targets(_get(config, "lora_targets", "q,v")),
                        dropout=float(_get(config, "lora_dropout", 0.0)))


def check_libraries(config, device: torch.device) -> None:
    """Refuses, before any data is read, what the libraries cannot run here: torchao missing for --quantize or
    --optimizer adamw-8bit (naming trainledger[finetune]), paged-adamw-8bit or --cpu-offload off CUDA."""
    from trainledger.optim.levers import check_cpu_offload
    from trainledger.optim.low_bit import check_paged
    if config.quantize != "none":
        check_quantize(config.quantize, "--finetune qlora" if config.finetune == "qlora" else "--quantize")
    if config.optimizer == "adamw-8bit":
        from trainledger.models.quantize import torchao_module
        torchao_module("torchao.optim", "--optimizer adamw-8bit")
    if config.optimizer == "paged-adamw-8bit":
        check_paged(device)
    check_cpu_offload(config.cpu_offload, device, config.parallel)


def base_model(spec, config, flag: str = "--init-from"):
    """Step 1 of the module docstring: the fp32 base Transformer on the CPU."""
    init = _get(config, "init_from")
    if init:
        from trainledger.train.hf_io import init_from
        model = build_model(spec)
        init_from(model, init, flag)
        return model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(_get(config, "seed", 0)))
        return build_model(spec)


def adapt(model, config) -> list[str]:
    """Step 2: LoRA adapters on the targeted Linears, everything else frozen; the names adapted."""
    return apply_lora(model, lora_settings(config))


def quantize_base(model, config) -> list[str]:
    """Step 4: the frozen Linears in --quantize's format (none: nothing); the names quantized."""
    return quantize_frozen_linears(model, _get(config, "quantize", "none"))


def describe(model, adapted: list[str], quantized: list[str], config) -> str:
    """One line for the run's log: what is trained, what is frozen and how the base is stored."""
    trainable, frozen = trainable_counts(model)
    settings = lora_settings(config)
    base = f"base {_get(config, 'init_from')}" if _get(config, "init_from") else "random base (no --init-from)"
    store = f", {len(quantized)} frozen Linears in {_get(config, 'quantize')}" if quantized else ""
    return (f"fine-tuning {_get(config, 'finetune')}: {base}; adapters of rank {settings.rank} (alpha "
            f"{settings.alpha:g}) on {len(adapted)} Linears ({','.join(settings.targets)}){store}; "
            f"{trainable:,} trainable parameters, {frozen:,} frozen ({trainable / max(1, trainable + frozen):.3%})")


# ----- the base's identity ------------------------------------------------------------------------------------
def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def base_identity(config) -> dict:
    """What the base of a run is, to check on resume and export (module docstring): plain JSON values."""
    init = _get(config, "init_from")
    if not init:
        return {"kind": "random", "seed": int(_get(config, "seed", 0)), "torch": torch.__version__.split("+")[0]}
    from trainledger.train.hf_io import CONFIG_FILE, weight_files
    directory = Path(init)
    paths = [directory / CONFIG_FILE, *weight_files(directory, "--init-from")]
    return {"kind": "hf", "dir": str(directory),
            "files": {p.name: {"bytes": os.stat(p).st_size, "sha256": _file_sha256(p)} for p in paths}}


def check_base(saved: dict, current: dict, flag: str = "--resume") -> None:
    """Raises one line when the base a checkpoint's adapters were trained on (`saved`) is not the one there now
    (`current`, base_identity of the run)."""
    if not isinstance(saved, dict) or "kind" not in saved:
        raise TrainledgerError(f"{flag}: the checkpoint records no base model identity; it is not a fine-tuning "
                               "checkpoint of this version")
    if saved["kind"] != current["kind"]:
        raise TrainledgerError(f"{flag}: the adapters were trained on a {saved['kind']} base, this run has a "
                               f"{current['kind']} one (--init-from)")
    if current["kind"] == "random":
        if saved.get("seed") != current["seed"]:
            raise TrainledgerError(f"{flag}: the random base was drawn with --seed {saved.get('seed')}, not "
                                   f"{current['seed']}")
        return
    files, now = saved.get("files") or {}, current["files"]
    for name in sorted(set(files) | set(now)):
        if files.get(name) != now.get(name):
            what = ("is missing now" if name not in now else "was not there" if name not in files else
                    f"changed (sha256 {str(files[name].get('sha256'))[:12]}…, now {now[name]['sha256'][:12]}…)")
            raise TrainledgerError(f"{flag}: the base model in {current['dir']} is not the one the adapters were trained "
                                   f"on: {name} {what}; restore it, or start a new run")


def model_state(model) -> dict:
    """What a fine-tuning checkpoint stores of the model: the trainable tensors (the adapters), by name."""
    return {name: tensor.detach().clone() for name, tensor in adapter_state_dict(model).items()}


@torch.no_grad()
def load_model_state(model, state: dict, source: str = "--resume") -> None:
    """Copies the adapters of a checkpoint into `model`; names and shapes must be exactly the run's."""
    own = adapter_state_dict(model)
    if set(own) != set(state):
        extra, missing = sorted(set(state) - set(own)), sorted(set(own) - set(state))
        raise TrainledgerError(f"{source}: the checkpoint's adapters do not fit this run "
                               f"({'missing ' + missing[0] if missing else 'unexpected ' + extra[0]}); were --lora-rank, "
                               "--lora-targets or the model changed?")
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(own[name].shape):
            raise TrainledgerError(f"{source}: adapter {name} has shape {tuple(tensor.shape)}, the run needs "
                                   f"{tuple(own[name].shape)}")
        own[name].copy_(tensor)


def build_tuned_model(spec, config: dict, state: dict, device="cpu", flag: str = "RUN_OR_CHECKPOINT"):
    """The model of a fine-tuning checkpoint (its trainer state: config, adapters, base identity), as the trainer
    built it, on `device` in eval mode; the base is checked against the recorded identity first (`export`, `generate`)."""
    from trainledger.models.precision import param_dtype
    check_base(state.get("base"), base_identity(config), flag)
    adapters = state.get("model")
    if not isinstance(adapters, dict):
        raise TrainledgerError(f"the checkpoint holds no adapters ({flag})")
    model = base_model(spec, config, flag)
    adapt(model, config)
    model = model.to(device=device, dtype=param_dtype(str(config.get("precision", "fp32"))))
    quantize_base(model, config)
    load_model_state(model, adapters, flag)
    return model.eval()


def expected_checkpoint_bytes(model) -> int:
    """About what a fine-tuning checkpoint holds: the trainable tensors and two optimizer states of their size."""
    return 3 * sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
