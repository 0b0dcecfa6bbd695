"""The memory levers of a run applied to memory_per_gpu's parts (pure, no torch): what stays on the GPU, what goes to
the host (`host_bytes`), as each library runs it.

- optimizer_in_backward: each parameter steps and frees its gradient in its post-accumulate-grad hook (PyTorch tutorial
  "How to save memory by fusing the optimizer step into the backward pass"; torchtune's optimizer_in_bwd;
  optim/in_backward.py): at most the largest trainable tensor's gradient is alive, beyond what autograd holds.
- activation_offload: every saved activation is copied to (pinned) host memory as autograd packs it and back when its
  backward runs (torch.autograd.graph.saved_tensors_hooks; models/offload.py, as torchtune's OffloadActivations): the
  GPU keeps none between forward and backward but the loss's log-softmax unpacked at the start of backward; the host
  holds them all.
- cpu_offload "optimizer": states and fp32 master copies on the host (torchao's CPUOffloadOptimizer, ZeRO-Offload);
  "params": parameters, gradients and states of the shards on the host (FSDP2's CPUOffloadPolicy), needs --zero 3;
  the GPU keeps the unsharded units FSDP2 gathers.
- paged-adamw-8bit: bitsandbytes' states in CUDA unified memory: counted on the GPU while they fit; the part that does
  not fit is paged out to the host (`paged_to_host_bytes`, in host_bytes).
chunked_loss is in account.memory.activations.step_peak_bytes (the loss's logits-sized buffers 1/N at a time).
"""

from __future__ import annotations

from trainledger.errors import TrainledgerError


def check_cpu_offload(cpu_offload: str, zero: int) -> None:
    """--cpu-offload params is FSDP2's CPUOffloadPolicy: it needs ZeRO-3 (FSDP full shard)."""
    if cpu_offload == "params" and zero != 3:
        raise TrainledgerError(f"--cpu-offload params is FSDP2's CPUOffloadPolicy over sharded parameters: it needs "
                               f"--zero 3 (got --zero {zero}); use --cpu-offload optimizer", "--cpu-offload")


def offload_states(parts: dict, levers, zero: int, fsdp_buffers: dict | None) -> dict:
    """(GPU parts, host bytes by part) after --cpu-offload (module docstring)."""
    check_cpu_offload(levers.cpu_offload, zero)
    gpu, host = dict(parts), {}
    if levers.cpu_offload == "optimizer":
        host = {"optimizer": gpu["optimizer_bytes"], "master_params": gpu["master_params_bytes"]}
        gpu["optimizer_bytes"] = gpu["master_params_bytes"] = 0.0
    elif levers.cpu_offload == "params":
        buffers = fsdp_buffers or {"params_bytes": 0.0, "grads_bytes": 0.0}
        for key in ("params", "grads"):
            host[key] = gpu[f"{key}_bytes"] - buffers[f"{key}_bytes"]
            gpu[f"{key}_bytes"] = buffers[f"{key}_bytes"]
        host.update(optimizer=gpu["optimizer_bytes"], master_params=gpu["master_params_bytes"])
        gpu["optimizer_bytes"] = gpu["master_params_bytes"] = 0.0
    return gpu, host


def offload_activations(activations: dict, spec, shard, finetune) -> tuple[dict, float]:
    """(the activations the GPU holds between forward and backward, host bytes) with --activation-offload.

    The GPU keeps none (the loss's log-softmax comes back at the start of backward: `last_stage` keeps it for the
    peak). The host holds one copy per saved tensor as autograd packs it: a tensor two ops save (the norm output
    q, k and v save; SDPA's output that o_proj saves; the log-softmax that the NLL loss saves) is copied twice;
    under full recomputation only the blocks' inputs are saved, once each."""
    from trainledger.account.finetune.targets import parse_lora_targets
    from trainledger.account.memory.activations import recipe_bytes
    a, r, w = recipe_bytes(shard.precision)
    n, d = shard.n_tokens, spec.d_model
    roles = set(parse_lora_targets(finetune.lora_targets)) if finetune.adapters else None
    attn = 3 if roles is None else len({"q", "k", "v"} & roles)
    mlp = (2 if spec.gated_mlp else 1) if roles is None else len({"gate", "up"} & roles)
    o_saves = roles is None or "o" in roles
    per_layer = (max(attn - 1, 0) + max(mlp - 1, 0)) * n * d * a + (n * spec.n_heads * spec.head_dim * a if o_saves else 0)
    if shard.recompute == "full":      # checkpointed blocks save their input once; what is inside is rebuilt
        per_layer = 0.0
    host = activations["total"] + (per_layer * spec.n_layers if w == 0 else 0.0) + activations.get("loss", 0.0)
    loss = activations.get("loss", 0.0)
    kept = dict(activations)
    kept.update(total=0.0, first_stage=0.0, last_stage=loss, offloaded=True)
    return kept, host


def paged_spill(result: dict, optimizer_bytes: float) -> float:
    """Bytes of paged-adamw-8bit's states the driver pages to the host so that the step fits (0 if it fits)."""
    headroom = result.get("headroom_bytes")
    if headroom is None or headroom >= 0:
        return 0.0
    return min(-headroom, optimizer_bytes)


def in_effect(run) -> list[str]:
    """The levers of `run` that are on, as flags."""
    lv, out = run.levers, []
    if lv.optimizer_in_backward:
        out.append("--optimizer-in-backward")
    if lv.activation_offload:
        out.append("--activation-offload")
    if lv.cpu_offload != "none":
        out.append(f"--cpu-offload {lv.cpu_offload}")
    if lv.chunked_loss > 1:
        out.append(f"--chunked-loss {lv.chunked_loss}")
    if run.numerics.optimizer in ("adamw-8bit", "paged-adamw-8bit"):
        out.append(f"--optimizer {run.numerics.optimizer}")
    if lv.recompute != "none":
        out.append(f"--recompute {lv.recompute}")
    return out
