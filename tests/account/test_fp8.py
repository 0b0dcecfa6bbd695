"""FP8 recipes in time and memory (account/time/fp8.py, account/memory/fp8.py), each piece checked by hand."""

import json

import pytest

from trainledger.account.memory.fp8 import linear_params
from runs import memory as memory_per_gpu
from trainledger.account.time.eager import gemm
from trainledger.account.time.fp8 import gemm_in_fp8, layer_kernels, quantize_kernels
from runs import step as step_time
from trainledger.cli import main as cli_main
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.fp8 import SCHEMES
from trainledger.specs.hardware import get_gpu

TOKENS, D, F = 8192, 4096, 14336


def _fc1():
    """The MLP up projection of Llama 3 8B over 8192 tokens: forward, dgrad, wgrad (account.time.eager's shapes)."""
    return (gemm("fc1", TOKENS, F, D, 2, "bf16"), gemm("fc1_dgrad", TOKENS, D, F, 2, "bf16", role="dgrad"),
            gemm("fc1_wgrad", F, D, TOKENS, 2, "bf16", role="wgrad"))


def test_an_fp8_gemm_reads_one_byte_operands_at_the_fp8_peak():
    fwd, _, _ = _fc1()
    fp8 = gemm_in_fp8(fwd, SCHEMES["fp8-cs"], 2)
    assert fp8.dtype == "fp8" and fp8.flops == fwd.flops          # same FLOPs, other tensor cores
    assert fwd.bytes - fp8.bytes == (TOKENS * D + D * F) * (2 - 1)   # X and W at 1 byte, C still bf16
    mx = gemm_in_fp8(fwd, SCHEMES["mxfp8"], 2)
    assert mx.dtype == "fp8" and fwd.bytes - mx.bytes == pytest.approx((TOKENS * D + D * F) * (1 - 1 / 32))


def test_transformer_engine_current_scaling_casts_by_hand():
    """TE forward: input and weight each amax-read (2 B) then cast + transposed (read 2 B, write 1 + 1 B);
    backward: only the output gradient is cast (the saved input and cached weight are FP8 already)."""
    fwd, dgrad, wgrad = _fc1()
    scheme = SCHEMES["fp8-cs"]
    ks = {k.name: k.bytes for k in quantize_kernels(fwd, scheme, 2)}
    assert ks == {"fc1_input_fp8_cast": TOKENS * D * 4, "fc1_input_amax": TOKENS * D * 2,
                  "fc1_weight_fp8_cast": D * F * 4, "fc1_weight_amax": D * F * 2}
    assert {k.name: k.bytes for k in quantize_kernels(dgrad, scheme, 2)} == {
        "fc1_dgrad_grad_output_fp8_cast": TOKENS * F * 4, "fc1_dgrad_grad_output_amax": TOKENS * F * 2}
    assert quantize_kernels(wgrad, scheme, 2) == []
    # delayed scaling takes its scale from the history: no amax pass before the cast
    assert [k.name for k in quantize_kernels(fwd, SCHEMES["fp8-delayed"], 2)] == ["fc1_input_fp8_cast",
                                                                                  "fc1_weight_fp8_cast"]


def test_torchao_rowwise_recasts_every_operand_where_it_is_used():
    """torchao saves bf16 inputs and casts again in backward: 2 casts forward, 2 for dgrad, 2 for wgrad,
    each an amax read (2 B) and a cast (read 2 B, write 1 B)."""
    fwd, dgrad, wgrad = _fc1()
    scheme = SCHEMES["fp8-rowwise"]
    for kernel, operands in ((fwd, TOKENS * D + D * F), (dgrad, TOKENS * F + F * D), (wgrad, F * TOKENS + TOKENS * D)):
        ks = quantize_kernels(kernel, scheme, 2)
        assert len(ks) == 4
        assert sum(k.bytes for k in ks) == operands * (3 + 2)


def test_only_the_linear_gemms_of_a_layer_turn_fp8():
    spec = get_model("llama-3-8b")
    from trainledger.account.time.kernels import layer_kernels as bf16_layer
    from trainledger.account.time.shard import Shard
    from trainledger.specs.run import Kernels
    lk = bf16_layer(spec, Shard(1, 8192, "fp8-cs"), Kernels(framework="megatron"))
    fp8 = layer_kernels(lk, "fp8-cs", 2)
    gemms = [k for ks in fp8.values() for k in ks if k.kind == "gemm"]
    assert {k.dtype for k in gemms if k.part == "compute"} == {"fp8"}
    assert all(k.dtype == "bf16" for ks in fp8.values() for k in ks if k.part == "attention")
    assert layer_kernels(lk, "mixed-bf16", 2) is lk


@pytest.fixture(scope="module")
def llama8b_h100():
    """Llama 3 8B on 8 H100 as Megatron Bridge's FP8-CS row runs it (MBS 1, GBS 128, FSDP): fp8-cs and mixed-bf16."""
    spec, gpu = get_model("llama-3-8b"), get_gpu("h100")
    kw = dict(batch_size=1, seq_len=8192, global_batch_size=128, num_gpus=8, zero=3, framework="megatron",
              attention="causal", with_memory=False)
    return step_time(spec, gpu, precision="fp8-cs", **kw), step_time(spec, gpu, precision="mixed-bf16", **kw)


def test_fp8_gemms_are_faster_than_bf16_on_h100_and_named(llama8b_h100):
    fp8, bf16 = llama8b_h100
    assert fp8["breakdown"]["compute"] < bf16["breakdown"]["compute"]
    assert fp8["breakdown"]["attention"] == pytest.approx(bf16["breakdown"]["attention"])   # stays bf16
    assert fp8["breakdown"]["memory_bound"] > bf16["breakdown"]["memory_bound"]             # the casts
    assert {"qkv", "fc1", "fc2_dgrad", "fc1_wgrad"} <= set(fp8["fp8_gemms"])
    assert not any(name.startswith("lm_head") for name in fp8["fp8_gemms"])
    # model FLOPs do not change with precision; MFU stays against the bf16 peak
    assert fp8["model_flops_per_step"] == bf16["model_flops_per_step"]
    assert fp8["peak_flops_per_s"] == get_gpu("h100").peak("bf16")


def test_model_tflops_per_gpu_is_nvidias_convention(llama8b_h100):
    """Megatron Bridge performance summary (25.11, DGX-H100, LLAMA3_8B FP8-CS): 744 Model TFLOP/s/GPU at 14451
    tokens/s/GPU, i.e. 5.148e10 FLOPs per token: our causal count (6N + causal attention) to 0.1 %."""
    fp8, _ = llama8b_h100
    per_token = fp8["model_flops_per_step"] / fp8["tokens_per_step"]
    assert per_token == pytest.approx(744e12 / 14451, rel=1e-3)
    assert fp8["model_flops_per_s_per_gpu"] == pytest.approx(fp8["tokens_per_s"] / 8 * per_token)


def test_fp8_refused_where_the_gpu_lacks_it():
    spec = get_model("llama-3-8b")
    with pytest.raises(TrainledgerError, match="--precision fp8-cs needs FP8 tensor cores"):
        step_time(spec, get_gpu("a100"), precision="fp8-cs", seq_len=2048)
    with pytest.raises(TrainledgerError, match="--precision mxfp8 needs MX block-scaled"):
        step_time(spec, get_gpu("h100"), precision="mxfp8", seq_len=2048)
    step_time(spec, get_gpu("b200"), precision="mxfp8", seq_len=2048, with_memory=False)


@pytest.mark.parametrize("argv", [["step", "--gpu", "a100", "--precision", "fp8-cs"],
                                  ["step", "--gpu", "h100", "--precision", "mxfp8"],
                                  ["layout", "--gpu", "a100", "--num-gpus", "8", "--precision", "fp8-rowwise"],
                                  ["memory", "--gpu", "a100", "--precision", "fp8-delayed"],
                                  ["fit", "--gpu", "h200", "--precision", "mxfp8"],
                                  ["measure", "--precision", "fp8-cs"],
                                  ["profile", "--precision", "fp8-rowwise"]])
def test_cli_refusal_is_one_line_exit_2(capsys, argv):
    assert cli_main.main([*argv, "--model", "llama-3-8b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and "--precision" in err


def test_step_cli_compares_fp8_with_bf16(capsys):
    status = cli_main.main(["step", "--model", "llama-3-8b", "--gpu", "h100", "--num-gpus", "8", "--batch-size", "1",
                            "--global-batch-size", "128", "--seq-len", "8192", "--framework", "megatron",
                            "--precision", "fp8-cs", "--attention", "causal", "--json"])
    assert status == 0
    r = json.loads(capsys.readouterr().out)
    assert r["fp8"]["base_precision"] == "mixed-bf16"
    assert r["fp8"]["fp8_gemm_seconds"] < r["fp8"]["base_gemm_seconds"]
    assert r["fp8"]["speedup"] > 1 and "Model TFLOP/s/GPU" in r["model_flops_convention"]


def test_fit_counts_the_fp8_weight_copies():
    """Without a model every parameter is counted as a Linear's: TE's FP8 weight + transpose add 2 B/param."""
    from trainledger.account.planning.plan import max_params
    bf16, cs = max_params(80e9, 8, "mixed-bf16", "adamw"), max_params(80e9, 8, "fp8-cs", "adamw")
    assert cs["bytes_per_param"] == bf16["bytes_per_param"] + 2 == 18
    assert max_params(80e9, 8, "fp8-rowwise", "adamw")["bytes_per_param"] == 16


def test_fp8_memory_by_hand():
    """Llama 3 8B, one GPU, micro-batch 1 × 8192: TE keeps the FP8 weight + transpose (2 B per Linear parameter)
    and saves 26,624 Linear-input elements per token and layer (q/k/v 4096, o 4096, up 4096, down 14336) at 1 B
    instead of 2; torchao's rowwise keeps nothing; delayed scaling adds 32 × 7 × 3 × 1024 fp32 amax entries."""
    spec = get_model("llama-3-8b")
    kw = dict(batch_size=1, seq_len=8192, optimizer="adamw")
    bf16, cs = memory_per_gpu(spec, precision="mixed-bf16", **kw), memory_per_gpu(spec, precision="fp8-cs", **kw)
    assert cs["params_bytes"] - bf16["params_bytes"] == pytest.approx(2 * linear_params(spec))
    assert linear_params(spec) == 8030261248 - 2 * 128256 * 4096 - (2 * 32 + 1) * 4096
    assert bf16["activations_bytes"] - cs["activations_bytes"] == pytest.approx(32 * 8192 * 26624)
    delayed = memory_per_gpu(spec, precision="fp8-delayed", **kw)
    assert delayed["params_bytes"] - cs["params_bytes"] == pytest.approx(32 * 7 * 3 * 1024 * 4)
    rowwise, amp = memory_per_gpu(spec, precision="fp8-rowwise", **kw), memory_per_gpu(spec, precision="amp-bf16", **kw)
    assert rowwise["total_bytes"] == amp["total_bytes"]
    full = memory_per_gpu(spec, precision="fp8-cs", recompute="full", **kw)
    assert full["fp8"]["saved_inputs_bytes_saved"] == 0


def test_plan_mfu_auto_and_layout_take_fp8(capsys):
    """`plan --mfu auto` asks `layout` for its best layout in the recipe: FP8 GEMMs make Llama 3 8B on 8 H100 train
    sooner than bf16 (same tokens, same GPUs)."""
    days = {}
    for precision in ("mixed-bf16", "fp8-cs"):
        status = cli_main.main(["plan", "--model", "llama-3-8b", "--gpu", "h100", "--num-gpus", "8", "--tokens", "1T",
                                "--mfu", "auto", "--precision", precision, "--json"])
        out = capsys.readouterr().out
        assert status == 0
        days[precision] = json.loads(out)["train_days"]
    assert days["fp8-cs"] < days["mixed-bf16"]


def test_web_calculator_answers_and_refuses_fp8():
    """The web calculator's step (web/api.py answer): the FP8 comparison in its JSON; a100 refused naming --precision."""
    pytest.importorskip("fastapi", reason="the web extra")
    from trainledger.web.api import answer
    status, body = answer("step", [("model", "llama-3-8b"), ("gpu", "h100"), ("num-gpus", "8"),
                                   ("precision", "fp8-cs")])[:2]
    assert status == 200 and body["fp8"]["speedup"] > 1 and body["fp8_gemms"]
    status, body = answer("step", [("model", "llama-3-8b"), ("gpu", "a100"), ("precision", "fp8-cs")])[:2]
    assert status == 422 and body["error"].startswith("--precision fp8-cs needs FP8 tensor cores")
