"""The trained model of a run, a checkpoint or a Hugging Face directory, for `generate` and `export`.

RUN_OR_CHECKPOINT may be:
- a run's --out-dir (its checkpoints/ folder is searched) or a --checkpoint-dir: the newest checkpoint whose
  files pass their sha256 check and load; a damaged one is reported on stderr and the previous one is used;
- one checkpoint directory (step_NNNNNNNN/): exactly that one, or an error saying why it cannot be used;
- a Hugging Face directory (config.json + model.safetensors of a GPT-2 or Llama model: train/hf_io.py).
A fine-tuning run's checkpoint holds its adapters only: its model is the base rebuilt from --init-from (or its seed),
checked against the identity the checkpoint records, with the adapters on it (train/finetune.py).
Checkpoints load as `--resume` loads them (train/checkpoint.py): torch.load(weights_only=True), never a pickle
that could run code. A sharded (FSDP/DCP) checkpoint is gathered into one full state dict on this process, its
`.metadata` through the restricted unpickler and its items with weights_only=True (train/safe_dcp.py).
The model is the run's --model spec with the vocabulary it recorded (its tokenizer's, padded by --vocab-multiple:
train/vocab.py run_spec); for a checkpoint that records none, the embedding's shape in the checkpoint decides.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from trainledger.errors import TrainledgerError, first_line
from trainledger.train import checkpoint as ckpt

FLAG = "RUN_OR_CHECKPOINT"


@dataclass
class LoadedModel:
    """A model ready for inference and where it came from: a checkpoint (its step and run config) or an HF directory."""

    model: object
    spec: object
    source: Path
    step: int | None = None
    config: dict | None = None
    hf_dir: Path | None = None


def find_checkpoint(path: Path, warn=None) -> tuple[Path, dict]:
    """(checkpoint directory, its trainer state) for a run directory, a checkpoint directory or one checkpoint."""
    warn = warn or (lambda line: print(line, file=sys.stderr))
    path = Path(path)
    if (path / ckpt.MANIFEST_FILE).is_file() or (path / ckpt.TRAINER_FILE).is_file():
        fmt, problem = ckpt.verify(path)
        if problem:
            raise TrainledgerError(f"checkpoint {path} cannot be used: {problem} ({FLAG}); give its run directory "
                                   "to use the newest good checkpoint")
        try:
            return path, _state(path, fmt)
        except ckpt.CorruptCheckpointError as error:
            raise TrainledgerError(f"checkpoint {path} cannot be used: {error} ({FLAG})") from None
    directory = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    refs = ckpt.list_checkpoints(directory)
    if not refs:
        raise TrainledgerError(f"no checkpoint in {path} ({FLAG}): give a run's --out-dir, a --checkpoint-dir, one "
                               "step_NNNNNNNN directory, or a Hugging Face directory (config.json + model.safetensors)")
    for ref in reversed(refs):
        fmt, problem = ckpt.verify(ref.path)
        if problem is None:
            try:
                return ref.path, _state(ref.path, fmt)
            except ckpt.CorruptCheckpointError as error:
                problem = str(error)
        warn(f"warning: checkpoint {ref.path} is corrupt: {problem}; trying the previous one")
    raise TrainledgerError(f"every checkpoint in {directory} is corrupt (see the warnings above) ({FLAG})")


def _state(path: Path, fmt: str) -> dict:
    """The trainer state of checkpoint `path`, checked as --resume checks it (checkpoint.probe: the state of the
    step its directory names, DCP metadata and items that load): a trainer.pt copied from another step with a
    rewritten manifest was exported as "step 10 from .../step_00000020"."""
    state = ckpt.probe(path, fmt)
    if not isinstance(state, dict) or not isinstance(state.get("config"), dict) or "format" not in state:
        raise ckpt.CorruptCheckpointError(f"{path / ckpt.TRAINER_FILE} does not hold a trainer state")
    return state


def load_model(path, device="cpu", warn=None) -> LoadedModel:
    """The model stored at `path` (module docstring), on `device`, in eval mode, in the dtype it was saved in."""
    path = Path(path)
    if not path.exists():
        raise TrainledgerError(f"no such run or checkpoint: {str(path)!r} ({FLAG})")
    if not path.is_dir():
        raise TrainledgerError(f"{path} is a file ({FLAG}); give a run directory, a checkpoint directory or a "
                               "Hugging Face directory")
    if (path / "config.json").is_file() and not (path / ckpt.MANIFEST_FILE).is_file():
        from trainledger.train.hf_io import load_hf_model
        model, spec = load_hf_model(path, FLAG, device)
        return LoadedModel(_finite(model, path).eval(), spec, path, hf_dir=path)
    checkpoint, state = find_checkpoint(path, warn)
    config = state["config"]
    if state["format"] == "full" and config.get("finetune", "full") != "full":       # adapters on a base rebuilt from its source
        from trainledger.train.finetune import build_tuned_model
        from trainledger.train.vocab import run_spec as recorded_spec
        spec = recorded_spec(config)
        model = build_tuned_model(spec, config, state, device, FLAG)
        return LoadedModel(model, spec, checkpoint, int(state["step"]), config)
    weights = state.get("model") if state["format"] == "full" else _gather_sharded(checkpoint, config)
    spec = run_spec(config, weights, checkpoint)
    import torch

    from trainledger.models import Transformer
    dtype = weights["tok_embeddings.weight"].dtype
    with torch.device("meta"):
        model = Transformer(spec, dtype=dtype)
    try:
        model.load_state_dict(weights, strict=True, assign=True)
    except RuntimeError as error:
        raise TrainledgerError(f"checkpoint {checkpoint} does not fit model '{spec.name}': "
                               f"{first_line(error)[:200]} ({FLAG})") from None
    return LoadedModel(_finite(model, checkpoint).to(device).eval(), spec, checkpoint, int(state["step"]), config)


def _finite(model, source: Path):
    """`model` when every weight is finite; a one-line error naming the first that is not (generate printed NUL
    bytes with exit 0 from NaN weights, export would write them)."""
    import torch
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise TrainledgerError(f"{source} holds NaN or infinite weights ({name}) ({FLAG}): a diverged or damaged "
                                   "model; use an earlier checkpoint (`trainledger checkpoints` lists them)")
    return model


def run_spec(config: dict, weights: dict | None, checkpoint: Path):
    """The TransformerSpec a run trained: its --model, with the vocabulary its embedding was saved with."""
    if not isinstance(weights, dict) or "tok_embeddings.weight" not in weights:
        raise TrainledgerError(f"checkpoint {checkpoint} holds no language model weights ({FLAG}): was it a "
                               "--model cruncher run?")
    from trainledger.train.vocab import run_spec as recorded_spec
    name = config.get("model")
    try:
        spec = recorded_spec(config)
    except TrainledgerError as error:
        raise TrainledgerError(f"the run's --model {name!r} cannot be read now: {error}") from None
    if spec.kind != "transformer":
        raise TrainledgerError(f"checkpoint {checkpoint} is a {spec.kind} run; only language models generate ({FLAG})")
    rows = int(weights["tok_embeddings.weight"].shape[0])
    return spec if rows == spec.vocab_size else spec.with_(vocab_size=rows)


def _gather_sharded(checkpoint: Path, config: dict) -> dict:
    """The full model state dict of a sharded (DCP) checkpoint, read on this one process (module docstring)."""
    import torch
    import torch.distributed.checkpoint as dcp

    from trainledger.models import Transformer
    from trainledger.specs import get_model
    from trainledger.train import safe_dcp
    directory = checkpoint / ckpt.SHARDED_DIR
    try:
        metadata = safe_dcp.read_metadata(directory)
    except TrainledgerError as error:
        raise TrainledgerError(f"checkpoint {checkpoint}: {error} ({FLAG})") from None
    names = [key[len("model."):] for key in metadata.state_dict_metadata if key.startswith("model.")]
    embedding = metadata.state_dict_metadata.get("model.tok_embeddings.weight")
    if embedding is None or not names:
        raise TrainledgerError(f"checkpoint {checkpoint} holds no language model weights ({FLAG})")
    spec = get_model(str(config.get("model")), FLAG)
    rows = int(embedding.size[0])
    spec = spec if rows == getattr(spec, "vocab_size", rows) else spec.with_(vocab_size=rows)
    dtype = embedding.properties.dtype
    with torch.device("meta"):
        model = Transformer(spec, dtype=dtype)
    state = model.to_empty(device="cpu").state_dict()        # filled by the load below, never initialised
    try:
        dcp.load({"model": state}, storage_reader=safe_dcp.SafeFileSystemReader(str(directory)),
                 planner=safe_dcp.SafeLoadPlanner(), no_dist=True)
    except TrainledgerError:
        raise
    except Exception as error:      # DCP wraps every failure; say which checkpoint and what it said
        raise TrainledgerError(f"checkpoint {checkpoint} (sharded) cannot be gathered on one process: "
                               f"{first_line(error)[:200]} ({FLAG})") from None
    return {name: tensor for name, tensor in state.items() if isinstance(tensor, torch.Tensor)}
