"""A byte-level BPE from a vocabulary and merges: GPT-2's vocab.json + merges.txt files, or the two in memory.

    from trainledger.data.bpe_files import from_vocab_merges
    tokenizer = from_vocab_merges({0: b"a", 1: b"b", 2: b"ab"}, [(b"a", b"b")], special_tokens=["<|endoftext|>"])

In memory the vocabulary is {id: token bytes} and the merges a list of (bytes, bytes) pairs by priority (the form
a BPE trainer returns, CS336 assignment 1's): the bytes are mapped to GPT-2's printable alphabet
(bpe.bytes_to_unicode) and handed to the `tokenizers` library as a BPE model with GPT-2's byte-level
pre-tokenizer and decoder, exactly as load_vocab_merges builds GPT-2's own pair of files. The special tokens
given are added (a token already in the vocabulary keeps its id, a new one gets the next id) and are the ones
`encode` matches in text by default (the caller asked for them); any other string is ordinary text.

Files are parsed here, not by the library: every id an integer in [0, 2^24), no id given twice ("th": 5 took byte
5's id and decoded "a\\x05b" as "athb"; an id of 4,000,000,000 aborted the library after 40 s), every token and
merge within data/limits.py's length bound, every merge of two tokens of the vocabulary whose joined bytes are in
it too. Nothing touches the network or unpickles.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from trainledger.data.limits import MAX_TOKEN_CHARS, MAX_VOCAB, check_vocabulary
from trainledger.data.tokens import check_input
from trainledger.errors import TrainledgerError

MAX_FILE_BYTES = 512 * 2**20      # as data/bpe.py MAX_TOKENIZER_BYTES
if TYPE_CHECKING:
    from trainledger.data.bpe import HFTokenizer


def _backend(vocab: dict[str, int], merges: list[tuple[str, str]], special_tokens, eot_names=()):
    """A tokenizers.Tokenizer: BPE over the byte-level alphabet, GPT-2's pre-tokenizer and decoder, the special
    tokens added (those of `special_tokens`, and every entry named like one of `eot_names`)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    specials = [*special_tokens, *(t for t in eot_names if t in vocab and t not in special_tokens)]
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return backend


def _check_merges(merges: list[tuple[str, str]], vocab: dict[str, int], where: str) -> None:
    if len(merges) > MAX_VOCAB:
        raise TrainledgerError(f"{where}: {len(merges):,} merges; at most {MAX_VOCAB:,}")
    for number, (left, right) in enumerate(merges, 1):
        if left not in vocab or right not in vocab or left + right not in vocab:
            missing = next(t for t in (left, right, left + right) if t not in vocab)
            raise TrainledgerError(f"{where}: merge {number} ({left[:20]!r} {right[:20]!r}) needs {missing[:30]!r}, "
                                   "which the vocabulary lacks")


def from_vocab_merges(vocab: dict[int, bytes], merges: list[tuple[bytes, bytes]], special_tokens=None,
                      name: str = "bpe", flag: str = "vocab") -> "HFTokenizer":
    """The byte-level BPE of `vocab` ({id: token bytes}) and `merges` ([(bytes, bytes)], by priority), with
    `special_tokens` (strings) added and matched in text by default (module docstring)."""
    from trainledger.data.bpe import HFTokenizer, bytes_to_unicode
    table = bytes_to_unicode()

    def show(token) -> str:
        if not isinstance(token, (bytes, bytearray)):
            raise TrainledgerError(f"{flag}: tokens must be bytes, got {type(token).__name__}")
        return "".join(table[b] for b in token)

    specials = list(dict.fromkeys(special_tokens or ()))
    for token in specials:
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN_CHARS:
            raise TrainledgerError(f"{flag}: a special token must be a non-empty string of at most "
                                   f"{MAX_TOKEN_CHARS:,} characters, got {token!r:.40}")
    by_special = {token.encode("utf-8"): token for token in specials}
    mapped = {by_special.get(token) or show(token): index for index, token in dict(vocab).items()}
    check_vocabulary(((token, index) for token, index in mapped.items()), "(in memory)", flag)
    if len(mapped) != len(vocab):
        raise TrainledgerError(f"{flag}: two ids name the same token bytes; every token has one id")
    pairs = [(show(left), show(right)) for left, right in merges]
    _check_merges(pairs, mapped, f"{flag} (in memory)")
    return HFTokenizer(_backend(mapped, pairs, specials), name, allowed_special=specials)


def read_vocab_merges(vocab_path: Path, merges_path: Path, flag: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """(vocabulary, merges) of GPT-2's files, checked (module docstring)."""
    raw = check_input(vocab_path, flag, "vocab.json", max_bytes=MAX_FILE_BYTES).read_bytes()
    try:
        vocab = json.loads(raw)
    except (ValueError, RecursionError):
        raise TrainledgerError(f"{flag} {vocab_path}: not a vocab.json + merges.txt pair: vocab.json is not JSON") from None
    if not isinstance(vocab, dict) or not vocab:
        raise TrainledgerError(f"{flag} {vocab_path}: not a vocab.json + merges.txt pair: vocab.json must be an "
                               "object of {token: id}")
    check_vocabulary(vocab.items(), vocab_path, flag)
    text = check_input(merges_path, flag, "merges.txt", max_bytes=MAX_FILE_BYTES).read_bytes()
    try:
        lines = text.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise TrainledgerError(f"{flag} {merges_path}: not a vocab.json + merges.txt pair: merges.txt is not UTF-8") from None
    merges = []
    for number, line in enumerate(lines, 1):
        if (number == 1 and line.startswith("#version")) or not line.strip():
            continue
        parts = line.split(" ")
        if len(parts) != 2 or not all(parts) or any(len(p) > MAX_TOKEN_CHARS for p in parts):
            raise TrainledgerError(f"{flag} {merges_path}: not a vocab.json + merges.txt pair: line {number} is not "
                                   "two tokens separated by one space")
        merges.append((parts[0], parts[1]))
    _check_merges(merges, vocab, f"{flag} {merges_path}: not a vocab.json + merges.txt pair")
    return vocab, merges


def load_vocab_merges(vocab_path, flag: str = "--tokenizer") -> "HFTokenizer":
    """GPT-2's tokenizer from its original pair of files, vocab.json ({token: id}) and merges.txt (one merge per
    line, by priority) in the same folder: GPT-2's byte-level pre-tokenizer and decoder (its encoder.py, as the
    `tokenizers` library builds it: ByteLevel without a prefix space), and every vocabulary entry named like an
    end-of-text token (<|endoftext|> = 50256 in GPT-2's) a special token, matched whole when allowed."""
    from trainledger.data.bpe import EOT_NAMES, HFTokenizer
    vocab_path = Path(vocab_path)
    merges_path = vocab_path.parent / "merges.txt"
    check_input(vocab_path, flag, "vocab.json", max_bytes=MAX_FILE_BYTES)
    if not merges_path.exists():
        raise TrainledgerError(f"{flag} {vocab_path}: a GPT-2 style vocab.json needs its merges.txt beside it "
                               f"({merges_path} is missing)")
    vocab, merges = read_vocab_merges(vocab_path, merges_path, flag)
    backend = _backend(vocab, merges, (), EOT_NAMES)
    return HFTokenizer(backend, f"{vocab_path.resolve().parent.name or 'gpt2'}/vocab.json"[-48:])
