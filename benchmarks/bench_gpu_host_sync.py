"""What a device-to-host synchronization costs eager PyTorch on one CUDA GPU, what trainledger's eager MoE layer costs
with its synchronization per expert, and whether the GPU's matmul rate holds over a long run. Needs CUDA.

Prints one JSON object (seconds, FLOP/s); recorded runs are in tests/data/h200_2026_11_28/.

  round_trip_seconds       an idle GPU: launch one tiny kernel and read its result back (.item()): the wall time from
                           the call to the value on the host, median of --repeats
  launch_seconds           the CPU time of launching the same kernel without reading it back (no wait)
  where_seconds            torch.where(top_index == e) on a (tokens, top_k) index, the op our MoE calls per expert
                           (eq + nonzero, which copies the count to the host): median wall time on an idle GPU
  moe_layer                models.mlp.MoE (one layer, random weights and its own routing) forward, and forward +
                           backward, under bf16 autocast, for each --tokens: median wall seconds of 10 synchronized
                           calls (tests/account/test_moe_loop.py puts the time model beside them)
  sustained                --sustain-seconds of back-to-back bf16 --size³ matmuls: TFLOP/s per window of
                           --window-seconds (CUDA events), first and last window side by side
usage: python benchmarks/bench_gpu_host_sync.py --moe-config CONFIG.json --tokens 8192 [--sustain-seconds 40]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch


def median_wall(fn, repeats: int) -> float:
    """Median wall seconds of fn() started on an idle GPU (synchronized before each call; fn must end on the host)."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def host_sync(repeats: int) -> dict:
    x = torch.ones(1024, device="cuda")
    for _ in range(20):
        x.sum().item()
    round_trip = median_wall(lambda: x.sum().item(), repeats)
    launch = median_wall(lambda: x.sum(), repeats)
    top_index = torch.randint(0, 64, (8192, 8), device="cuda")
    where = median_wall(lambda: torch.where(top_index == 3), repeats)
    return {"round_trip_seconds": round_trip, "launch_seconds": launch, "where_seconds": where,
            "where_shape": [8192, 8]}


def moe_layer(config_path: str, token_counts: list[int], repeats: int) -> list[dict]:
    from trainledger.models.mlp import MoE
    from trainledger.specs.hf_config import spec_from_config_file
    spec = spec_from_config_file(config_path)
    layer = MoE(spec, device="cuda")
    out = []
    for tokens in token_counts:
        x = torch.randn(1, tokens, spec.d_model, device="cuda", requires_grad=True)

        def forward():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                layer(x)
            torch.cuda.synchronize()

        def forward_backward():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = layer(x)
            y.float().sum().backward()
            torch.cuda.synchronize()

        for _ in range(3):
            forward_backward()
        out.append({"config": config_path, "tokens": tokens, "n_experts": spec.n_experts, "top_k": spec.experts_per_token,
                    "forward_seconds": median_wall(forward, repeats),
                    "forward_backward_seconds": median_wall(forward_backward, repeats)})
    return out


def sustained(size: int, seconds: float, window: float) -> dict:
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    flops = 2 * size ** 3
    for _ in range(5):
        a @ b
    torch.cuda.synchronize()
    # matmuls per window from a short timing
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        a @ b
    end.record()
    end.synchronize()
    per_matmul = start.elapsed_time(end) / 1e3 / 20
    per_window = max(1, int(window / per_matmul))
    windows, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        start.record()
        for _ in range(per_window):
            a @ b
        end.record()
        end.synchronize()
        windows.append({"t_seconds": round(time.perf_counter() - t0, 3),
                        "tflops": per_window * flops / (start.elapsed_time(end) / 1e3) / 1e12})
    return {"size": size, "dtype": "bf16", "matmuls_per_window": per_window, "windows": windows,
            "first_tflops": windows[0]["tflops"], "last_tflops": windows[-1]["tflops"],
            "last_over_first": windows[-1]["tflops"] / windows[0]["tflops"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--moe-config", action="append", default=[], help="HF config.json of an MoE (repeatable)")
    parser.add_argument("--tokens", type=int, action="append", default=[], help="tokens per MoE call (repeatable)")
    parser.add_argument("--sustain-seconds", type=float, default=40.0)
    parser.add_argument("--window-seconds", type=float, default=2.0)
    parser.add_argument("--size", type=int, default=8192)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("error: benchmarks/bench_gpu_host_sync.py needs a CUDA device")
    result = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "host_sync": host_sync(args.repeats)}
    result["moe_layer"] = [row for path in args.moe_config for row in moe_layer(path, args.tokens or [8192], 10)]
    if args.sustain_seconds > 0:
        result["sustained"] = sustained(args.size, args.sustain_seconds, args.window_seconds)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
