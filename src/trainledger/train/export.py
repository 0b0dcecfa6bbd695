"""`trainledger export`: a run's model as a Hugging Face directory that transformers loads (no pickle anywhere).

A fine-tuning run (train --finetune lora|qlora) exports its merged model, or with --adapter its adapters in PEFT's
format (train/adapter_export.py).

The newest good checkpoint (train/run_model.py) → GPT2LMHeadModel or LlamaForCausalLM names and layouts
(models/hf_weights.py) → model.safetensors + config.json (+ tokenizer.json when the run's tokenizer is a file),
written atomically (train/hf_io.py). `AutoModelForCausalLM.from_pretrained(OUT_DIR)` then computes the same
logits as our model (tests/train/test_hf_export.py: within 1e-4 in fp32).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.train import hf_io
from trainledger.train.run_model import load_model


MODES = ("model", "adapter", "merge")


def export(path, out_dir, force: bool = False, mode: str = "model") -> dict:
    """Writes the model at `path` (a run, a checkpoint or an HF directory) to `out_dir`; what was written.

    mode "model": the run's model (a fine-tuning run's merged one); "merge": the same, named for fine-tuning runs;
    "adapter": a fine-tuning run's adapters in PEFT's format (train/adapter_export.py)."""
    from trainledger.models.hf_weights import family_of, hf_config, to_hf
    from trainledger.models.lora import merged_state_dict
    from trainledger.train.checkpoint import os_reason
    path, out_dir = Path(path), Path(out_dir)
    hf_io.check_out_dir(out_dir, force, [path])
    loaded = load_model(path, "cpu")
    recorded = [Path(loaded.config[key]) for key in ("out_dir", "checkpoint_dir")   # the run it came from
                if isinstance(loaded.config, dict) and isinstance(loaded.config.get(key), str)]
    recorded = [d for d in recorded if (d / ".lock").is_file() or (d / "checkpoints").is_dir()]
    hf_io.check_out_dir(out_dir, force, [path, loaded.source, *recorded])
    spec, model = loaded.spec, loaded.model
    tuned = bool(loaded.config) and loaded.config.get("finetune", "full") != "full"
    if mode == "adapter" and not tuned:
        raise TrainledgerError(f"{path} has no adapters (it trained every weight, or is a Hugging Face model) "
                               "(--adapter); `trainledger export RUN OUT_DIR` writes its whole model")
    family = family_of(spec)
    state = merged_state_dict(model) if tuned else model.state_dict()
    dtype = state["tok_embeddings.weight"].dtype
    tensors, config, names = to_hf(spec, state), hf_config(spec, dtype), {}
    if mode == "adapter":
        from trainledger.train.adapter_export import ADAPTER_CONFIG, ADAPTER_WEIGHTS, peft_adapter
        from trainledger.train.finetune import lora_settings
        tensors, config = peft_adapter(model, spec, lora_settings(loaded.config), loaded.config.get("init_from"))
        names = {"weights_name": ADAPTER_WEIGHTS, "config_name": ADAPTER_CONFIG}
    metadata = {"trainledger_source": str(loaded.source)}
    if loaded.step is not None:
        metadata["trainledger_step"] = str(loaded.step)
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer_file, tokenizer_name = _tokenizer_file(loaded, Path(scratch)) if mode != "adapter" else (None, "none")
        try:
            files = hf_io.write_hf_dir(out_dir, tensors, config, tokenizer_file, metadata, **names)
        except OSError as error:
            raise TrainledgerError(f"could not write {out_dir}: {os_reason(error)}; nothing was changed there") from None
    return {"out_dir": str(out_dir), "model": spec.name, "family": family, "mode": mode,
            "architecture": "PEFT LoRA adapter" if mode == "adapter" else config["architectures"][0],
            "source": str(loaded.source), "step": loaded.step, "dtype": str(dtype).removeprefix("torch."),
            "n_params": sum(t.numel() for t in (tensors if mode == "adapter" else state).values()) if tuned else sum(
                p.numel() for p in model.parameters()), "merged": tuned and mode != "adapter", "tokenizer": tokenizer_name,
            "files": [{"name": f.name, "bytes": f.stat().st_size} for f in files]}


def _tokenizer_file(loaded, scratch: Path) -> tuple[Path | None, str]:
    """(a tokenizer.json to ship beside the weights or None, the tokenizer's name): the run's tokenizer when it is
    a file (a byte-level run has none: its ids are the UTF-8 bytes), or an HF directory's own tokenizer.json."""
    if loaded.hf_dir is not None:
        path = loaded.hf_dir / hf_io.TOKENIZER_FILE
        return (path, "tokenizer.json") if path.is_file() else (None, "none")
    from trainledger.data import run_tokenizer
    tokenizer = run_tokenizer(loaded.config)
    name = tokenizer.name
    if name == "bytes":
        return None, name
    target = scratch / hf_io.TOKENIZER_FILE
    tokenizer.save(target)
    return target, name
