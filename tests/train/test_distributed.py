"""Data parallelism on CPU: 2 gloo processes under torchrun with DDP and FSDP2 reproduce the 1-process losses, and resume.

Ranks draw the same global batch and keep disjoint slices, and gradients are averaged over ranks and
micro-batches, so 2 ranks × 2 micro-batches of 1 sequence must give the losses of 1 process with
batches of 4 — up to the order of floating-point sums (1e-5 relative).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train_helpers import SMALL, env, losses, train_in_process
from trainledger.train import checkpoint as ckpt

STEPS = 8
BASE = ["--steps", STEPS, "--checkpoint-every", 3, "--global-batch-size", 4, *SMALL[4:]]


def torchrun(*args, extra_env=None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "trainledger.cli.main", "train", *map(str, args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env={**env(), **(extra_env or {})})
    if result.returncode:      # the ranks' own errors, which torchrun's summary at the end of stderr hides:
        marks = ("error", "Error", "terminate", "what()", "Abort", "Signal")     # pytest shows them on a failure
        print("\n".join(line for line in result.stderr.splitlines() if any(m in line for m in marks)))
    return result


@pytest.fixture(scope="module")
def single(token_file, tmp_path_factory):
    """{step: loss} of one process, --batch-size 4, no accumulation."""
    out = tmp_path_factory.mktemp("single")
    capsys = _NoCapture()
    status, _, err = train_in_process(capsys, "--data", token_file, "--out-dir", out, "--seq-len", 16, *BASE)
    assert status == 0, err
    return losses(out / "metrics.jsonl")


class _NoCapture:
    """Stands in for pytest's capsys in a module fixture (output is not checked there)."""

    def readouterr(self):
        return "", ""


@pytest.mark.slow
@pytest.mark.parametrize("parallel, accum", [("ddp", 2), ("fsdp", 1)])
def test_two_ranks_match_one_process_and_resume(token_file, tmp_path, single, parallel, accum):
    args = ["--data", token_file, "--seq-len", 16, *BASE, "--parallel", parallel, "--grad-accum", accum]
    # interrupted at step 5 (a NaN injected there stops every rank), then resumed from the step-3 checkpoint
    out = tmp_path / "run"
    stopped = torchrun(*args, "--out-dir", out, extra_env={"TRAINLEDGER_FAULT_NAN_STEP": "5"})
    assert stopped.returncode != 0 and "loss is nan at step 5" in stopped.stderr
    first = losses(out / "metrics.jsonl")
    assert sorted(first) == [1, 2, 3, 4]
    assert [first[s] for s in range(1, 5)] == pytest.approx([single[s] for s in range(1, 5)], rel=1e-5)
    refs = ckpt.list_checkpoints(out / "checkpoints")
    assert [r.step for r in refs] == [3]
    assert ckpt.verify(refs[0].path) == ("dcp" if parallel == "fsdp" else "full", None)

    resumed = torchrun(*args, "--out-dir", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    got = losses(out / "metrics.jsonl")
    assert sorted(got) == sorted(single)
    assert [got[s] for s in sorted(got)] == pytest.approx([single[s] for s in sorted(single)], rel=1e-5)


@pytest.mark.slow
def test_mixed_bf16_under_ddp_matches_one_process(token_file, tmp_path, capsys):
    """2 DDP ranks × micro-batch 2 × 2 micro-batches = the global batch 8 of one process with 4 micro-batches of 2;
    DDP all-reduces the bf16 grads (so the losses agree to bf16 rounding, not 1e-5) and the bytes are predicted."""
    args = ["--data", token_file, "--precision", "mixed-bf16", "--steps", 3, "--batch-size", 2, *SMALL[4:]]
    status, _, err = train_in_process(capsys, *args, "--global-batch-size", 8, "--out-dir", tmp_path / "one")
    assert status == 0, err
    ranks = torchrun(*args, "--parallel", "ddp", "--grad-accum", 2, "--out-dir", tmp_path / "ddp")
    assert ranks.returncode == 0, ranks.stderr[-2000:]
    one, ddp = losses(tmp_path / "one" / "metrics.jsonl"), losses(tmp_path / "ddp" / "metrics.jsonl")
    assert sorted(ddp) == [1, 2, 3] and [ddp[s] for s in ddp] == pytest.approx([one[s] for s in ddp], rel=1e-3)
    records = [json.loads(line) for line in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["comm_bytes"] == pytest.approx(r["predicted_comm_bytes"], rel=1e-3) for r in records)


@pytest.fixture(scope="module")
def fsdp_stopped(token_file, tmp_path_factory):
    """An FSDP run under torchrun stopped by a NaN at step 7, with DCP checkpoints 3 and 6: (out dir, args)."""
    out = tmp_path_factory.mktemp("fsdp") / "run"
    args = ["--data", token_file, "--seq-len", 16, *BASE, "--parallel", "fsdp"]
    stopped = torchrun(*args, "--out-dir", out, extra_env={"TRAINLEDGER_FAULT_NAN_STEP": "7"})
    assert stopped.returncode != 0 and "loss is nan at step 7" in stopped.stderr
    assert [r.step for r in ckpt.list_checkpoints(out / "checkpoints")] == [3, 6]
    return out, args


def _rewrite_manifest(path):
    manifest = json.loads((path / ckpt.MANIFEST_FILE).read_text())
    manifest["files"] = {name: ckpt.sha256_file(path / name) for name in manifest["files"]}
    (path / ckpt.MANIFEST_FILE).write_text(json.dumps(manifest))
    assert ckpt.verify(path) == ("dcp", None)


@pytest.mark.slow
def test_pickle_payload_in_dcp_metadata_never_runs_under_torchrun(fsdp_stopped, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(fsdp_stopped[0], out)
    marker = tmp_path / "payload-ran"
    latest = out / "checkpoints" / "step_00000006"
    (latest / "model" / ".metadata").write_bytes(b"cos\nmkdir\n(V" + str(marker).encode() + b"\ntR.")
    _rewrite_manifest(latest)           # an attacker can recompute the sha256s
    resumed = torchrun(*fsdp_stopped[1], "--out-dir", out, "--resume")
    assert resumed.returncode != 0
    assert "error: refusing checkpoint" in resumed.stderr and "os.mkdir" in resumed.stderr
    assert resumed.stderr.count("error: ") == 1                 # rank 0 says it once; rank 1 exits 2 quietly
    assert not marker.exists()


@pytest.mark.slow
@pytest.mark.parametrize("damage, reported", [
    (lambda data: data[: len(data) // 2], "truncated"),        # found by the shard-size check before loading
    (lambda data: bytes(len(data)), ", item "),                 # right size, zeroed: found by loading each item
], ids=["truncated", "zeroed"])
def test_damaged_dcp_shard_with_matching_manifest_falls_back_under_torchrun(fsdp_stopped, tmp_path, single,
                                                                            damage, reported):
    out = tmp_path / "run"
    shutil.copytree(fsdp_stopped[0], out)
    latest = out / "checkpoints" / "step_00000006"
    shard = latest / "model" / "__1_0.distcp"
    shard.write_bytes(damage(shard.read_bytes()))
    _rewrite_manifest(latest)
    resumed = torchrun(*fsdp_stopped[1], "--out-dir", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "step_00000006 is corrupt" in resumed.stderr and reported in resumed.stderr
    got = losses(out / "metrics.jsonl")
    assert sorted(got) == sorted(single)
    assert [got[s] for s in sorted(got)] == pytest.approx([single[s] for s in sorted(single)], rel=1e-5)


def _children(pid: int) -> list[int]:
    """The pids whose parent is `pid` (from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find the ranks")
@pytest.mark.parametrize("target", ["ranks", "torchrun"])
def test_sigterm_under_torchrun_saves_and_every_rank_exits_0(token_file, tmp_path, target):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "trainledger.cli.main", "train", *map(str, ["--data", token_file, "--seq-len", 16, *BASE[2:],
                                                                 "--steps", 200, "--parallel", "ddp",
                                                                 "--out-dir", out])]
    process = subprocess.Popen(command, env={**env(), "TRAINLEDGER_TEST_STEP_DELAY_S": "0.1"},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics, deadline = out / "metrics.jsonl", time.monotonic() + 120
    while len(losses(metrics)) < 2 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    ranks = _children(process.pid)
    assert len(ranks) == 2 and process.poll() is None
    for pid in ranks if target == "ranks" else [process.pid]:
        os.kill(pid, signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    last = max(losses(metrics))
    assert 2 <= last < 200
    for rank in (0, 1):
        assert f"rank {rank}: stopped by SIGTERM at step {last}, exit 0" in stderr
    if target == "ranks":       # torchrun itself, signalled, exits 1 with its own SignalException: see docs/train.md
        assert process.returncode == 0, stderr[-2000:]
    refs = ckpt.list_checkpoints(out / "checkpoints")
    assert [r.step for r in refs] == [last] and ckpt.verify(refs[0].path) == ("full", None)


@pytest.mark.parametrize("rank", [0, 1])
def test_teardown_closes_the_other_ranks_first(monkeypatch, rank):
    """Rank 1 closes its process group, then says so through the store; rank 0 waits for that, then closes."""
    from datetime import timedelta

    from trainledger.train import distributed as D

    events = []

    class Store:
        def set(self, key, value):
            events.append(("set", key))

        def wait(self, keys, timeout):
            assert timeout == timedelta(seconds=D.TEARDOWN_WAIT_SECONDS)
            events.append(("wait", tuple(keys)))

    monkeypatch.setattr(D.dist, "is_initialized", lambda: True)
    monkeypatch.setattr(D.dist.distributed_c10d, "_get_default_store", lambda: Store())
    monkeypatch.setattr(D.dist, "destroy_process_group", lambda: events.append(("destroy",)))
    D.teardown(D.World(rank=rank, world_size=3))
    if rank:
        assert events == [("destroy",), ("set", "trainledger/closed/1")]
    else:
        assert events == [("wait", ("trainledger/closed/1", "trainledger/closed/2")), ("destroy",)]
    events.clear()
    D.teardown(D.World(rank=0, world_size=1))            # one process: nothing to close
    assert events == []


def test_a_rank_ends_with_os_exit_after_teardown_and_a_call_returns(monkeypatch, capsys):
    """Issue 31 item 8: after teardown a rank still runs gloo's C++ threads (the group outlives
    destroy_process_group), and one that needs the GIL while the interpreter shuts down aborts the rank
    ("terminate called without an active exception", SIGABRT, seen once under load). So a rank started as a
    program leaves with os._exit(status) once its output is flushed; a call of main() with arguments (tests, an
    embedding program) returns, and a process that started no group is left alone."""
    from trainledger.cli import main as cli_main
    from trainledger.train import distributed as D

    exits = []
    monkeypatch.setattr(D.os, "_exit", exits.append)
    monkeypatch.setattr(cli_main, "_main", lambda argv: 3)
    monkeypatch.setattr(D, "_GROUP_STARTED", False)
    assert cli_main.main() == 3 and exits == []                   # no process group: an ordinary exit
    monkeypatch.setattr(D, "_GROUP_STARTED", True)
    assert cli_main.main(["train"]) == 3 and exits == []          # called with arguments: returns
    cli_main.main()                                                # a rank, as a program: os._exit(3)
    assert exits == [3]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc to list threads")
def test_gloo_threads_outlive_teardown(tmp_path):
    """The reason for the test above, measured: after destroy_process_group a gloo rank still runs its
    communication threads (pt_gloo_runloop, gloo_tcp_loop) when the process group is still referred to, as
    FSDP2's state and the DeviceMesh refer to it in a training run."""
    script = tmp_path / "rank.py"
    script.write_text(
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo')\n"
        "group = dist.group.WORLD\n"          # held, as a model's DeviceMesh holds it
        "t = torch.ones(4); dist.all_reduce(t)\n"
        "dist.barrier(); dist.destroy_process_group()\n"
        "names = sorted(open(f'/proc/self/task/{t}/comm').read().strip() for t in os.listdir('/proc/self/task'))\n"
        # one file per rank: print() writes its parts separately, so two ranks on one pipe can interleave
        f"open(os.path.join({str(tmp_path)!r}, 'threads' + os.environ['RANK']), 'w').write(repr(names))\n"
        "os._exit(0)\n")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=env())
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [path.read_text() for path in sorted(tmp_path.glob("threads*"))]
    assert len(lines) == 2 and all("pt_gloo_runloop" in line for line in lines), lines
