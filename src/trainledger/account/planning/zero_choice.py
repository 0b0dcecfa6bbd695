"""Which ZeRO stage: the one a layout's user runs when none is given, and the faster one when data-parallel
communication dominates a step. Pure, no torch.

`default_zero` is a rule with its reason (what Megatron-LM, torchtitan and torch.distributed.pipelining do);
`lever` re-times the step under the other stages (and, for FSDP2, without per-micro-batch re-gathering) with
account.time.step and account.memory.per_gpu and names the fastest that fits, with its time and memory: the change a user
can make, computed by the model rather than a generic hint.
"""

from __future__ import annotations

from trainledger.units import format_bytes, format_seconds


def default_zero(*, dp: int, pp: int, framework: str) -> tuple[int, str]:
    """(ZeRO stage, why) a user of this layout runs when --zero is not given.

    dp = 1: nothing to shard (0). Megatron-LM: its distributed optimizer (ZeRO-1). Pipelining: ZeRO-1 — Megatron's
    distributed optimizer; torchtitan's FSDP under torch.distributed.pipelining gathers once and reduces once
    per step (no per-micro-batch re-gathering), ZeRO-1's traffic. Otherwise FSDP2 full shard (ZeRO-3),
    torchtitan's default data parallelism.
    """
    if dp == 1:
        return 0, "dp 1: nothing to shard"
    if framework == "megatron":
        return 1, "Megatron-LM's distributed optimizer shards the optimizer states (ZeRO-1)"
    if pp > 1:
        return 1, ("with pipelining the parameters are gathered once per step, not per micro-batch (Megatron-LM's "
                   "distributed optimizer; FSDP under torch.distributed.pipelining): ZeRO-1's traffic")
    return 3, "FSDP2 full shard, torchtitan's default data parallelism"


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


def lever(spec, gpu, settings: dict, result: dict, fsdp_for=None) -> dict | None:
    """The change to `result`'s data parallelism that makes the step faster and still fits, or None:
    {"zero", "flags", "step_seconds", "memory_bytes", "text", "alternatives"}; the fastest other ZeRO stage is
    named first, then (for FSDP2) the fastest setting that keeps the stage.

    `settings`: the keyword arguments `result` was computed with (account.time.step.step_time's); `fsdp_for(zero)`
    returns the FSDP settings to use for a stage (None: step_time's defaults). Tried: every other ZeRO stage
    (0 and 1 only with Megatron-LM's kernels), and for FSDP2 the same stage without re-gathering per micro-batch.
    """
    from trainledger.account.memory.fsdp import fsdp_settings
    from trainledger.account.time.step import step_time
    from trainledger.specs.recipes import get_recipe

    stages = (0, 1) if settings.get("framework") == "megatron" else (0, 1, 2, 3)
    options = [(z, f"--zero {z}", fsdp_for(z) if fsdp_for else None) for z in stages if z != result["zero"]]
    if result["zero"] == 3 and result["micro_batches"] > 1 and result.get("fsdp"):
        current = result["fsdp"]["settings"]
        if current["accumulate"] == "sharded":
            keep = fsdp_settings(get_recipe(settings["precision"]),
                                 param_dtype=current["param_dtype"] if current["mixed_precision"] else None,
                                 reduce_dtype=current["reduce_dtype"], reshard_after_forward=False,
                                 accumulate="unsharded", replicate=current["replicate"], pp=result["pp"], dp=result["dp"])
            options.append((3, "--fsdp-accumulate unsharded --no-reshard-after-forward", keep))
    found = []
    for zero, flags, fsdp in options:
        r = step_time(spec, gpu, **dict(settings, zero=zero, fsdp=fsdp, with_memory=True))
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
