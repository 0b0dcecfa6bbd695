"""Issue 40, item 7: the tie rule of BPE training, documented and deterministic, the lexicographic rule available.

`train_bpe` (the tokenizers library) broke ties between equally frequent pairs by its own rule where GPT-2-style
reference trainers and course material take the lexicographically greatest pair; the merge lists parted at merge
31 of 243 on a small corpus. data/bpe_train.py implements both rules.

References: a naive trainer written here (all pairs recounted at every merge, `max` over (count, pair)), and the
tokenizers library's own BpeTrainer for the library rule.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from trainledger.cli.main import main
from trainledger.data import load_tokenizer, open_tokens
from trainledger.data.bpe import bytes_to_unicode, split_on_specials, train_bpe
from trainledger.data.bpe_train import train_merges
from trainledger.errors import TrainledgerError

EOT = "<|endoftext|>"


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    rng = random.Random(3)       # words of random syllables: many pairs, many of them equally frequent
    syllables = "lo we new wi der st the ca sa on ma an ra ti ke zu mo".split()
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))) for _ in range(400)]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "." for _ in range(300)]


def naive_merges(texts, vocab_size, specials=(EOT,)):
    """The lexicographic rule by brute force: every pair recounted at every merge, the max of (count, pair)."""
    from tokenizers import pre_tokenizers
    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    split = pre_tokenizers.ByteLevel(add_prefix_space=False)
    words = Counter()
    for piece in split_on_specials(texts, list(specials)):
        words.update(tuple(bytes([to_byte[c]]) for c in w) for w, _ in split.pre_tokenize_str(piece))
    merges, size = [], len(specials) + 256
    while size < vocab_size:
        pairs = Counter()
        for word, n in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += n
        if not pairs:
            break
        best = max(pairs.items(), key=lambda item: (item[1], item[0]))[0]
        merges.append(best)
        size += 1
        merged = Counter()
        for word, n in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += n
        words = merged
    return merges


def test_the_lexicographic_rule_equals_the_naive_trainer(corpus):
    vocab, merges = train_merges(corpus, 420, (EOT,), ties="lexicographic")
    assert merges == naive_merges(corpus, 420)
    assert len(vocab) == 420 and vocab[0] == EOT.encode() and len(merges) == 420 - 257


def test_the_library_rule_reproduces_the_tokenizers_trainer(corpus):
    """Our trainer with the library's rule (the smallest id pair among equal counts, ids: specials, the byte
    symbols by code point, merges in order) gives the library's own merge list, merge for merge."""
    _, ours = train_merges(corpus, 420, (EOT,), ties="library")
    theirs = train_bpe(corpus, 420)
    to_byte = {c: b for b, c in bytes_to_unicode().items()}
    model = json.loads(theirs.backend.to_str())["model"]
    library = [tuple(bytes(to_byte[c] for c in part) for part in (m.split(" ") if isinstance(m, str) else m))
               for m in model["merges"]]
    assert ours == library


def test_the_two_rules_part_at_a_tie_and_each_is_deterministic(corpus):
    lexicographic = train_merges(corpus, 420, (EOT,), ties="lexicographic")[1]
    library = train_merges(corpus, 420, (EOT,), ties="library")[1]
    assert lexicographic != library
    first = next(i for i, (a, b) in enumerate(zip(lexicographic, library)) if a != b)
    assert first > 0
    assert train_merges(list(reversed(corpus)), 420, (EOT,), ties="lexicographic")[1] == lexicographic


def test_tokenize_trains_with_the_lexicographic_rule(corpus, tmp_path, capsys):
    text = tmp_path / "in.txt"
    text.write_text("\n".join(corpus))
    out = tmp_path / "lex" / "in.tokens"
    out.parent.mkdir()
    assert main(["tokenize", str(text), str(out), "--train-bpe", "400", "--bpe-ties", "lexicographic", "--json"]) == 0
    saved = load_tokenizer(out.parent / "tokenizer.json")
    assert saved.decode(open_tokens(out)) == text.read_text()
    assert saved.vocab_size == 400
    assert main(["tokenize", str(text), str(tmp_path / "x.tokens"), "--bpe-ties", "lexicographic"]) == 2
    assert "--bpe-ties applies with --train-bpe" in capsys.readouterr().err
    with pytest.raises(TrainledgerError, match="--bpe-ties"):
        train_merges(corpus, 300, ties="random")
