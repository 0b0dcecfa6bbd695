"""`trainledger tensor`: bytes, strides and contiguity of a tensor of a given shape and dtype, and of a view of it.

    trainledger tensor                                        # the lecture's GPT-3 FFN matrix [49152, 12288] fp32
    trainledger tensor --shape 4096,4096 --dtype bf16 --transpose 0,1 --slice ::2 --json
    trainledger tensor --shape 3,4 --slice :,1 --torch         # also build it in PyTorch and compare

The numbers come from `trainledger.account.counting.tensor` (pure arithmetic); `--torch` builds the tensor with PyTorch
(on the meta device unless --device says otherwise: no memory is allocated) and reports whether the layouts agree.
"""

from __future__ import annotations

import argparse

from trainledger.cli import common
from trainledger.errors import TrainledgerError
from trainledger.units import format_bytes, format_count

HELP = "bytes, strides and contiguity of a tensor shape and dtype, and of a transpose or slice of it"
DESCRIPTION = """Bytes, strides and contiguity of a tensor shape and dtype, and of a transpose or slice of it.

storage bytes = numel × bytes per element (`trainledger dtypes`); strides are in elements (and bytes).
A transpose or slice is a view of the same storage (no bytes allocated); the table says whether
.view(-1) works without a copy and how many bytes .contiguous() would allocate. --torch builds the
tensor in PyTorch (on the meta device by default, allocating nothing) and checks the layout against it.

examples:
  trainledger tensor
  trainledger tensor --shape 4,6 --transpose 0,1 --slice 1:3 --torch
  trainledger tensor --shape 8,1024,768 --dtype bf16 --slice :,::2 --json
"""

REAL_TENSOR_LIMIT_BYTES = 2**28  # --torch on a real device: 256 MiB at most (inspect_layout copies views)
DEFAULT_SHAPE = (49152, 12288)   # CS336 Lecture 2: one GPT-3 FFN matrix, 2,415,919,104 bytes in fp32


def _shape(text: str) -> tuple[int, ...]:
    """'49152,12288' or '4x4' -> sizes; every part must be a whole number ('4,x' and '4,,4' are errors, not [4])."""
    parts = [part.strip() for part in text.replace("x", ",").split(",")]
    if parts and parts[-1] == "" and len(parts) > 1 and text.rstrip().endswith(","):
        parts.pop()                    # one trailing comma, as in a Python tuple: '4,'
    try:
        sizes = tuple(int(part) for part in parts)
    except ValueError:
        sizes = ()
    if not sizes or any(s < 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"must be comma-separated non-negative sizes like 49152,12288, got {text!r}")
    return sizes


def _pair(text: str) -> tuple[int, int]:
    try:
        pair = tuple(int(part) for part in text.split(","))
    except ValueError:
        pair = ()
    if len(pair) != 2:
        raise argparse.ArgumentTypeError(f"must be two dimensions like 0,1, got {text!r}")
    return pair


def _index(text: str) -> list:
    """'0:100,::2,5' -> [slice(0, 100), slice(None, None, 2), 5] (Python indexing, one item per dimension)."""
    items = []
    try:
        for part in text.split(","):
            part = part.strip()
            if ":" in part:
                bounds = [int(b) if b.strip() else None for b in part.split(":")]
                if len(bounds) > 3:
                    raise ValueError(part)
                items.append(slice(*bounds))
            else:
                items.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be Python-style indices per dimension like 0:100,::2 or 5,:, got {text!r}") from None
    return items


def _device(text: str) -> str:
    name = text.strip().lower()
    kind, _, number = name.partition(":")
    if kind not in ("meta", "cpu", "cuda", "mps", "auto") or (number and not (kind == "cuda" and number.isdigit())):
        raise argparse.ArgumentTypeError(f"must be meta, cpu, cuda, cuda:N, mps or auto, got {text!r}")
    return name


def add_arguments(parser) -> None:
    parser.add_argument("--shape", type=_shape, default=DEFAULT_SHAPE,
                        help="comma-separated sizes (default 49152,12288: the lecture's GPT-3 FFN matrix)")
    parser.add_argument("--dtype", default="fp32", help="element type (default fp32; see `trainledger dtypes`)")
    parser.add_argument("--transpose", type=_pair, metavar="D0,D1", help="view x.transpose(D0, D1) (applied before --slice)")
    parser.add_argument("--slice", type=_index, metavar="INDEX", dest="index",
                        help="view x[INDEX] with Python indexing per dimension, e.g. 0:100,::2 or 5,: (steps > 0)")
    parser.add_argument("--torch", action="store_true", help="also build the tensor in PyTorch and check the layout")
    parser.add_argument("--device", type=_device, default="meta",
                        help="device for --torch: meta (default, allocates nothing), cpu, cuda[:N], mps or auto")
    common.add_json_flag(parser)


def _expression(transpose, index) -> str:
    text = "x"
    if transpose:
        text += f".transpose({transpose[0]}, {transpose[1]})"
    if index:
        def fmt(item):
            if isinstance(item, int):
                return str(item)
            parts = ["" if v is None else str(v) for v in (item.start, item.stop, item.step)]
            return ":".join(parts[:2]) + (f":{parts[2]}" if item.step is not None else "")
        text += "[" + ", ".join(fmt(i) for i in index) + "]"
    return text


def _torch_check(args, result: dict) -> dict:
    import torch

    from trainledger.tensors import inspect_layout, pick_device, torch_dtype

    dtype = torch_dtype(args.dtype)
    device = pick_device() if args.device == "auto" else args.device
    if str(device) != "meta" and result["storage_bytes"] > REAL_TENSOR_LIMIT_BYTES:
        raise TrainledgerError(f"--torch on {device} would allocate {result['storage_bytes']:,} bytes (and copy views to "
                               f"test them); the limit is {REAL_TENSOR_LIMIT_BYTES:,}: use --device meta (the default)")
    kind = torch.device(device).type
    if (kind == "cuda" and not torch.cuda.is_available()) or (kind == "mps" and not torch.backends.mps.is_available()):
        raise TrainledgerError(f"device {str(device)!r} is not available on this machine (--device); use meta or cpu")
    try:
        x = torch.empty(tuple(args.shape), dtype=dtype, device=device)
    except (RuntimeError, TypeError, AssertionError) as error:   # AssertionError: torch built without CUDA
        raise TrainledgerError(f"cannot allocate the tensor on device {device!r} (--device): {error}".splitlines()[0]) from None
    if args.transpose:
        x = x.transpose(*args.transpose)
    if args.index:
        x = x[tuple(args.index)]
    measured = inspect_layout(x)
    agrees = (measured["shape"] == result["view_shape"] and measured["stride"] == result["stride"]
              and measured["storage_offset"] == result["storage_offset"]
              and measured["contiguous"] == result["contiguous"] and measured["view_bytes"] == result["view_bytes"]
              and measured["storage_bytes"] == result["storage_bytes"]
              and measured["view_flat_possible"] == result["view_flat_possible"])
    return {"torch": measured, "torch_agrees": agrees}


def compute(args) -> dict:
    from trainledger.account.counting.tensor import layout_report

    result = {"expression": _expression(args.transpose, args.index)}
    result |= layout_report(tuple(args.shape), args.dtype, args.transpose, args.index)
    from trainledger.cli.sanity import absurd_bytes
    warnings = absurd_bytes(result["storage_bytes"], "this tensor's storage", "check --shape (and its suffixes)")
    if warnings:
        result["warnings"] = warnings
    if args.torch:
        result |= _torch_check(args, result)
    return result


def render(result: dict, args) -> None:
    r = result
    rows = [
        ["tensor x", f"{r['shape']} {r['dtype']} ({format_count(r['numel'])} elements × {r['element_bytes']} bytes)"],
        ["storage bytes", f"{r['storage_bytes']:,} ({format_bytes(r['storage_bytes'])})"],
        ["row-major stride", str(r["row_major_stride"])],
        ["view", r["expression"]],
        ["view shape", str(r["view_shape"])],
        ["view bytes", f"{r['view_bytes']:,} ({format_bytes(r['view_bytes'])})"],
        ["stride (elements)", str(r["stride"])],
        ["stride (bytes)", str(r["stride_bytes"])],
        ["storage offset", str(r["storage_offset"])],
        ["contiguous", "yes" if r["contiguous"] else "no"],
        [".view(-1) without copy", "yes" if r["view_flat_possible"] else "no (.reshape copies)"],
        [".contiguous() allocates", f"{r['contiguous_copy_bytes']:,} bytes"],
    ]
    if "torch" in r:
        t = r["torch"]
        rows.append([f"torch ({t['device']})", f"shape {t['shape']} stride {t['stride']} offset {t['storage_offset']} "
                     f"contiguous {t['contiguous']} reshape copies {t['reshape_copies']}"])
        rows.append(["torch agrees", "yes" if r["torch_agrees"] else "NO"])
    common.console().print(common.table("Tensor layout (views share storage; only copies cost memory)",
                                        ["quantity", "value"], rows))
