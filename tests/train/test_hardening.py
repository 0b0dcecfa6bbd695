"""Issue 14's trainer failures, end to end: two trainers on one directory, a write limit during a save,
too little free space, resume with changed settings, a NaN after a loss spike, SIGTERM before training starts.
"""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import subprocess
import time

import pytest

from train_helpers import SMALL, env, losses, run_train, train_cmd, train_in_process
from trainledger.train import checkpoint as ckpt


def _steps_written(metrics) -> list[int]:
    """The step of every line of a metrics file, in file order (duplicates kept)."""
    try:
        return [json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


@pytest.mark.slow
def test_a_second_trainer_on_the_same_directory_exits_2_and_leaves_the_first_run_alone(token_file, tmp_path):
    out, metrics = tmp_path / "run", tmp_path / "run" / "metrics.jsonl"
    args = ["--data", token_file, "--steps", 12, "--out-dir", out, "--checkpoint-every", 4, *SMALL]
    first = subprocess.Popen(train_cmd(*args), env={**env(), "TRAINLEDGER_TEST_STEP_DELAY_S": "0.05"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not _steps_written(metrics) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    first.send_signal(signal.SIGSTOP)       # it holds the lock, paused, however slow the second start is
    assert first.poll() is None, "the first trainer ended before the second one started"
    for extra in ([], ["--resume"]):
        second = run_train(*args, *extra)
        assert second.returncode == 2
        assert second.stderr.strip().splitlines() == [
            f"error: {out / 'checkpoints'} is in use by pid {first.pid} (another trainer); wait for it to finish, "
            "stop it, or pass another --out-dir/--checkpoint-dir"]
    first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert _steps_written(metrics) == list(range(1, 13))        # one run's records, each step once
    assert [r.step for r in ckpt.list_checkpoints(out / "checkpoints")] == [4, 8, 12]


def _limit_file_size(max_bytes):
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return limit


def test_a_write_limit_during_a_save_is_one_line_exit_2_and_leaves_no_temporary_directory(token_file, tmp_path):
    out = tmp_path / "run"
    # the tiny model's checkpoint is ~10 MB; the metrics lines are far below 1 MiB
    result = subprocess.run(train_cmd("--data", token_file, "--steps", 2, "--out-dir", out, *SMALL),
                            capture_output=True, text=True, timeout=120, env=env(),
                            preexec_fn=_limit_file_size(1 << 20))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith(f"error: could not write checkpoint {out / 'checkpoints' / '.tmp-step_00000002-'}")
    assert "File too large [EFBIG]" in lines[0] and "the partial directory was deleted" in lines[0]
    assert "needs room for 4" in lines[0]                   # --keep-checkpoints 3 (the default): K+1
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == [".lock"]    # nothing else left
    assert sorted(losses(out / "metrics.jsonl")) == [1, 2]


def test_too_little_free_space_is_refused_before_writing(token_file, tmp_path, capsys, monkeypatch):
    from trainledger.train import checkpointing

    def disk_usage(path):
        return __import__("shutil")._ntuple_diskusage(100 << 30, 100 << 30, 1 << 20)   # 1 MiB free
    monkeypatch.setattr(checkpointing.shutil, "disk_usage", disk_usage)
    status, _, err = train_in_process(capsys, "--data", token_file, "--steps", 2, "--out-dir", tmp_path, *SMALL)
    assert status == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "not enough space to save the checkpoint of step 2" in lines[0]
    assert "it needs about" in lines[0] and "1 MiB free" in lines[0] and "needs room for 4" in lines[0]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [".lock"]


def test_resume_with_a_lower_lr_a_new_grad_clip_and_more_steps_continues(token_file, tmp_path, capsys):
    args = ["--data", token_file, "--out-dir", tmp_path, "--checkpoint-every", 3, *SMALL[:-1]]
    assert train_in_process(capsys, *args, "--steps", 6)[0] == 0
    status, out, err = train_in_process(capsys, *args, "--steps", 10, "--lr", "1e-3", "--grad-clip", "0.25",
                                        "--resume")
    assert status == 0, err
    notice = next(line for line in out.splitlines() if line.startswith("--resume changed"))
    assert "--lr 0.003 -> 0.001" in notice and "--grad-clip 1.0 -> 0.25" in notice and "--steps 6 -> 10" in notice
    assert "warmup" not in notice.split(";")[0]          # never a flag the user did not pass
    from trainledger.optim.schedule import cosine_with_warmup
    records = {r["step"]: r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())}
    assert sorted(records) == list(range(1, 11))
    for step in range(7, 11):       # the lr of step s is the schedule's value at s-1 (0-based), new settings
        assert records[step]["lr"] == pytest.approx(cosine_with_warmup(step - 1, 1e-3, 3e-4, 0, 10))
    assert ckpt.list_checkpoints(tmp_path / "checkpoints")[-1].step == 10


def test_resume_keeps_settings_not_given_and_refuses_what_defines_the_run(token_file, tmp_path, capsys):
    args = ["--data", token_file, "--out-dir", tmp_path, *SMALL[:-1]]
    assert train_in_process(capsys, *args, "--steps", 4, "--lr", "1e-3", "--warmup-steps", 2)[0] == 0
    status, out, err = train_in_process(capsys, *args, "--steps", 6, "--resume")      # --lr 3e-3 in SMALL
    assert status == 0, err
    assert "--steps 4 -> 6" in out and "--warmup-steps" not in out
    status, _, err = train_in_process(capsys, *args, "--steps", 8, "--resume", "--seed", 1)
    assert status == 2
    line = err.strip()
    assert "--seed 0 (now 1)" in line and "--warmup-steps" not in line and "--steps" not in line
    status, _, err = train_in_process(capsys, *args, "--steps", 3, "--resume")
    assert status == 2 and "--steps 3 is below the checkpoint's step 6" in err


def test_a_nan_stop_names_the_last_checkpoint_whose_loss_was_finite_and_not_a_spike(token_file, tmp_path, capsys,
                                                                                    monkeypatch):
    from trainledger.train.loop import Trainer
    real_loss = Trainer._loss

    def spike_at_step_5(self, x, y):
        loss = real_loss(self, x, y)
        return loss * 10 if self.step + 1 == 5 else loss
    monkeypatch.setattr(Trainer, "_loss", spike_at_step_5)
    monkeypatch.setenv("TRAINLEDGER_FAULT_NAN_STEP", "6")
    status, _, err = train_in_process(capsys, "--data", token_file, "--steps", 12, "--out-dir", tmp_path,
                                      "--checkpoint-every", 1, *SMALL)
    assert status == 2
    line = err.strip()
    assert "loss is nan at step 6" in line
    assert f"Last good checkpoint: {tmp_path / 'checkpoints' / 'step_00000004'}" in line
    assert "delete the newer step_00000005 (loss spikes)" in line
    infos = {r.step: ckpt.read_manifest(r.path)["info"] for r in ckpt.list_checkpoints(tmp_path / "checkpoints")}
    assert infos[5]["loss_spike"] and not infos[4]["loss_spike"]
    assert math.isclose(infos[4]["loss"], losses(tmp_path / "metrics.jsonl")[4])


def _catches(pid: int, signum: int) -> bool:
    """Whether process `pid` has a handler installed for `signum` (SigCgt in /proc/PID/status)."""
    try:
        status = open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return False
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (signum - 1) & 1)


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc to see the signal mask")
def test_sigterm_before_training_starts_stops_cleanly_with_a_checkpoint(token_file, tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen(train_cmd("--data", token_file, "--steps", 50, "--out-dir", out, *SMALL[:-1]),
                               env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _catches(process.pid, signal.SIGTERM) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert not (out / "metrics.jsonl").exists()           # torch, the data and the model are still loading
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert "stopped by SIGTERM: 1 steps" in stdout
    assert [r.step for r in ckpt.list_checkpoints(out / "checkpoints")] == [1]


def test_the_expected_checkpoint_size_is_close_to_the_written_one(token_file, tmp_path):
    from trainledger.train import Trainer, resolve
    config = resolve({"data": str(token_file), "out_dir": str(tmp_path), "steps": 2, "seq_len": 16, "batch_size": 4,
                      "eval_every": 0, "plot": False})
    trainer = Trainer(config, quiet=True)
    summary = trainer.train()
    written = ckpt.checkpoint_bytes(summary["checkpoint"])
    # account's params + optimizer bytes against the files (the trainer state adds RNG and sampler state)
    assert trainer.expected_checkpoint_bytes == pytest.approx(written, rel=0.05)


def test_a_write_limit_while_caching_the_text_tokens_is_one_line_exit_2(tmp_path):
    text = tmp_path / "book.txt"
    text.write_text("all work and no play makes jack a dull boy\n" * 5000)      # 215 KB, one token per byte
    result = subprocess.run(train_cmd("--text", text, "--steps", 2, "--out-dir", tmp_path / "run", *SMALL),
                            capture_output=True, text=True, timeout=120, env=env(),
                            preexec_fn=_limit_file_size(100_000))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot write the token cache" in lines[0] and "File too large" in lines[0]


def test_resume_alone_continues_a_run_started_with_other_flags(token_file, tmp_path):
    first = run_train("--data", token_file, "--out-dir", tmp_path, "--steps", 4, "--seed", 3, *SMALL)
    assert first.returncode == 0, first.stderr
    # only the directory and the new length: model, data, batch, seq-len, seed and lr come from the manifest
    resumed = run_train("--out-dir", tmp_path, "--resume", "--steps", 6, "--no-plot")
    assert resumed.returncode == 0, resumed.stderr
    assert "--resume changed --steps 4 -> 6;" in resumed.stdout and "error" not in resumed.stderr
    assert sorted(losses(tmp_path / "metrics.jsonl")) == list(range(1, 7))
