"""The web API and the step form come from the one table of the run's settings (specs/run.py, read by
specs/run_table.py), as the CLI's flags do (issue 37): /api/schema carries each run flag's entry of the table, and a
setting added in one place, a field of a group in specs/run.py, is in `step --help`, in /api/schema (with its label,
so on the step form) and in the JSON's `run`, and the web server passes it on.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the web API needs the optional extra trainledger[web]")
from fastapi.testclient import TestClient  # noqa: E402

from trainledger.cli import main as cli  # noqa: E402
from trainledger.cli.common import json_ready  # noqa: E402
from trainledger.cli.run_flags import defaults_of  # noqa: E402
from trainledger.specs import run_table  # noqa: E402
from trainledger.web import api, flags  # noqa: E402
from trainledger.web.app import create_app  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from web_answers import my_knob  # noqa: E402,F401 (a fixture)


@pytest.fixture
def client():
    return TestClient(create_app(), base_url="http://127.0.0.1:8000")


def value_at(run, path):
    for part in path.split("."):
        run = getattr(run, part)
    return run


def test_every_run_flag_of_the_schema_carries_its_entry_of_the_table(client):
    """Each setting a command takes is in its /api/schema flags with the table's path, group, kind, unit, label and
    web hints, and the command's default (the run's, or the command's own: memory's ZeRO 3, fit's reserve 0)."""
    schema = client.get("/api/schema").json()
    for command in schema:
        by_flag = {f["flag"]: f for f in schema[command]["flags"]}
        for s in run_table.for_command(command):
            entry = by_flag[s.flag]
            assert (entry["path"], entry["group"], entry["kind"], entry["unit"], entry["label"], entry["web"]) == \
                (s.path, s.path.rsplit(".", 1)[0], s.kind, s.unit, s.label, s.web), (command, s.flag)
            assert entry["default"] == json.loads(json.dumps(json_ready(value_at(defaults_of(command), s.path))))
        others = {f["flag"] for f in schema[command]["flags"] if "path" in f} - {s.flag for s in
                                                                                 run_table.for_command(command)}
        assert others == ({"--reserve"} if command == "fit" else set()), command   # fit's own --reserve is the run's
    step = {f["param"]: f for f in schema["step"]["flags"]}
    assert step["tp"] == {**step["tp"], "path": "layout.tp", "group": "layout", "kind": "count", "unit": "GPUs",
                          "label": "Tensor-parallel ranks", "default": 1, "web": {"type": "pow2", "min": 0, "max": 3}}
    assert step["dp-replicate"]["group"] == "layout.fsdp" and step["dp-replicate"]["label"] == ""     # not on the form
    assert step["ep-dispatcher"]["group"] == "layout.experts" and step["mtp"]["web"]["placeholder"]
    assert "path" not in step["model"] and "path" not in step["gpu"]
    memory = {f["param"]: f for f in schema["memory"]["flags"]}
    fit = {f["param"]: f for f in schema["fit"]["flags"]}
    assert memory["zero"]["default"] == 3 and fit["reserve"]["default"] == 0.0 and fit["reserve"]["path"] == "levers.reserve"


def test_a_setting_added_in_one_place_is_in_the_help_the_schema_and_the_json(my_knob, client, capsys):
    """One field added to specs/run.py's Kernels (the fixture, and nothing else): `trainledger step --help` lists
    --my-knob, /api/schema's step flags have it with its label (so the step form makes a field of it), the web
    server passes it on, and `step --my-knob 5 --json` answers with run.kernels.my_knob == 5."""
    with pytest.raises(SystemExit) as stop:
        cli.main(["step", "--help"])
    assert stop.value.code == 0
    help_text = capsys.readouterr().out
    assert "--my-knob N" in help_text and "a knob of a later feature" in help_text

    knob = next(f for f in client.get("/api/schema").json()["step"]["flags"] if f["flag"] == "--my-knob")
    assert (knob["label"], knob["path"], knob["group"], knob["kind"], knob["default"]) == \
        ("My knob", "kernels.my_knob", "kernels", "count", 1)
    assert "my-knob" in flags.allowed("step") and "my-knob" not in flags.allowed("memory")

    assert cli.main(["step", "--model", "gpt2", "--num-gpus", "8", "--my-knob", "5", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["run"]["kernels"]["my_knob"] == 5
    argv = api.argv_for("step", [("model", "gpt2"), ("num-gpus", "8"), ("my-knob", "5")])    # the web's road
    assert argv == ["step", "--model=gpt2", "--num-gpus=8", "--my-knob=5"]
    status, body = api.outcome("step", argv)
    assert status == 200 and body["run"]["kernels"]["my_knob"] == 5
    assert body["step_seconds"] == answer["step_seconds"]
    status, body = api.outcome("step", api.argv_for("step", [("model", "gpt2"), ("my-knob", "0")]))
    assert status == 422 and body["param"] == "my-knob" and "--my-knob" in body["error"]
    assert cli.main(["step", "--model", "gpt2", "--my-knob", "0"]) == 2
    assert "--my-knob" in capsys.readouterr().err


def test_the_knob_is_gone_again_after_the_test():
    """The fixture puts the table back: no --my-knob in the parsers or the schema of later tests."""
    assert "--my-knob" not in api.command_parsers()["step"].format_help()
    assert all(f["flag"] != "--my-knob" for f in api.schema()["step"]["flags"])
