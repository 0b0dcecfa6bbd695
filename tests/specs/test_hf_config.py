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

# config.json of EleutherAI/pythia-1.4b
PYTHIA_CONFIG = {
    "architectures": ["GPTNeoXForCausalLM"], "bos_token_id": 0, "eos_token_id": 0, "hidden_act": "gelu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192, "layer_norm_eps": 1e-05,
    "max_position_embeddings": 2048, "model_type": "gpt_neox", "num_attention_heads": 16, "num_hidden_layers": 24,
    "rotary_emb_base": 10000, "rotary_pct": 0.25, "tie_word_embeddings": False, "torch_dtype": "float16",
    "use_cache": True, "use_parallel_residual": True, "vocab_size": 50304,
}
# config.json of microsoft/Phi-3-mini-4k-instruct (auto_map omitted)
PHI3_CONFIG = {
    "architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0,
    "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072, "initializer_range": 0.02,
    "intermediate_size": 8192, "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096, "pad_token_id": 32000,
    "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000.0, "sliding_window": 2047,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 32064,
}
# config.json of google/gemma-2-2b
GEMMA2_CONFIG = {
    "architectures": ["Gemma2ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": 30.0, "head_dim": 256, "hidden_act": "gelu_pytorch_tanh",
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 2304, "initializer_range": 0.02, "intermediate_size": 9216,
    "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 8, "num_hidden_layers": 26,
    "num_key_value_heads": 4, "pad_token_id": 0, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0, "sliding_window": 4096, "torch_dtype": "float32", "use_cache": True, "vocab_size": 256000,
}
# config.json of google/gemma-3-1b-pt
GEMMA3_CONFIG = {
    "architectures": ["Gemma3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "attn_logit_softcapping": None, "bos_token_id": 2, "cache_implementation": "hybrid", "eos_token_id": 1,
    "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152,
    "initializer_range": 0.02, "intermediate_size": 6912, "max_position_embeddings": 32768, "model_type": "gemma3_text",
    "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "pad_token_id": 0,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": None,
    "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "use_cache": True, "vocab_size": 262144,
}
# config.json of Qwen/Qwen3-8B
QWEN3_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 12288, "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
    "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
# config.json of mosaicml/mpt-7b (auto_map and init_config omitted)
MPT_CONFIG = {
    "architectures": ["MPTForCausalLM"], "attn_config": {"alibi": True, "alibi_bias_max": 8, "attn_impl": "torch",
    "attn_pdrop": 0, "attn_type": "multihead_attention", "attn_uses_sequence_id": False, "clip_qkv": None,
    "prefix_lm": False, "qk_ln": False, "softmax_scale": None}, "d_model": 4096, "emb_pdrop": 0,
    "embedding_fraction": 1.0, "expansion_ratio": 4, "init_device": "cpu", "learned_pos_emb": True, "logit_scale": None,
    "max_seq_len": 2048, "model_type": "mpt", "n_heads": 32, "n_layers": 32, "no_bias": True,
    "norm_type": "low_precision_layernorm", "resid_pdrop": 0, "tokenizer_name": "EleutherAI/gpt-neox-20b",
    "torch_dtype": "bfloat16", "use_cache": False, "verbose": 0, "vocab_size": 50432,
}
# config.json of Qwen/Qwen1.5-MoE-A2.7B
QWEN2_MOE_CONFIG = {
    "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "decoder_sparse_step": 1,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21, "model_type": "qwen2_moe",
    "moe_intermediate_size": 1408, "norm_topk_prob": False, "num_attention_heads": 16, "num_experts": 60,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16, "output_router_logits": False,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "shared_expert_intermediate_size": 5632, "sliding_window": 32768, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
# config.json of Qwen/Qwen3-30B-A3B
QWEN3_MOE_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
    "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
}

CASES = [("gpt2", GPT2_CONFIG), ("llama-2-7b", LLAMA_2_7B_CONFIG), ("qwen2.5-7b", QWEN2_5_7B_CONFIG),
         ("mixtral-8x7b", MIXTRAL_CONFIG), ("mistral-7b", MISTRAL_CONFIG), ("pythia-1.4b", PYTHIA_CONFIG),
         ("phi-3-mini-4k", PHI3_CONFIG), ("gemma-2-2b", GEMMA2_CONFIG), ("gemma-3-1b", GEMMA3_CONFIG),
         ("qwen3-8b", QWEN3_CONFIG), ("mpt-7b", MPT_CONFIG), ("qwen1.5-moe-a2.7b", QWEN2_MOE_CONFIG),
         ("qwen3-30b-a3b", QWEN3_MOE_CONFIG)]


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


def test_options_of_the_newer_families():
    # Qwen2/Qwen3 windows only with use_sliding_window, from max_window_layers on (transformers' Qwen2Config)
    windowed = spec_from_config_dict(QWEN3_CONFIG | {"use_sliding_window": True, "sliding_window": 64,
                                                     "max_window_layers": 30})
    assert windowed.sliding_window == 64 and windowed.sliding_layers == tuple(range(30, 36))
    # transformers 5 writes layer_types; a layer list that covers every layer means "all layers"
    listed = spec_from_config_dict(GEMMA2_CONFIG | {"num_hidden_layers": 2, "layer_types": ["sliding_attention"] * 2})
    assert listed.sliding_layers is None and listed.is_sliding(1)
    # null switches soft-capping off; query_pre_attn_scalar != head_dim sets the softmax scale (Gemma 2 27B: 144)
    capless = spec_from_config_dict(GEMMA2_CONFIG | {"attn_logit_softcapping": None, "final_logit_softcapping": None,
                                                     "query_pre_attn_scalar": 144})
    assert (capless.attn_softcap, capless.final_softcap) == (None, None)
    assert capless.attn_scale == pytest.approx(144 ** -0.5)
    # mlp_only_layers / decoder_sparse_step make dense layers of intermediate_size
    sparse = spec_from_config_dict(QWEN2_MOE_CONFIG | {"decoder_sparse_step": 2, "mlp_only_layers": [1]})
    assert set(sparse.dense_layers) == set(range(0, 24, 2)) | {1}
    assert sparse.dense_d_ff == 5632 and sparse.n_moe_layers == 11
    # GPT-NeoX: gelu_fast is the tanh form; rope_parameters as transformers 5 writes them
    neox = spec_from_config_dict(PYTHIA_CONFIG | {"hidden_act": "gelu_fast", "rotary_pct": None, "rotary_emb_base": None,
                                                  "rope_parameters": {"rope_theta": 5e4, "partial_rotary_factor": 0.5}})
    assert (neox.gelu_approximate, neox.rope_theta, neox.partial_rotary_factor) == ("tanh", 5e4, 0.5)
    # MPT-30B's clip_qkv is built; what our model does not reproduce is listed, not hidden
    mpt = spec_from_config_dict(MPT_CONFIG | {"attn_config": MPT_CONFIG["attn_config"] | {"clip_qkv": 6, "qk_ln": True}})
    assert mpt.clip_qkv == 6 and any("qk_ln" in note for note in mpt.approximations)
    scaled = spec_from_config_dict(LLAMA_2_7B_CONFIG | {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}})
    assert scaled.approximations and "llama3" in scaled.approximations[0]
    assert not spec_from_config_dict(LLAMA_2_7B_CONFIG).approximations
    # Gemma 3's scaled global RoPE (transformers 5 layout) is noted once
    gemma3 = spec_from_config_dict(GEMMA3_CONFIG | {"rope_scaling": None, "rope_theta": None, "rope_local_base_freq": None,
                                                    "rope_parameters": {"full_attention": {"rope_theta": 1e6, "rope_type": "linear", "factor": 8.0},
                                                                        "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}})
    assert (gemma3.rope_theta, gemma3.rope_local_theta, len(gemma3.approximations)) == (1e6, 1e4, 1)


def test_errors_of_the_newer_families():
    one_line_error(lambda: spec_from_config_dict(MPT_CONFIG | {"attn_config": {"alibi": False}}), "--model", "alibi")
    one_line_error(lambda: spec_from_config_dict(PYTHIA_CONFIG | {"hidden_act": "relu"}), "'hidden_act'", "gelu")
    one_line_error(lambda: spec_from_config_dict(GEMMA2_CONFIG | {"layer_types": ["full_attention"]}), "'layer_types'")
    one_line_error(lambda: spec_from_config_dict(GEMMA2_CONFIG | {"hidden_activation": 3}), "'hidden_activation'")


def test_planted_layer_lists_are_one_line_errors():
    """A config.json that names its layers is read layer by layer: a billion layers, a zero sparse step or a
    non-list mlp_only_layers is refused in one line, never a hang or a ZeroDivisionError."""
    base = {"model_type": "qwen2_moe", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
            "intermediate_size": 128, "moe_intermediate_size": 32, "vocab_size": 100, "num_experts": 4,
            "num_experts_per_tok": 2}
    for change, words in (({"num_hidden_layers": 10**9}, "num_hidden_layers"), ({"decoder_sparse_step": 0}, "decoder_sparse_step"),
                          ({"mlp_only_layers": "all"}, "mlp_only_layers")):
        with pytest.raises(TrainledgerError, match=words):
            spec_from_config_dict({**base, **change})
