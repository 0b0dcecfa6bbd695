"""The lecture's Linear and Cruncher: parameter count 8,256, output shape (B,), init scale, FLOPs."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from trainledger.account.counting.params import param_counts
from trainledger.models import Cruncher, Linear
from trainledger.specs import PRESETS


def test_cruncher_params_match_lecture():
    # CS336 Lecture 2 (facts.md): Cruncher(dim=64, num_layers=2) has D·D + D·D + D = 8,256 parameters
    model = Cruncher(dim=64, num_layers=2)
    assert model.n_params() == 8256 == param_counts(PRESETS["cruncher"])["n_params"]
    assert [(name, p.numel()) for name, p in model.state_dict().items()] == [
        ("layers.0.weight", 64 * 64), ("layers.1.weight", 64 * 64), ("final.weight", 64)]


def test_cruncher_forward_squeezes_last_dim():
    model = Cruncher(dim=64, num_layers=2)
    assert model(torch.randn(8, 64)).shape == (8,)


def test_linear_stores_in_out_and_computes_x_at_w():
    layer = Linear(16, 4)
    assert layer.weight.shape == (16, 4)                   # the lecture's (input_dim, output_dim)
    x = torch.randn(3, 16)
    torch.testing.assert_close(layer(x), x @ layer.weight)


def test_linear_init_is_truncated_normal_with_std_1_over_sqrt_din():
    torch.manual_seed(0)
    d_in = 1024
    w = Linear(d_in, 512).weight.detach()
    std = 1 / math.sqrt(d_in)
    assert w.abs().max().item() <= 3 * std + 1e-7            # cut at ±3 std
    # a normal truncated at ±3σ has std σ·0.9866 (1 - 2·3·φ(3)/(2Φ(3) - 1))^½
    assert w.std().item() == pytest.approx(std * 0.9866, rel=0.02)
    # unit-scale inputs keep unit scale after one layer (the point of 1/√d_in, Lecture 2)
    y = torch.randn(256, d_in) @ w
    assert y.std().item() == pytest.approx(0.9866, rel=0.05)


def test_cruncher_forward_flops_measured():
    # 2·B·(D²·L + D): the lecture's two-layer network at B=1024, D=256 has 2·1024·256·256·2 plus the head
    model = Cruncher(dim=256, num_layers=2)
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(1024, 256))
    assert counter.get_total_flops() == 2 * 1024 * (256 * 256 * 2 + 256)


def test_cruncher_builds_on_meta():
    with torch.device("meta"):
        model = Cruncher(dim=64, num_layers=2)
    assert model.n_params() == 8256 and model.final.weight.is_meta


def test_lecture_gradients_basics_through_our_linear():
    # CS336 Lecture 2, gradients_basics: x = [1, 2, 3], w = [1, 1, 1], loss = 0.5·(x·w − 5)² -> w.grad = [1, 2, 3]
    layer = Linear(3, 1)
    with torch.no_grad():
        layer.weight.fill_(1.0)
    x = torch.tensor([1.0, 2.0, 3.0])
    loss = 0.5 * (layer(x) - 5).pow(2).sum()
    loss.backward()
    assert layer.weight.grad.shape == (3, 1)   # stored (in, out), as the lecture's Linear
    assert layer.weight.grad.flatten().tolist() == [1.0, 2.0, 3.0]
