"""Measured memory of a fine-tuning step by category (measure/finetune.py), checked against independent counts
(the adapters' r·(d_in + d_out), torchao's own storages, measure.memory's track_steps for a plain step), and each
memory lever on against off: the same loss, and less of what the lever removes."""

from __future__ import annotations

import pytest
import torch

from trainledger.measure.finetune import Levers, finetune_step_memory
from trainledger.measure.memory import track_steps
from trainledger.models import Transformer
from trainledger.optim import AdamW
from trainledger.specs import get_model

TINY = get_model("tiny")          # d_model 128, d_ff 512, 4 layers, vocab 256: every Linear NF4-quantizable
torchao = pytest.importorskip("torchao", reason="the quantized bases and 8-bit states are torchao's")


def _measure(**kwargs):
    kwargs.setdefault("batch_size", 4)
    kwargs.setdefault("seq_len", 64)
    return finetune_step_memory(TINY, **kwargs)


def test_a_plain_full_step_measures_what_track_steps_measures():
    full = _measure(lora=None)
    torch.manual_seed(0)
    model = Transformer(TINY)
    tokens = torch.randint(0, 256, (4, 65), generator=torch.Generator().manual_seed(1))
    reports, _ = track_steps(model, (tokens[:, :-1], tokens[:, 1:]), AdamW(model.parameters(), lr=1e-3,
                                                                           weight_decay=0.0), steps=2)
    later = reports[-1]
    assert full["activations_bytes"] == later.activations_bytes
    assert full["optimizer_bytes"] == later.optimizer_bytes
    assert full["grads_bytes"] == later.grads_bytes == full["trainable_params_bytes"] == later.params_bytes
    # the peaks agree to one fp32 scalar (4 bytes of 19.8 MB, in backward; which scalar lives longer under
    # track_step was not found: neither its ModuleTracker nor its saved-tensor hook)
    assert abs(full["peak_bytes"] - later.peak_bytes) <= 4
    assert full["step_peaks_bytes"][0] == reports[0].peak_bytes
    assert full["loss"] == pytest.approx(later.loss, rel=0, abs=0)


def test_lora_and_qlora_categories_against_independent_counts():
    lora = _measure()
    qlora = _measure(quantize="nf4-dq")
    adapters = 4 * 2 * 8 * (128 + 128)                          # 4 layers × (q, v) × r·(d_in + d_out)
    for run in (lora, qlora):
        assert run["trainable_params"] == adapters and run["trainable_params_bytes"] == 4 * adapters
        assert run["grads_bytes"] == 4 * adapters
        assert run["optimizer_bytes"] == 2 * 4 * adapters + 4 * 16   # exp_avg, exp_avg_sq; a 4-byte step each
        assert run["frozen_params"] == 858_880
    linears = 4 * (4 * 128 * 128 + 2 * 512 * 128)                   # the 24 block Linears' weights
    assert lora["frozen_params_bytes"] == 4 * 858_880 and lora["quantized_weights_bytes"] == 0
    assert qlora["quantized_weights_bytes"] == linears // 2         # two NF4 codes a byte
    # torchao's own tensors, read here directly: what the measurement calls constants
    from trainledger.models.quantize import nf4_module
    torch.manual_seed(0)
    constants = 0
    for shape in [(128, 128)] * 16 + [(512, 128), (128, 512)] * 4:
        weight = nf4_module().to_nf4(torch.randn(shape), 64, 256)
        constants += sum(getattr(weight, name).untyped_storage().nbytes()
                         for name in ("quantized_scalers", "quantization_factor", "scaler_mean", "nf4"))
    assert qlora["quantization_constants_bytes"] == constants
    assert qlora["frozen_params_bytes"] == lora["frozen_params_bytes"] - 4 * linears
    saved = 4 * linears - qlora["quantized_weights_bytes"] - qlora["quantization_constants_bytes"]
    assert qlora["peak_bytes"] < lora["peak_bytes"] - 0.6 * saved   # less the dequantized copy of the matmul at the peak
    assert qlora["activations_bytes"] == lora["activations_bytes"]  # the dequantized copies are not kept
    assert abs(qlora["loss"] - lora["loss"]) < 0.01                 # NF4's error moves the loss a little


def test_frozen_linears_save_no_input_so_lora_keeps_fewer_activations_than_full_training():
    assert _measure()["activations_bytes"] < _measure(lora=None)["activations_bytes"]


def test_optimizer_in_backward_holds_one_gradient_at_a_time_and_lowers_the_peak():
    # batch 1 × 8 tokens: the step's peak is the weights, their gradients and states, not the activations
    off = _measure(lora=None, batch_size=1, seq_len=8)
    on = _measure(lora=None, batch_size=1, seq_len=8, levers=Levers(optimizer_in_backward=True))
    assert on["loss"] == off["loss"]
    largest = 4 * 512 * 128                                  # an MLP matrix, the largest tensor
    assert on["grads_bytes"] <= 2 * largest < off["grads_bytes"] == off["trainable_params_bytes"]
    assert on["peak_bytes"] < off["peak_bytes"] - off["grads_bytes"] // 2
    assert on["optimizer_bytes"] == off["optimizer_bytes"]


def test_activation_offload_moves_the_saved_activations_to_the_host():
    off = _measure()
    on = _measure(levers=Levers(activation_offload=True))
    assert on["loss"] == off["loss"]
    assert on["activations_bytes"] < 0.1 * off["activations_bytes"]
    assert on["host_activations_bytes"] >= 0.9 * off["activations_bytes"]
    assert on["peak_bytes"] < off["peak_bytes"] - 0.5 * off["activations_bytes"]
    assert off["host_activations_bytes"] == 0


def test_chunked_loss_lowers_the_peak_by_the_logits_that_no_longer_exist_whole():
    spec = TINY.with_(vocab_size=4096)          # a vocabulary whose logits weigh: B·T·V·4 = 4.2 MB
    off = finetune_step_memory(spec, batch_size=4, seq_len=64, lora=None)
    on = finetune_step_memory(spec, batch_size=4, seq_len=64, lora=None, levers=Levers(chunked_loss=4))
    assert on["loss"] == pytest.approx(off["loss"], rel=1e-6)
    logits = 4 * 64 * 4096 * 4
    assert on["peak_bytes"] <= off["peak_bytes"] - 0.75 * logits     # (1 - 1/N) of them at least; 4.19 MB measured
    # what is saved for backward is the same (log_softmax's fp32 output of every chunk, as torchtune's loss keeps it),
    # but for the three partial sums of the chunks' losses
    assert abs(on["activations_bytes"] - off["activations_bytes"]) <= 3 * 4


@pytest.mark.slow            # torch.compile of torchao's fused step: ~15 s on 2 cores with a cold cache
def test_adamw_8bit_states_take_a_quarter_of_adamws():
    off = _measure(lora=None)
    on = _measure(lora=None, levers=Levers(optimizer="adamw-8bit"))
    assert on["loss"] == off["loss"]                        # the first step's loss: before any state is used
    # torchao's storage, tensor by tensor: those of >= 4096 values (a multiple of 256) get 8-bit codes, an fp32
    # scale per 256 and a 256-entry fp32 code map per moment; the others (norms, biases) fp32 moments; a step each
    expected = 0
    for p in Transformer(TINY).parameters():
        n = p.numel()
        expected += 4 + (2 * (n + 4 * n // 256 + 256 * 4) if n >= 4096 and n % 256 == 0 else 2 * 4 * n)
    assert on["optimizer_bytes"] == expected
    assert on["optimizer_bytes"] < 0.3 * off["optimizer_bytes"]
    assert on["peak_bytes"] < off["peak_bytes"] - 0.5 * off["optimizer_bytes"]
