"""A Llama-2-70B training step (forward, backward, AdamW) on fake tensors: wall time and peak RSS.

    .venv/bin/python benchmarks/bench_dryrun_70b.py [--seq-len 4096] [--precision amp-bf16]

FakeTensorMode gives every tensor a shape, a dtype and a size but no data, so the step allocates nothing:
the whole 70B step — 69B parameters, their grads and AdamW states, 80 layers of activations — is
measured by the live-storage tracker (trainledger.measure.memory) on a laptop. Target: < 1 min, < 3 GB RSS.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--precision", default="amp-bf16")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    from trainledger import units
    from trainledger.measure.compare import measure_model
    from trainledger.specs import get_model
    spec = get_model("llama-2-70b")
    result = measure_model(spec, args.batch_size, args.seq_len, precision=args.precision, device="fake")
    wall_s = time.perf_counter() - start
    rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(f"llama-2-70b, batch {args.batch_size} × {args.seq_len} tokens, {args.precision}, AdamW "
          f"({result['settings']['optimizer_impl']}), fake tensors")
    for key in ("n_params", "train_flops_per_step", "params_bytes", "grads_bytes", "optimizer_bytes",
                "activations_bytes", "peak_bytes"):
        p, m, e = result["predicted"][key], result["measured"][key], result["relative_error"][key]
        show = units.format_count if key == "n_params" else (units.format_flops if "flops" in key else units.format_bytes)
        print(f"  {key:22s} predicted {show(p):>10s}  measured {show(m):>10s}  error {100 * e:+.3f}%")
    print(f"peak during: {result['details']['peak_phase']}")
    print(f"wall time: {wall_s:.1f} s (import, build, FLOP count, tracked step)")
    print(f"peak RSS: {units.format_bytes(rss_bytes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
