"""Reading Hugging Face config.json files (literal copies of the published ones) and the errors for bad ones."""

import dataclasses
import json

import pytest

from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.hf_config import spec_from_config_dict, spec_from_config_file

# config.json of openai-community/gpt2 (no n_inner, no tie_word_embeddings: defaults apply)
GPT2_CONFIG = {
    "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
    "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "vocab_size": 50257,
}
# config.json of meta-llama/Llama-2-7b-hf
LLAMA_2_7B_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
    "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": None, "tie_word_embeddings": False,
    "torch_dtype": "float16", "use_cache": True, "vocab_size": 32000,
}
# config.json of Qwen/Qwen2.5-7B
QWEN2_5_7B_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944, "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2",
    "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 131072, "tie_word_embeddings": False, "use_sliding_window": False,
    "vocab_size": 152064,
}
# config.json of mistralai/Mixtral-8x7B-v0.1
MIXTRAL_CONFIG = {
    "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32, "num_experts_per_tok": 2,
    "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8, "rms_norm_eps": 1e-05,
    "rope_theta": 1000000.0, "sliding_window": None, "tie_word_embeddings": False, "vocab_size": 32000,
}
# config.json of mistralai/Mistral-7B-v0.1
MISTRAL_CONFIG = {
    "architectures": ["MistralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": False, "vocab_size": 32000,
}

CASES = [("gpt2", GPT2_CONFIG), ("llama-2-7b", LLAMA_2_7B_CONFIG), ("qwen2.5-7b", QWEN2_5_7B_CONFIG),
         ("mixtral-8x7b", MIXTRAL_CONFIG), ("mistral-7b", MISTRAL_CONFIG)]


def same_architecture(read, preset):
    """Same architecture; name, source, published count and the pre-training context are not in a config.json."""
    return dataclasses.replace(read, name=preset.name, source=preset.source, pretrain_seq_len=preset.pretrain_seq_len,
                               published_n_params=preset.published_n_params) == preset


@pytest.mark.parametrize("preset, config", CASES, ids=[c[0] for c in CASES])
def test_published_config_reads_as_the_preset(preset, config):
    assert same_architecture(spec_from_config_dict(config, name="x"), get_model(preset))


def test_file_directory_and_get_model(tmp_path):
    folder = tmp_path / "Qwen2.5-7B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN2_5_7B_CONFIG))
    by_file = spec_from_config_file(folder / "config.json")
    assert by_file.name == "Qwen2.5-7B"
    assert spec_from_config_file(folder) == by_file
    assert get_model(str(folder / "config.json")) == by_file
    assert same_architecture(get_model(str(folder)), get_model("qwen2.5-7b"))


def test_gpt2_defaults_and_llama_options():
    spec = spec_from_config_dict(GPT2_CONFIG | {"n_inner": 1000, "tie_word_embeddings": False})
    assert spec.d_ff == 1000 and not spec.tied_embeddings
    llama = spec_from_config_dict(LLAMA_2_7B_CONFIG | {"attention_bias": True, "mlp_bias": True, "head_dim": 64,
                                                       "num_attention_heads": 16, "num_key_value_heads": 4})
    assert llama.qkv_bias and llama.attn_out_bias and llama.mlp_bias
    assert (llama.head_dim, llama.n_heads, llama.kv_heads) == (64, 16, 4)
    # transformers 5 writes rope_theta: null and puts the value under rope_parameters
    v5 = spec_from_config_dict(LLAMA_2_7B_CONFIG | {"rope_theta": None, "rope_parameters": {"rope_theta": 5e5}})
    assert v5.rope_theta == 5e5
    assert spec_from_config_dict({k: v for k, v in LLAMA_2_7B_CONFIG.items() if k != "num_key_value_heads"}).kv_heads == 32


def one_line_error(call, *fragments):
    with pytest.raises(TrainledgerError) as error:
        call()
    message = str(error.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_errors_name_the_flag(tmp_path):
    one_line_error(lambda: spec_from_config_file(tmp_path / "missing.json", "--model"), "--model", "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    one_line_error(lambda: spec_from_config_file(bad, "--model"), "--model", "not valid JSON")
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    one_line_error(lambda: spec_from_config_file(listed), "--model", "JSON object")
    one_line_error(lambda: spec_from_config_dict({"model_type": "bert"}), "'bert'", "gpt2", "llama", "qwen2", "mixtral")
    one_line_error(lambda: spec_from_config_dict({"n_embd": 8}), "None", "--model")
    incomplete = {k: v for k, v in LLAMA_2_7B_CONFIG.items() if k != "hidden_size"}
    one_line_error(lambda: spec_from_config_dict(incomplete), "'hidden_size'", "--model")
    one_line_error(lambda: spec_from_config_dict(GPT2_CONFIG | {"n_layer": "12"}), "'n_layer'", "integer")
    one_line_error(lambda: spec_from_config_dict(GPT2_CONFIG | {"n_head": 7}), "--model", "n_heads")
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    one_line_error(lambda: get_model(str(empty_dir)), "--model", "config.json")


def test_binary_and_empty_config_files_are_one_line_errors(tmp_path):
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    one_line_error(lambda: spec_from_config_file(binary, "--model"), "--model", "not UTF-8")
    empty = tmp_path / "empty.json"
    empty.write_text("")
    one_line_error(lambda: spec_from_config_file(empty, "--model"), "--model", "not valid JSON")


def test_null_values_mean_the_default_and_null_required_keys_are_errors():
    # transformers writes `null` for unset optional keys; a null required key is an error naming it
    spec = spec_from_config_dict(LLAMA_2_7B_CONFIG | {"rms_norm_eps": None, "tie_word_embeddings": None,
                                                      "num_key_value_heads": None, "head_dim": None})
    assert spec.norm_eps == pytest.approx(1e-6) and spec.tied_embeddings is False
    assert (spec.kv_heads, spec.head_dim) == (32, 128)
    one_line_error(lambda: spec_from_config_dict(LLAMA_2_7B_CONFIG | {"intermediate_size": None}),
                   "'intermediate_size'", "null", "--model")
    one_line_error(lambda: get_model(""), "--model", "preset name")
