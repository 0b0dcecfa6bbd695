"""Tour sections on models: parameters and their initialization, and the lecture's `Cruncher`.

Follows CS336 Lecture 2 (Spring 2025), `module_parameters` and `custom_model`. The modules are
trainledger's own (`trainledger.models.Linear`, `Cruncher`); parameter counts are predicted by
`trainledger.account.counting.params` and measured with `numel()`.
"""

from __future__ import annotations

import math

from trainledger.tour.runner import Section, Tour

# custom_model: `assert num_parameters == (D * D) + (D * D) + D` with D = 64 -> 8,256 (facts.md)
LECTURE_CRUNCHER_PARAMS = 8_256
# module_parameters: input_dim = 16384, output_dim = 32 (the lecture's sizes; small enough for a CPU)
INPUT_DIM, OUTPUT_DIM = 16384, 32


def module_parameters(tour: Tour) -> None:
    import torch
    from torch import nn

    from trainledger.models import Linear

    gen = torch.Generator().manual_seed(0)
    w = nn.Parameter(torch.randn(INPUT_DIM, OUTPUT_DIM, generator=gen))
    with tour.claim("an nn.Parameter behaves like a tensor and wraps a plain torch.Tensor in .data") as c:
        c.check(isinstance(w, torch.Tensor) and type(w.data) is torch.Tensor and w.requires_grad,
                type=type(w).__name__, data_type=type(w.data).__name__)

    x = torch.randn(INPUT_DIM, generator=gen)
    with tour.claim(f"with N(0, 1) weights each output of x @ w grows like √input_dim = {math.isqrt(INPUT_DIM)}") as c:
        output = (x @ w).detach()
        tour.inspect("x @ w (first 4 of 32), unscaled", output[:4])
        rms = output.pow(2).mean().sqrt().item()
        tour.inspect("rms of the 32 outputs, unscaled", rms)
        # rms of 32 draws of N(0, d): within ±40% of √d with overwhelming probability; the seed fixes it anyway
        c.check(0.6 * math.sqrt(INPUT_DIM) < rms < 1.4 * math.sqrt(INPUT_DIM), output_rms=rms,
                sqrt_input_dim=math.sqrt(INPUT_DIM))
    with tour.claim("dividing the weights by √input_dim keeps the outputs O(1), whatever input_dim is") as c:
        scaled = (x @ (w / math.sqrt(INPUT_DIM))).detach()
        rms = scaled.pow(2).mean().sqrt().item()
        tour.inspect("rms of the 32 outputs, w / √input_dim", rms)
        c.check(0.6 < rms < 1.4, output_rms=rms)
    tour.note("the lecture prints one random output element (-84.1 unscaled, -0.129 scaled); single draws "
              "depend on the RNG, so the tour checks the scale (rms over all 32 outputs) instead")

    with tour.claim("trainledger.models.Linear: truncated normal, std ≈ 1/√d_in, every weight within ±3/√d_in") as c:
        torch.manual_seed(0)
        layer = Linear(INPUT_DIM, OUTPUT_DIM)
        weight = layer.weight.detach()
        bound = 3 / math.sqrt(INPUT_DIM)
        std = weight.std().item()
        tour.inspect("Linear(16384, 32).weight std × √d_in", std * math.sqrt(INPUT_DIM))
        c.check(weight.abs().max().item() <= bound * (1 + 1e-6), max_abs=weight.abs().max().item(), bound=bound)
        c.approx(std * math.sqrt(INPUT_DIM), _truncated_std(3.0), rel=0.03, std_times_sqrt_d_in=std * math.sqrt(INPUT_DIM),
                 truncated_normal_std=_truncated_std(3.0))
    with tour.claim("Linear stores its weight (in, out) and computes x @ W, as the lecture does; nn.Linear stores (out, in)") as c:
        c.check(tuple(layer.weight.shape) == (INPUT_DIM, OUTPUT_DIM), trainledger_shape=tuple(layer.weight.shape))
        c.check(tuple(nn.Linear(INPUT_DIM, OUTPUT_DIM, bias=False, device="meta").weight.shape) == (OUTPUT_DIM, INPUT_DIM),
                torch_nn_linear_shape=(OUTPUT_DIM, INPUT_DIM))
        with torch.no_grad():
            c.check(torch.allclose(layer(x), x @ layer.weight))
    tour.note("the lecture's Linear stores weights (in, out) and multiplies x @ W; torch.nn.Linear stores "
              "(out, in) and multiplies x @ W.T. trainledger keeps the lecture's layout: same math, but its "
              "state_dict is the transpose of an nn.Linear's")


def _truncated_std(cut: float) -> float:
    """Std of N(0, 1) truncated to [-cut, cut]: sqrt(1 - 2·cut·φ(cut) / (Φ(cut) - Φ(-cut))) (0.9866 for cut=3)."""
    density = math.exp(-cut * cut / 2) / math.sqrt(2 * math.pi)
    mass = math.erf(cut / math.sqrt(2))
    return math.sqrt(1 - 2 * cut * density / mass)


def custom_model(tour: Tour) -> None:
    import torch

    from trainledger.account.counting.params import n_params
    from trainledger.models import Cruncher
    from trainledger.specs.model import CruncherSpec

    D, num_layers = 64, 2
    torch.manual_seed(0)
    model = Cruncher(dim=D, num_layers=num_layers).to(tour.device)
    param_sizes = [(name, tensor.numel()) for name, tensor in model.state_dict().items()]
    tour.inspect("state_dict (name, numel)", param_sizes)
    with tour.claim("Cruncher(dim=64, num_layers=2).state_dict(): layers.0.weight D², layers.1.weight D², final.weight D") as c:
        c.check(param_sizes == [("layers.0.weight", D * D), ("layers.1.weight", D * D), ("final.weight", D)],
                param_sizes=param_sizes)
    with tour.claim("it has 8,256 parameters: numel (measured) = account.counting.params (predicted) = the lecture's value") as c:
        measured = sum(p.numel() for p in model.parameters())
        predicted = n_params(CruncherSpec(dim=D, n_layers=num_layers))
        tour.inspect("num_parameters", measured)
        c.check(measured == predicted == LECTURE_CRUNCHER_PARAMS, measured=measured, predicted=predicted,
                lecture=LECTURE_CRUNCHER_PARAMS)
    with tour.claim("model(x) maps a batch of B=8 vectors to B=8 scalars") as c:
        x = torch.randn(8, D, device=tour.device)
        y = model(x)
        tour.inspect("model(randn(8, 64)).size()", y.size())
        c.check(y.size() == torch.Size([8]) and y.device.type == tour.device, shape=y.size(), device=y.device)


SECTIONS = [
    Section("module-parameters", "Parameters and initialization", module_parameters, "module_parameters"),
    Section("custom-model", "The Cruncher model and its state_dict", custom_model, "custom_model"),
]
