"""Issue 31, item 9: checkpoint members that are not regular files. A FIFO manifest.json used to hang
`checkpoints`, `generate` and `--resume` (the resume ignored SIGTERM for 18 minutes), a manifest.json linked to
/dev/zero was read without bound (MemoryError), a member replaced by a link to / made them walk the whole file
system. Now each is a corrupt checkpoint: named in one warning, and the previous checkpoint is used.

Reference: the untouched run (its checkpoint of step 2, its losses); each case has 60 s (pytest-timeout), and
the manifest is read through a 16 MiB bound (a link to /dev/zero stops there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from train_helpers import SMALL, env, losses, train_cmd, train_in_process
from trainledger.train import checkpoint as ckpt


def _cli(capsys, *args) -> tuple[int, str, str]:
    from trainledger.cli.main import main
    capsys.readouterr()
    status = main(list(map(str, args)))
    out, err = capsys.readouterr()
    return status, out, err


def _fifo(path):
    path.unlink()
    os.mkfifo(path)


def _link(target):
    def replace(path):
        shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink(missing_ok=True)
        path.symlink_to(target)
    return replace


SABOTAGE = {                  # (member of the newest checkpoint, what replaces it, words of the warning)
    "fifo-manifest": ("manifest.json", _fifo, "manifest.json is a named pipe (FIFO), not a regular file"),
    "manifest-to-dev-zero": ("manifest.json", _link("/dev/zero"), "manifest.json is a symbolic link"),
    "trainer-to-root": ("trainer.pt", _link("/"), "trainer.pt is a symbolic link"),
    "model-dir-to-root": ("model", _link("/"), "model is neither a regular file nor a directory"),
}


@pytest.fixture(scope="module")
def finished_run(token_file, tmp_path_factory):
    """A run of 4 steps with checkpoints at steps 2 and 4 (one subprocess, shared by the cases)."""
    out = tmp_path_factory.mktemp("members") / "run"
    done = subprocess.run(train_cmd("--data", token_file, "--steps", 4, "--checkpoint-every", 2, "--out-dir", out,
                                    *SMALL), capture_output=True, text=True, env=env(), timeout=300)
    assert done.returncode == 0, done.stderr
    return token_file, out


@pytest.mark.slow
@pytest.mark.timeout(180)        # a hang (the FIFO) never ends; 20-30 s each on a loaded 2-core machine
@pytest.mark.parametrize("case", SABOTAGE, ids=list(SABOTAGE))
def test_a_member_that_is_no_regular_file_falls_back_to_the_older_checkpoint(finished_run, tmp_path, case, capsys):
    data, original = finished_run
    out = tmp_path / "run"
    shutil.copytree(original, out, symlinks=True)
    member, sabotage, words = SABOTAGE[case]
    newest = out / "checkpoints" / "step_00000004"
    sabotage(newest / member)

    code, listed, err = _cli(capsys, "checkpoints", out, "--json")
    assert code == 0, err
    status = {r["step"]: (r["status"], r["problem"]) for r in json.loads(listed)["checkpoints"]}
    assert status[2] == ("ok", None) and status[4][0] in ("corrupt", "incomplete") and words in status[4][1]

    code, _, err = _cli(capsys, "generate", out, "--prompt-ids", "1,2", "--max-new-tokens", 2, "--json")
    assert code == 0, err
    assert f"checkpoint {newest} is corrupt: {words}" in err and "trying the previous one" in err

    status, _, err = train_in_process(capsys, "--data", data, "--steps", 5, "--checkpoint-every", 2, "--out-dir", out,
                                      "--resume", *SMALL)
    assert status == 0, err
    assert f"warning: checkpoint {newest} is corrupt: {words}" in err
    assert sorted(losses(out / "metrics.jsonl")) == [1, 2, 3, 4, 5]      # steps 3-4 again, from step 2
    assert losses(out / "metrics.jsonl")[3] == losses(original / "metrics.jsonl")[3]


def test_a_checkpoint_directory_that_is_a_link_is_not_a_checkpoint(finished_run, tmp_path):
    _, original = finished_run
    out = tmp_path / "run"
    shutil.copytree(original, out, symlinks=True)
    (out / "checkpoints" / "step_00000009").symlink_to("/")
    assert [r.step for r in ckpt.list_checkpoints(out / "checkpoints")] == [2, 4]
    assert ckpt.checkpoint_bytes(out / "checkpoints") == sum(
        ckpt.checkpoint_bytes(r.path) for r in ckpt.list_checkpoints(out / "checkpoints")) + sum(
        p.stat().st_size for p in (out / "checkpoints").iterdir() if p.is_file() and not p.is_symlink())
