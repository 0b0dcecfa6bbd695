"""Phi's and Falcon's blocks in trainledger's Transformer (parallel_shared_norm, lm_head_bias), measured against the
account: saved activations with measure.memory.track_step, FLOPs with FlopCounterMode (SDPA on the math backend:
FlopCounterMode counts 0 for the CPU flash kernel), parameters on the meta device, and a forward equal to
transformers' own PhiForCausalLM / FalconForCausalLM given the same weights."""

import itertools

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from trainledger.account.counting.flops import flops_per_step
from trainledger.account.counting.params import n_params
from trainledger.account.memory.activations import ActivationShard, activations_bytes
from trainledger.measure.memory import track_step
from trainledger.models import Transformer
from trainledger.specs.hf_config import spec_from_config_dict

COMMON = {"vocab_size": 128, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "max_position_embeddings": 64}
CONFIGS = {
    # Phi: one shared LayerNorm, partial RoPE (8 of 16 dims), QK LayerNorm, GQA, biases, a biased untied head
    "phi": COMMON | {"model_type": "phi", "intermediate_size": 96, "num_key_value_heads": 2,
                     "partial_rotary_factor": 0.5, "qk_layernorm": True},
    # Falcon-7B's block: multi-query attention, one shared LayerNorm, no biases, tied head
    "falcon": COMMON | {"model_type": "falcon", "ffn_hidden_size": 96},
    # Falcon-40B's block: 2 KV groups, ln_attn and ln_mlp
    "falcon_gqa": COMMON | {"model_type": "falcon", "ffn_hidden_size": 96, "num_kv_heads": 2,
                            "new_decoder_architecture": True},
}
SPECS = {name: spec_from_config_dict(config) for name, config in CONFIGS.items()}
RECIPES = {"fp32": (None, None), "bf16": (torch.bfloat16, None), "amp-bf16": (None, torch.bfloat16)}


def _measured_activations(spec, batch_size, seq_len, precision, recompute):
    dtype, autocast = RECIPES[precision]
    torch.manual_seed(0)
    model = Transformer(spec, recompute=recompute, dtype=dtype)
    batch = (torch.randint(0, spec.vocab_size, (batch_size, seq_len)),
             torch.randint(0, spec.vocab_size, (batch_size, seq_len)))
    return track_step(model, batch, None, autocast_dtype=autocast).activations_bytes


@pytest.mark.parametrize("name, precision, recompute", list(itertools.product(
    SPECS, RECIPES, ("none", "selective", "full"))), ids=str)
def test_saved_activations_equal_the_prediction(name, precision, recompute, one_torch_thread):
    spec = SPECS[name]
    predicted = activations_bytes(spec, ActivationShard(2, 24, precision=precision, recompute=recompute))["total"]
    assert predicted == _measured_activations(spec, 2, 24, precision, recompute)


@pytest.mark.parametrize("name", SPECS)
def test_flops_equal_flop_counter_mode(name, one_torch_thread):
    spec, batch, seq = SPECS[name], 2, 16
    torch.manual_seed(0)
    model = Transformer(spec)
    idx = torch.randint(0, spec.vocab_size, (batch, seq))
    with sdpa_kernel(SDPBackend.MATH):
        with FlopCounterMode(display=False) as forward:
            _, loss = model(idx, idx)
        with FlopCounterMode(display=False) as backward:
            loss.backward()
    predicted = flops_per_step(spec, batch, seq)
    assert forward.get_total_flops() == predicted["forward_flops_per_step"]
    assert forward.get_total_flops() + backward.get_total_flops() == predicted["train_flops_per_step"]


@pytest.mark.parametrize("name", SPECS)
def test_parameters_as_counted(name):
    spec = SPECS[name]
    model = Transformer(spec)
    assert model.n_params() == n_params(spec)
    assert all((block.norm2 is None) == spec.parallel_shared_norm for block in model.blocks)
    assert (model.output_bias() is not None) == spec.lm_head_bias


def _hf_model(config):
    transformers = pytest.importorskip("transformers")
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    hf_config._attn_implementation = "eager"
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(hf_config).eval()


def _copy_phi(hf, ours):
    """transformers' Phi weights into ours: q/k/v/dense -> q/k/v/o_proj, fc1/fc2 -> up/down, input_layernorm ->
    norm1, final_layernorm -> norm. RoPE: transformers rotates the halves of the rotary dims (rotate_half), as ours."""
    with torch.no_grad():
        ours.tok_embeddings.weight.copy_(hf.model.embed_tokens.weight)
        for block, layer in zip(ours.blocks, hf.model.layers):
            a, b = layer.self_attn, block.attn
            for src, dst in ((a.q_proj, b.q_proj), (a.k_proj, b.k_proj), (a.v_proj, b.v_proj), (a.dense, b.o_proj),
                             (layer.mlp.fc1, block.mlp.up), (layer.mlp.fc2, block.mlp.down)):
                dst.weight.copy_(src.weight)
                dst.bias.copy_(src.bias)
            for src, dst in ((layer.input_layernorm, block.norm1), (a.q_layernorm, b.q_norm), (a.k_layernorm, b.k_norm)):
                dst.weight.copy_(src.weight)
                dst.bias.copy_(src.bias)
        ours.norm.weight.copy_(hf.model.final_layernorm.weight)
        ours.norm.bias.copy_(hf.model.final_layernorm.bias)
        ours.lm_head.weight.copy_(hf.lm_head.weight)
        ours.lm_head.bias.copy_(hf.lm_head.bias)


def test_phi_forward_equals_transformers_given_the_same_weights(one_torch_thread):
    """The block structure counted above is the one transformers runs: same weights, same logits (fp32)."""
    config = CONFIGS["phi"]
    hf = _hf_model(config)
    ours = Transformer(SPECS["phi"]).eval()
    names = {n for n, _ in ours.named_parameters()}
    if not {"blocks.0.attn.q_norm.weight", "blocks.0.attn.k_norm.weight"} <= names:
        pytest.fail(f"QK-norm parameter names changed: {sorted(n for n in names if 'norm' in n)[:6]}")
    _copy_phi(hf, ours)
    idx = torch.randint(0, config["vocab_size"], (2, 12))
    with torch.no_grad():
        expected = hf(idx).logits
        got = ours(idx)
    assert torch.allclose(got, expected, atol=1e-5, rtol=1e-4), (got - expected).abs().max()
