"""Issue 31, item 9: the manifest's info.config was not hashed and `--resume` acted on it: pointing its `text` at
a mode-0600 file made the resume tokenize that file into a world-readable cache under the run. Now the manifest
carries info_sha256 and an edited config is not used; and a cache has its source's permission bits, so even a
config forged with a matching hash exposes nothing the source did not.

Reference: the mode of the source file (os.stat), and the files under the run's data/ before the resume.
"""

from __future__ import annotations

import json
import os
import stat

from train_helpers import SMALL, train_in_process
from trainledger.train import checkpoint as ckpt


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_cache_keeps_the_permissions_of_its_source(tmp_path, capsys):
    old = os.umask(0o022)
    try:
        for mode in (0o600, 0o640, 0o644):
            text = tmp_path / f"text{mode:o}.txt"
            text.write_text("It was the best of times, it was the worst of times.\n" * 200)
            os.chmod(text, mode)
            out = tmp_path / f"run{mode:o}"
            status, _, err = train_in_process(capsys, "--text", text, "--steps", 1, "--out-dir", out, *SMALL)
            assert status == 0, err
            (cache,) = (out / "data").glob(f"{text.name}-*.tokens")
            assert _mode(cache) == mode and _mode(out / "data" / f"{text.name}.tokens") == mode
    finally:
        os.umask(old)


def test_a_resume_never_tokenizes_a_file_named_only_by_an_edited_manifest(tmp_path, capsys):
    public, secret = tmp_path / "public.txt", tmp_path / "secret.txt"
    public.write_text("It was the best of times, it was the worst of times.\n" * 200)
    secret.write_text("the password is swordfish\n" * 400)
    os.chmod(secret, 0o600)
    out = tmp_path / "run"
    args = ["--text", public, "--steps", 4, "--checkpoint-every", 2, "--out-dir", out, *SMALL]
    assert train_in_process(capsys, *args)[0] == 0
    newest = ckpt.list_checkpoints(out / "checkpoints")[-1].path / ckpt.MANIFEST_FILE
    manifest = json.loads(newest.read_text())
    assert manifest["info_sha256"] == ckpt.info_sha256(manifest["info"])
    manifest["info"]["config"]["text"] = str(secret)
    newest.write_text(json.dumps(manifest))
    status, _, err = train_in_process(capsys, "--steps", 6, "--out-dir", out, "--resume", *SMALL)
    assert status == 0, err
    assert f"the run settings in {newest} do not match its info_sha256" in err
    assert not list((out / "data").glob("secret*"))                     # the secret was never tokenized
    assert list((out / "data").glob("public.txt-*.tokens"))
