"""Benchmark: trainledger.data.get_batch vs the lecture's list-comprehension get_batch, side by side in one run.

    .venv/bin/python benchmarks/bench_get_batch.py [--tokens 1e8] [--batch-size 32] [--seq-len 1024] [--repeats 50]

Both sample from the same 1e8-token uint16 memmap (written to a temp dir, 200 MB). The lecture's version
(CS336 Lecture 2, "data loading") gathers rows with `torch.tensor([data[s:s+T] for s in starts])` and returns
only x; ours gathers x and y with one fancy index. Reports median seconds per batch and the ratio (target ≥ 20×).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import warnings

import numpy as np
import torch

from trainledger.data import TokenWriter, get_batch, open_tokens


def lecture_get_batch(data, batch_size: int, sequence_length: int, device: str) -> torch.Tensor:
    """The lecture's loader, transcribed: random starts, then one Python slice per row."""
    start_indices = torch.randint(len(data) - sequence_length, (batch_size,))
    x = torch.tensor([data[start:start + sequence_length] for start in start_indices])
    if torch.cuda.is_available():
        x = x.pin_memory()
    return x.to(device, non_blocking=True)


def median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=1e8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    n_tokens, B, T = int(args.tokens), args.batch_size, args.seq_len
    warnings.filterwarnings("ignore", message="Creating a tensor from a list of numpy.ndarrays")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.tokens")
        rng = np.random.default_rng(0)
        with TokenWriter(path, "uint16") as writer:
            for lo in range(0, n_tokens, 10_000_000):
                writer.write(rng.integers(0, 50_257, size=min(10_000_000, n_tokens - lo), dtype=np.uint16))
        data = open_tokens(path)
        generator = np.random.default_rng(1)
        ours = lambda: get_batch(data, B, T, args.device, generator)
        lecture = lambda: lecture_get_batch(data, B, T, args.device)
        for fn in (ours, lecture):  # warm up: page cache, allocator
            fn()
        ours_s, lecture_s = [], []
        for _ in range(args.repeats):  # interleaved, so both see the same machine state
            ours_s.append(median_seconds(ours, 1))
            lecture_s.append(median_seconds(lecture, 1))
        ours_median, lecture_median = statistics.median(ours_s), statistics.median(lecture_s)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__} "
          f"({torch.get_num_threads()} threads), numpy {np.__version__}, device {args.device}")
    print(f"data: {n_tokens:.3g} uint16 tokens (np.memmap), B={B}, T={T}, {args.repeats} repeats, median")
    print(f"lecture get_batch (list comprehension, x only): {lecture_median * 1e3:9.3f} ms/batch")
    print(f"trainledger get_batch (one gather, x and y):    {ours_median * 1e3:9.3f} ms/batch")
    print(f"speed-up: {lecture_median / ours_median:.1f}x (target >= 20x)")


if __name__ == "__main__":
    main()
