"""Optimizers written from scratch as torch.optim.Optimizer subclasses, a learning-rate schedule and clipping.

    from trainledger.optim import AdamW, CosineWithWarmup, clip_grad_norm_
    optimizer = AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)

Each optimizer takes torch's argument names and defaults, stores torch's state names (so state_dicts are
interchangeable) and updates all tensors of a param group with torch._foreach_* calls.
Optimizer-state sizes (for memory accounting), in tensors of the parameter's size per parameter:
SGD 0 (1 with momentum), AdaGrad 1, RMSProp 1 (+1 momentum, +1 centered), Adam/AdamW 2 (+1 amsgrad).
"""

from __future__ import annotations

from trainledger.errors import TrainledgerError
from trainledger.optim.adagrad import AdaGrad, LectureAdaGrad
from trainledger.optim.adam import Adam, AdamW
from trainledger.optim.clip import clip_grad_norm_
from trainledger.optim.rmsprop import RMSProp
from trainledger.optim.schedule import CosineWithWarmup, cosine_with_warmup
from trainledger.optim.sgd import SGD

# name -> (class, defaults that the name implies); "momentum" is SGD with the usual μ = 0.9.
OPTIMIZERS = {
    "sgd": (SGD, {}),
    "momentum": (SGD, {"momentum": 0.9}),
    "adagrad": (AdaGrad, {}),
    "rmsprop": (RMSProp, {}),
    "rmsprop-centered": (RMSProp, {"centered": True}),
    "adam": (Adam, {}),
    "adamw": (AdamW, {}),
}


def build_optimizer(name: str, params, lr: float, **kwargs):
    """An optimizer by name (a key of OPTIMIZERS) over `params`; kwargs override defaults."""
    key = str(name).lower()
    if key not in OPTIMIZERS:
        raise TrainledgerError(f"unknown optimizer {name!r} (--optimizer). Known: {', '.join(OPTIMIZERS)}")
    cls, implied = OPTIMIZERS[key]
    try:
        return cls(params, lr=lr, **{**implied, **kwargs})
    except TypeError as error:
        raise TrainledgerError(f"optimizer {key}: {error}") from None


__all__ = ["SGD", "AdaGrad", "Adam", "AdamW", "CosineWithWarmup", "LectureAdaGrad", "OPTIMIZERS", "RMSProp",
           "build_optimizer", "clip_grad_norm_", "cosine_with_warmup"]
