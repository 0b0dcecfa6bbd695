"""Megatron-Core's MoE memory (account.memory.megatron_moe): the per-layer bytes derived term by term, the model
states of Megatron Bridge's performance runs, the in-place vocab-parallel loss, dense models unchanged, and every
published MoE run fitting where it ran."""

import pytest

from trainledger.account.memory import megatron_moe as mm
from runs import memory as memory_per_gpu
from runs import step as step_time
from trainledger.account.validation import moe
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu

QWEN3_30B = get_model("qwen3-30b-a3b")     # d 2048, 32 heads / 4 KV heads of 128, 128 experts of 768, top-8, QK-norm


def test_qwen3_30b_layer_bytes_by_hand():
    """One token of one Qwen3-30B-A3B layer, bf16, recompute_modules ["layernorm", "moe_act"] (module docstring).
    attention: norm input 2048·2, QKV input 2048·2, rstd 4, fused QKV output (32 + 8)·128·2, rotated q, k
    (32 + 4)·128·2 + QK-norm rstd 36·4, core output 32·128·2, logsumexp 32·4 = 36,116 B.
    MoE: pre-MLP norm input 2048·2, router 2·128·4 + 128, row_id_map (2·128 + 1)·4, per copy (×8) fc1 input 2048·2,
    fc1 output 2·768·2, probability 4 = 63,652 B."""
    attention = 4096 + 4096 + 4 + 10240 + 9216 + 144 + 8192 + 128
    moe_block = 4096 + 1024 + 128 + 1028 + 8 * (4096 + 3072 + 4)
    assert sum(mm.attention_bytes_per_token(QWEN3_30B, "mixed-bf16").values()) == attention == 36116
    assert sum(mm.moe_bytes_per_token(QWEN3_30B, "mixed-bf16").values()) == moe_block == 63652
    assert mm.layer_bytes_per_token(QWEN3_30B, 0, "mixed-bf16") == attention + moe_block
    # without "moe_act" the activation's output (768 · 2 per copy) stays as fc2's input; without "layernorm" the
    # pre-MLP norm keeps its output and rstd as well
    assert mm.layer_bytes_per_token(QWEN3_30B, 0, "mixed-bf16", recompute_modules=("layernorm",)) \
        == attention + moe_block + 8 * 768 * 2
    assert mm.layer_bytes_per_token(QWEN3_30B, 0, "mixed-bf16", recompute_modules=("moe_act",)) \
        == attention + moe_block + 4096 + 4


def test_fp8_saves_linear_inputs_as_one_fp8_copy():
    """FP8-CS: the QKV input, the output projection's input copy and every fc1 input are 1 byte per element (TE
    saves one FP8 copy); MXFP8 adds one E8M0 scale per 32 elements."""
    bf16 = mm.layer_bytes_per_token(QWEN3_30B, 0, "mixed-bf16")
    fp8 = mm.layer_bytes_per_token(QWEN3_30B, 0, "fp8-cs")
    # QKV input 2048 → 1 B; fc1 inputs 8·2048 → 1 B; the output projection keeps an FP8 copy beside the core output
    assert fp8 == bf16 - 2048 - 8 * 2048 + 4096
    assert mm.saved_input_bytes("mxfp8") == pytest.approx(1 + 1 / 32)


def test_megatron_bridge_perf_model_states():
    """Megatron Bridge's performance runs reduce gradients in bf16 (set_basic_perf_overrides: grad_reduce_in_fp32
    False): bf16 params and grads, fp32 main params and Adam states sharded by the distributed optimizer,
    2 + 2 + 12/d bytes per parameter (dist_optimizer.md's 6 + 12/d less the fp32 main grads' 4 → 2)."""
    d = 8
    megatron = memory_per_gpu(QWEN3_30B, batch_size=1, seq_len=4096, precision="mixed-bf16", zero=1, dp=d,
                              framework="megatron")
    ours = memory_per_gpu(QWEN3_30B, batch_size=1, seq_len=4096, precision="mixed-bf16", zero=1, dp=d)
    n = megatron["n_params_per_gpu_before_zero"]
    states = sum(megatron[k] for k in ("params_bytes", "grads_bytes", "master_params_bytes", "optimizer_bytes"))
    assert states == pytest.approx((2 + 2 + 12 / d) * n)
    assert megatron["grads_bytes"] == ours["grads_bytes"]
    assert megatron["activations_bytes"] < 0.6 * ours["activations_bytes"]


def test_megatron_loss_keeps_one_fp32_buffer():
    """Megatron's vocab-parallel cross entropy exponentiates the fp32 logits in place and turns that buffer into the
    gradient: the backward-start moment holds the 16-bit gradient of the logits beside it, not two fp32 buffers."""
    kwargs = dict(batch_size=4, seq_len=4096, precision="mixed-bf16", zero=1, dp=8, ep=8)
    megatron = memory_per_gpu(QWEN3_30B, framework="megatron", **kwargs)
    n, v = 4 * 4096, QWEN3_30B.vocab_size
    base = megatron["params_bytes"] + megatron["master_params_bytes"] + megatron["optimizer_bytes"]
    # forward: the 16-bit logits beside their fp32 copy; backward start: the 16-bit gradient beside the same buffer
    assert megatron["peak_moment"] in ("forward", "backward_start")
    assert megatron["peak_bytes"] == pytest.approx(base + megatron["activations_bytes"] + n * v * 2)


def test_full_recompute_keeps_layer_inputs_as_for_any_model():
    """Megatron's full recomputation keeps each layer's input only: the same bytes whatever the framework."""
    kwargs = dict(batch_size=1, seq_len=4096, precision="mixed-bf16", zero=1, dp=8, ep=8, recompute="full")
    assert memory_per_gpu(QWEN3_30B, framework="megatron", **kwargs)["activations_bytes"] \
        == memory_per_gpu(QWEN3_30B, **kwargs)["activations_bytes"]


@pytest.mark.parametrize("name", ["llama-3-8b", "gpt2"])
def test_dense_models_unchanged(name):
    spec = get_model(name)
    kwargs = dict(batch_size=2, seq_len=1024, precision="mixed-bf16", zero=1, dp=8, tp=2, pp=2, sp=True)
    assert memory_per_gpu(spec, framework="megatron", **kwargs) == memory_per_gpu(spec, **kwargs)


def _fits(row) -> bool:
    return moe.predict(row)["fits"]


# The DGX-GB200 DeepSeek-V3 rows (modelled since uneven chunks, 2026-12-01) ran too, but do not fit as we count:
# their recipes recompute whole modules our Megatron memory model does not express (Megatron-Bridge
# scripts/performance/configs/deepseek/deepseek_workload_base_configs.py, DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_V1:
# recompute_modules=["mlp"]; the BF16 one ["mla_up_proj"]), as the report's DeepSeek-V3 GB200 rows do not either.
DOES_NOT_FIT_AS_COUNTED = [row for row in moe.TAKEN + moe.FP8_TAKEN + moe.FP8_ASIDE
                           if row[1] == "DGX-GB200" and row[2] == "deepseek-v3"]
ROWS_THAT_RAN = [row for row in moe.TAKEN + moe.ASIDE + moe.FP8_TAKEN + moe.FP8_ASIDE + moe.RECIPE_READING
                 if row not in moe.MISPRINTED and row not in DOES_NOT_FIT_AS_COUNTED]


def test_gb200_deepseek_rows_do_not_fit_as_counted():
    """Held so that modelling their recomputation shows: 185-190 GiB + reserve against 173 GiB."""
    assert len(DOES_NOT_FIT_AS_COUNTED) == 3
    assert not any(_fits(row) for row in DOES_NOT_FIT_AS_COUNTED)


@pytest.mark.parametrize("row", ROWS_THAT_RAN,
                         ids=lambda r: f"{r[0]}-{r[1]}-{r[2]}-{r[4]}-mbs{r[7]}-ep{r[12]}")
def test_published_moe_runs_fit(row):
    """Every published row ran, so it must fit (each row as its recipe ran it: moe.RECIPE_READING for the two
    25.11 rows whose printed EP or MBS the recipe did not use)."""
    assert _fits(row)


def test_misprinted_layouts_do_not_fit():
    """The 25.11 rows as printed: DGX-B200 gpt-oss-120b with EP 8 keeps 16 of 128 experts per GPU (params and grads alone are 61 GiB); DGX-H100 with MBS 4 holds 4 × 4 micro-batches of 9 layers. Their recipes ran EP
    64 and MBS 1 (moe.RECIPE_READING), which fit."""
    assert not any(_fits(row) for row in moe.MISPRINTED)
    assert all(_fits(row) for row in moe.RECIPE_READING)


def test_skill_run_fits():
    """Qwen3-30B-A3B, H100 BF16, 16 GPUs, EP 16, MBS 1, GBS 1024 (moe.SKILL_RUN) ran: it fits."""
    assert moe.predict(moe.SKILL_RUN)["fits"]


def test_step_passes_the_framework_to_memory():
    kwargs = dict(batch_size=1, seq_len=4096, global_batch_size=64, num_gpus=8, precision="mixed-bf16", zero=1, ep=8)
    megatron = step_time(QWEN3_30B, get_gpu("h100-sxm"), framework="megatron", **kwargs)
    direct = memory_per_gpu(QWEN3_30B, batch_size=1, seq_len=4096, precision="mixed-bf16", zero=1, dp=8, ep=8,
                            grad_accum=8, framework="megatron")
    assert megatron["memory"]["activations_bytes"] == pytest.approx(direct["activations_bytes"])
