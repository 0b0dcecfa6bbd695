"""Measured memory of a fine-tuning step by category, with the memory levers on or off: the referee of the accounting.

`finetune_step_memory(spec, ...)` builds the model as `train --finetune` does (models/lora.py, models/quantize.py),
runs `steps` optimizer steps on a random batch under measure.memory's LiveTracker (every storage an op creates, freed
through weakrefs) and returns the bytes of the last step (the steady state: optimizer states exist throughout) by
category, base units:

    trainable_params_bytes        the adapters (or every weight, for full training)
    frozen_params_bytes           frozen weights kept as they are (embeddings, norms, the head, unquantized Linears)
    quantized_weights_bytes       the codes of quantized weights (NF4: two 4-bit codes a byte; int8: a byte a weight)
    quantization_constants_bytes  their scales, double-quantized scalers, means and lookup tables (torchao's tensors)
    grads_bytes                   the most gradient bytes alive at once (all of them after a plain backward; a few
                                  tensors' worth with the step inside backward)
    optimizer_bytes               the optimizer's state after the step (8-bit codes and their fp32 scales included)
    activations_bytes             device bytes the forward created and left alive for backward (loss excluded)
    host_activations_bytes        what activation offloading moved to host memory (their peak)
    peak_bytes                    device bytes at the step's peak: every tensor above that lives on the device, the
                                  batch, plus the highest live total of what the step created (temporaries included:
                                  the dequantized copies a quantized Linear makes, the logits, the gradients)
    peak_phase                    forward, backward or optimizer
Trainable and frozen counts (`trainable_params`, `frozen_params`) come with it, as PEFT counts them.

On a CPU run the host is the device; the copies activation offloading makes are classified as host bytes because
that is where they would be on a GPU (models/offload.py): made while the offload hook packs, they never join the
device's live total (on CUDA too: that is where the pinned copies are made). What is not counted: the allocator's
rounding and caching (measure/allocator.py models it), the CUDA context, host-resident optimizer states
(`--cpu-offload`, CUDA only: not measured here), and torchao's 8-bit step, which torch.compile cannot trace under
the tracker's dispatch mode: it runs untracked (its states are counted after it, its temporaries are not).
"""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass

import torch

from trainledger.measure.memory import LiveTracker, _storages, storage_bytes
from trainledger.models import Transformer
from trainledger.models.lora import LoRASettings, apply_lora, trainable_counts
from trainledger.models.offload import ActivationOffload
from trainledger.models.precision import autocast, param_dtype
from trainledger.models.quantize import inner_tensors, quantize_frozen_linears, quantized_bytes
from trainledger.optim.levers import build_training_optimizer


@dataclass(frozen=True)
class Levers:
    """The memory levers of one measured step (the flags of `train` with the same names)."""

    optimizer: str = "adamw"
    optimizer_in_backward: bool = False
    activation_offload: bool = False
    chunked_loss: int = 1


class _SplitTracker(LiveTracker):
    """LiveTracker whose storages made while `is_host()` holds count as host bytes, not device."""

    def __init__(self, is_host):
        super().__init__()
        self.is_host = is_host
        self.host_live_bytes = self.host_peak_bytes = 0
        self._host: dict[int, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.is_host():
            return super().__torch_dispatch__(func, types, args, kwargs)
        out = func(*args, **(kwargs or {}))
        for st in _storages(torch.utils._pytree.tree_flatten(out)[0]):
            if id(st) not in self._host and id(st) not in self._info:
                self._host[id(st)] = st.nbytes()
                self.host_live_bytes += st.nbytes()
                self.host_peak_bytes = max(self.host_peak_bytes, self.host_live_bytes)
                weakref.finalize(st, self._host_freed, id(st))
        return out

    def _host_freed(self, key: int) -> None:
        self.host_live_bytes -= self._host.pop(key, 0)


def parameter_bytes(model: torch.nn.Module) -> dict:
    """Bytes of the model's parameters and buffers by kind: trainable, frozen, quantized codes and constants."""
    out = {"trainable_params_bytes": 0, "frozen_params_bytes": 0, "quantized_weights_bytes": 0,
           "quantization_constants_bytes": 0}
    for p in [*model.parameters(), *model.buffers()]:
        if len(inner_tensors(p)) > 1 or set(inner_tensors(p)) != {""}:
            codes, constants = quantized_bytes(p)
            out["quantized_weights_bytes"] += codes
            out["quantization_constants_bytes"] += constants
        else:
            key = "trainable_params_bytes" if p.requires_grad else "frozen_params_bytes"
            out[key] += storage_bytes([p])
    return out


def _optimizer_bytes(optimizer) -> int:
    tensors = [plain for state in optimizer.state.values() for value in state.values() if isinstance(value, torch.Tensor)
               for plain in inner_tensors(value).values()]
    return storage_bytes(tensors)


def measure_step_memory(model, batch, make_optimizer, *, offload: ActivationOffload | None = None,
                        precision: str = "fp32", steps: int = 2) -> dict:
    """The categories of the module docstring for `steps` steps of `model` on `batch` ((idx, targets)) with the
    optimizer `make_optimizer(trainable parameters)` builds; the last step's, with its loss and every step's peak."""
    device = next(p.device for p in model.parameters())
    trainable = [p for p in model.parameters() if p.requires_grad]
    grads = {"peak": 0}

    def grad_seen(_p):      # registered before the optimizer's hooks: sees each gradient before a fused step frees it
        grads["peak"] = max(grads["peak"], storage_bytes([q.grad for q in trainable if q.grad is not None]))
    handles = [p.register_post_accumulate_grad_hook(grad_seen) for p in trainable]
    optimizer = make_optimizer(trainable)
    try:
        return _steps(model, batch, optimizer, offload, precision, steps, device, grads)
    finally:
        for handle in handles:
            handle.remove()
        if hasattr(optimizer, "remove_hooks"):
            optimizer.remove_hooks()


def _steps(model, batch, optimizer, offload, precision, steps, device, grads) -> dict:
    static = parameter_bytes(model)
    compiled = type(optimizer).__module__.startswith(("torchao", "trainledger.optim.low_bit"))
    inputs_bytes = storage_bytes(list(batch))
    reports = []
    for _ in range(steps):
        grads["peak"] = 0
        present = storage_bytes([t for state in optimizer.state.values() for v in state.values()
                                 if isinstance(v, torch.Tensor) for t in inner_tensors(v).values()])
        tracker = _SplitTracker(lambda: offload is not None and offload.packing)
        with tracker:
            tracker.set_phase("forward")
            with (offload or contextlib.nullcontext()), autocast(precision, device):
                loss = model(*batch)[1]        # the logits the caller drops are no activation
            live = tracker.live("forward")
            activations = sum(n for st, n, _ in live if id(st) != id(loss.untyped_storage()))
            del live
            tracker.set_phase("backward")
            loss.backward()
            tracker.set_phase("optimizer")
            if not compiled:
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        if compiled:        # torch.compile cannot run under a dispatch mode: the step runs untracked
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        device_static = sum(v for k, v in static.items())
        reports.append({**static, "grads_bytes": grads["peak"], "optimizer_bytes": _optimizer_bytes(optimizer),
                        "activations_bytes": activations, "host_activations_bytes": tracker.host_peak_bytes,
                        "inputs_bytes": inputs_bytes,
                        "peak_bytes": device_static + inputs_bytes + present + tracker.peak_bytes,
                        "peak_phase": tracker.peak_phase, "loss": float(loss.detach())})
        del loss
    trainable, frozen = trainable_counts(model)
    return {**reports[-1], "trainable_params": trainable, "frozen_params": frozen,
            "step_peaks_bytes": [r["peak_bytes"] for r in reports]}


def finetune_step_memory(spec, *, batch_size: int, seq_len: int, lora: LoRASettings | None = LoRASettings(),
                         quantize: str = "none", precision: str = "fp32", levers: Levers = Levers(), seed: int = 0,
                         device: str = "cpu", steps: int = 2) -> dict:
    """Measured memory by category of a fine-tuning step of `spec` (module docstring): LoRA `lora` (None: full
    training) on a random base, `quantize` for its frozen Linears, the precision recipe and the levers.

    The number to compare the accounting's prediction of the same run with (account/, `memory --finetune`)."""
    device = torch.device(device)
    torch.manual_seed(seed)
    model = Transformer(spec)
    if lora is not None:
        apply_lora(model, lora)
    model = model.to(device=device, dtype=param_dtype(precision))
    quantize_frozen_linears(model, quantize)
    model.loss_chunks = levers.chunked_loss

    def make_optimizer(params):
        return build_training_optimizer(levers.optimizer, [{"params": params}], lr=1e-3, weight_decay=0.0,
                                        device=device, in_backward=levers.optimizer_in_backward)
    generator = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, spec.vocab_size, (batch_size, seq_len + 1), generator=generator).to(device)
    offload = ActivationOffload(model) if levers.activation_offload else None
    return measure_step_memory(model, (tokens[:, :-1], tokens[:, 1:]), make_optimizer, offload=offload,
                               precision=precision, steps=steps)
