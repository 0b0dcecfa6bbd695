"""tensors.py against PyTorch itself, and the pure layout arithmetic (account/counting/tensor.py) against real tensors."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainledger.account.counting.tensor import layout_report
from trainledger.tensors import inspect_layout, pick_device, same_storage, tensor_bytes, torch_dtype


def test_lecture_same_storage_examples():
    # CS336 Lecture 2, tensor_slicing: row, column, view and transpose share storage; contiguous() copies
    x = torch.tensor([[1.0, 2, 3], [4, 5, 6]])
    for y in (x[0], x[:, 1], x.view(3, 2), x.transpose(1, 0)):
        assert same_storage(x, y)
    assert not same_storage(x, x.transpose(1, 0).contiguous().view(2, 3))
    assert not same_storage(x, x.clone())


def test_tensor_bytes_is_numel_times_element_size():
    assert tensor_bytes(torch.zeros(4, 8, 32)) == 4096                 # Lecture 2: 4·8·32 fp32 values
    assert tensor_bytes(torch.empty(49152, 12288, device="meta")) == 2_415_919_104
    assert tensor_bytes(torch.zeros(4, 8, 32, dtype=torch.bfloat16)) == 2048


def test_inspect_layout_of_a_transpose():
    x = torch.arange(12.0).view(3, 4)
    info = inspect_layout(x.T)
    assert info["stride"] == [1, 4] and not info["contiguous"]
    assert info["view_flat_possible"] is False           # view(-1) raises
    assert info["reshape_copies"] is True and info["contiguous_copies"] is True
    info = inspect_layout(x[1:])
    assert info["storage_offset"] == 4 and info["storage_bytes"] == 48 and info["view_bytes"] == 32
    assert info["reshape_copies"] is False and info["contiguous_copies"] is False


def test_inspect_layout_on_meta_matches_cpu():
    for make in (lambda d: torch.empty(3, 4, device=d).T, lambda d: torch.empty(3, 4, device=d)[:, 1],
                 lambda d: torch.empty(3, 4, device=d)[::2]):
        cpu, meta = inspect_layout(make("cpu")), inspect_layout(make("meta"))
        assert {k: v for k, v in cpu.items() if k != "device"} == {k: v for k, v in meta.items() if k != "device"}


def test_torch_dtype_names():
    assert torch_dtype("bf16") is torch.bfloat16 and torch_dtype("tf32") is torch.float32
    assert torch_dtype("fp8") is torch.float8_e4m3fn
    with pytest.raises(Exception, match="int4"):
        torch_dtype("int4")


def test_pick_device_order():
    device = pick_device()
    if torch.cuda.is_available():
        assert device.type == "cuda"
    elif getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        assert device.type == "mps"
    else:
        assert device.type == "cpu"


def _slice_item(size):
    return st.one_of(
        st.integers(-size, size - 1) if size else st.nothing(),
        st.builds(slice, st.one_of(st.none(), st.integers(-size - 1, size + 1)),
                  st.one_of(st.none(), st.integers(-size - 1, size + 1)), st.one_of(st.none(), st.integers(1, 3))),
    )


@st.composite
def _cases(draw):
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=4)))
    transpose = None
    if len(shape) >= 2 and draw(st.booleans()):
        transpose = tuple(draw(st.lists(st.integers(0, len(shape) - 1), min_size=2, max_size=2)))
    sizes = list(shape)
    if transpose:
        sizes[transpose[0]], sizes[transpose[1]] = sizes[transpose[1]], sizes[transpose[0]]
    n_items = draw(st.integers(0, len(shape)))
    index = [draw(_slice_item(sizes[d])) for d in range(n_items)]
    return shape, transpose, index


@settings(max_examples=300, deadline=None)
@given(case=_cases(), dtype=st.sampled_from(["fp32", "bf16", "int8", "fp64"]))
def test_pure_layout_matches_torch(case, dtype):
    """Shape, strides, offset, contiguity and bytes predicted without torch equal those of the real view."""
    shape, transpose, index = case
    predicted = layout_report(shape, dtype, transpose, index)
    x = torch.empty(shape, dtype=torch_dtype(dtype))
    if transpose:
        x = x.transpose(*transpose)
    if index:
        x = x[tuple(index)]
    measured = inspect_layout(x)
    assert measured["shape"] == predicted["view_shape"]
    assert measured["view_bytes"] == predicted["view_bytes"]
    assert measured["storage_bytes"] == predicted["storage_bytes"]
    assert measured["contiguous"] == predicted["contiguous"]
    assert measured["view_flat_possible"] == predicted["view_flat_possible"]
    assert measured["stride"] == predicted["stride"]
    assert measured["storage_offset"] == predicted["storage_offset"]
