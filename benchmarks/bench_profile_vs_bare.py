"""Benchmark: `profile`'s measured step, the sum of its parts and its predicted step beside a bare training loop.

    .venv/bin/python benchmarks/bench_profile_vs_bare.py [--threads N] [--steps 3] [--bare-steps 4] [--recalibrate]

Issue 41's check on an idle machine, for five small GPT/Llama shapes (tiny to 512 wide, fp32, AdamW): profile's
measured parts add up to its measured step within 15 %, and its predicted step is within 25 % of an independent
bare training loop timed on the same machine. The bare loop is plain PyTorch around the same model
(trainledger.models): torch.randint batches, forward, backward, torch.nn.utils.clip_grad_norm_,
torch.optim.AdamW (torch's own, not trainledger.optim), zero_grad — nothing of profile's (no regions, no
profiler). It runs right before and right after profile on each shape (side by side: a change in the machine's
speed hits both), and its step is the median of those steps. The prediction is account/time/step.py on this
machine's calibrated CPU (`bench --calibrate`; --recalibrate measures it first, in the same conditions). Threads:
--threads, else the cores other processes leave idle, as `profile` picks them. Timings move with whatever else
runs: other processes' CPU use is printed beside each row (measure/cpu_load.py).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from trainledger.measure import calibrate as cal
from trainledger.measure.cpu_load import OthersCpu, set_threads
from trainledger.measure.profile import compare
from trainledger.models import build_model
from trainledger.specs import PRESETS

GPT, LLAMA = PRESETS["gpt2"], PRESETS["llama-2-7b"]
# (name, spec, batch, seq): GPT = learned positions, LayerNorm, GELU; Llama = RoPE, RMSNorm, SwiGLU, no biases
CONFIGS = [
    ("gpt d128 L4 (tiny)", PRESETS["tiny"], 8, 256),
    ("gpt d256 L6", GPT.with_(name="gpt-d256-l6", d_model=256, n_layers=6, n_heads=4, d_ff=1024, vocab_size=8192,
                              max_seq_len=1024), 8, 256),
    ("gpt d384 L6", GPT.with_(name="gpt-d384-l6", d_model=384, n_layers=6, n_heads=6, d_ff=1536, vocab_size=8192,
                              max_seq_len=1024), 8, 256),
    ("llama d256 L4 gqa", LLAMA.with_(name="llama-d256-l4", d_model=256, n_layers=4, n_heads=8, n_kv_heads=4,
                                      d_ff=688, vocab_size=8192, max_seq_len=1024), 8, 256),
    ("gpt d512 L8", GPT.with_(name="gpt-d512-l8", d_model=512, n_layers=8, n_heads=8, d_ff=2048, vocab_size=8192,
                              max_seq_len=1024), 4, 512),
]


def bare_step_times(spec, batch: int, seq: int, steps: int, warmup: int = 1) -> list[float]:
    """Wall seconds of each of `steps` steps of a plain PyTorch loop (after `warmup` untimed ones)."""
    torch.manual_seed(0)
    model = build_model(spec)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        x = torch.randint(0, spec.vocab_size, (batch, seq))
        y = torch.randint(0, spec.vocab_size, (batch, seq))
        loss = model(x, y)[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: the idle cores)")
    parser.add_argument("--steps", type=int, default=3, help="profile's unprofiled and profiled steps (each)")
    parser.add_argument("--bare-steps", type=int, default=4, help="bare steps before and after profile (each)")
    parser.add_argument("--recalibrate", action="store_true", help="measure the machine first (else: the cache)")
    args = parser.parse_args()
    line = set_threads(args.threads, "cpu", OthersCpu())
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads" + (f"; {line}" if line else ""))
    if args.recalibrate:
        start = time.perf_counter()
        cal.save_profile(cal.calibrate("cpu"), cal.profile_path("cpu"))
        print(f"calibrated in {time.perf_counter() - start:.1f} s -> {cal.profile_path('cpu')}")
    gpu = cal.calibrated_device("cpu")
    header = (f"{'config':<19} {'tokens':>6} {'step':>9} {'parts':>9} {'parts/step':>10} {'predicted':>9} "
              f"{'bare':>9} {'pred/bare':>9} {'step/bare':>9} {'others':>6}")
    print(header)
    print("-" * len(header))
    sums, within = 0, 0
    for name, spec, batch, seq in CONFIGS:
        others = OthersCpu()
        bare = bare_step_times(spec, batch, seq, args.bare_steps)
        r = compare(spec, gpu, batch_size=batch, seq_len=seq, precision="fp32", optimizer="adamw", steps=args.steps,
                    warmup=1)
        bare += bare_step_times(spec, batch, seq, args.bare_steps)
        busy = others.cpus()
        meas, pred = r["measured"], r["predicted"]
        step, parts, bare_s = meas["step_seconds"], meas["categories_sum_seconds"], statistics.median(bare)
        sums += abs(parts / step - 1) <= 0.15
        within += abs(pred["step_seconds"] / bare_s - 1) <= 0.25
        print(f"{name:<19} {batch * seq:>6} {step * 1e3:>7.1f}ms {parts * 1e3:>7.1f}ms {parts / step:>10.3f} "
              f"{pred['step_seconds'] * 1e3:>7.1f}ms {bare_s * 1e3:>7.1f}ms {pred['step_seconds'] / bare_s:>9.3f} "
              f"{step / bare_s:>9.3f} {busy if busy is None else round(busy, 2):>6}"
              + (f"  (clock {meas['clock']})" if meas["clock"] != "wall" else ""))
    print(f"parts within 15 % of profile's step: {sums}/{len(CONFIGS)}; predicted step within 25 % of the bare "
          f"loop: {within}/{len(CONFIGS)}")


if __name__ == "__main__":
    main()
