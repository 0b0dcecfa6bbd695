"""`trainledger params`: JSON keys and values, the table, and one-line errors with exit status 2."""

import json

import pytest

from trainledger.cli.main import main


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_json_keys_and_values(capsys):
    status, out, err = run(capsys, "params", "--model", "llama-2-7b", "--json")
    assert status == 0 and err == ""
    result = json.loads(out)
    assert result["n_params"] == 6_738_415_616
    assert result["n_params_non_embedding"] == 6_738_415_616 - 2 * 32000 * 4096
    assert result["n_params_active"] == result["n_params"]
    assert sum(result["components"].values()) == result["n_params"]
    assert result["components"]["lm_head"] == 32000 * 4096


def test_moe_active(capsys):
    result = json.loads(run(capsys, "params", "--model", "mixtral-8x7b", "--json")[1])
    assert result["n_params"] == 46_702_792_704
    assert result["n_params_active"] == pytest.approx(12.9e9, rel=0.01)


def test_config_json_path(capsys, tmp_path):
    config = {"model_type": "gpt2", "vocab_size": 50257, "n_embd": 1024, "n_layer": 24, "n_head": 16,
              "n_positions": 1024}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    status, out, _ = run(capsys, "params", "--model", str(path), "--json")
    assert status == 0 and json.loads(out)["n_params"] == 354_823_168  # gpt2-medium, facts.md


def test_table(capsys):
    status, out, _ = run(capsys, "params", "--model", "gpt2")
    assert status == 0
    assert "124,439,808" in out and "token_embedding" in out and "124M" in out


def test_unknown_preset_lists_known_names(capsys):
    status, out, err = run(capsys, "params", "--model", "gpt5")
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and "--model" in err and "llama-3-8b" in err and "gpt2" in err


def test_malformed_config(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", ')
    status, _, err = run(capsys, "params", "--model", str(bad))
    assert status == 2 and err.count("\n") == 1 and "--model" in err and "JSON" in err
    bad.write_text('{"model_type": "t5"}')
    status, _, err = run(capsys, "params", "--model", str(bad))
    assert status == 2 and err.count("\n") == 1 and "t5" in err and "llama" in err


def test_what_the_model_approximates_is_said(capsys, tmp_path):
    """Issue 13: a config feature our Transformer does not reproduce is named in every command's assumptions."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({
        "model_type": "llama", "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "intermediate_size": 512, "max_position_embeddings": 4096, "vocab_size": 1000,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}))
    for command in (["params"], ["flops", "--seq-len", "64"], ["memory", "--seq-len", "64"]):
        status, out, _ = run(capsys, *command, "--model", str(config), "--json")
        assert status == 0
        assert any("approximated: rope_scaling 'llama3'" in line for line in json.loads(out)["assumptions"]), command
    status, out, _ = run(capsys, "params", "--model", "gemma-2-2b", "--json")
    assert json.loads(out)["assumptions"] == []                 # presets are built as published
    status, out, _ = run(capsys, "flops", "--model", "gemma-2-2b", "--seq-len", "8192", "--json")
    assert any("sliding window of 4096 tokens in 13 of 26 layers" in line for line in json.loads(out)["assumptions"])
