"""Absurd inputs never get a confident answer without a word (cli/sanity.py): one `warning:` line on stderr (and
the JSON's `warnings`), or one `error:` line and exit 2 where no answer is meaningful."""

import json

import pytest

from trainledger.cli import main as cli_main
from trainledger.cli.sanity import ABSURD_DEVICE_MULTIPLE, largest_device


def run(argv, capsys):
    code = cli_main.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip().splitlines()


@pytest.mark.parametrize("argv, flag", [
    (["optimal", "--budget-flops", "1e-5"], "--budget-flops"),               # 0.000289 parameters
    (["optimal", "--budget-flops", "1e-5", "--law", "approach3"], "--budget-flops"),
    (["optimal", "--days", "1e-30"], "--days"),                             # a GPU budget below one parameter
    (["memory", "--params", "1000", "--zero", "3", "--dp", "100000"], "--dp"),   # more ranks than parameters
    (["memory", "--model", "tiny", "--zero", "1", "--dp", "1000000000"], "--dp"),
], ids=["budget-1e-5", "budget-1e-5-approach3", "days-1e-30", "dp-beyond-params", "dp-beyond-tiny"])
def test_meaningless_input_is_one_error_line(argv, flag, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and flag in err[0]


def test_the_smallest_meaningful_budget_still_answers(capsys):
    """C = 6·N·(20·N): 120 FLOPs train one parameter on 20 tokens; below that the model has less than one."""
    code, out, _ = run(["optimal", "--budget-flops", "120", "--json"], capsys)
    assert code == 0 and json.loads(out)["n_params"] == pytest.approx(1.0)
    code, _, err = run(["optimal", "--budget-flops", "119"], capsys)
    assert code == 2


def test_zero_over_a_hundred_million_ranks_is_refused(capsys):
    """The issue's case: gpt2 (124M parameters) with ZeRO-3 over 1e8 ranks stored 1.24 parameters per GPU without a
    word; then it answered with a warning. 1e8 GPUs are past any machine (specs/bounds.py MAX_NUM_GPUS, issue 41):
    an error naming --dp; half a million ranks, merely unusual, answer with one warning about the rank count."""
    code, _, err = run(["memory", "--model", "gpt2", "--zero", "3", "--dp", "100000000", "--json"], capsys)
    assert code == 2 and len(err) == 1 and err[0].startswith("error: --dp 100,000,000")
    code, out, err = run(["memory", "--model", "gpt2", "--zero", "3", "--dp", "500000", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["n_params_per_gpu"] == pytest.approx(124439808 / 5e5)
    assert len(err) == 1 and err[0].startswith("warning:") and "200,000 GPUs" in err[0]
    assert len(result["warnings"]) == 1
    code, _, err = run(["memory", "--model", "gpt2", "--zero", "3", "--dp", "64"], capsys)
    assert code == 0 and err == []


def test_petabytes_of_a_tensor_warn_once(capsys):
    code, out, err = run(["tensor", "--shape", "100000000000,100000000000", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["storage_bytes"] == 4 * 10**22
    assert len(err) == 1 and err[0].startswith("warning:") and "--shape" in err[0]
    code, _, err = run(["tensor", "--shape", "49152,12288"], capsys)
    assert code == 0 and err == []


def test_the_threshold_is_a_thousand_of_the_largest_accelerator():
    from trainledger.cli.sanity import absurd_bytes
    limit = ABSURD_DEVICE_MULTIPLE * largest_device().memory_bytes
    assert absurd_bytes(limit, "x", "y") == [] and len(absurd_bytes(limit * 1.01, "x", "y")) == 1
    assert largest_device().memory_bytes >= 80e9          # at least an H100's 80 GB


def test_petabytes_of_activations_in_measure_warn_once(capsys):
    """gpt2 at micro-batch 1,000,000 × 1,024 tokens predicts ~1 PB for one device's step (on fake tensors)."""
    code, out, err = run(["measure", "--model", "gpt2", "--batch-size", "1000000", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["predicted"]["peak_bytes"] > 1e15 - 1e13
    assert len(err) == 1 and err[0].startswith("warning:") and "--batch-size" in err[0]


def test_fit_with_a_custom_memory_is_not_labelled_an_h100(capsys):
    code, out, _ = run(["fit", "--memory-per-gpu", "24GB", "--json"], capsys)
    result = json.loads(out)
    assert code == 0 and result["gpu"] == "custom" and "h100" not in result["gpu_label"]
    assert result["memory_per_gpu_bytes"] == 24e9 and result["max_params"] == pytest.approx(8 * 24e9 / 16)
    code, out, _ = run(["fit", "--gpu", "a100", "--memory-per-gpu", "24GB", "--json"], capsys)
    assert json.loads(out)["gpu_label"].startswith("a100-80gb at ")
    code, out, _ = run(["fit", "--json"], capsys)
    result = json.loads(out)
    assert result["gpu"] == "h100-sxm" and result["memory_per_gpu_bytes"] == 85_017_493_504   # what an H100 reports
