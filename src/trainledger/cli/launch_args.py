"""The flags of `layout --launch` (cli/launch.py prints the texts): which layout it launches (--rank N, or the layout
of a --config run file, as `layout --json` writes each candidate's `run`), the training settings (--lr, --min-lr,
--warmup-steps, --steps or --tokens, --checkpoint-every: train's own names; defaults from
account/planning/launch_settings.py) and the Slurm job's --time and --cpus-per-task."""

from __future__ import annotations

import argparse
import re

from trainledger import units
from trainledger.cli import common
from trainledger.errors import TrainledgerError

# Cores each GPU's process gets under Slurm: one runs its Python and CUDA launches, the others NCCL's proxy thread,
# the checkpoint writes and torch.compile's workers. trainledger's trainer reads its tokens by memory map (no
# DataLoader workers), so 4 suffice where a DataLoader would want more (a DGX H100 has 112 cores for its 8 GPUs).
CPUS_PER_GPU = 4
LAYOUT_KEYS = ("tp", "sp", "pp", "interleave", "cp", "dp", "zero", "ep", "batch_size", "recompute")
_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def slurm_duration(text: str) -> float:
    """An argparse type for --time: sbatch's own forms (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; a bare
    number is minutes, as sbatch reads it) or a duration with a unit (36h, 2d, 90min), in seconds."""
    text = str(text).strip()
    match = _SLURM_TIME.match(text)
    if match:
        days, first, second, third = (int(g) if g is not None else None for g in match.groups())
        if days is None:        # MM, MM:SS, HH:MM:SS
            parts = [p for p in (first, second, third) if p is not None]
            seconds = {1: parts[0] * 60, 2: parts[0] * 60 + parts[-1]}.get(len(parts))
            if seconds is None:
                seconds = parts[0] * 3600 + parts[1] * 60 + parts[2]
        else:                   # D-HH, D-HH:MM, D-HH:MM:SS
            seconds = days * 86400 + first * 3600 + (second or 0) * 60 + (third or 0)
    else:
        try:
            seconds = units.parse_seconds(text)
        except TrainledgerError:
            seconds = None
    if seconds is None or not 0 < seconds < 10**9:
        raise argparse.ArgumentTypeError(f"must be a positive duration as sbatch takes it (2-00:00:00, 48:00:00, "
                                         f"90 = minutes) or with a unit (36h, 2d), got {text!r}")
    return float(seconds)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("with --launch (cli/launch.py; docs/train.md, \"From a layout to a command\")")
    g.add_argument("--rank", type=common.positive_int, dest="launch_rank",
                   help="launch layout #N of the search (fastest first, as the table numbers them; default: the "
                        "fastest train runs); or give a candidate's run file (`layout --json` layouts[i].run) as "
                        "--config")
    g.add_argument("--lr", type=common.positive_float, dest="launch_lr",
                   help="peak learning rate (default: the model's published recipe, else GPT-3 Table 2.1's row "
                        "nearest in size; specs/pretraining.py)")
    g.add_argument("--min-lr", type=common.positive_float, dest="launch_min_lr",
                   help="learning rate at the end of the cosine (default: the recipe's fraction of --lr)")
    g.add_argument("--warmup-steps", type=common.positive_int, dest="launch_warmup_steps",
                   help="linear warmup steps (default: the recipe's, at most a tenth of the run)")
    g.add_argument("--steps", type=common.positive_int, dest="launch_steps",
                   help="optimizer steps (default: Chinchilla's 20 tokens per parameter at the global batch)")
    g.add_argument("--tokens", type=common.positive_count, dest="launch_tokens",
                   help="tokens to train on, e.g. 1.4T, instead of --steps")
    g.add_argument("--checkpoint-every", type=common.positive_int, dest="launch_checkpoint_every",
                   help="steps between checkpoints (default: Daly's interval for the checkpoint's size at Llama 3's "
                        "failure rate, as `plan` prints it)")
    g.add_argument("--time", type=slurm_duration, dest="launch_time",
                   help="the Slurm job's time limit, e.g. 2-00:00:00 or 48h (default: the predicted run at the error "
                        "bar's high end with its checkpoints, + 10 %% + 15 min)")
    g.add_argument("--cpus-per-task", type=common.positive_int, dest="launch_cpus_per_task",
                   help=f"CPU cores of each node's task (torchrun and its workers; default {CPUS_PER_GPU} per GPU)")


NAMES = {"launch_rank": "--rank", "launch_lr": "--lr", "launch_min_lr": "--min-lr",
         "launch_warmup_steps": "--warmup-steps", "launch_steps": "--steps", "launch_tokens": "--tokens",
         "launch_checkpoint_every": "--checkpoint-every", "launch_time": "--time",
         "launch_cpus_per_task": "--cpus-per-task"}


def asked(args):
    """account.planning.launch_settings.Asked of the flags; one line naming a flag given without --launch."""
    from trainledger.account.planning.launch_settings import Asked
    given = [flag for dest, flag in NAMES.items() if getattr(args, dest, None) is not None]
    if given and not args.launch:
        raise TrainledgerError(f"{given[0]} sets what `layout --launch torchrun|slurm` prints; add --launch", given[0])
    if args.launch_steps is not None and args.launch_tokens is not None:
        raise TrainledgerError("give --steps or --tokens, not both (the run's length)", "--steps")
    return Asked(lr=args.launch_lr, min_lr=args.launch_min_lr, warmup_steps=args.launch_warmup_steps,
                 steps=args.launch_steps, tokens=args.launch_tokens, checkpoint_every=args.launch_checkpoint_every,
                 time_seconds=args.launch_time)


def _describe(values: dict) -> str:
    return ", ".join(f"{key} {values[key]}" for key in LAYOUT_KEYS if key in values)


def pinned_rank(args, ranked: list[dict], run) -> int | None:
    """The rank in `ranked` of the layout a --config run file names (every layout key given by the file), or None
    when there is no --config or it names no layout; a layout the search did not find is one line, exit 2."""
    from trainledger.cli.run_flags import given
    if not getattr(args, "config", None) or not all(given(args, f"layout.{k}") for k in ("tp", "pp", "dp", "zero")):
        return None
    lay = run.layout
    wanted = {"tp": lay.tp, "sp": lay.sp, "pp": lay.pp, "interleave": lay.interleave, "cp": lay.cp, "dp": lay.dp,
              "zero": lay.zero, "ep": lay.ep, "batch_size": run.batch.batch_size, "recompute": run.levers.recompute}
    wanted = {k: v for k, v in wanted.items() if v is not None}
    if args.launch_rank is not None:
        raise TrainledgerError(f"--rank {args.launch_rank} and --config {args.config}'s layout ({_describe(wanted)}) "
                               "both pick the layout to launch: give one", "--rank")
    for rank, layout in enumerate(ranked, 1):
        if all(layout.get(k) == v for k, v in wanted.items()):
            return rank
    raise TrainledgerError(f"--config {args.config}: its layout ({_describe(wanted)}) is not one of the {len(ranked)} "
                           "layouts the search found that fit; `layout --json` lists them (layouts[i].run)", "--config")
