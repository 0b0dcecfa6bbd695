"""Our Transformer against Hugging Face's own implementations, weights copied across, tiny configs, fp32.

The reference is an independent implementation (STYLE.md): GPT2LMHeadModel (learned positions, LayerNorm,
gelu_new, biases, tied head), LlamaForCausalLM (RoPE, RMSNorm, SwiGLU, untied head, and GQA),
Qwen2ForCausalLM (q/k/v biases only) and MixtralForCausalLM (top-2 of 4 experts; routing must agree).
"""

from __future__ import annotations

import pytest
import torch

from trainledger.models import Transformer
from trainledger.specs.model import TransformerSpec

transformers = pytest.importorskip("transformers", reason="transformers is not installed; parameter counts "
                                   "are still checked against param_counts in test_transformer.py")

VOCAB, D, LAYERS, HEADS, FF, CTX = 97, 64, 2, 4, 96, 32


def _hf_model(cls_name, config):
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(config)
    with torch.no_grad():  # HF initialises biases to 0 and norm weights to 1: perturb them so copying them is tested
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(0.1 * torch.randn_like(p))
    model.eval()
    return model


def _compare(ours, hf, atol=1e-5):
    ours.eval()
    torch.manual_seed(1)
    idx = torch.randint(0, VOCAB, (2, 24))
    with torch.no_grad():
        expected = hf(idx).logits
        got = ours(idx)
    assert got.shape == expected.shape
    assert expected.std() > 100 * atol  # the tolerance is small against the logits' spread
    torch.testing.assert_close(got, expected, atol=atol, rtol=1e-4)
    # the loss against HF's own shifted-label loss: we take pre-shifted targets
    with torch.no_grad():
        hf_loss = hf(idx, labels=idx).loss
        _, loss = ours(idx[:, :-1], idx[:, 1:])
    assert loss.item() == pytest.approx(hf_loss.item(), abs=1e-5)


def _gpt2_spec():
    return TransformerSpec(name="tiny-gpt2", vocab_size=VOCAB, d_model=D, n_layers=LAYERS, n_heads=HEADS, d_ff=FF,
                           max_seq_len=CTX, position="learned", norm="layernorm", norm_bias=True, mlp="gelu",
                           qkv_bias=True, attn_out_bias=True, mlp_bias=True, tied_embeddings=True)


def test_matches_hf_gpt2(hf_copy):
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=D, n_layer=LAYERS, n_head=HEADS, n_inner=FF,
                                     n_positions=CTX, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     attn_implementation="eager")
    hf = _hf_model("GPT2LMHeadModel", config)
    ours = Transformer(_gpt2_spec())
    assert ours.n_params() == sum(p.numel() for p in hf.parameters())
    hf_copy["gpt2"](ours, hf)
    _compare(ours, hf)


def _llama_config(cls="LlamaConfig", **overrides):
    kwargs = dict(vocab_size=VOCAB, hidden_size=D, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                  num_key_value_heads=HEADS, intermediate_size=FF, max_position_embeddings=CTX, rms_norm_eps=1e-6,
                  rope_theta=500000.0, tie_word_embeddings=False, attn_implementation="eager")
    kwargs.update(overrides)
    return getattr(transformers, cls)(**kwargs)


def _llama_spec(**overrides):
    base = dict(name="tiny-llama", vocab_size=VOCAB, d_model=D, n_layers=LAYERS, n_heads=HEADS, d_ff=FF,
                max_seq_len=CTX, norm_eps=1e-6, rope_theta=500000.0)
    base.update(overrides)
    return TransformerSpec(**base)


@pytest.mark.parametrize("kv_heads", [HEADS, 2, 1], ids=["mha", "gqa-2", "mqa"])
def test_matches_hf_llama(kv_heads, hf_copy):
    hf = _hf_model("LlamaForCausalLM", _llama_config(num_key_value_heads=kv_heads))
    ours = Transformer(_llama_spec(n_kv_heads=kv_heads))
    assert ours.n_params() == sum(p.numel() for p in hf.parameters())
    hf_copy["llama"](ours, hf)
    _compare(ours, hf)


def test_matches_hf_llama_with_head_dim_and_biases(hf_copy):
    """d_head != d_model / n_heads (as GPT-3 13B, Gemma) plus attention and MLP biases (Llama's attention_bias, mlp_bias)."""
    hf = _hf_model("LlamaForCausalLM", _llama_config(head_dim=24, num_key_value_heads=2, attention_bias=True,
                                                     mlp_bias=True))
    ours = Transformer(_llama_spec(d_head=24, n_kv_heads=2, qkv_bias=True, attn_out_bias=True, mlp_bias=True))
    assert ours.n_params() == sum(p.numel() for p in hf.parameters())
    hf_copy["llama"](ours, hf)
    _compare(ours, hf)


def test_matches_hf_qwen2_tied(hf_copy):
    """Qwen2: biases on q, k, v only; GQA; tied embeddings (as Qwen2-0.5B)."""
    hf = _hf_model("Qwen2ForCausalLM", _llama_config("Qwen2Config", num_key_value_heads=2, tie_word_embeddings=True))
    ours = Transformer(_llama_spec(n_kv_heads=2, qkv_bias=True, tied_embeddings=True))
    assert ours.n_params() == sum(p.numel() for p in hf.parameters())
    hf_copy["llama"](ours, hf)
    _compare(ours, hf)


def test_matches_hf_mixtral(hf_copy):
    """Mixtral: 4 experts, top-2, softmax -> top-k -> renormalise; our per-expert loop must route identically."""
    hf = _hf_model("MixtralForCausalLM", _llama_config("MixtralConfig", num_key_value_heads=2, num_local_experts=4,
                                                       num_experts_per_tok=2, router_jitter_noise=0.0))
    ours = Transformer(_llama_spec(n_kv_heads=2, n_experts=4, experts_per_token=2))
    assert ours.n_params() == sum(p.numel() for p in hf.parameters())
    hf_copy["llama"](ours, hf)
    _compare(ours, hf)
