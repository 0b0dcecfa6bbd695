"""`trainledger checkpoints DIR`: the checkpoints of a training run with their step, size, status and loss."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainledger.cli import common
from trainledger.errors import TrainledgerError
from trainledger.units import format_bytes

HELP = "list the checkpoints of a training run: step, size, status (sha256-verified) and loss"
DESCRIPTION = """\
Lists the checkpoints in DIR (a --checkpoint-dir, or a run's --out-dir holding checkpoints/): step, size on
disk, status and the training loss at that step. Status is `ok` when manifest.json is well formed and names
this step, every file has the size and the sha256 in it, every sharded file is listed and trainer.pt passes its
zip CRC-32s; `corrupt` (with why) when one does not, `unsafe` when it would be refused as it loads (a trainer.pt
that is a raw pickle naming code, a DCP .metadata naming a global the restricted unpickler refuses: read, never
executed), `incomplete` when there is no manifest (a save that never finished; it takes no slot among the
--keep-checkpoints kept); a loss spike is flagged. `--resume` continues
from the newest `ok` one whose content also loads (a trainer state of this step). Reads manifests, hashes
and CRC-32s, never unpickles. The checks find damage, not forgery: see docs/train.md.

examples:
  trainledger checkpoints runs/tiny-stdlib
  trainledger checkpoints runs/tiny-stdlib/checkpoints --json
  trainledger checkpoints runs/tiny-stdlib/checkpoints/step_00000200     (that one checkpoint)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", metavar="DIR", help="a checkpoint directory, or a run directory with checkpoints/ in it")
    common.add_json_flag(parser)


def _directory(text: str) -> tuple[Path, Path | None]:
    """(the checkpoint directory, the one checkpoint asked for or None): DIR may be a run, its checkpoints/, or one
    checkpoint in it (runs/x/checkpoints/step_00000200, which `generate` and `export` take too)."""
    path = Path(text)
    if not path.is_dir():
        raise TrainledgerError(f"DIR {text!r} is not a directory (give a --checkpoint-dir or a run's --out-dir)")
    if path.name.startswith("step_") and not any(c.name.startswith("step_") for c in path.iterdir()):
        return path.parent, path
    if not any(child.name.startswith("step_") for child in path.iterdir()) and (path / "checkpoints").is_dir():
        return path / "checkpoints", None
    return path, None


def compute(args) -> dict:
    """{"directory", "checkpoints": [{step, path, format, size_bytes, status, problem, loss, loss_spike}],
    "leftovers": temporary/trash directories of interrupted saves or prunes, "in_use_by_pid"}."""
    from trainledger.train import checkpoint as ckpt

    directory, only = _directory(args.dir)
    records = []
    for ref in ckpt.list_checkpoints(directory):
        if only is not None and ref.path.resolve() != only.resolve():
            continue
        manifest = ckpt.read_manifest(ref.path)
        fmt, problem = ckpt.verify(ref.path)
        unsafe = ckpt.unsafe_problem(ref.path, fmt) if problem is None else None
        info = ckpt.manifest_info(ref.path)
        status = "unsafe" if unsafe else "ok" if problem is None else ("incomplete" if manifest is None else "corrupt")
        problem = unsafe or problem
        records.append({"step": ref.step, "path": str(ref.path), "format": fmt or None,
                        "size_bytes": ckpt.checkpoint_bytes(ref.path), "status": status, "problem": problem,
                        "loss": info.get("loss"), "loss_spike": bool(info.get("loss_spike"))})
    leftovers = sorted(str(p) for pattern in (".tmp-step_*", ".trash-step_*") for p in directory.glob(pattern))
    return {"directory": str(directory), "checkpoints": records, "leftovers": leftovers,
            "in_use_by_pid": ckpt.lock_holder(directory)}


def render(result: dict, args) -> None:
    records = result["checkpoints"]
    if not records:
        print(f"no checkpoints in {result['directory']}")
    else:
        print(f"checkpoints in {result['directory']} (newest last)")
        print(f"  {'step':>8}  {'size':>10}  {'format':6}  {'loss':>8}  status")
        for r in records:
            loss = f"{r['loss']:.4f}" if isinstance(r["loss"], (int, float)) else "-"
            status = r["status"] + (" (loss spike)" if r["loss_spike"] else "")
            if r["problem"] and r["status"] != "ok":
                status += f": {r['problem']}"
            print(f"  {r['step']:>8}  {format_bytes(r['size_bytes']):>10}  {r['format'] or '-':6}  {loss:>8}  {status}")
    for path in result["leftovers"]:
        print(f"leftover of an interrupted save or prune (deleted by the next save): {path}")
    if result["in_use_by_pid"]:
        print(f"in use by pid {result['in_use_by_pid']} (a trainer is running)")
