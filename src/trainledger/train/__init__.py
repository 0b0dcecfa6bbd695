"""Training with live accounting: the loop, checkpoints that survive SIGKILL, precision recipes, DDP/FSDP2.

    from trainledger.train import TrainConfig, Trainer, resolve
    config = resolve({"model": "tiny", "steps": 50, "out_dir": "runs/demo"})
    summary = Trainer(config).train()

`trainledger train` is the command-line face of the same code (docs/train.md).
"""

from trainledger.train.config import TrainConfig, resolve
from trainledger.train.loop import Trainer, TrainingDiverged

__all__ = ["TrainConfig", "Trainer", "TrainingDiverged", "resolve"]
