"""One trainer per run: exclusive OS locks (flock) on everything a run writes, taken before it writes anything.

A run writes into its --out-dir (the token cache under data/, metrics.jsonl, loss.png), its --checkpoint-dir
and its --metrics file, which may lie outside the out-dir. `lock_run()` locks each of them:

    <checkpoint-dir>/.lock    <out-dir>/.lock    the --metrics file itself (created empty if missing)

so a second trainer sharing any one of them (the same out-dir with another --checkpoint-dir, the same
checkpoint dir from another out-dir, another out-dir with the same --metrics file) stops with one line naming
the holder before it has touched a file, instead of rewriting the token cache the first one has memory-mapped
(SIGBUS) or truncating its metrics. The kernel drops a lock when its holder dies (SIGKILL included): no stale
lock files.
"""

from __future__ import annotations

import fcntl
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.files import not_regular, open_output
from trainledger.train.metrics import not_metrics

LOCK_FILE = ".lock"
LOCK_MAX_BYTES = 4096             # a pid, a metrics path and one word
CHECKPOINTED = "checkpointed"     # third line of a checkpoint dir's lock file once its run committed a checkpoint
_APPENDED = "the run appends one record per step to it and reads it back: give a file name"


def _busy(what: Path, holder: str) -> TrainledgerError:
    error = TrainledgerError(f"{what} is in use by pid {holder} (another trainer); wait for it to finish, stop it, "
                             "or pass another --out-dir/--checkpoint-dir")
    error.held_by_another = True       # the refused trainer leaves that trainer's files alone (train/fresh_start.py)
    return error


def _lines(fd: int) -> list[str]:
    return os.read(fd, 4096).decode(errors="replace").splitlines()


def lock_problem(head: bytes) -> str | None:
    """Why the first bytes of an existing `.lock` are no lock file of a trainer (None: they are): a lock holds a
    pid on its first line, then at most a path and a word, a few hundred bytes (lock_directory, RunLocks._note)."""
    if len(head) > LOCK_MAX_BYTES:
        return f"it is longer than a lock file's {LOCK_MAX_BYTES:,} bytes"
    lines = head.split(b"\n")
    if lines[0].strip() and not lines[0].strip().isdigit():
        return "its first line is no process id"
    return None


def lock_directory(directory: Path, note: str = "", flag: str = "--out-dir") -> int:
    """An exclusive lock on `directory`/.lock (created, with the directory), held until unlock_directory() or exit.

    The lock file holds the holder's pid on its first line and `note` on its second (the run's metrics file, for
    a checkpoint dir: see lock_note); a second locker gets a TrainledgerError naming the pid. A `.lock` that is a
    symbolic link, a hard link, no regular file or no lock file is refused naming `flag`, never truncated
    (files.open_output): `ln -s ~/victim.txt run/.lock` wrote the pid into victim.txt.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fd = open_output(directory / LOCK_FILE, flag, "a lock file", ours=lock_problem,
                     hint=f"remove it (trainledger creates its own) or pass another {flag}")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = next(iter(_lines(fd)), "").strip() or "unknown"
        os.close(fd)
        raise _busy(directory, holder) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n{note}\n".encode())
    return fd


def lock_note(directory: Path, line: int = 1) -> str | None:
    """The note the last holder of `directory`'s lock left (its second line, or `line`), or None when there is none."""
    try:
        fd = os.open(Path(directory) / LOCK_FILE, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        lines = _lines(fd)
    finally:
        os.close(fd)
    return lines[line] if len(lines) > line and lines[line] else None


def lock_file(path: Path, flag: str) -> int:
    """An exclusive lock on the regular file `path` itself (created empty when missing; never truncated here).

    A path that exists but is not a regular file (/dev/full, a FIFO, a directory) is refused naming `flag`:
    the run appends to it and reads it back. The file cannot hold a pid, so a second locker is told "another
    trainer" and the pid that holds the out-dir, when known.
    """
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise not_regular(flag, path, stat.S_IFDIR, f"give a file name such as {path / 'metrics.jsonl'}")
    fd = open_output(path, flag, "a metrics file", hint=_APPENDED)    # no link followed, no FIFO, one hard link
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise TrainledgerError(f"{flag} {path} is in use by another trainer; wait for it to finish, stop it, or "
                               f"pass another {flag}") from None
    return fd


def lock_holder(directory: Path) -> str | None:
    """The pid holding `directory`'s lock, or None when no trainer holds it (the lock is not taken)."""
    path = Path(directory) / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)   # a planted FIFO or link
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return next(iter(_lines(fd)), "").strip() or "unknown"
    finally:
        os.close(fd)
    return None


def unlock_directory(fd: int | None) -> None:
    """Releases a lock_directory() or lock_file() lock (None: nothing held)."""
    if fd is not None:
        os.close(fd)


@dataclass
class RunLocks:
    """The locks of one run (fds), the metrics file the checkpoint dir's previous trainer wrote (or None) and
    whether that trainer committed a checkpoint (then its metrics are a run's record, not a false start)."""

    fds: list[int] = field(default_factory=list)
    previous_metrics: str | None = None
    previous_checkpointed: bool = False
    metrics: Path | None = None          # this run's, once claim_metrics() recorded it

    def claim_metrics(self, metrics: Path, checkpointed: bool = False) -> None:
        """Records in the checkpoint dir's lock file that `metrics` is this run's (once it has started), and
        `checkpointed` (a resumed run continues one that did) on a third line."""
        self.metrics = Path(metrics).resolve()
        self._note(checkpointed)

    def mark_checkpointed(self) -> None:
        """Records that this run committed a checkpoint: its metrics are never again taken for a false start."""
        if self.metrics is not None:
            self._note(True)

    def _note(self, checkpointed: bool) -> None:
        if self.fds:
            os.lseek(self.fds[0], 0, os.SEEK_SET)
            os.ftruncate(self.fds[0], 0)
            os.write(self.fds[0], f"{os.getpid()}\n{self.metrics}\n{CHECKPOINTED if checkpointed else ''}\n".encode())


def lock_run(out_dir: Path, checkpoint_dir: Path, metrics: Path) -> RunLocks:
    """Locks a run's checkpoint dir, out-dir and metrics file, in that order.

    Once the run has started, RunLocks.claim_metrics() records the resolved metrics path in the checkpoint dir's
    lock file, so that a later run can tell that run's metrics (killed before its first checkpoint) from another
    run's. On a refusal, the locks already taken are released before the TrainledgerError propagates.
    """
    out_dir, checkpoint_dir, metrics = Path(out_dir), Path(checkpoint_dir), Path(metrics)
    locks = RunLocks(previous_metrics=lock_note(checkpoint_dir),
                     previous_checkpointed=lock_note(checkpoint_dir, 2) == CHECKPOINTED)
    try:
        note = (locks.previous_metrics or "") + (f"\n{CHECKPOINTED}" if locks.previous_checkpointed else "")
        locks.fds.append(lock_directory(checkpoint_dir, note, "--checkpoint-dir"))
        if out_dir.resolve() != checkpoint_dir.resolve():
            locks.fds.append(lock_directory(out_dir, flag="--out-dir"))
        metrics.parent.mkdir(parents=True, exist_ok=True)
        locks.fds.append(lock_file(metrics, "--metrics"))
        foreign = not_metrics(metrics)
        if foreign:          # a corpus, another run's token file: never truncated, never appended to
            raise TrainledgerError(f"--metrics {metrics} exists and is not a metrics file: {foreign}; refusing to "
                                   "overwrite or append to it: pass another --metrics (or move that file away)")
    except BaseException:
        unlock_all(locks)
        raise
    return locks


def unlock_all(locks: RunLocks | None) -> None:
    """Releases every lock of a run (None or already released: nothing to do)."""
    while locks is not None and locks.fds:
        unlock_directory(locks.fds.pop())
