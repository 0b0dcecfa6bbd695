"""Datasets: the text column of .jsonl, .parquet and Arrow files, streamed, tokenized with an end-of-text between
documents; every bad input one line naming the flag."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from trainledger.data import ByteTokenizer, open_tokens, read_header, tokenize_file
from trainledger.data.bpe import train_bpe
from trainledger.data.datasets import iter_documents
from trainledger.errors import TrainledgerError

import pyarrow as pa                    # a dependency of trainledger
import pyarrow.feather as feather
import pyarrow.parquet as pq

DOCS = ["The first document.\nIt has two lines.", "Zweites Dokument — ünïcödé 数字", "", "x" * 5000, "last one"]


def write_all(directory):
    """The same documents as .jsonl, .parquet, Arrow IPC file (.arrow), Feather 2 and an Arrow stream."""
    paths = {}
    paths["jsonl"] = directory / "d.jsonl"
    paths["jsonl"].write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(DOCS)) + "\n")
    table = pa.table({"id": list(range(len(DOCS))), "text": DOCS})
    paths["parquet"] = directory / "d.parquet"
    pq.write_table(table, paths["parquet"], row_group_size=2)          # several row groups, read batch by batch
    paths["arrow"] = directory / "d.arrow"
    with pa.OSFile(str(paths["arrow"]), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=2):
            writer.write_batch(batch)
    paths["feather"] = directory / "d.feather"
    feather.write_feather(table, paths["feather"])
    paths["stream"] = directory / "d.ipc"                               # what Hugging Face datasets saves
    with pa.OSFile(str(paths["stream"]), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return paths


@pytest.mark.parametrize("kind", ["jsonl", "parquet", "arrow", "feather", "stream"])
def test_every_format_yields_the_documents_in_order(tmp_path, kind):
    path = write_all(tmp_path)[kind]
    assert list(iter_documents(path, "text")) == DOCS


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_token_file_is_each_document_then_end_of_text(tmp_path, kind):
    path = write_all(tmp_path)[kind]
    bpe = train_bpe(DOCS * 20, 300)
    result = tokenize_file(path, tmp_path / "d.tokens", tokenizer=bpe, progress=False, chunk_bytes=100)
    expected = np.concatenate([np.append(bpe.encode(d), bpe.eot_id) for d in DOCS])
    np.testing.assert_array_equal(open_tokens(tmp_path / "d.tokens"), expected)
    assert result["n_documents"] == len(DOCS) and read_header(tmp_path / "d.tokens")["vocab_size"] == bpe.vocab_size


def test_bytes_tokenizer_separates_documents_with_a_blank_line(tmp_path):
    path = write_all(tmp_path)["parquet"]
    tokenize_file(path, tmp_path / "d.tokens", tokenizer=ByteTokenizer(), progress=False)
    assert bytes(np.asarray(open_tokens(tmp_path / "d.tokens"), dtype=np.uint8)) == "".join(
        d + "\n\n" for d in DOCS).encode()


def _bad_jsonl(directory, lines):
    path = directory / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("make, column, message", [
    (lambda d: write_all(d)["parquet"], "body", "has no column 'body' (--text-column); its columns: id, text"),
    (lambda d: write_all(d)["arrow"], "body", "its columns: id, text"),
    (lambda d: write_all(d)["parquet"], "id", "column 'id' holds int64 values, not strings"),
    (lambda d: _bad_jsonl(d, ['{"text": "a"}', '{"body": "b"}']), "text", "line 2 has no field 'text'"),
    (lambda d: _bad_jsonl(d, ['{"text": 5}']), "text", "line 1: 'text' is a JSON int, not a string"),
    (lambda d: _bad_jsonl(d, ['{"text": null}']), "text", "'text' is null"),
    (lambda d: _bad_jsonl(d, ['["a"]']), "text", "line 1 is a JSON list"),
    (lambda d: _bad_jsonl(d, ['{"text": "a"', "garbage"]), "text", "not a JSON Lines dataset: line 1"),
    (lambda d: (d / "x.parquet").write_text("not parquet") and d / "x.parquet", "text", "not a Parquet file"),
    (lambda d: (d / "x.arrow").write_bytes(b"\0" * 64) and d / "x.arrow", "text", "not an Arrow IPC file"),
    (lambda d: (d / "x.parquet").write_bytes(b"PAR1" + b"\0" * 20 + b"PAR1") and d / "x.parquet", "text",
     "not a readable parquet file"),
    (lambda d: (d / "e.jsonl").write_text("") == 0 and d / "e.jsonl", "text", "is empty"),
    (lambda d: (d / "blank.jsonl").write_text("\n\n") and d / "blank.jsonl", "text", "holds no documents"),
    (lambda d: d, "text", "is a directory"),
    (lambda d: os.mkfifo(d / "f.jsonl") or d / "f.jsonl", "text", "not a regular file"),
], ids=["missing-column", "missing-column-arrow", "int-column", "jsonl-missing-field", "jsonl-int", "jsonl-null",
        "jsonl-list", "jsonl-garbage", "fake-parquet", "fake-arrow", "broken-parquet", "empty", "blank-lines",
        "directory", "fifo"])
@pytest.mark.timeout(60)
def test_bad_datasets_are_one_line(tmp_path, make, column, message):
    path = make(tmp_path)
    with pytest.raises(TrainledgerError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        tokenize_file(path, tmp_path / "o.tokens", tokenizer=ByteTokenizer(), text_column=column, progress=False)
    assert "\n" not in str(caught.value)
    assert not (tmp_path / "o.tokens").exists()


def test_null_in_a_parquet_column_names_its_row(tmp_path):
    pq.write_table(pa.table({"text": ["a", "b", None]}), tmp_path / "n.parquet")
    with pytest.raises(TrainledgerError, match="row 2 of column 'text' is null"):
        list(iter_documents(tmp_path / "n.parquet"))


def test_all_empty_documents_are_refused(tmp_path):
    pq.write_table(pa.table({"text": ["", ""]}), tmp_path / "e.parquet")
    with pytest.raises(TrainledgerError, match="all 2 documents in column 'text' are empty"):
        tokenize_file(tmp_path / "e.parquet", tmp_path / "o.tokens", tokenizer=train_bpe(["ab ab"] * 10, 260),
                      progress=False)
