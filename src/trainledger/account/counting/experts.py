"""Expert parallelism's bookkeeping: which parameters are routed experts, and whether an --ep fits the model.

Expert parallelism (GShard, Lepikhin et al. 2020, arXiv:2006.16668; Megatron-Core MoE, `expert_model_parallel_size`)
splits the routed experts of every MoE layer over `ep` GPUs of the data-parallel group: each holds n_experts/ep
of them whole (and, as all our tensor-parallel placements do, each expert's d_ff split over tp), while attention,
norms, the router, dense layers and shared experts stay replicated over those ep GPUs. Pure, no torch.
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


def check_ep(spec, ep, dp: int | None = None) -> int:
    """`ep` if it is a valid expert-parallel size for `spec` over `dp` data-parallel ranks; else a one-line error.

    ep must be a positive integer; above 1 it needs a mixture-of-experts model whose n_experts it divides (each
    GPU holds the same number of whole experts), and it must divide dp (the expert-parallel group is taken from
    the data-parallel ranks; the gradients of an expert are reduced over the dp/ep ranks that hold it).
    """
    if isinstance(ep, bool) or not isinstance(ep, int) or ep <= 0:
        raise TrainledgerError(f"--ep must be a positive integer, got {ep!r}")
    if ep == 1:
        return ep
    if not isinstance(spec, TransformerSpec) or not spec.is_moe:
        what = f"'{spec.name}' has no experts" if spec is not None else "--params gives no experts"
        raise TrainledgerError(f"--ep {ep} needs a mixture-of-experts model; {what}")
    if spec.n_experts % ep:
        raise TrainledgerError(f"--ep {ep} must divide the {spec.n_experts} experts of '{spec.name}' "
                               f"(each GPU holds n_experts/ep whole experts)")
    if dp is not None and dp % ep:
        raise TrainledgerError(f"--ep {ep} must divide the data-parallel size dp={dp} (the expert-parallel group is "
                               f"taken from the data-parallel ranks)")
    return ep
