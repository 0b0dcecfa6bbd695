"""`trainledger export`: a run's model as a Hugging Face directory that transformers loads (no pickle anywhere).

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


def export(path, out_dir, force: bool = False) -> dict:
    """Writes the model at `path` (a run, a checkpoint or an HF directory) to `out_dir`; what was written."""
    from trainledger.models.hf_weights import family_of, hf_config, to_hf
    from trainledger.train.checkpoint import os_reason
    path, out_dir = Path(path), Path(out_dir)
    hf_io.check_out_dir(out_dir, force, [path])
    loaded = load_model(path, "cpu")
    recorded = [Path(loaded.config[key]) for key in ("out_dir", "checkpoint_dir")   # the run it came from
                if isinstance(loaded.config, dict) and isinstance(loaded.config.get(key), str)]
    recorded = [d for d in recorded if (d / ".lock").is_file() or (d / "checkpoints").is_dir()]
    hf_io.check_out_dir(out_dir, force, [path, loaded.source, *recorded])
    spec, model = loaded.spec, loaded.model
    family = family_of(spec)
    dtype = next(model.parameters()).dtype
    tensors = to_hf(spec, model.state_dict())
    config = hf_config(spec, dtype)
    metadata = {"trainledger_source": str(loaded.source)}
    if loaded.step is not None:
        metadata["trainledger_step"] = str(loaded.step)
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer_file, tokenizer_name = _tokenizer_file(loaded, Path(scratch))
        try:
            files = hf_io.write_hf_dir(out_dir, tensors, config, tokenizer_file, metadata)
        except OSError as error:
            raise TrainledgerError(f"could not write {out_dir}: {os_reason(error)}; nothing was changed there") from None
    return {"out_dir": str(out_dir), "model": spec.name, "family": family, "architecture": config["architectures"][0],
            "source": str(loaded.source), "step": loaded.step, "dtype": config["dtype"],
            "n_params": sum(p.numel() for p in model.parameters()), "tokenizer": tokenizer_name,
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
