"""What a checkpoint would run if it were loaded, found without loading it (pickletools parses, never executes).

- trainer.pt is always written by torch.save as a zip archive. A raw pickle in its place is planted: when it names
  code (a GLOBAL, STACK_GLOBAL, REDUCE... opcode) it is refused as unsafe. torch.load's weights-only unpickler
  stops at a protocol-4 pickle's FRAME opcode first and called such a file "damaged", so --resume skipped it (and
  went on to an older checkpoint) instead of refusing it.
- `trainledger checkpoints` lists a checkpoint whose files match their manifest as `ok` only when it would also
  load without refusal: a raw pickle naming code, or a DCP `.metadata` naming a global the restricted unpickler
  refuses (train/safe_dcp.py), is `unsafe`.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.files import open_member

TRAINER_FILE = "trainer.pt"    # a checkpoint's trainer state (train/checkpoint.py, which re-exports these names)
SHARDED_DIR = "model"          # its DCP shards, for FSDP, TP and PP runs


class UnsafeCheckpointError(TrainledgerError):
    """A checkpoint holds pickled objects other than tensors and plain containers; it is never loaded."""

# Opcodes by which a pickle names or calls code (pickletools' names): a trainer.pt that is not torch.save's zip
# archive but a raw pickle using them is someone's planted object (we write zip archives only).
CODE_OPCODES = frozenset({"GLOBAL", "STACK_GLOBAL", "INST", "OBJ", "REDUCE", "NEWOBJ", "NEWOBJ_EX", "BUILD",
                          "EXT1", "EXT2", "EXT4"})
RAW_PICKLE_SCAN_BYTES = 1 << 20


def refuse_raw_pickle(handle, file: Path) -> None:
    """UnsafeCheckpointError when the open file `handle` is no zip archive but a pickle stream (protocol 2+: it
    starts with the PROTO opcode) that names code within its first RAW_PICKLE_SCAN_BYTES, read by pickletools
    (which parses, never executes). torch.load's weights-only unpickler called a protocol-4 one "damaged"
    (its FRAME opcode is unsupported), so the checkpoint was skipped instead of refused. Leaves `handle` at 0."""
    import pickletools
    try:
        if zipfile.is_zipfile(handle):
            return
        handle.seek(0)
        head = handle.read(RAW_PICKLE_SCAN_BYTES)
    finally:
        handle.seek(0)
    if not head.startswith(b"\x80"):
        return
    named = None
    try:
        for opcode, argument, _ in pickletools.genops(io.BytesIO(head)):
            if opcode.name in CODE_OPCODES:
                named = opcode.name + (f" {argument}" if isinstance(argument, str) else "")
                break
    except Exception:              # cut short or not a pickle after all: torch.load says what it is
        pass
    if named is not None:
        raise UnsafeCheckpointError(
            f"refusing checkpoint {file}: it is a raw pickle (not torch.save's zip archive) that names code "
            f"({named[:80]}); it is never loaded. Delete it or pass another --checkpoint-dir")


def unsafe_problem(path: Path, fmt: str) -> str | None:
    """Why checkpoint `path` would be refused as unsafe when loaded, or None: a raw pickle naming code as trainer.pt,
    a DCP `.metadata` naming a global the restricted unpickler refuses. Reads, never executes (for `checkpoints`)."""
    try:
        with os.fdopen(open_member(Path(path) / TRAINER_FILE), "rb") as handle:
            refuse_raw_pickle(handle, Path(path) / TRAINER_FILE)
    except UnsafeCheckpointError as error:
        return str(error)
    except OSError:                 # damage: verify's to say, not this check's
        return None
    if fmt != "dcp":
        return None
    from trainledger.train import safe_dcp        # (torch: only for a sharded checkpoint)
    try:
        safe_dcp.read_metadata(Path(path) / SHARDED_DIR)
    except safe_dcp.UnsafeMetadataError as error:
        return str(error)
    except Exception:
        return None
    return None
