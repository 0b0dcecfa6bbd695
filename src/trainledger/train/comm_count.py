"""Bytes this rank sends in collectives and point-to-point messages, counted as the ops run.

`CommCounter` is a TorchDispatchMode: every c10d op this process dispatches passes through it — DDP's
gradient all-reduce (issued by its C++ reducer), FSDP2's all-gathers and reduce-scatters, DTensor's
functional collectives (tensor and sequence parallelism, loss_parallel) and the pipeline's send/recv —
with its tensors and process group. From the payload S (the full tensor: an all-reduce's buffer, an
all-gather's output, a reduce-scatter's input, a message) and the group size n it adds the bytes one rank
sends in a ring, `account.time.comm.ring_bytes_sent` (2(n−1)/n·S, (n−1)/n·S, S), the convention the prediction
uses. The payloads are measured, the ring volume per payload is the standard accounting (nccl-tests' bus
bandwidth); gloo's own algorithms may move a different number of bytes on the wire.

Broadcasts and barriers (setup, checkpoints, the stop-signal check) are outside the counted step.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from trainledger.account.time.comm import ring_bytes_sent
from trainledger.errors import TrainledgerError

# op name (after the namespace) -> (kind, which tensor is the full payload S)
_OPS = {
    "allreduce_": ("all_reduce", "first"), "all_reduce": ("all_reduce", "first"),
    "all_reduce_": ("all_reduce", "first"), "all_reduce_coalesced": ("all_reduce", "first"),
    "_allgather_base_": ("all_gather", "output"), "all_gather_into_tensor": ("all_gather", "output"),
    "all_gather_into_tensor_out": ("all_gather", "output"), "allgather_": ("all_gather", "output"),
    "_reduce_scatter_base_": ("reduce_scatter", "input"), "reduce_scatter_tensor": ("reduce_scatter", "input"),
    "reduce_scatter_": ("reduce_scatter", "input"),
    "send": ("send_recv", "first"),
}


def _group_size(args) -> int:
    """The size of the process group an op runs on: a ProcessGroup script object or a functional group name."""
    for arg in args:
        if isinstance(arg, torch.ScriptObject):
            return dist.ProcessGroup.unbox(arg).size()
        if isinstance(arg, str):
            try:
                return dist.distributed_c10d._resolve_process_group(arg).size()
            except (ValueError, RuntimeError, KeyError):
                continue
    return dist.get_world_size()


def namespace_is_functional(op: str) -> bool:
    """True for the functional collectives (_c10d_functional: out-of-place, the input is the first argument)."""
    return op in ("all_gather_into_tensor", "all_gather_into_tensor_out", "reduce_scatter_tensor")


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class CommCounter(TorchDispatchMode):
    """Within `with counter:`, sums the bytes this rank sends (`.bytes_sent`) and counts calls by kind (`.calls`)."""

    def __init__(self):
        super().__init__()
        self.bytes_sent = 0.0
        self.calls: dict[str, int] = {}
        self.log: list[tuple[str, int, int]] = []        # (kind, payload bytes, group size) of each call

    def reset(self) -> None:
        self.bytes_sent, self.calls, self.log = 0.0, {}, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(t is DTensor for t in types):
            # let DTensor run the op first: the collectives its sharding propagation issues (loss_parallel's
            # all-reduces, redistributions) then come back through this mode (what CommDebugMode does)
            return NotImplemented
        namespace, _, rest = func.name().partition("::")
        if namespace in ("c10d", "_c10d_functional") and rest.split(".")[0] in _OPS:
            self._count(rest.split(".")[0], args)
        elif namespace == "c10d" and rest.split(".")[0] == "alltoall_base_":
            self._count_all_to_all(args)
        return func(*args, **kwargs)

    def _count(self, op: str, args) -> None:
        kind, which = _OPS[op]
        n = _group_size(args)
        first = _bytes(t for t in tree_leaves(args[0]) if isinstance(t, torch.Tensor))
        if which == "first" or namespace_is_functional(op) and which == "input":
            payload = first                  # all-reduce buffer, message; functional reduce_scatter's input
        elif op in ("_allgather_base_", "_reduce_scatter_base_", "allgather_", "reduce_scatter_"):
            # in-place c10d ops take (output(s), input(s), ...): the full payload is the all-gather's
            # output (first) or the reduce-scatter's input (second)
            second = _bytes(t for t in tree_leaves(args[1]) if isinstance(t, torch.Tensor))
            payload = first if kind == "all_gather" else second
        else:                                # functional all_gather_into_tensor(input, n, group): output = n·input
            payload = first * n
        self.bytes_sent += ring_bytes_sent(kind, payload, n)
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.log.append((kind, payload, n))


    def _count_all_to_all(self, args) -> None:
        """c10d alltoall_base_(output, input, group, output_splits, input_splits, ...): the rows this rank sends to the
        other ranks (its input less the split it keeps), e.g. expert parallelism's token dispatch and combine."""
        output, source, group, _, input_splits = args[:5]
        pg = dist.ProcessGroup.unbox(group)
        n, me = pg.size(), pg.rank()
        row = source[0].numel() * source.element_size() if source.dim() and source.shape[0] else 0
        splits = list(input_splits) or [source.shape[0] // n] * n
        sent = row * (sum(splits) - splits[me])
        self.bytes_sent += sent
        self.calls["all_to_all"] = self.calls.get("all_to_all", 0) + 1
        self.log.append(("all_to_all", sent, n))


class StepComm:
    """The trainer's per-step communication: `counting()` around a step, then `record()` for its metrics record.

    {} for one process; else {"comm_bytes": measured by CommCounter, "predicted_comm_bytes": from account/}.
    """

    def __init__(self, trainer):
        self.enabled = trainer.world.distributed
        self.counter = CommCounter()
        # (a fine-tuning run all-reduces its adapters' gradients only: no accounting of that yet, so no prediction)
        tuned = getattr(trainer, "tuned", False)
        self.predicted = predicted_comm_bytes(trainer) if self.enabled and not tuned else None

    @contextlib.contextmanager
    def counting(self):
        if not self.enabled:
            yield
            return
        self.counter.reset()
        with self.counter:
            yield

    def record(self) -> dict:
        if not self.enabled:
            return {}
        return {"comm_bytes": self.counter.bytes_sent, "predicted_comm_bytes": self.predicted}


def predicted_comm_bytes(trainer) -> float:
    """What account/ predicts this rank sends in one step of the trainer's layout (PyTorch's implementations)."""
    from trainledger.account.time.trainer_comm import trainer_bytes_sent
    config, world = trainer.config, trainer.world
    run = _run(trainer.micro, trainer.seq_len, config.precision, tp=world.tp, sp=config.sp, pp=world.pp,
               dp=world.dp_size, zero=3 if config.parallel == "fsdp" else 0, ep=config.ep)
    return trainer_bytes_sent(trainer.spec, run, micro_batches=config.grad_accum, pp_rank=world.pp_rank,
                              stage_blocks=_stage_blocks(trainer.model))["total"]


def _run(batch_size: int, seq_len: int, precision: str, **layout):
    """The run (specs.run.Run) a trainer's step is: its micro-batch, sequence length, recipe and layout."""
    from trainledger.specs.run import Batch, Layout, Numerics, Run
    return Run(batch=Batch(batch_size=batch_size, seq_len=seq_len), numerics=Numerics(precision=precision),
               layout=Layout(**layout))


def _stage_blocks(model) -> int | None:
    """The number of blocks on this rank's pipeline stage (None without a pipeline)."""
    stage = getattr(model, "stage", None)
    return len(stage.layers) if stage is not None and hasattr(stage, "layers") else None


def measure_one_step(spec, *, batch_size: int, seq_len: int, grad_accum: int = 1, precision: str = "fp32",
                     parallel: str = "none", tp: int = 1, sp: bool = False, pp: int = 1, device: str | None = None,
                     seed: int = 0) -> dict:
    """One forward + backward (+ the gradient-norm reduction) of `spec` under a layout, on random tokens, with the
    bytes each rank sent measured beside account/'s prediction. Run it under torchrun (`measure --comm`).

    `batch_size` is the micro-batch per data-parallel replica; the step runs `grad_accum` of them. No optimizer
    step and no data: the comparison of `train`'s records, without training. Collective on every rank.
    """
    from trainledger.account.time.trainer_comm import trainer_bytes_sent
    from trainledger.models import build_model
    from trainledger.train import distributed as dist_
    from trainledger.models.precision import autocast, param_dtype

    world = dist_.setup(parallel, device, tp, pp)
    try:
        if not world.distributed:
            raise TrainledgerError("--comm measures collectives: launch with torchrun --nproc_per_node N "
                                   "-m trainledger.cli.main measure --comm ...")
        torch.manual_seed(seed)
        model = build_model(spec).to(device=world.device, dtype=param_dtype(precision))
        model = dist_.wrap(model, parallel, world, sp, grad_accum, seq_len)
        generator = torch.Generator().manual_seed(seed + world.dp_rank)
        tokens = torch.randint(0, spec.vocab_size, (batch_size * grad_accum, seq_len + 1), generator=generator)
        x, y = tokens[:, :-1].to(world.device), tokens[:, 1:].to(world.device)
        counter = CommCounter()
        with counter:
            if world.pp > 1:
                model.train_micro_batches(x, y)
            for a in range(grad_accum if world.pp == 1 else 0):
                rows = slice(a * batch_size, (a + 1) * batch_size)
                dist_.set_grad_sync(model, a == grad_accum - 1)
                with dist_.loss_context(world), autocast(precision, world.device):
                    _, loss = model(x[rows], y[rows])
                    (loss / grad_accum).backward()
            if world.tp > 1 or world.pp > 1:
                dist_.clip_grad_norm([p for p in model.parameters() if p.grad is not None], float("inf"), world)
        run = _run(batch_size, seq_len, precision, tp=world.tp, sp=sp, pp=world.pp, dp=world.dp_size,
                   zero=3 if parallel == "fsdp" else 0)
        predicted = trainer_bytes_sent(spec, run, micro_batches=grad_accum, pp_rank=world.pp_rank,
                                       stage_blocks=_stage_blocks(model))
        mine = {"rank": world.rank, "comm_bytes": counter.bytes_sent, "predicted_comm_bytes": predicted["total"],
                "predicted_parts": {k: v for k, v in predicted.items() if k != "total"}, "calls": counter.calls}
        ranks = [None] * world.world_size
        dist.all_gather_object(ranks, mine)
        dist_.barrier(world)        # nobody tears the group down while a peer still reads (see cli/train.py)
    finally:
        dist_.teardown(world)
    return {"settings": {"model": spec.name, "batch_size": batch_size, "seq_len": seq_len, "grad_accum": grad_accum,
                         "precision": precision, "parallel": parallel, "tp": tp, "sp": sp, "pp": pp,
                         "world_size": world.world_size, "device": world.device.type},
            "rank": world.rank, "ranks": ranks}
