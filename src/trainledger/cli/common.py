"""Shared pieces of the subcommands: argparse types that name what is allowed, and table/JSON output.

Types raise argparse.ArgumentTypeError, so argparse prefixes the flag:
    error: flops: argument --seq-len: must be a positive integer, got '0'
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from trainledger import units
from trainledger.errors import TrainledgerError


def _wrap(parse, what):
    def convert(text):
        try:
            value = parse(text)
        except TrainledgerError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return value
    convert.__name__ = what
    return convert


# Sizes, counts of GPUs, steps...: beyond int64 nothing is meaningful, and float arithmetic would overflow.
LARGEST_INT = 2**63 - 1


def positive_int(text: str) -> int:
    """A positive integer below 2^63: '8', '1024', '4K' (SI suffixes allowed), parsed exactly (units.parse_integer)."""
    value = _integer(text, "a positive integer")
    if value > LARGEST_INT:
        raise argparse.ArgumentTypeError(f"must be a positive integer below 2^63, got {text!r}")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def nonnegative_int(text: str) -> int:
    """A non-negative integer, parsed exactly (the command bounds it: --seed by what torch.manual_seed takes)."""
    value = _integer(text, "a non-negative integer")
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text!r}")
    return value


def seed(text: str) -> int:
    """A random seed: an integer in 0..2^63-1, what torch.manual_seed, torch.Generator and numpy all take
    (2^64 made torch.Generator raise "Overflow when unpacking long": exit 1)."""
    value = _integer(text, "an integer in 0..2^63-1")
    if not 0 <= value <= LARGEST_INT:
        raise argparse.ArgumentTypeError(f"must be an integer in 0..2^63-1 (what torch.manual_seed and numpy's "
                                         f"generators take), got {text!r}")
    return value


def _integer(text: str, kind: str) -> int:
    try:
        value = units.parse_integer(text)
    except TrainledgerError:
        value = None
    if value is None:
        raise argparse.ArgumentTypeError(f"must be {kind}, got {text!r}")
    return value


def gpu_count(text: str) -> int:
    """An argparse type for --num-gpus: a positive integer no larger than specs.bounds.MAX_NUM_GPUS (2^20: past any
    machine that exists, module docstring of specs/bounds.py)."""
    from trainledger.specs.bounds import MAX_NUM_GPUS
    value = positive_int(text)
    if value > MAX_NUM_GPUS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_NUM_GPUS:,} (2^20, over 40× the 24,576-GPU clusters "
                                         f"Llama 3 trained on: past any machine that exists), got {text!r}")
    return value


def positive_count(text: str) -> float:
    """A positive count: '70B', '15T', '1.5e13'."""
    value = _wrap(units.parse_count, "count")(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def positive_bytes(text: str) -> float:
    """A positive size: '80GB' (1e9), '80GiB' (2^30), or bytes."""
    value = _wrap(units.parse_bytes, "bytes")(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive size like 80GB or 80GiB, got {text!r}")
    return value


def _float(text: str) -> float:
    """`text` as a float, NaN when it is not a number (the caller's range check then rejects it)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def fraction(text: str) -> float:
    """A number in (0, 1]: MFU, efficiency."""
    value = _float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0: learning rates, ratios."""
    value = _float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def add_loss_upcast_flag(parser: argparse.ArgumentParser) -> None:
    """--loss-upcast/--no-loss-upcast, as `memory`, `step` and `layout` take it (account.memory.activations.loss_bytes)."""
    parser.add_argument("--loss-upcast", action=argparse.BooleanOptionalAction, default=True,
                        help="cast the logits to fp32 before the cross-entropy, which then saves an fp32 log-softmax "
                             "of 4 bytes per token and vocabulary entry (default on, as trainledger's Transformer and "
                             "torchtitan); --no-loss-upcast: on the 16-bit logits, 2 bytes each, as NeMo Automodel's "
                             "MaskedCrossEntropy(fp32_upcast=False)")


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object in base units (bytes, FLOPs, seconds) instead of a table")


def print_json(data) -> None:
    """One JSON document on stdout; floats that are whole stay numbers, NaN/inf become null."""
    sys.stdout.write(json.dumps(json_ready(data), indent=2) + "\n")


def json_ready(value):
    """`value` with NaN/inf replaced by None, keys as strings, tuples as lists, a frozen value of specs/ (a run, a
    group of it) as its fields: safe for json.dumps."""
    import dataclasses
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_ready(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def console():
    """A rich Console for tables (imported lazily: rich costs ~50 ms at startup)."""
    from rich.console import Console
    return Console(highlight=False)


def table(title: str, columns: list[str], rows: list[list], caption: str | None = None):
    """A rich Table with right-aligned columns after the first."""
    from rich.table import Table
    t = Table(title=title, caption=caption, caption_justify="left", title_justify="left")
    for i, name in enumerate(columns):
        t.add_column(name, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*[str(cell) for cell in row])
    return t


# One vocabulary across commands: the precision recipes and optimizers of specs/recipes.py.
def _lower(text: str) -> str:
    return text.strip().lower()


def _lower_refusing(refused: dict | None):
    """An argparse type: the name in lower case; a name in `refused` (name -> what to use instead) is an error."""
    if not refused:
        return _lower

    def name(text: str) -> str:
        key = _lower(text)
        if key in refused:
            raise argparse.ArgumentTypeError(f"{key}: {refused[key]}")
        return key
    return name


# FP8 recipes that `measure` and `profile` do not run (no torchao conversion in their steps): what to use instead
FP8_NOT_MEASURED = {name: "FP8 is not measured here yet (no FP8 conversion in this step); predict it with `step`/"
                          "`memory`, run it with `train --precision fp8-rowwise` on a GPU with FP8 tensor cores"
                    for name in ("fp8-cs", "fp8-delayed", "fp8-rowwise", "mxfp8")}


def add_precision_flag(parser, default: str, why: str = "", names=None, refused: dict | None = None) -> None:
    """--precision with the recipes of specs/recipes.py (or `names`, a subset) and a help text that states the default.

    `refused` maps recipes this command cannot run to a one-line hint (what to use instead).
    """
    from trainledger.specs.recipes import RECIPES
    names = tuple(names or RECIPES)
    parser.add_argument("--precision", type=_lower_refusing(refused), choices=names, default=default, metavar="RECIPE",
                        help=f"precision recipe: {', '.join(names)} ({_default_text(default, why)}; "
                             "bytes per state: `trainledger memory --help`)")


def _default_text(default, why: str) -> str:
    """'default X; why', or, for a default picked at run time (None), 'default: why' (never 'default None')."""
    if default is None:
        return f"default: {why}" if why else "no default"
    return f"default {default}{'; ' + why if why else ''}"


def add_optimizer_flag(parser, default: str = "adamw", names=None, refused: dict | None = None) -> None:
    """--optimizer with the optimizers of specs/recipes.py (or `names`, a subset; `refused` as for --precision)."""
    from trainledger.specs.recipes import OPTIMIZERS
    names = tuple(names or OPTIMIZERS)
    parser.add_argument("--optimizer", type=_lower_refusing(refused), choices=names, default=default, metavar="NAME",
                        help=f"optimizer: {', '.join(names)} (default {default})")


# Inputs beyond these are legal but almost surely a slip (a wrong suffix): they get a warning, not an error.
OUTLANDISH = {
    "tokens": (1e15, "more than 1e15 training tokens (Llama 3 405B used 15.6T)"),
    "params": (1e14, "more than 1e14 parameters (the largest published dense models have ~1e12)"),
    "num_gpus": (2e5, "more than 200,000 GPUs (the largest clusters announced hold ~200,000; Llama 3 trained on "
                      "16,384)"),      # past specs.bounds.MAX_NUM_GPUS (2^20) an error
    "mfu": (0.75, "MFU above 0.75 (published large runs reach 0.38-0.56: Llama 3, PaLM, Megatron-LM)"),
    "train_seconds": (10 * 365 * 86400.0, "more than 10 years of training"),
    "seq_len": (1 << 20, "sequences longer than 1M tokens"),
}


# Past these no machine runs the request: an error naming the flag, not a warning (specs/bounds.py check_request)
REFUSED_BEYOND = {"num_gpus": "--num-gpus", "seq_len": "--seq-len"}


def outlandish(flags: dict | None = None, **values) -> list[str]:
    """One warning per value beyond its OUTLANDISH limit, e.g. outlandish(tokens=1e30); a GPU count or a sequence
    length past any machine (specs.bounds.check_request) is an error naming its flag (REFUSED_BEYOND, or `flags`:
    {"num_gpus": "--dp"} where the command's flag is another)."""
    from trainledger.specs.bounds import check_request
    for name, flag in REFUSED_BEYOND.items():
        if values.get(name) is not None:
            check_request(values[name], name, (flags or {}).get(name, flag))
    warnings = []
    for name, value in values.items():
        limit, what = OUTLANDISH[name]
        if value is not None and value > limit:
            shown = units.format_seconds(value) if name.endswith("seconds") else f"{value:.4g}"
            warnings.append(f"{what}: got {shown}; check the value and its suffix")
    return warnings


# --- hardware: one place that turns --gpu into a GPUSpec -------------------------------------------------------
def resolve_gpu(name: str, flag: str = "--gpu", calibration: str | None = None):
    """The GPUSpec that `--gpu NAME` means: a datasheet entry of specs/hardware.py (`trainledger hardware`).

    Every command that needs a device goes through here, so calibrated devices (`--gpu cpu`, `--gpu cuda`: a
    GPUSpec built from this machine's `bench --calibrate` profile) plug in at one place. `calibration` (a
    `--calibration FILE` written by `bench --calibrate --out FILE`, possibly on another machine) replaces --gpu:
    the device it measured (a CUDA GPU's datasheet entry with the measured rates), read without torch, never
    unpickled, refused with one line naming the file and the field when it is out of bounds.
    """
    if calibration is not None:
        from trainledger.specs.calibration import gpu_from_profile, read_profile
        return gpu_from_profile(read_profile(calibration))
    if str(name).strip().lower() in ("cpu", "cuda"):    # this machine, measured (torch only on this path)
        from trainledger.measure.calibrate import calibrated_device
        return calibrated_device(str(name).strip().lower())
    from trainledger.specs.hardware import get_gpu
    return get_gpu(name, flag)


def check_links_before_calibrating(args, num_gpus: int | None) -> None:
    """Refuse, before any calibration runs, a job of `num_gpus` devices on `--gpu cpu` or `--gpu cuda` (this machine,
    measured: one device a node, no link known, specs/calibration.py) that needs a link no flag gives: between
    nodes (--inter-node-bandwidth) once it spans more than --gpus-per-node devices, inside one (--intra-node-bandwidth)
    when a node holds more than one. The same line account.time.overlap.link says, seconds of measuring earlier."""
    name = str(getattr(args, "gpu", "") or "").strip().lower()
    if name not in ("cpu", "cuda") or getattr(args, "calibration", None) or not num_gpus or num_gpus <= 1:
        return
    per_node = getattr(args, "gpus_per_node", None) or 1
    needs = [("inside a node", "--intra-node-bandwidth", "intra_node_bandwidth", per_node > 1 and num_gpus > 1),
             ("between nodes", "--inter-node-bandwidth", "inter_node_bandwidth", num_gpus > per_node)]
    for where, flag, dest, needed in needs:
        if needed and getattr(args, dest, None) is None:
            raise TrainledgerError(f"no published interconnect {where} for {name} (this machine, one device a node): "
                                   f"{num_gpus} devices need {flag} (e.g. 25GB/s), or ask about a datasheet GPU "
                                   f"(--gpu h100)", flag)


def add_calibration_flag(parser: argparse.ArgumentParser) -> None:
    """--calibration FILE: predict on a machine measured elsewhere (`bench --calibrate --out FILE`)."""
    parser.add_argument("--calibration", metavar="FILE", default=None,
                        help="a calibration profile written by `trainledger bench --calibrate --out FILE` (on the GPU "
                             "machine): predict with its measured rates and per-op costs instead of --gpu's datasheet "
                             "(JSON, validated, never unpickled)")


def add_compile_flag(parser: argparse.ArgumentParser) -> None:
    """--compile: the model under torch.compile (account/time/compiled.py)."""
    parser.add_argument("--compile", action="store_true",
                        help="the model under torch.compile (Inductor, default mode): pointwise ops between GEMMs and "
                             "attention fused, fewer launches (docs/time.md)")


def bandwidth(text: str) -> float:
    """An argparse type for bytes per second: '3.4GB/s', '500MB/s', '2GiB' (the '/s' is optional)."""
    body = text.strip()
    body = body[:-2] if body.lower().endswith("/s") else body
    value = positive_bytes(body) if body else None
    if value is None or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a positive bandwidth like 3.4GB/s, got {text!r}")
    return value


def add_hardware_flags(parser: argparse.ArgumentParser) -> None:
    """--gpus-per-node, --intra-node-bandwidth, --inter-node-bandwidth: override the interconnect of --gpu."""
    g = parser.add_argument_group("interconnect (defaults: the --gpu entry of `trainledger hardware --json`)")
    g.add_argument("--gpus-per-node", type=positive_int, default=None,
                   help="GPUs sharing the fast link inside a node (default: the GPU's server, 8 for DGX/HGX)")
    g.add_argument("--intra-node-bandwidth", type=bandwidth, default=None,
                   help="bandwidth a ring collective achieves per GPU per direction inside a node (NCCL bus "
                        "bandwidth), e.g. 235GB/s (default: datasheet link × its measured bus-bandwidth fraction)")
    g.add_argument("--inter-node-bandwidth", type=bandwidth, default=None,
                   help="bandwidth a ring collective achieves per GPU per direction between nodes, e.g. 24GB/s "
                        "(default: the GPU's usual network, e.g. InfiniBand HDR for A100, NDR for H100)")


def apply_hardware_flags(gpu, args):
    """`gpu` with the interconnect flags of `add_hardware_flags` applied (a new GPUSpec; the table is unchanged)."""
    from dataclasses import replace

    from trainledger.specs.performance import Link

    changes = {}
    if getattr(args, "gpus_per_node", None) is not None:
        changes["gpus_per_node"] = args.gpus_per_node
    for flag, attr in (("intra_node_bandwidth", "intra_node_link"), ("inter_node_bandwidth", "inter_node_link")):
        value = getattr(args, flag, None)
        if value is None:
            continue
        old = getattr(gpu, attr)
        changes[attr] = Link(f"--{flag.replace('_', '-')} {value / 1e9:g} GB/s", value, 1.0,
                             old.step_latency_seconds if old else 0.0, old.call_latency_seconds if old else 0.0,
                             f"given by --{flag.replace('_', '-')} (achieved bus bandwidth); latencies of "
                             f"{old.name if old else 'none known'}")
    return replace(gpu, **changes) if changes else gpu


def approximation_notes(spec) -> list[str]:
    """One assumption line per part of a config.json that trainledger's Transformer does not reproduce
    (`spec.approximations`, filled by specs/hf_config.py: RoPE scaling, MPT's qk_ln, ...); [] for presets."""
    return [f"approximated: {note}" for note in getattr(spec, "approximations", ())]


from trainledger.specs.run import RECOMPUTE_POLICIES as RECOMPUTE_CHOICES  # noqa: E402,F401 (the run's vocabulary)
RECOMPUTE_HELP = ("activation recomputation: none, selective (the attention core, Korthikanti), full (each block), "
                  "selective-op (torchtitan's per-op policy: every second matmul and the elementwise ops re-run), "
                  "selective-layer (torchtitan's per-layer policy: every second block fully)")


def add_fsdp_flags(parser: argparse.ArgumentParser) -> None:
    """How FSDP2 runs under --zero 3 (account/memory/fsdp.py): mixed-precision policy, resharding, accumulation, HSDP."""
    g = parser.add_argument_group("FSDP2 with --zero 3 (account/memory/fsdp.py)")
    g.add_argument("--fsdp-param-dtype", choices=("auto", "bf16", "fp16", "fp32"), default="auto",
                   help="dtype FSDP2 gathers and computes in (MixedPrecisionPolicy.param_dtype); auto: the recipe's "
                        "compute dtype, as torchtitan, Lightning and Accelerate run it; fp32: no policy (autocast over "
                        "fp32 gathers, as `train --parallel fsdp`) (default auto)")
    g.add_argument("--fsdp-reduce-dtype", choices=("fp32", "bf16", "fp16"), default=None,
                   help="dtype of the gradient reduce-scatter (default fp32 under a policy, as torchtitan)")
    g.add_argument("--reshard-after-forward", action=argparse.BooleanOptionalAction, default=None,
                   help="free each block's gathered parameters after forward and gather them again in backward "
                        "(default on; off with --pp, as torchtitan)")
    g.add_argument("--fsdp-accumulate", choices=("sharded", "unsharded"), default=None,
                   help="gradient accumulation: reduce-scatter every micro-batch (sharded, FSDP2's default) or keep "
                        "unsharded gradients and parameters until the last (default sharded; unsharded with --pp)")
    g.add_argument("--dp-replicate", type=positive_int, default=1,
                   help="HSDP: replicate over this many groups, shard inside each (dp / replicate ranks) (default 1)")


def fsdp_from_args(args, precision: str, zero: int, dp: int, pp: int):
    """account.memory.fsdp.FsdpSettings for these flags when the layout shards with FSDP2 (zero 3, dp > 1), else None;
    --dp-replicate > 1 without such a layout is an error naming the flag."""
    from trainledger.account.memory.fsdp import fsdp_settings
    from trainledger.specs.recipes import get_recipe
    replicate = getattr(args, "dp_replicate", 1)
    if zero != 3 or dp <= 1:
        if replicate > 1:
            raise TrainledgerError(f"--dp-replicate {replicate} needs --zero 3 and --dp > 1 (HSDP shards inside each "
                                   "replica group)")
        return None
    return fsdp_settings(get_recipe(precision), param_dtype=args.fsdp_param_dtype, reduce_dtype=args.fsdp_reduce_dtype,
                         reshard_after_forward=args.reshard_after_forward, accumulate=args.fsdp_accumulate,
                         replicate=replicate, pp=pp, dp=dp)
