#!/usr/bin/env bash
# Installs Debian's Chromium for the browser tests of the web page (pytest -m browser).
# The tests drive /usr/bin/chromium through Playwright; never run `playwright install` (it downloads
# its own browser build from a CDN). Idempotent: does nothing when /usr/bin/chromium is present.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1; then
    SUDO="sudo -n"  # never prompt: CI has no standard input
else
    echo "error: need root or sudo to install chromium with apt-get" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update
$SUDO apt-get install -y --no-install-recommends chromium
/usr/bin/chromium --version || true
