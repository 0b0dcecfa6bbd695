"""Our Transformer against transformers' GPT-NeoX, Phi-3, Gemma 2, Gemma 3, Qwen3, MPT, Qwen2-MoE and Qwen3-MoE.

Each case builds the Hugging Face model from a tiny config, reads that config (its to_dict(), as transformers 5
writes config.json) with specs/hf_config.py, builds our Transformer from the spec, copies the weights across
and compares fp32 logits and the loss (atol 1e-5). Biases and norm weights are perturbed (HF initialises them
to 0/1, Gemma's norms to 0), so copying them is tested; the configs switch on every feature that changes the
forward pass: partial RoPE, parallel and sequential residuals, sliding windows shorter than the sequence,
soft-capping strong enough to bend the logits, QK-norm, ALiBi with a head count that is not a power of two,
clip_qkv, routing without renormalisation, a shared expert, dense layers between MoE layers.
"""

from __future__ import annotations

import pytest
import torch

from trainledger.models import Transformer
from trainledger.specs.hf_config import spec_from_config_dict

transformers = pytest.importorskip("transformers", reason="transformers is not installed; parameter counts are "
                                   "still checked against param_counts in tests/account/test_params.py")

VOCAB, CTX, SEQ = 97, 32, 24
LLAMA_LIKE = dict(vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=96, max_position_embeddings=CTX, rms_norm_eps=1e-6, tie_word_embeddings=False)

CASES = {
    # GPT-NeoX / Pythia: RoPE on 25% of each head (rotary_dim 4), parallel residual, biases, exact GELU
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", "neox", dict(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
        max_position_embeddings=CTX, rotary_pct=0.25, rotary_emb_base=10000, hidden_act="gelu")),
    "gpt_neox-sequential-tanh": ("GPTNeoXConfig", "GPTNeoXForCausalLM", "neox", dict(
        vocab_size=VOCAB, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=96,
        max_position_embeddings=CTX, rotary_pct=0.5, use_parallel_residual=False, hidden_act="gelu_new")),
    # Phi-3: fused qkv_proj / gate_up_proj, a window of 8 on every layer, partial RoPE
    "phi3": ("Phi3Config", "Phi3ForCausalLM", "llama", LLAMA_LIKE | dict(
        sliding_window=8, pad_token_id=0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})),
    # Gemma 2: (1+w) norms, sandwich norms, √d embeddings, GeGLU, d_head 24, query_pre_attn_scalar 20,
    # soft-capping 1.5 / 2.0 (strong), a window of 8 on layer 0
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", "llama", LLAMA_LIKE | dict(
        head_dim=24, query_pre_attn_scalar=20, attn_logit_softcapping=1.5, final_logit_softcapping=2.0,
        sliding_window=8, tie_word_embeddings=True)),
    # Gemma 3: + QK-norm, RoPE θ 10000 on window layers and 1e6 elsewhere; layers 0, 1 windowed, 2 global
    "gemma3_text": ("Gemma3TextConfig", "Gemma3ForCausalLM", "llama", LLAMA_LIKE | dict(
        num_hidden_layers=3, head_dim=24, sliding_window=8, sliding_window_pattern=3, tie_word_embeddings=True,
        final_logit_softcapping=3.0)),
    # Qwen3: QK-norm, d_head 24 != 64/4, every bias (attention_bias)
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", "llama", LLAMA_LIKE | dict(head_dim=24, attention_bias=True)),
    # MPT: ALiBi with 6 heads (slopes of 8 interleaved), clip_qkv, softmax_scale, tied head, exact GELU
    "mpt": ("MptConfig", "MptForCausalLM", "mpt", dict(
        vocab_size=VOCAB, d_model=48, n_heads=6, n_layers=2, max_seq_len=CTX,
        attn_config={"clip_qkv": 0.5, "softmax_scale": 0.3, "alibi_bias_max": 8})),
    # Qwen2-MoE: 4 experts, top-2 without renormalisation, a gated shared expert, layer 1 dense (mlp_only_layers)
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", "llama", LLAMA_LIKE | dict(
        num_hidden_layers=3, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=40,
        shared_expert_intermediate_size=56, mlp_only_layers=[1], norm_topk_prob=False)),
    # Qwen3-MoE: QK-norm, 4 experts, top-2 renormalised
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", "llama", LLAMA_LIKE | dict(
        head_dim=24, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=40, norm_topk_prob=True)),
}


# weights scaled up so that soft-capping bends scores and logits (at init scale tanh(s/c)·c ≈ s)
GAIN = {"gemma2": 5.0, "gemma3_text": 3.0}


def _hf_model(config_cls: str, model_cls: str, kwargs: dict, gain: float = 1.0):
    config = getattr(transformers, config_cls)(attn_implementation="eager", **kwargs)
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:                       # biases 0 and norm weights 1 (Gemma: 0) would hide a missed copy
                p.add_(0.1 * torch.randn_like(p))
            elif name.endswith("mlp.gate.weight"):
                p.normal_(0.0, 0.5)               # decisive routing (Qwen-MoE routers start at 0: all ties)
            elif p.ndim == 3:                     # expert tensors
                p.normal_(0.0, 0.05)
            else:
                p.mul_(gain)
    return model.eval(), config


@pytest.mark.parametrize("name", CASES)
def test_matches_transformers(name, hf_copy, one_torch_thread):
    config_cls, model_cls, copier, kwargs = CASES[name]
    hf, config = _hf_model(config_cls, model_cls, kwargs, GAIN.get(name, 1.0))
    spec = spec_from_config_dict(config.to_dict(), name=name)
    assert not spec.approximations, spec.approximations
    ours = Transformer(spec).eval()
    assert ours.n_params() == sum(p.numel() for p in hf.parameters())
    hf_copy[copier](ours, hf)
    torch.manual_seed(1)
    idx = torch.randint(0, VOCAB, (2, SEQ))
    with torch.no_grad():
        expected, got = hf(idx).logits, ours(idx)
        hf_loss = hf(idx, labels=idx).loss
        _, loss = ours(idx[:, :-1], idx[:, 1:])
    assert expected.std() > 1e-2
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    assert loss.item() == pytest.approx(hf_loss.item(), abs=1e-5)


def test_the_features_matter(hf_copy, one_torch_thread):
    """Each Gemma 2 feature switched on above changes the logits: the case could not pass by ignoring one."""
    config_cls, model_cls, _, kwargs = CASES["gemma2"]
    hf, config = _hf_model(config_cls, model_cls, kwargs, GAIN["gemma2"])
    spec = spec_from_config_dict(config.to_dict())
    base = Transformer(spec).eval()
    hf_copy["llama"](base, hf)
    idx = torch.randint(0, VOCAB, (1, SEQ))
    with torch.no_grad():
        reference = base(idx)
        for change in (dict(attn_softcap=None), dict(final_softcap=None), dict(sliding_window=None, sliding_layers=None),
                       dict(scale_embeddings=False), dict(attn_scale=None), dict(sandwich_norm=False)):
            other = Transformer(spec.with_(**change)).eval()
            other.load_state_dict(base.state_dict(), strict=False)
            assert not torch.allclose(other(idx), reference, atol=1e-4), change
