"""Per-step metrics: a JSONL file (one record per optimizer step), a live progress display, a loss-curve PNG.

Record keys carry their units (torchtitan's habit): step, loss, lr, grad_norm, tokens (seen so far),
step_time_s, predicted_step_time_s (account/time/step.py on this device; None without a prediction), tokens_per_s,
flops_per_s, mfu, peak_memory_bytes with peak_memory_kind ("rss": the whole process on a CPU; "cuda_allocated":
tensors), and eval_loss on evaluation steps.

A resumed run appends to the same file, so a step can appear twice (written, then the process was killed
before its checkpoint, then trained again after resume): readers keep the LAST record of each step.
A line cut short by a kill is dropped when the file is reopened.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from pathlib import Path

from trainledger import units
from trainledger.errors import TrainledgerError


class MetricsWriter:
    """Appends one JSON object per line and flushes it to the OS at once (a SIGKILL loses nothing written)."""

    def __init__(self, path: str | Path, fresh: bool):
        from trainledger.files import open_output
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # no link followed, no FIFO, no foreign file (runlock checked it when it locked it; checked again here)
        fd = open_output(self.path, "--metrics", "a metrics file", ours=metrics_problem,
                         hint="pass another --metrics (or move that file away)")
        try:
            if fresh:
                os.ftruncate(fd, 0)
            else:
                _drop_partial_line(fd)
            os.lseek(fd, 0, os.SEEK_END)
        except BaseException:
            os.close(fd)
            raise
        self._file = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, record: dict) -> None:
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        try:
            self._file.write(json.dumps(clean) + "\n")
            self._file.flush()
        except OSError as error:          # a full disk: one line naming the file (the checkpoints are intact)
            raise self._failed(error) from None

    def _failed(self, error: OSError) -> TrainledgerError:
        self.failure = getattr(self, "failure", None) or TrainledgerError(
            f"--metrics: cannot append to {self.path}: {error.strerror or error}; free space and continue with --resume")
        return self.failure

    def close(self) -> None:
        """Flushes to disk and closes; a write that still fails is the same one line as in write(), once."""
        if self._file.closed:
            return
        try:
            self._file.flush()
            os.fsync(self._file.fileno())
        except OSError as error:
            already = getattr(self, "failure", None)
            failure = self._failed(error)
            with contextlib.suppress(OSError):
                self._file.close()        # the buffered line that could not be written is dropped
            if already is None:
                raise failure from None
            return
        self._file.close()


def _drop_partial_line(fd: int, block: int = 1 << 16) -> None:
    """Truncate the open file `fd` after its last newline (the tail a killed writer left unfinished)."""
    end = os.fstat(fd).st_size
    position = end
    while position > 0:
        start = max(0, position - block)
        newline = os.pread(fd, position - start, start).rfind(b"\n")
        if newline >= 0:
            if start + newline + 1 != end:
                os.ftruncate(fd, start + newline + 1)
            return
        position = start
    if end:
        os.ftruncate(fd, 0)


def not_metrics(path: str | Path, probe_bytes: int = 1 << 16) -> str | None:
    """Why the existing file `path` is no metrics file that a run may truncate or append to, or None.

    Ours: empty, or every complete line of its first `probe_bytes` a JSON object with an integer "step", and an
    unfinished last line (a writer killed mid-line) starting with "{". Anything else — a corpus, another run's
    token file (which that run memory-maps: truncating it is its SIGBUS), a config — is someone else's.
    Reads at most `probe_bytes`; opened non-blocking, so a FIFO is never waited on (runlock refuses it first)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"it cannot be read ({error.strerror or error})"
    try:
        head = os.read(fd, probe_bytes)
    except OSError as error:
        return f"it cannot be read ({error.strerror or error})"
    finally:
        os.close(fd)
    return metrics_problem(head, probe_bytes)


def metrics_problem(head: bytes, probe_bytes: int = 1 << 16) -> str | None:
    """Why the first `probe_bytes` of a file, `head`, are no metrics file's (not_metrics), or None. The reason is
    our parse of the bytes, never the bytes: the file may be someone's secret that a planted link points at."""
    lines = head.split(b"\n")
    complete, partial = lines[:-1], lines[-1]
    if len(head) == probe_bytes and complete:   # the probe cut the last line: judge the whole lines only
        partial = b""
    for number, line in enumerate(complete, 1):
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            return f"its line {number} is no step record (not JSON)"
        if not (isinstance(record, dict) and isinstance(record.get("step"), int)):
            what = "an object without an integer step" if isinstance(record, dict) else f"JSON {type(record).__name__}"
            return f"its line {number} is no step record ({what})"
    if partial and not partial.lstrip().startswith(b"{"):
        return f"it holds {'text' if complete else 'no step record'} (a line that does not start a JSON object)"
    return None


def recorded_steps(path: str | Path, probe_bytes: int = 1 << 16) -> tuple[int, int] | None:
    """(first, last) step of the records at the head and the tail of a metrics file, or None when it holds none
    (missing, empty, or only a line cut short). Reads at most 2 × `probe_bytes`, whatever the file's size."""
    def steps(block: bytes) -> list[int]:
        found = []
        for line in block.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                found.append(record["step"])
        return found
    try:
        with open(path, "rb") as handle:
            head = steps(handle.read(probe_bytes))
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - probe_bytes))
            tail = steps(handle.read(probe_bytes)) or head
    except OSError:
        return None
    return (head[0], tail[-1]) if head else None


def read_metrics(path: str | Path) -> list[dict]:
    """The records of a metrics file, one per step (the last written wins), sorted by step; bad lines skipped."""
    by_step: dict[int, dict] = {}
    path = Path(path)
    if not path.exists():
        return []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "step" in record:
            by_step[int(record["step"])] = record
    return [by_step[step] for step in sorted(by_step)]


def describe(record: dict) -> str:
    """One human line for a step record: loss, lr, throughput, MFU, memory."""
    parts = [f"step {record['step']}", f"loss {record['loss']:.4f}"]
    if record.get("eval_loss") is not None:
        parts.append(f"eval {record['eval_loss']:.4f}")
    parts.append(f"lr {record['lr']:.2e}")
    parts.append(f"{units.format_count(record['tokens_per_s'])} tok/s")
    if record.get("flops_per_s"):
        parts.append(units.format_rate(record["flops_per_s"]))
    if record.get("mfu") is not None:
        parts.append(f"MFU {100 * record['mfu']:.1f}%")
    if record.get("peak_memory_bytes"):      # RSS (the whole process) on a CPU, allocated tensors on CUDA
        from trainledger.measure.timing import PEAK_MEMORY_WORDS
        what = PEAK_MEMORY_WORDS.get(record.get("peak_memory_kind"), "peak")
        parts.append(f"{what} {units.format_bytes(record['peak_memory_bytes'])}")
    return "  ".join(parts)


class Progress:
    """A rich progress bar on a terminal; on a pipe or file, one line every ~5% of the steps (no bar spam)."""

    def __init__(self, total_steps: int, start_step: int, enabled: bool = True):
        self.total, self.enabled = total_steps, enabled
        self.every = max(1, total_steps // 20)
        self._bar = None
        if enabled and sys.stdout.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as RichProgress, TextColumn, TimeRemainingColumn
            self._bar = RichProgress(TextColumn("train"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                                     TextColumn("{task.fields[status]}"), transient=False)
            self._task = self._bar.add_task("train", total=total_steps, completed=start_step, status="")
            self._bar.start()

    def update(self, record: dict) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=record["step"], status=describe(record).split("  ", 1)[1])
            if record.get("eval_loss") is not None:
                self._bar.console.print(describe(record))
        elif record["step"] % self.every == 0 or record["step"] == self.total or record.get("eval_loss") is not None:
            print(describe(record), flush=True)

    def print(self, message: str) -> None:
        if self._bar is not None:
            self._bar.console.print(message)
        elif self.enabled:
            print(message, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def plot_loss(records: list[dict], path: str | Path, title: str = "", fmt: str | None = None) -> Path:
    """Writes the training (and held-out) loss against tokens seen as a PNG (matplotlib, Agg); its path.

    `fmt` names the image format when `path` has no telling suffix (a temporary name: see Trainer._plot)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    path = Path(path)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    train = [(r["tokens"], r["loss"]) for r in records if r.get("loss") is not None]
    evals = [(r["tokens"], r["eval_loss"]) for r in records if r.get("eval_loss") is not None]
    if train:
        ax.plot(*zip(*train), label="train loss", linewidth=1)
    if evals:
        ax.plot(*zip(*evals), "o-", label="held-out loss", markersize=4)
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("loss (nats/token)" if title != "cruncher" else "loss (MSE)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path, format=fmt)
    finally:
        plt.close(fig)
    return path


# --- predicted step time beside the measured one (issue 11, item 7) ------------------------------------------
def predicted_step(spec, *, micro_batch: int, global_batch: int, seq_len: int, precision: str, optimizer: str,
                   device, world_size: int = 1, zero: int = 0, tp: int = 1, pp: int = 1,
                   compiled: bool = False, recompute: str = "none") -> dict | None:
    """account.time.step's prediction of one training step on this device, or None when there is nothing to base it on.

    CPU and CUDA use this machine's cached calibration (`trainledger bench --calibrate`; training never starts
    one); a CUDA device without one falls back on its datasheet entry. Returns {step_seconds, breakdown,
    bottleneck, device}. None for models that are not transformers, for tensor/pipeline-parallel runs (whose
    trainer layout is not predicted here yet) and for layouts the model rejects.
    """
    import torch

    from trainledger.account.time.step import step_time
    from trainledger.errors import TrainledgerError
    from trainledger.measure.calibrate import busy_warning, gpu_from_profile, load_profile, profile_path

    if getattr(spec, "kind", None) != "transformer" or tp > 1 or pp > 1:
        return None
    device = torch.device(device)
    try:
        profile = load_profile(profile_path(device.type)) if device.type in ("cpu", "cuda") else None
        busy = busy_warning(profile) if profile is not None else None
        if profile is not None:        # a calibration measured while the machine was busy says so beside its number
            gpu, source = gpu_from_profile(profile), "calibrated while busy" if busy else "calibrated"
        elif device.type == "cuda":
            from trainledger.specs.hardware import gpu_for_device_name
            gpu, source = gpu_for_device_name(torch.cuda.get_device_name(device)), "datasheet"
        else:
            return None
        if gpu is None:
            return None
        from trainledger.specs.run import Hardware, Run
        run = Run().with_(batch_size=micro_batch, seq_len=seq_len, global_batch_size=global_batch, precision=precision,
                          optimizer=optimizer, zero=zero, compile=compiled, param_dtype="stored", recompute=recompute)
        result = step_time(spec, Hardware(gpu, world_size), run, with_memory=False)
    except (TrainledgerError, ArithmeticError, ValueError):   # a prediction must never stop a training run
        return None
    return {"step_seconds": result["step_seconds"], "breakdown": result["breakdown"],
            "bottleneck": result["bottleneck"], "device": f"{gpu.name} ({source})",
            "warning": (f"the step-time prediction uses the cached calibration {profile_path(device.type)}: {busy}; "
                        "re-run `trainledger bench --calibrate` on a quiet machine (or with --threads 1)") if busy else None}


def step_time_gap(records: list[dict], predicted: dict | None) -> dict | None:
    """Measured vs predicted step time over a run's records (median, the first step left out as warm-up), in
    words: {measured_step_time_s, predicted_step_time_s, relative_error, text}; None without a prediction."""
    import statistics

    times = [r["step_time_s"] for r in records[1:] or records if r.get("step_time_s")]
    if predicted is None or not times:
        return None
    measured = statistics.median(times)
    error = (predicted["step_seconds"] - measured) / measured
    largest = max(predicted["breakdown"], key=predicted["breakdown"].get)
    text = (f"step time {units.format_seconds(measured)} measured vs {units.format_seconds(predicted['step_seconds'])} "
            f"predicted on {predicted['device']} ({100 * error:+.0f} %); the prediction's largest part is {largest} "
            f"({units.format_seconds(predicted['breakdown'][largest])}): `trainledger profile` measures each part")
    return {"measured_step_time_s": measured, "predicted_step_time_s": predicted["step_seconds"],
            "relative_error": error, "text": text}


def predicted_line(plan: dict, memory: dict, finetune: bool = False) -> str:
    """The trainer's line of predictions: FLOPs per step, memory per device by part, the peak FLOP/s used for MFU.
    A fine-tuning run's line also names its trainable and frozen parameters, the peak of a step and what the levers
    keep on the host (account.memory.per_gpu prices adapters, frozen and quantized bases and the levers)."""
    peak = f"peak {units.format_rate(plan['peak_flops_per_s']) if plan['peak_flops_per_s'] else 'unknown'} " \
           f"({plan['peak_source']})"
    flops = (f"{units.format_flops(plan['train_flops_per_step'])} FLOPs per step"
             + (" as full training counts them" if finetune else ""))
    parts = (f"params {units.format_bytes(memory['params_bytes'])}, grads {units.format_bytes(memory['grads_bytes'])}, "
             + (f"master {units.format_bytes(memory['master_params_bytes'])}, " if memory.get("master_params_bytes") else "")
             + f"optimizer {units.format_bytes(memory['optimizer_bytes'])}, "
             f"activations {units.format_bytes(memory['activations_bytes'])}")
    if finetune:
        host = f", host {units.format_bytes(memory['host_bytes'])}" if memory.get("host_bytes") else ""
        return (f"predicted: {flops}; memory per device {units.format_bytes(memory['total_bytes'])} of tensors "
                f"({units.format_count(memory['trainable_params'])} trainable, "
                f"{units.format_count(memory['frozen_params'])} frozen; {parts}), peak of a step "
                f"{units.format_bytes(memory['peak_bytes'])}{host}; {peak}")
    return f"predicted: {flops}; memory per device {units.format_bytes(memory['total_bytes'])} of tensors ({parts}); {peak}"


def accounted_optimizer(name: str) -> str:
    """The optimizer account/ prices for a run of `name`: itself when specs/recipes.py knows it, else the 8-bit Adam
    it has for the 8-bit AdamWs (the same 2 bytes of state per value)."""
    from trainledger.specs.recipes import OPTIMIZERS
    return name if name in OPTIMIZERS else "adam-8bit" if name.endswith("8bit") else "adamw"
