"""The training settings of a launch (`layout --launch`): learning rate, warmup, length, checkpoint interval and the
job's time limit, each with where it comes from. Pure, stdlib only.

- lr, warmup, final lr: the model's own published recipe, else GPT-3 Table 2.1's row nearest in size
  (specs/pretraining.py `recipe_for`). A warmup given in tokens (GPT-3's 375M) becomes steps at this run's batch;
  a recipe's warmup is capped at a tenth of the run, as `train` caps its own default (train/config.py).
- steps: --steps, or --tokens / tokens per step, or Chinchilla's 20 tokens per parameter (Hoffmann et al. 2022).
- checkpoint interval: Daly's (2006) optimum interval (account/planning/failures.py, as `plan` prints it) for a
  checkpoint of the weights and optimizer states (account/memory/per_gpu.py, as `plan`), at Llama 3's checkpoint
  bandwidth and interruption rate, in steps of the predicted step time.
- time limit: the steps at the error bar's high end (the slowest of the published runs like this one, relative to
  their prediction: `step_seconds_high`; the prediction itself when there is none) plus the checkpoints' writes,
  + TIME_MARGIN_FRACTION, + STARTUP_SECONDS (starting torch on every node, the rendezvous, reading the checkpoint).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainledger import units
from trainledger.account.planning import failures
from trainledger.errors import TrainledgerError
from trainledger.specs.pretraining import CHINCHILLA_TOKENS_PER_PARAM, RECIPES, Recipe

TIME_MARGIN_FRACTION = 0.10
STARTUP_SECONDS = 15 * 60.0
WARMUP_CAP_FRACTION = 0.1       # train/config.py: its default warmup never exceeds a tenth of the run


@dataclass(frozen=True)
class Asked:
    """The settings a user gave (None: the default applies). Units: a learning rate per step; steps; tokens; s."""

    lr: float | None = None
    min_lr: float | None = None
    warmup_steps: int | None = None
    steps: int | None = None
    tokens: float | None = None
    checkpoint_every: int | None = None
    time_seconds: float | None = None


def recipe_for(spec) -> Recipe:
    """The published recipe of `spec`: its family's row nearest in size where specs/pretraining.py has the family
    (a preset's name starts with it), else GPT-3 Table 2.1's row nearest in (log) parameters, active parameters for
    a mixture of experts. Of two rows equally near, the smaller model's."""
    from trainledger.account.counting.params import param_counts
    counts = param_counts(spec)
    name = str(spec.name).lower()
    family = [r for r in RECIPES if r.family and name.startswith(r.family)]
    size = counts["n_params"] if family or not spec.is_moe else counts["n_params_active"]
    rows = family or [r for r in RECIPES if not r.family]
    return min(rows, key=lambda r: (abs(math.log(r.params / size)), r.params))


def checkpoint_bytes(spec, run) -> float:
    """Bytes of one checkpoint: the weights (and a master copy) and the optimizer states of the run's recipe, whole
    (account/memory/per_gpu.py on one replica, as `plan` prices it)."""
    from trainledger.account.memory.per_gpu import memory_per_gpu
    from trainledger.specs.run import Run
    states = Run().with_(precision=run.numerics.precision, optimizer=run.numerics.optimizer, seq_len=run.batch.seq_len,
                         zero=0, reserve=0.0)
    memory = memory_per_gpu(spec, None, states)
    return memory["params_bytes"] + memory["master_params_bytes"] + memory["optimizer_bytes"]


def _check(value, flag: str, allowed: str):
    if value is not None and not (math.isfinite(value) and value > 0):
        raise TrainledgerError(f"{flag} must be {allowed}, got {value!r}", flag)


def settings(spec, hardware, run, timing: dict, asked: Asked = Asked()) -> dict:
    """The training settings of a launch of `run` (a layout's specs.run.Run: its global batch and sequence, recipe
    and optimizer) on `hardware` (specs.run.Hardware), whose step takes timing["step_seconds"] (and up to
    timing.get("step_seconds_high") by the error bar). Returns {lr, min_lr, warmup_steps, steps, tokens,
    tokens_per_step, checkpoint_every, checkpoint_seconds, checkpoint_bytes, run_seconds, run_seconds_high,
    time_seconds, recipe, sources: {name: one line}}."""
    from trainledger.account.counting.params import param_counts
    for value, flag, allowed in ((asked.lr, "--lr", "a positive learning rate"),
                                 (asked.tokens, "--tokens", "a positive count of tokens like 1.4T"),
                                 (asked.time_seconds, "--time", "a positive duration")):
        _check(value, flag, allowed)
    if asked.steps is not None and asked.tokens is not None:
        raise TrainledgerError("give --steps or --tokens, not both (the run's length)", "--steps")
    recipe = recipe_for(spec)
    step_s = float(timing["step_seconds"])
    high_s = float(timing.get("step_seconds_high") or step_s)
    tokens_per_step = run.batch.global_batch_size * run.batch.seq_len
    n = param_counts(spec)["n_params"]
    sources = {}
    if asked.steps is not None:
        steps, sources["steps"] = int(asked.steps), "--steps"
    elif asked.tokens is not None:
        steps, sources["steps"] = math.ceil(asked.tokens / tokens_per_step), "--tokens"
    else:
        steps = math.ceil(CHINCHILLA_TOKENS_PER_PARAM * n / tokens_per_step)
        sources["steps"] = (f"{CHINCHILLA_TOKENS_PER_PARAM:g} tokens per parameter × {units.format_count(n)} parameters "
                            "(Chinchilla: Hoffmann et al. 2022, Table 3)")
    lr = float(asked.lr) if asked.lr is not None else recipe.lr
    sources["lr"] = "--lr" if asked.lr is not None else recipe.lr_source
    min_lr = float(asked.min_lr) if asked.min_lr is not None else lr * recipe.final_lr_fraction
    sources["min_lr"] = ("--min-lr" if asked.min_lr is not None
                         else f"{100 * recipe.final_lr_fraction:g} % of the peak: {recipe.schedule_source}")
    if not 0 <= min_lr <= lr:
        raise TrainledgerError(f"--min-lr {min_lr:g} must be in 0..--lr {lr:g}", "--min-lr")
    if asked.warmup_steps is not None:
        warmup, sources["warmup_steps"] = int(asked.warmup_steps), "--warmup-steps"
        if warmup > steps:
            raise TrainledgerError(f"--warmup-steps {warmup:,} exceeds the run's {steps:,} steps", "--warmup-steps")
    else:
        published = (recipe.warmup_steps if recipe.warmup_steps is not None
                     else math.ceil(recipe.warmup_tokens / tokens_per_step))
        warmup = min(published, int(WARMUP_CAP_FRACTION * steps))
        words = (f"{recipe.warmup_steps:,} steps" if recipe.warmup_steps is not None
                 else f"{recipe.warmup_tokens / 1e6:g}M tokens ({published:,} steps of {tokens_per_step:,} tokens)")
        sources["warmup_steps"] = (f"{words}" + (f", capped at a tenth of the run's {units.count_of(steps, 'step')}"
                                                  if warmup < published else "") + f": {recipe.schedule_source}")
    ckpt_bytes = checkpoint_bytes(spec, run)
    plan = failures.failure_plan(max(steps * step_s, 1e-9), hardware.num_gpus, ckpt_bytes,
                                 gpus_per_node=hardware.gpu.gpus_per_node)
    if asked.checkpoint_every is not None:
        every, sources["checkpoint_every"] = int(asked.checkpoint_every), "--checkpoint-every"
    else:
        every = min(steps, max(1, round(plan["checkpoint_interval_seconds"] / step_s)))
        sources["checkpoint_every"] = (
            f"Daly 2006's interval, {plan['checkpoint_interval_seconds'] / 3600:.3g} h of training, for a checkpoint "
            f"of {ckpt_bytes / 1e9:,.0f} GB written in {plan['checkpoint_seconds']:.3g} s (Llama 3's "
            f"{failures.LLAMA3_CHECKPOINT_BYTES_PER_S_PER_NODE / 1e9:.3g} GB/s per node) and an interruption every "
            f"{plan['mtbf_seconds'] / 86400:.3g} days (Llama 3's rate per GPU-day; account/planning/failures.py)")
    run_s, run_high_s = steps * step_s, steps * high_s
    writes_s = (steps // every) * plan["checkpoint_seconds"]
    if asked.time_seconds is not None:
        time_s, sources["time"] = float(asked.time_seconds), "--time"
    else:
        time_s = (run_high_s + writes_s) * (1 + TIME_MARGIN_FRACTION) + STARTUP_SECONDS
        bar = "at the error bar's high end" if high_s > step_s else "as predicted (no error bar)"
        sources["time"] = (f"{units.count_of(steps, 'step')} × {high_s:.3g} s {bar} + "
                           f"{units.count_of(steps // every, 'checkpoint write')}, "
                           f"+ {100 * TIME_MARGIN_FRACTION:g} % + {STARTUP_SECONDS / 60:g} min to start")
    return {"lr": lr, "min_lr": min_lr, "warmup_steps": warmup, "steps": steps, "tokens": steps * tokens_per_step,
            "tokens_per_step": tokens_per_step, "checkpoint_every": every,
            "checkpoint_seconds": plan["checkpoint_seconds"], "checkpoint_bytes": ckpt_bytes, "run_seconds": run_s,
            "run_seconds_high": run_high_s, "time_seconds": time_s, "recipe": recipe.label,
            "recipe_batch_tokens": recipe.batch_tokens, "sources": sources}


def slurm_time(seconds: float) -> str:
    """`seconds` as sbatch's --time, D-HH:MM:SS, rounded up to the minute (Slurm counts the limit in minutes)."""
    minutes = max(1, math.ceil(seconds / 60 - 1e-9))
    days, rest = divmod(minutes, 1440)
    return f"{days}-{rest // 60:02d}:{rest % 60:02d}:00"
