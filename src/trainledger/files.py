"""Files written atomically, and user files read only when they are regular files (stdlib only).

Written: into a temporary file beside the target, then renamed onto it. A reader sees the old file or the complete
new one, never half of one; a failed write leaves no temporary file.

Every file the tool writes at a path a user names or owns (a lock, a profiler trace, a calibration, loss.png, a
tokenizer.json, the metrics, an export) goes through `check_output` first, before any work, and again through
`replace_output` when it is written (open_output for the files kept open: locks, metrics):
- a symbolic link is never followed, nor replaced (the leaf is looked at with lstat / opened with O_NOFOLLOW);
- a path that is not a regular file (a directory, a FIFO, /dev/null) is never written to nor replaced;
- an existing file is replaced only when it is recognizably the tool's own output of that kind (a caller's
  `ours(head)` says why it is not: a PNG that matplotlib did not write, JSON that is no calibration...), and a file
  with a second hard link (its bytes are another path's too) never is.
What remains: someone who can write the directory can swap the leaf between the check and the rename; the rename
then replaces their link or file, never what a link points to.

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


# --- outputs: never through a link, never onto a device, never over a file that is not ours ------------------------
OUTPUT_PROBE_BYTES = 1 << 16       # what a recognizer sees of an existing file: its first 64 KiB


def _refuse(flag: str, path, why: str, hint: str) -> TrainledgerError:
    return TrainledgerError(f"{flag} {path} {why}; {hint}")


def _lstat(path: Path, flag: str):
    """os.lstat(path), or None when there is nothing there (or its folder is no directory: the caller's folder
    check says so, naming its flag)."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as error:
        raise TrainledgerError(f"{flag}: cannot use {path} ({error.strerror or error})") from None


def read_head(path, max_bytes: int = OUTPUT_PROBE_BYTES) -> bytes:
    """The first `max_bytes` of the regular file `path`, opened without following a link or waiting on a FIFO."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        return os.read(fd, max_bytes)
    finally:
        os.close(fd)


def check_output(path, flag: str, kind: str, ours=None, hint: str = "give another file name, or move that file away"):
    """`path` as a Path when the tool may write `kind` there (module docstring); a one-line TrainledgerError naming
    `flag` otherwise. `ours(head: bytes) -> str | None` says why an existing file's first bytes are not this kind of
    output of the tool (None: they are); without `ours`, any existing regular file may be replaced."""
    path = Path(path)
    info = _lstat(path, flag)
    if info is None:
        return path
    if stat.S_ISLNK(info.st_mode):
        raise _refuse(flag, path, "is a symbolic link; trainledger never writes through one nor replaces it", hint)
    if not stat.S_ISREG(info.st_mode):
        raise not_regular(flag, path, info.st_mode, f"trainledger writes {kind} only as a regular file: {hint}")
    if info.st_nlink > 1:
        raise _refuse(flag, path, f"has {info.st_nlink} hard links (its bytes are another file's too); it is left as "
                      "it is", hint)
    if ours is not None and info.st_size:
        try:
            why = ours(read_head(path))
        except OSError as error:
            why = f"it cannot be read ({error.strerror or error})"
        if why:
            raise _refuse(flag, path, f"exists and is not {kind} written by trainledger ({why}); it is left as it is",
                          hint)
    return path


@contextlib.contextmanager
def replace_output(path, flag: str, kind: str, ours=None, hint: str = "give another file name, or move that file away"):
    """atomic_path(path) once check_output(path, ...) passes: the block writes the temporary path it is given,
    which then replaces `path` (a rename: an existing link or file is replaced, never written through)."""
    check_output(path, flag, kind, ours, hint)
    with atomic_path(path) as tmp:
        yield tmp
        check_output(path, flag, kind, ours, hint)       # again: the work may have taken long


def open_output(path, flag: str, kind: str, ours=None, hint: str = "give another file name, or move that file away",
                flags: int = os.O_RDWR) -> int:
    """An fd on `path` (created, mode 0644, when missing; `flags` O_RDWR or O_WRONLY | O_APPEND) for a file kept
    open and written in place: opened with O_NOFOLLOW (a link is refused, not followed) and O_NONBLOCK (a FIFO
    never blocks the open), then checked on the opened file itself: a regular file, one hard link, and when it
    already held bytes, `ours(head)` (as for check_output)."""
    path = Path(path)
    info = _lstat(path, flag)
    if info is not None and not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
        raise not_regular(flag, path, info.st_mode, f"trainledger writes {kind} only as a regular file: {hint}")
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)
    except IsADirectoryError:
        raise not_regular(flag, path, stat.S_IFDIR, hint) from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise _refuse(flag, path, "is a symbolic link; trainledger never writes through one", hint) from None
        raise TrainledgerError(f"{flag}: cannot use {path} ({error.strerror or error})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise not_regular(flag, path, info.st_mode, f"trainledger writes {kind} only as a regular file: {hint}")
        if info.st_nlink > 1:
            raise _refuse(flag, path, f"has {info.st_nlink} hard links (its bytes are another file's too); it is left "
                          "as it is", hint)
        if ours is not None and info.st_size:
            why = ours(os.pread(fd, OUTPUT_PROBE_BYTES, 0))
            if why:
                raise _refuse(flag, path, f"exists and is not {kind} written by trainledger ({why}); it is left as it "
                              "is", hint)
    except BaseException:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return fd


# Recognizers of the tool's own outputs (for check_output's `ours`): why `head`, an existing file's first bytes, is
# not that kind of output of trainledger, or None when it is.
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def matplotlib_png_problem(head: bytes) -> str | None:
    """loss.png: a PNG whose tEXt Software chunk names Matplotlib (what matplotlib's savefig writes first)."""
    if not head.startswith(PNG_SIGNATURE):
        return "not a PNG image"
    return None if b"Software\x00Matplotlib" in head[:4096] else "a PNG image that matplotlib did not write"


def chrome_trace_problem(head: bytes) -> str | None:
    """A profiler trace: torch.profiler's Chrome/Perfetto JSON (an object with schemaVersion or traceEvents early)."""
    if head.startswith(b"\x1f\x8b"):
        return "a gzip file"
    text = head.lstrip()
    if not text.startswith(b"{") or not (b'"traceEvents"' in text or b'"schemaVersion"' in text):
        return "not a Chrome trace (a JSON object with traceEvents)"
    return None


def json_format_problem(format_name: str):
    """A recognizer of the JSON objects whose "format" key is `format_name` (a calibration profile writes it first)."""
    import re
    key = re.compile(rb'"format"\s*:\s*"' + re.escape(format_name.encode()) + rb'"')

    def problem(head: bytes) -> str | None:
        if not head.lstrip().startswith(b"{") or not key.search(head):
            return f"not a JSON object of format {format_name!r}"
        return None
    return problem
