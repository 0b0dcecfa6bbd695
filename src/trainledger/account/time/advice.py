"""Advice that knows the set-up: the bottleneck line of a predicted step, in words. Pure, no torch.

`bottleneck_advice(breakdown, setup)` names the largest part of the step and what would shrink it, given the flags
in effect (`setup`: the keys of an account.time.step.step_time result: flash, zero, dp, tp, pp, interleave,
micro_batches, batch_size, framework, optimizer, n_layers, gpus_per_node, compiled). It never suggests what is
already on: no "--flash" when flash is on, no fused optimizer to Megatron-LM's fused Adam, no "--zero 1+" when the
states are already sharded, no torch.compile to a compiled or Megatron-fused model, no interleaving that the
schedule does not allow (account.time.schedule).

The search for a faster setting around a step is account/planning/suggest.py (it times steps with account.time.step, which
imports this module for its bottleneck line).
"""

from __future__ import annotations

from trainledger.account.time.kernels import FOREACH_PASSES
from trainledger.account.time.schedule import valid_interleaves

WORDS = {
    "compute": "matrix multiplications (GEMMs)", "attention": "the attention core",
    "memory_bound": "memory-bound ops (norms, activations, casts, residual adds, the loss)",
    "overhead": "per-op dispatch overhead", "optimizer": "the optimizer step",
    "tp_comm": "tensor-parallel communication", "cp_comm": "context-parallel communication",
    "pp_comm": "pipeline point-to-point communication", "dp_comm": "data-parallel communication",
    "pipeline_bubble": "the pipeline bubble", "ep_comm": "expert-parallel all-to-all (token dispatch and combine)",
}
# Below this fraction of the dense peak while the GEMMs run, the matmuls are called small rather than the step compute-bound.
SMALL_GEMM_FRACTION = 0.5
MAX_INTERLEAVE = 8
# trainledger.optim runs these as torch._foreach_* passes (account.time.kernels): a fused kernel would move fewer bytes
FOREACH_OPTIMIZERS = tuple(FOREACH_PASSES)


def _larger_micro_batch(setup: dict) -> str:
    """How to make each micro-batch (and so each matmul) larger, given the accumulation in effect."""
    if setup.get("micro_batches", 1) > 1:
        return "a larger --batch-size (fewer accumulation steps)"
    return "a larger --batch-size with a larger --global-batch-size"


def _more_micro_batches(setup: dict) -> str:
    """How to get more micro-batches per step, given the micro-batch in effect."""
    smaller = " (a smaller --batch-size" if setup.get("batch_size", 1) > 1 else " (a larger --global-batch-size"
    return "more micro-batches per step" + smaller + (")" if "global" in smaller else " or a larger --global-batch-size)")


def hints(breakdown: dict, setup: dict) -> dict[str, str]:
    """What would shrink each part of the step, given the set-up in effect (module docstring)."""
    pp, m, v = setup.get("pp", 1), setup.get("micro_batches", 1), setup.get("interleave", 1)
    tp, dp, zero = setup.get("tp", 1), setup.get("dp", 1), setup.get("zero", 0)
    megatron = setup.get("framework") == "megatron"
    compiled = bool(setup.get("compiled") or setup.get("compile"))

    work = sum(breakdown.get(k, 0.0) for k in ("compute", "attention"))
    rate = setup["hfu"] * setup["step_seconds"] / work if work and setup.get("hfu") and setup.get("step_seconds") else None
    if rate is not None and rate < SMALL_GEMM_FRACTION:
        grow = [_larger_micro_batch(setup), "less tensor parallelism (--tp)" if tp > 1 else None]
        compute = (f"the GEMMs run at {rate:.0%} of the dense peak: they are small; "
                   + " or ".join(g for g in grow if g) + " makes them larger")
    else:
        compute = "the GPUs are busy with matmuls: the layout is compute-bound"

    if setup.get("flash", True):
        attention = ("flash attention is already on; the attention core grows with --seq-len: "
                     + ("more context parallelism" if setup.get("cp", 1) > 1 else "context parallelism") + " (--cp) splits the sequence over GPUs")
    else:
        attention = "use flash attention (--flash) or a shorter sequence"

    if megatron:
        memory_bound = f"Megatron-LM's kernels are already fused: {_larger_micro_batch(setup)} amortizes the rest"
    elif compiled:
        memory_bound = f"the model is already compiled: {_larger_micro_batch(setup)} amortizes the rest"
    else:
        memory_bound = f"fuse elementwise ops (torch.compile) or use larger matmuls: {_larger_micro_batch(setup)}"

    overhead = ("launch/dispatch overhead dominates: " + _larger_micro_batch(setup)
                + ("" if compiled or megatron else " or fewer, larger ops (torch.compile)"))

    fixes = []
    if dp > 1 and zero == 0:
        fixes.append("shard the optimizer states over the data-parallel ranks (--zero 1+)")
    elif dp == 1:
        fixes.append("more data-parallel ranks to shard the states over (with --zero 1+)")
    if not megatron and setup.get("optimizer") in FOREACH_OPTIMIZERS:
        fixes.append("a fused optimizer kernel (torch.optim.AdamW(fused=True)) instead of foreach passes")
    fixes.append("more tokens per step (a larger --global-batch-size) to spread it")
    optimizer = " or ".join(fixes)

    gpn = setup.get("gpus_per_node", 8)
    tp_comm = ("keep tensor parallelism inside a node (--tp at most " + str(gpn) + ")" if tp > gpn
               else "less tensor parallelism (--tp); it already stays inside a node")

    if zero == 3 and m > 1:
        dp_comm = (f"ZeRO-3 gathers the parameters again for each of the {m} micro-batches: a larger --batch-size "
                   "(fewer micro-batches) or --zero 1 or 2 (gathers once per step)")
    elif zero == 3:
        dp_comm = "ZeRO-3 gathers parameters every layer: --zero 1 or 2 gathers once per step, or a larger global batch"
    elif pp > 1:
        dp_comm = "with pipelining it starts after the flush: a larger --global-batch-size amortizes it"
    else:
        dp_comm = "a larger --global-batch-size amortizes it"

    bubble = f"(p − 1)/(v·m) = {(pp - 1) / (v * m):.3f} of the ideal time: " + _more_micro_batches(setup)
    n_layers = setup.get("n_layers")
    if n_layers:
        more = [x for x in valid_interleaves(n_layers, pp, m, MAX_INTERLEAVE) if x > v]
        if more:
            bubble += f", or interleaving (--interleave {more[0]})"
    return {
        "compute": compute, "attention": attention, "memory_bound": memory_bound, "overhead": overhead,
        "optimizer": optimizer, "tp_comm": tp_comm, "cp_comm": "less context parallelism (--cp)",
        "pp_comm": "fewer pipeline stages (--pp)", "dp_comm": dp_comm, "pipeline_bubble": bubble,
        "ep_comm": (f"keep the expert-parallel group inside a node (--ep at most {gpn} // etp) or overlap the "
                    "all-to-all with other micro-batches' compute (--ep-overlap)"),
    }


def bottleneck_advice(breakdown: dict, setup: dict) -> str:
    """The largest part of the step in words, with its share and what would shrink it under this set-up."""
    total = sum(breakdown.values())
    part = max(breakdown, key=breakdown.get)
    share = breakdown[part] / total if total else 0.0
    return f"{WORDS[part]}: {share:.0%} of the step ({hints(breakdown, setup)[part]})"
