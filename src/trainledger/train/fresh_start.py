"""What a trainer's start creates, so that a refused start takes it back (issue 41, small things).

`train --precision fp8-cs` on a CPU is refused after the output directories are made and locked: it left
`run/.lock`, `run/checkpoints/.lock` and an empty `run/metrics.jsonl` behind (and every parent directory it had
made), so the next look at `runs/` showed a run that never ran. StartPaths notes, before anything is made, which
of the run's directories and files do not exist yet; undo() removes them again:

- a directory this start created (the topmost of those missing on the way to --out-dir, --checkpoint-dir and
  the --metrics file's folder) goes with all it holds: nothing else wrote there, the run held its lock
  throughout (train/runlock.py), and the refusal came before a step ran;
- in a directory that was there before, only the files this start created: its `.lock` files, `run.toml`, and
  the metrics file while it is still empty (a record in it is kept). Links are never followed or removed
  through.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.files import check_output, matplotlib_png_problem
from trainledger.train.runlock import LOCK_FILE


def _missing_top(directory: Path) -> Path | None:
    """The topmost missing directory on the way to `directory` (itself included), None when it exists."""
    top = None
    for path in [directory, *directory.parents]:
        if os.path.lexists(path):
            break
        top = path
    return top


class StartPaths:
    """The directories and files of a run (its TrainConfig) that do not exist before it starts."""

    def __init__(self, config):
        self.config = config
        out_dir, checkpoint_dir = Path(config.out_dir).absolute(), Path(config.resolved_checkpoint_dir()).absolute()
        self.metrics = Path(config.resolved_metrics()).absolute()
        tops = {_missing_top(d) for d in (out_dir, checkpoint_dir, self.metrics.parent)} - {None}
        self.dirs = sorted(tops)
        self.files = [f for f in (out_dir / LOCK_FILE, checkpoint_dir / LOCK_FILE, self.metrics, out_dir / "run.toml")
                      if not os.path.lexists(f) and not any(d in f.parents for d in self.dirs)]

    def make(self, lock):
        """Creates the run's directories (check_output_paths), then takes its locks: `lock()`'s value. A refusal on
        the way takes back what was made, unless another trainer holds the run (its files are its own)."""
        try:
            check_output_paths(self.config)
            return lock()
        except BaseException as error:
            if not getattr(error, "held_by_another", False):    # train/runlock.py _busy
                self.undo()
            raise

    def undo(self) -> None:
        """Removes what the start created (module docstring); what cannot be removed is left, silently."""
        for path in self.files:
            try:
                info = os.lstat(path)
                if stat.S_ISREG(info.st_mode) and (path != self.metrics or info.st_size == 0):
                    os.unlink(path)
            except OSError:
                pass
        for directory in self.dirs:
            try:
                if stat.S_ISDIR(os.lstat(directory).st_mode):
                    shutil.rmtree(directory)
            except OSError:
                pass


def check_output_paths(config) -> None:
    """Creates the output directories, or raises a one-line error naming the flag whose path cannot be used."""
    metrics = config.resolved_metrics()
    if config.plot:           # before any work: a loss.png there that trainledger did not write is never replaced
        check_output(Path(config.out_dir) / "loss.png", "--out-dir", "a loss curve", matplotlib_png_problem)
    for flag, directory in (("--out-dir", Path(config.out_dir)), ("--checkpoint-dir", config.resolved_checkpoint_dir()),
                            ("--metrics", metrics.parent)):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise TrainledgerError(f"{flag}: cannot use {directory} as a directory ({error.strerror or error})") from None
    if metrics.is_dir():
        raise TrainledgerError(f"--metrics {metrics} is a directory; give a file name such as {metrics / 'metrics.jsonl'}")
