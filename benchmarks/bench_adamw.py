"""Benchmark: trainledger.optim.AdamW step vs torch.optim.AdamW(foreach=True), side by side in one run.

    .venv/bin/python benchmarks/bench_adamw.py [--d-model 4096] [--n-layers 6] [--repeats 10] [--device cpu]

The "model" is n_layers square Linear weights of d_model² (6 × 4096² ≈ 100.7M parameters) with fixed random
gradients; each optimizer owns its own parameters and states. Steps alternate between the two; reports the
median seconds per step and the ratio ours / torch's (target ≤ 1.3).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import torch

from trainledger.optim import AdamW


def make_params(n_layers: int, d_model: int, device: str) -> list[torch.nn.Parameter]:
    generator = torch.Generator().manual_seed(0)
    params = []
    for _ in range(n_layers):
        p = torch.nn.Parameter(torch.randn(d_model, d_model, generator=generator).to(device) * 0.02)
        p.grad = torch.randn(d_model, d_model, generator=generator).to(device) * 1e-3
        params.append(p)
    return params


def timed_step(optimizer, device: str) -> float:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    optimizer.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=4096)
    parser.add_argument("--n-layers", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    ours_params = make_params(args.n_layers, args.d_model, args.device)
    torch_params = make_params(args.n_layers, args.d_model, args.device)
    n_params = sum(p.numel() for p in ours_params)
    kwargs = dict(lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
    ours = AdamW(ours_params, **kwargs)
    reference = torch.optim.AdamW(torch_params, foreach=True, **kwargs)
    for optimizer in (ours, reference):  # first step allocates the states
        timed_step(optimizer, args.device)
    ours_s, torch_s = [], []
    for _ in range(args.repeats):
        ours_s.append(timed_step(ours, args.device))
        torch_s.append(timed_step(reference, args.device))
    for a, b in zip(ours_params, torch_params):  # same trajectory, so the comparison is of equal work
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    ours_median, torch_median = statistics.median(ours_s), statistics.median(torch_s)
    device = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"{platform.machine()} CPU"
    print(f"machine: {device}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads)")
    print(f"params: {n_params / 1e6:.1f}M fp32 in {args.n_layers} tensors of {args.d_model}x{args.d_model}, "
          f"{args.repeats} steps each, median")
    print(f"torch.optim.AdamW(foreach=True): {torch_median * 1e3:9.2f} ms/step")
    print(f"trainledger AdamW:               {ours_median * 1e3:9.2f} ms/step")
    print(f"ratio ours/torch: {ours_median / torch_median:.3f} (target <= 1.3)")


if __name__ == "__main__":
    main()
