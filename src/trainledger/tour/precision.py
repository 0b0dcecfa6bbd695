"""Tour section on mixed precision: a bf16 autocast step, and why accumulators stay in float32.

Follows CS336 Lecture 2 (Spring 2025), `mixed_precision_training`: low precision for the forward pass
(activations), float32 for parameters and gradients (Micikevicius et al. 2017, arXiv:1710.03740; PyTorch
AMP). The running sums are predicted exactly by `trainledger.specs.dtypes.round_to_dtype` (round after
every addition) and measured with torch.
"""

from __future__ import annotations

from trainledger.tour.runner import Section, Tour

# The lecture's running sum of 0.01, a thousand times (values as quoted from the lecture in the tour's issue,
# "The executable lecture"; they are not in ../shared/seeds):
# fp16 accumulator ≈ 9.95, fp32 ≈ 10.0013 (see the note), fp32 accumulator over fp16 values ≈ 10.0021.
N_TERMS, TERM = 1000, 0.01
LECTURE_SUM_FP16 = 9.95
LECTURE_SUM_FP32 = 10.0013
LECTURE_SUM_FP32_OVER_FP16 = 10.0021


def mixed_precision(tour: Tour) -> None:
    import torch
    import torch.nn.functional as F

    from trainledger.models import Cruncher

    torch.manual_seed(0)
    model = Cruncher(dim=64, num_layers=2).to(tour.device)
    x = torch.randn(16, 64, device=tour.device)
    y = torch.randn(16, device=tour.device)
    seen = {}
    hook = model.layers[0].register_forward_hook(lambda module, inputs, output: seen.update(activation=output.dtype))
    with tour.claim(f"a bf16 autocast step on {tour.device}: activations bf16, weights and gradients stay float32") as c:
        with torch.autocast(device_type=tour.device, dtype=torch.bfloat16):
            pred = model(x)
            loss = F.mse_loss(pred.float(), y)
        loss.backward()
        tour.inspect("autocast activation dtype", seen["activation"])
        grad_dtypes = sorted({str(p.grad.dtype) for p in model.parameters()})
        param_dtypes = sorted({str(p.dtype) for p in model.parameters()})
        tour.inspect("parameter / gradient dtypes", (param_dtypes, grad_dtypes))
        c.check(seen["activation"] == torch.bfloat16 and pred.dtype == torch.bfloat16, activation=seen["activation"])
        c.check(param_dtypes == grad_dtypes == ["torch.float32"], params=param_dtypes, grads=grad_dtypes)
    hook.remove()
    with tour.claim("the bf16 loss is within 2% of the float32 loss (bf16 keeps ~3 significant digits)") as c:
        with torch.no_grad():
            fp32_loss = F.mse_loss(model(x), y).item()
        c.approx(loss.item(), fp32_loss, rel=0.02, bf16_loss=loss.item(), fp32_loss=fp32_loss)

    sums = {
        "fp16": _running_sum(torch.float16, torch.float16),
        "fp32": _running_sum(torch.float32, torch.float32),
        "fp32 over fp16 values": _running_sum(torch.float32, torch.float16),
    }
    tour.inspect(f"sum of {TERM} × {N_TERMS}", sums)
    with tour.claim("specs.dtypes.round_to_dtype predicts each running sum exactly (round after every add)") as c:
        predicted = {"fp16": _predicted_sum("fp16", "fp16"), "fp32": _predicted_sum("fp32", "fp32"),
                     "fp32 over fp16 values": _predicted_sum("fp32", "fp16")}
        c.check(predicted == sums, predicted=predicted, measured=sums)
    with tour.claim("an fp16 accumulator drifts to ≈ 9.95 (lecture): past 8 its spacing 2^-7 swallows part of each 0.01") as c:
        c.approx(sums["fp16"], LECTURE_SUM_FP16, abs_=0.005, measured=sums["fp16"], lecture=LECTURE_SUM_FP16)
    with tour.claim("an fp32 accumulator over fp16 values gives ≈ 10.0021 (lecture): fp16(0.01) is 0.010002") as c:
        c.approx(sums["fp32 over fp16 values"], LECTURE_SUM_FP32_OVER_FP16, abs_=1e-4,
                 measured=sums["fp32 over fp16 values"], lecture=LECTURE_SUM_FP32_OVER_FP16)
    with tour.claim("fp32 throughout is the closest to 10, then fp32 accumulation, then fp16") as c:
        errors = {name: abs(value - N_TERMS * TERM) for name, value in sums.items()}
        c.check(errors["fp32"] < errors["fp32 over fp16 values"] < errors["fp16"], abs_error=errors)
        c.approx(sums["fp32"], LECTURE_SUM_FP32, abs_=1.5e-3, measured=sums["fp32"], lecture=LECTURE_SUM_FP32)
    tour.note(f"the fp32 sum quoted from the lecture is ≈{LECTURE_SUM_FP32}; IEEE float32 addition in this order "
              f"gives {sums['fp32']:.6f} on every machine (round_to_dtype agrees), i.e. 10.0001 — we take the "
              "quoted value for a transcription slip and compare with a 1.5e-3 tolerance")
    tour.note("the rule the sums teach: keep accumulators (sums, optimizer states, master weights) in float32 and "
              "use 16-bit only where values are consumed, as autocast does")


def _running_sum(accumulator, values) -> float:
    """Measured: x = zeros(1, accumulator); x += tensor([0.01], values) N_TERMS times (torch casts to x's dtype)."""
    import torch

    x = torch.zeros(1, dtype=accumulator)
    term = torch.tensor([TERM], dtype=values)
    for _ in range(N_TERMS):
        x += term
    return x.item()


def _predicted_sum(accumulator: str, values: str) -> float:
    """Predicted: the same running sum, each addition rounded to `accumulator` by specs.dtypes.round_to_dtype."""
    from trainledger.specs.dtypes import round_to_dtype

    # the sum of two floats of ≤ 24 significant bits is exact in a Python float (53 bits), so rounding it
    # once to the accumulator's format is exactly what IEEE addition in that format does
    term = round_to_dtype(TERM, values)
    total = 0.0
    for _ in range(N_TERMS):
        total = round_to_dtype(total + term, accumulator)
    return total


SECTIONS = [
    Section("mixed-precision", "Mixed precision", mixed_precision, "mixed_precision_training"),
]
