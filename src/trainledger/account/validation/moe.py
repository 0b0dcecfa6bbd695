"""Published mixture-of-experts training throughput, and what account.time.step predicts with expert parallelism. Pure.

Source: NVIDIA-NeMo/Megatron-Bridge `docs/performance-summary.md` (read at commit df0289c1; its 25.11 and 26.02 NeMo
container tables). "In MoE training benchmarks, we force-balance the token distribution among experts and all
benchmarks are token-dropless": so the rows are modelled balanced (--expert-imbalance 1) and dropless. Every BF16
MoE row of a GPU that specs/hardware.py knows (DGX-H100, DGX-B200) is used; the MoE rows of DGX-GB200 / GB300
(DeepSeek-V3, Qwen3-235B-A22B, GPT-OSS 120B) and DGX-B300 need hardware entries we do not have, and the FP8 rows
(FP8-CS, FP8-MX) need the FP8 recipes: both are listed in docs/time.md, not modelled.
- TAKEN: the rows we looked at while building the model (25.11 container).
- ASIDE: further rows we keep for a check on our side only (26.02 container).
Modelled as the recipes run them (scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py): Megatron
kernels, bf16 mixed precision with the distributed optimizer (ZeRO-1), TP 1, the layout of the row, FLOPs counted
causal. The H100 and B200 recipes recompute only the norms and the MoE activation (recompute_modules
["layernorm", "moe_act"]): elementwise work, modelled as no recomputation. The 25.11 H100 row prints GA 2 where its
GBS / (MBS · DP) is 8; we take GBS and MBS as printed.

DeepSeek-V3 pre-training (arXiv:2412.19437, Sec. 3.1 and 4.2; facts.md): 2.664M H800 GPU-hours for 14.8T tokens on
2,048 H800 (PP16, EP64 over 8 nodes, ZeRO-1), FP8, sequences of 4K, batch 15360 sequences after the ramp, DualPipe
hiding the all-to-alls. It needs an H800 entry and an FP8 recipe: `deepseek_v3_gpu_hours` says which is missing.
Nothing here is fitted.
"""

from __future__ import annotations

from trainledger.account.time.step import step_time
from trainledger.errors import TrainledgerError
from trainledger.specs.hardware import get_gpu

SOURCE = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"
# (container, model preset, gpu, GPUs, global batch, micro-batch, seq, tp, pp, ep, published tokens/s per GPU)
TAKEN = [
    ("25.11", "gpt-oss-120b", "h100-sxm", 64, 512, 4, 4096, 1, 4, 8, 5630),
    ("25.11", "gpt-oss-120b", "b200", 64, 512, 4, 4096, 1, 1, 8, 8213),
]
ASIDE = [
    ("26.02", "gpt-oss-120b", "h100-sxm", 64, 1280, 1, 4096, 1, 4, 8, 5993),
    ("26.02", "gpt-oss-120b", "b200", 64, 1280, 4, 4096, 1, 1, 64, 8047),
]
DEEPSEEK_V3_GPU_HOURS = 2.664e6
DEEPSEEK_V3_TOKENS = 14.8e12


def predict(row) -> dict:
    """The prediction for one row: tokens/s per GPU, the relative error, the step's breakdown and whether it fits."""
    from trainledger.specs import get_model
    container, model, gpu_name, n, gbs, mbs, seq, tp, pp, ep, published = row
    r = step_time(get_model(model), get_gpu(gpu_name), batch_size=mbs, seq_len=seq, global_batch_size=gbs,
                  num_gpus=n, precision="mixed-bf16", optimizer="adamw", tp=tp, sp=tp > 1, pp=pp, zero=1, ep=ep,
                  recompute="none", flash=True, attention="causal", framework="megatron")
    per_gpu = r["tokens_per_s"] / n
    return {"container": container, "model": model, "gpu": gpu_name, "num_gpus": n, "global_batch_size": gbs,
            "batch_size": mbs, "seq_len": seq, "tp": tp, "pp": pp, "ep": ep, "published_tokens_per_s_per_gpu": published,
            "predicted_tokens_per_s_per_gpu": per_gpu, "error": per_gpu / published - 1, "mfu": r["mfu"],
            "fits": r["fits"], "memory_bytes": r["memory_bytes"], "breakdown": r["breakdown"], "source": SOURCE}


def cases(rows=TAKEN) -> list[dict]:
    """Predictions for `rows` (TAKEN by default; ASIDE for the check kept on our side)."""
    return [predict(row) for row in rows]


def report(rows: list[dict], within: float = 0.20) -> dict:
    """{"n", "share_within", "mean_abs_error", "worst_abs_error"} of the rows' tokens/s per GPU (±`within`)."""
    errors = [abs(r["error"]) for r in rows]
    return {"n": len(errors), "share_within": sum(e <= within for e in errors) / len(errors),
            "mean_abs_error": sum(errors) / len(errors), "worst_abs_error": max(errors)}


def deepseek_v3_gpu_hours(precision: str = "fp8-cs", gpu: str = "h800", global_batch_size: int = 15360,
                          batch_size: int = 1) -> dict:
    """DeepSeek-V3's pre-training GPU-hours as predicted: 14.8T tokens / (tokens/s per GPU) / 3600, on 2,048 `gpu`
    with PP16 · EP64 · DP128, ZeRO-1, seq 4096, all-to-alls hidden (DualPipe). A TrainledgerError names what is
    missing (the H800 entry, the FP8 recipe) until both exist."""
    from trainledger.specs import get_model
    from trainledger.specs.recipes import get_recipe
    get_gpu(gpu)                       # an unknown GPU is an error naming what is known
    get_recipe(precision)
    spec = get_model("deepseek-v3")
    r = step_time(spec, get_gpu(gpu), batch_size=batch_size, seq_len=4096, global_batch_size=global_batch_size,
                  num_gpus=2048, precision=precision, pp=16, ep=64, zero=1, framework="megatron", attention="causal",
                  ep_overlap=1.0, with_memory=False)
    hours = DEEPSEEK_V3_TOKENS / r["tokens_per_s"] * 2048 / 3600
    if not hours > 0:
        raise TrainledgerError("no prediction")
    return {"gpu_hours": hours, "published_gpu_hours": DEEPSEEK_V3_GPU_HOURS, "error": hours / DEEPSEEK_V3_GPU_HOURS - 1,
            "tokens_per_s_per_gpu": r["tokens_per_s"] / 2048, "mfu": r["mfu"], "breakdown": r["breakdown"]}
