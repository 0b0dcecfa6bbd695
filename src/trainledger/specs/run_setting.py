"""How a field of the run meets the user: its flag, kind, help, unit and commands (`Setting`), and the check of a
value of each kind, every message naming the flag (`check_value`). Pure, no torch.

specs/run.py declares the run's groups with these; specs/run_table.py reads them into the one table. The
vocabularies of the settings are here too (account/ imports them through specs/run.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from trainledger.errors import TrainledgerError

RUN_FILE_VERSION = 1            # the run file's `version`; specs/run_file.py refuses any other

# The vocabularies of the settings (account/ imports them from here, so one list serves both).
RECOMPUTE_POLICIES = ("none", "selective", "full", "selective-op", "selective-layer")
FRAMEWORKS = ("trainledger", "megatron", "torchtitan")
SCHEDULES = ("1f1b", "dualpipe")
DISPATCHERS = ("alltoall", "deepep", "hybridep")
LOOPS = ("train", "profile")
FSDP_PARAM_DTYPES = ("auto", "bf16", "fp16", "fp32", "stored")
FSDP_REDUCE_DTYPES = ("fp32", "bf16", "fp16")
FSDP_ACCUMULATE = ("sharded", "unsharded")
FSDP_IMPLS = ("fsdp2", "paper")
RESERVE_WORDS = ("auto", "cuda", "expandable")
FINETUNE_METHODS = ("full", "lora", "qlora")    # qlora: LoRA on a double-quantized NF4 base (arXiv:2305.14314)
QUANTIZE = ("none", "nf4", "nf4-dq", "int8")    # the frozen base weights (account/finetune/quant.py)
LORA_ROLES = ("q", "k", "v", "o", "gate", "up", "down", "head")    # account/finetune/targets.py maps them per family
CPU_OFFLOAD = ("none", "optimizer", "params")
LARGEST_INT = 2**63 - 1

# Commands that take run settings (specs/run_table.py: each setting lists those it appears on).
RUN_COMMANDS = frozenset({"step", "memory", "layout", "plan", "fit", "profile", "train"})


@dataclass(frozen=True)
class Setting:
    """How one field of the run meets the user: its flag, kind (how a value is parsed and checked), help, unit and
    the commands that take it. `path` (e.g. "layout.tp") is filled in by specs/run_table.py. `label` puts it on the
    web's step form (static/calculators.js: its widget from the kind); `web`: that field's hints in the page's terms
    (`type` "pow2" with exponents `min`/`max`, `step`, a starting `value`, a blank's `placeholder`)."""

    flag: str
    kind: str
    help: str
    unit: str = ""
    choices: tuple = ()
    commands: frozenset = RUN_COMMANDS
    label: str = ""             # a short label for the web form ("" = not on the form)
    path: str = ""
    web: dict = field(default_factory=dict, compare=False)     # the web form's hints (above)


def setting(flag: str, kind: str, help: str, *, unit: str = "", choices: tuple = (), commands=RUN_COMMANDS,
            label: str = "", web: dict | None = None) -> dict:
    """The metadata of a run field: {"setting": Setting(...)} (dataclasses.field(metadata=...))."""
    return {"setting": Setting(flag, kind, help, unit, tuple(choices), frozenset(commands), label, web=dict(web or {}))}


def _field(default, *args, **kwargs):
    return field(default=default, metadata=setting(*args, **kwargs))


# ----- checking one value: each kind of setting, with the flag in every message -------------------------------------
def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_value(s: Setting, value) -> None:
    """Raise a TrainledgerError naming `s.flag` when `value` is not a value of the setting's kind."""
    kind, flag = s.kind, s.flag
    if value is None and kind.endswith("?"):
        return
    kind = kind.rstrip("?")
    if kind == "count":
        if not _is_int(value) or not 0 < value <= LARGEST_INT:
            raise TrainledgerError(f"{flag} must be a positive integer, got {value!r}", flag)
    elif kind in ("flag", "switch"):
        if not isinstance(value, bool):
            raise TrainledgerError(f"{flag} is on or off (true or false), got {value!r}", flag)
    elif kind == "choice":
        if value not in s.choices:
            raise TrainledgerError(f"{flag} must be one of {', '.join(map(str, s.choices))}, got {value!r}", flag)
    elif kind == "zero":
        if not _is_int(value) or value not in (0, 1, 2, 3):
            raise TrainledgerError(f"{flag} must be one of 0, 1, 2, 3, got {value!r}", flag)
    elif kind == "positive":
        if not _is_number(value) or value <= 0:
            raise TrainledgerError(f"{flag} must be a positive number, got {value!r}", flag)
    elif kind == "at_least_one":
        if not _is_number(value) or value < 1:
            raise TrainledgerError(f"{flag} must be a number >= 1, got {value!r}", flag)
    elif kind == "fraction":
        if not _is_number(value) or not 0 <= value <= 1:
            raise TrainledgerError(f"{flag} must be a fraction in [0, 1], got {value!r}", flag)
    elif kind == "reserve":
        if value not in RESERVE_WORDS and not (_is_number(value) and value >= 0):
            raise TrainledgerError(f"{flag} must be 'auto', 'cuda', 'expandable' or a non-negative size in bytes, "
                                   f"got {value!r}", flag)
    elif kind == "roles":
        _check_roles(flag, value)
    elif kind == "name":
        if not isinstance(value, str) or not value.strip():
            raise TrainledgerError(f"{flag} must be a name, got {value!r}", flag)
    else:                                    # a programming error, not the user's
        raise ValueError(f"unknown kind of setting {s.kind!r} for {flag}")


def _check_fields(group) -> None:
    for f in fields(group):
        s = f.metadata.get("setting")
        if s is not None:
            check_value(s, getattr(group, f.name))


def _check_roles(flag: str, value) -> None:
    """A LoRA target list: comma-separated role names (LORA_ROLES), each once, or all-linear (PEFT's meaning)."""
    if not isinstance(value, str) or not value.strip():
        raise TrainledgerError(f"{flag} must be comma-separated roles ({','.join(LORA_ROLES)}) or all-linear, "
                               f"got {value!r}", flag)
    if value.strip().lower() == "all-linear":
        return
    roles = [r.strip().lower() for r in value.split(",")]
    unknown = [r for r in roles if r not in LORA_ROLES]
    if unknown or len(set(roles)) != len(roles):
        what = f"unknown role {unknown[0]!r}" if unknown else "a role named twice"
        raise TrainledgerError(f"{flag}: {what}; allowed: comma-separated {','.join(LORA_ROLES)}, or all-linear", flag)
