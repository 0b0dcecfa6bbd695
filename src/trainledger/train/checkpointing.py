"""Checkpoint side of the Trainer: what a checkpoint holds, writing it, and resuming from the newest good one.

`Checkpointing` is mixed into train.loop.Trainer; it uses the Trainer's model, optimizer, schedule, scaler,
sampler, counters, config and world. The files themselves (atomic writes, manifests, verification, pruning,
the directory lock) are train/checkpoint.py's; this module decides when and what.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from trainledger import units
from trainledger.errors import TrainledgerError
from trainledger.train import checkpoint as ckpt
from trainledger.train import distributed as dist_
from trainledger.train import finetune
from trainledger.train.config import FIELDS, TrainConfig, _coerce, check_resume, replace, validate
from trainledger.train.metrics import recorded_steps
from trainledger.train.rng import load_rng_state_dict, rng_state_dict
from trainledger.train.runlock import RunLocks, lock_run
from trainledger.train.safe_dcp import CheckpointException

TRAINER_NAME = ckpt.TRAINER_FILE


class Checkpointing:
    """state_dict/load_state_dict of a whole run, save(), and the --resume search (newest checkpoint that loads)."""

    def state_dict(self) -> dict:
        """Everything a checkpoint needs to continue exactly (model and optimizer only for the 'full' format)."""
        state = {
            "format": self.fmt, "step": self.step, "tokens": self.tokens, "world_size": self.world.world_size,
            "config": self.config.to_dict(), "sampler": self.train_batches.state_dict(),
            "schedule": self.schedule.state_dict(), "scaler": self.scaler.state_dict() if self.scaler else None,
            "rng": rng_state_dict(), "recent_losses": list(self.recent_losses),
        }
        if self.fmt == "full":     # a fine-tuning run: its adapters and the identity of its base (train/finetune.py)
            model = dist_.unwrap(self.model)
            state["model"] = finetune.model_state(model) if self.tuned else model.state_dict()
            if self.tuned:
                state["base"] = self.base_identity
            state["optimizer"] = self.optimizer.state_dict()
            if self.master is not None:
                state["master_params"] = self.master.state_dict()
        return state

    def state_problem(self, state: dict, path: Path) -> str | None:
        """Why a loaded trainer.pt cannot be this run's state, or None: every key state_dict() writes, each of its
        type, a saved config whose values have the types of the fields. Its sha256 may match (a forged or
        hand-edited file): then the previous checkpoint is used, as for damage."""
        expected = {"format": str, "step": int, "tokens": int, "world_size": int, "config": dict, "sampler": dict,
                    "schedule": dict, "scaler": (dict, type(None)), "rng": dict, "recent_losses": list}
        if not isinstance(state, dict):
            return f"{TRAINER_NAME} holds {type(state).__name__}, not a trainer state"
        if state.get("format") == "full":       # another format than this run's is refused by _restore, by name
            expected.update(model=dict, optimizer=dict)
            if self.master is not None:
                expected["master_params"] = (dict, list)
        for key, kind in expected.items():
            if key not in state:
                return f"{TRAINER_NAME} has no {key!r} entry"
            value = state[key]
            if not isinstance(value, kind) or (kind is int and (isinstance(value, bool) or value < 0)):
                return f"{TRAINER_NAME} has {key} = {value!r:.40}, of the wrong type"
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in state["recent_losses"]):
            return f"{TRAINER_NAME} has recent_losses that are not numbers"
        try:
            validate(replace(TrainConfig(), **{name: _coerce(name, value) for name, value in state["config"].items()
                                               if name in FIELDS}))
        except TrainledgerError as error:
            return f"{TRAINER_NAME} records a config with {error}"
        return None

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

        Rank 0 first deletes checkpoints beyond --keep-checkpoints K (there are more after a resume with a lower
        K: the advice of a full disk), then checks the free space against the expected size. On any write error
        the partial temporary directory is deleted and every rank raises one TrainledgerError naming the path and
        the OS reason (exit 2). A second Ctrl-C during the write is an interrupt, not a write error: the partial
        directory is deleted and KeyboardInterrupt propagates (exit 130), with no advice about disk space.
        """
        checkpoint_dir = self.config.resolved_checkpoint_dir()
        tmp, problem = None, None
        if self.world.is_main:
            try:
                ckpt.prune(checkpoint_dir, self.config.keep_checkpoints)
            except OSError as error:
                problem = f"cannot delete old checkpoints in {checkpoint_dir}: {ckpt.os_reason(error)}"
            problem = problem or self._space_problem(checkpoint_dir)
            if problem is None:
                try:
                    tmp = ckpt.begin(checkpoint_dir, self.step)
                except OSError as error:
                    problem = f"cannot create a checkpoint in {checkpoint_dir}: {ckpt.os_reason(error)}"
        tmp, problem = dist_.broadcast_object((str(tmp) if tmp else None, problem), self.world)
        if problem:
            raise TrainledgerError(problem)
        tmp, failure = Path(tmp), None
        try:
            final, failure = self._write(tmp, checkpoint_dir)
        except BaseException:            # KeyboardInterrupt (a second Ctrl-C) raised outside torch's writer
            if self.world.is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        failure = failure or dist_.broadcast_object(failure if self.world.is_main else None, self.world)
        if failure:
            if self.world.is_main:
                shutil.rmtree(tmp, ignore_errors=True)
            if getattr(self, "interrupted", False):    # torch turned the KeyboardInterrupt into a write error
                raise KeyboardInterrupt
            raise TrainledgerError(f"could not write checkpoint {tmp}: {failure}; the partial directory was "
                                   f"deleted. {self._space_advice(checkpoint_dir)}")
        return final

    def _write(self, tmp: Path, checkpoint_dir: Path) -> tuple[Path | None, str | None]:
        """Writes the files into `tmp` and commits it (rank 0); (final path, None) or (None, why it failed)."""
        failure, final = None, None
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
                self.locks.mark_checkpointed()
                ckpt.prune(checkpoint_dir, self.config.keep_checkpoints)
            except Exception as error:
                failure = ckpt.os_reason(error)
        return final, failure

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

    def _restore(self, path: Path, requested: TrainConfig) -> str | None:
        """Loads checkpoint `path` into every stateful piece (all ranks); None, or why it could not be loaded.

        Settings that may not change raise (check_resume); any failure to read the files is returned, so
        that the caller tries the previous checkpoint. A failed attempt leaves state that the next overwrites.
        """
        failed, state = None, None
        try:
            state = ckpt.load_trainer_state(path)
            failed = self.state_problem(state, path)
        except ckpt.CorruptCheckpointError as error:
            failed = str(error)
        if dist_.any_across(failed is not None, self.world):
            return failed or "it could not be loaded on another rank"
        self.config, self.resume_notes = check_resume(state["config"], requested, self.given, state["step"])
        if state["format"] != self.fmt:
            raise TrainledgerError(f"--resume: checkpoint {path} was written with format "
                                   f"{state['format']!r} but this run needs {self.fmt!r} (--parallel)")
        if self.tuned:           # the adapters were trained on this base, or the resume is refused
            finetune.check_base(state.get("base"), self.base_identity)
        try:
            if self.fmt == "full" and self.tuned:
                finetune.load_model_state(dist_.unwrap(self.model), state["model"])
            elif self.fmt == "full":
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

    def _last_good_advice(self) -> str:
        """Names the newest checkpoint whose loss was finite and not a spike, and how to resume from it."""
        refs = ckpt.list_checkpoints(self.config.resolved_checkpoint_dir())
        good, loss = ckpt.last_finite_checkpoint(refs)
        if good is None:
            return "No checkpoint with a finite loss to go back to: start again with a lower --lr or a --grad-clip"
        newer = [r for r in refs if r.step > good.step]
        spikes = all(ckpt.manifest_info(r.path).get("loss_spike") for r in newer)
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
            self._refuse_to_overwrite_metrics(directory)
            return None
        newest_first = [str(r.path) for r in reversed(ckpt.list_checkpoints(directory))] if self.world.is_main else None
        newest_first = dist_.broadcast_object(newest_first, self.world)
        if not newest_first:
            self._refuse_to_overwrite_metrics(directory)
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

    def _refuse_to_overwrite_metrics(self, directory: Path) -> None:
        """A fresh start truncates --metrics: refused (every rank) when it holds records of a run other than the
        last one in this checkpoint dir (a run killed before its first checkpoint starts again as before)."""
        problem = None
        if self.world.is_main:
            metrics = self.config.resolved_metrics()
            steps = recorded_steps(metrics)
            own = self.locks.previous_metrics == str(metrics.resolve()) and not self.locks.previous_checkpointed
            if steps and not own:      # another run's, or this checkpoint dir's finished run whose checkpoints were deleted
                problem = (f"{'--resume: no' if self.config.resume else 'no'} checkpoint in {directory}, but {metrics} "
                           f"holds steps {steps[0]}-{steps[1]} of a run; starting fresh would overwrite them. Check "
                           "--checkpoint-dir and --out-dir (to continue that run, --resume with its checkpoint "
                           f"directory), or move {metrics} away (or pass another --metrics) to start afresh")
        problem = dist_.broadcast_object(problem, self.world)
        if problem:
            raise TrainledgerError(problem)

    def _lock(self) -> RunLocks:
        """Rank 0 locks the run (checkpoint dir, out-dir, --metrics file: train/runlock.py); every rank
        raises if another trainer holds one of them. The locks (none on other ranks), released by unlock_all()."""
        locks, problem = RunLocks(), None
        if self.world.is_main:
            config = self.config
            try:
                locks = lock_run(Path(config.out_dir), config.resolved_checkpoint_dir(), config.resolved_metrics())
            except TrainledgerError as error:
                problem = str(error)
        problem = dist_.broadcast_object(problem, self.world)
        if problem:
            raise TrainledgerError(problem)
        return locks
