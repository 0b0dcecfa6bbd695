"""Issue 40, item 1: every file the tool writes goes through files.py's output helpers: never through a planted
link, never onto a device or a directory, never over a file that is not the tool's own output of that kind, never
inside the run, checkpoint or step directories being read.

The reproductions of the issue: `ln -s victim.txt run/.lock` then `train --out-dir run` wrote the pid into
victim.txt; `profile --trace FILE` and `bench --calibrate --out FILE` replaced any file (`--trace DIR` exited 1);
`export runs/x runs/x/checkpoints --force` deleted every checkpoint of the run, `export .../step_20 .../step_10
--force` step 10; `train --out-dir DIR` replaced a foreign loss.png or tokenizer.json; a metrics.jsonl linked to a
0600 file printed its first 40 bytes in the error. Each is now exit 2 with one line, and every file pointed at is
byte-identical afterwards (the reference: its bytes, and its inode, before the command).
"""

from __future__ import annotations

import os
import shutil

import pytest
from train_helpers import SMALL, train_in_process

from trainledger.cli.main import main
from trainledger.errors import TrainledgerError
from trainledger.files import (check_output, chrome_trace_problem, json_format_problem, matplotlib_png_problem,
                               open_output, replace_output)

SECRET = b"password=hunter2 token=0123456789abcdef\n"


def _snapshot(*paths):
    return {str(p): (p.read_bytes(), os.lstat(p).st_ino) for p in paths}


def _one_line(capsys, status_and_err) -> str:
    status, err = status_and_err
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _main(capsys, *argv) -> tuple[int, str]:
    capsys.readouterr()
    status = main([str(a) for a in argv])
    return status, capsys.readouterr().err


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_bytes(SECRET)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("where", [".lock", "checkpoints/.lock"])
def test_a_lock_that_is_a_symbolic_link_is_refused(token_file, tmp_path, capsys, victim, where):
    run = tmp_path / "run"
    (run / where).parent.mkdir(parents=True, exist_ok=True)
    (run / where).symlink_to(victim)
    before = _snapshot(victim)
    status, _, err = train_in_process(capsys, "--data", token_file, "--out-dir", run, "--steps", 2, *SMALL)
    line = _one_line(capsys, (status, err))
    assert "symbolic link" in line and ("--out-dir" in line or "--checkpoint-dir" in line)
    assert _snapshot(victim) == before and (run / where).is_symlink()


def test_a_lock_that_is_a_hard_link_or_no_lock_file_is_refused(token_file, tmp_path, capsys, victim):
    run = tmp_path / "run"
    run.mkdir()
    os.link(victim, run / ".lock")
    before = _snapshot(victim)
    line = _one_line(capsys, train_in_process(capsys, "--data", token_file, "--out-dir", run, "--steps", 2, *SMALL)[::2])
    assert "hard links" in line and _snapshot(victim) == before
    (run / ".lock").unlink()
    (run / ".lock").write_bytes(SECRET)
    line = _one_line(capsys, train_in_process(capsys, "--data", token_file, "--out-dir", run, "--steps", 2, *SMALL)[::2])
    assert "not a lock file" in line and (run / ".lock").read_bytes() == SECRET and "hunter2" not in line


def test_a_metrics_link_to_a_secret_is_refused_without_echoing_it(token_file, tmp_path, capsys, victim):
    run = tmp_path / "run"
    args = ["--data", token_file, "--out-dir", run, "--steps", 2, "--checkpoint-every", 2, *SMALL]
    assert train_in_process(capsys, *args)[0] == 0
    (run / "metrics.jsonl").unlink()
    (run / "metrics.jsonl").symlink_to(victim)
    before = _snapshot(victim)
    for extra in ([], ["--resume", "--steps", 4]):
        line = _one_line(capsys, train_in_process(capsys, *args, *extra)[::2])
        assert "--metrics" in line and "symbolic link" in line
        assert "hunter2" not in line and "password" not in line
    assert _snapshot(victim) == before


def test_a_foreign_metrics_file_is_named_without_its_bytes(token_file, tmp_path, capsys, victim):
    copy = tmp_path / "notes.txt"
    shutil.copy(victim, copy)
    line = _one_line(capsys, train_in_process(capsys, "--data", token_file, "--metrics", copy, "--out-dir",
                                              tmp_path / "run", "--steps", 2, *SMALL)[::2])
    assert "line 1 is no step record" in line and "hunter2" not in line and copy.read_bytes() == SECRET


@pytest.mark.parametrize("name,content", [("loss.png", b"\x89PNG\r\n\x1a\nsomeone's holiday photo"),
                                          ("loss.png", b"my notes"),
                                          ("tokenizer.json", b'{"model": "mine"}')])
def test_a_foreign_loss_png_or_tokenizer_json_is_never_replaced(token_file, tmp_path, capsys, name, content):
    run = tmp_path / "run"
    run.mkdir()
    (run / name).write_bytes(content)
    before = _snapshot(run / name)
    args = ["--out-dir", run, "--steps", 2, *[a for a in SMALL if a != "--no-plot"]]
    if name == "tokenizer.json":         # a run with a tokenizer file records it there
        from trainledger.data.bpe import train_bpe
        train_bpe(["the cat sat on the mat " * 200], 300).save(tmp_path / "tok" / "tokenizer.json")
        text = tmp_path / "book.txt"
        text.write_text("the cat sat on the mat\n" * 400)
        args += ["--text", text, "--tokenizer", tmp_path / "tok" / "tokenizer.json"]
    else:
        args += ["--data", token_file]
    line = _one_line(capsys, train_in_process(capsys, *args)[::2])
    assert name in line and "--out-dir" in line
    assert _snapshot(run / name) == before
    assert name != "loss.png" or not (run / "checkpoints").exists()      # refused before anything was made


def test_our_own_loss_png_is_replaced(token_file, tmp_path, capsys):
    run = tmp_path / "run"
    args = ["--data", token_file, "--out-dir", run, "--steps", 2, *[a for a in SMALL if a != "--no-plot"]]
    assert train_in_process(capsys, *args)[0] == 0
    first = (run / "loss.png").read_bytes()
    assert matplotlib_png_problem(first) is None
    assert train_in_process(capsys, *args, "--resume", "--steps", 4)[0] == 0
    assert (run / "loss.png").read_bytes() != first


def test_profile_trace_onto_a_foreign_file_a_link_a_directory_or_a_device(tmp_path, capsys, victim):
    link = tmp_path / "link.json"
    link.symlink_to(victim)
    before = _snapshot(victim)
    for target, words in ((victim, "not a profiler trace"), (link, "symbolic link"), (tmp_path, "is a directory"),
                          ("/dev/null", "not a regular file")):
        line = _one_line(capsys, _main(capsys, "profile", "--model", "tiny", "--seq-len", 8, "--steps", 1,
                                       "--trace", target))
        assert "--trace" in line and words in line, line
    assert _snapshot(victim) == before and os.path.exists("/dev/null") and not os.path.isfile("/dev/null")


def test_bench_out_onto_a_foreign_file_is_refused_before_measuring(tmp_path, capsys, victim):
    before = _snapshot(victim)
    line = _one_line(capsys, _main(capsys, "bench", "--calibrate", "--out", victim))
    assert "--out" in line and "not a calibration profile" in line and _snapshot(victim) == before


@pytest.fixture
def trained_run(token_file, tmp_path, capsys):
    run = tmp_path / "runs" / "x"
    status, _, err = train_in_process(capsys, "--data", token_file, "--out-dir", run, "--steps", 4,
                                      "--checkpoint-every", 2, *SMALL)
    assert status == 0, err
    return run


def _checkpoints(run):
    return sorted(p.name for p in (run / "checkpoints").iterdir())


@pytest.mark.parametrize("source,target", [
    (".", "checkpoints"), (".", "checkpoints/step_00000002"), ("checkpoints/step_00000004", "checkpoints/step_00000002"),
    ("checkpoints", "checkpoints/hf"), ("checkpoints/step_00000004", "hf-inside-run"), (".", "."), (".", ".."),
])
def test_export_never_writes_inside_what_it_reads(trained_run, capsys, source, target):
    before = _checkpoints(trained_run)
    files = {p: p.read_bytes() for p in trained_run.rglob("*") if p.is_file()}
    line = _one_line(capsys, _main(capsys, "export", trained_run / source, trained_run / target, "--force"))
    assert "OUT_DIR" in line
    assert _checkpoints(trained_run) == before and all(p.read_bytes() == b for p, b in files.items())
    assert main(["checkpoints", str(trained_run), "--json"]) == 0 and '"status": "ok"' in capsys.readouterr().out


def test_export_never_replaces_another_run_even_with_force(trained_run, tmp_path, capsys):
    other = tmp_path / "other-run"
    shutil.copytree(trained_run, other)
    line = _one_line(capsys, _main(capsys, "export", trained_run, other / "checkpoints", "--force"))
    assert "is never replaced" in line and (other / "checkpoints" / "step_00000004").is_dir()
    line = _one_line(capsys, _main(capsys, "export", trained_run, other, "--force"))
    assert "is never replaced" in line
    assert main(["export", str(trained_run), str(tmp_path / "hf")]) == 0
    assert main(["export", str(trained_run), str(tmp_path / "hf"), "--force"]) == 0    # its own export: replaced


# --- the helpers themselves -----------------------------------------------------------------------------------------
def test_check_output_refuses_links_devices_fifos_hard_links_and_foreign_files(tmp_path, victim):
    link, fifo, hard = tmp_path / "link", tmp_path / "fifo", tmp_path / "hard"
    link.symlink_to(victim)
    os.mkfifo(fifo)
    os.link(victim, hard)
    for path, words in ((link, "symbolic link"), (fifo, "FIFO"), (hard, "hard links"), (tmp_path, "directory"),
                        ("/dev/null", "character device")):
        with pytest.raises(TrainledgerError, match=words):
            check_output(path, "--x", "a thing")
    victim2 = tmp_path / "v2"
    victim2.write_bytes(SECRET)
    with pytest.raises(TrainledgerError, match="not a profiler trace written by trainledger"):
        check_output(victim2, "--trace", "a profiler trace", chrome_trace_problem)
    assert check_output(tmp_path / "new", "--x", "a thing") == tmp_path / "new"


def test_replace_output_and_open_output(tmp_path, victim):
    target = tmp_path / "out.json"
    with replace_output(target, "--out", "a calibration profile", json_format_problem("f")) as tmp:
        tmp.write_text('{"format": "f", "x": 1}')
    with replace_output(target, "--out", "a calibration profile", json_format_problem("f")) as tmp:
        tmp.write_text('{"format": "f", "x": 2}')
    assert target.read_text() == '{"format": "f", "x": 2}'
    link = tmp_path / "lock"
    link.symlink_to(victim)
    with pytest.raises(TrainledgerError, match="symbolic link"):
        open_output(link, "--out-dir", "a lock file")
    os.close(open_output(tmp_path / "fresh", "--out-dir", "a lock file"))
    assert victim.read_bytes() == SECRET


def test_recognizers():
    assert chrome_trace_problem(b' {\n  "schemaVersion": 1,\n  "traceEvents": [') is None
    assert chrome_trace_problem(b"hello") and chrome_trace_problem(b"\x1f\x8b\x08")
    assert matplotlib_png_problem(b"\x89PNG\r\n\x1a\n....tEXtSoftware\x00Matplotlib version3") is None
    assert matplotlib_png_problem(b"\x89PNG\r\n\x1a\n....") and matplotlib_png_problem(b"GIF89a")
    assert json_format_problem("trainledger-calibration")(b'{\n "format": "trainledger-calibration",') is None
    assert json_format_problem("trainledger-calibration")(b'{"format": "other"}')
