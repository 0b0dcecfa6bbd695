"""The planning commands (plan, fit, optimal, flops, memory): JSON keys of DESIGN.md, defaults that answer the lecture, one-line errors."""

import json

import pytest

from trainledger.cli import main as cli_main

KEYS = {
    "plan": "n_params n_tokens flops_per_token train_flops gpu num_gpus peak_flops_per_s mfu train_seconds train_days gpu_hours",
    "fit": "memory_per_gpu_bytes bytes_per_param max_params",
    "optimal": "budget_flops n_params n_tokens",
    "flops": "forward_flops_per_token train_flops_per_token forward_flops_per_step train_flops_per_step hardware_flops_per_step",
    "memory": "params_bytes grads_bytes master_params_bytes optimizer_bytes activations_bytes total_bytes fits gpu memory_per_gpu_bytes",
}


def run_json(capsys, *argv):
    assert cli_main.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def run_error(capsys, *argv):
    assert cli_main.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "Traceback" not in err
    return err


@pytest.mark.parametrize("argv", [["plan"], ["fit"], ["optimal"], ["flops", "--model", "gpt2"],
                                  ["memory", "--model", "gpt2", "--batch-size", "2", "--seq-len", "128"]],
                         ids=lambda a: a[0])
def test_json_keys(capsys, argv):
    data = run_json(capsys, *argv)
    assert all(key in data for key in KEYS[argv[0]].split())
    assert data["assumptions"]


def test_plan_default_is_the_lecture_question(capsys):
    # CS336 Lecture 2: 70B on 15T tokens, 1024 H100, MFU 0.5 -> 6.3e24 FLOPs, 143.93 days
    data = run_json(capsys, "plan")
    assert data["train_flops"] == pytest.approx(6.3e24)
    assert data["train_days"] == pytest.approx(143.93, abs=0.005)
    assert data["peak_flops_per_s"] == 989.5e12 and data["num_gpus"] == 1024 and data["gpu"] == "h100-sxm"


def test_plan_with_model_and_deadline(capsys):
    data = run_json(capsys, "plan", "--model", "gpt2", "--tokens", "10B", "--num-gpus", "8", "--deadline", "1h")
    from trainledger.account.counting.flops import train_flops_per_token
    from trainledger.specs import get_model
    assert data["flops_per_token"] == train_flops_per_token(get_model("gpt2"), 1024)
    assert data["n_params"] == 124_439_808
    assert data["gpus_needed"] >= 1 and data["deadline_seconds"] == 3600


def test_fit_default_is_the_lecture_question(capsys):
    """CS336 Lecture 2: 8 H100 × 80e9 B / 16 B per parameter = 4.0e10, with the lecture's 80e9 B given explicitly.
    By default an H100 holds what it reports, 79.18 GiB (85,017,493,504 B): 4.25e10, as on 8 A100-80GB (79.26 GiB)."""
    data = run_json(capsys, "fit", "--memory-per-gpu", "80GB")
    assert data["max_params"] == pytest.approx(4.0e10) and data["bytes_per_param"] == 16
    default = run_json(capsys, "fit")
    assert default["memory_per_gpu_bytes"] == 85_017_493_504
    assert default["max_params"] == pytest.approx(8 * 85_017_493_504 / 16)
    a100 = run_json(capsys, "fit", "--gpu", "a100-80gb")
    assert a100["max_params"] == pytest.approx(default["max_params"], rel=1e-3)


def test_fit_memory_suffixes_and_micro_batch(capsys):
    data = run_json(capsys, "fit", "--memory-per-gpu", "80GiB", "--num-gpus", "1", "--zero", "0")
    assert data["max_params"] == pytest.approx(80 * 2**30 / 16)
    data = run_json(capsys, "fit", "--model", "gpt2", "--seq-len", "256", "--num-gpus", "1", "--zero", "0", "--batch-size", "4")
    assert data["max_batch_size"] > 4 and data["fits"] is True


def test_optimal_defaults_and_two_weeks(capsys):
    data = run_json(capsys, "optimal")                   # 32 H100 × 14 days × MFU 0.5
    assert data["budget_flops"] == pytest.approx(32 * 14 * 86400 * 989.5e12 * 0.5)
    data = run_json(capsys, "optimal", "--num-gpus", "8", "--days", "2w", "--mfu", "1")
    assert data["budget_flops"] == pytest.approx(9.58e21, rel=1e-3)          # the lecture's quirk computes 1 week
    data = run_json(capsys, "optimal", "--budget-flops", "1.92e19")
    assert data["n_params"] == pytest.approx(400e6, rel=0.01)                # Chinchilla Table 3, first row
    data = run_json(capsys, "optimal", "--budget-flops", "5.76e23", "--law", "approach3")
    assert data["n_params"] == pytest.approx(32e9, rel=0.05) and "predicted_loss" in data


def test_flops_hardware_exceeds_model_with_recompute(capsys):
    data = run_json(capsys, "flops", "--model", "gpt2", "--batch-size", "2", "--seq-len", "512", "--recompute", "full")
    assert data["train_flops_per_step"] == 3 * data["forward_flops_per_step"]
    assert data["hardware_flops_per_step"] > data["train_flops_per_step"]


def test_memory_params_only_zero_figure(capsys):
    # ZeRO Fig. 1: Ψ = 7.5B, N_d = 64, stage 3 -> 1.9 GB
    data = run_json(capsys, "memory", "--params", "7.5e9", "--precision", "mixed-bf16", "--optimizer", "adam",
                    "--zero", "3", "--dp", "64")
    assert data["total_bytes"] == pytest.approx(1.875e9) and data["activations_bytes"] == 0
    assert data["activations_modeled"] is False


def test_memory_text_output(capsys):
    assert cli_main.main(["memory", "--model", "tiny", "--batch-size", "2", "--seq-len", "64"]) == 0
    out = capsys.readouterr().out
    assert "Memory per GPU" in out and "activations" in out and ("GiB" in out or "MiB" in out)


@pytest.mark.parametrize("argv, flag", [
    (["plan", "--gpu", "no-such-gpu"], "--gpu"),
    (["plan", "--params", "0"], "--params"),
    (["plan", "--params", "-5B"], "--params"),
    (["plan", "--tokens", "abc"], "--tokens"),
    (["plan", "--mfu", "1.5"], "--mfu"),
    (["plan", "--model", "no-such-model"], "--model"),
    (["plan", "--dtype", "fp4"], "--dtype"),
    (["fit", "--precision", "fp64"], "--precision"),
    (["fit", "--optimizer", "lion"], "--optimizer"),
    (["fit", "--zero", "4"], "--zero"),
    (["fit", "--memory-per-gpu", "0GB"], "--memory-per-gpu"),
    (["optimal", "--days", "0"], "--days"),
    (["optimal", "--budget-flops", "-1"], "--budget-flops"),
    (["flops", "--model", "gpt2", "--seq-len", "0"], "--seq-len"),
    (["flops", "--model", "gpt2", "--seq-len", "2048"], "--seq-len"),
    (["memory", "--model", "gpt2", "--tp", "5"], "--tp"),
    (["memory", "--model", "gpt2", "--pp", "13"], "--pp"),
    (["memory", "--params", "7B", "--dp", "0"], "--dp"),
    (["memory", "--params", "7B", "--reserve", "-1GB"], "--reserve"),
    (["plan", "--params", "1.5.3"], "--params"),
    (["plan", "--num-gpus", "0"], "--num-gpus"),
    (["plan", "--num-gpus", "2.5"], "--num-gpus"),
    (["plan", "--mfu", "0"], "--mfu"),
    (["plan", "--mfu", "abc"], "--mfu"),
    (["plan", "--deadline", "abc"], "--deadline"),
    (["plan", "--model", ""], "--model"),
    (["params", "--model", ""], "--model"),
    (["memory", "--model", ""], "--model"),
    (["fit", "--model", ""], "--model"),
    (["fit", "--reserve", "90GB"], "--reserve"),
    (["fit", "--num-gpus", "0"], "--num-gpus"),
    (["optimal", "--tokens-per-param", "0"], "--tokens-per-param"),
    (["optimal", "--mfu", "1.5"], "--mfu"),
    (["memory", "--model", "llama-2-7b", "--tp", "3"], "--tp"),
    (["memory", "--model", "llama-2-70b", "--tp", "16"], "--tp"),
    (["memory", "--model", "gpt2", "--zero", "4"], "--zero"),
    (["memory", "--model", "gpt2", "--tp", "0"], "--tp"),
    (["memory", "--model", "gpt2", "--precision", "fp8"], "--precision"),
    (["memory", "--model", "gpt2", "--optimizer", "lion"], "--optimizer"),
    (["plan", "--tokens", "0.5"], "--tokens"),
    (["plan", "--params", "0.2"], "--params"),
])
def test_bad_input_is_one_line_naming_the_flag(capsys, argv, flag):
    assert flag in run_error(capsys, *argv)


def test_memory_notes_flags_that_change_nothing(capsys):
    data = run_json(capsys, "memory", "--params", "7B", "--zero", "3", "--sp")
    notes = " ".join(data["assumptions"])
    assert "--dp 1 shards nothing" in notes and "--sp with --tp 1" in notes
    assert data["total_bytes"] == pytest.approx(16 * 7e9)   # fp32 AdamW, nothing sharded
    data = run_json(capsys, "memory", "--params", "7B", "--zero", "3", "--dp", "8")
    assert "shards nothing" not in " ".join(data["assumptions"])
    assert data["total_bytes"] == pytest.approx(16 * 7e9 / 8)


def test_optimal_says_which_flags_it_did_not_use(capsys):
    data = run_json(capsys, "optimal", "--law", "approach3", "--tokens-per-param", "30")
    assert any("--tokens-per-param 30 not used" in line for line in data["assumptions"])
    reference = run_json(capsys, "optimal", "--law", "approach3")
    assert data["n_params"] == pytest.approx(reference["n_params"])   # the ratio flag changed nothing
    data = run_json(capsys, "optimal", "--budget-flops", "5.76e23", "--days", "3")
    assert data["budget_flops"] == pytest.approx(5.76e23)
    assert any("--budget-flops sets the budget" in line for line in data["assumptions"])


@pytest.mark.parametrize("argv, flag", [
    (["plan", "--tokens", "-1T"], "--tokens"),
    (["plan", "--params", "-70B"], "--params"),
    (["fit", "--memory-per-gpu", "-1GB"], "--memory-per-gpu"),
    (["memory", "--params", "7B", "--reserve", "-2GiB"], "--reserve"),
    (["optimal", "--days", "-2w"], "--days"),
    (["flops", "--model", "gpt2", "--seq-len", "-1k"], "--seq-len"),
    (["matmul", "--m", "-1e3"], "--m"),
    (["tensor", "--shape", "-1,3"], "--shape"),
])
def test_values_with_a_minus_sign_get_the_flags_own_message(capsys, argv, flag):
    # argparse alone reads '-1T' as an unknown option and says only "expected one argument"
    err = run_error(capsys, *argv)
    assert flag in err and "expected one argument" not in err
    assert "must be" in err or "must be a" in err
