"""Fixture of the train tests: a small token file of real text."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

# pytest runs with --import-mode=importlib, which leaves sys.path alone: make train_helpers importable.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def token_file(tmp_path_factory) -> Path:
    """A byte-token file of 60K tokens of real text: the first 60,000 bytes of this repository's Python sources as
    they were on 2026-12-01, frozen in fixtures/code_corpus.txt. Read live from src/, every edit to an early module
    changed what the trainer tests train on, and the tests that compare losses to 1e-5 across layouts turned out
    data-sensitive: tiny-moe's FSDP + EP run on 4 ranks drifted 5e-4 from one process at step 4 on edited sources
    (most likely a router near-tie that the two reduction orders break differently; not verified)."""
    from trainledger.data import write_tokens
    text = (Path(__file__).resolve().parent / "fixtures" / "code_corpus.txt").read_bytes()
    assert len(text) == 60_000
    path = tmp_path_factory.mktemp("data") / "code.tokens"
    write_tokens(path, np.frombuffer(text, dtype=np.uint8), dtype="uint8")
    return path


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every trainer test runs on one intra-op thread (see tests/conftest.py)."""
