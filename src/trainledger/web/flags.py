"""The query parameters the web API passes on, per command: an allow-list, not whatever argparse accepts.

`GET /api/<command>?seq-len=2048` becomes `--seq-len=2048` only because `seq-len` is allowed for the command
(`allowed`): a setting of the run that the command takes (specs.run_table.for_command: the table the CLI makes the
flags from, so a setting added to specs/run.py is on the web as on the command line), or one of the command's
other flags listed in WEB_FLAGS, and not REFUSED. A name that is not a plain flag name (`model=/etc/passwd` as a
key: `--model=/etc/passwd=` would reach argparse without the model guard), a flag of the command that the web
server does not pass (REFUSED), or any other name is answered 422 naming the parameter before argparse sees
anything. Any other flag added to a command later is therefore off on the web until someone adds it here
(tests/web/test_web_attacks.py fails until each flag is allowed or refused). Boolean pairs are listed by their
positive name (`flash` covers `--no-flash` through flash=false).

What each listed flag may carry is checked elsewhere: `model` and `gpu` by guard.resolve_model/check_gpu, sizes
by guard.HEAVY_CAPS, the rest by the command's own argparse types and the run's checks (specs/run.py).
"""

from __future__ import annotations

import re

from trainledger.specs import run_table

# The flags of each answering command that are not settings of the run (those come from the table: run_flags), one
# literal per command, as `trainledger <command> --help` lists them, without --json (implied). A command that
# declares a run setting's flag itself (plan's --recompute, fit's --reserve) lists it here.
WEB_FLAGS: dict[str, frozenset[str]] = {name: frozenset(flags) for name, flags in {
    "plan": ("model", "params", "tokens", "gpu", "num-gpus", "mfu", "dtype", "count", "recompute", "deadline",
             "failures-per-gpu-day", "checkpoint-bandwidth", "restart", "simulate", "trials", "seed"),
    "fit": ("gpu", "num-gpus", "memory-per-gpu", "reserve", "model"),
    "optimal": ("budget-flops", "gpu", "num-gpus", "days", "mfu", "seq-len", "precision", "optimizer", "dtype", "law",
                "tokens-per-param"),
    "params": ("model",),
    "flops": ("model", "batch-size", "global-batch-size", "seq-len", "attention", "recompute", "impl", "attn-impl"),
    "memory": ("model", "params", "gpu", "num-gpus", "memory-per-gpu", "impl", "attn-impl", "grad-accum"),
    "step": ("model", "gpu", "num-gpus", "gpus-per-node", "intra-node-bandwidth", "inter-node-bandwidth"),
    "layout": ("model", "gpu", "num-gpus", "top", "memory-per-gpu", "gpus-per-node", "intra-node-bandwidth",
               "inter-node-bandwidth", "launch", "rank", "lr", "min-lr", "warmup-steps", "steps", "tokens",
               "checkpoint-every", "time", "cpus-per-task"),
    "dtypes": (),
    "hardware": (),
    "models": (),
    "tensor": ("shape", "dtype", "transpose", "slice", "torch", "device"),
    "matmul": ("m", "k", "n", "dtype", "gpu"),
    "infer": ("model", "gpu", "batch-size", "prompt-len", "gen-len", "dtype", "kv-dtype", "tp", "reserve"),
    "mfu": ("tokens-per-s", "tokens-per-s-per-gpu", "model", "params", "gpu", "num-gpus", "dtype", "seq-len",
            "attention", "recompute"),
}.items()}

# Flags of answering commands that the web server never passes, and why (a flag may be listed before it exists).
REFUSED: dict[str, str] = {
    "help": "prints help instead of answering; the flags of each command are at /api/schema",
    "version": "prints the version instead of answering; see /api/health",
    "calibration": "reads a calibration file of the server's file system: command line only",
    "config": "reads a file of the server's file system: command line only",
    "out": "writes a file on the server: command line only",
    "save-config": "writes a file on the server: command line only (the answer's `run` is the run file's content)",
}

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


def flag_name(key: str) -> str | None:
    """The flag name (`seq-len`) a query key (`seq-len`, `seq_len`) stands for, or None when the key is not a plain
    name: `=`, dots, slashes, spaces, a leading dash, more than 64 characters."""
    return key.replace("_", "-") if NAME.fullmatch(key) else None


def run_flags(command: str) -> frozenset[str]:
    """The names (without dashes) of the run's settings `command` takes, from the table (specs/run_table.py)."""
    return frozenset(s.flag[2:] for s in run_table.for_command(command))


def allowed(command: str) -> frozenset[str]:
    """The flag names (without dashes) the web server passes to `command`: its run settings and its other listed
    flags, less REFUSED (empty for a command the web server does not answer)."""
    if command not in WEB_FLAGS:
        return frozenset()
    return (WEB_FLAGS[command] | run_flags(command)) - set(REFUSED)
