"""Issue 31, item 9, models: a config.json edited after training silently changed what `generate`, `export` and
`--resume` loaded; `--init-from` accepted a c_attn tensor of the wrong shape (transformers refuses it) and
ignored `activation_function: relu`; a deeply nested config.json exited 1. Each is now one line, exit 2.

References: the run's own recorded spec hash (model_sha256), transformers' GPT2 shapes (c_attn: d × 3d).
"""

from __future__ import annotations

import json

import pytest
import torch

from gen_helpers import SPECS, make_model
from train_helpers import SMALL, train_in_process
from trainledger.errors import TrainledgerError
from trainledger.models.hf_weights import from_hf, hf_config, to_hf
from trainledger.specs import get_model


def _main(capsys, *args):
    from trainledger.cli.main import main
    capsys.readouterr()
    status = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return status, out, err.strip().splitlines()


def test_a_model_config_edited_after_training_is_refused_everywhere(token_file, tmp_path, capsys):
    config = tmp_path / "model.json"
    config.write_text(json.dumps(hf_config(SPECS["gpt2"], torch.float32)))
    out = tmp_path / "run"
    args = ["--model", config, "--data", token_file, "--steps", 2, "--out-dir", out, *SMALL]
    assert train_in_process(capsys, *args)[0] == 0
    assert _main(capsys, "generate", out, "--prompt-ids", "1,2", "--max-new-tokens", 2)[0] == 0   # untouched: loads
    edited = json.loads(config.read_text())
    edited["n_layer"] = 1                        # the checkpoint's second block would be dropped or refused
    config.write_text(json.dumps(edited))
    for command in (["generate", out, "--prompt-ids", "1,2", "--max-new-tokens", 2], ["export", out, tmp_path / "hf"]):
        status, _, err = _main(capsys, *command)
        assert status == 2 and len(err) == 1 and "has changed since the run was trained" in err[0], (command, err)
    assert not (tmp_path / "hf").exists()
    status, _, err = train_in_process(capsys, *args[:-len(SMALL)], "--steps", 4, "--resume", *SMALL)
    assert status == 2 and err.strip().count("\n") == 0 and "has changed since the checkpoint was written" in err


def test_init_from_refuses_a_c_attn_of_the_wrong_shape():
    spec = SPECS["gpt2"]
    tensors = to_hf(spec, make_model(spec).state_dict())
    d = spec.d_model
    assert tuple(tensors["transformer.h.0.attn.c_attn.weight"].shape) == (d, 3 * d)    # transformers' Conv1D
    from_hf(spec, dict(tensors), "gpt2")                                              # the right shape loads
    for name, bigger in (("weight", torch.zeros(d, 3 * d + 8)), ("bias", torch.zeros(3 * d + 8))):
        wrong = {**tensors, f"transformer.h.0.attn.c_attn.{name}": bigger}
        with pytest.raises(TrainledgerError, match=rf"c_attn.{name}' has shape .* the model needs"):
            from_hf(spec, wrong, "gpt2")


@pytest.mark.parametrize("activation", ["relu", "silu", "tanh"])
def test_a_gpt2_config_with_another_activation_is_refused(activation, tmp_path, capsys):
    config = hf_config(SPECS["gpt2"], torch.float32)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "activation_function": activation}))
    status, _, err = _main(capsys, "params", "--model", path)
    assert status == 2 and len(err) == 1 and f"activation_function '{activation}'" in err[0]
    path.write_text(json.dumps({**config, "activation_function": "gelu_new"}))
    assert get_model(str(path)).d_model == SPECS["gpt2"].d_model


def test_a_deeply_nested_config_is_one_line(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}")
    status, _, err = _main(capsys, "params", "--model", path)
    assert status == 2 and len(err) == 1 and "nests JSON too deeply" in err[0]


@pytest.mark.parametrize("case", ["nested", "relu"])
def test_init_from_a_directory_with_such_a_config_is_one_line(case, tmp_path, capsys):
    from safetensors.torch import save_file
    hf = tmp_path / "hf"
    hf.mkdir()
    save_file(to_hf(SPECS["gpt2"], make_model(SPECS["gpt2"]).state_dict()), hf / "model.safetensors")
    config = {**hf_config(SPECS["gpt2"], torch.float32), "activation_function": "relu"}
    (hf / "config.json").write_text('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}" if case == "nested"
                                    else json.dumps(config))
    status, _, err = train_in_process(capsys, "--init-from", hf, "--steps", 1, "--out-dir", tmp_path / "run", *SMALL)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1, err      # --init-from DIR is also the run's --model, named as such
    assert ("nests JSON too deeply" if case == "nested" else "activation_function 'relu'") in lines[0]
