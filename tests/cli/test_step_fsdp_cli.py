"""`step` and `memory` with FSDP2 (--zero 3): the default stage with its reason, the lever, FSDP2 and HSDP flags."""

import json

import pytest

from trainledger.cli import main as cli_main

GPT3 = ["step", "--model", "gpt3-175b", "--gpu", "a100-80gb", "--num-gpus", "1024", "--tp", "8", "--pp", "8",
        "--global-batch-size", "1536", "--precision", "mixed-bf16", "--optimizer", "adam"]
LLAMA = ["--model", "llama-3-8b", "--gpu", "a100-80gb", "--batch-size", "1", "--seq-len", "8192",
         "--recompute", "selective-op"]


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


def test_default_stage_is_said_with_its_reason(capsys):
    data = run_json(capsys, *GPT3)
    assert data["zero"] == 1
    assert any(line.startswith("ZeRO 1 by default") and "pipelining" in line for line in data["assumptions"])
    data = run_json(capsys, "step", *LLAMA, "--num-gpus", "64", "--global-batch-size", "64")
    assert data["zero"] == 3 and any("FSDP2 full shard" in line for line in data["assumptions"])
    assert any("MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)" in line for line in data["assumptions"])


def test_bottleneck_names_the_faster_stage_with_its_time(capsys):
    slow = run_json(capsys, *GPT3, "--zero", "3", "--fsdp-accumulate", "sharded", "--reshard-after-forward")
    fast = run_json(capsys, *GPT3, "--zero", "1")
    assert slow["lever"]["zero"] == 1 and slow["lever"]["step_seconds"] == pytest.approx(fast["step_seconds"])
    assert "re-gathers the parameters for each of 96 micro-batches: --zero 1 takes" in slow["bottleneck"]
    assert slow["bottleneck"].startswith("data-parallel communication")


def test_fsdp_flags_change_what_is_gathered(capsys):
    base = ["step", *LLAMA, "--num-gpus", "64", "--global-batch-size", "64"]
    policy = run_json(capsys, *base)
    plain = run_json(capsys, *base, "--fsdp-param-dtype", "fp32")
    gathered = lambda d: sum(c["payload_bytes"] for c in d["collectives"] if c["name"].startswith("fsdp_allgather"))  # noqa: E731
    assert gathered(plain) == pytest.approx(2 * gathered(policy))
    hsdp = run_json(capsys, *base, "--dp-replicate", "8")
    assert any(c["name"] == "hsdp_allreduce" for c in hsdp["collectives"])


@pytest.mark.parametrize("argv, flag", [
    (["step", *LLAMA, "--num-gpus", "64", "--dp-replicate", "3"], "--dp-replicate"),
    (["step", *LLAMA, "--num-gpus", "64", "--zero", "1", "--dp-replicate", "2"], "--dp-replicate"),
    (["memory", *LLAMA, "--dp", "8", "--dp-replicate", "16"], "--dp-replicate"),
    (["step", *LLAMA, "--num-gpus", "64", "--fsdp-accumulate", "never"], "--fsdp-accumulate"),
    (["step", *LLAMA, "--num-gpus", "64", "--recompute", "sometimes"], "--recompute"),
])
def test_bad_fsdp_flags_are_one_line(capsys, argv, flag):
    assert flag in run_error(capsys, *argv)


def test_memory_reports_fsdp_buffers_and_fits(capsys):
    data = run_json(capsys, "memory", *LLAMA, "--dp", "64", "--zero", "3")
    assert data["fits"] and data["fsdp_buffers"]["blocks_held"] == 2
    assert data["activations_precision"] == "mixed-bf16"


def test_loss_upcast_flag_in_memory_step_and_layout(capsys):
    """--no-loss-upcast (account.memory.activations.loss_bytes): the cross-entropy on the bf16 logits saves N·V·2
    bytes of log-softmax instead of N·V·4, in `memory`, `step` and `layout` alike; Megatron's loss always upcasts."""
    base = ["--model", "gpt2", "--batch-size", "4", "--seq-len", "1024", "--precision", "bf16"]
    up = run_json(capsys, "memory", *base)
    down = run_json(capsys, "memory", *base, "--no-loss-upcast")
    assert up["activations_bytes"] - down["activations_bytes"] == 4 * 1024 * 50257 * 2
    assert any("16-bit logits" in line for line in down["assumptions"])
    step_up = run_json(capsys, "step", *base, "--num-gpus", "1")
    step_down = run_json(capsys, "step", *base, "--num-gpus", "1", "--no-loss-upcast")
    assert step_up["memory"]["activations_bytes"] - step_down["memory"]["activations_bytes"] == 4 * 1024 * 50257 * 2
    assert step_down["step_seconds"] < step_up["step_seconds"]         # no casts, half the loss's bytes
    layout = run_json(capsys, "layout", "--model", "gpt2", "--num-gpus", "2", "--seq-len", "1024", "--precision",
                      "bf16", "--no-loss-upcast", "--top", "1")
    assert layout["layouts"] and any("16-bit logits" in line for line in layout["assumptions"])
    err = run_error(capsys, "step", *base, "--num-gpus", "1", "--framework", "megatron", "--no-loss-upcast")
    assert "--no-loss-upcast" in err and "megatron" in err
