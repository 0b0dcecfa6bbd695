"""Parallelism plumbing: the process group and device mesh from torchrun's environment, DDP / FSDP2 / TP / PP, reductions.

Under `torchrun --nproc_per_node N` (or `python -m torch.distributed.run`) each process reads RANK,
WORLD_SIZE and LOCAL_RANK from its environment; the backend is gloo on CPU and nccl on CUDA.
Without those variables everything here degrades to one process and no communication.

Ranks never draw their own batches: every rank draws the same GLOBAL batch from the shared, identically
seeded generator (what rank 0 would broadcast) and keeps its own contiguous slice, so the losses do not
depend on the number of ranks. Under tensor or pipeline parallelism (--tp, --pp) the W = dp × pp × tp ranks
form a DeviceMesh ("pp", "dp", "tp"); the ranks of one data-parallel replica (its TP and PP ranks) take the
same slice, `dp_rank` of `dp_size`.
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from trainledger.errors import TrainledgerError
from trainledger.tensors import local


@dataclass(frozen=True)
class World:
    """Where this process sits: rank, world size, local rank and the torch device it computes on."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    tp: int = 1                 # tensor-parallel ranks (--tp)
    pp: int = 1                 # pipeline stages (--pp)
    mesh: object = field(default=None, compare=False)    # DeviceMesh ("pp", "dp", "tp") when tp or pp > 1

    @property
    def dp_size(self) -> int:
        """Data-parallel replicas: the ranks that take different slices of the global batch."""
        return self.world_size // (self.tp * self.pp)

    @property
    def dp_rank(self) -> int:
        return self.mesh["dp"].get_local_rank() if self.mesh is not None else self.rank

    @property
    def pp_rank(self) -> int:
        return self.mesh["pp"].get_local_rank() if self.mesh is not None else 0

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


def setup(parallel: str, requested_device: str | None, tp: int = 1, pp: int = 1) -> World:
    """This process's World; initializes the process group when launched by torchrun with WORLD_SIZE > 1.

    With --tp or --pp above 1 it also builds the DeviceMesh (pp, dp, tp): TP ranks adjacent (inside a node),
    then data parallel, then pipeline stages (Megatron-LM's and torchtitan's order).
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(requested_device, local_rank)
    check_layout(parallel, world_size, tp, pp)
    if world_size == 1:
        return World(0, 1, 0, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        _started_group()
    mesh = None
    if tp > 1 or pp > 1:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(device.type, (pp, world_size // (tp * pp), tp), mesh_dim_names=("pp", "dp", "tp"))
    return World(rank, world_size, local_rank, device, tp, pp, mesh)


def check_layout(parallel: str, world_size: int, tp: int, pp: int) -> None:
    """One-line errors for a layout that does not fit the processes torchrun started."""
    if world_size == 1 and (tp > 1 or pp > 1):
        raise TrainledgerError(f"--tp {tp} / --pp {pp} need {tp * pp} processes: launch with "
                               f"torchrun --nproc_per_node {tp * pp} -m trainledger.cli.main train ...")
    if world_size % (tp * pp):
        raise TrainledgerError(f"--tp {tp} × --pp {pp} = {tp * pp} does not divide the {world_size} processes "
                               "torchrun started (--nproc_per_node × nodes)")
    dp = world_size // (tp * pp)
    if world_size > 1 and dp > 1 and parallel == "none":
        raise TrainledgerError(f"launched with {world_size} processes, --tp {tp} × --pp {pp} leaves {dp} data-parallel "
                               "replicas but --parallel is none; pass --parallel ddp or fsdp")
    if pp > 1 and dp > 1 and parallel == "ddp":
        raise TrainledgerError(f"--pp {pp} with {dp} data-parallel replicas needs --parallel fsdp (DDP's bucket "
                               "rebuild fails under a pipeline schedule's micro-batches)")
    if pp > 1 and tp > 1:
        raise TrainledgerError("--pp with --tp is not supported yet; use one of them (each composes with --parallel)")
    if tp > 1 and dp > 1 and parallel == "ddp":
        raise TrainledgerError(f"--tp {tp} with {dp} data-parallel replicas needs --parallel fsdp (DDP does not take "
                               "DTensor parameters)")


def wrap(model: nn.Module, parallel: str, world: World, sp: bool = False, micro_batches: int = 1,
         seq_len: int = 1, ep: int = 1, force_balance: bool = False) -> nn.Module:
    """The model split into pipeline stages (--pp, train/pipeline.py) or for tensor parallelism (--tp,
    train/tensor_parallel.py), its experts over --ep ranks (train/expert_parallel.py), and wrapped for data
    parallelism: DDP (replicated) or FSDP2 `fully_shard` per block, then the root, over the mesh's "dp" dimension;
    both leave the experts to expert parallelism."""
    if ep > 1:
        from trainledger.account.counting.experts import check_ep
        check_ep(model.spec, ep, world.dp_size if world.distributed else None)
        if not world.distributed:
            raise TrainledgerError(f"--ep {ep} needs {ep} processes or more: launch with torchrun --nproc_per_node {ep} "
                                   "-m trainledger.cli.main train ...")
        if world.tp > 1 or world.pp > 1:
            raise TrainledgerError("--ep with --tp or --pp is not supported yet; use --ep with --parallel ddp or fsdp")
    if not world.distributed:
        return model
    experts = []
    if ep > 1:
        from trainledger.train.expert_parallel import setup_expert_parallel
        experts = setup_expert_parallel(model, world, ep, force_balance)
    if world.pp > 1:
        from trainledger.train.pipeline import Pipeline
        return Pipeline(model, world, micro_batches, seq_len, parallel)
    dp_mesh = world.mesh["dp"] if world.mesh is not None else None
    if world.tp > 1:
        from trainledger.train.tensor_parallel import check_divisible, parallelize
        check_divisible(model.spec, world.tp, seq_len, sp)
        parallelize(model, world.mesh["tp"], sp)
    if world.dp_size == 1:
        return model
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        ids = [world.device.index] if world.device.type == "cuda" else None
        if experts:
            DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, experts)
        return DistributedDataParallel(model, device_ids=ids, process_group=dp_mesh.get_group() if dp_mesh else None)
    from torch.distributed.fsdp import fully_shard
    params = dict(model.named_parameters())
    ignored = {params[name] for name in experts}
    for block in _blocks(model):
        fully_shard(block, mesh=dp_mesh, ignored_params=ignored or None)
    fully_shard(model, mesh=dp_mesh, ignored_params=ignored or None)
    return model


def loss_context(world: World):
    """The context the forward and backward of a step run in: `loss_parallel()` under TP (vocabulary-split logits)."""
    if world.tp > 1:
        from torch.distributed.tensor.parallel import loss_parallel
        return loss_parallel()
    return contextlib.nullcontext()


def clip_grad_norm(params: list, max_norm: float, world: World) -> float:
    """The global L2 norm of the gradients of a TP / PP / FSDP model, clipped to `max_norm` (inf: no clipping).

    Each rank sums the squares of its local gradient pieces, weighting each piece by 1 / (the number of ranks
    holding the same piece): a DTensor gradient is replicated over its mesh's Replicate dimensions and over
    the ranks outside its mesh in the same pipeline stage; a plain tensor over all ranks of its stage. One
    all-reduce of that scalar gives the squared norm of the whole model's gradient.

    First it completes the gradients DTensor left as partial sums (the norm weights under sequence
    parallelism: each TP rank saw its own part of the sequence): one all-reduce each, so that the optimizer
    receives finished, replicated gradients (else each foreach call would all-reduce them again).
    """
    for p in params:
        g = p.grad
        if hasattr(g, "placements") and any(placement.is_partial() for placement in g.placements):
            from torch.distributed.tensor import Replicate
            p.grad = g.redistribute(g.device_mesh, [Replicate() if x.is_partial() else x for x in g.placements])
    ranks_per_stage = world.world_size // world.pp
    total = torch.zeros((), dtype=torch.float64, device=world.device)
    for p in params:
        g = p.grad
        if hasattr(g, "to_local"):
            copies = ranks_per_stage // g.device_mesh.size()
            for dim, placement in enumerate(g.placements):
                if placement.is_replicate():
                    copies *= g.device_mesh.size(dim)
            copies *= getattr(p, "pipeline_copies", 1)
            piece = g.to_local()
        else:       # a plain tensor: on every rank of its stage (and a tied embedding on two stages); an expert
            # under --ep on its `data_parallel_copies` ranks only (train/expert_parallel.py)
            copies, piece = getattr(p, "data_parallel_copies", ranks_per_stage) * getattr(p, "pipeline_copies", 1), g
        total += piece.detach().double().pow(2).sum() / copies
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    norm = float(total.sqrt())
    if math.isfinite(max_norm) and norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for p in params:
            local(p.grad).mul_(scale)
    return norm


def _blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated layers to shard one by one: the children of the first ModuleList found."""
    for module in model.modules():
        if isinstance(module, nn.ModuleList):
            return list(module)
    return []


def unwrap(model: nn.Module) -> nn.Module:
    """The bare module inside DDP, torch.compile or a pipeline stage (whose parameter names are the model's)."""
    model = getattr(model, "_orig_mod", model)
    if type(model).__name__ == "Pipeline":
        return model.model
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


TEARDOWN_WAIT_SECONDS = 10.0
_GROUP_STARTED = False       # setup() started a process group in this process (a torchrun rank)


def _started_group() -> None:
    global _GROUP_STARTED
    _GROUP_STARTED = True


def teardown(world: World, through_store: bool = True) -> None:
    """Closes the process group, the other ranks first, rank 0 last.

    gloo can abort a process (SIGABRT, exit -6 after a run that finished) when a peer's connection closes
    while it is closing its own: seen here twice in about 150 two-rank runs whose ranks tore down together,
    after the final barrier or after the same error. So ranks other than 0 close first and then say so through
    the rendezvous store (a TCP store, not gloo); rank 0 waits for them, its connections idle, and closes last.
    A rank that died never says so: rank 0 closes after TEARDOWN_WAIT_SECONDS anyway. `through_store=False`
    (the launcher died, and its store with it) closes at once, without the store.
    """
    if not (world.distributed and dist.is_initialized()):
        return
    from trainledger.train.expert_parallel import destroy_expert_groups
    destroy_expert_groups()                      # --ep's groups first (no-op without them)
    if not through_store:
        dist.destroy_process_group()
        return
    store = dist.distributed_c10d._get_default_store()
    if world.rank != 0:
        dist.destroy_process_group()
        with contextlib.suppress(Exception):     # rank 0 gone already: nothing to tell
            store.set(f"trainledger/closed/{world.rank}", "1")
        return
    keys = [f"trainledger/closed/{rank}" for rank in range(1, world.world_size)]
    with contextlib.suppress(Exception):         # a rank that died never sets its key
        store.wait(keys, timedelta(seconds=TEARDOWN_WAIT_SECONDS))
    dist.destroy_process_group()


def end_rank_process(status: int) -> None:
    """Ends this process now, with `status`, when setup() started a process group in it; returns otherwise.

    destroy_process_group() (teardown) deregisters the group, but the C++ ProcessGroupGloo lives on while
    anything still refers to it (FSDP2's and DeviceMesh's state here): after teardown a rank still runs its two
    gloo worker threads and gloo's TCP loop thread (seen in /proc/self/task: pt_gloo_runloop ×2,
    gloo_tcp_loop), and they are destroyed only while the interpreter shuts down, or never. A C++ thread that
    needs the GIL then (to drop a tensor or a callback of the work it just finished, which load delays) is
    ended by CPython with pthread_exit, whose unwinding through a noexcept frame calls std::terminate: the
    rank dies with SIGABRT and "terminate called without an active exception" after a run that finished (torch
    says as much in destroy_process_group: "the dtor might finish after the Python Interpreter exits. After
    that grabbing the GIL ... will crash"). So a rank, once torn down and with its output flushed, leaves with
    os._exit: no interpreter shutdown runs beside live communication threads. Everything the run writes is
    closed before (metrics, checkpoints, locks); only stdout and stderr are still buffered.
    """
    if not _GROUP_STARTED:
        return
    import sys
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
