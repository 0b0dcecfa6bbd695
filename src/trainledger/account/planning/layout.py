"""The fastest parallel layouts that fit: a search over TP, SP, PP, interleave, CP, DP, ZeRO, micro-batch, recompute. Pure.

The search is kept apart from the cost model: it only enumerates candidates, asks account.memory.per_gpu whether each
fits (the same `memory_per_gpu` that `trainledger memory` prints) and account.time.step how long its step takes.

Candidates (all must multiply to the GPU count: tp · pp · cp · dp = num_gpus):
- tp: divisors of gcd(n_heads, n_kv_heads) up to the GPUs of one node (tensor parallelism across nodes is never
  faster on today's networks); with sp on or off when tp > 1.
- cp: 1, or powers of two dividing seq_len that keep at least 1,024 tokens per rank.
- pp: divisors of num_gpus/(tp·cp) up to n_layers; interleave v up to 8 where the schedule is valid
  (account.time.schedule: n_layers divisible by pp·v, micro-batches a multiple of pp, as Megatron-LM requires).
- micro-batch b: divisors of global_batch/dp (powers of two and the quotient itself).
- ep (mixture-of-experts models): the divisors of gcd(n_experts, dp), each GPU holding n_experts/ep experts
  (account.counting.experts; the expert-parallel group is taken from the data-parallel ranks). With framework
  "megatron", MoE Parallel Folding (`expert_layouts`): ep over the divisors of gcd(n_experts, tp·cp·dp), with the
  expert TP of the attention (etp = tp) where ep divides cp·dp, and etp 1 (whole experts; with tp > 1 only under
  sequence parallelism) for every ep > 1 when tp > 1: at most twice the ep values, so the search stays bounded.
- ZeRO 0-3 over dp (0 only when dp = 1); for framework "megatron" only 0 and 1 (DDP or Megatron-LM's distributed
  optimizer, which shards optimizer states like ZeRO-1). ZeRO-3 is FSDP2 as it runs (account.memory.fsdp: a bf16
  mixed-precision policy unless `fsdp_param_dtype` says otherwise; with pipelining, gathered once per step), so the
  stage that is fastest under the model wins; on a tie the lower stage is listed first.
Memory: a layout fits when the peak of its training step (account.memory.per_gpu's peak_bytes) plus the reserve fits the
GPU: --reserve, or by default what a CUDA process holds besides its tensors (context, cuBLAS workspaces, the
caching allocator's cache; account.memory.per_gpu.cuda_reserve_bytes). So no layout is listed above memory - reserve;
`near_limit` marks those within NEAR_LIMIT_FRACTION of it (the allocator's cache varies from step to step).
Pruning (keeps the answer exact under the model): recomputation only adds time and only saves memory, so for each
(tp, sp, pp, cp, b, zero) only the lightest recompute that fits is timed; interleaving does not change memory in
account.memory.per_gpu, so it is timed only for layouts that fit.
"""

from __future__ import annotations

import math

from dataclasses import replace

from trainledger.account.memory.per_gpu import memory_per_gpu, reserve_bytes_of
from trainledger.account.time.schedule import valid_interleaves
from trainledger.account.time.step import step_time
from trainledger.errors import TrainledgerError
from trainledger.specs.run_checks import default_precision
from trainledger.units import format_bytes

RECOMPUTE_ORDER = ("none", "selective", "full")
MIN_TOKENS_PER_CP_RANK = 1024
MAX_INTERLEAVE = 8
# a pick whose headroom (after the reserve) is below this share of the GPU's memory is flagged `near_limit`: the
# replayed caching-allocator cache ranges 1.5-20 % of the peak where the default reserve counts 10 %
# (account.memory.per_gpu.ALLOCATOR_SLACK_FRACTION)
NEAR_LIMIT_FRACTION = 0.05


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(spec, num_gpus: int, global_batch_size: int, seq_len: int, gpus_per_node: int):
    """Yield (tp, sp, cp, pp, dp, batch_size) of every layout the search considers (before memory and interleave)."""
    heads = math.gcd(spec.n_heads, spec.kv_heads)
    for tp in (d for d in _divisors(heads) if d <= min(gpus_per_node, num_gpus) and num_gpus % d == 0):
        for cp in (c for c in (1, 2, 4, 8, 16, 32) if seq_len % c == 0 and (c == 1 or seq_len // c >= MIN_TOKENS_PER_CP_RANK)
                   and num_gpus % (tp * c) == 0 and (c == 1 or c * tp <= num_gpus)):
            rest = num_gpus // (tp * cp)
            for pp in (p for p in _divisors(rest) if p <= spec.n_layers):
                dp = rest // pp
                if global_batch_size % dp:
                    continue
                per_rank = global_batch_size // dp
                sizes = sorted({b for b in _divisors(per_rank) if b & (b - 1) == 0} | {per_rank})
                for b in sizes:
                    for sp in ((False, True) if tp > 1 else (False,)):
                        yield tp, sp, cp, pp, dp, b


def expert_parallel_sizes(spec, dp: int) -> list[int]:
    """The --ep values a layout with `dp` data-parallel ranks may take: divisors of gcd(n_experts, dp); [1] if dense."""
    return _divisors(math.gcd(spec.n_experts, dp)) if spec.is_moe else [1]


def expert_layouts(spec, tp: int, sp: bool, cp: int, dp: int, framework: str) -> list[tuple[int, int | None]]:
    """(ep, etp) pairs a layout may take (etp None: the attention's tp). Without Megatron: expert_parallel_sizes.
    With it (module docstring): ep | gcd(n_experts, tp·cp·dp) with etp = tp where ep | cp·dp, and etp 1 beside
    it for ep > 1 when tp > 1 and sp (Megatron-LM needs sequence parallelism for MoE with TP)."""
    if framework != "megatron" or not spec.is_moe:
        return [(ep, None) for ep in expert_parallel_sizes(spec, dp)]
    pairs = []
    for ep in _divisors(math.gcd(spec.n_experts, tp * cp * dp)):
        if (cp * dp) % ep == 0:
            pairs.append((ep, None))
        if ep > 1 and tp > 1 and sp:
            pairs.append((ep, 1))
    return pairs


def search(spec, hardware, run, *, top: int = 10, recomputes: tuple[str, ...] | None = None) -> dict:
    """The `top` fastest layouts that fit in memory, fastest first, with how many were considered.

    `hardware`: specs.run.Hardware (the GPU, the GPU count to fill, and --memory-per-gpu if given); `run`: the
    settings the search keeps (specs.run.Run: the global batch — one sequence per GPU when None — and sequence length,
    the recipe and optimizer, the kernels and framework, the reserve, FSDP2's gathered dtype for ZeRO-3 layouts);
    its layout and recomputation are what the search varies. `recomputes` restricts the recomputation policies tried
    (default all, lightest first).

    Returns {"layouts": [...], "considered", "fitting", "timed"}; each layout has tp sp pp interleave cp dp zero
    batch_size recompute step_seconds mfu memory_bytes (the step's peak per GPU) reserve_bytes headroom_bytes
    near_limit (+ tokens_per_s, hfu, micro_batches, bottleneck) and `run`: the candidate as a resolved specs.run.Run,
    which step_time (and `step --config`, `train --config`) take as it is.
    """
    gpu, num_gpus = hardware.gpu, hardware.num_gpus
    seq_len = run.batch.seq_len if run.batch.seq_len is not None else spec.default_seq_len
    global_batch_size = run.batch.global_batch_size if run.batch.global_batch_size is not None else num_gpus
    precision = run.numerics.precision if run.numerics.precision is not None else default_precision(gpu)
    framework = run.kernels.framework
    base = run.with_(seq_len=seq_len, global_batch_size=global_batch_size, precision=precision)
    order = tuple(r for r in RECOMPUTE_ORDER if recomputes is None or r in recomputes)
    capacity = hardware.memory_bytes
    reserve = reserve_bytes_of(run.levers.reserve, gpu, framework)
    results, considered, fitting, timed = [], 0, 0, 0
    cache: dict = {}
    for tp, sp, cp, pp, dp, b in candidates(spec, num_gpus, global_batch_size, seq_len, gpu.gpus_per_node):
        stages = (0, 1) if framework == "megatron" else (0, 1, 2, 3)
        experts = expert_layouts(spec, tp, sp, cp, dp, framework)
        for zero, (ep, etp) in ((z, e) for z in (stages if dp > 1 else (0,)) for e in experts):
            considered += 1
            chosen = None
            micro_batches = global_batch_size // (dp * b)
            layout = replace(base.layout, tp=tp, sp=sp, pp=pp, cp=cp, dp=dp, zero=zero, ep=ep, etp=etp, interleave=1)
            for recompute in order:
                candidate = replace(base, batch=replace(base.batch, batch_size=b), layout=layout,
                                    levers=replace(base.levers, recompute=recompute))
                memory = memory_per_gpu(spec, hardware, candidate)
                if memory["fits"]:
                    chosen = (candidate, memory)
                    break
            if chosen is None:
                continue
            fitting += 1
            candidate, memory = chosen
            for v in valid_interleaves(spec.n_layers, pp, micro_batches, MAX_INTERLEAVE):
                timed += 1
                timed_run = replace(candidate, layout=replace(candidate.layout, interleave=v))
                r = step_time(spec, hardware, timed_run, with_memory=False, cache=cache)
                results.append({"tp": tp, "sp": sp, "pp": pp, "interleave": v, "cp": cp, "dp": dp, "zero": zero, "ep": ep,
                                "etp": tp if etp is None else etp,
                                "batch_size": b, "recompute": candidate.levers.recompute,
                                "step_seconds": r["step_seconds"],
                                "mfu": r["mfu"], "hfu": r["hfu"], "tokens_per_s": r["tokens_per_s"],
                                "micro_batches": micro_batches, "memory_bytes": memory["peak_bytes"],
                                "reserve_bytes": memory["reserve_bytes"], "headroom_bytes": memory["headroom_bytes"],
                                "near_limit": memory["headroom_bytes"] < NEAR_LIMIT_FRACTION * capacity,
                                "bottleneck": r["bottleneck"], "run": r["run"]})
    if not results:
        kept = f", {format_bytes(reserve)} of it reserved" if reserve else ", less the CUDA reserve" if reserve is None else ""
        raise TrainledgerError(f"no layout of {spec.name} fits {num_gpus} × {gpu.name} ({format_bytes(capacity)} each{kept}) at "
                               f"global batch {global_batch_size} × seq {seq_len} with {precision}: more GPUs "
                               "(--num-gpus), a shorter --seq-len or a lighter --precision/--optimizer")
    results.sort(key=lambda r: (r["step_seconds"], r["tp"] * r["pp"] * r["cp"], r["zero"]))
    return {"layouts": results[:top], "considered": considered, "fitting": fitting, "timed": timed}
