"""Tensors as memory: bytes, shared storage, strides and copies, measured on real torch tensors; device choice.

The pure counterpart (shape + dtype only, no torch) is `trainledger.account.counting.tensor`; `inspect_layout`
is how tests and `trainledger tensor --torch` check it against PyTorch.
"""

from __future__ import annotations

import torch

from trainledger.errors import TrainledgerError

# trainledger dtype names (specs/dtypes.py) -> torch dtypes. tf32 is an fp32 tensor (TF32 is a matmul mode).
TORCH_DTYPES = {
    "fp64": "float64", "fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16",
    "fp8-e4m3": "float8_e4m3fn", "fp8-e5m2": "float8_e5m2", "int8": "int8",
}


def torch_dtype(name: str, flag: str = "--dtype") -> torch.dtype:
    """The torch.dtype that stores trainledger dtype `name` (aliases allowed); an error for int4 (no torch dtype)."""
    from trainledger.specs.dtypes import get_dtype

    canonical = get_dtype(name, flag).name
    if canonical not in TORCH_DTYPES:
        raise TrainledgerError(f"dtype {canonical!r} has no torch tensor type ({flag}); use one of {', '.join(TORCH_DTYPES)}")
    return getattr(torch, TORCH_DTYPES[canonical])


def local(tensor: torch.Tensor) -> torch.Tensor:
    """A plain tensor: the local value of a (replicated) DTensor, the tensor itself otherwise."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes the tensor's elements take: numel × element_size (a view's bytes, not its storage's)."""
    return t.numel() * t.element_size()


def storage_bytes(t: torch.Tensor) -> int:
    """Bytes of the whole storage the tensor points into (≥ tensor_bytes for a slice)."""
    return t.untyped_storage().nbytes()


def same_storage(x: torch.Tensor, y: torch.Tensor) -> bool:
    """True when x and y point into the same storage (CS336 Lecture 2: compare untyped_storage().data_ptr()).

    On the meta device every data_ptr is 0, so there the test is whether one is a view of the other's base.
    """
    if x.device.type == "meta" or y.device.type == "meta":
        return (x._base if x._base is not None else x) is (y._base if y._base is not None else y)
    return x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()


def _copies(t: torch.Tensor, op) -> bool | None:
    """True if op(t) allocated new storage, False if it is a view, None if op raised (e.g. view on a transpose)."""
    try:
        out = op(t)
    except RuntimeError:
        return None
    return not same_storage(t, out)


def inspect_layout(t: torch.Tensor) -> dict:
    """Layout of a real tensor: shape, stride, storage offset, contiguity, bytes, and which reshaping ops copy.

    Keys: shape, stride, storage_offset (elements), dtype, device, contiguous, element_bytes, numel,
    view_bytes (numel × element size), storage_bytes (the whole storage), and, determined by running each
    op and comparing storages: view_flat_possible (`.view(-1)` succeeds), reshape_copies (`.reshape(-1)`
    allocates), contiguous_copies (`.contiguous()` allocates).
    """
    view_copies = _copies(t, lambda x: x.view(-1))
    return {
        "shape": list(t.shape), "stride": list(t.stride()), "storage_offset": t.storage_offset(),
        "dtype": str(t.dtype).removeprefix("torch."), "device": str(t.device), "contiguous": t.is_contiguous(),
        "element_bytes": t.element_size(), "numel": t.numel(), "view_bytes": tensor_bytes(t),
        "storage_bytes": storage_bytes(t), "view_flat_possible": view_copies is not None,
        "reshape_copies": _copies(t, lambda x: x.reshape(-1)), "contiguous_copies": _copies(t, lambda x: x.contiguous()),
    }


def pick_device() -> torch.device:
    """The best available device: CUDA, then Apple MPS, then CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")
