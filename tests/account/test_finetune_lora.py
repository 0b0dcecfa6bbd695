"""LoRA counts (account/finetune) equal PEFT's: peft.get_peft_model on transformers' model built on the meta device
from the same config.json, LoraConfig(r, target_modules=targets.peft_target_modules(...)), then
get_nb_trainable_parameters(). Also the shared reference's Llama 2 7B figure and the one-line errors."""

import warnings

import pytest

from trainledger.account.counting.params import n_params
from trainledger.account.finetune.lora import (check_lora_rank, lora_breakdown, lora_frozen_params,
                                               lora_trainable_params)
from trainledger.account.finetune.targets import parse_lora_targets, peft_target_modules, projections
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.hf_config import spec_from_config_dict

# config.json files (the keys that shape parameters; token ids, dropout and dtype omitted), one per family
CONFIGS = {
    # meta-llama/Llama-2-7b-hf
    "llama": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_attention_heads": 32,
              "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
              "rms_norm_eps": 1e-05, "tie_word_embeddings": False},
    # Qwen/Qwen2.5-7B (GQA with 4 KV heads, q/k/v biases)
    "qwen2": {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
              "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
              "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "tie_word_embeddings": False, "use_sliding_window": False},
    # openai-community/gpt2 (Conv1D c_attn fused q, k, v)
    "gpt2": {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024, "vocab_size": 50257},
    # EleutherAI/pythia-1.4b (fused query_key_value)
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 16,
                 "num_hidden_layers": 24, "vocab_size": 50304, "max_position_embeddings": 2048, "rotary_pct": 0.25,
                 "use_parallel_residual": True, "tie_word_embeddings": False},
    # microsoft/phi-2
    "phi": {"model_type": "phi", "hidden_size": 2560, "intermediate_size": 10240, "num_attention_heads": 32,
            "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 51200, "partial_rotary_factor": 0.4,
            "max_position_embeddings": 2048, "tie_word_embeddings": False},
    # tiiuae/falcon-7b (fused multi-query query_key_value: 71 query heads, one K and one V head)
    "falcon": {"model_type": "falcon", "hidden_size": 4544, "num_attention_heads": 71, "num_hidden_layers": 32,
               "multi_query": True, "new_decoder_architecture": False, "parallel_attn": True, "bias": False,
               "alibi": False, "vocab_size": 65024},
    # tiiuae/falcon-40b (fused grouped query_key_value: 128 query heads in 8 KV groups)
    "falcon_gqa": {"model_type": "falcon", "hidden_size": 8192, "num_attention_heads": 128, "num_hidden_layers": 60,
                   "num_kv_heads": 8, "multi_query": True, "new_decoder_architecture": True, "parallel_attn": True,
                   "bias": False, "alibi": False, "vocab_size": 65024},
    # microsoft/Phi-3-mini-4k-instruct (fused qkv_proj and gate_up_proj)
    "phi3": {"model_type": "phi3", "hidden_size": 3072, "intermediate_size": 8192, "num_attention_heads": 32,
             "num_hidden_layers": 32, "num_key_value_heads": 32, "vocab_size": 32064, "max_position_embeddings": 4096,
             "sliding_window": 2047, "pad_token_id": 32000, "tie_word_embeddings": False},
    # mosaicml/mpt-7b (fused Wqkv)
    "mpt": {"model_type": "mpt", "d_model": 4096, "n_heads": 32, "n_layers": 32, "expansion_ratio": 4,
            "max_seq_len": 2048, "vocab_size": 50432, "no_bias": True},
    # google/gemma-2-2b (tied head, d_head 256)
    "gemma2": {"model_type": "gemma2", "hidden_size": 2304, "intermediate_size": 9216, "num_attention_heads": 8,
               "num_hidden_layers": 26, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 256000,
               "max_position_embeddings": 8192, "query_pre_attn_scalar": 256, "sliding_window": 4096},
}
FUSED = {"gpt2", "gpt_neox", "falcon", "falcon_gqa", "phi3", "mpt"}
TARGETS = ["q,v", "all-linear", "q,k,v,o,gate,up,down", "k,o,down", "v,head"]


def peft_counts(config: dict, rank: int, target_modules) -> tuple[int, int]:
    """(trainable, all) of PEFT's LoRA on transformers' model of `config` built on the meta device."""
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    import torch

    fields = {k: v for k, v in config.items() if k != "model_type"}
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(config["model_type"], **fields))
        wrapped = peft.get_peft_model(model, peft.LoraConfig(r=rank, target_modules=target_modules))
    return wrapped.get_nb_trainable_parameters()


@pytest.mark.parametrize("family, targets", [(f, t) for f in CONFIGS for t in TARGETS], ids=str)
def test_trainable_count_equals_peft(family, targets):
    config = CONFIGS[family]
    spec = spec_from_config_dict(config, name=family)
    rank = 16 if targets == "q,v" else 8
    modules = peft_target_modules(spec, targets)
    trainable, everything = peft_counts(config, rank, modules)
    assert lora_trainable_params(spec, rank, targets, fused="whole") == trainable
    assert lora_frozen_params(spec) == everything - trainable == n_params(spec)
    parts = lora_trainable_params(spec, rank, targets)
    if family in FUSED and targets in ("q,v", "k,o,down", "v,head"):
        assert parts < trainable           # the chosen parts only: fewer B rows than PEFT's whole fused module
    else:
        assert parts == trainable


@pytest.mark.parametrize("family", CONFIGS)
def test_all_linear_is_peft_all_linear(family):
    """PEFT's own "all-linear" shorthand adapts exactly the modules peft_target_modules lists for it."""
    config = CONFIGS[family]
    spec = spec_from_config_dict(config, name=family)
    trainable, _ = peft_counts(config, 4, "all-linear")
    assert trainable == peft_counts(config, 4, peft_target_modules(spec, "all-linear"))[0]
    assert trainable == lora_trainable_params(spec, 4, "all-linear", fused="whole")


def test_llama_2_7b_q_v_rank_8_is_the_reference_figure():
    """shared/reference/finetune.md (Hu et al. 2021, arXiv:2106.09685): 32 · 2 · 8 · (4096 + 4096) = 4,194,304."""
    assert lora_trainable_params(get_model("llama-2-7b"), 8, "q,v") == 32 * 2 * 8 * (4096 + 4096) == 4_194_304


def test_fused_parts_count_the_chosen_rows_only():
    """Falcon-7B's query_key_value: 4544 -> 4544 (71 q heads) + 64 (k) + 64 (v). "q,v" on the chosen parts: one A of
    r x 4544, B of (4544 + 64) x r; PEFT adapts the whole module: B of 4672 x r."""
    spec = spec_from_config_dict(CONFIGS["falcon"])
    r = 8
    assert lora_trainable_params(spec, r, "q,v") == 32 * r * (4544 + 4544 + 64)
    assert lora_trainable_params(spec, r, "q,v", fused="whole") == 32 * r * (4544 + 4672)
    rows = {row["module"]: row for row in lora_breakdown(spec, r, "q,v")}
    assert rows["query_key_value"]["adapted_rows"] == 4608 and rows["query_key_value"]["out_features"] == 4672
    neox = get_model("pythia-1.4b")      # GPT-NeoX's fused query_key_value: 3 · 2048 rows
    assert lora_trainable_params(neox, r, "k") == 24 * r * (2048 + 2048)
    assert lora_trainable_params(neox, r, "k", fused="whole") == 24 * r * (2048 + 3 * 2048)


def test_targets_and_modules_per_family():
    assert peft_target_modules(get_model("gpt2"), "o,down") == ["attn.c_proj", "mlp.c_proj"]
    assert peft_target_modules(get_model("gpt2"), "q,k,v,o,gate,up,down") == ["attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                                              "mlp.c_proj"]
    assert peft_target_modules(get_model("phi-3-mini"), "up") == ["gate_up_proj"]
    assert peft_target_modules(get_model("llama-3.1-8b"), "all-linear") == [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    assert peft_target_modules(get_model("mixtral-8x7b"), "q,k,v,o") == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert peft_target_modules(get_model("tiny"), "q,up") == ["q_proj", "mlp.up"]     # trainledger's own Transformer
    assert parse_lora_targets(" V , q ") == ("q", "v") and parse_lora_targets(["head"]) == ("head",)
    assert parse_lora_targets("all-linear") == ("q", "k", "v", "o", "gate", "up", "down")
    # every projection of a dense family adds up to its weight matrices (account.counting.params)
    spec = get_model("llama-3.1-8b")
    matrices = sum(p.count * p.in_features * p.out_features for p in projections(spec))
    assert matrices == n_params(spec) - spec.vocab_size * spec.d_model - (2 * spec.n_layers + 1) * spec.d_model


@pytest.mark.parametrize("call, match", [
    (lambda: lora_trainable_params(get_model("llama-2-7b"), 0, "q,v"), "--lora-rank must be a positive integer"),
    (lambda: lora_trainable_params(get_model("llama-2-7b"), 8.0, "q,v"), "--lora-rank must be a positive integer"),
    (lambda: check_lora_rank(get_model("llama-2-7b"), 4097, "q,v"), "--lora-rank 4097 is above the width 4096"),
    (lambda: check_lora_rank(spec_from_config_dict(CONFIGS["falcon"]), 65, "k"),
     "above the width 64"),
    (lambda: parse_lora_targets("q,x"), "--lora-targets must be role names"),
    (lambda: parse_lora_targets(""), "--lora-targets must be role names"),
    (lambda: parse_lora_targets("all-linear,head"), "stands alone"),
    (lambda: peft_target_modules(get_model("gpt2"), "gate"), "no such module"),
    (lambda: peft_target_modules(get_model("mixtral-8x7b"), "q,up"), "mixture of experts"),
    (lambda: peft_target_modules(get_model("tiny"), "head"), "no such module"),
    (lambda: peft_target_modules(get_model("deepseek-v3"), "q"), "no LoRA role mapping"),
    (lambda: lora_trainable_params(get_model("gpt2"), 8, "q", fused="some"), "fused must be one of"),
])
def test_bad_input_is_one_line_naming_the_flag(call, match):
    with pytest.raises(TrainledgerError, match=match) as error:
        call()
    assert "\n" not in str(error.value)
