"""Reading a torch.distributed.checkpoint (DCP) directory without running pickled code.

DCP's `FileSystemReader.read_metadata` calls `pickle.load` on `.metadata` (torch/distributed/checkpoint/
filesystem.py), so a planted payload runs on every rank at `--resume`. The shard files are already read with
`torch.load(weights_only=True)`; the metadata is the hole. `.metadata` written by `dcp.save` (torch 2.13) holds
only these globals, found by recording `find_class` on a real FSDP2 checkpoint:

    torch.distributed.checkpoint.metadata: Metadata, MetadataIndex, StorageMeta, TensorStorageMetadata,
        BytesStorageMetadata, ChunkStorageMetadata, TensorProperties, _MEM_FORMAT_ENCODING
    torch.distributed.checkpoint.filesystem: _StorageInfo
    torch: Size and the dtypes (torch.float32, ...);  torch.serialization: _get_layout;  pathlib: PosixPath

The shards hold a second hole: values that are not tensors (the optimizer's param_groups: lr, betas, ...)
are stored as torch.save'd bytes, and DCP's `DefaultLoadPlanner.load_bytes` reads them with
`torch.load(weights_only=False)` (default_planner.py). `SafeLoadPlanner` reads them with weights_only=True.

`SafeUnpickler` resolves exactly those (each a dataclass, enum or value type whose construction runs no
user code) and refuses any other global; `read_metadata` then checks the structure: a `Metadata` whose
storage items point at shard files inside the checkpoint that are long enough to hold them (a truncated
shard is found here, before anything is loaded). `SafeFileSystemReader` is DCP's reader with this metadata
path; use both: `dcp.load(state, storage_reader=SafeFileSystemReader(path), planner=SafeLoadPlanner())`.
`check_items` loads every stored item once with weights_only=True (rank 0, before any state is touched), so
a damaged or hostile shard is found before the collective load.
"""

from __future__ import annotations

import io
import pickle
import re
from pathlib import Path

import torch
from torch.distributed.checkpoint import CheckpointException, FileSystemReader  # noqa: F401 (re-exported)
from torch.distributed.checkpoint import filesystem as dcp_filesystem
from torch.distributed.checkpoint._traverse import set_element
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint import metadata as dcp_metadata

from trainledger.errors import TrainledgerError, first_line

METADATA_FILE = ".metadata"
_METADATA_CLASSES = ("Metadata", "MetadataIndex", "StorageMeta", "TensorStorageMetadata", "BytesStorageMetadata",
                     "ChunkStorageMetadata", "TensorProperties", "_MEM_FORMAT_ENCODING")
ALLOWED_GLOBALS = {
    **{("torch.distributed.checkpoint.metadata", name): getattr(dcp_metadata, name) for name in _METADATA_CLASSES},
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"): dcp_filesystem._StorageInfo,
    ("torch", "Size"): torch.Size,
    ("torch.serialization", "_get_layout"): torch.serialization._get_layout,   # a lookup of torch.strided etc.
    ("pathlib", "PosixPath"): Path,
    ("pathlib", "PurePosixPath"): Path,
}
# shard files as dcp.save names them: __<rank>_<n>.distcp, no directory part
_SHARD_NAME = re.compile(r"^__\d+_\d+\.distcp$")


class UnsafeMetadataError(TrainledgerError):
    """`.metadata` names a global outside DCP's metadata classes: it is never constructed."""


class CorruptMetadataError(TrainledgerError):
    """`.metadata` cannot be read or does not describe shard files present in the checkpoint."""


class SafeUnpickler(pickle.Unpickler):
    """pickle.Unpickler that resolves only ALLOWED_GLOBALS and torch dtypes; anything else is refused."""

    def find_class(self, module: str, name: str):
        if (module, name) in ALLOWED_GLOBALS:
            return ALLOWED_GLOBALS[(module, name)]
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise UnsafeMetadataError(f"{module}.{name}")

    def persistent_load(self, pid):
        raise CorruptMetadataError(f"unexpected persistent id {str(pid)[:40]!r}")


def read_metadata(directory: str | Path) -> dcp_metadata.Metadata:
    """The DCP Metadata of checkpoint `directory`, unpickled with SafeUnpickler and checked against its shards.

    Raises UnsafeMetadataError when `.metadata` names a forbidden global (its code never runs), and
    CorruptMetadataError for anything else wrong: unreadable, truncated, wrong types, a shard file missing,
    outside the directory or shorter than the items it should hold.
    """
    directory = Path(directory)
    path = directory / METADATA_FILE
    try:
        data = path.read_bytes()
        metadata = SafeUnpickler(io.BytesIO(data)).load()
    except UnsafeMetadataError as error:
        raise UnsafeMetadataError(f"{path} names the global {error}, which is not one of DCP's metadata classes "
                                  "(it could run code when loaded)") from None
    except CorruptMetadataError as error:
        raise CorruptMetadataError(f"{path}: {error}") from None
    except Exception as error:     # truncated, flipped bytes, wrong opcodes: the file is damaged, not dangerous
        raise CorruptMetadataError(f"{path} is unreadable ({type(error).__name__}: {str(error)[:120]})") from None
    _check_structure(metadata, directory)
    return metadata


def _check_structure(metadata, directory: Path) -> None:
    if not isinstance(metadata, dcp_metadata.Metadata):
        raise CorruptMetadataError(f"{directory / METADATA_FILE} holds a {type(metadata).__name__}, not DCP Metadata")
    if not isinstance(metadata.state_dict_metadata, dict) or not isinstance(metadata.storage_data, dict):
        raise CorruptMetadataError(f"{directory / METADATA_FILE} lacks its state_dict or storage tables")
    needed_bytes: dict[str, int] = {}
    for index, info in metadata.storage_data.items():
        if not isinstance(index, dcp_metadata.MetadataIndex) or not isinstance(info, dcp_filesystem._StorageInfo):
            raise CorruptMetadataError(f"{directory / METADATA_FILE} has a storage entry of the wrong type")
        name = info.relative_path
        if not isinstance(name, str) or not _SHARD_NAME.match(name):
            raise CorruptMetadataError(f"{directory / METADATA_FILE} points at {str(name)[:60]!r}, not a shard file "
                                       "of this checkpoint")
        if getattr(info, "transform_descriptors", None):      # dcp.save as we call it never writes transforms
            raise CorruptMetadataError(f"{directory / METADATA_FILE} asks for stream transforms we never write")
        if not all(isinstance(v, int) and v >= 0 for v in (info.offset, info.length)):
            raise CorruptMetadataError(f"{directory / METADATA_FILE} has a negative or non-integer shard offset")
        needed_bytes[name] = max(needed_bytes.get(name, 0), info.offset + info.length)
    for name, size in needed_bytes.items():
        shard = directory / name
        if not shard.is_file():
            raise CorruptMetadataError(f"shard {shard} is missing")
        if shard.stat().st_size < size:
            raise CorruptMetadataError(f"shard {shard} is truncated ({shard.stat().st_size:,} bytes, "
                                       f"needs {size:,})")


class SafeFileSystemReader(FileSystemReader):
    """DCP's FileSystemReader, reading `.metadata` through read_metadata() instead of pickle.load."""

    def read_metadata(self, *args, **kwargs) -> dcp_metadata.Metadata:
        if kwargs.get("rank") is not None:      # per-rank metadata files: not written by our saves
            raise CorruptMetadataError(f"{self.path}: per-rank metadata is not supported")
        metadata = read_metadata(Path(self.path))
        if getattr(metadata, "storage_meta", None) is None:
            metadata.storage_meta = dcp_metadata.StorageMeta()
        metadata.storage_meta.load_id = self.load_id
        return metadata


def _load_weights_only(stream: io.BytesIO):
    """torch.load(weights_only=True) of one stored item: Unsafe for a foreign global, Corrupt for anything else."""
    try:
        return torch.load(stream, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        unsafe = next((line.strip() for line in str(error).splitlines() if "GLOBAL" in line), None)
        if unsafe:
            raise UnsafeMetadataError(unsafe[:160]) from None
        raise CorruptMetadataError(f"an item is damaged ({str(error).strip().splitlines()[-1][:120]})") from None
    except Exception as error:
        raise CorruptMetadataError(f"an item cannot be loaded ({type(error).__name__}: "
                                   f"{first_line(error)[:120]})") from None


def check_items(directory: str | Path, metadata: dcp_metadata.Metadata) -> int:
    """Loads every item the metadata lists from its shard, weights_only=True, one at a time; the count.

    Raises UnsafeMetadataError (a global outside tensors and plain containers) or CorruptMetadataError
    naming the shard and the item. Reads each byte once more than the sha256 check; memory: one item.
    """
    directory = Path(directory)
    for index, info in metadata.storage_data.items():
        with open(directory / info.relative_path, "rb") as handle:
            handle.seek(info.offset)
            data = handle.read(info.length)
        try:
            _load_weights_only(io.BytesIO(data))
        except UnsafeMetadataError as error:
            raise UnsafeMetadataError(f"shard {directory / info.relative_path}, item {index.fqn}: {error}") from None
        except CorruptMetadataError as error:
            raise CorruptMetadataError(f"shard {directory / info.relative_path}, item {index.fqn}: {error}") from None
    return len(metadata.storage_data)


class SafeLoadPlanner(DefaultLoadPlanner):
    """DCP's DefaultLoadPlanner, but non-tensor items are read with torch.load(weights_only=True)."""

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        try:
            loaded = _load_weights_only(value)
        except UnsafeMetadataError as error:
            raise UnsafeMetadataError(f"item {read_item.dest_index.fqn}: {error}") from None
        if self.flatten_state_dict:
            set_element(self.original_state_dict, self.mappings[read_item.dest_index.fqn], loaded)
        else:
            self.state_dict[read_item.dest_index.fqn] = loaded
