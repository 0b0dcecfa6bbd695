"""Issue 40, item 3 and item 6: sizes of a config checked against bounds before any work, values in their ranges.

`step` never ended on a config with vocab_size 1e15 or a width of 1e12 (account/time's optimizer kernels loop
chunk by chunk), `params` answered 2.55e21 parameters without a word, `flops` on 100,000 layers took 43 s, a
config with rms_norm_eps NaN or rope_theta -inf trained into NaN at step 1 and blamed the learning rate.

References: the bounds of specs/bounds.py against the published figures its table cites (presets), the exact
parameter count of account/counting/params.py, the wall clock of each refused command (under 5 s).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainledger.account.counting.params import param_counts
from trainledger.cli.main import main
from trainledger.errors import TrainledgerError
from trainledger.specs import PRESETS, bounds, get_model
from trainledger.specs.hf_config import spec_from_config_dict

LLAMA = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 256, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 512, "max_position_embeddings": 2048}
GPT_OSS = {"model_type": "gpt_oss", "vocab_size": 32000, "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "intermediate_size": 64,
           "max_position_embeddings": 2048, "num_local_experts": 8, "num_experts_per_tok": 2}


def _refused(capsys, tmp_path, config: dict, *argv, words: str = "") -> str:
    """Runs `argv` on `config` written as a file: exit 2, one line naming --model, under 5 s, the file unchanged."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    before = path.read_bytes()
    capsys.readouterr()
    started = time.monotonic()
    status = main([*argv, "--model", str(path)])
    seconds = time.monotonic() - started
    out, err = capsys.readouterr()
    assert status == 2 and out == "" and err.count("\n") == 1 and "--model" in err, err
    assert seconds < 5, f"{argv} took {seconds:.1f} s"
    assert words in err, err
    assert path.read_bytes() == before
    return err


@pytest.mark.parametrize("key,value,field", [
    ("vocab_size", 10**15, "vocab_size"),
    ("hidden_size", 10**12, "d_model"),
    ("intermediate_size", 10**12, "d_ff"),
    ("num_attention_heads", 10**12, "n_heads"),
    ("num_hidden_layers", 100_000, "n_layers"),
    ("max_position_embeddings", 10**12, "max_seq_len"),
])
@pytest.mark.parametrize("command", [["step", "--gpu", "h100"], ["params"], ["flops"], ["memory"],
                                     ["layout", "--gpu", "h100", "--num-gpus", "8"]])
def test_a_size_beyond_its_bound_is_refused_at_once(capsys, tmp_path, key, value, field, command):
    config = {**LLAMA, key: value}
    if key == "num_attention_heads":
        config["head_dim"] = 64                  # heads need not divide the width when the head size is given
    err = _refused(capsys, tmp_path, config, *command)
    assert "beyond trainledger's bound" in err and "docs/specs.md" in err


@pytest.mark.parametrize("experts,layers", [(10**12, 2), (65_536, 2_000)])
def test_experts_beyond_their_bound_are_refused_before_any_tensor_is_listed(capsys, tmp_path, experts, layers):
    """The issue's gpt_oss config (65,536 experts × 2,000 layers) listed ~400M tensors in `step`; 1e12 experts grew
    memory without bound."""
    config = {**GPT_OSS, "num_local_experts": experts, "num_hidden_layers": layers}
    err = _refused(capsys, tmp_path, config, "step", "--gpu", "h100")
    assert "bound" in err and ("n_experts" in err or "experts in each of" in err)


def test_parameters_beyond_their_bound_are_refused_even_when_each_size_is_within_its_own(capsys, tmp_path):
    """Every size within its bound, their product ~2e21 parameters (`params` answered 2.55e21 without a word)."""
    config = {**GPT_OSS, "hidden_size": bounds.MAX_WIDTH // 4, "intermediate_size": bounds.MAX_WIDTH,
              "num_hidden_layers": 64, "num_local_experts": 65_536, "num_attention_heads": 64, "head_dim": 64}
    spec_fields = {"d_model": config["hidden_size"], "d_ff": config["intermediate_size"]}
    assert all(value <= bounds.MAX_WIDTH for value in spec_fields.values())
    err = _refused(capsys, tmp_path, config, "params")
    assert "parameters, beyond trainledger's bound" in err and "2^49" in err


def test_every_preset_is_within_the_bounds_and_the_bounds_are_100x_the_presets():
    transformers = [spec for spec in PRESETS.values() if spec.kind == "transformer"]
    for spec in transformers:
        assert bounds.check_bounds(spec) is spec
    for field, (bound, _) in bounds.FIELD_BOUNDS.items():
        largest = max(getattr(spec, field) or 0 for spec in transformers)
        assert bound >= 100 * largest, field
    assert bounds.MAX_PARAMS >= 100 * max(param_counts(spec)["n_params"] for spec in transformers)
    assert bounds.MAX_EXPERT_LAYERS >= 100 * max(s.n_experts * s.n_moe_layers for s in transformers if s.is_moe)


@pytest.mark.parametrize("name", [n for n, s in PRESETS.items() if s.kind == "transformer"])
def test_the_parameter_estimate_is_within_a_third_of_the_exact_count(name):
    spec = PRESETS[name]
    exact = param_counts(spec)["n_params"]
    assert 0.999 * exact <= bounds.params_estimate(spec) <= 1.32 * exact


def test_a_model_at_the_layer_bound_answers_in_seconds(capsys, tmp_path):
    """16,384 named layers (a Gemma 3 config lists each layer's attention kind): `step` took 80 s, each of its
    ~900 layer_groups() calls testing tuple membership per layer; now the groups are computed once."""
    config = {"model_type": "gemma3_text", "vocab_size": 32000, "hidden_size": 256, "head_dim": 64,
              "num_hidden_layers": bounds.MAX_LAYERS, "num_attention_heads": 4, "intermediate_size": 512,
              "max_position_embeddings": 2048}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    started = time.monotonic()
    assert main(["step", "--model", str(path), "--gpu", "h100", "--json"]) == 0
    assert time.monotonic() - started < 5
    spec = get_model(str(path))
    assert sum(count for _, count in spec.layer_groups()) == bounds.MAX_LAYERS
    assert spec.layer_groups() is not spec.layer_groups()        # a copy: callers cannot change the cache


@pytest.mark.parametrize("changes,words", [
    ({"rms_norm_eps": float("nan")}, "norm_eps"),
    ({"rms_norm_eps": -1.0}, "norm_eps"),
    ({"rms_norm_eps": 0.0}, "norm_eps"),
    ({"rope_theta": float("-inf")}, "rope_theta"),
    ({"rope_theta": float("inf")}, "rope_theta"),
    ({"rope_theta": 0.5}, "rope_theta"),
    ({"attention_dropout": 1.5}, "dropout"),
    ({"attention_dropout": float("nan")}, "dropout"),
    ({"partial_rotary_factor": float("nan")}, "partial_rotary_factor"),
])
def test_values_outside_their_range_are_one_line(capsys, tmp_path, changes, words):
    _refused(capsys, tmp_path, {**LLAMA, **changes}, "params", words=words)


def test_nan_and_infinity_literals_in_a_config_json_are_refused(capsys, tmp_path):
    """json.loads reads NaN and -Infinity: the file as written by hand."""
    path = tmp_path / "config.json"
    text = json.dumps(LLAMA)[:-1] + ', "rms_norm_eps": NaN, "rope_theta": -Infinity}'
    path.write_text(text)
    assert main(["params", "--model", str(path)]) == 2
    assert "norm_eps" in capsys.readouterr().err


@pytest.mark.parametrize("config,words", [
    ({"model_type": "qwen3_moe", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4,
      "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "intermediate_size": 128,
      "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 512,
      "mlp_only_layers": [1, 7]}, "mlp_only_layers' names layer 7"),
    ({"model_type": "qwen3_moe", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4,
      "num_attention_heads": 4, "num_key_value_heads": 4, "head_dim": 16, "intermediate_size": 128,
      "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2, "max_position_embeddings": 512,
      "mlp_only_layers": [-1]}, "mlp_only_layers' names layer -1"),
])
def test_layer_indices_outside_the_model_are_refused(capsys, tmp_path, config, words):
    _refused(capsys, tmp_path, config, "params", words=words)


def test_config_dicts_are_bounded_too():
    with pytest.raises(TrainledgerError, match="beyond trainledger's bound"):
        spec_from_config_dict({**LLAMA, "vocab_size": bounds.MAX_VOCAB + 1})
    assert spec_from_config_dict({**LLAMA, "vocab_size": bounds.MAX_VOCAB}).vocab_size == bounds.MAX_VOCAB


def test_bounds_need_no_torch():
    code = "import sys, trainledger.specs.bounds; assert 'torch' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(Path(bounds.__file__).parents[2])},
                          capture_output=True).returncode == 0
