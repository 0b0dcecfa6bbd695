"""Parameter counts: every preset against a Hugging Face model built on the meta device, published counts,
the lecture's Cruncher, and the non-embedding / active conventions of DESIGN.md."""

import dataclasses
import subprocess
import sys

import pytest

from trainledger.account.counting.params import kaplan_non_embedding_params, n_params, param_counts
from trainledger.specs import PRESETS, get_model
from trainledger.specs.model import CruncherSpec, TransformerSpec

TRANSFORMERS = [spec for spec in PRESETS.values() if isinstance(spec, TransformerSpec)]
PUBLISHED = [spec for spec in PRESETS.values() if spec.published_n_params is not None]


def hf_config_for(spec: TransformerSpec):
    """The transformers config equivalent to `spec`, or None when no Hugging Face architecture expresses it
    (GPT-2 ties head size to n_embd / n_head, so GPT-3 13B, whose heads × d_head != d_model, has none).
    The family is recognised by its distinctive fields (ALiBi: MPT; LayerNorm with RoPE: GPT-NeoX; Gemma's norm;
    QK-norm: Qwen3; a shared expert: Qwen2-MoE; a phi name: Phi-3)."""
    import transformers

    if spec.position == "learned":
        if spec.head_dim * spec.n_heads != spec.d_model or spec.is_moe:   # GPT-2 has no experts (tiny-moe)
            return None
        return transformers.GPT2Config(
            vocab_size=spec.vocab_size, n_embd=spec.d_model, n_layer=spec.n_layers, n_head=spec.n_heads,
            n_inner=spec.d_ff, n_positions=spec.max_seq_len, layer_norm_epsilon=spec.norm_eps,
            tie_word_embeddings=spec.tied_embeddings)
    if spec.position == "alibi":
        return transformers.MptConfig(
            d_model=spec.d_model, n_heads=spec.n_heads, n_layers=spec.n_layers, expansion_ratio=spec.d_ff // spec.d_model,
            max_seq_len=spec.max_seq_len, vocab_size=spec.vocab_size, layer_norm_epsilon=spec.norm_eps,
            attn_config={"alibi_bias_max": int(spec.alibi_bias_max), "clip_qkv": spec.clip_qkv},
            tie_word_embeddings=spec.tied_embeddings)
    common = dict(vocab_size=spec.vocab_size, hidden_size=spec.d_model, intermediate_size=spec.d_ff,
                  num_hidden_layers=spec.n_layers, num_attention_heads=spec.n_heads,
                  max_position_embeddings=spec.max_seq_len, tie_word_embeddings=spec.tied_embeddings)
    if spec.norm == "layernorm":
        return transformers.GPTNeoXConfig(
            layer_norm_eps=spec.norm_eps, rotary_pct=spec.partial_rotary_factor, rotary_emb_base=spec.rope_theta,
            use_parallel_residual=spec.parallel_residual, attention_bias=spec.qkv_bias,
            hidden_act="gelu" if spec.gelu_approximate == "none" else "gelu_new", **common)
    common.update(num_key_value_heads=spec.kv_heads, rms_norm_eps=spec.norm_eps, rope_theta=spec.rope_theta)
    window = dict(sliding_window=spec.sliding_window, layer_types=[
        "sliding_attention" if spec.is_sliding(i) else "full_attention" for i in range(spec.n_layers)])
    if spec.norm == "gemma_rmsnorm":
        gemma = dict(head_dim=spec.head_dim, query_pre_attn_scalar=round((spec.attn_scale or spec.head_dim ** -0.5) ** -2),
                     final_logit_softcapping=spec.final_softcap, **window, **common)
        if spec.qk_norm:
            return transformers.Gemma3TextConfig(rope_local_base_freq=spec.rope_local_theta, **gemma)
        return transformers.Gemma2Config(attn_logit_softcapping=spec.attn_softcap, **gemma)
    if spec.is_mla:
        return transformers.DeepseekV3Config(
            head_dim=spec.qk_rope_head_dim, qk_rope_head_dim=spec.qk_rope_head_dim,
            qk_nope_head_dim=spec.head_dim - spec.qk_rope_head_dim, v_head_dim=spec.value_dim,
            q_lora_rank=spec.q_lora_rank, kv_lora_rank=spec.kv_lora_rank, n_routed_experts=spec.n_experts,
            num_experts_per_tok=spec.experts_per_token, moe_intermediate_size=spec.d_ff,
            n_shared_experts=(spec.shared_expert_d_ff or 0) // spec.d_ff, first_k_dense_replace=len(spec.dense_layers),
            n_group=spec.expert_groups or 1, topk_group=spec.expert_groups_per_token or 1,
            num_nextn_predict_layers=spec.n_mtp_layers,
            **(common | {"intermediate_size": spec.dense_d_ff or spec.d_ff}))
    if spec.attention_sinks:
        return transformers.GptOssConfig(
            head_dim=spec.head_dim, num_local_experts=spec.n_experts, num_experts_per_tok=spec.experts_per_token,
            **window, **common)
    if spec.is_moe and spec.qk_norm:
        return transformers.Qwen3MoeConfig(
            head_dim=spec.head_dim, num_experts=spec.n_experts, num_experts_per_tok=spec.experts_per_token,
            moe_intermediate_size=spec.d_ff, norm_topk_prob=spec.renormalize_topk,
            **(common | {"intermediate_size": spec.dense_d_ff or spec.d_ff}))
    if spec.is_moe and spec.shared_expert_d_ff:
        return transformers.Qwen2MoeConfig(
            num_experts=spec.n_experts, num_experts_per_tok=spec.experts_per_token, moe_intermediate_size=spec.d_ff,
            norm_topk_prob=spec.renormalize_topk, shared_expert_intermediate_size=spec.shared_expert_d_ff,
            **(common | {"intermediate_size": spec.dense_d_ff or spec.d_ff}))
    if spec.is_moe:
        return transformers.MixtralConfig(num_local_experts=spec.n_experts,
                                          num_experts_per_tok=spec.experts_per_token, **common)
    if spec.qk_norm:
        return transformers.Qwen3Config(head_dim=spec.head_dim, attention_bias=spec.qkv_bias, **common)
    if spec.name.startswith("phi"):
        return transformers.Phi3Config(sliding_window=spec.sliding_window, **common)
    if spec.sliding_window:
        return transformers.MistralConfig(sliding_window=spec.sliding_window, **common)
    if spec.qkv_bias and not spec.attn_out_bias:
        return transformers.Qwen2Config(**common)
    return transformers.LlamaConfig(attention_bias=spec.qkv_bias, mlp_bias=spec.mlp_bias, head_dim=spec.head_dim,
                                    **common)


def unique_numel(module) -> int:
    """Parameters of `module`, each tensor once (by object identity: data_ptr() is 0 on the meta device)."""
    return sum({id(p): p.numel() for p in module.parameters()}.values())


def torch_gpt_reference(spec: TransformerSpec):
    """A GPT-2-style model assembled from torch.nn layers on the meta device, for shapes HF's GPT-2 cannot take
    (GPT-3 13B's heads; tiny-moe's experts)."""
    import torch
    from torch import nn

    with torch.device("meta"):
        def block():
            experts = [nn.Linear(spec.d_model, spec.n_experts, bias=False)] if spec.is_moe else []
            for _ in range(spec.n_experts):     # one MLP, or each expert's (with the bias-free router above)
                experts += [nn.Linear(spec.d_model, spec.d_ff), nn.Linear(spec.d_ff, spec.d_model)]
            return nn.ModuleList([
                nn.LayerNorm(spec.d_model), nn.Linear(spec.d_model, 3 * spec.n_heads * spec.head_dim),
                nn.Linear(spec.n_heads * spec.head_dim, spec.d_model), nn.LayerNorm(spec.d_model), *experts])
        wte = nn.Embedding(spec.vocab_size, spec.d_model)
        head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        head.weight = wte.weight  # tied, as in GPT-2 / GPT-3
        return nn.ModuleList([wte, nn.Embedding(spec.max_seq_len, spec.d_model),
                              *[block() for _ in range(spec.n_layers)], nn.LayerNorm(spec.d_model), head])


@pytest.mark.parametrize("spec", TRANSFORMERS, ids=[s.name for s in TRANSFORMERS])
def test_preset_count_equals_meta_device_model(spec):
    """Independent measurement: build the Hugging Face model on the meta device and count unique parameters.

    The meta device allocates nothing, so even Llama 3.1 405B builds in well under a second; no layer
    reduction is needed.
    """
    transformers = pytest.importorskip("transformers", reason="transformers not installed; published counts are "
                                                              "checked in test_published_counts")
    import torch

    config = hf_config_for(spec)
    if config is None:
        model = torch_gpt_reference(spec)
    else:
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(config)
    assert param_counts(spec)["n_params"] == unique_numel(model)
    if config is not None and hasattr(model, "get_input_embeddings"):
        assert param_counts(spec)["components"]["token_embedding"] == model.get_input_embeddings().weight.numel()


@pytest.mark.parametrize("spec", PUBLISHED, ids=[s.name for s in PUBLISHED])
def test_published_counts(spec):
    """facts.md "Parameter counts" and the Hugging Face model pages (no transformers needed)."""
    assert n_params(spec) == spec.published_n_params


def test_facts_table_rows():
    """../shared/reference/facts.md, "Parameter counts (Hugging Face config.json built on the meta device)"."""
    assert n_params(get_model("gpt2")) == 124_439_808
    assert n_params(get_model("gpt2-medium")) == 354_823_168
    assert n_params(get_model("llama-2-7b")) == 6_738_415_616
    assert n_params(get_model("llama-2-70b")) == 68_976_648_192
    assert n_params(get_model("llama-3-8b")) == 8_030_261_248


def test_cruncher_lecture_count():
    """CS336 Lecture 2: Cruncher(dim=64, num_layers=2) has 8,256 parameters (64²·2 + 64)."""
    assert param_counts(CruncherSpec(dim=64, n_layers=2))["n_params"] == 8256
    assert n_params(get_model("cruncher")) == 8256


def test_cruncher_equals_torch_linears():
    """n_layers × Linear(dim, dim, bias=False) + Linear(dim, 1, bias=False), counted by torch on meta."""
    import torch
    from torch import nn

    spec = CruncherSpec(dim=48, n_layers=3)
    with torch.device("meta"):
        layers = [nn.Linear(48, 48, bias=False) for _ in range(3)] + [nn.Linear(48, 1, bias=False)]
    assert n_params(spec) == sum(p.numel() for layer in layers for p in layer.parameters())


@pytest.mark.parametrize("spec", TRANSFORMERS, ids=[s.name for s in TRANSFORMERS])
def test_components_add_up_and_conventions(spec):
    counts = param_counts(spec)
    c = counts["components"]
    assert sum(c.values()) == counts["n_params"]
    head = 0 if spec.tied_embeddings else spec.vocab_size * spec.d_model
    assert c["lm_head"] == head
    # DESIGN.md: non-embedding excludes token and position embeddings and an untied head
    assert counts["n_params_non_embedding"] == counts["n_params"] - c["token_embedding"] - c["position_embedding"] - head
    if not spec.dense_layers:   # n_params_per_layer is the largest layer
        assert counts["n_params_per_layer"] * spec.n_layers + c["token_embedding"] + c["position_embedding"] + head \
            + (2 if spec.norm_bias else 1) * spec.d_model == counts["n_params"]
    if not spec.is_moe:
        assert counts["n_params_active"] == counts["n_params"] and c["router"] == 0


def test_mixtral_active_parameters():
    """Mixtral of Experts (Jiang et al. 2024, arXiv:2401.04088): 47B total, 13B active with top-2 of 8."""
    counts = param_counts(get_model("mixtral-8x7b"))
    assert counts["n_params"] == pytest.approx(47e9, rel=0.01)
    assert counts["n_params_active"] == pytest.approx(13e9, rel=0.01)
    dense = get_model("mixtral-8x7b").with_(n_experts=1, experts_per_token=1)
    # active = dense model of the same shape + one more expert per layer + the router
    spec = get_model("mixtral-8x7b")
    extra = spec.n_layers * (3 * spec.d_model * spec.d_ff + spec.d_model * spec.n_experts)
    assert counts["n_params_active"] == n_params(dense) + extra


def test_tied_head_counted_once():
    gpt2, untied = get_model("gpt2"), get_model("gpt2").with_(tied_embeddings=False)
    assert n_params(untied) - n_params(gpt2) == 50257 * 768
    assert param_counts(untied)["n_params_non_embedding"] == param_counts(gpt2)["n_params_non_embedding"]


def test_qwen_biases_and_untied_head():
    """Qwen2.5-7B model card: 7.61B parameters, 6.53B non-embedding (q/k/v biases, untied head)."""
    counts = param_counts(get_model("qwen2.5-7b"))
    assert counts["n_params"] == pytest.approx(7.61e9, rel=0.001)
    assert counts["n_params_non_embedding"] == pytest.approx(6.53e9, rel=0.001)


def test_kaplan_approximation_for_gpt2_family():
    """Kaplan et al. 2020 Table 1: N ≈ 12·n_layer·d_model² non-embedding; within 0.5% for GPT-2 (biases and
    LayerNorms are the difference)."""
    for name in ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-175b"):
        spec = get_model(name)
        exact = param_counts(spec)["n_params_non_embedding"]
        assert kaplan_non_embedding_params(spec) == pytest.approx(exact, rel=0.005), name
    assert kaplan_non_embedding_params(get_model("gpt2")) == 12 * 12 * 768**2


@pytest.mark.parametrize("spec", [s for s in TRANSFORMERS if s.source.startswith("config.json")],
                         ids=[s.name for s in TRANSFORMERS if s.source.startswith("config.json")])
def test_hf_config_round_trip(spec):
    """A config written by transformers (to_dict) reads back into the same spec (transformers 5 writes
    rope_theta under rope_parameters)."""
    pytest.importorskip("transformers", reason="transformers not installed; literal config.json files are "
                                               "read in tests/specs/test_hf_config.py")
    from trainledger.specs.hf_config import spec_from_config_dict

    read = spec_from_config_dict(hf_config_for(spec).to_dict(), name=spec.name)
    assert dataclasses.replace(read, source=spec.source, published_n_params=spec.published_n_params,
                               pretrain_seq_len=spec.pretrain_seq_len) == spec   # a config.json does not record it


def test_params_and_specs_do_not_import_torch():
    code = ("import sys, trainledger.specs, trainledger.specs.hf_config, trainledger.account.counting.params, "
            "trainledger.account.counting.matmul; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
