"""Token caches are published once and never replaced; stale ones are deleted only when no process holds them."""

from __future__ import annotations

import os

import numpy as np
import pytest

from trainledger.data import ByteTokenizer, open_tokens, write_tokens
from trainledger.data import cache


@pytest.fixture(autouse=True)
def _release():
    yield
    cache.release_all()


def _writer(values):
    return lambda tmp: write_tokens(tmp, np.asarray(values, dtype=np.uint8), tokenizer=ByteTokenizer())


def test_a_published_cache_is_never_replaced(tmp_path):
    path = cache.cache_path(tmp_path, "book.txt", cache.cache_key(a=1))
    assert cache.build(path, _writer([1, 2, 3]), ByteTokenizer.sha256) is True
    inode = path.stat().st_ino
    # a second build of the same key (another trainer): keeps the first file, whatever it would have written
    assert cache.build(path, _writer([9, 9, 9, 9]), ByteTokenizer.sha256) is False
    assert path.stat().st_ino == inode and list(open_tokens(path)) == [1, 2, 3]
    assert [p.name for p in tmp_path.iterdir()] == [path.name]          # no temporary left behind


def test_two_builders_racing_keep_the_first_published(tmp_path):
    path = cache.cache_path(tmp_path, "x", cache.cache_key(a=2))

    def slow_writer(tmp):           # another process publishes while this one writes
        _writer([7, 7])(tmp)
        cache.build(path, _writer([5, 5, 5]), None)

    assert cache.build(path, slow_writer, None) is False
    assert list(open_tokens(path)) == [5, 5, 5]


def test_a_failed_build_leaves_nothing(tmp_path):
    path = cache.cache_path(tmp_path, "x", cache.cache_key(a=3))

    def failing(tmp):
        tmp.write_bytes(b"partial")
        raise OSError(27, "File too large")

    with pytest.raises(OSError):
        cache.build(path, failing, None)
    assert list(tmp_path.iterdir()) == []


def test_prune_deletes_stale_caches_but_not_held_ones(tmp_path):
    keep, held, stale = (cache.cache_path(tmp_path, "b.txt", cache.cache_key(v=v)) for v in range(3))
    other = cache.cache_path(tmp_path, "other.txt", cache.cache_key(v=0))
    for path in (keep, held, stale, other):
        cache.build(path, _writer([1]), None)
    (tmp_path / "b.txt-notakey.tokens").write_bytes(b"user file")      # not a cache name: left alone
    cache.hold(held)                    # a running trainer maps it
    removed = cache.prune(tmp_path, "b.txt", keep)
    assert removed == [stale]
    assert keep.exists() and held.exists() and other.exists() and (tmp_path / "b.txt-notakey.tokens").exists()


def test_key_follows_the_file_identity(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("abc")
    first = cache.cache_key(source=cache.file_identity(text), tokenizer="x")
    assert cache.cache_key(source=cache.file_identity(text), tokenizer="x") == first
    os.utime(text, ns=(1, 1))                                          # touch: another key
    assert cache.cache_key(source=cache.file_identity(text), tokenizer="x") != first
    assert cache.cache_key(source=cache.file_identity(text), tokenizer="y") != cache.cache_key(
        source=cache.file_identity(text), tokenizer="x")


def test_the_stable_name_follows_the_latest_cache_and_spares_a_reader_of_the_old_one(tmp_path):
    old, new = (cache.cache_path(tmp_path, "book.txt", cache.cache_key(v=v)) for v in range(2))
    cache.build(old, _writer([1, 2, 3]), None)
    stable = cache.alias(old, "book.txt")
    assert stable == tmp_path / "book.txt.tokens" and os.path.samefile(stable, old)
    mapped = open_tokens(stable)                      # a reader maps the file under the stable name
    cache.build(new, _writer([4, 5, 6, 7]), None)
    assert cache.alias(new, "book.txt") == stable and os.path.samefile(stable, new)
    assert list(mapped) == [1, 2, 3] and list(open_tokens(stable)) == [4, 5, 6, 7]
    assert cache.alias(new, "book.txt") == stable     # idempotent, and no temporary left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([old.name, new.name, stable.name])


def test_the_stable_name_moves_to_a_new_key_before_the_old_one_is_pruned(tmp_path):
    old, new = (cache.cache_path(tmp_path, "b.txt", cache.cache_key(v=v)) for v in range(2))
    cache.build(old, _writer([1, 2]), None)
    cache.alias(old, "b.txt")
    cache.build(new, _writer([3, 4, 5]), None)
    assert cache.alias(new, "b.txt") is not None         # the old target still had its second link
    assert cache.prune(tmp_path, "b.txt", new) == [old]
    assert list(open_tokens(tmp_path / "b.txt.tokens")) == [3, 4, 5]


def test_a_file_of_ones_own_at_the_stable_name_is_left_alone(tmp_path):
    """A file with one link at <name>.tokens is no alias of ours (someone put it there, or an older version wrote
    its cache under that name): it is never replaced."""
    path = cache.cache_path(tmp_path, "b.txt", cache.cache_key(v=0))
    cache.build(path, _writer([1, 2]), None)
    mine = tmp_path / "b.txt.tokens"
    write_tokens(mine, np.asarray([9, 9, 9], dtype=np.uint8), tokenizer=ByteTokenizer())
    assert cache.alias(path, "b.txt") is None
    assert list(open_tokens(mine)) == [9, 9, 9]
