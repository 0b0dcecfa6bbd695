"""Native log lines that say nothing to a user, dropped from standard error while a block runs.

torch's profiler (Kineto) writes two lines straight to file descriptor 2 each time a profile starts and stops
("USDT:<date> <pid>:<tid> SyncActivityProfilerHandler.cpp:52] profiler_start", then "...profiler_stop"):
trace points for a system tracer, not messages, and no environment variable of torch 2.13 turns them off.
`dropping_native_lines` points descriptor 2 at a temporary file for the block and, after it, writes back every
line that does not match, in order, so nothing else written meanwhile (a warning, a C++ error) is lost.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

KINETO_TRACE_POINT = re.compile(rb"^USDT:\S+ \S+ \S+ \w+\.cpp:\d+\] profiler_(start|stop)\s*$")


@contextlib.contextmanager
def dropping_native_lines(pattern: re.Pattern = KINETO_TRACE_POINT):
    """Within the block, lines on file descriptor 2 matching `pattern` (bytes) are dropped, the rest kept."""
    try:
        saved = os.dup(2)
    except OSError:              # no descriptor 2 (a daemon): nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as buffer:
        sys.stderr.flush()
        os.dup2(buffer.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            buffer.seek(0)
            kept = [line for line in buffer.read().splitlines(keepends=True) if not pattern.match(line)]
            if kept:
                sys.stderr.flush()
                os.write(2, b"".join(kept))
