"""FP8 training through torchao's float8 (pip install 'trainledger[fp8]'): the recipe check and the module swap.

`train --precision fp8-rowwise` converts the model's nn.Linear layers inside the blocks to torchao's Float8Linear
(torchao.float8.convert_to_float8_training with Float8LinearConfig.from_recipe_name("rowwise")); `fp8-cs` uses the
"tensorwise" recipe (one scale per tensor from its own amax: current scaling). The weights stay fp32 and the
forward runs under bf16 autocast, as amp-bf16 (specs/recipes.py); torchao casts each Linear's input, weight and
output gradient to float8 e4m3 on every pass and runs torch._scaled_mm on the FP8 tensor cores. The LM head,
the MoE router and Linears whose dimensions are not multiples of 16 (torch._scaled_mm's requirement) stay in
bf16, as torchtitan's float8 converter leaves the output projection out.

Refused, one line naming --precision: a device without FP8 tensor cores (CPU, or CUDA compute capability below
8.9: A100 is 8.0), torchao missing, fp8-delayed and mxfp8 (Transformer Engine recipes: accounted in memory, step,
layout and plan, not trained here), and --tp/--pp/--parallel fsdp (not wired). Sources: pytorch/ao
torchao/float8/README.md; NVIDIA CUDA C++ Programming Guide, compute capabilities (FP8 tensor cores from 8.9).
"""

from __future__ import annotations

import torch

from trainledger.errors import TrainledgerError
from trainledger.specs.fp8 import fp8_scheme

TORCHAO_RECIPES = {"fp8-rowwise": "rowwise", "fp8-cs": "tensorwise"}
MIN_CAPABILITY = (8, 9)            # Ada (8.9), Hopper (9.0), Blackwell (10.x): FP8 tensor cores
KEPT_HIGH_PRECISION = ("lm_head", "router")
NEEDS = ("a CUDA GPU with FP8 tensor cores (compute capability >= 8.9: L4, L40S, RTX 4090, H100, H200, B200) and "
         "torchao (pip install 'trainledger[fp8]')")


def check_fp8_training(precision: str, device: torch.device, *, parallel: str = "none", tp: int = 1,
                       pp: int = 1) -> None:
    """Raise a one-line TrainledgerError naming --precision when `precision` is FP8 and this run cannot train it."""
    if fp8_scheme(precision) is None:
        return
    if precision not in TORCHAO_RECIPES:
        raise TrainledgerError(f"--precision {precision} is a Transformer Engine recipe that `train` does not run "
                               f"(accounted in memory, step, layout, plan); train FP8 with --precision "
                               f"{' or '.join(TORCHAO_RECIPES)} (torchao float8)")
    if parallel == "fsdp" or tp > 1 or pp > 1:
        raise TrainledgerError(f"--precision {precision} trains on one process or with --parallel ddp; FP8 with "
                               "--parallel fsdp, --tp or --pp is not wired")
    if device.type != "cuda":
        raise TrainledgerError(f"--precision {precision} needs {NEEDS}; this run is on {device.type}")
    capability = torch.cuda.get_device_capability(device)
    if tuple(capability) < MIN_CAPABILITY:
        name = torch.cuda.get_device_name(device)
        raise TrainledgerError(f"--precision {precision} needs {NEEDS}; {name} has compute capability "
                               f"{capability[0]}.{capability[1]}")
    try:
        import torchao.float8  # noqa: F401
    except ImportError:
        raise TrainledgerError(f"--precision {precision} needs torchao: pip install 'trainledger[fp8]'") from None


def fp8_module_filter(module: torch.nn.Module, fqn: str) -> bool:
    """Whether torchao converts this module: an nn.Linear of a block, both dimensions multiples of 16."""
    if not isinstance(module, torch.nn.Linear) or fqn.split(".")[-1] in KEPT_HIGH_PRECISION:
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


def convert_to_fp8(model: torch.nn.Module, precision: str) -> list[str]:
    """Swap the model's eligible nn.Linear layers for torchao Float8Linear (in place); the names converted."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    config = Float8LinearConfig.from_recipe_name(TORCHAO_RECIPES[precision])
    names = [fqn for fqn, module in model.named_modules() if fp8_module_filter(module, fqn)]
    convert_to_float8_training(model, config=config, module_filter_fn=fp8_module_filter)
    return names
