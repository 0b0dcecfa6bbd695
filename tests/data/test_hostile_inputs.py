"""Issue 31, item 9, tokenizers and data: a tokenizer.json id of 3,000,000,000 aborted the tokenizers library
(exit 134, an 8 GB allocation); a .tiktoken rank >= 2^32 exited 1; one 600 KB token took 71 s (the BPE's cost
grows faster than a pre-token's length); invalid UTF-8 in a Parquet/Arrow string column and a lone surrogate in
JSONL exited 1; one 500 MB JSONL document reached the tokenizer whole (23.5 GB) while the same text as --text is
chunked. Each is now one line and exit 2, or bounded by the code path shown here.

References: the tokenizer's own encode of the whole text (ids equal where no cut is forced), the lengths of
the strings the tokenizer is handed (a spy), the rows written by pyarrow.
"""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from trainledger.cli import main as cli_main
from trainledger.data import encode, limits
from trainledger.data.bpe import train_bpe
from trainledger.data.tokenizer import load_tokenizer
from trainledger.data.tokens import open_tokens as read_tokens
from trainledger.errors import TrainledgerError

CORPUS = ["It was the best of times, it was the worst of times.\nThe quick brown fox jumps over the lazy dog.\n" * 40]


@pytest.fixture(scope="module")
def bpe():
    return train_bpe(CORPUS, 400)


class Spy:
    """The tokenizer, recording every string it is handed to encode and the characters of each batch."""

    def __init__(self, tokenizer):
        self.inner, self.seen, self.batch_chars = tokenizer, [], []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode_batch(self, texts):
        self.seen += texts
        self.batch_chars.append(sum(map(len, texts)))
        return self.inner.encode_batch(texts)


def run(argv, capsys):
    code = cli_main.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.err.strip().splitlines()


def test_a_tokenizer_json_with_a_huge_id_is_one_line(bpe, tmp_path, capsys):
    good = tmp_path / "tokenizer.json"
    bpe.save(good)
    config = json.loads(good.read_text())
    token = next(iter(config["model"]["vocab"]))
    for bad_id in (3_000_000_000, limits.MAX_VOCAB, -1):
        config["model"]["vocab"][token] = bad_id
        bad = tmp_path / f"bad{bad_id}" / "tokenizer.json"
        bad.parent.mkdir()
        bad.write_text(json.dumps(config))
        code, err = run(["tokenize", corpus_file(tmp_path), tmp_path / "out.tokens", "--tokenizer", bad], capsys)
        assert code == 2 and len(err) == 1 and f"has id {bad_id}" in err[0] and "--tokenizer" in err[0], err
    assert load_tokenizer(good).vocab_size == bpe.vocab_size                    # the untouched file loads


def test_a_tiktoken_rank_beyond_the_vocabulary_bound_is_one_line(tmp_path):
    lines = [f"{base64.b64encode(bytes([b])).decode()} {b}" for b in range(256)]
    path = tmp_path / "ranks.tiktoken"
    path.write_text("\n".join(lines))
    assert load_tokenizer(path).vocab_size >= 256
    for rank in (2**32, limits.MAX_VOCAB):
        path.write_text("\n".join(lines + [f"{base64.b64encode(b'ab').decode()} {rank}"]))
        with pytest.raises(TrainledgerError, match=f"line 257 has rank {rank}"):
            load_tokenizer(path)


def test_bound_runs_cuts_only_runs_longer_than_the_bound():
    assert limits.bound_runs(["short words only " * 100], max_run=8) == (["short words only " * 100], 0)
    pieces, cuts = limits.bound_runs(["ab " + "x" * 20 + " cd"], max_run=8)
    assert pieces == ["ab " + "x" * 8, "x" * 8, "x" * 4 + " cd"] and cuts == 2
    assert "".join(limits.bound_runs(["y" * 10_001 + "\n" + "z" * 3], max_run=4096)[0]) == "y" * 10_001 + "\nzzz"
    for offset in range(12):      # a run one longer than the bound is found wherever it starts (the window pre-check)
        for length, expected in ((8, 0), (9, 1)):
            piece = "a " * offset + "x" * length + " b c d e f"
            assert limits.bound_runs([piece], max_run=8)[1] == expected, (offset, length)


def test_a_long_token_reaches_the_bpe_in_bounded_runs(bpe, tmp_path):
    """The 600 KB token, scaled down: a 50,000-character run is handed over in runs of at most MAX_RUN_CHARS."""
    text = tmp_path / "long.txt"
    text.write_text("before it\n" + "q" * 50_000 + "\nafter it\n")
    spy = Spy(bpe)
    result = encode.encode_text_file(text, tmp_path / "long.tokens", spy, "uint16", 1 << 24, False)
    assert max(len(s) for s in spy.seen) <= limits.MAX_RUN_CHARS + len("before it\n")
    assert bpe.decode(read_tokens(tmp_path / "long.tokens")) == text.read_text()   # nothing lost at the cuts
    assert any("without whitespace" in w for w in result["warnings"])


def test_one_huge_dataset_document_is_chunked_like_text(bpe, tmp_path):
    """One JSONL document of ~400K characters is handed over in pieces of about PIECE_CHARS, over several
    batches of at most about chunk_bytes characters, as --text is, and (GPT-2-style pre-tokenizer: cuts after
    newlines never split a pre-token) gives the ids of one encode."""
    document = "It was the best of times.\nIt was the worst of times.\n" * 8000
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"text": document}) + "\n" + json.dumps({"text": "short"}) + "\n")
    spy, batch_chars = Spy(bpe), 100_000       # memory is the encodings of one batch: a batch is bounded
    result = encode.encode_documents(path, tmp_path / "docs.tokens", spy, "uint16", batch_chars, False)
    assert max(len(s) for s in spy.seen) < 2 * encode.PIECE_CHARS < len(document)
    assert len(spy.batch_chars) > 2 and max(spy.batch_chars) < batch_chars + 2 * encode.PIECE_CHARS
    eot = np.asarray([] if bpe.eot_id is None else [bpe.eot_id])
    separator = eot if eot.size else bpe.encode(encode.DOCUMENT_SEPARATOR)
    whole = np.concatenate([bpe.encode(document), separator, bpe.encode("short"), separator])
    assert result["n_documents"] == 2 and np.array_equal(read_tokens(tmp_path / "docs.tokens"), whole)


def test_invalid_utf8_in_a_columnar_string_column_is_one_line(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.feather as feather
    import pyarrow.parquet as pq
    column = pa.array([b"fine", b"also fine", b"bad \xff\xfe"], type=pa.binary()).view(pa.string())  # unvalidated
    table = pa.table({"text": column})
    for path, write in ((tmp_path / "d.parquet", pq.write_table), (tmp_path / "d.arrow", feather.write_feather)):
        write(table, path)
        code, err = run(["tokenize", path, tmp_path / "out.tokens"], capsys)
        assert code == 2 and err == [f"error: INPUT {path}: row 2 of column 'text' is not valid UTF-8 text; fix or "
                                     "drop that row"]


def test_a_lone_surrogate_in_jsonl_is_one_line(tmp_path, capsys):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "fine"}\n{"text": "a\\ud800b"}\n')
    code, err = run(["tokenize", path, tmp_path / "out.tokens"], capsys)
    assert code == 2 and len(err) == 1 and "line 2" in err[0] and "lone surrogate (U+D800" in err[0]
    assert not (tmp_path / "out.tokens").exists()


def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(CORPUS[0])
    return path


def test_tokenize_never_replaces_an_existing_file_that_is_no_token_file(tmp_path, capsys):
    """Outputs that are something else: the user's text given as OUTPUT is left as it was; a token file (ours,
    from an earlier tokenize) is replaced as before."""
    source, precious = corpus_file(tmp_path), tmp_path / "precious.txt"
    precious.write_text("my notes\n")
    code, err = run(["tokenize", source, precious], capsys)
    assert code == 2 and len(err) == 1 and "exists and is not a token file" in err[0]
    assert precious.read_text() == "my notes\n"
    out = tmp_path / "x.tokens"
    assert run(["tokenize", source, out], capsys)[0] == 0
    assert run(["tokenize", source, out], capsys)[0] == 0 and len(read_tokens(out)) == len(CORPUS[0])
