"""Tokenizers behind one interface, and tokenization of text files and datasets into `.tokens` files.

`load_tokenizer("bytes")` is the byte-level tokenizer (one token per UTF-8 byte, vocabulary 256: no vocabulary
file, never fails on any input; CS336 Lecture 1, "byte-based tokenization"; the price is long sequences, about
4 tokens per English word). `load_tokenizer(PATH)` loads a tokenizer.json or a .tiktoken file (data/bpe.py).
Both have `.name`, `.sha256`, `.vocab_size`, `.encode(text)`, `.encode_batch(texts)`, `.decode(ids)` and
`.save(path)`; `run_tokenizer(run)` is the tokenizer a training run recorded.

`tokenize_file` streams its input in chunks (memory stays O(chunk) however large the file) into a token file
whose header records the tokenizer (data/tokens.py); the streaming and the parallel encoding are in
data/encode.py.
"""

from __future__ import annotations

import hashlib
import operator
import os
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from trainledger.data.tokens import _check_dtype, check_input, dtype_for_vocab
from trainledger.errors import TrainledgerError

VOCAB_SIZE = 256
BYTES = "bytes"
# The identity of the byte tokenizer: a fixed string's hash (there is no file to hash).
BYTES_SHA256 = hashlib.sha256(b"trainledger byte tokenizer: one token per UTF-8 byte, ids 0..255").hexdigest()
TOKENIZER_FILE = "tokenizer.json"      # the name a run, and `tokenize --train-bpe`, save a tokenizer under


@runtime_checkable
class Tokenizer(Protocol):
    """What every trainledger tokenizer offers (ByteTokenizer, data.bpe.HFTokenizer)."""

    name: str              # short, human: "bytes", "gpt2", "bpe-4096"
    sha256: str            # identity (hex): recorded in token files, runs and checkpoints
    vocab_size: int        # largest id + 1, special tokens included
    eot_id: int | None     # end-of-text id put between dataset documents; None when there is none

    def encode(self, text: str) -> np.ndarray: ...

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]: ...

    def decode(self, ids) -> str: ...

    def save(self, path): ...


class ByteTokenizer:
    """Text ↔ tokens, one token per UTF-8 byte (ids 0..255)."""

    vocab_size = VOCAB_SIZE
    name = BYTES
    sha256 = BYTES_SHA256
    eot_id = None                 # no end-of-text token: dataset documents are separated by "\n\n"
    special_tokens: dict = {}     # none: every string is its bytes
    allowed_special = frozenset()
    chunk_safe = True             # a file may be cut at any byte
    bytewise = True               # ids are the bytes themselves: encoders copy bytes without decoding

    def __init__(self, dtype: str = "uint16"):
        self.dtype = _check_dtype(dtype)

    def encode(self, text: str, allowed_special=None) -> np.ndarray:
        """The token ids (1-D array of self.dtype) of `text`'s UTF-8 bytes (there are no special tokens)."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(self.dtype)

    def encode_batch(self, texts: list[str], allowed_special=None) -> list[np.ndarray]:
        return [self.encode(text) for text in texts]

    def decode(self, tokens) -> str:
        """The text whose UTF-8 bytes are `tokens`; invalid sequences become U+FFFD."""
        array = np.asarray(tokens)
        if array.size and (int(array.min()) < 0 or int(array.max()) >= VOCAB_SIZE):
            raise TrainledgerError(f"byte tokens must lie in [0, {VOCAB_SIZE - 1}], "
                                   f"got values in [{int(array.min())}, {int(array.max())}]")
        return array.astype(np.uint8).tobytes().decode("utf-8", errors="replace")

    def save(self, path) -> None:
        """Nothing to write: the byte tokenizer has no file."""
        return None

    def __repr__(self) -> str:
        return "ByteTokenizer()"


def load_tokenizer(spec: str | os.PathLike, flag: str = "--tokenizer", special_tokens=(), allowed_special=()):
    """The tokenizer named by `spec`: "bytes", or a path to a tokenizer.json, a .tiktoken rank file, or a GPT-2
    style vocab.json with its merges.txt beside it (or the folder holding that pair); `special_tokens` added.

    Special tokens in text are ordinary text (tiktoken's rule) except those of `special_tokens` and of
    `allowed_special` (--allow-special: names, or "all"), which give their ids. Files are checked before they
    are read (a directory, a pipe, a device or an oversized file is a one-line error naming `flag`); no network
    is used and nothing is unpickled.
    """
    allowed_special = tuple(allowed_special or ())
    if isinstance(spec, str) and spec.strip().lower() == BYTES:
        if special_tokens or allowed_special:
            flag_name = "--special-token" if special_tokens else "--allow-special"
            raise TrainledgerError(f"{flag_name} needs a BPE tokenizer (--tokenizer FILE, or --train-bpe): the "
                                   "byte tokenizer has only the 256 byte values")
        return ByteTokenizer()
    path = Path(spec)
    if path.is_dir() and (path / TOKENIZER_FILE).is_file():
        raise TrainledgerError(f"{flag} {path} is a directory; give its {path / TOKENIZER_FILE}")
    if path.is_dir() and (path / "vocab.json").is_file():
        path = path / "vocab.json"
    check_input(path, flag, "tokenizer file")
    if path.suffix not in (".json", ".tiktoken"):
        raise TrainledgerError(f"{flag} {path}: give 'bytes', a tokenizer.json (Hugging Face tokenizers), a "
                               f".tiktoken rank file or a vocab.json with its merges.txt; '{path.suffix or path.name}' "
                               "is none of them")
    from trainledger.data.bpe import load_hf, with_special_tokens
    from trainledger.data.bpe_files import load_vocab_merges
    if path.name == "vocab.json" or (path.suffix == ".json" and (path.parent / "merges.txt").is_file()
                                     and not _is_tokenizer_json(path)):
        tokenizer = load_vocab_merges(path, flag)
    else:
        tokenizer = load_hf(path, flag)
    tokenizer = with_special_tokens(tokenizer, special_tokens)
    if allowed_special:
        tokenizer.allowed_special |= tokenizer.allowed("all" if "all" in allowed_special else allowed_special)
    return tokenizer


def _is_tokenizer_json(path: Path) -> bool:
    """Whether a .json file starts like a tokenizer.json (an object with a "version" or "model" key early on)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return True
    return b'"model"' in head or b'"version"' in head or b'"added_tokens"' in head


def run_tokenizer(out_dir_or_config):
    """The tokenizer a training run trained with: "bytes" when the run recorded none.

    Accepts the run's --out-dir (a path), its TrainConfig, or a config dict (a checkpoint's `config`). A run
    with a non-byte tokenizer keeps a copy at <out-dir>/tokenizer.json; given a config that records the
    tokenizer's sha256, the copy must match it.
    """
    if isinstance(out_dir_or_config, (str, os.PathLike)):
        out_dir, name, sha256 = Path(out_dir_or_config), None, None
    else:
        config = out_dir_or_config if isinstance(out_dir_or_config, dict) else vars(out_dir_or_config)
        out_dir = Path(config.get("out_dir") or ".")
        name, sha256 = config.get("tokenizer_name"), config.get("tokenizer_sha256")
    if sha256 is None and name is None and not (out_dir / TOKENIZER_FILE).is_file():
        return ByteTokenizer()
    if name == BYTES or sha256 == BYTES_SHA256:
        return ByteTokenizer()
    path = out_dir / TOKENIZER_FILE
    if not path.is_file():
        raise TrainledgerError(f"the run in {out_dir} trained with tokenizer {name} (sha256 {str(sha256)[:12]}…) but "
                               f"{path} is missing; copy that tokenizer.json there")
    tokenizer = load_tokenizer(path, flag="run tokenizer")
    if sha256 is not None and tokenizer.sha256 != sha256:
        raise TrainledgerError(f"{path} is not the tokenizer the run trained with (sha256 {tokenizer.sha256[:12]}…, "
                               f"the run recorded {sha256[:12]}…)")
    if name:
        tokenizer.name = name
    return tokenizer


def tokenize_file(text_path: str | os.PathLike, out_path: str | os.PathLike, dtype: str | None = None,
                  chunk_bytes: int = 1 << 24, progress: bool = True, tokenizer=None, text_column: str = "text",
                  flag: str = "INPUT") -> dict:
    """{'input_path', 'path', 'dtype', 'n_tokens', 'input_bytes', 'output_bytes', 'seconds', 'tokens_per_s',
    'bytes_per_s', 'tokenizer', 'tokenizer_sha256', 'vocab_size', 'n_documents', 'warnings'}.

    Tokenizes the text file (or a .jsonl / .parquet / Arrow dataset, by its extension: its `text_column`,
    documents separated by the tokenizer's end-of-text token) into the token file `path` (= out_path),
    written to a temporary name and renamed into place. `tokenizer`: None or "bytes" for bytes, a path, or
    a loaded tokenizer; `dtype` None picks uint16 or uint32 by vocabulary size. A rich progress bar shows
    on stderr when `progress` is true and the input is larger than one chunk.
    """
    from trainledger.data import datasets, encode
    text_path, out_path = Path(text_path), Path(out_path)
    try:
        whole = not isinstance(chunk_bytes, bool) and operator.index(chunk_bytes) >= 1   # ints, numpy ints
    except TypeError:
        whole = False
    if not whole:
        raise TrainledgerError(f"--chunk-size must be a whole number of bytes >= 1, got {chunk_bytes!r}")
    chunk_bytes = operator.index(chunk_bytes)
    if text_path.is_dir():
        raise TrainledgerError(f"input {text_path} is a directory ({flag}); give a text file or a dataset")
    check_input(text_path, flag, "input file")
    tokenizer = tokenizer if hasattr(tokenizer, "encode_batch") else load_tokenizer(tokenizer or BYTES)
    check_output(out_path, text_path, stem=text_path.stem)
    dtype = dtype or dtype_for_vocab(tokenizer.vocab_size)
    if datasets.dataset_kind(text_path):
        return encode.encode_documents(text_path, out_path, tokenizer, dtype, chunk_bytes, progress, text_column, flag)
    return encode.encode_text_file(text_path, out_path, tokenizer, dtype, chunk_bytes, progress, flag)


def check_output(out_path: Path, input_path: Path | None = None, stem: str = "input", flag: str = "OUTPUT.tokens") -> None:
    """Refuses an output token path that is a directory, a device or pipe, in a missing folder, the input, or an
    existing file that is no token file (someone's text, a config: replacing it would lose it)."""
    import stat as stat_
    from trainledger.files import check_output as check_written
    if out_path.is_dir() and not out_path.is_symlink():
        raise TrainledgerError(f"output {out_path} is a directory ({flag}); give a file name, e.g. "
                               f"{out_path / (stem + '.tokens')}")
    if out_path.exists() and not stat_.S_ISREG(out_path.stat().st_mode):
        raise TrainledgerError(f"output {out_path} is not a regular file ({flag}): a token file is written beside "
                               "it and renamed onto it, which a device or pipe cannot take; give a file name")
    check_written(out_path, flag, "a token file", hint="give another name, or move it away first")   # no link
    if not out_path.parent.is_dir():
        raise TrainledgerError(f"output directory {out_path.parent} does not exist ({flag})")
    if input_path is not None and out_path.resolve() == input_path.resolve():
        raise TrainledgerError(f"the output token file must differ from the input file ({flag})")
    if out_path.exists() and out_path.stat().st_size and not _starts_like_tokens(out_path):
        raise TrainledgerError(f"output {out_path} exists and is not a token file ({flag}); it is left as it is: "
                               "give another name, or move it away first")


def _starts_like_tokens(path: Path) -> bool:
    """Whether `path` begins with the token files' magic (a token file, maybe damaged: ours to replace)."""
    from trainledger.data.tokens import MAGIC
    with open(path, "rb") as handle:
        return handle.read(len(MAGIC)) == MAGIC


def save_beside(tokenizer, out_path, flag: str = "--train-bpe") -> Path:
    """Saves `tokenizer` as tokenizer.json in the folder of the token file `out_path`; its path.

    A tokenizer.json already there that is another tokenizer is not overwritten (token files beside it may
    have been made with it): a one-line error says so, naming `flag`, the option that asked for the save
    (--train-bpe, or --special-token added to a --tokenizer FILE), and how to go on.
    """
    from trainledger.files import check_output as check_written
    path = check_written(Path(out_path).parent / TOKENIZER_FILE, flag, "a tokenizer",
                         hint="write OUTPUT.tokens into another folder")
    if path.exists():
        try:
            existing = load_tokenizer(path, flag)
        except TrainledgerError:
            existing = None
        if existing is not None and existing.sha256 == tokenizer.sha256:
            return path
        reuse = "reuse it with --tokenizer " + str(path) + ("" if flag == "--train-bpe" else " (without --special-token)")
        raise TrainledgerError(f"{flag}: {path} exists and is another tokenizer (the token files beside it may need "
                               f"it); write OUTPUT.tokens into another folder, or {reuse}")
    try:
        return tokenizer.save(path)
    except OSError as error:
        raise TrainledgerError(f"{flag}: cannot write {path}: {error.strerror or error}") from None
