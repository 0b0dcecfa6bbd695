"""Issue 40, item 5 and the smaller findings: the identity of inputs.

- `train --resume` after the token file at --data was rewritten with other text trained on different data: the
  run now records the file's size and sha256 and a resume refuses another file (`--allow-new-data` continues);
- `export` of a checkpoint whose trainer.pt was copied from another step (manifest rewritten) exported "step 10
  from .../step_00000020" with exit 0, where resume refuses it: export now checks it as resume does;
- a checkpoint member extended to 50 GB (a sparse file): `checkpoints` hashed for > 90 s, generate/export/resume
  61-86 s before falling back; the size is now checked before any byte is hashed;
- a raw protocol-4 pickle as trainer.pt was "damaged" (skipped), not refused; `checkpoints` listed a pickle planted
  as DCP's .metadata as `ok`; a FIFO model.safetensors read "has no model.safetensors".

References: the files' bytes before and after, the wall clock of each command, tiny runs trained here.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import time

import numpy as np
import pytest
from train_helpers import SMALL, train_in_process

from trainledger.cli.main import main
from trainledger.data import write_tokens
from trainledger.train import checkpoint as ckpt


def _one_line(status, err) -> str:
    lines = err.strip().splitlines()
    assert status == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _main(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def run(token_file, tmp_path, capsys):
    data = tmp_path / "data.tokens"
    shutil.copy(token_file, data)
    out = tmp_path / "run"
    args = ["--data", data, "--out-dir", out, "--checkpoint-every", 2, *SMALL]
    status, _, err = train_in_process(capsys, *args, "--steps", 4)
    assert status == 0, err
    return data, out, args


def test_resume_refuses_a_data_file_rewritten_with_other_text(run, capsys):
    data, out, args = run
    tokens = np.fromfile(data, dtype=np.uint8, offset=128)
    write_tokens(data, tokens[::-1].copy(), dtype="uint8")          # the same size, other text
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    line = _one_line(*train_in_process(capsys, *args, "--steps", 6, "--resume")[::2])
    assert "--resume: the data has changed" in line and "--allow-new-data" in line
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before       # nothing trained, nothing written
    status, _, err = train_in_process(capsys, *args, "--steps", 6, "--resume", "--allow-new-data")
    assert status == 0, err
    config = json.loads((out / "checkpoints" / "step_00000006" / "manifest.json").read_text())["info"]["config"]
    assert config["data_sha256"] == __import__("hashlib").sha256(data.read_bytes()).hexdigest()
    assert config["data_bytes"] == data.stat().st_size
    status, _, err = train_in_process(capsys, *args, "--steps", 8, "--resume")     # on the data it now records
    assert status == 0, err


def test_resume_on_the_same_data_records_and_passes(run, capsys):
    data, out, args = run
    status, _, err = train_in_process(capsys, *args, "--steps", 6, "--resume")
    assert status == 0, err


def _copy_trainer_from(out, source: str, target: str):
    """trainer.pt of `source` copied into `target` with target's manifest rewritten to match (sha256 and size)."""
    src, dst = out / "checkpoints" / source, out / "checkpoints" / target
    shutil.copy(src / "trainer.pt", dst / "trainer.pt")
    manifest = json.loads((dst / "manifest.json").read_text())
    manifest["files"]["trainer.pt"] = ckpt.sha256_file(dst / "trainer.pt")
    manifest["sizes"]["trainer.pt"] = (dst / "trainer.pt").stat().st_size
    (dst / "manifest.json").write_text(json.dumps(manifest))
    return dst


def test_export_checks_the_checkpoint_as_resume_does(run, tmp_path, capsys):
    data, out, args = run
    step_4 = _copy_trainer_from(out, "step_00000002", "step_00000004")
    status, _, err = _main(capsys, "export", step_4, tmp_path / "hf")
    line = _one_line(status, err)
    assert "holds the state of step 2, not of step 4" in line and not (tmp_path / "hf").exists()
    status, out_text, err = _main(capsys, "export", out, tmp_path / "hf2")          # the run: the newest good one
    assert status == 0 and "step_00000004 is corrupt" in err and "(step 2)" in out_text


@pytest.mark.timeout(60)
def test_a_member_extended_to_50_gb_is_found_before_hashing(run, tmp_path, capsys):
    data, out, args = run
    trainer = out / "checkpoints" / "step_00000004" / "trainer.pt"
    with open(trainer, "r+b") as handle:
        handle.truncate(50 * 10**9)                               # sparse: no disk used
    for argv in (["checkpoints", out, "--json"], ["generate", out, "--prompt-ids", "1,2", "--max-new-tokens", "1",
                                                 "--no-predict", "--json"], ["export", out, tmp_path / "hf"]):
        started = time.monotonic()
        status, _, err = _main(capsys, *argv)
        assert status == 0 and time.monotonic() - started < 5, (argv, err)
    status, out_text, _ = _main(capsys, "checkpoints", out, "--json")
    record = {r["step"]: r for r in json.loads(out_text)["checkpoints"]}[4]
    assert record["status"] == "corrupt" and "50,000,000,000 bytes" in record["problem"]
    started = time.monotonic()
    status, _, err = train_in_process(capsys, *args, "--steps", 6, "--resume")
    assert status == 0 and "step_00000004 is corrupt" in err and time.monotonic() - started < 30


def test_a_raw_protocol_4_pickle_trainer_pt_is_refused_not_skipped(run, tmp_path, capsys):
    data, out, args = run
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))
    step = out / "checkpoints" / "step_00000004"
    (step / "trainer.pt").write_bytes(pickle.dumps(Payload(), protocol=4))
    manifest = json.loads((step / "manifest.json").read_text())
    manifest["files"]["trainer.pt"] = ckpt.sha256_file(step / "trainer.pt")
    manifest["sizes"]["trainer.pt"] = (step / "trainer.pt").stat().st_size
    (step / "manifest.json").write_text(json.dumps(manifest))
    line = _one_line(*train_in_process(capsys, *args, "--steps", 6, "--resume")[::2])
    assert "refusing checkpoint" in line and "raw pickle" in line and not marker.exists()
    status, out_text, _ = _main(capsys, "checkpoints", out, "--json")
    record = {r["step"]: r for r in json.loads(out_text)["checkpoints"]}[4]
    assert record["status"] == "unsafe" and "raw pickle" in record["problem"]
    assert _one_line(*_main(capsys, "export", step, tmp_path / "hf")[::2]).count("refusing checkpoint") == 1
    assert not marker.exists()


def test_checkpoints_lists_a_planted_dcp_metadata_as_unsafe(tmp_path, capsys):
    import torch
    import torch.distributed.checkpoint as dcp

    from trainledger.train.config import TrainConfig
    config = TrainConfig().to_dict()
    tmp = ckpt.begin(tmp_path / "ckpts", 3)
    with pytest.warns(UserWarning):
        dcp.save({"model": {"w": torch.zeros(2)}}, checkpoint_id=str(tmp / ckpt.SHARDED_DIR), no_dist=True)
    ckpt.write_trainer_state(tmp, {"format": "dcp", "step": 3, "tokens": 0, "world_size": 2, "config": config})
    path = ckpt.commit(tmp, tmp_path / "ckpts", 3, "dcp", {"config": config})
    marker = tmp_path / "payload-ran"
    metadata = path / ckpt.SHARDED_DIR / ".metadata"
    metadata.write_bytes(b"cos\nmkdir\n(V" + str(marker).encode() + b"\ntR.")
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["model/.metadata"] = ckpt.sha256_file(metadata)
    manifest["sizes"]["model/.metadata"] = metadata.stat().st_size
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert ckpt.verify(path) == ("dcp", None)                      # the files match their (rewritten) manifest
    status, out_text, _ = _main(capsys, "checkpoints", tmp_path / "ckpts", "--json")
    [record] = json.loads(out_text)["checkpoints"]
    assert status == 0 and record["status"] == "unsafe" and "os.mkdir" in record["problem"] and not marker.exists()


def test_a_fifo_model_safetensors_is_named_for_what_it_is(tmp_path, capsys):
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "gpt2", "vocab_size": 256, "n_embd": 64, "n_layer": 2,
                                                "n_head": 4, "n_positions": 64}))
    os.mkfifo(hf / "model.safetensors")
    started = time.monotonic()
    line = _one_line(*_main(capsys, "generate", hf, "--prompt-ids", "1", "--no-predict")[::2])
    assert "model.safetensors is not a regular file (it is a named pipe (FIFO))" in line
    assert time.monotonic() - started < 5


def test_tokenize_names_the_flag_that_saved_the_tokenizer_beside_output(tmp_path, capsys):
    from trainledger.data.bpe import train_bpe
    train_bpe(["the cat sat on the mat " * 100], 300).save(tmp_path / "tok.json")
    text = tmp_path / "a.txt"
    text.write_text("the cat\n" * 50)
    out = tmp_path / "data"
    out.mkdir()
    assert main(["tokenize", str(text), str(out / "a.tokens"), "--tokenizer", str(tmp_path / "tok.json"),
                 "--special-token", "<|x|>"]) == 0
    status, _, err = _main(capsys, "tokenize", text, out / "b.tokens", "--tokenizer", tmp_path / "tok.json",
                           "--special-token", "<|y|>")
    line = _one_line(status, err)
    assert line.startswith("error: --special-token:") and "--train-bpe" not in line


def test_nan_weights_are_refused_by_generate_and_export(tmp_path, capsys):
    """generate on NaN weights printed NUL bytes with exit 0: now one line naming the tensor."""
    import torch
    from gen_helpers import SPECS, make_model, write_run
    model = make_model(SPECS["gpt2"])
    with torch.no_grad():
        model.blocks[0].attn.q_proj.weight[0, 0] = float("nan")
    write_run(tmp_path / "run", SPECS["gpt2"], model)
    for argv in (["generate", tmp_path / "run", "--prompt-ids", "1,2", "--no-predict"],
                 ["export", tmp_path / "run", tmp_path / "hf"]):
        line = _one_line(*_main(capsys, *argv)[::2])
        assert "NaN or infinite weights (blocks.0.attn.q_proj.weight)" in line
    assert not (tmp_path / "hf").exists()
