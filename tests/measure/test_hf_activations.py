"""--impl hf: account/memory/hf_activations.py against transformers' own models, one small config per family.

Each case runs one real CPU training step of AutoModelForCausalLM.from_config (transformers 5.x) through
measure.compare.measure_hf and checks the issue's bar: activations within 3 %, train FLOPs within 1 %,
parameters exact, and `memory --impl hf` equal to the prediction. The rules themselves are pure Python and
are also checked by hand below (no torch, no transformers).
"""

import json

import pytest

from trainledger.account.memory.hf_activations import HfImpl, default_attn_impl, hf_activations_bytes
from trainledger.errors import TrainledgerError
from trainledger.specs.hf_config import hf_run_fields, spec_from_config_dict

B, T = 2, 32
_LLAMA = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)
_GPT2 = dict(model_type="gpt2", vocab_size=128, n_embd=64, n_layer=2, n_head=4, n_positions=64)
_NO_DROP = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
CONFIGS = {
    "gpt2": {**_GPT2, **_NO_DROP},
    "gpt2-dropout": {**_GPT2, "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1},
    "llama": {"model_type": "llama", **_LLAMA},
    "qwen2": {"model_type": "qwen2", **_LLAMA},
    "mixtral": {"model_type": "mixtral", **_LLAMA, "num_local_experts": 4, "num_experts_per_tok": 2},
    "gpt_neox": dict(model_type="gpt_neox", vocab_size=128, hidden_size=64, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=4, max_position_embeddings=64),
    "phi3": {"model_type": "phi3", **_LLAMA, "pad_token_id": 0},
    "gemma2": {"model_type": "gemma2", **_LLAMA, "head_dim": 16, "sliding_window": 16, "query_pre_attn_scalar": 16},
    "qwen3": {"model_type": "qwen3", **_LLAMA, "head_dim": 16},
    "mpt": dict(model_type="mpt", vocab_size=128, d_model=64, n_heads=4, n_layers=2, max_seq_len=64),
    # beyond the list: each exercises one more rule
    "mistral-window": {"model_type": "mistral", **_LLAMA, "sliding_window": 16},        # SDPA mask per layer
    "gemma3": {"model_type": "gemma3_text", **_LLAMA, "head_dim": 16, "sliding_window": 16, "query_pre_attn_scalar": 16},
    "llama-dropout": {"model_type": "llama", **_LLAMA, "attention_dropout": 0.1},       # SDPA's math path
    "neox-dropout": dict(model_type="gpt_neox", vocab_size=128, hidden_size=64, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64, hidden_dropout=0.1,
                         attention_dropout=0.1),
    "phi3-no-cache": {"model_type": "phi3", **_LLAMA, "pad_token_id": 0, "use_cache": False},
    "gpt2-no-cache": {**_GPT2, **_NO_DROP, "use_cache": False},
    "qwen2_moe": {"model_type": "qwen2_moe", **_LLAMA, "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64},
    "qwen3_moe": {"model_type": "qwen3_moe", **_LLAMA, "head_dim": 16, "num_experts": 4, "num_experts_per_tok": 2,
                  "moe_intermediate_size": 32},
}
# the "Done when" list: (config, --attn-impl, --precision)
CASES = [("gpt2", "sdpa", "fp32"), ("gpt2", "eager", "amp-bf16"), ("gpt2-dropout", None, "fp32"),
         ("llama", "sdpa", "fp32"), ("llama", "eager", "amp-bf16"), ("qwen2", None, "bf16"), ("mixtral", None, "fp32"),
         ("gpt_neox", None, "fp32"), ("phi3", None, "fp32"), ("gemma2", "eager", "fp32"), ("qwen3", None, "amp-bf16"),
         ("mpt", "eager", "fp32"),
         # the other recipes: mixed precision with fp32 masters, 16-bit eager
         ("llama", "eager", "mixed-bf16"), ("gpt2", "sdpa", "mixed-fp16"), ("gpt2", "eager", "bf16"),
         ("mistral-window", None, "amp-bf16"), ("gemma3", None, "fp32"), ("llama-dropout", None, "bf16"),
         ("neox-dropout", "eager", "amp-bf16"), ("phi3-no-cache", None, "fp32"), ("gpt2-no-cache", "sdpa", "fp32"),
         ("qwen2_moe", None, "fp32"), ("qwen3_moe", "eager", "amp-bf16"), ("mixtral", None, "amp-bf16")]


def _impl(name, attn=None):
    config = CONFIGS[name]
    return HfImpl(attn_impl=attn or default_attn_impl(config["model_type"]), **hf_run_fields(config))


def test_gelu_new_and_kv_cache_by_hand():
    """GPT-2, fp32, SDPA, no dropout: ours + labels (N int64) + per layer 3·N·d_ff (gelu_new) + 2·N·d (k, v cache copies)."""
    spec = spec_from_config_dict(CONFIGS["gpt2"])
    parts = hf_activations_bytes(spec, _impl("gpt2"), B, T, precision="fp32")
    n = B * T
    assert parts["total"] == parts["trainledger"] + n * 8 + 2 * (3 * n * 256 * 4 + 2 * n * 64 * 4)


def test_eager_attention_by_hand():
    """Llama eager fp32 replaces SDPA's q, k, v (Hkv heads), logsumexp by q, repeat_kv copies and the fp32 softmax."""
    spec = spec_from_config_dict(CONFIGS["llama"])
    eager = hf_activations_bytes(spec, _impl("llama", "eager"), B, T, precision="fp32")["total"]
    sdpa = hf_activations_bytes(spec, _impl("llama", "sdpa"), B, T, precision="fp32")["total"]
    n, h, hkv, dh = B * T, 4, 2, 16
    per_layer = (2 * n * (h - hkv) * dh + B * h * T * T - B * h * T) * 4
    assert eager - sdpa == 2 * per_layer


def test_dropout_and_defaults_read_from_config():
    assert hf_run_fields({**_GPT2})["attn_dropout"] == 0.1          # GPT2Config's defaults: 0.1 everywhere
    assert hf_run_fields(CONFIGS["gpt2"])["resid_dropout"] == 0.0
    assert hf_run_fields({**CONFIGS["llama"], "use_cache": False})["use_cache"] is False
    assert default_attn_impl("gemma2") == "eager" and default_attn_impl("mpt") == "eager"
    assert default_attn_impl("llama") == "sdpa"
    with pytest.raises(TrainledgerError, match="--attn-impl sdpa"):
        _impl("mpt", "sdpa")
    with pytest.raises(TrainledgerError, match="attn_pdrop"):
        hf_run_fields({**_GPT2, "attn_pdrop": 1.5})


@pytest.mark.parametrize("name,attn,precision", CASES, ids=[f"{n}-{a or 'default'}-{p}" for n, a, p in CASES])
def test_prediction_matches_transformers(one_torch_thread, tmp_path, capsys, name, attn, precision):
    pytest.importorskip("transformers", reason="--impl hf measures transformers' models (CI installs it)")
    from trainledger.cli.main import main
    from trainledger.measure.compare import measure_hf
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS[name]))
    spec = spec_from_config_dict(CONFIGS[name])
    result = measure_hf(str(path), spec, B, T, precision=precision, device="cpu", attn_impl=attn)
    error = result["relative_error"]
    # the default attention is the one transformers picks, and the one predicted is the one that ran
    assert result["settings"]["attn_impl"] == (attn or default_attn_impl(CONFIGS[name]["model_type"]))
    assert result["details"]["transformers_attn_impl"] == result["settings"]["attn_impl"]
    assert abs(error["activations_bytes"]) < 0.03, result["predicted"]["activations_bytes"]
    assert abs(error["train_flops_per_step"]) < 0.01
    assert result["predicted"]["n_params"] == result["measured"]["n_params"]
    # `memory --impl hf` gives the prediction's activations and model states
    argv = ["memory", "--model", str(path), "--impl", "hf", "--batch-size", str(B), "--seq-len", str(T),
            "--precision", precision, "--json"] + (["--attn-impl", attn] if attn else [])
    assert main(argv) == 0
    memory = json.loads(capsys.readouterr().out)
    for key in ("activations_bytes", "params_bytes", "grads_bytes", "master_params_bytes", "optimizer_bytes"):
        assert memory[key] == result["predicted"][key]


@pytest.mark.parametrize("name", ["mixtral", "gpt2-dropout"])
def test_fake_tensors(one_torch_thread, tmp_path, name):
    """The default device: transformers' model on FakeTensorMode (MoE through grouped_mm included)."""
    pytest.importorskip("transformers", reason="--impl hf measures transformers' models (CI installs it)")
    from trainledger.measure.compare import measure_hf
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS[name]))
    result = measure_hf(str(path), spec_from_config_dict(CONFIGS[name]), B, T, precision="fp32", device="fake")
    error = result["relative_error"]
    assert error["train_flops_per_step"] == 0 and error["n_params"] == 0
    assert abs(error["activations_bytes"]) < 0.03


def test_default_attention_is_what_transformers_picks():
    """default_attn_impl against transformers itself: each config built on the meta device without attn_implementation."""
    transformers = pytest.importorskip("transformers", reason="compares with transformers' own choice")
    import torch
    for name, config in CONFIGS.items():
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config))
        assert model.config._attn_implementation == default_attn_impl(config["model_type"]), name
