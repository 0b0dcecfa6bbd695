"""What autograd saves for backward, measured, against the per-layer list written in docs/models.md.

Measured with torch.autograd.graph.saved_tensors_hooks: every tensor autograd packs, counted once per
storage, parameters excluded. CPU kernels (the flash SDPA kernel saves q, k, v, out and a fp32 logsumexp;
LayerNorm saves its mean/rstd in the input dtype on CPU).
"""

from __future__ import annotations

import pytest
import torch

from trainledger.models import Transformer
from trainledger.specs import PRESETS
from trainledger.specs.model import TransformerSpec

B, T = 2, 16


def measured_saved_bytes(model, idx, targets) -> int:
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    storages = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            storages[ptr] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _, loss = model(idx, targets)
    del loss
    return sum(storages.values())


def predicted_saved_bytes(spec: TransformerSpec, e: int, recompute: str = "none") -> int:
    """docs/models.md, "Saved for backward", for B×T tokens, activations of e bytes, CPU kernels."""
    n, d, f, dh, v = B * T, spec.d_model, spec.d_ff, spec.head_dim, spec.vocab_size
    q, kv = spec.n_heads * dh, spec.kv_heads * dh
    if spec.norm == "layernorm":
        norm = n * d * e + 2 * n * e                   # input, mean, rstd
    else:
        norm = n * d * 4 + n * 4 + n * d * e           # fp32 input, fp32 rsqrt, normalised (input dtype)
    lse = 4 * B * spec.n_heads * T
    attention = n * d * e + (2 * q + 2 * kv) * n * e + lse   # q/k/v input; SDPA q, k, v, out; logsumexp
    if recompute == "selective":
        attention -= lse
    mlp = n * d * e + (4 if spec.mlp == "swiglu" else 2) * n * f * e
    if spec.is_moe:   # linear in the tokens each expert gets, and those sum to n·k: independent of the routing
        k, experts = spec.experts_per_token, spec.n_experts
        router = n * d * e + n * experts * 4 + n * k * (8 + 4) + n * 4
        routed = n * k * (2 * d * e + (4 if spec.mlp == "swiglu" else 2) * f * e + e + 8 + 8)
        mlp = router + routed
    layer = 2 * norm + attention + mlp
    if recompute == "full":
        layer = n * d * e                              # the block input only
    rope = 2 * T * dh * e if spec.position == "rope" else 0
    positions = T * 8 if spec.position == "learned" else 0
    head = norm + n * d * e + n * v * 4 + 4            # final norm, LM-head input, fp32 log-softmax, total_weight
    indices = 2 * n * 8                                # token ids (embedding) and targets (loss), int64
    return spec.n_layers * layer + rope + positions + head + indices


SPECS = {
    "gpt": PRESETS["tiny"].with_(n_layers=2, vocab_size=100, max_seq_len=T),
    "llama-gqa": TransformerSpec(name="t", vocab_size=100, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96,
                                 max_seq_len=T),
    "moe": TransformerSpec(name="t", vocab_size=100, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96,
                           max_seq_len=T, n_experts=4, experts_per_token=2),
}


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", SPECS)
def test_saved_bytes_match_the_documented_list(name, dtype, recompute):
    spec = SPECS[name]
    torch.manual_seed(0)
    model = Transformer(spec, dtype=dtype, recompute=recompute)
    idx, targets = torch.randint(0, spec.vocab_size, (2, B, T))
    e = torch.finfo(dtype).bits // 8
    assert measured_saved_bytes(model, idx, targets) == predicted_saved_bytes(spec, e, recompute)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_every_family_saves_what_account_predicts(family_spec, dtype, one_torch_thread):
    """Issue 13's families, measured a second way (saved_tensors_hooks instead of the live-storage tracker):
    what autograd packs equals account/memory/activations.py's prediction plus the token ids and targets."""
    from trainledger.account.memory.activations import ActivationShard, activations_bytes

    torch.manual_seed(0)
    model = Transformer(family_spec, dtype=dtype)
    idx, targets = torch.randint(0, family_spec.vocab_size, (2, B, T))
    shard = ActivationShard(B, T, precision="fp32" if dtype == torch.float32 else "bf16")
    predicted = activations_bytes(family_spec, shard)["total"]
    assert measured_saved_bytes(model, idx, targets) == predicted + 2 * B * T * 8
