"""Published FP8 training throughput and what account.time.step predicts for it: docs/time.md's FP8 table. Pure.

Sources, taken as given (every column as published):
- NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, "25.11 NeMo Container", pre-training: the dense Llama 3
  FP8-CS rows on DGX-H100, DGX-B200 and DGX-GB200 (GBS, MBS, sequence length, FSDP, TP, PP, CP, VP, GA, Tokens /
  sec / GPU). The FP8-MX figures printed in parentheses on B200/GB200 are kept aside (ASIDE), as are torchtitan's
  Float8 rows beyond its 8B tables.
- pytorch/torchtitan docs/performance.md (2024-12, Grand Teton H100 96 GB HBM2e at 500 W): "FSDP + torch.compile +
  Float8" for Llama 3.1 8B on 8 and on 128 GPUs (Tables 1 and 3); Tables 2, 4, 5 kept aside.

How each row is asked (assumptions where the source is silent, the same for every row, never fitted):
- Megatron Bridge: framework megatron (fused kernels), no dropout, causal flash attention (cuDNN's measured rates
  where the GPU has them), FLOPs counted causal; FSDP = 1 -> ZeRO 3, FSDP = 0 -> the distributed optimizer (ZeRO 1);
  sequence parallelism with TP > 1; VP = the interleave ("n/a" = 1); no activation recomputation.
- torchtitan: framework torchtitan with torch.compile, FSDP2 (ZeRO 3, bf16 parameters gathered), selective-op
  recomputation (Tables 1, 3), its torchao kernels modelled by fp8-rowwise (casts on every pass); the runs of
  2024-12 used torchao's tensorwise scaling, whose GEMMs run at the same FP8 rate here.
Blackwell (B200, GB200): FP8 GEMMs at the sustained cuBLASLt rates measured on GB200, NVLink 5 at its measured bus
bandwidth, cuDNN attention at FlashAttention-4's bound (specs/performance.py); their HBM streams at the datasheet
rate and their kernels without overhead (nothing published found): optimistic there.
"""

from __future__ import annotations

from trainledger.account.validation.published_run import PublishedRun, evaluate, run_of
from trainledger.specs.hardware import get_gpu

_MB = ("NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, 25.11 NeMo Container, pre-training, "
       "System: {system}")
_TT = "pytorch/torchtitan docs/performance.md (2024-12), Table {table}: FSDP + torch.compile + Float8, Grand Teton H100"

# (label, preset, gpu, system, precision, GPUs, GBS, MBS, seq, FSDP, TP, PP, CP, VP, GA, tokens/s/GPU)
MEGATRON_BRIDGE = [
    ("Llama 3 8B, DGX-H100", "llama-3-8b", "h100-sxm", "DGX-H100", "fp8-cs", 8, 128, 1, 8192, 1, 1, 1, 1, 1, 16, 14451),
    ("Llama 3 70B, DGX-H100", "llama-3-70b", "h100-sxm", "DGX-H100", "fp8-cs", 64, 128, 1, 8192, 0, 4, 8, 1, 5, 64, 1602),
    ("Llama 3.1 405B, DGX-H100", "llama-3.1-405b", "h100-sxm", "DGX-H100", "fp8-cs", 1024, 512, 1, 8192, 0, 8, 8, 2, 8,
     64, 292),
    ("Llama 3 8B, DGX-B200", "llama-3-8b", "b200", "DGX-B200", "fp8-cs", 8, 128, 2, 8192, 0, 1, 1, 1, 1, 8, 30624),
    ("Llama 3.1 405B, DGX-B200", "llama-3.1-405b", "b200", "DGX-B200", "fp8-cs", 128, 64, 1, 8192, 0, 4, 8, 2, 8, 32, 661),
    ("Llama 3 8B, DGX-GB200", "llama-3-8b", "gb200", "DGX-GB200", "fp8-cs", 8, 128, 2, 8192, 0, 1, 1, 1, 1, 8, 31508),
    ("Llama 3 70B, DGX-GB200", "llama-3-70b", "gb200", "DGX-GB200", "fp8-cs", 64, 256, 2, 8192, 1, 1, 1, 1, 1, 2, 4312),
    ("Llama 3.1 405B, DGX-GB200", "llama-3.1-405b", "gb200", "DGX-GB200", "fp8-cs", 256, 1536, 1, 8192, 0, 4, 16, 1, 4,
     384, 813),
]
# the FP8-MX figures in parentheses of the same rows (same layouts)
MEGATRON_BRIDGE_MX = [
    ("Llama 3 8B, DGX-B200, MXFP8", "llama-3-8b", "b200", "DGX-B200", "mxfp8", 8, 128, 2, 8192, 0, 1, 1, 1, 1, 8, 29521),
    ("Llama 3.1 405B, DGX-B200, MXFP8", "llama-3.1-405b", "b200", "DGX-B200", "mxfp8", 128, 64, 1, 8192, 0, 4, 8, 2, 8, 32,
     624),
    ("Llama 3 8B, DGX-GB200, MXFP8", "llama-3-8b", "gb200", "DGX-GB200", "mxfp8", 8, 128, 2, 8192, 0, 1, 1, 1, 1, 8, 29789),
]
# DGX-GB300 (Blackwell Ultra, GB300 NVL72) rows of the same summary at commit df0289c, its 25.11 and 26.02
# containers, as (container, row): predicted and kept aside (`blackwell_ultra_cases`), never in main_cases' thresholds.
# The summary has no DGX-GB300/B300 dense BF16 row and no DGX-B300 dense row; NVFP4 rows have no recipe here
# (BLACKWELL_ULTRA_NOT_MODELLED).
BLACKWELL_ULTRA = [
    ("25.11", ("Llama 3 8B, DGX-GB300", "llama-3-8b", "gb300", "DGX-GB300", "fp8-cs", 8, 128, 2, 8192, 0, 1, 1, 1, 1, 8,
               37556)),
    ("25.11", ("Llama 3 8B, DGX-GB300, MXFP8", "llama-3-8b", "gb300", "DGX-GB300", "mxfp8", 8, 128, 2, 8192, 0, 1, 1, 1,
               1, 8, 36108)),
    ("25.11", ("Llama 3 70B, DGX-GB300", "llama-3-70b", "gb300", "DGX-GB300", "fp8-cs", 64, 256, 2, 8192, 1, 1, 1, 1, 1,
               2, 4520)),
    ("25.11", ("Llama 3.1 405B, DGX-GB300", "llama-3.1-405b", "gb300", "DGX-GB300", "fp8-cs", 256, 1536, 1, 8192, 0, 2,
               8, 2, 4, 192, 999)),
    ("26.02", ("Llama 3 70B, DGX-GB300", "llama-3-70b", "gb300", "DGX-GB300", "fp8-cs", 64, 256, 2, 8192, 1, 1, 1, 1, 1,
               2, 5003)),
    ("26.02", ("Llama 3 70B, DGX-GB300, MXFP8", "llama-3-70b", "gb300", "DGX-GB300", "mxfp8", 64, 256, 1, 8192, 0, 1, 4,
               1, 5, 16, 4596)),
    ("26.02", ("Llama 3.1 405B, DGX-GB300", "llama-3.1-405b", "gb300", "DGX-GB300", "fp8-cs", 256, 1536, 1, 8192, 0, 4,
               8, 1, 4, 192, 988)),
    ("26.02", ("Llama 3.1 405B, DGX-GB300, MXFP8", "llama-3.1-405b", "gb300", "DGX-GB300", "mxfp8", 256, 1536, 1, 8192,
               0, 2, 8, 2, 4, 192, 931)),
]
BLACKWELL_ULTRA_NOT_MODELLED = [   # NVFP4: no recipe (specs/recipes.py)
    ("26.02", ("Llama 3 70B, DGX-GB300, NVFP4", "llama-3-70b", "gb300", "DGX-GB300", "nvfp4", 64, 256, 1, 8192, 0, 1, 4,
               1, 5, 16, 6798)),
    ("26.02", ("Llama 3.1 405B, DGX-GB300, NVFP4", "llama-3.1-405b", "gb300", "DGX-GB300", "nvfp4", 256, 1536, 1, 8192,
               0, 4, 8, 1, 4, 192, 1347)),
]
# (label, preset, GPUs, TP, PP, CP, local batch, global batch, seq, recompute, table, tokens/s/GPU)
TORCHTITAN_FLOAT8 = [
    ("Llama 3.1 8B, FSDP 8 + compile + Float8", "llama-3-8b", 8, 1, 1, 1, 2, 16, 8192, "selective-op", 1, 8532),
    ("Llama 3.1 8B, FSDP 128 + compile + Float8", "llama-3-8b", 128, 1, 1, 1, 2, 256, 8192, "selective-op", 3, 8380),
]
TORCHTITAN_FLOAT8_ASIDE = [
    ("Llama 3.1 8B, FSDP 8, CP 1, seq 32768, full AC", "llama-3-8b", 8, 1, 1, 1, 1, 8, 32768, "full", 2, 3890),
    ("Llama 3.1 70B, FSDP 32 + TP 8, full AC", "llama-3-70b", 256, 8, 1, 1, 16, 512, 8192, "full", 4, 829),
    ("Llama 3.1 405B, FSDP 8 + TP 8 + PP 8, 1F1B, full AC", "llama-3.1-405b", 512, 8, 8, 1, 1, 256, 8192, "full", 5, 100),
]


MEGATRON_BRIDGE_ASSUMED = ("Megatron-LM's fused kernels without dropout", "causal flash attention (cuDNN's rates "
                           "where the GPU has them)", "FLOPs counted causal", "FSDP 1 -> ZeRO 3, FSDP 0 -> the "
                           "distributed optimizer (ZeRO 1)", "sequence parallelism with TP > 1", "VP as the interleave",
                           "no activation recomputation")
TORCHTITAN_ASSUMED = ("torchtitan's Llama under torch.compile", "FSDP2 (ZeRO 3) gathering bf16 parameters",
                      "torchao's Float8 as fp8-rowwise (casts on every pass)", "FLOPs counted causal")


def megatron_bridge_run(row) -> PublishedRun:
    """A MEGATRON_BRIDGE(_MX) or BLACKWELL_ULTRA row as a published run (MEGATRON_BRIDGE_ASSUMED); its GA column
    is a printed figure, which the layout must reproduce (`megatron_bridge_case` checks it)."""
    label, model, gpu_name, system, precision, n, gbs, mbs, seq, fsdp, tp, pp, cp, vp, ga, published = row
    kernel = "cudnn" if "cudnn" in get_gpu(gpu_name).attention_efficiency else None
    run = run_of(batch_size=mbs, seq_len=seq, global_batch_size=gbs, precision=precision, optimizer="adamw", tp=tp,
                 sp=tp > 1, pp=pp, interleave=vp, cp=cp, zero=3 if fsdp else 1, recompute="none", flash=True,
                 attention="causal", framework="megatron", dropout=False, attention_kernel=kernel)
    return PublishedRun(label, _MB.format(system=system), model, gpu_name, n, run, "tokens_per_s_per_gpu", published,
                        figures=(("ga", ga),), assumptions=MEGATRON_BRIDGE_ASSUMED)


def torchtitan_run(row) -> PublishedRun:
    """A TORCHTITAN_FLOAT8(_ASIDE) row as a published run on the Grand Teton H100 (specs/hardware.py h100-hbm2e)."""
    label, model, n, tp, pp, cp, b, gbs, seq, recompute, table, published = row
    run = run_of(batch_size=b, seq_len=seq, global_batch_size=gbs, tp=tp, sp=tp > 1, pp=pp, cp=cp,
                 precision="fp8-rowwise", optimizer="adamw", zero=3, recompute=recompute, param_dtype="auto",
                 framework="torchtitan", compile=True, attention="causal")
    return PublishedRun(label, _TT.format(table=table), model, "h100-hbm2e", n, run, "tokens_per_s_per_gpu",
                        published, assumptions=TORCHTITAN_ASSUMED)


def _case(case: PublishedRun) -> tuple[dict, dict]:
    """(the table's row of `case` predicted, step_time's answer)."""
    e = evaluate(case, with_memory=False)
    r = e["step"]
    return {"label": case.label, "source": case.source, "precision": case.run.numerics.precision, "gpu": case.gpu,
            "published_tokens_per_s_per_gpu": case.published,
            "predicted_tokens_per_s_per_gpu": e["predicted_tokens_per_s_per_gpu"], "error": e["error"],
            "mfu": r["mfu"], "model_flops_per_s_per_gpu": r["model_flops_per_s_per_gpu"],
            "breakdown": r["breakdown"]}, r


def megatron_bridge_case(row) -> dict:
    """One Megatron Bridge row predicted: tokens/s per GPU, the error (predicted / published − 1), MFU, breakdown."""
    case = megatron_bridge_run(row)
    out, r = _case(case)
    ga = case.figure("ga")
    assert r["micro_batches"] == ga, (case.label, r["micro_batches"], ga)     # the published GA column, reproduced
    return out


def torchtitan_case(row) -> dict:
    """One torchtitan Float8 row predicted on the Grand Teton H100 (specs/hardware.py h100-hbm2e)."""
    return _case(torchtitan_run(row))[0]


def main_cases() -> list[dict]:
    """The rows the issue's thresholds apply to: Megatron Bridge FP8-CS and torchtitan's 8B Float8 tables."""
    return [megatron_bridge_case(r) for r in MEGATRON_BRIDGE] + [torchtitan_case(r) for r in TORCHTITAN_FLOAT8]


def aside_cases() -> list[dict]:
    """Further published FP8 rows, checked on our side: Megatron Bridge's FP8-MX figures, torchtitan Tables 2, 4, 5."""
    return [megatron_bridge_case(r) for r in MEGATRON_BRIDGE_MX] + [torchtitan_case(r) for r in TORCHTITAN_FLOAT8_ASIDE]


def blackwell_ultra_run(container: str, row) -> PublishedRun:
    """A BLACKWELL_ULTRA row as a published run, sourced to its container."""
    from dataclasses import replace
    case = megatron_bridge_run(row)
    return replace(case, label=f"{case.label} ({container})", source=case.source.replace("25.11", container))


def blackwell_ultra_cases() -> list[dict]:
    """The DGX-GB300 FP8 rows (BLACKWELL_ULTRA) predicted, each sourced to its container: kept aside."""
    cases = []
    for container, row in BLACKWELL_ULTRA:
        case = megatron_bridge_case(row)
        cases.append(case | {"container": container, "source": blackwell_ultra_run(container, row).source})
    return cases


def report(rows: list[dict], within: float = 0.15) -> dict:
    """{"n", "share_within", "mean_signed_error", "mean_abs_error", "worst_abs_error", "by_source"} of `rows`."""
    def stats(rs):
        errors = [r["error"] for r in rs]
        return {"n": len(errors), "share_within": sum(abs(e) <= within for e in errors) / len(errors),
                "mean_signed_error": sum(errors) / len(errors),
                "mean_abs_error": sum(abs(e) for e in errors) / len(errors),
                "worst_abs_error": max(abs(e) for e in errors)}
    sources = {}
    for r in rows:
        sources.setdefault(r["source"].split(",")[0], []).append(r)
    return dict(stats(rows), by_source={name: stats(rs) for name, rs in sources.items()})
