"""Checkpoints that survive a crash at any moment: atomic directories, sha256 manifests, the last K kept.

Layout of one checkpoint (the directory name carries the optimizer step it was taken after):

    <checkpoint-dir>/step_00000120/
        trainer.pt        everything to continue exactly (model and optimizer unless sharded, schedule step,
                          grad scaler, tokens seen, data-sampler state, RNG states, the resolved config)
        model/            only for FSDP: the sharded model + optimizer written by torch.distributed.checkpoint
        manifest.json     {"step", "format", "files": {relative path: sha256}}, written last

Writing is atomic: the files go into a temporary directory beside the final one, each file is fsynced,
the manifest is written last, then `os.replace` renames the directory and the parent is fsynced. A crash
leaves either the previous state or the complete new checkpoint, never a half one under a final name.

Loading verifies every sha256 first; a corrupt or truncated latest checkpoint is reported and the
previous good one is used. Loading never executes pickled code: `torch.load(weights_only=True)` accepts
tensors and plain containers only, and a file carrying anything else is refused (`UnsafeCheckpointError`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from trainledger.errors import TrainledgerError

TRAINER_FILE = "trainer.pt"
MANIFEST_FILE = "manifest.json"
SHARDED_DIR = "model"
_NAME = re.compile(r"^step_(\d{8,})$")


class UnsafeCheckpointError(TrainledgerError):
    """A checkpoint holds pickled objects other than tensors and plain containers; it is never loaded."""


@dataclass(frozen=True)
class CheckpointRef:
    """A complete checkpoint directory on disk and the optimizer step it was taken after."""

    path: Path
    step: int


def checkpoint_name(step: int) -> str:
    """Directory name of the checkpoint taken after optimizer step `step` (zero-padded, sorts by step)."""
    return f"step_{step:08d}"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (a rename or a new file) to disk; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as handle:
        handle.flush()
        os.fsync(handle.fileno())


def begin(checkpoint_dir: Path, step: int) -> Path:
    """A fresh temporary directory inside `checkpoint_dir` to write the checkpoint of `step` into."""
    checkpoint_dir = Path(checkpoint_dir)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".tmp-{checkpoint_name(step)}-", dir=checkpoint_dir))


def write_trainer_state(tmp_dir: Path, state: dict) -> None:
    """Save the trainer state dict (tensors and plain containers only) as trainer.pt in `tmp_dir`."""
    torch.save(state, Path(tmp_dir) / TRAINER_FILE)


def commit(tmp_dir: Path, checkpoint_dir: Path, step: int, fmt: str) -> Path:
    """Fsync every file in `tmp_dir`, write its manifest, rename it to its final name; the final path.

    An existing checkpoint of the same step (from a run that crashed after saving it) is replaced.
    """
    tmp_dir, checkpoint_dir = Path(tmp_dir), Path(checkpoint_dir)
    files = {}
    for path in sorted(p for p in tmp_dir.rglob("*") if p.is_file()):
        _fsync_file(path)
        files[path.relative_to(tmp_dir).as_posix()] = sha256_file(path)
    manifest = tmp_dir / MANIFEST_FILE
    manifest.write_text(json.dumps({"step": step, "format": fmt, "files": files}, indent=1))
    _fsync_file(manifest)
    for sub in sorted({p.parent for p in tmp_dir.rglob("*") if p.is_file()}):
        fsync_dir(sub)
    final = checkpoint_dir / checkpoint_name(step)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp_dir, final)
    fsync_dir(checkpoint_dir)
    return final


def prune(checkpoint_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` checkpoints and any leftover temporary directories; the paths deleted."""
    checkpoint_dir = Path(checkpoint_dir)
    if not checkpoint_dir.is_dir():
        return []
    removed = []
    for path in checkpoint_dir.glob(".tmp-step_*"):
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    for ref in list_checkpoints(checkpoint_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(ref.path, ignore_errors=True)
        removed.append(ref.path)
    if removed:
        fsync_dir(checkpoint_dir)
    return removed


def list_checkpoints(checkpoint_dir: Path) -> list[CheckpointRef]:
    """Checkpoint directories (complete or not) in `checkpoint_dir`, oldest first."""
    checkpoint_dir = Path(checkpoint_dir)
    if not checkpoint_dir.is_dir():
        return []
    refs = []
    for path in checkpoint_dir.iterdir():
        match = _NAME.match(path.name)
        if match and path.is_dir():
            refs.append(CheckpointRef(path, int(match.group(1))))
    return sorted(refs, key=lambda ref: ref.step)


def verify(path: Path) -> tuple[str, str | None]:
    """(format, None) if every file in the manifest has its sha256, else (format or '', why it is corrupt)."""
    path = Path(path)
    try:
        manifest = json.loads((path / MANIFEST_FILE).read_text())
        files, fmt = manifest["files"], manifest["format"]
    except FileNotFoundError:
        return "", "no manifest.json (the save did not finish)"
    except (OSError, ValueError, KeyError, TypeError) as error:
        return "", f"unreadable manifest.json ({error})"
    if TRAINER_FILE not in files:
        return fmt, f"manifest lists no {TRAINER_FILE}"
    for name, expected in files.items():
        file = path / name
        if not file.is_file():
            return fmt, f"{name} is missing"
        if sha256_file(file) != expected:
            return fmt, f"{name} fails its sha256 check (truncated or modified)"
    return fmt, None


def latest_good(checkpoint_dir: Path, warn=None) -> tuple[CheckpointRef | None, str]:
    """The newest checkpoint whose files pass their sha256 check and its format; corrupt ones are reported.

    `warn(message)` is called once for each corrupt checkpoint skipped (default: print to stderr).
    """
    warn = warn or (lambda message: print(message, file=sys.stderr))
    for ref in reversed(list_checkpoints(checkpoint_dir)):
        fmt, problem = verify(ref.path)
        if problem is None:
            return ref, fmt
        warn(f"warning: checkpoint {ref.path} is corrupt: {problem}; trying the previous one")
    return None, ""


def load_trainer_state(path: Path, map_location="cpu") -> dict:
    """trainer.pt of checkpoint `path`, loaded with weights_only=True; refuses anything carrying code.

    Raises UnsafeCheckpointError (a TrainledgerError: exit status 2) when the file holds a pickled
    object other than tensors and plain containers; the object's code never runs.
    """
    file = Path(path) / TRAINER_FILE
    try:
        return torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        first = str(error).strip().splitlines()
        detail = next((line for line in first if "GLOBAL" in line or "Unsupported" in line), first[0] if first else "")
        raise UnsafeCheckpointError(
            f"refusing checkpoint {file}: it contains pickled objects that are not tensors or plain containers "
            f"and could run code when loaded ({detail.strip()[:160]}); trainledger loads checkpoints with "
            f"weights_only=True only. Delete it or pass another --checkpoint-dir") from None
