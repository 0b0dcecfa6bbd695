"""Memory layout of a tensor from its shape and dtype alone: row-major strides, bytes, and what views do to them. No torch.

A PyTorch tensor is a pointer into a storage plus metadata: shape, stride (elements to skip per index step,
one per dimension) and a storage offset (CS336 Lecture 2, "tensor_storage"; PyTorch docs, torch.Tensor.stride).
A freshly allocated tensor is row-major: stride[i] = Π shape[i+1:]. Transposes and slices are views: they
change shape, stride and offset but never the storage, so they cost no memory; `.contiguous()` on a
non-contiguous view allocates a new row-major storage of the view's bytes.

The lecture's GPT-3 FFN matrix [49152, 12288] in fp32 is 49152·12288·4 = 2,415,919,104 bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainledger.errors import TrainledgerError
from trainledger.specs.dtypes import get_dtype


def numel(shape: tuple[int, ...]) -> int:
    """Number of elements (count): the product of the shape (1 for a scalar)."""
    return math.prod(shape)


def row_major_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Strides in elements of a freshly allocated (C-order) tensor: stride[i] = Π shape[i+1:]."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)   # PyTorch gives size-0 dims the stride of size 1
    return tuple(reversed(strides))


def tensor_bytes(shape: tuple[int, ...], dtype: str) -> float:
    """Bytes of a tensor: numel × bytes per element of `dtype` (int4 packs two per byte and rounds up)."""
    element_bytes = get_dtype(dtype).bytes
    total = numel(shape) * element_bytes
    return math.ceil(total) if element_bytes < 1 else int(total)


def is_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True when the strides are row-major for this shape, ignoring size-1 dimensions (PyTorch's `is_contiguous`)."""
    if numel(shape) == 0:
        return True
    expected = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size == 1:
            continue
        if stride != expected:
            return False
        expected *= size
    return True


def can_flatten_as_view(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True when `.view(-1)` works without a copy: every non-size-1 dimension steps exactly over the next one.

    stride[i] == stride[j]·shape[j] for consecutive dimensions i, j of size > 1 (a single evenly spaced run of
    elements). A contiguous tensor passes; so does a column x[:, 0]; a transpose or x[::2, :] does not, and
    `.reshape(-1)` then copies.
    """
    dims = [(size, stride) for size, stride in zip(shape, strides) if size != 1]
    if numel(shape) == 0:
        return True
    return all(outer_stride == inner_stride * inner_size
               for (_, outer_stride), (inner_size, inner_stride) in zip(dims, dims[1:]))


@dataclass(frozen=True)
class Layout:
    """Shape, strides (elements) and storage offset (elements) of one view of a storage."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0

    @classmethod
    def row_major(cls, shape: tuple[int, ...]) -> "Layout":
        return cls(tuple(shape), row_major_strides(tuple(shape)), 0)

    def transpose(self, dim0: int, dim1: int) -> "Layout":
        """The layout of `x.transpose(dim0, dim1)`: the two sizes and strides swap; nothing moves."""
        n = len(self.shape)
        d0, d1 = _dim(dim0, n, "--transpose"), _dim(dim1, n, "--transpose")
        shape, strides = list(self.shape), list(self.strides)
        shape[d0], shape[d1] = shape[d1], shape[d0]
        strides[d0], strides[d1] = strides[d1], strides[d0]
        return Layout(tuple(shape), tuple(strides), self.offset)

    def index(self, items: list) -> "Layout":
        """The layout of `x[items]`: each item an int (removes the dimension) or a slice (start, stop, step > 0).

        A slice start:stop:step of a dimension with stride s gives size ⌈(stop - start)/step⌉, stride s·step and
        moves the offset by start·s; an integer index i moves the offset by i·s and drops the dimension.
        """
        if len(items) > len(self.shape):
            raise TrainledgerError(f"too many indices ({len(items)}) for a {len(self.shape)}-dimensional tensor (--slice)")
        shape, strides, offset = [], [], self.offset
        for d, (size, stride) in enumerate(zip(self.shape, self.strides)):
            item = items[d] if d < len(items) else slice(None)
            if isinstance(item, int):
                if not -size <= item < size:
                    raise TrainledgerError(f"index {item} is out of range for dimension {d} of size {size} (--slice)")
                offset += (item % size) * stride
                continue
            if item.step is not None and item.step <= 0:
                raise TrainledgerError(f"slice step must be positive, got {item.step} (--slice)")
            start, stop, step = item.indices(size)
            length = max(0, -(-(stop - start) // step))
            offset += start * stride          # also for an empty slice, as PyTorch does (start is clamped)
            shape.append(length)
            strides.append(stride * step)
        return Layout(tuple(shape), tuple(strides), offset)

    @property
    def numel(self) -> int:
        return numel(self.shape)

    @property
    def contiguous(self) -> bool:
        return is_contiguous(self.shape, self.strides)


def _whole(x: float) -> int | float:
    """x as an int when it is whole (4.0 -> 4), else unchanged (int4: 0.5)."""
    return int(x) if float(x).is_integer() else x


def _dim(d: int, n: int, flag: str) -> int:
    if not -n <= d < n:
        raise TrainledgerError(f"dimension {d} is out of range for a {n}-dimensional tensor ({flag})", flag)
    return d % n


def layout_report(shape: tuple[int, ...], dtype: str, transpose: tuple[int, int] | None = None,
                  index: list | None = None) -> dict:
    """Bytes, strides and contiguity of a tensor of `shape`/`dtype`, and of its view x.transpose(*transpose)[index].

    Keys (base units: bytes; strides and offsets in elements unless `_bytes`): dtype, element_bytes, shape,
    numel, storage_bytes (the allocation: numel × element size), and for the view after the optional
    transpose and index: view_shape, view_numel, view_bytes (what the view addresses; also under `bytes`),
    stride, stride_bytes,
    storage_offset, contiguous, view_flat_possible (can `.view(-1)` avoid a copy), contiguous_copy_bytes
    (what `.contiguous()` allocates: 0 when already contiguous).
    """
    if any((not isinstance(s, int)) or s < 0 for s in shape):
        raise TrainledgerError(f"shape sizes must be non-negative integers, got {list(shape)} (--shape)")
    dt = get_dtype(dtype)
    base = Layout.row_major(tuple(shape))
    view = base
    if transpose is not None:
        view = view.transpose(*transpose)
    if index:
        view = view.index(index)
    storage_bytes = tensor_bytes(base.shape, dt.name)
    view_bytes = tensor_bytes(view.shape, dt.name)
    return {
        "dtype": dt.name, "element_bytes": _whole(dt.bytes), "shape": list(base.shape), "numel": base.numel,
        "storage_bytes": storage_bytes, "row_major_stride": list(base.strides),
        "view_shape": list(view.shape), "view_numel": view.numel, "view_bytes": view_bytes, "bytes": view_bytes,
        "stride": list(view.strides), "stride_bytes": [_whole(s * dt.bytes) for s in view.strides],
        "storage_offset": view.offset, "contiguous": view.contiguous,
        "view_flat_possible": can_flatten_as_view(view.shape, view.strides),
        "contiguous_copy_bytes": 0 if view.contiguous else view_bytes,
    }
