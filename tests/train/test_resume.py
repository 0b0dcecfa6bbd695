"""Crash safety of `trainledger train`, end to end in subprocesses: SIGKILL, SIGTERM, corrupt and unsafe checkpoints, NaN.

The reference is always an uninterrupted run with the same flags: resumed runs must give exactly its
per-step losses (CPU, same seed, one thread), read from the metrics JSONL with the last record of each step winning.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time

import numpy as np
import pytest
import torch

from train_helpers import SMALL, env, losses, run_train, train_cmd, train_in_process
from trainledger.train import checkpoint as ckpt

STEPS = 24
# 40 ms of sleep after each step of a run that the test will interrupt (not timed, losses unchanged): the test
# polls every few ms, so on a loaded machine the run cannot race to its end before the signal arrives.
SLOW_STEPS = {"TRAINLEDGER_TEST_STEP_DELAY_S": "0.04"}


@pytest.fixture(scope="module")
def reference(token_file, tmp_path_factory):
    """{step: loss} of an uninterrupted run of STEPS steps."""
    out = tmp_path_factory.mktemp("reference")
    result = run_train("--data", token_file, "--steps", STEPS, "--out-dir", out, "--checkpoint-every", 3, *SMALL)
    assert result.returncode == 0, result.stderr
    values = losses(out / "metrics.jsonl")
    assert sorted(values) == list(range(1, STEPS + 1))
    return values


def _max_step(metrics):
    try:
        lines = metrics.read_text().splitlines()
    except FileNotFoundError:
        return 0
    steps = []
    for line in lines:
        try:
            steps.append(json.loads(line)["step"])
        except ValueError:
            pass
    return max(steps, default=0)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_gives_identical_losses(token_file, tmp_path, reference):
    rng = random.Random(1234)
    out, metrics = tmp_path / "run", tmp_path / "run" / "metrics.jsonl"
    args = ["--data", token_file, "--steps", STEPS, "--out-dir", out, "--checkpoint-every", 3, "--resume", *SMALL]
    kills = 0
    for _ in range(3):
        # let it get somewhere past where it stands, then kill -9 mid-step, mid-checkpoint or mid-write
        target = min(STEPS - 8, _max_step(metrics) + rng.randint(2, 6))
        process = subprocess.Popen(train_cmd(*args), env={**env(), **SLOW_STEPS}, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE)
        deadline = time.monotonic() + 90
        while _max_step(metrics) < target and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.01))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait(timeout=30)
    assert kills == 3
    assert _max_step(metrics) < STEPS          # it was really cut short
    result = run_train(*args)
    assert result.returncode == 0, result.stderr
    assert losses(metrics) == reference        # exactly, not approximately


def test_sigterm_saves_a_checkpoint_and_exits_cleanly(token_file, tmp_path, reference):
    out = tmp_path / "run"
    args = ["--data", token_file, "--steps", STEPS, "--out-dir", out, "--checkpoint-every", 1000, *SMALL]
    process = subprocess.Popen(train_cmd(*args), env={**env(), **SLOW_STEPS}, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while _max_step(out / "metrics.jsonl") < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    refs = ckpt.list_checkpoints(out / "checkpoints")
    assert len(refs) == 1 and 3 <= refs[0].step < STEPS     # saved at the step boundary after the signal
    assert ckpt.verify(refs[0].path) == ("full", None)
    assert "stopped by SIGTERM" in stdout
    result = run_train(*args, "--resume")
    assert result.returncode == 0, result.stderr
    assert losses(out / "metrics.jsonl") == reference


def _stopped_after_checkpoint_9(token_file, tmp_path, capsys, monkeypatch):
    """A run stopped by a NaN at step 11, after checkpoints 3, 6 and 9: (its out dir, its args, checkpoint 9)."""
    out = tmp_path / "run"
    args = ["--data", token_file, "--steps", STEPS, "--out-dir", out, "--checkpoint-every", 3, *SMALL]
    monkeypatch.setenv("TRAINLEDGER_FAULT_NAN_STEP", "11")
    assert train_in_process(capsys, *args)[0] == 2
    monkeypatch.delenv("TRAINLEDGER_FAULT_NAN_STEP")
    return out, args, ckpt.list_checkpoints(out / "checkpoints")[-1]


def test_truncated_latest_checkpoint_falls_back_and_finishes(token_file, tmp_path, reference, capsys, monkeypatch):
    out, args, latest = _stopped_after_checkpoint_9(token_file, tmp_path, capsys, monkeypatch)
    assert latest.step == 9
    data = (latest.path / "trainer.pt").read_bytes()
    (latest.path / "trainer.pt").write_bytes(data[: len(data) // 3])
    status, _, err = train_in_process(capsys, *args, "--resume")
    assert status == 0, err
    assert "step_00000009 is corrupt" in err
    assert losses(out / "metrics.jsonl") == reference


def test_nan_loss_stops_with_one_line_and_keeps_last_good_checkpoint(token_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    monkeypatch.setenv("TRAINLEDGER_FAULT_NAN_STEP", "6")
    status, _, err = train_in_process(capsys, "--data", token_file, "--steps", STEPS, "--out-dir", out,
                                      "--checkpoint-every", 2, *SMALL)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "loss is nan at step 6" in lines[0] and "step_00000004" in lines[0]
    refs = ckpt.list_checkpoints(out / "checkpoints")
    assert refs[-1].step == 4 and ckpt.verify(refs[-1].path) == ("full", None)
    state = ckpt.load_trainer_state(refs[-1].path)
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    assert max(losses(out / "metrics.jsonl")) == 5     # no record for the NaN step


def test_nan_from_a_huge_learning_rate_is_caught(token_file, tmp_path, capsys):
    status, _, err = train_in_process(capsys, "--data", token_file, "--steps", 20, "--out-dir", tmp_path,
                                      "--optimizer", "sgd", "--no-grad-clip", "--warmup-steps", 0, *SMALL,
                                      "--lr", "1e30", "--min-lr", "0")
    assert status == 2
    assert "stopped before updating the weights" in err


def test_checkpoint_with_pickled_code_is_refused(token_file, tmp_path, capsys):
    out, marker = tmp_path / "run", tmp_path / "payload-ran"
    tmp = ckpt.begin(out / "checkpoints", 5)
    with open(tmp / ckpt.TRAINER_FILE, "wb") as handle:   # a pickle whose loading would call os.system
        handle.write(b"cposix\nsystem\n(V" + f"touch {marker}".encode() + b"\ntR.")
    ckpt.commit(tmp, out / "checkpoints", 5, "full")
    status, _, err = train_in_process(capsys, "--data", token_file, "--steps", STEPS, "--out-dir", out, "--resume", *SMALL)
    assert status == 2
    assert len(err.strip().splitlines()) == 1
    assert "refusing checkpoint" in err and "weights_only=True" in err
    assert not marker.exists()


def test_resume_without_checkpoint_starts_fresh_and_says_so(token_file, tmp_path, capsys):
    status, out, err = train_in_process(capsys, "--data", token_file, "--steps", 2, "--out-dir", tmp_path, "--resume", *SMALL[:-1])
    assert status == 0, err
    assert "no checkpoint in" in out and "starting fresh" in out
    status, out, err = train_in_process(capsys, "--data", token_file, "--steps", 2, "--out-dir", tmp_path / "j",
                                        "--resume", "--json", *SMALL)
    assert status == 0, err
    assert json.loads(out)["resumed_from"] is None          # --json is quiet: the summary says it started fresh
    status, out, err = train_in_process(capsys, "--data", token_file, "--steps", 2, "--out-dir", tmp_path / "j",
                                        "--resume", "--json", *SMALL)
    assert status == 0 and json.loads(out)["resumed_from"].endswith("step_00000002")


def test_existing_checkpoints_without_resume_is_an_error(token_file, tmp_path, capsys):
    args = ["--data", token_file, "--steps", 2, "--out-dir", tmp_path, *SMALL]
    assert train_in_process(capsys, *args)[0] == 0
    status, _, err = train_in_process(capsys, *args)
    assert status == 2 and "--resume" in err


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing.tokens", "does not exist"),
    (lambda d: (d / "empty.tokens").write_bytes(b"") or d / "empty.tokens", "empty"),
    (lambda d: _tokens(d / "short.tokens", 20), "too short"),
    (lambda d: _npy(d / "float.npy", "float32"), "float32"),
    (lambda d: _npy(d / "big.npy", "int64", value=100_000), "outside the model's vocabulary"),
], ids=["missing", "empty", "shorter-than-context", "wrong-dtype", "ids-beyond-vocab"])
def test_bad_data_file_is_one_line_exit_2(tmp_path, make, message, capsys):
    path = make(tmp_path)
    status, _, err = train_in_process(capsys, "--data", path, "--steps", 2, "--out-dir", tmp_path / "out", *SMALL)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --data") and message in lines[0]


def _tokens(path, n):
    from trainledger.data import write_tokens
    return write_tokens(path, np.arange(n) % 256, dtype="uint8")


def _npy(path, dtype, value=7):
    np.save(path, np.full(5000, value, dtype=dtype))
    return path


def test_resume_when_every_checkpoint_is_corrupt_is_an_error_not_a_fresh_start(token_file, tmp_path, capsys):
    args = ["--data", token_file, "--steps", 4, "--out-dir", tmp_path, "--checkpoint-every", 2, *SMALL]
    assert train_in_process(capsys, *args)[0] == 0
    before = (tmp_path / "metrics.jsonl").read_text()
    for ref in ckpt.list_checkpoints(tmp_path / "checkpoints"):
        data = (ref.path / ckpt.TRAINER_FILE).read_bytes()
        (ref.path / ckpt.TRAINER_FILE).write_bytes(data[:100])
    status, _, err = train_in_process(capsys, *args, "--resume")
    assert status == 2
    assert err.count("is corrupt:") == 2 and "every checkpoint in" in err.strip().splitlines()[-1]
    assert (tmp_path / "metrics.jsonl").read_text() == before        # the old run's metrics are kept


@pytest.mark.parametrize("damage", [lambda data: data[: len(data) // 3], lambda data: b""], ids=["truncated", "empty"])
def test_damaged_checkpoint_with_a_matching_manifest_falls_back_and_finishes(token_file, tmp_path, reference, capsys,
                                                                            monkeypatch, damage):
    out, args, latest = _stopped_after_checkpoint_9(token_file, tmp_path, capsys, monkeypatch)
    file = latest.path / ckpt.TRAINER_FILE
    file.write_bytes(damage(file.read_bytes()))
    manifest = json.loads((latest.path / ckpt.MANIFEST_FILE).read_text())
    manifest["files"][ckpt.TRAINER_FILE] = ckpt.sha256_file(file)          # the manifest matches the damage
    (latest.path / ckpt.MANIFEST_FILE).write_text(json.dumps(manifest))
    status, _, err = train_in_process(capsys, *args, "--resume")
    assert status == 0, err
    assert "step_00000009 is corrupt" in err and "although its manifest matches" in err
    assert losses(out / "metrics.jsonl") == reference
