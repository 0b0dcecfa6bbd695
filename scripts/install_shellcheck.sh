#!/usr/bin/env bash
# Installs Debian's shellcheck for the test that lints the launch scripts of `trainledger layout --launch`
# (tests/cli/test_launch_settings.py; skipped with its reason where shellcheck is absent; `setup.sh --test`, which CI
# runs, installs it).
# Idempotent: does nothing when shellcheck is on PATH.
set -euo pipefail

if command -v shellcheck >/dev/null 2>&1; then
    echo "shellcheck already installed: $(shellcheck --version | sed -n 2p)"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"  # never prompt: CI has no standard input
else
    echo "error: need root or sudo to install shellcheck with apt-get" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends shellcheck
shellcheck --version
