"""`profile`: the grouping of profiler events into the prediction's parts, the diagnosis, the JSON and the trace.

The grouping and the diagnosis are checked on hand-built event trees with known times; one real (tiny) run checks
that the pieces fit together on torch's own events. No assertion depends on how fast this machine is.
"""

import json
import re
from types import SimpleNamespace

import pytest
import torch

from trainledger.cli.main import main
from trainledger.measure import calibrate as cal
from trainledger.account.time.step import PARTS
from trainledger.measure.profile import (CATEGORIES, GPU_CATEGORIES, PART_CATEGORY, event_category, largest_part,
                                         measured_categories, op_category, predicted_categories, profile_steps)
from trainledger.specs import PRESETS
from trainledger.specs.calibration import calibrated_gpu
from profile_helpers import synthetic_profile


def event(name, parent=None, self_us=0.0, start=0.0, end=0.0):
    e = SimpleNamespace(name=name, cpu_parent=parent, self_cpu_time_total=self_us, self_device_time_total=0.0,
                        time_range=SimpleNamespace(start=start, end=end), device_type=None)
    return e


def step_tree():
    """One step's events (µs): data 50 wall; forward/backward; optimizer 80 wall. Own times by category below."""
    data = event("trainledger.data", start=0, end=50)
    fb = event("trainledger.forward_backward", self_us=3)
    linear = event("aten::linear", fb, self_us=2)
    opt = event("trainledger.optimizer", self_us=1, start=900, end=980)
    return [
        data, event("aten::randint", data, self_us=20), event("aten::copy_", data, self_us=10),
        fb, linear, event("aten::t", linear, self_us=1), event("aten::addmm", linear, self_us=100),
        sdpa := event("aten::scaled_dot_product_attention", fb, self_us=4),
        event("aten::_softmax", sdpa, self_us=30),                      # the math path inherits attention
        event("aten::gelu", fb, self_us=40),
        node := event("autograd::engine::evaluate_function: MmBackward0", fb, self_us=5),
        mm_bwd := event("MmBackward0", node, self_us=2),
        event("aten::mm", mm_bwd, self_us=200), event("aten::view", fb, self_us=1),
        opt, event("aten::_foreach_mul_", opt, self_us=60), event("aten::zero_", opt, self_us=6),
    ]


def test_op_names_map_to_categories():
    assert op_category("aten::addmm") == "matmul" and op_category("aten::bmm") == "matmul"
    assert op_category("aten::_scaled_dot_product_flash_attention_for_cpu_backward") == "attention"
    assert op_category("aten::_efficient_attention_forward") == "attention"
    assert op_category("aten::transpose") == "overhead" and op_category("NativeLayerNormBackward0") == "overhead"
    assert op_category("nccl:all_reduce") == "communication"
    assert op_category("ProfilerStep#3") == "overhead"                  # the profiler's own step marker
    assert op_category("aten::gelu") is None


def test_each_event_goes_to_one_category():
    events = {e.name: e for e in step_tree()}
    assert event_category(events["aten::addmm"]) == "matmul"
    assert event_category(events["aten::t"]) == "overhead"
    assert event_category(events["aten::_softmax"]) == "attention"
    assert event_category(events["aten::gelu"]) == "memory_bound"
    assert event_category(events["aten::mm"]) == "matmul"
    assert event_category(events["aten::_foreach_mul_"]) == "optimizer"
    assert event_category(events["aten::zero_"]) == "optimizer"


def test_measured_categories_add_up_to_the_wall_time():
    wall_s = 1000e-6
    got = measured_categories(step_tree(), wall_s, n_steps=1)
    assert set(got) == set(CATEGORIES)
    assert got["matmul"] == pytest.approx((2 + 100 + 200) * 1e-6)      # linear's own time, addmm, mm
    assert got["attention"] == pytest.approx((4 + 30) * 1e-6)
    assert got["memory_bound"] == pytest.approx(40e-6)
    assert got["optimizer"] == pytest.approx(80e-6)                    # the optimizer region whole
    assert got["data_loading"] == pytest.approx(50e-6)                 # the data region whole
    accounted = (302 + 34 + 40 + 80 + 50 + 1 + 5 + 2 + 1) * 1e-6       # + t, autograd node, MmBackward0, view
    assert got["overhead"] == pytest.approx(wall_s - accounted + (1 + 5 + 2 + 1) * 1e-6)
    assert sum(got.values()) == pytest.approx(wall_s)
    halved = measured_categories(step_tree(), wall_s, n_steps=2)
    assert halved["matmul"] == pytest.approx(got["matmul"] / 2)


def test_predicted_categories_keep_the_total():
    breakdown = {"compute": 3.0, "attention": 1.0, "memory_bound": 0.5, "overhead": 0.25, "optimizer": 0.25,
                 "tp_comm": 0.1, "cp_comm": 0.0, "pp_comm": 0.0, "dp_comm": 0.2, "pipeline_bubble": 0.0}
    got = predicted_categories(breakdown)
    assert got["matmul"] == 3.0 and got["communication"] == pytest.approx(0.3) and got["data_loading"] == 0.0
    assert sum(got.values()) == pytest.approx(sum(breakdown.values()))
    moved = predicted_categories(breakdown, optimizer_overhead_seconds=0.1)    # the optimizer's own dispatches
    assert moved["optimizer"] == pytest.approx(0.35) and moved["overhead"] == pytest.approx(0.15)
    assert sum(moved.values()) == pytest.approx(sum(breakdown.values()))


def test_optimizer_overhead_counts_its_dispatches():
    from trainledger.measure.profile import optimizer_overhead_seconds
    gpu = calibrated_gpu(synthetic_profile())                  # 2 µs per op
    tiny = PRESETS["tiny"]     # 4 layers × 16 tensors + token and position tables + final norm weight and bias
    # one launch per tensor for each pass: clip_grad_norm_ (norm, scale), AdamW (step count + 8 foreach updates);
    # per tensor two view-like ops (a no-op .to(), float(step)) at 0.27 of a launch, and the optimizer's Python
    # (20.4 µs: specs/performance.py, this profile does not measure it)
    from trainledger.specs.performance import HOST_OP_FRACTION, OPTIMIZER_TENSOR_SECONDS
    expected = 68 * ((2 + 1 + 8) * 2e-6 + 2 * HOST_OP_FRACTION * 2e-6 + OPTIMIZER_TENSOR_SECONDS)
    assert optimizer_overhead_seconds(tiny, gpu, "fp32", "adamw") == pytest.approx(expected)


SMALL = PRESETS["tiny"].with_(d_model=32, n_layers=2, n_heads=2, d_ff=64, vocab_size=64, max_seq_len=32)


def test_real_steps_fill_every_part(tmp_path, one_torch_thread):
    trace = tmp_path / "trace.json"
    result = profile_steps(SMALL, batch_size=2, seq_len=16, steps=1, warmup=1, trace_path=trace)
    cats = result["categories"]
    for part in ("matmul", "attention", "memory_bound", "optimizer", "data_loading", "overhead"):
        assert cats[part] > 0, part
    assert cats["communication"] == 0
    # the parts add up to the profiled step's wall time; on a busy machine (test_profile_busy.py), one thread's
    # parts are scaled to its CPU time instead
    profiled = result["profiled_step_thread_seconds" if result["clock"] == "thread_cpu" else "profiled_step_seconds"]
    assert result["categories_sum_seconds"] == pytest.approx(profiled, rel=1e-6)
    assert result["flash_used"] is True and result["n_ops_per_step"] > 50
    events = json.loads(trace.read_text())["traceEvents"]
    assert {"trainledger.data", "trainledger.forward_backward", "trainledger.optimizer"} <= {e.get("name") for e in events}


@pytest.fixture
def cached_calibration(tmp_path, monkeypatch, one_torch_thread):
    """A synthetic calibration in a temporary cache (for one thread: the cache is per thread count), so the CLI
    does not measure the machine."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cal.save_profile(synthetic_profile(), cal.profile_path("cpu"))


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_json(capsys, cached_calibration, tmp_path):
    status, out, err = run(capsys, "profile", "--model", "tiny", "--batch-size", "2", "--seq-len", "16", "--steps", "1",
                           "--warmup", "0", "--json", "--trace", str(tmp_path / "t.json"), "--device", "cpu")
    assert status == 0, err
    result = json.loads(out)
    for side in ("predicted", "measured"):
        assert set(result[side]["categories"]) == set(CATEGORIES) and result[side]["step_seconds"] > 0
    assert sum(result["predicted"]["categories"].values()) == pytest.approx(result["predicted"]["step_seconds"])
    error = result["relative_error"]["step_seconds"]
    assert error == pytest.approx((result["predicted"]["step_seconds"] - result["measured"]["step_seconds"])
                                  / result["measured"]["step_seconds"])
    assert isinstance(result["diagnosis"], list)
    busy = result["measured"]["load"]["busy"]        # a busy machine says so first (test_profile_busy.py)
    assert result["diagnosis"][0].startswith("the machine is busy" if busy else "largest part:")
    assert result["diagnosis"][int(busy)].startswith("largest part:")
    assert result["measured"]["largest_part"] == largest_part(result["measured"]["categories"])
    assert any(line.startswith("the step took") for line in result["diagnosis"])
    assert result["measured"]["optimizer_impl"] == "foreach"           # our AdamW: never told to use a foreach one
    assert "use a foreach" not in " ".join(result["diagnosis"])
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    assert result["measured"]["peak_memory_kind"] == "rss" and result["measured"]["peak_memory_bytes"] > 0
    from trainledger.account.memory.per_gpu import memory_per_gpu
    from trainledger.specs.run import Run
    run_ = Run().with_(batch_size=2, seq_len=16, precision="fp32", optimizer="adamw", zero=0, impl="paper")
    assert result["predicted"]["memory_bytes"] == memory_per_gpu(PRESETS["tiny"], None, run_)["total_bytes"]


def test_cli_table(capsys, cached_calibration):
    status, out, _ = run(capsys, "profile", "--model", "tiny", "--batch-size", "1", "--seq-len", "8", "--steps", "1",
                         "--warmup", "0")
    assert status == 0 and "predicted" in out and "measured" in out and "diagnosis:" in out
    # issue 41: the process's RSS beside the predicted tensors, each named on the line
    assert re.search(r"memory: peak RSS [\d.]+ [KMG]iB \(the whole process: Python, torch, data\) vs predicted "
                     r"[\d.]+ [KMG]iB of tensors", " ".join(out.split())), out


@pytest.mark.parametrize("argv, flag", [
    (["--steps", "0"], "--steps"), (["--precision", "amp-bf16"], "--precision"), (["--model", "nope"], "--model"),
    (["--seq-len", "100000"], "--seq-len"), (["--model", "cruncher"], "--model"), (["--trace", ""], "--trace"),
])
def test_cli_errors_exit_2_naming_the_flag(capsys, cached_calibration, argv, flag):
    base = {"--model": "tiny", "--seq-len": "8", "--steps": "1"}
    for i in range(0, len(argv), 2):
        base[argv[i]] = argv[i + 1]
    status, out, err = run(capsys, "profile", *[x for kv in base.items() for x in kv])
    assert status == 2 and flag in err and len(err.strip().splitlines()) == 1 and out == ""


def test_cli_cuda_without_a_device(capsys, cached_calibration):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    status, _, err = run(capsys, "profile", "--model", "tiny", "--device", "cuda")
    assert status == 2 and "--device cuda" in err


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_profile(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    status, out, err = run(capsys, "profile", "--model", "gpt2", "--batch-size", "2", "--seq-len", "256", "--steps",
                           "2", "--device", "cuda", "--precision", "amp-bf16", "--json")
    assert status == 0, err
    result = json.loads(out)
    measured = result["measured"]
    assert set(measured["categories"]) == set(GPU_CATEGORIES) == set(result["predicted"]["categories"])
    assert measured["categories"]["matmul"] > 0 and measured["categories"]["attention"] > 0
    # kernels on the GPU timeline + idle make the unprofiled step (unless the kernels alone are longer)
    assert measured["categories_sum_seconds"] == pytest.approx(max(measured["step_seconds"], measured["busy_seconds"]))
    assert all("Command Buffer" not in t["name"] and not t["name"].startswith("cuda") for t in measured["top_ops"])


def test_optimizer_span_of_torch_counts_whole_outside_our_regions():
    """A trace from another loop has no trainledger regions: torch's own Optimizer.step# span counts whole, as
    our optimizer region does, and only once when both are present."""
    step = event("Optimizer.step#AdamW.step", self_us=5, start=100, end=300)
    got = measured_categories([step, event("aten::_foreach_mul_", step, self_us=60)], 1000e-6, n_steps=1)
    assert got["optimizer"] == pytest.approx(200e-6) and got["memory_bound"] == 0
    ours = event("trainledger.optimizer", start=90, end=320)
    inner = event("Optimizer.step#AdamW.step", ours, start=100, end=300)
    got = measured_categories([ours, inner, event("aten::_foreach_mul_", inner, self_us=60)], 1000e-6, n_steps=1)
    assert got["optimizer"] == pytest.approx(230e-6)


def test_every_part_of_the_time_model_has_a_category():
    assert set(PARTS) <= set(PART_CATEGORY)
    breakdown = dict.fromkeys(PARTS, 1.0)
    cuda = predicted_categories(breakdown, device="cuda")
    assert "overhead" not in cuda and cuda["idle"] == pytest.approx(2.0)    # overhead + pipeline bubble, on a GPU
    assert sum(cuda.values()) == pytest.approx(len(PARTS))
