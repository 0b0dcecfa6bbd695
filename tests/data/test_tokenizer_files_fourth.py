"""Issue 40, items 4 and 7 (tokenizers): ids in range and unique and tokens bounded in length, checked before the
`tokenizers` library sees a file; special tokens as tiktoken treats them; a tokenizer built in memory from a
vocabulary and merges.

The reproductions: a vocab.json with an id of 4,000,000,000 aborted the library after 40 s (exit 134); "th": 2**40
became 0 and "th": 5 took byte 5's id, so encode("a\\x05b") decoded to "athb"; a .tiktoken file with one 100 KB
token took 4.5 s (10 MB: killed at 120 s); encode("a<|endoftext|>b") gave [64, 50256, 65] when the caller asked
for no special token.

References: tiktoken (an independent implementation of byte-level BPE), its encode_ordinary and its encode with
allowed_special; the bytes of each file before and after.
"""

from __future__ import annotations

import base64
import json
import time

import numpy as np
import pytest
import tiktoken            # the test extras: an independent implementation of byte-level BPE encoding

from trainledger.cli.main import main
from trainledger.data import load_tokenizer, open_tokens
from trainledger.data.bpe import bytes_to_unicode, train_bpe
from trainledger.data.bpe_files import from_vocab_merges
from trainledger.data.limits import MAX_TOKEN_CHARS
from trainledger.errors import TrainledgerError

EOT = "<|endoftext|>"
R50K = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
TEXTS = ["the cat sat on the mat. " * 40, "a dog ran far away from home, because it was late. " * 40,
         "Ünïcödé 数字 12345 don't  \r\n\n\tend 😀 " * 10]


@pytest.fixture(scope="module")
def bpe():
    return train_bpe(TEXTS, 400)


def _pair(bpe, folder):
    """bpe's vocab.json + merges.txt (the library's own writer) in `folder`; (vocab, merges) as bytes."""
    folder.mkdir(exist_ok=True)
    bpe.backend.model.save(str(folder))
    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    vocab = json.loads((folder / "vocab.json").read_text())
    merges = [tuple(line.split(" ")) for line in (folder / "merges.txt").read_text().splitlines()[1:] if line]
    as_bytes = lambda token: bytes(to_byte[c] for c in token)          # noqa: E731
    return ({i: (t.encode() if t == EOT else as_bytes(t)) for t, i in vocab.items()},
            [(as_bytes(a), as_bytes(b)) for a, b in merges])


def _tokenize_refused(capsys, tmp_path, tokenizer_path, words):
    text = tmp_path / "in.txt"
    text.write_text("a\x05b the cat\n")
    before = tokenizer_path.read_bytes()
    started = time.monotonic()
    status = main(["tokenize", str(text), str(tmp_path / "out.tokens"), "--tokenizer", str(tokenizer_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and words in err[0] and "--tokenizer" in err[0], err
    assert time.monotonic() - started < 5 and tokenizer_path.read_bytes() == before
    assert not (tmp_path / "out.tokens").exists()


@pytest.mark.parametrize("change,words", [
    (lambda v: v.__setitem__("th", 4_000_000_000), "has id 4000000000"),
    (lambda v: v.__setitem__("th", 2**40), "has id 1099511627776"),
    (lambda v: v.__setitem__("th", 5), "share the id 5"),
    (lambda v: v.__setitem__("th", -1), "has id -1"),
    (lambda v: v.__setitem__("x" * (MAX_TOKEN_CHARS + 1), 999), "characters long"),
])
def test_a_vocab_json_with_bad_ids_or_tokens_is_one_line(bpe, tmp_path, capsys, change, words):
    folder = tmp_path / "gpt2"
    _pair(bpe, folder)
    vocab = json.loads((folder / "vocab.json").read_text())
    vocab.setdefault("th", max(vocab.values()) + 1)
    change(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab))
    _tokenize_refused(capsys, tmp_path, folder / "vocab.json", words)


def test_a_merges_txt_naming_unknown_tokens_is_one_line(bpe, tmp_path, capsys):
    folder = tmp_path / "gpt2"
    _pair(bpe, folder)
    (folder / "merges.txt").write_text("#version: 0.2\nzz qq\n")
    _tokenize_refused(capsys, tmp_path, folder / "vocab.json", "not a vocab.json + merges.txt pair")


@pytest.mark.parametrize("change,words", [
    (lambda c: c["model"]["vocab"].__setitem__("th", 5), "share the id 5"),
    (lambda c: c["model"]["vocab"].__setitem__("y" * (MAX_TOKEN_CHARS + 1), 998), "characters long"),
    (lambda c: c["added_tokens"].append({"id": 5, "content": "<|mine|>", "special": True, "single_word": False,
                                         "lstrip": False, "rstrip": False, "normalized": False}), "the id of"),
])
def test_a_tokenizer_json_with_duplicate_ids_or_long_tokens_is_one_line(bpe, tmp_path, capsys, change, words):
    path = tmp_path / "tok" / "tokenizer.json"
    bpe.save(path)
    config = json.loads(path.read_text())
    change(config)
    path.write_text(json.dumps(config))
    _tokenize_refused(capsys, tmp_path, path, words)


@pytest.mark.parametrize("length", [100_000, 300_000, 10_000_000])
def test_a_tiktoken_file_with_one_huge_token_is_refused_at_once(tmp_path, capsys, length):
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    lines.append(f"{base64.b64encode(b'a' * length).decode()} 256")
    path = tmp_path / "ranks.tiktoken"
    path.write_text("\n".join(lines))
    _tokenize_refused(capsys, tmp_path, path, f"a token of {length:,} bytes")


def test_many_long_tiktoken_tokens_are_bounded_in_all(tmp_path, capsys):
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    lines += [f"{base64.b64encode(b'%08d' % i + b'b' * (MAX_TOKEN_CHARS - 8)).decode()} {256 + i}" for i in range(1100)]
    path = tmp_path / "ranks.tiktoken"
    path.write_text("\n".join(lines))
    _tokenize_refused(capsys, tmp_path, path, "too long in all")


# --- special tokens as tiktoken treats them --------------------------------------------------------------------------
def test_special_tokens_are_ordinary_text_unless_allowed(bpe, tmp_path):
    vocab, merges = _pair(bpe, tmp_path / "gpt2")
    ranks = {token: i for i, token in vocab.items() if token != EOT.encode()}
    reference = tiktoken.Encoding("pair", pat_str=R50K, mergeable_ranks=ranks, special_tokens={EOT: vocab_id(vocab)})
    ours = load_tokenizer(tmp_path / "gpt2" / "vocab.json")
    text = "a<|endoftext|>b"
    assert ours.encode(text).tolist() == reference.encode_ordinary(text)               # ordinary ids by default
    assert len(ours.encode(text)) > 3 and vocab_id(vocab) not in ours.encode(text).tolist()
    assert ours.encode(text, allowed_special={EOT}).tolist() == reference.encode(text, allowed_special={EOT})
    assert ours.encode(text, allowed_special="all").tolist()[1] == vocab_id(vocab)
    assert [a.tolist() for a in ours.encode_batch([text, "x"], allowed_special="all")] == \
        [reference.encode(t, allowed_special="all") for t in (text, "x")]
    with pytest.raises(TrainledgerError, match="is not a special token"):
        ours.encode(text, allowed_special={"<|nope|>"})


def vocab_id(vocab) -> int:
    return next(i for i, token in vocab.items() if token == EOT.encode())


def test_in_memory_tokenizer_from_vocab_and_merges_equals_tiktoken(bpe, tmp_path):
    vocab, merges = _pair(bpe, tmp_path / "gpt2")
    ranks = {token: i for i, token in vocab.items() if token != EOT.encode()}
    reference = tiktoken.Encoding("pair", pat_str=R50K, mergeable_ranks=ranks, special_tokens={EOT: vocab_id(vocab)})
    plain = from_vocab_merges(vocab, merges)
    special = from_vocab_merges(vocab, merges, special_tokens=[EOT])
    for sample in [*TEXTS, "one story.<|endoftext|>another.<|endoftext|>", "a<|endoftext|>b"]:
        assert plain.encode(sample).tolist() == reference.encode_ordinary(sample), sample
        assert special.encode(sample).tolist() == reference.encode(sample, allowed_special="all"), sample
        assert special.decode(special.encode(sample)) == sample
    assert special.vocab_size == plain.vocab_size == bpe.vocab_size
    with pytest.raises(TrainledgerError, match="same token bytes"):
        from_vocab_merges({0: b"a", 1: b"b", 2: b"a"}, [])
    with pytest.raises(TrainledgerError, match="lacks"):
        from_vocab_merges({0: b"a", 1: b"b"}, [(b"a", b"b")])


def test_overlapping_special_tokens_take_the_longest(bpe, tmp_path):
    vocab, merges = _pair(bpe, tmp_path / "gpt2")
    double = EOT + EOT
    tokenizer = from_vocab_merges({**vocab, max(vocab) + 1: double.encode()}, merges, special_tokens=[EOT, double])
    ids = tokenizer.encode(f"x{double}y{EOT}").tolist()
    assert ids.count(max(vocab) + 1) == 1 and ids.count(vocab_id(vocab)) == 1


def _specials_file(bpe, tmp_path) -> tuple:
    path = tmp_path / "tok" / "tokenizer.json"
    bpe.save(path)
    text = tmp_path / "docs.txt"
    text.write_text(f"the cat sat{EOT}a dog ran{EOT}" * 50)
    return path, text


def test_tokenize_encodes_special_strings_as_text_unless_allowed(bpe, tmp_path, capsys):
    path, text = _specials_file(bpe, tmp_path)
    eot = load_tokenizer(path).special_tokens[EOT]
    assert main(["tokenize", str(text), str(tmp_path / "plain.tokens"), "--tokenizer", str(path)]) == 0
    assert main(["tokenize", str(text), str(tmp_path / "allowed.tokens"), "--tokenizer", str(path),
                 "--allow-special", EOT]) == 0
    plain, allowed = open_tokens(tmp_path / "plain.tokens"), open_tokens(tmp_path / "allowed.tokens")
    assert eot not in plain and int((np.asarray(allowed) == eot).sum()) == 100
    assert main(["tokenize", str(text), str(tmp_path / "x.tokens"), "--tokenizer", str(path),
                 "--allow-special", "<|nope|>"]) == 2
    assert "--allow-special" in capsys.readouterr().err


def test_train_text_and_generate_prompt_follow_the_same_rule(bpe, tmp_path, capsys):
    path, text = _specials_file(bpe, tmp_path)
    eot = load_tokenizer(path).special_tokens[EOT]
    common = ["--text", str(text), "--tokenizer", str(path), "--steps", "2", "--seq-len", "16", "--batch-size", "2",
              "--eval-every", "0", "--no-plot", "--quiet", "--threads", "1"]
    assert main(["train", *common, "--out-dir", str(tmp_path / "plain")]) == 0
    assert main(["train", *common, "--out-dir", str(tmp_path / "allowed"), "--allow-special", EOT]) == 0
    caches = {name: next((tmp_path / name / "data").glob("docs*.tokens")) for name in ("plain", "allowed")}
    assert eot not in open_tokens(caches["plain"]) and eot in open_tokens(caches["allowed"])
    capsys.readouterr()
    base = ["generate", str(tmp_path / "plain"), "--prompt", f"a{EOT}b", "--max-new-tokens", "1", "--no-predict",
            "--json"]
    assert main(base) == 0
    assert eot not in json.loads(capsys.readouterr().out)["prompt_tokens"]
    assert main([*base, "--allow-special", EOT]) == 0
    assert eot in json.loads(capsys.readouterr().out)["prompt_tokens"]
