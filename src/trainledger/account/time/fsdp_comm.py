"""FSDP2's collectives as they run, unit by unit: what each moves, what hides it, its copies and CPU hooks. Pure.

The settings, units and buffers are account.memory.fsdp (its docstring describes how FSDP2 runs a step); this
module is their cost in time, built on account.time.comm's collectives.
"""

from __future__ import annotations

from trainledger.account.memory.fsdp import FsdpSettings
from trainledger.account.time import comm as comm_mod

# CPU time of one FSDP2 collective's hooks (copy-in, the NCCL call, bookkeeping): Llama 3 8B block all-gather,
# 0.37 ms with the bf16 cast fast path (pytorch/pytorch#133369, awgu, 2024-08); applied to reduce-scatters too.
CPU_SECONDS_PER_COLLECTIVE = 0.37e-3


def groups(tp: int, cp: int, dp: int, gpus_per_node: int, replicate: int) -> dict:
    """Link ("intra"/"inter") and members per node of the shard and replicate groups (ranks TP, CP, DP in order)."""
    g, shard = gpus_per_node, dp // replicate
    per_node = comm_mod.group_ranks_per_node(tp, cp, dp, g, replicate)
    return {"shard": ("intra" if tp * cp * shard <= g else "inter", per_node["dp_shard"], shard),
            "replicate": ("intra" if tp * cp * dp <= g else "inter", per_node["dp_replicate"], replicate)}


def collectives(u: dict, settings: FsdpSettings, *, tp: int, cp: int, dp: int, micro_batches: int,
                gpus_per_node: int) -> list:
    """The FSDP2 collectives of one step on one rank of the busiest stage (account.time.comm.Collective, count per step).

    Payloads are whole units' worth summed over the stage (the time model splits them per unit): the root's and
    the blocks' forward gathers, the blocks' backward re-gathers (all but the last block), the reduce-scatters
    of every unit, and under HSDP the all-reduce of each reduced shard over the replicas. `u`: `units`.
    """
    (link, k, shard), (rlink, rk, replicas) = groups(tp, cp, dp, gpus_per_node, settings.replicate).values()
    m = micro_batches
    gathers = m if settings.accumulate == "sharded" else 1
    regathers = m if settings.accumulate == "sharded" and settings.reshard_after_forward else 0
    reduces = m if settings.accumulate == "sharded" else 1
    pb, rb, blocks = settings.param_bytes, settings.reduce_bytes, u["blocks"]
    out = []
    if shard > 1:
        out += [comm_mod.Collective("fsdp_allgather_root", "dp_comm", "all_gather", u["root"] * pb, shard, link, gathers,
                                    "none: exposed (the first thing a forward needs)", "none", k),
                comm_mod.Collective("fsdp_allgather_forward", "dp_comm", "all_gather", blocks * u["block"] * pb, shard,
                                    link, gathers, "block i+1 behind block i's forward (prefetch); the first exposed",
                                    "forward", k)]
        if regathers and blocks > 1:
            out.append(comm_mod.Collective("fsdp_allgather_backward", "dp_comm", "all_gather",
                                           (blocks - 1) * u["block"] * pb, shard, link, regathers,
                                           "block i−1 behind block i's backward (prefetch)", "backward", k))
        out.append(comm_mod.Collective("fsdp_reducescatter", "dp_comm", "reduce_scatter",
                                       (blocks * u["block"] + u["root"]) * rb, shard, link, reduces,
                                       "block i+1 behind block i's backward; the first block's and the root's exposed",
                                       "backward", k))
    if replicas > 1:
        out.append(comm_mod.Collective("hsdp_allreduce", "dp_comm", "all_reduce",
                                       (blocks * u["block"] + u["root"]) * rb / shard, replicas, rlink, reduces,
                                       "after each unit's reduce-scatter, in its stream", "backward", rk))
    return out


def pass_exposed(blocks: int, fwd_block: float, bwd_block: float, times: dict, *, gather_forward: bool,
                 gather_backward: bool, reduce: bool,
                 exposed=lambda comm, hidden: max(0.0, comm - hidden)) -> tuple[float, float]:
    """(forward, backward) exposed seconds of one micro-batch's FSDP2 collectives, unit by unit.

    `times`: {"ag", "rs"} one block's all-gather and reduce-scatter (+ HSDP all-reduce) seconds, {"ag_root",
    "rs_root"} the root's; `fwd_block`, `bwd_block` one block's compute (backward with its recomputation). `exposed(comm,
    hidden)` is what a collective adds over the compute it overlaps (default max(0, comm − hidden)).
    Forward: root and first block gathered before any compute; block i+1's gather behind block i.
    Backward, from the last block down: block i hides the gather of block i−1 (not for the last block, kept
    unsharded) and the reduce-scatter of block i+1; the first block's and the root's reduce-scatters come after
    all compute.
    """
    ag, ag_root, rs, rs_root = times["ag"], times["ag_root"], times["rs"], times["rs_root"]
    forward = 0.0
    if gather_forward:
        forward = ag_root + ag + sum(exposed(ag, fwd_block) for _ in range(blocks - 1))
    backward = 0.0
    for i in range(blocks, 0, -1):
        comm = (ag if gather_backward and i >= 2 else 0.0) + (rs if reduce and i <= blocks - 1 else 0.0)
        backward += exposed(comm, bwd_block) if comm > 0 else 0.0
    if reduce:
        backward += rs + rs_root
    return forward, backward


def step_exposed(settings: FsdpSettings, micro_batches: int, blocks: int, fwd_block: float, bwd_block: float,
                 times: dict, exposed) -> float:
    """Exposed seconds of a step's FSDP2 collectives: `pass_exposed` over the micro-batches (see the module
    docstring for gradient accumulation). `times`: {"ag", "ag_root", "rs", "rs_root"} of one unit each."""
    m = micro_batches
    run = lambda gf, gb, red: sum(pass_exposed(blocks, fwd_block, bwd_block, times, gather_forward=gf,  # noqa: E731
                                               gather_backward=gb, reduce=red, exposed=exposed))
    if settings.accumulate == "sharded":
        return m * run(True, settings.reshard_after_forward, True)
    if m == 1:
        return run(True, False, True)
    return run(True, False, False) + run(False, False, True)


def copy_bytes(settings: FsdpSettings, micro_batches: int, block: float, root: float, blocks: int) -> float:
    """Bytes the copies on the compute stream move in one step: each all-gather's copy-out into the parameters
    (read + write of the unit in the param dtype) and each reduce-scatter's copy-in (read the param-dtype
    gradients, write them in the reduce dtype); pytorch/pytorch#157027."""
    m, pb, rb = micro_batches, settings.param_bytes, settings.reduce_bytes
    gathers = m if settings.accumulate == "sharded" else 1
    regathers = m if settings.accumulate == "sharded" and settings.reshard_after_forward else 0
    reduces = m if settings.accumulate == "sharded" else 1
    gathered = gathers * (blocks * block + root) + regathers * max(blocks - 1, 0) * block
    return gathered * 2 * pb + reduces * (blocks * block + root) * (pb + rb)


def cpu_seconds(settings: FsdpSettings, blocks: int) -> dict:
    """CPU seconds of FSDP2's hooks for one micro-batch's forward and backward ({"forward", "backward"}), at
    CPU_SECONDS_PER_COLLECTIVE per collective call of a unit (sharded accumulation)."""
    forward = (blocks + 1) * CPU_SECONDS_PER_COLLECTIVE
    backward = ((blocks - 1 if settings.reshard_after_forward else 0) + blocks + 1) * CPU_SECONDS_PER_COLLECTIVE
    return {"forward": forward, "backward": backward}
