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
    """A byte-token file of ~60K tokens of real text (this repository's Python sources)."""
    from trainledger.data import write_tokens
    root = Path(__file__).resolve().parents[2] / "src" / "trainledger"
    text = b"".join(p.read_bytes() for p in sorted(root.rglob("*.py")))[:60_000]
    path = tmp_path_factory.mktemp("data") / "code.tokens"
    write_tokens(path, np.frombuffer(text, dtype=np.uint8), dtype="uint8")
    return path


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every trainer test runs on one intra-op thread (see tests/conftest.py)."""
