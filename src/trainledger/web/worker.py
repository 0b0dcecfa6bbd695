"""Heavy web requests run in a child process, so that they can be stopped: at the end of their time budget, when
their client disconnects, or when the server stops.

A thread cannot be cancelled in Python, and one layout search over a 10,000-layer model computes for many
minutes: run in the server's own threads it keeps a core busy after its client has gone, holds a heavy-request
slot, and keeps SIGTERM from stopping the server. Here each heavy request is one process forked from a
`multiprocessing` fork server that has already imported the API (a few milliseconds to start, no threads
copied), which runs `fn(*args)` and sends back its picklable result. The calling thread polls every POLL_SECONDS
and kills the process (SIGKILL) when

- the budget (seconds of wall clock, from guard.time_budget) has run out: WorkStopped("budget");
- `cancel` is set (the route saw the client disconnect): WorkStopped("disconnected");
- stop_all() was called (the server received SIGTERM or SIGINT): WorkStopped("shutdown").

As a second line, the child's CPU time is capped a little above its budget (RLIMIT_CPU): the kernel ends it
even if its parent were stuck. Its address space is capped at MEMORY_LIMIT_BYTES (RLIMIT_AS): a request that
would allocate more gets a MemoryError, which `fn` answers with a 503 (web/api.py `outcome`), or dies, which
run() reports as WorkStopped("died"), a 503 too; the server's own memory is never at stake. Work that raises
inside the child is the child's to report: `fn` returns an answer for errors too.
"""

from __future__ import annotations

import math
import multiprocessing
import resource
import threading
import time
import warnings

# A worker started from `python -m trainledger.cli.main serve` re-runs that module as __mp_main__ (multiprocessing's
# spawn preparation), and runpy warns that it is already imported: harmless (the module only defines functions and
# guards main() with __name__), so the warning is not printed for every request. Inherited through the fork server.
warnings.filterwarnings("ignore", message=r"'trainledger\.cli\.main' found in sys\.modules", category=RuntimeWarning)

POLL_SECONDS = 0.05
# Address space of one worker: the fork server's interpreter and API take ~60 MB of it, torch (`tensor --torch`)
# ~650 MB; the largest layout searches of the presets stay under 300 MB (tests/web/test_web_memory.py measures).
MEMORY_LIMIT_BYTES = 2 << 30
PRELOAD = ["trainledger.web.preload"]  # imported once by the fork server (the API, warmed), inherited by every worker

_lock = threading.Lock()
_live: set = set()
_stopping = threading.Event()
_context = None


class WorkStopped(Exception):
    """The work did not finish: `reason` is 'budget', 'disconnected', 'shutdown' or 'died' (killed by the kernel:
    out of CPU time or memory)."""

    def __init__(self, reason: str, seconds: float):
        super().__init__(f"{reason} after {seconds:.1f} s")
        self.reason, self.seconds = reason, seconds


def context():
    """The fork-server multiprocessing context, created (and its server started) on first use."""
    global _context
    with _lock:
        if _context is None:
            _context = multiprocessing.get_context("forkserver")
            _context.set_forkserver_preload(PRELOAD)
        return _context


def start() -> None:
    """Starts the fork server now (at server start), so that the first heavy request does not pay for it."""
    from multiprocessing import forkserver
    context()
    forkserver.ensure_running()
    _stopping.clear()


def _child(connection, fn, args, cpu_seconds: float, memory_bytes: int | None = None) -> None:
    limit = int(math.ceil(cpu_seconds)) + 1
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 1))    # SIGXCPU past `limit` seconds of CPU
    except (ValueError, OSError):
        pass
    memory = MEMORY_LIMIT_BYTES if memory_bytes is None else memory_bytes
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        cap = memory if hard == resource.RLIM_INFINITY else min(memory, hard)
        resource.setrlimit(resource.RLIMIT_AS, (cap, hard))            # MemoryError past `cap` bytes
    except (ValueError, OSError):
        pass
    connection.send(fn(*args))
    connection.close()


def run(fn, args: tuple, budget_seconds: float, cancel: threading.Event | None = None,
        memory_bytes: int | None = None):
    """fn(*args) computed in a child process of at most `memory_bytes` of address space (default
    MEMORY_LIMIT_BYTES); its result, or WorkStopped when stopped before it finished."""
    if _stopping.is_set():
        raise WorkStopped("shutdown", 0.0)
    ctx = context()
    receiver, sender = ctx.Pipe(duplex=False)
    process = ctx.Process(target=_child, args=(sender, fn, args, budget_seconds, memory_bytes), daemon=True)
    started = time.monotonic()
    with _lock:
        _live.add(process)
    try:
        process.start()
        sender.close()
        while True:
            answered = receiver.poll(POLL_SECONDS)
            elapsed = time.monotonic() - started
            if _stopping.is_set():              # checked first: stop_all() may have killed the child just now
                raise WorkStopped("shutdown", elapsed)
            if cancel is not None and cancel.is_set():
                raise WorkStopped("disconnected", elapsed)
            if answered:
                try:
                    return receiver.recv()
                except EOFError:               # the child died before it could answer
                    raise WorkStopped("died", elapsed) from None
            if elapsed > budget_seconds:
                raise WorkStopped("budget", elapsed)
            if not process.is_alive() and not receiver.poll(0):
                raise WorkStopped("died", elapsed)
    finally:
        if process.is_alive():
            process.kill()
        if process.pid is not None:
            process.join(timeout=5)
        receiver.close()
        with _lock:
            _live.discard(process)


def stop_all() -> int:
    """Kills every running worker and refuses new ones (the server is stopping); how many were killed."""
    _stopping.set()
    with _lock:
        running = [p for p in _live if p.is_alive()]
    for process in running:
        process.kill()
    return len(running)


def running() -> int:
    """Workers alive now (for tests and /api/health)."""
    with _lock:
        return sum(1 for p in _live if p.is_alive())
