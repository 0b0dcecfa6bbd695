"""What compute hides of data-parallel communication, and a collective's time on a GPU's links. Pure, no torch.

Split from account.time.step (which imports these): the exposed part of DDP / ZeRO-1/2 gradient reduction and of
ZeRO-3 in Megatron style (`data_parallel_exposed`), FSDP2 unit by unit (`fsdp_step`, account.memory.fsdp), the cost
of a collective whose NCCL kernel holds SMs the compute it overlaps would use (`overlapped_exposed`), and the
time of one collective on the links its group crosses (`collective_seconds`).
"""

from __future__ import annotations

from trainledger.specs.run_checks import pp_overlap_default  # noqa: F401 (moved to specs: the run's checks)

from dataclasses import replace

from trainledger.account.time import comm as comm_mod
from trainledger.account.memory import fsdp as fsdp_mod
from trainledger.account.time import fsdp_comm
from trainledger.account.time.interference import overlap_slowdown
from trainledger.errors import TrainledgerError

DDP_BUCKET_BYTES = 25 * 2**20   # torch DistributedDataParallel(bucket_cap_mb=25), the default


def data_parallel_exposed(gpu, c, micro_batches: int, stage_fwd: float, stage_bwd: float, pp: int, n_layers: int,
                          style: str) -> float:
    """Exposed seconds of one data-parallel collective `c` (all its calls in a step: `collective_seconds`), given a
    micro-batch's forward and backward compute seconds on the stage (`stage_fwd`, `stage_bwd`).

    DDP / ZeRO-1/2 gradient reduction runs in buckets during the last micro-batch's backward: hidden behind it
    except the last bucket (25 MB in torch DDP); with pipelining it starts after the flush (Megatron-LM 2022) and
    is exposed. ZeRO-3 / FSDP gathers and reduces one layer at a time, prefetched behind the neighbouring
    layer's compute: the first gather of a pass and the last reduce-scatter are exposed, the rest only when longer
    than the pass. The parameter all-gather after a ZeRO-1/2 optimizer step is exposed. PyTorch's DDP copies
    gradients into its buckets and back (gradient_as_bucket_view=False, the default) and FSDP2 copies into and out
    of its flat communication buffers: 4·S and 2·S bytes of memory traffic, added here (Megatron uses contiguous
    buffers and copies nothing). While a hidden collective runs, the compute it hides behind runs slower
    (account.time.interference.overlap_slowdown: SMs/(SMs − channels) where NCCL's channel count is published,
    else the measured average of arXiv:2507.03114; overlapped_exposed).
    """
    from trainledger.account.time.roofline import memory_seconds
    seconds = collective_seconds(gpu, c)
    slow = overlap_slowdown(gpu, link(gpu, c.link))     # NCCL's SMs, or the measured average (interference.py)

    def exposed(comm: float, hidden: float) -> float:
        return overlapped_exposed(comm, hidden, hidden * slow)

    per_call = seconds / c.count if c.count else 0.0
    copies = 0.0
    if style == "torch":
        copies = c.count * memory_seconds(gpu, (4 if c.kind == "all_reduce" else 2) * c.payload_bytes)
    if c.hides_behind == "backward_last":
        bucket = collective_seconds(gpu, replace(c, payload_bytes=min(DDP_BUCKET_BYTES, c.payload_bytes), count=1))
        hidden = stage_bwd if pp == 1 else 0.0
        return copies + (seconds if pp > 1 else bucket + exposed(seconds - bucket, hidden))
    if c.hides_behind in ("forward", "backward"):
        unit = collective_seconds(gpu, replace(c, payload_bytes=c.payload_bytes / n_layers, count=1))
        edge = unit if (c.kind == "all_gather" and c.hides_behind == "forward") or c.kind == "reduce_scatter" else 0.0
        hidden = stage_fwd if c.hides_behind == "forward" else stage_bwd
        return copies + micro_batches * (edge + exposed(per_call - edge, hidden))
    return copies + seconds


def fsdp_step(spec, gpu, settings, layer: tuple, layout, *, micro_batches: int) -> dict:
    """FSDP2's part of a step (account.memory.fsdp `settings`) on `layout` (specs.run.Layout: its tp, cp, pp, dp,
    ep): exposed seconds of its collectives unit by unit, the copies on the compute stream, the CPU time of its
    hooks and what of it the GPU waits for, and (collective, seconds) records.

    `layer`: the mean layer's (forward, backward, recomputation) seconds by part. One block's compute is its
    forward, and its backward with the recomputation; a running collective holds its link's NCCL SMs, slowing the
    compute it hides behind (overlapped_exposed).
    """
    fwd, bwd, rec = layer
    tp, cp, pp, dp, ep = layout.tp, layout.cp, layout.pp, layout.dp, layout.ep
    from trainledger.account.time.roofline import memory_seconds
    from trainledger.account.counting.placement import params_per_gpu
    # units of this rank: its 1/ep of the routed experts (as account.memory.per_gpu places them), not all of them
    u = fsdp_mod.units(spec, params_per_gpu(spec, tp, pp, ep), tp, pp)
    blocks = u["blocks"]
    collectives = fsdp_comm.collectives(u, settings, tp=tp, cp=cp, dp=dp, micro_batches=micro_batches,
                                       gpus_per_node=gpu.gpus_per_node)
    by_name = {c.name: c for c in collectives}

    def one(name: str, params: float, dtype_bytes: int) -> float:
        c = by_name.get(name)
        return collective_seconds(gpu, replace(c, payload_bytes=params * dtype_bytes, count=1)) if c else 0.0

    pb, rb, shard = settings.param_bytes, settings.reduce_bytes, dp // settings.replicate
    times = {"ag": one("fsdp_allgather_forward", u["block"], pb), "ag_root": one("fsdp_allgather_root", u["root"], pb),
             "rs": one("fsdp_reducescatter", u["block"], rb) + one("hsdp_allreduce", u["block"] / shard, rb),
             "rs_root": one("fsdp_reducescatter", u["root"], rb) + one("hsdp_allreduce", u["root"] / shard, rb)}
    slow = overlap_slowdown(gpu, link(gpu, collectives[0].link)) if collectives else 1.0
    fwd_block = fwd["compute"] + fwd["attention"] + fwd["memory_bound"]
    bwd_block = sum(part[k] for part in (bwd, rec) for k in ("compute", "attention", "memory_bound"))
    exposed = fsdp_comm.step_exposed(settings, micro_batches, blocks, fwd_block, bwd_block, times,
                                    lambda comm, hidden: overlapped_exposed(comm, hidden, hidden * slow))
    copies = memory_seconds(gpu, fsdp_comm.copy_bytes(settings, micro_batches, u["block"], u["root"], blocks))
    cpu = fsdp_comm.cpu_seconds(settings, blocks)
    passes = micro_batches if settings.accumulate == "sharded" else 1
    cpu_exposed = passes * (max(0.0, cpu["forward"] - blocks * fwd_block) + max(0.0, cpu["backward"] - blocks * bwd_block))
    return {"exposed_seconds": exposed, "copy_seconds": copies, "cpu_seconds_per_micro_batch": cpu["forward"] + cpu["backward"],
            "cpu_exposed_seconds": cpu_exposed, "unit_seconds": times, "units": u,
            "block_forward_seconds": fwd_block, "block_backward_seconds": bwd_block,
            "records": [(c, collective_seconds(gpu, c)) for c in collectives]}


def overlapped_exposed(comm_seconds: float, gemm_seconds: float, narrow_gemm_seconds: float) -> float:
    """Seconds a collective adds to the GEMMs it overlaps when its NCCL kernel holds some of their SMs.

    The GEMMs take `gemm_seconds` on all SMs and `narrow_gemm_seconds` on the SMs the collective leaves free.
    While the collective runs (comm_seconds) they progress at the narrow rate; the rest of their work then runs
    at the full rate. If the collective outlasts even the slowed GEMMs, it sets the time:
        comm ≥ narrow: comm − gemm;   else: comm · (1 − gemm / narrow)
    With narrow = gemm (no SMs taken) this is max(0, comm − gemm), the plain exposed part.
    """
    if comm_seconds <= 0:
        return 0.0
    if comm_seconds >= narrow_gemm_seconds:
        return comm_seconds - gemm_seconds
    return comm_seconds * (1.0 - gemm_seconds / narrow_gemm_seconds) if narrow_gemm_seconds > 0 else comm_seconds


def link(gpu, which: str):
    """The Link `which` ("intra" inside a node, "inter" between nodes) of `gpu`; an error naming the flag if none."""
    found = gpu.intra_node_link if which == "intra" else gpu.inter_node_link
    if found is None:
        flag = "--intra-node-bandwidth" if which == "intra" else "--inter-node-bandwidth"
        where = "inside a node" if which == "intra" else "between nodes"
        raise TrainledgerError(f"no published interconnect {where} for {gpu.name}: give {flag} (e.g. 25GB/s)")
    return found


def collective_seconds(gpu, c) -> float:
    """Seconds of all `c.count` calls of collective `c` on `gpu`'s links (account.time.comm.group_seconds: a group
    spanning nodes with k members per node drives k NICs, capped by NVLink)."""
    if c.link == "intra":
        return comm_mod.group_seconds(c, link(gpu, "intra"), None)
    return comm_mod.group_seconds(c, gpu.intra_node_link, link(gpu, "inter"))


def sms_beside(gpu, link) -> int | None:
    """SMs left to compute while a collective on `link` runs (it holds `link.sm_channels`); None: not modelled."""
    return gpu.sm_count - link.sm_channels if (link.sm_channels and gpu.sm_count) else None


def pp_exposed(gpu, c, seconds: float, gemm_seconds: float) -> float:
    """Seconds a micro-batch's asynchronous point-to-point sends add to the stage's GEMMs they run beside: their
    NCCL kernel holds SMs, so the GEMMs run overlap_slowdown × slower while it runs (account/time/interference.py);
    what outlasts the slowed GEMMs is exposed (overlapped_exposed)."""
    from trainledger.account.time.interference import overlap_slowdown
    slow = overlap_slowdown(gpu, link(gpu, c.link))
    return overlapped_exposed(seconds, gemm_seconds, gemm_seconds * slow)


def sms_beside_tp_comm(gpu, tp: int, cp: int, pp: int) -> int | None:
    """SMs left to the GEMMs while a TP collective runs (its link's NCCL channels hold the rest); None: all of them."""
    if tp == 1:
        return None
    return sms_beside(gpu, link(gpu, comm_mod.group_links(tp, cp, pp, 1, gpu.gpus_per_node)["tp"]))
