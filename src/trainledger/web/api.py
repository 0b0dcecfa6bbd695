"""The JSON API behind the web page: `GET /api/<command>?flag=value` answers exactly what
`trainledger <command> --flag value --json` prints, because it runs the same `trainledger.cli.main.compute`.

Query parameters map to the command's flags: `seq-len=2048` (or `seq_len=2048`) becomes `--seq-len=2048`.
Boolean flags take true/false (`flash=false` becomes `--no-flash` for a `--flash/--no-flash` pair);
a repeated parameter repeats the flag; a parameter named like a positional argument fills it
(several values: repeat it or separate them with spaces). Unknown parameters reach argparse unchanged, so
the message is the one the command line prints.

Models (web/guard.py): `model=` takes a preset or the file name of a config in `serve --config-dir`, never a
server path. Custom transformers: parameters `arch.<field>` (family, d_model, n_layers, n_heads, n_kv_heads, d_ff,
vocab_size, max_seq_len, tied) describe a model that is written as a Hugging Face config.json in the server's
private directory (`custom_config_path`) and passed as `--model PATH`, the way a user would on the command line;
so is a config.json sent as the body of a `POST /api/<command>`.

Bad input answers HTTP 422 with {"error": message, "detail": message, "flag": "--seq-len", "param": "seq-len"},
the message being the one line the CLI prints after `error: `. There are no formulas here.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import re
import threading
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from trainledger import __version__
from trainledger.cli import main as cli
from trainledger.cli.common import json_ready
from trainledger.errors import TrainledgerError
from trainledger.web import guard, paths, worker
from trainledger.web.flags import REFUSED, flag_name
from trainledger.web.flags import allowed as web_allowed

TRUE_WORDS = {"", "1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off"}
ARCH_PREFIX = "arch."
ARCH_FAMILIES = ("llama", "gpt2")
ARCH_INT_FIELDS = ("d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "vocab_size", "max_seq_len")
IGNORED_PARAMS = {"json", "_"}  # `_` lets a caller bust caches; --json is implied
# Commands that do work on this machine rather than answer from specs: `bench` allocates size² matrices and
# `measure` builds and steps a model, so one query (`/api/measure?model=llama-2-7b`) could exhaust the server's
# memory. The page is a calculator: they stay command-line only.
# `checkpoints` reads a directory of the machine it runs on: never for a web client.
WORK_COMMANDS = frozenset({"bench", "measure", "profile", "train", "tour", "tokenize", "checkpoints"})
# Exceptions that only bad input raises inside a command (a number too large for a float, a 400-character
# "file name"): 422 like any bad input, with the CLI's own one line. Anything else is a bug: 500.
INPUT_EXCEPTIONS = (ArithmeticError, OSError)
DISCONNECT_POLL_SECONDS = 0.1   # how often a route looks for its client's disconnect while the answer is computed

router = APIRouter(prefix="/api")


class ApiError(TrainledgerError):
    """Bad query parameters that never reach argparse (an `arch.*` field, a boolean that is not true/false, a name
    outside the allow-list); `param` is the query parameter to show it beside, when it is not a flag's."""

    def __init__(self, message: str, flag: str | None = None, param: str | None = None):
        super().__init__(message, flag)
        self.param = param


def _not_allowed(command: str, name: str, value: str, parser, web_flags, action) -> TrainledgerError:
    """The 422 for a flag name outside web/flags.py's allowed(command): a refused flag says why; an unknown one gets
    the command line's own "unrecognized arguments" line (with its "did you mean")."""
    flag = "--" + name
    if action is not None and action.dest in guard.CLI_ONLY_FLAGS:     # a flag naming a file of the server
        return ApiError(guard.CLI_ONLY_FLAGS[action.dest], flag)
    if isinstance(action, (argparse._HelpAction, argparse._VersionAction)) or name in REFUSED:
        reason = REFUSED.get(name, "prints and exits instead of answering")
        return ApiError(f"{flag} is not a query parameter of the web server ({reason})", flag)
    if action is not None:
        return ApiError(f"{flag} is not a query parameter of the web server for `{command}` (command line only); "
                        f"the parameters it takes are at /api/schema", flag)
    close = cli.suggest(flag, ["--" + known for known in sorted(web_flags)])
    hint = f" (did you mean {close}?)" if close else ""
    try:
        parser.error(f"unrecognized arguments: {flag}={value}{hint}")
    except TrainledgerError as error:
        return error
    return ApiError(f"unknown parameter {flag}", flag)   # parser.error always raises; for type checkers


@functools.lru_cache(maxsize=1)
def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """The argparse parser of each answering subcommand (those with compute(), except WORK_COMMANDS), by name,
    in `--help` order."""
    parser = cli.build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {name: sub for name, sub in action.choices.items()
                    if hasattr(sub.get_default("_module"), "compute") and name not in WORK_COMMANDS}
    return {}


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {option: action for action in parser._actions for option in action.option_strings}


def _positionals(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [action for action in parser._actions if not action.option_strings]


def _is_boolean(action: argparse.Action) -> bool:
    return action.nargs == 0


def _takes_many(action: argparse.Action) -> bool:
    return action.nargs in ("+", "*") or (isinstance(action.nargs, int) and action.nargs > 1)


def _truth(value: str, flag: str) -> bool:
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ApiError(f"{flag} takes true or false, got {value!r}", flag)


def argv_for(command: str, params: list[tuple[str, str]], config_dir: Path | None = None,
             body_config: dict | None = None) -> list[str]:
    """The argv list (`["plan", "--gpu=h100", ...]`) that the query parameters `params` stand for.

    A `model=` value must be a preset or a file name of `config_dir` (guard.resolve_model); `arch.*` fields and
    `body_config` (a POST's config.json) become a config.json in the server's private directory."""
    parser = command_parsers().get(command)
    if parser is None:
        known = ", ".join(command_parsers())
        raise ApiError(f"'{command}' is not an answering command; known: {known}")
    options = _options(parser)
    positionals = {action.dest: action for action in _positionals(parser)}
    arch: dict[str, str] = {}
    argv: list[str] = [command]
    positional_values: dict[str, list[str]] = {}
    web_flags = web_allowed(command)
    for key, value in params:
        if key in IGNORED_PARAMS:
            continue
        if key.startswith(ARCH_PREFIX):
            arch[key[len(ARCH_PREFIX):]] = value
            continue
        dest = key.replace("-", "_")
        if dest in positionals:
            values = value.split() if _takes_many(positionals[dest]) else [value]
            positional_values.setdefault(dest, []).extend(values)
            continue
        name = flag_name(key)
        if name is None:                        # `model=/etc/passwd` as a key: never a flag of its own
            raise ApiError(f"{key[:80]!r} is not a parameter name (names are letters, digits, '-' and '_'; write "
                           f"name=value); the parameters of `{command}` are at /api/schema", param=key[:80])
        flag = "--" + name
        action = options.get(flag)
        if name not in web_flags:
            raise _not_allowed(command, name, value, parser, web_flags, action)
        if action is None:                      # listed but gone from the command: as the command line says it
            raise cli.UsageError(f"{command}: unrecognized arguments: {flag}={value} (see `trainledger {command} --help`)")
        elif action.dest == "model":
            argv.append(f"{flag}={guard.resolve_model(value, config_dir)}")
        elif action.dest == "gpu":
            argv.append(f"{flag}={guard.check_gpu(value)}")
        elif _is_boolean(action):
            on = _truth(value, flag)
            if isinstance(action, argparse.BooleanOptionalAction):
                argv.append(flag if on else "--no-" + flag[2:])
            elif on:
                argv.append(flag)
        elif _takes_many(action):
            words = value.split()
            if any(word.startswith("-") and not cli.NEGATIVE_VALUE.match(word) for word in words):
                raise ApiError(f"{flag} takes values, not flags, got {value[:80]!r}", flag)
            argv += [flag, *words]
        else:
            argv.append(f"{flag}={value}")
    if (arch or body_config is not None) and "--model" not in options:
        raise ApiError(f"`{command}` takes no model; arch.* fields and a config in the body are for commands with "
                       f"--model", "--model")
    if arch and body_config is not None:
        raise ApiError("give a custom model either as arch.* fields or as a config.json in the body, not both", "--model")
    if arch:
        argv.append(f"--model={custom_config_path(arch)}")
    if body_config is not None:
        path = guard.STORE.path_for(body_config, "posted")
        guard.check_posted_spec(path)
        argv.append(f"--model={path}")
    tail = [value for action in _positionals(parser) for value in positional_values.get(action.dest, [])]
    if tail:
        argv += ["--", *tail]
    return argv


def custom_config(fields: dict[str, str]) -> dict:
    """A Hugging Face config.json (llama or gpt2 `model_type`) for the `arch.*` fields of a query.

    llama: RoPE, RMSNorm, SwiGLU, no biases (LlamaConfig field names); gpt2: learned positions, LayerNorm,
    GELU MLP with biases, tied embeddings (GPT2Config field names; `n_kv_heads` and `tied` do not apply).
    """
    family = fields.get("family", "llama").strip().lower()
    if family not in ARCH_FAMILIES:
        raise ApiError(f"arch.family must be one of {', '.join(ARCH_FAMILIES)}, got {family!r}", "arch.family")
    unknown = sorted(set(fields) - set(ARCH_INT_FIELDS) - {"family", "tied"})
    if unknown:
        known = ", ".join(ARCH_PREFIX + name for name in ("family", *ARCH_INT_FIELDS, "tied"))
        raise ApiError(f"unknown parameter {ARCH_PREFIX + unknown[0]!r}; known: {known}", ARCH_PREFIX + unknown[0])
    sizes = {name: guard.check_arch_int(name, fields[name]) for name in ARCH_INT_FIELDS if name in fields}
    missing = [name for name in ("d_model", "n_layers", "n_heads", "d_ff", "vocab_size") if name not in sizes]
    if missing:
        raise ApiError(f"{ARCH_PREFIX}{missing[0]} is required for a custom model", ARCH_PREFIX + missing[0])
    if family == "gpt2":
        return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": sizes["vocab_size"],
                "n_embd": sizes["d_model"], "n_layer": sizes["n_layers"], "n_head": sizes["n_heads"],
                "n_inner": sizes["d_ff"], "n_positions": sizes.get("max_seq_len", 1024),
                "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": sizes["vocab_size"],
            "hidden_size": sizes["d_model"], "num_hidden_layers": sizes["n_layers"],
            "num_attention_heads": sizes["n_heads"], "num_key_value_heads": sizes.get("n_kv_heads", sizes["n_heads"]),
            "intermediate_size": sizes["d_ff"], "max_position_embeddings": sizes.get("max_seq_len", 4096),
            "hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "attention_bias": False,
            "mlp_bias": False, "tie_word_embeddings": _truth(fields.get("tied", "false"), "arch.tied")}


def custom_config_path(fields: dict[str, str]) -> str:
    """Path of the config.json for `fields` in the server's private directory (guard.STORE: named by a hash of its
    content, so equal configurations share a file, and `trainledger params --model PATH` reproduces any answer
    while the server runs)."""
    config = custom_config(fields)
    return guard.STORE.path_for(config, f"custom-{config['model_type']}")


_FLAG_IN_USAGE = re.compile(r"argument (--[A-Za-z0-9][\w-]*)|unrecognized arguments: (--[A-Za-z0-9][\w-]*)")
_FLAG_ANYWHERE = re.compile(r"(?<![\w-])(--[A-Za-z0-9][\w-]*|arch\.[a-z_]+)")


def error_flag(error: TrainledgerError) -> str | None:
    """The flag an error is about (`--seq-len`), from the error or its message; None when it names none."""
    if isinstance(error, cli.UsageError):
        match = _FLAG_IN_USAGE.search(str(error))
        if match:
            return match.group(1) or match.group(2)
    if getattr(error, "flag", None):
        return error.flag
    match = _FLAG_ANYWHERE.search(str(error))
    return match.group(1) if match else None


def error_body(error: TrainledgerError, command: str, custom: bool = False) -> dict:
    """The 422 body: the CLI's one-line message, the flag it names and the query parameter of that flag."""
    message = str(error)
    flag = error_flag(error)
    if getattr(error, "about_the_server", False):    # e.g. a time budget: no query parameter to point at
        flag = param = None
    elif getattr(error, "param", None):
        param = error.param
    elif flag == "--model" and custom:
        param = "arch"  # the config.json written from arch.* fields: the page shows it beside them
    elif flag and flag.startswith("--"):
        param = flag[2:].removeprefix("no-")
    else:
        param = flag
    return {"error": message, "detail": message, "flag": flag, "param": param, "command": command}


def answer(command: str, params: list[tuple[str, str]], settings: guard.WebSettings | None = None,
           body_config: dict | None = None, cancel: threading.Event | None = None) -> tuple[int, object, list[str] | None]:
    """(HTTP status, JSON body, argv) for one API call; the body of a 200 is `trainledger <argv> --json`'s output.

    Heavy requests (guard.is_heavy) are capped in size, wait for a slot of the server's guard.HeavyLimiter and run
    in a worker process (web/worker.py) within their time budget (guard.time_budget); setting `cancel` (the client
    disconnected) stops the worker. Light requests answer from formulas in this thread."""
    settings = settings or DEFAULT_SETTINGS
    status, body, argv = _answer(command, params, settings, body_config, cancel)
    if argv is None:            # refused before any model was resolved: the message quotes only what was sent
        return status, body, argv
    folders = paths.server_folders(settings)    # what the client sees names no path of the server (web/paths.py)
    return status, paths.hide_paths(body, folders), paths.hide_paths(argv, folders)


def _answer(command: str, params, settings: guard.WebSettings, body_config, cancel):
    custom = any(key.startswith(ARCH_PREFIX) for key, _ in params) or body_config is not None
    argv = None
    try:
        argv = argv_for(command, params, settings.config_dir, body_config)
        args = _parsed(command, argv)
        if args is not None and guard.is_heavy(command, args):
            guard.check_heavy_caps(command, args)
            candidates, n_layers = guard.heavy_cost(command, args)
            guard.check_layout_candidates(command, args, candidates)
            if command == "tensor":
                plain = cli.compute([a for a in argv if a != "--torch"])
                guard.check_torch_tensor(plain["storage_bytes"], str(args.device))
            budget = guard.time_budget(candidates, n_layers, settings.max_request_seconds)
            status, body = settings.heavy.run(lambda: _in_worker(command, argv, custom, budget, cancel))
            return status, body, argv
    except guard.GuardError as error:
        return error.status, error_body(error, command), argv
    except TrainledgerError as error:
        return (404 if command not in command_parsers() else 422), error_body(error, command, custom), argv
    status, body = outcome(command, argv, custom)
    return status, body, argv


def _in_worker(command: str, argv: list[str], custom: bool, budget: float, cancel) -> tuple[int, object]:
    """outcome() computed in a worker process within `budget` seconds; a GuardError when it was stopped."""
    try:
        return worker.run(outcome, (command, argv, custom), budget, cancel)
    except worker.WorkStopped as stopped:
        if stopped.reason == "budget":
            error = guard.GuardError(f"`{command}` ran past its time budget of {budget:.1f} s on the web server (set "
                                     "from the size of its search, capped by `serve --max-request-seconds`) and was "
                                     f"stopped; the command line `trainledger {command}` takes as long as it needs")
            error.about_the_server = True
            raise error from None
        if stopped.reason == "died":
            raise guard.GuardError(f"`{command}` was ended by the system after {stopped.seconds:.1f} s (out of memory or "
                                   "CPU time); the command line takes larger requests", status=503) from None
        why = "the server is stopping" if stopped.reason == "shutdown" else "its client disconnected"
        raise guard.GuardError(f"`{command}` was stopped: {why}", status=503) from None


def outcome(command: str, argv: list[str] | None, custom: bool = False) -> tuple[int, object]:
    """(HTTP status, JSON body) of `trainledger <argv> --json` (argv from argv_for): the answer, or the one-line
    error the command line prints for it (422 for bad input, 500 for a bug). Runs in the server's thread for light
    requests and in a worker process (web/worker.py) for heavy ones; picklable either way."""
    try:
        if argv is None:
            raise ApiError(f"'{command}' is not an answering command")
        result = cli.compute(argv)
    except guard.GuardError as error:
        return error.status, error_body(error, command)
    except TrainledgerError as error:
        if command not in command_parsers():
            return 404, error_body(error, command)
        return 422, error_body(error, command, custom)
    except MemoryError:  # past the worker's address-space cap (web/worker.py MEMORY_LIMIT_BYTES): the server's limit
        message = (f"`{command}` needed more memory than a web request may take ({worker.MEMORY_LIMIT_BYTES >> 20:,} "
                   "MiB) and was stopped; the command line takes larger requests")
        return 503, {"error": message, "detail": message, "flag": None, "param": None, "command": command}
    except SystemExit:  # argparse exits only after printing help or a version, which argv_for never sends
        message = f"{command}: this query makes the command print and exit instead of answering; see /api/schema"
        return 422, {"error": message, "detail": message, "flag": None, "param": None, "command": command}
    except INPUT_EXCEPTIONS as error:  # what `trainledger <argv>` prints for it; out-of-range input, not a bug
        message = f"unexpected {type(error).__name__}: {error} (rerun with TRAINLEDGER_DEBUG=1 for details)"
        return 422, {"error": message, "detail": message, "flag": None, "param": None, "command": command}
    except Exception as error:  # a bug, not bad input: the CLI's one line for it, never a traceback page
        message = f"unexpected {type(error).__name__}: {error} (rerun with TRAINLEDGER_DEBUG=1 for details)"
        return 500, {"error": message, "detail": message, "flag": None, "param": None, "command": command}
    return 200, json_ready(result)


DEFAULT_SETTINGS = guard.WebSettings()


def _parsed(command: str, argv: list[str]):
    """argv parsed by the command's parser (to see what it asks for), or None when it does not parse: compute()
    then refuses it with the CLI's own message."""
    try:
        args = command_parsers()[command].parse_args(argv[1:])
        cli._merge_run(args)          # the run's flags merged and the command's defaults filled in, as compute() sees them
        return args
    except (TrainledgerError, SystemExit):
        return None


@router.get("/health")
def health() -> dict:
    """Liveness and what this server can answer."""
    return {"status": "ok", "version": __version__, "commands": list(command_parsers())}


@router.get("/schema")
def schema() -> dict:
    """The flags of each answering command that the web server passes (web/flags.py: help, default, choices,
    boolean or not), so the page can fill its selects and defaults from the command line itself. A flag that is a
    setting of the run (cli/run_flags.py made it from specs/run_table.py) also carries the table's entry: its
    `path` in the run, `group`, `kind`, `unit`, `label` (on the step form when not empty), the form's `web` hints,
    and as `default` the command's default from the table."""
    result = {}
    for name, parser in command_parsers().items():
        flags = []
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.dest in ("json", "_module"):
                continue
            option = next((o for o in action.option_strings if o.startswith("--")), None)
            if option is not None and option[2:] not in web_allowed(name):    # command line only
                continue
            default = action.default if action.default is not argparse.SUPPRESS else None
            flags.append({
                "flag": option, "param": option[2:] if option else action.dest, "dest": action.dest,
                "help": _help_text(action, parser),
                "default": json_ready(default) if isinstance(default, (int, float, str, bool, list, tuple, type(None))) else str(default),
                "choices": [str(c) for c in action.choices] if action.choices else None,
                "boolean": _is_boolean(action), "many": _takes_many(action), "positional": not action.option_strings,
                **_run_setting(action),
            })
        result[name] = {"help": parser.description, "flags": flags}
    _add_named_choices(result)
    return result


def _run_setting(action: argparse.Action) -> dict:
    """The table's entry of a run flag (specs.run.Setting, on the action as `run_setting`), or {} for another flag."""
    s = getattr(action, "run_setting", None)
    if s is None:
        return {}
    return {"path": s.path, "group": s.path.rsplit(".", 1)[0], "kind": s.kind, "unit": s.unit, "label": s.label,
            "web": dict(s.web), "default": json_ready(action.run_default)}


def _add_named_choices(result: dict) -> None:
    """Fill `choices` of --precision and --optimizer (free-text flags checked against specs/recipes.py) and of
    --ep-dispatcher (checked against account/time/expert_parallel.py's DISPATCHERS when the step is computed)."""
    from trainledger.account.time.expert_parallel import DISPATCHERS
    from trainledger.specs.recipes import OPTIMIZERS, RECIPES

    names = {"--precision": list(RECIPES), "--optimizer": list(OPTIMIZERS), "--ep-dispatcher": list(DISPATCHERS)}
    for command in result.values():
        for flag in command["flags"]:
            if flag["flag"] in names and not flag["choices"]:
                flag["choices"] = names[flag["flag"]]


def _help_text(action: argparse.Action, parser: argparse.ArgumentParser) -> str:
    text = action.help or ""
    try:
        return text % {**vars(action), "prog": parser.prog} if "%(" in text else text
    except (KeyError, TypeError, ValueError):
        return text


def settings_of(request: Request) -> guard.WebSettings:
    return getattr(request.app.state, "settings", DEFAULT_SETTINGS)


async def _answer_watching(request: Request, command: str, params: list[tuple[str, str]], config: dict | None):
    """answer() in a worker thread while this coroutine watches the client: when it disconnects (or this request
    is cancelled, as at server shutdown), `cancel` is set and a heavy request's worker process is killed."""
    cancel = threading.Event()
    task = asyncio.ensure_future(run_in_threadpool(answer, command, params, settings_of(request), config, cancel))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_SECONDS)
            if done:
                return task.result()
            if not cancel.is_set() and await request.is_disconnected():
                cancel.set()
    finally:
        cancel.set()


@router.get("/{command}")
async def run_command(command: str, request: Request) -> JSONResponse:
    """`trainledger <command> <flags from the query> --json`; 422 with the CLI's message on bad input."""
    status, body, argv = await _answer_watching(request, command, list(request.query_params.multi_items()), None)
    return JSONResponse(body, status_code=status, headers=guard.response_headers(status, argv))


@router.post("/{command}")
async def run_command_with_config(command: str, request: Request) -> JSONResponse:
    """The same with the model given as a Hugging Face config.json in the body (at most guard.MAX_BODY_BYTES):
    `curl --data @config.json 'http://127.0.0.1:8000/api/memory?batch-size=8'`."""
    data = bytearray()
    async for chunk in request.stream():  # a body without Content-Length is counted as it arrives
        data += chunk
        if len(data) > guard.MAX_BODY_BYTES:
            error = guard.GuardError(guard.BODY_TOO_LARGE, "config", status=413)
            return JSONResponse(error_body(error, command), status_code=413)
    try:
        config = guard.config_from_body(bytes(data))
    except guard.GuardError as error:
        return JSONResponse(error_body(error, command), status_code=error.status)
    params = list(request.query_params.multi_items())
    status, body, argv = await _answer_watching(request, command, params, config)
    return JSONResponse(body, status_code=status, headers=guard.response_headers(status, argv))
