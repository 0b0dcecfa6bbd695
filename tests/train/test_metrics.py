"""Metrics JSONL: last record of a step wins, a line cut by a kill is dropped, the loss curve is drawn."""

from __future__ import annotations

import json

from trainledger.train.metrics import MetricsWriter, plot_loss, read_metrics


def record(step, loss, **extra):
    return {"step": step, "loss": loss, "tokens": 64 * step, **extra}


def test_resumed_steps_overwrite_earlier_records(tmp_path):
    path = tmp_path / "m.jsonl"
    writer = MetricsWriter(path, fresh=True)
    for step, loss in [(1, 5.0), (2, 4.0), (3, 3.5)]:
        writer.write(record(step, loss))
    writer.close()
    with open(path, "a") as handle:       # a kill in the middle of writing step 4
        handle.write('{"step": 4, "lo')
    writer = MetricsWriter(path, fresh=False)   # the resumed run restarts from the step-2 checkpoint
    for step, loss in [(3, 3.25), (4, 3.0)]:
        writer.write(record(step, loss))
    writer.close()
    lines = path.read_text().splitlines()
    assert all(json.loads(line) for line in lines)          # the partial line is gone
    assert [(r["step"], r["loss"]) for r in read_metrics(path)] == [(1, 5.0), (2, 4.0), (3, 3.25), (4, 3.0)]


def test_fresh_run_truncates_and_nonfinite_becomes_null(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 9, "loss": 1.0}\n')
    writer = MetricsWriter(path, fresh=True)
    writer.write(record(1, float("inf")))
    writer.close()
    assert read_metrics(path) == [record(1, None)]


def test_loss_curve_png(tmp_path):
    records = [record(s, 5.0 / s, **({"eval_loss": 5.5 / s} if s % 5 == 0 else {})) for s in range(1, 21)]
    path = plot_loss(records, tmp_path / "loss.png", "tiny")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_the_step_line_names_what_its_peak_measured():
    """Issue 41: "peak 545 MiB" beside "predicted 150 MiB" compared the process's RSS with tensors unsaid."""
    from trainledger.train.metrics import describe
    record = {"step": 3, "loss": 4.2, "lr": 1e-3, "tokens_per_s": 2e4, "peak_memory_bytes": 545 * 2**20}
    assert describe({**record, "peak_memory_kind": "rss"}).endswith("peak RSS 545 MiB")
    assert describe({**record, "peak_memory_kind": "cuda_allocated"}).endswith("peak allocated 545 MiB")
    assert describe(record).endswith("peak 545 MiB")          # a record from before the kind: as it was


def test_peak_memory_kind_follows_the_device():
    from trainledger.measure.timing import peak_memory_kind
    assert peak_memory_kind("cpu") == "rss" and peak_memory_kind("cuda:0") == "cuda_allocated"
