"""The --impl hf results table of README "Measure" and docs/measure.md: transformers' own model, one CPU step per case.

For each case of tests/measure/test_hf_activations.py: measured activations of transformers' model, the error
of `--impl hf` (account/memory/hf_activations.py), the error the prediction for trainledger's Transformer would have
on the same model (the gap issue 13 closes), and the errors of train FLOPs and parameters.

    PYTHONPATH=src python benchmarks/bench_hf_impl.py        # about a minute on 2 cores
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "measure"))
from test_hf_activations import B, CASES, CONFIGS, T  # noqa: E402

from trainledger.account.memory.activations import ActivationShard, activations_bytes  # noqa: E402
from trainledger.measure.compare import measure_hf  # noqa: E402
from trainledger.specs.hf_config import spec_from_config_dict  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    print(f"| case | attention | precision | measured activations | `--impl hf` | trainledger's Transformer | train FLOPs | parameters |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, attn, precision in CASES:
            path = Path(tmp) / name / "config.json"
            path.parent.mkdir(exist_ok=True)
            path.write_text(json.dumps(CONFIGS[name]))
            spec = spec_from_config_dict(CONFIGS[name])
            result = measure_hf(str(path), spec, B, T, precision=precision, device="cpu", attn_impl=attn)
            measured = result["measured"]["activations_bytes"]
            ours = activations_bytes(spec, ActivationShard(B, T, precision=precision))["total"]
            error = result["relative_error"]
            print(f"| {name} | {result['settings']['attn_impl']} | {precision} | {measured:,} B | "
                  f"{100 * error['activations_bytes']:+.2f}% | {100 * (ours - measured) / measured:+.1f}% | "
                  f"{100 * error['train_flops_per_step']:+.2f}% | {'exact' if error['n_params'] == 0 else error['n_params']} |")


if __name__ == "__main__":
    main()
