"""The attack of issue 23 (finding 1): a second trainer on the same --text and --out-dir must not kill the first.

The first trainer has its token cache memory-mapped. The text is `touch`ed and a second `train --text same
--out-dir same` starts. Before, the second rewrote the cache in place (truncate, then write): the first then
read past the new end of the file and died of SIGBUS (exit 135), losing its work since the last checkpoint.
Now the cache is never rewritten: the second trainer builds a new one beside it (or fails to), and the first
keeps training, stops cleanly on SIGTERM with a checkpoint, and its cache is the same file, byte for byte.

"resume" is the reproduction as reported (whether the old code lost the race depended on timing);
"fresh-disk-limit" makes the second trainer's write stop at 1 MB (RLIMIT_FSIZE), which left the old in-place
rewrite truncated for good: the first trainer then died of SIGBUS every time.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import signal
import subprocess
import time
from pathlib import Path

import pytest
from train_helpers import SMALL, env, train_cmd

STEP_DELAY_ENV = "TRAINLEDGER_TEST_STEP_DELAY_S"


def _records(metrics: Path) -> int:
    try:
        return sum(1 for line in metrics.read_text().splitlines() if line.strip())
    except FileNotFoundError:
        return 0


def _wait_for(predicate, timeout: float, what: str, process) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None:
            raise AssertionError(f"the first trainer exited ({process.returncode}) while waiting for {what}: "
                                 + process.stderr.read())
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _limit_file_size(max_bytes):
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)      # a write past the limit then fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return limit


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("second", ["resume", "fresh-disk-limit"])
def test_a_second_trainer_after_touch_does_not_kill_the_first(tmp_path, second):
    text, out = tmp_path / "big.txt", tmp_path / "run"
    # ~3 MB of text, one byte token each: the first trainer samples windows all over the cache
    root = Path(__file__).resolve().parents[2] / "src" / "trainledger"
    source = b"".join(p.read_bytes() for p in sorted(root.rglob("*.py")))
    text.write_bytes((source * (3_000_000 // len(source) + 1))[:3_000_000])
    first = subprocess.Popen(train_cmd("--text", text, "--out-dir", out, "--steps", 100_000, "--checkpoint-every", 10_000,
                                       *SMALL), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**env(), STEP_DELAY_ENV: "0.02"})
    try:
        metrics = out / "metrics.jsonl"
        _wait_for(lambda: _records(metrics) >= 3, 120, "the first trainer's steps", first)
        caches = sorted((out / "data").glob("*-" + "?" * 16 + ".tokens"))     # keyed; <name>.tokens links to it
        assert len(caches) == 1
        cache, inode, digest = caches[0], caches[0].stat().st_ino, _digest(caches[0])
        later = time.time() + 5
        os.utime(text, (later, later))                       # touch: the text looks newer than the cache
        flags = ["--text", text, "--out-dir", out, "--steps", 5, *SMALL]
        if second == "resume":
            flags.append("--resume")
        limit = _limit_file_size(1_000_000) if second == "fresh-disk-limit" else None
        result = subprocess.run(train_cmd(*flags), capture_output=True, text=True, timeout=180, env=env(),
                                preexec_fn=limit)
        # the second trainer is refused (the run's lock, or the disk limit) in one line, or trains on its own cache
        assert result.returncode in (0, 2), result.stderr
        if result.returncode == 2:
            assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
        # the first trainer keeps going on the same, intact cache
        done = _records(metrics)
        _wait_for(lambda: _records(metrics) >= done + 3, 120, "steps after the second trainer", first)
        assert cache.exists() and cache.stat().st_ino == inode and _digest(cache) == digest
        first.send_signal(signal.SIGTERM)
        stdout, stderr = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert first.returncode == 0, f"first trainer exited {first.returncode} (SIGBUS is -7 / 135): {stderr}"
    assert "stopped by SIGTERM" in stdout
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert steps[-1] >= done + 3
    assert (out / "checkpoints" / f"step_{steps[-1]:08d}").is_dir()         # its work is saved
