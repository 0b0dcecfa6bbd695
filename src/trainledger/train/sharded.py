"""FSDP2 checkpoints through torch.distributed.checkpoint (DCP): each rank writes and reads its own shards.

`get_state_dict` / `set_state_dict` (torch.distributed.checkpoint.state_dict) give the model and optimizer
states keyed by parameter name with DTensor shards; `dcp.save` writes one file per rank plus `.metadata`,
and `dcp.load` reads them back in place, resharding if the world size changed. The trainer state
(step, sampler, RNG, ...) goes beside it in trainer.pt, written by rank 0 (see checkpoint.py).
"""

from __future__ import annotations

from pathlib import Path

import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
from torch.optim import Optimizer

from trainledger.train.safe_dcp import SafeFileSystemReader, SafeLoadPlanner
from trainledger.errors import TrainledgerError, first_line


# Optimizer states keyed by parameter name, param groups included: a pipeline stage holds only some of the
# parameters, so groups keyed by index would collide across stages (torchtitan flattens for the same reason).
_OPTIONS = StateDictOptions(flatten_optimizer_state_dict=True)


def _named(model: nn.Module) -> nn.Module:
    """The module whose parameter names a checkpoint uses: the Transformer inside a pipeline stage (train/pipeline.py)."""
    return model.model if type(model).__name__ == "Pipeline" else model


def save_sharded(model: nn.Module, optimizer: Optimizer, path: Path) -> None:
    """Every rank writes its shards of the model and optimizer states into directory `path` (collective)."""
    model = _named(model)
    model_state, optim_state = get_state_dict(model, optimizer, options=_OPTIONS)
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(path))


def load_sharded(model: nn.Module, optimizer: Optimizer, path: Path) -> None:
    """Every rank reads its shards from `path` into the model and optimizer (collective).

    `.metadata` goes through safe_dcp's restricted unpickler, never pickle.load (DCP's default reader), and
    non-tensor items through torch.load(weights_only=True), never weights_only=False (DCP's default planner).
    DCP reshards between layouts (FSDP, TP, TP+SP, PP, world sizes); what it cannot map is a one-line error.
    """
    model = _named(model)
    model_state, optim_state = get_state_dict(model, optimizer, options=_OPTIONS)
    state = {"model": model_state, "optimizer": optim_state}
    try:
        dcp.load(state, storage_reader=SafeFileSystemReader(str(path)), planner=SafeLoadPlanner())
    except TrainledgerError:
        raise
    except Exception as error:     # DCP raises RuntimeError, CheckpointException, KeyError...; each rank its own
        detail = first_line(error, type(error).__name__)
        raise TrainledgerError(f"--resume: checkpoint {path.parent} cannot be loaded into this layout (--parallel, "
                               f"--tp, --pp): {detail[:300]}") from None
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"],
                   options=_OPTIONS)
