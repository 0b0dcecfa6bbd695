"""Real tokenizers: round trips on the standard-library corpus, token files equal to the library's own encode,
.tiktoken ranks equal to tiktoken's encoding, identities, and hostile tokenizer files refused in one line."""

from __future__ import annotations

import base64
import os
import pickle
import sys

import numpy as np
import pytest
import tiktoken            # the test extras: an independent implementation of .tiktoken encoding
import tokenizers          # a dependency of trainledger

from trainledger.data import ByteTokenizer, load_tokenizer, open_tokens, read_header, run_tokenizer, tokenize_file
from trainledger.data.bpe import bytes_to_unicode, train_bpe
from trainledger.errors import TrainledgerError



@pytest.fixture(scope="module")
def corpus_text() -> str:
    """~300 KB of the standard-library corpus train uses by default (the first files in sorted order)."""
    from trainledger.train.corpus import stdlib_files
    return "".join(p.read_bytes().decode("utf-8", errors="replace") for p in stdlib_files(300_000))


@pytest.fixture(scope="module")
def bpe(corpus_text):
    return train_bpe([corpus_text[i:i + 20_000] for i in range(0, len(corpus_text), 20_000)], 2048)


@pytest.fixture(scope="module")
def library_json(tmp_path_factory, corpus_text):
    """A tokenizer.json written by the library itself (its ByteLevelBPETokenizer, with a prefix space and a
    post-processor): built by other code than trainledger's train_bpe."""
    from tokenizers.implementations import ByteLevelBPETokenizer
    tokenizer = ByteLevelBPETokenizer(add_prefix_space=False)
    tokenizer.train_from_iterator([corpus_text], vocab_size=3000, special_tokens=["<|endoftext|>", "<pad>"],
                                  show_progress=False)
    path = tmp_path_factory.mktemp("lib") / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def test_trained_bpe_round_trips_the_corpus_and_has_the_asked_vocabulary(bpe, corpus_text):
    ids = bpe.encode(corpus_text)
    assert bpe.vocab_size == 2048 and bpe.eot_id == 0 and ids.dtype == np.uint16
    assert bpe.decode(ids) == corpus_text
    assert len(ids) < len(corpus_text.encode()) / 2.5       # a real BPE: well under one token per byte
    assert bpe.decode(bpe.encode("x<|endoftext|>y")) == "x<|endoftext|>y"   # special tokens kept by decode


def test_library_tokenizer_json_round_trips_and_matches_the_library(library_json, corpus_text):
    ours = load_tokenizer(library_json)
    theirs = tokenizers.Tokenizer.from_file(str(library_json))
    assert ours.vocab_size == theirs.get_vocab_size() == 3000
    np.testing.assert_array_equal(ours.encode(corpus_text), theirs.encode(corpus_text).ids)
    assert ours.decode(ours.encode(corpus_text)) == corpus_text
    assert ours.name == f"{library_json.parent.name}/tokenizer.json"


@pytest.mark.parametrize("chunk_bytes", [1 << 24, 40_000, 777])
def test_token_file_equals_the_library_encode_of_the_whole_text(tmp_path, bpe, corpus_text, chunk_bytes):
    """Streaming in chunks and pieces, encoded in parallel, gives the ids of one encode of the whole text."""
    (tmp_path / "in.txt").write_text(corpus_text, encoding="utf-8")
    bpe.save(tmp_path / "tokenizer.json")
    tokenizer = load_tokenizer(tmp_path / "tokenizer.json")
    result = tokenize_file(tmp_path / "in.txt", tmp_path / "out.tokens", tokenizer=tokenizer, chunk_bytes=chunk_bytes,
                           progress=False)
    expected = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json")).encode(corpus_text).ids
    tokens = open_tokens(tmp_path / "out.tokens")
    assert len(tokens) == len(expected) == result["n_tokens"]
    np.testing.assert_array_equal(tokens, expected)
    header = read_header(tmp_path / "out.tokens")
    assert (header["vocab_size"], header["tokenizer_sha256"], header["dtype"]) == (2048, bpe.sha256, "uint16")
    assert result["warnings"] == []


def test_identity_is_the_canonical_json_hash(tmp_path, bpe):
    bpe.save(tmp_path / "a" / "tokenizer.json")
    again = load_tokenizer(tmp_path / "a" / "tokenizer.json")
    assert again.sha256 == bpe.sha256 and len(again.sha256) == 64
    other = train_bpe(["completely different text " * 50], 300)
    assert other.sha256 != bpe.sha256
    assert load_tokenizer("bytes").sha256 == ByteTokenizer().sha256 != bpe.sha256


def test_run_tokenizer_finds_the_recorded_copy_and_checks_its_hash(tmp_path, bpe):
    assert isinstance(run_tokenizer(tmp_path), ByteTokenizer)                  # nothing recorded: bytes
    bpe.save(tmp_path / "tokenizer.json")
    assert run_tokenizer(tmp_path).sha256 == bpe.sha256
    config = {"out_dir": str(tmp_path), "tokenizer_name": "bpe", "tokenizer_sha256": bpe.sha256}
    assert run_tokenizer(config).name == "bpe"
    with pytest.raises(TrainledgerError, match="not the tokenizer the run trained with"):
        run_tokenizer({**config, "tokenizer_sha256": "0" * 64})
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(TrainledgerError, match="is missing"):
        run_tokenizer(config)


def _rank_file(bpe, path):
    """A .tiktoken rank file holding `bpe`'s merges: base64 of each token's bytes and its rank (id − 1)."""
    to_byte = {char: byte for byte, char in bytes_to_unicode().items()}
    vocab = bpe.backend.get_vocab(with_added_tokens=False)
    ranks = {bytes(to_byte[c] for c in token): i - 1 for token, i in vocab.items() if token != "<|endoftext|>"}
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for t, r in sorted(ranks.items(), key=lambda x: x[1])))
    return ranks


# tiktoken 0.14's tiktoken_ext/openai_public.py patterns (its own, newer spelling of the same expressions)
R50K = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
CL100K = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""


@pytest.mark.parametrize("name, pattern, eot", [("r50k_base", R50K, 50256), ("cl100k_base", CL100K, 100257)])
def test_tiktoken_ranks_encode_as_tiktoken_does(tmp_path, bpe, corpus_text, name, pattern, eot):
    """A rank file named like a published one takes that one's pre-tokenizer pattern and special tokens; the ids
    equal tiktoken's own Encoding of the same ranks (an independent implementation)."""
    ranks = _rank_file(bpe, tmp_path / f"{name}.tiktoken")
    ours = load_tokenizer(tmp_path / f"{name}.tiktoken")
    reference = tiktoken.Encoding(name, pat_str=pattern, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": eot})
    sample = corpus_text + "\n  Ünïcödé 数字 12345 don't  \r\n\n\tend"
    np.testing.assert_array_equal(ours.encode(sample), reference.encode_ordinary(sample))
    assert ours.decode(ours.encode(sample)) == sample
    assert ours.eot_id == eot and ours.vocab_size >= eot + 1


def test_tiktoken_file_with_another_name_gets_an_end_of_text_after_its_ranks(tmp_path, bpe):
    ranks = _rank_file(bpe, tmp_path / "mine.tiktoken")
    tokenizer = load_tokenizer(tmp_path / "mine.tiktoken")
    assert tokenizer.vocab_size == len(ranks) + 1 and tokenizer.eot_id == len(ranks)


def test_a_tokenizer_that_does_not_split_after_newlines_is_warned_about(tmp_path, corpus_text):
    from tokenizers.implementations import SentencePieceBPETokenizer
    sp = SentencePieceBPETokenizer()
    sp.train_from_iterator([corpus_text[:50_000]], vocab_size=500, show_progress=False)
    sp.save(str(tmp_path / "sp.json"))
    (tmp_path / "in.txt").write_text(corpus_text[:20_000])
    result = tokenize_file(tmp_path / "in.txt", tmp_path / "o.tokens", tokenizer=tmp_path / "sp.json", progress=False)
    assert len(result["warnings"]) == 1 and "ids at the cuts may differ" in result["warnings"][0]


def test_dtype_too_small_for_the_vocabulary_is_refused(tmp_path, bpe):
    (tmp_path / "in.txt").write_text("hello world\n")
    with pytest.raises(TrainledgerError, match="uint8 holds ids up to 255"):
        tokenize_file(tmp_path / "in.txt", tmp_path / "o.tokens", dtype="uint8", tokenizer=bpe, progress=False)
    assert not (tmp_path / "o.tokens").exists()


def test_invalid_utf8_is_one_line_naming_the_offset(tmp_path, bpe):
    (tmp_path / "in.txt").write_bytes(b"hello \xff world")
    with pytest.raises(TrainledgerError, match="not UTF-8 text .*offset 6"):
        tokenize_file(tmp_path / "in.txt", tmp_path / "o.tokens", tokenizer=bpe, progress=False)


def _put(path, content):
    """Writes `content` (str or bytes) to `path`; the path."""
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return path


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("make, message", [
    (lambda d: d, "is a directory"),
    (lambda d: _put(d / "tokenizer.json", ""), "is empty"),
    (lambda d: _put(d / "tokenizer.json", '{"model": {"type": "BPE", "vocab": [1, 2]}'),
     "not a valid tokenizer.json"),
    (lambda d: _put(d / "tokenizer.json", pickle.dumps(_Boom())), "not a tokenizer.json"),
    (lambda d: _put(d / "tokenizer.json", "[1, 2, 3]"), "JSON object"),
    (lambda d: _put(d / "x.tiktoken", "not base64 at all\n"), "not a .tiktoken rank file"),
    (lambda d: _put(d / "x.tiktoken", "YQ== 0\n"), "all 256 single bytes"),
    (lambda d: _put(d / "vocab.txt", "a\n"), "is none of them"),
    (lambda d: d / "missing.json", "does not exist"),
    (lambda d: os.mkfifo(d / "fifo.json") or d / "fifo.json", "not a regular file"),
    (lambda d: "/dev/zero", "not a regular file"),
], ids=["directory", "empty", "corrupt-json", "pickle", "json-list", "bad-tiktoken", "few-ranks", "other-file",
        "missing", "fifo", "dev-zero"])
def test_bad_tokenizer_files_are_one_line_no_hang_nothing_run(tmp_path, monkeypatch, make, message):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TrainledgerError, match=message) as caught:
        load_tokenizer(make(tmp_path))
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "PWNED").exists()


def test_tokenize_cli_bad_tokenizer_exits_2_in_one_line(tmp_path):
    import subprocess
    (tmp_path / "in.txt").write_text("hello\n")
    os.mkfifo(tmp_path / "tok.json")
    result = subprocess.run([sys.executable, "-m", "trainledger.cli.main", "tokenize", str(tmp_path / "in.txt"),
                             str(tmp_path / "o.tokens"), "--tokenizer", str(tmp_path / "tok.json")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
