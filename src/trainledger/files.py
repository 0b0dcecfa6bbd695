"""Files written atomically, and user files read only when they are regular files (stdlib only).

Written: into a temporary file beside the target, then renamed onto it. A reader sees the old file or the complete
new one, never half of one; a failed write leaves no temporary file.

Read: a path a user names (a config, a text) is checked to be a regular file before it is read, so that a named
pipe (which blocks the open), a device such as /dev/zero (endless) or a directory is one line naming the flag.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from pathlib import Path

from trainledger.errors import TrainledgerError


@contextlib.contextmanager
def atomic_path(path):
    """A temporary path beside `path` (its folder created) to write to: os.replace'd onto `path` when the block
    succeeds, deleted when it raises. It has the mode of a plain new file (0666 less the umask), not mkstemp's 0600,
    so that what lands at `path` (loss.png, a tokenizer.json, a calibration) is as readable as the files beside it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    mask = os.umask(0)
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def file_kind(mode: int) -> str:
    """What a stat mode is, in words: 'a directory', 'a named pipe (FIFO)', 'a character device', ..."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "neither a file nor a directory"


def not_regular(flag: str, path, mode: int, hint: str = "give a regular file") -> TrainledgerError:
    """The one-line error for a path of mode `mode` given where a regular file is needed."""
    if stat.S_ISDIR(mode):
        return TrainledgerError(f"{flag} {path} is a directory, not a regular file; {hint}")
    return TrainledgerError(f"{flag} {path} is not a regular file (it is {file_kind(mode)}); {hint}")


def read_regular_file(path, flag: str, max_bytes: int) -> bytes:
    """The bytes of `path` when it is a regular file of at most `max_bytes`; a one-line TrainledgerError naming
    `flag` otherwise. Opened with O_NONBLOCK (a FIFO never blocks the open) and checked with fstat on the opened
    file before anything is read, so a pipe, /dev/zero or a directory is refused at once, not read forever."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise TrainledgerError(f"{flag} file {path} does not exist") from None
    except IsADirectoryError:
        raise not_regular(flag, path, stat.S_IFDIR) from None
    except OSError as error:
        raise TrainledgerError(f"{flag}: cannot read {path} ({error.strerror or error})") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise not_regular(flag, path, info.st_mode)
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > max_bytes:
            raise TrainledgerError(f"{flag} {path} is {info.st_size:,} bytes; at most {max_bytes:,} are read")
        try:
            return handle.read(max_bytes + 1)[:max_bytes]
        except OSError as error:
            raise TrainledgerError(f"{flag}: cannot read {path} ({error.strerror or error})") from None


# --- members of a directory we wrote (checkpoints): never followed out of it, never waited on ---------------------
class NotRegularMember(OSError):
    """A file of a directory we wrote is a symbolic link, a FIFO, a device or a directory: someone replaced it."""


def open_member(path) -> int:
    """A read-only fd on `path`, a regular file that is no symbolic link (O_NOFOLLOW) and never blocks the open
    (O_NONBLOCK: a FIFO); NotRegularMember otherwise. Its parents are checked by the caller (member_path)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise NotRegularMember(errno.ELOOP, "a symbolic link, not a regular file", str(path)) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise NotRegularMember(errno.EINVAL, f"{file_kind(mode)}, not a regular file", str(path))
    os.set_blocking(fd, True)
    return fd


def read_member(path, max_bytes: int) -> bytes:
    """The bytes of the regular file `path` (open_member), at most `max_bytes`: a longer one is an OSError."""
    with os.fdopen(open_member(path), "rb") as handle:
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"longer than {max_bytes:,} bytes", str(path))
    return data


def member_path(root, name: str) -> Path:
    """root/name once every directory between them is a real directory (no symbolic link, no device);
    NotRegularMember naming the first that is not."""
    root, current = Path(root), Path(root)
    for part in Path(name).parts[:-1]:
        current = current / part
        mode = os.lstat(current).st_mode
        if not stat.S_ISDIR(mode):
            what = "a symbolic link" if stat.S_ISLNK(mode) else file_kind(mode)
            raise NotRegularMember(errno.ENOTDIR, f"{what}, not a directory", str(current))
    return root / name


def walk_members(root) -> tuple[list[Path], Path | None]:
    """(every regular file under the real directory `root`, the first entry that is neither a regular file nor a
    real directory, or None). Symbolic links are reported, never followed; a missing root is ([], None)."""
    try:
        mode = os.lstat(root).st_mode
    except FileNotFoundError:
        return [], None
    if not stat.S_ISDIR(mode):
        return [], Path(root)
    files, odd = [], None
    for folder, dirs, names in os.walk(root, followlinks=False):
        for name in sorted(dirs + names):
            entry = Path(folder) / name
            entry_mode = os.lstat(entry).st_mode
            if stat.S_ISREG(entry_mode):
                files.append(entry)
            elif not stat.S_ISDIR(entry_mode):
                odd = odd or entry
    return files, odd
