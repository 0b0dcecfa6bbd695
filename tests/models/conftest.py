"""Fixtures of the model tests: copy Hugging Face weights (GPT-2, the Llama family incl. Qwen2/3, Mixtral, Qwen-MoE,
Phi-3, Gemma 2/3; GPT-NeoX; MPT) into a Transformer."""

from __future__ import annotations

import pytest
import torch


@torch.no_grad()
def copy_gpt2(ours, hf) -> None:
    """GPT2LMHeadModel -> Transformer. HF's Conv1D stores weights (in, out): transpose; c_attn holds q|k|v."""
    t = hf.transformer
    d = ours.spec.d_model
    ours.tok_embeddings.weight.copy_(t.wte.weight)
    ours.pos_embeddings.weight.copy_(t.wpe.weight)
    for block, h in zip(ours.blocks, t.h):
        block.norm1.weight.copy_(h.ln_1.weight)
        block.norm1.bias.copy_(h.ln_1.bias)
        block.norm2.weight.copy_(h.ln_2.weight)
        block.norm2.bias.copy_(h.ln_2.bias)
        w, b = h.attn.c_attn.weight.T, h.attn.c_attn.bias
        for i, proj in enumerate((block.attn.q_proj, block.attn.k_proj, block.attn.v_proj)):
            proj.weight.copy_(w[i * d:(i + 1) * d])
            proj.bias.copy_(b[i * d:(i + 1) * d])
        block.attn.o_proj.weight.copy_(h.attn.c_proj.weight.T)
        block.attn.o_proj.bias.copy_(h.attn.c_proj.bias)
        block.mlp.up.weight.copy_(h.mlp.c_fc.weight.T)
        block.mlp.up.bias.copy_(h.mlp.c_fc.bias)
        block.mlp.down.weight.copy_(h.mlp.c_proj.weight.T)
        block.mlp.down.bias.copy_(h.mlp.c_proj.bias)
    ours.norm.weight.copy_(t.ln_f.weight)
    ours.norm.bias.copy_(t.ln_f.bias)


def _copy_linear(dst, src) -> None:
    dst.weight.copy_(src.weight)
    if dst.bias is not None or getattr(src, "bias", None) is not None:
        dst.bias.copy_(src.bias)


def _copy_experts(moe, hf_moe, d_ff: int) -> None:
    """Router and experts of a Mixtral / Qwen-MoE block (experts stored as 3-D gate_up_proj and down_proj)."""
    moe.router.weight.copy_(hf_moe.gate.weight)
    experts = hf_moe.experts
    for e, expert in enumerate(moe.experts):
        expert.gate.weight.copy_(experts.gate_up_proj[e, :d_ff])
        expert.up.weight.copy_(experts.gate_up_proj[e, d_ff:])
        expert.down.weight.copy_(experts.down_proj[e])
    if moe.shared_expert is not None:
        _copy_mlp(moe.shared_expert, hf_moe.shared_expert)
    if moe.shared_expert_gate is not None:
        moe.shared_expert_gate.weight.copy_(hf_moe.shared_expert_gate.weight)


def _copy_mlp(ours, mlp) -> None:
    """A gated MLP: separate gate_proj/up_proj (Llama, Gemma, Qwen) or Phi-3's fused gate_up_proj (gate first)."""
    if hasattr(mlp, "gate_up_proj"):
        f = ours.gate.weight.shape[0]
        ours.gate.weight.copy_(mlp.gate_up_proj.weight[:f])
        ours.up.weight.copy_(mlp.gate_up_proj.weight[f:])
    else:
        _copy_linear(ours.gate, mlp.gate_proj)
        _copy_linear(ours.up, mlp.up_proj)
    _copy_linear(ours.down, mlp.down_proj)


@torch.no_grad()
def copy_llama(ours, hf) -> None:
    """The Llama family -> Transformer: Llama, Mistral, Qwen2/3, Mixtral, Qwen2/3-MoE, Phi-3 (fused qkv_proj and
    gate_up_proj are split), Gemma 2/3 (its four norms per layer and the QK-norms)."""
    m, spec = hf.model, ours.spec
    ours.tok_embeddings.weight.copy_(m.embed_tokens.weight)
    for i, (block, layer) in enumerate(zip(ours.blocks, m.layers)):
        block.norm1.weight.copy_(layer.input_layernorm.weight)
        if spec.sandwich_norm:   # Gemma: post_attention_layernorm is the attention output's norm
            block.attn_out_norm.weight.copy_(layer.post_attention_layernorm.weight)
            block.norm2.weight.copy_(layer.pre_feedforward_layernorm.weight)
            block.mlp_out_norm.weight.copy_(layer.post_feedforward_layernorm.weight)
        else:
            block.norm2.weight.copy_(layer.post_attention_layernorm.weight)
        a = layer.self_attn
        if hasattr(a, "qkv_proj"):   # Phi-3: rows q | k | v
            q, kv = spec.n_heads * spec.head_dim, spec.kv_heads * spec.head_dim
            block.attn.q_proj.weight.copy_(a.qkv_proj.weight[:q])
            block.attn.k_proj.weight.copy_(a.qkv_proj.weight[q:q + kv])
            block.attn.v_proj.weight.copy_(a.qkv_proj.weight[q + kv:])
            _copy_linear(block.attn.o_proj, a.o_proj)
        else:
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                _copy_linear(getattr(block.attn, name), getattr(a, name))
        if spec.qk_norm:
            block.attn.q_norm.weight.copy_(a.q_norm.weight)
            block.attn.k_norm.weight.copy_(a.k_norm.weight)
        if spec.is_moe_layer(i):
            _copy_experts(block.mlp, layer.mlp, spec.d_ff)
        else:
            _copy_mlp(block.mlp, layer.mlp)
    ours.norm.weight.copy_(m.norm.weight)
    if ours.lm_head is not None:
        ours.lm_head.weight.copy_(hf.lm_head.weight)


def _copy_norm(ours, theirs) -> None:
    ours.weight.copy_(theirs.weight)
    if ours.bias is not None:
        ours.bias.copy_(theirs.bias)


@torch.no_grad()
def copy_neox(ours, hf) -> None:
    """GPTNeoXForCausalLM -> Transformer. query_key_value's rows hold, per head, that head's q | k | v."""
    m, spec = hf.gpt_neox, ours.spec
    ours.tok_embeddings.weight.copy_(m.embed_in.weight)
    h, dh = spec.n_heads, spec.head_dim
    for block, layer in zip(ours.blocks, m.layers):
        _copy_norm(block.norm1, layer.input_layernorm)
        _copy_norm(block.norm2, layer.post_attention_layernorm)
        w = layer.attention.query_key_value.weight.view(h, 3, dh, -1)
        b = layer.attention.query_key_value.bias.view(h, 3, dh)
        for j, proj in enumerate((block.attn.q_proj, block.attn.k_proj, block.attn.v_proj)):
            proj.weight.copy_(w[:, j].reshape(h * dh, -1))
            proj.bias.copy_(b[:, j].reshape(-1))
        _copy_linear(block.attn.o_proj, layer.attention.dense)
        _copy_linear(block.mlp.up, layer.mlp.dense_h_to_4h)
        _copy_linear(block.mlp.down, layer.mlp.dense_4h_to_h)
    _copy_norm(ours.norm, m.final_layer_norm)
    ours.lm_head.weight.copy_(hf.lm_head.weight)


@torch.no_grad()
def copy_mpt(ours, hf) -> None:
    """MptForCausalLM -> Transformer. Wqkv's rows are q | k | v; no biases; the head is tied."""
    m, d = hf.transformer, ours.spec.d_model
    ours.tok_embeddings.weight.copy_(m.wte.weight)
    for block, layer in zip(ours.blocks, m.blocks):
        block.norm1.weight.copy_(layer.norm_1.weight)
        block.norm2.weight.copy_(layer.norm_2.weight)
        for j, proj in enumerate((block.attn.q_proj, block.attn.k_proj, block.attn.v_proj)):
            proj.weight.copy_(layer.attn.Wqkv.weight[j * d:(j + 1) * d])
        block.attn.o_proj.weight.copy_(layer.attn.out_proj.weight)
        block.mlp.up.weight.copy_(layer.ffn.up_proj.weight)
        block.mlp.down.weight.copy_(layer.ffn.down_proj.weight)
    ours.norm.weight.copy_(m.norm_f.weight)


@pytest.fixture
def hf_copy():
    """{"gpt2": ..., "llama": ..., "neox": ..., "mpt": ...}: copy a Hugging Face model's weights into ours (in place)."""
    return {"gpt2": copy_gpt2, "llama": copy_llama, "neox": copy_neox, "mpt": copy_mpt}
