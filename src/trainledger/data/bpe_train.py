"""Byte-level BPE training with a tie rule one can name: the lexicographic rule, or the `tokenizers` library's.

BPE training (Sennrich et al. 2016, arXiv:1508.07909; bytes: GPT-2, Radford et al. 2019 §2.2) merges the most
frequent adjacent pair of tokens, again and again. Pairs are often equally frequent, and which one is merged
then decides every later merge. Two rules are in use:
- "lexicographic": the pair (left bytes, right bytes) that is greatest in byte order, the rule of GPT-2-style
  reference trainers and of most course material (CS336 assignment 1: "prefer the lexicographically greater
  pair"); `max((count, (left, right)))` over all pairs;
- "library": the rule of the `tokenizers` library's BpeTrainer (what `train_bpe` in data/bpe.py runs): the pair
  of the smallest (left id, right id) in the trainer's own numbering, the special tokens first, then the 256 byte
  symbols in the order of their printable stand-ins (GPT-2's byte-to-character table, by code point), then each
  merged token as it is made (its `Merge` ordering: equal counts, "ascending order" of the id pair).
Both are deterministic: the same texts give the same merges on any machine and thread count. On a small corpus
the two merge lists part at the first tie that the rules break differently (tests/data/test_bpe_ties.py).

Pre-tokenization is the library's own ByteLevel pre-tokenizer (GPT-2's pattern, no prefix space), run in Python
on each text after it is split on the special tokens (never counted as text), so that the tokenizer built from the
result (data/bpe_files.py from_vocab_merges) cuts text into the same pieces it was trained on. The counting is
incremental: a merge updates only the words that hold its pair. Pure Python: slower than the library (fine for
vocabularies of a few thousand on a few MB), exact and inspectable.
"""

from __future__ import annotations

import heapq
from collections import Counter

from trainledger.errors import TrainledgerError

TIES = ("library", "lexicographic")


class _Greater:
    """A heap key that orders pairs of bytes in reverse, so that heapq (a min-heap) pops the greatest first."""

    __slots__ = ("pair",)

    def __init__(self, pair: tuple[bytes, bytes]):
        self.pair = pair

    def __lt__(self, other: "_Greater") -> bool:
        return self.pair > other.pair

    def __eq__(self, other) -> bool:
        return self.pair == other.pair


def _words(texts, special_tokens) -> Counter:
    """{pre-token (its bytes): how often} over `texts`, split first on the special tokens."""
    from tokenizers import pre_tokenizers

    from trainledger.data.bpe import bytes_to_unicode, split_on_specials
    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    split = pre_tokenizers.ByteLevel(add_prefix_space=False)
    counts: Counter = Counter()
    for piece in split_on_specials(texts, special_tokens):
        counts.update(word for word, _ in split.pre_tokenize_str(piece))
    return Counter({bytes(to_byte[c] for c in word): n for word, n in counts.items()})


def train_merges(texts, vocab_size: int, special_tokens=("<|endoftext|>",), ties: str = "lexicographic"
                 ) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    """(vocabulary {id: token bytes}, merges [(left, right)] in the order made) of a byte-level BPE of at most
    `vocab_size` tokens trained on `texts` (an iterable of strings), ties broken by `ties` (module docstring).

    Ids: the special tokens first (as UTF-8 bytes), then the 256 byte values in the order of GPT-2's printable
    stand-ins, then the merged tokens. Stops early when no pair is left."""
    from trainledger.data.bpe import bytes_to_unicode
    if ties not in TIES:
        raise TrainledgerError(f"--bpe-ties must be one of {', '.join(TIES)}, got {ties!r}")
    specials = list(dict.fromkeys(special_tokens))
    alphabet = [byte for byte, _ in sorted(bytes_to_unicode().items(), key=lambda item: ord(item[1]))]
    vocab: list[bytes] = [t.encode("utf-8") for t in specials] + [bytes([b]) for b in alphabet]
    if vocab_size < len(vocab):
        raise TrainledgerError(f"--train-bpe must be at least {len(vocab)} (256 bytes + {len(specials)} special "
                               f"tokens), got {vocab_size}")
    byte_id = {byte: len(specials) + i for i, byte in enumerate(alphabet)}
    counted = _words(texts, specials)
    words = [[byte_id[b] for b in word] for word in counted]
    freqs = list(counted.values())
    counts: Counter = Counter()
    where: dict[tuple[int, int], set[int]] = {}
    for index, (symbols, freq) in enumerate(zip(words, freqs)):
        for pair in zip(symbols, symbols[1:]):
            counts[pair] += freq
            where.setdefault(pair, set()).add(index)

    def key(pair):
        return (pair[0], pair[1]) if ties == "library" else _Greater((vocab[pair[0]], vocab[pair[1]]))

    heap = [(-count, key(pair), pair) for pair, count in counts.items()]
    heapq.heapify(heap)
    merges: list[tuple[bytes, bytes]] = []
    while len(vocab) < vocab_size and heap:
        negative, _, pair = heapq.heappop(heap)
        if counts.get(pair, 0) != -negative:          # a stale entry: its pair's count has changed since
            continue
        if -negative < 1:
            break
        new = len(vocab)
        vocab.append(vocab[pair[0]] + vocab[pair[1]])
        merges.append((vocab[pair[0]], vocab[pair[1]]))
        changed = set()
        for index in where.pop(pair, ()):
            symbols, freq = words[index], freqs[index]
            if not any(p == pair for p in zip(symbols, symbols[1:])):
                continue
            for old in zip(symbols, symbols[1:]):
                counts[old] -= freq
                changed.add(old)
            merged, i = [], 0
            while i < len(symbols):
                if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
                    merged.append(new)
                    i += 2
                else:
                    merged.append(symbols[i])
                    i += 1
            words[index] = merged
            for fresh in zip(merged, merged[1:]):
                counts[fresh] += freq
                where.setdefault(fresh, set()).add(index)
                changed.add(fresh)
        counts.pop(pair, None)
        for other in changed - {pair}:
            if counts[other] > 0:
                heapq.heappush(heap, (-counts[other], key(other), other))
            else:
                counts.pop(other, None)
    return dict(enumerate(vocab)), merges


def train_bpe_rule(texts, vocab_size: int, name: str | None = None, special_tokens=(), ties: str = "lexicographic"):
    """An HFTokenizer (data/bpe.py's interface) trained by train_merges: <|endoftext|> id 0, then
    `special_tokens` (matched in text by default, as train_bpe's), the bytes, the merges."""
    from trainledger.data.bpe import check_special_tokens
    from trainledger.data.bpe_files import from_vocab_merges
    specials = check_special_tokens(special_tokens)
    vocab, merges = train_merges(texts, int(vocab_size), specials, ties)
    tokenizer = from_vocab_merges(vocab, merges, special_tokens=specials, name=name or f"bpe-{int(vocab_size)}")
    tokenizer.allowed_special = frozenset(special_tokens or ())
    return tokenizer


def train_bpe_file(path, vocab_size: int, text_column: str = "text", chunk_bytes: int = 1 << 24,
                   progress: bool = False, flag: str = "INPUT", special_tokens=(), ties: str = "library"):
    """A byte-level BPE trained on a text file or a dataset's text column (streamed), named bpe-<vocab>-<stem>,
    with the tie rule `ties`: "library" (data/bpe.py train_bpe_file, the tokenizers library) or "lexicographic"."""
    from pathlib import Path

    from trainledger.data import bpe
    if ties == "library":
        return bpe.train_bpe_file(path, vocab_size, text_column, chunk_bytes, progress, flag, special_tokens)
    texts = bpe.training_texts(path, text_column, chunk_bytes, flag)
    return train_bpe_rule(texts, vocab_size, f"bpe-{int(vocab_size)}-{Path(path).stem}"[:48], special_tokens, ties)
