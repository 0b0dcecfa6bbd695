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


def forget_parsers() -> None:
    """Drop the parsers built once per process (the CLI's and the web API's), so the next call builds them from the
    table as it is now."""
    from trainledger.web import api
    cli._cached_parser.cache_clear()
    api.command_parsers.cache_clear()


@pytest.fixture
def my_knob(monkeypatch):
    """specs/run.py as if one field had been added to Kernels, and nowhere else: `my_knob`, flag --my-knob, a count
    on `step` (default 1) labelled "My knob" for the web form. Yields the new group; put back afterwards."""
    import dataclasses

    from trainledger.specs import run as run_mod
    from trainledger.specs.run import Kernels, setting

    knob = dataclasses.field(default=1, metadata=setting("--my-knob", "count", "a knob of a later feature (a test's)",
                                                         commands={"step"}, label="My knob"))
    group = dataclasses.make_dataclass("KernelsWithAKnob", [("my_knob", int, knob)], bases=(Kernels,), frozen=True)
    monkeypatch.setitem(run_mod.GROUPS, "kernels", group)
    forget_parsers()
    yield group
    monkeypatch.undo()
    forget_parsers()
