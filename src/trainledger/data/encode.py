"""Streaming, parallel encoding of text files and datasets into token files.

A text file is read `chunk_bytes` at a time, decoded as UTF-8 incrementally, and cut into pieces of about
PIECE_CHARS characters, each cut right after a newline that stands between two non-space characters
("…x\\n|y…"). The pieces of a chunk are encoded together by the tokenizer's batch encoder (the `tokenizers`
library runs a batch on all cores) and appended in order. For pre-tokenizers that split there — GPT-2's
byte-level pattern, cl100k, o200k, Llama 3, and the BPE `tokenize --train-bpe` trains — a cut never joins or
splits a pre-token, so the file's ids equal one `encode` of the whole text, token for token. A tokenizer
without such a boundary (SentencePiece-style, BPE over whole lines) is warned about: its ids can differ at
the cuts. The byte tokenizer needs no decoding: any byte offset is a cut.

Dataset documents (data/datasets.py) are encoded in batches of about chunk_bytes of text, each document
followed by the tokenizer's end-of-text id (or by "\\n\\n" for a tokenizer without one, such as bytes).

Output goes to a temporary file beside the target, renamed onto it when complete (trainledger/files.py):
a reader that has the old file memory-mapped keeps reading the old file, never a truncated one.
"""

from __future__ import annotations

import codecs
import contextlib
import re
import time
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from trainledger.data.limits import MAX_RUN_CHARS, bound_runs
from trainledger.data.tokens import TokenWriter, readable_by_all
from trainledger.errors import TrainledgerError
from trainledger.files import atomic_path

PIECE_CHARS = 1 << 16             # ~64K characters per piece: a 16 MiB chunk gives ~250 pieces for the cores
SAFE_CUT = re.compile(r"(?<=\S\n)(?=\S)")
FORCED_CUT_FACTOR = 8             # a piece longer than this × PIECE_CHARS without a safe cut is cut anyway
DOCUMENT_SEPARATOR = "\n\n"       # between dataset documents when the tokenizer has no end-of-text token


def cut_pieces(text: str, piece_chars: int = PIECE_CHARS) -> tuple[list[str], str, int]:
    """(pieces, rest, forced): `text` cut at safe points about every `piece_chars` characters.

    `rest` (after the last cut) waits for the next chunk; when it grows past FORCED_CUT_FACTOR × piece_chars
    without any safe point it is cut before a whitespace run anyway, and `forced` counts those cuts.
    """
    pieces, start, forced = [], 0, 0
    while True:
        match = SAFE_CUT.search(text, start + piece_chars)
        if match is None:
            break
        pieces.append(text[start:match.start()])
        start = match.start()
    while len(text) - start > FORCED_CUT_FACTOR * piece_chars:
        end = start + FORCED_CUT_FACTOR * piece_chars
        space = text.rfind(" ", start + 1, end)
        end = space if space > start else end
        pieces.append(text[start:end])
        start, forced = end, forced + 1
    return pieces, text[start:], forced


def text_pieces(chunks: Iterable[bytes], source, flag: str = "INPUT", piece_chars: int = PIECE_CHARS,
                stats: dict | None = None, errors: str = "strict") -> Iterator[list[str]]:
    """Lists of text pieces (cut as in cut_pieces), one list per chunk of UTF-8 bytes; the last holds the tail.

    Invalid UTF-8 is a one-line error naming the byte offset (errors="replace": U+FFFD instead).
    `stats['forced_cuts']` counts forced cuts.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors)
    carry, offset = "", 0
    stats = stats if stats is not None else {}
    stats.setdefault("forced_cuts", 0)
    stats.setdefault("run_cuts", 0)
    for chunk in chunks:
        try:
            text = carry + decoder.decode(chunk)
        except UnicodeDecodeError as error:
            raise TrainledgerError(f"{flag} {source} is not UTF-8 text (invalid byte at offset {offset + error.start}); "
                                   "convert it (e.g. iconv -t UTF-8) or tokenize it with --tokenizer bytes") from None
        offset += len(chunk)
        pieces, carry, forced = cut_pieces(text, piece_chars)
        stats["forced_cuts"] += forced
        if pieces:
            yield _bounded(pieces, stats)
    try:
        carry += decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        raise TrainledgerError(f"{flag} {source} is not UTF-8 text (it ends inside a character)") from None
    if carry:
        yield _bounded([carry], stats)


def _bounded(pieces: list[str], stats: dict) -> list[str]:
    """`pieces` with no whitespace-free run longer than limits.MAX_RUN_CHARS (counted in stats['run_cuts'])."""
    pieces, cuts = bound_runs(pieces)
    stats["run_cuts"] = stats.get("run_cuts", 0) + cuts
    return pieces


def document_pieces(document: str, stats: dict, piece_chars: int | None = None) -> list[str]:
    """A dataset document cut as a text file is (cut_pieces, then bound_runs): one 500 MB document reaches the
    tokenizer in ~64K-character pieces, as the same text given to --text does, never whole."""
    piece_chars = piece_chars or PIECE_CHARS
    if len(document) <= piece_chars:
        return _bounded([document], stats)
    pieces, rest, forced = cut_pieces(document, piece_chars)
    stats["forced_cuts"] = stats.get("forced_cuts", 0) + forced
    return _bounded(pieces + [rest] if rest else pieces, stats)


def file_chunks(path: Path, chunk_bytes: int, bar=None, task=None) -> Iterator[bytes]:
    """The bytes of `path`, `chunk_bytes` at a time (advancing a progress bar)."""
    with open(path, "rb") as source:
        while chunk := source.read(chunk_bytes):
            if bar is not None:
                bar.advance(task, len(chunk))
            yield chunk


def encode_text_file(path: Path, out_path: Path, tokenizer, dtype: str, chunk_bytes: int, progress: bool,
                     flag: str = "INPUT", atomic: bool = True, errors: str = "strict") -> dict:
    """Tokenizes a text file into `out_path` (atomically; in place with atomic=False, for a private temporary
    path); the result dict of tokenize_file. errors="replace" turns invalid UTF-8 into U+FFFD."""
    input_bytes = path.stat().st_size
    stats: dict = {"forced_cuts": 0}
    start = time.perf_counter()
    with progress_bar(progress and input_bytes > chunk_bytes) as bar, _target(out_path, atomic) as tmp:
        task = bar.add_task(f"tokenizing {path.name}", total=input_bytes) if bar else None
        with TokenWriter(tmp, dtype, tokenizer) as writer:
            write_stream(file_chunks(path, chunk_bytes, bar, task), path, tokenizer, writer, flag, stats, errors)
        if writer.n_tokens == 0:
            raise TrainledgerError(f"{flag} {path} gave no tokens")
    warnings = _cut_warnings(tokenizer, stats["forced_cuts"], stats.get("run_cuts", 0))
    return _result(path, out_path, writer, tokenizer, input_bytes, time.perf_counter() - start, None, warnings)


def write_stream(chunks: Iterable[bytes], source, tokenizer, writer, flag: str = "INPUT", stats: dict | None = None,
                 errors: str = "strict") -> None:
    """Encodes a stream of byte chunks (one text) into `writer`: bytes as they are, other tokenizers by pieces."""
    if getattr(tokenizer, "bytewise", False):
        for chunk in chunks:                     # one token per byte: no decoding needed
            writer.write(np.frombuffer(chunk, dtype=np.uint8))
        return
    for pieces in text_pieces(chunks, source, flag, stats=stats, errors=errors):
        for ids in tokenizer.encode_batch(pieces):
            writer.write(ids)


@contextlib.contextmanager
def _target(out_path: Path, atomic: bool):
    """The path to write: a temporary beside `out_path` renamed onto it at the end (atomic), or `out_path`."""
    if not atomic:
        yield Path(out_path)
        return
    with atomic_path(out_path) as tmp:
        yield tmp
        readable_by_all(tmp)


def encode_documents(source: Path, out_path: Path, tokenizer, dtype: str, chunk_bytes: int, progress: bool,
                     text_column: str = "text", flag: str = "INPUT", atomic: bool = True) -> dict:
    """Tokenizes a dataset's documents into `out_path` (atomically), each followed by the end-of-text separator."""
    from trainledger.data.datasets import dataset_size, iter_documents
    input_bytes = source.stat().st_size
    total, unit = dataset_size(source)
    separator = (np.asarray([tokenizer.eot_id], dtype=dtype) if tokenizer.eot_id is not None
                 else np.asarray(tokenizer.encode(DOCUMENT_SEPARATOR), dtype=dtype))
    n_documents, n_empty, stats = 0, 0, {"forced_cuts": 0, "run_cuts": 0}
    start = time.perf_counter()
    with progress_bar(progress and input_bytes > chunk_bytes, unit) as bar, _target(out_path, atomic) as tmp:
        task = bar.add_task(f"tokenizing {source.name}", total=total) if bar else None
        advance = (lambda done: bar.update(task, completed=done)) if bar else None
        with TokenWriter(tmp, dtype, tokenizer) as writer:
            n_ids = 0               # of the document being written (a long one spans batches)
            for batch in _batches(iter_documents(source, text_column, flag, advance), chunk_bytes, stats):
                for (_, ends_document), ids in zip(batch, tokenizer.encode_batch([piece for piece, _ in batch])):
                    writer.write(ids)
                    n_ids += len(ids)
                    if ends_document:
                        writer.write(separator)
                        n_documents, n_empty, n_ids = n_documents + 1, n_empty + (n_ids == 0), 0
        if n_documents == 0:
            raise TrainledgerError(f"{flag} dataset {source} holds no documents (no rows)")
        if n_empty == n_documents:
            raise TrainledgerError(f"{flag} dataset {source}: all {n_documents} documents in column "
                                   f"'{text_column}' are empty strings")
    warnings = _cut_warnings(tokenizer, stats["forced_cuts"], stats["run_cuts"]) if any(stats.values()) else []
    return _result(source, out_path, writer, tokenizer, input_bytes, time.perf_counter() - start, n_documents,
                   warnings)


def _batches(documents: Iterable[str], batch_chars: int, stats: dict) -> Iterator[list[tuple[str, bool]]]:
    """Lists of (piece, whether it ends its document) of about `batch_chars` characters in all: each document cut
    by document_pieces, so that one huge document spreads over many batches and the tokenizer holds the
    encodings of one batch at a time (one call on a whole 500 MB document took 23.5 GB)."""
    batch, size = [], 0
    for document in documents:
        pieces = document_pieces(document, stats)
        for index, piece in enumerate(pieces):
            batch.append((piece, index == len(pieces) - 1))
            size += len(piece)
            if size >= batch_chars:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def _cut_warnings(tokenizer, forced_cuts: int, run_cuts: int = 0) -> list[str]:
    warnings = []
    if not getattr(tokenizer, "chunk_safe", True):
        warnings.append(f"tokenizer {tokenizer.name} does not split text after newlines (no such pre-tokenizer): the "
                        f"input was encoded in pieces of ~{PIECE_CHARS:,} characters, and ids at the cuts may differ "
                        "from one encode of the whole text")
    if forced_cuts:
        warnings.append(f"{forced_cuts} piece(s) had no newline between two non-space characters for "
                        f"{FORCED_CUT_FACTOR * PIECE_CHARS:,} characters and were cut before a space; ids at those "
                        "cuts may differ from one encode of the whole text")
    if run_cuts and not getattr(tokenizer, "bytewise", False):
        warnings.append(f"{run_cuts} cut(s) inside runs of more than {MAX_RUN_CHARS:,} characters without whitespace "
                        "(the BPE's cost grows faster than a run's length); ids at those cuts may differ from one "
                        "encode of the whole text")
    return warnings


def _result(source: Path, out_path: Path, writer, tokenizer, input_bytes: int, seconds: float,
            n_documents: int | None, warnings: list[str]) -> dict:
    return {
        "input_path": str(source), "path": str(out_path), "dtype": writer.dtype, "n_tokens": writer.n_tokens,
        "input_bytes": input_bytes, "output_bytes": out_path.stat().st_size, "seconds": seconds,
        "tokens_per_s": writer.n_tokens / seconds if seconds > 0 else None,
        "bytes_per_s": input_bytes / seconds if seconds > 0 else None,
        "tokenizer": tokenizer.name, "tokenizer_sha256": tokenizer.sha256, "vocab_size": tokenizer.vocab_size,
        "n_documents": n_documents, "warnings": warnings,
    }


class _NoBar:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def progress_bar(show: bool, unit: str = "B"):
    """A rich progress bar on stderr (bytes or rows), or a stand-in that shows nothing."""
    if not show:
        return _NoBar()
    from rich.console import Console
    from rich.progress import (BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TimeRemainingColumn,
                               TransferSpeedColumn)
    columns = (DownloadColumn(), TransferSpeedColumn()) if unit == "B" else (MofNCompleteColumn(),)
    return Progress("[progress.description]{task.description}", BarColumn(), *columns, TimeRemainingColumn(),
                    transient=True, console=Console(stderr=True))
