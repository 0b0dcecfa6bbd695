"""Precision recipes as a training step applies them: train/, measure/profile and the comm counter import them from
here (names and byte counts live in specs/recipes.py).

    fp32       fp32 weights, grads, states and matmuls
    amp-bf16   fp32 weights, grads, states; torch.autocast runs matmuls in bf16
    amp-fp16   as amp-bf16 in fp16, with a GradScaler: the loss is multiplied by a scale so small fp16
               gradients do not flush to zero; a step whose gradients overflow is skipped and the scale halved
    bf16       everything in bf16 (model cast with .to(torch.bfloat16)); optimizer states follow the params
    mixed-bf16 bf16 weights and grads for forward/backward; an fp32 master copy of every weight, which the
               optimizer steps (fp32 states) and which is copied back into the bf16 weights after each step
    mixed-fp16 as mixed-bf16 in fp16, with a GradScaler on the fp32 master grads (loss scaling, skipped steps)

Sources: PyTorch AMP documentation (torch.amp.autocast, torch.amp.GradScaler); Micikevicius et al. 2018,
"Mixed Precision Training" (arXiv:1710.03740), Sec. 3.1 (fp32 master copy) and 3.2 (loss scaling).
"""

from __future__ import annotations

import contextlib

import torch

from trainledger.specs.recipes import get_recipe

# fp8-rowwise / fp8-cs (train/fp8.py): fp32 weights under bf16 autocast, torchao's Float8Linear casting to FP8
AUTOCAST_DTYPES = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16, "fp8-rowwise": torch.bfloat16,
                   "fp8-cs": torch.bfloat16}


PARAM_DTYPES = {"bf16": torch.bfloat16, "mixed-bf16": torch.bfloat16, "mixed-fp16": torch.float16}
MASTER_COPY = ("mixed-bf16", "mixed-fp16")      # recipes whose optimizer steps an fp32 master copy


def param_dtype(precision: str) -> torch.dtype:
    """The dtype the model's parameters are kept in under `precision`."""
    get_recipe(precision)
    return PARAM_DTYPES.get(precision, torch.float32)


def autocast(precision: str, device: torch.device):
    """The context a forward pass runs in: torch.autocast for the amp recipes, nothing otherwise."""
    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for amp-fp16 and mixed-fp16 (None for every other recipe)."""
    if precision not in ("amp-fp16", "mixed-fp16"):
        return None
    return torch.amp.GradScaler(device.type)


class MasterParams:
    """The fp32 master copy of a 16-bit model's parameters (mixed-bf16, mixed-fp16).

    The optimizer is built over `self.params` (fp32); after backward, to_master_grads() moves the model's
    16-bit grads there as fp32, and after the optimizer step to_model() rounds the masters into the model.
    `fp32_init` is the model's fp32 initialization (before the cast), so no precision is lost at step 0.
    """

    def __init__(self, model_params: list[torch.Tensor], fp32_init: list[torch.Tensor]):
        self.model_params = model_params
        self.params = [torch.nn.Parameter(init.detach().to(device=p.device, dtype=torch.float32).clone())
                       for p, init in zip(model_params, fp32_init, strict=True)]

    @torch.no_grad()
    def to_master_grads(self) -> None:
        for p, master in zip(self.model_params, self.params):
            master.grad = None if p.grad is None else p.grad.float()
            p.grad = None

    @torch.no_grad()
    def to_model(self) -> None:
        for p, master in zip(self.model_params, self.params):
            p.copy_(master)

    def state_dict(self) -> list[torch.Tensor]:
        return [master.detach().cpu() for master in self.params]

    @torch.no_grad()
    def load_state_dict(self, tensors: list[torch.Tensor]) -> None:
        if len(tensors) != len(self.params):
            raise ValueError(f"{len(tensors)} master tensors for {len(self.params)} parameters")
        for master, saved in zip(self.params, tensors):
            if saved.shape != master.shape or saved.dtype != torch.float32:
                raise ValueError(f"master tensor of shape {tuple(saved.shape)} {saved.dtype}, expected "
                                 f"{tuple(master.shape)} float32")
            master.copy_(saved)
        self.to_model()
