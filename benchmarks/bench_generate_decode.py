"""Benchmark: decoding tokens/s predicted (account/time/inference.py) vs measured (`generate` with its KV cache) on this CPU.

    .venv/bin/python benchmarks/bench_generate_decode.py [--threads N] [--repeats 5] [--new-tokens 128] [--recalibrate]

Issue 21's target: the prediction within 25 % of the measured decoding speed for at least 3 of 4 small configs
(GPT-2-style and Llama-style, d_model 128-768, fp32, batch 1, greedy). The prediction uses this machine's
calibration (`bench --calibrate`: matmul rates by shape, bandwidth by working-set size, the per-operator cost of an
eager decoding step measured on a model of negligible size) and the operator and byte counts of the config;
nothing is fitted to these configs. The small configs are dispatch-bound (operators × per-operator cost), the
larger ones bandwidth-bound (weights read once per token). `--recalibrate` measures the machine first, in the
same conditions as the generations.

Each config generates --new-tokens tokens after a 64-token prompt --repeats times (after one warm-up): "best" is the
fastest run (the least disturbed, as the calibration keeps its fastest samples), "median" the middle one. The
target is checked on the best run; timings on a shared machine move with its load, printed before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch

from trainledger.account.time.inference import inference
from trainledger.measure import calibrate as cal
from trainledger.models import Transformer
from trainledger.models.generation import generate
from trainledger.specs import PRESETS

GPT, LLAMA = PRESETS["tiny"], PRESETS["llama-2-7b"]
CONFIGS = [   # GPT = learned positions, LayerNorm, GELU, tied head; Llama = RoPE, RMSNorm, SwiGLU, untied, GQA
    ("gpt d128 L4 (tiny)", GPT),
    ("gpt d384 L6", GPT.with_(name="gpt-d384-l6", d_model=384, n_layers=6, n_heads=6, d_ff=1536, vocab_size=8192,
                              max_seq_len=1024)),
    ("llama d256 L4 gqa", LLAMA.with_(name="llama-d256-l4", d_model=256, n_layers=4, n_heads=8, n_kv_heads=4, d_ff=688,
                                      vocab_size=8192, max_seq_len=1024)),
    ("llama d768 L8 gqa", LLAMA.with_(name="llama-d768-l8", d_model=768, n_layers=8, n_heads=12, n_kv_heads=4,
                                      d_ff=2048, vocab_size=8192, max_seq_len=1024)),
]
PROMPT = 64


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def measure(spec, new_tokens: int, repeats: int) -> tuple[list[float], list[float]]:
    """Decoding tokens/s of `repeats` generations (batch 1, greedy, KV cache), after one warm-up: by the wall clock,
    and by the process's CPU time (the CPU time of a generation of 9 tokens subtracted from one of 9 + new_tokens:
    what `new_tokens` decoding steps cost this process, leaving out the time other processes held the CPU)."""
    torch.manual_seed(0)
    model = Transformer(spec).eval()
    prompt = torch.randint(0, spec.vocab_size, (1, PROMPT))
    generate(model, prompt, 8)
    wall, cpu = [], []
    for _ in range(repeats):
        start = time.process_time()
        generate(model, prompt, 9)
        short = time.process_time() - start
        start = time.process_time()
        result = generate(model, prompt, 9 + new_tokens)
        long = time.process_time() - start
        wall.append(result.decode_steps / result.decode_seconds)
        cpu.append(new_tokens / max(long - short, 1e-9))
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--recalibrate", action="store_true", help="measure the machine first (else: the cache)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {load()}")
    if args.recalibrate:
        start = time.perf_counter()
        profile = cal.calibrate("cpu")
        cal.save_profile(profile, cal.profile_path("cpu"))
        print(f"calibrated in {time.perf_counter() - start:.0f} s ({load()})")
    gpu = cal.calibrated_device("cpu")
    print(f"per-operator cost of a decoding step: {gpu.decode_op_overhead_seconds * 1e6:.2f} µs"
          if gpu.decode_op_overhead_seconds else "no decoding overhead in the calibration: --recalibrate")
    one_thread = torch.get_num_threads() == 1
    print("decoding tokens/s; best and median of the wall clock" + ("; cpu: by the process's CPU time (1 thread)"
                                                                   if one_thread else ""))
    print(f"{'config':<20} {'ops/step':>8} {'predicted':>10} {'best':>9} {'median':>9} {'error':>7} "
          + (f"{'cpu':>9} {'error':>7} " if one_thread else "") + " bottleneck")
    within = within_cpu = 0
    for name, spec in CONFIGS:
        predicted = inference(spec, gpu, batch_size=1, prompt_len=PROMPT, gen_len=args.new_tokens, dtype="fp32")
        wall, cpu = measure(spec, args.new_tokens, args.repeats)
        best, median, cpu_best = max(wall), statistics.median(wall), max(cpu)
        error, cpu_error = predicted["tokens_per_s"] / best - 1, predicted["tokens_per_s"] / cpu_best - 1
        within += abs(error) <= 0.25
        within_cpu += abs(cpu_error) <= 0.25
        print(f"{name:<20} {predicted['decode_ops']:>8} {predicted['tokens_per_s']:>10.1f} {best:>9.1f} {median:>9.1f} "
              f"{100 * error:>+6.1f}% " + (f"{cpu_best:>9.1f} {100 * cpu_error:>+6.1f}% " if one_thread else "")
              + f" {predicted['bottleneck']}")
    print(f"within 25 % (best run, wall clock): {within} of {len(CONFIGS)} (target: at least 3)"
          + (f"; by CPU time: {within_cpu} of {len(CONFIGS)}" if one_thread else "") + f"; {load()}")


if __name__ == "__main__":
    main()
