"""Transformer: parameter counts against account/params (meta device), training behaviour, recompute, dtype."""

from __future__ import annotations

import math
import time

import pytest
import torch

from trainledger.account.counting.params import param_counts
from trainledger.errors import TrainledgerError
from trainledger.models import Transformer, build_model
from trainledger.optim import AdamW
from trainledger.specs import PRESETS
from trainledger.specs.model import TransformerSpec

TRANSFORMER_PRESETS = {name: spec for name, spec in PRESETS.items() if spec.kind == "transformer"}

# facts.md: config.json of meta-llama/Llama-2-70b-hf built on the meta device; 68,976,648,192 parameters
LLAMA_2_70B = TransformerSpec(name="llama-2-70b", vocab_size=32000, d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8,
                              d_ff=28672, max_seq_len=4096, published_n_params=68_976_648_192)


def _meta(spec, **kwargs) -> Transformer:
    with torch.device("meta"):
        return Transformer(spec, **kwargs)


@pytest.mark.parametrize("spec", TRANSFORMER_PRESETS.values(), ids=TRANSFORMER_PRESETS.keys())
def test_params_match_account_for_every_preset(spec):
    model = _meta(spec)
    counts = param_counts(spec)
    assert model.n_params() == counts["n_params"]
    assert model.n_params(non_embedding=True) == counts["n_params_non_embedding"]
    if spec.published_n_params is not None:
        assert model.n_params() == spec.published_n_params


def test_meta_build_of_llama_2_70b_is_fast():
    spec = PRESETS.get("llama-2-70b", LLAMA_2_70B)
    start = time.perf_counter()
    model = Transformer(spec, device="meta")   # ~0.5 s; allocating 276 GB for real would never finish
    elapsed_s = time.perf_counter() - start
    assert model.n_params() == 68_976_648_192  # facts.md, Hugging Face meta-device count
    assert all(p.is_meta for p in model.parameters())
    assert elapsed_s < 5.0


def test_tied_head_is_the_embedding_and_counted_once():
    model = Transformer(PRESETS["tiny"])
    assert model.lm_head is None and model.output_weight() is model.tok_embeddings.weight
    assert model.n_params() == param_counts(PRESETS["tiny"])["n_params"]


def _tiny_llama(**overrides) -> TransformerSpec:
    base = dict(name="t", vocab_size=64, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, max_seq_len=16)
    base.update(overrides)
    return TransformerSpec(**base)


def test_moe_params_and_forward_shape():
    spec = _tiny_llama(n_experts=4, experts_per_token=2)
    model = Transformer(spec)
    assert model.n_params() == param_counts(spec)["n_params"]
    logits = model(torch.randint(0, 64, (2, 8)))
    assert logits.shape == (2, 8, 64)


SMALL_GPT = PRESETS["tiny"].with_(n_layers=2, d_model=64, d_ff=128, vocab_size=64)


@pytest.mark.parametrize("spec", [SMALL_GPT, _tiny_llama(), _tiny_llama(n_experts=4, experts_per_token=2)],
                         ids=["gpt", "llama-gqa", "moe"])
def test_loss_decreases_when_overfitting_one_batch(spec):
    torch.manual_seed(0)
    model = Transformer(spec)
    idx = torch.randint(0, spec.vocab_size, (2, 16))
    optimizer = AdamW(model.parameters(), lr=3e-3)  # ours: the whole from-scratch stack learns
    losses = []
    for _ in range(25):
        _, loss = model(idx[:, :-1], idx[:, 1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(math.log(spec.vocab_size), rel=0.1)  # near-uniform logits at init
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize("spec", [SMALL_GPT, _tiny_llama(), _tiny_llama(n_experts=4, experts_per_token=2)],
                         ids=["gpt", "llama-gqa", "moe"])
def test_recompute_modes_give_identical_gradients(spec):
    torch.manual_seed(0)
    model = Transformer(spec)
    idx = torch.randint(0, spec.vocab_size, (2, 12))
    grads = {}
    for mode in ("none", "selective", "full"):
        model.recompute = mode
        model.zero_grad()
        _, loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        grads[mode] = [p.grad.clone() for p in model.parameters()]
    for mode in ("selective", "full"):
        for a, b in zip(grads["none"], grads[mode]):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_recompute_saves_fewer_tensors():
    """Measured with saved_tensors_hooks: full < selective < none bytes kept for backward."""
    spec = _tiny_llama(n_layers=3)
    model = Transformer(spec)
    idx = torch.randint(0, spec.vocab_size, (2, 16))

    def saved_bytes(mode):
        model.recompute = mode
        seen = {}

        def pack(t):
            seen[(t.untyped_storage().data_ptr(), t.dtype)] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(idx[:, :-1], idx[:, 1:])
        return sum(seen.values())
    none, selective, full = saved_bytes("none"), saved_bytes("selective"), saved_bytes("full")
    assert full < selective < none


def test_recompute_rejects_unknown_mode():
    with pytest.raises(TrainledgerError, match="recompute"):
        Transformer(_tiny_llama(), recompute="some")


def test_dtype_argument_and_bf16_forward():
    model = Transformer(_tiny_llama(), dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    logits, loss = model(torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (2, 8)))
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32


def test_init_statistics():
    """GPT-2 init: N(0, 0.02²) weights, residual projections 0.02/√(2L), norms 1, biases 0."""
    torch.manual_seed(0)
    spec = _tiny_llama(d_model=256, d_ff=512, n_heads=8, n_kv_heads=8, n_layers=8, qkv_bias=True)
    model = Transformer(spec)
    block = model.blocks[0]
    assert block.attn.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert block.attn.o_proj.weight.std().item() == pytest.approx(0.02 / 4, rel=0.05)
    assert block.mlp.down.weight.std().item() == pytest.approx(0.02 / 4, rel=0.05)
    assert torch.all(block.attn.q_proj.bias == 0) and torch.all(block.norm1.weight == 1)


def test_meta_model_materialises_with_to_empty():
    spec = _tiny_llama()
    model = _meta(spec)
    model.to_empty(device="cpu")
    model.reset_parameters()
    assert torch.isfinite(model(torch.randint(0, 64, (1, 8)))).all()


def test_learned_positions_reject_too_long_sequences():
    model = Transformer(PRESETS["tiny"].with_(n_layers=1, max_seq_len=8))
    with pytest.raises(TrainledgerError, match="max_seq_len"):
        model(torch.zeros(1, 9, dtype=torch.long))


def test_build_model_dispatches_on_kind():
    assert build_model(PRESETS["cruncher"]).n_params() == 8256
    assert isinstance(build_model(_tiny_llama()), Transformer)
    with pytest.raises(TrainledgerError):
        Transformer(PRESETS["cruncher"])


def test_moe_forward_and_backward_run_on_meta():
    """No data to route by: the N·k slots go to the experts in turn (balanced); every expert gets a gradient."""
    model = _meta(_tiny_llama(n_experts=4, experts_per_token=2))
    idx = torch.zeros(1, 8, dtype=torch.long, device="meta")
    logits, loss = model(idx, idx)
    loss.backward()
    assert logits.shape == (1, 8, 64)
    assert all(expert.down.weight.grad is not None for expert in model.blocks[0].mlp.experts)


def test_dense_forward_and_backward_run_on_meta():
    model = _meta(_tiny_llama())
    idx = torch.zeros(2, 8, dtype=torch.long, device="meta")
    logits, loss = model(idx, idx)
    loss.backward()
    assert logits.shape == (2, 8, 64) and model.blocks[0].mlp.down.weight.grad.is_meta
