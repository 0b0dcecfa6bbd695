"""Pipeline parallelism of trainledger's Transformer with torch.distributed.pipelining (1F1B schedule).

Stage s of P holds a contiguous run of blocks; the first also the embeddings, the last the final norm and
the LM head. The split points minimize the most expensive stage, with the head's and a block's forward FLOPs
(every block costed as the mean block) from `account.counting.flops.forward_flops_breakdown` (the layer accounting).

Every stage keeps the whole `Transformer` object with the blocks of other stages replaced by nn.Identity
(a ModuleList keeps its indices), so parameter names are those of the unsplit model and a DCP checkpoint
can be read back under another layout. A tied embedding (GPT-2, tiny) lives on the first stage (lookup)
and the last (head): the two copies start equal and their gradients are summed by an all-reduce between
those two stages after each backward (as Megatron-LM does), so they stay equal.

The schedule (Narayanan et al. 2021, arXiv:2104.04473, Sec. 2.2: one forward, one backward in the steady
state) splits each rank's batch into --grad-accum micro-batches and averages their gradients (scale_grads).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from trainledger.account.counting.flops import forward_flops_breakdown
from trainledger.errors import TrainledgerError
from trainledger.models.transformer import run_block
from trainledger.tensors import local


def stage_layers(spec, seq_len: int, stages: int) -> list[range]:
    """The blocks of each stage: contiguous runs minimizing the largest stage's forward FLOPs per token."""
    if spec.n_layers < stages:
        raise TrainledgerError(f"--pp {stages}: model '{spec.name}' has only {spec.n_layers} layers")
    flops = forward_flops_breakdown(spec, seq_len)
    head = flops["lm_head"]
    layer = (flops["total"] - head) / spec.n_layers
    costs = [layer] * spec.n_layers
    costs[-1] += head          # the head runs on the stage of the last block

    def fits(limit: float) -> list[range] | None:
        out, start, total = [], 0, 0.0
        for i, cost in enumerate(costs):
            if total + cost > limit and i > start:
                out.append(range(start, i))
                start, total = i, 0.0
            total += cost
        out.append(range(start, len(costs)))
        return out if len(out) <= stages else None

    lo, hi = max(costs), sum(costs)
    for _ in range(60):                 # bisection on the largest stage cost
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    split = fits(hi)
    while len(split) < stages:          # a stage per rank: split the longest run
        longest = max(range(len(split)), key=lambda k: len(split[k]))
        run = split[longest]
        half = run.start + len(run) // 2
        split[longest:longest + 1] = [range(run.start, half), range(half, run.stop)]
    return split


class Stage(nn.Module):
    """One pipeline stage of a Transformer: token ids (first) or hidden states in, hidden states or logits out."""

    def __init__(self, model: nn.Module, layers: range, is_first: bool, is_last: bool):
        super().__init__()
        self.model = model
        self.layers, self.is_first, self.is_last = layers, is_first, is_last
        for i in range(len(model.blocks)):
            if i not in layers:
                model.blocks[i] = nn.Identity()
        if not is_first:
            model.pos_embeddings = None
            if not (is_last and model.spec.tied_embeddings):
                model.tok_embeddings = None
        if not is_last:
            model.norm = nn.Identity()
            model.lm_head = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m, spec = self.model, self.model.spec
        if self.is_first:
            seq_len = x.shape[1]
            h = m.tok_embeddings(x)
            if spec.scale_embeddings:
                h = h * torch.tensor(spec.d_model ** 0.5, dtype=h.dtype, device="cpu").item()
            if m.pos_embeddings is not None:
                h = h + m.pos_embeddings(torch.arange(seq_len, device=x.device))
        else:
            h, seq_len = x, x.shape[1]
        rope, masks = m._layer_inputs(seq_len, h.device, h.dtype)
        full = m.recomputes_blocks()          # --recompute full: one checkpoint per block, as Transformer.forward
        for i in self.layers:
            cos, sin = rope.get(spec.layer_rope_theta(i), (None, None))
            h = run_block(m.blocks[i], h, cos, sin, masks.get(spec.is_sliding(i) and seq_len > spec.sliding_window),
                          full)
        if not self.is_last:
            return h
        logits = F.linear(m.norm(h), m.output_weight(), m.output_bias())
        if spec.final_softcap is not None:
            logits = torch.tanh(logits / spec.final_softcap) * spec.final_softcap
        return logits


class Pipeline(nn.Module):
    """This rank's stage with its 1F1B schedule. `.model` is the (partial) Transformer whose names checkpoints use."""

    def __init__(self, model: nn.Module, world, micro_batches: int, seq_len: int, parallel: str = "none"):
        super().__init__()
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B
        pp, rank = world.pp, world.pp_rank
        if micro_batches < pp:
            raise TrainledgerError(f"--pp {pp} needs at least {pp} micro-batches per step for the 1F1B schedule; "
                                   f"pass --grad-accum {pp} or more")
        layers = stage_layers(model.spec, seq_len, pp)
        self.stage = Stage(model, layers[rank], rank == 0, rank == pp - 1)
        self.model = model
        self.world, self.micro_batches = world, micro_batches
        pp_group = world.mesh["pp"].get_group()
        self.pp_group = pp_group
        self.tied_group = self._tied_group(world) if model.spec.tied_embeddings else None
        pipe_stage = PipelineStage(self._data_parallel(parallel), rank, pp, world.device, group=pp_group)
        self.schedule = Schedule1F1B(pipe_stage, micro_batches, loss_fn=type(model).loss)
        if self.tied_group is not None and model.tok_embeddings is not None:
            model.tok_embeddings.weight.pipeline_copies = 2     # the gradient norm counts it once

    def _data_parallel(self, parallel: str) -> nn.Module:
        """The stage wrapped for data parallelism over the mesh's "dp" dimension: FSDP2 per block, then the stage
        (PipelineStage syncs gradients on the last micro-batch only). DDP is refused by check_layout."""
        if self.world.dp_size == 1 or parallel == "none":
            return self.stage
        dp_mesh = self.world.mesh["dp"]
        from torch.distributed.fsdp import fully_shard
        for i in self.stage.layers:
            fully_shard(self.model.blocks[i], mesh=dp_mesh)
        return fully_shard(self.stage, mesh=dp_mesh)

    @staticmethod
    def _tied_group(world):
        """The process group of the first and last stage of this rank's replica (all ranks create every group)."""
        ranks = world.mesh.mesh                     # shape (pp, dp, tp)
        mine = None
        for d in range(ranks.shape[1]):
            for t in range(ranks.shape[2]):
                pair = sorted({int(ranks[0, d, t]), int(ranks[-1, d, t])})
                group = dist.new_group(pair)
                if world.rank in pair:
                    mine = group
        return mine

    def train_micro_batches(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Forward and backward of the rank's batch through the pipeline; the sum of the micro-batch losses (every stage)."""
        losses: list = []
        rank, last = self.world.pp_rank, self.world.pp - 1
        args = (x,) if rank == 0 else ()
        self.schedule.step(*args, target=y if rank == last else None, losses=losses if rank == last else None)
        if self.tied_group is not None and self.model.tok_embeddings is not None:
            grad = self.model.tok_embeddings.weight.grad      # under FSDP: this dp rank's shard, the same on both
            dist.all_reduce(local(grad), group=self.tied_group)
        return self._share_loss(losses)

    @torch.no_grad()
    def eval_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Mean loss of the rank's batch, forward only (every stage)."""
        losses: list = []
        rank, last = self.world.pp_rank, self.world.pp - 1
        args = (x,) if rank == 0 else ()
        self.schedule.eval(*args, target=y if rank == last else None, losses=losses if rank == last else None)
        return self._share_loss(losses) / self.micro_batches

    def _share_loss(self, losses: list) -> torch.Tensor:
        total = torch.zeros((), device=self.world.device)
        if losses:
            total += torch.stack([loss.detach().float() for loss in losses]).sum()
        dist.all_reduce(total, group=self.pp_group)       # only the last stage holds the losses
        return total
