"""Two nodes simulated on one machine: two torchrun agents (`--nnodes 2 --nproc_per_node 1`) on 127.0.0.1, gloo.

What a job on several machines relies on, each checked here with the tiny model on CPU:
- the losses equal one process's at the same global batch (1e-5 relative), under DDP (c10d rendezvous, what the
  Slurm script of `layout --launch slurm` uses) and FSDP (static rendezvous, what `--launch torchrun` prints);
- one metrics record per step and one checkpoint directory per save (written once, not once per node; under FSDP
  one DCP shard per rank inside it);
- a worker killed mid-run is restarted by its agent (--max-restarts 1), both nodes resume from the last checkpoint
  (the command carries --resume, as the launch text does) and finish with the uninterrupted losses;
- a second trainer on the same --out-dir while the job runs is refused with exit 2 (the run's lock);
- the torchrun line `trainledger layout --launch torchrun` prints for a 2-GPU layout of `tiny` (one GPU per node)
  trains when started as the two agents.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from train_helpers import SMALL, env, losses, train_in_process
from trainledger.cli import launch
from trainledger.train import checkpoint as ckpt

STEPS, EVERY = 8, 3
SAVES = [3, 6, 8]                                  # every 3 steps, and always at the end
BASE = ["--steps", STEPS, "--checkpoint-every", EVERY, "--global-batch-size", 4, *SMALL[4:]]
AGENT_TIMEOUT_S = 240

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent_command(node_rank: int, port: int, rendezvous: str, max_restarts: int = 0) -> list[str]:
    """One node's torchrun agent with one worker: c10d (both agents meet at the endpoint, ranks by arrival) or
    static (node 0 hosts the store; ranks by --node-rank)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
               "--rdzv-backend", rendezvous, "--rdzv-endpoint", f"127.0.0.1:{port}", "--max-restarts", str(max_restarts)]
    command += ["--rdzv-id", "test"] if rendezvous == "c10d" else ["--node-rank", str(node_rank)]
    return command


def start_nodes(args, rendezvous: str, max_restarts: int = 0, extra_env: dict | None = None) -> list[subprocess.Popen]:
    """The two agents; c10d ones with the environment the Slurm script of `layout --launch slurm` exports."""
    port = free_port()
    c10d_env = launch.C10D_ENV if rendezvous == "c10d" else {}
    return [subprocess.Popen([*agent_command(node, port, rendezvous, max_restarts), "-m", "trainledger.cli.main",
                              "train", *map(str, args)], env={**env(), **c10d_env, **(extra_env or {})},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for node in (0, 1)]


def finish(agents: list[subprocess.Popen]) -> list[tuple[int, str]]:
    """(exit status, stderr) of each agent; both are killed if one hangs past AGENT_TIMEOUT_S."""
    results = []
    try:
        for agent in agents:
            _, err = agent.communicate(timeout=AGENT_TIMEOUT_S)
            results.append((agent.returncode, err))
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.communicate()
    for status, err in results:
        if status:          # the ranks' own errors, which torchrun's summary hides: pytest shows them on a failure
            print("\n".join(line for line in err.splitlines() if "rror" in line or "Signal" in line))
    return results


def records(metrics: Path) -> list[dict]:
    return [json.loads(line) for line in metrics.read_text().splitlines()]


def worker_of(agent: subprocess.Popen) -> int:
    """The pid of the agent's one worker (its child process, from /proc)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[1]) == agent.pid:
                return int(stat.parent.name)
        time.sleep(0.05)
    raise AssertionError(f"agent {agent.pid} started no worker")


def wait_for_step(metrics: Path, step: int, agents: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + AGENT_TIMEOUT_S
    while max(losses(metrics), default=0) < step:
        assert all(a.poll() is None for a in agents), "an agent ended before step %d" % step
        assert time.monotonic() < deadline, f"no step {step} in {metrics}"
        time.sleep(0.05)


def assert_saved_once_each(checkpoints: Path, fmt: str) -> None:
    """One complete, intact directory per save and nothing else (no second copy from the other node, no leftover
    temporary directory); a DCP checkpoint holds one shard per rank."""
    assert sorted(p.name for p in checkpoints.iterdir()) == [".lock", *(f"step_{s:08d}" for s in SAVES)]
    for ref in ckpt.list_checkpoints(checkpoints):
        assert ckpt.verify(ref.path) == (fmt, None)
        if fmt == "dcp":
            assert sorted(p.name for p in (ref.path / "model").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]


@pytest.fixture(scope="module")
def single(token_file, tmp_path_factory):
    """{step: loss} of one process at the same global batch of 4."""
    out = tmp_path_factory.mktemp("single")

    class NoCapture:
        def readouterr(self):
            return "", ""

    status, _, err = train_in_process(NoCapture(), "--data", token_file, "--out-dir", out, "--seq-len", 16, *BASE)
    assert status == 0, err
    return losses(out / "metrics.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("parallel, rendezvous", [("ddp", "c10d"), ("fsdp", "static")])
def test_two_nodes_match_one_process_and_save_once(token_file, tmp_path, single, parallel, rendezvous):
    out = tmp_path / "run"
    agents = start_nodes(["--data", token_file, "--seq-len", 16, *BASE, "--parallel", parallel, "--out-dir", out],
                         rendezvous)
    for status, err in finish(agents):
        assert status == 0, err[-2000:]
    steps = [r["step"] for r in records(out / "metrics.jsonl")]
    assert steps == list(range(1, STEPS + 1))                 # one record per step: rank 0 writes, once
    got = losses(out / "metrics.jsonl")
    assert [got[s] for s in steps] == pytest.approx([single[s] for s in steps], rel=1e-5)
    assert_saved_once_each(out / "checkpoints", "dcp" if parallel == "fsdp" else "full")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to find a node's worker")
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_killed_worker_restarts_from_last_checkpoint_and_a_second_run_is_refused(token_file, tmp_path, single,
                                                                                 parallel, capsys):
    out = tmp_path / "run"
    args = ["--data", token_file, "--seq-len", 16, *BASE, "--parallel", parallel, "--out-dir", out, "--resume"]
    # c10d rendezvous and --max-restarts as in the Slurm script of `layout --launch slurm`; steps slowed so that
    # the kill lands between known steps on a loaded machine
    agents = start_nodes(args, "c10d", max_restarts=1, extra_env={"TRAINLEDGER_TEST_STEP_DELAY_S": "0.8"})
    try:
        wait_for_step(out / "metrics.jsonl", 1, agents)
        # a second trainer on the same --out-dir meanwhile (in this process: no start-up time for the job to end in)
        status, _, err = train_in_process(capsys, "--data", token_file, "--seq-len", 16, *BASE, "--out-dir", out)
        assert status == 2 and err.startswith("error: ") and "in use by pid" in err and err.count("\n") == 1, err
        wait_for_step(out / "metrics.jsonl", EVERY + 1, agents)   # past the first checkpoint
        os.kill(worker_of(agents[1]), signal.SIGKILL)              # node 1's worker dies without a word
    finally:
        results = finish(agents)
    for status, err in results:
        assert status == 0, err[-2000:]
    steps = [r["step"] for r in records(out / "metrics.jsonl")]
    again = next(i for i, s in enumerate(steps) if s in steps[:i])      # the first step the restart recorded
    last_before_kill = steps[again - 1]
    assert steps[again] - 1 == max(s for s in SAVES if s <= last_before_kill)  # it resumed the last checkpoint
    assert steps[-1] == STEPS and sorted(set(steps)) == list(range(1, STEPS + 1))
    got = losses(out / "metrics.jsonl")
    assert [got[s] for s in sorted(got)] == pytest.approx([single[s] for s in sorted(single)], rel=1e-5)
    assert_saved_once_each(out / "checkpoints", "dcp" if parallel == "fsdp" else "full")


@pytest.mark.slow
def test_launch_torchrun_line_of_a_two_gpu_layout_trains_as_two_nodes(token_file, tmp_path, capsys):
    from trainledger.cli.main import main
    # (the run's length is the launch's since issue 41: --steps and --checkpoint-every go to layout)
    assert main(["layout", "--model", "tiny", "--num-gpus", "2", "--gpus-per-node", "1", "--global-batch-size", "4",
                 "--seq-len", "16", "--precision", "fp32", "--launch", "torchrun", "--steps", "3",
                 "--checkpoint-every", "3"]) == 0
    text = capsys.readouterr().out
    [line] = [line for line in text.splitlines() if not line.startswith("#")]
    assert line.startswith('torchrun --nnodes 2 --nproc-per-node 1 --node-rank "$NODE_RANK"')
    # the placeholders as a user fills them; torchrun is the module the venv runs, the port a free one
    line = line.replace("torchrun ", f"{shlex.quote(sys.executable)} -m torch.distributed.run ", 1)
    line = line.replace(":29500", f":{free_port()}")
    out = tmp_path / "run"
    quick = "--eval-every 0 --no-plot --quiet"
    nodes = [subprocess.Popen(["bash", "-c", f"{line} {quick}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env={**env(), "NODE_RANK": str(node), "MASTER_ADDR": "127.0.0.1",
                                              "DATA": str(token_file), "RUN_DIR": str(out)})
             for node in (0, 1)]
    for status, err in finish(nodes):
        assert status == 0, err[-2000:]
    assert sorted(losses(out / "metrics.jsonl")) == [1, 2, 3]
    assert [r.step for r in ckpt.list_checkpoints(out / "checkpoints")] == [3]


@pytest.mark.slow
def test_launch_torchrun_line_with_its_training_settings_runs_two_agents_of_two(token_file, tmp_path, capsys):
    """Issue 41: the line `layout --launch torchrun` prints for 4 GPUs on nodes of 2, training settings included
    (here --steps 4 --checkpoint-every 2; lr and warmup as the launch chose them), run as printed by two agents of
    --nproc-per-node 2 on 127.0.0.1 (gloo): four workers train the four steps with the printed learning rate."""
    from trainledger.cli.main import main
    from trainledger.train.metrics import read_metrics
    capsys.readouterr()
    assert main(["layout", "--model", "tiny", "--num-gpus", "4", "--gpus-per-node", "2", "--global-batch-size", "8",
                 "--seq-len", "16", "--precision", "fp32", "--launch", "torchrun", "--steps", "4",
                 "--checkpoint-every", "2", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)["launch"]
    [line] = [line for line in printed["torchrun"].splitlines() if not line.startswith("#")]
    assert line.startswith('torchrun --nnodes 2 --nproc-per-node 2 --node-rank "$NODE_RANK"')
    settings = printed["settings"]
    assert (settings["steps"], settings["checkpoint_every"], settings["warmup_steps"]) == (4, 2, 0)
    line = line.replace("torchrun ", f"{shlex.quote(sys.executable)} -m torch.distributed.run ", 1)
    line = line.replace(":29500", f":{free_port()}")
    out = tmp_path / "run"
    nodes = [subprocess.Popen(["bash", "-c", f"{line} --eval-every 0 --no-plot --quiet"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**env(), "NODE_RANK": str(node), "MASTER_ADDR": "127.0.0.1",
                                   "DATA": str(token_file), "RUN_DIR": str(out)})
             for node in (0, 1)]
    for status, err in finish(nodes):
        assert status == 0, err[-2000:]
    records = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    assert records[0]["lr"] == pytest.approx(settings["lr"])        # no warmup in a 4-step run: the peak first
    assert settings["min_lr"] <= records[-1]["lr"] < settings["lr"]
    assert [r.step for r in ckpt.list_checkpoints(out / "checkpoints")] == [2, 4]
    import tomllib
    assert tomllib.loads((out / "run.toml").read_text())["hardware"]["num_gpus"] == 4
