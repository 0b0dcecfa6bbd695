"""`trainledger tour`: the whole executable lecture on CPU passes, section by section, with real measured values."""

import json

import pytest
import torch

from trainledger.cli import main as cli_main
from trainledger.tour import SECTIONS, section_names

# Every section of the lecture the tour must re-run, in lecture order, with its number of claims.
# An exact count catches a section that stops early (an exception outside a claim leaves one claim).
EXPECTED_CLAIMS = {
    "motivating-questions": 7,
    "tensors-basics": 4,
    "tensors-memory": 10,
    "tensors-on-gpus": 2,
    "tensor-storage": 9,
    "tensor-elementwise": 2,
    "tensor-matmul": 3,
    "tensor-einops": 4,
    "tensor-operations-flops": 6,
    "gradients-basics": 3,
    "gradients-flops": 5,
    "module-parameters": 5,
    "custom-model": 3,
    "randomness": 3,
    "data-loading": 6,
    "optimizer": 8,
    "train-loop": 3,
    "checkpointing": 4,
    "mixed-precision": 6,
}
# Claims that need CUDA: skipped on a CPU-only machine, each with a reason.
GPU_ONLY = {"two 32×32 float32 tensors on the GPU add 2·32·32·4 = 8192 bytes to memory_allocated",
            "on a GPU, bfloat16 matmuls run at a higher FLOP/s than float32"}


@pytest.fixture(scope="module")
def tour_json():
    """(exit status, JSON) of `trainledger tour --json --device cpu`, run once for this module."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli_main.main(["tour", "--json", "--device", "cpu"])
    return status, json.loads(out.getvalue())


def _claims(result):
    return {c["claim"]: c for s in result["sections"] for c in s["claims"]}


def _find(result, section, text):
    """The one claim of `section` whose text contains `text`."""
    [claim] = [c for s in result["sections"] if s["name"] == section for c in s["claims"] if text in c["claim"]]
    return claim


def test_whole_tour_passes_on_cpu_with_at_least_40_claims(tour_json):
    status, result = tour_json
    failed = [(s["name"], c["claim"], c["values"]) for s in result["sections"] for c in s["claims"] if c["status"] == "fail"]
    assert failed == []
    assert status == 0
    assert result["counts"]["fail"] == 0
    assert result["counts"]["pass"] >= 40
    assert result["device"] == "cpu"


def test_json_lists_every_section_in_lecture_order_with_its_claims(tour_json):
    _, result = tour_json
    assert [s["name"] for s in result["sections"]] == list(EXPECTED_CLAIMS) == section_names()
    assert {s["name"]: len(s["claims"]) for s in result["sections"]} == EXPECTED_CLAIMS
    for section in result["sections"]:
        assert set(section) >= {"name", "title", "claims", "inspected", "notes"}
        for claim in section["claims"]:
            assert set(claim) == {"claim", "status", "values"} and claim["status"] in ("pass", "fail", "skip")


def test_only_gpu_claims_are_skipped_and_each_says_why(tour_json):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; the skip behaviour is for CPU-only machines (covered in CI)")
    _, result = tour_json
    skipped = {c["claim"]: c["values"]["reason"] for c in _claims(result).values() if c["status"] == "skip"}
    assert set(skipped) == GPU_ONLY
    assert all(reason for reason in skipped.values())


def test_measured_and_predicted_values_are_in_the_json(tour_json):
    _, result = tour_json
    forward = _find(result, "gradients-flops", "forward FLOPs")["values"]
    assert forward == {"measured": 167_772_160, "predicted": 167_772_160, "lecture": 167_772_160}
    backward = _find(result, "gradients-flops", "backward FLOPs")["values"]
    assert backward["measured"] == backward["predicted"] == 335_544_320
    lecture_code = _find(result, "gradients-flops", "autograd skips x.grad")["values"]
    assert lecture_code["measured"] == 335_544_320 - 2 * 1024 * 256 * 256
    total = _find(result, "optimizer", "496 bytes")["values"]
    assert total["predicted"] == total["measured"] == 496
    flops = _find(result, "optimizer", "432 FLOPs")["values"]
    assert flops["predicted"] == flops["measured"] == 432
    days = _find(result, "motivating-questions", "144 days")["values"]
    assert days["predicted_days"] == pytest.approx(143.93, rel=1e-4)
    weeks = _find(result, "tensor-operations-flops", "two weeks")["values"]
    assert weeks["two_weeks"] == pytest.approx(9.58e21, rel=1e-3) and weeks["one_week"] == pytest.approx(4.79e21, rel=1e-3)
    sums = _find(result, "mixed-precision", "round_to_dtype predicts")["values"]["measured"]
    assert sums["fp16"] == pytest.approx(9.95, abs=0.005)
    assert sums["fp32 over fp16 values"] == pytest.approx(10.0021, abs=1e-4)
    assert sums["fp32"] == pytest.approx(10.0001, abs=1e-4)


def test_each_known_lecture_quirk_is_noted(tour_json):
    _, result = tour_json
    notes = {s["name"]: " ".join(s["notes"]) for s in result["sections"]}
    assert "one week" in notes["tensor-operations-flops"]
    assert "warm-up" in notes["tensor-operations-flops"]
    assert "ignores" in notes["train-loop"] or "whatever it is passed" in notes["train-loop"]
    assert "returns only x" in notes["data-loading"]
    assert "(in, out)" in notes["module-parameters"]


def test_section_filter_keeps_lecture_order_and_accepts_underscores(capsys):
    assert cli_main.main(["tour", "--json", "--device", "cpu", "--section", "tensor_matmul", "gradients-basics",
                          "--section", "tensor-elementwise"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [s["name"] for s in result["sections"]] == ["tensor-elementwise", "tensor-matmul", "gradients-basics"]
    assert result["counts"] == {"pass": 2 + 3 + 3, "fail": 0, "skip": 0}


def test_unknown_section_exits_2_with_one_line_listing_the_sections(capsys):
    assert cli_main.main(["tour", "--section", "tensor-basic"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: unknown section 'tensor-basic' (--section)")
    assert all(name in err for name in section_names())


def test_list_prints_the_sections(capsys):
    assert cli_main.main(["tour", "--list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == [s.name for s in SECTIONS]
    assert all(r["title"] and r["lecture"] for r in rows)


def test_cuda_without_a_gpu_is_a_one_line_error(capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA, so --device cuda is valid here")
    assert cli_main.main(["tour", "--device", "cuda", "--section", "gradients-basics"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--device cuda" in err


def test_the_cli_module_does_not_import_torch_at_module_level():
    import subprocess
    import sys

    code = "import sys, trainledger.cli.tour; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


@pytest.mark.gpu
def test_whole_tour_passes_on_cuda(capsys):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device; the same sections run on CPU in test_whole_tour_passes_on_cpu_with_at_least_40_claims")
    status = cli_main.main(["tour", "--json", "--device", "cuda"])
    result = json.loads(capsys.readouterr().out)
    failed = [(c["claim"], c["values"]) for s in result["sections"] for c in s["claims"] if c["status"] == "fail"]
    assert failed == [] and status == 0
    skipped = [c["claim"] for s in result["sections"] for c in s["claims"] if c["status"] == "skip"]
    assert not set(skipped) & GPU_ONLY   # the GPU-only claims run on a GPU
