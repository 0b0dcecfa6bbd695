"""Phi and Falcon config.json files (specs/hf_config_parallel.py): counts equal to transformers' own models built
on the meta device from the same dicts, their structure, and the one-line errors for what transformers cannot build."""

import pytest

from trainledger.account.counting.params import n_params, param_counts
from trainledger.errors import TrainledgerError
from trainledger.specs.hf_config import spec_from_config_dict

# config.json of microsoft/phi-1 and microsoft/phi-1_5 (the same architecture; dropout, token ids, dtype omitted)
PHI_1 = {"architectures": ["PhiForCausalLM"], "hidden_act": "gelu_new", "hidden_size": 2048, "intermediate_size": 8192,
         "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "phi", "num_attention_heads": 32,
         "num_hidden_layers": 24, "num_key_value_heads": None, "partial_rotary_factor": 0.5, "qk_layernorm": False,
         "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 51200}
# config.json of microsoft/phi-2
PHI_2 = {"architectures": ["PhiForCausalLM"], "hidden_act": "gelu_new", "hidden_size": 2560, "intermediate_size": 10240,
         "layer_norm_eps": 1e-05, "max_position_embeddings": 2048, "model_type": "phi", "num_attention_heads": 32,
         "num_hidden_layers": 32, "num_key_value_heads": 32, "partial_rotary_factor": 0.4, "qk_layernorm": False,
         "rope_scaling": None, "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 51200}
# config.json of tiiuae/falcon-7b (multi-query: one K and one V head; one LayerNorm feeds the parallel block)
FALCON_7B = {"alibi": False, "architectures": ["FalconForCausalLM"], "bias": False, "hidden_size": 4544,
             "layer_norm_epsilon": 1e-05, "model_type": "falcon", "multi_query": True,
             "new_decoder_architecture": False, "num_attention_heads": 71, "num_hidden_layers": 32,
             "parallel_attn": True, "vocab_size": 65024}
# config.json of tiiuae/falcon-40b (new decoder architecture: 8 KV groups, ln_attn and ln_mlp)
FALCON_40B = {"alibi": False, "architectures": ["FalconForCausalLM"], "bias": False, "hidden_size": 8192,
              "layer_norm_epsilon": 1e-05, "model_type": "falcon", "multi_query": True, "new_decoder_architecture": True,
              "num_attention_heads": 128, "num_hidden_layers": 60, "num_kv_heads": 8, "parallel_attn": True,
              "vocab_size": 65024}
# config.json of tiiuae/falcon-180B
FALCON_180B = {"alibi": False, "architectures": ["FalconForCausalLM"], "bias": False, "hidden_size": 14848,
               "layer_norm_epsilon": 1e-05, "max_position_embeddings": 2048, "model_type": "falcon", "multi_query": True,
               "new_decoder_architecture": True, "num_attention_heads": 232, "num_hidden_layers": 80, "num_kv_heads": 8,
               "parallel_attn": True, "rope_theta": 10000.0, "vocab_size": 65024}

# (name, config, the model card's rounded size; phi-1's card says "1.3 billion", 8 % under the 1.42B that
# transformers builds, whose 1.21B without the embedding and head is no nearer: no card size is checked for it)
CONFIGS = [("phi-1", PHI_1, None), ("phi-2", PHI_2, 2.7e9), ("falcon-7b", FALCON_7B, 7e9),
           ("falcon-40b", FALCON_40B, 40e9), ("falcon-180b", FALCON_180B, 180e9),
           ("phi-qk-ln-gqa", PHI_1 | {"qk_layernorm": True, "num_key_value_heads": 8, "tie_word_embeddings": True}, None),
           ("falcon-sequential-mha", FALCON_7B | {"parallel_attn": False, "multi_query": False, "bias": True}, None),
           ("falcon-gqa-one-norm", FALCON_40B | {"num_ln_in_parallel_attn": 1}, None)]


def hf_meta_model(config: dict):
    transformers = pytest.importorskip("transformers")
    import torch

    fields = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(config["model_type"], **fields))


def unique_numel(module) -> int:
    return sum({id(p): p.numel() for p in module.parameters()}.values())


@pytest.mark.parametrize("name, config, card_size", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_count_equals_transformers_on_the_meta_device(name, config, card_size):
    spec = spec_from_config_dict(config, name=name)
    model = hf_meta_model(config)
    assert n_params(spec) == unique_numel(model)
    counts = param_counts(spec)
    assert counts["components"]["token_embedding"] == model.get_input_embeddings().weight.numel()
    if card_size:                                 # the model cards' 1.3B, 2.7B, 7B, 40B, 180B, within 6 %
        assert n_params(spec) == pytest.approx(card_size, rel=0.06)


@pytest.mark.parametrize("name, config, card_size", CONFIGS[:5], ids=[c[0] for c in CONFIGS[:5]])
def test_our_transformer_builds_the_same_count(name, config, card_size):
    """models.Transformer honours parallel_shared_norm and lm_head_bias: its meta-device count is the account's."""
    import torch

    from trainledger.models import Transformer

    spec = spec_from_config_dict(config, name=name)
    with torch.device("meta"):
        assert Transformer(spec).n_params() == n_params(spec)


def test_structure_read_from_the_configs():
    phi2 = spec_from_config_dict(PHI_2)
    assert (phi2.family, phi2.parallel_residual, phi2.parallel_shared_norm, phi2.lm_head_bias) == ("phi", True, True, True)
    assert (phi2.rotary_dim, phi2.qkv_bias, phi2.attn_out_bias, phi2.mlp_bias, phi2.tied_embeddings) == (32, True, True, True, False)
    assert phi2.gelu_approximate == "tanh" and phi2.norm == "layernorm" and phi2.norm_bias
    assert param_counts(phi2)["components"]["lm_head"] == 51200 * 2560 + 51200        # Phi's head has a bias
    assert param_counts(phi2)["components"]["norms"] == 33 * 2 * 2560                 # 32 shared + the final
    f7 = spec_from_config_dict(FALCON_7B)
    assert (f7.kv_heads, f7.head_dim, f7.d_ff, f7.parallel_shared_norm, f7.tied_embeddings) == (1, 64, 4 * 4544, True, True)
    assert not (f7.qkv_bias or f7.attn_out_bias or f7.mlp_bias) and f7.gelu_approximate == "none"
    f40 = spec_from_config_dict(FALCON_40B)
    assert (f40.kv_heads, f40.parallel_residual, f40.parallel_shared_norm, f40.family) == (8, True, False, "falcon")
    sequential = spec_from_config_dict(FALCON_7B | {"parallel_attn": False, "multi_query": False})
    assert (sequential.kv_heads, sequential.parallel_residual) == (71, False)
    phi_default = spec_from_config_dict({"model_type": "phi"})                       # PhiConfig's defaults
    assert (phi_default.d_model, phi_default.n_layers, phi_default.partial_rotary_factor) == (2048, 24, 0.5)


@pytest.mark.parametrize("config, match", [
    (FALCON_7B | {"alibi": True}, "alibi"),
    (FALCON_40B | {"parallel_attn": False}, "parallel_attn"),
    (FALCON_7B | {"num_ln_in_parallel_attn": 2}, "num_ln_in_parallel_attn"),
    (FALCON_7B | {"activation": "relu"}, "activation"),
    (PHI_2 | {"hidden_act": "silu"}, "hidden_act"),
    (PHI_2 | {"partial_rotary_factor": 0.37}, "partial_rotary_factor"),
])
def test_what_cannot_be_built_is_a_one_line_error(config, match):
    with pytest.raises(TrainledgerError, match=match) as error:
        spec_from_config_dict(config)
    assert "\n" not in str(error.value) and "--model" in str(error.value)


def test_impl_hf_is_refused_for_them():
    from trainledger.specs.hf_config import hf_run_fields

    for config in (PHI_2, FALCON_7B):
        with pytest.raises(TrainledgerError, match="--impl hf"):
            hf_run_fields(config)
