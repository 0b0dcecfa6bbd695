"""Activation offloading: what autograd saves for backward goes to host memory in forward and comes back in backward.

The semantics of torch.autograd.graph.save_on_cpu (PyTorch docs, "Hooks for saved tensors"), written as its pair of
torch.autograd.graph.saved_tensors_hooks so that a step can count what moved: pack copies each saved tensor into a
host tensor of the same size and strides (pinned on CUDA, so the copy back can overlap), unpack returns it to the
device it came from. As torchtune's OffloadActivations, parameters and buffers stay where they are (autograd saves
them too, e.g. a Linear's weight for its input gradient: they are not activations and exist anyway), and so do
tensor subclasses such as torchao's NF4 weights.

On a CUDA device the saved activations then occupy host RAM instead of GPU memory, at the price of two PCIe copies
per saved tensor. On a CPU run the host *is* the device: the copy is made all the same (as save_on_cpu makes it),
and the bytes it holds are the ones that would live in host memory on a GPU. `host_live_bytes` / `host_peak_bytes`
count them (unique storages, freed when backward releases them), and `packing` is true while a host copy is being
made, so that a memory tracker (measure/finetune.py) books those bytes as host memory, not the device's. The values are copied exactly, so a
run with offloading computes the same losses bit for bit.
"""

from __future__ import annotations

import weakref

import torch
from torch import nn


class ActivationOffload:
    """`with ActivationOffload(model):` around a forward pass (module docstring); reusable across steps."""

    def __init__(self, model: nn.Module, pin_memory: bool | None = None):
        self.model = model
        self.pin_memory = pin_memory
        self.host_live_bytes = 0
        self.host_peak_bytes = 0
        self.offloaded_tensors = 0
        self.packing = False
        self._hooks = None
        self._kept: set[int] = set()

    def __enter__(self) -> "ActivationOffload":
        self._kept = {t.untyped_storage().data_ptr() for t in (*self.model.parameters(), *self.model.buffers())
                      if type(t) in (torch.Tensor, nn.Parameter) and t.layout == torch.strided}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._hooks.__exit__(*exc)
        self._hooks = None

    def _pack(self, tensor: torch.Tensor):
        if (type(tensor) not in (torch.Tensor, nn.Parameter) or tensor.layout != torch.strided
                or tensor.untyped_storage().data_ptr() in self._kept or tensor.device.type == "meta"):
            return tensor
        pin = self.pin_memory if self.pin_memory is not None else tensor.device.type == "cuda"
        self.packing = True            # what is allocated now is host memory (a memory tracker asks)
        try:
            host = torch.empty_like(tensor, device="cpu", pin_memory=pin)
            host.copy_(tensor)
        finally:
            self.packing = False
        self._count(host)
        return tensor.device, host, pin

    def _unpack(self, packed):
        if isinstance(packed, torch.Tensor):
            return packed
        device, host, pin = packed
        return host.to(device, non_blocking=pin)

    def _count(self, host: torch.Tensor) -> None:
        nbytes = host.untyped_storage().nbytes()
        self.host_live_bytes += nbytes
        self.host_peak_bytes = max(self.host_peak_bytes, self.host_live_bytes)
        self.offloaded_tensors += 1
        weakref.finalize(host.untyped_storage(), self._freed, nbytes)

    def _freed(self, nbytes: int) -> None:
        self.host_live_bytes -= nbytes

    def reset_peak(self) -> None:
        self.host_peak_bytes = self.host_live_bytes
