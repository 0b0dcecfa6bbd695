"""Training with live accounting: the loop, checkpoints that survive SIGKILL, precision recipes, DDP/FSDP2.

    from trainledger.train import TrainConfig, Trainer, resolve
    config = resolve({"model": "tiny", "steps": 50, "out_dir": "runs/demo"})
    summary = Trainer(config).train()

`trainledger train` is the command-line face of the same code (docs/train.md). The names below load on
first use, so that `trainledger.train.checkpoint` (read by `trainledger checkpoints`) imports without torch.
"""

import importlib

_EXPORTS = {"TrainConfig": "config", "resolve": "config", "Trainer": "loop", "TrainingDiverged": "loop"}


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"trainledger.train.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'trainledger.train' has no attribute {name!r}")


__all__ = ["TrainConfig", "Trainer", "TrainingDiverged", "resolve"]
