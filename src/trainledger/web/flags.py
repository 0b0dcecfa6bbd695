"""The query parameters the web API passes on, per command: an allow-list, not whatever argparse accepts.

`GET /api/<command>?seq-len=2048` becomes `--seq-len=2048` only because `seq-len` is in WEB_FLAGS[command].
A name that is not a plain flag name (`model=/etc/passwd` as a key: `--model=/etc/passwd=` would reach argparse
without the model guard), a flag of the command that the web server does not pass (REFUSED), or any other name
is answered 422 naming the parameter before argparse sees anything. A flag added to a command later is therefore
off on the web until someone adds it here (tests/web/test_web_flags.py fails until each flag is in one of the two
tables). Boolean pairs are listed by their positive name (`flash` covers `--no-flash` through flash=false).

What each listed flag may carry is checked elsewhere: `model` and `gpu` by guard.resolve_model/check_gpu, sizes
by guard.HEAVY_CAPS, the rest by the command's own argparse types.
"""

from __future__ import annotations

import re

# FSDP2's policy flags of `memory` and `step` (dtypes, resharding, accumulation, HSDP replicas): numbers and names.
FSDP_FLAGS = ("fsdp-param-dtype", "fsdp-reduce-dtype", "reshard-after-forward", "fsdp-accumulate", "dp-replicate")
# Expert parallelism of `step` (account/time/expert_parallel.py); `memory` takes --ep alone.
EXPERT_FLAGS = ("ep", "expert-imbalance", "capacity-factor", "ep-overlap", "ep-dispatcher", "etp")
# One literal per command (its flags as `trainledger <command> --help` lists them, without --json: implied).
WEB_FLAGS: dict[str, frozenset[str]] = {name: frozenset(flags) for name, flags in {
    "plan": ("model", "params", "tokens", "gpu", "num-gpus", "mfu", "dtype", "seq-len", "attention",
             "global-batch-size", "recompute", "deadline", "failures-per-gpu-day", "checkpoint-bandwidth", "restart",
             "precision", "optimizer", "simulate", "trials", "seed", "reserve"),
    "fit": ("gpu", "num-gpus", "memory-per-gpu", "optimizer", "precision", "zero", "reserve", "model", "seq-len",
            "batch-size", "recompute"),
    "optimal": ("budget-flops", "gpu", "num-gpus", "days", "mfu", "seq-len", "precision", "optimizer", "dtype", "law",
                "tokens-per-param"),
    "params": ("model",),
    "flops": ("model", "batch-size", "global-batch-size", "seq-len", "attention", "recompute", "impl", "attn-impl"),
    "memory": ("model", "params", "batch-size", "seq-len", "precision", "optimizer", "zero", "dp", "tp", "sp", "pp",
               "recompute", "flash", "gpu", "memory-per-gpu", "reserve", "impl", "attn-impl", "grad-accum", "ep",
               "loss-upcast", *FSDP_FLAGS),
    "step": ("model", "batch-size", "seq-len", "precision", "optimizer", "zero", "tp", "sp", "pp", "recompute", "flash",
             "gpu", "num-gpus", "dp", "global-batch-size", "interleave", "cp", "attention", "framework",
             "attention-kernel", "gpus-per-node", "intra-node-bandwidth", "inter-node-bandwidth", "compile", "loop",
             "reserve", "tp-overlap", "dp-overlap", "pp-overlap", "schedule", "mtp", "uneven-chunks", "loss-upcast", *FSDP_FLAGS,
             *EXPERT_FLAGS),
    "layout": ("model", "gpu", "num-gpus", "global-batch-size", "seq-len", "precision", "optimizer", "flash", "top",
               "memory-per-gpu", "attention", "framework", "attention-kernel", "gpus-per-node", "intra-node-bandwidth",
               "inter-node-bandwidth", "compile", "reserve", "launch", "loss-upcast"),
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


def allowed(command: str) -> frozenset[str]:
    """The flag names (without dashes) the web server passes to `command` (empty for an unknown command)."""
    return WEB_FLAGS.get(command, frozenset())
