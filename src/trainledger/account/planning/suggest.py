"""A faster setting around a predicted step: what `trainledger step` suggests in one line. Pure, no torch.

`faster_setting(...)` is a bounded search around a step: the same tp, sp, pp, cp and dp, with every micro-batch
size (powers of two dividing the per-rank batch, and the quotient), ZeRO stage, valid interleave
(account.time.schedule) and a recompute no heavier than the given one (any, when the given step does not fit). It
returns the fastest setting that fits in memory when it beats the step by more than the model's accuracy
(FASTER_BY), or, when the step does not fit, the fastest that does. At most ~8 micro-batches × 4 stages ×
3 policies × 8 interleaves account.time.step.step_time calls sharing one kernel cache (milliseconds each).
"""

from __future__ import annotations

from trainledger.account.time.schedule import valid_interleaves
from trainledger.account.time.step import step_time

# A faster setting is reported only when the model predicts it faster by more than this fraction: the layout
# search's rule that layouts within a few percent are equal within the model's accuracy.
FASTER_BY = 0.05
MAX_INTERLEAVE = 8
# lightest to heaviest by what each re-runs (account.counting.recompute): the attention core; torchtitan's per-op policy
# (every other matmul and the elementwise ops); every second block in full; every block in full
RECOMPUTE_ORDER = ("none", "selective", "selective-op", "selective-layer", "full")


def _micro_batches(per_rank: int) -> list[int]:
    return sorted({b for b in range(1, per_rank + 1) if per_rank % b == 0 and b & (b - 1) == 0} | {per_rank})


def faster_setting(spec, hardware, result: dict) -> dict | None:
    """The fastest setting near `result` (same tp, sp, pp, cp, dp) that fits and beats it by more than FASTER_BY.

    `result`: an account.time.step.step_time answer for `spec` on `hardware`; its `run` is varied in the micro-batch,
    the ZeRO stage (HSDP's replicas only under ZeRO 3), the recomputation and the interleave. Returns None or
    {"batch_size", "zero", "recompute", "interleave", "micro_batches", "step_seconds", "mfu", "memory_bytes",
    "changes": ["--batch-size 8", ...], "why"}; when the step itself does not fit, the fastest setting that does
    ("why": "fits"), faster or not.
    """
    run = result["run"]
    dp, per_rank = result["dp"], result["global_batch_size"] // result["dp"]
    # recomputation only adds time: no heavier policy than the step's, unless the step does not fit
    heavier = RECOMPUTE_ORDER.index(result["recompute"]) if result.get("fits", True) else len(RECOMPUTE_ORDER) - 1
    zeros = (0, 1, 2, 3) if dp > 1 else (0,)
    if run.kernels.framework == "megatron":
        zeros = tuple(z for z in zeros if z <= 1)
    cache: dict = {}
    best = None
    dualpipe = run.layout.schedule == "dualpipe"      # its own two stages per GPU, even micro-batches
    # the optimizer step in backward needs one micro-batch per step (torchtune refuses it with accumulation)
    in_backward = run.levers.optimizer_in_backward
    for b in [per_rank] if in_backward else _micro_batches(per_rank):
        m = per_rank // b
        if dualpipe and m % 2:
            continue
        for zero in zeros:
            for recompute in RECOMPUTE_ORDER[:heavier + 1]:
                interleaves = [1] if dualpipe else valid_interleaves(spec.n_layers, result["pp"], m, MAX_INTERLEAVE)
                for v in interleaves if result["pp"] > 1 else (1,):
                    other = run.with_(batch_size=b, zero=zero, recompute=recompute, interleave=v,
                                      **({} if zero == 3 else {"replicate": 1}))
                    r = step_time(spec, hardware, other, cache=cache)
                    if r["fits"] and (best is None or r["step_seconds"] < best["step_seconds"]):
                        best = r
    fits = result.get("fits", True)
    if best is None or (fits and best["step_seconds"] >= (1 - FASTER_BY) * result["step_seconds"]):
        return None
    changes = [f"--{key.replace('_', '-')} {best[key]}" for key in ("batch_size", "zero", "recompute", "interleave")
               if best[key] != result[key]]
    return {"batch_size": best["batch_size"], "zero": best["zero"], "recompute": best["recompute"],
            "interleave": best["interleave"], "micro_batches": best["micro_batches"],
            "step_seconds": best["step_seconds"], "mfu": best["mfu"], "memory_bytes": best["memory_bytes"],
            "changes": changes, "why": "faster" if fits else "fits"}
