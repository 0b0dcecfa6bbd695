"""What the web server refuses, so that a page on another site, or a client on the network, can only ask it what the
calculators ask: numbers about presets and configs, never files of the host, never unbounded work.

- Host check (DNS rebinding: a page on evil.example whose name later resolves to 127.0.0.1 would otherwise read
  the API from the victim's browser): a request must name the server itself in its `Host` header, i.e. the host it
  was started with, localhost, 127.0.0.1 or [::1], each on the bound port, or a name given with `--allow-host`.
  When it listens on every interface (0.0.0.0, ::) an IP literal is accepted too, since a rebinding attack needs a
  DNS name. Anything else: 421 Misdirected Request.
- Models: a preset name, a config.json sent as the body of a POST (at most MAX_BODY_BYTES), or the file name of a
  config in the directory given with `serve --config-dir`. Any other value, a server path among them, gets one
  message that depends only on the value sent, so a file's existence cannot be learnt and no file is read.
- Custom configs (arch.* fields, POST bodies) are files in a private directory of this process (mkdtemp, mode 0700,
  removed at exit), at most MAX_STORED_CONFIGS of them, least recently used first out.
- Heavy work (layout searches, `step`, `mfu` with a model, `plan`/`optimal --mfu auto`, `tensor --torch`): sizes
  capped (HEAVY_CAPS), at most HEAVY_RUNNING at once and HEAVY_WAITING queued (for HEAVY_WAIT_SECONDS); past that,
  503 with Retry-After. Each runs in a worker process (worker.py) within a time budget that grows with its
  predicted cost (time_budget: candidate layouts × layers) up to a hard cap (MAX_REQUEST_SECONDS, `serve
  --max-request-seconds`), and is killed when the budget runs out (422), its client disconnects or the server
  stops (SIGTERM kills every worker at once).
- Query parameters: only the flags of web/flags.py's allow-list, by plain name.
"""

from __future__ import annotations

import atexit
import collections
import hashlib
import ipaddress
import json
import os
import re
import shutil
import socket
import stat
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.files import atomic_path

MAX_BODY_BYTES = 64 * 1024           # a Hugging Face config.json is 1-5 KB; the largest in the wild are ~30 KB
BODY_TOO_LARGE = f"request body over {MAX_BODY_BYTES:,} bytes (a config.json is a few KB)"   # the 413's message
MAX_CONFIG_FILE_BYTES = 1024 * 1024  # a file in --config-dir is stat()ed first; a larger one is refused unread
MAX_STORED_CONFIGS = 256             # custom configs kept in the private directory (each ~1 KB)
MAX_ARGV_HEADER_CHARS = 2048         # X-Trainledger-Argv is sent only when it fits: an echo must not grow headers
HEAVY_RUNNING = 2                    # heavy requests computing at once (the machine's cores stay free for the rest)
HEAVY_WAITING = 4                    # heavy requests waiting for a slot; more are answered 503 at once
HEAVY_WAIT_SECONDS = 10.0
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_HOSTS = ("0.0.0.0", "::", "")
# Caps on the flags of heavy requests: (flag, dest, largest value); with MAX_LAYOUT_CANDIDATES they bound a search
# to ~9 s on the loaded 2-core development machine (Mixtral 8x7B on 65,536 GPUs, 1,944 candidates, 8.8 s).
HEAVY_CAPS = (("--num-gpus", "num_gpus", 65_536), ("--global-batch-size", "global_batch_size", 65_536),
              ("--dp", "dp", 65_536), ("--batch-size", "batch_size", 65_536), ("--top", "top", 50),
              ("--seq-len", "seq_len", 1 << 24))
MAX_LAYOUT_CANDIDATES = 2_000  # layouts (tp, sp, cp, pp, dp, micro-batch) a search may enumerate: Llama-3.1-405B
# on 16,384 H100 has 832, GPT-3 175B on 64 A100 333; 55,440 GPUs (a number with 120 divisors) 2,974, ~8 s here
# Time budgets of heavy requests (time_budget): measured on the loaded 2-core development machine, the Mixtral
# 8x7B search above evaluates 1,944 candidates × 32 layers in 8.8 s: 1.4e-4 s per layer evaluation.
SECONDS_PER_LAYER_EVALUATION = 8.8 / (1_944 * 32)
BUDGET_MARGIN = 4.0            # room for a busier machine than the one measured
MIN_BUDGET_SECONDS = 10.0      # a `step` of a small model takes milliseconds; starting a worker, a few
MAX_REQUEST_SECONDS = 30.0     # the hard cap of any request's work (`serve --max-request-seconds`)
TORCH_TENSOR_MAX_BYTES = 16 * 1024 * 1024  # `tensor --torch` on a real device: 16 MiB (the CLI allows 256 MiB)
# Caps on arch.* fields: an absurd size answers 422 at once instead of an astronomically large answer
ARCH_MAX = {"d_model": 1 << 20, "n_layers": 10_000, "n_heads": 1 << 16, "n_kv_heads": 1 << 16, "d_ff": 1 << 22,
            "vocab_size": 1 << 24, "max_seq_len": 1 << 24}
CONFIG_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\.json")


class GuardError(TrainledgerError):
    """A request the web server refuses although the command line would run it; `status` is its HTTP status."""

    def __init__(self, message: str, flag: str | None = None, status: int = 422):
        super().__init__(message, flag)
        self.status = status


@dataclass
class WebSettings:
    """How one server was started: its address (for the Host check) and its --config-dir."""

    host: str = "127.0.0.1"
    port: int | None = 8000
    allow_hosts: tuple[str, ...] = ()
    config_dir: Path | None = None
    max_request_seconds: float = MAX_REQUEST_SECONDS
    heavy: "HeavyLimiter" = field(default_factory=lambda: HeavyLimiter())


# ---------- Host header ----------

def split_host(header: str) -> tuple[str, int | None]:
    """('name', port) of a Host header ('[::1]:8000' -> ('::1', 8000); no port -> (name, None)); ValueError if malformed."""
    header = header.strip()
    if header.startswith("["):
        name, _, rest = header[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else None
        if rest and port is None:
            raise ValueError(header)
    else:
        name, colon, port = header.rpartition(":") if header.count(":") == 1 else (header, "", None)
        if not colon:
            name, port = header, None
    if port is not None and not port.isdigit():
        raise ValueError(header)
    return name.lower().rstrip("."), (int(port) if port is not None else None)


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(header: str | None, settings: WebSettings) -> bool:
    """Whether a request with this Host header is addressed to this server (see the module docstring)."""
    if not header:
        return False
    try:
        name, port = split_host(header)
    except ValueError:
        return False
    if settings.port is not None and (port if port is not None else 80) != settings.port:
        return False
    bound = settings.host.strip("[]").lower()
    names = {*LOOPBACK_NAMES, bound, *(h.strip("[]").lower() for h in settings.allow_hosts)}
    if name in names:
        return True
    if bound in WILDCARD_HOSTS:
        return _is_ip(name) or name in (socket.gethostname().lower(), socket.getfqdn().lower())
    return False


class HostGuard:
    """ASGI middleware: 421 for a request whose Host is not this server (before any route runs), 413 for a
    declared body over MAX_BODY_BYTES."""

    def __init__(self, app, settings: WebSettings):
        self.app = app
        self.settings = settings

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if not host_allowed(headers.get("host"), self.settings):
            if scope["type"] == "websocket":  # none are served today; refuse before any handshake all the same
                return await send({"type": "websocket.close", "code": 1008})
            host = (headers.get("host") or "")[:80]
            message = (f"this server answers requests addressed to it (its own host and port, localhost, 127.0.0.1 "
                       f"or [::1]), not to Host {host!r}; start it with `trainledger serve --allow-host NAME` to "
                       f"allow another name")
            return await _send_json(send, 421, {"error": message, "detail": message, "flag": None, "param": None})
        length = headers.get("content-length", "0")
        if not length.isdigit() or int(length) > MAX_BODY_BYTES:
            return await _send_json(send, 413, {"error": BODY_TOO_LARGE, "detail": BODY_TOO_LARGE, "flag": None,
                                                "param": "config"})
        return await self.app(scope, receive, send)


async def _send_json(send, status: int, body: dict) -> None:
    data = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


# ---------- models: presets, the private store, --config-dir ----------

class ConfigStore:
    """config.json files written by this process, in a private directory created on first use and removed at exit;
    named by the hash of their content (equal configs share a file), at most `limit`, least recently used out."""

    def __init__(self, limit: int = MAX_STORED_CONFIGS):
        self.limit = limit
        self.folder: Path | None = None
        self.paths: collections.OrderedDict[str, Path] = collections.OrderedDict()
        self.lock = threading.Lock()

    def path_for(self, config: dict, kind: str = "custom") -> str:
        text = json.dumps(config, indent=2, sort_keys=True) + "\n"
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        with self.lock:
            if self.folder is None:
                self.folder = Path(tempfile.mkdtemp(prefix="trainledger-web-"))  # mode 0700: this user only
                atexit.register(self.close)
            path = self.folder / f"{kind}-{digest}.json"
            if digest not in self.paths or not path.exists():
                with atomic_path(path) as scratch:  # a reader never sees half a file
                    scratch.write_text(text)
            self.paths[digest] = path
            self.paths.move_to_end(digest)
            while len(self.paths) > self.limit:
                _, old = self.paths.popitem(last=False)
                old.unlink(missing_ok=True)
        return str(path)

    def close(self) -> None:
        with self.lock:
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
            self.paths.clear()


STORE = ConfigStore()


def _is_preset(value: str) -> bool:
    from trainledger.specs import PRESET_ALIASES, PRESETS
    key = value.strip().lower()
    return key in PRESETS or key in PRESET_ALIASES


def resolve_model(value: str, config_dir: Path | None) -> str:
    """The --model value to run for a model= query parameter: a preset unchanged, a file name of --config-dir as
    its path; anything else a GuardError whose message depends only on `value` (no file is looked at)."""
    if _is_preset(value):
        return value
    if config_dir is not None and CONFIG_NAME.fullmatch(value):
        path = config_file(config_dir, value)
        if path is not None and path.name == "config.json":    # would be named after the server's directory
            return _stored_copy(path)
        if path is not None:
            return str(path)
    from trainledger.specs import PRESETS
    where = "a file name from the server's --config-dir, " if config_dir is not None else ""
    shown = value if len(value) <= 80 else value[:77] + "..."
    raise GuardError(f"unknown model {shown!r} (--model). Known presets: {', '.join(PRESETS)}; the web server also "
                     f"takes {where}a custom model (arch.* fields) or a config.json sent as the body of a POST, "
                     f"never a path on the server", "--model")


def _stored_copy(path: Path) -> str:
    """A --config-dir file named config.json, as a copy in the private store (named config-<hash>.json): a
    config.json takes its model's name from its directory (specs/hf_config.py), here one of the server's. A file
    that is no JSON object is passed as it is, for the command's own one-line error."""
    from trainledger.files import read_regular_file
    try:
        config = json.loads(read_regular_file(path, "--model", MAX_CONFIG_FILE_BYTES))
    except (TrainledgerError, ValueError, RecursionError):
        return str(path)
    return STORE.path_for(config, "config") if isinstance(config, dict) else str(path)


def config_file(config_dir: Path, name: str) -> Path | None:
    """The real path of file `name` of --config-dir, or None (then answered like a missing file).

    Every symlink is resolved first, and the result must lie inside the (resolved) directory: `passwd.json ->
    /etc/passwd` is refused, a link to another config inside it is not. The resolved path is then opened with
    O_NOFOLLOW (a link swapped in meanwhile fails the open) and O_NONBLOCK (a FIFO does not block), and must be a
    regular file of at most MAX_CONFIG_FILE_BYTES; the command reads that resolved path. Someone who can write
    into --config-dir can still swap the file between this check and the read: the directory is trusted to its
    owner, and its files are never a way to reach others.
    """
    root = Path(os.path.realpath(config_dir))
    real = Path(os.path.realpath(root / name))
    if real == root or root not in real.parents:
        return None
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    return real if stat.S_ISREG(info.st_mode) and info.st_size <= MAX_CONFIG_FILE_BYTES else None


SPEC_MAX = {**ARCH_MAX, "d_head": 1 << 16, "n_experts": 1 << 16, "experts_per_token": 1 << 16}


def check_posted_spec(path: str) -> None:
    """GuardError when the model of a POSTed config is larger than the arch.* caps allow (10,000 layers, ...),
    whatever names its config.json uses; a config the loader refuses is left for compute() to report."""
    from trainledger.specs import get_model
    try:
        spec = get_model(path)
    except (TrainledgerError, ArithmeticError, RecursionError):
        return
    for name, largest in SPEC_MAX.items():
        value = getattr(spec, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > largest:
            raise GuardError(f"config: {name} must be at most {largest:,} on the web server, got {value:,} "
                             f"(the command line takes any size)", "config")


# Flags that name a file of the server: refused on the web whatever the value, so that no request can make the
# server open a path it chose (the command line reads them).
CLI_ONLY_FLAGS = {
    "calibration": "--calibration reads a calibration profile from a file of the machine it runs on: command-line "
                   "only (`trainledger step --calibration FILE`); the web server answers from the datasheets of "
                   "`trainledger hardware`",
}


def check_gpu(value: str) -> str:
    """`value` unchanged unless it names this machine's own device (`--gpu cpu`, `cuda[:N]`, `mps`), which the CLI
    describes by measuring the machine (`bench --calibrate`): work on the host, so command-line only."""
    keys = [part.strip().lower() for part in value.split(",")]  # matmul takes --gpu h100,a100
    if any(key in ("cpu", "mps", "cuda", "auto") or key.startswith("cuda:") for key in keys):
        raise GuardError(f"--gpu {value!r} means this machine's device, measured by `trainledger bench --calibrate`: "
                         f"command-line only; the web server answers for the GPUs of `trainledger hardware`", "--gpu")
    return value


def config_from_body(data: bytes) -> dict:
    """The config.json object of a POST body: {"config": {...}} or the config itself."""
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as error:  # RecursionError: [[[[... nested deep
        raise GuardError(f"the request body must be a JSON object (a Hugging Face config.json), got invalid JSON "
                         f"({str(error)[:80]})", "config") from None
    if isinstance(body, dict) and isinstance(body.get("config"), dict):
        body = body["config"]
    if not isinstance(body, dict) or not body:
        raise GuardError("the request body must be a JSON object (a Hugging Face config.json) or {\"config\": {...}}",
                         "config")
    return body


# ---------- heavy work ----------

class HeavyLimiter:
    """At most `running` heavy requests computing and `waiting` more queued; the rest get GuardError 503."""

    def __init__(self, running: int = HEAVY_RUNNING, waiting: int = HEAVY_WAITING,
                 wait_seconds: float = HEAVY_WAIT_SECONDS):
        self.admitted = threading.BoundedSemaphore(running + waiting)
        self.slots = threading.BoundedSemaphore(running)
        self.wait_seconds = wait_seconds

    def run(self, work):
        if not self.admitted.acquire(blocking=False):
            raise GuardError("the server is busy with other heavy requests (layout searches, step, torch); "
                             "try again in a few seconds", status=503)
        try:
            if not self.slots.acquire(timeout=self.wait_seconds):
                raise GuardError(f"the server is busy: no heavy-request slot freed within {self.wait_seconds:g} s; "
                                 "try again in a few seconds", status=503)
            try:
                return work()
            finally:
                self.slots.release()
        finally:
            self.admitted.release()


def is_heavy(command: str, args) -> bool:
    """Whether `trainledger <command>` with these parsed args runs a layout search, a step prediction or torch."""
    if command in ("layout", "step"):
        return True
    if command == "mfu":
        return getattr(args, "model", None) is not None
    if command in ("plan", "optimal"):
        return getattr(args, "mfu", None) == "auto"
    if command == "tensor":
        return bool(getattr(args, "torch", False))
    return False


def check_heavy_caps(command: str, args) -> None:
    """GuardError (422, naming the flag) when a heavy request asks for more than the web server computes."""
    for flag, dest, largest in HEAVY_CAPS:
        value = getattr(args, dest, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > largest:
            raise GuardError(f"{flag} is at most {largest:,} on the web server for `{command}`, got {value:,}; "
                             f"the command line `trainledger {command}` takes more", flag)


def heavy_cost(command: str, args) -> tuple[int, int]:
    """(candidate layouts, layers of the model) of a heavy request: the cost the guard admits it on and the time
    budget grows with. Candidates are those account.planning.layout.candidates enumerates, counted up to
    MAX_LAYOUT_CANDIDATES + 1 (a few ms); `optimal --mfu auto` searches up to 6 times, for GPT-style models of the
    size its budget makes optimal (counted: the first, × 6). 0 candidates when the request does not search; (0, 0)
    when its flags are bad (compute() then says why)."""
    import itertools

    from trainledger.account.planning.layout import candidates
    from trainledger.cli import common
    from trainledger.cli.plan import load_transformer

    if command == "tensor" or getattr(args, "model", None) is None and command not in ("optimal", "plan"):
        return 0, 0
    try:
        gpu = common.apply_hardware_flags(common.resolve_gpu(args.gpu), args)
        if command == "optimal":  # the model of its first search (at MFU 0.5); the later ones differ little
            from trainledger.account.planning.plan import budget_flops, compute_optimal
            from trainledger.cli.optimal import gpt_like
            budget = budget_flops(args.num_gpus, args.days, gpu.peak(args.dtype), 0.5)
            spec = gpt_like(compute_optimal(budget, args.law, args.tokens_per_param)["n_params"], args.seq_len)
            seq_len, searches = args.seq_len, 6
        else:
            spec, seq_len = load_transformer(args.model, args.seq_len)
            searches = 1
    except (TrainledgerError, ArithmeticError, TypeError, AttributeError):
        return 0, 0
    n_layers = int(getattr(spec, "n_layers", 1) or 1)
    if command not in ("layout", "mfu", "plan", "optimal") or getattr(args, "num_gpus", None) is None:
        return 0, n_layers
    global_batch = getattr(args, "global_batch_size", None) if command in ("layout", "plan") else None
    found = candidates(spec, args.num_gpus, global_batch or args.num_gpus, seq_len, gpu.gpus_per_node)
    return searches * sum(1 for _ in itertools.islice(found, MAX_LAYOUT_CANDIDATES + 1)), n_layers


def layout_candidates(command: str, args) -> int:
    """How many layouts the request's search enumerates (heavy_cost's first number)."""
    return heavy_cost(command, args)[0]


def check_layout_candidates(command: str, args, count: int | None = None) -> None:
    """GuardError naming --num-gpus when the search would enumerate more than MAX_LAYOUT_CANDIDATES layouts."""
    if command not in ("layout", "mfu", "plan", "optimal"):
        return
    count = layout_candidates(command, args) if count is None else count
    if count > MAX_LAYOUT_CANDIDATES:
        batch = " (with --global-batch-size)" if command in ("layout", "plan") else ""
        raise GuardError(f"--num-gpus {args.num_gpus:,}{batch} gives over {MAX_LAYOUT_CANDIDATES:,} layouts to search, "
                         f"the web server's limit; a GPU count with fewer divisors (e.g. a power of two) gives fewer, "
                         f"and the command line `trainledger {command}` searches any", "--num-gpus")


def time_budget(candidates: int, n_layers: int, cap_seconds: float = MAX_REQUEST_SECONDS) -> float:
    """Seconds of wall clock a heavy request may compute for: BUDGET_MARGIN × its predicted time, at least
    MIN_BUDGET_SECONDS, at most `cap_seconds` (the hard cap, `serve --max-request-seconds`).

    Predicted time = max(1, candidates) × n_layers × SECONDS_PER_LAYER_EVALUATION: a search evaluates each
    candidate layout layer by layer. This is the guard's own cost measure, not a promise: the time of one
    evaluation grows faster than linearly with depth for some models, which the cap then bounds.
    """
    predicted = max(candidates, 1) * max(n_layers, 1) * SECONDS_PER_LAYER_EVALUATION
    return min(cap_seconds, max(MIN_BUDGET_SECONDS, BUDGET_MARGIN * predicted))


def check_torch_tensor(storage_bytes: int, device: str) -> None:
    """GuardError for `tensor --torch` on a real device over TORCH_TENSOR_MAX_BYTES (meta allocates nothing)."""
    if device != "meta" and storage_bytes > TORCH_TENSOR_MAX_BYTES:
        raise GuardError(f"--torch on {device} would allocate {storage_bytes:,} bytes; the web server builds tensors "
                         f"of at most {TORCH_TENSOR_MAX_BYTES:,} bytes (16 MiB) — use --device meta, a smaller "
                         f"--shape, or the command line", "--torch")


def check_arch_int(name: str, text: str) -> int:
    """The value of arch.<name> as a positive int within ARCH_MAX; GuardError naming the field otherwise."""
    param = f"arch.{name}"
    text = text.strip()
    if not re.fullmatch(r"\d{1,12}", text) or int(text) <= 0:
        if re.fullmatch(r"\d{13,}", text):
            raise GuardError(f"{param} must be at most {ARCH_MAX[name]:,} on the web server, got {text[:20]}...", param)
        raise GuardError(f"{param} must be a positive integer, got {text[:40]!r}", param)
    value = int(text)
    if value > ARCH_MAX[name]:
        raise GuardError(f"{param} must be at most {ARCH_MAX[name]:,} on the web server, got {value:,} "
                         f"(the command line takes any size in a config.json)", param)
    return value


def response_headers(status: int, argv: list[str] | None) -> dict[str, str]:
    """X-Trainledger-Argv (the argv that ran; left out when it would pass MAX_ARGV_HEADER_CHARS, since it echoes
    the query) and, on a 503, Retry-After."""
    headers = {"Retry-After": "5"} if status == 503 else {}
    text = json.dumps(argv) if argv else ""
    if text and len(text) <= MAX_ARGV_HEADER_CHARS:
        headers["X-Trainledger-Argv"] = text
    return headers
