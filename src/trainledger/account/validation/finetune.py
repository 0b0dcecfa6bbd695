"""torchtune's published fine-tuning tables as PublishedRun rows, each asked as its config runs. Pure.

Source: pytorch/torchtune README.md, "Memory and training speed" (Llama 3.1; batch 2, no gradient accumulation,
packed to 2048, torch.compile on; tokens/s over one epoch; ** = CPU offload with fused optimizer) and
"Optimization flags" (Llama 3.2 3B, full_finetune_single_device, batch 2, max sequence 4096, bf16, A100; each
technique on top of the previous; LoRA and QLoRA use neither optimizer-in-backward nor 8-bit AdamW). Transcribed in
the workplace's reference/finetune.md.

Each row's settings are read from its config (pytorch/torchtune recipes/configs/):
- llama3_1/8B_full_single_device.yaml: bitsandbytes.optim.PagedAdamW8bit, optimizer_in_bwd True,
  enable_activation_checkpointing True, enable_activation_offloading False, dtype bf16, CEWithChunkedOutputLoss
  (8 chunks; later versions LinearCrossEntropyLoss);
- llama3_1/8B_lora_single_device.yaml: lora_attn_modules [q_proj, v_proj, output_proj], apply_lora_to_mlp True,
  apply_lora_to_output False, rank 8, alpha 16, torch.optim.AdamW (fused), activation checkpointing, bf16;
- llama3_1/8B_qlora_single_device.yaml: qlora_llama3_1_8b (torchao NF4, scalers quantized in 256-blocks: nf4-dq),
  lora_attn_modules [q_proj, v_proj, k_proj, output_proj] + MLP, rank 8, alpha 16, AdamW, checkpointing;
- llama3_1/70B_full.yaml: full_finetune_distributed (FSDP2 over 8), AdamW fused, fsdp_cpu_offload True (the **),
  custom_sharded_layers ['tok_embeddings', 'output'] (--fsdp-separate-embeddings), checkpointing, chunked CE, bf16,
  compile False in the config (True in the table's runs); 70B_lora.yaml (custom_sharded_layers commented out): q,v,output_proj + MLP, rank 16, alpha 32, checkpointing;
- llama3_1/405B_qlora.yaml: q,v,output_proj + MLP, rank 16, alpha 32, FSDP, checkpointing (its batch 1 and
  accumulation 8 replaced by the table's batch 2, no accumulation);
- llama3_2/3B_full_single_device.yaml (the Optimization flags rows, each lever as the table switches it on; 8-bit
  AdamW = the config's PagedAdamW8bit), 3B_lora_single_device.yaml / 3B_qlora_single_device.yaml (q,v,output_proj
  + MLP, rank 64, alpha 128, AdamW; with checkpointing, offloading, compile and chunked CE, as the README's command
  of the QLoRA row).

Memory statistic: torchtune's training.get_memory_stats reports peak_memory_active, peak_memory_alloc and
peak_memory_reserved (torch.cuda.memory_stats()); the Optimization flags table says "peak memory active", the
other table does not say. Both are compared with our `peak_bytes` (the tensors live at the busiest moment, which
is what active and allocated count; the reserve is not added). tokens/s: torchtune logs tokens_per_second_per_gpu.
The baseline row of the Optimization flags table (not packed: Alpaca's own lengths) is listed but not scored: the
sequence lengths of its batches are not published.
"""

from __future__ import annotations

from trainledger.account.validation.published_run import PublishedRun, run_of

GIB = 2**30
SOURCE = "torchtune README"
CHUNKS = 8                       # CEWithChunkedOutputLoss(num_output_chunks=8)
LLAMA_LORA = "q,v,o,gate,up,down"   # lora_attn_modules q_proj, v_proj, output_proj; apply_lora_to_mlp True

# "Memory and training speed": (model, method, GPU, GPUs, peak memory GiB as printed, tokens/s)
MEMORY_AND_SPEED = [
    ("llama-3.1-8b", "full", "rtx-4090", 1, 18.9, 1650),
    ("llama-3.1-8b", "full", "rtx-a6000", 1, 37.4, 2579),
    ("llama-3.1-8b", "lora", "rtx-4090", 1, 16.2, 3083),
    ("llama-3.1-8b", "lora", "rtx-a6000", 1, 30.3, 4699),
    ("llama-3.1-8b", "qlora", "rtx-4090", 1, 7.4, 2413),
    ("llama-3.1-70b", "full", "a100-80gb", 8, 13.9, 1568),
    ("llama-3.1-70b", "lora", "a100-80gb", 8, 27.6, 3497),
    ("llama-3.1-405b", "qlora", "a100-80gb", 8, 44.8e9 / GIB, 653),   # printed "44.8 GB"
]
# "Optimization flags", Llama 3.2 3B on one A100: (technique, peak memory active GiB, tokens/s)
OPTIMIZATION_FLAGS = [
    ("baseline (not packed)", 25.5, 2091),
    ("+ packed dataset", 60.0, 7075),
    ("+ compile", 51.0, 8998),
    ("+ chunked cross-entropy", 42.9, 9174),
    ("+ activation checkpointing", 24.9, 7210),
    ("+ optimizer in backward", 23.1, 7309),
    ("+ activation offloading", 21.8, 7301),
    ("+ 8-bit AdamW", 17.6, 6960),
    ("LoRA", 8.5, 8210),
    ("QLoRA", 4.6, 8035),
]


# The 8-GPU rows' tokens/s are read as the total of the 8 GPUs: per GPU, 70B LoRA's 3,497 tokens/s would need
# 4 · 70.6e9 · 3,497 = 9.9e14 FLOP/s (forward + input gradients, no weight gradients of the frozen base), 3.2 times an
# A100's dense bf16 peak of 312e12 (NVIDIA A100 datasheet); 405B QLoRA's 653 likewise 3.4 times it. As a total
# both are 40 % of peak or less.
TOTAL_TOKENS = ("tokens/s read as the total over the GPUs (per GPU it would exceed the A100's peak FLOP/s: "
                "account/validation/finetune.py)")


def _memory_and_speed_run(model: str, method: str, num_gpus: int) -> dict:
    settings = dict(batch_size=2, seq_len=2048, global_batch_size=2 * num_gpus, precision="bf16", compile=True,
                    recompute="full", chunked_loss=CHUNKS, reserve=0.0)
    if num_gpus > 1:
        settings.update(dp=num_gpus, zero=3)
    if method == "full" and num_gpus == 1:          # 8B_full_single_device
        settings.update(optimizer="paged-adamw-8bit", optimizer_in_backward=True)
    elif method == "full":                          # 70B_full: fsdp_cpu_offload True, fused AdamW
        settings.update(cpu_offload="params", optimizer_impl="fused", separate_embeddings=True)   # custom_sharded_layers
    else:
        big = model != "llama-3.1-8b"
        targets = "q,k,v,o,gate,up,down" if (method == "qlora" and not big) else LLAMA_LORA
        settings.update(method=method, optimizer_impl="fused", lora_rank=16 if big else 8, lora_alpha=32.0 if big else 16.0,
                        lora_targets=targets)
    return settings


def memory_and_speed_cases() -> list[PublishedRun]:
    """The "Memory and training speed" rows as their configs run (module docstring)."""
    out = []
    for model, method, gpu, n, gib, tokens_per_s in MEMORY_AND_SPEED:
        out.append(PublishedRun(
            label=f"{model} {method} {n}x{gpu}", source=SOURCE, model=model, gpu=gpu, num_gpus=n,
            run=run_of(**_memory_and_speed_run(model, method, n)),
            metric="tokens_per_s_per_gpu" if n == 1 else "tokens_per_s",
            published=float(tokens_per_s), figures=(("peak_memory_bytes", gib * GIB), ("table", "memory-and-speed")),
            assumptions=("peak memory statistic not stated (compared with peak tensors)",
                         "tokens/s of one GPU" if n == 1 else TOTAL_TOKENS)))
    return out


def optimization_flags_cases() -> list[PublishedRun]:
    """The "Optimization flags" rows, each lever on top of the previous (module docstring); the baseline included
    with `figures` scored False."""
    base = dict(batch_size=2, seq_len=4096, global_batch_size=2, precision="bf16", optimizer="adamw",
                optimizer_impl="fused", reserve=0.0)
    steps = {"+ compile": {"compile": True}, "+ chunked cross-entropy": {"chunked_loss": CHUNKS},
             "+ activation checkpointing": {"recompute": "full"},
             "+ optimizer in backward": {"optimizer_in_backward": True},
             "+ activation offloading": {"activation_offload": True},
             "+ 8-bit AdamW": {"optimizer": "paged-adamw-8bit"}}
    adapters = dict(base, compile=True, chunked_loss=CHUNKS, recompute="full", activation_offload=True,
                    lora_rank=64, lora_alpha=128.0, lora_targets=LLAMA_LORA)
    out, settings = [], dict(base)
    for technique, gib, tokens_per_s in OPTIMIZATION_FLAGS:
        if technique in steps:
            settings = dict(settings, **steps[technique])
        run = settings
        if technique in ("LoRA", "QLoRA"):
            run = dict(adapters, method=technique.lower())
        out.append(PublishedRun(
            label=f"llama-3.2-3b {technique}", source=SOURCE, model="llama-3.2-3b", gpu="a100-80gb", num_gpus=1,
            run=run_of(**run), metric="tokens_per_s_per_gpu", published=float(tokens_per_s),
            figures=(("peak_memory_bytes", gib * GIB), ("table", "optimization-flags"),
                     ("scored", technique != "baseline (not packed)")),
            assumptions=("peak memory active (as the table says)",)))
    return out


def evaluate_all() -> list[dict]:
    """Each row predicted: predicted vs published peak memory (memory_per_gpu's peak_bytes) and tokens/s, errors."""
    from trainledger.account.memory.per_gpu import memory_per_gpu
    from trainledger.account.time.step import step_time
    from trainledger.errors import TrainledgerError
    from trainledger.specs.hardware import get_gpu
    from trainledger.specs.run import Hardware
    out = []
    for case in memory_and_speed_cases() + optimization_flags_cases():
        figures = dict(case.figures)
        row = {"label": case.label, "table": figures["table"], "scored": figures.get("scored", True),
               "published_peak_bytes": figures["peak_memory_bytes"], "published_tokens_per_s": case.published,
               "predicted_peak_bytes": None, "predicted_tokens_per_s": None, "memory_error": None,
               "tokens_error": None, "refused": None}
        hardware = Hardware(get_gpu(case.gpu), case.num_gpus)
        try:
            peak = memory_per_gpu(case.spec, hardware, case.run)["peak_bytes"]
            tokens = step_time(case.spec, hardware, case.run, with_memory=False)["tokens_per_s"]
            if case.metric == "tokens_per_s_per_gpu":
                tokens /= case.num_gpus
        except TrainledgerError as error:
            row["refused"] = str(error)
        else:
            row.update(predicted_peak_bytes=peak, predicted_tokens_per_s=tokens,
                       memory_error=peak / row["published_peak_bytes"] - 1, tokens_error=tokens / case.published - 1)
        out.append(row)
    return out


def report(rows: list[dict] | None = None) -> dict:
    """Shares of the scored rows within the issue-38 targets: peak memory within 10 %, tokens/s within 25 %."""
    rows = [r for r in (rows if rows is not None else evaluate_all()) if r["scored"]]
    n = len(rows)
    memory = sum(r["memory_error"] is not None and abs(r["memory_error"]) <= 0.10 for r in rows)
    tokens = sum(r["tokens_error"] is not None and abs(r["tokens_error"]) <= 0.25 for r in rows)
    return {"n": n, "memory_within_10": memory, "tokens_within_25": tokens,
            "memory_share": memory / n, "tokens_share": tokens / n}
