"""Token files on disk: a small self-describing header followed by the raw tokens, opened with np.memmap.

Layout of a `.tokens` file (little-endian, 64-byte header so the tokens start aligned):

    offset  size  field
    0       8     magic b"TLTOKENS"
    8       2     version (1)
    10      2     header length in bytes (64)
    12      16    dtype name, ASCII, NUL-padded ("uint8", "uint16", "int32", "uint32", "int64")
    28      8     number of tokens
    36      28    zero padding
    64      ...   tokens, n_tokens × itemsize bytes

`open_tokens` also reads NumPy `.npy` files (np.load with mmap_mode="r") and headerless raw files when the
caller names the dtype (the lecture's `np.memmap("data.npy", dtype=np.int32)`). Memory mapping means a file
larger than RAM works: only the pages a batch touches are read (CS336 Lecture 2, "data loading").
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np

from trainledger.errors import TrainledgerError

MAGIC = b"TLTOKENS"
VERSION = 1
HEADER_BYTES = 64
DTYPES = ("uint8", "uint16", "int32", "uint32", "int64")
_FIELDS = struct.Struct("<8sHH16sQ")  # magic, version, header length, dtype name, n_tokens


def encode_header(dtype: str, n_tokens: int) -> bytes:
    """The 64-byte header of a token file holding `n_tokens` tokens of `dtype`."""
    dtype = _check_dtype(dtype)
    fields = _FIELDS.pack(MAGIC, VERSION, HEADER_BYTES, dtype.encode("ascii"), int(n_tokens))
    return fields + b"\0" * (HEADER_BYTES - len(fields))


def read_header(path: str | os.PathLike) -> dict:
    """The header of a token file: {'version', 'header_bytes', 'dtype', 'n_tokens'}; raises on a corrupt file."""
    path = _existing_file(path)
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if len(raw) < _FIELDS.size or raw[:8] != MAGIC:
        raise TrainledgerError(f"{path} is not a trainledger token file (no {MAGIC.decode()} header); "
                               "write one with `trainledger tokenize` or pass dtype= for a raw file")
    magic, version, header_bytes, dtype_raw, n_tokens = _FIELDS.unpack(raw[:_FIELDS.size])
    if version != VERSION:
        raise TrainledgerError(f"{path}: token file version {version} is not supported (this trainledger reads {VERSION})")
    dtype = dtype_raw.rstrip(b"\0").decode("ascii", errors="replace")
    if dtype not in DTYPES:
        raise TrainledgerError(f"{path}: corrupt header, dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if header_bytes < _FIELDS.size:
        raise TrainledgerError(f"{path}: corrupt header, header length {header_bytes} < {_FIELDS.size}")
    expected = header_bytes + n_tokens * np.dtype(dtype).itemsize
    actual = path.stat().st_size
    if actual != expected:
        raise TrainledgerError(f"{path}: corrupt or truncated token file, header says {n_tokens} {dtype} tokens "
                               f"({expected} bytes with the header) but the file has {actual} bytes")
    return {"version": version, "header_bytes": header_bytes, "dtype": dtype, "n_tokens": n_tokens}


def write_tokens(path: str | os.PathLike, tokens, dtype: str | None = None) -> Path:
    """The path written: `tokens` (array-like of ints) stored with a header; dtype defaults to the array's."""
    array = np.asarray(tokens)
    dtype = _check_dtype(dtype or array.dtype.name)
    if array.size and array.dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = int(array.min()), int(array.max())
        if low < info.min or high > info.max:
            raise TrainledgerError(f"tokens range over [{low}, {high}], which does not fit dtype {dtype}")
    elif array.size and array.dtype.kind not in "iu":
        raise TrainledgerError(f"tokens must be integers, got an array of {array.dtype}")
    path = Path(path)
    with open(path, "wb") as f:
        f.write(encode_header(dtype, array.size))
        f.write(np.ascontiguousarray(array.reshape(-1), dtype=dtype).tobytes())
    return path


class TokenWriter:
    """Appends token chunks to a token file and fixes the count in the header on close (for streaming)."""

    def __init__(self, path: str | os.PathLike, dtype: str = "uint16"):
        self.path = Path(path)
        self.dtype = _check_dtype(dtype)
        self.n_tokens = 0
        self._file = open(self.path, "wb")
        self._file.write(encode_header(self.dtype, 0))

    def write(self, tokens) -> None:
        array = np.asarray(tokens)
        if array.size and (int(array.min()) < np.iinfo(self.dtype).min or int(array.max()) > np.iinfo(self.dtype).max):
            raise TrainledgerError(f"tokens do not fit dtype {self.dtype}")
        self._file.write(np.ascontiguousarray(array.reshape(-1), dtype=self.dtype).tobytes())
        self.n_tokens += array.size

    def close(self) -> None:
        if self._file.closed:
            return
        self._file.seek(0)
        self._file.write(encode_header(self.dtype, self.n_tokens))
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open_tokens(path: str | os.PathLike, dtype: str | None = None) -> np.ndarray:
    """A read-only np.memmap (1-D) over the tokens of a `.tokens`, `.npy` or raw file (raw needs `dtype`).

    Nothing is read into memory here; indexing the result reads only the pages it touches.
    """
    path = _existing_file(path)
    if path.stat().st_size == 0:
        raise TrainledgerError(f"{path} is empty: tokenize some text first (`trainledger tokenize`)")
    with open(path, "rb") as f:
        start = f.read(8)
    if start == MAGIC:
        header = read_header(path)
        if dtype is not None and _check_dtype(dtype) != header["dtype"]:
            raise TrainledgerError(f"{path} holds {header['dtype']} tokens, not {dtype}")
        if header["n_tokens"] == 0:
            raise TrainledgerError(f"{path} holds no tokens")
        return np.memmap(path, dtype=header["dtype"], mode="r", offset=header["header_bytes"],
                         shape=(header["n_tokens"],))
    if start[:6] == b"\x93NUMPY":
        try:
            array = np.load(path, mmap_mode="r")
        except ValueError as error:
            raise TrainledgerError(f"{path}: corrupt .npy file ({error})") from None
        if array.ndim != 1 or array.dtype.name not in DTYPES:
            raise TrainledgerError(f"{path}: a token .npy must be 1-D of {', '.join(DTYPES)}, "
                                   f"got shape {array.shape} of {array.dtype}")
        return array
    if dtype is None:
        raise TrainledgerError(f"{path} has no token header and is not .npy; pass its dtype "
                               f"({', '.join(DTYPES)}) to read it as raw tokens")
    dtype = _check_dtype(dtype)
    if path.stat().st_size % np.dtype(dtype).itemsize:
        raise TrainledgerError(f"{path}: size {path.stat().st_size} bytes is not a multiple of {dtype}'s "
                               f"{np.dtype(dtype).itemsize} bytes; wrong dtype?")
    return np.memmap(path, dtype=dtype, mode="r")


def _check_dtype(dtype) -> str:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise TrainledgerError(f"token dtype {name!r} is not supported; use one of {', '.join(DTYPES)}")
    return name


def _existing_file(path) -> Path:
    path = Path(path)
    if not path.exists():
        raise TrainledgerError(f"token file {path} does not exist")
    if not path.is_file():
        raise TrainledgerError(f"{path} is not a file")
    return path
