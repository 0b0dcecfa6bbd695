"""Token caches that another process may have memory-mapped: never rewritten, never replaced.

A cache's name carries a key: the hash of everything its tokens depend on (the source file's identity —
path, device, inode, size, modification time — or the corpus manifest, and the tokenizer's sha256):

    <out-dir>/data/<source name>-<key>.tokens

A changed source (or `touch`) or another tokenizer gives another key, hence another file; the old one is
left to whoever still maps it. A cache is built under a temporary name and published with os.link, which
fails when the name exists, so a cache, once there, is never replaced (when two trainers build one key at
once, the second keeps the first's file: the same tokens). Rewriting a memory-mapped file in place would
truncate it under its reader, whose next access to a page past the new end is SIGBUS.

The latest cache of a source is also reachable under a stable name, `<out-dir>/data/<source name>.tokens`, a
hard link that `alias` re-points with rename(2): a reader that mapped the previous target keeps its inode.

A trainer holds a shared flock(2) on each cache it maps (`hold`) for as long as it runs; stale caches of the
same source are deleted only when an exclusive flock succeeds, i.e. when no one holds them.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Callable

from trainledger.data.tokens import read_header, readable_by_all
from trainledger.errors import TrainledgerError

CACHE_FORMAT = 2              # part of every key: a change of the cache layout invalidates old caches
_HELD: dict[str, object] = {}  # path -> open file holding a shared lock, for the life of the process


def cache_key(**fields) -> str:
    """A 16-hex-digit key of `fields` (JSON-serializable), the cache format included."""
    text = json.dumps({"format": CACHE_FORMAT, **fields}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def file_identity(path: Path) -> dict:
    """What identifies a source file's content without reading it: resolved path, device, inode, size, mtime,
    and its permission bits (a cache has the source's: see build; a chmod gives another cache)."""
    info = path.stat()
    return {"path": str(path.resolve()), "device": info.st_dev, "inode": info.st_ino, "size": info.st_size,
            "mtime_ns": info.st_mtime_ns, "mode": stat.S_IMODE(info.st_mode)}


def source_mode(mode: int) -> int:
    """The mode of a cache of a source file of mode `mode`: a new file's (0666 less the umask), with no read or
    write bit that the source lacks. A 0600 text gives a 0600 cache: tokens are the text, readable back."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask & (stat.S_IMODE(mode) | 0o600)


def cache_path(data_dir: Path, name: str, key: str) -> Path:
    return Path(data_dir) / f"{name}-{key}.tokens"


def usable(path: Path, tokenizer_sha256: str | None) -> bool:
    """Whether `path` is a complete token file recording this tokenizer (or any, for None)."""
    try:
        header = read_header(path)
    except (TrainledgerError, OSError):
        return False
    return tokenizer_sha256 is None or header["tokenizer_sha256"] == tokenizer_sha256


def build(path: Path, write: Callable[[Path], None], tokenizer_sha256: str | None = None,
          mode: int | None = None) -> bool:
    """Makes sure the cache `path` exists: True when this call built it, False when it was there (or another
    process published it meanwhile). `write(tmp)` writes the token file to a private temporary path, which is
    published with `mode` (source_mode of its source; None: a new file's)."""
    path = Path(path)
    if usable(path, tokenizer_sha256):
        return False
    if path.exists():           # damaged (never one of ours): unlink, never rewrite — a reader keeps its inode
        path.unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        with os.fdopen(fd, "rb") as marker:
            fcntl.flock(marker, fcntl.LOCK_EX)      # in progress: prune() leaves it alone
            write(tmp)
            readable_by_all(tmp) if mode is None else os.chmod(tmp, mode)
            try:
                os.link(tmp, path)                  # fails if the name exists: never replaces a cache
                built = True
            except FileExistsError:
                built = False
            except OSError:                         # a file system without hard links
                built = not path.exists()
                if built:
                    os.rename(tmp, path)
        return built
    finally:
        tmp.unlink(missing_ok=True)


def alias(path: Path, name: str) -> Path | None:
    """Points the stable name `<dir of path>/<name>.tokens` at the cache `path` (a hard link, swapped in by an
    atomic rename, so whoever maps the old target is unaffected); the alias, or None where the file system
    has no hard links or the name holds a file that is no alias of a cache (one link only: a file someone put
    there, or an older version's cache), which is left as it is. Call it before `prune`, while the previous
    target still has its second link."""
    path = Path(path)
    stable = path.parent / f"{name}.tokens"
    try:
        info = os.lstat(stable)
    except FileNotFoundError:
        info = None
    except OSError:
        return None
    if info is not None:
        if os.path.samefile(path, stable):
            return stable
        if not stat.S_ISREG(info.st_mode) or info.st_nlink < 2:
            return None
    tmp = path.parent / f".{name}.tokens.{os.getpid()}.{os.urandom(4).hex()}.alias"
    try:
        os.link(path, tmp)
        os.replace(tmp, stable)
    except OSError:
        return None
    finally:
        tmp.unlink(missing_ok=True)
    return stable


def hold(path: Path) -> None:
    """Takes a shared lock on the cache `path` until this process ends: prune() elsewhere will not delete it."""
    key = str(Path(path).resolve())
    if key in _HELD:
        return
    handle = open(path, "rb")
    fcntl.flock(handle, fcntl.LOCK_SH)
    _HELD[key] = handle


def release_all() -> None:
    """Drops every lock hold() took (tests; a process ending drops them anyway)."""
    while _HELD:
        _, handle = _HELD.popitem()
        handle.close()


def prune(data_dir: Path, name: str, keep: Path) -> list[Path]:
    """Deletes the caches `<name>-*.tokens` (and abandoned temporaries) other than `keep` that no process holds;
    the paths deleted."""
    removed = []
    candidates = [*Path(data_dir).glob(f"{_glob_escape(name)}-*.tokens"),
                  *Path(data_dir).glob(f".{_glob_escape(name)}-*.tokens.*.tmp")]
    for path in candidates:
        if path.resolve() == Path(keep).resolve() or not _looks_like_cache(path, name):
            continue
        with contextlib.suppress(OSError):
            with open(path, "rb") as handle:
                try:
                    fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue                    # mapped by a running trainer, or being written
                path.unlink()
                removed.append(path)
    return removed


def _looks_like_cache(path: Path, name: str) -> bool:
    stem = path.name.lstrip(".")[len(name) + 1:]
    key = stem.split(".", 1)[0]
    return len(key) == 16 and all(c in "0123456789abcdef" for c in key)


def _glob_escape(text: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in text)
