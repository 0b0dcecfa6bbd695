"""One vocabulary across commands (issue 41, item 4): `memory --num-gpus` as every command takes it, `--dp` still
accepted where the two agree; `plan --model` and `plan --params` each say their FLOP convention and agree when asked
the same one (--count); `infer` keeps back the same automatic reserve as `memory` and `step`."""

import json

import pytest

from trainledger.cli import main as cli_main


def run_json(capsys, *argv):
    assert cli_main.main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def run_error(capsys, *argv) -> str:
    assert cli_main.main(list(argv)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "Traceback" not in err
    return err


def parts(data: dict) -> dict:
    return {k: v for k, v in data.items() if k != "run"}


def test_memory_takes_num_gpus_as_every_command_does(capsys):
    """8 GPUs are 8 data-parallel ranks under ZeRO 3 (the default): the same answer as --dp 8, and each rank holds an
    eighth of the 16 B/param model states of llama-2-7b (6,738,415,616 parameters, its config.json)."""
    by_gpus = run_json(capsys, "memory", "--model", "llama-2-7b", "--num-gpus", "8")
    by_dp = run_json(capsys, "memory", "--model", "llama-2-7b", "--dp", "8")
    both = run_json(capsys, "memory", "--model", "llama-2-7b", "--num-gpus", "8", "--dp", "8")
    assert parts(by_gpus) == parts(by_dp) == parts(both)
    assert by_gpus["dp"] == 8 and by_gpus["num_gpus"] == 8 and by_gpus["zero"] == 3
    assert by_gpus["run"]["hardware"]["num_gpus"] == 8 and by_gpus["run"]["layout"]["dp"] == 8
    one = run_json(capsys, "memory", "--model", "llama-2-7b")
    assert one["num_gpus"] == 1 and one["dp"] == 1
    assert by_gpus["optimizer_bytes"] == pytest.approx(one["optimizer_bytes"] / 8, rel=1e-6)
    assert by_gpus["optimizer_bytes"] == pytest.approx(6_738_415_616 * 8 / 8, rel=1e-6)    # AdamW's 2 fp32 states


def test_memory_num_gpus_over_tp_and_pp(capsys):
    data = run_json(capsys, "memory", "--model", "llama-2-7b", "--num-gpus", "16", "--tp", "2", "--pp", "2")
    assert data["dp"] == 4 and data["num_gpus"] == 16
    assert parts(data) == parts(run_json(capsys, "memory", "--model", "llama-2-7b", "--dp", "4", "--tp", "2",
                                         "--pp", "2"))
    assert run_json(capsys, "memory", "--params", "7e9", "--num-gpus", "64")["dp"] == 64


def test_memory_dp_and_num_gpus_that_disagree_name_both(capsys):
    err = run_error(capsys, "memory", "--model", "llama-2-7b", "--num-gpus", "8", "--dp", "4")
    assert "--dp 4" in err and "--num-gpus 8" in err and "--dp 8" in err      # and the --dp that would agree
    err = run_error(capsys, "memory", "--model", "llama-2-7b", "--num-gpus", "6", "--tp", "4")
    assert "--num-gpus 6" in err and "multiple of tp·pp·cp" in err


def test_a_tp_the_model_cannot_take_is_named_before_the_gpu_count(capsys):
    """tp 3 on 32 heads: the heads are the cause, not the 8 GPUs it does not divide (step and memory alike)."""
    for command in ("step", "memory"):
        err = run_error(capsys, command, "--model", "llama-2-7b", "--num-gpus", "8", "--tp", "3")
        assert err.startswith("error: --tp 3 must divide n_heads=32") and "--num-gpus" not in err


LLAMA_3_8B_PARAMS = 8_030_261_248      # config.json of meta-llama/Meta-Llama-3-8B (embeddings and head untied)


def test_plan_model_and_params_agree_when_asked_the_same_count(capsys):
    """`plan --model llama-3-8b --count 6n` counts as `plan --params <its count>` does: 6·N per token, the same days."""
    by_model = run_json(capsys, "plan", "--model", "llama-3-8b", "--count", "6n")
    by_params = run_json(capsys, "plan", "--params", str(LLAMA_3_8B_PARAMS), "--count", "6n")
    default_params = run_json(capsys, "plan", "--params", str(LLAMA_3_8B_PARAMS))
    assert by_model["n_params"] == LLAMA_3_8B_PARAMS
    assert by_model["flops_per_token"] == by_params["flops_per_token"] == 6 * LLAMA_3_8B_PARAMS
    assert by_model["train_days"] == by_params["train_days"] == default_params["train_days"]
    assert by_model["flop_count"] == by_params["flop_count"] == default_params["flop_count"] == "6n"
    # the lecture's arithmetic: 6·N·15T / (1024 × 989.5e12 × 0.5) seconds
    assert by_model["train_days"] == pytest.approx(6 * LLAMA_3_8B_PARAMS * 15e12 / (1024 * 989.5e12 * 0.5) / 86400)


def test_plan_default_outputs_say_why_they_differ(capsys):
    """By default --model counts each matmul a token meets plus the attention scores, --params 6·N: 19.85 vs 16.51
    days for llama-3-8b; each answer's convention line names its own count and the other's, with its figure."""
    from trainledger.account.counting.flops import attention_flops_per_token, matmul_params_per_token
    from trainledger.specs import get_model
    model = run_json(capsys, "plan", "--model", "llama-3-8b")
    params = run_json(capsys, "plan", "--params", str(LLAMA_3_8B_PARAMS))
    spec = get_model("llama-3-8b")
    # PaLM App. B: 6·N_matmul + 12·L·H·Q·T; Llama 3 8B's input embedding (128,256 × 4,096) is a lookup and its
    # 2·32 + 1 RMSNorm weights (4,096 each) scale, neither is a matmul
    matmul = LLAMA_3_8B_PARAMS - 128_256 * 4096 - (2 * 32 + 1) * 4096
    assert matmul_params_per_token(spec) == matmul
    assert model["flops_per_token"] == pytest.approx(6 * matmul + 3 * attention_flops_per_token(spec, 8192, "full"))
    assert model["flops_per_token"] == pytest.approx(6 * matmul + 12 * 32 * 32 * 128 * 8192)
    assert model["flop_count"] == "matmul" and params["flop_count"] == "6n"
    assert model["train_days"] == pytest.approx(19.85, abs=0.01) and params["train_days"] == pytest.approx(16.51, abs=0.01)
    assert model["flops_per_token_by_count"]["6n"] == params["flops_per_token"]
    model_line = next(a for a in model["assumptions"] if a.startswith("FLOPs per token"))
    params_line = next(a for a in params["assumptions"] if a.startswith("FLOPs per token"))
    assert "--count matmul" in model_line and "attention scores" in model_line and "--count 6n" in model_line
    assert "4.82e10" in model_line and "`plan --params 8.03B`" in model_line
    assert "--count 6n" in params_line and "--count matmul" in params_line and "attention scores excluded" in params_line
    causal = run_json(capsys, "plan", "--model", "llama-3-8b", "--attention", "causal")
    assert causal["flops_per_token"] == pytest.approx(model["flops_per_token"] - 6 * 32 * 32 * 128 * 8192)


def test_plan_count_refusals(capsys):
    err = run_error(capsys, "plan", "--params", "8B", "--count", "matmul")
    assert "--count matmul needs --model" in err
    err = run_error(capsys, "plan", "--model", "llama-3-8b", "--count", "6n", "--mfu", "auto")
    assert "--count" in err and "--mfu" in err
    assert "not used" in " ".join(run_json(capsys, "plan", "--params", "8B", "--attention", "causal")["assumptions"])


def test_infer_keeps_back_the_automatic_reserve_of_memory_and_step(capsys):
    """`infer --reserve auto` (the default) keeps back what `memory` and `step` do on a CUDA device: the CUDA context
    and two cuBLAS workspaces plus the caching allocator's 10 % of the peak (account/memory/per_gpu.py), the peak
    being weights + KV cache; the largest batch is the largest that fits with it (one more does not)."""
    from trainledger.account.memory.per_gpu import ALLOCATOR_SLACK_FRACTION, cuda_reserve_bytes
    auto = run_json(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100")
    assert auto == run_json(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--reserve", "auto")
    parts = cuda_reserve_bytes(auto["weights_bytes"] + auto["kv_cache_bytes"])
    assert auto["reserve_bytes"] == pytest.approx(parts["total"]) and auto["reserve_parts"] == pytest.approx(parts)
    assert parts["allocator"] == pytest.approx(ALLOCATOR_SLACK_FRACTION * (auto["weights_bytes"] + auto["kv_cache_bytes"]))
    step = run_json(capsys, "step", "--model", "llama-3-8b", "--gpu", "h100", "--num-gpus", "8")
    assert step["reserve_bytes"] > 0            # the same default on the training side
    zero = run_json(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--reserve", "0")
    assert zero["reserve_bytes"] == 0 and zero["max_batch_size"] > auto["max_batch_size"]
    most = auto["max_batch_size"]
    fits = run_json(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--batch-size", str(most))
    over = run_json(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--batch-size", str(most + 1))
    assert fits["fits"] is True and over["fits"] is False
    assert fits["memory_bytes"] + fits["reserve_bytes"] <= fits["memory_per_gpu_bytes"]
    assert any(a.startswith("reserve ") and "CUDA context" in a for a in auto["assumptions"])
    expandable = run_json(capsys, "infer", "--model", "llama-3-8b", "--gpu", "h100", "--reserve", "expandable")
    assert expandable["reserve_bytes"] == pytest.approx(parts["context"] + parts["workspaces"])
