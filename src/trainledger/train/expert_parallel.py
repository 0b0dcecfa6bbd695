"""Expert parallelism in torch: the routed experts of each MoE layer split over the ranks of a process group, tokens
sent to their experts and back with all-to-alls (torch.distributed, autograd through both).

GShard (Lepikhin et al. 2020, arXiv:2006.16668, Sec. 2.2), Megatron-Core's MoEAlltoAllTokenDispatcher: every rank
routes its own tokens with the (replicated) router, sorts its N·k token copies by expert, exchanges the per-expert
counts (one small all-to-all), sends each copy to the rank that holds its expert (dispatch), runs its
n_experts/ep local experts on what it received, and sends the outputs back (combine), where they are weighted and
summed per token as models.mlp.MoE does. The same function as the unsplit MoE, so the losses equal one process's.

Gradients: the experts' gradients arrive through the all-to-alls' backward from every rank of the group's tokens,
each rank's loss being the mean over its own slice: they are the SUM over the group of the per-rank gradients,
whereas data parallelism averages the replicated parameters' gradients over the dp ranks. `expert_grad_hooks`
divides them by dp (and, with dp/ep groups holding copies of the same experts, `reduce_expert_grads` sums the
copies first), so that every parameter ends with the gradient of the global mean loss.

`force_balance`: copy p of the N·k slots goes to expert (offset + p) mod n_experts, the router's weights taken
at those experts (Megatron's `moe_router_force_load_balancing`, what the published MoE benchmarks run): the
traffic is then exactly the balanced prediction of account.time.expert_parallel.
"""

from __future__ import annotations

import warnings

import torch
import torch.distributed as dist
from einops import rearrange
from torch import Tensor, nn
from torch.distributed.nn.functional import all_to_all_single

# the autograd all-to-all of torch.distributed.nn dispatches c10d's alltoall_base_, which train/comm_count.py counts;
# its suggested replacement (functional collectives) would not pass through that op
warnings.filterwarnings("ignore", message="torch.distributed.nn.functional.all_to_all_single is deprecated",
                        category=FutureWarning)

from trainledger.errors import TrainledgerError
from trainledger.models.mlp import with_shared_expert


def check_expert_parallel(spec, ep: int, dp: int, flag: str = "--ep") -> None:
    """One-line errors: ep must divide the experts (a MoE model) and the data-parallel ranks."""
    from trainledger.account.counting.experts import check_ep
    check_ep(spec, ep, dp)


class ExpertParallelMoE(nn.Module):
    """A models.mlp.MoE whose experts are split over `group` (this rank keeps experts [r·E/ep, (r+1)·E/ep))."""

    def __init__(self, moe: nn.Module, group, force_balance: bool = False):
        super().__init__()
        self.group, self.ep, self.rank = group, dist.get_world_size(group), dist.get_rank(group)
        self.n_experts = len(moe.experts)
        if self.n_experts % self.ep:
            raise TrainledgerError(f"--ep {self.ep} must divide the {self.n_experts} experts")
        self.local = self.n_experts // self.ep
        self.top_k, self.renormalize, self.force_balance = moe.top_k, moe.renormalize, force_balance
        self.router = moe.router
        first = self.rank * self.local
        # keyed by the global expert index, so parameter names (and checkpoints) are those of the unsplit model
        self.experts = nn.ModuleDict({str(e): moe.experts[e] for e in range(first, first + self.local)})
        self.shared_expert, self.shared_expert_gate = moe.shared_expert, moe.shared_expert_gate
        self.offset = 0           # force_balance: where the round-robin starts (the rank's first global token slot)

    def route(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(weights, expert index), (tokens, top_k): as models.mlp.MoE.route, or round-robin with force_balance."""
        probs = torch.softmax(self.router(x).float(), dim=-1)
        if self.force_balance:
            slots = torch.arange(x.shape[0] * self.top_k, device=x.device) + self.offset
            index = (slots % self.n_experts).view(-1, self.top_k)
            weights = probs.gather(1, index)
        else:
            weights, index = torch.topk(probs, self.top_k, dim=-1)
        if self.renormalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), index

    def forward(self, x: Tensor) -> Tensor:
        batch = x.shape[0]
        flat = rearrange(x, "b t d -> (b t) d")
        weights, index = self.route(flat)
        slots = index.reshape(-1)                                   # the N·k copies' experts
        order = torch.argsort(slots, stable=True)                   # copies sorted by expert (so by rank)
        per_expert = torch.bincount(slots, minlength=self.n_experts)
        received_counts = torch.empty_like(per_expert)
        dist.all_to_all_single(received_counts, per_expert, group=self.group)   # [source rank, local expert]
        send = per_expert.view(self.ep, self.local).sum(1).tolist()
        counts = received_counts.view(self.ep, self.local)
        recv = counts.sum(1).tolist()
        dispatched = flat.index_select(0, order // self.top_k)
        arrived = all_to_all_single(flat.new_empty(sum(recv), flat.shape[1]), dispatched, recv, send, group=self.group)
        chunks = arrived.split(counts.flatten().tolist())           # (source 0: expert 0, 1, ...), (source 1: ...)
        outputs = [None] * len(chunks)
        for e, expert in enumerate(self.experts.values()):
            pieces = [chunks[s * self.local + e] for s in range(self.ep)]
            if not sum(p.shape[0] for p in pieces):   # no tokens: no gradient, as models.mlp.MoE skips the expert
                outputs[e::self.local] = pieces                # (an optimizer then leaves it alone: no weight decay)
                continue
            y = expert(torch.cat(pieces))
            for s, part in enumerate(y.split([p.shape[0] for p in pieces])):
                outputs[s * self.local + e] = part
        back = torch.cat(outputs) if outputs else arrived
        returned = all_to_all_single(flat.new_empty(sum(send), flat.shape[1]), back, send, recv, group=self.group)
        copies = returned.index_select(0, torch.argsort(order)).view(-1, self.top_k, flat.shape[1])
        out = (copies * weights[..., None]).sum(1)
        out = with_shared_expert(out, flat, self.shared_expert, self.shared_expert_gate)
        return rearrange(out, "(b t) d -> b t d", b=batch)


def shard_experts(model: nn.Module, group, force_balance: bool = False) -> list[str]:
    """Replace every models.mlp.MoE of `model` by an ExpertParallelMoE over `group`; the names of the expert
    parameters this rank keeps (for data parallelism to leave alone, `expert_grad_hooks` to scale)."""
    from trainledger.models.mlp import MoE
    names = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, MoE):
                setattr(module, child_name, ExpertParallelMoE(child, group, force_balance))
                prefix = f"{name}.{child_name}" if name else child_name
                names += [f"{prefix}.experts.{n}" for n, _ in getattr(module, child_name).experts.named_parameters()]
    return names


def expert_grad_hooks(model: nn.Module, names: list[str], dp: int, copies_group=None) -> None:
    """Scale the expert parameters' gradients by 1/dp as they are computed. Each is marked with
    `data_parallel_copies` (for train.distributed.clip_grad_norm's global norm) and, when dp/ep ranks hold copies of
    it, with the group `reduce_expert_copies` sums them over once per step (not in the hook: the order in which
    a backward reaches the experts depends on the routing, so per-tensor all-reduces could pair unlike tensors)."""
    params = dict(model.named_parameters())
    copies = dist.get_world_size(copies_group) if copies_group is not None else 1
    for name in names:
        params[name].register_hook(lambda grad: grad / dp)
        params[name].data_parallel_copies = copies
        params[name].expert_copies_group = copies_group if copies > 1 else None


def reduce_expert_copies(model: nn.Module) -> None:
    """Sum the gradients of the experts over the ranks that hold copies of them: one all-reduce of all of them, in
    the order of model.named_parameters() (the same on every rank). Call after the step's last backward."""
    held = [p for _, p in sorted(model.named_parameters()) if getattr(p, "expert_copies_group", None) is not None]
    if not held:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in held]
    # one presence flag per tensor rides along: an expert no copy ran on keeps no gradient (as in one process)
    present = torch.tensor([p.grad is not None for p in held], dtype=grads[0].dtype, device=grads[0].device)
    flat = torch.cat([g.reshape(-1) for g in grads] + [present])
    dist.all_reduce(flat, group=held[0].expert_copies_group)
    pieces = flat.split([g.numel() for g in grads] + [len(held)])
    for p, piece, seen in zip(held, pieces, pieces[-1].tolist()):
        p.grad = piece.view_as(p).clone() if seen else None


_GROUPS: list = []          # the process groups setup_expert_parallel made (destroy_expert_groups closes them)


def destroy_expert_groups() -> None:
    """Close the expert-parallel process groups before the default one: modules still hold them, and a gloo group
    left to the interpreter's exit aborts the process (std::terminate on its worker threads)."""
    while _GROUPS:
        group = _GROUPS.pop()
        if group is not None and dist.is_initialized():
            dist.destroy_process_group(group)


def setup_expert_parallel(model: nn.Module, world, ep: int, force_balance: bool = False) -> list[str]:
    """Split the experts of `model` over groups of `ep` consecutive data-parallel ranks (--ep under torchrun, without
    --tp or --pp: the data-parallel rank is the global rank); the ranks at the same place in their group hold the
    same experts and sum their gradients. Returns the expert parameter names (data parallelism leaves them alone)."""
    check_expert_parallel(model.spec, ep, world.dp_size)
    dp = world.dp_size
    mine = copies = None
    for start in range(0, dp, ep):                     # every rank creates every group, in the same order
        group = dist.new_group(list(range(start, start + ep)))
        _GROUPS.append(group)
        if start <= world.rank < start + ep:
            mine = group
    for offset in range(ep):
        group = dist.new_group(list(range(offset, dp, ep)))
        _GROUPS.append(group)
        if world.rank % ep == offset:
            copies = group
    names = shard_experts(model, mine, force_balance)
    expert_grad_hooks(model, names, dp, copies if dp > ep else None)
    return names
