"""Entry point of `trainledger`: builds one argparse parser from the subcommand modules and runs one.

Each subcommand is a module `trainledger.cli.<name>` with
    HELP: str                                   one line for `trainledger --help`
    add_arguments(parser) -> None               its flags (kebab-case, units in the help text)
    run(args) -> int | None                     does the work, prints a table or `--json`; returns exit status
Command modules must not import torch at module level (the planning commands start in well under 0.5 s).

Errors: a `TrainledgerError` (or a bad flag caught by argparse) prints one line on stderr and exits 2.
Set TRAINLEDGER_DEBUG=1 to see the traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys

from trainledger import __version__
from trainledger.errors import TrainledgerError

# Order is the order of `trainledger --help`.
COMMANDS = [
    "plan", "fit", "optimal", "params", "flops", "memory",
    "dtypes", "hardware", "models", "tensor", "matmul",
    "bench", "measure", "tokenize", "train", "serve", "tour",
]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line on stderr and exit status 2 (no usage dump)."""

    def error(self, message):
        prog = self.prog.removeprefix("trainledger ").strip()
        sys.stderr.write(f"error: {prog}: {message} (see `{self.prog} --help`)\n")
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="trainledger",
        description="Resource accounting for neural-network training: predict parameters, FLOPs, memory and "
                    "time; measure them; train with primitives you understand. Counts and FLOPs are SI "
                    "(70B, 6.3e24), memory is shown in IEC units (GiB), --json gives base units.",
    )
    parser.add_argument("--version", action="version", version=f"trainledger {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineParser)
    for name in COMMANDS:
        module_name = f"trainledger.cli.{name}"
        if importlib.util.find_spec(module_name) is None:
            continue
        module = importlib.import_module(module_name)
        command = sub.add_parser(name, help=module.HELP, description=getattr(module, "DESCRIPTION", module.HELP),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_run", None):
        parser.print_help()
        return 0
    try:
        status = args._run(args)
    except TrainledgerError as error:
        sys.stderr.write(f"error: {error}\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as error:  # never a traceback for a user; TRAINLEDGER_DEBUG=1 shows it
        if os.environ.get("TRAINLEDGER_DEBUG"):
            raise
        sys.stderr.write(f"error: unexpected {type(error).__name__}: {error} (rerun with TRAINLEDGER_DEBUG=1 for details)\n")
        return 1
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
