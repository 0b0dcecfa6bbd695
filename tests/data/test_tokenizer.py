"""The byte-level tokenizer and streaming tokenize_file."""

import numpy as np
import pytest

from trainledger.data import ByteTokenizer, open_tokens, read_header, tokenize_file
from trainledger.errors import TrainledgerError

TEXT = "Hello, wörld! 你好 — tokens 🙂\n"


def test_encode_is_utf8_bytes_and_decode_inverts_it():
    tokenizer = ByteTokenizer()
    tokens = tokenizer.encode(TEXT)
    assert tokens.dtype == np.uint16
    assert tokens.tolist() == list(TEXT.encode("utf-8"))
    assert len(tokens) > len(TEXT)  # multi-byte characters take several tokens
    assert tokenizer.decode(tokens) == TEXT
    assert ByteTokenizer("uint8").encode("A").dtype == np.uint8


def test_decode_rejects_ids_outside_the_byte_vocabulary():
    with pytest.raises(TrainledgerError, match=r"\[0, 255\]"):
        ByteTokenizer().decode([65, 256])


def test_tokenize_file_streams_chunks_with_the_same_result_as_one_shot(tmp_path):
    text_path = tmp_path / "in.txt"
    text_path.write_text(TEXT * 500, encoding="utf-8")
    # a 7-byte chunk splits multi-byte characters across chunks: byte-level tokens do not care
    result = tokenize_file(text_path, tmp_path / "out.tokens", chunk_bytes=7, progress=False)
    expected = ByteTokenizer().encode(TEXT * 500)
    assert result["n_tokens"] == len(expected) == result["input_bytes"]
    assert result["output_bytes"] == 128 + 2 * len(expected)
    assert read_header(tmp_path / "out.tokens")["n_tokens"] == len(expected)
    np.testing.assert_array_equal(open_tokens(tmp_path / "out.tokens"), expected)
    assert result["seconds"] > 0


def test_tokenize_file_errors(tmp_path):
    with pytest.raises(TrainledgerError, match="does not exist"):
        tokenize_file(tmp_path / "missing.txt", tmp_path / "o.tokens")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(TrainledgerError, match="is empty"):
        tokenize_file(tmp_path / "empty.txt", tmp_path / "o.tokens")
    (tmp_path / "a.txt").write_text("abc")
    with pytest.raises(TrainledgerError, match="output directory"):
        tokenize_file(tmp_path / "a.txt", tmp_path / "no" / "o.tokens")
    with pytest.raises(TrainledgerError, match="must differ"):
        tokenize_file(tmp_path / "a.txt", tmp_path / "a.txt")
    with pytest.raises(TrainledgerError, match=r"is a directory \(INPUT\)"):
        tokenize_file(tmp_path, tmp_path / "o.tokens")
    with pytest.raises(TrainledgerError, match=r"is a directory \(OUTPUT.tokens\)"):
        tokenize_file(tmp_path / "a.txt", tmp_path)
    for chunk_bytes in (0, -1, 0.5):
        with pytest.raises(TrainledgerError, match="--chunk-size"):
            tokenize_file(tmp_path / "a.txt", tmp_path / "o.tokens", chunk_bytes=chunk_bytes)
    assert not (tmp_path / "o.tokens").exists()
