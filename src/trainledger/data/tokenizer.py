"""A byte-level tokenizer (one token per UTF-8 byte, vocabulary 256) and streaming tokenization of text files.

Byte-level tokens need no vocabulary file and never fail on any input (CS336 Lecture 1, "byte-based
tokenization"); the price is long sequences, about 4 tokens per English word. Because every byte is a token,
a file can be cut into chunks at any byte offset and tokenized piece by piece with the same result as a whole.
"""

from __future__ import annotations

import operator
import os
import time
from pathlib import Path

import numpy as np

from trainledger.data.tokens import TokenWriter, _check_dtype
from trainledger.errors import TrainledgerError

VOCAB_SIZE = 256


class ByteTokenizer:
    """Text ↔ tokens, one token per UTF-8 byte (ids 0..255)."""

    vocab_size = VOCAB_SIZE

    def __init__(self, dtype: str = "uint16"):
        self.dtype = _check_dtype(dtype)

    def encode(self, text: str) -> np.ndarray:
        """The token ids (1-D array of self.dtype) of `text`'s UTF-8 bytes."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(self.dtype)

    def decode(self, tokens) -> str:
        """The text whose UTF-8 bytes are `tokens`; invalid sequences become U+FFFD."""
        array = np.asarray(tokens)
        if array.size and (int(array.min()) < 0 or int(array.max()) >= VOCAB_SIZE):
            raise TrainledgerError(f"byte tokens must lie in [0, {VOCAB_SIZE - 1}], "
                                   f"got values in [{int(array.min())}, {int(array.max())}]")
        return array.astype(np.uint8).tobytes().decode("utf-8", errors="replace")


def tokenize_file(text_path: str | os.PathLike, out_path: str | os.PathLike, dtype: str = "uint16",
                  chunk_bytes: int = 1 << 24, progress: bool = True) -> dict:
    """{'input_path', 'path', 'dtype', 'n_tokens', 'input_bytes', 'output_bytes', 'seconds', 'tokens_per_s'}.

    Byte-tokenizes the text file into the token file `path` (= out_path), streaming `chunk_bytes` at a time
    (memory stays O(chunk) however large the text) and writing a header (see trainledger.data.tokens).
    Shows a rich progress bar (on stderr) when `progress` is true and the input is larger than one chunk.
    """
    text_path, out_path = Path(text_path), Path(out_path)
    try:
        whole = not isinstance(chunk_bytes, bool) and operator.index(chunk_bytes) >= 1   # ints, numpy ints
    except TypeError:
        whole = False
    if not whole:
        raise TrainledgerError(f"--chunk-size must be a whole number of bytes >= 1, got {chunk_bytes!r}")
    chunk_bytes = operator.index(chunk_bytes)
    if text_path.is_dir():
        raise TrainledgerError(f"input {text_path} is a directory (INPUT.txt); give a text file")
    if not text_path.is_file():
        raise TrainledgerError(f"input text file {text_path} does not exist (INPUT.txt)")
    input_bytes = text_path.stat().st_size
    if input_bytes == 0:
        raise TrainledgerError(f"input text file {text_path} is empty (INPUT.txt)")
    if out_path.is_dir():
        raise TrainledgerError(f"output {out_path} is a directory (OUTPUT.tokens); give a file name, e.g. "
                               f"{out_path / (text_path.stem + '.tokens')}")
    if not out_path.parent.is_dir():
        raise TrainledgerError(f"output directory {out_path.parent} does not exist (OUTPUT.tokens)")
    if out_path.resolve() == text_path.resolve():
        raise TrainledgerError("the output token file must differ from the input text file (OUTPUT.tokens)")
    start = time.perf_counter()
    show = progress and input_bytes > chunk_bytes
    try:
        with TokenWriter(out_path, dtype) as writer, open(text_path, "rb") as source, _progress(show) as bar:
            task = bar.add_task(f"tokenizing {text_path.name}", total=input_bytes) if bar else None
            while chunk := source.read(chunk_bytes):
                writer.write(np.frombuffer(chunk, dtype=np.uint8))
                if bar:
                    bar.advance(task, len(chunk))
    except PermissionError as error:
        raise TrainledgerError(f"cannot access {error.filename}: permission denied (INPUT.txt / OUTPUT.tokens)") from None
    seconds = time.perf_counter() - start
    return {
        "input_path": str(text_path),
        "path": str(out_path),
        "dtype": writer.dtype,
        "n_tokens": writer.n_tokens,
        "input_bytes": input_bytes,
        "output_bytes": out_path.stat().st_size,
        "seconds": seconds,
        "tokens_per_s": writer.n_tokens / seconds if seconds > 0 else None,
    }


class _NoBar:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _progress(show: bool):
    if not show:
        return _NoBar()
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn
    return Progress("[progress.description]{task.description}", BarColumn(), DownloadColumn(),
                    TransferSpeedColumn(), TimeRemainingColumn(), transient=True, console=Console(stderr=True))
