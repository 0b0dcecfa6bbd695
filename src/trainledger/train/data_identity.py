"""The identity of the data a run trains on: the size and sha256 of its token file, recorded in every checkpoint.

A `--resume` after the token file at --data was rewritten with other text trained on different data without a
word: the path was the same. The trainer now records (bytes, sha256) of the token file it maps (--data, or the
token cache of --text, --dataset or the built-in corpus, whose name changes with its source), and check_resume
(train/config.py) refuses a resume whose file differs, unless --allow-new-data. Hashing reads the file once at
start (about 1 GB/s), in blocks; the held-out split is part of the file, so it is covered too.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from trainledger.errors import TrainledgerError


def data_identity(path, flag: str = "--data") -> tuple[int, str]:
    """(bytes, hex sha256) of the regular file `path`, read in 4 MiB blocks through one open file (whose size is
    taken from that same file), never following a replaced link mid-read."""
    try:
        with open(Path(path), "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            digest = hashlib.sha256()
            for block in iter(lambda: handle.read(4 << 20), b""):
                digest.update(block)
    except OSError as error:
        raise TrainledgerError(f"{flag}: cannot read {path} ({error.strerror or error})") from None
    return size, digest.hexdigest()
