"""Which ZeRO stage: the one a layout's user runs when none is given, and the faster one when data-parallel
communication dominates a step. Pure, no torch.

`default_zero` is a rule with its reason (what Megatron-LM, torchtitan and torch.distributed.pipelining do);
`lever` re-times the step under the other stages (and, for FSDP2, without per-micro-batch re-gathering) with
account.time.step and account.memory.per_gpu and names the fastest that fits, with its time and memory: the change a user
can make, computed by the model rather than a generic hint.
"""

from __future__ import annotations

from trainledger.specs.run_checks import default_zero  # noqa: F401 (moved to specs: the run's checks)

from trainledger.units import format_bytes, format_seconds


def why_slow(result: dict) -> str:
    """What makes the data-parallel part of `result` (an account.time.step.step_time answer) large, in words."""
    m, zero = result["micro_batches"], result["zero"]
    fsdp = result.get("fsdp")
    if zero == 3 and m > 1 and (fsdp is None or fsdp["settings"]["accumulate"] == "sharded"):
        return f"ZeRO-3 re-gathers the parameters for each of {m} micro-batches"
    if zero == 3:
        return "ZeRO-3 gathers the parameters in forward and again in backward"
    if result["pp"] > 1:
        return "with pipelining the gradient reduction starts after the flush and is exposed"
    return "the gradient reduction outlasts the backward it hides behind"


def lever(spec, hardware, run, result: dict) -> dict | None:
    """The change to `result`'s data parallelism that makes the step faster and still fits, or None:
    {"zero", "flags", "step_seconds", "memory_bytes", "text", "alternatives"}; the fastest other ZeRO stage is
    named first, then (for FSDP2) the fastest setting that keeps the stage.

    `run` (specs.run.Run) is what `result` was computed from on `hardware`. Tried: every other ZeRO stage (0 and 1
    only with Megatron-LM's kernels; HSDP's replicas only under ZeRO 3), and for FSDP2 the same stage without
    re-gathering per micro-batch.
    """
    from trainledger.account.time.step import step_time

    stages = (0, 1) if run.kernels.framework == "megatron" else (0, 1, 2, 3)
    options = [(f"--zero {z}", run.with_(zero=z) if z == 3 else run.with_(zero=z, replicate=1))
               for z in stages if z != result["zero"]]
    if result["zero"] == 3 and result["micro_batches"] > 1 and result.get("fsdp"):
        if result["fsdp"]["settings"]["accumulate"] == "sharded":
            options.append(("--fsdp-accumulate unsharded --no-reshard-after-forward",
                            run.with_(zero=3, reshard_after_forward=False, accumulate="unsharded")))
    found = []
    for flags, other in options:
        r = step_time(spec, hardware, other)
        if r["fits"] and r["step_seconds"] < result["step_seconds"]:
            found.append((flags, r))
    if not found:
        return None
    stages = [f for f in found if f[1]["zero"] != result["zero"]]
    settings_only = [f for f in found if f[1]["zero"] == result["zero"]]
    primary = min(stages or settings_only, key=lambda f: f[1]["step_seconds"])
    flags, r = primary

    def words(f, r):
        return f"{f} takes {format_seconds(r['step_seconds'])} and fits in {format_bytes(r['memory_bytes'])}"

    text = f"{why_slow(result)}: {words(flags, r)}"
    if stages and settings_only:
        f2, r2 = min(settings_only, key=lambda f: f[1]["step_seconds"])
        text += f"; or keep ZeRO {result['zero']} with {words(f2, r2)}"
    return {"zero": r["zero"], "flags": flags, "step_seconds": r["step_seconds"], "memory_bytes": r["memory_bytes"],
            "text": text, "alternatives": [{"flags": f, "step_seconds": x["step_seconds"], "memory_bytes": x["memory_bytes"]}
                                            for f, x in found]}
