"""A run file a user can save and ask again: --save-config, --config, a layout candidate's `run` (cli/run_flags.py)."""

import json
import os
import tomllib

import pytest

from trainledger.cli.main import main

# 20 runs of different kinds: dense, FSDP2 and HSDP, TP+SP+PP interleaved, CP, MoE with EP, FP8, Megatron's
# switches, torchtitan, DualPipe, a CPU (calibrated below), and a run with a reserve and a file-only default
RUNS = [
    "--model gpt2 --num-gpus 8",
    "--model gpt2 --gpu h100 --num-gpus 8 --global-batch-size 64 --batch-size 8",
    "--model llama-2-7b --num-gpus 8 --zero 3 --recompute selective",
    "--model llama-2-7b --num-gpus 16 --zero 3 --dp-replicate 2 --global-batch-size 32",
    "--model llama-2-7b --num-gpus 8 --zero 3 --fsdp-param-dtype fp32 --no-reshard-after-forward --fsdp-accumulate unsharded",
    "--model llama-3-8b --gpu a100 --num-gpus 64 --global-batch-size 64 --seq-len 8192 --recompute selective-op",
    "--model gpt3-175b --gpu a100 --num-gpus 64 --tp 8 --sp --pp 8 --interleave 3 --recompute selective "
    "--precision mixed-fp16 --optimizer adam --global-batch-size 64 --framework megatron --no-flash",
    "--model llama-3-70b --gpu h100 --num-gpus 64 --tp 8 --pp 4 --interleave 2 --framework megatron "
    "--global-batch-size 128 --seq-len 4096 --no-pp-overlap --no-tp-overlap --no-dp-overlap",
    "--model llama-2-7b --num-gpus 16 --tp 2 --cp 2 --seq-len 8192",
    "--model qwen3-30b-a3b --num-gpus 8 --ep 8 --global-batch-size 64",
    "--model qwen3-30b-a3b --num-gpus 16 --tp 2 --sp --ep 4 --etp 1 --framework megatron --expert-imbalance 1.2 "
    "--capacity-factor 1.5 --ep-overlap 0.5 --ep-dispatcher deepep",
    "--model deepseek-v3 --gpu h800 --num-gpus 2048 --pp 16 --ep 64 --zero 1 --precision fp8-cs --schedule dualpipe "
    "--framework megatron --global-batch-size 15360 --seq-len 4096",
    "--model deepseek-v3 --gpu h100 --num-gpus 1024 --pp 16 --ep 64 --framework megatron --global-batch-size 8192 "
    "--seq-len 4096 --recompute full --no-mtp",
    "--model llama-3-8b --num-gpus 8 --precision fp8-rowwise --framework torchtitan --compile",
    "--model llama-3-8b --gpu b200 --num-gpus 8 --precision mxfp8 --framework megatron",
    "--model gpt2 --num-gpus 8 --reserve 2GiB --loop profile --no-loss-upcast",
    "--model gpt2 --num-gpus 4 --pp 2 --schedule dualpipe --global-batch-size 8",
    "--model mixtral-8x7b --num-gpus 16 --tp 2 --ep 8 --recompute full --attention causal",
    "--model gpt2 --num-gpus 16 --gpus-per-node 4 --inter-node-bandwidth 12GB/s --attention-kernel flash-attention-2",
    "--model tiny --gpu cpu",
]


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    status = main(list(argv))
    out = capsys.readouterr()
    return status, out.out, out.err


@pytest.fixture
def calibrated_cpu(tmp_path, monkeypatch):
    """A synthetic calibration of this machine's CPU in a private cache, so `--gpu cpu` answers at once."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
    from profile_helpers import synthetic_profile
    from trainledger.measure import calibrate as cal
    import torch
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    try:                   # the cache is per thread count: the one trainer and step pick here (--threads 1)
        for count in sorted({1, threads}):
            torch.set_num_threads(count)
            cal.save_profile(synthetic_profile(threads=count), cal.profile_path("cpu"))
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("flags", RUNS, ids=range(len(RUNS)))
def test_a_saved_run_asked_again_gives_the_same_answer(flags, tmp_path, capsys, calibrated_cpu):
    saved = tmp_path / "run.toml"
    status, first, err = run_cli(capsys, "step", *flags.split(), "--json", "--save-config", str(saved))
    assert status == 0, err
    assert f"wrote the run to {saved}" in err
    status, again, err = run_cli(capsys, "step", "--config", str(saved), "--json")
    assert status == 0, err
    assert json.loads(again) == json.loads(first)
    assert json.loads(first)["run"]["version"] == 1


def test_the_saved_file_fills_every_default_and_says_what_each_is(tmp_path, capsys):
    import tomllib
    saved = tmp_path / "run.toml"
    assert run_cli(capsys, "step", "--model", "llama-2-7b", "--num-gpus", "8", "--save-config", str(saved))[0] == 0
    text = saved.read_text()
    data = tomllib.loads(text)
    assert data["model"] == {"name": "llama-2-7b"} and data["hardware"] == {"gpu": "h100-sxm", "num_gpus": 8}
    assert data["layout"]["dp"] == 8 and data["layout"]["zero"] == 3 and data["batch"]["seq_len"] == 4096
    assert data["numerics"]["precision"] == "amp-bf16" and data["kernels"]["mtp"] is False
    assert "--recompute: activation recomputation" in text and "# capacity_factor = (unset" in text


def test_flags_override_the_file(tmp_path, capsys):
    saved = tmp_path / "run.toml"
    run_cli(capsys, "step", "--model", "llama-2-7b", "--num-gpus", "8", "--save-config", str(saved))
    _, out, _ = run_cli(capsys, "step", "--config", str(saved), "--recompute", "full", "--num-gpus", "16", "--json")
    data = json.loads(out)
    assert data["recompute"] == "full" and data["num_gpus"] == 16 and data["run"]["layout"]["dp"] == 16
    _, out, _ = run_cli(capsys, "step", "--config", str(saved), "--model", "gpt2", "--json")
    assert json.loads(out)["model"] == "gpt2"


def test_a_layout_candidate_is_a_run_step_takes_as_it_is(tmp_path, capsys):
    status, out, err = run_cli(capsys, "layout", "--model", "llama-2-7b", "--num-gpus", "16", "--top", "3", "--json")
    assert status == 0, err
    found = json.loads(out)
    for candidate in found["layouts"]:
        path = tmp_path / "candidate.json"
        path.write_text(json.dumps(candidate["run"]))
        status, again, err = run_cli(capsys, "step", "--config", str(path), "--json")
        assert status == 0, err
        step = json.loads(again)
        assert step["step_seconds"] == pytest.approx(candidate["step_seconds"], rel=1e-12)
        assert step["memory_bytes"] == pytest.approx(candidate["memory_bytes"], rel=1e-12)
        assert (step["tp"], step["pp"], step["interleave"], step["zero"]) == (
            candidate["tp"], candidate["pp"], candidate["interleave"], candidate["zero"])
    assert found["run"] == found["layouts"][0]["run"]


@pytest.mark.parametrize("command, own", [
    ("memory --model gpt2 --dp 8 --batch-size 4", ""), ("layout --model gpt2 --top 2", "--top 2"),
    ("plan --model gpt2 --tokens 1B", "--tokens 1B"), ("fit --model gpt2 --batch-size 2", ""),
    ("plan --model llama-2-7b --mfu auto --num-gpus 64", "--mfu auto")])
def test_other_commands_save_and_read_their_run(command, own, tmp_path, capsys):
    """The run each command was asked about reads back as that run; the command's own flags (the plan's tokens, how
    many layouts to list) are not the run's and are given again."""
    saved = tmp_path / "run.toml"
    name, *flags = command.split()
    status, first, err = run_cli(capsys, name, *flags, "--json", "--save-config", str(saved))
    assert status == 0, err
    status, again, err = run_cli(capsys, name, "--config", str(saved), *own.split(), "--json")
    assert status == 0, err
    assert json.loads(again)["run"] == json.loads(first)["run"]


@pytest.mark.parametrize("text, words", [
    ('version = 1\n[model]\nname = "gpt2"\n[layout]\ntq = 2\n', "unknown key 'layout.tq'"),
    ('version = 1\n[model]\nname = "gpt2"\n[layout]\ntp = "2"\n', "layout.tp (--tp) has the wrong type"),
    ('version = 7\n[model]\nname = "gpt2"\n', "has version 7"),
    ('[model]\nname = "gpt2"\n', "has no version"),
    ('version = 1\n[model]\nname = "gpt2"\n[batch]\nbatch_size = 0\n', "--batch-size must be a positive integer"),
    ("version = 1\n[model\n", "is not valid TOML"),
])
def test_a_bad_run_file_is_one_line_and_exit_2(text, words, tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    status, out, err = run_cli(capsys, "step", "--config", str(path))
    assert status == 2 and out == ""
    assert words in err and err.count("\n") == 1


def test_save_config_never_replaces_a_file_that_is_not_a_run_file(tmp_path, capsys):
    victim = tmp_path / "notes.txt"
    victim.write_text("my notes\n")
    status, _, err = run_cli(capsys, "step", "--model", "gpt2", "--save-config", str(victim))
    assert status == 2 and "not a trainledger run file" in err and victim.read_text() == "my notes\n"
    link = tmp_path / "link.toml"
    os.symlink(victim, link)
    status, _, err = run_cli(capsys, "step", "--model", "gpt2", "--save-config", str(link))
    assert status == 2 and "symbolic link" in err and victim.read_text() == "my notes\n"
    mine = tmp_path / "mine.toml"
    assert run_cli(capsys, "step", "--model", "gpt2", "--save-config", str(mine))[0] == 0
    assert run_cli(capsys, "step", "--model", "llama-2-7b", "--save-config", str(mine))[0] == 0   # ours: replaced
    assert 'name = "llama-2-7b"' in mine.read_text()


def test_a_run_file_that_is_a_fifo_is_refused_unread(tmp_path, capsys):
    fifo = tmp_path / "run.toml"
    os.mkfifo(fifo)
    status, _, err = run_cli(capsys, "step", "--config", str(fifo))
    assert status == 2 and "--config" in err


def test_a_trained_run_writes_the_run_that_step_predicts(tmp_path, capsys, calibrated_cpu):
    """`train` writes <out-dir>/run.toml; `step --config` of it predicts the run the trainer ran, the same step time
    as the trainer's own prediction (both on this machine's calibration); `train --config` of it trains it again."""
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    out = tmp_path / "runs" / "t"
    argv = ["train", "--text", str(text), "--steps", "3", "--batch-size", "2", "--grad-accum", "2", "--seq-len", "32",
            "--out-dir", str(out), "--eval-every", "0", "--quiet", "--threads", "1", "--no-plot"]
    status, _, err = run_cli(capsys, *argv)
    assert status == 0, err
    saved = out / "run.toml"
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)                    # as the trainer ran (--threads 1): the same calibration
    try:
        status, answer, err = run_cli(capsys, "step", "--config", str(saved), "--json")
    finally:
        torch.set_num_threads(threads)
    assert status == 0, err
    step = json.loads(answer)
    assert (step["batch_size"], step["global_batch_size"], step["micro_batches"], step["seq_len"]) == (2, 4, 2, 32)
    assert step["gpu"] == "cpu" and step["precision"] == "fp32" and step["model"] == "tiny"
    assert step["step_seconds"] == pytest.approx(records[-1]["predicted_step_time_s"], rel=1e-9)
    again = tmp_path / "again"
    status, _, err = run_cli(capsys, "train", "--config", str(saved), "--out-dir", str(again), "--steps", "2")
    assert status == 0, err
    first, second = (tomllib.loads(p.read_text()) for p in (saved, again / "run.toml"))
    for doc in (first, second):
        doc["train"].pop("out_dir"), doc["train"].pop("steps"), doc["train"].pop("warmup_steps")
    assert first == second                      # the same run, trained again from its file


@pytest.mark.parametrize("change, words", [
    ("[layout]\ncp = 2\n", "layout.cp = 2 asks for context parallelism"),
    ("[levers]\nrecompute = \"selective\"\n", "levers.recompute = 'selective' asks for selective activation "
                                               "recomputation"),     # full: train --recompute full (issue 41)
    ("[layout]\nzero = 1\n", "layout.zero = 1"),
    ("[hardware]\nnum_gpus = 8\n", "a run on 8 GPUs"),
])
def test_train_refuses_a_run_it_does_not_run(change, words, tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text(f'version = 1\n[model]\nname = "tiny"\n{change}')
    status, _, err = run_cli(capsys, "train", "--config", str(path), "--steps", "1", "--out-dir", str(tmp_path / "o"))
    assert status == 2 and words in err and err.count("\n") == 1


def test_train_takes_a_layout_candidate_as_it_is(tmp_path, capsys):
    """`layout --json`'s first candidate, saved as JSON, is a run `train --config` takes unchanged (here on this
    machine's CPU: --device overrides the file's GPU)."""
    status, out, err = run_cli(capsys, "layout", "--model", "tiny", "--gpu", "h100", "--num-gpus", "1",
                               "--seq-len", "64", "--json")
    assert status == 0, err
    candidate = json.loads(out)["layouts"][0]["run"]
    path = tmp_path / "best.json"
    path.write_text(json.dumps(candidate))
    text = tmp_path / "text.txt"
    text.write_text("a small corpus for a small model. " * 300)
    status, _, err = run_cli(capsys, "train", "--config", str(path), "--device", "cpu", "--text", str(text),
                             "--steps", "2", "--out-dir", str(tmp_path / "run"), "--quiet", "--no-plot",
                             "--eval-every", "0")
    assert status == 0, err
    trained = tomllib.loads((tmp_path / "run" / "run.toml").read_text())
    assert trained["batch"] == candidate["batch"] and trained["layout"]["zero"] == candidate["layout"]["zero"]
