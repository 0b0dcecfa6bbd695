#!/usr/bin/env bash
# Set up trainledger on a fresh machine, in a virtualenv at .venv:
#   bash scripts/setup.sh          the main job: the CPU build of PyTorch and trainledger itself (editable)
#   bash scripts/setup.sh --test   also the test and web extras (pytest, transformers, fastapi, playwright)
#                                  and Debian's Chromium (browser tests) and shellcheck (launch scripts)
# Idempotent: a second run only checks. Needs python3 >= 3.10; Chromium and shellcheck need apt-get and root (or sudo).
# Afterwards `source .venv/bin/activate` puts `trainledger` on PATH (or call .venv/bin/trainledger).
set -euo pipefail
cd "$(dirname "$0")/.."

TEST=0
for arg in "$@"; do
  case "$arg" in
    --test) TEST=1 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown option '$arg' (use --test to add the test tooling)" >&2; exit 2 ;;
  esac
done

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
if ! .venv/bin/python -c "import trainledger, numpy, rich, einops, jaxtyping, matplotlib, tokenizers, pyarrow, ijson, safetensors" 2>/dev/null \
   || [ ! -x .venv/bin/trainledger ]; then
  echo "setup: installing trainledger"
  pip install --quiet -e .
fi

if [ "$TEST" = 1 ]; then
  if ! .venv/bin/python -c "import pytest, pytest_timeout, hypothesis, transformers, fastapi, uvicorn, httpx, playwright, tiktoken, torchao, peft, bitsandbytes" 2>/dev/null; then
    echo "setup: installing the test and web tooling (trainledger[test,web])"
    pip install --quiet -e ".[test,web]"
  fi
  if [ ! -x /usr/bin/chromium ] && [ "${TRAINLEDGER_NO_BROWSER:-0}" != 1 ]; then
    bash scripts/install_chromium.sh || echo "setup: Chromium not installed; the browser tests will be skipped (see scripts/install_chromium.sh)"
  fi
  if ! command -v shellcheck >/dev/null 2>&1; then     # lints the launch scripts of `layout --launch`
    bash scripts/install_shellcheck.sh || echo "setup: shellcheck not installed; its test will be skipped (see scripts/install_shellcheck.sh)"
  fi
fi
echo "setup: done ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)')$([ "$TEST" = 1 ] && echo ', with test tooling'));" \
     "run 'source .venv/bin/activate' to put trainledger on PATH"
