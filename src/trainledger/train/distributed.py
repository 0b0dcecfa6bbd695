"""Data parallelism plumbing: the process group from torchrun's environment, DDP or FSDP2 wrapping, reductions.

Under `torchrun --nproc_per_node N` (or `python -m torch.distributed.run`) each process reads RANK,
WORLD_SIZE and LOCAL_RANK from its environment; the backend is gloo on CPU and nccl on CUDA.
Without those variables everything here degrades to one process and no communication.

Ranks never draw their own batches: every rank draws the same GLOBAL batch from the shared, identically
seeded generator (what rank 0 would broadcast) and keeps its own contiguous slice, so the losses do not
depend on the number of ranks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from trainledger.errors import TrainledgerError


@dataclass(frozen=True)
class World:
    """Where this process sits: rank, world size, local rank and the torch device it computes on."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def pick_device(requested: str | None, local_rank: int = 0) -> torch.device:
    """The torch device for `--device` (cpu, cuda, cuda:N); default cuda:<local rank> when CUDA is available."""
    if requested is None:
        return torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise TrainledgerError(f"unknown --device {requested!r}; use cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise TrainledgerError(f"--device {requested}: CUDA is not available on this machine; use --device cpu")
        if device.index is None:
            device = torch.device(f"cuda:{local_rank}")
        if device.index >= torch.cuda.device_count():
            raise TrainledgerError(f"--device {requested}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise TrainledgerError(f"--device {requested!r} is not supported; use cpu, cuda or cuda:N")
    return device


def setup(parallel: str, requested_device: str | None) -> World:
    """This process's World; initializes the process group when launched by torchrun with WORLD_SIZE > 1."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(requested_device, local_rank)
    if world_size > 1 and parallel == "none":
        raise TrainledgerError(f"launched with {world_size} processes but --parallel is none; pass --parallel ddp or fsdp")
    if world_size == 1:
        return World(0, 1, 0, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return World(rank, world_size, local_rank, device)


def wrap(model: nn.Module, parallel: str, world: World) -> nn.Module:
    """The model wrapped for data parallelism: DDP (replicated) or FSDP2 `fully_shard` per block, then the root."""
    if not world.distributed:
        return model
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        ids = [world.device.index] if world.device.type == "cuda" else None
        return DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.fsdp import fully_shard
    for block in _blocks(model):
        fully_shard(block)
    fully_shard(model)
    return model


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated layers to shard one by one: the children of the first ModuleList found."""
    for module in model.modules():
        if isinstance(module, nn.ModuleList):
            return list(module)
    return []


def unwrap(model: nn.Module) -> nn.Module:
    """The bare module inside DDP or torch.compile."""
    model = getattr(model, "_orig_mod", model)
    return getattr(model, "module", model) if type(model).__name__ == "DistributedDataParallel" else model


def set_grad_sync(model: nn.Module, enabled: bool) -> None:
    """Turn gradient all-reduce (DDP) / reduce-scatter (FSDP2) on or off for the next backward (accumulation)."""
    inner = getattr(model, "_orig_mod", model)
    if hasattr(inner, "require_backward_grad_sync"):      # DDP: what no_sync() toggles
        inner.require_backward_grad_sync = enabled
    elif hasattr(inner, "set_requires_gradient_sync"):    # FSDP2 module
        inner.set_requires_gradient_sync(enabled)


def mean_across(value: torch.Tensor, world: World) -> torch.Tensor:
    """The mean of a tensor over all ranks (itself with one process)."""
    if not world.distributed:
        return value
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / world.world_size


def any_across(flag: bool, world: World) -> bool:
    """True when `flag` is true on any rank (used so that a signal seen by one rank stops all of them together)."""
    if not world.distributed:
        return flag
    tensor = torch.tensor([1.0 if flag else 0.0], device=world.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return bool(tensor.item())


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def broadcast_object(obj, world: World):
    """`obj` from rank 0 on every rank."""
    if not world.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def teardown(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()
