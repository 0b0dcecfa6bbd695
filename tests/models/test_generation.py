"""Generation with a KV cache: the same greedy tokens and logits as the uncached model, the cache's bytes equal to
account/time/inference.py's formula, sampling's filters, and the operator counts account/time/inference_ops.py predicts."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainledger.account.time.inference import kv_cache_bytes
from trainledger.account.time.inference_ops import decode_step_ops, forward_ops
from trainledger.errors import TrainledgerError
from trainledger.models import Transformer
from trainledger.models.generation import generate
from trainledger.models.kv_cache import KVCache
from trainledger.models.sampling import next_token
from trainledger.specs import get_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SMALL = dict(vocab_size=97, d_model=64, n_layers=2, n_heads=4, d_ff=96, max_seq_len=96)
GPT2_LIKE = get_model("tiny").with_(**SMALL)
LLAMA_LIKE = get_model("llama-3-8b").with_(**SMALL, n_kv_heads=2)     # RoPE, RMSNorm, SwiGLU, GQA 4:2
MISTRAL_LIKE = LLAMA_LIKE.with_(sliding_window=8)                       # a window shorter than the sequences
MQA_LIKE = LLAMA_LIKE.with_(n_kv_heads=1)


def model_of(spec, seed: int = 0, scale: float = 6.0) -> Transformer:
    """A random model whose weights are scaled up, so its logits are far apart and greedy ties cannot happen."""
    torch.manual_seed(seed)
    model = Transformer(spec).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim > 1:
                p.mul_(scale)
    return model


@pytest.mark.parametrize("spec", [GPT2_LIKE, LLAMA_LIKE, MISTRAL_LIKE, MQA_LIKE], ids=["gpt2", "llama", "mistral", "mqa"])
def test_greedy_with_and_without_the_cache_gives_the_same_tokens(spec):
    model = model_of(spec)
    prompt = torch.randint(0, spec.vocab_size, (2, 13), generator=torch.Generator().manual_seed(1))
    cached = generate(model, prompt, 40, use_cache=True)
    uncached = generate(model, prompt, 40, use_cache=False)
    assert cached.tokens == uncached.tokens
    assert len(set(cached.tokens[0])) > 1          # not one token repeated: the comparison can fail


def test_greedy_tokens_agree_for_every_family(family_spec):
    """Every architecture family (QK-norm, partial RoPE, ALiBi, soft-capping, sandwich norms, MoE, windows)."""
    model = model_of(family_spec, scale=4.0)
    prompt = torch.randint(0, family_spec.vocab_size, (1, 11), generator=torch.Generator().manual_seed(2))
    assert generate(model, prompt, 24).tokens == generate(model, prompt, 24, use_cache=False).tokens


@pytest.mark.parametrize("spec", [GPT2_LIKE, MISTRAL_LIKE], ids=["gpt2", "mistral"])
def test_cached_logits_equal_the_full_forward_at_every_step(spec):
    model = model_of(spec, scale=1.0)
    seq = torch.randint(0, spec.vocab_size, (2, 30), generator=torch.Generator().manual_seed(3))
    cache = KVCache(spec, 2, 30)
    with torch.no_grad():
        full = model(seq)
        got = [model.forward_cached(seq[:, :10], cache, last_only=False)]
        got += [model.forward_cached(seq[:, t:t + 1], cache) for t in range(10, 30)]
    torch.testing.assert_close(torch.cat(got, dim=1), full, atol=1e-5, rtol=1e-5)


def test_a_chunk_longer_than_the_window_after_the_prompt():
    """Several new tokens at once past a wrapped ring buffer: attend to the old slots and the chunk, then store."""
    model = model_of(MISTRAL_LIKE, scale=1.0)
    seq = torch.randint(0, 97, (1, 40), generator=torch.Generator().manual_seed(4))
    cache = KVCache(MISTRAL_LIKE, 1, 40)
    with torch.no_grad():
        full = model(seq)
        got = [model.forward_cached(seq[:, :12], cache, last_only=False),
               model.forward_cached(seq[:, 12:25], cache, last_only=False),   # 13 > window 8
               model.forward_cached(seq[:, 25:27], cache, last_only=False),
               model.forward_cached(seq[:, 27:40], cache, last_only=False)]
    torch.testing.assert_close(torch.cat(got, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("spec", [GPT2_LIKE, LLAMA_LIKE, MISTRAL_LIKE, MQA_LIKE, get_model("gemma-2-2b").with_(
    vocab_size=97, d_model=64, n_layers=4, n_heads=4, n_kv_heads=2, d_head=24, d_ff=96, max_seq_len=64, sliding_window=8,
    sliding_layers=(0, 2))], ids=["gpt2", "llama", "mistral", "mqa", "gemma2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_kv_cache_bytes_predicted_equal_measured_exactly(spec, dtype):
    batch, prompt, new = 3, 17, 9
    model = Transformer(spec, dtype=dtype)
    result = generate(model, torch.zeros(batch, prompt, dtype=torch.long), new)
    element = torch.tensor([], dtype=dtype).element_size()
    assert result.kv_cache_bytes == kv_cache_bytes(spec, batch, prompt + new, element)
    assert result.kv_cache_bytes > 0


def test_kv_cache_holds_kv_heads_and_window_slots():
    cache = KVCache(MISTRAL_LIKE, 2, 50)
    assert tuple(cache.layers[0].keys.shape) == (2, 2, 8, 16)          # kv heads 2, window 8, head_dim 16
    assert tuple(KVCache(MQA_LIKE, 1, 50).layers[0].values.shape) == (1, 1, 50, 16)


def test_the_cache_refuses_to_overflow():
    model = model_of(LLAMA_LIKE, scale=1.0)
    cache = KVCache(LLAMA_LIKE, 1, 4)
    with torch.no_grad():
        model.forward_cached(torch.zeros(1, 4, dtype=torch.long), cache)
        with pytest.raises(TrainledgerError, match="holds 4 positions"):
            model.forward_cached(torch.zeros(1, 1, dtype=torch.long), cache)


def test_bad_lengths_and_ids_are_one_line_errors():
    model = model_of(GPT2_LIKE, scale=1.0)
    with pytest.raises(TrainledgerError, match="empty"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 4)
    with pytest.raises(TrainledgerError, match="prompt is 96 tokens.*context of 96"):
        generate(model, torch.zeros(1, 96, dtype=torch.long), 1)
    with pytest.raises(TrainledgerError, match="--max-new-tokens 10.*at most 6"):
        generate(model, torch.zeros(1, 90, dtype=torch.long), 10)
    with pytest.raises(TrainledgerError, match="token ids must lie in"):
        generate(model, torch.full((1, 3), 97), 2)


# ----- sampling ----------------------------------------------------------------------------------------------
def test_greedy_is_argmax_and_sampling_is_seeded():
    logits = torch.tensor([[0.0, 3.0, 1.0, 2.0]])
    assert next_token(logits, 0.0).tolist() == [1]
    draws = [next_token(logits, 1.0, generator=torch.Generator().manual_seed(7)).item() for _ in range(2)]
    assert draws[0] == draws[1]


def test_top_k_and_top_p_keep_only_the_most_likely_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    g = torch.Generator().manual_seed(0)
    top2 = {next_token(logits, 1.0, top_k=2, generator=g).item() for _ in range(300)}
    assert top2 == {0, 1}
    # nucleus 0.7: 0.5 alone is below it, 0.5 + 0.3 reaches it -> tokens 0 and 1
    nucleus = {next_token(logits, 1.0, top_p=0.7, generator=g).item() for _ in range(300)}
    assert nucleus == {0, 1}
    assert {next_token(logits, 1.0, top_p=0.4, generator=g).item() for _ in range(50)} == {0}
    assert len({next_token(logits, 1.0, generator=g).item() for _ in range(400)}) == 4


@pytest.mark.parametrize("kwargs, flag", [({"temperature": -1.0}, "--temperature"), ({"temperature": float("nan")},
                         "--temperature"), ({"top_k": 0}, "--top-k"), ({"top_p": 0.0}, "--top-p"), ({"top_p": 1.5}, "--top-p")])
def test_bad_sampling_values_name_their_flag(kwargs, flag):
    with pytest.raises(TrainledgerError, match=flag):
        next_token(torch.zeros(1, 4), **{"temperature": 1.0, **kwargs})


# ----- operator counts (account/time/inference_ops.py) against what the dispatcher sees ------------------------------
class _Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        return func(*args, **(kwargs or {}))


def _dispatched(spec, new: int, start: int) -> int:
    model = Transformer(spec).eval()
    cache = KVCache(spec, 1, 64)
    ids = torch.randint(0, spec.vocab_size, (1, start + new), generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():      # distinct tokens: an MoE layer routes them to every expert
        if start:
            model.forward_cached(ids[:, :start], cache)
        tokens = ids[:, start:]
        counter = _Count()
        with counter:
            model.forward_cached(tokens, cache)
    return counter.ops


@pytest.mark.parametrize("spec", [GPT2_LIKE, LLAMA_LIKE, MISTRAL_LIKE], ids=["gpt2", "llama", "mistral"])
def test_decode_operator_count_is_exact(spec):
    assert forward_ops(spec, decoding=True) == _dispatched(spec, 1, 12)


def test_decode_operator_count_of_every_family(family_spec):
    assert forward_ops(family_spec, decoding=True) == _dispatched(family_spec, 1, 12)


def test_prefill_operator_count_is_close(family_spec):
    assert forward_ops(family_spec, decoding=False, new_tokens=12) == pytest.approx(_dispatched(family_spec, 12, 0), rel=0.05)


def test_a_decoding_step_adds_the_loop_and_the_sampling():
    assert decode_step_ops(GPT2_LIKE, greedy=False) > decode_step_ops(GPT2_LIKE) > forward_ops(GPT2_LIKE, True)


# Issue 31, item 9: `generate --temperature 1e-40` and `--top-p 1e-100` exited 1 (inf/inf and a float32 top-p of
# 0 made every probability NaN). Reference: argmax, the limit of both as they go to 0.
@pytest.mark.parametrize("temperature, top_p", [(1e-40, None), (1e-300, None), (5e-324, None), (1.0, 1e-100),
                                                (1e-40, 1e-100)])
def test_extreme_temperature_and_top_p_pick_the_most_likely_token(temperature, top_p):
    from trainledger.models.sampling import next_token
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0)) * 30
    chosen = next_token(logits, temperature=temperature, top_p=top_p, generator=torch.Generator().manual_seed(1))
    assert torch.equal(chosen, logits.argmax(dim=-1))
