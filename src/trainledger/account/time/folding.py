"""MoE Parallel Folding in a training step: the expert grid's own groups (ETP × EP × EDP × PP). Pure, no torch.

Megatron-Core lays the MoE layers over their own grid on the same GPUs as attention's TP × CP × DP × PP
(account.counting.experts; Liu et al. 2025, arXiv:2504.14960; arXiv:2603.07685 Sec. 3.3): ranks ordered ETP
fastest, then EP, then EDP (megatron/core/parallel_state.py, the expert RankGenerator with cp=1 and the order
"tp-cp-ep-dp-pp"). So
- an expert-parallel group's members are etp ranks apart: min(ep, gpus_per_node // etp) of them share a node
  (account.time.expert_parallel.ranks_per_node with stride etp);
- the experts' gradients are reduced over EDP = tp·cp·dp/(etp·ep) ranks, etp·ep apart, not over attention's DP
  (Megatron's DDP keeps the expert parameters in their own buffers, reduced over the expert data-parallel group;
  "confines gradient synchronization to minimal groups", arXiv:2603.07685 Sec. 3.3.2); with EDP 1 nothing is
  reduced for them at all;
- ZeRO-1 (the distributed optimizer) shards an expert's states over those EDP ranks, the dense states over DP;
- with etp 1 a MoE layer's experts are not tensor-parallel: its MLP has no TP collectives (each rank dispatches
  its own sequence-parallel tokens; only attention keeps its pair). With 1 < etp < tp the MLP's pair is still
  counted over tp (an approximation: Megatron gathers the routed tokens over the etp group).
"""

from __future__ import annotations

from dataclasses import replace

from trainledger.account.counting import experts as experts_mod
from trainledger.account.counting.experts import expert_data_parallel
from trainledger.account.time import comm as comm_mod


def zero_shard_params(placement: dict, *, tp: int, cp: int, dp: int, ep: int, etp: int | None, zero: int) -> float:
    """Parameters whose optimizer states (and fp32 master copies) this GPU keeps: its ZeRO shard (dense/dp plus
    experts/EDP: account.counting.experts.zero_shard_params) under ZeRO ≥ 1, all of them without ZeRO."""
    if zero < 1:
        return placement["n_params_per_gpu"]
    return experts_mod.zero_shard_params(placement, tp=tp, cp=cp, dp=dp, ep=ep, etp=etp)


def expert_dp_collectives(recipe, experts: float, run, *, micro_batches: int, style: str, gpus_per_node: int) -> list:
    """The experts' data-parallel collectives (account.time.comm._dp_collectives of `experts` parameters in
    precision `recipe`) over the EDP group of `run`'s layout (tp, cp, dp, ep, etp, zero; its kernels' dp_overlap),
    named "expert_..."; none when EDP is 1 or there are no expert parameters."""
    lay = run.layout
    tp, cp, dp, ep, etp, zero = lay.tp, lay.cp, lay.dp, lay.ep, lay.etp, lay.zero
    edp = expert_data_parallel(tp, cp, dp, ep, etp)
    if edp <= 1 or experts <= 0:
        return []
    stride = (tp if etp is None else etp) * ep
    link = "intra" if stride * edp <= gpus_per_node else "inter"
    per_node = max(1, min(edp, gpus_per_node // stride)) if stride <= gpus_per_node else 1
    return [replace(c, name=f"expert_{c.name}", ranks_per_node=per_node)
            for c in comm_mod._dp_collectives(recipe, experts, edp, zero, micro_batches, style, link,
                                              run.kernels.dp_overlap)]


def mlp_tensor_parallel(spec, layer: int, tp: int, etp: int | None) -> bool:
    """Whether layer `layer`'s MLP block carries TP collectives: not a MoE layer whose experts have etp 1."""
    return not (tp > 1 and etp == 1 and spec.is_moe_layer(layer))
