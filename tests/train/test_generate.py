"""`trainledger generate`: text from a run's checkpoint, the contract's JSON keys, the KV cache measured equal to
its prediction, greedy tokens with and without the cache, and one-line errors for every bad input."""

from __future__ import annotations

import json

import pytest
import torch

from gen_helpers import SPECS, fake_calibration, make_model, write_run
from trainledger.cli.main import main
from trainledger.data import ByteTokenizer

KEYS = ("text tokens prefill_tokens_per_s decode_tokens_per_s predicted_decode_tokens_per_s kv_cache_bytes "
        "predicted_kv_cache_bytes").split()


@pytest.fixture
def run(tmp_path):
    write_run(tmp_path / "run", SPECS["llama"])
    return tmp_path / "run"


def generate(capsys, *argv) -> tuple[int, dict | None, str]:
    capsys.readouterr()
    status = main(["generate", *map(str, argv)])
    out, err = capsys.readouterr()
    return status, (json.loads(out) if status == 0 and "--json" in argv else None), err


def test_json_has_the_contract_keys_and_kv_bytes_predicted_equal_measured(run, tmp_path, monkeypatch, capsys):
    fake_calibration(monkeypatch, tmp_path)
    status, r, _ = generate(capsys, run, "--prompt", "def f(x):", "--max-new-tokens", "12", "--json")
    assert status == 0 and all(key in r for key in KEYS)
    assert len(r["tokens"]) == 12 and r["prompt_tokens"] == list(b"def f(x):")      # the prompt is not in `tokens`
    assert r["text"] == ByteTokenizer().decode(r["tokens"])
    # the cache: 2 layers × (keys + values) × 1 sequence × 2 KV heads × 16 dims × (9 + 12) positions × 4 bytes
    assert r["kv_cache_bytes"] == r["predicted_kv_cache_bytes"] == 2 * 2 * 2 * 16 * 21 * 4
    assert r["decode_tokens_per_s"] > 0 and r["predicted_decode_tokens_per_s"] > 0 and r["prefill_tokens_per_s"] > 0
    assert r["step"] == 5 and r["tokenizer"] == "bytes"


def test_greedy_tokens_are_the_same_without_the_cache(run, capsys):
    args = (run, "--prompt-ids", "5,17,200,3", "--max-new-tokens", "30", "--temperature", "0", "--no-predict", "--json")
    _, cached, _ = generate(capsys, *args)
    _, uncached, _ = generate(capsys, *args, "--no-cache")
    assert cached["tokens"] == uncached["tokens"] and len(set(cached["tokens"])) > 1
    assert uncached["kv_cache_bytes"] == 0 and cached["kv_cache_bytes"] > 0


def test_sampling_is_repeatable_with_a_seed(run, capsys):
    args = (run, "--prompt", "ab", "--max-new-tokens", "20", "--temperature", "1.5", "--top-k", "50", "--top-p", "0.95",
            "--no-predict", "--json")
    first = generate(capsys, *args, "--seed", "1")[1]["tokens"]
    assert generate(capsys, *args, "--seed", "1")[1]["tokens"] == first
    assert generate(capsys, *args, "--seed", "2")[1]["tokens"] != first


def test_the_table_prints_text_then_measured_and_predicted(run, tmp_path, monkeypatch, capsys):
    fake_calibration(monkeypatch, tmp_path)
    capsys.readouterr()
    assert main(["generate", str(run), "--prompt", "x = ", "--max-new-tokens", "5"]) == 0
    out, err = capsys.readouterr()
    assert "measured vs predicted" in out and "decoding tokens/s" in out and "KV cache" in out and "error" not in err


@pytest.mark.parametrize("argv, words", [
    (["--prompt", ""], "the prompt is empty"),
    (["--prompt-ids", "1,2,256"], "--prompt-ids: id 256 is not in the vocabulary"),
    (["--prompt-ids", "1,x"], "--prompt-ids must be integers"),
    (["--prompt-ids", "-3"], "--prompt-ids: id -3"),
    (["--prompt", "a" * 64], "the prompt is 64 tokens"),
    (["--prompt", "a" * 60, "--max-new-tokens", "10"], "--max-new-tokens 10"),
    ([], "give the prompt as --prompt TEXT or as --prompt-ids"),
    (["--prompt", "a", "--prompt-ids", "1"], "one of them"),
    (["--prompt", "a", "--temperature", "-1"], "--temperature"),
    (["--prompt", "a", "--temperature", "nan"], "--temperature"),
    (["--prompt", "a", "--top-p", "0"], "--top-p"),
    (["--prompt", "a", "--top-p", "1.2"], "--top-p"),
    (["--prompt", "a", "--top-k", "0"], "--top-k"),
    (["--prompt", "a", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["--prompt", "a", "--device", "tpu"], "--device"),
])
def test_bad_inputs_are_one_line_errors(run, capsys, argv, words):
    status, _, err = generate(capsys, run, *argv, "--no-predict")
    assert status == 2 and err.startswith("error: ") and err.count("\n") == 1
    assert words in err


def test_missing_corrupt_and_unsafe_checkpoints(tmp_path, capsys):
    assert generate(capsys, tmp_path / "nowhere", "--prompt", "a")[0] == 2
    (tmp_path / "empty").mkdir()
    status, _, err = generate(capsys, tmp_path / "empty", "--prompt", "a", "--no-predict")
    assert status == 2 and "no checkpoint in" in err
    older = write_run(tmp_path / "run", SPECS["gpt2"], make_model(SPECS["gpt2"], seed=1), step=5)
    write_run(tmp_path / "run", SPECS["gpt2"], make_model(SPECS["gpt2"], seed=2), step=9)
    newest = tmp_path / "run" / "checkpoints" / "step_00000009" / "trainer.pt"
    newest.write_bytes(newest.read_bytes()[:100])                  # truncated: its sha256 fails
    status, r, err = generate(capsys, tmp_path / "run", "--prompt-ids", "1,2", "--max-new-tokens", "20", "--no-predict",
                              "--json")
    assert status == 0 and r["step"] == 5 and "step_00000009 is corrupt" in err
    from trainledger.models.generation import generate as gen
    assert r["tokens"] == gen(older, torch.tensor([[1, 2]]), 20).tokens[0]
    # one named checkpoint that is damaged is an error, not a silent fallback
    status, _, err = generate(capsys, newest.parent, "--prompt", "a", "--no-predict")
    assert status == 2 and "cannot be used" in err


def test_a_checkpoint_carrying_code_is_refused(tmp_path, capsys):
    import pickle

    from trainledger.train import checkpoint as ckpt
    write_run(tmp_path / "run", SPECS["gpt2"])
    path = tmp_path / "run" / "checkpoints" / "step_00000005"
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    torch.save({"format": "full", "step": 5, "config": {}, "model": Payload()}, path / "trainer.pt", pickle_protocol=2)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["trainer.pt"] = ckpt.sha256_file(path / "trainer.pt")      # a manifest rewritten to match
    (path / "manifest.json").write_text(json.dumps(manifest))
    status, _, err = generate(capsys, tmp_path / "run", "--prompt", "a", "--no-predict")
    assert status == 2 and "refusing checkpoint" in err and not marker.exists()
    del pickle


def test_a_cruncher_run_has_no_text_to_generate(tmp_path, capsys):
    from trainledger.models import Cruncher
    from trainledger.train import checkpoint as ckpt
    from trainledger.train.config import TrainConfig
    config = TrainConfig(model="cruncher").to_dict()
    tmp = ckpt.begin(tmp_path / "c", 1)
    ckpt.write_trainer_state(tmp, {"format": "full", "step": 1, "config": config, "model": Cruncher(64, 2).state_dict()})
    ckpt.commit(tmp, tmp_path / "c", 1, "full", {})
    status, _, err = generate(capsys, tmp_path / "c", "--prompt", "a", "--no-predict")
    assert status == 2 and "cruncher" in err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA; the CPU path is covered by the tests above")
def test_cuda_generation_gives_the_cpu_tokens_and_kv_bytes(run, tmp_path, capsys):
    args = (run, "--prompt-ids", "5,17,200,3", "--max-new-tokens", "20", "--no-predict", "--json")
    _, cpu, _ = generate(capsys, *args)
    _, gpu, _ = generate(capsys, *args, "--device", "cuda")
    assert gpu["tokens"] == cpu["tokens"] and gpu["kv_cache_bytes"] == cpu["kv_cache_bytes"] > 0


def test_threads_default_to_the_idle_cores_and_generate_says_so(run, tmp_path, monkeypatch, capsys):
    """Issue 41: with no --threads, generate takes the cores other processes leave idle, as train does (a decode
    prediction was 5× off on a busy 2-core machine with torch's two threads); --threads is kept, at most 4 per core."""
    from trainledger.measure import cpu_load
    fake_calibration(monkeypatch, tmp_path)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_load.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(cpu_load.OthersCpu, "cpus", lambda self: 1.6)       # another process keeps 1.6 CPUs busy
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    calls = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    status, r, _ = generate(capsys, run, "--prompt-ids", "5,17", "--max-new-tokens", "3", "--json")
    assert status == 0 and calls == [1]
    assert r["threads_choice"].startswith("threads: 1 (0.4 of 2 CPUs idle: other processes used 1.6")
    status, _, _ = generate(capsys, run, "--prompt-ids", "5,17", "--max-new-tokens", "3")
    assert status == 0 and calls == [1, 1]
    status, r, _ = generate(capsys, run, "--prompt-ids", "5,17", "--max-new-tokens", "3", "--threads", "2", "--json")
    assert status == 0 and calls == [1, 1, 2] and r["threads_choice"] is None
    status, _, err = generate(capsys, run, "--prompt-ids", "5,17", "--threads", "9")
    assert status == 2 and "--threads must be an integer in 1..8" in err and calls == [1, 1, 2]
