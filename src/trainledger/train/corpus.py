"""The tokens a run trains on: --data (a token file), --text (byte-tokenized once), or the built-in corpus.

The built-in corpus, used when neither is given, is text every machine with Python has: the standard
library's own `.py` sources (`sysconfig.get_paths()["stdlib"]`, site-packages excluded), concatenated in
sorted path order up to STDLIB_BYTES, byte-tokenized and cached under <out_dir>/data/. The last
--eval-fraction of every token array is the held-out split (the model never trains on it).
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
from pathlib import Path

import numpy as np

from trainledger.data import TokenWriter, open_tokens, tokenize_file
from trainledger.data.tokens import MAGIC as TOKEN_MAGIC
from trainledger.errors import TrainledgerError
from trainledger.train.config import TrainConfig

STDLIB_BYTES = 4_000_000   # a few MB: ~4M byte tokens, far more than a CPU run of a few minutes sees


def stdlib_files(limit_bytes: int = STDLIB_BYTES) -> list[Path]:
    """The standard library's .py files in sorted order (site-packages and caches excluded), up to `limit_bytes`."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files, total = [], 0
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        if "site-packages" in parts or "dist-packages" in parts or "__pycache__" in parts:
            continue
        size = path.stat().st_size
        if total + size > limit_bytes:
            break
        files.append(path)
        total += size
    return files


def build_stdlib_corpus(out_dir: Path, log=None, limit_bytes: int = STDLIB_BYTES) -> Path:
    """A token file of the standard-library corpus under out_dir/data (reused when its manifest matches); its path."""
    data_dir = Path(out_dir) / "data"
    tokens_path, manifest_path = data_dir / "stdlib.tokens", data_dir / "stdlib.json"
    files = stdlib_files(limit_bytes)
    if not files:
        raise TrainledgerError(f"no .py files found under {sysconfig.get_paths()['stdlib']}; pass --text or --data")
    manifest = {"python": sys.version.split()[0], "stdlib": sysconfig.get_paths()["stdlib"], "n_files": len(files),
                "n_bytes": sum(p.stat().st_size for p in files), "first": files[0].name, "last": str(files[-1])}
    if tokens_path.exists() and manifest_path.exists():
        try:
            if json.loads(manifest_path.read_text()) == manifest:
                return tokens_path
        except ValueError:
            pass
    data_dir.mkdir(parents=True, exist_ok=True)
    tmp = tokens_path.with_suffix(f".tokens.tmp{os.getpid()}")
    try:
        with TokenWriter(tmp, "uint8") as writer:
            for path in files:
                writer.write(np.frombuffer(path.read_bytes(), dtype=np.uint8))
        tmp.replace(tokens_path)
        manifest_path.write_text(json.dumps(manifest, indent=1))
    except OSError as error:       # a full disk or a file-size limit: one line naming the path, no partial file
        tmp.unlink(missing_ok=True)
        raise TrainledgerError(f"--out-dir: cannot write the corpus cache {tokens_path}: {error.strerror or error} "
                               f"(needs {manifest['n_bytes'] / 1e6:.2f} MB)") from None
    if log:
        log(f"corpus: {manifest['n_files']} standard-library .py files, {manifest['n_bytes'] / 1e6:.2f} MB "
            f"from {manifest['stdlib']} -> {tokens_path}")
    return tokens_path


def text_tokens(text: Path, out_dir: Path, log=None) -> Path:
    """The byte-token file of a text file, cached as out_dir/data/<name>.tokens while the text is unchanged."""
    text = Path(text)
    if text.is_dir():
        raise TrainledgerError(f"--text {text} is a directory; give one UTF-8 text file")
    if not text.is_file():
        raise TrainledgerError(f"--text file {text} does not exist")
    if text.stat().st_size == 0:
        raise TrainledgerError(f"--text file {text} is empty")
    out = Path(out_dir) / "data" / f"{text.name}.tokens"
    if out.exists() and out.stat().st_mtime >= text.stat().st_mtime and _n_tokens(out) == text.stat().st_size:
        return out      # one byte token per byte: a cache of another file with the same name differs in length
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        result = tokenize_file(text, out, dtype="uint8", progress=False)
    except OSError as error:       # a full disk or a file-size limit
        raise TrainledgerError(f"--out-dir: cannot write the token cache {out}: {error.strerror or error}") from None
    if log:
        log(f"tokenized {text}: {result['n_tokens']} byte tokens -> {out}")
    return out


def _n_tokens(path: Path) -> int | None:
    """Tokens in a cached token file; None when it cannot be read (then it is rebuilt)."""
    try:
        return len(open_tokens(path))
    except (TrainledgerError, OSError, ValueError):
        return None


def _check_token_file(path: Path) -> None:
    """--data takes a token file (trainledger's header, or a 1-D .npy); anything else is named for what it is."""
    try:
        with path.open("rb") as f:
            start = f.read(4096)
    except OSError as error:
        raise TrainledgerError(f"--data: cannot read {path}: {error.strerror or error}") from None
    if start.startswith(TOKEN_MAGIC) or start.startswith(b"\x93NUMPY"):
        return
    try:
        start.decode("utf-8")
        looks_like_text = b"\x00" not in start
    except UnicodeDecodeError as error:
        looks_like_text = error.start > len(start) - 4          # only a character cut at the 4 KiB boundary
    if looks_like_text:
        raise TrainledgerError(f"--data: {path} looks like text, not a token file: train on it with --text {path} "
                               f"(byte-tokenized once), or write a token file with `trainledger tokenize`")
    raise TrainledgerError(f"--data: {path} is not a token file (no trainledger header, not a .npy array): write one "
                           f"with `trainledger tokenize` (text) or numpy.save of a 1-D integer array")


def load_splits(config: TrainConfig, vocab_size: int, log=None) -> tuple[np.ndarray, np.ndarray]:
    """(train tokens, held-out tokens) as memmap views; one-line errors for missing, empty, short or bad files."""
    if config.data:
        path, flag = Path(config.data), "--data"
    elif config.text:
        path, flag = text_tokens(Path(config.text), Path(config.out_dir), log), "--text"
    else:
        path, flag = build_stdlib_corpus(Path(config.out_dir), log), "(built-in corpus)"
    if path.is_dir():
        raise TrainledgerError(f"{flag} {path} is a directory; give one token file")
    if not path.exists():
        raise TrainledgerError(f"{flag} file {path} does not exist")
    if not path.is_file():               # a FIFO, a device such as /dev/zero, a socket: endless or unmappable
        raise TrainledgerError(f"{flag} {path} is not a regular file (a pipe or device cannot be memory-mapped); "
                               f"give a token file")
    if flag == "--data":
        _check_token_file(path)
    try:
        tokens = open_tokens(path)
    except TrainledgerError as error:
        raise TrainledgerError(f"{flag}: {error}") from None
    need = config.seq_len + 1
    n_eval = max(int(len(tokens) * config.eval_fraction), need)
    if len(tokens) - n_eval < need:
        raise TrainledgerError(f"{flag} {path} holds {len(tokens)} tokens: too short for --seq-len {config.seq_len} "
                               f"(needs at least {2 * need}: {need} to train on and {need} held out)")
    low, top = (int(tokens.min()), int(tokens.max())) if len(tokens) else (0, 0)
    if low < 0 or top >= vocab_size:
        span = f"from {low} to {top}" if low < 0 else f"up to {top}"
        raise TrainledgerError(f"{flag} {path} holds token ids {span}, outside the model's vocabulary "
                               f"[0, {vocab_size}) (--model {config.model})")
    return tokens[: len(tokens) - n_eval], tokens[len(tokens) - n_eval:]
