"""The training loop: gradient accumulation, clipping, warmup+cosine, precision recipes, eval, checkpoints, signals.

One optimizer step, on each of W ranks with A micro-batches (B = --global-batch-size, the GLOBAL batch;
the CLI's --batch-size is the micro-batch B / (W · A)):

    drawn = sampler.draw(B)                          # same draw on every rank (shared seeded generator)
    for a in range(A):                               # rank r trains rows r·B/W + a·B/(W·A) ... of `drawn`
        loss_a = model(x_a, y_a)                     # mean over the micro-batch's tokens
        backward(loss_a / A)                         # grads sync (DDP all-reduce, FSDP reduce-scatter) on a = A−1 only
    grads are now the mean over the global batch     # DDP/FSDP average over ranks, 1/A over micro-batches
    loss = mean over ranks of Σ_a loss_a / A         # what is logged: the global batch's mean loss
    stop if loss is NaN/Inf (weights not updated; names the last checkpoint whose loss was finite, not a spike)
    clip to --grad-clip (global L2 norm), lr from the schedule, optimizer step (GradScaler under amp-fp16)

FLOPs per step and the memory prediction come from trainledger.account; this module holds no formula.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import statistics
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch

from trainledger import units
from trainledger.account.flops import flops_per_step
from trainledger.account.memory import memory_per_gpu
from trainledger.data import seed_everything
from trainledger.errors import TrainledgerError
from trainledger.models import build_model
from trainledger.optim import CosineWithWarmup, build_optimizer, clip_grad_norm_
from trainledger.measure.timing import StepTimer, achieved_flops_per_s, mfu, peak_flops_per_s, peak_memory_bytes
from trainledger.specs import get_model
from trainledger.specs.recipes import get_recipe
from trainledger.train import checkpoint as ckpt
from trainledger.train.safe_dcp import CheckpointException
from trainledger.train import distributed as dist_
from trainledger.train.batches import RegressionBatches, TokenBatches
from trainledger.train.comm_count import StepComm
from trainledger.train.config import TrainConfig, check_resume, with_world
from trainledger.train.corpus import load_splits
from trainledger.train.metrics import MetricsWriter, Progress, plot_loss, predicted_step, read_metrics, step_time_gap
from trainledger.train.precision import MASTER_COPY, MasterParams, autocast, grad_scaler, param_dtype
from trainledger.train.rng import load_rng_state_dict, rng_state_dict

# Test hook: the loss of this optimizer step (1-based) is replaced by NaN, to exercise the divergence stop.
FAULT_NAN_STEP_ENV = "TRAINLEDGER_FAULT_NAN_STEP"
# Test hook: seconds to sleep after each step's record is written (outside the timed step), so that the
# signal tests can stop a run between known steps on a loaded machine, however fast its steps are.
STEP_DELAY_ENV = "TRAINLEDGER_TEST_STEP_DELAY_S"
# A loss spike: more than SPIKE_FACTOR × the median of the previous SPIKE_WINDOW losses. A rise of that size is
# a blow-up, not noise (step-to-step noise of a language model's loss is a few per cent); a checkpoint taken
# at a spike may already hold diverging weights, so a NaN stop does not point at it.
SPIKE_FACTOR, SPIKE_WINDOW = 2.0, 20


class TrainingDiverged(TrainledgerError):
    """The loss became NaN or Inf; the run stopped before the weights were updated with it."""


class Trainer:
    """Owns the model, optimizer, schedule, scaler, sampler and counters of one run; train() runs it.

    Each stateful piece has state_dict()/load_state_dict(); `state_dict()` here gathers them for a checkpoint.
    """

    def __init__(self, config: TrainConfig, world: dist_.World | None = None, log=print, quiet: bool = False,
                 given: set[str] | None = None, early_stop=None):
        """`given`: the config fields set by flags or --config (on --resume the others keep the checkpoint's
        value; None: all of them). `early_stop()`: the name of a signal caught before train() took over."""
        self.config = config
        self.given, self.early_stop = given, early_stop
        self.world = world or dist_.World(device=dist_.pick_device(config.device))
        self.log = log if self.world.is_main and not quiet else (lambda *a, **k: None)
        self.quiet = quiet
        self.spec = get_model(config.model)
        self.is_lm = self.spec.kind == "transformer"
        if self.is_lm and config.seq_len > self.spec.max_seq_len:
            raise TrainledgerError(f"--seq-len {config.seq_len} exceeds the context of model '{self.spec.name}' "
                                   f"({self.spec.max_seq_len} tokens)")
        self.per_rank, self.micro = with_world(config, self.world.dp_size)
        _check_output_paths(config)
        self.seq_len = config.seq_len if self.is_lm else 1
        self.step = 0               # optimizer steps done
        self.tokens = 0             # tokens (sequences × seq_len; samples for the Cruncher) trained on
        self.stop_signal: str | None = None
        self.recent_losses: deque[float] = deque(maxlen=SPIKE_WINDOW)
        self.last_loss: float | None = None
        self.last_loss_spike = False
        self.expected_checkpoint_bytes = 0

        generator = seed_everything(config.seed)          # python, numpy, torch; the sampler's generator
        self.train_batches, self.eval_source = self._data(generator)
        model = build_model(self.spec)                    # fp32 init on CPU: identical on every device
        self._fp32_init = [p.detach().clone() for p in model.parameters()] if config.precision in MASTER_COPY else None
        self.model = model.to(device=self.world.device, dtype=param_dtype(config.precision))
        sharded = config.parallel == "fsdp" or self.world.tp > 1 or self.world.pp > 1
        self.fmt = "dcp" if sharded and self.world.distributed else "full"

    # ----- setup -------------------------------------------------------------------------------------
    def _data(self, generator):
        """(training sampler, factory of held-out samplers)."""
        if not self.is_lm:
            eval_seed = self.config.seed + 1
            return (RegressionBatches(self.spec.dim, generator),
                    lambda: RegressionBatches(self.spec.dim, np.random.default_rng(eval_seed)))
        if self.world.is_main:      # rank 0 builds any cached token file first; the others then only read it
            train_tokens, eval_tokens = load_splits(self.config, self.spec.vocab_size, self.log)
        dist_.barrier(self.world)
        if not self.world.is_main:
            train_tokens, eval_tokens = load_splits(self.config, self.spec.vocab_size)
        seed = self.config.seed + 1
        return (TokenBatches(train_tokens, self.seq_len, generator),
                lambda: TokenBatches(eval_tokens, self.seq_len, np.random.default_rng(seed)))

    def _build(self) -> None:
        """Wrap for DDP/FSDP, compile, build the optimizer, schedule and grad scaler (fresh state)."""
        config = self.config
        self.resume_notes: list[str] = []
        self.model = dist_.wrap(self.model, config.parallel, self.world, config.sp, config.grad_accum, self.seq_len)
        self.comm = StepComm(self)                        # comm_bytes / predicted_comm_bytes of each step
        if config.compile:
            self.model = torch.compile(self.model)
        # decay the matrices (and embeddings) only, not biases and norm gains (GPT-2/nanoGPT practice)
        params = list(self.model.parameters())
        self.master = None
        if self._fp32_init is not None:                   # mixed-*: the optimizer steps the fp32 master copy
            self.master = MasterParams(list(dist_.unwrap(self.model).parameters()), self._fp32_init)
            params = self.master.params
        groups = [{"params": [p for p in params if p.ndim >= 2]},
                  {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
        self.optimizer = build_optimizer(config.optimizer, [g for g in groups if g["params"]], lr=config.lr,
                                         weight_decay=config.weight_decay)
        self.schedule = CosineWithWarmup(self.optimizer, config.warmup_steps, config.steps,
                                         min_lr_ratio=config.min_lr / config.lr)
        self.scaler = grad_scaler(config.precision, self.world.device)

    def _restore(self, path: Path, requested: TrainConfig) -> str | None:
        """Loads checkpoint `path` into every stateful piece (all ranks); None, or why it could not be loaded.

        Settings that may not change raise (check_resume); any failure to read the files is returned, so
        that the caller tries the previous checkpoint. A failed attempt leaves state that the next overwrites.
        """
        failed, state = None, None
        try:
            state = ckpt.load_trainer_state(path)
        except ckpt.CorruptCheckpointError as error:
            failed = str(error)
        if dist_.any_across(failed is not None, self.world):
            return failed or "it could not be loaded on another rank"
        self.config, self.resume_notes = check_resume(state["config"], requested, self.given, int(state["step"]))
        if state["format"] != self.fmt:
            raise TrainledgerError(f"--resume: checkpoint {path} was written with format "
                                   f"{state['format']!r} but this run needs {self.fmt!r} (--parallel)")
        try:
            if self.fmt == "full":
                dist_.unwrap(self.model).load_state_dict(state["model"])
            self.load_state_dict(state, path)
        except (Exception, CheckpointException) as error:       # DCP raises CheckpointException on every rank
            failed = ckpt.os_reason(error)
        if dist_.any_across(failed is not None, self.world):
            return failed or "it could not be loaded on another rank"
        self._continue_schedule()
        return None

    def _continue_schedule(self) -> None:
        """After a resume: the schedule and optimizer take this run's --lr, --min-lr, --warmup-steps, --steps.

        The cosine is recomputed over the new --steps from the checkpoint's step, so the lr continues at the
        new curve's value there (the same value when nothing changed).
        """
        config, schedule = self.config, self.schedule
        schedule.warmup_steps, schedule.total_steps = config.warmup_steps, config.steps
        schedule.min_lr_ratio = config.min_lr / config.lr
        schedule.base_lrs = [config.lr for _ in schedule.base_lrs]
        lr = config.lr * schedule._factor(schedule.last_epoch)
        for group in self.optimizer.param_groups:
            group["initial_lr"], group["lr"] = config.lr, lr
        schedule._last_lr = [lr for _ in self.optimizer.param_groups]

    # ----- state ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything a checkpoint needs to continue exactly (model and optimizer only for the 'full' format)."""
        state = {
            "format": self.fmt, "step": self.step, "tokens": self.tokens, "world_size": self.world.world_size,
            "config": self.config.to_dict(), "sampler": self.train_batches.state_dict(),
            "schedule": self.schedule.state_dict(), "scaler": self.scaler.state_dict() if self.scaler else None,
            "rng": rng_state_dict(), "recent_losses": list(self.recent_losses),
        }
        if self.fmt == "full":
            state["model"] = dist_.unwrap(self.model).state_dict()
            state["optimizer"] = self.optimizer.state_dict()
            if self.master is not None:
                state["master_params"] = self.master.state_dict()
        return state

    def load_state_dict(self, state: dict, path: Path) -> None:
        if self.fmt == "full":
            self.optimizer.load_state_dict(state["optimizer"])
            if self.master is not None:
                self.master.load_state_dict(state["master_params"])
        else:
            from trainledger.train.sharded import load_sharded
            load_sharded(self.model, self.optimizer, path / ckpt.SHARDED_DIR)
        self.schedule.load_state_dict(state["schedule"])
        if self.scaler is not None and state["scaler"]:
            self.scaler.load_state_dict(state["scaler"])
        self.train_batches.load_state_dict(state["sampler"])
        load_rng_state_dict(state["rng"])
        self.step, self.tokens = int(state["step"]), int(state["tokens"])
        self.recent_losses.clear()
        self.recent_losses.extend(float(v) for v in state.get("recent_losses", []))

    def save(self) -> Path | None:
        """Writes a checkpoint of the current step (every rank calls it); its path on rank 0.

        Rank 0 first checks the free space against the expected size. On any write error the partial
        temporary directory is deleted and every rank raises one TrainledgerError naming the path and the
        OS reason (exit 2).
        """
        checkpoint_dir = self.config.resolved_checkpoint_dir()
        tmp, problem = None, None
        if self.world.is_main:
            problem = self._space_problem(checkpoint_dir)
            if problem is None:
                try:
                    tmp = ckpt.begin(checkpoint_dir, self.step)
                except OSError as error:
                    problem = f"cannot create a checkpoint in {checkpoint_dir}: {ckpt.os_reason(error)}"
        tmp, problem = dist_.broadcast_object((str(tmp) if tmp else None, problem), self.world)
        if problem:
            raise TrainledgerError(problem)
        tmp, failure = Path(tmp), None
        if self.fmt == "dcp":
            from trainledger.train.sharded import save_sharded
            try:
                save_sharded(self.model, self.optimizer, tmp / ckpt.SHARDED_DIR)
            except (Exception, CheckpointException) as error:   # DCP gathers every rank's error: all ranks get here
                failure = ckpt.os_reason(error)
        final = None
        if self.world.is_main and failure is None:
            try:
                ckpt.write_trainer_state(tmp, self.state_dict())
                info = {"loss": self.last_loss, "loss_spike": self.last_loss_spike, "tokens": self.tokens,
                        "config": self.config.to_dict()}
                final = ckpt.commit(tmp, checkpoint_dir, self.step, self.fmt, info)
                ckpt.prune(checkpoint_dir, self.config.keep_checkpoints)
            except Exception as error:
                failure = ckpt.os_reason(error)
        failure = failure or dist_.broadcast_object(failure if self.world.is_main else None, self.world)
        if failure:
            if self.world.is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            raise TrainledgerError(f"could not write checkpoint {tmp}: {failure}; the partial directory was "
                                   f"deleted. {self._space_advice(checkpoint_dir)}")
        return final

    def _space_problem(self, checkpoint_dir: Path) -> str | None:
        """A one-line error when the free space in `checkpoint_dir` is below the expected checkpoint size."""
        refs = [r for r in ckpt.list_checkpoints(checkpoint_dir) if ckpt.read_manifest(r.path)]
        expected = ckpt.checkpoint_bytes(refs[-1].path) if refs else self.expected_checkpoint_bytes
        free = shutil.disk_usage(checkpoint_dir).free
        if free >= expected:
            return None
        return (f"not enough space to save the checkpoint of step {self.step} in {checkpoint_dir}: it needs about "
                f"{units.format_bytes(expected)}, {units.format_bytes(free)} free. {self._space_advice(checkpoint_dir)}")

    def _space_advice(self, checkpoint_dir: Path) -> str:
        keep = self.config.keep_checkpoints
        return (f"Keeping --keep-checkpoints {keep} needs room for {keep + 1} (the new one is written before the "
                f"oldest is deleted); free space, lower --keep-checkpoints, or pass another --checkpoint-dir "
                f"(then --resume)")

    # ----- one step ----------------------------------------------------------------------------------
    def _loss(self, x, y) -> torch.Tensor:
        with autocast(self.config.precision, self.world.device):
            if self.is_lm:
                _, loss = self.model(x, y)
            else:
                loss = torch.nn.functional.mse_loss(self.model(x.to(param_dtype(self.config.precision))).float(), y)
        return loss

    def train_step(self) -> dict:
        """One optimizer step over the global batch; {loss, grad_norm, lr, skipped}."""
        config, world, accum = self.config, self.world, self.config.grad_accum
        drawn = self.train_batches.draw(config.batch_size)
        first = world.dp_rank * self.per_rank
        loss_sum = torch.zeros((), device=world.device)
        if world.pp > 1:                                  # the 1F1B schedule runs the micro-batches
            x, y = self.train_batches.rows(drawn, first, first + self.per_rank, world.device)
            loss_sum = self.model.train_micro_batches(x, y)
        for a in range(accum if world.pp == 1 else 0):
            x, y = self.train_batches.rows(drawn, first + a * self.micro, first + (a + 1) * self.micro, world.device)
            dist_.set_grad_sync(self.model, a == accum - 1)
            with dist_.loss_context(world):               # loss_parallel under --tp
                loss = self._loss(x, y)
                if os.environ.get(FAULT_NAN_STEP_ENV) == str(self.step + 1):
                    loss = loss * float("nan")
                scaled = loss / accum
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            loss_sum += dist_.local(loss.detach().float())
        if world.pp > 1 and os.environ.get(FAULT_NAN_STEP_ENV) == str(self.step + 1):
            loss_sum = loss_sum * float("nan")
        loss_value = float(dist_.mean_across(loss_sum / accum, world))
        if not math.isfinite(loss_value):
            self.optimizer.zero_grad(set_to_none=True)
            self.model.zero_grad(set_to_none=True)        # the 16-bit grads of a master-copy recipe
            raise TrainingDiverged(f"loss is {loss_value} at step {self.step + 1}; stopped before updating the weights. "
                                   + self._last_good_advice())
        self.last_loss_spike = (len(self.recent_losses) > 0
                                and loss_value > SPIKE_FACTOR * statistics.median(self.recent_losses))
        self.last_loss = loss_value
        self.recent_losses.append(loss_value)
        if self.master is not None:
            self.master.to_master_grads()
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        grad_norm = self._clip()
        lr = self.optimizer.param_groups[0]["lr"]
        skipped = False
        if self.scaler:
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            skipped = self.scaler.get_scale() < scale      # inf/NaN grads: step skipped, scale halved
        else:
            self.optimizer.step()
        if self.master is not None:
            self.master.to_model()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step()
        self.step += 1
        self.tokens += config.batch_size * self.seq_len
        return {"loss": loss_value, "grad_norm": grad_norm, "lr": lr, "skipped": skipped}

    def _clip(self) -> float:
        """The global L2 norm of the gradient before clipping; clips to --grad-clip when set.

        Under FSDP the gradients are DTensor shards and the norm comes back as a DTensor: full_tensor()
        sums the squares across ranks.
        """
        params = [p for p in (self.master.params if self.master else self.model.parameters()) if p.grad is not None]
        max_norm = self.config.grad_clip if self.config.grad_clip is not None else math.inf
        if self.world.tp > 1 or self.world.pp > 1:
            return dist_.clip_grad_norm(params, max_norm, self.world)
        norm = clip_grad_norm_(params, max_norm)     # max_norm = inf: the scale is 1, nothing changes
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean loss over --eval-batches global batches of the held-out split (the same batches every time)."""
        self.model.eval()
        source, total = self.eval_source(), torch.zeros((), device=self.world.device)
        for _ in range(self.config.eval_batches):
            drawn = source.draw(self.config.batch_size)
            first = self.world.dp_rank * self.per_rank
            x, y = source.rows(drawn, first, first + self.per_rank, self.world.device)
            if self.world.pp > 1:
                total += self.model.eval_loss(x, y)
                continue
            with dist_.loss_context(self.world):
                total += dist_.local(self._loss(x, y).float())
        self.model.train()
        return float(dist_.mean_across(total / self.config.eval_batches, self.world))

    # ----- the run -----------------------------------------------------------------------------------
    def _last_good_advice(self) -> str:
        """Names the newest checkpoint whose loss was finite and not a spike, and how to resume from it."""
        refs = ckpt.list_checkpoints(self.config.resolved_checkpoint_dir())
        good, loss = ckpt.last_finite_checkpoint(refs)
        if good is None:
            return "No checkpoint with a finite loss to go back to: start again with a lower --lr or a --grad-clip"
        newer = [r for r in refs if r.step > good.step]
        spikes = all((ckpt.read_manifest(r.path) or {}).get("info", {}).get("loss_spike") for r in newer)
        delete = (f"delete the newer {', '.join(r.path.name for r in newer)}"
                  + (" (loss spikes), then " if spikes else " (no finite loss recorded), then ")) if newer else ""
        return (f"Last good checkpoint: {good.path} (loss {loss:.4f}); to continue from it, {delete}"
                "lower --lr or set --grad-clip and --resume")

    def _resume(self) -> Path | None:
        """With --resume, restores the newest checkpoint that loads; its path, or None for a fresh start.

        Rank 0 checks each candidate, newest first (sha256s, then probe(): trainer.pt loads, DCP metadata
        through the restricted unpickler, shard sizes); every rank then loads it. A checkpoint failing
        either step is reported on stderr and the previous one is tried; one naming foreign code is refused.
        """
        directory = self.config.resolved_checkpoint_dir()
        if not self.config.resume:
            refs = ckpt.list_checkpoints(directory)
            if refs:
                raise TrainledgerError(f"{directory} already holds checkpoints "
                                       f"(last: step {refs[-1].step}); pass --resume to continue that run, "
                                       "or choose another --out-dir/--checkpoint-dir")
            return None
        newest_first = [str(r.path) for r in reversed(ckpt.list_checkpoints(directory))] if self.world.is_main else None
        newest_first = dist_.broadcast_object(newest_first, self.world)
        if not newest_first:
            self.log(f"--resume: no checkpoint in {directory}; starting fresh")
            return None
        requested = self.config
        for path in map(Path, newest_first):
            problem, unsafe = None, None
            if self.world.is_main:
                fmt, problem = ckpt.verify(path)
                try:
                    if problem is None:
                        ckpt.probe(path, fmt)
                except ckpt.CorruptCheckpointError as error:
                    problem = f"{error} although its manifest matches"
                except ckpt.UnsafeCheckpointError as error:
                    unsafe = str(error)
            problem, unsafe = dist_.broadcast_object((problem, unsafe), self.world)
            if unsafe:
                raise ckpt.UnsafeCheckpointError(unsafe)
            problem = problem or self._restore(path, requested)
            if problem is None:
                return path
            if self.world.is_main:     # stderr, even --quiet
                print(f"warning: checkpoint {path} is corrupt: {problem}; trying the previous one", file=sys.stderr)
        # a fresh start would overwrite the metrics and, checkpoint by checkpoint, the old run: refuse
        raise TrainledgerError(f"--resume: every checkpoint in {directory} is corrupt (see the warnings above); "
                               "delete them to start fresh, or choose another --out-dir/--checkpoint-dir")

    def describe_plan(self) -> dict:
        """Predicted FLOPs per step and bytes per device (from trainledger.account), and the peak FLOP/s used for MFU."""
        config = self.config
        flops = flops_per_step(self.spec, config.batch_size, self.seq_len)
        memory = memory_per_gpu(self.spec, batch_size=self.micro, seq_len=self.seq_len, precision=config.precision,
                                optimizer=config.optimizer, zero=3 if config.parallel == "fsdp" and self.world.distributed else 0,
                                dp=self.world.dp_size, tp=self.world.tp, pp=self.world.pp, sp=config.sp)
        peak, source = peak_flops_per_s(self.world.device, get_recipe(config.precision).compute_dtype)
        return {"train_flops_per_step": flops["train_flops_per_step"], "memory": memory,
                "peak_flops_per_s": peak, "peak_source": source}

    def train(self) -> dict:
        """Runs to --steps (or until SIGTERM/SIGINT); a summary dict. Raises TrainingDiverged on NaN/Inf."""
        config, world = self.config, self.world
        if config.parallel != "none" and not world.distributed:
            self.log(f"--parallel {config.parallel}: one process (not launched by torchrun), so no data parallelism")
        lock = self._lock()
        try:
            return self._train()
        finally:
            ckpt.unlock_directory(lock)

    def _lock(self):
        """Rank 0 takes the checkpoint directory's lock; every rank raises if another trainer holds it."""
        lock, problem = None, None
        if self.world.is_main:
            try:
                lock = ckpt.lock_directory(self.config.resolved_checkpoint_dir())
            except TrainledgerError as error:
                problem = str(error)
        problem = dist_.broadcast_object(problem, self.world)
        if problem:
            raise TrainledgerError(problem)
        return lock

    def _train(self) -> dict:
        world = self.world
        self._build()
        resume_from = self._resume()
        config = self.config          # on --resume: with the checkpoint's values for settings not given
        if resume_from:
            self.log(f"resumed from {resume_from} at step {self.step} ({units.format_count(self.tokens)} tokens seen)")
            if self.resume_notes:
                lr = self.optimizer.param_groups[0]["lr"]
                self.log(f"--resume changed {', '.join(self.resume_notes)}; the schedule continues from step "
                         f"{self.step} on warmup {config.warmup_steps} + cosine from {config.lr:g} to {config.min_lr:g} "
                         f"ending at step {config.steps} (lr now {lr:.3g})")
        plan = self.describe_plan()
        memory = plan["memory"]
        # what one checkpoint holds: the parameters, master copies and optimizer states, whole (sharded: × ranks)
        self.expected_checkpoint_bytes = int((memory["params_bytes"] + memory.get("master_params_bytes", 0)
                                              + memory["optimizer_bytes"]) * (world.world_size if self.fmt == "dcp" else 1))
        self.log(f"model {self.spec.name}: {units.format_count(memory['n_params'])} parameters; "
                 f"{config.batch_size} × {self.seq_len} tokens per step (--global-batch-size {config.batch_size} = "
                 f"--batch-size {self.micro} × {world.dp_size} data-parallel rank{'s' if world.dp_size > 1 else ''} × "
                 f"{config.grad_accum} micro-batch{'es' if config.grad_accum > 1 else ''}) on {world.world_size} × {world.device.type}, "
                 f"precision {config.precision}, optimizer {config.optimizer}")
        self.log(f"predicted: {units.format_flops(plan['train_flops_per_step'])} FLOPs per step; memory per device "
                 f"{units.format_bytes(memory['total_bytes'])} (params {units.format_bytes(memory['params_bytes'])}, "
                 f"grads {units.format_bytes(memory['grads_bytes'])}, "
                 + (f"master {units.format_bytes(memory['master_params_bytes'])}, " if memory.get("master_params_bytes") else "")
                 + f"optimizer {units.format_bytes(memory['optimizer_bytes'])}, "
                 f"activations {units.format_bytes(memory['activations_bytes'])}); peak "
                 f"{units.format_rate(plan['peak_flops_per_s']) if plan['peak_flops_per_s'] else 'unknown'} ({plan['peak_source']})")
        metrics_path = config.resolved_metrics()
        writer = MetricsWriter(metrics_path, fresh=resume_from is None) if world.is_main else None
        progress = Progress(config.steps, self.step, enabled=world.is_main and not self.quiet)
        self.log = progress.print if world.is_main and not self.quiet else self.log
        old_handlers = _install_signal_handlers(self)
        if self.stop_signal is None and self.early_stop is not None:
            self.stop_signal = self.early_stop()     # caught before the handlers above were installed
        peak_all = plan["peak_flops_per_s"] * world.world_size if plan["peak_flops_per_s"] else None
        predicted = predicted_step(self.spec, micro_batch=self.micro, global_batch=config.batch_size, seq_len=self.seq_len,
                                   precision=config.precision, optimizer=config.optimizer, device=world.device,
                                   world_size=world.world_size, zero=3 if config.parallel == "fsdp" and world.distributed else 0,
                                   tp=config.tp, pp=config.pp)
        saved_at, started = None, time.perf_counter()
        try:
            while self.step < config.steps:
                peak_memory_bytes(world.device, reset=True)          # start this step's window (CUDA)
                with StepTimer(world.device) as timer, self.comm.counting():
                    out = self.train_step()
                seconds, step_flops = timer.seconds, plan["train_flops_per_step"]
                record = {"step": self.step, "loss": out["loss"], "lr": out["lr"], "grad_norm": out["grad_norm"],
                          "tokens": self.tokens, "step_time_s": seconds,
                          "predicted_step_time_s": predicted["step_seconds"] if predicted else None,
                          "tokens_per_s": config.batch_size * self.seq_len / seconds,
                          "flops_per_s": achieved_flops_per_s(step_flops, seconds),
                          "mfu": mfu(step_flops, seconds, peak_all),
                          "peak_memory_bytes": peak_memory_bytes(world.device), **self.comm.record()}
                if out["skipped"]:
                    record["skipped"] = True
                if config.eval_every and (self.step % config.eval_every == 0 or self.step == config.steps):
                    record["eval_loss"] = self.evaluate()
                if writer:
                    writer.write(record)
                progress.update(record)
                if os.environ.get(STEP_DELAY_ENV):
                    time.sleep(float(os.environ[STEP_DELAY_ENV]))
                stop = dist_.any_across(self.stop_signal is not None, world)
                if self.step % config.checkpoint_every == 0 or self.step == config.steps or stop:
                    saved_at = self.save()
                if stop:
                    self.log(f"received {self.stop_signal or 'a stop signal'}: checkpoint saved at step {self.step} "
                             f"({saved_at}); continue with --resume")
                    break
        finally:
            _restore_signal_handlers(old_handlers)
            progress.close()
            if writer:
                writer.close()
        summary = {"steps": self.step, "tokens": self.tokens, "seconds": time.perf_counter() - started,
                   "train_flops_per_step": plan["train_flops_per_step"], "peak_flops_per_s": plan["peak_flops_per_s"],
                   "predicted_memory_bytes": memory["total_bytes"], "peak_memory_bytes": peak_memory_bytes(world.device),
                   "stopped_by": self.stop_signal, "metrics": str(metrics_path), "checkpoint": str(saved_at) if saved_at else None,
                   "resumed_from": str(resume_from) if resume_from else None}
        if world.is_main:
            records = read_metrics(metrics_path)
            summary["final_loss"] = records[-1]["loss"] if records else None
            evals = [r["eval_loss"] for r in records if r.get("eval_loss") is not None]
            summary["final_eval_loss"] = evals[-1] if evals else None
            summary["step_time"] = step_time_gap(records, predicted)
            if config.plot and records:
                summary["loss_curve"] = str(plot_loss(records, Path(config.out_dir) / "loss.png", self.spec.name))
        return summary


def _check_output_paths(config: TrainConfig) -> None:
    """Creates the output directories, or raises a one-line error naming the flag whose path cannot be used."""
    metrics = config.resolved_metrics()
    for flag, directory in (("--out-dir", Path(config.out_dir)), ("--checkpoint-dir", config.resolved_checkpoint_dir()),
                            ("--metrics", metrics.parent)):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise TrainledgerError(f"{flag}: cannot use {directory} as a directory ({error.strerror or error})") from None
    if metrics.is_dir():
        raise TrainledgerError(f"--metrics {metrics} is a directory; give a file name such as {metrics / 'metrics.jsonl'}")


def _install_signal_handlers(trainer: Trainer) -> dict:
    """SIGTERM and SIGINT set a flag; the loop saves a checkpoint at the next step boundary and exits."""
    def handler(signum, frame):
        if trainer.stop_signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt      # a second Ctrl-C: stop now, without the checkpoint
        trainer.stop_signal = signal.Signals(signum).name
    old = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            old[sig] = signal.signal(sig, handler)
        except ValueError:      # not the main thread: signals cannot be caught here
            pass
    return old


def _restore_signal_handlers(old: dict) -> None:
    for sig, previous in old.items():
        signal.signal(sig, previous)
