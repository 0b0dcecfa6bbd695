"""Files written atomically: into a temporary file beside the target, then renamed onto it (stdlib only).

A reader sees the old file or the complete new one, never half of one; a failed write leaves no temporary file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


@contextlib.contextmanager
def atomic_path(path):
    """A temporary path beside `path` (its folder created) to write to: os.replace'd onto `path` when the block
    succeeds, deleted when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
