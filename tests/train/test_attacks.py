"""Issue 23's trainer findings, reproduced as the attacker ran them: a second trainer beside a running one, a resume
pointed at the wrong checkpoint dir, forged checkpoints whose manifests match, --no-grad-clip on resume, a full disk
for loss.png, the advice after a full disk, a second Ctrl-C during a save, a launcher killed under its ranks.

References: the first run's own files (metrics lines, token cache, checkpoints), what torch.load returns for the
forged bytes (it loads them: the premise of the attack), and the losses of uninterrupted runs.
"""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile

import pytest
import torch

from train_helpers import SMALL, env, losses, train_cmd, train_in_process
from trainledger.train import checkpoint as ckpt


def _steps_written(metrics) -> list[int]:
    try:
        return [json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.strip()]
    except FileNotFoundError:
        return []


# ---------- findings 1 and 5: a second trainer, a resume at the wrong checkpoint dir ----------

@pytest.mark.slow
def test_a_second_trainer_touches_nothing_of_a_running_one(tmp_path, capsys):
    """The first trainer (--text, so it memory-maps its token cache) is paused mid-run; every way of starting a
    second one on its files is refused with one line before that one writes anything: the resume after the text
    was touched (it used to rewrite the cache in place: SIGBUS), another --checkpoint-dir on the same out-dir (it
    used to truncate metrics.jsonl), the same checkpoint dir from another out-dir, the same --metrics file."""
    text = tmp_path / "big.txt"
    text.write_text("It was the best of times, it was the worst of times.\n" * 4000)
    out = tmp_path / "run"
    metrics = out / "metrics.jsonl"
    args = ["--text", text, "--steps", 12, "--out-dir", out, "--checkpoint-every", 4, *SMALL]
    first = subprocess.Popen(train_cmd(*args), env={**env(), "TRAINLEDGER_TEST_STEP_DELAY_S": "0.05"},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while not _steps_written(metrics) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    first.send_signal(signal.SIGSTOP)
    try:
        assert first.poll() is None, "the first trainer ended before the second one started"
        (cache,) = (out / "data").glob("*-" + "?" * 16 + ".tokens")      # the keyed token cache it has mapped
        assert (out / "data" / "big.txt.tokens").samefile(cache)       # and its stable name
        cache_before = (cache.stat().st_ino, cache.stat().st_mtime_ns, cache.read_bytes())
        metrics_before = metrics.read_bytes()
        time.sleep(0.01)
        text.touch()                                                   # newer than the cache
        attempts = [
            (["--resume"], f"{out / 'checkpoints'} is in use by pid {first.pid}"),
            (["--checkpoint-dir", tmp_path / "other-ckpts"], f"{out} is in use by pid {first.pid}"),
            (["--resume", "--checkpoint-dir", tmp_path / "other-ckpts"], f"{out} is in use by pid {first.pid}"),
        ]
        for extra, message in attempts:
            status, _, err = train_in_process(capsys, *args, *extra)
            assert status == 2 and err.strip().splitlines() == [f"error: {message} (another trainer); wait for it "
                                                                 "to finish, stop it, or pass another "
                                                                 "--out-dir/--checkpoint-dir"], (extra, err)
        elsewhere = ["--text", text, "--steps", 12, *SMALL]
        status, _, err = train_in_process(capsys, *elsewhere, "--out-dir", tmp_path / "b",
                                          "--checkpoint-dir", out / "checkpoints")
        assert status == 2 and f"is in use by pid {first.pid}" in err
        status, _, err = train_in_process(capsys, *elsewhere, "--out-dir", tmp_path / "c", "--metrics", metrics)
        assert status == 2 and err.count("\n") == 1 and f"--metrics {metrics} is in use by another trainer" in err
        assert (cache.stat().st_ino, cache.stat().st_mtime_ns, cache.read_bytes()) == cache_before   # untouched
        assert metrics.read_bytes() == metrics_before
        assert not (tmp_path / "c").exists() or not any((tmp_path / "c").rglob("*.tokens"))
    finally:
        first.send_signal(signal.SIGCONT)
    _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err                                  # no SIGBUS (135)
    assert _steps_written(metrics) == list(range(1, 13))                # one run's records, each step once
    assert [r.step for r in ckpt.list_checkpoints(out / "checkpoints")] == [4, 8, 12]


def test_a_resume_without_checkpoints_never_overwrites_another_runs_metrics(token_file, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--data", token_file, "--steps", 4, "--out-dir", out, "--checkpoint-every", 2, *SMALL]
    assert train_in_process(capsys, *args)[0] == 0
    before = (out / "metrics.jsonl").read_bytes()
    for extra in (["--resume", "--checkpoint-dir", tmp_path / "typo"], ["--checkpoint-dir", tmp_path / "typo2"]):
        status, _, err = train_in_process(capsys, *args, *extra)
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1, err
        assert "holds steps 1-4 of a run" in lines[0] and "move" in lines[0] and "--checkpoint-dir" in lines[0]
        assert (out / "metrics.jsonl").read_bytes() == before
    status, _, err = train_in_process(capsys, *args, "--resume", "--checkpoint-dir", tmp_path / "typo")
    assert status == 2, "a refused run must not make its checkpoint dir look like the owner of those metrics"


def test_a_run_killed_before_its_first_checkpoint_still_starts_again(token_file, tmp_path, capsys, monkeypatch):
    """Its own metrics (the checkpoint dir's last trainer wrote them) are no other run's: --resume starts fresh."""
    out = tmp_path / "run"
    args = ["--data", token_file, "--steps", 6, "--out-dir", out, "--checkpoint-every", 100, *SMALL]
    monkeypatch.setenv("TRAINLEDGER_FAULT_NAN_STEP", "3")         # stopped at step 3, before any checkpoint
    assert train_in_process(capsys, *args)[0] == 2
    monkeypatch.delenv("TRAINLEDGER_FAULT_NAN_STEP")
    assert sorted(losses(out / "metrics.jsonl")) == [1, 2] and not ckpt.list_checkpoints(out / "checkpoints")
    status, stdout, err = train_in_process(capsys, *args[:-1], "--resume")
    assert status == 0, err
    assert "starting fresh" in stdout and _steps_written(out / "metrics.jsonl") == list(range(1, 7))


# ---------- finding 6: --resume --no-grad-clip ----------

def test_resume_with_no_grad_clip_turns_clipping_off_and_says_so(token_file, tmp_path, capsys, monkeypatch):
    first = tmp_path / "first"
    args = ["--data", token_file, "--steps", 6, "--checkpoint-every", 3, *SMALL[:-1]]
    monkeypatch.setenv("TRAINLEDGER_FAULT_NAN_STEP", "4")            # stopped after checkpoint 3
    assert train_in_process(capsys, *args, "--out-dir", first, "--grad-clip", "0.01")[0] == 2
    monkeypatch.delenv("TRAINLEDGER_FAULT_NAN_STEP")
    clipped = tmp_path / "clipped"
    shutil.copytree(first, clipped)
    status, stdout, err = train_in_process(capsys, *args, "--out-dir", first, "--resume", "--no-grad-clip")
    assert status == 0, err
    notice = next(line for line in stdout.splitlines() if line.startswith("--resume changed"))
    assert "--grad-clip 0.01 -> none" in notice
    assert ckpt.read_manifest(ckpt.list_checkpoints(first / "checkpoints")[-1].path)["info"]["config"]["grad_clip"] is None
    assert train_in_process(capsys, *args, "--out-dir", clipped, "--resume")[0] == 0       # keeps clipping at 0.01
    unclipped, still_clipped = losses(first / "metrics.jsonl"), losses(clipped / "metrics.jsonl")
    assert unclipped[4] == still_clipped[4]                 # step 4's loss comes before its update
    assert unclipped[6] != still_clipped[6]                 # the updates differed: clipping really is off


# ---------- finding 4: forged checkpoints whose manifests match ----------

def _rewrite_manifest(path, **changes):
    manifest = json.loads((path / ckpt.MANIFEST_FILE).read_text())
    manifest["files"] = {name: ckpt.sha256_file(path / name) for name in manifest["files"]}
    manifest.update(changes)
    (path / ckpt.MANIFEST_FILE).write_text(json.dumps(manifest))


def _flip_a_tensor_byte(file) -> None:
    """Flips one byte in the middle of the largest tensor of a torch.save zip (its stored data, not a header)."""
    with zipfile.ZipFile(file) as archive:
        member = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(file.read_bytes())
    name_length, extra_length = int.from_bytes(data[member.header_offset + 26:member.header_offset + 28], "little"), \
        int.from_bytes(data[member.header_offset + 28:member.header_offset + 30], "little")
    start = member.header_offset + 30 + name_length + extra_length
    data[start + member.file_size // 2] ^= 0x40
    file.write_bytes(bytes(data))


def _save_state(path, state) -> None:
    with open(path / ckpt.TRAINER_FILE, "wb") as handle:
        torch.save(state, handle)


def _forge(name, latest, previous):
    trainer = latest / ckpt.TRAINER_FILE
    if name == "flipped-tensor-byte":
        _flip_a_tensor_byte(trainer)
        torch.load(trainer, weights_only=True)          # torch itself loads the altered weights without a word
    elif name == "payload-of-an-earlier-step":
        shutil.copy(previous / ckpt.TRAINER_FILE, trainer)
    elif name == "step-only":
        _save_state(latest, {"step": 6})
    elif name == "step-as-text":
        _save_state(latest, {**ckpt.load_trainer_state(latest), "step": "ten"})
    elif name == "missing-keys":
        state = ckpt.load_trainer_state(latest)
        del state["rng"], state["schedule"]
        _save_state(latest, state)
    elif name == "wrong-types":
        _save_state(latest, {**ckpt.load_trainer_state(latest), "config": 5, "sampler": []})
    elif name == "config-value-of-the-wrong-type":
        state = ckpt.load_trainer_state(latest)
        _save_state(latest, {**state, "config": {**state["config"], "steps": "ten", "keep_checkpoints": 0}})
    _rewrite_manifest(latest)
    if name == "files-as-a-list":
        _rewrite_manifest(latest, files=[ckpt.TRAINER_FILE])
    elif name == "manifest-step-as-text":
        _rewrite_manifest(latest, step="ten")
    elif name == "manifest-of-another-step":
        _rewrite_manifest(latest, step=4)


FORGERIES = ["flipped-tensor-byte", "payload-of-an-earlier-step", "step-only", "step-as-text", "missing-keys",
             "wrong-types", "config-value-of-the-wrong-type", "files-as-a-list", "manifest-step-as-text",
             "manifest-of-another-step"]


@pytest.fixture(scope="module")
def six_steps(token_file, tmp_path_factory):
    """A finished run of 6 steps with checkpoints 2, 4, 6 (its dir, its flags but --steps, its {step: loss}) and
    the {step: loss} of an uninterrupted 8-step run with the same flags."""
    base = tmp_path_factory.mktemp("six")
    args = ["--data", token_file, "--checkpoint-every", 2, *SMALL]
    capsys = _NoCapture()
    assert train_in_process(capsys, *args, "--steps", 6, "--out-dir", base / "run")[0] == 0
    assert train_in_process(capsys, *args, "--steps", 8, "--out-dir", base / "reference")[0] == 0
    return base / "run", args, losses(base / "run" / "metrics.jsonl"), losses(base / "reference" / "metrics.jsonl")


class _NoCapture:
    def readouterr(self):
        return "", ""


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_forged_checkpoint_with_a_matching_manifest_falls_back_to_the_previous_one(six_steps, tmp_path, capsys,
                                                                                      forgery):
    source, args, reference, _ = six_steps
    out = tmp_path / "run"
    shutil.copytree(source, out)
    refs = ckpt.list_checkpoints(out / "checkpoints")
    latest, previous = refs[-1].path, refs[-2].path
    _forge(forgery, latest, previous)
    status, stdout, err = train_in_process(capsys, *args[:-1], "--steps", 6, "--out-dir", out, "--resume")
    assert status == 0, err                                                 # never exit 1 "unexpected ..."
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and f"{latest} is corrupt" in warnings[0], err
    assert f"resumed from {previous} at step 4" in stdout
    assert _steps_written(out / "metrics.jsonl") == [1, 2, 3, 4, 5, 6, 5, 6]   # steps 5 and 6 trained again ...
    assert losses(out / "metrics.jsonl") == reference                          # ... to exactly the same losses


def test_checkpoints_lists_a_flipped_tensor_byte_as_corrupt(six_steps, tmp_path, capsys):
    from trainledger.cli.main import main
    out = tmp_path / "run"
    shutil.copytree(six_steps[0], out)
    latest = ckpt.list_checkpoints(out / "checkpoints")[-1].path
    _forge("flipped-tensor-byte", latest, None)
    assert ckpt.sha256_file(latest / ckpt.TRAINER_FILE) == ckpt.read_manifest(latest)["files"][ckpt.TRAINER_FILE]
    assert main(["checkpoints", str(out), "--json"]) == 0
    records = {r["step"]: r for r in json.loads(capsys.readouterr().out)["checkpoints"]}
    assert [records[s]["status"] for s in (2, 4, 6)] == ["ok", "ok", "corrupt"]
    assert "CRC-32" in records[6]["problem"]


def test_a_dcp_file_missing_from_the_manifest_is_corrupt(tmp_path):
    """Sharded checkpoints: every file under model/ must be listed with its sha256 (a planted shard is found)."""
    tmp = ckpt.begin(tmp_path, 3)
    (tmp / ckpt.SHARDED_DIR).mkdir()
    (tmp / ckpt.SHARDED_DIR / "__0_0.distcp").write_bytes(b"shard")
    _save_state(tmp, {"step": 3})
    path = ckpt.commit(tmp, tmp_path, 3, "dcp")
    assert ckpt.verify(path) == ("dcp", None)
    (path / ckpt.SHARDED_DIR / "__1_0.distcp").write_bytes(b"planted")
    assert "model/__1_0.distcp is not in the manifest" in ckpt.verify(path)[1]


# ---------- finding 8: one line and exit 2, never "unexpected", never a hang ----------

def test_a_full_disk_while_drawing_loss_png_keeps_the_run(token_file, tmp_path, capsys, monkeypatch):
    from trainledger.train import loop

    def full_disk(records, path, title="", fmt=None):
        with open(path, "wb") as handle:
            handle.write(b"\x89PNG\r\n\x1a\n")                        # the first bytes made it ...
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))         # ... then the disk was full
    monkeypatch.setattr(loop, "plot_loss", full_disk)
    status, stdout, err = train_in_process(capsys, "--data", token_file, "--steps", 2, "--out-dir", tmp_path,
                                           "--seq-len", 16, "--batch-size", 4, "--eval-every", 0, "--quiet")
    assert status == 0, err
    assert err.strip().splitlines() == [f"warning: could not write the loss curve {tmp_path / 'loss.png'}: No space "
                                        f"left on device [ENOSPC]; the run itself is saved (metrics "
                                        f"{tmp_path / 'metrics.jsonl'}, checkpoints)"]
    assert not (tmp_path / "loss.png").exists() and not list(tmp_path.glob("loss.png*"))   # no 0-byte or temp file
    assert sorted(losses(tmp_path / "metrics.jsonl")) == [1, 2]
    assert [r.step for r in ckpt.list_checkpoints(tmp_path / "checkpoints")] == [2]


def test_a_full_disk_while_appending_metrics_is_one_line(token_file, tmp_path):
    """A 12,000-byte file-size limit (the run's run.toml, about 6 KB, fits): a later metrics line cannot be written
    (EFBIG, as ENOSPC would)."""
    import resource

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (12000, 12000))
    result = subprocess.run(train_cmd("--data", token_file, "--steps", 50, "--out-dir", tmp_path,
                                      "--checkpoint-every", 1000, *SMALL), capture_output=True, text=True,
                            timeout=120, env=env(), preexec_fn=limit)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --metrics: cannot append to {tmp_path / 'metrics.jsonl'}")
    assert "File too large" in lines[0] and "unexpected" not in lines[0]


def test_the_advice_after_a_full_disk_works(token_file, tmp_path, capsys, monkeypatch):
    """Room for 3.5 checkpoints: keeping 3 fails at the 4th save with "lower --keep-checkpoints"; the advised
    `--resume --keep-checkpoints 1` deletes the excess first, then saves."""
    from trainledger.train import checkpointing
    directory = tmp_path / "checkpoints"
    args = ["--data", token_file, "--out-dir", tmp_path, "--checkpoint-every", 1, *SMALL]
    assert train_in_process(capsys, *args, "--steps", 1)[0] == 0
    one = ckpt.checkpoint_bytes(ckpt.list_checkpoints(directory)[0].path)
    quota = int(3.5 * one)

    def disk_usage(path):
        used = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
        return shutil._ntuple_diskusage(quota, used, max(quota - used, 0))
    monkeypatch.setattr(checkpointing.shutil, "disk_usage", disk_usage)
    status, _, err = train_in_process(capsys, *args, "--steps", 6, "--resume")
    assert status == 2 and "not enough space to save the checkpoint of step 4" in err
    assert "lower --keep-checkpoints" in err
    status, _, err = train_in_process(capsys, *args, "--steps", 6, "--resume", "--keep-checkpoints", "1")
    assert status == 0, err
    assert [r.step for r in ckpt.list_checkpoints(directory)] == [6]


def test_a_second_ctrl_c_during_a_checkpoint_write_is_an_interrupt_not_a_full_disk(token_file, tmp_path, capsys,
                                                                                   monkeypatch):
    def interrupted_write(tmp_dir, state):
        os.kill(os.getpid(), signal.SIGINT)               # the first Ctrl-C: the run would stop after this save

        class SecondCtrlC(io.FileIO):
            def write(self, data):
                os.kill(os.getpid(), signal.SIGINT)       # the second one arrives mid-write, inside torch.save
                return super().write(data)
        with SecondCtrlC(tmp_dir / ckpt.TRAINER_FILE, "wb") as handle:
            torch.save(state, handle)
    monkeypatch.setattr(ckpt, "write_trainer_state", interrupted_write)
    status, _, err = train_in_process(capsys, "--data", token_file, "--steps", 4, "--out-dir", tmp_path,
                                      "--checkpoint-every", 2, *SMALL)
    assert status == 130 and err.strip() == "interrupted", err
    assert "space" not in err and "--keep-checkpoints" not in err
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [".lock"]   # no partial directory


@pytest.fixture
def odd_files(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    (tmp_path / "train5.toml").write_text("train = 5\n")
    (tmp_path / "x.txt").write_text("hello world\n" * 10)
    return tmp_path


TRAIN = ["train", "--steps", 2, "--seq-len", 16, "--no-plot", "--quiet"]
ODD = [
    (lambda d: [*TRAIN, "--config", d / "fifo"], "--config", "named pipe"),           # used to hang
    (lambda d: [*TRAIN, "--config", "/dev/zero"], "--config", "character device"),    # MemoryError after 33 s
    (lambda d: [*TRAIN, "--config", d / "folder"], "--config", "is a directory"),
    (lambda d: [*TRAIN, "--config", d / "train5.toml"], "--config", "must be a table"),
    (lambda d: [*TRAIN, "--seed", "1180591620717411303424"], "--seed", "0..2^63-1"),
    (lambda d: [*TRAIN, "--batch-size", "100000000"], "--batch-size", "of RAM"),        # 48 GiB, MemoryError
    (lambda d: [*TRAIN, "--global-batch-size", "4611686018427387904"], "--global-batch-size", "of RAM"),
    (lambda d: [*TRAIN, "--global-batch-size", "4611686018427387904", "--batch-size", "1"], "--global-batch-size",
     "of RAM"),
    (lambda d: [*TRAIN, "--text", "/dev/zero"], "--text", "is not a regular file"),   # said "does not exist"
    (lambda d: [*TRAIN, "--text", d / "fifo"], "--text", "is not a regular file"),
    (lambda d: [*TRAIN, "--metrics", "/dev/full"], "--metrics", "is not a regular file"),
    (lambda d: [*TRAIN, "--out-dir", ""], "--out-dir", "must not be empty"),           # wrote into the cwd
    (lambda d: ["optimal", "--budget-flops", "5e-324"], "--budget-flops", "too small"),  # ZeroDivisionError
    (lambda d: ["bench", "--size", "1e9"], "--size", "available on cpu"),                # tried to allocate 12 EB
    (lambda d: ["tokenize", d / "x.txt", "/dev/full"], "OUTPUT.tokens", "is not a regular file"),
    (lambda d: ["tokenize", d / "fifo", d / "x.tokens"], "INPUT", "is not a regular file"),
]


@pytest.mark.timeout(60)          # a hang fails here instead of eating the suite's budget
@pytest.mark.parametrize("argv, flag, message", ODD, ids=[
    "config-fifo", "config-dev-zero", "config-dir", "toml-train-5", "seed-2-70", "batch-size-1e8",
    "global-batch-2-62", "global-batch-2-62-micro-1", "text-dev-zero", "text-fifo", "metrics-dev-full",
    "out-dir-empty", "budget-flops-5e-324", "bench-size-1e9", "tokenize-to-dev-full", "tokenize-from-fifo"])
def test_hostile_input_is_one_line_exit_2(odd_files, argv, flag, message, capsys, monkeypatch):
    from trainledger.cli.main import main
    monkeypatch.chdir(odd_files)
    args = [str(a) for a in argv(odd_files)]
    if args[0] == "train" and "--out-dir" not in args:
        args += ["--out-dir", str(odd_files / "out")]
    status = main(args)
    err = capsys.readouterr().err
    assert status == 2, err
    assert err.startswith("error:") and err.count("\n") == 1 and "unexpected" not in err, err
    assert flag in err and message in err, err
    assert not (odd_files / "checkpoints").exists() and not (odd_files / "metrics.jsonl").exists()   # cwd untouched


def test_the_memory_check_compares_the_prediction_with_what_is_available(token_file, tmp_path, capsys, monkeypatch):
    """The refusal of finding 8's --batch-size 10^8 is a comparison, not a fixed limit: a run that fits in 1 GiB is
    refused with 1 MiB available and runs with 1 GiB."""
    from trainledger.measure import resources
    args = ["--data", token_file, "--steps", 1, "--out-dir", tmp_path, *SMALL]
    monkeypatch.setattr(resources, "available_cpu_bytes", lambda: (2.0**20, "a test's 1 MiB"))
    status, _, err = train_in_process(capsys, *args)
    assert status == 2 and "more than the 1 MiB available (a test's 1 MiB)" in err
    monkeypatch.setattr(resources, "available_cpu_bytes", lambda: (2.0**30, "a test's 1 GiB"))
    assert train_in_process(capsys, *args)[0] == 0


# ---------- finding 9: the launcher ----------

def test_a_rank_whose_launcher_died_stops_with_a_checkpoint_and_resumes_exactly(six_steps, token_file, tmp_path,
                                                                                capsys, monkeypatch):
    """Unit form of a SIGKILLed torchrun: the parent pid changes after step 3 (the kernel re-parented the rank)."""
    from trainledger.train import signals
    parents = iter([4242] * 4)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "test")
    monkeypatch.setattr(signals, "parent_pid", lambda: next(parents, 1))     # 4242 at start and steps 1-3, then 1
    args = ["--data", token_file, "--checkpoint-every", 100, "--out-dir", tmp_path, *SMALL[:-1]]
    status, stdout, err = train_in_process(capsys, *args, "--steps", 8)
    assert status == 0, err
    assert "stopped by launcher exit: 4 steps" in stdout
    assert [r.step for r in ckpt.list_checkpoints(tmp_path / "checkpoints")] == [4]
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")
    assert train_in_process(capsys, *args, "--steps", 8, "--resume")[0] == 0
    assert losses(tmp_path / "metrics.jsonl") == six_steps[3]                # the uninterrupted 8 steps, exactly


HARNESS = r"""
import ctypes, json, os, signal, subprocess, sys, time
ctypes.CDLL(None).prctl(36, 1)          # PR_SET_CHILD_SUBREAPER: the orphaned ranks become our children
command, metrics = json.loads(sys.argv[1]), sys.argv[2]
launcher = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
deadline = time.monotonic() + 150
def steps():
    try:
        return sum(1 for line in open(metrics) if line.strip())
    except FileNotFoundError:
        return 0
while steps() < 2 and launcher.poll() is None and time.monotonic() < deadline:
    time.sleep(0.02)
ranks = [int(p) for p in open(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read().split()]
launcher.kill()                          # SIGKILL to torchrun alone: its ranks keep running
launcher.wait()
statuses = {}
while len(statuses) < len(ranks) and time.monotonic() < deadline + 60:
    pid, status = os.waitpid(-1, os.WNOHANG)
    if pid in ranks:
        statuses[pid] = os.waitstatus_to_exitcode(status)
    time.sleep(0.02)
print(json.dumps({"ranks": len(ranks), "exit": sorted(statuses.values())}))
print(launcher.stderr.read(), file=sys.stderr)
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs /proc and PR_SET_CHILD_SUBREAPER (Linux)")
def test_sigkill_to_torchrun_alone_stops_its_ranks_with_a_checkpoint(token_file, tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "trainledger.cli.main", "train", "--data", str(token_file), "--seq-len", "16", "--steps", "200",
               "--checkpoint-every", "1000", "--global-batch-size", "4", "--eval-every", "0", "--no-plot", "--quiet",
               "--parallel", "ddp", "--out-dir", str(out)]
    result = subprocess.run([sys.executable, "-c", HARNESS, json.dumps(command), str(out / "metrics.jsonl")],
                            capture_output=True, text=True, timeout=300,
                            env={**env(), "TRAINLEDGER_TEST_STEP_DELAY_S": "0.1"})
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert report == {"ranks": 2, "exit": [0, 0]}, result.stderr[-3000:]   # both ranks stopped cleanly
    last = max(losses(out / "metrics.jsonl"))
    assert 2 <= last < 200
    for rank in (0, 1):
        assert f"rank {rank}: stopped by launcher exit at step {last}, exit 0" in result.stderr
    refs = ckpt.list_checkpoints(out / "checkpoints")
    assert [r.step for r in refs] == [last] and ckpt.verify(refs[0].path) == ("full", None)
