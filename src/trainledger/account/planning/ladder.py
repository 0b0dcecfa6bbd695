"""What does it take to fit? The ladder of memory levers a fine-tuner climbs, each rung priced. Pure, no torch.

Each rung is a specs.run.Run: the rung before it with one more lever switched on, in the order torchtune's README
"Optimization flags" table applies them to Llama 3.2 3B (pytorch/torchtune README.md, "Optimization flags"; the
configs recipes/configs/llama3_2/3B_full_single_device.yaml, 3B_lora_single_device.yaml, 3B_qlora_single_device.yaml):

    full bf16 (AdamW)           every weight trained, weights, gradients and AdamW states in bf16 (torchtune's
                                dtype: bf16, full_finetune_single_device)
    + activation checkpointing  enable_activation_checkpointing: True (each block recomputed: --recompute full)
    + chunked loss              CEWithChunkedOutputLoss, num_output_chunks = 8 (torchtune/modules/loss)
    + optimizer in backward     optimizer_in_bwd: True (each parameter steps and frees its gradient in backward)
    + activation offload        enable_activation_offloading: True (saved activations in pinned host memory)
    + 8-bit AdamW               bitsandbytes.optim.PagedAdamW8bit, the single-device full configs' optimizer
    LoRA                        lora_finetune_single_device on the frozen bf16 base: torchtune's Llama defaults
                                lora_attn_modules [q_proj, v_proj, output_proj], apply_lora_to_mlp True, rank 8,
                                alpha 16 (recipes/configs/llama3_1/8B_lora_single_device.yaml), with AdamW (the LoRA
                                and QLoRA rows use neither optimizer-in-backward nor 8-bit AdamW)
    QLoRA                       the same on an NF4 base (qlora_llama3_1_8b: torchao's NF4Tensor)

With more than one GPU the single-device rungs run data-parallel (a replica per GPU, ZeRO 0) and the multi-GPU rungs
follow, as torchtune's distributed recipes run them (FSDP2, recipes/configs/llama3_1/70B_full.yaml, 70B_lora.yaml):
full bf16 sharded (ZeRO-3) with activation checkpointing and the chunked loss, + CPU offload of the parameters,
gradients and states (fsdp_cpu_offload: True, FSDP2's CPUOffloadPolicy), then LoRA and QLoRA sharded.

Each rung is asked as memory_per_gpu and step_time answer it (account/memory/per_gpu.py, account/time/step.py): its
peak per GPU, the reserve kept back, whether peak + reserve fits, and tokens/s. A rung whose settings are refused
(a lever the model or GPU does not allow) carries the reason instead of numbers and does not fit.
"""

from __future__ import annotations

from trainledger.errors import TrainledgerError

# torchtune's CEWithChunkedOutputLoss default (torchtune/modules/loss/ce_chunked_output_loss.py: num_output_chunks=8)
TORCHTUNE_LOSS_CHUNKS = 8
# torchtune's Llama LoRA defaults (recipes/configs/llama3_1/8B_lora_single_device.yaml): q_proj, v_proj, output_proj
# and the MLP (apply_lora_to_mlp: True), not the output head; rank 8, alpha 16
TORCHTUNE_LORA = {"lora_targets": "q,v,o,gate,up,down", "lora_rank": 8, "lora_alpha": 16.0}

_FULL = {"method": "full", "quantize": None, "precision": "bf16", "optimizer": "adamw", "recompute": "none",
         "chunked_loss": 1, "optimizer_in_backward": False, "activation_offload": False, "cpu_offload": "none"}


def rungs(num_gpus: int = 1, lora: dict | None = None) -> list[tuple[str, str, dict]]:
    """(key, label, the settings for Run.with_) of each rung, in the order a user climbs them (module docstring).
    `lora`: rank, alpha and targets of the LoRA rungs (default TORCHTUNE_LORA)."""
    lora = dict(TORCHTUNE_LORA, **(lora or {}))
    dp = {"dp": num_gpus, "zero": 0}
    steps = [("full", "full bf16 (AdamW)", {}),
             ("checkpointing", "+ activation checkpointing", {"recompute": "full"}),
             ("chunked_loss", f"+ chunked loss ({TORCHTUNE_LOSS_CHUNKS} chunks)", {"chunked_loss": TORCHTUNE_LOSS_CHUNKS}),
             ("optimizer_in_backward", "+ optimizer in backward", {"optimizer_in_backward": True}),
             ("activation_offload", "+ activation offload", {"activation_offload": True}),
             ("adamw_8bit", "+ 8-bit AdamW", {"optimizer": "paged-adamw-8bit"})]
    out, settings = [], dict(_FULL, **dp)
    for key, label, change in steps:
        settings = dict(settings, **change)
        out.append((key, label, dict(settings)))
    # LoRA / QLoRA: the activation levers kept, neither optimizer-in-backward nor 8-bit AdamW (torchtune's table)
    adapters = dict(settings, optimizer="adamw", optimizer_in_backward=False, **lora)
    out.append(("lora", f"LoRA (rank {lora['lora_rank']})", dict(adapters, method="lora")))
    out.append(("qlora", f"QLoRA (rank {lora['lora_rank']}, NF4 base)", dict(adapters, method="qlora")))
    if num_gpus > 1:
        sharded = dict(_FULL, dp=num_gpus, zero=3, recompute="full", chunked_loss=TORCHTUNE_LOSS_CHUNKS)
        out.append(("fsdp", f"FSDP (ZeRO-3) over {num_gpus} GPUs + checkpointing + chunked loss", sharded))
        out.append(("fsdp_cpu_offload", "+ CPU offload (FSDP2 CPUOffloadPolicy)", dict(sharded, cpu_offload="params")))
        out.append(("fsdp_lora", f"LoRA sharded over {num_gpus} GPUs", dict(sharded, method="lora", **lora)))
        out.append(("fsdp_qlora", f"QLoRA sharded over {num_gpus} GPUs", dict(sharded, method="qlora", **lora)))
    return out


def price(spec, hardware, run) -> dict:
    """Peak memory per GPU, reserve, fits and tokens/s of one run (memory_per_gpu and step_time), or the reason the
    run is refused (`error`, fits False)."""
    from trainledger.account.memory.per_gpu import memory_per_gpu
    from trainledger.account.time.step import step_time
    try:
        memory = memory_per_gpu(spec, hardware, run)
        time = step_time(spec, hardware, run, with_memory=False)
    except TrainledgerError as error:
        return {"error": str(error), "fits": False, "peak_bytes": None, "reserve_bytes": None,
                "required_bytes": None, "tokens_per_s": None, "step_seconds": None, "host_bytes": None}
    reserve = float(memory.get("reserve_bytes") or 0.0)
    return {"peak_bytes": memory["peak_bytes"], "reserve_bytes": reserve,
            "required_bytes": memory["peak_bytes"] + reserve, "fits": bool(memory.get("fits", False)),
            "tokens_per_s": time["tokens_per_s"], "step_seconds": time["step_seconds"],
            "host_bytes": memory.get("host_bytes"), "trainable_params": memory.get("trainable_params"),
            "error": None}


def ladder(spec, hardware, run, lora: dict | None = None) -> dict:
    """The ladder (module docstring) for `spec` on `hardware` (specs.run.Hardware: GPU and count) at `run`'s batch,
    sequence, reserve and kernels: {"ladder": [rung, ...], "fastest_fitting": key or None, "first_fitting": key or
    None, "memory_per_gpu_bytes"}. Each rung: key, label, settings (what changed from run), the priced numbers
    (price) and `run` (the specs.run.Run; the CLI turns it into a run file document)."""
    num_gpus = hardware.num_gpus or 1
    out = []
    # one micro-batch per GPU per step, no gradient accumulation (torchtune's tables; optimizer-in-backward needs it)
    run = run.with_(global_batch_size=run.batch.batch_size * num_gpus)
    for key, label, settings in rungs(num_gpus, lora):
        rung_run = run.with_(**settings)
        out.append({"key": key, "label": label, "settings": settings, **price(spec, hardware, rung_run),
                    "run": rung_run})
    fitting = [r for r in out if r["fits"] and r["tokens_per_s"]]
    fastest = max(fitting, key=lambda r: r["tokens_per_s"])["key"] if fitting else None
    return {"ladder": out, "fastest_fitting": fastest, "first_fitting": fitting[0]["key"] if fitting else None,
            "memory_per_gpu_bytes": hardware.memory_bytes, "num_gpus": num_gpus}
