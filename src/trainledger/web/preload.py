"""Imported once by the fork server of heavy requests (web/worker.py), and only there: its import builds the
command line's parser and computes one small answer of each heavy command, so that every worker forked from
the server starts with all of that imported and built.

Measured on the loaded 2-core machine (load average ~9): a `step` answer in a worker forked from a server that
had only imported the API took 0.28 s to build the parser and 0.21 s for the imports inside the command; forked
from a warmed one, 7 ms. `tensor --torch` is not warmed (torch would add ~300 MB to the fork server): it pays
for its import in its worker.
"""

from __future__ import annotations

import contextlib

from trainledger.cli import main as cli
from trainledger.web import api  # noqa: F401  (the module the workers run)

WARM_UP = (
    ["step", "--model=gpt2", "--num-gpus=8", "--global-batch-size=64", "--batch-size=8"],
    ["layout", "--model=gpt2", "--num-gpus=8", "--global-batch-size=64"],
    ["mfu", "--model=gpt2", "--num-gpus=8", "--tokens-per-s=100000"],
)

for _argv in WARM_UP:
    with contextlib.suppress(Exception):          # a warm-up that fails only leaves a worker colder
        cli.compute(_argv)
