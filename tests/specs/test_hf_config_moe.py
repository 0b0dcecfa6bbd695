"""config.json of deepseek_v3 and gpt_oss read into the presets (the architecture keys of the published files)."""

import json

import pytest

from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.hf_config import spec_from_config_dict, spec_from_config_file

# The architecture keys of deepseek-ai/DeepSeek-V3's config.json (the same file ships with DeepSeek-R1)
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "first_k_dense_replace": 3,
    "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
    "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
    "rope_theta": 10000, "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": False,
    "topk_group": 4, "v_head_dim": 128, "vocab_size": 129280,
}
# The architecture keys of openai/gpt-oss-120b's config.json
GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True, "head_dim": 64,
    "hidden_size": 2880, "intermediate_size": 2880, "max_position_embeddings": 131072, "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 36, "num_key_value_heads": 8, "num_local_experts": 128,
    "rms_norm_eps": 1e-05, "rope_theta": 150000, "sliding_window": 128, "tie_word_embeddings": False,
    "vocab_size": 201088, "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(36)],
}


@pytest.mark.parametrize("config, preset", [(DEEPSEEK_V3, "deepseek-v3"), (GPT_OSS_120B, "gpt-oss-120b")])
def test_config_json_reads_into_the_preset(tmp_path, config, preset):
    path = tmp_path / preset / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    spec, expected = spec_from_config_file(path), get_model(preset)
    assert spec.with_(name=expected.name, source=expected.source, pretrain_seq_len=expected.pretrain_seq_len,
                      approximations=expected.approximations) == expected


def test_deepseek_without_q_lora_and_with_sparse_layers():
    """DeepSeek-V2-Lite style: q_lora_rank null (a direct query projection); moe_layer_freq 2 makes odd layers dense."""
    spec = spec_from_config_dict(DEEPSEEK_V3 | {"q_lora_rank": None, "moe_layer_freq": 2, "num_hidden_layers": 8,
                                                "first_k_dense_replace": 1})
    assert spec.q_lora_rank is None and spec.dense_layers == (0, 1, 3, 5, 7)


def test_bad_deepseek_keys_are_one_line_errors():
    with pytest.raises(TrainledgerError, match="kv_lora_rank"):
        spec_from_config_dict({k: v for k, v in DEEPSEEK_V3.items() if k != "kv_lora_rank"})
    with pytest.raises(TrainledgerError, match="moe_layer_freq"):
        spec_from_config_dict(DEEPSEEK_V3 | {"moe_layer_freq": 0})


def test_group_limited_routing_is_read_and_checked():
    """n_group / topk_group become expert_groups / expert_groups_per_token (DeepSeek-V3: 8, 4); groups that do not
    divide the experts, or too few per token to hold its top-k, are one-line errors."""
    spec = spec_from_config_dict(DEEPSEEK_V3)
    assert (spec.expert_groups, spec.expert_groups_per_token) == (8, 4)
    for bad in ({"n_group": 3}, {"topk_group": 9}):
        with pytest.raises(TrainledgerError, match="expert_groups"):
            spec_from_config_dict(DEEPSEEK_V3 | bad)
