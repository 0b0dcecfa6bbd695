"""Checkpoint files: atomic commit with a sha256 manifest, last-K pruning, corruption fallback, pickle refusal, RNG state."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch

from trainledger.errors import TrainledgerError
from trainledger.train import checkpoint as ckpt
from trainledger.train.rng import generator_state, load_rng_state_dict, rng_state_dict, set_generator_state


def save(directory, step, state=None, keep=10):
    tmp = ckpt.begin(directory, step)
    ckpt.write_trainer_state(tmp, state if state is not None else {"step": step, "w": torch.arange(4.0) * step})
    path = ckpt.commit(tmp, directory, step, "full")
    ckpt.prune(directory, keep)
    return path


def test_commit_writes_manifest_with_sha256_and_leaves_no_temp(tmp_path):
    path = save(tmp_path, 7)
    assert path.name == "step_00000007"
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["step"] == 7 and manifest["format"] == "full"
    assert manifest["files"] == {"trainer.pt": ckpt.sha256_file(path / "trainer.pt")}
    assert [p.name for p in tmp_path.iterdir()] == ["step_00000007"]
    state = ckpt.load_trainer_state(path)
    assert torch.equal(state["w"], torch.arange(4.0) * 7)


def test_prune_keeps_last_k_and_removes_leftover_temp_dirs(tmp_path):
    for step in (1, 2, 3, 4, 5):
        save(tmp_path, step, keep=2)
    ckpt.begin(tmp_path, 6)   # a save that crashed before commit
    ckpt.prune(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000004", "step_00000005"]


def test_truncated_latest_falls_back_to_previous_good(tmp_path):
    save(tmp_path, 1)
    latest = save(tmp_path, 2)
    data = (latest / "trainer.pt").read_bytes()
    (latest / "trainer.pt").write_bytes(data[: len(data) // 2])
    warnings = []
    ref, fmt = ckpt.latest_good(tmp_path, warn=warnings.append)
    assert ref.step == 1 and fmt == "full"
    assert len(warnings) == 1 and "step_00000002" in warnings[0] and "sha256" in warnings[0]


def test_checkpoint_without_manifest_is_incomplete(tmp_path):
    save(tmp_path, 1)
    broken = save(tmp_path, 2)
    (broken / "manifest.json").unlink()
    ref, _ = ckpt.latest_good(tmp_path, warn=lambda m: None)
    assert ref.step == 1
    assert ckpt.verify(broken)[1].startswith("no manifest.json")


def test_no_checkpoint_at_all(tmp_path):
    assert ckpt.latest_good(tmp_path / "missing", warn=lambda m: None) == (None, "")


class Payload:
    """Pickles to a call of os.system: loading it with plain pickle would create the marker file."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickled_code_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "payload-ran"
    path = save(tmp_path / "ckpts", 3, state={"step": 3, "evil": Payload(marker)})
    # the manifest matches (an attacker can recompute it): the sha256 check passes, weights_only must refuse
    assert ckpt.verify(path) == ("full", None)
    with pytest.raises(ckpt.UnsafeCheckpointError, match="refusing checkpoint .*weights_only=True"):
        ckpt.load_trainer_state(path)
    assert not marker.exists()
    assert issubclass(ckpt.UnsafeCheckpointError, TrainledgerError)


def test_rng_states_round_trip_through_weights_only_load(tmp_path):
    torch.manual_seed(1), np.random.seed(2), random.seed(3)
    generator = np.random.default_rng(4)
    generator.integers(0, 10, 5)
    path = save(tmp_path, 1, state={"rng": rng_state_dict(), "sampler": generator_state(generator)})
    expected = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)], generator.integers(0, 1000, 4))
    state = ckpt.load_trainer_state(path)   # weights_only=True: plain ints and lists, no ndarrays
    load_rng_state_dict(state["rng"])
    fresh = np.random.default_rng(0)
    set_generator_state(fresh, state["sampler"])
    got = (torch.rand(3), np.random.rand(3), [random.random() for _ in range(3)], fresh.integers(0, 1000, 4))
    assert torch.equal(expected[0], got[0])
    assert np.array_equal(expected[1], got[1]) and expected[2] == got[2] and np.array_equal(expected[3], got[3])


def rewrite_manifest(path):
    """Recompute the manifest's sha256s after damaging a file: the sha256 check passes (verify() may still find
    the damage through the zip's CRC-32s, or loading finds it)."""
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"] = {name: ckpt.sha256_file(path / name) for name in manifest["files"]}
    (path / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("damage, message", [
    (lambda data: data[: len(data) // 2], "cannot be loaded"),
    (lambda data: b"", "cannot be loaded"),
    (lambda data: bytes([data[0] ^ 0xFF]) + data[1:], "is damaged"),
    (lambda data: bytes(b ^ 0xFF for b in data[:4]) + data[4:], "is damaged"),
], ids=["truncated", "empty", "flipped-first-byte", "flipped-header"])
def test_damaged_file_with_matching_manifest_is_corrupt_and_falls_back(tmp_path, damage, message):
    save(tmp_path, 1)
    latest = save(tmp_path, 2)
    file = latest / "trainer.pt"
    file.write_bytes(damage(file.read_bytes()))
    rewrite_manifest(latest)
    with pytest.raises(ckpt.CorruptCheckpointError, match=message):
        ckpt.load_trainer_state(latest)
    warnings = []
    ref, _ = ckpt.latest_good(tmp_path, warn=warnings.append)
    assert ref.step == 1
    assert len(warnings) == 1 and "is corrupt" in warnings[0] and "although its manifest matches" in warnings[0]
    assert "refusing" not in warnings[0] and "pickled objects" not in warnings[0]


def test_a_kill_during_pruning_never_leaves_half_a_checkpoint_under_its_name(tmp_path, monkeypatch):
    for step in (1, 2, 3):
        save(tmp_path, step)
    real_rmtree = ckpt.shutil.rmtree

    def killed_midway(path, ignore_errors=False):
        victim = next(p for p in sorted(path.rglob("*")) if p.is_file())
        victim.unlink()                      # the deletion had begun ...
        raise KeyboardInterrupt              # ... when the process died
    monkeypatch.setattr(ckpt.shutil, "rmtree", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        ckpt.prune(tmp_path, keep=2)
    monkeypatch.setattr(ckpt.shutil, "rmtree", real_rmtree)
    assert [r.step for r in ckpt.list_checkpoints(tmp_path)] == [2, 3]     # step 1 left its name first
    assert [p.name for p in tmp_path.glob(".trash-step_00000001-*")]      # half-deleted, under a trash name
    ckpt.prune(tmp_path, keep=2)                                           # the next save cleans it up
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000002", "step_00000003"]


def test_only_complete_checkpoints_count_toward_k(tmp_path):
    (tmp_path / "step_00000009").mkdir(parents=True)        # a stray directory: no manifest
    for step in (1, 2, 3):
        save(tmp_path, step, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_00000002", "step_00000003", "step_00000009"]
    assert ckpt.latest_good(tmp_path, warn=lambda m: None)[0].step == 3


def test_directory_lock_names_the_holder_and_is_released(tmp_path):
    fd = ckpt.lock_directory(tmp_path)
    assert ckpt.lock_holder(tmp_path) == str(os.getpid())
    with pytest.raises(TrainledgerError, match=f"is in use by pid {os.getpid()}"):
        ckpt.lock_directory(tmp_path)         # flock locks belong to the open file: a second open is refused
    ckpt.unlock_directory(fd)
    assert ckpt.lock_holder(tmp_path) is None
    ckpt.unlock_directory(ckpt.lock_directory(tmp_path))
