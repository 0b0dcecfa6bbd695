"""The Transformer does exactly the matmuls docs/models.md lists: measured with FlopCounterMode.

SDPA runs on the math backend here because FlopCounterMode counts 0 for the CPU flash kernel
(facts.md, "what peer tools get wrong"); the math backend does the same QKᵀ and A·V over the full T×T.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from trainledger.models import Transformer
from trainledger.specs import PRESETS
from trainledger.specs.model import TransformerSpec

B, T = 2, 16


def _predicted_forward_flops(spec: TransformerSpec) -> int:
    """2·m·k·n per matmul: projections, MLP (k experts per token + router + shared expert and its gate in MoE
    layers; a dense MLP of dense_d_ff in an MoE model's dense layers), LM head, QKᵀ and A·V."""
    d, dh, n_tokens = spec.d_model, spec.head_dim, B * T
    q, kv = spec.n_heads * dh, spec.kv_heads * dh
    matrices = 3 if spec.gated_mlp else 2
    total = 2 * n_tokens * d * spec.vocab_size
    for layer in range(spec.n_layers):
        per_token = d * q + 2 * d * kv + q * d
        if spec.is_moe_layer(layer):
            per_token += spec.experts_per_token * matrices * d * spec.d_ff + d * spec.n_experts
            per_token += matrices * d * (spec.shared_expert_d_ff or 0) + (d if spec.shared_expert_gate else 0)
        else:
            per_token += matrices * d * (spec.dense_d_ff if spec.is_moe else spec.d_ff)
        total += 2 * n_tokens * per_token + 2 * 2 * B * spec.n_heads * T * T * dh
    return total


SPECS = {
    "gpt": PRESETS["tiny"].with_(n_layers=2, vocab_size=64),
    "llama-gqa": TransformerSpec(name="t", vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48,
                                 max_seq_len=T),
    "head-dim": TransformerSpec(name="t", vocab_size=64, d_model=32, n_layers=1, n_heads=4, d_head=12, d_ff=48,
                                max_seq_len=T),
    "moe": TransformerSpec(name="t", vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48,
                           max_seq_len=T, n_experts=4, experts_per_token=2),
}


def _measure(model, idx):
    with sdpa_kernel(SDPBackend.MATH):
        with FlopCounterMode(display=False) as forward:
            _, loss = model(idx, idx)
        with FlopCounterMode(display=False) as backward:
            loss.backward()
    return forward.get_total_flops(), backward.get_total_flops()


@pytest.mark.parametrize("name", SPECS)
def test_forward_flops_are_exactly_the_listed_matmuls_and_backward_is_twice(name):
    spec = SPECS[name]
    torch.manual_seed(0)
    model = Transformer(spec)
    forward, backward = _measure(model, torch.randint(0, spec.vocab_size, (B, T)))
    assert forward == _predicted_forward_flops(spec)
    assert backward == 2 * forward


def test_recompute_adds_the_recomputed_forward_to_hardware_flops():
    spec = SPECS["llama-gqa"]
    model = Transformer(spec)
    idx = torch.randint(0, spec.vocab_size, (B, T))
    forward, backward = _measure(model, idx)
    head = 2 * B * T * spec.d_model * spec.vocab_size
    attention_core = spec.n_layers * 2 * 2 * B * spec.n_heads * T * T * spec.head_dim
    model.recompute = "full"
    assert _measure(model, idx) == (forward, 2 * forward + forward - head)    # every block's forward again
    model.recompute = "selective"
    assert _measure(model, idx) == (forward, 2 * forward + attention_core)    # only QKᵀ and A·V again


def test_every_family_does_exactly_the_listed_matmuls(family_spec, one_torch_thread):
    """GPT-NeoX, Phi-3, Gemma 2/3 (soft-capped attention written out as two batched matmuls), Qwen3, MPT (ALiBi
    mask), Qwen2/3-MoE: the same count, windows and masks change nothing counted."""
    torch.manual_seed(0)
    forward, backward = _measure(Transformer(family_spec), torch.randint(0, family_spec.vocab_size, (B, T)))
    assert forward == _predicted_forward_flops(family_spec)
    assert backward == 2 * forward


def test_every_family_recompute_adds_its_forward(family_spec, one_torch_thread):
    """Full recompute re-runs every block (masks and soft-capping included); selective re-runs the core only."""
    spec = family_spec
    model = Transformer(spec)
    idx = torch.randint(0, spec.vocab_size, (B, T))
    torch.manual_seed(0)
    forward, _ = _measure(model, idx)
    head = 2 * B * T * spec.d_model * spec.vocab_size
    core = spec.n_layers * 2 * 2 * B * spec.n_heads * T * T * spec.head_dim
    for recompute, extra in (("full", forward - head), ("selective", core)):
        model.recompute = recompute
        torch.manual_seed(0)   # the same routing as the first run
        assert _measure(model, idx) == (forward, 2 * forward + extra), recompute


@pytest.mark.parametrize("name", ["gpt", "llama-gqa", "head-dim"])
def test_meta_device_counts_the_same_flops(name):
    """On meta SDPA takes the math path, so FlopCounterMode sees QKᵀ and A·V without any backend switch."""
    spec = SPECS[name]
    with torch.device("meta"):
        model = Transformer(spec)
    idx = torch.zeros(B, T, dtype=torch.long, device="meta")
    with FlopCounterMode(display=False) as forward:
        _, loss = model(idx, idx)
    with FlopCounterMode(display=False) as backward:
        loss.backward()
    assert forward.get_total_flops() == _predicted_forward_flops(spec)
    assert backward.get_total_flops() == 2 * forward.get_total_flops()
