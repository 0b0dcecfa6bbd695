"""Expert parallelism in a training step: the token all-to-alls, their links, and the wait for the busiest expert.

With `ep` > 1 each GPU holds n_experts/ep routed experts (account.counting.experts) and every MoE layer moves
tokens twice per pass (GShard, Lepikhin et al. 2020, arXiv:2006.16668, Sec. 2.2; Megatron-Core's
MoEAlltoAllTokenDispatcher):
    forward:  dispatch (each token copy to the GPU of its expert), the experts, combine (the outputs back)
    backward: the gradients of both, in reverse; a full recomputation repeats the forward pair.
Each call is an all-to-all over the ep ranks. One rank dispatches its n tokens × top-k copies of d_model
activations in the compute dtype: S = n·k·d·bytes (with TP and sequence parallelism n is this rank's n/tp). Under
balanced routing (Megatron Bridge's MoE benchmarks force it: performance-summary.md, "we force-balance the token
distribution among experts") the fraction (ep − 1)/ep of S leaves the GPU: (q − 1)/ep to the q − 1 other group
members on its node over NVLink, (ep − q)/ep over its own NIC to other nodes (one NIC per GPU, rail-optimised).
Both move at once, so a call costs
    latency + max(S·(q − 1)/ep / β_NVLink, S·(ep − q)/ep / β_NIC)
with the links' achieved rates (specs/performance.py: datasheet × NCCL's measured bus-bandwidth fraction; an
assumption for all-to-all, whose nccl-tests busbw is published less often than all-reduce's) and latency the
call latency plus one step of the slowest link crossed. Megatron-Core places the expert grid's ranks ETP fastest,
then EP (megatron/core/parallel_state.py: the expert RankGenerator, cp=1; account/time/folding.py), so group
members are etp ranks apart (etp: expert tensor parallelism, default tp) and q = min(ep, gpus_per_node // etp).

Token-based dispatchers (`dispatcher` "deepep" or "hybridep"; Megatron-Core's flex dispatcher, arXiv:2603.07685
Sec. 4.2.2, and DeepSeek-V3's own, arXiv:2412.19437 Sec. 3.2.2) send a token once to every GPU that holds one of
its experts instead of once per expert, and across nodes once per node: over the NIC to the GPU of the same local
index, which forwards it over NVLink to the GPUs of that node that need it. With a token's k experts a uniform
k-subset of the E (force-balanced routing: Megatron-Core's RandomSTE in megatron/core/transformer/moe/moe_utils.py
replaces the router logits with i.i.d. normal ones "for force-balanced benchmark"), a group of g experts is hit
with probability
    h(g) = 1 − C(E − g, k) / C(E, k)
so a rank sends, per token of d_model activations: (nodes − 1)·h(q·E/ep) copies over its NIC, and over NVLink
(q − 1)·h(E/ep) copies to its own node plus what it forwards of the tokens arriving from other nodes,
(ep − q)·h(E/ep) − (nodes − 1)·h(q·E/ep) (the same count by symmetry). Group-limited routing (DeepSeek-V3: a
token's experts from 4 of 8 groups, so at most 4 nodes when a group is a node) lowers h (expert_group_hit). Both
links move at once, as above. The
report's Table 7 (DeepSeek-V3's layer, 4096 tokens, EP 8-64 on H100 and GB200) is the check
(tests/account/test_moe_report.py).

A skewed router (`imbalance` = busiest expert's load / the mean, ≥ 1) makes the busiest GPU receive and compute
`imbalance` × the balanced share; the others wait for it (the step takes the slowest rank's time). A capacity
factor c (GShard Sec. 2.2; Switch Transformer, arXiv:2101.03961, Sec. 2.2) caps every expert at c × the mean load,
dropping the excess: the busiest load is then min(imbalance, c) and the dropped fraction of token copies
max(0, 1 − c/imbalance) on that expert. `overlap` is the fraction of the all-to-all time hidden behind
computation (Megatron's `overlap_moe_expert_parallel_comm` runs one micro-batch's all-to-all beside another's
compute when the pipeline is interleaved; DeepSeek-V3's DualPipe, arXiv:2412.19437 Sec. 3.2.1, hides nearly all of
it; the Megatron-Core MoE report, arXiv:2603.07685 Sec. 4.2.3, measures a 93 % overlap ratio for DeepSeek-V3 on
H100 with DeepEP); default 0: exposed, as a plain 1F1B schedule leaves it. Hidden is not free: while the hidden
all-to-all H runs, the computation beside it runs slower by the factor s of account.time.interference (SMs held
by the communication kernel, else the measured average), so it loses H·(1 − 1/s) seconds of progress, counted in
ep_comm ("overlap_seconds"). The report puts this cost at "roughly 20% GEMM-efficiency overhead" for DeepEP's 20
SMs per GPU (Sec. 4.2.3).

The dispatch needs its split sizes on the host: dropless routing with ep > 1 synchronizes once per MoE layer's
forward before the all-to-all (Megatron-Core megatron/core/transformer/moe/token_dispatcher.py,
MoEAlltoAllTokenDispatcher.preprocess: cuda_sync_point = "before_ep_alltoall", "A synchronization is needed before
expert parallel AlltoAll communication to get the `input_splits` and `output_splits` CPU values"; the backward reuses
them). At the sync the CPU waits until the GPU's queue is empty, so the GPU then idles while the CPU launches the
all-to-all: one eager op's CPU time per sync (specs/performance.py EAGER_OP_CPU_SECONDS, the reference H100 host, or
the GPU's calibration) plus the copy to the host and the CPU's wake-up (HOST_SYNC_SECONDS, 8.9 µs measured on an
H200 host), counted in ep_comm. Not modelled: a CPU slower than the GPU after the sync (the CPU can no longer run
ahead of a launch-bound stretch; Megatron's per-op CPU costs are not modelled: the form it would take is our own
MoE's, account/time/moe_loop.py).
"""

from __future__ import annotations

import math

from trainledger.account.counting.flops import forward_flops_breakdown
from trainledger.account.time.interference import overlap_slowdown
from trainledger.account.time.overlap import link
from trainledger.errors import TrainledgerError

# calls of one MoE layer per micro-batch: forward dispatch + combine, their two gradients in backward
CALLS_FORWARD, CALLS_BACKWARD = 2, 2
# device-to-host synchronizations of one MoE layer's forward (the dispatch's split sizes; module docstring)
SYNCS_FORWARD = 1
# "alltoall": Megatron's MoEAlltoAllTokenDispatcher (one copy per routed expert); the others token-based (docstring)
from trainledger.specs.run import DISPATCHERS  # noqa: E402 (the run's vocabulary)
from trainledger.specs.run_checks import experts_defaults  # noqa: E402 (unset overlap/dispatcher: the schedule's)
# SMs DeepEP's kernels hold while they run: "DeepEP uses 20 SMs per GPU" (arXiv:2603.07685 Sec. 4.2.3), as
# DeepSeek-V3's own dispatch ("only 20 SMs are sufficient", arXiv:2412.19437 Sec. 3.2.2). HybridEP's is not published.
DEEPEP_SMS = 20


def sync_exposed_seconds(gpu) -> float:
    """Seconds the GPU idles after one host synchronization until the next kernel is launched: the copy to the host
    and the wake-up (HOST_SYNC_SECONDS), then one eager op's CPU time (the GPU's calibrated op_overhead_seconds,
    else the reference host's EAGER_OP_CPU_SECONDS); 0 on a device that does not launch asynchronously (a CPU runs
    each op in turn: nothing is queued to drain)."""
    from trainledger.specs.performance import EAGER_OP_CPU_SECONDS, HOST_SYNC_SECONDS
    if not getattr(gpu, "async_launch", True):
        return 0.0
    overhead = getattr(gpu, "op_overhead_seconds", 0.0) or 0.0
    return HOST_SYNC_SECONDS + (overhead if overhead > 0 else EAGER_OP_CPU_SECONDS)


def overlap_factor(gpu, which: str, dispatcher: str) -> float:
    """How much slower computation runs beside a hidden dispatch/combine: SMs / (SMs − DEEPEP_SMS) for DeepEP on a
    GPU whose SM count we know, else account.time.interference's factor for the link crossed (`which`)."""
    sms = getattr(gpu, "sm_count", 0) or 0
    if dispatcher == "deepep" and sms > DEEPEP_SMS:
        return sms / (sms - DEEPEP_SMS)
    return overlap_slowdown(gpu, link(gpu, which))


def check_expert_options(imbalance: float, capacity_factor: float | None, overlap: float,
                         dispatcher: str = "alltoall") -> None:
    """One-line errors naming the flag for --expert-imbalance (≥ 1), --capacity-factor (> 0), --ep-overlap ([0, 1])
    and --ep-dispatcher (one of DISPATCHERS)."""
    if dispatcher not in DISPATCHERS:
        raise TrainledgerError(f"--ep-dispatcher must be one of {', '.join(DISPATCHERS)}, got {dispatcher!r}")
    if not (isinstance(imbalance, (int, float)) and math.isfinite(imbalance) and imbalance >= 1):
        raise TrainledgerError(f"--expert-imbalance must be a number >= 1 (busiest expert's load / mean load; 1 = "
                               f"balanced), got {imbalance!r}")
    if capacity_factor is not None and not (math.isfinite(capacity_factor) and capacity_factor > 0):
        raise TrainledgerError(f"--capacity-factor must be a positive number, got {capacity_factor!r}")
    if not (isinstance(overlap, (int, float)) and 0 <= overlap <= 1):
        raise TrainledgerError(f"--ep-overlap must be a fraction in [0, 1], got {overlap!r}")


def ranks_per_node(ep: int, tp: int, cp: int, gpus_per_node: int) -> int:
    """Members of one expert-parallel group on one node when they are tp·cp ranks apart; Megatron-Core's expert
    grid (module docstring) asks it with tp = etp and cp = 1."""
    stride = tp * cp
    return max(1, min(ep, gpus_per_node // stride)) if stride <= gpus_per_node else 1


def dispatch_bytes(spec, tokens: float, bytes_per_element: float) -> float:
    """S: bytes one rank dispatches in one all-to-all call: its tokens × top-k copies × d_model × dtype bytes."""
    return tokens * spec.experts_per_token * spec.d_model * bytes_per_element


def all_to_all_seconds(gpu, payload_bytes: float, ep: int, per_node: int) -> dict:
    """One all-to-all of S = `payload_bytes` per rank over `ep` ranks, `per_node` of them on each node (balanced).

    Returns {"seconds", "intra_bytes", "inter_bytes", "sent_bytes"}: bytes this rank sends over NVLink, over its
    NIC, and in all ((ep − 1)/ep · S); seconds as the module docstring.
    """
    if ep <= 1:
        return {"seconds": 0.0, "intra_bytes": 0.0, "inter_bytes": 0.0, "sent_bytes": 0.0}
    return _exchange_seconds(gpu, payload_bytes * (per_node - 1) / ep, payload_bytes * (ep - per_node) / ep)


def expert_group_hit(n_experts: int, k: int, group: float, router_groups: int = 0, groups_per_token: int = 0) -> float:
    """h(g): probability that a token's k experts, a uniform k-subset of `n_experts`, include one of `group`
    contiguous experts (a GPU's or a node's). With group-limited routing (`router_groups` equal groups, the top-k
    taken within `groups_per_token` of them; random logits pick those groups uniformly too), the g experts lie
    in one router group or span m whole ones, and a token misses them when, of the j of their groups it picks, none
    of the j·a experts (a per group) is among its k drawn from the picked groups' experts:
        1 − h = Σ_j C(m, j) C(G − m, t − j) / C(G, t) · C(t·E/G − j·a, k) / C(t·E/G, k)."""
    group = int(round(group))
    if group >= n_experts:
        return 1.0
    if not router_groups:
        return 1.0 - math.comb(n_experts - group, k) / math.comb(n_experts, k)
    size = n_experts // router_groups
    pool = groups_per_token * size
    m, per = (1, group) if group <= size else (group // size, size)
    miss = sum(math.comb(m, j) * math.comb(router_groups - m, groups_per_token - j)
               / math.comb(router_groups, groups_per_token) * math.comb(pool - j * per, k) / math.comb(pool, k)
               for j in range(0, min(m, groups_per_token) + 1))
    return 1.0 - miss


def token_dispatch_seconds(spec, gpu, tokens: float, bytes_per_element: float, ep: int, per_node: int) -> dict:
    """One dispatch (or combine) of a token-based dispatcher (DeepEP, HybridEP) for `tokens` tokens of this rank:
    each token once per GPU (and once per node across nodes) that holds one of its experts (module docstring).
    Returns as all_to_all_seconds."""
    if ep <= 1:
        return {"seconds": 0.0, "intra_bytes": 0.0, "inter_bytes": 0.0, "sent_bytes": 0.0}
    local = spec.n_experts / ep
    nodes = math.ceil(ep / per_node)
    routing = (spec.n_experts, spec.experts_per_token)
    limits = (getattr(spec, "expert_groups", 0), getattr(spec, "expert_groups_per_token", 0))
    gpu_hit = expert_group_hit(*routing, local, *limits)
    node_hit = expert_group_hit(*routing, local * per_node, *limits)
    token_bytes = tokens * spec.d_model * bytes_per_element
    remote_nodes = (nodes - 1) * node_hit
    forwarded = max(0.0, (ep - per_node) * gpu_hit - remote_nodes)
    return _exchange_seconds(gpu, token_bytes * ((per_node - 1) * gpu_hit + forwarded), token_bytes * remote_nodes)


def _exchange_seconds(gpu, intra_bytes: float, inter_bytes: float) -> dict:
    """Seconds of one exchange that sends `intra_bytes` over NVLink and `inter_bytes` over the NIC at once."""
    intra = link(gpu, "intra")
    seconds = intra.call_latency_seconds + intra.step_latency_seconds
    transfer = intra_bytes / intra.effective_bytes_per_s
    if inter_bytes > 0:
        inter = link(gpu, "inter")
        seconds = max(seconds, inter.call_latency_seconds + inter.step_latency_seconds)
        transfer = max(transfer, inter_bytes / inter.effective_bytes_per_s)
    return {"seconds": seconds + transfer, "intra_bytes": intra_bytes, "inter_bytes": inter_bytes,
            "sent_bytes": intra_bytes + inter_bytes}


def routed_expert_share(spec, seq_len: int) -> float:
    """Fraction of a token's forward FLOPs spent in routed experts (their GEMMs): what a busier expert stretches."""
    parts = forward_flops_breakdown(spec, seq_len)
    experts = sum(v for name, v in parts.items() if name in ("mlp_gate", "mlp_up", "mlp_down"))
    dense = (spec.n_layers - spec.n_moe_layers) * (3 if spec.gated_mlp else 2) * 2 * spec.d_model * (spec.dense_d_ff or 0)
    return max(0.0, experts - dense) / parts["total"]


def expert_parallel_per_micro_batch(spec, gpu, shard, run, *, moe_layers: float, compute_seconds: float) -> dict:
    """Seconds one micro-batch `shard` (account.time.shard.Shard: its tokens, tp, sp, cp and the matmul inputs'
    bytes) adds for expert parallelism in its pass through a pipeline stage with `moe_layers` MoE layers, under
    `run` (specs.run.Run: its layout's ep, etp and routing options, specs.run.Experts; its recomputation).

    `compute_seconds`: the stage's GEMM seconds for that micro-batch (forward, backward, recomputation), of which
    the routed experts' share stretches with the busiest load. Returns {"ep_comm" (exposed all-to-all seconds and
    the GPU's idle time after each dispatch's host synchronization), "syncs", "sync_seconds",
    "expert_wait" (extra compute seconds of the busiest GPU), "calls" (all-to-alls), "payload_bytes" (S),
    "bytes_sent" (one rank, all calls), "load" (busiest / mean), "dropped_fraction", "ranks_per_node", "link",
    "overlap_seconds" (compute lost beside the hidden all-to-alls, included in ep_comm)}.
    """
    lay, recompute = run.layout, run.levers.recompute
    ep, etp, ex = lay.ep, lay.etp, experts_defaults(lay.experts, lay.schedule)   # an unresolved run: as resolve() does
    imbalance, capacity_factor, overlap, dispatcher = ex.imbalance, ex.capacity_factor, ex.overlap, ex.dispatcher
    check_expert_options(imbalance, capacity_factor, overlap, dispatcher)
    load = imbalance if capacity_factor is None else min(imbalance, capacity_factor)
    dropped = 0.0 if capacity_factor is None else max(0.0, 1.0 - capacity_factor / imbalance)
    wait = (load - 1.0) * routed_expert_share(spec, shard.seq_len) * compute_seconds if spec.is_moe else 0.0
    if ep <= 1 or not spec.is_moe:
        return {"ep_comm": 0.0, "expert_wait": wait, "calls": 0, "syncs": 0, "sync_seconds": 0.0, "payload_bytes": 0.0, "bytes_sent": 0.0, "load": load,
                "dropped_fraction": dropped, "ranks_per_node": 1, "link": "none", "overlap_seconds": 0.0}
    tokens, bytes_per_element = shard.stream_tokens, shard.dtypes.a     # this rank's sequence-parallel tokens
    payload = dispatch_bytes(spec, tokens, bytes_per_element)
    per_node = ranks_per_node(ep, shard.tp if etp is None else etp, 1, gpu.gpus_per_node)
    if dispatcher == "alltoall":       # the busiest rank receives `load` × its share
        one = all_to_all_seconds(gpu, payload * load, ep, per_node)
    else:
        one = token_dispatch_seconds(spec, gpu, tokens * load, bytes_per_element, ep, per_node)
    calls = moe_layers * (CALLS_FORWARD + CALLS_BACKWARD + (CALLS_FORWARD if recompute == "full" else 0))
    syncs = moe_layers * SYNCS_FORWARD * (2 if recompute == "full" else 1)
    sync_seconds = syncs * sync_exposed_seconds(gpu)
    which = "intra" if per_node == ep else "inter"
    hidden = overlap * calls * one["seconds"]
    beside = hidden * (1.0 - 1.0 / overlap_factor(gpu, which, dispatcher)) if hidden > 0 else 0.0
    return {"ep_comm": (1.0 - overlap) * (calls * one["seconds"] + sync_seconds) + beside, "expert_wait": wait,
            "calls": calls, "syncs": syncs, "sync_seconds": (1.0 - overlap) * sync_seconds,
            "payload_bytes": payload, "bytes_sent": calls * one["sent_bytes"] / load, "load": load,
            "dropped_fraction": dropped, "ranks_per_node": per_node, "link": which, "overlap_seconds": beside}
