"""account/counting/tensor.py: pure strides and bytes from a shape and dtype (the torch cross-check is tests/test_tensors.py)."""

from __future__ import annotations

import pytest

from trainledger.account.counting.tensor import (Layout, can_flatten_as_view, is_contiguous, layout_report, row_major_strides,
                                        tensor_bytes)
from trainledger.errors import TrainledgerError


def test_lecture_gpt3_ffn_matrix_bytes():
    # CS336 Lecture 2 (facts.md): one GPT-3 FFN matrix [49152, 12288] in fp32 is 2,415,919,104 bytes (2.25 GiB)
    assert tensor_bytes((49152, 12288), "fp32") == 2_415_919_104
    assert tensor_bytes((49152, 12288), "bf16") == 2_415_919_104 // 2
    assert tensor_bytes((49152, 12288), "fp8") == 2_415_919_104 // 4


@pytest.mark.parametrize("shape, dtype, expected", [
    ((4, 8, 32), "fp32", 4 * 8 * 32 * 4),      # the lecture's x = torch.zeros(4, 8, 32): 4 bytes each
    ((3,), "int4", 2),                          # int4 packs two per byte, rounded up
    ((), "fp64", 8),                            # a scalar is one element
    ((0, 5), "fp16", 0),                        # empty
])
def test_tensor_bytes_table(shape, dtype, expected):
    assert tensor_bytes(shape, dtype) == expected


def test_row_major_strides_lecture_example():
    # Lecture 2 tensor_storage: x of shape (4, 4) has stride (4, 1); element (r, c) is at r·4 + c
    assert row_major_strides((4, 4)) == (4, 1)
    assert row_major_strides((2, 3, 5)) == (15, 5, 1)
    assert row_major_strides(()) == ()


def test_transpose_swaps_strides_and_breaks_contiguity():
    view = Layout.row_major((2, 3)).transpose(0, 1)
    assert view.shape == (3, 2) and view.strides == (1, 3)
    assert not view.contiguous
    assert not can_flatten_as_view(view.shape, view.strides)   # the lecture: y.view(2, 3) fails after a transpose


@pytest.mark.parametrize("index, shape, strides, offset, contiguous", [
    ([0], (3,), (1,), 0, True),                             # x[0]: a row, contiguous
    ([slice(None), 1], (2,), (3,), 1, False),               # x[:, 1]: a column, stride 3, offset 1
    ([slice(1, 2)], (1, 3), (3, 1), 3, True),               # x[1:2]
    ([slice(None), slice(None, None, 2)], (2, 2), (3, 2), 0, False),
])
def test_slices_of_a_2x3_matrix(index, shape, strides, offset, contiguous):
    view = Layout.row_major((2, 3)).index(index)
    assert (view.shape, view.strides, view.offset, view.contiguous) == (shape, strides, offset, contiguous)


def test_size_one_dimensions_do_not_break_contiguity():
    assert is_contiguous((1, 4), (99, 1))
    assert can_flatten_as_view((3, 1), (4, 7))


def test_layout_report_of_transposed_slice():
    report = layout_report((49152, 12288), "fp32", transpose=(0, 1), index=[slice(0, 100)])
    assert report["storage_bytes"] == 2_415_919_104
    assert report["view_shape"] == [100, 49152]
    assert report["view_bytes"] == 100 * 49152 * 4
    assert report["stride"] == [1, 12288] and report["stride_bytes"] == [4, 49152]
    assert report["contiguous"] is False and report["contiguous_copy_bytes"] == report["view_bytes"]


@pytest.mark.parametrize("call, match", [
    (lambda: layout_report((2, 3), "fp32", transpose=(0, 2)), "--transpose"),
    (lambda: layout_report((2, 3), "fp32", index=[5]), "out of range"),
    (lambda: layout_report((2, 3), "fp32", index=[0, 0, 0]), "too many"),
    (lambda: layout_report((2, 3), "fp33"), "unknown dtype"),
])
def test_bad_input_is_a_trainledger_error(call, match):
    with pytest.raises(TrainledgerError, match=match):
        call()
