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

from trainledger.account.validation.published_run import PublishedRun, command, evaluate, run_of
from trainledger.specs.hardware import get_gpu
from trainledger.specs.model import TransformerSpec

KORTHIKANTI = "Korthikanti et al. 2022 (arXiv:2205.05198), Table 5 (shapes and layouts: Table 3)"
KORTHIKANTI_ASSUMED = ("no distributed optimizer (ZeRO 0): the paper names none",
                       "no flash attention (the 2022 code's fused softmax)",
                       "the interleaved schedule waits for each point-to-point send (the 2022 code)")
LLAMA3 = "Llama 3 (arXiv:2407.21783), Table 4: BF16 MFU, 16M tokens per batch"
LLAMA3_ASSUMED = ("micro-batch 1", "the interleaved schedule with 2 virtual stages (Fig. 6 draws v = 2)",
                  "sequence parallelism", "mixed-bf16 with the optimizer sharded over DP (ZeRO-1-like, Sec. 3.3.2)",
                  "fused kernels without dropout (--framework megatron)", "causal flash attention at cuDNN's rates",
                  "asynchronous pipeline sends (Sec. 3.3.2)", "FLOPs counted causal (MFU)")

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
                           attn_out_bias=True, mlp_bias=True, tied_embeddings=True, family="gpt2",
                           source="Korthikanti et al. 2022 (arXiv:2205.05198), Table 3")


def korthikanti_run(row, setting: str) -> PublishedRun:
    """One cell of KORTHIKANTI_TABLE5 as a published run: `setting` "full" (full recomputation) or "seq+sel"
    (sequence parallelism + selective recomputation), fp16 mixed precision, Adam, seq 2048, TP 8, Megatron-LM's
    kernels without flash attention (KORTHIKANTI_ASSUMED)."""
    name, h, a, L, pp, v, n, mb, gb, full, seqsel = row
    recompute, sp, published = {"full": ("full", False, full), "seq+sel": ("selective", True, seqsel)}[setting]
    run = run_of(batch_size=mb, seq_len=2048, global_batch_size=gb, precision="mixed-fp16", optimizer="adam", tp=8,
                 sp=sp, pp=pp, interleave=v, zero=0, recompute=recompute, flash=False, framework="megatron",
                 pp_overlap=False)    # the 2022 code's interleaved schedule waited for each send
    return PublishedRun(f"{name} {setting}", KORTHIKANTI, megatron_gpt(name, h, a, L), "a100-80gb", n, run,
                        "seconds", published, assumptions=KORTHIKANTI_ASSUMED)


def korthikanti_runs() -> list[PublishedRun]:
    """Every cell of Korthikanti Table 5, full and seq+sel, as published runs."""
    return [korthikanti_run(row, setting) for row in KORTHIKANTI_TABLE5 for setting in ("full", "seq+sel")]


def korthikanti_cases() -> list[dict]:
    """Every cell of Korthikanti Table 5 with the predicted seconds and the relative error (predicted/published − 1)."""
    rows = []
    for row in KORTHIKANTI_TABLE5:
        for setting in ("full", "seq+sel"):
            case = korthikanti_run(row, setting)
            e = evaluate(case, with_memory=False)
            r = e["step"]
            rows.append({"model": row[0], "setting": setting, "published_seconds": e["published_seconds"],
                         "predicted_seconds": e["predicted_seconds"], "error": e["error"], "mfu": r["mfu"],
                         "breakdown": r["breakdown"], "num_gpus": case.num_gpus, "cli": command(case)})
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


def llama3_run(row, interleave: int = LLAMA3_INTERLEAVE,
               attention_kernel: str | None = LLAMA3_ATTENTION_KERNEL) -> PublishedRun:
    """One row of LLAMA3_TABLE4 as a published run of Llama 3.1 405B on H100 (LLAMA3_ASSUMED)."""
    n, tp, cp, pp, dp, seq, published = row
    run = run_of(batch_size=1, seq_len=seq, global_batch_size=2**24 // seq, precision="mixed-bf16", optimizer="adamw",
                 tp=tp, sp=True, pp=pp, interleave=interleave, cp=cp, dp=dp, zero=1, recompute="none", flash=True,
                 attention="causal", framework="megatron", dropout=False, attention_kernel=attention_kernel,
                 pp_overlap=True)   # "we adopt asynchronous point-to-point communication in PP" (Sec. 3.3.2)
    return PublishedRun(f"{n} GPUs, seq {seq}, cp {cp}", LLAMA3, "llama-3.1-405b", "h100-sxm", n, run, "mfu",
                        published, figures=(("tp", tp), ("cp", cp), ("pp", pp), ("dp", dp), ("seq_len", seq)),
                        assumptions=LLAMA3_ASSUMED)


def llama3_runs(interleave: int = LLAMA3_INTERLEAVE,
                attention_kernel: str | None = LLAMA3_ATTENTION_KERNEL) -> list[PublishedRun]:
    """Every row of Llama 3 Table 4 as a published run."""
    return [llama3_run(row, interleave, attention_kernel) for row in LLAMA3_TABLE4]


def llama3_cases(interleave: int = LLAMA3_INTERLEAVE, attention_kernel: str | None = LLAMA3_ATTENTION_KERNEL) -> list[dict]:
    """Every row of Llama 3 Table 4 with the predicted MFU and the relative error."""
    rows = []
    for row, case in zip(LLAMA3_TABLE4, llama3_runs(interleave, attention_kernel)):
        n, tp, cp, pp, dp, seq, _ = row
        e = evaluate(case, with_memory=False)
        r = e["step"]
        rows.append({"gpus": n, "tp": tp, "cp": cp, "pp": pp, "dp": dp, "seq_len": seq,
                     "published_mfu": e["published_mfu"], "predicted_mfu": e["predicted_mfu"], "error": e["error"],
                     "step_seconds": r["step_seconds"], "breakdown": r["breakdown"], "cli": command(case)})
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


TORCHTITAN_ASSUMED = ("amp-bf16 (bf16 mixed precision)", "FSDP2 (ZeRO 3: the default for data parallelism alone) with "
                      "a bf16 policy and fp32 reduce-scatters", "global batch = local batch × data-parallel ranks",
                      "expandable segments (torchtitan's run_train.sh): no caching-allocator cache in the reserve")


def torchtitan_run(row) -> PublishedRun:
    """A TORCHTITAN row as a published run, as a user asks it: `--framework torchtitan` (its Llama's kernels), the
    defaults for the rest (amp-bf16, ZeRO 3 = FSDP2 with a bf16 mixed-precision policy, fp32 reduce-scatters, and
    the reserve of torchtitan's launcher: expandable segments), sequence parallelism with TP."""
    label, model, gpu, n, tp, b, seq, recompute, compiled, published, source = row
    run = run_of(batch_size=b, seq_len=seq, global_batch_size=b * (n // tp), tp=tp, sp=tp > 1, recompute=recompute,
                 framework="torchtitan", compile=compiled)
    return PublishedRun(label, source, model, gpu, n, run, "tokens_per_s_per_gpu", published,
                        assumptions=TORCHTITAN_ASSUMED)


def torchtitan_runs() -> list[PublishedRun]:
    """Every TORCHTITAN row as a published run."""
    return [torchtitan_run(row) for row in TORCHTITAN]


def torchtitan_cli(row) -> str:
    """The `trainledger step` command a user would type for a TORCHTITAN row (published_run.command of its run)."""
    return command(torchtitan_run(row))


def torchtitan_cases() -> list[dict]:
    """Every TORCHTITAN row predicted as `torchtitan_cli` asks it: tokens/s per GPU, error (predicted/published − 1),
    memory per GPU and whether it fits. Rows with torch.compile are predicted only when step_time models it
    (`modelled` False otherwise)."""
    rows = []
    for row in TORCHTITAN:
        label, model, gpu_name, n, tp, b, seq, recompute, compiled, published, source = row
        case = torchtitan_run(row)
        out = {"label": label, "model": model, "gpu": gpu_name, "num_gpus": n, "tp": tp, "dp": n // tp,
               "batch_size": b, "seq_len": seq, "recompute": recompute, "compile": compiled,
               "published_tokens_per_s_per_gpu": published, "source": source, "cli": command(case), "modelled": True}
        if out["modelled"]:
            e = evaluate(case)
            r = e["step"]
            out.update(predicted_tokens_per_s_per_gpu=e["predicted_tokens_per_s_per_gpu"], error=e["error"],
                       mfu=r["mfu"], step_seconds=r["step_seconds"], memory_bytes=r["memory_bytes"], fits=r["fits"],
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
