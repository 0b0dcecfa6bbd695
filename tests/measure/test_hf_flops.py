"""measure.flops for the kernels transformers' MoE models run: aten._grouped_mm, which torch's counter counts as 0."""

import pytest
import torch

from trainledger.measure.flops import count_step_flops


def test_grouped_mm_counted_forward_and_backward():
    """Each of M rows meets one group's K×N weight: 2·M·K·N forward and 2× that backward (input and weight
    gradients), as the same rows through one dense matmul."""
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no _grouped_mm")
    M, K, N, G = 12, 8, 16, 3
    a = torch.randn(M, K, requires_grad=True)
    b = torch.randn(G, K, N, requires_grad=True)
    offs = torch.tensor([4, 9, 12], dtype=torch.int32)
    step = count_step_flops(lambda: torch._grouped_mm(a, b, offs=offs).pow(2).sum())
    assert step.forward.total == 2 * M * K * N
    assert step.backward.total == 4 * M * K * N


def test_grouped_mm_on_fake_tensors_in_fp32():
    """Its meta kernel takes bf16 only; measure.compare.GroupedMmShapes gives fp32 fake tensors their shapes."""
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this torch has no _grouped_mm")
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainledger.measure.compare import GroupedMmShapes
    from trainledger.measure.flops import OpFlopCounter
    with FakeTensorMode(), GroupedMmShapes():
        a = torch.randn(12, 8, requires_grad=True)
        b = torch.randn(3, 8, 16, requires_grad=True)
        offs = torch.tensor([4, 9, 12], dtype=torch.int32)
        with OpFlopCounter() as counter:
            out = torch._grouped_mm(a, b, offs=offs)
            out.sum().backward()
    assert out.shape == (12, 16) and b.grad.shape == (3, 8, 16) and a.grad.shape == (12, 8)
    assert counter.total == 6 * 12 * 8 * 16
