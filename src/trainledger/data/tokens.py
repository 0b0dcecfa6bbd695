"""Token files on disk: a small self-describing header followed by the raw tokens, opened with np.memmap.

Layout of a `.tokens` file (little-endian; a 128-byte header so the tokens start aligned):

    offset  size  field
    0       8     magic b"TLTOKENS"
    8       2     version (1)
    10      2     header length in bytes (128; 64 in files written before the tokenizer fields existed)
    12      16    dtype name, ASCII, NUL-padded ("uint8", "uint16", "int32", "uint32", "int64")
    28      8     number of tokens
    36      4     vocabulary size of the tokenizer (0: not recorded)   } present when the header
    40      32    sha256 of the tokenizer (all zero: not recorded)     } length is 120 or more
    72      48    tokenizer name, UTF-8, NUL-padded                    }
    120     8     zero padding
    128     ...   tokens, n_tokens × itemsize bytes

The first five fields never move and the tokens always start at the header length, so a reader of the
64-byte files reads these too (and this reader reads those: their tokenizer is "not recorded"). A field
added later goes after these, with a longer header.

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
HEADER_BYTES = 128
DTYPES = ("uint8", "uint16", "int32", "uint32", "int64")
_FIELDS = struct.Struct("<8sHH16sQ")  # magic, version, header length, dtype name, n_tokens
_TOKENIZER = struct.Struct("<I32s48s")   # vocabulary size, tokenizer sha256 (raw), tokenizer name
NAME_BYTES = 48


def encode_header(dtype: str, n_tokens: int, tokenizer=None) -> bytes:
    """The 128-byte header of a token file holding `n_tokens` tokens of `dtype`.

    `tokenizer`: None (not recorded) or any object with `.name`, `.sha256` (hex) and `.vocab_size` (a
    trainledger.data Tokenizer); a vocabulary whose ids do not fit `dtype` is refused.
    """
    dtype = _check_dtype(dtype)
    fields = _FIELDS.pack(MAGIC, VERSION, HEADER_BYTES, dtype.encode("ascii"), int(n_tokens))
    vocab, digest, name = 0, b"", b""
    if tokenizer is not None:
        vocab = int(tokenizer.vocab_size)
        if vocab - 1 > np.iinfo(dtype).max:
            raise TrainledgerError(f"dtype {dtype} holds ids up to {np.iinfo(dtype).max}, but tokenizer "
                                   f"{tokenizer.name} has {vocab} tokens; use {dtype_for_vocab(vocab)}")
        digest = bytes.fromhex(tokenizer.sha256)
        name = tokenizer.name.encode("utf-8")[:NAME_BYTES]
        name = name.decode("utf-8", errors="ignore").encode("utf-8")     # never cut inside a character
    fields += _TOKENIZER.pack(vocab, digest, name)
    return fields + b"\0" * (HEADER_BYTES - len(fields))


def dtype_for_vocab(vocab_size: int) -> str:
    """The smallest unsigned dtype that holds every id of a vocabulary (uint8 is left to an explicit choice)."""
    return "uint16" if vocab_size <= 2**16 else "uint32"


def read_header(path: str | os.PathLike) -> dict:
    """The header of a token file: {'version', 'header_bytes', 'dtype', 'n_tokens', 'vocab_size',
    'tokenizer_sha256', 'tokenizer_name'} (the last three None when not recorded); raises on a corrupt file."""
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
    header = {"version": version, "header_bytes": header_bytes, "dtype": dtype, "n_tokens": n_tokens,
              "vocab_size": None, "tokenizer_sha256": None, "tokenizer_name": None}
    end = _FIELDS.size + _TOKENIZER.size
    if header_bytes >= end and len(raw) >= end:       # a 64-byte header (older files) records no tokenizer
        vocab, digest, name = _TOKENIZER.unpack(raw[_FIELDS.size:end])
        if vocab:
            header.update(vocab_size=vocab, tokenizer_sha256=digest.hex(),
                          tokenizer_name=name.rstrip(b"\0").decode("utf-8", errors="replace"))
    return header


def write_tokens(path: str | os.PathLike, tokens, dtype: str | None = None, tokenizer=None) -> Path:
    """The path written: `tokens` (array-like of ints) stored with a header; dtype defaults to the array's.

    `tokenizer` (optional, see encode_header) is recorded in the header; ids at or above its vocabulary are refused.
    """
    array = np.asarray(tokens)
    dtype = _check_dtype(dtype or array.dtype.name)
    if array.size and array.dtype.kind in "iu":
        info = np.iinfo(dtype)
        low, high = int(array.min()), int(array.max())
        if low < info.min or high > info.max:
            raise TrainledgerError(f"tokens range over [{low}, {high}], which does not fit dtype {dtype}")
        if tokenizer is not None and high >= tokenizer.vocab_size:
            raise TrainledgerError(f"token id {high} is outside the vocabulary of tokenizer {tokenizer.name} "
                                   f"[0, {tokenizer.vocab_size})")
    elif array.size and array.dtype.kind not in "iu":
        raise TrainledgerError(f"tokens must be integers, got an array of {array.dtype}")
    path = Path(path)
    header = encode_header(dtype, array.size, tokenizer)
    with open(path, "wb") as f:
        f.write(header)
        f.write(np.ascontiguousarray(array.reshape(-1), dtype=dtype).tobytes())
    return path


class TokenWriter:
    """Appends token chunks to a token file and fixes the count in the header on close (for streaming).

    With a `tokenizer` the header records it, and an id at or above its vocabulary is refused.
    """

    def __init__(self, path: str | os.PathLike, dtype: str = "uint16", tokenizer=None):
        self.path = Path(path)
        self.dtype = _check_dtype(dtype)
        self.tokenizer = tokenizer
        self.n_tokens = 0
        header = encode_header(self.dtype, 0, tokenizer)       # checks the dtype holds the vocabulary first
        self._limit = min(np.iinfo(self.dtype).max, tokenizer.vocab_size - 1 if tokenizer else np.iinfo(self.dtype).max)
        self._file = open(self.path, "wb")
        self._file.write(header)

    def write(self, tokens) -> None:
        array = np.asarray(tokens)
        if array.size and (int(array.min()) < np.iinfo(self.dtype).min or int(array.max()) > self._limit):
            raise TrainledgerError(f"tokens range over [{int(array.min())}, {int(array.max())}], which does not fit "
                                   f"dtype {self.dtype}" + (f" and vocabulary {self.tokenizer.vocab_size}" if self.tokenizer else ""))
        self._file.write(np.ascontiguousarray(array.reshape(-1), dtype=self.dtype).tobytes())
        self.n_tokens += array.size

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            self._file.seek(0)
            self._file.write(encode_header(self.dtype, self.n_tokens, self.tokenizer))
        finally:
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


def readable_by_all(path) -> None:
    """Gives a temporary file (mkstemp makes them 0600) the mode of a newly created file: 0666 less the umask."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def _check_dtype(dtype) -> str:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if name not in DTYPES:
        raise TrainledgerError(f"token dtype {name!r} is not supported; use one of {', '.join(DTYPES)}")
    return name


def check_input(path, flag: str, what: str = "file", max_bytes: int | None = None, allow_empty: bool = False) -> Path:
    """`path` when it names a regular, non-empty file (at most `max_bytes`); else a one-line error naming `flag`.

    Only stat() is called, never open(): a FIFO, a device such as /dev/zero or a socket is refused before
    anything reads from it (a read could block forever or never end).
    """
    import stat as stat_
    path = Path(path)
    if str(path) == "":
        raise TrainledgerError(f"{flag} needs a {what} path, got ''")
    try:
        info = path.stat()
    except FileNotFoundError:
        raise TrainledgerError(f"{flag} {what} {path} does not exist") from None
    except OSError as error:
        raise TrainledgerError(f"{flag} cannot read {path}: {error.strerror or error}") from None
    if stat_.S_ISDIR(info.st_mode):
        raise TrainledgerError(f"{flag} {path} is a directory; give one {what}")
    if not stat_.S_ISREG(info.st_mode):
        raise TrainledgerError(f"{flag} {path} is not a regular file (a pipe, socket or device such as /dev/zero "
                               f"cannot be read to an end); give a {what}")
    if info.st_size == 0 and not allow_empty:
        raise TrainledgerError(f"{flag} {what} {path} is empty")
    if max_bytes is not None and info.st_size > max_bytes:
        raise TrainledgerError(f"{flag} {path} is {info.st_size:,} bytes, more than any {what} "
                               f"({max_bytes:,} bytes at most)")
    return path


def _existing_file(path) -> Path:
    path = Path(path)
    if not path.exists():
        raise TrainledgerError(f"token file {path} does not exist")
    if not path.is_file():
        raise TrainledgerError(f"{path} is not a file")
    return path
