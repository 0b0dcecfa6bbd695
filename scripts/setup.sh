#!/usr/bin/env bash
# Set up trainledger on a fresh machine: a virtualenv in .venv with the CPU build of PyTorch,
# trainledger itself (editable) with its test and web extras, and Debian's Chromium for the browser tests.
# Idempotent: a second run only checks. Needs python3 >= 3.10; Chromium needs apt-get and root (or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
pip() { .venv/bin/python -m pip "$@"; }

# The CPU wheel first: a plain `torch` requirement would pull several GB of CUDA packages.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing torch==2.13.0 (CPU build)"
  pip install --quiet torch==2.13.0 || pip install --quiet torch --index-url https://download.pytorch.org/whl/cpu
fi
if ! .venv/bin/python -c "import trainledger, pytest, hypothesis, fastapi, playwright" 2>/dev/null; then
  echo "setup: installing trainledger[test,web]"
  pip install --quiet -e ".[test,web]"
fi

if [ ! -x /usr/bin/chromium ] && [ "${TRAINLEDGER_NO_BROWSER:-0}" != 1 ]; then
  bash scripts/install_chromium.sh || echo "setup: Chromium not installed; the browser tests will be skipped (see scripts/install_chromium.sh)"
fi
echo "setup: done ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
