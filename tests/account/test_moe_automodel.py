"""NeMo Automodel's published PyTorch MoE runs (account/validation/moe.py AUTOMODEL): the transcription, their FLOP
convention against our count, and what the step predicts for them (framework torchtitan, FSDP2, EP, DeepEP)."""

import pytest

from trainledger.account.counting.flops import train_flops_per_token
from trainledger.account.validation import moe
from trainledger.specs import get_model


@pytest.mark.parametrize("row", moe.AUTOMODEL, ids=lambda r: f"{r[0]}-{r[1]}")
def test_automodel_rows_agree_with_themselves(row):
    """Each printed row is consistent: GA = GBS / (LBS · DP) with DP = GPUs / (TP · PP · CP), FSDP = DP, LBS a whole
    number of micro-batches, and the printed step time = GBS · seq / (tokens/s per GPU · GPUs) to 0.5 %."""
    model, n, gbs, mbs, lbs, ga, seq, tp, pp, cp, ep, vp, fsdp, step_s, tflops, tokens, recompute, config = row
    dp = n // (tp * pp * cp)
    assert gbs == ga * lbs * dp and fsdp == dp and lbs % mbs == 0
    assert gbs * seq / (tokens * n) == pytest.approx(step_s, rel=0.005)
    assert get_model(model).n_experts % ep == 0 and recompute in ("full", "none") and config.endswith(".yaml")


@pytest.mark.parametrize("row", [r for r in moe.AUTOMODEL if r[0] != "gpt-oss-120b"], ids=lambda r: f"{r[0]}-{r[1]}")
def test_automodel_flops_per_token_is_our_causal_count(row):
    """Model TFLOPs/s per GPU / tokens/s per GPU, the FLOPs Automodel counts for one token, is our causal training
    count to 0.5 % for DeepSeek-V3 (without the MTP module: Automodel does not train it; with it ours would be 4 %
    over) and Qwen3-30B-A3B: the same convention, so tokens/s per GPU is what the rows compare."""
    model, tflops, tokens = row[0], row[14], row[15]
    assert train_flops_per_token(get_model(model), row[6], "causal") == pytest.approx(tflops * 1e12 / tokens,
                                                                                       rel=0.005)


def automodel_gpt_oss_flops_per_token(spec, seq_len: int) -> float:
    """NVIDIA-NeMo/Automodel nemo_automodel/components/utils/flops_utils.py `gpt_oss_flops`, written out for one
    sequence / seq_len: 6 × (per layer: QKV and output projections, attention scores over the causal mask, or over a
    128-token window on every second layer; the top-k SwiGLU experts) + the output head. Its head dimension is
    `kv_channels`, which the GPT-OSS config lacks, so hidden_size // num_attention_heads = 2880 // 64 = 45, not 64."""
    t, h, heads, groups = seq_len, spec.d_model, spec.n_heads, spec.n_kv_heads
    kv, w = h // heads, spec.sliding_window
    flops = 0.0
    for layer in range(spec.n_layers):
        mask = t * (t + 1) / 2 if layer % 2 == 0 else w * (w + 1) / 2 + (t - w) * w
        flops += 6 * (t * h * kv * (heads + 2 * groups) + t * h * kv * heads + heads * mask * kv * 2)
        flops += 6 * (t * spec.experts_per_token * h * spec.d_ff * 3)
    return (flops + 6 * t * h * spec.vocab_size) / t


def test_automodel_gpt_oss_flops_follow_its_own_formula():
    """GPT-OSS 120B: 231 TFLOPs/s at 7,626 tokens/s is 3.029e10 FLOPs per token, Automodel's formula (head dim 45,
    sliding windows counted) to 0.5 %; ours is 13.6 % higher (head dim 64, and counting.flops counts the sliding
    layers' attention as full causal). The FLOP columns do not compare across conventions: tokens/s does."""
    spec = get_model("gpt-oss-120b")
    row = next(r for r in moe.AUTOMODEL if r[0] == "gpt-oss-120b")
    published = row[14] * 1e12 / row[15]
    assert automodel_gpt_oss_flops_per_token(spec, 4096) == pytest.approx(published, rel=0.005)
    assert train_flops_per_token(spec, 4096, "causal") / published == pytest.approx(1.136, abs=0.005)


def test_automodel_rows_predicted():
    """Every row predicted as our eager-PyTorch FSDP2 model runs it, with Automodel's bf16 states and loss. Unlike
    the Megatron MoE runs (predicted too fast), these PyTorch runs are predicted SLOWER than published or about
    right: DeepSeek-V3 on 1024 GPUs +7.3 %, on 256 GPUs −11.4 % (Automodel's 61 layers over PP 4 × VP 8 in 32 uneven chunks of 1-2
    layers: the bubble waits for a 2-layer chunk, 3 × 2/16 of a stage-pass per micro-batch; until 2026-12-01 timed
    with one chunk per stage, +0.9 % and −31 %, a bubble of 3.3 of 11.9 s), Qwen3-30B-A3B −26 % (memory-bound
    kernels 12.0 s of 29.5 s: eager PyTorch's, where the run uses TransformerEngine's fused ones), GPT-OSS 120B
    −9 %."""
    rows = {(r["model"], r["num_gpus"]): r for r in moe.automodel_cases()}
    assert len(rows) == len(moe.AUTOMODEL) == 4
    assert all(r["error"] == pytest.approx(r["predicted_tokens_per_s_per_gpu"] / r["published_tokens_per_s_per_gpu"]
                                           - 1) for r in rows.values())
    assert all(r["error"] < 0.10 for r in rows.values())                 # none predicted much faster
    assert rows[("deepseek-v3", 1024)]["error"] == pytest.approx(0.073, abs=0.03)
    assert rows[("deepseek-v3", 256)]["error"] == pytest.approx(-0.114, abs=0.03)
    assert abs(rows[("gpt-oss-120b", 64)]["error"]) <= 0.20 and rows[("qwen3-30b-a3b", 8)]["error"] < -0.20
    dsv3 = rows[("deepseek-v3", 256)]
    assert (dsv3["interleave_modelled"], dsv3["vp"], dsv3["uneven_chunks"]) == (8, 8, True)
    assert rows[("qwen3-30b-a3b", 8)]["interleave_modelled"] == 1 and not rows[("qwen3-30b-a3b", 8)]["uneven_chunks"]
    assert 0.02 < dsv3["breakdown"]["pipeline_bubble"] / dsv3["step_seconds"] < 0.06
    qwen = rows[("qwen3-30b-a3b", 8)]["breakdown"]
    assert qwen["memory_bound"] > qwen["compute"]


# What NeMo Automodel's runs keep in memory (account/validation/moe.py AUTOMODEL_*; docs/time.md, "PyTorch MoE runs:
# NeMo Automodel"). Each test checks the bytes by hand from the formula, with the source of the mechanism.
GIB = 2**30


def test_loss_without_upcast_saves_a_16_bit_log_softmax():
    """MaskedCrossEntropy(fp32_upcast=False), every benchmark config's `loss_fn` (NVIDIA-NeMo/Automodel
    nemo_automodel/components/loss/masked_ce.py at 38fe8ba7: `if self.fp32_upcast: logits = logits.float()`, then
    F.cross_entropy): log_softmax saves its output in the logits' bf16, N·V·2 bytes + the fp32 total weight,
    instead of N·V·4 + 4. Qwen3-30B-A3B at 4 × 4096 tokens, V = 151,936: 4.64 GiB instead of 9.27."""
    from trainledger.account.memory.activations import ActivationShard, activations_bytes, loss_bytes
    spec = get_model("qwen3-30b-a3b")
    n, v = 4 * 4096, spec.vocab_size
    assert loss_bytes(n, v, 2, loss_upcast=False) == n * v * 2 + 4
    assert loss_bytes(n, v, 2) == n * v * 4 + 4
    up = activations_bytes(spec, ActivationShard(4, 4096, precision="bf16", recompute="full"))
    down = activations_bytes(spec, ActivationShard(4, 4096, precision="bf16", recompute="full", loss_upcast=False))
    assert down["loss"] == n * v * 2 + 4 and down["loss"] / GIB == pytest.approx(4.64, abs=0.01)
    assert up["total"] - down["total"] == n * v * 2 and up["per_layer"] == down["per_layer"]


def test_loss_without_upcast_peaks_with_16_bit_logits_and_gradients():
    """The step's peak moments (account.memory.activations.step_peak_bytes) around that loss, pp = 1. Forward: the
    bf16 logits beside the saved bf16 log-softmax (N·V·2 each), no fp32 copy (N·V·4). Backward start: the
    gradients of the log-softmax and of the logits, bf16, while the recipe still holds the logits
    (nemo_automodel/recipes/llm/train_ft.py: `out = model(**batch)`, `calculate_loss(..., logits=out.logits)` and
    `.backward()` in one scope): 3·N·V·2 where the upcast loss has two fp32 gradients, 2·N·V·4."""
    from trainledger.account.memory.activations import ActivationShard, activations_bytes, step_peak_bytes
    spec = get_model("qwen3-30b-a3b")
    n, v = 4 * 4096, spec.vocab_size
    peaks = {}
    for upcast in (True, False):
        acts = activations_bytes(spec, ActivationShard(4, 4096, precision="bf16", recompute="full",
                                                       loss_upcast=upcast))
        memory = {"params_bytes": 0.0, "grads_bytes": 0.0, "optimizer_bytes": 0.0,
                  "activations_bytes": acts["total"], "activations": acts}
        shard = ActivationShard(4, 4096, precision="bf16", recompute="full", loss_upcast=upcast)
        peaks[upcast] = step_peak_bytes(spec, shard, memory)
    saved = n * v * 4 - n * v * 2                  # the log-softmax, fp32 vs bf16
    assert peaks[True]["forward"] - peaks[False]["forward"] == saved + n * v * (2 + 4) - n * v * 2
    assert peaks[True]["backward_start"] - peaks[False]["backward_start"] == saved + 2 * n * v * 4 - 3 * n * v * 2


def test_loss_without_upcast_reads_and_writes_16_bit_logits():
    """The loss kernels (account.time.kernels.edge_kernels) on the bf16 logits: no cast to fp32 and back, and the
    cross-entropy's 3 + 5 passes over the logits move 2 bytes per element instead of 4."""
    from trainledger.account.time.kernels import edge_kernels
    from trainledger.account.time.shard import Shard
    from trainledger.specs.run import Kernels
    spec = get_model("qwen3-30b-a3b")
    logits = 4 * 4096 * spec.vocab_size
    kernels = {}
    for upcast in (True, False):
        edges = edge_kernels(spec, Shard(4, 4096, "bf16"), Kernels(framework="torchtitan", loss_upcast=upcast))
        kernels[upcast] = {k.name: k.bytes for k in edges["head_forward"] + edges["head_backward"]}
    assert "logits_cast" in kernels[True] and "logits_cast" not in kernels[False]
    assert "logits_grad_cast" not in kernels[False]
    assert kernels[False]["cross_entropy"] == logits * 3 * 2 + 4 * 4096 * 16
    assert kernels[False]["cross_entropy_backward"] == logits * 5 * 2
    assert kernels[True]["cross_entropy_backward"] == logits * 5 * 4


def test_megatron_has_no_16_bit_loss():
    """Megatron-Core's vocab-parallel cross entropy upcasts its logits: --no-loss-upcast with it is an error."""
    from runs import memory as memory_per_gpu
    from trainledger.errors import TrainledgerError
    with pytest.raises(TrainledgerError, match="--no-loss-upcast"):
        memory_per_gpu(get_model("qwen3-30b-a3b"), precision="bf16", framework="megatron", loss_upcast=False)


def test_automodel_keeps_weights_gradients_and_adam_states_in_bf16():
    """With `load_base_model: false` Automodel's checkpointer calls `model.initialize_weights()`
    (nemo_automodel/components/checkpoint/checkpointing.py at 006c1ca6), whose default dtype=torch.bfloat16 casts
    the whole model (components/models/gpt_oss/model.py at 037e04a6: `self.to(dtype)`; deepseek_v3 and qwen3_moe
    model.py at 05e09029: `cast_model_to_dtype`); torch.optim.Adam's two states are made like the parameters; FSDP2
    reduce-scatters in fp32 (MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32), components/moe/
    parallelizer.py at 4a37629a) and casts the reduced shard back to the parameter's bf16 (pytorch/pytorch
    torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py at 010ae4a8, `foreach_reduce`). So 2 + 2 + 2·2 = 8 B
    per parameter: Qwen3-30B-A3B on 8 GPUs with EP 8 (= DP, each expert on one GPU) shards every parameter 8 ways:
    Adam states 4 · 30.53e9 / 8 B = 14.22 GiB (16 B/param: 28.44 GiB of fp32 states before)."""
    from trainledger.account.counting.params import param_counts
    row = next(r for r in moe.AUTOMODEL if r[0] == "qwen3-30b-a3b")
    assert moe.AUTOMODEL_PRECISION == "bf16"
    r = moe.predict_automodel(row)
    n_params = param_counts(get_model("qwen3-30b-a3b"))["n_params"]
    assert r["memory"]["optimizer_bytes"] == pytest.approx(2 * 2 * n_params / 8, rel=1e-9)
    assert r["memory"]["optimizer_bytes"] / GIB == pytest.approx(14.22, abs=0.01)
    assert r["memory"]["master_params_bytes"] == 0


def test_fp32_reduce_scatter_of_bf16_gradients():
    """FSDP2's buffers under that policy (account.memory.fsdp.buffers): the current block's unsharded bf16 gradient
    and its fp32 reduce-scatter input, (2 + 4) B per parameter of the block; its gathered parameters 2 B (bf16
    stored, so the policy casts nothing: mixed_precision False)."""
    from trainledger.account.memory.fsdp import buffers, fsdp_settings
    from trainledger.specs.recipes import get_recipe
    settings = fsdp_settings(get_recipe("bf16"), param_dtype="auto", reduce_dtype="fp32", dp=8)
    assert (settings.param_dtype, settings.reduce_dtype, settings.mixed_precision) == ("bf16", "fp32", False)
    u = {"block": 1e8, "root": 3e8, "blocks": 48}
    detail = buffers(u, settings)["detail"]
    assert detail["block_grads"] == 1e8 * (2 + 4) and detail["root_params"] == 3e8 * 2


def test_automodel_resharding_is_each_configs():
    """`parallelizer.reshard_after_forward` as each benchmark config sets it (examples/benchmark/configs/*.yaml at
    037e04a6: DeepSeek-V3 false, GPT-OSS 120B true; the Qwen3 config, read at 092af93e, sets none: parallelize_model's
    default, reshard_after_forward=False, nemo_automodel/components/moe/parallelizer.py at 4a37629a)."""
    assert set(moe.AUTOMODEL_RESHARD_AFTER_FORWARD) == {row[-1] for row in moe.AUTOMODEL}
    assert [moe.AUTOMODEL_RESHARD_AFTER_FORWARD[row[-1]] for row in moe.AUTOMODEL] == [False, False, False, True]


def test_automodel_rows_fit_as_automodel_keeps_them():
    """They ran on 80 GB H100s (79.18 GiB). Asked as Automodel keeps them (bf16 states, the loss on bf16 logits, the
    configs' resharding), the DeepSeek-V3 and Qwen3 rows fit, with the default reserve (CUDA context, cuBLAS
    workspaces, 10 % of the peak for the allocator's cache): peak + reserve 59.4, 76.3, 68.3 GiB (before, as
    torchtitan's amp-bf16 with fp32 logits: 67.0, 104.5, 100.8). GPT-OSS 120B, the one run without activation
    checkpointing, still does not: 87.05 + 9.26 = 96.3 GiB (before 118.0), of which its 36 layers' saved tensors are
    56 GiB. Not modelled, and what would close the gap (not verified at the benchmark's commit): TE's RMSNorm saves
    its bf16 input and rstd, not our fp32 copy and normalised output (≈ 6.3 GiB over 36 layers), and the DeepEP
    experts apply the routing weight inside the activation, so no expert output or its weight is saved beside the
    grouped GEMMs' inputs (≈ 12.7 GiB; components/moe/layers.py GroupedExpertsDeepEP at 61480cce). A regression
    bound: the row must not grow, and must stay over the GPU until those are modelled."""
    rows = {(r["model"], r["num_gpus"]): r for r in moe.automodel_cases()}
    total = {k: (r["memory_bytes"] + r["reserve_bytes"]) / GIB for k, r in rows.items()}
    assert all(r["memory_per_gpu_bytes"] / GIB == pytest.approx(79.18, abs=0.01) for r in rows.values())
    for key in (("deepseek-v3", 1024), ("deepseek-v3", 256), ("qwen3-30b-a3b", 8)):
        assert rows[key]["fits"], (key, total[key])
    assert total[("deepseek-v3", 256)] == pytest.approx(76.3, abs=0.1)
    assert total[("qwen3-30b-a3b", 8)] == pytest.approx(68.3, abs=0.1)
    gpt_oss = rows[("gpt-oss-120b", 64)]
    assert not gpt_oss["fits"] and 79.18 < total[("gpt-oss-120b", 64)] <= 96.5
