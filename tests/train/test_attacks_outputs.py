"""Issue 31, item 9: outputs that are something else. `train --metrics FILE` used to truncate any file holding no
step records — a corpus, another run's token file while that run mapped it (SIGBUS), a finished run's metrics
once its checkpoints were deleted. Each is now one line, exit 2, and the file is byte-for-byte as it was.

Reference: the bytes (and inode) of the file before the refused run.
"""

from __future__ import annotations

import mmap
import shutil

from train_helpers import SMALL, train_in_process


def _refused(capsys, *args) -> str:
    status, _, err = train_in_process(capsys, *args)
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1, err
    return lines[0]


def test_the_corpus_given_as_metrics_is_refused_and_kept(tmp_path, capsys):
    precious = tmp_path / "precious.txt"
    precious.write_text("It was the best of times, it was the worst of times.\n" * 300)
    before = precious.read_bytes()
    line = _refused(capsys, "--text", precious, "--metrics", precious, "--steps", 2, "--out-dir", tmp_path / "run", *SMALL)
    assert f"--metrics {precious} exists and is not a metrics file" in line and "line 1 is no step record" in line
    assert precious.read_bytes() == before


def test_a_token_file_another_process_maps_is_never_truncated(token_file, tmp_path, capsys):
    """The other run's --data file, mapped here as that run maps it: refused; the mapping reads what it read."""
    data = tmp_path / "data.tokens"
    shutil.copy(token_file, data)
    before = data.read_bytes()
    with open(data, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        for extra in ([], ["--resume"]):      # a resume would append to it (and cut it after its last newline)
            line = _refused(capsys, "--data", token_file, "--metrics", data, "--steps", 2,
                            "--out-dir", tmp_path / "run", *SMALL, *extra)
            assert "is not a metrics file" in line and "--metrics" in line
        assert mapped[:] == before               # a truncation would make this access SIGBUS
    assert data.read_bytes() == before


def test_a_finished_runs_metrics_survive_the_deletion_of_its_checkpoints(token_file, tmp_path, capsys):
    out = tmp_path / "run"
    args = ["--data", token_file, "--steps", 6, "--out-dir", out, "--checkpoint-every", 3, *SMALL]
    assert train_in_process(capsys, *args)[0] == 0
    metrics = out / "metrics.jsonl"
    before = metrics.read_bytes()
    for step_dir in (out / "checkpoints").glob("step_*"):       # the lock file (and its note) stays
        shutil.rmtree(step_dir)
    for extra in ([], ["--resume"]):
        line = _refused(capsys, *args[:-1], "--steps", 2, *extra)
        assert "holds steps 1-6 of a run" in line
        assert metrics.read_bytes() == before


def test_an_empty_file_or_a_run_killed_mid_line_is_still_ours(token_file, tmp_path, capsys):
    for content in (b"", b'{"step": 1, "loss": 5.5, "lr"'):
        metrics = tmp_path / "m.jsonl"
        metrics.write_bytes(content)
        status, _, err = train_in_process(capsys, "--data", token_file, "--metrics", metrics, "--steps", 2,
                                          "--out-dir", tmp_path / f"run{len(content)}", *SMALL)
        assert status == 0, err
        assert [line.startswith(b'{"step": ') for line in metrics.read_bytes().splitlines()] == [True, True]
