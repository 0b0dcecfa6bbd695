"""Frozen base weights in 4 or 8 bits for QLoRA-style fine-tuning, through torchao (pip install 'trainledger[finetune]').

    nf4-dq   NF4 (Dettmers et al. 2023, "QLoRA", arXiv:2305.14314, Sec. 3): 4-bit codes of a normal-float grid in
             blocks of 64 weights, each block's absmax double-quantized to int8 in blocks of 256 scalers (with one
             fp32 factor per scaler block and one fp32 mean). torchao's `to_nf4(w, block_size=64,
             scaler_block_size=256)`, as torchtune's QLoRA builds it; the forward and backward run through
             torchao's `linear_nf4`, which dequantizes the weight to the input's dtype in each pass (the copy
             lives only inside the matmul). A weight's element count must be a multiple of 64·256 = 16,384.
    int8     per-output-row symmetric int8 (torchao's Int8WeightOnlyConfig: one fp32 scale and an int8 zero point
             per row), dequantized in each matmul by DequantizedLinear (which saves the int8 weight, not a copy).
    nf4      plain NF4 (an fp32 absmax per 64-block, no double quantization) is bitsandbytes'
             `compress_statistics=False`; torchao always double-quantizes, so `train` refuses it by name.

Storage (bytes; what measure/finetune.py counts, torchao's own tensors): NF4 codes numel/2 (uint8, two codes a byte),
int8 scalers numel/64, fp32 factors numel/(64·256)·4, the fp32 mean 4 and a 16-entry lookup table in the weight's
dtype; int8: numel + out_features·(4 + 1).

The quantized weight is a torch.nn.Parameter with requires_grad=False: the base never trains. Only the layers'
input gradient flows through them (autograd saves the quantized weight, not a dequantized copy).
"""

from __future__ import annotations

import importlib
import logging

import torch
import torch.nn.functional as F
from torch import nn

from trainledger.errors import TrainledgerError

QUANTIZE = ("none", "nf4", "nf4-dq", "int8")
NF4_BLOCK, NF4_SCALER_BLOCK = 64, 256              # torchtune's and the QLoRA paper's block sizes
EXTRA = "pip install 'trainledger[finetune]'"
# loggers torchao's import writes warnings to (its optional CUDA kernels, torch's pytree registrations): silenced
# while importing, so that a CPU run's stderr holds only what it says itself
_NOISY = ("torchao", "torch.utils._pytree")


def torchao_module(name: str, needed_by: str):
    """`importlib.import_module(name)` for a torchao module, quietly; a one-line error naming the extra when missing."""
    levels = {logger: logging.getLogger(logger).level for logger in _NOISY}
    try:
        for logger in _NOISY:
            logging.getLogger(logger).setLevel(logging.ERROR)
        return importlib.import_module(name)
    except ImportError:
        raise TrainledgerError(f"{needed_by} needs torchao, which is not installed: {EXTRA}") from None
    finally:
        for logger, level in levels.items():
            logging.getLogger(logger).setLevel(level)


def nf4_module(needed_by: str = "--quantize nf4-dq"):
    """torchao's NF4 module (`to_nf4`, `linear_nf4`, `NF4Tensor`), at its 0.18 home or the older torchao.dtypes one."""
    try:
        return torchao_module("torchao.quantization.quantize_.workflows.nf4.nf4_tensor", needed_by)
    except TrainledgerError:
        return torchao_module("torchao.dtypes.nf4tensor", needed_by)


def check_quantize(kind: str, flag: str = "--quantize") -> None:
    """Raises a one-line TrainledgerError for a --quantize that cannot run here (unknown, plain nf4, torchao missing)."""
    if kind not in QUANTIZE:
        raise TrainledgerError(f"unknown {flag} {kind!r}. Known: {', '.join(QUANTIZE)}")
    if kind == "nf4":
        raise TrainledgerError(f"{flag} nf4 (one fp32 absmax per 64 weights) is bitsandbytes' storage, which `train` "
                               "does not run; torchao's NF4 always double-quantizes its constants: use --quantize nf4-dq")
    needed_by = f"{flag} {kind}" if flag == "--quantize" else flag
    if kind == "nf4-dq":
        nf4_module(needed_by)
    elif kind == "int8":
        torchao_module("torchao.quantization", needed_by)


class DequantizedLinear(torch.autograd.Function):
    """y = x·dequant(W)ᵀ, saving only the quantized W for backward (as torchao's LinearNF4 does for NF4): without it
    torchao's Int8Tensor would let autograd keep a dequantized copy of every frozen weight until backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(weight)
        return F.linear(x, weight.dequantize().to(x.dtype))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (weight,) = ctx.saved_tensors
        return grad @ weight.dequantize().to(grad.dtype), None


class QuantizedLinear(nn.Module):
    """A frozen nn.Linear whose weight is stored quantized (module docstring); y = x·dequant(W)ᵀ + b."""

    def __init__(self, linear: nn.Linear, kind: str, name: str = "a Linear"):
        super().__init__()
        self.in_features, self.out_features, self.kind = linear.in_features, linear.out_features, kind
        weight = linear.weight.detach()
        if kind == "nf4-dq":
            block = NF4_BLOCK * NF4_SCALER_BLOCK
            if weight.numel() % block:
                raise TrainledgerError(f"--quantize nf4-dq: {name} has {weight.numel():,} weights; torchao's NF4 with "
                                       f"double quantization needs a multiple of {block:,} (blocks of {NF4_BLOCK} "
                                       f"weights × {NF4_SCALER_BLOCK} scalers): use --quantize int8 or none")
            self._linear = nf4_module().linear_nf4
            quantized = nf4_module().to_nf4(weight.contiguous(), NF4_BLOCK, NF4_SCALER_BLOCK)
        elif kind == "int8":
            quantization = torchao_module("torchao.quantization", "--quantize int8")
            holder = nn.Linear(self.in_features, self.out_features, bias=False, device="meta")
            holder.weight = nn.Parameter(weight.clone(), requires_grad=False)
            quantization.quantize_(holder, quantization.Int8WeightOnlyConfig())
            quantized = holder.weight.detach()
            self._linear = DequantizedLinear.apply
        else:
            raise TrainledgerError(f"unknown --quantize {kind!r}. Known: nf4-dq, int8")
        self.weight = nn.Parameter(quantized, requires_grad=False)
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self._linear(x, self.weight)
        return out if self.bias is None else out + self.bias

    @torch.no_grad()
    def dequantized_weight(self) -> torch.Tensor:
        """The weight as the matmuls see it, a plain tensor in the dtype it was quantized from."""
        if self.kind == "nf4-dq":
            return self.weight.get_original_weight()
        return self.weight.dequantize()

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, quantize={self.kind}"


def inner_tensors(tensor: torch.Tensor) -> dict[str, torch.Tensor]:
    """{attribute: plain tensor} behind a tensor subclass (torchao's NF4, Int8, 8-bit optimizer states), through its
    __tensor_flatten__; {"": tensor} for a plain tensor. Nested subclasses are flattened with dotted names."""
    if type(tensor) is torch.Tensor or type(tensor) is nn.Parameter or not hasattr(tensor, "__tensor_flatten__"):
        return {"": tensor}
    out = {}
    for attribute in tensor.__tensor_flatten__()[0]:
        for sub, plain in inner_tensors(getattr(tensor, attribute)).items():
            out[f"{attribute}.{sub}" if sub else attribute] = plain
    return out


# the inner tensors that hold a quantized weight's codes; every other inner tensor is a quantization constant
CODE_TENSORS = ("quantized_data", "qdata")


def quantized_bytes(tensor: torch.Tensor) -> tuple[int, int]:
    """(bytes of the codes, bytes of the quantization constants) of a quantized weight; (bytes, 0) for a plain one."""
    codes = constants = 0
    for name, plain in inner_tensors(tensor).items():
        nbytes = plain.untyped_storage().nbytes() if plain.layout == torch.strided else 0
        if name in ("", *CODE_TENSORS):
            codes += nbytes
        else:
            constants += nbytes
    return codes, constants


def quantize_frozen_linears(model: nn.Module, kind: str, skip=("lm_head",)) -> list[str]:
    """Replaces every frozen nn.Linear of `model` (inside LoRA wrappers too) by a QuantizedLinear; the names replaced.

    The output head (`skip`) keeps its dtype, as transformers' bitsandbytes loading keeps lm_head out of 4 bits.
    Embeddings and norms are not Linears and keep theirs."""
    if kind == "none":
        return []
    check_quantize(kind)
    replaced = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full = f"{name}.{child_name}" if name else child_name
            if type(child) is nn.Linear and not set(full.split(".")) & set(skip) and not child.weight.requires_grad:
                setattr(module, child_name, QuantizedLinear(child, kind, full))
                replaced.append(full)
    return replaced
