"""Expert parallelism's bookkeeping: which parameters are routed experts, and whether an --ep (and --etp) fits.

Expert parallelism (GShard, Lepikhin et al. 2020, arXiv:2006.16668; Megatron-Core MoE, `expert_model_parallel_size`)
splits the routed experts of every MoE layer over `ep` GPUs: each holds n_experts/ep of them, each expert's d_ff
split over `etp` GPUs (expert tensor parallelism, `expert_tensor_parallel_size`; default the attention's tp), while
attention, norms, the router, dense layers and shared experts keep the attention's layout.

MoE Parallel Folding (Liu et al. 2025, arXiv:2504.14960; the Megatron-Core MoE report, arXiv:2603.07685 Sec. 3.3):
the MoE layers form their own grid ETP × EP × EDP × PP over the same GPUs as attention's TP × CP × DP × PP, with
ETP·EP·EDP = TP·CP·DP, so EP may exceed DP ("EP can now exceed DP by folding across TP×CP groups", Sec. 3.3.3) and
ETP may differ from TP (typically 1). Megatron-Core builds the expert grid with its own RankGenerator (tp=ETP,
ep=EP, dp=EDP, cp=1, order "tp-cp-ep-dp-pp": megatron/core/parallel_state.py, initialize_model_parallel) and refuses
a world size that ETP·EP·PP does not divide ("decoder world_size ... is not divisible by
expert_tensor_model_pipeline_parallel size"). An expert's gradients are reduced, and its optimizer states sharded by
the distributed optimizer, over the EDP ranks that hold the same experts ("optimizer states are sharded among
replicas of the same expert (via EDP)", arXiv:2603.07685 Sec. 3.3.2). Pure, no torch.
"""

from __future__ import annotations

from trainledger.specs.run_checks import check_ep  # noqa: F401 (moved to specs: the run's checks)

from trainledger.account.counting.params import mlp_params
from trainledger.specs.model import TransformerSpec


def routed_expert_params(spec) -> int:
    """Parameters of all routed experts of all MoE layers (a count): n_moe_layers · n_experts · one expert's MLP."""
    if not isinstance(spec, TransformerSpec) or not spec.is_moe:
        return 0
    return spec.n_moe_layers * spec.n_experts * mlp_params(spec)


def expert_data_parallel(tp: int, cp: int, dp: int, ep: int, etp: int | None = None) -> int:
    """EDP: the ranks holding the same experts, tp·cp·dp / (etp·ep) (the expert grid folded over attention's)."""
    etp = tp if etp is None else etp
    return max(1, tp * cp * dp // (etp * ep))


def expert_params_split(placement: dict, ep: int, etp: int | None, tp: int) -> tuple[float, float]:
    """(dense, expert) parameters of this GPU (`placement`: account.counting.placement.params_per_gpu) whose
    gradients and states follow attention's DP and the experts' EDP: (all, 0) without expert parallelism (the
    experts then follow DP as any weight)."""
    if ep <= 1 and (etp is None or etp == tp):
        return placement["n_params_per_gpu"], 0.0
    experts = placement["expert_params_per_gpu"]
    return placement["n_params_per_gpu"] - experts, experts


def zero_shard_params(placement: dict, *, tp: int, cp: int, dp: int, ep: int, etp: int | None) -> float:
    """Parameters of this GPU's ZeRO shard: dense/dp plus experts/EDP (an expert's states are sharded over the
    ranks holding the same experts)."""
    dense, experts = expert_params_split(placement, ep, etp, tp)
    return dense / dp + experts / expert_data_parallel(tp, cp, dp, ep, etp)


def expert_token_share(tp: int, sp: bool, etp: int | None = None) -> float:
    """Tokens an expert-parallel rank's experts run, as a share of its micro-batch's n = b·s/cp: with sequence
    parallelism each rank routes its n/tp tokens and the expert-TP group gathers them over etp ranks (etp/tp);
    without it every TP rank holds all n (and etp equals tp: check_ep)."""
    etp = tp if etp is None else etp
    return etp / tp if sp else 1.0


