"""Tokens/s of `trainledger train`'s loop against a bare PyTorch loop: same model, batch, precision, optimizer; one run.

The library loop does more per step than the bare one (global-batch slicing, a finiteness check of the
loss, the grad-norm readout, metrics JSONL, peak-memory readings, signal checks). This measures what that
costs. Per-step time = median of the wall time between consecutive steps (for the library: between
consecutive metrics records, so all per-step bookkeeping counts; setup and the final checkpoint do not);
the two loops alternate `--rounds` times and the median of the rounds is kept. MFU = model FLOPs per step (trainledger.account) / step time / peak (trainledger.measure).

    python benchmarks/bench_train_vs_bare.py                      # tiny GPT, CPU
    python benchmarks/bench_train_vs_bare.py --device cuda --model gpt2 --batch-size 16 --seq-len 1024 --precision amp-bf16
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch

from trainledger.account.counting.flops import flops_per_step
from trainledger.data import get_batch, seed_everything
from trainledger.measure.timing import peak_flops_per_s, synchronize
from trainledger.models import build_model
from trainledger.optim import build_optimizer, clip_grad_norm_
from trainledger.specs import get_model
from trainledger.specs.recipes import get_recipe
from trainledger.train import Trainer, resolve
from trainledger.train.corpus import load_splits
from trainledger.train.metrics import MetricsWriter
from trainledger.train.precision import autocast, grad_scaler, param_dtype


def library_step_times(args, steps: int, out_dir: str) -> list[float]:
    """Wall seconds between consecutive metrics records of Trainer.train(): a step and all its bookkeeping."""
    config = resolve({"model": args.model, "steps": steps, "batch_size": args.batch_size, "seq_len": args.seq_len,
                      "precision": args.precision, "optimizer": "adamw", "eval_every": 0, "plot": False,
                      "checkpoint_every": 10**9, "out_dir": out_dir, "device": args.device, "warmup_steps": 0,
                      "text": args.text})
    stamps = []
    original = MetricsWriter.write

    def write(self, record):
        original(self, record)
        stamps.append(time.perf_counter())
    MetricsWriter.write = write
    try:
        Trainer(config, quiet=True).train()
    finally:
        MetricsWriter.write = original
    return [b - a for a, b in zip(stamps, stamps[1:])]


def bare_step_times(args, steps: int, tokens) -> list[float]:
    """Wall seconds of each step of a bare loop: get_batch, forward, backward, clip, AdamW step, loss.item()."""
    device = torch.device(args.device)
    generator = seed_everything(0)
    model = build_model(get_model(args.model)).to(device=device, dtype=param_dtype(args.precision))
    optimizer = build_optimizer("adamw", model.parameters(), lr=1e-3, weight_decay=0.1)
    scaler = grad_scaler(args.precision, device)
    stamps = [time.perf_counter()]
    for _ in range(steps):
        x, y = get_batch(tokens, args.batch_size, args.seq_len, device, generator)
        with autocast(args.precision, device):
            _, loss = model(x, y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()          # a loop that logs its loss reads it every step, as the library does
        stamps.append(time.perf_counter())
    return [b - a for a, b in zip(stamps[1:], stamps[2:])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--text", default=None, help="text file to train on (default: the stdlib corpus)")
    parser.add_argument("--steps", type=int, default=30, help="steps per loop per round (the first is not timed)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    out_dir = tempfile.mkdtemp(prefix="bench-train-")
    config = resolve({"model": args.model, "seq_len": args.seq_len, "out_dir": out_dir, "text": args.text})
    train_tokens, _ = load_splits(config, get_model(args.model).vocab_size)
    library, bare = [], []
    for r in range(args.rounds):          # alternate, so a change in machine load hits both loops
        library.append(statistics.median(library_step_times(args, args.steps, f"{out_dir}/lib{r}")))
        bare.append(statistics.median(bare_step_times(args, args.steps, train_tokens)))
    tokens_per_step = args.batch_size * args.seq_len
    step_flops = flops_per_step(get_model(args.model), args.batch_size, args.seq_len)["train_flops_per_step"]
    peak, source = peak_flops_per_s(args.device, get_recipe(args.precision).compute_dtype)
    lib_s, bare_s = statistics.median(library), statistics.median(bare)
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"CPU, {torch.get_num_threads()} threads"
    print(f"model {args.model}, batch {args.batch_size} x {args.seq_len} tokens, {args.precision}, {device_name}")
    print(f"peak: {peak / 1e12 if peak else float('nan'):.3f} TFLOP/s ({source})")
    for name, seconds in (("trainledger train", lib_s), ("bare PyTorch loop", bare_s)):
        mfu = step_flops / seconds / peak if peak else float("nan")
        print(f"{name:18s} {seconds * 1e3:8.2f} ms/step  {tokens_per_step / seconds:10.0f} tokens/s  "
              f"{step_flops / seconds / 1e9:8.2f} GFLOP/s  MFU {100 * mfu:.1f}%")
    print(f"ratio (library / bare tokens/s): {bare_s / lib_s:.3f}  (per-round: "
          + ", ".join(f"{b / l:.3f}" for l, b in zip(library, bare)) + ")")


if __name__ == "__main__":
    main()
