"""Fixtures shared across test folders; tests/ itself on sys.path for the shared helpers (runs.py: a run from keywords)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture
def one_torch_thread():
    """One intra-op thread: the CI machine has 2 cores, and runs in and out of process then agree bit for bit."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _families():
    """One tiny spec per architecture family added in issue 13, each keeping its preset's features (and windows
    shorter than the test sequences, so the masked paths run). Tests take them as the `family_spec` argument."""
    from trainledger.specs import PRESETS

    small = dict(vocab_size=128, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96, max_seq_len=64)
    return {
        "gpt_neox": PRESETS["pythia-1.4b"].with_(**small | {"n_kv_heads": None}),
        "phi3": PRESETS["phi-3-mini-4k"].with_(**small, sliding_window=8),
        "gemma2": PRESETS["gemma-2-2b"].with_(**small, d_head=24, sliding_window=8, sliding_layers=(0,),
                                             attn_scale=20 ** -0.5),
        "gemma3_text": PRESETS["gemma-3-1b"].with_(**small | {"n_layers": 3, "n_kv_heads": 1}, d_head=24,
                                                   sliding_window=8, sliding_layers=(0, 1)),
        "qwen3": PRESETS["qwen3-8b"].with_(**small, d_head=24),
        "mpt": PRESETS["mpt-7b"].with_(**small | {"d_model": 48, "n_heads": 6, "n_kv_heads": None, "d_ff": 192},
                                      clip_qkv=6.0),
        "qwen2_moe": PRESETS["qwen1.5-moe-a2.7b"].with_(**small | {"n_layers": 3, "n_kv_heads": 4, "d_ff": 40},
                                                        n_experts=4, experts_per_token=2, shared_expert_d_ff=56,
                                                        dense_layers=(1,), dense_d_ff=96),
        "qwen3_moe": PRESETS["qwen3-30b-a3b"].with_(**small | {"d_ff": 40}, d_head=24, n_experts=4, experts_per_token=2),
    }


def pytest_generate_tests(metafunc):
    if "family_spec" in metafunc.fixturenames:
        families = _families()
        metafunc.parametrize("family_spec", list(families.values()), ids=list(families))
    if "dense_family_spec" in metafunc.fixturenames:   # those that run on fake and meta tensors (no routing)
        families = {name: spec for name, spec in _families().items() if not spec.is_moe}
        metafunc.parametrize("dense_family_spec", list(families.values()), ids=list(families))
