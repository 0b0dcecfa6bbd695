"""Issue 14, Why 10: the quick start installs only what the main job needs; the test tooling comes with the test
command; the README's two commands are the ones setup and CI run.

The install is run against a stub Python that records every pip call (a real install from a fresh clone is
what `.ci/run` does; it takes minutes, so here we check what setup *asks* pip for)."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A stand-in for python3 and .venv/bin/python: `-m venv DIR` makes DIR/bin/python (this script again),
# `-c CODE` fails (nothing is installed yet, so setup installs), `-m pip ...` is logged.
STUB = """#!/usr/bin/env bash
echo "$*" >> "$SETUP_LOG"
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
if [ "$1" = "--version" ]; then echo "Python 3.11.0"; exit 0; fi
if [ "$1" = "-c" ]; then case "$2" in *"print("*) echo "torch 2.13.0"; exit 0;; esac; exit 1; fi
exit 0
"""


def readme_commands():
    text = (ROOT / "README.md").read_text()
    block = text.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.strip() for line in block.strip().splitlines()]


def run_setup(tmp_path, *args):
    work = tmp_path / "repo"
    (work / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup.sh", work / "scripts" / "setup.sh")
    stub = tmp_path / "python3"
    stub.write_text(STUB)
    stub.chmod(0o755)
    log = tmp_path / "log"
    env = {**os.environ, "PYTHON": str(stub), "SETUP_LOG": str(log), "TRAINLEDGER_NO_BROWSER": "1"}
    result = subprocess.run(["bash", str(work / "scripts" / "setup.sh"), *args], capture_output=True, text=True,
                            env=env, timeout=60)
    installs = [line for line in log.read_text().splitlines() if line.startswith("-m pip install")] if log.exists() else []
    return result, installs


def test_readme_quick_start_is_what_ci_runs():
    main, tests = readme_commands()
    assert main == "bash scripts/setup.sh && .venv/bin/trainledger train"
    assert tests == "bash scripts/setup.sh --test && .venv/bin/python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci == tests
    assert "source .venv/bin/activate" in (ROOT / "README.md").read_text()


def test_main_job_setup_installs_no_test_or_browser_tooling(tmp_path):
    result, installs = run_setup(tmp_path)
    assert result.returncode == 0, result.stderr
    assert installs == ["-m pip install --quiet torch==2.13.0", "-m pip install --quiet -e ."]
    assert "source .venv/bin/activate" in result.stdout


def test_test_setup_adds_the_test_and_web_extras(tmp_path):
    result, installs = run_setup(tmp_path, "--test")
    assert result.returncode == 0, result.stderr
    assert installs[-1] == "-m pip install --quiet -e .[test,web]" and len(installs) == 3


def test_setup_rejects_unknown_options(tmp_path):
    result, installs = run_setup(tmp_path, "--tset")
    assert result.returncode == 2 and "--test" in result.stderr and installs == []


def test_test_extras_hold_what_the_tests_import():
    """Every third-party module the tests import is in the main dependencies or the test extra."""
    text = (ROOT / "pyproject.toml").read_text()
    for module in ("pytest", "hypothesis", "transformers", "fastapi", "httpx", "playwright"):
        assert re.search(rf'test = \[[^\]]*"{module}', text, re.S), module
    main = re.search(r"dependencies = \[(.*?)\]", text, re.S).group(1)
    for module in ("pytest", "transformers", "playwright", "fastapi"):
        assert f'"{module}' not in main


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_setup_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "setup.sh")]).returncode == 0
