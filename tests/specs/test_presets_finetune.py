"""The presets published fine-tuning tables use (issue 38): each read back from its config.json, its published count,
and the names users write (aliases, not duplicates). Meta-device counts against transformers for every preset are in
tests/account/test_params.py (test_preset_count_equals_meta_device_model covers these too)."""

import dataclasses

import pytest

from trainledger.account.counting.params import n_params
from trainledger.specs import PRESETS, get_model
from trainledger.specs.hf_config import spec_from_config_dict

_LLAMA3 = {"architectures": ["LlamaForCausalLM"], "attention_bias": False, "hidden_act": "silu", "mlp_bias": False,
           "max_position_embeddings": 131072, "model_type": "llama", "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
           "rope_theta": 500000.0, "vocab_size": 128256}
_LLAMA31_SCALING = {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                    "original_max_position_embeddings": 8192, "rope_type": "llama3"}
# config.json of meta-llama/Llama-3.1-8B, Llama-3.1-70B, Llama-3.2-1B, Llama-3.2-3B (token ids and dtype omitted)
LLAMA_3_1_8B = _LLAMA3 | {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                          "num_hidden_layers": 32, "rope_scaling": _LLAMA31_SCALING, "tie_word_embeddings": False}
LLAMA_3_1_70B = _LLAMA3 | {"hidden_size": 8192, "intermediate_size": 28672, "num_attention_heads": 64,
                           "num_hidden_layers": 80, "rope_scaling": _LLAMA31_SCALING, "tie_word_embeddings": False}
_LLAMA32_SCALING = _LLAMA31_SCALING | {"factor": 32.0}
LLAMA_3_2_1B = _LLAMA3 | {"head_dim": 64, "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 32,
                          "num_hidden_layers": 16, "rope_scaling": _LLAMA32_SCALING, "tie_word_embeddings": True}
LLAMA_3_2_3B = _LLAMA3 | {"head_dim": 128, "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 24,
                          "num_hidden_layers": 28, "rope_scaling": _LLAMA32_SCALING, "tie_word_embeddings": True}
# config.json of google/gemma-2-9b
GEMMA_2_9B = {"architectures": ["Gemma2ForCausalLM"], "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
              "head_dim": 256, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
              "hidden_size": 3584, "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "gemma2",
              "num_attention_heads": 16, "num_hidden_layers": 42, "num_key_value_heads": 8, "query_pre_attn_scalar": 256,
              "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "sliding_window": 4096, "vocab_size": 256000}

CASES = [("llama-3.1-8b", LLAMA_3_1_8B, 8_030_261_248), ("llama-3.1-70b", LLAMA_3_1_70B, 70_553_706_496),
         ("llama-3.2-1b", LLAMA_3_2_1B, 1_235_814_400), ("llama-3.2-3b", LLAMA_3_2_3B, 3_212_749_824),
         ("gemma-2-9b", GEMMA_2_9B, 9_241_705_984)]


@pytest.mark.parametrize("name, config, published", CASES, ids=[c[0] for c in CASES])
def test_config_reads_as_the_preset_with_its_published_count(name, config, published):
    preset = get_model(name)
    read = spec_from_config_dict(config, name="x")
    # the reader notes the ignored llama3 rope_scaling (no count changes); name, source, context are not in a config
    assert dataclasses.replace(read, name=preset.name, source=preset.source, pretrain_seq_len=preset.pretrain_seq_len,
                               published_n_params=preset.published_n_params, approximations=()) == preset
    assert n_params(preset) == published == preset.published_n_params


def test_presets_fine_tuning_tables_use_exist_under_the_names_users_write():
    for name, target in [("llama-3.1-8b-instruct", "llama-3.1-8b"), ("llama-3.2-1b-instruct", "llama-3.2-1b"),
                         ("llama-3.2-3b-instruct", "llama-3.2-3b"), ("qwen2.5-7b", "qwen2.5-7b"),
                         ("qwen2.5-7b-instruct", "qwen2.5-7b"), ("mistral-7b", "mistral-7b"), ("gemma-2-9b-it", "gemma-2-9b"),
                         ("phi-3-mini", "phi-3-mini-4k"), ("phi-3-mini-4k-instruct", "phi-3-mini-4k")]:
        assert get_model(name) is PRESETS[target], name
    # Llama 3.1 8B is Llama 3 8B's architecture with a 128K position range: a preset of its own, the same count
    assert n_params(get_model("llama-3.1-8b")) == n_params(get_model("llama-3-8b"))
    assert get_model("llama-3.1-8b").max_seq_len == 131072 and get_model("llama-3-8b").max_seq_len == 8192


def test_every_preset_from_a_config_names_its_family():
    """The Hugging Face model_type a preset's config.json has, so LoRA targets name its modules (account/finetune)."""
    for spec in PRESETS.values():
        if getattr(spec, "kind", "") == "transformer" and spec.source.startswith("config.json of"):
            assert spec.family, spec.name
    assert get_model("phi-3-mini").family == "phi3" and get_model("pythia-1.4b").family == "gpt_neox"
    assert get_model("tiny").family == ""      # trainledger's own Transformer
