"""Bytes per GPU of a training run, by named part: params, grads, master params, optimizer states, activations. Pure, no torch.

Model states (per parameter, from the precision recipe and optimizer in specs/recipes.py) are placed
on GPUs in three steps, in this order:

1. Pipeline parallel `pp` (Narayanan et al. 2021, arXiv:2104.04473): the layers are split into pp
   stages of ceil(L/pp) layers; the first stage also holds the token (and position) embeddings, the
   last the final norm and LM head (a tied head keeps a copy of the embedding there, as Megatron-LM
   does). The heaviest stage is reported.
2. Tensor parallel `tp` (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053): q/k/v/o, MLP and expert
   matrices and their column-parallel biases, the vocabulary-parallel token embedding and LM head are
   divided by tp; norms, position embeddings, row-parallel biases (o, MLP down) and the MoE router are
   replicated. tp must divide n_heads and n_kv_heads.
3. ZeRO over `dp` data-parallel ranks (Rajbhandari et al. 2019, arXiv:1910.02054, Sec. 3.1, Fig. 1):
   stage 1 shards optimizer states and master params, stage 2 also grads, stage 3 (FSDP full shard)
   also params: 16Ψ → 4Ψ + 12Ψ/N_d → 2Ψ + 14Ψ/N_d → 16Ψ/N_d for mixed-precision Adam.

Activations come from account.memory.activations (what OUR torch Transformer saves for backward, with the
same tp/sp/pp/recompute/flash settings). Given only a parameter count (no architecture), activations
are not modelled: activations_bytes = 0 and `activations_modeled` is False.

total_bytes is the sum of the parts. What a GPU must hold at once is `peak_bytes`: the largest moment of a
training step after the first (account.memory.activations.step_peak_bytes with later_steps: the optimizer states
exist through forward and backward, the loss's fp32 logits-sized buffers are alive at the start of backward,
the optimizer step makes a state-sized temporary). A CUDA process also holds what its tensors do not
(`cuda_reserve_bytes`): the CUDA context, cuBLAS workspaces and what the caching allocator keeps cached
(fragmentation). `fits` = peak_bytes + reserve_bytes <= memory. Not counted: communication buffers.
"""

from __future__ import annotations

from types import SimpleNamespace

from trainledger.account.memory.activations import ActivationShard, activations_bytes as _activations_bytes
from trainledger.account.counting.experts import zero_shard_params
from trainledger.account.counting.params import param_counts
from trainledger.account.counting.placement import (ZERO_STAGES, check_parallel, check_positive_int,  # noqa: F401
                                                    params_per_gpu, zero_divisors)
from trainledger.account.memory.fsdp import fsdp_settings_of, models_fsdp2
from trainledger.specs.model import CruncherSpec, TransformerSpec
from trainledger.specs.run import Hardware
from trainledger.specs.run_checks import ParameterCount, resolve
from trainledger.account.memory.fp8 import apply as apply_fp8, fp8_memory
from trainledger.account.memory import megatron_moe as megatron
from trainledger.account.memory.levers import in_effect, offload_activations, offload_states, paged_spill
from trainledger.specs.recipes import adafactor_elements_per_param, bytes_per_param, get_optimizer, get_recipe

# What a CUDA process holds besides its tensors (`cuda_reserve_bytes`), each with its source:
# - the CUDA context: 666,632,192 B with every kernel module of PyTorch loaded (CUDA_MODULE_LOADING=EAGER);
#   287,047,680 B right after initialisation with lazy module loading, which grows as kernels are first used
#   (measured in pytorch/pytorch PR #86509, which made CUDA_MODULE_LOADING=LAZY PyTorch's default since 1.13).
#   A training process loads only the kernels its step runs: on the recorded H100 (tests/data/h100_2026_11_26,
#   PyTorch 2.11 + CUDA 13.0, lazy loading) the out-of-memory error in the second step of Llama 1B 8 x 2048, after a
#   whole first step (forward, backward, AdamW) had loaded its kernels, read "this process has 74.74 GiB memory in
#   use. Of the allocated memory 67.59 GiB is allocated by PyTorch, and 6.66 GiB is reserved by PyTorch but
#   unallocated": what the process held outside PyTorch's allocator (the cuBLAS workspaces are inside it) was
#   0.49 GiB (± 0.015 GiB from the message's rounding). That is the default; EAGER loading is the upper bound.
CUDA_CONTEXT_EAGER_BYTES = 666_632_192
CUDA_CONTEXT_BYTES = round((74.74 - 67.59 - 6.66) * 2**30)     # 0.49 GiB = 526,133,494 B
# - cuBLAS workspaces: 32 MiB per handle on Hopper and Blackwell (":4096:8"; 8.125 MiB, ":4096:2:16:8", before),
#   allocated through the caching allocator (aten/src/ATen/cuda/CublasHandlePool.cpp, getChosenWorkspaceSize);
#   a training step has two handles: the forward's thread and autograd's device thread;
CUBLAS_WORKSPACE_BYTES = 32 * 2**20
CUBLAS_HANDLES = 2
# - the caching allocator's cache (fragmentation): reserved minus the later step's peak, as a fraction of that
#   peak. Replaying PyTorch's allocator policy (measure/allocator.py, which reproduces the recorded H100
#   out-of-memory error of Llama 1B 8 x 2048 to 0.1 GiB) over two steps of 16 configurations
#   (benchmarks/bench_allocator_slack.py, table in docs/measure.md) gave 1.5-20 %, median 6 %; 13 of the 16
#   need at most 10 %, which the default counts. `measure` replays the exact figure of one configuration.
ALLOCATOR_SLACK_FRACTION = 0.10
# Aspect ratio d_model / n_layers assumed when only a parameter count is known (GPT-3 175B: 12288/96 = 128).
ASSUMED_ASPECT_RATIO = 128


def cuda_reserve_bytes(peak_bytes: float, *, context: bool = True, expandable_segments: bool = False) -> dict:
    """Bytes a CUDA training process holds beyond its tensors' peak `peak_bytes`, by part, and their "total".

    context (CUDA_CONTEXT_BYTES, a training process's context under PyTorch's default lazy module loading;
    context=False when the free memory is read after CUDA started, as torch.cuda.mem_get_info() does, so the
    context is already taken), two cuBLAS workspaces
    (CUBLAS_WORKSPACE_BYTES each) and the caching allocator's cache (ALLOCATOR_SLACK_FRACTION of the peak; none
    with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, where segments grow and are unmapped by 2 or 20 MiB
    pages instead of being split: c10/cuda/CUDACachingAllocator.cpp, "Expandable Segments"; torchtitan's
    run_train.sh sets it). Sources beside the constants.
    """
    parts = {"context": float(CUDA_CONTEXT_BYTES) if context else 0.0,
             "workspaces": float(CUBLAS_HANDLES * CUBLAS_WORKSPACE_BYTES),
             "allocator": 0.0 if expandable_segments else ALLOCATOR_SLACK_FRACTION * float(peak_bytes)}
    parts["total"] = sum(parts.values())
    return parts


def default_reserve(gpu) -> float | None:
    """The reserve `gpu` gets when --reserve is not given: None (cuda_reserve_bytes of each layout's peak) for the
    devices PyTorch drives through its caching allocator (NVIDIA; AMD through HIP, a port of the same allocator;
    a calibrated `cuda` device), 0.0 for the others (TPUs through XLA, a CPU), whose overheads are not modelled."""
    return None if getattr(gpu, "vendor", "") in ("NVIDIA", "AMD") or getattr(gpu, "name", "") == "cuda" else 0.0


def d_model_estimate(n_params: float) -> float:
    """d_model (a count) of a Transformer with N ≈ 12·L·d² parameters and d/L = 128: (128·N/12)^(1/3)."""
    return (ASSUMED_ASPECT_RATIO * n_params / 12) ** (1 / 3)


def adafactor_elements_per_param_of(spec) -> float:
    """Adafactor state elements per parameter of `spec`: Σ(rows + cols) over matrices + every vector entry, over n_params.

    Matrices: q, k, v, o, router, every expert's MLP matrices, the token/position embeddings and an
    untied head (Shazeer & Stern 2018, Alg. 4 factors every 2-D parameter); vectors (norms, biases)
    keep a full second moment.
    """
    n = param_counts(spec)["n_params"]
    if isinstance(spec, CruncherSpec):
        mats = [(spec.dim, spec.dim, spec.n_layers), (spec.dim, 1, 1)]
    else:
        d, L, q, kv = spec.d_model, spec.n_layers, spec.n_heads * spec.head_dim, spec.kv_heads * spec.head_dim
        n_mlp, moe = (3 if spec.gated_mlp else 2), spec.n_moe_layers
        mats = [(d, q, 2 * L), (d, kv, 2 * L), (d, spec.d_ff, n_mlp * moe * spec.n_experts), (spec.vocab_size, d, 1),
                (d, spec.d_ff if not spec.is_moe else (spec.dense_d_ff or 0), n_mlp * (L - moe))]
        if spec.is_moe:
            mats.append((d, spec.n_experts, moe))
            if spec.shared_expert_d_ff:
                mats.append((d, spec.shared_expert_d_ff, n_mlp * moe))
            if spec.shared_expert_gate:
                mats.append((d, 1, moe))
        if spec.position == "learned":
            mats.append((spec.max_seq_len, d, 1))
        if not spec.tied_embeddings:
            mats.append((d, spec.vocab_size, 1))
    entries = sum(r * c * k for r, c, k in mats)
    factored = sum((r + c) * k for r, c, k in mats)
    return (factored + (n - entries)) / n


def reserve_bytes_of(reserve, gpu, framework: str = "trainledger") -> float | None:
    """Bytes kept back per GPU for a run's levers.reserve (specs.run.Levers), None meaning cuda_reserve_bytes of each
    peak: a size in bytes as given; "cuda": None; "expandable": the context and cuBLAS workspaces of
    cuda_reserve_bytes, no allocator cache; "auto": default_reserve of `gpu`, and "expandable" with torchtitan on a
    CUDA device, whose launcher (run_train.sh) sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True."""
    if reserve == "cuda":
        return None
    if reserve == "expandable" or (reserve == "auto" and framework == "torchtitan" and default_reserve(gpu) is None
                                   and gpu is not None):
        return cuda_reserve_bytes(0.0, expandable_segments=True)["total"]
    if reserve == "auto":          # without a device: what a CUDA process holds (None), as for an NVIDIA GPU
        return default_reserve(gpu) if gpu is not None else None
    return float(reserve)


def memory_per_gpu(spec, hardware, run) -> dict:
    """Bytes on one GPU by named part: params_bytes, grads_bytes, master_params_bytes, optimizer_bytes, activations_bytes, total_bytes.

    `spec`: a model (activations modelled), or a specs.run_checks.ParameterCount (model states only; tp and pp then
    divide all parameters evenly). `hardware`: specs.run.Hardware (the GPU and its memory; without a GPU or a memory
    size, or None, no `fits`);
    `run`: specs.run.Run, resolved first (specs.run_checks.resolve). The settings that matter here: the micro-batch
    and sequence (each of cp ranks holds seq_len / cp tokens), the global batch (its micro-batches per step), the
    recipe and optimizer, the layout (dp, zero and FSDP2's options, tp, sp, pp, cp, ep, etp), recomputation,
    the reserve (levers.reserve: "auto", "expandable" or bytes; reserve_bytes_of), flash and the loss upcast. total_bytes is the sum of the five parts; peak_bytes what one GPU holds
    at the busiest moment of a training step after the first (first_step_peak_bytes: the first step, whose
    optimizer states appear only in its optimizer step; peak_moment: which moment). `reserve_bytes` is kept
    apart: "auto" on a CUDA device means what a CUDA process holds besides its tensors (cuda_reserve_bytes of the
    peak, by part in `reserve_parts`). `fits` (with `hardware`) means peak_bytes + reserve <= memory. The
    micro-batches per optimizer step after the first run with the gradients held.
    `ep`: expert parallelism (account.counting.experts): the routed experts split over ep of the dp ranks; a state
    ZeRO shards over dp is then the same as without ep (an expert's state is sharded over the dp/ep ranks holding
    it: (dense + experts/ep)/(dp/ep) per expert part = all/dp), an unsharded one holds only 1/ep of the experts. `etp` (default tp) and
    `cp`: MoE Parallel Folding (account.counting.experts): each GPU holds 1/(etp·ep) of the experts, ep may reach
    tp·cp·dp, and ZeRO shards an expert's states over the EDP = tp·cp·dp/(etp·ep) ranks holding it (dense: over dp).
    A ZeRO-3 layout of a model in PyTorch (account.memory.fsdp.models_fsdp2): FSDP2 as it runs — states sharded inside each
    HSDP replica group, activations in the recipe the model computes in under its mixed-precision policy, and
    its unsharded parameter and gradient buffers added to params_bytes and grads_bytes (`fsdp_buffers`; in the
    peak, the gradient buffers count from the end of backward: at its start, in the loss, none exists yet).
    `framework` "megatron" with a mixture-of-experts model: Megatron-Core as Megatron Bridge's MoE recipes run it
    (account.memory.megatron_moe): the layers' saved tensors of its TE modules, alltoall dispatcher and grouped
    experts under recompute_modules ["layernorm", "moe_act"] (asked as recompute "none" or "selective"; "full" keeps
    each layer's input as for any model), and its in-place loss; gradients in the parameters' 16 bits, as the
    recipes' performance runs set them (megatron_moe.py). Dense models are unchanged.
    `loss_upcast` False: the cross-entropy runs on the 16-bit logits (account.memory.activations.loss_bytes, as NeMo
    Automodel's MaskedCrossEntropy(fp32_upcast=False)); Megatron-Core's vocab-parallel cross entropy always upcasts.
    """
    resolved = resolve(spec, hardware if hardware is not None else Hardware(None), run)
    run = resolved.run
    b, lay, k = run.batch, run.layout, run.kernels
    batch_size, seq_len, cp = b.batch_size, b.seq_len, lay.cp
    zero, dp, tp, pp, sp, ep, etp = lay.zero, lay.dp, lay.tp, lay.pp, lay.sp, lay.ep, lay.etp
    recompute, flash, framework, loss_upcast = run.levers.recompute, k.flash, k.framework, k.loss_upcast
    grad_accum = resolved.micro_batches
    seq_len = seq_len // cp if seq_len is not None else None        # each context-parallel rank's share
    gpu = hardware.gpu if hardware is not None else None
    memory_per_gpu_bytes = hardware.memory_bytes if hardware is not None and hardware.knows_memory else None
    reserve_bytes = reserve_bytes_of(run.levers.reserve, gpu, framework)
    recipe, opt = get_recipe(run.numerics.precision), get_optimizer(run.numerics.optimizer)
    if isinstance(spec, ParameterCount):
        n_params = spec.n_params
        total_params, per_gpu = float(n_params), float(n_params) / (tp * pp)
        sharded_per_gpu = per_gpu
        placement = {"n_params_per_gpu": per_gpu, "stage": "even split", "layers_per_stage": None}
        elements = adafactor_elements_per_param(d_model_estimate(n_params)) if opt.factored else None
        spec = None
    else:
        total_params = param_counts(spec)["n_params"]
        placement = params_per_gpu(spec, tp, pp, ep, etp, (lay.account_for_embedding_in_pipeline_split,
                                                           lay.account_for_loss_in_pipeline_split))
        per_gpu = placement["n_params_per_gpu"]
        # what divided by dp gives this GPU's ZeRO shard, dense/dp + experts/EDP
        sharded_per_gpu = dp * zero_shard_params(placement, tp=tp, cp=cp, dp=dp, ep=ep, etp=etp)
        elements = adafactor_elements_per_param_of(spec) if opt.factored else None
    per_param = bytes_per_param(recipe, opt, elements)
    # Megatron Bridge's MoE recipes recompute only the norms and the MoE activation (elementwise): asked as recompute
    # "none" or "selective"; a full recomputation keeps each layer's input, as for any model
    megatron_moe = (framework == "megatron" and isinstance(spec, TransformerSpec) and spec.is_moe
                    and recompute in ("none", "selective"))
    fsdp = None
    if spec is not None and models_fsdp2(spec, run):
        fsdp = fsdp_settings_of(recipe, lay.fsdp, pp=pp, dp=dp)
    divisors = zero_divisors(zero, dp // fsdp.replicate if fsdp is not None else dp)
    parts = {f"{k}_bytes": (per_gpu if divisors[k] == 1 else sharded_per_gpu) * per_param[k] / divisors[k]
             for k in ("params", "grads", "master_params", "optimizer")}
    buffers = None
    if fsdp is not None:
        from trainledger.account.memory.fsdp import buffers as fsdp_buffers, compute_precision, units
        buffers = fsdp_buffers(units(spec, placement, tp, pp, lay.fsdp.separate_embeddings), fsdp)
        parts["params_bytes"] += buffers["params_bytes"]
        parts["grads_bytes"] += buffers["grads_bytes"]

    activations = shard = None
    if spec is not None:
        computes_in = compute_precision(recipe.name, fsdp, zero) if fsdp is not None else recipe.name
        shard = ActivationShard.of(run, computes_in)              # seq_len / cp tokens (a Cruncher: one "token")
        seq_len = shard.seq_len
        activations = _activations_bytes(spec, shard)
        if megatron_moe:
            activations = megatron.activations_bytes(spec, shard, base=activations, etp=etp)
    ft, host = None, {}
    if spec is not None and not run.finetune.adapters and opt.name in ("adamw-8bit", "paged-adamw-8bit"):
        from trainledger.account.memory.finetune import model_tensors, optimizer_bytes_of
        tensors = model_tensors(spec) if isinstance(spec, TransformerSpec) else None
        if tensors is not None:     # tensor by tensor: small ones keep full-precision states (finetune.py)
            unsharded = optimizer_bytes_of(tensors, opt.name, opt.n_states, 1, recipe.params_bytes_per_param)
            placed = (per_gpu if divisors["optimizer"] == 1 else sharded_per_gpu) / total_params
            parts["optimizer_bytes"] = unsharded * placed / divisors["optimizer"]
    if spec is not None and run.finetune.adapters:       # LoRA / QLoRA (account/memory/finetune.py)
        parts, activations, ft = _finetune(spec, run, recipe, opt, parts, activations, shard,
                                           (per_gpu / total_params, divisors, buffers))
    if activations is not None and run.levers.activation_offload:
        activations, host["activations"] = offload_activations(activations, spec, shard, run.finetune)
    parts["activations_bytes"] = activations["total"] if activations else 0.0
    fp8 = fp8_memory(spec, recipe.name, shard, n_params_per_gpu=per_gpu, params_divisor=divisors["params"],
                     activations=None if megatron_moe else activations)   # megatron_moe counts FP8-saved inputs
    parts = apply_fp8(parts, fp8)           # FP8 weight copies, amax histories, FP8-saved inputs (account/memory/fp8.py)
    parts, offloaded = offload_states(parts, run.levers, zero, buffers)
    host.update(offloaded)
    total = sum(parts.values())
    in_peak = dict(parts)
    if run.levers.optimizer_in_backward:     # the largest trainable tensor's gradient at most (account/memory/levers.py)
        largest = ft["largest_trainable_numel"] if ft else _largest_tensor(spec, total_params)
        in_peak["grads_bytes"] = min(parts["grads_bytes"], largest * per_param["grads"] / divisors["grads"])
        parts["grads_bytes"] = in_peak["grads_bytes"]
        total = sum(parts.values())
    stepping = SimpleNamespace(name=opt.name, n_states=opt.n_states, in_backward=run.levers.optimizer_in_backward,
                               fused=run.numerics.optimizer_impl == "fused")
    peaks = training_peak_bytes(spec, in_peak, activations, n_params=total_params, shard=shard, optimizer=stepping,
                                grad_accum=grad_accum, inplace_loss=megatron_moe)
    if ft is not None:
        # with fewer activations saved, the last layer's MLP backward (its activation's input gradient and output,
        # d_ff wide, and the residual's gradient) or a quantized Linear's dequantization can be the busiest moment
        from trainledger.account.memory.activations import recipe_bytes
        a, r, _ = recipe_bytes(shard.precision)
        saved = 0.0 if activations.get("offloaded") else (activations["total"] - activations.get("loss", 0.0)
                                                           - activations.get("final_norm", 0.0))
        held = in_peak["params_bytes"] + in_peak["master_params_bytes"] + in_peak["optimizer_bytes"] + saved
        moments = {"backward_mlp": held + (2 * shard.n_tokens * spec.d_ff * a + shard.n_tokens * spec.d_model * r) / tp,
                   "dequantize": held + ft["dequantize_extra_bytes"] if ft["dequantize_extra_bytes"] else 0.0}
        for name, moment in moments.items():
            if moment > peaks["later_steps"]:
                peaks.update(later_steps=moment, moment=name)
            peaks["first_step"] = max(peaks["first_step"], moment - in_peak["optimizer_bytes"])
    if run.levers.optimizer_in_backward and activations is not None:
        # a step inside backward: the largest tensor's gradient and the foreach step's temporary of its size (√v),
        # while the activations of the layers not yet back-propagated are held (bounded by all of them)
        moment = (in_peak["params_bytes"] + in_peak["master_params_bytes"] + in_peak["optimizer_bytes"]
                  + activations["total"] - activations.get("loss", 0.0) + 2 * in_peak["grads_bytes"])
        if moment > peaks["later_steps"]:
            peaks.update(later_steps=moment, moment="backward_step")
    if activations is not None and shard.loss_chunks > 1 and not run.finetune.adapters:
        # --chunked-loss with a trained head: each chunk's backward makes a V x d weight gradient that autograd adds to
        # the previous chunks' sum: at the second chunk's backward two partial gradients and their sum exist, and the
        # first two chunks' saved log-softmax is freed (the tiny model at vocab 4096 measures exactly this moment,
        # tests/account/test_finetune_memory.py)
        head = 3 * spec.vocab_size * spec.d_model * per_param["grads"] / tp
        moment = (in_peak["params_bytes"] + in_peak["master_params_bytes"] + in_peak["optimizer_bytes"]
                  + activations["last_stage"] - 2 * activations.get("loss", 0.0) / shard.loss_chunks + head)
        if moment > peaks["later_steps"]:
            peaks.update(later_steps=moment, moment="backward_chunked_head")
    if activations is not None and activations.get("offloaded"):
        # offloaded: what the forward holds on the GPU is the layer it runs, the tensors its Python code still
        # references while the MLP's activation runs (Block.forward: the residual before and after attention, the two
        # norm outputs and the attention output; the MLP's d_ff-wide input and output), packed copies aside
        from trainledger.account.memory.activations import recipe_bytes
        a, r, _ = recipe_bytes(shard.precision)
        n_tok = shard.n_tokens
        layer = (2 * n_tok * spec.d_ff * a + 2 * n_tok * spec.d_model * r + 3 * n_tok * spec.d_model * a) / tp
        moment = in_peak["params_bytes"] + in_peak["master_params_bytes"] + in_peak["optimizer_bytes"] + layer
        if moment > peaks["later_steps"]:
            peaks.update(later_steps=moment, moment="forward_offload")
    reserve_parts = cuda_reserve_bytes(peaks["later_steps"]) if reserve_bytes is None else None
    reserve = reserve_parts["total"] if reserve_parts else float(reserve_bytes)
    result = {
        **parts,
        "total_bytes": total,
        "peak_bytes": peaks["later_steps"],
        "first_step_peak_bytes": peaks["first_step"],
        "peak_moment": peaks["moment"],
        "reserve_bytes": reserve,
        "reserve_parts": reserve_parts,
        "n_params": total_params,
        # parameters whose weights this GPU stores: after tensor/pipeline placement and ZeRO-3 sharding
        "n_params_per_gpu": (per_gpu if divisors["params"] == 1 else sharded_per_gpu) / divisors["params"],
        "ep": ep, "etp": tp if etp is None else etp,
        "n_params_per_gpu_before_zero": per_gpu,
        "pipeline_stage": placement["stage"],
        "bytes_per_param": per_param["total"],
        "bytes_per_param_parts": per_param,
        "activations_modeled": activations is not None,
        "activations": activations,
        "fsdp_buffers": buffers["detail"] if buffers else None,
        "fp8": fp8,
        "activations_precision": computes_in if spec is not None else None,
        "precision": recipe.name, "optimizer": opt.name, "zero": zero, "dp": dp, "tp": tp, "pp": pp,
        "sp": bool(sp), "recompute": recompute, "flash": flash, "grad_accum": grad_accum, "loss_upcast": loss_upcast,
        "batch_size": batch_size if spec is not None else None,
        "seq_len": seq_len if spec is not None else None,
    }
    if memory_per_gpu_bytes is not None:
        result["memory_per_gpu_bytes"] = float(memory_per_gpu_bytes)
        result["headroom_bytes"] = memory_per_gpu_bytes - peaks["later_steps"] - reserve
        if opt.name == "paged-adamw-8bit":      # unified memory: what does not fit pages out to the host
            spill = paged_spill(result, parts["optimizer_bytes"])
            host["paged_optimizer"] = spill
            result["peak_bytes"] -= spill
            result["headroom_bytes"] += spill
        result["fits"] = result["headroom_bytes"] >= 0
    result["host_bytes"] = float(sum(host.values()))
    result["host_parts"] = host
    result["levers"] = in_effect(run)
    result["finetune"] = run.finetune.method
    result["trainable_params"] = ft["trainable_params"] if ft else total_params
    result["frozen_params"] = ft["frozen_params"] if ft else 0
    if ft:
        result["finetune_parts"] = {k: ft[k] for k in ("trainable_params_bytes", "frozen_params_bytes",
                                                       "quantized_weights_bytes", "quantization_constants_bytes")}
        result["quantize"] = ft["storage"]
    return result


def _largest_tensor(spec, n_params: float) -> float:
    """Elements of the largest parameter tensor of a full-training model: the token embedding (or untied head) or an
    MLP or attention matrix; a parameter count alone: one twelfth of a layer, d² with d from d_model_estimate."""
    if spec is None or not hasattr(spec, "d_model"):
        return d_model_estimate(n_params) ** 2 * 4
    d = spec.d_model
    return float(max(spec.vocab_size * d, d * spec.d_ff, d * spec.n_heads * spec.head_dim))


def _finetune(spec, run, recipe, opt, parts: dict, activations, shard, placement: tuple):
    """(parts, activations, states) of a LoRA / QLoRA run: account/memory/finetune.py's states placed as the full
    model's are (`placement`: the fraction of the model this GPU holds, ZeRO's divisors, FSDP2's buffers or None), its
    activations changed. Under FSDP2 (account/memory/fsdp.py) the gathered units hold the base as it is stored (bf16,
    or NF4, whose all-gather moves the packed bytes: torchao's NF4Tensor.fsdp_pre_all_gather) and the adapters; only
    the adapters have unsharded gradients."""
    from trainledger.account.memory import finetune as lora
    fraction, divisors, buffers = placement
    states = lora.finetune_states(spec, run.finetune, recipe, opt)
    frozen = (states["frozen_params_bytes"] + states["quantized_weights_bytes"]
              + states["quantization_constants_bytes"]) * fraction / divisors["params"]
    out = dict(parts)
    out["params_bytes"] = frozen + states["trainable_params_bytes"] * fraction / divisors["params"]
    for key in ("grads", "master_params", "optimizer"):
        out[f"{key}_bytes"] = states[f"{key}_bytes"] * fraction / divisors[key]
    if buffers is not None:
        full = float(states["trainable_params"] + states["frozen_params"]) * recipe.params_bytes_per_param
        stored = (states["frozen_params_bytes"] + states["quantized_weights_bytes"]
                  + states["quantization_constants_bytes"] + states["trainable_params_bytes"])
        out["params_bytes"] += buffers["params_bytes"] * stored / full
        out["grads_bytes"] += buffers["grads_bytes"] * states["trainable_params"] / (
            states["trainable_params"] + states["frozen_params"])
    if activations is not None:
        activations = lora.apply_activations(activations, lora.activations_delta_bytes(spec, shard, run.finetune))
        states["dequantize_extra_bytes"] = lora.dequantize_moment_extra_bytes(spec, shard, states,
                                                                              recipe.params_bytes_per_param)
    else:
        states["dequantize_extra_bytes"] = 0.0
    return out, activations, states


def training_peak_bytes(spec, parts: dict, activations: dict | None, *, n_params: float,
                        shard: ActivationShard | None, optimizer, grad_accum: int = 1,
                        inplace_loss: bool = False) -> dict:
    """{"first_step", "later_steps", "moment"}: peak bytes of the first and of every later training step, and the
    moment of the later steps' peak (account.memory.activations.step_peak_bytes over the parts of memory_per_gpu,
    for the micro-batch `shard`).

    Without a model (`spec` None, parameters only; `shard` None) there are no activations: the peak is the optimizer
    step (params, grads, states and the foreach temporary) or the end of backward, whichever is larger.
    """
    from trainledger.account.memory.activations import step_peak_bytes
    # trainledger.optim's (and torch.optim's foreach) Adam/AdamW/AdaGrad/RMSProp make one state-sized temporary;
    # SGD with or without momentum none
    temporaries = 0 if optimizer.name in ("sgd", "momentum") else None
    if getattr(optimizer, "fused", False):   # torch.optim's fused=True: _fused_adamw_ updates in place, no temporary
        temporaries = 0                      # (measured: tests/account/test_compile_memory.py)
    if getattr(optimizer, "in_backward", False):   # each tensor steps alone in its hook: its temporary is within
        # the one gradient counted
        temporaries = 0
    memory = {**parts, "n_params": n_params, "activations": activations}
    peaks = {}
    for key, later in (("first_step", False), ("later_steps", True)):
        if spec is None:
            states = parts["optimizer_bytes"]
            t = (1 if optimizer.n_states else 0) if temporaries is None else temporaries
            moments = {"optimizer": parts["grads_bytes"] + states + (states / optimizer.n_states * t if optimizer.n_states else 0)
                       + parts["master_params_bytes"], "backward_end": parts["grads_bytes"] + (states if later else 0)}
            base = parts["params_bytes"] + parts["master_params_bytes"]
            peak = {k: base + v for k, v in moments.items()}
            peak["total"] = max(peak.values())
        else:
            peak = step_peak_bytes(spec, shard, memory, optimizer_states=optimizer.n_states,
                                   optimizer_temporaries=temporaries, later_steps=later, grad_accum=grad_accum,
                                   inplace_loss=inplace_loss)
        peaks[key] = peak["total"]
        if later:
            peaks["moment"] = max((k for k in peak if k != "total"), key=peak.get)
    return peaks

