"""`trainledger serve`: the interactive calculators in a browser, backed by a JSON API that runs the CLI's compute()."""

from __future__ import annotations

import argparse
import signal
import socket
from pathlib import Path

from trainledger.errors import TrainledgerError

HELP = "open the interactive calculators in a browser (JSON API at /api/<command>)"
DESCRIPTION = """\
Starts a local web server with eleven calculators on one page — training time, tensor layout, dtypes,
matmul, transformer parameters, memory budget, compute-optimal size, step time & layout, inference, the
largest model that fits, MFU of a measured throughput. Every number comes
from the same code as the command line: GET /api/<command>?flag=value returns what `trainledger <command>
--flag value --json` prints (e.g. /api/plan?params=70B&tokens=15T&gpu=h100&num-gpus=1024&mfu=0.5).

Models are presets, custom sizes (arch.* fields), a config.json POSTed in the body, or a file name from
--config-dir: never another path on the server. Requests must be addressed to the server (its host and port,
localhost, 127.0.0.1, [::1], or an --allow-host name). Query parameters are the flags of an allow-list (see
/api/schema). Heavy requests (layout searches, step) run in worker processes within a time budget (at most
--max-request-seconds) and 2 GiB of memory, and are stopped when their client disconnects; a request must
arrive within 10 s (slow clients are disconnected); answers never name a path of this machine; SIGTERM stops
the server within seconds.
Needs the optional extra: pip install 'trainledger[web]'

examples:
  trainledger serve                      # http://127.0.0.1:8000/
  trainledger serve --port 8080 --open   # and open it in the default browser
  trainledger serve --host 0.0.0.0 --allow-host box.lan --config-dir ~/configs   # others may use box.lan:8000
"""


def port_number(text: str) -> int:
    """A TCP port in 0..65535 (0 lets the system pick a free one)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number in 0..65535, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: %(default)s, this machine only; 0.0.0.0 for all)")
    parser.add_argument("--port", type=port_number, default=8000, help="TCP port (default: %(default)s)")
    parser.add_argument("--open", action="store_true", help="open the page in the default web browser")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="also answer requests whose Host header names NAME (e.g. this machine's DNS name); "
                             "repeatable. Other names are refused (421), against DNS rebinding")
    parser.add_argument("--config-dir", type=config_dir, metavar="DIR",
                        help="directory of Hugging Face config.json files the API may read by file name "
                             "(model=NAME.json); no other file of the server is ever read (symlinks leading out of "
                             "it are refused)")
    parser.add_argument("--max-request-seconds", type=seconds, default=30.0, metavar="S",
                        help="hard cap on the work of one request, in seconds of wall clock: heavy requests (layout "
                             "searches, step) run in a worker process that is killed when its budget (predicted from "
                             "its size, at most S) runs out or its client disconnects (default: %(default)g)")


def seconds(text: str) -> float:
    """A positive number of seconds, at most a day (for --max-request-seconds)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 86_400:
        raise argparse.ArgumentTypeError(f"must be a number of seconds in (0, 86400], got {text!r}")
    return value


def config_dir(text: str) -> Path:
    """An existing directory (for --config-dir)."""
    path = Path(text).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"must be an existing directory, got {text!r}")
    return path


def _web_modules():
    """(uvicorn, create_app), or a TrainledgerError telling how to install the optional extra."""
    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as error:
        raise TrainledgerError(f"`trainledger serve` needs FastAPI and uvicorn ({error.name} is missing): "
                               f"pip install 'trainledger[web]'") from None
    from trainledger.web.app import create_app
    return uvicorn, create_app


def listen(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free one); a TrainledgerError naming --port if taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise TrainledgerError(f"cannot listen on {host}:{port} ({error.strerror}); choose another --port "
                               f"(0 picks a free one) or --host") from None
    sock.listen(128)  # connections queue from here on, so the printed URL works at once
    return sock


def run(args) -> int:
    uvicorn, create_app = _web_modules()
    sock = listen(args.host, args.port)
    host = "127.0.0.1" if args.host in ("0.0.0.0", "") else "localhost" if args.host == "::" else args.host
    host = f"[{host}]" if ":" in host else host
    url = f"http://{host}:{sock.getsockname()[1]}/"
    print(f"trainledger calculators at {url}  (API: {url}api/health; Ctrl+C to stop)", flush=True)
    if args.open:
        import webbrowser
        webbrowser.open(url)
    app = create_app(host=args.host, port=sock.getsockname()[1], allow_hosts=tuple(args.allow_host),
                     config_dir=args.config_dir, max_request_seconds=args.max_request_seconds)
    from trainledger.web.slow_clients import DeadlineH11Protocol     # a request must arrive within seconds
    server = _server_class(uvicorn)(uvicorn.Config(app, log_level="warning", server_header=False, http=DeadlineH11Protocol,
                                                   timeout_graceful_shutdown=GRACE_SECONDS))
    # uvicorn re-raises the SIGTERM it caught once it has shut down; this handler turns it into a normal exit, so
    # that the exit handlers run (the private directory, the worker fork server's socket) instead of the default
    # action killing the process on the spot
    previous = signal.signal(signal.SIGTERM, _exit_quietly)
    try:
        server.run(sockets=[sock])
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        sock.close()
        from trainledger.web import guard, worker
        worker.stop_all()
        guard.STORE.close()
    return 0


GRACE_SECONDS = 3      # after SIGTERM, requests still running (light ones: milliseconds) get this long


class _Stopped(Exception):
    """SIGTERM after the server shut down: leave run() normally."""


def _exit_quietly(signum, frame):
    raise _Stopped


def _server_class(uvicorn):
    """uvicorn.Server that kills the heavy requests' worker processes as soon as a stop signal arrives, so
    that the graceful shutdown does not wait for a search to finish (web/worker.py)."""
    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame):
            from trainledger.web import worker
            worker.stop_all()
            super().handle_exit(sig, frame)
    return Server
