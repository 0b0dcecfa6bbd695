"""How a run stops: SIGTERM and SIGINT finish the step, save a checkpoint and exit 0 (a second Ctrl-C stops at
once, exit 130); a rank whose launcher died stops the same way.

Under torchrun, SIGTERM or SIGINT to the launcher is forwarded to every rank, which stops as above (each prints
"stopped by SIGTERM ..., exit 0"); torchrun itself then exits 1 with its own SignalException traceback, which
is the launcher's behaviour, not the ranks'. SIGKILL to the launcher alone leaves the ranks running, orphaned:
the kernel re-parents them, so a rank compares os.getppid() with its launcher's pid at every step boundary and,
once it changed, stops with a checkpoint ("stopped by launcher exit"). The collectives of that last save run
between the ranks themselves (gloo/NCCL connections), not through the launcher.
"""

from __future__ import annotations

import os
import signal

# Environment variables torchrun's elastic agent sets in every worker it starts.
LAUNCHER_EXIT = "launcher exit"      # the stop_signal of a rank whose launcher died
LAUNCHER_ENV = ("TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT")


def install_signal_handlers(trainer) -> dict:
    """SIGTERM and SIGINT set a flag; the loop saves a checkpoint at the next step boundary and exits."""
    def handler(signum, frame):
        if trainer.stop_signal is not None and signum == signal.SIGINT:
            trainer.interrupted = True   # save() tells this from a write error, whatever torch wraps it in
            raise KeyboardInterrupt      # a second Ctrl-C: stop now, without the checkpoint
        trainer.stop_signal = signal.Signals(signum).name
    old = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            old[sig] = signal.signal(sig, handler)
        except ValueError:      # not the main thread: signals cannot be caught here
            pass
    return old


def restore_signal_handlers(old: dict) -> None:
    for sig, previous in old.items():
        signal.signal(sig, previous)


def parent_pid() -> int:
    return os.getppid()


def launcher_pid() -> int | None:
    """The pid of the torchrun agent that started this process (its parent), or None when torchrun did not."""
    if not any(name in os.environ for name in LAUNCHER_ENV):
        return None
    return parent_pid()


def launcher_gone(pid: int | None) -> bool:
    """Whether the launcher `pid` (from launcher_pid) has died: this process was re-parented (one getppid call)."""
    return pid is not None and parent_pid() != pid
