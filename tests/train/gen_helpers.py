"""Helpers of the generate/export tests: small GPT-2- and Llama-style runs written as real checkpoints (no training:
the weights are random, scaled so that greedy decoding does not fall into one repeated token), and a calibration
profile with round numbers so that predictions need no measurement of this machine."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from trainledger.models import Transformer
from trainledger.models.hf_weights import hf_config
from trainledger.specs import get_model
from trainledger.train import checkpoint as ckpt
from trainledger.train.config import TrainConfig

SMALL = dict(vocab_size=256, d_model=64, n_layers=2, n_heads=4, d_ff=128, max_seq_len=64)
SPECS = {"gpt2": get_model("tiny").with_(**SMALL),
         "llama": get_model("llama-3-8b").with_(**SMALL, n_kv_heads=2, rope_theta=10000.0)}


def make_model(spec, seed: int = 0, scale: float = 6.0) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(spec).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale) if p.ndim > 1 else p.add_(0.1 * torch.randn_like(p))
    return model


def write_run(run: Path, spec, model: Transformer | None = None, step: int = 5, model_name: str | None = None):
    """A run directory with one complete checkpoint of `model`; its --model is a config.json describing `spec`."""
    run = Path(run)
    run.mkdir(parents=True, exist_ok=True)
    if model_name is None:
        (run / "model.json").write_text(json.dumps(hf_config(spec, torch.float32)))
        model_name = str(run / "model.json")
    model = model if model is not None else make_model(spec)
    config = TrainConfig(model=model_name, out_dir=str(run)).to_dict()
    state = {"format": "full", "step": step, "tokens": 0, "world_size": 1, "config": config,
             "model": model.state_dict()}
    directory = run / "checkpoints"
    tmp = ckpt.begin(directory, step)
    ckpt.write_trainer_state(tmp, state)
    ckpt.commit(tmp, directory, step, "full", {"config": config})
    return model


def profile(**changes) -> dict:
    """A valid CPU calibration profile with round numbers (not a measurement)."""
    out = {
        "format": "trainledger-calibration", "version": 1, "device": "cpu", "device_name": "Test CPU", "host": "test",
        "torch_version": torch.__version__, "threads": 1, "created_utc": "2026-01-01T00:00:00Z",
        "calibration_seconds": 1.0, "peak_flops_per_s": {"fp32": 100e9}, "peak_source": "fp32 stated for the test",
        "gemm": {"fp32": [[128, 128, 128, 20e9], [1024, 1024, 1024, 80e9], [1024, 32, 32, 5e9]]},
        "memory": [[1e6, 100e9], [1e3, 10e9], [1e9, 10e9]],
        "attention": {"dtype": "fp32", "head_dim": 64, "heads": 8, "points": [[128, 10e9, 5e9], [1024, 40e9, 30e9]]},
        "op_overhead_seconds": 2e-6, "decode_op_overhead_seconds": 5e-6, "memory_bytes": 16e9,
    }
    out.update(changes)
    return out


def fake_calibration(monkeypatch, tmp_path, **changes) -> None:
    """This machine's calibration is `profile()`: cached under tmp_path, never measured."""
    from trainledger.measure import calibrate as cal
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(cal, "calibrate", lambda device, progress=None: profile(**changes))
