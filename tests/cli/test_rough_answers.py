"""Small wrong or rough answers a new user met (issue 31, item 5), each reproduced: help examples that name a
preset that does not exist, "(default None; ...)", a deadline that needs billions of GPUs without a word, `infer
--gpu cpu` without a bf16 peak, no "did you mean", "1 threads", a tokenize output folder that is not made, the
tokenizer library's blank progress lines, and outputs written mode 0600."""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path

import pytest

from trainledger.cli import main as cli_main
from trainledger.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def commands() -> list[str]:
    parser = cli_main.build_parser()
    action = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sorted(action.choices)


def help_text(command: str, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("command", commands())
def test_help_examples_name_models_that_exist(command, capsys):
    """Every `--model X` in a command's help is a preset or a file in the repository (profile's example named
    llama-3.2-1b, which is neither)."""
    from trainledger.specs import get_model
    examples = [line for line in help_text(command, capsys).splitlines() if re.match(r"\s*(trainledger|torchrun) ", line)]
    names = [name for line in examples for name in re.findall(r"--model[ =]([^\s]+)", line)]
    for name in names:
        if name.endswith(".json") or "/" in name:
            continue                                                  # a path the user supplies
        get_model(name)                                               # raises for an unknown preset


@pytest.mark.parametrize("command", commands())
def test_no_help_says_default_none(command, capsys):
    text = " ".join(help_text(command, capsys).split())
    assert "default None" not in text and "default: None" not in text


def test_profile_precision_help_names_its_run_time_default(capsys):
    text = " ".join(help_text("profile", capsys).split())
    assert "(default: fp32 on CPU, amp-bf16 on CUDA;" in text


def run_json(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_deadline_no_cluster_meets_is_warned_about(capsys):
    """`plan --deadline 1s` answered 12.7 billion GPUs with no warning; 30 days (the lecture's scale) gets none."""
    result = run_json(capsys, "plan", "--deadline", "1s")
    assert result["gpus_needed"] > 1e10
    assert any("--deadline" in w and "no cluster meets it" in w for w in result["warnings"])
    assert not any("--deadline" in w for w in run_json(capsys, "plan", "--deadline", "30d").get("warnings", []))


@pytest.mark.parametrize("argv, flag, suggestion", [
    (["params", "--model", "gpt-2"], "--model", "gpt2"),
    (["params", "--model", "llama3-8b"], "--model", "llama-3-8b"),
    (["fit", "--gpu", "h1000"], "--gpu", "h100"),
    (["fit", "--gpu", "H100SXM"], "--gpu", "h100-sxm"),
])
def test_an_unknown_name_gets_did_you_mean(argv, flag, suggestion, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err and f"Did you mean {suggestion!r}?" in err


def test_a_name_like_no_other_gets_no_suggestion(capsys):
    assert main(["params", "--model", "zzzz"]) == 2
    assert "Did you mean" not in capsys.readouterr().err


def test_counts_take_the_singular_for_one():
    from trainledger.units import count_of
    assert count_of(1, "thread") == "1 thread" and count_of(2, "thread") == "2 threads"
    assert count_of(1, "sequence") == "1 sequence" and count_of(1024, "sequence") == "1,024 sequences"


def test_infer_picks_fp32_on_a_device_without_a_bf16_peak(capsys, monkeypatch):
    """`step` picks fp32 where a device has no bf16 matmul peak (a CPU); `infer` needed --dtype fp32 there."""
    import dataclasses

    from trainledger.cli import common
    from trainledger.specs.hardware import get_gpu
    cpu_like = dataclasses.replace(get_gpu("h100"), name="cpu-like", peak_flops_per_s={"fp32": 1e12})
    monkeypatch.setattr(common, "resolve_gpu", lambda *a, **k: cpu_like)
    result = run_json(capsys, "infer", "--model", "gpt2", "--gpu", "cpu-like")
    assert result["dtype"] == "fp32" and any("--dtype fp32 (default here" in a for a in result["assumptions"])
    assert main(["infer", "--model", "gpt2", "--gpu", "cpu-like", "--dtype", "bf16"]) == 2   # asked: never replaced
    assert "has no bf16 peak" in capsys.readouterr().err
    monkeypatch.undo()
    assert run_json(capsys, "infer", "--model", "gpt2", "--gpu", "h100")["dtype"] == "bf16"


def test_tokenize_makes_the_output_folder_and_prints_no_blank_lines(tmp_path, capsys):
    (tmp_path / "book.txt").write_text("the cat sat on the mat. " * 400)
    out = tmp_path / "data" / "more" / "book.tokens"
    assert main(["tokenize", str(tmp_path / "book.txt"), str(out), "--train-bpe", "300"]) == 0
    captured = capsys.readouterr()
    assert out.is_file() and (out.parent / "tokenizer.json").is_file()
    assert "\n\n" not in captured.err and not captured.err.startswith("\n")     # the library's bar, off the TTY
    (tmp_path / "plain").write_text("")
    assert main(["tokenize", str(tmp_path / "book.txt"), str(tmp_path / "plain" / "x.tokens")]) == 2
    assert "cannot create the folder" in capsys.readouterr().err
    assert main(["tokenize", str(tmp_path / "missing.txt"), str(tmp_path / "new" / "x.tokens")]) == 2
    assert not (tmp_path / "new").exists()                          # a bad INPUT leaves nothing behind
    assert main(["tokenize", str(tmp_path / "book.txt"), str(tmp_path / "new" / "x.tokens"), "--special-token", "X"]) == 2
    assert not (tmp_path / "new").exists()                          # nor a refused flag


def plain_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def test_atomic_outputs_get_the_mode_of_a_plain_file(tmp_path):
    """loss.png, tokenizer.json and calibrations go through files.atomic_path: mkstemp's 0600 made them unreadable
    to others while the metrics beside them were 0644."""
    from trainledger.files import atomic_path
    with atomic_path(tmp_path / "loss.png") as scratch:
        scratch.write_bytes(b"png")
    (tmp_path / "metrics.jsonl").write_text("{}\n")
    assert stat.S_IMODE((tmp_path / "loss.png").stat().st_mode) == plain_mode()
    assert stat.S_IMODE((tmp_path / "loss.png").stat().st_mode) == stat.S_IMODE((tmp_path / "metrics.jsonl").stat().st_mode)


def test_an_export_is_readable_like_its_config(tmp_path):
    import torch

    from trainledger.train.hf_io import write_hf_dir
    write_hf_dir(tmp_path / "hf", {"w": torch.zeros(2, 2)}, {"model_type": "gpt2"})
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "hf").iterdir()}
    assert modes == {"model.safetensors": plain_mode(), "config.json": plain_mode()}
