"""Checkpoints that survive a crash at any moment: atomic directories, sha256 manifests, the last K kept.

Layout of one checkpoint (the directory name carries the optimizer step it was taken after):

    <checkpoint-dir>/step_00000120/
        trainer.pt        everything to continue exactly (model and optimizer unless sharded, schedule step,
                          grad scaler, tokens seen, data-sampler state, RNG states, the resolved config)
        model/            only for FSDP: the sharded model + optimizer written by torch.distributed.checkpoint
        manifest.json     {"step", "format", "files": {relative path: sha256}, "sizes": {relative path: bytes},
                          "info"}, written last

Writing is atomic: the files go into a temporary directory beside the final one, each file is fsynced,
the manifest is written last, then `os.replace` renames the directory and the parent is fsynced. A crash
leaves either the previous state or the complete new checkpoint, never a half one under a final name.

Loading checks, in order, and any failure makes the checkpoint corrupt so that the previous good one is used:
the manifest's shape (a step equal to the directory's, a format, a map of relative file names to sha256s);
every listed file's sha256, and for the sharded format that every file under model/ is listed; the CRC-32 of
every member of trainer.pt (a zip archive); then trainer.pt loads, holds a trainer state of the expected shape
and types, and is the state of the manifest's step (a trainer.pt copied in from another step is refused);
for FSDP, DCP's `.metadata` and every stored item load (safe_dcp.py).

What this protects against, and what it cannot: the manifest and the CRC-32s detect DAMAGE (a truncated or
emptied file, flipped bytes, a file missing or left over, a payload moved from another step), whatever the
cause: a full disk, a crash, bit rot, a bad copy. They are not signatures: someone able to write the checkpoint
directory can change a tensor, recompute the zip's CRC-32s and the sha256s, and write a matching manifest; the
altered weights then load. Protect the directory with file permissions, or keep a copy of the manifest (its
sha256s identify the files) somewhere the writer cannot reach.

Loading never executes pickled code, forged or not: `torch.load(weights_only=True)` accepts tensors and plain
containers only, DCP's metadata goes through a restricted unpickler (safe_dcp.py), and a file naming any other
global is refused (`UnsafeCheckpointError`, exit 2) rather than skipped: someone put it there.

Pruning is crash-safe: a checkpoint leaving the last K is first renamed to `.trash-step_*` (atomic), then
deleted, so a kill mid-delete never leaves half a checkpoint under a final name. Only complete checkpoints
(with a manifest) count toward K; a stray `step_*` directory without one takes no slot. Keeping K checkpoints
needs room for K+1: the new one is written before the oldest is deleted.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import pickle
import re
import shutil
import stat
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from trainledger.errors import TrainledgerError, first_line
from trainledger.files import NotRegularMember, member_path, open_member, read_member, walk_members
from trainledger.train.checkpoint_safety import (SHARDED_DIR, TRAINER_FILE, UnsafeCheckpointError,  # noqa: F401
                                                 refuse_raw_pickle, unsafe_problem)
from trainledger.train.runlock import LOCK_FILE, lock_directory, lock_holder, unlock_directory  # noqa: F401 (re-exported)

MANIFEST_FILE = "manifest.json"
_NAME = re.compile(r"^step_(\d{8,})$")
MANIFEST_MAX_BYTES = 16 << 20      # a manifest is a few KB: a longer one (a link to /dev/zero) is not read on


class CorruptCheckpointError(TrainledgerError):
    """A checkpoint whose files cannot be loaded (truncated, emptied, damaged bytes); the previous one is used."""


@dataclass(frozen=True)
class CheckpointRef:
    """A complete checkpoint directory on disk and the optimizer step it was taken after."""

    path: Path
    step: int


def checkpoint_name(step: int) -> str:
    """Directory name of the checkpoint taken after optimizer step `step` (zero-padded, sorts by step)."""
    return f"step_{step:08d}"


def sha256_file(path: Path) -> str:
    """Hex sha256 of a regular file's bytes, read in 1 MiB blocks; NotRegularMember (an OSError) for a symbolic
    link, a FIFO or a device (files.open_member: never followed, never waited on)."""
    digest = hashlib.sha256()
    with os.fdopen(open_member(path), "rb") as handle:
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
    files, sizes = {}, {}
    for path in sorted(p for p in tmp_dir.rglob("*") if p.is_file()):
        _fsync_file(path)
        files[path.relative_to(tmp_dir).as_posix()] = sha256_file(path)
        sizes[path.relative_to(tmp_dir).as_posix()] = path.stat().st_size
    manifest = tmp_dir / MANIFEST_FILE
    manifest.write_text(json.dumps({"step": step, "format": fmt, "files": files, "sizes": sizes, "info": info or {},
                                    "info_sha256": info_sha256(info or {})}, indent=1))
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


def info_sha256(info: dict) -> str:
    """Hex sha256 of a manifest's `info` (canonical JSON): an edited info.config no longer matches it."""
    return hashlib.sha256(json.dumps(info, sort_keys=True).encode()).hexdigest()


def newest_config(checkpoint_dir: Path, warn=None) -> dict | None:
    """The run config recorded in the newest well-formed manifest whose `info` matches its info_sha256 (JSON, no
    unpickling), or None. `--resume` acts on it before trainer.pt is loaded (it tokenizes the --text it names),
    so a config edited after the save (or from a version that did not hash it) is skipped, with a warning."""
    warn = warn or (lambda message: print(message, file=sys.stderr))
    for ref in reversed(list_checkpoints(checkpoint_dir)):
        manifest = read_manifest(ref.path)
        if manifest is None or manifest_problem(manifest, ref.path) is not None:
            continue
        if manifest.get("info_sha256") != info_sha256(manifest.get("info", {})):
            why = ("do not match its info_sha256 (edited after the save?)" if "info_sha256" in manifest else
                   "carry no info_sha256 (written before trainledger hashed them)")
            warn(f"warning: the run settings in {ref.path / MANIFEST_FILE} {why}: none is taken from it; settings "
                 "not given on the command line come from an older checkpoint or their defaults")
            continue
        config = manifest["info"].get("config")
        return config if isinstance(config, dict) else None
    return None


def manifest_info(path: Path) -> dict:
    """The `info` object of checkpoint `path`'s manifest (loss, loss_spike, tokens, config); {} when there is none."""
    info = (read_manifest(path) or {}).get("info")
    return info if isinstance(info, dict) else {}


def last_finite_checkpoint(refs: list[CheckpointRef]) -> tuple[CheckpointRef | None, float | None]:
    """The newest of `refs` whose manifest records a finite loss that was not a spike, and that loss."""
    for ref in reversed(refs):
        info = manifest_info(ref.path)
        loss = info.get("loss")
        if isinstance(loss, (int, float)) and not isinstance(loss, bool) and math.isfinite(loss) \
                and not info.get("loss_spike"):
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
    """Bytes of every regular file in a checkpoint directory (symbolic links neither counted nor followed)."""
    return sum(p.lstat().st_size for p in walk_members(path)[0])


def read_manifest(path: Path) -> dict | None:
    """The manifest of checkpoint `path`, or None when it is missing, unreadable, no regular file or too long."""
    try:
        manifest = json.loads(read_member(Path(path) / MANIFEST_FILE, MANIFEST_MAX_BYTES))
    except (OSError, ValueError, RecursionError):
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
        if match and path.is_dir() and not path.is_symlink():     # a link to / would be walked
            refs.append(CheckpointRef(path, int(match.group(1))))
    return sorted(refs, key=lambda ref: ref.step)


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def manifest_problem(manifest, path: Path) -> str | None:
    """Why the parsed manifest of checkpoint `path` has the wrong shape, or None: a JSON object whose `step` is
    the step in the directory's name, `format` a name, `files` a map of relative names inside the checkpoint to
    sha256 hex digests (trainer.pt among them), `info` an object."""
    if not isinstance(manifest, dict):
        return f"manifest.json holds {type(manifest).__name__}, not an object"
    step, fmt, files = manifest.get("step"), manifest.get("format"), manifest.get("files")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        return f"manifest.json has step {step!r:.40}, not a step number"
    named = _NAME.match(Path(path).name)
    if named and int(named.group(1)) != step:
        return f"manifest.json is that of step {step}, not of step {int(named.group(1))} (moved from another checkpoint)"
    if not isinstance(fmt, str) or not fmt:
        return f"manifest.json has format {fmt!r:.40}, not a format name"
    if not isinstance(files, dict):
        return f"manifest.json lists files as {type(files).__name__}, not a map of file name to sha256"
    for name, digest in files.items():
        parts = Path(name).parts if isinstance(name, str) else ()
        if not parts or Path(name).is_absolute() or ".." in parts or name == MANIFEST_FILE:
            return f"manifest.json lists {str(name)[:60]!r}, not a file inside the checkpoint"
        if not isinstance(digest, str) or not _SHA256.match(digest):
            return f"manifest.json has no sha256 for {name}"
    sizes = manifest.get("sizes", {})
    if not isinstance(sizes, dict) or not all(name in files and isinstance(size, int) and not isinstance(size, bool)
                                              and size >= 0 for name, size in sizes.items()):
        return "manifest.json has sizes that are not byte counts of its files"
    if not isinstance(manifest.get("info", {}), dict):
        return "manifest.json has an info entry that is not an object"
    if TRAINER_FILE not in files:
        return f"manifest lists no {TRAINER_FILE}"
    return None


def verify(path: Path) -> tuple[str, str | None]:
    """(format, None) when checkpoint `path` is intact, else (format or '', why it is corrupt).

    Intact: the manifest has its shape (manifest_problem), no file is larger than its recorded size (checked before
    any byte is hashed: a member extended to 50 GB took `checkpoints` minutes), every file it lists has its sha256
    (manifests from before sizes were recorded: the sha256 alone), every file under
    model/ (the DCP shards and metadata) is listed, and every member of trainer.pt passes its CRC-32. Reads
    every byte once or twice; unpickles nothing.
    """
    path = Path(path)
    try:
        manifest = json.loads(read_member(path / MANIFEST_FILE, MANIFEST_MAX_BYTES))
    except FileNotFoundError:
        return "", "no manifest.json (the save did not finish)"
    except NotRegularMember as error:
        return "", f"manifest.json is {error.strerror}"
    except (OSError, ValueError, RecursionError) as error:
        return "", f"unreadable manifest.json ({first_line(error)[:120]})"
    problem = manifest_problem(manifest, path)
    if problem:
        fmt = manifest.get("format") if isinstance(manifest, dict) else None
        return (fmt if isinstance(fmt, str) else ""), problem
    files, fmt, sizes = manifest["files"], manifest["format"], manifest.get("sizes", {})
    for name, size in sizes.items():      # before any hashing: a member extended to 50 GB is found at once
        try:
            info = os.lstat(member_path(path, name))
        except (OSError, NotRegularMember):
            continue                      # missing or odd: said below, by the loop that opens it
        if stat.S_ISREG(info.st_mode) and info.st_size > size:
            return fmt, (f"{name} fails its sha256 check unread: it is {info.st_size:,} bytes, its manifest's size and "
                         f"sha256 are of {size:,} bytes (extended or replaced)")
    for name, expected in files.items():
        try:
            if sha256_file(member_path(path, name)) != expected:
                return fmt, f"{name} fails its sha256 check (truncated or modified)"
        except FileNotFoundError:
            return fmt, f"{name} is missing"
        except NotRegularMember as error:
            return fmt, f"{Path(error.filename).relative_to(path).as_posix()} is {error.strerror}"
        except OSError as error:
            return fmt, f"{name} cannot be read ({error.strerror or error})"
    shards, odd = walk_members(path / SHARDED_DIR)
    if odd is not None:
        return fmt, f"{odd.relative_to(path).as_posix()} is neither a regular file nor a directory (a link or a pipe)"
    unlisted = sorted(p.relative_to(path).as_posix() for p in shards if p.relative_to(path).as_posix() not in files)
    if unlisted:
        return fmt, f"{unlisted[0]} is not in the manifest (a file that the save did not write)"
    try:
        check_zip(path / TRAINER_FILE)
    except CorruptCheckpointError as error:
        return fmt, f"{error} although its manifest matches"
    return fmt, None


def check_zip(file: Path) -> None:
    """Raises CorruptCheckpointError unless every member of the zip archive `file` (torch.save's format) reads
    back with its CRC-32: torch.load itself does not check them, so flipped bytes inside a tensor load silently.

    A file that is no zip at all (no end-of-archive record: emptied, cut short, a raw pickle) is left to
    torch.load, which says what it is: damaged, or a pickle naming code (refused, not skipped)."""
    try:
        handle = os.fdopen(open_member(file), "rb")
    except OSError:
        return                       # torch.load (through load_trainer_state) says what it is
    try:
        with handle:
            if not zipfile.is_zipfile(handle):
                return
            handle.seek(0)
            with zipfile.ZipFile(handle) as archive:
                bad = archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError) as error:
        raise CorruptCheckpointError(f"{file} cannot be loaded (not a readable zip archive: {first_line(error)[:80]})") from None
    if bad is not None:
        raise CorruptCheckpointError(f"{file} is damaged (its member {bad} fails the zip's CRC-32 check)")


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
    failure: empty, truncated, bytes damaged so that the unpickler meets an unknown opcode, or a member of the
    zip failing its CRC-32 (bytes flipped inside a tensor, which torch.load would return as they are).
    """
    import torch
    file = Path(path) / TRAINER_FILE
    try:
        with os.fdopen(open_member(file), "rb") as handle:      # no link followed, no FIFO waited on
            refuse_raw_pickle(handle, file)
            state = torch.load(handle, map_location=map_location, weights_only=True)
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
    except UnsafeCheckpointError:
        raise
    except Exception as error:     # EOFError (empty), RuntimeError (truncated zip), OSError, ...
        raise CorruptCheckpointError(f"{file} cannot be loaded ({type(error).__name__}: {first_line(error)[:120]})") from None
    check_zip(file)
    return state


def probe(path: Path, fmt: str) -> dict:
    """The trainer state of checkpoint `path` once everything it needs loads; raises Corrupt/UnsafeCheckpointError.

    The state must be a dict whose `step` is the step of the directory's name: a trainer.pt copied in from another
    checkpoint (with a manifest rewritten to match) is refused. For the sharded format, DCP's `.metadata` is read
    with the restricted unpickler, every shard file is checked to be present and long enough, and every stored
    item is loaded once with weights_only=True, so a damaged or hostile shard is found before any state is touched.
    """
    state = load_trainer_state(path)
    file = Path(path) / TRAINER_FILE
    step = state.get("step") if isinstance(state, dict) else None
    if not isinstance(step, int) or isinstance(step, bool):
        raise CorruptCheckpointError(f"{file} does not hold a trainer state (no step number)")
    named = _NAME.match(Path(path).name)
    if named and int(named.group(1)) != step:
        raise CorruptCheckpointError(f"{file} holds the state of step {step}, not of step {int(named.group(1))} "
                                     "(copied from another checkpoint)")
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
