"""Multi-head latent attention and attention sinks in torch: numel and FLOPs equal the count; sinks at -inf are SDPA."""

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from trainledger.account.counting.flops import flops_per_step
from trainledger.account.counting.params import param_counts
from trainledger.models import Transformer
from trainledger.models.mla import sink_core
from trainledger.specs import get_model

TINY_DEEPSEEK = get_model("deepseek-v3").with_(
    vocab_size=64, d_model=32, n_layers=3, n_heads=2, n_kv_heads=2, d_head=24, qk_rope_head_dim=8, v_head_dim=16,
    kv_lora_rank=12, q_lora_rank=10, n_experts=4, experts_per_token=2, d_ff=16, shared_expert_d_ff=16,
    dense_layers=(0,), dense_d_ff=48, max_seq_len=32, expert_groups=0, expert_groups_per_token=0)
TINY_OSS = get_model("gpt-oss-120b").with_(
    vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_head=8, d_ff=16, n_experts=4,
    experts_per_token=2, sliding_window=4, sliding_layers=(0,), max_seq_len=32)


def test_sinks_at_minus_infinity_are_plain_attention():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 2, 6, 8), torch.randn(2, 2, 6, 8)
    out = sink_core(q, k, v, torch.full((4,), float("-inf")), None, None)
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(out, expected)
    sunk = sink_core(q, k, v, torch.full((4,), 30.0), None, None)   # a huge sink takes all the mass
    assert sunk.abs().max() < 1e-6


def test_tiny_models_count_and_train():
    for spec in (TINY_DEEPSEEK, TINY_OSS):
        torch.manual_seed(0)
        model = Transformer(spec)
        assert model.n_params() == param_counts(spec)["n_params"]
        idx = torch.randint(0, 64, (2, 16))
        _, loss = model(idx, idx)
        loss.backward()
        assert torch.isfinite(loss) and all(p.grad is not None for p in model.parameters())


def test_mla_forward_flops_equal_the_count():
    """FlopCounterMode on MLA (no MoE in the way: a dense copy) equals forward_flops_per_step with full attention."""
    spec = TINY_DEEPSEEK.with_(n_experts=1, experts_per_token=1, shared_expert_d_ff=None, dense_layers=(),
                               dense_d_ff=None)
    model = Transformer(spec)
    idx = torch.randint(0, 64, (2, 16))
    with FlopCounterMode(display=False) as counter:
        model(idx)
    assert counter.get_total_flops() == flops_per_step(spec, 2, 16)["forward_flops_per_step"]


def test_mla_generates_the_same_tokens_with_and_without_its_kv_cache():
    """The cache holds MLA's full per-head keys (qk head 24) and values (v head 16); greedy decoding with it equals the
    uncached forward, and its bytes are what account.time.inference.kv_cache_bytes predicts."""
    from trainledger.account.time.inference import kv_cache_bytes
    from trainledger.models.generation import generate
    spec = TINY_DEEPSEEK
    torch.manual_seed(0)
    model = Transformer(spec)
    prompt = torch.randint(0, spec.vocab_size, (2, 7), generator=torch.Generator().manual_seed(1))
    cached = generate(model, prompt, 12, use_cache=True)
    uncached = generate(model, prompt, 12, use_cache=False)
    assert cached.tokens == uncached.tokens and len(set(cached.tokens[0])) > 1
    assert cached.kv_cache_bytes == kv_cache_bytes(spec, 2, 7 + 12, 4)
    assert cached.kv_cache_bytes == 3 * 2 * 2 * (7 + 12) * (24 + 16) * 4     # layers · batch · heads · positions
