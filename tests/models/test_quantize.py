"""Frozen quantized bases (models/quantize.py) against torchao itself: the same dequantized weights in forward and
backward, torchao's storage byte for byte, no dequantized copy kept for backward, and the one-line refusals."""

from __future__ import annotations

import sys

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from trainledger.errors import TrainledgerError
from trainledger.models.quantize import (QuantizedLinear, check_quantize, inner_tensors, nf4_module,
                                         quantize_frozen_linears, quantized_bytes)

pytest.importorskip("torchao", reason="the quantized bases are torchao's (pip install 'trainledger[finetune]')")


def _frozen(out_features=512, in_features=128, bias=True):
    torch.manual_seed(0)
    linear = nn.Linear(in_features, out_features, bias=bias)
    linear.requires_grad_(False)
    return linear


@pytest.mark.parametrize("kind", ["nf4-dq", "int8"])
def test_forward_and_input_gradient_use_the_dequantized_weight(kind):
    linear = _frozen()
    layer = QuantizedLinear(linear, kind)
    weight = layer.dequantized_weight()
    if kind == "nf4-dq":       # torchao's own NF4 of the same tensor, blocks of 64 and 256
        assert torch.equal(weight, nf4_module().to_nf4(linear.weight, 64, 256).get_original_weight())
    assert 0 < (weight - linear.weight).abs().max() < (0.2 if kind == "nf4-dq" else 0.01) * linear.weight.abs().max()
    x = torch.randn(3, 7, 128, requires_grad=True)
    y = layer(x)
    torch.testing.assert_close(y, F.linear(x, weight, linear.bias), rtol=0, atol=1e-5)
    grad = torch.randn_like(y)
    y.backward(grad)
    torch.testing.assert_close(x.grad, grad @ weight, rtol=0, atol=1e-5)
    assert not layer.weight.requires_grad and not layer.bias.requires_grad


@pytest.mark.parametrize("kind", ["nf4-dq", "int8"])
def test_backward_keeps_the_quantized_weight_not_a_dequantized_copy(kind):
    layer = QuantizedLinear(_frozen(bias=False), kind)
    saved = []

    def pack(t):
        saved.append(t)
        return t
    x = torch.randn(4, 128, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x).sum().backward()
    plain_weight_copies = [t for t in saved if type(t) is torch.Tensor and t.shape == (512, 128)]
    assert plain_weight_copies == []
    assert any(t is layer.weight or type(t) is type(layer.weight) for t in saved)


def test_nf4_storage_is_torchaos_and_the_qlora_formula():
    # 65,536 weights: codes 4 bits each, int8 scalers per 64, fp32 factors per 64·256, one fp32 mean, a 16-value LUT
    # (Dettmers et al. 2023, arXiv:2305.14314, Sec. 3: 4 + 8/64 + 32/(64·256) bits per weight, plus the table)
    layer = QuantizedLinear(_frozen(), "nf4-dq")
    codes, constants = quantized_bytes(layer.weight)
    n = 512 * 128
    assert codes == n // 2
    assert constants == n // 64 + 4 * n // (64 * 256) + 4 + 16 * 4
    parts = {name: t.untyped_storage().nbytes() for name, t in inner_tensors(layer.weight).items()}
    assert sum(parts.values()) == codes + constants
    assert set(parts) == {"quantized_data", "quantized_scalers", "quantization_factor", "scaler_mean", "nf4"}


def test_int8_storage_is_a_byte_a_weight_and_a_scale_and_zero_point_per_row():
    layer = QuantizedLinear(_frozen(), "int8")
    assert quantized_bytes(layer.weight) == (512 * 128, 512 * (4 + 1))


def test_quantize_frozen_linears_keeps_the_head_and_trainable_layers():
    from trainledger.models import Transformer
    from trainledger.models.lora import LoRASettings, apply_lora
    from trainledger.specs import get_model
    model = Transformer(get_model("tiny").with_(tied_embeddings=False))
    apply_lora(model, LoRASettings(targets=("q", "v")))
    names = quantize_frozen_linears(model, "nf4-dq")
    assert len(names) == 4 * 6 and "lm_head" not in names and "blocks.0.attn.q_proj.base" in names
    assert type(model.lm_head) is nn.Linear and all("lora" not in n for n in names)
    assert model(torch.randint(0, 256, (1, 8))).shape == (1, 8, 256)


def test_sizes_torchao_cannot_double_quantize_and_plain_nf4_are_one_line():
    with pytest.raises(TrainledgerError, match="multiple of 16,384") as error:
        QuantizedLinear(_frozen(64, 128), "nf4-dq", "blocks.0.attn.k_proj")
    assert "blocks.0.attn.k_proj has 8,192 weights" in str(error.value)
    with pytest.raises(TrainledgerError, match="use --quantize nf4-dq"):
        check_quantize("nf4")
    with pytest.raises(TrainledgerError, match="unknown --quantize 'nf3'"):
        check_quantize("nf3")


def test_torchao_missing_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "torchao" or m.startswith("torchao.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "torchao", None)
    with pytest.raises(TrainledgerError) as error:
        check_quantize("nf4-dq", "--finetune qlora")
    assert str(error.value) == ("--finetune qlora needs torchao, which is not installed: "
                                "pip install 'trainledger[finetune]'")
