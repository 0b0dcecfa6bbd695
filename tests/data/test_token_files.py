"""Token files: header round trip, .npy and raw files, clear errors, and a memmap of a file larger than memory."""

import os
import struct
import tracemalloc

import numpy as np
import pytest

from trainledger.data import (HEADER_BYTES, MAGIC, TokenWriter, encode_header, gather_batch, get_batch, open_tokens,
                              read_header, write_tokens)
from trainledger.errors import TrainledgerError


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "int32", "uint32", "int64"])
def test_header_round_trip(tmp_path, dtype):
    tokens = np.arange(1000) % np.iinfo(dtype).max
    path = write_tokens(tmp_path / "a.tokens", tokens, dtype=dtype)
    assert read_header(path) == {"version": 1, "header_bytes": HEADER_BYTES, "dtype": dtype, "n_tokens": 1000,
                                 "vocab_size": None, "tokenizer_sha256": None, "tokenizer_name": None}
    assert path.stat().st_size == HEADER_BYTES + 1000 * np.dtype(dtype).itemsize
    data = open_tokens(path)
    assert isinstance(data, np.memmap) and data.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(data, tokens)


def test_streaming_writer_fixes_the_count(tmp_path):
    with TokenWriter(tmp_path / "s.tokens", "uint16") as writer:
        writer.write(np.arange(10))
        writer.write(np.arange(10, 25))
    assert read_header(tmp_path / "s.tokens")["n_tokens"] == 25
    np.testing.assert_array_equal(open_tokens(tmp_path / "s.tokens"), np.arange(25))


def test_npy_and_raw_files(tmp_path):
    np.save(tmp_path / "a.npy", np.arange(50, dtype=np.int32))
    np.testing.assert_array_equal(open_tokens(tmp_path / "a.npy"), np.arange(50))
    np.arange(10, dtype=np.int32).tofile(tmp_path / "data.bin")  # the lecture's headerless file
    np.testing.assert_array_equal(open_tokens(tmp_path / "data.bin", dtype="int32"), np.arange(10))


def _corrupt(path, **fields):
    values = dict(magic=MAGIC, version=1, header=HEADER_BYTES, dtype=b"uint16", n=10) | fields
    raw = struct.pack("<8sHH16sQ", values["magic"], values["version"], values["header"], values["dtype"], values["n"])
    path.write_bytes(raw.ljust(HEADER_BYTES, b"\0") + b"\0" * 20)
    return path


@pytest.mark.parametrize("make, match", [
    (lambda p: p, "does not exist"),
    (lambda p: (p.write_bytes(b""), p)[1], "is empty"),
    (lambda p: _corrupt(p, n=11), "truncated"),
    (lambda p: _corrupt(p, dtype=b"float32"), "corrupt header, dtype 'float32'"),
    (lambda p: _corrupt(p, version=9), "version 9"),
    (lambda p: (p.write_bytes(b"hello world"), p)[1], "pass its dtype"),
    (lambda p: (np.save(p.with_suffix(".npy"), np.zeros((2, 2), np.int32)), p.with_suffix(".npy"))[1], "1-D"),
], ids=["missing", "empty", "truncated", "bad-dtype-name", "bad-version", "no-header", "npy-2d"])
def test_clear_errors(tmp_path, make, match):
    path = make(tmp_path / "bad.tokens")
    with pytest.raises(TrainledgerError, match=match):
        open_tokens(path)


def test_wrong_dtype_requests_raise(tmp_path):
    path = write_tokens(tmp_path / "a.tokens", np.arange(10, dtype=np.uint16))
    with pytest.raises(TrainledgerError, match="holds uint16 tokens, not int32"):
        open_tokens(path, dtype="int32")
    (tmp_path / "raw.bin").write_bytes(b"\0" * 7)
    with pytest.raises(TrainledgerError, match="wrong dtype"):
        open_tokens(tmp_path / "raw.bin", dtype="int32")
    with pytest.raises(TrainledgerError, match="not supported"):
        write_tokens(tmp_path / "f.tokens", np.arange(3), dtype="float32")
    with pytest.raises(TrainledgerError, match="does not fit"):
        write_tokens(tmp_path / "o.tokens", np.array([70_000]), dtype="uint16")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="RSS is read from /proc (Linux)")
def test_memmap_of_a_file_larger_than_memory_budget(tmp_path):
    """A 4 GB sparse token file (2e9 uint16 tokens, all but the last 257 never written) is sampled while memory
    stays ~MBs, and a window at its very end (offsets past 2^32 bytes) is read back aligned."""
    n_tokens = 2_000_000_000
    path = tmp_path / "huge.tokens"
    tail = np.arange(1, 258, dtype=np.uint16)   # the last 257 tokens are 1..257, the rest is a hole of zeros
    with open(path, "wb") as f:
        f.write(encode_header("uint16", n_tokens))
        f.truncate(HEADER_BYTES + 2 * n_tokens)  # sparse: no data blocks are allocated
        f.seek(HEADER_BYTES + 2 * (n_tokens - len(tail)))
        f.write(tail.tobytes())
    file_bytes = path.stat().st_size
    assert file_bytes > 4e9
    rss_before = _rss_bytes()
    tracemalloc.start()
    data = open_tokens(path)
    for seed in range(20):
        x, y = get_batch(data, batch_size=16, context_length=256, generator=np.random.default_rng(seed))
        assert x.shape == (16, 256) and int(x.sum()) == 0
    _, peak_bytes = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_growth = _rss_bytes() - rss_before
    assert len(data) == n_tokens
    # the last valid start, n − T − 1, byte offset ~4e9 > 2^32: x and y are the tail, shifted by one
    x, y = gather_batch(data, np.array([n_tokens - 257, n_tokens - 258]), 256)
    assert x[0].tolist() == list(range(1, 257)) and y[0].tolist() == list(range(2, 258))
    assert x[1].tolist() == [0] + list(range(1, 256)) and y[1].tolist() == list(range(1, 257))
    assert peak_bytes < 1e6          # Python/NumPy allocations: one batch, not the file
    assert rss_growth < 100e6        # resident pages: the few touched pages, not 4 GB
    assert rss_growth < file_bytes / 40


def test_a_file_with_the_old_64_byte_header_still_reads(tmp_path):
    """Files written before the tokenizer fields existed: version 1, header length 64, tokens from byte 64."""
    tokens = np.arange(300, dtype=np.uint16)
    header = struct.pack("<8sHH16sQ", MAGIC, 1, 64, b"uint16", len(tokens))
    path = tmp_path / "old.tokens"
    path.write_bytes(header + b"\0" * (64 - len(header)) + tokens.tobytes())
    assert read_header(path) == {"version": 1, "header_bytes": 64, "dtype": "uint16", "n_tokens": 300,
                                 "vocab_size": None, "tokenizer_sha256": None, "tokenizer_name": None}
    np.testing.assert_array_equal(open_tokens(path), tokens)


def test_the_new_header_keeps_the_old_fields_in_place_and_records_the_tokenizer(tmp_path):
    from trainledger.data import ByteTokenizer
    path = write_tokens(tmp_path / "n.tokens", np.arange(256), dtype="uint8", tokenizer=ByteTokenizer())
    raw = path.read_bytes()
    magic, version, header_bytes, dtype, n_tokens = struct.unpack("<8sHH16sQ", raw[:36])   # where they always were
    assert (magic, version, header_bytes, dtype.rstrip(b"\0"), n_tokens) == (MAGIC, 1, 128, b"uint8", 256)
    assert raw[header_bytes:] == bytes(range(256))                                          # tokens at the header length
    header = read_header(path)
    assert (header["vocab_size"], header["tokenizer_name"], header["tokenizer_sha256"]) == (
        256, "bytes", ByteTokenizer.sha256)


def test_ids_outside_the_recorded_vocabulary_are_refused(tmp_path):
    from trainledger.data import ByteTokenizer
    with pytest.raises(TrainledgerError, match="outside the vocabulary"):
        write_tokens(tmp_path / "x.tokens", np.array([1, 300]), dtype="uint16", tokenizer=ByteTokenizer())
    with TokenWriter(tmp_path / "y.tokens", "uint16", ByteTokenizer()) as writer:
        with pytest.raises(TrainledgerError, match="vocabulary 256"):
            writer.write(np.array([256]))
