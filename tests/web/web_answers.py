"""What the command line answers, in-process, for the web tests to compare the API with."""

from __future__ import annotations

import json

import pytest

from trainledger.cli import main as cli
from trainledger.cli.common import json_ready
from trainledger.errors import TrainledgerError


def cli_json(argv):
    """What `trainledger <argv> --json` prints, parsed (in-process: main.compute + print_json's cleaning)."""
    return json.loads(json.dumps(json_ready(cli.compute(argv))))


def as_served(answer, settings=None):
    """`answer` as the web server shows it: the paths of its private config store and --config-dir hidden
    (web/paths.py: a client sees a config by its file name, never the server's directories)."""
    from trainledger.web import paths
    return paths.hide_paths(answer, paths.server_folders(settings))


def cli_error(argv) -> str:
    """The one-line error `trainledger <argv>` stops with."""
    with pytest.raises(TrainledgerError) as info:
        cli.compute(argv)
    return str(info.value)
