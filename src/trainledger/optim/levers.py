"""The optimizer a training run steps, with its memory levers: 8-bit states, the step inside backward, CPU offload.

    build_training_optimizer("adamw", groups, lr=..., weight_decay=..., device=...)      plain (optim.build_optimizer)
        name "adamw-8bit" / "paged-adamw-8bit"     8-bit states (optim/low_bit.py)
        in_backward=True                           one optimizer per parameter, stepped in backward (optim/in_backward.py)
        cpu_offload="optimizer"                    torchao's CPUOffloadOptimizer: the states and the step on the host,
                                                   each gradient copied there as backward produces it, the updated
                                                   weights copied back (torchao/optim/cpu_offload.py; CUDA or XPU only,
                                                   as torchao asserts: on a CPU run the states are in host memory already)
Combinations the libraries do not support are refused in one line naming the flags.
"""

from __future__ import annotations

import torch

from trainledger.errors import TrainledgerError
from trainledger.optim import OPTIMIZERS, build_optimizer
from trainledger.optim.in_backward import OptimizerInBackward
from trainledger.optim.low_bit import LOW_BIT, build_low_bit

CPU_OFFLOAD = ("optimizer", "params")


def check_cpu_offload(kind: str | None, device: torch.device, parallel: str = "none") -> None:
    """Refuses, in one line, a --cpu-offload that cannot run on `device` (module docstring; `params` is FSDP2's)."""
    if kind is None:
        return
    if kind not in CPU_OFFLOAD:
        raise TrainledgerError(f"unknown --cpu-offload {kind!r}. Known: {', '.join(CPU_OFFLOAD)}")
    if device.type != "cuda":
        where = ("torchao's CPUOffloadOptimizer moves the optimizer states and step off a CUDA GPU" if kind == "optimizer"
                 else "FSDP2's CPUOffloadPolicy keeps the parameter shards off a CUDA GPU")
        raise TrainledgerError(f"--cpu-offload {kind}: {where}; this run is on {device.type}, where they are in host "
                               "memory already")
    if kind == "params" and parallel != "fsdp":
        raise TrainledgerError("--cpu-offload params is FSDP2's CPUOffloadPolicy: it needs --parallel fsdp (under torchrun)")


def build_training_optimizer(name: str, groups: list[dict], *, lr: float, weight_decay: float, device: torch.device,
                             in_backward: bool = False, cpu_offload: str | None = None):
    """The optimizer of a run (module docstring); `groups` are torch.optim parameter groups."""
    def make(param_groups):
        if name in LOW_BIT:
            return build_low_bit(name, param_groups, lr, weight_decay, device)
        return build_optimizer(name, param_groups, lr=lr, weight_decay=weight_decay)

    if cpu_offload == "optimizer":
        check_cpu_offload(cpu_offload, device)
        if name in LOW_BIT or in_backward:
            raise TrainledgerError("--cpu-offload optimizer steps a full-precision optimizer on the host: not with "
                                   f"--optimizer {name}{' and --optimizer-in-backward' if in_backward else ''}")
        from trainledger.models.quantize import torchao_module
        offload = torchao_module("torchao.optim", "--cpu-offload optimizer")
        cls, implied = OPTIMIZERS[name]
        return offload.CPUOffloadOptimizer(groups, optimizer_class=cls, lr=lr, weight_decay=weight_decay, **implied)
    if in_backward:
        if name == "paged-adamw-8bit":
            raise TrainledgerError("--optimizer-in-backward builds one optimizer per parameter; bitsandbytes' paged "
                                   "optimizer pages one buffer for all: use --optimizer adamw-8bit or adamw")
        return OptimizerInBackward(groups, make)
    return make(groups)
