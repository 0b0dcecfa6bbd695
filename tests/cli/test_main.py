"""cli/main.py: one parser over the subcommand modules; errors are one line and exit status 2."""

import subprocess
import sys

from trainledger.cli import main as cli_main


def test_no_command_prints_help(capsys):
    assert cli_main.main([]) == 0
    assert "usage: trainledger" in capsys.readouterr().out


def test_unknown_command_is_one_line_exit_2(capsys):
    assert cli_main.main(["no-such-command"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    assert "no-such-command" in err


def test_console_script_exit_status_and_no_traceback():
    result = subprocess.run([sys.executable, "-m", "trainledger.cli.main", "no-such-command"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
