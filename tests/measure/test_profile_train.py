"""`train` carries the predicted step time beside the measured one, and its summary states the gap (issue 11, item 7)."""

import json

import pytest
import torch

from trainledger.cli.main import main
from trainledger.measure import calibrate as cal
from trainledger.specs import PRESETS
from trainledger.train.metrics import predicted_step, read_metrics, step_time_gap
from profile_helpers import synthetic_profile

ARGS = dict(micro_batch=4, global_batch=4, seq_len=16, precision="fp32", optimizer="adamw", device="cpu")


def test_without_a_calibration_there_is_no_prediction(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert predicted_step(PRESETS["tiny"], **ARGS) is None          # training never starts a calibration
    assert not (tmp_path / "trainledger").exists()


def test_prediction_from_the_cached_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cal.save_profile(synthetic_profile(), cal.profile_path("cpu"))
    got = predicted_step(PRESETS["tiny"], **ARGS)
    assert got["device"] == "cpu (calibrated)" and got["step_seconds"] == pytest.approx(sum(got["breakdown"].values()))
    assert predicted_step(PRESETS["cruncher"], **ARGS) is None      # not a language model
    assert predicted_step(PRESETS["tiny"], **(ARGS | {"precision": "amp-bf16"})) is None   # no bf16 calibration


def test_a_busy_cached_calibration_is_named_beside_the_prediction(tmp_path, monkeypatch):
    # a calibration cached while the machine was busy predicted 4.69 s for a 0.2 s step of the quick start, unnamed
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cal.save_profile(synthetic_profile(), cal.profile_path("cpu"))
    quiet = predicted_step(PRESETS["tiny"], **ARGS)
    assert quiet["device"] == "cpu (calibrated)" and quiet["warning"] is None
    busy = synthetic_profile() | {"load_average": 6.3, "cpu_count": 2, "threads": 2}
    cal.save_profile(busy, cal.profile_path("cpu"))
    got = predicted_step(PRESETS["tiny"], **ARGS)
    assert got["device"] == "cpu (calibrated while busy)"
    assert "busy while calibrating (load average 6.3 on 2 CPUs)" in got["warning"] and "bench --calibrate" in got["warning"]


def test_the_gap_in_words():
    predicted = {"step_seconds": 0.02, "breakdown": {"compute": 0.015, "overhead": 0.005}, "device": "cpu (calibrated)"}
    records = [{"step_time_s": 1.0}, {"step_time_s": 0.03}, {"step_time_s": 0.01}, {"step_time_s": 0.01}]
    gap = step_time_gap(records, predicted)                          # the first step (warm-up) left out
    assert gap["measured_step_time_s"] == 0.01 and gap["relative_error"] == pytest.approx(1.0)
    assert "+100 %" in gap["text"] and "compute" in gap["text"] and "trainledger profile" in gap["text"]
    assert step_time_gap(records, None) is None and step_time_gap([], predicted) is None


def test_train_records_carry_the_prediction(tmp_path, monkeypatch, capsys, one_torch_thread):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cal.save_profile(synthetic_profile(), cal.profile_path("cpu"))
    text = tmp_path / "text.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 400)
    out = tmp_path / "run"
    status = main(["train", "--model", "tiny", "--text", str(text), "--steps", "3", "--seq-len", "16", "--batch-size",
                   "4", "--no-plot", "--quiet", "--out-dir", str(out), "--json"])
    stdout = capsys.readouterr().out
    assert status == 0
    records = read_metrics(out / "metrics.jsonl")
    predicted = {r["predicted_step_time_s"] for r in records}
    assert len(records) == 3 and len(predicted) == 1 and predicted.pop() > 0
    summary = json.loads(stdout[stdout.index("{"):])
    assert summary["step_time"]["predicted_step_time_s"] == records[0]["predicted_step_time_s"]


def test_tensor_and_pipeline_parallel_runs_are_not_predicted(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cal.save_profile(synthetic_profile(), cal.profile_path("cpu"))
    assert predicted_step(PRESETS["tiny"], **ARGS, tp=2) is None and predicted_step(PRESETS["tiny"], **ARGS, pp=2) is None
