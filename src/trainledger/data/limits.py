"""Bounds on what a tokenizer file and a text may ask of the tokenizer library (stdlib only).

- Token ids: at most MAX_VOCAB. A tokenizer.json naming the id 3,000,000,000 (13 KB of JSON) made the
  `tokenizers` library allocate 8 GB and abort (exit 134); a .tiktoken rank of 2^32 does not fit a token file.
  The largest vocabularies among our presets (specs/presets.py, from the models' config.json) are Gemma 3's
  262,144 and Llama 3's 128,256 ids: 2^24 leaves 64 times the larger.
- Whitespace-free runs: at most MAX_RUN_CHARS characters reach the BPE at once. Byte-level BPE merges within
  one pre-token, and its cost grows faster than the pre-token's length (one 600 KB token took 71 s), so a
  longer run is cut into MAX_RUN_CHARS pieces: its ids may differ from one encode only at those cuts, which
  the caller warns about. Natural text has no 4,096-character word; base64 blobs and minified code do.
"""

from __future__ import annotations

import functools
import json
import re

from trainledger.errors import TrainledgerError

MAX_VOCAB = 1 << 24
MAX_RUN_CHARS = 4096
# A token of a vocabulary file: at most MAX_TOKEN_CHARS characters (a .tiktoken token at most as many bytes). The
# merge search of a .tiktoken file (data/bpe.py from_tiktoken) tries every split of every token, a cost that grows
# with the square of a token's length (one 100 KB token took 4.5 s, one of 10 MB ran past two minutes); the
# tokens of published vocabularies are words and runs of one character, far shorter. MAX_MERGE_SEARCH bounds the
# whole file's cost: the sum of its tokens' squared lengths.
MAX_TOKEN_CHARS = 1024
MAX_MERGE_SEARCH = 1 << 30
_SURROGATE = re.compile("[\ud800-\udfff]")
_SPACE = re.compile(r"\s")


def check_tokenizer_ids(text: str, path, flag: str) -> None:
    """A one-line TrainledgerError naming `flag` when the tokenizer.json `text` gives any token an id that is not
    an integer in [0, MAX_VOCAB) (model.vocab of BPE/WordPiece/WordLevel, added_tokens), two tokens of model.vocab
    one id, an added token the id of another vocabulary token, or a token (or a merge) is longer than
    MAX_TOKEN_CHARS; JSON errors are left to the library, which names them."""
    try:
        config = json.loads(text)
    except RecursionError:
        raise TrainledgerError(f"{flag} {path} nests JSON too deeply to be a tokenizer.json") from None
    except ValueError:
        return
    if not isinstance(config, dict):
        return
    model = config.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    ids = list(vocab.items()) if isinstance(vocab, dict) else []
    added = config.get("added_tokens")
    ids += [(t.get("content"), t.get("id")) for t in added if isinstance(t, dict)] if isinstance(added, list) else []
    for token, value in ids:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_VOCAB:
            raise TrainledgerError(f"{flag} {path}: token {str(token)[:30]!r} has id {str(value)[:30]}; ids must be "
                                   f"integers in 0..{MAX_VOCAB - 1:,} (2^24)")
    check_vocabulary(vocab.items() if isinstance(vocab, dict) else (), path, flag)
    by_id = {value: token for token, value in (vocab.items() if isinstance(vocab, dict) else ())}
    for token in added if isinstance(added, list) else ():
        if not isinstance(token, dict):
            continue
        content, value = token.get("content"), token.get("id")
        if isinstance(content, str) and len(content) > MAX_TOKEN_CHARS:
            raise TrainledgerError(f"{flag} {path}: an added token is {len(content):,} characters long; tokens are "
                                   f"at most {MAX_TOKEN_CHARS:,}")
        if by_id.setdefault(value, content) != content:
            raise TrainledgerError(f"{flag} {path}: added token {str(content)[:30]!r} has id {value}, the id of "
                                   f"{str(by_id[value])[:30]!r}; every id names one token")
    pieces = vocab if isinstance(vocab, list) else []                       # Unigram: [[piece, score], ...]
    if any(isinstance(p, list) and p and isinstance(p[0], str) and len(p[0]) > MAX_TOKEN_CHARS for p in pieces):
        raise TrainledgerError(f"{flag} {path}: a vocabulary piece is longer than {MAX_TOKEN_CHARS:,} characters")
    merges = model.get("merges") if isinstance(model, dict) else None
    for merge in merges if isinstance(merges, list) else ():
        size = len(merge) if isinstance(merge, str) else sum(len(p) for p in merge if isinstance(p, str)) \
            if isinstance(merge, list) else 0
        if size > 2 * MAX_TOKEN_CHARS + 1:
            raise TrainledgerError(f"{flag} {path}: a merge is {size:,} characters long; tokens are at most "
                                   f"{MAX_TOKEN_CHARS:,}")


def check_vocabulary(items, path, flag: str) -> None:
    """A one-line TrainledgerError naming `flag` unless every (token, id) of `items` has a string token of at most
    MAX_TOKEN_CHARS characters and an integer id in [0, MAX_VOCAB), no two tokens sharing an id (a vocab.json
    whose "th" had the id 5 of byte 5 decoded "a\x05b" as "athb"; one of 2^40 became 0)."""
    seen: dict[int, str] = {}
    for token, value in items:
        if not isinstance(token, str):
            raise TrainledgerError(f"{flag} {path}: a token is {type(token).__name__}, not a string")
        if len(token) > MAX_TOKEN_CHARS:
            raise TrainledgerError(f"{flag} {path}: token {token[:30]!r}... is {len(token):,} characters long; "
                                   f"tokens are at most {MAX_TOKEN_CHARS:,}")
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_VOCAB:
            raise TrainledgerError(f"{flag} {path}: token {token[:30]!r} has id {str(value)[:30]}; ids must be "
                                   f"integers in 0..{MAX_VOCAB - 1:,} (2^24)")
        other = seen.setdefault(value, token)
        if other != token:
            raise TrainledgerError(f"{flag} {path}: tokens {other[:30]!r} and {token[:30]!r} share the id {value}; "
                                   "every id names one token")


def check_rank(rank: int, number: int, path, flag: str, token: bytes = b"") -> None:
    """A one-line TrainledgerError when a .tiktoken rank (line `number`) is no id in [0, MAX_VOCAB) or its token is
    longer than MAX_TOKEN_CHARS bytes."""
    if not 0 <= rank < MAX_VOCAB:
        raise TrainledgerError(f"{flag} {path}: line {number} has rank {str(rank)[:30]}; ranks must be integers in "
                               f"0..{MAX_VOCAB - 1:,} (2^24)")
    if len(token) > MAX_TOKEN_CHARS:
        raise TrainledgerError(f"{flag} {path}: line {number} has a token of {len(token):,} bytes; tokens are at most "
                               f"{MAX_TOKEN_CHARS:,} bytes")


def check_merge_search(lengths, path, flag: str) -> None:
    """A one-line TrainledgerError when a rank file's tokens are too long in all for the merge search (the sum of
    their squared lengths beyond MAX_MERGE_SEARCH)."""
    work = sum(length * length for length in lengths)
    if work > MAX_MERGE_SEARCH:
        raise TrainledgerError(f"{flag} {path}: its tokens are too long in all (sum of squared lengths {work:,}, at "
                               f"most {MAX_MERGE_SEARCH:,}): not a published rank file")


@functools.lru_cache(maxsize=8)
def _long_run(max_run: int) -> re.Pattern:
    # anchored at the start of a run (the look-behind), so each run is scanned once: linear in the text
    return re.compile(rf"(?<!\S)\S{{{max_run + 1},}}")


def _may_have_long_run(piece: str, max_run: int) -> bool:
    """False when no run in `piece` is longer than `max_run`: a run of max_run + 1 characters or more covers one
    whole aligned window of max_run // 2, and in natural text the search for whitespace in each window stops after
    a few characters (16 MB in ~10 ms, where a scan of every character takes a second)."""
    window = max(1, max_run // 2)
    return any(_SPACE.search(piece, start, start + window) is None
               for start in range(0, len(piece) - window + 1, window))


def bound_runs(pieces: list[str], max_run: int = MAX_RUN_CHARS) -> tuple[list[str], int]:
    """(`pieces` with every whitespace-free run longer than `max_run` characters cut every `max_run` characters,
    the number of cuts made). Pieces of at most `max_run` characters are passed through untouched."""
    out, cuts = [], 0
    for piece in pieces:
        if len(piece) <= max_run or not _may_have_long_run(piece, max_run):
            out.append(piece)
            continue
        start = 0
        for match in _long_run(max_run).finditer(piece):
            for cut in range(match.start() + max_run, match.end(), max_run):
                out.append(piece[start:cut])
                start, cuts = cut, cuts + 1
        out.append(piece[start:])
    return out, cuts


def lone_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate (U+D800..U+DFFF: JSON's "\\ud800" escape) in `text`, or None; such
    a string has no UTF-8 form, so no tokenizer can take it."""
    match = _SURROGATE.search(text)
    return match.start() if match else None
