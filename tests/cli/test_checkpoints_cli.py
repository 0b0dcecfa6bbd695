"""`trainledger checkpoints DIR`: step, size, status and loss of each checkpoint, measured against the files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainledger.cli.main import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A finished 4-step run with checkpoints at steps 2 and 4."""
    from trainledger.data import write_tokens
    root = tmp_path_factory.mktemp("ckpts")
    text = b"".join(p.read_bytes() for p in sorted(Path(__file__).parents[2].joinpath("src").rglob("*.py")))[:30_000]
    data = write_tokens(root / "t.tokens", np.frombuffer(text, dtype=np.uint8), dtype="uint8")
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["train", "--data", str(data), "--steps", "4", "--checkpoint-every", "2", "--seq-len", "16",
                     "--batch-size", "4", "--eval-every", "0", "--no-plot", "--quiet", "--out-dir", str(root / "run")]) == 0
    finally:
        torch.set_num_threads(threads)
    return root / "run"


def _json(capsys, *argv):
    capsys.readouterr()
    assert main(["checkpoints", *map(str, argv), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_lists_step_size_status_and_the_loss_of_the_metrics(run_dir, capsys):
    from trainledger.train.metrics import read_metrics
    result = _json(capsys, run_dir)              # a run directory: its checkpoints/ is listed
    assert result["directory"] == str(run_dir / "checkpoints")
    losses = {r["step"]: r["loss"] for r in read_metrics(run_dir / "metrics.jsonl")}
    records = result["checkpoints"]
    assert [r["step"] for r in records] == [2, 4]
    for record in records:
        files = [p for p in Path(record["path"]).rglob("*") if p.is_file()]
        assert record["size_bytes"] == sum(p.stat().st_size for p in files)
        assert record["status"] == "ok" and record["problem"] is None and record["format"] == "full"
        assert record["loss"] == losses[record["step"]] and record["loss_spike"] is False
    assert result["leftovers"] == [] and result["in_use_by_pid"] is None


def test_one_checkpoint_directory_lists_that_checkpoint(run_dir, capsys):
    """runs/x/checkpoints/step_00000002, which generate and export take, is that checkpoint (issue 31, item 5: it
    said "no checkpoints")."""
    one = run_dir / "checkpoints" / "step_00000002"
    result = _json(capsys, one)
    assert result["directory"] == str(run_dir / "checkpoints")
    assert [(r["step"], r["status"], Path(r["path"]).name) for r in result["checkpoints"]] == [(2, "ok", one.name)]
    assert main(["checkpoints", str(one)]) == 0
    out = capsys.readouterr().out
    assert "no checkpoints" not in out and "ok" in out


def test_damaged_incomplete_and_leftover_directories_are_reported(run_dir, tmp_path, capsys):
    import shutil
    directory = tmp_path / "checkpoints"
    shutil.copytree(run_dir / "checkpoints", directory)
    trainer = directory / "step_00000004" / "trainer.pt"
    trainer.write_bytes(trainer.read_bytes()[:1000])
    (directory / "step_00000007").mkdir()
    (directory / ".tmp-step_00000006-x").mkdir()
    statuses = {r["step"]: r["status"] for r in _json(capsys, directory)["checkpoints"]}
    assert statuses == {2: "ok", 4: "corrupt", 7: "incomplete"}
    capsys.readouterr()
    assert main(["checkpoints", str(directory)]) == 0
    text = capsys.readouterr().out
    assert "fails its sha256 check" in text and "leftover of an interrupted save" in text


def test_not_a_directory_is_one_line_exit_2(tmp_path, capsys):
    assert main(["checkpoints", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a directory" in err[0]


def test_listing_does_not_import_torch(run_dir):
    code = ("import sys; from trainledger.cli.main import main; main(['checkpoints', sys.argv[1], '--json']); "
            "print('torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code, str(run_dir)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "False"
