"""cli/main.py: one parser over the subcommand modules; errors are one line and exit status 2."""

import subprocess
import sys

from trainledger.cli import main as cli_main


def test_no_command_prints_help_and_is_a_usage_error(capsys):
    """`trainledger` alone did nothing asked for: the help on stderr, a last line saying what is missing, exit 2
    (issue 31, item 5: it exited 0)."""
    assert cli_main.main([]) == 2
    captured = capsys.readouterr()
    assert "usage: trainledger" in captured.err and captured.out == ""
    assert captured.err.splitlines()[-1].startswith("error: give a COMMAND")


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
