"""Kill, interrupt and plant pickles in `trainledger train` runs, many times over, and check nothing is lost.

    python scripts/fault_harness.py [--kills 18] [--signals 10] [--seed 0] [--steps 30]

1. A reference: one uninterrupted run (tiny model, one thread, checkpoint every 3 steps); its per-step losses.
2. SIGKILL at random moments (mid-step, mid-checkpoint, mid-prune, mid-resume): one run is started with
   --resume and killed, again and again (`--kills` times: every third during start-up or resume, the others a
   few milliseconds after it recorded a step or two more); then a last --resume finishes it.
   Its per-step losses must equal the reference's exactly (bit for bit, the last record of each step winning).
3. SIGTERM and SIGINT (`--signals` runs, alternating; the first two during start-up, the others after a random
   step): each must exit 0 with a verified
   checkpoint, and a resume must end at the reference's losses exactly.
4. Checkpoint members that are no regular file (a FIFO manifest, links to /dev/zero and to /) in the newest
   checkpoint of a copy of the reference run: --resume must fall back to the previous one, no hang.
5. Pickle payloads (a pickle whose loading would create a marker file) planted where a loader could meet one:
   every checkpoint file, the manifest, the metrics, a token file, a tokenizer, a calibration cache, a config,
   and a Hugging Face directory. Each load must refuse or ignore it, and the marker must never appear.

Prints one line per trial and a summary; exit status 1 if anything did not hold. Runs on CPU in a few minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--seq-len", "16", "--batch-size", "4", "--eval-every", "5", "--eval-batches", "2", "--lr", "3e-3",
         "--no-plot", "--quiet", "--checkpoint-every", "3", "--keep-checkpoints", "2"]
DELAY = {"TRAINLEDGER_TEST_STEP_DELAY_S": "0.02"}   # 20 ms after each step: signals land mid-run on any machine


def environment(extra: dict | None = None) -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONHASHSEED": "0", **(extra or {})}


def train(*args) -> list[str]:
    return [sys.executable, "-m", "trainledger.cli.main", "train", *map(str, args)]


def losses(metrics: Path) -> dict[int, float]:
    from trainledger.train.metrics import read_metrics
    return {r["step"]: r["loss"] for r in read_metrics(metrics)} if metrics.exists() else {}


def token_file(where: Path) -> Path:
    from trainledger.data import write_tokens
    text = b"".join(p.read_bytes() for p in sorted((ROOT / "src" / "trainledger").rglob("*.py")))[:60_000]
    path = where / "code.tokens"
    write_tokens(path, np.frombuffer(text, dtype=np.uint8), dtype="uint8")
    return path


def last_step(metrics: Path) -> int:
    """The highest step recorded so far (a torn last line ignored)."""
    try:
        lines = metrics.read_text().splitlines()
    except FileNotFoundError:
        return 0
    steps = []
    for line in lines:
        try:
            steps.append(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            pass
    return max(steps, default=0)


def wait_then(process: subprocess.Popen, metrics: Path, target: int, rng: random.Random) -> None:
    """Returns when the run has recorded step `target` (0: after a random moment of its start-up or resume),
    plus a few random milliseconds, so the signal lands mid-step, mid-save or mid-prune."""
    if target == 0:
        time.sleep(rng.uniform(0.2, 1.5))
        return
    deadline = time.monotonic() + 120
    while last_step(metrics) < target and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(rng.uniform(0, 0.03))


def kills(data: Path, where: Path, steps: int, reference: dict, n: int, rng: random.Random) -> tuple[bool, str]:
    out = where / "killed"
    metrics = out / "metrics.jsonl"
    args = ["--data", data, "--steps", steps, "--out-dir", out, "--resume", *SMALL]
    done = 0
    for i in range(n):
        process = subprocess.Popen(train(*args), env=environment(DELAY), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        # every third kill lands during start-up or resume; the others a step or two further than it stood
        target = 0 if i % 3 == 0 else min(steps - 3, last_step(metrics) + rng.randint(1, 2))
        wait_then(process, metrics, target, rng)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            done += 1
        process.wait(timeout=60)
    finished = subprocess.run(train(*args), env=environment(), capture_output=True, text=True, timeout=300)
    got = losses(out / "metrics.jsonl")
    ok = finished.returncode == 0 and got == reference
    why = "" if ok else f" (exit {finished.returncode}: {finished.stderr.strip()[-300:]}; " \
                        f"steps differing: {sorted(s for s in reference if got.get(s) != reference[s])[:8]})"
    return ok, f"{done} SIGKILLs, then a resume to step {steps}: losses {'identical' if ok else 'DIFFER'}{why}"


def interrupt(data: Path, where: Path, steps: int, reference: dict, sig: signal.Signals, target: int,
              rng: random.Random) -> tuple[bool, str]:
    from trainledger.train import checkpoint as ckpt
    out = where / f"{sig.name.lower()}-{target}-{rng.randrange(10**9)}"
    args = ["--data", data, "--steps", steps, "--out-dir", out, *SMALL]
    process = subprocess.Popen(train(*args), env=environment(DELAY), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    started = time.monotonic()
    wait_then(process, out / "metrics.jsonl", target, rng)
    delay = time.monotonic() - started
    process.send_signal(sig)
    _, stderr = process.communicate(timeout=120)
    refs = ckpt.list_checkpoints(out / "checkpoints")
    verified = all(ckpt.verify(r.path)[0] == "full" for r in refs)
    resumed = subprocess.run(train(*args, "--resume"), env=environment(), capture_output=True, text=True, timeout=300)
    ok = process.returncode == 0 and verified and resumed.returncode == 0 and losses(out / "metrics.jsonl") == reference
    last = refs[-1].step if refs else None
    return ok, (f"{sig.name} after {delay:.2f} s (step {target or 'start-up'}): exit {process.returncode}, last checkpoint {last}, "
                f"resume exit {resumed.returncode}, losses {'identical' if ok else 'DIFFER'}"
                + ("" if ok else f" ({stderr.strip()[-200:]} {resumed.stderr.strip()[-200:]})"))


def members(data: Path, where: Path, steps: int, reference: dict) -> list[tuple[bool, str]]:
    """The newest checkpoint of a copy of the reference run has a member replaced by something that is no
    regular file; `--resume` must warn, fall back to the previous checkpoint (no hang: a 120 s limit) and end
    at the reference's losses."""
    import os

    def fifo(path):
        path.unlink()
        os.mkfifo(path)

    def link_to(target):
        def replace(path):
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)
            path.symlink_to(target)
        return replace

    results = []
    for name, member, sabotage in (("a FIFO manifest.json", "manifest.json", fifo),
                                   ("manifest.json -> /dev/zero", "manifest.json", link_to("/dev/zero")),
                                   ("trainer.pt -> /", "trainer.pt", link_to("/")),
                                   ("model/ -> /", "model", link_to("/"))):
        out = where / f"members-{member}-{len(results)}"
        shutil.copytree(where / "reference", out, symlinks=True)
        newest = sorted((out / "checkpoints").glob("step_*"))[-1]
        sabotage(newest / member)
        args = ["--data", data, "--steps", steps, "--out-dir", out, "--resume", *SMALL]
        try:
            resumed = subprocess.run(train(*args), env=environment(), capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            results.append((False, f"{name} in {newest.name}: --resume still running after 120 s"))
            continue
        ok = resumed.returncode == 0 and "is corrupt" in resumed.stderr and losses(out / "metrics.jsonl") == reference
        results.append((ok, f"{name} in {newest.name}: --resume exit {resumed.returncode}, fell back, losses "
                            f"{'identical' if ok else 'DIFFER'}" + ("" if ok else f" ({resumed.stderr.strip()[-200:]})")))
    return results


def payload(marker: Path) -> bytes:
    """A protocol-0 pickle that calls os.system('touch MARKER') when unpickled."""
    return b"cposix\nsystem\n(V" + f"touch {marker}".encode() + b"\ntR."


def pickles(data: Path, where: Path, steps: int) -> list[tuple[bool, str]]:
    """Each placement: plant the payload, run the command that reads the file; the marker must never appear."""
    from trainledger.train import checkpoint as ckpt
    base = where / "pickle-base"
    subprocess.run(train("--data", data, "--steps", 6, "--out-dir", base, *SMALL), env=environment(), check=True,
                   capture_output=True)
    hf = where / "hf-base"
    subprocess.run([sys.executable, "-m", "trainledger.cli.main", "export", str(base), str(hf)], env=environment(),
                   check=True, capture_output=True)
    results = []
    latest = ckpt.list_checkpoints(base / "checkpoints")[-1].path

    def trial(name: str, plant, command: list[str]) -> None:
        marker = where / f"ran-{len(results)}"
        run_dir, hf_dir = where / f"p{len(results)}", where / f"h{len(results)}"
        shutil.copytree(base, run_dir)
        shutil.copytree(hf, hf_dir)
        target = plant(run_dir, hf_dir, marker)
        names = {"RUN": str(run_dir), "HF-out": f"{hf_dir}-out", "HF": str(hf_dir), "TARGET": str(target)}
        cmd = [names.get(str(part), str(part)) for part in command]
        result = subprocess.run(cmd, env=environment({"HOME": str(where / f"home{len(results)}")}),
                                capture_output=True, text=True, timeout=300)
        ran = marker.exists()
        results.append((not ran and "Traceback" not in result.stderr,
                        f"pickle in {name}: exit {result.returncode}, payload {'RAN' if ran else 'never ran'}"
                        + (f": {result.stderr.strip().splitlines()[-1][:160]}" if result.stderr.strip() else "")))

    def in_checkpoint(filename: str):
        def plant(run_dir, _, marker):
            path = run_dir / "checkpoints" / latest.name / filename
            path.write_bytes(payload(marker))
            return path
        return plant

    def forged(run_dir, _, marker):
        """trainer.pt rebuilt as a valid torch.save zip whose data.pkl is the payload; the manifest's sha256
        rewritten to match (what a forger who can write the directory does)."""
        import hashlib
        import zipfile
        directory = run_dir / "checkpoints" / latest.name
        path = directory / "trainer.pt"
        with zipfile.ZipFile(path) as old:
            entries = [(info.filename, old.read(info)) for info in old.infolist()]
        with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as new:
            for name, content in entries:
                new.writestr(name, payload(marker) if name.endswith("/data.pkl") else content)
        manifest = json.loads((directory / "manifest.json").read_text())
        manifest["files"]["trainer.pt"] = hashlib.sha256(path.read_bytes()).hexdigest()
        (directory / "manifest.json").write_text(json.dumps(manifest))
        return path

    resume = [*train("--data", data, "--steps", steps, "--out-dir", "RUN", "--resume", *SMALL)]
    cli = [sys.executable, "-m", "trainledger.cli.main"]
    trial("trainer.pt, a valid zip with a matching manifest (train --resume)", forged, resume)
    trial("trainer.pt, a valid zip with a matching manifest (checkpoints)", forged, [*cli, "checkpoints", "RUN"])
    trial("trainer.pt, a valid zip with a matching manifest (generate)", forged,
          [*cli, "generate", "RUN", "--prompt", "def ", "--max-new-tokens", "4", "--no-predict"])
    trial("trainer.pt, a valid zip with a matching manifest (export)", forged, [*cli, "export", "RUN", "HF-out"])
    for filename in sorted(p.name for p in latest.iterdir() if p.is_file()):
        trial(f"checkpoint {filename} (train --resume)", in_checkpoint(filename), resume)
        trial(f"checkpoint {filename} (checkpoints)", in_checkpoint(filename),
              [sys.executable, "-m", "trainledger.cli.main", "checkpoints", "RUN"])
        trial(f"checkpoint {filename} (generate)", in_checkpoint(filename),
              [sys.executable, "-m", "trainledger.cli.main", "generate", "RUN", "--prompt", "def ",
               "--max-new-tokens", "4", "--no-predict"])

    def file_in(relative: str):
        def plant(run_dir, hf_dir, marker):
            path = (hf_dir if relative.startswith("HF/") else run_dir) / relative.split("/", 1)[1]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(payload(marker))
            return path
        return plant

    trial("metrics.jsonl (train --resume)", file_in("RUN/metrics.jsonl"), resume)
    trial("a token file (train --data)", file_in("RUN/planted.tokens"),
          train("--data", "TARGET", "--steps", 2, "--out-dir", where / "tok-run", *SMALL))
    trial("a tokenizer (tokenize --tokenizer)", file_in("RUN/tokenizer.json"),
          [*cli, "tokenize", str(ROOT / "README.md"), str(where / "t.tokens"), "--tokenizer", "TARGET"])
    trial("a model config (params --model)", file_in("RUN/config.json"), [*cli, "params", "--model", "TARGET"])
    trial("a calibration (step --calibration)", file_in("RUN/calibration.json"),
          [*cli, "step", "--model", "tiny", "--gpu", "cpu", "--calibration", "TARGET"])
    trial("a Hugging Face model.safetensors (generate)", file_in("HF/model.safetensors"),
          [*cli, "generate", "HF", "--prompt", "def ", "--max-new-tokens", "4", "--no-predict"])
    trial("a Hugging Face pytorch_model.bin (train --init-from)", file_in("HF/pytorch_model.bin"),
          train("--init-from", "HF", "--data", data, "--steps", 2, "--out-dir", where / "init-run", *SMALL))
    trial("a trace (profile --from-trace)", file_in("RUN/trace.json"), [*cli, "profile", "--from-trace", "TARGET"])
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=18, help="SIGKILLs of one run before it may finish (default 18)")
    parser.add_argument("--signals", type=int, default=10, help="SIGTERM/SIGINT runs, alternating (default 10)")
    parser.add_argument("--steps", type=int, default=30, help="steps of every run (default 30)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random moments (default 0)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    failures, trials = 0, 0
    with tempfile.TemporaryDirectory(prefix="trainledger-faults-") as tmp:
        where = Path(tmp)
        data = token_file(where)
        ref = subprocess.run(train("--data", data, "--steps", args.steps, "--out-dir", where / "reference", *SMALL),
                             env=environment(), capture_output=True, text=True, timeout=300)
        if ref.returncode != 0:
            print(f"reference run failed: {ref.stderr.strip()[-300:]}")
            return 1
        reference = losses(where / "reference" / "metrics.jsonl")
        print(f"reference: {len(reference)} steps, final loss {reference[args.steps]:.4f}", flush=True)
        outcomes = [kills(data, where, args.steps, reference, args.kills, rng)]
        print(("ok   " if outcomes[-1][0] else "FAIL ") + outcomes[-1][1], flush=True)
        for i in range(args.signals):
            sig = signal.SIGTERM if i % 2 == 0 else signal.SIGINT
            target = 0 if i < 2 else rng.randint(1, args.steps - 3)
            outcomes.append(interrupt(data, where, args.steps, reference, sig, target, rng))
            print(("ok   " if outcomes[-1][0] else "FAIL ") + outcomes[-1][1], flush=True)
        for outcome in [*members(data, where, args.steps, reference), *pickles(data, where, args.steps)]:
            outcomes.append(outcome)
            print(("ok   " if outcome[0] else "FAIL ") + outcome[1], flush=True)
        trials = len(outcomes)
        failures = sum(not ok for ok, _ in outcomes)
    print(f"{trials - failures} of {trials} held")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
