"""`profile`'s diagnosis: the first line names the largest part, and no advice contradicts the set-up
(issue 22, item 4: never "use a foreach or fused optimizer" to a foreach optimizer, never "--flash" with flash on).
"""

import itertools

import pytest

from trainledger.measure.categories import CATEGORIES, GPU_CATEGORIES, WORDS
from trainledger.measure.diagnosis import SetUp, diagnose, largest_part


def side(parts: dict, device: str = "cpu") -> dict:
    categories = dict.fromkeys(GPU_CATEGORIES if device == "cuda" else CATEGORIES, 0.0) | parts
    return {"step_seconds": sum(categories.values()), "categories": categories}


def test_the_first_line_names_the_largest_part():
    measured = side({"matmul": 0.2, "memory_bound": 0.5, "optimizer": 0.1})
    lines = diagnose(measured)
    assert largest_part(measured["categories"]) == "memory_bound"
    assert lines[0].startswith("largest part: " + WORDS["memory_bound"]) and "500.0 of 800.0 ms" in lines[0]
    assert largest_part({"matmul": 1.0, "attention": 1.0}) == "matmul"          # a tie: the earlier part


def test_slow_attention_without_flash():
    predicted, measured = side({"matmul": 0.5, "attention": 0.1}), side({"matmul": 0.5, "attention": 0.3})
    lines = diagnose(measured, predicted, SetUp(flash_used=False))
    assert "predicted 600.0 ms (-25 %)" in lines[1]
    assert "attention" in lines[2] and "3.0×" in lines[2] and "flash attention is off" in lines[2]


def test_overhead_and_the_optimizer_on_a_cpu():
    predicted = side({"matmul": 0.5, "overhead": 0.05, "optimizer": 0.05})
    measured = side({"matmul": 0.5, "overhead": 0.4, "optimizer": 0.25})
    text = "\n".join(diagnose(measured, predicted, SetUp(batch_size=2, optimizer="adamw", optimizer_impl="foreach")))
    assert "batch 2 is too small" in text and "torch.compile" in text
    assert "adamw already runs foreach" in text and "fused=True" in text


def test_an_accurate_prediction_has_nothing_more_to_explain():
    predicted, measured = side({"matmul": 0.50, "memory_bound": 0.10}), side({"matmul": 0.52, "memory_bound": 0.1})
    lines = diagnose(measured, predicted)
    assert len(lines) == 2 and lines[0].startswith("largest part: " + WORDS["matmul"]) and "-3 %" in lines[1]


def test_a_gpu_waiting_for_the_cpu_is_cpu_bound():
    measured = side({"matmul": 0.3, "idle": 0.6, "memory_bound": 0.1}, "cuda")
    lines = diagnose(measured, None, SetUp(device="cuda", batch_size=4))
    assert lines[0].startswith("largest part: " + WORDS["idle"])
    assert "CPU-bound" in lines[0] and "CUDA graphs" in lines[0] and "larger --batch-size than 4" in lines[0]
    traced = diagnose(measured, None, SetUp(device="cuda", profiled_steps=True))
    assert "under the profiler" in traced[0] and "busy 400.0 ms" in traced[0]    # 1000 ms less 600 of idle
    assert not traced[0].startswith("largest part") and traced[1].startswith("if the unprofiled step is well above")
    assert traced[2].startswith("largest part of the GPU's busy time: " + WORDS["matmul"] + ", 300.0 of 400.0 ms")
    assert sum("under the profiler" in line for line in traced) == 1


def test_small_idle_under_the_profiler_is_not_explained_away():
    """Below the idle flag (25 %), a profiled trace's largest part leads as in an unprofiled step."""
    measured = side({"matmul": 0.7, "idle": 0.2, "memory_bound": 0.1}, "cuda")
    lines = diagnose(measured, None, SetUp(device="cuda", profiled_steps=True))
    assert lines[0].startswith("largest part: " + WORDS["matmul"]) and "profiler" not in " ".join(lines)


def test_a_datasheet_prediction_does_not_blame_a_calibration():
    predicted, measured = side({"matmul": 0.1}, "cuda"), side({"matmul": 0.3}, "cuda")
    text = " ".join(diagnose(measured, predicted, SetUp(device="cuda", calibrated=False)))
    assert "datasheet" in text and "quiet machine" not in text
    text = " ".join(diagnose(measured, predicted, SetUp(device="cuda", calibrated=True)))
    assert "calibrated rate" in text


SHAPES = [{"optimizer": 0.6, "matmul": 0.4}, {"overhead": 0.5, "matmul": 0.5}, {"idle": 0.5, "matmul": 0.5},
          {"memory_bound": 0.7, "matmul": 0.3}, {"attention": 0.6, "matmul": 0.4}, {"data_loading": 0.3, "matmul": 0.7}]


def contradictions(text: str, setup: SetUp) -> list[str]:
    """The advice that `setup` rules out, found in `text`."""
    found = []
    if setup.optimizer_impl in ("foreach", "fused") and "use a foreach" in text:
        found.append("foreach advice to a foreach/fused optimizer")
    if setup.optimizer_impl == "fused" and "fused optimizer does it" in text:
        found.append("fused advice to a fused optimizer")
    if setup.flash_used and ("--flash" in text or "flash attention is off" in text or "use flash" in text):
        found.append("flash advice with flash on")
    if setup.compiled and "torch.compile" in text.replace('torch.compile(mode="reduce-overhead")', ""):
        found.append("torch.compile advice to a compiled model")
    if not setup.calibrated and "bench --calibrate` on a quiet machine" in text:
        found.append("a calibration blamed that was never made")
    return found


@pytest.mark.parametrize("impl, flash, compiled, device, calibrated", list(itertools.product(
    ("foreach", "fused", "per-tensor", None), (True, False, None), (True, False), ("cpu", "cuda"), (True, False))))
def test_no_advice_contradicts_the_set_up(impl, flash, compiled, device, calibrated):
    setup = SetUp(device=device, batch_size=8, optimizer="adamw", optimizer_impl=impl, flash_used=flash,
                  compiled=compiled, calibrated=calibrated)
    for measured_parts, predicted_parts in itertools.product(SHAPES, SHAPES + [None]):
        keep = lambda parts: {("idle" if device == "cuda" else "overhead") if k in ("idle", "overhead") else k: v  # noqa: E731
                              for k, v in parts.items()}
        measured = side(keep(measured_parts), device)
        predicted = side(keep(predicted_parts), device) if predicted_parts else None
        text = " ".join(diagnose(measured, predicted, setup))
        assert contradictions(text, setup) == [], text
    # and the advice that does fit is given
    text = " ".join(diagnose(side(keep(SHAPES[0]), device), None, setup))
    if impl == "per-tensor":
        assert "use a foreach or fused optimizer" in text
    if impl == "foreach":
        assert "already runs foreach" in text
    if impl == "fused":
        assert "already fused" in text
