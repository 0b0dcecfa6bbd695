"""Precision recipes as the training loop applies them (names and byte counts live in specs/recipes.py).

    fp32       fp32 weights, grads, states and matmuls
    amp-bf16   fp32 weights, grads, states; torch.autocast runs matmuls in bf16
    amp-fp16   as amp-bf16 in fp16, with a GradScaler: the loss is multiplied by a scale so small fp16
               gradients do not flush to zero; a step whose gradients overflow is skipped and the scale halved
    bf16       everything in bf16 (model cast with .to(torch.bfloat16)); optimizer states follow the params

Source: PyTorch AMP documentation (torch.amp.autocast, torch.amp.GradScaler).
"""

from __future__ import annotations

import contextlib

import torch

from trainledger.specs.recipes import get_recipe

AUTOCAST_DTYPES = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}


def param_dtype(precision: str) -> torch.dtype:
    """The dtype the model's parameters are kept in under `precision`."""
    get_recipe(precision)
    return torch.bfloat16 if precision == "bf16" else torch.float32


def autocast(precision: str, device: torch.device):
    """The context a forward pass runs in: torch.autocast for the amp recipes, nothing otherwise."""
    dtype = AUTOCAST_DTYPES.get(precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """A GradScaler for amp-fp16 (None for every other recipe)."""
    if precision != "amp-fp16":
        return None
    return torch.amp.GradScaler(device.type)
