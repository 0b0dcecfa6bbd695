"""Global-norm gradient clipping against torch.nn.utils.clip_grad_norm_ (the independent reference)."""

import pytest
import torch

from trainledger.errors import TrainledgerError
from trainledger.optim import clip_grad_norm_


def _params_with_grads(scale: float):
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.zeros(shape)) for shape in [(5, 3), (7,), (2, 2, 2), (4,)]]
    for p in params[:3]:
        p.grad = scale * torch.randn_like(p)
    return params  # the last one has no gradient and must be skipped


@pytest.mark.parametrize("scale, max_norm", [(1.0, 0.5), (1.0, 1.0), (10.0, 1.0), (0.01, 1.0), (3.0, 100.0)],
                         ids=["clipped", "near-limit", "far-above", "below", "well-below"])
def test_matches_torch(scale, max_norm):
    ours, theirs = _params_with_grads(scale), _params_with_grads(scale)
    norm = clip_grad_norm_(ours, max_norm)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert norm.item() == pytest.approx(expected.item(), rel=1e-6)
    for a, b in zip(ours, theirs):
        if b.grad is None:
            assert a.grad is None
        else:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-6, atol=0)


def test_norm_after_clipping_is_max_norm():
    params = _params_with_grads(10.0)
    before = clip_grad_norm_(params, 2.0)
    after = torch.sqrt(sum((p.grad ** 2).sum() for p in params if p.grad is not None))
    assert before.item() > 2.0
    assert after.item() == pytest.approx(2.0, rel=1e-5)


def test_no_grads_gives_zero_and_bad_max_norm_raises():
    assert clip_grad_norm_([torch.nn.Parameter(torch.ones(2))], 1.0).item() == 0.0
    with pytest.raises(TrainledgerError, match="max_norm"):
        clip_grad_norm_(_params_with_grads(1.0), 0.0)
