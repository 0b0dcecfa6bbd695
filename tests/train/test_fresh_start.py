"""A refused `train` leaves nothing behind (issue 41, small things; train/fresh_start.py).

`train --precision fp8-cs` on a CPU was refused after the output directories were made and locked: it left
`.lock`, `checkpoints/` (with its `.lock`) and an empty `metrics.jsonl`. Now a refusal takes back what the start
made: the directories it created, whole, and in a directory that was there before, only its own files."""

from __future__ import annotations

import os

import pytest

from trainledger.cli import main as cli_main
from trainledger.train.config import resolve
from trainledger.train.fresh_start import StartPaths
from trainledger.train.runlock import lock_run, unlock_all


def _refused(capsys, out_dir, *extra) -> str:
    status = cli_main.main(["train", "--model", "tiny", "--steps", "2", "--device", "cpu", "--precision", "fp8-cs",
                            "--out-dir", str(out_dir), *map(str, extra)])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error: --precision fp8-cs needs a CUDA GPU"), err
    return err


def test_a_refused_run_in_new_directories_leaves_none_of_them(tmp_path, token_file, capsys):
    _refused(capsys, tmp_path / "runs" / "fp8", "--data", token_file)
    assert list(tmp_path.iterdir()) == []                  # runs/ too: the start made it


def test_a_refused_run_in_an_existing_directory_takes_back_only_its_own_files(tmp_path, token_file, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    _refused(capsys, run, "--data", token_file)
    assert sorted(p.name for p in run.iterdir()) == ["notes.txt"]      # no .lock, checkpoints/, metrics.jsonl


def test_a_metrics_file_elsewhere_and_a_checkpoint_dir_elsewhere_go_too(tmp_path, token_file, capsys):
    _refused(capsys, tmp_path / "run", "--data", token_file, "--metrics", tmp_path / "logs" / "m.jsonl",
             "--checkpoint-dir", tmp_path / "ckpt")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_metrics_file_with_records_is_kept(tmp_path):
    """In a folder that was there before, the metrics file goes only while this start left it empty."""
    run = tmp_path / "run"
    run.mkdir()
    config = resolve({"model": "tiny", "out_dir": str(run)})
    fresh = StartPaths(config)
    (run / "checkpoints").mkdir()
    (run / ".lock").write_text(f"{os.getpid()}\n")
    (run / "metrics.jsonl").write_text('{"step": 1}\n')         # a record: it is kept
    fresh.undo()
    assert sorted(p.name for p in run.iterdir()) == ["metrics.jsonl"]


def test_directories_another_trainer_holds_are_left_alone(tmp_path, token_file, capsys):
    """Refused because another trainer holds the out-dir: its lock, checkpoints and metrics are its own."""
    run = tmp_path / "run"
    held = lock_run(run, run / "checkpoints", run / "metrics.jsonl")
    try:
        status = cli_main.main(["train", "--model", "tiny", "--steps", "2", "--device", "cpu", "--data",
                                str(token_file), "--out-dir", str(run)])
        err = capsys.readouterr().err
        assert status == 2 and "in use by pid" in err
        assert {".lock", "checkpoints", "metrics.jsonl"} <= {p.name for p in run.iterdir()}
        assert (run / "checkpoints" / ".lock").exists()
    finally:
        unlock_all(held)


@pytest.mark.parametrize("layout", ["nested", "same"])
def test_start_paths_name_the_topmost_missing_folder(tmp_path, layout):
    out = tmp_path / "a" / "b"
    config = resolve({"model": "tiny", "out_dir": str(out),
                      **({"checkpoint_dir": str(out)} if layout == "same" else {})})
    fresh = StartPaths(config)
    assert fresh.dirs == [tmp_path / "a"] and fresh.files == []
