"""Published step times and MFUs, and what account.time.step predicts for them: the validation table of docs/time.md. Pure.

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

from trainledger.account.validation.asked import step_of
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
            r = step_of(spec, gpu, n, batch_size=mb, seq_len=2048, global_batch_size=gb,
                        precision="mixed-fp16", optimizer="adam", tp=8, sp=sp, pp=pp, interleave=v,
                        recompute=recompute, flash=False, framework="megatron", with_memory=False,
                        pp_overlap=False)    # the 2022 code's interleaved schedule waited for each send
            rows.append({"model": name, "setting": label, "published_seconds": published,
                         "predicted_seconds": r["step_seconds"], "error": r["step_seconds"] / published - 1,
                         "mfu": r["mfu"], "breakdown": r["breakdown"]})
    return rows


def korthikanti_layer_cases() -> list[dict]:
    """Every row of Korthikanti Table 4 (one 22B layer) with the predicted forward/backward ms and overhead."""
    from trainledger.account.time.step import layer_pass_seconds
    from trainledger.specs.run import Run
    gpu, spec = get_gpu("a100-80gb"), megatron_gpt("22B", 6144, 64, 48)
    rows, base = [], None
    for label, sp, recompute, fwd_ms, bwd_ms, overhead in KORTHIKANTI_TABLE4:
        r = layer_pass_seconds(spec, gpu, Run().with_(batch_size=4, seq_len=2048, precision="mixed-fp16", tp=8, sp=sp,
                                                      recompute=recompute, flash=False, framework="megatron"))
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
        r = step_of(spec, gpu, n, batch_size=1, seq_len=seq, global_batch_size=2**24 // seq,
                    precision="mixed-bf16", optimizer="adamw", tp=tp, sp=True, pp=pp, interleave=interleave,
                    cp=cp, dp=dp, zero=1, recompute="none", flash=True, attention="causal", framework="megatron",
                    dropout=False, attention_kernel=attention_kernel, with_memory=False,
                    pp_overlap=True)   # "we adopt asynchronous point-to-point communication in PP" (Sec. 3.3.2)
        rows.append({"gpus": n, "tp": tp, "cp": cp, "pp": pp, "dp": dp, "seq_len": seq, "published_mfu": published,
                     "predicted_mfu": r["mfu"], "error": r["mfu"] / published - 1, "step_seconds": r["step_seconds"],
                     "breakdown": r["breakdown"]})
    return rows


# --- PyTorch-native runs: torchtitan (FSDP2, + TP), tokens/s per GPU as published --------------------------------
# pytorch/torchtitan docs/performance.md, A100 version (its last, 2024-08; the Llama 2 rows unchanged since 2024-04):
# "Llama 3 (8B and 70B) ... Llama 2 (13B and 70B) ... with FSDP2 on 64 A100 (80GB) GPUs", bf16 mixed precision,
# no torch.compile, local batch × 64 ranks = global batch, seq 8192 (Llama 3) and 4096 (Llama 2); "selective layer"
# = torchtitan's selective_ac_option "2" (every second block), "selective op" = its per-op policy. WPS per GPU.
_A100_DOC = "pytorch/torchtitan docs/performance.md (A100 version, 2024-08): FSDP2 on 64 A100 (80GB)"
_H100_DOC = ("pytorch/torchtitan docs/performance.md (2024-12; TorchTitan, arXiv:2410.06511, Tables 1 and 3): "
             "Grand Teton H100 96GB HBM2e, 500 W, 400 Gb/s RDMA per GPU")
_H100_405B = ("pytorch/torchtitan docs/performance.md (2024-08): Llama 3.1 405B on 128 H100 (HBM2e, lower TDP), "
              "2D FSDP2 + TP, optimizations 'None' (train_configs/llama3_405b.toml: compile = false)")
# (label, preset, gpu, GPUs, tp, local batch, seq, recompute, torch.compile, published tokens/s per GPU, source)
TORCHTITAN = [
    ("Llama 3 8B, selective layer", "llama-3-8b", "a100-80gb", 64, 1, 1, 8192, "selective-layer", False, 2904, _A100_DOC),
    ("Llama 3 8B, selective op", "llama-3-8b", "a100-80gb", 64, 1, 1, 8192, "selective-op", False, 2973, _A100_DOC),
    ("Llama 3 70B, full AC", "llama-3-70b", "a100-80gb", 64, 1, 1, 8192, "full", False, 331, _A100_DOC),
    ("Llama 2 13B, no AC", "llama-2-13b", "a100-80gb", 64, 1, 2, 4096, "none", False, 2162, _A100_DOC),
    ("Llama 2 13B, selective layer", "llama-2-13b", "a100-80gb", 64, 1, 2, 4096, "selective-layer", False, 1914, _A100_DOC),
    ("Llama 2 13B, selective op", "llama-2-13b", "a100-80gb", 64, 1, 2, 4096, "selective-op", False, 1904, _A100_DOC),
    ("Llama 2 70B, selective op, batch 1", "llama-2-70b", "a100-80gb", 64, 1, 1, 4096, "selective-op", False, 355, _A100_DOC),
    ("Llama 2 70B, full AC", "llama-2-70b", "a100-80gb", 64, 1, 2, 4096, "full", False, 353, _A100_DOC),
    ("Llama 3.1 8B, FSDP, 8 GPUs", "llama-3-8b", "h100-hbm2e", 8, 1, 2, 8192, "selective-op", False, 5762, _H100_DOC),
    ("Llama 3.1 8B, FSDP + compile, 8 GPUs", "llama-3-8b", "h100-hbm2e", 8, 1, 2, 8192, "selective-op", True, 6667, _H100_DOC),
    ("Llama 3.1 8B, FSDP, 128 GPUs", "llama-3-8b", "h100-hbm2e", 128, 1, 2, 8192, "selective-op", False, 5605, _H100_DOC),
    ("Llama 3.1 8B, FSDP + compile, 128 GPUs", "llama-3-8b", "h100-hbm2e", 128, 1, 2, 8192, "selective-op", True, 6514,
     _H100_DOC),
    ("Llama 3.1 405B, FSDP 16 + TP 8", "llama-3.1-405b", "h100-hbm2e", 128, 8, 2, 8192, "full", False, 109, _H100_405B),
]


def torchtitan_cli(row) -> str:
    """The `trainledger step` command a user would type for a TORCHTITAN row (defaults: amp-bf16, ZeRO 3 = FSDP2
    with a bf16 mixed-precision policy, fp32 reduce-scatters; `--framework torchtitan`: its Llama's kernels)."""
    label, model, gpu, n, tp, b, seq, recompute, compiled, _, _ = row
    dp = n // tp
    return (f"trainledger step --model {model} --gpu {gpu} --num-gpus {n} --framework torchtitan"
            + (f" --tp {tp} --sp" if tp > 1 else "")
            + f" --batch-size {b} --global-batch-size {b * dp} --seq-len {seq} --recompute {recompute}"
            + (" --compile" if compiled else ""))


def torchtitan_cases() -> list[dict]:
    """Every TORCHTITAN row predicted as `torchtitan_cli` asks it: tokens/s per GPU, error (predicted/published − 1),
    memory per GPU and whether it fits. Rows with torch.compile are predicted only when step_time models it
    (`modelled` False otherwise)."""
    from trainledger.account.memory.per_gpu import cuda_reserve_bytes
    from trainledger.account.planning.zero_choice import default_zero
    from trainledger.specs import get_model
    rows = []
    for row in TORCHTITAN:
        label, model, gpu_name, n, tp, b, seq, recompute, compiled, published, source = row
        spec, gpu, dp = get_model(model), get_gpu(gpu_name), n // tp
        zero, _ = default_zero(dp=dp, pp=1, framework="torchtitan")
        out = {"label": label, "model": model, "gpu": gpu_name, "num_gpus": n, "tp": tp, "dp": dp, "batch_size": b,
               "seq_len": seq, "recompute": recompute, "compile": compiled, "published_tokens_per_s_per_gpu": published,
               "source": source, "cli": torchtitan_cli(row), "modelled": True}
        if out["modelled"]:
            # torchtitan's run_train.sh sets expandable_segments:True: no caching-allocator cache in the reserve
            reserve = cuda_reserve_bytes(0.0, expandable_segments=True)["total"]
            r = step_of(spec, gpu, n, batch_size=b, seq_len=seq, global_batch_size=b * dp, tp=tp, sp=tp > 1,
                        precision="amp-bf16", optimizer="adamw", zero=zero, recompute=recompute, param_dtype="auto",
                        framework="torchtitan", reserve=reserve, compile=compiled)
            predicted = r["tokens_per_s"] / n
            out.update(predicted_tokens_per_s_per_gpu=predicted, error=predicted / published - 1, mfu=r["mfu"],
                       step_seconds=r["step_seconds"], memory_bytes=r["memory_bytes"], fits=r["fits"],
                       memory_per_gpu_bytes=r["memory_per_gpu_bytes"], breakdown=r["breakdown"])
        rows.append(out)
    return rows


def summary(rows: list[dict], within: float = 0.15) -> dict:
    """{"n", "mean_abs_error", "worst_abs_error", "share_within"} over the modelled rows (share within ±`within`)."""
    errors = [abs(r["error"]) for r in rows if r.get("modelled", True) and "error" in r]
    if not errors:
        return {"n": 0, "mean_abs_error": None, "worst_abs_error": None, "share_within": None}
    return {"n": len(errors), "mean_abs_error": sum(errors) / len(errors), "worst_abs_error": max(errors),
            "share_within": sum(e <= within for e in errors) / len(errors)}
