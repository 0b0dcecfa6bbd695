"""`trainledger serve`: starts, prints its URL, answers /api/health; a taken port and a missing extra are one-line errors."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from trainledger.cli import main as cli
from trainledger.cli import serve
from trainledger.errors import TrainledgerError

EXE = Path(sys.executable).with_name("trainledger")


@pytest.mark.timeout(120)  # readline() below would wait forever for a server that never prints its URL
def test_serve_starts_and_answers():
    pytest.importorskip("uvicorn", reason="trainledger serve needs the optional extra trainledger[web]")
    import httpx

    private_tmp = Path(tempfile.mkdtemp())        # the server's own TMPDIR: its private directory is found there
    process = subprocess.Popen([str(EXE), "serve", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "TMPDIR": str(private_tmp)})
    try:
        line = process.stdout.readline()
        assert line.startswith("trainledger calculators at http://127.0.0.1:"), line
        url = line.split()[3]
        deadline = time.monotonic() + 20
        while True:
            try:
                health = httpx.get(url + "api/health", timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the server never answered"
                time.sleep(0.1)
        assert health.json()["status"] == "ok"
        assert httpx.get(url + "api/plan?num-gpus=2048").json() == cli.compute(["plan", "--num-gpus", "2048"])
        assert "calc-memory" in httpx.get(url).text
        # DNS rebinding: the same socket, asked under another name, refuses
        assert httpx.get(url + "api/health", headers={"Host": "rebind.example:" + url.split(":")[2][:-1]}).status_code == 421
        custom = httpx.get(url + "api/params?arch.d_model=64&arch.n_layers=2&arch.n_heads=4&arch.d_ff=256&arch.vocab_size=100")
        shown = json.loads(custom.headers["X-Trainledger-Argv"])[-1].removeprefix("--model=")
        assert "/" not in shown and "trainledger-web-" not in custom.text          # no path of the server
        [config] = private_tmp.glob(f"trainledger-web-*/{shown}")                  # the server's private copy
        assert config.is_file() and config.parent.name.startswith("trainledger-web-")
    finally:
        process.terminate()
        process.wait(timeout=20)
    assert not config.parent.exists()  # the private directory goes with the server


def test_taken_port_is_a_one_line_error(capsys):
    pytest.importorskip("uvicorn", reason="trainledger serve needs the optional extra trainledger[web]")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert cli.main(["serve", "--port", str(port)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"error: cannot listen on 127.0.0.1:{port}") and "--port" in error and error.count("\n") == 1


def test_bad_port_is_an_argparse_error(capsys):
    assert cli.main(["serve", "--port", "70000"]) == 2
    assert "argument --port: must be a port number in 0..65535, got '70000'" in capsys.readouterr().err


def test_missing_web_extra_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # `import uvicorn` now raises ImportError
    with pytest.raises(TrainledgerError, match=r"pip install 'trainledger\[web\]'"):
        serve._web_modules()


def test_serve_is_a_run_command_not_an_api_endpoint():
    assert hasattr(serve, "run") and not hasattr(serve, "compute")
    with pytest.raises(cli.UsageError):
        cli.compute(["serve"])


def test_config_dir_must_exist(capsys, tmp_path):
    assert cli.main(["serve", "--config-dir", str(tmp_path / "missing")]) == 2
    assert "argument --config-dir: must be an existing directory" in capsys.readouterr().err
