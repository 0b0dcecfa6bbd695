"""`trainledger step`, `layout`, `plan --mfu auto`, `optimal --mfu auto`: JSON contract, defaults, one-line errors."""

import json

import pytest

from trainledger.cli import main as cli_main

STEP_KEYS = "step_seconds tokens_per_s mfu hfu model_flops_per_step hardware_flops_per_step breakdown bottleneck dp".split()
LAYOUT_KEYS = "tp sp pp interleave cp dp zero batch_size recompute step_seconds mfu memory_bytes".split()


def run_json(capsys, *argv):
    status = cli_main.main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


def run_error(capsys, *argv):
    assert cli_main.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
    return err


def test_step_json_contract(capsys):
    data = run_json(capsys, "step", "--model", "gpt2", "--gpu", "h100", "--num-gpus", "8", "--global-batch-size", "64")
    assert all(key in data for key in STEP_KEYS)
    assert data["dp"] == 8 and data["micro_batches"] == 8            # micro-batch 1 per GPU, 64 sequences
    for part in ("compute", "attention", "memory_bound", "optimizer", "tp_comm", "dp_comm", "pp_comm", "cp_comm",
                 "pipeline_bubble"):
        assert part in data["breakdown"]
    assert sum(data["breakdown"].values()) == pytest.approx(data["step_seconds"])
    assert data["fits"] and data["assumptions"]


def test_step_table_prints(capsys):
    assert cli_main.main(["step", "--model", "tiny", "--gpu", "a100"]) == 0
    out = capsys.readouterr().out
    assert "step time" in out and "bottleneck" in out


def test_interconnect_flags_change_the_answer(capsys):
    argv = ["step", "--model", "llama-2-7b", "--num-gpus", "16", "--zero", "0", "--gpu", "h100"]
    base = run_json(capsys, *argv)
    slow = run_json(capsys, *argv, "--inter-node-bandwidth", "1GB/s")
    assert slow["breakdown"]["dp_comm"] > base["breakdown"]["dp_comm"]
    node16 = run_json(capsys, *argv, "--gpus-per-node", "16")
    assert all(c["link"] == "intra" for c in node16["collectives"])


@pytest.mark.parametrize("argv, flag", [
    (["step", "--model", "gpt2", "--num-gpus", "8", "--dp", "4"], "--dp"),
    (["step", "--model", "gpt2", "--num-gpus", "8", "--global-batch-size", "12"], "--global-batch-size"),
    (["step", "--model", "gpt2", "--tp", "5", "--num-gpus", "10"], "--tp"),
    (["step", "--model", "gpt2", "--attention-kernel", "magic"], "--attention-kernel"),
    (["step", "--model", "gpt2", "--gpu", "l4", "--num-gpus", "16", "--zero", "0"], "--inter-node-bandwidth"),
    (["step", "--model", "gpt2", "--intra-node-bandwidth", "fast"], "--intra-node-bandwidth"),
    (["layout", "--model", "llama-3.1-405b", "--gpu", "l4", "--num-gpus", "1"], "no layout"),
    (["plan", "--params", "7B", "--mfu", "auto"], "--mfu auto needs --model"),
    (["optimal", "--budget-flops", "1e22", "--mfu", "auto"], "--mfu auto"),
])
def test_errors_name_the_flag(capsys, argv, flag):
    assert flag in run_error(capsys, *argv)


def test_layout_json_contract(capsys):
    data = run_json(capsys, "layout", "--model", "gpt2", "--gpu", "h100", "--num-gpus", "8", "--global-batch-size", "64",
                    "--top", "3")
    assert len(data["layouts"]) == 3
    for layout in data["layouts"]:
        assert all(key in layout for key in LAYOUT_KEYS)
        assert layout["tp"] * layout["pp"] * layout["cp"] * layout["dp"] == 8
    assert [x["step_seconds"] for x in data["layouts"]] == sorted(x["step_seconds"] for x in data["layouts"])


def test_plan_mfu_auto_names_its_layout(capsys):
    data = run_json(capsys, "plan", "--model", "gpt2", "--tokens", "10B", "--num-gpus", "8", "--mfu", "auto")
    assert 0 < data["mfu"] < 1 and data["layout"]["mfu"] == data["mfu"]
    assert data["train_seconds"] == pytest.approx(data["train_flops"] / (8 * 989.5e12 * data["mfu"]))
    full = run_json(capsys, "plan", "--model", "gpt2", "--tokens", "10B", "--num-gpus", "8", "--mfu", "auto",
                    "--recompute", "full")
    assert full["layout"]["recompute"] == "full" and full["mfu"] < data["mfu"]
    assert full["hardware_flops_per_token"] > full["flops_per_token"]


def test_plan_without_flags_is_unchanged(capsys):
    data = run_json(capsys, "plan")
    assert data["mfu"] == 0.5 and "layout" not in data and data["train_days"] == pytest.approx(143.93, abs=0.005)


def test_optimal_mfu_auto(capsys):
    data = run_json(capsys, "optimal", "--num-gpus", "8", "--days", "1", "--mfu", "auto")
    assert 0 < data["mfu"] < 1 and data["layout"]["dp"] >= 1
    assert data["budget_flops"] == pytest.approx(8 * 86400 * 989.5e12 * data["mfu"])


RECORDED = "tests/data/h100_2026_11_26/calibration-cuda-h100.json"


def test_calibration_file_on_every_planning_command(capsys):
    """--calibration FILE predicts with what `bench --calibrate` measured elsewhere (the recorded H100 here)."""
    from pathlib import Path
    recorded = str(Path(__file__).parent.parent.parent / RECORDED)
    step = run_json(capsys, "step", "--model", "gpt2", "--batch-size", "8", "--num-gpus", "1", "--zero", "0",
                    "--calibration", recorded)
    datasheet = run_json(capsys, "step", "--model", "gpt2", "--batch-size", "8", "--num-gpus", "1", "--zero", "0")
    assert step["gpu"] == "h100-sxm" and step["step_seconds"] != datasheet["step_seconds"]
    assert any(recorded in line for line in step["assumptions"])
    assert run_json(capsys, "layout", "--model", "gpt2", "--num-gpus", "8", "--global-batch-size", "64",
                    "--calibration", recorded, "--top", "1")["layouts"]
    assert run_json(capsys, "plan", "--model", "gpt2", "--calibration", recorded)["gpu"] == "h100-sxm"
    assert run_json(capsys, "optimal", "--calibration", recorded)["gpu"] == "h100-sxm"
    assert run_json(capsys, "mfu", "--model", "gpt2", "--tokens-per-s", "150000", "--calibration", recorded)["mfu"] > 0
    assert "--calibration" in run_error(capsys, "step", "--model", "gpt2", "--calibration", "/no/such.json")


def test_compile_fuses_the_pointwise_work(capsys):
    eager = run_json(capsys, "step", "--model", "gpt2", "--batch-size", "8", "--num-gpus", "1", "--zero", "0")
    compiled = run_json(capsys, "step", "--model", "gpt2", "--batch-size", "8", "--num-gpus", "1", "--zero", "0",
                        "--compile")
    assert compiled["compiled"] and compiled["step_seconds"] < eager["step_seconds"]
    assert compiled["breakdown"]["memory_bound"] < eager["breakdown"]["memory_bound"] / 2
    assert compiled["breakdown"]["compute"] < eager["breakdown"]["compute"]        # the LM head padded
    layout = run_json(capsys, "layout", "--model", "gpt2", "--num-gpus", "8", "--global-batch-size", "64",
                      "--compile", "--top", "1")
    assert layout["layouts"][0]["step_seconds"] > 0
    assert "--compile" in run_error(capsys, "step", "--model", "gpt2", "--compile", "--framework", "megatron")


def test_step_on_a_cpu_runs_with_the_defaults(capsys, tmp_path, monkeypatch):
    """Issue 22: `step --model tiny --gpu cpu` exited with "cpu has no bf16 peak"; now fp32 by default, said once."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent.parent / "measure"))
    from profile_helpers import synthetic_profile

    from trainledger.measure import calibrate as cal
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cal.save_profile(synthetic_profile(), cal.profile_path("cpu"))
    data = run_json(capsys, "step", "--model", "tiny", "--gpu", "cpu")
    assert data["precision"] == "fp32" and data["gpu"] == "cpu"
    assert sum("--precision fp32 (default here" in line for line in data["assumptions"]) == 1
    assert data["breakdown"]["overhead"] > 0 and data["cpu_op_seconds"] is None       # ops run in turn on a CPU
    assert "bf16" in run_error(capsys, "step", "--model", "tiny", "--gpu", "cpu", "--precision", "amp-bf16")


def test_step_ep_dispatcher(capsys):
    """--ep-dispatcher deepep (token-based: one copy per GPU, per node across nodes) moves fewer bytes than the
    all-to-all dispatcher's copy per routed expert; anything else is a one-line error naming the flag."""
    args = ("step", "--model", "qwen3-30b-a3b", "--gpu", "h100", "--num-gpus", "16", "--global-batch-size", "64",
            "--ep", "16", "--framework", "megatron")
    plain = run_json(capsys, *args)
    token = run_json(capsys, *args, "--ep-dispatcher", "deepep")
    assert token["expert_parallel"]["bytes_sent_per_step"] < plain["expert_parallel"]["bytes_sent_per_step"]
    assert token["breakdown"]["ep_comm"] < plain["breakdown"]["ep_comm"]
    err = run_error(capsys, *args, "--ep-dispatcher", "nccl")
    assert "--ep-dispatcher must be one of alltoall, deepep, hybridep" in err


def test_step_mtp_flag(capsys):
    """--mtp / --no-mtp (DeepSeek-V3's multi-token-prediction module, trained by default with --framework megatron);
    --mtp on a model without one: one line naming the flag, exit 2."""
    args = ("step", "--model", "deepseek-v3", "--gpu", "h100", "--num-gpus", "64", "--ep", "64", "--seq-len", "1024",
            "--framework", "megatron", "--precision", "mixed-bf16", "--zero", "1")
    on, off = run_json(capsys, *args), run_json(capsys, *args, "--no-mtp")
    assert (on["mtp_modules"], off["mtp_modules"]) == (1, 0)
    assert on["model_flops_per_step"] > off["model_flops_per_step"] and on["step_seconds"] > off["step_seconds"]
    assert "--mtp" in run_error(capsys, "step", "--model", "qwen3-30b-a3b", "--framework", "megatron", "--mtp")


def test_fp8_gemm_names_in_a_few_words():
    """The FP8 line names each Linear once (×n for a GPU's grouped expert GEMMs) and then the passes, instead of
    every GEMM of the layer (an MoE layer listed over 40 names); the JSON keeps the full list."""
    from trainledger.cli.step import _faster_or_slower, fp8_gemm_words
    names = ["qkv", "proj", "expert_up", "expert_up", "proj_dgrad", "proj_wgrad", "qkv_dgrad", "qkv_wgrad",
             "expert_up_dgrad", "expert_up_dgrad", "expert_up_wgrad", "expert_up_wgrad"]
    assert fp8_gemm_words(names) == "qkv, proj, expert_up ×2; forward, input and weight gradients"
    assert fp8_gemm_words(["fc1", "fc1_wgrad"]) == "fc1; forward, weight gradient"
    assert _faster_or_slower(1.19) == "1.19× faster" and _faster_or_slower(0.98).startswith("1.02× slower")
