"""The measure tests' helpers: pytest runs with --import-mode=importlib, which leaves sys.path alone, so put this
folder on it (as tests/train/conftest.py does) to make profile_helpers importable."""

import sys
from pathlib import Path

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))
