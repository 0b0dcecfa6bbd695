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

from trainledger.account.counting.params import mlp_params
from trainledger.errors import TrainledgerError
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


def check_ep(spec, ep, dp: int | None = None, tp: int = 1, cp: int = 1, etp=None, sp: bool | None = None,
             framework: str | None = None) -> int:
    """`ep` if it is a valid expert-parallel size for `spec` on a layout tp·cp·dp (and `etp` a valid expert
    tensor-parallel size, default tp); else a one-line error naming the flag.

    ep must be a positive integer; above 1 it needs a mixture-of-experts model whose n_experts it divides. Folded
    (module docstring): etp·ep must divide tp·cp·dp; etp must divide the experts' d_ff; an etp other than tp needs
    sequence parallelism when tp > 1 (Megatron-LM arguments.py: "When using MoE and tensor parallelism, sequence
    parallelism must be used") and Megatron-Core (`framework` "megatron"; the other step models give experts the
    attention's tp). `dp` None: no check against the layout (the count alone).
    """
    if isinstance(ep, bool) or not isinstance(ep, int) or ep <= 0:
        raise TrainledgerError(f"--ep must be a positive integer, got {ep!r}")
    if etp is not None and (isinstance(etp, bool) or not isinstance(etp, int) or etp <= 0):
        raise TrainledgerError(f"--etp must be a positive integer, got {etp!r}")
    moe = isinstance(spec, TransformerSpec) and spec.is_moe
    if ep > 1 or (etp is not None and etp != tp):
        if not moe:
            what = f"'{spec.name}' has no experts" if spec is not None else "--params gives no experts"
            flag = f"--ep {ep}" if ep > 1 else f"--etp {etp}"
            raise TrainledgerError(f"{flag} needs a mixture-of-experts model; {what}")
    if ep > 1 and spec.n_experts % ep:
        raise TrainledgerError(f"--ep {ep} must divide the {spec.n_experts} experts of '{spec.name}' "
                               f"(each GPU holds n_experts/ep whole experts)")
    if etp is not None and etp != tp:
        if framework is not None and framework != "megatron":
            raise TrainledgerError(f"--etp {etp} differs from --tp {tp}: expert tensor parallelism of its own is "
                                   f"modelled for --framework megatron only (Megatron-Core's expert grid)")
        if spec.d_ff % etp:
            raise TrainledgerError(f"--etp {etp} must divide the experts' d_ff={spec.d_ff} of '{spec.name}'")
        if tp > 1 and sp is False:
            raise TrainledgerError(f"--etp {etp} with --tp {tp} needs sequence parallelism (--sp): Megatron-LM "
                                   f"requires it for MoE with tensor parallelism")
    e = tp if etp is None else etp
    if dp is not None and (tp * cp * dp) % (e * ep):
        raise TrainledgerError(f"--ep {ep} × --etp {e} must divide tp·cp·dp = {tp}·{cp}·{dp} = {tp * cp * dp} "
                               f"(Megatron-Core folds the expert grid ETP × EP × EDP over attention's TP × CP × DP)")
    return ep
