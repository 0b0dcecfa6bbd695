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

Loading verifies every sha256 first, then loads trainer.pt (and, for FSDP, reads DCP's `.metadata`
and checks the shard sizes): any error there (truncated, emptied, flipped bytes, even with a manifest
rewritten to match) makes the checkpoint corrupt, and the previous good one is used. Loading never executes
pickled code: `torch.load(weights_only=True)` accepts tensors and plain containers only, DCP's metadata goes
through a restricted unpickler (safe_dcp.py), and a file naming any other global is refused
(`UnsafeCheckpointError`, exit 2) rather than skipped: someone put it there.

Pruning is crash-safe: a checkpoint leaving the last K is first renamed to `.trash-step_*` (atomic), then
deleted, so a kill mid-delete never leaves half a checkpoint under a final name. Only complete checkpoints
(with a manifest) count toward K; a stray `step_*` directory without one takes no slot. Keeping K checkpoints
needs room for K+1: the new one is written before the oldest is deleted.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import pickle
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from trainledger.errors import TrainledgerError, first_line

TRAINER_FILE = "trainer.pt"
MANIFEST_FILE = "manifest.json"
LOCK_FILE = ".lock"
SHARDED_DIR = "model"
_NAME = re.compile(r"^step_(\d{8,})$")


class UnsafeCheckpointError(TrainledgerError):
    """A checkpoint holds pickled objects other than tensors and plain containers; it is never loaded."""


class CorruptCheckpointError(TrainledgerError):
    """A checkpoint whose files cannot be loaded (truncated, emptied, damaged bytes); the previous one is used."""


@dataclass(frozen=True)
class CheckpointRef:
    """A complete checkpoint directory on disk and the optimizer step it was taken after."""

    path: Path
    step: int


def lock_directory(checkpoint_dir: Path) -> int:
    """An exclusive OS lock (flock) on `checkpoint_dir`/.lock, held until unlock_directory() or process exit.

    One trainer per directory: a second one gets a TrainledgerError naming the holder's pid, before it has
    touched the metrics or the checkpoints. The kernel drops the lock when its holder dies (even SIGKILL).
    """
    checkpoint_dir = Path(checkpoint_dir)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    path = checkpoint_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise TrainledgerError(f"{checkpoint_dir} is in use by pid {holder} (another trainer); wait for it to "
                               "finish, stop it, or pass another --out-dir/--checkpoint-dir") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def lock_holder(checkpoint_dir: Path) -> str | None:
    """The pid holding `checkpoint_dir`'s lock, or None when no trainer holds it (the lock is not taken)."""
    path = Path(checkpoint_dir) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return os.read(fd, 32).decode(errors="replace").strip() or "unknown"
    finally:
        os.close(fd)
    return None


def unlock_directory(fd: int | None) -> None:
    """Releases a lock_directory() lock (None: nothing held)."""
    if fd is not None:
        os.close(fd)


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
    """Save the trainer state dict (tensors and plain containers only) as trainer.pt in `tmp_dir`.

    Written through a Python file object, so a full disk or a file-size limit raises OSError with its errno
    (ENOSPC, EFBIG) instead of torch's C++ "inline_container" error.
    """
    import torch
    with open(Path(tmp_dir) / TRAINER_FILE, "wb") as handle:
        torch.save(state, handle)


def commit(tmp_dir: Path, checkpoint_dir: Path, step: int, fmt: str, info: dict | None = None) -> Path:
    """Fsync every file in `tmp_dir`, write its manifest, rename it to its final name; the final path.

    `info` (plain JSON values, e.g. the loss) goes into the manifest, readable without loading anything.
    An existing checkpoint of the same step (from a run that crashed after saving it) is replaced.
    """
    tmp_dir, checkpoint_dir = Path(tmp_dir), Path(checkpoint_dir)
    files = {}
    for path in sorted(p for p in tmp_dir.rglob("*") if p.is_file()):
        _fsync_file(path)
        files[path.relative_to(tmp_dir).as_posix()] = sha256_file(path)
    manifest = tmp_dir / MANIFEST_FILE
    manifest.write_text(json.dumps({"step": step, "format": fmt, "files": files, "info": info or {}}, indent=1))
    _fsync_file(manifest)
    for sub in sorted({p.parent for p in tmp_dir.rglob("*") if p.is_file()}):
        fsync_dir(sub)
    final = checkpoint_dir / checkpoint_name(step)
    if final.exists():
        _discard(final)
    os.replace(tmp_dir, final)
    fsync_dir(checkpoint_dir)
    return final


def _discard(path: Path) -> None:
    """Rename `path` to a .trash-* name (atomic), then delete it: never half a checkpoint under a final name."""
    trash = path.parent / f".trash-{path.name}-{os.getpid()}"
    if trash.exists():
        shutil.rmtree(trash, ignore_errors=True)
    os.replace(path, trash)
    fsync_dir(path.parent)
    shutil.rmtree(trash, ignore_errors=True)


def prune(checkpoint_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` complete checkpoints, and leftover temporary and trash directories.

    Only checkpoints with a manifest count toward `keep`; a `step_*` directory without one (not written by
    a finished save) takes no slot and is left alone. The paths deleted.
    """
    checkpoint_dir = Path(checkpoint_dir)
    if not checkpoint_dir.is_dir():
        return []
    removed = []
    for path in [*checkpoint_dir.glob(".tmp-step_*"), *checkpoint_dir.glob(".trash-step_*")]:
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    complete = [ref for ref in list_checkpoints(checkpoint_dir) if (ref.path / MANIFEST_FILE).is_file()]
    for ref in complete[:-keep] if keep > 0 else []:
        _discard(ref.path)
        removed.append(ref.path)
    if removed:
        fsync_dir(checkpoint_dir)
    return removed


def newest_config(checkpoint_dir: Path) -> dict | None:
    """The run config recorded in the manifest of the newest complete checkpoint (JSON, no unpickling), or None."""
    for ref in reversed(list_checkpoints(checkpoint_dir)):
        manifest = read_manifest(ref.path)
        if manifest is not None:
            config = (manifest.get("info") or {}).get("config")
            return config if isinstance(config, dict) else None
    return None


def last_finite_checkpoint(refs: list[CheckpointRef]) -> tuple[CheckpointRef | None, float | None]:
    """The newest of `refs` whose manifest records a finite loss that was not a spike, and that loss."""
    for ref in reversed(refs):
        info = (read_manifest(ref.path) or {}).get("info") or {}
        loss = info.get("loss")
        if isinstance(loss, (int, float)) and math.isfinite(loss) and not info.get("loss_spike"):
            return ref, float(loss)
    return None, None


def os_reason(error: BaseException) -> str:
    """Why a write failed, for one line: "File too large [EFBIG]" (the OS reason, found through DCP's wrapped
    errors), else the first rank's own error, else the exception's first line."""
    seen, todo = set(), [error]
    while todo:
        current = todo.pop()
        if id(current) in seen or current is None:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno:
            name = errno.errorcode.get(current.errno, str(current.errno))
            where = f" ({current.filename})" if current.filename else ""
            return f"{current.strerror or current} [{name}]{where}"
        todo += [current.__cause__, current.__context__, getattr(current, "exc", None)]
        for failure in (getattr(current, "failures", None) or {}).values():    # DCP: {rank: (error, traceback)}
            todo += list(failure) if isinstance(failure, tuple) else [failure]
        todo = [t for t in todo if isinstance(t, BaseException)]
    failures = list((getattr(error, "failures", None) or {}).items())
    if failures:                       # DCP: name the first rank's own error, not the wrapper
        rank, failure = failures[0]
        inner = failure[0] if isinstance(failure, tuple) else failure
        return f"on rank {rank}: {type(inner).__name__}: {first_line(inner)[:200]}"
    return f"{type(error).__name__}: {first_line(error)[:200]}"


def checkpoint_bytes(path: Path) -> int:
    """Bytes of every file in a checkpoint directory."""
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def read_manifest(path: Path) -> dict | None:
    """The manifest of checkpoint `path`, or None when it is missing or unreadable."""
    try:
        manifest = json.loads((Path(path) / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


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


def latest_good(checkpoint_dir: Path, warn=None, load: bool = True) -> tuple[CheckpointRef | None, str]:
    """The newest checkpoint whose files pass their sha256 check (and, with `load`, that probe() can load).

    `warn(message)` is called once for each corrupt checkpoint skipped (default: print to stderr).
    UnsafeCheckpointError propagates: a checkpoint that names foreign code is refused, not skipped.
    """
    warn = warn or (lambda message: print(message, file=sys.stderr))
    for ref in reversed(list_checkpoints(checkpoint_dir)):
        fmt, problem = verify(ref.path)
        if problem is None and load:
            try:
                probe(ref.path, fmt)
            except CorruptCheckpointError as error:
                problem = f"{error} although its manifest matches"
        if problem is None:
            return ref, fmt
        warn(f"warning: checkpoint {ref.path} is corrupt: {problem}; trying the previous one")
    return None, ""


def load_trainer_state(path: Path, map_location="cpu") -> dict:
    """trainer.pt of checkpoint `path`, loaded with weights_only=True; refuses anything carrying code.

    Raises UnsafeCheckpointError (a TrainledgerError: exit status 2) when the file names a global other than
    tensors and plain containers (the object's code never runs), and CorruptCheckpointError for any other
    failure: empty, truncated, or bytes damaged so that the unpickler meets an unknown opcode.
    """
    import torch
    file = Path(path) / TRAINER_FILE
    try:
        state = torch.load(file, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        unsafe = next((line for line in lines if "GLOBAL" in line), None)
        if unsafe is None:     # e.g. "Unsupported operand 175": damaged bytes, not a hostile object
            detail = next((line for line in lines if "Unsupported" in line), lines[0] if lines else "")
            raise CorruptCheckpointError(f"{file} is damaged ({detail[:120]})") from None
        raise UnsafeCheckpointError(
            f"refusing checkpoint {file}: it contains pickled objects that are not tensors or plain containers "
            f"and could run code when loaded ({unsafe[:160]}); trainledger loads checkpoints with "
            f"weights_only=True only. Delete it or pass another --checkpoint-dir") from None
    except Exception as error:     # EOFError (empty), RuntimeError (truncated zip), OSError, ...
        raise CorruptCheckpointError(f"{file} cannot be loaded ({type(error).__name__}: {first_line(error)[:120]})") from None
    return state


def probe(path: Path, fmt: str) -> dict:
    """The trainer state of checkpoint `path` once everything it needs loads; raises Corrupt/UnsafeCheckpointError.

    For the sharded format, DCP's `.metadata` is read with the restricted unpickler, every shard file is
    checked to be present and long enough, and every stored item is loaded once with weights_only=True, so a
    damaged or hostile shard is found before any state is touched.
    """
    state = load_trainer_state(path)
    if not isinstance(state, dict) or "step" not in state:
        raise CorruptCheckpointError(f"{Path(path) / TRAINER_FILE} does not hold a trainer state")
    if fmt == "dcp":
        from trainledger.train import safe_dcp
        try:
            metadata = safe_dcp.read_metadata(Path(path) / SHARDED_DIR)
            safe_dcp.check_items(Path(path) / SHARDED_DIR, metadata)
        except safe_dcp.UnsafeMetadataError as error:
            raise UnsafeCheckpointError(f"refusing checkpoint {path}: {error}. Delete it or pass another "
                                        "--checkpoint-dir") from None
        except safe_dcp.CorruptMetadataError as error:
            raise CorruptCheckpointError(str(error)) from None
    return state
