"""Published step times and MFUs, and what account.time predicts for them: the validation table of docs/time.md. Pure.

Cases (figures from ../shared/reference/facts.md, each with its citation):
- Korthikanti et al. 2022 (arXiv:2205.05198), Table 5: seconds per iteration of Megatron-LM GPT models on
  A100-80GB (Selene: 8 GPUs per node on NVSwitch, 8 × HDR 200 Gb/s InfiniBand), fp16 mixed precision, Adam,
  seq 2048, vocab 51200, TP 8; "full" = full recomputation with TP all-reduce, "seq+sel" = sequence parallelism +
  selective recomputation. Model shapes and layouts from the paper's Table 3.
- Korthikanti et al. 2022, Table 4: forward and backward milliseconds of ONE layer of the 22B model (micro-batch
  4, seq 2048, TP 8) under five settings, and the recomputation overhead of each against the baseline: a check
  of the per-layer time the steps above are built from, separate from pipeline, optimizer and edges. These
  figures are quoted from the paper itself (they are not in facts.md).
- Llama 3 (arXiv:2407.21783), Table 4: BF16 MFU of Llama 3 405B on H100 with 16M tokens per batch. Not
  published, so assumed here: micro-batch 1, the interleaved schedule with 2 virtual stages per GPU (the paper's
  Fig. 6 draws v = 2), sequence parallelism, bf16 mixed precision with the optimizer sharded over DP (Meta's FSDP
  does not reshard parameters after forward, Sec. 3.3.2: ZeRO-1/2-like), fused kernels, causal flash attention
  with cuDNN's published H100 rates (FlashAttention-3 paper, Figs. 5-6), FLOPs counted causal (MFU).
The model's inputs are the GPU's datasheet and published measurements (specs/); nothing here is fitted.
"""

from __future__ import annotations

from trainledger.account.time import step_time
from trainledger.specs.hardware import get_gpu
from trainledger.specs.model import TransformerSpec

# (name, hidden, heads, layers, pp, interleave, GPUs, micro-batch, global batch, full (s), seq+sel (s))
KORTHIKANTI_TABLE5 = [
    ("22B", 6144, 64, 48, 1, 1, 8, 4, 4, 1.42, 1.10),
    ("175B", 12288, 96, 96, 8, 3, 64, 1, 64, 18.13, 13.75),
    ("530B", 20480, 128, 105, 35, 3, 280, 1, 280, 49.05, 37.83),
    ("1T", 25600, 160, 128, 64, 1, 512, 1, 512, 94.42, 71.49),
]
# Korthikanti et al. 2022 (arXiv:2205.05198), Table 4, one 22B layer: (setting, sp, recompute, forward ms,
# backward ms, overhead vs the baseline without recomputation)
KORTHIKANTI_TABLE4 = [
    ("baseline, no recompute", False, "none", 7.7, 11.9, 0.0),
    ("sequence parallelism", True, "none", 7.2, 11.8, -0.03),
    ("baseline, full recompute", False, "full", 7.7, 19.5, 0.39),
    ("selective recompute", False, "selective", 7.7, 13.2, 0.07),
    ("selective + sequence parallelism", True, "selective", 7.2, 13.1, 0.04),
]
# (GPUs, TP, CP, PP, DP, seq, BF16 MFU)
LLAMA3_TABLE4 = [
    (8192, 8, 1, 16, 64, 8192, 0.43),
    (16384, 8, 1, 16, 128, 8192, 0.41),
    (16384, 8, 16, 16, 8, 131072, 0.38),
]
LLAMA3_INTERLEAVE = 2
LLAMA3_ATTENTION_KERNEL = "cudnn"


def megatron_gpt(name: str, hidden: int, heads: int, layers: int) -> TransformerSpec:
    """Megatron-LM's GPT of Korthikanti's Table 3: LayerNorm, GeLU MLP of 4h, biases, tied embeddings, vocab 51200."""
    return TransformerSpec(name=f"megatron-gpt-{name}", vocab_size=51200, d_model=hidden, n_layers=layers,
                           n_heads=heads, d_ff=4 * hidden, max_seq_len=2048, pretrain_seq_len=2048,
                           position="learned", norm="layernorm", norm_bias=True, mlp="gelu", qkv_bias=True,
                           attn_out_bias=True, mlp_bias=True, tied_embeddings=True,
                           source="Korthikanti et al. 2022 (arXiv:2205.05198), Table 3")


def korthikanti_cases() -> list[dict]:
    """Every cell of Korthikanti Table 5 with the predicted seconds and the relative error (predicted/published − 1)."""
    gpu = get_gpu("a100-80gb")
    rows = []
    for name, h, a, L, pp, v, n, mb, gb, full, seqsel in KORTHIKANTI_TABLE5:
        spec = megatron_gpt(name, h, a, L)
        for label, recompute, sp, published in (("full", "full", False, full), ("seq+sel", "selective", True, seqsel)):
            r = step_time(spec, gpu, batch_size=mb, seq_len=2048, global_batch_size=gb, num_gpus=n,
                          precision="mixed-fp16", optimizer="adam", tp=8, sp=sp, pp=pp, interleave=v,
                          recompute=recompute, flash=False, framework="megatron", with_memory=False)
            rows.append({"model": name, "setting": label, "published_seconds": published,
                         "predicted_seconds": r["step_seconds"], "error": r["step_seconds"] / published - 1,
                         "mfu": r["mfu"], "breakdown": r["breakdown"]})
    return rows


def korthikanti_layer_cases() -> list[dict]:
    """Every row of Korthikanti Table 4 (one 22B layer) with the predicted forward/backward ms and overhead."""
    from trainledger.account.time import layer_pass_seconds
    gpu, spec = get_gpu("a100-80gb"), megatron_gpt("22B", 6144, 64, 48)
    rows, base = [], None
    for label, sp, recompute, fwd_ms, bwd_ms, overhead in KORTHIKANTI_TABLE4:
        r = layer_pass_seconds(spec, gpu, batch_size=4, seq_len=2048, precision="mixed-fp16", tp=8, sp=sp,
                               recompute=recompute, flash=False, framework="megatron")
        total = r["forward"] + r["backward"]
        base = total if base is None else base
        rows.append({"setting": label, "published_forward_ms": fwd_ms, "published_backward_ms": bwd_ms,
                     "predicted_forward_ms": r["forward"] * 1e3, "predicted_backward_ms": r["backward"] * 1e3,
                     "error": total * 1e3 / (fwd_ms + bwd_ms) - 1, "published_overhead": overhead,
                     "predicted_overhead": total / base - 1})
    return rows


def llama3_cases(interleave: int = LLAMA3_INTERLEAVE, attention_kernel: str | None = LLAMA3_ATTENTION_KERNEL) -> list[dict]:
    """Every row of Llama 3 Table 4 with the predicted MFU and the relative error."""
    from trainledger.specs import get_model
    spec, gpu = get_model("llama-3.1-405b"), get_gpu("h100-sxm")
    rows = []
    for n, tp, cp, pp, dp, seq, published in LLAMA3_TABLE4:
        r = step_time(spec, gpu, batch_size=1, seq_len=seq, global_batch_size=2**24 // seq, num_gpus=n,
                      precision="mixed-bf16", optimizer="adamw", tp=tp, sp=True, pp=pp, interleave=interleave,
                      cp=cp, dp=dp, zero=1, recompute="none", flash=True, attention="causal", framework="megatron",
                      dropout=False, attention_kernel=attention_kernel, with_memory=False)
        rows.append({"gpus": n, "tp": tp, "cp": cp, "pp": pp, "dp": dp, "seq_len": seq, "published_mfu": published,
                     "predicted_mfu": r["mfu"], "error": r["mfu"] / published - 1, "step_seconds": r["step_seconds"],
                     "breakdown": r["breakdown"]})
    return rows
