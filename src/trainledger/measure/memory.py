"""Measured memory of one training step by category: params, grads, optimizer state, activations, temporaries.

`LiveTracker` is a TorchDispatchMode that sees every op's outputs. Each new untyped storage (counted once,
however many views share it) adds its bytes to a live total; a weakref on the storage subtracts them
when it is freed. The peak of the live total is recorded with the phase (forward, backward, optimizer)
and the innermost module running at that moment. It works on real CPU/CUDA tensors, on the meta device
and under FakeTensorMode (fake storages have sizes but no data), so a 70B step can be measured on a laptop.

Categories, as DESIGN.md names them:
- params: storages of model parameters and buffers (present before the step);
- grads: the storages held in `.grad` after backward;
- optimizer: storages in `optimizer.state` after the step;
- activations: bytes created by the forward pass and still alive when it returns, the loss and the
  logits the caller drops excluded: exactly what autograd keeps for backward (saved tensors, checkpoint
  inputs, autocast weight copies). `saved_bytes` cross-checks it: unique storages packed by
  `torch.autograd.graph.saved_tensors_hooks` that the forward created (0 inside checkpointed regions,
  whose own hooks take precedence);
- temporaries: everything else (peak minus the rest at the moment of the peak).

With an `events` list, the tracker also logs each allocation and free in program order — ("alloc", tag, nbytes),
("free", tag) — which measure.allocator replays through a model of PyTorch's CUDA caching allocator.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.module_tracker import ModuleTracker


def _storages(tensors) -> list:
    out = []
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.layout == torch.strided:
            out.append(t.untyped_storage())
    return out


def storage_bytes(tensors) -> int:
    """Bytes of the unique storages behind `tensors` (shared storages and views counted once)."""
    seen, total = set(), 0
    for st in _storages(tensors):
        if id(st) not in seen:
            seen.add(id(st))
            total += st.nbytes()
    return total


class LiveTracker(TorchDispatchMode):
    """Live bytes of storages created while active; `peak_bytes` with the phase and module where it happened."""

    def __init__(self, events: list | None = None):
        super().__init__()
        self.events = events                       # shared allocation log (see the module docstring), or None
        self.live_bytes = 0
        self.peak_bytes = 0
        self.peak_phase = ""
        self.peak_module = ""
        self.phase = ""
        self.phase_peak: dict[str, int] = {}
        self._info: dict[int, list] = {}           # id(storage) -> [nbytes, phase, module, weakref]
        # which module runs: entered around the forward only (ModuleTracker's backward hooks keep the
        # tensors that torch.utils.checkpoint recomputes alive until the graph is gone)
        self.modules = ModuleTracker()

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.phase_peak.setdefault(phase, self.live_bytes)

    def _current_module(self) -> str:
        parents = [p for p in self.modules.parents if p != "Global"]
        return max(parents, key=len) if parents else ""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {id(st) for st in _storages(tree_flatten((args, kwargs))[0])}
        for st in _storages(tree_flatten(out)[0]):
            key = id(st)
            if key in inputs or key in self._info:
                continue                                  # a view or an in-place result: no new bytes
            nbytes = st.nbytes()
            ref = weakref.ref(st, self._freed_callback(key))
            self._info[key] = [nbytes, self.phase, self._current_module(), ref]
            if self.events is not None:
                self.events.append(("alloc", key, nbytes))
            self.live_bytes += nbytes
            if self.live_bytes > self.phase_peak.get(self.phase, 0):
                self.phase_peak[self.phase] = self.live_bytes
            if self.live_bytes > self.peak_bytes:
                self.peak_bytes, self.peak_phase = self.live_bytes, self.phase
                self.peak_module = self._info[key][2]
        return out

    def _freed_callback(self, key):
        def freed(_ref, tracker=weakref.ref(self)):
            owner = tracker()
            if owner is not None and key in owner._info:
                owner.live_bytes -= owner._info.pop(key)[0]
                if owner.events is not None:
                    owner.events.append(("free", key))
        return freed

    def live(self, phase: str | None = None) -> list[tuple[object, int, str]]:
        """(storage, bytes, module) of every tracked storage still alive, optionally only those created in `phase`."""
        rows = []
        for nbytes, created, module, ref in list(self._info.values()):
            st = ref()
            if st is not None and (phase is None or created == phase):
                rows.append((st, nbytes, module))
        return rows


@dataclass
class MemoryReport:
    """Bytes of one training step by category (base units: bytes); `peak_bytes` includes params and inputs."""

    params_bytes: int = 0
    inputs_bytes: int = 0
    grads_bytes: int = 0
    optimizer_bytes: int = 0
    activations_bytes: int = 0
    saved_bytes: int = 0
    peak_bytes: int = 0
    peak_phase: str = ""
    peak_module: str = ""
    phase_peak_bytes: dict[str, int] = field(default_factory=dict)
    activations_by_module: dict[str, int] = field(default_factory=dict)
    forward_flops: int | None = None       # with count_flops=True: model FLOPs of forward and backward
    backward_flops: int | None = None
    loss: float | None = None

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def _default_loss(model, batch):
    out = model(*batch)
    return out[1] if isinstance(out, tuple) else out


def track_step(model: torch.nn.Module, batch, optimizer: torch.optim.Optimizer | None = None, *,
               loss_fn=None, autocast_dtype: torch.dtype | None = None, grad_scaler=None,
               count_flops: bool = False, tracker: LiveTracker | None = None) -> MemoryReport:
    """MemoryReport of one step: loss = loss_fn(model, batch); loss.backward(); optimizer.step(); zero_grad.

    `batch` is a tuple of model inputs (our Transformer: (idx, targets) -> (logits, loss)); `loss_fn`
    defaults to calling model(*batch) and taking the loss. `autocast_dtype` runs the forward under
    torch.autocast (AMP). Peak = bytes present before the step (params, inputs, any existing grads and
    optimizer state) + the highest live total of storages created during the step.
    count_flops=True also counts forward and backward FLOPs (measure.flops) in the same step.
    `tracker`: a fresh LiveTracker the caller keeps (to read its allocation log after the step); default a new one.
    """
    from contextlib import nullcontext

    from trainledger.measure.flops import OpFlopCounter
    counters = (OpFlopCounter(), OpFlopCounter()) if count_flops else (nullcontext(), nullcontext())
    loss_fn = loss_fn or _default_loss
    params = list(model.parameters()) + list(model.buffers())
    report = MemoryReport(params_bytes=storage_bytes(params), inputs_bytes=storage_bytes(tree_flatten(batch)[0]))
    existing = storage_bytes([p.grad for p in model.parameters() if p.grad is not None])
    if optimizer is not None:
        existing += storage_bytes(tree_flatten(list(optimizer.state.values()))[0])
    saved: dict[int, object] = {}
    tracker = tracker if tracker is not None else LiveTracker()

    def pack(t):
        st = t.untyped_storage() if t.layout == torch.strided else None
        if st is not None:
            saved[id(st)] = weakref.ref(st)
        return t

    device_type = next((p.device.type for p in params), "cpu")
    with tracker:
        tracker.set_phase("forward")
        with tracker.modules, counters[0], torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            if autocast_dtype is not None:
                with torch.autocast(device_type=device_type if device_type != "meta" else "cpu", dtype=autocast_dtype):
                    loss = loss_fn(model, batch)
            else:
                loss = loss_fn(model, batch)
        forward_live = tracker.live("forward")
        loss_storage = id(loss.untyped_storage())
        report.activations_bytes = sum(n for st, n, _ in forward_live if id(st) != loss_storage)
        by_module: dict[str, int] = {}
        for st, n, module in forward_live:
            if id(st) != loss_storage:
                by_module[module] = by_module.get(module, 0) + n
        report.activations_by_module = by_module
        forward_ids = {id(st) for st, _, _ in forward_live}
        report.saved_bytes = sum(ref().nbytes() for key, ref in saved.items()
                                 if key in forward_ids and key != loss_storage and ref() is not None)
        del forward_live
        tracker.set_phase("backward")
        with counters[1]:
            (grad_scaler.scale(loss) if grad_scaler is not None else loss).backward()
        if count_flops:
            report.forward_flops, report.backward_flops = counters[0].total, counters[1].total
        report.grads_bytes = storage_bytes([p.grad for p in model.parameters() if p.grad is not None])
        if loss.device.type != "meta" and not _is_fake(loss):
            report.loss = float(loss.detach())
        del loss
        if optimizer is not None:
            tracker.set_phase("optimizer")
            if grad_scaler is not None:
                grad_scaler.step(optimizer)
                grad_scaler.update()
            else:
                optimizer.step()
            report.optimizer_bytes = storage_bytes(tree_flatten(list(optimizer.state.values()))[0])
            tracker.set_phase("zero_grad")
            optimizer.zero_grad(set_to_none=True)
    base = report.params_bytes + report.inputs_bytes + existing
    report.peak_bytes = base + tracker.peak_bytes
    report.peak_phase, report.peak_module = tracker.peak_phase, tracker.peak_module
    report.phase_peak_bytes = {phase: base + n for phase, n in tracker.phase_peak.items()}
    return report


def _is_fake(t) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor
    return isinstance(t, FakeTensor)


def track_steps(model: torch.nn.Module, batch, optimizer, *, steps: int = 2, extra_storages=(),
                workspace_bytes: int = 0, capacity_bytes: float = float("inf"), **kwargs) -> tuple[list, dict]:
    """([MemoryReport of each of `steps` training steps], what the CUDA caching allocator reserves for them).

    The first step creates the optimizer states; later steps hold them through forward and backward, so their
    peak is higher: the steady state of a training run. The allocation log of all steps, after the storages
    that exist before them (parameters and buffers in module order, `extra_storages` such as fp32 master
    weights, the batch, and two cuBLAS workspaces of `workspace_bytes`: one per thread that runs matmuls, the
    forward's and autograd's), is replayed by measure.allocator.replay on a device of `capacity_bytes`.
    kwargs go to track_step (loss_fn, autocast_dtype, count_flops for the first step, ...).
    """
    from trainledger.measure.allocator import replay

    events: list = []
    seen = set()
    for i, st in enumerate(_storages(list(model.parameters()) + list(model.buffers()) + list(extra_storages)
                                     + tree_flatten(batch)[0])):
        if id(st) not in seen:
            seen.add(id(st))
            events.append(("alloc", ("before", i), st.nbytes()))
    events += [("alloc", ("workspace", i), workspace_bytes) for i in range(2 if workspace_bytes else 0)]
    trackers, reports = [], []
    for step in range(steps):
        trackers.append(LiveTracker(events))
        step_kwargs = dict(kwargs) if step == 0 else {**kwargs, "count_flops": False}
        reports.append(track_step(model, batch, optimizer, tracker=trackers[-1], **step_kwargs))
    replayed = replay(events, capacity_bytes)
    del trackers
    return reports, replayed


def two_steps(model, batch, opt, device: str, *, extra_storages=(), **kwargs) -> tuple:
    """(first step's MemoryReport, a later step's, the allocator replay of both): track_steps with two steps, the
    cuBLAS workspaces of a Hopper-class GPU (account.memory.per_gpu.CUBLAS_WORKSPACE_BYTES) and FLOPs counted in the first.
    On CUDA the device's own peak statistics are reset first (memory_rows reads them)."""
    from trainledger.account.memory.per_gpu import CUBLAS_WORKSPACE_BYTES
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    (report, later), replayed = track_steps(model, batch, opt, steps=2, extra_storages=extra_storages,
                                            workspace_bytes=CUBLAS_WORKSPACE_BYTES, count_flops=True, **kwargs)
    return report, later, replayed


def memory_rows(report, later, masters_bytes: int, device: str, replayed: dict) -> dict:
    """The measured memory rows of `measure`: the first step's parts and peak, a later step's peak (optimizer states
    held throughout) and the bytes reserved: torch.cuda's on CUDA, else the caching allocator's replay."""
    rows = dict(params_bytes=report.params_bytes, grads_bytes=report.grads_bytes, master_params_bytes=masters_bytes,
                optimizer_bytes=report.optimizer_bytes, activations_bytes=report.activations_bytes,
                peak_bytes=report.peak_bytes - report.inputs_bytes + masters_bytes,
                later_step_peak_bytes=later.peak_bytes - later.inputs_bytes + masters_bytes,
                reserved_bytes=replayed["peak_reserved_bytes"])
    if device == "cuda":
        rows["reserved_bytes"] = torch.cuda.max_memory_reserved()
        rows["cuda_max_memory_allocated_bytes"] = torch.cuda.max_memory_allocated()
    return rows


def reserved_note(device: str) -> str:
    """What the "reserved" row of `measure` is on `device`."""
    if device == "cuda":
        return "reserved: torch.cuda.max_memory_reserved() over both steps (the caching allocator's segments)"
    return ("reserved: what PyTorch's CUDA caching allocator would reserve for these two steps, replayed from their "
            "allocations (measure/allocator.py); a CUDA process also holds its context (~0.6 GiB)")
