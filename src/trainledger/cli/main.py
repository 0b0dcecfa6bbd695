"""Entry point of `trainledger`: builds one argparse parser from the subcommand modules and runs one.

Each subcommand is a module `trainledger.cli.<name>` with
    HELP: str                                   one line for `trainledger --help`
    add_arguments(parser) -> None               its flags (kebab-case, units in the help text; add --json)
and either
    compute(args) -> dict | list                the JSON result in base units (no printing) — the web API
    render(result, args) -> None                calls compute() too, so CLI and API always agree
or, for commands that do work rather than answer (train, serve, tour, ...),
    run(args) -> int | None                     does the work and prints; returns the exit status
Command modules must not import torch at module level (the planning commands start in well under 0.5 s).

Errors: a `TrainledgerError` (or a bad flag caught by argparse) prints one line on stderr and exits 2.
Set TRAINLEDGER_DEBUG=1 to see the traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import importlib
import importlib.util
import os
import re
import sys

from trainledger import __version__
from trainledger.errors import TrainledgerError

# Order is the order of `trainledger --help`.
COMMANDS = [
    "plan", "fit", "optimal", "params", "flops", "memory", "step", "layout",
    "dtypes", "hardware", "models", "tensor", "matmul",
    "mfu", "bench", "measure", "profile", "tokenize", "train", "checkpoints", "generate", "infer", "export",
    "serve", "tour",
]


class UsageError(TrainledgerError):
    """A flag argparse rejected; main() prints it as one line and exits 2, the web API answers 422."""


# A word starting '-<digit>' ('-1T', '-5GB', '-1,3', '-.5') is a value, never a flag of ours: letting it reach
# the flag's own check gives "--tokens must be positive, got '-1T'" instead of argparse's "expected one argument".
NEGATIVE_VALUE = re.compile(r"^-\.?\d")
INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag raises UsageError (one line, exit status 2) instead of dumping usage,
    values that start with a minus sign reach the flag's own check, and flags must be spelled out:
    no prefix matching (`--num-gpu` is not `--num-gpus`; it gets "did you mean --num-gpus?")."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_VALUE

    def _get_values(self, action, arg_strings):
        """Refuses, before the flag's type sees it, a value that is empty or a lone '--': argparse drops the '--'
        of `--tokens=--` and hands the flag [] without calling its type (a TypeError later; a scalar for
        `tensor --shape=--`), and a type that takes any string took '' (a file named '', a GPU named '')."""
        if action.nargs in (argparse.PARSER, argparse.REMAINDER):    # a subcommand and its own arguments
            return super()._get_values(action, arg_strings)
        if action.option_strings and "--" in arg_strings:
            raise argparse.ArgumentError(action, f"expected a value, got '--' (write {action.option_strings[-1]}=VALUE)")
        if "" in arg_strings and not getattr(action, "own_empty_check", False):
            raise argparse.ArgumentError(action, "must not be empty, got ''")
        return super()._get_values(action, arg_strings)

    def error(self, message):
        choice = INVALID_CHOICE.search(message)
        if choice:                         # "argument COMMAND: invalid choice: 'plna' (choose from ...)"
            close = suggest(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)))
            if close:
                message += f"; did you mean {close!r}?"
        prog = self.prog.removeprefix("trainledger").strip() or "trainledger"
        raise UsageError(f"{prog}: {message} (see `{self.prog} --help`)")


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
                                 usage=getattr(module, "USAGE", None),    # a synopsis where the flags are many
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(command)
        command.set_defaults(_module=module, _parser=command)
    return parser


def suggest(word: str, options) -> str | None:
    """The closest of `options` to `word` ('--numgpus' -> '--num-gpus'), or None when nothing is close."""
    def plain(text):
        return text.lstrip("-").replace("-", "").replace("_", "").lower()
    by_plain = {plain(o): o for o in options}
    if plain(word) in by_plain:            # same letters, other dashes or case: --numgpus, --num_gpus, --NUM-GPUS
        return by_plain[plain(word)]
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.7)
    return match[0] if match else None


def parse(parser: argparse.ArgumentParser, argv):
    """parser.parse_args(argv), but unknown flags are reported by the subcommand's own parser with the
    closest flag it knows: 'plan: unrecognized arguments: --numgpus (did you mean --num-gpus?)'."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        target = getattr(args, "_parser", parser)
        flags = [o for action in target._actions for o in action.option_strings]
        hints = []
        for word in extras:
            name = word.split("=", 1)[0]
            close = suggest(name, flags) if name.startswith("-") else None
            if close:
                hints.append((name, close))
        message = f"unrecognized arguments: {' '.join(extras)}"
        if len(hints) == 1:
            message += f" (did you mean {hints[0][1]}?)"
        elif hints:
            message += " (did you mean " + ", ".join(f"{close} for {name}" for name, close in hints) + "?)"
        target.error(message)
    return args


@functools.lru_cache(maxsize=1)
def _cached_parser() -> argparse.ArgumentParser:
    return build_parser()


def compute(argv: list[str]):
    """The JSON result of one answering subcommand, e.g. compute(["plan", "--gpu", "a100"]) (used by the web API)."""
    args = parse(_cached_parser(), argv)
    module = getattr(args, "_module", None)
    if module is None or not hasattr(module, "compute"):
        raise UsageError(f"'{argv[0] if argv else ''}' is not an answering subcommand")
    _merge_run(args)
    return module.compute(args)


def _merge_run(args) -> None:
    """For a command with run flags (cli/run_flags.py): defaults < --config < the flags given, into `args`."""
    if hasattr(args, "config") and getattr(args._module, "RUN_FLAGS", False):
        from trainledger.cli.run_flags import apply_config
        apply_config(args)


def _run(args) -> int | None:
    module = args._module
    _merge_run(args)
    if hasattr(module, "run"):
        return module.run(args)
    result = module.compute(args)
    if getattr(args, "save_config", None):
        from trainledger.cli.run_flags import save_config
        save_config(args, result)
    if isinstance(result, dict):       # outlandish inputs: one line each on stderr (JSON keeps them under "warnings")
        for line in result.get("warnings", []):
            sys.stderr.write(f"warning: {line}\n")
    if getattr(args, "json", False):
        from trainledger.cli.common import print_json
        print_json(result)
    else:
        module.render(result, args)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Runs one subcommand; its exit status. As a program (`argv` None: the `trainledger` script, `python -m
    trainledger.cli.main`, each rank under torchrun) a rank of a distributed run ends here with os._exit
    (train/distributed.py end_rank_process); a call with arguments always returns."""
    status = _main(argv)
    distributed = sys.modules.get("trainledger.train.distributed")    # imported only by runs that may use it
    if argv is None and distributed is not None:
        distributed.end_rank_process(status)
    return status


def _main(argv: list[str] | None) -> int:
    try:
        parser = build_parser()
        args = parse(parser, argv)
        if not getattr(args, "_module", None):     # no COMMAND: the help, and the usage error's status
            parser.print_help(sys.stderr)
            sys.stderr.write("error: give a COMMAND (one of the above), e.g. `trainledger plan`\n")
            return 2
        status = _run(args)
    except TrainledgerError as error:
        sys.stderr.write(f"error: {error}\n")
        return 2
    except OverflowError as error:  # from extreme inputs (a 400-digit shape): a user error, not a crash
        sys.stderr.write(f"error: a value is too large to compute with ({error}); use smaller numbers\n")
        return 2
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as error:  # never a traceback for a user; TRAINLEDGER_DEBUG=1 shows it
        if os.environ.get("TRAINLEDGER_DEBUG"):
            raise
        from trainledger.measure.device_memory import is_cuda_oom, oom_message
        if is_cuda_oom(error):      # the GPU ran out anyway: the numbers, in one line
            sys.stderr.write(f"error: {oom_message(error)}\n")
            return 2
        sys.stderr.write(f"error: unexpected {type(error).__name__}: {error} (rerun with TRAINLEDGER_DEBUG=1 for details)\n")
        return 1
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
