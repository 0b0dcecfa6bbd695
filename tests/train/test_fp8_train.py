"""train --precision fp8-rowwise / fp8-cs through torchao float8 (train/fp8.py): the wiring and the refusals on CPU,
the loss against amp-bf16 on a CUDA GPU with FP8 tensor cores (marked gpu; no GPU was lent when it was written)."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from trainledger.cli import main as cli_main
from trainledger.errors import TrainledgerError
from trainledger.train.fp8 import TORCHAO_RECIPES, check_fp8_training, convert_to_fp8, fp8_module_filter

CUDA = torch.device("cuda")


@pytest.mark.parametrize("precision", ["fp8-rowwise", "fp8-cs"])
def test_train_refuses_fp8_on_cpu_in_one_line(tmp_path, token_file, capsys, precision):
    status = cli_main.main(["train", "--model", "tiny", "--data", str(token_file), "--steps", "2", "--device", "cpu",
                            "--precision", precision, "--out-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert err.startswith(f"error: --precision {precision} needs a CUDA GPU with FP8 tensor cores")
    assert "compute capability >= 8.9" in err and "torchao" in err and "this run is on cpu" in err
    assert not list(tmp_path.glob("checkpoints/step_*"))     # refused before a step was trained


@pytest.mark.parametrize("precision", ["fp8-delayed", "mxfp8"])
def test_train_refuses_transformer_engine_recipes(tmp_path, capsys, precision):
    assert cli_main.main(["train", "--model", "tiny", "--precision", precision, "--out-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Transformer Engine recipe" in err and "fp8-rowwise" in err


def test_a100_is_refused_by_its_compute_capability(monkeypatch):
    """A100 (sm_80) has no FP8 tensor cores: the refusal names the device and its capability."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-80GB")
    with pytest.raises(TrainledgerError, match=r"--precision fp8-rowwise needs .* A100-SXM4-80GB has compute "
                                               r"capability 8\.0"):
        check_fp8_training("fp8-rowwise", CUDA)


def test_hopper_without_torchao_names_the_extra(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    monkeypatch.setitem(sys.modules, "torchao.float8", None)       # import fails as if not installed
    with pytest.raises(TrainledgerError, match=r"needs torchao: pip install 'trainledger\[fp8\]'"):
        check_fp8_training("fp8-rowwise", CUDA)


def test_parallel_layouts_are_refused_and_other_recipes_pass(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    with pytest.raises(TrainledgerError, match="not wired"):
        check_fp8_training("fp8-cs", CUDA, parallel="fsdp")
    check_fp8_training("amp-bf16", torch.device("cpu"))          # not FP8: nothing to check
    assert TORCHAO_RECIPES == {"fp8-rowwise": "rowwise", "fp8-cs": "tensorwise"}


def test_the_head_router_and_unaligned_linears_stay_bf16():
    assert fp8_module_filter(torch.nn.Linear(64, 128), "layers.0.mlp.up")
    assert not fp8_module_filter(torch.nn.Linear(64, 128), "lm_head")
    assert not fp8_module_filter(torch.nn.Linear(64, 8), "layers.0.mlp.router")
    assert not fp8_module_filter(torch.nn.Linear(64, 100), "layers.0.mlp.up")     # torch._scaled_mm needs 16 | dims
    assert not fp8_module_filter(torch.nn.LayerNorm(64), "layers.0.norm")


@pytest.mark.parametrize("precision", ["fp8-rowwise", "fp8-cs"])
def test_conversion_swaps_the_block_linears_for_torchao(precision):
    """On the meta device (no kernels run): every q/k/v/o and MLP Linear becomes torchao's Float8Linear with the
    recipe's scaling; the LM head stays nn.Linear."""
    pytest.importorskip("torchao.float8", reason="torchao is the optional extra trainledger[fp8] (the test extra has it)")
    from trainledger.models import Transformer
    from trainledger.specs import get_model
    with torch.device("meta"):
        model = Transformer(get_model("llama-3-8b"))
    names = convert_to_fp8(model, precision)
    kinds = {fqn: type(m).__name__ for fqn, m in model.named_modules()}
    assert len(names) == 32 * 7 and all(kinds[n] == "Float8Linear" for n in names)
    assert kinds["lm_head"] == "Linear"
    granularity = "axs" if precision == "fp8-rowwise" else "ten"
    assert granularity in repr(model.get_submodule(names[0]))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                    reason="needs a CUDA GPU with FP8 tensor cores (sm_89+); not lent when this was written")
def test_fp8_rowwise_loss_within_2_percent_of_amp_bf16_after_200_steps(tmp_path, token_file, capsys):
    """The quick-start model scaled to where FP8 pays off (d_model 2048, 8 layers, d_ff 5632, seq 1024): the same
    seed and batches in amp-bf16 and fp8-rowwise; the last 20 steps' mean loss within 2 %."""
    pytest.importorskip("torchao.float8")
    config = {"model_type": "llama", "vocab_size": 256, "hidden_size": 2048, "intermediate_size": 5632,
              "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 16,
              "max_position_embeddings": 1024, "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
    (tmp_path / "config.json").write_text(json.dumps(config))
    losses = {}
    for precision in ("amp-bf16", "fp8-rowwise"):
        out = tmp_path / precision
        status = cli_main.main(["train", "--model", str(tmp_path / "config.json"), "--data", str(token_file),
                                "--steps", "200", "--batch-size", "8", "--global-batch-size", "8", "--seq-len", "1024",
                                "--lr", "3e-4", "--precision", precision, "--device", "cuda", "--out-dir", str(out),
                                "--eval-every", "0", "--checkpoint-every", "1000", "--quiet"])
        assert status == 0, capsys.readouterr().err
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        steps = [r for r in records if r.get("loss") is not None and "step" in r]
        losses[precision] = sum(r["loss"] for r in steps[-20:]) / 20
    assert losses["fp8-rowwise"] == pytest.approx(losses["amp-bf16"], rel=0.02)
