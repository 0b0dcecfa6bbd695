"""SIGTERM and SIGINT during training: finish the step, save a checkpoint, exit 0 (a second Ctrl-C stops at once)."""

from __future__ import annotations

import signal


def install_signal_handlers(trainer) -> dict:
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


def restore_signal_handlers(old: dict) -> None:
    for sig, previous in old.items():
        signal.signal(sig, previous)
