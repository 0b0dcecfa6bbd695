"""DCP metadata read without pickle.load: the restricted unpickler accepts what dcp.save writes and nothing else.

The reference is DCP itself: a checkpoint written by `dcp.save` (one process, no process group) must read
back to the same Metadata as pickle.load gives, and load through SafeFileSystemReader; a planted payload that
pickle.load would run must be refused before it runs; damaged files are corrupt, not unsafe.
"""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.distributed.checkpoint as dcp

from trainledger.train import safe_dcp


@pytest.fixture()
def saved(tmp_path):
    """A DCP checkpoint of a small state (tensors of two dtypes and a float), its directory."""
    state = {"model": {"w": torch.arange(12.0).reshape(3, 4), "b": torch.arange(3, dtype=torch.bfloat16)},
             "optimizer": {"lr": 0.5, "step": torch.tensor(7)}}
    directory = tmp_path / "model"
    with pytest.warns(UserWarning):     # "torch.distributed is disabled...": one process, no process group
        dcp.save(state, checkpoint_id=str(directory))
    return directory


def _payload(marker) -> bytes:
    """A protocol-0 pickle that calls os.mkdir(marker) when loaded."""
    return b"cos\nmkdir\n(V" + str(marker).encode() + b"\ntR."


def test_reads_what_dcp_save_wrote_and_loads_through_the_safe_reader(saved):
    ours = safe_dcp.read_metadata(saved)
    theirs = pickle.loads((saved / ".metadata").read_bytes())
    assert ours.state_dict_metadata == theirs.state_dict_metadata
    assert ours.storage_data == theirs.storage_data
    target = {"model": {"w": torch.zeros(3, 4), "b": torch.zeros(3, dtype=torch.bfloat16)},
              "optimizer": {"lr": 0.0, "step": torch.tensor(0)}}
    with pytest.warns(UserWarning):
        dcp.load(target, storage_reader=safe_dcp.SafeFileSystemReader(str(saved)))
    assert torch.equal(target["model"]["w"], torch.arange(12.0).reshape(3, 4))
    assert target["optimizer"]["lr"] == 0.5 and int(target["optimizer"]["step"]) == 7


def test_planted_payload_is_refused_before_it_runs(saved, tmp_path):
    marker = tmp_path / "payload-ran"
    (saved / ".metadata").write_bytes(_payload(marker))
    with pytest.raises(safe_dcp.UnsafeMetadataError, match="os.mkdir"):
        safe_dcp.read_metadata(saved)
    with pytest.raises(dcp.CheckpointException, match="os.mkdir"), pytest.warns(UserWarning):
        dcp.load({"model": {"w": torch.zeros(3, 4)}}, storage_reader=safe_dcp.SafeFileSystemReader(str(saved)))
    assert not marker.exists()
    pickle.loads(_payload(marker))        # the payload is real: pickle.load would have run it
    assert marker.exists()


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / ".metadata").write_bytes((d / ".metadata").read_bytes()[:50]), "unreadable"),
    (lambda d: (d / ".metadata").write_bytes(b""), "unreadable"),
    (lambda d: (d / ".metadata").write_bytes(b"\x00\xff" + (d / ".metadata").read_bytes()[2:]), "unreadable"),
    (lambda d: (d / ".metadata").write_bytes(pickle.dumps({"not": "metadata"})), "not DCP Metadata"),
    (lambda d: _truncate_shard(d), "truncated"),
    (lambda d: _delete_shard(d), "missing"),
], ids=["truncated-metadata", "empty-metadata", "flipped-header", "wrong-object", "truncated-shard", "missing-shard"])
def test_damaged_checkpoints_are_corrupt_not_unsafe(saved, damage, message):
    damage(saved)
    with pytest.raises(safe_dcp.CorruptMetadataError, match=message):
        safe_dcp.read_metadata(saved)


def _truncate_shard(directory):
    shard = next(directory.glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])


def _delete_shard(directory):
    next(directory.glob("*.distcp")).unlink()


class Payload:
    """Pickles to a call of os.mkdir: loading it with weights_only=False would create the marker directory."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os
        return (os.mkdir, (self.marker,))


def test_every_item_loads_weights_only(saved):
    metadata = safe_dcp.read_metadata(saved)
    assert safe_dcp.check_items(saved, metadata) == len(metadata.storage_data) == 4


def test_a_payload_stored_as_a_non_tensor_item_is_refused_by_the_check_and_the_planner(tmp_path):
    marker = tmp_path / "payload-ran"
    directory = tmp_path / "model"
    with pytest.warns(UserWarning):
        dcp.save({"w": torch.ones(2), "extra": Payload(marker)}, checkpoint_id=str(directory))
    with pytest.raises(safe_dcp.UnsafeMetadataError, match="item extra: .*GLOBAL posix.mkdir"):
        safe_dcp.check_items(directory, safe_dcp.read_metadata(directory))
    with pytest.raises(dcp.CheckpointException, match="posix.mkdir"), pytest.warns(UserWarning):
        dcp.load({"w": torch.zeros(2), "extra": None}, storage_reader=safe_dcp.SafeFileSystemReader(str(directory)),
                 planner=safe_dcp.SafeLoadPlanner())
    assert not marker.exists()
    with pytest.warns(UserWarning):     # DCP's own planner: torch.load(weights_only=False) runs it
        dcp.load({"w": torch.zeros(2), "extra": None}, checkpoint_id=str(directory))
    assert marker.exists()


def test_a_zeroed_shard_of_the_right_size_fails_the_item_check(saved):
    shard = next(saved.glob("*.distcp"))
    shard.write_bytes(bytes(shard.stat().st_size))
    metadata = safe_dcp.read_metadata(saved)            # sizes still match: only loading the items finds it
    with pytest.raises(safe_dcp.CorruptMetadataError, match="item"):
        safe_dcp.check_items(saved, metadata)
