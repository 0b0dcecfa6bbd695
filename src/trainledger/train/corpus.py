"""The tokens a run trains on, and the tokenizer they come from.

Sources: --data (a token file), --text (a text file), --dataset (a .jsonl / .parquet / Arrow file's text
column), or the built-in corpus when none is given: text every machine with Python has, the standard
library's own `.py` sources (`sysconfig.get_paths()["stdlib"]`, site-packages excluded), concatenated in
sorted path order up to STDLIB_BYTES. Text, datasets and the corpus are tokenized once with the run's tokenizer
(--tokenizer; bytes by default) and cached under <out-dir>/data/ by data/cache.py: a cache's name carries the
hash of its source's identity and the tokenizer's, it is published atomically and never rewritten, and a
trainer holds a lock on the cache it maps, so a second trainer (after `touch`ing the text, say) builds a new
file instead of truncating the one the first is reading.

The tokenizer of a --data token file is the one its header records (found beside it as tokenizer.json), or
--tokenizer, which must then be the same one (same vocabulary and sha256). The last --eval-fraction of the
tokens is the held-out split (the model never trains on it).
"""

from __future__ import annotations

import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainledger.data import BYTES, ByteTokenizer, TokenWriter, load_tokenizer, open_tokens, read_header
from trainledger.data import cache
from trainledger.data.tokenizer import TOKENIZER_FILE
from trainledger.data.tokens import MAGIC as TOKEN_MAGIC, check_input, dtype_for_vocab
from trainledger.errors import TrainledgerError
from trainledger.train.config import TrainConfig

STDLIB_BYTES = 4_000_000   # a few MB: ~4M byte tokens, far more than a CPU run of a few minutes sees


@dataclass
class RunData:
    """The token file a run trains on, its split, and the tokenizer that made it."""

    path: Path
    flag: str                         # the flag that named the source ("--text", ..., "(built-in corpus)")
    tokens: np.ndarray                # every token (a memmap)
    n_held_out: int                   # the last n_held_out tokens are the held-out split
    tokenizer: object | None          # loaded tokenizer; None when only the header names it (or nothing does)
    tokenizer_name: str | None
    tokenizer_sha256: str | None
    vocab_size: int | None            # the tokenizer's vocabulary; None when no tokenizer is known

    @property
    def train(self) -> np.ndarray:
        return self.tokens[: len(self.tokens) - self.n_held_out]

    @property
    def held_out(self) -> np.ndarray:
        return self.tokens[len(self.tokens) - self.n_held_out:]

    def describe_split(self) -> str:
        """One line: what is trained on and what is held out."""
        n, held = len(self.tokens), self.n_held_out
        return (f"held-out split: the last {held:,} of {n:,} tokens ({held / n:.1%}, tokens {n - held:,}..{n - 1:,}) "
                f"of {self.path}; training on the first {n - held:,}")


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


def build_stdlib_corpus(out_dir: Path, log=None, limit_bytes: int = STDLIB_BYTES, tokenizer=None) -> Path:
    """A token file of the standard-library corpus under out_dir/data (reused while the corpus and the
    tokenizer are unchanged); its path. Non-UTF-8 bytes become U+FFFD for text tokenizers."""
    tokenizer = tokenizer or ByteTokenizer()
    files = stdlib_files(limit_bytes)
    if not files:
        raise TrainledgerError(f"no .py files found under {sysconfig.get_paths()['stdlib']}; pass --text or --data")
    manifest = {"python": sys.version.split()[0], "stdlib": sysconfig.get_paths()["stdlib"], "n_files": len(files),
                "n_bytes": sum(p.stat().st_size for p in files), "first": files[0].name, "last": str(files[-1])}
    data_dir = Path(out_dir) / "data"
    path = cache.cache_path(data_dir, "stdlib", cache.cache_key(corpus=manifest, tokenizer=tokenizer.sha256,
                                                                **_specials_key(tokenizer)))

    def write(tmp: Path) -> None:
        from trainledger.data.encode import write_stream
        with TokenWriter(tmp, _cache_dtype(tokenizer), tokenizer) as writer:
            write_stream((p.read_bytes() for p in files), "the standard-library corpus", tokenizer, writer,
                         errors="replace")

    built = _build(path, write, tokenizer, f"the corpus cache {path}", f"needs {manifest['n_bytes'] / 1e6:.2f} MB")
    if built and log:
        log(f"corpus: {manifest['n_files']} standard-library .py files, {manifest['n_bytes'] / 1e6:.2f} MB "
            f"from {manifest['stdlib']} -> {path}")
    cache.alias(path, "stdlib")                      # first: the old alias still has its second link
    cache.prune(data_dir, "stdlib", path)
    return path


def text_tokens(text: Path, out_dir: Path, log=None, tokenizer=None, flag: str = "--text",
                text_column: str = "text") -> Path:
    """The token file of a text file (or, for --dataset, of a dataset's column), cached in out_dir/data/ under
    a name keyed by the file's identity and the tokenizer: reused while both are unchanged."""
    from trainledger.data.datasets import dataset_kind
    tokenizer = tokenizer or ByteTokenizer()
    text = check_input(Path(text), flag, "dataset file" if flag == "--dataset" else "text file")
    kind = dataset_kind(text)
    if flag == "--text" and kind:
        raise TrainledgerError(f"--text {text} is a {kind} dataset; train on it with --dataset {text} "
                               "(--text-column names its text column)")
    if flag == "--dataset" and not kind:
        raise TrainledgerError(f"--dataset {text} is not a dataset: give a .jsonl, .parquet or .arrow/.feather file "
                               f"(a plain text file goes to --text)")
    data_dir = Path(out_dir) / "data"
    fields = {"source": cache.file_identity(text), "tokenizer": tokenizer.sha256, **_specials_key(tokenizer)}
    if kind:
        fields["column"] = text_column
    path = cache.cache_path(data_dir, text.name, cache.cache_key(**fields))

    def write(tmp: Path) -> None:
        from trainledger.data import encode
        dtype, bar = _cache_dtype(tokenizer), log is not None and sys.stderr.isatty()
        if kind:
            result = encode.encode_documents(text, tmp, tokenizer, dtype, 1 << 24, bar, text_column, flag, atomic=False)
        else:
            result = encode.encode_text_file(text, tmp, tokenizer, dtype, 1 << 24, bar, flag, atomic=False)
        for warning in result["warnings"]:
            print(f"warning: {warning}", file=sys.stderr)
        if log:
            what = f"{result['n_documents']:,} documents" if kind else f"{result['input_bytes']:,} bytes"
            log(f"tokenized {text} ({what}) with {tokenizer.name}: {result['n_tokens']:,} tokens -> {path}")

    _build(path, write, tokenizer, f"the token cache {path}", mode=cache.source_mode(fields["source"]["mode"]))
    cache.alias(path, text.name)                      # first: the old alias still has its second link
    cache.prune(data_dir, text.name, path)
    return path


def _specials_key(tokenizer) -> dict:
    """The special tokens matched in the text, part of a cache's key (the ids differ with them); {} for a tokenizer
    without special tokens (bytes), whose caches keep their names."""
    if not getattr(tokenizer, "special_tokens", None):
        return {}
    return {"allowed_special": sorted(tokenizer.allowed_special)}


def _cache_dtype(tokenizer) -> str:
    return "uint8" if tokenizer.vocab_size <= 256 else dtype_for_vocab(tokenizer.vocab_size)


def _build(path: Path, write, tokenizer, what: str, need: str = "", mode: int | None = None) -> bool:
    try:
        return cache.build(path, write, tokenizer.sha256, mode)
    except OSError as error:       # a full disk or a file-size limit: one line naming the path, no partial file
        raise TrainledgerError(f"--out-dir: cannot write {what}: {error.strerror or error}"
                               + (f" ({need})" if need else "")) from None


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
                               f"(tokenized once), or write a token file with `trainledger tokenize`")
    raise TrainledgerError(f"--data: {path} is not a token file (no trainledger header, not a .npy array): write one "
                           f"with `trainledger tokenize` (text) or numpy.save of a 1-D integer array")


def run_tokenizer_of(config: TrainConfig):
    """The tokenizer --tokenizer names, bytes for text sources without one, None for --data without one."""
    if config.tokenizer:
        return load_tokenizer(config.tokenizer, "--tokenizer", special_tokens=config.special_tokens,
                              allowed_special=config.allowed_special)
    return None if config.data else ByteTokenizer()


def _data_tokenizer(path: Path, given) -> tuple[object | None, str | None, str | None, int | None]:
    """(tokenizer, name, sha256, vocab) of a --data token file: its header's, checked against --tokenizer."""
    with open(path, "rb") as f:
        has_header = f.read(len(TOKEN_MAGIC)) == TOKEN_MAGIC
    header = read_header(path) if has_header else {"vocab_size": None}
    if header["vocab_size"] is None:                  # a .npy or an older header: nothing recorded
        return (given, given.name, given.sha256, given.vocab_size) if given else (None, None, None, None)
    name, sha, vocab = header["tokenizer_name"], header["tokenizer_sha256"], header["vocab_size"]
    if given is not None:
        if given.vocab_size != vocab or given.sha256 != sha:
            raise TrainledgerError(f"--data {path} was tokenized with {name} (vocabulary {vocab:,}, sha256 {sha[:12]}…) "
                                   f"but --tokenizer gives {given.name} (vocabulary {given.vocab_size:,}, sha256 "
                                   f"{given.sha256[:12]}…): a model cannot read tokens of another vocabulary; pass "
                                   f"the tokenizer the file was made with, or re-tokenize")
        given.name = name or given.name
        return given, given.name, sha, vocab
    if sha == ByteTokenizer.sha256:
        return ByteTokenizer(), BYTES, sha, vocab
    beside = path.parent / TOKENIZER_FILE
    if beside.is_file():
        try:
            found = load_tokenizer(beside, "--data's tokenizer")
        except TrainledgerError:
            found = None
        if found is not None and found.sha256 == sha:
            found.name = name or found.name
            return found, found.name, sha, vocab
    print(f"warning: --data {path} was tokenized with {name} (sha256 {sha[:12]}…), whose {TOKENIZER_FILE} is not "
          f"beside it: the run records the name and hash only; pass --tokenizer FILE so that generate and export "
          "can find it", file=sys.stderr)
    return None, name, sha, vocab


def load_data(config: TrainConfig, log=None) -> RunData:
    """The run's tokens and tokenizer; builds the cache for --text, --dataset and the corpus (see the module doc)."""
    given = run_tokenizer_of(config)
    if config.data:
        path, flag = Path(config.data), "--data"
    elif config.text:
        path, flag = text_tokens(Path(config.text), Path(config.out_dir), log, given), "--text"
    elif config.dataset:
        path, flag = text_tokens(Path(config.dataset), Path(config.out_dir), log, given, "--dataset",
                                 config.text_column), "--dataset"
    else:
        path, flag = build_stdlib_corpus(Path(config.out_dir), log, tokenizer=given), "(built-in corpus)"
    check_input(path, flag, "token file")
    if flag == "--data":
        _check_token_file(path)
        tokenizer, name, sha, vocab = _data_tokenizer(path, given)
    else:
        tokenizer, name, sha, vocab = given, given.name, given.sha256, given.vocab_size
        cache.hold(path)             # in use: a second trainer's prune() leaves it alone
    try:
        tokens = open_tokens(path)
    except TrainledgerError as error:
        raise TrainledgerError(f"{flag}: {error}") from None
    need = config.seq_len + 1
    n_eval = max(int(len(tokens) * config.eval_fraction), need)
    if len(tokens) - n_eval < need:
        raise TrainledgerError(f"{flag} {path} holds {len(tokens)} tokens: too short for --seq-len {config.seq_len} "
                               f"(needs at least {2 * need}: {need} to train on and {need} held out)")
    return RunData(path, flag, tokens, n_eval, tokenizer, name, sha, vocab)


def check_ids(data: RunData, vocab_size: int, model: str) -> None:
    """Refuses token ids outside [0, vocab_size) in one line (reads the whole file once)."""
    tokens = data.tokens
    low, top = (int(tokens.min()), int(tokens.max())) if len(tokens) else (0, 0)
    if low < 0 or top >= vocab_size:
        span = f"from {low} to {top}" if low < 0 else f"up to {top}"
        raise TrainledgerError(f"{data.flag} {data.path} holds token ids {span}, outside the model's vocabulary "
                               f"[0, {vocab_size}) (--model {model})")


def record_tokenizer(data: RunData, out_dir: Path) -> Path | None:
    """Copies a non-byte tokenizer to <out-dir>/tokenizer.json (atomically) for generate and export; its path.
    A tokenizer.json already there is kept when it is this tokenizer, and refused (never replaced) otherwise."""
    if data.tokenizer is None or isinstance(data.tokenizer, ByteTokenizer):
        return None
    from trainledger.files import check_output
    path = check_output(Path(out_dir) / TOKENIZER_FILE, "--out-dir", "a tokenizer", hint="move it away, or pass "
                        "another --out-dir")            # no link, no FIFO (whose open would block the load below)
    if path.exists():
        try:
            existing = load_tokenizer(path, "run tokenizer").sha256
        except TrainledgerError:
            existing = None
        if existing == data.tokenizer.sha256:
            return path
        held = f"another tokenizer (sha256 {existing[:12]}…)" if existing else "no tokenizer trainledger can load"
        raise TrainledgerError(f"--out-dir: {path} holds {held}, not this run's {data.tokenizer_name} (sha256 "
                               f"{data.tokenizer_sha256[:12]}…): most likely the run trained in {out_dir}, which "
                               "cannot change its tokenizer; it is left as it is: pass that run's --tokenizer, or "
                               "another --out-dir (or move the file away)")
    try:
        return data.tokenizer.save(path)
    except OSError as error:
        raise TrainledgerError(f"--out-dir: cannot write {path}: {error.strerror or error}") from None


def load_splits(config: TrainConfig, vocab_size: int, log=None) -> tuple[np.ndarray, np.ndarray]:
    """(train tokens, held-out tokens) as memmap views, ids checked against `vocab_size`."""
    data = load_data(config, log)
    check_ids(data, vocab_size, config.model)
    return data.train, data.held_out


def describe_tokenizer(data: RunData) -> dict:
    """JSON-ready record of the run's tokenizer (for the summary)."""
    return {"name": data.tokenizer_name, "sha256": data.tokenizer_sha256, "vocab_size": data.vocab_size}


__all__ = ["RunData", "STDLIB_BYTES", "build_stdlib_corpus", "check_ids", "describe_tokenizer", "load_data",
           "load_splits", "record_tokenizer", "stdlib_files", "text_tokens"]
