"""Bad fine-tuning input is one line on stderr naming the flag, exit 2, no traceback (issue 38's and issue 39's
"bad input" done-when), through the real CLI (`trainledger.cli.main.main`, as `trainledger ARGS` runs it).

Issue 38 (accounting: `memory`, `step`, `fit` where the flag applies): --lora-rank 0 or above the layer width, an
unknown --lora-targets role, --quantize with --finetune full, --optimizer-in-backward with gradient accumulation,
bf16 on a GPU without bf16 (T4: the line names fp16). Issue 39 (`train`, `export`): --init-from whose config.json
is another model than --model, a directory without safetensors, `export --adapter` of a run without adapters,
paged-adamw-8bit on CPU, --finetune qlora without torchao (the line names the extra). The train cases fail
before any step runs.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from trainledger.cli.main import main

ACCOUNTING = ["memory", "step", "fit"]


def one_error_line(capsys, argv, flag: str) -> str:
    """Runs `trainledger ARGV`; asserts exit 2 and exactly one stderr line, an error naming `flag`, no traceback."""
    capsys.readouterr()
    status = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert status == 2, err
    assert len(lines) == 1 and err.endswith("\n"), err
    assert lines[0].startswith("error:") and flag in lines[0], err
    assert "Traceback" not in err
    return lines[0]


def _accounting(command: str, *flags) -> list[str]:
    """gpt2 at 1024 tokens, micro-batch 8 on an A100 unless the case gives its own GPU."""
    gpu = [] if "--gpu" in flags else ["--gpu", "a100"]
    return [command, "--model", "gpt2", "--seq-len", "1024", "--batch-size", "8", *gpu, *flags]


# ----- issue 38: memory, step, fit -------------------------------------------------------------------------------
@pytest.mark.parametrize("command", ACCOUNTING)
@pytest.mark.parametrize("flags, flag, says", [
    (["--finetune", "lora", "--lora-rank", "0"], "--lora-rank", "positive integer"),
    (["--finetune", "lora", "--lora-rank", "100000"], "--lora-rank", "d_model = 768"),       # gpt2's width
    (["--finetune", "qlora", "--lora-rank", "769"], "--lora-rank", "d_model = 768"),
    (["--finetune", "lora", "--lora-targets", "q,zz"], "--lora-targets", "'zz'"),
    (["--quantize", "nf4", "--finetune", "full"], "--quantize", "cannot be trained"),
    (["--quantize", "nf4"], "--quantize", "cannot be trained"),                              # full is the default
    (["--gpu", "t4", "--precision", "bf16"], "--precision", "fp16"),
    (["--gpu", "t4", "--precision", "mixed-bf16"], "--precision", "fp16"),
], ids=["rank-0", "rank-above-width", "qlora-rank-above-width", "unknown-target", "quantize-full",
        "quantize-default-full", "bf16-on-t4", "mixed-bf16-on-t4"])
def test_accounting_bad_finetune_input_is_one_line(command, flags, flag, says, capsys):
    assert says in one_error_line(capsys, _accounting(command, *flags), flag)


@pytest.mark.parametrize("argv", [
    _accounting("memory", "--grad-accum", "4", "--optimizer-in-backward"),
    _accounting("step", "--global-batch-size", "64", "--optimizer-in-backward"),              # 64 / (8 × 1) = 8
    _accounting("step", "--global-batch-size", "128", "--dp", "8", "--optimizer-in-backward"),  # 128 / (8 × 8) = 2
], ids=["memory-grad-accum", "step-global-batch", "step-global-batch-over-dp"])
def test_optimizer_in_backward_with_accumulation_is_one_line(argv, capsys):
    """`fit` has no accumulation (it checks one micro-batch), so the case is memory's and step's."""
    assert "micro-batches" in one_error_line(capsys, argv, "--optimizer-in-backward")


def test_the_valid_neighbours_answer(capsys):
    """The boundaries the errors draw: rank = width, one micro-batch per GPU, fp16 on a T4 all answer."""
    for argv in [_accounting("memory", "--finetune", "lora", "--lora-rank", "768"),
                 _accounting("step", "--global-batch-size", "64", "--dp", "8", "--optimizer-in-backward"),
                 _accounting("memory", "--gpu", "t4", "--precision", "mixed-fp16"),
                 _accounting("fit", "--finetune", "qlora", "--lora-targets", "all-linear")]:
        capsys.readouterr()
        assert main(argv) == 0, capsys.readouterr().err


# ----- issue 39: train and export --------------------------------------------------------------------------------
FAST = ["--steps", "1", "--seq-len", "16", "--batch-size", "4", "--eval-every", "0", "--no-plot", "--quiet",
        "--device", "cpu", "--threads", "1"]


@pytest.fixture(scope="module")
def token_file(tmp_path_factory):
    """Byte tokens of a few KB of text (the vocabulary of the `tiny` preset and of the base below: 256)."""
    from trainledger.data import write_tokens
    text = (" ".join(f"line {i} of a small corpus." for i in range(400))).encode()
    path = tmp_path_factory.mktemp("data") / "small.tokens"
    write_tokens(path, np.frombuffer(text, dtype=np.uint8), dtype="uint8")
    return path


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A byte-level Llama saved by transformers (config.json + model.safetensors)."""
    transformers = pytest.importorskip("transformers")
    import torch
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
    directory = tmp_path_factory.mktemp("llama")
    transformers.LlamaForCausalLM(config).save_pretrained(directory, safe_serialization=True)
    return directory


def _train(token_file, out, *flags) -> list:
    return ["train", "--data", token_file, "--out-dir", out, *FAST, *flags]


def test_init_from_another_model_than_model(token_file, llama_dir, tmp_path, capsys):
    argv = _train(token_file, tmp_path / "run", "--init-from", llama_dir, "--model", "tiny", "--finetune", "lora")
    assert "--model 'tiny'" in one_error_line(capsys, argv, "--init-from")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("finetune", ["lora", "qlora", "full"])
def test_init_from_a_directory_without_safetensors(finetune, token_file, llama_dir, tmp_path, capsys):
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text((llama_dir / "config.json").read_text())
    argv = _train(token_file, tmp_path / "run", "--init-from", bare, "--finetune", finetune)
    assert "safetensors" in one_error_line(capsys, argv, "--init-from")


def test_paged_adamw_8bit_on_cpu(token_file, tmp_path, capsys):
    argv = _train(token_file, tmp_path / "run", "--optimizer", "paged-adamw-8bit")
    assert "CUDA" in one_error_line(capsys, argv, "--optimizer paged-adamw-8bit")
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def test_export_adapter_of_a_run_without_adapters(token_file, tmp_path, capsys, one_torch_thread):
    capsys.readouterr()
    assert main([str(a) for a in _train(token_file, tmp_path / "full")]) == 0, capsys.readouterr().err
    line = one_error_line(capsys, ["export", str(tmp_path / "full"), "--adapter", str(tmp_path / "out")], "--adapter")
    assert "adapters" in line
    assert not (tmp_path / "out" / "adapter_model.safetensors").exists()


@pytest.mark.parametrize("flags, needed_by", [
    (["--finetune", "qlora"], "--finetune qlora"),
    (["--finetune", "lora", "--quantize", "nf4-dq"], "--quantize"),
    (["--optimizer", "adamw-8bit"], "--optimizer adamw-8bit"),
], ids=["qlora", "lora-nf4-dq", "adamw-8bit"])
def test_torchao_missing_names_the_extra(flags, needed_by, token_file, tmp_path, capsys, monkeypatch):
    """torchao imported as absent (a None entry in sys.modules makes `import torchao...` raise ImportError, as
    models/quantize.torchao_module catches it): the line names the flag and `pip install 'trainledger[finetune]'`."""
    for name in [m for m in sys.modules if m == "torchao" or m.startswith("torchao.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "torchao", None)
    line = one_error_line(capsys, _train(token_file, tmp_path / "run", *flags), needed_by)
    assert "pip install 'trainledger[finetune]'" in line
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("flags, flag", [
    (["--finetune", "lora", "--lora-rank", "100000"], "--lora-rank"),       # the tiny preset's width is 128
    (["--finetune", "lora", "--lora-targets", "q,zz"], "--lora-targets"),
    (["--quantize", "nf4-dq"], "--quantize"),                                # --finetune full: nothing to adapt
    (["--optimizer-in-backward", "--grad-accum", "2"], "--optimizer-in-backward"),
], ids=["rank-above-width", "unknown-target", "quantize-full", "in-backward-grad-accum"])
def test_train_refuses_issue_38_cases_before_a_step(flags, flag, token_file, tmp_path, capsys):
    one_error_line(capsys, _train(token_file, tmp_path / "run", *flags), flag)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


@pytest.mark.parametrize("argv", [
    ["memory", "--model", "gpt2", "--gpu", "t4", "--precision", "bf16"],
    ["train", "--optimizer", "paged-adamw-8bit", "--device", "cpu", "--steps", "1", "--quiet"],
], ids=["memory-bf16-t4", "train-paged-on-cpu"])
def test_the_installed_entry_point_prints_only_the_line(argv, tmp_path):
    """As a user runs it (a fresh interpreter): nothing torch or torchao says on import reaches stderr."""
    import os
    import subprocess
    out_dir = ["--out-dir", str(tmp_path / "run")] if argv[0] == "train" else []
    result = subprocess.run([sys.executable, "-m", "trainledger.cli.main", *argv, *out_dir], capture_output=True,
                            text=True, timeout=120, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert not (tmp_path / "run").exists()
