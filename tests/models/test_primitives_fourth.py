"""Issue 40, item 7 (models): the primitives as others define them.

- Embedding, SiLU and softmax of our own, against torch's (values and gradients);
- `Attention.core(q, k, v, mask=None)` means no mask, as None means in torch's SDPA; the layers pass causal
  explicitly, so the model computes what it did (the HF parity tests compare it with transformers);
- RoPE in both layouts: "interleaved" against Meta's complex-number formulation, explicit token positions, and
  the weight permutation between layouts (the same logits; an interleaved model exported to transformers' Llama);
- attention sinks over a KV cache: a decoding query saw only the first cached key (the sinks core made a causal
  mask for one query); the cached logits now equal the uncached forward's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainledger.models import Embedding, Transformer, silu, softmax
from trainledger.models.attention import Attention
from trainledger.models.rope import apply_rope, convert_layout, layout_permutation, rope_cos_sin
from trainledger.specs import get_model
from trainledger.specs.model import TransformerSpec

LLAMA = TransformerSpec(name="t", vocab_size=97, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=96,
                        max_seq_len=64, norm_eps=1e-5, rope_theta=10000.0)


def test_embedding_is_torchs():
    torch.manual_seed(0)
    ours, theirs = Embedding(50, 8), torch.nn.Embedding(50, 8)
    with torch.no_grad():
        theirs.weight.copy_(ours.weight)
    ids = torch.randint(0, 50, (3, 7))
    torch.testing.assert_close(ours(ids), theirs(ids), rtol=0, atol=0)
    ours(ids).square().sum().backward()
    theirs(ids).square().sum().backward()
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad)
    assert ours.weight.std().item() == pytest.approx(1.0, abs=0.1)     # N(0, 1), as torch's


def test_silu_is_torchs():
    x = torch.linspace(-30, 30, 1001, dtype=torch.float64, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    torch.testing.assert_close(silu(x), F.silu(y))
    silu(x).sum().backward()
    F.silu(y).sum().backward()
    torch.testing.assert_close(x.grad, y.grad)


@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_softmax_is_torchs(dim):
    torch.manual_seed(1)
    x = torch.randn(4, 6, 5, dtype=torch.float64) * 30
    torch.testing.assert_close(softmax(x, dim), torch.softmax(x, dim))
    big = torch.tensor([[1000.0, 1000.0, -1000.0], [0.0, float("-inf"), 1.0]])
    torch.testing.assert_close(softmax(big), torch.softmax(big, -1))      # no overflow, -inf is probability 0
    assert torch.isfinite(softmax(big)).all()


def test_attention_core_without_a_mask_is_unmasked_and_causal_only_when_asked():
    attn = Attention(LLAMA)
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 4, 5, 16), torch.randn(2, 2, 5, 16), torch.randn(2, 2, 5, 16)
    plain = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    causal = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(attn.core(q, k, v), plain)
    torch.testing.assert_close(attn.core(q, k, v, None), plain)
    torch.testing.assert_close(attn.core(q, k, v, causal=True), causal)
    assert not torch.allclose(plain, causal)


def test_the_layers_still_attend_causally():
    """A token's output does not depend on later tokens (the model passes causal=True with no mask)."""
    torch.manual_seed(3)
    model = Transformer(LLAMA).eval()
    idx = torch.randint(0, 97, (1, 10))
    changed = idx.clone()
    changed[0, 6:] = (changed[0, 6:] + 1) % 97
    with torch.no_grad():
        torch.testing.assert_close(model(idx)[:, :6], model(changed)[:, :6])
        assert not torch.allclose(model(idx)[:, 6:], model(changed)[:, 6:])


def _meta_rope(x: torch.Tensor, theta: float, positions: torch.Tensor) -> torch.Tensor:
    """Meta's Llama formulation: adjacent dims as complex numbers, times e^(i·t·θ^(-2j/d))."""
    d = x.shape[-1]
    freqs = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = positions.to(torch.float64)[..., None] * freqs
    rotation = torch.polar(torch.ones_like(angles), angles)
    pairs = torch.view_as_complex(x.to(torch.float64).reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(pairs * rotation).flatten(-2).to(x.dtype)


def test_interleaved_rope_is_metas_and_takes_explicit_positions():
    torch.manual_seed(4)
    x = torch.randn(3, 9, 16, dtype=torch.float64)                    # (batch, seq, d_k), as CS336's run_rope
    positions = torch.randint(0, 50, (3, 9))
    cos, sin = rope_cos_sin(64, 16, 10000.0, layout="interleaved", dtype=torch.float64)
    torch.testing.assert_close(apply_rope(x, cos, sin, "interleaved", positions=positions),
                               _meta_rope(x, 10000.0, positions), atol=1e-5, rtol=1e-5)   # our angles are fp32
    # positions 0..T-1 are the tables' first rows; the half layout is the same rotation of permuted dims
    half_cos, half_sin = rope_cos_sin(9, 16, 10000.0, dtype=torch.float64)
    perm = layout_permutation(16, 16, "half", "interleaved")
    in_half = x[..., torch.argsort(perm)]
    torch.testing.assert_close(apply_rope(in_half, half_cos, half_sin)[..., perm],
                               apply_rope(x, cos[:9], sin[:9], "interleaved"))
    torch.testing.assert_close(apply_rope(x, cos, sin, "interleaved", positions=torch.arange(9)),
                               apply_rope(x, cos[:9], sin[:9], "interleaved"))


def test_permuted_weights_give_the_same_logits_in_either_layout():
    from trainledger.models.hf_weights import to_layout
    interleaved = LLAMA.with_(rope_layout="interleaved")
    torch.manual_seed(5)
    ours = Transformer(interleaved).eval()
    half = Transformer(LLAMA).eval()
    half.load_state_dict(to_layout(interleaved, ours.state_dict(), "interleaved", "half"))
    idx = torch.randint(0, 97, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(half(idx), ours(idx), atol=1e-5, rtol=1e-5)
        unconverted = Transformer(LLAMA).eval()
        unconverted.load_state_dict(ours.state_dict())                # the silent error of loading as it is
        assert not torch.allclose(unconverted(idx), ours(idx), atol=1e-3)
    back = to_layout(interleaved, to_layout(interleaved, ours.state_dict(), "interleaved", "half"), "half", "interleaved")
    assert all(torch.equal(back[name], tensor) for name, tensor in ours.state_dict().items())


def test_an_interleaved_model_exports_to_transformers_llama(tmp_path):
    transformers = pytest.importorskip("transformers")
    from trainledger.models.hf_weights import hf_config, to_hf
    spec = LLAMA.with_(rope_layout="interleaved")
    torch.manual_seed(6)
    ours = Transformer(spec).eval()
    config = transformers.LlamaConfig(**{k: v for k, v in hf_config(spec, torch.float32).items()
                                         if k not in ("architectures", "model_type", "dtype")})
    theirs = transformers.LlamaForCausalLM(config).eval()
    theirs.load_state_dict(to_hf(spec, ours.state_dict()), strict=False)
    idx = torch.randint(0, 97, (1, 12))
    with torch.no_grad():
        torch.testing.assert_close(theirs(idx).logits, ours(idx), atol=1e-4, rtol=1e-4)


def test_convert_layout_moves_rows_per_head():
    rows = torch.arange(2 * 8).float()[:, None]                      # 2 heads of 8 dims
    moved = convert_layout(rows, 2, 8, 8, "half", "interleaved")
    assert moved[:8, 0].tolist() == [0, 4, 1, 5, 2, 6, 3, 7] and moved[8:, 0].tolist() == [8, 12, 9, 13, 10, 14, 11, 15]
    partial = convert_layout(rows[:8], 1, 8, 4, "half", "interleaved")
    assert partial[:, 0].tolist() == [0, 2, 1, 3, 4, 5, 6, 7]          # dims past rotary_dim stay


def test_configs_name_their_layout():
    from trainledger.specs.hf_config import spec_from_config_dict
    base = {"model_type": "llama", "vocab_size": 97, "hidden_size": 64, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 96, "max_position_embeddings": 64}
    assert spec_from_config_dict(base).rope_layout == "half"
    assert spec_from_config_dict({**base, "rope_layout": "interleaved"}).rope_layout == "interleaved"
    assert get_model("deepseek-v3").rope_layout == "interleaved"        # DeepseekV3Config rope_interleave: true


def test_attention_sinks_decode_over_a_cache_as_the_full_forward():
    from trainledger.models.kv_cache import KVCache
    spec = get_model("gpt-oss-120b").with_(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, d_head=16, d_ff=32,
                                           n_experts=4, experts_per_token=2, vocab_size=97, max_seq_len=64,
                                           sliding_window=None, sliding_layers=None)
    torch.manual_seed(7)
    model = Transformer(spec).eval()
    with torch.no_grad():
        for block in model.blocks:
            torch.nn.init.normal_(block.attn.sinks)
        idx = torch.randint(0, 97, (1, 12))
        full = model(idx)[:, -1]
        cache = KVCache(spec, 1, 64)
        model.forward_cached(idx[:, :11], cache)
        torch.testing.assert_close(model.forward_cached(idx[:, 11:], cache)[:, -1], full, atol=1e-5, rtol=1e-5)
