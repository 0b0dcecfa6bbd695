"""Fixtures of the model tests: copy Hugging Face GPT-2 / Llama / Qwen2 / Mixtral weights into a Transformer."""

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


@torch.no_grad()
def copy_llama(ours, hf) -> None:
    """LlamaForCausalLM / Qwen2ForCausalLM / MixtralForCausalLM -> Transformer (same parameter layout)."""
    m = hf.model
    ours.tok_embeddings.weight.copy_(m.embed_tokens.weight)
    for block, layer in zip(ours.blocks, m.layers):
        block.norm1.weight.copy_(layer.input_layernorm.weight)
        block.norm2.weight.copy_(layer.post_attention_layernorm.weight)
        a = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            _copy_linear(getattr(block.attn, name), getattr(a, name))
        if ours.spec.is_moe:
            moe, experts = layer.mlp, layer.mlp.experts
            block.mlp.router.weight.copy_(moe.gate.weight)
            f = ours.spec.d_ff
            for e, expert in enumerate(block.mlp.experts):
                expert.gate.weight.copy_(experts.gate_up_proj[e, :f])
                expert.up.weight.copy_(experts.gate_up_proj[e, f:])
                expert.down.weight.copy_(experts.down_proj[e])
        else:
            _copy_linear(block.mlp.gate, layer.mlp.gate_proj)
            _copy_linear(block.mlp.up, layer.mlp.up_proj)
            _copy_linear(block.mlp.down, layer.mlp.down_proj)
    ours.norm.weight.copy_(m.norm.weight)
    if ours.lm_head is not None:
        ours.lm_head.weight.copy_(hf.lm_head.weight)


@pytest.fixture
def hf_copy():
    """{"gpt2": copy_gpt2, "llama": copy_llama}: copy a Hugging Face model's weights into ours (in place)."""
    return {"gpt2": copy_gpt2, "llama": copy_llama}
