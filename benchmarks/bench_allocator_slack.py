"""How much PyTorch's CUDA caching allocator reserves beyond a training step's peak: the source of
account.memory.per_gpu.ALLOCATOR_SLACK_FRACTION.

For each configuration, `measure --device fake` runs two training steps of our Transformer on fake tensors (the
first creates the optimizer states; the second is the steady state), logs every allocation and free, and replays
them through measure/allocator.py (PyTorch's caching-allocator policy, which reproduces the recorded H100
out-of-memory error of Llama 1B 8 x 2048). slack = reserved at its peak - cuBLAS workspaces - the later step's
peak of live tensors, as a fraction of that peak.

    PYTHONPATH=src python benchmarks/bench_allocator_slack.py        # a few minutes on 2 cores
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from trainledger.account.memory.per_gpu import CUBLAS_HANDLES, CUBLAS_WORKSPACE_BYTES
from trainledger.measure.compare import measure_model
from trainledger.specs import get_model

LLAMA_1B = str(Path(__file__).resolve().parents[1] / "tests/data/h100_2026_11_26/llama1b-config.json")
# (model, batch, seq, precision, recompute): GPT-2 and Llama shapes, other families, recompute, recipes
CONFIGS = [
    ("gpt2", 1, 1024, "amp-bf16", "none"), ("gpt2", 4, 1024, "amp-bf16", "none"),
    ("gpt2", 8, 1024, "amp-bf16", "none"), ("gpt2", 16, 1024, "amp-bf16", "none"),
    ("gpt2", 8, 512, "amp-bf16", "none"), ("gpt2", 8, 1024, "fp32", "none"),
    ("gpt2-medium", 8, 1024, "amp-bf16", "none"), (LLAMA_1B, 2, 2048, "amp-bf16", "none"),
    (LLAMA_1B, 4, 2048, "amp-bf16", "none"), (LLAMA_1B, 8, 2048, "amp-bf16", "none"),
    (LLAMA_1B, 8, 2048, "amp-bf16", "selective"), (LLAMA_1B, 8, 2048, "amp-bf16", "full"),
    (LLAMA_1B, 4, 2048, "mixed-bf16", "none"), ("gemma-3-1b", 2, 2048, "amp-bf16", "none"),
    ("pythia-1.4b", 4, 2048, "amp-bf16", "none"), ("mpt-7b", 1, 2048, "amp-bf16", "full"),
]
GIB = 2**30


def main() -> int:
    fractions = []
    print(f"{'model':<22} {'batch':>9} {'recipe':<10} {'recompute':<9} {'peak GiB':>9} {'reserved':>9} {'slack':>7}")
    for model, batch, seq, precision, recompute in CONFIGS:
        spec = get_model(model)
        r = measure_model(spec, batch, seq, precision=precision, recompute=recompute, device="fake")
        peak = r["measured"]["later_step_peak_bytes"]
        slack = r["measured"]["reserved_bytes"] - CUBLAS_HANDLES * CUBLAS_WORKSPACE_BYTES - peak
        fractions.append(slack / peak)
        print(f"{spec.name[:22]:<22} {batch:>4}×{seq:<4} {precision:<10} {recompute:<9} {peak / GIB:>9.2f} "
              f"{r['measured']['reserved_bytes'] / GIB:>9.2f} {100 * slack / peak:>6.1f}%", flush=True)
    print(f"slack: min {100 * min(fractions):.1f} %, median {100 * statistics.median(fractions):.1f} %, "
          f"max {100 * max(fractions):.1f} % over {len(fractions)} configurations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
