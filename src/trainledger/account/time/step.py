"""Seconds of one training iteration, by part, from the hardware and the layout. Pure, no torch.

API: `step_time(spec, hardware, run, *, cache=None, with_memory=True) -> dict` with step_seconds, tokens_per_s,
mfu, hfu, model_flops_per_step, hardware_flops_per_step, breakdown (seconds by part: compute, attention,
memory_bound, overhead, optimizer, tp_comm, dp_comm, pp_comm, cp_comm, pipeline_bubble, ep_comm; they sum to
step_seconds), bottleneck (words), dp, micro_batches, memory (account.memory.per_gpu), assumptions and the resolved
`run`. `hardware` is a specs.run.Hardware (a GPUSpec, a datasheet entry or a calibrated device, and the GPU count);
`run` a specs.run.Run, resolved first (specs.run_checks.resolve: every default decided, every check passed). Its
batch.batch_size is the micro-batch per GPU; global_batch_size / (dp · batch_size) micro-batches are accumulated
per step. The helpers below take what they need of it: the micro-batch's `Shard` (account/time/shard.py: tokens,
compute precision, tp, sp, cp), the run or one of its groups (run.layout, run.kernels), never a spread of keywords.
`layer_pass_seconds(spec, gpu, run)`: one layer's forward and backward (Korthikanti et al. 2022, Table 4).

How a step is built (each piece is a small function a test checks by hand):
1. The kernels of one layer of each kind (spec.layer_groups(): MoE or dense, sliding or global; weighted by how
   many layers it has, O(kinds of layers)), forward and backward, and of the embedding and head
   (account.time.kernels: the same matrices as account.counting.flops, the same tensors as account.memory.activations), each timed
   on the roofline of account.time.roofline; recomputation re-runs the attention core (selective) or the whole
   layer forward (full).
2. Communication (account.time.comm), α–β ring costs on the link each group crosses. Only the exposed part is added:
   max(0, collective − the compute it overlaps), with the overlap each collective states (Megatron-LM: TP input-
   gradient all-reduce / SP reduce-scatter behind the weight-gradient GEMM of the same column-parallel Linear, SP
   input re-gather behind its input-gradient GEMM; DDP gradient buckets behind the last micro-batch's backward
   when pp = 1; ZeRO-3 in PyTorch as FSDP2 runs it, unit by unit, account.memory.fsdp via account.time.overlap.fsdp_step).
   Everything else is exposed. A TP collective holds
   its link's `sm_channels` SMs, so the GEMMs it overlaps run on the others (overlapped_exposed).
3. The pipeline: a stage runs m micro-batches of its ceil(L/pp) layers (the first stage also the embedding, the
   last the head and loss; the slower one sets the pace), plus its point-to-point sends; the 1F1B bubble adds
   (p − 1)/m of that, the interleaved schedule with v chunks (p − 1)/(v·m) (Narayanan et al. 2021, Sec. 2.2).
4. The optimizer step (memory traffic of parameters, gradients and states on this GPU), then DP communication.
   At scale every step waits for the slowest of N GPUs (account/time/stragglers.py), and compute overlapped by a
   collective runs slower (account/time/interference.py).
Not modelled: data loading, evaluation, step-to-step jitter, imbalanced stages beyond embedding/head, the interleaved schedule's extra activation memory.
5. Eager PyTorch on an accelerator (framework trainledger): the CPU launches ops ahead of the GPU, so the step is
   the longer of the two timelines between the loop's synchronizations (account/time/timeline.py, eager_step.py);
   the time the GPU waits for the CPU is "overhead". --compile: account/time/compiled.py.
"""

from __future__ import annotations

from dataclasses import replace

from trainledger.account.time import comm as comm_mod
from trainledger.account.time import fp8 as fp8_mod
from trainledger.account.memory import fsdp as fsdp_mod
from trainledger.account.counting import recompute as recompute_mod
from trainledger.account.time import timeline
from trainledger.account.time.advice import WORDS as ADVICE_WORDS, bottleneck_advice
from trainledger.account.memory.activations import recipe_bytes
from trainledger.account.time.eager import EAGER_FRAMEWORKS, unaligned
from trainledger.account.time.eager_step import (compiled_launch_seconds, eager_cpu_op_seconds, exposed_cpu_seconds,
                                            host_op_seconds, optimizer_tensor_seconds, synchronized_step_seconds)
from trainledger.account.counting.flops import hardware_flops_per_token, train_flops_per_token
from trainledger.account.time.kernels import edge_kernels, layer_kernels, optimizer_kernels
from trainledger.account.time.optimizer_kernels import accumulation_kernels, parameter_numels, parameter_tensors  # noqa: F401
from trainledger.account.time.step_notes import assumptions
from trainledger.account.time.stragglers import wait_for_slowest
from trainledger.account.time.mtp import last_stage_layers, mtp_kernels, mtp_modules
from trainledger.account.counting.experts import expert_params_split
from trainledger.account.counting.placement import params_per_gpu
from trainledger.account.time.expert_parallel import expert_parallel_per_micro_batch
from trainledger.account.memory.per_gpu import memory_per_gpu
from trainledger.account.time.roofline import kernel_seconds
from trainledger.account.time.shard import Shard
from trainledger.account.time.schedule import (SCHEDULES, check_schedule, chunk_share, derive_layout,  # noqa: F401
                                               dualpipe_bubble_seconds, dualpipe_problem, even_chunks,
                                               pipeline_stage_layers)
from trainledger.specs.run_checks import split_extras
from trainledger.account.time import folding
from trainledger.account.time import finetune as finetune_mod
from trainledger.account.time.overlap import (DDP_BUCKET_BYTES, collective_seconds, data_parallel_exposed,  # noqa: F401
                                         fsdp_step as _fsdp_step, link as _link, overlapped_exposed,
                                         pp_exposed, pp_overlap_default, sms_beside_tp_comm)
from trainledger.errors import TrainledgerError
from trainledger.specs.model import TransformerSpec
from trainledger.specs.performance import HOST_SYNC_SECONDS
from trainledger.specs.run_checks import resolve
from trainledger.specs.recipes import get_optimizer, get_recipe

PARTS = ("compute", "attention", "memory_bound", "overhead", "optimizer", "tp_comm", "cp_comm", "pp_comm", "dp_comm",
         "pipeline_bubble", "ep_comm")
WORDS = ADVICE_WORDS   # the parts of a step in words (account.time.advice)


def pipeline_bubble_fraction(pp: int, micro_batches: int, interleave: int = 1, share: float | None = None) -> float:
    """Idle fraction of the ideal time of a pipeline: (p − 1)/m for 1F1B, (p − 1)/(v·m) interleaved (Narayanan et al.
    2021); with chunks of unequal size (p − 1)·share/m, `share` the largest chunk's share of its stage
    (account.time.schedule.chunk_share)."""
    return (pp - 1) * (1 / interleave if share is None else share) / micro_batches


def exposed_seconds(comm_seconds: float, hidden_by_seconds: float) -> float:
    """The part of a communication that compute does not hide: max(0, comm − overlapping compute)."""
    return max(0.0, comm_seconds - hidden_by_seconds)


COLUMN_PARALLEL = {"megatron": ("qkv", "fc1")}   # the Linear of each block whose backward carries the TP collectives


def _time(gpu, kernels, attention_kernel: str | None = None, narrow_sms: int | None = None,
          cpu_op: float | None = None) -> dict:
    """Seconds of a kernel list by part, plus "overhead" (launches × op overhead) and time by backward role
    ("dgrad", "wgrad"; with `narrow_sms`, also "dgrad_narrow", "wgrad_narrow": the same kernels with their GEMMs
    on only that many SMs).

    `cpu_op` (eager PyTorch on an accelerator, which launches asynchronously): each launch also holds the device
    for gpu.kernel_overhead_seconds, nothing is added to "overhead", and "block" is the list as the CPU and GPU
    timelines see it (account/time/timeline.py), each launch costing the CPU `cpu_op` seconds."""
    out = {"compute": 0.0, "attention": 0.0, "memory_bound": 0.0, "optimizer": 0.0, "overhead": 0.0,
           "dgrad": 0.0, "wgrad": 0.0, "dgrad_narrow": 0.0, "wgrad_narrow": 0.0, "kernels": 0}
    blocks, loop = [], []                      # loop: one iteration's blocks of a synchronizing Python loop
    for i, k in enumerate(kernels):
        looped = cpu_op is not None and k.loop > 0
        into, per = (loop, k.loop) if looped else (blocks, 1)
        if looped and (i + 1 == len(kernels) or kernels[i + 1].loop != k.loop):
            into = timeline.LoopEnd(loop, blocks, k.loop, HOST_SYNC_SECONDS)   # the loop is built after it
        if k.kind in ("host", "python"):       # launches nothing: the CPU's dispatch or Python only
            host = host_op_seconds(gpu, cpu_op) if k.kind == "host" else optimizer_tensor_seconds(gpu)
            if cpu_op is None:
                out["overhead"] += k.count * host
            else:
                into.append(timeline.Block(k.count * host / per, 0.0, k.count * host / per))
            continue
        seconds = kernel_seconds(gpu, k, attention_kernel)
        if cpu_op is not None:
            seconds += k.count * gpu.kernel_overhead_seconds
            into.append(timeline.op(cpu_op, seconds / k.count, k.count / per))
        out[k.part] += seconds
        if k.role in ("dgrad", "wgrad"):
            out[k.role] += seconds
            narrow = seconds
            if narrow_sms and k.kind == "gemm":
                narrow = kernel_seconds(gpu, k, attention_kernel, narrow_sms)
            out[k.role + "_narrow"] += narrow
            if k.kind == "gemm":
                full_narrow = out.setdefault("gemms", {}).setdefault(k.name, [0.0, 0.0])
                full_narrow[0] += seconds
                full_narrow[1] += narrow
        if cpu_op is None:
            out["overhead"] += k.count * gpu.op_overhead_seconds
        out["kernels"] += k.count
    if cpu_op is not None:
        out["block"] = timeline.sequence(blocks)
    return out


def _add(total: dict, part: dict, times: float = 1.0) -> None:
    for key, value in part.items():
        if key != "block":
            total[key] = total.get(key, 0.0) + value * times


def step_time(spec, hardware, run, *, cache: dict | None = None, with_memory: bool = True) -> dict:
    """Seconds of one training iteration of `spec` on `hardware` (specs.run.Hardware: a GPUSpec, a datasheet entry
    or a calibrated device, and the GPU count) under the settings of `run` (specs.run.Run), by part (module
    docstring). The run is resolved first (specs.run_checks.resolve: every default decided, every check passed).

    `cache`: a dict the caller keeps across calls for one spec and gpu (account.planning.layout does), memoising the
    kernel times of a layer, which depend only on the micro-batch, tp, sp, cp and the kernel settings.
    `with_memory`: also the memory per GPU (account.memory.per_gpu.memory_per_gpu of the same run) and `fits`.
    The settings, each documented with its flag in specs/run.py: the batch (micro-batch per GPU, global batch,
    sequence length); the recipe and optimizer; the layout (dp, ZeRO and FSDP2's options: a ZeRO-3 layout in
    PyTorch is FSDP2 as it runs, account.memory.fsdp; tp, sp; pp with interleave, schedule and uneven chunks,
    account.time.schedule; cp; ep and etp with the routing options, account/time/expert_parallel.py and
    folding.py); recomputation and the reserve kept back in `fits`; the kernels (flash and which attention
    kernel, the FLOP convention, torch.compile, account/time/compiled.py; the framework; Megatron's TP, DP and
    pipeline-send overlaps, account.time.comm; the loss upcast; the multi-token-prediction modules, mtp.py; and
    whose synchronizations end the timelines of eager PyTorch on a GPU, account/time/eager_step.py).
    """
    resolved = resolve(spec, hardware, run)
    hardware, run, m = resolved.hardware, resolved.run, resolved.micro_batches
    gpu, num_gpus = hardware.gpu, hardware.num_gpus
    b, lay, kernels = run.batch, run.layout, run.kernels
    tp, pp, interleave, cp, dp, zero, ep, etp = lay.tp, lay.pp, lay.interleave, lay.cp, lay.dp, lay.zero, lay.ep, lay.etp
    recompute, framework, compiled = run.levers.recompute, kernels.framework, kernels.compile
    if not isinstance(spec, TransformerSpec):
        raise TrainledgerError(f"step times a Transformer; '{spec.name}' is a {getattr(spec, 'kind', 'model')}",
                               "--model")
    extras = split_extras(lay)          # Megatron's --account-for-embedding/loss-in-pipeline-split (schedule.py)
    share = chunk_share(spec.n_layers, pp, interleave, extras)
    n_mtp = mtp_modules(spec, kernels.mtp, framework)
    pp_hidden = bool(kernels.pp_overlap) and pp > 1
    recipe, opt = get_recipe(run.numerics.precision), get_optimizer(run.numerics.optimizer)
    fp8_mod.check_gpu_supports(recipe.name, gpu)          # FP8 / MXFP8 tensor cores (specs/fp8.py)
    peak = gpu.peak(recipe.compute_dtype)
    style = comm_mod.style_of(framework)
    settings = None
    if zero == 3 and style == "torch" and dp > 1:
        if lay.fsdp.impl != "fsdp2":
            raise TrainledgerError("step times ZeRO-3 in PyTorch as FSDP2 runs it (layout.fsdp.impl = \"fsdp2\"); "
                                   "the ZeRO paper's counting has no schedule to time")
        settings = fsdp_mod.fsdp_settings_of(recipe, lay.fsdp, pp=pp, dp=dp)
    elif lay.fsdp.replicate > 1:
        raise TrainledgerError(f"--dp-replicate {lay.fsdp.replicate} needs --zero 3 in PyTorch (HSDP is FSDP2 "
                               "sharding inside each replica group), with dp > 1")
    compute = fsdp_mod.compute_precision(recipe.name, settings, zero)
    shard = Shard.of(run, compute)

    # 1. kernels of one layer and of the edges, for one micro-batch
    if kernels.flash:
        gpu.attention_table(kernels.attention_kernel)  # an unknown kernel name is an error naming the flag
    gpn = gpu.gpus_per_node
    narrow_sms = sms_beside_tp_comm(gpu, tp, cp, pp)
    cpu_op = eager_cpu_op_seconds(gpu, framework)
    layer_cpu = compiled_launch_seconds(gpu) if (compiled and cpu_op is not None) else cpu_op
    key = _layer_key(shard, run, narrow_sms, n_mtp)
    if cache is not None and key in cache:
        groups, edges = cache[key]
    else:
        groups, edges = _layer_times(spec, gpu, shard, run, spec.layer_groups(), narrow_sms=narrow_sms,
                                     cpu_op=layer_cpu, n_mtp=n_mtp)
        if cache is not None:
            cache[key] = (groups, edges)

    # 2. communication inside a layer pass (TP, CP): per layer and micro-batch
    fwd, bwd, rec, per_layer, records = _average_layer(spec, gpu, shard, run, groups)

    layer = {}
    for part in (fwd, bwd, rec):
        _add(layer, {k: part[k] for k in ("compute", "attention", "memory_bound", "overhead")})
    _add(layer, per_layer)

    # 3. the pipeline: the slowest of the first, a middle and the last stage sets the pace (a middle stage holds more
    # layers than the ends only when the embedding or the loss counts as a layer of the split: pipeline_stage_layers)
    split = (lay.account_for_embedding_in_pipeline_split, lay.account_for_loss_in_pipeline_split)
    counts = pipeline_stage_layers(spec.n_layers, pp, *split)
    layers_per_stage = counts["most"]
    stage_layers = spec.n_layers if pp == 1 else counts["first"]
    first, last, middle = {}, {}, {}
    _add(first, layer, stage_layers)
    _add(last, layer, counts["last"])
    _add(middle, layer, counts["middle"])
    for name in ("embedding_forward", "embedding_backward"):
        _add(first, {k: edges[name][k] for k in ("compute", "attention", "memory_bound", "overhead")})
    if pp > 1 and spec.n_mtp_layers and framework == "megatron":
        # Megatron Bridge's layout of a model with MTP modules: the last stage holds the layers left over, the
        # MTP (when it trains) and the loss; the same layout whether or not the MTP modules train
        last = {}
        _add(last, layer, last_stage_layers(spec.n_layers, pp, spec.n_mtp_layers))
    for name in ("head_forward", "head_backward") + (("mtp_forward", "mtp_backward") if n_mtp else ()):
        _add(last if pp > 1 else first, {k: edges[name][k] for k in ("compute", "attention", "memory_bound", "overhead")})
    stages = [(first, stage_layers)] + ([(last, counts["last"])] if pp > 1 else []) + (
        [(middle, counts["middle"])] if pp > 2 and extras else [])
    stage, paced = max(stages, key=lambda item: sum(item[0].values()))
    stage_layers = paced if extras else stage_layers     # without the split flags: ceil(L/pp), as every stage
    placement = params_per_gpu(spec, tp, pp, ep, etp, split)
    dense, experts_pg = expert_params_split(placement, ep, etp, tp)    # over DP, and over EDP
    step_comm = comm_mod.step_collectives(spec, shard, run, style=style, micro_batches=m, gpus_per_node=gpn,
                                          layers_per_stage=layers_per_stage, params_per_gpu=dense
                                          ) + folding.expert_dp_collectives(
        recipe, experts_pg, run, micro_batches=m, style=style, gpus_per_node=gpn)
    per_mb = dict(stage)
    experts = expert_parallel_per_micro_batch(spec, gpu, shard, run,
                                              moe_layers=stage_layers * spec.n_moe_layers / spec.n_layers,
                                              compute_seconds=stage.get("compute", 0.0))
    per_mb["ep_comm"] = experts["ep_comm"]
    per_mb["compute"] = per_mb.get("compute", 0.0) + experts["expert_wait"]
    after = {"pp_comm": 0.0, "dp_comm": 0.0}
    stage_fwd = stage_layers * (fwd["compute"] + fwd["attention"] + fwd["memory_bound"])
    stage_bwd = stage_layers * (bwd["compute"] + bwd["attention"] + bwd["memory_bound"] + rec["compute"]
                                + rec["attention"] + rec["memory_bound"])
    fsdp_detail = None
    if settings is not None:
        step_comm = [c for c in step_comm if c.part != "dp_comm"]
        fsdp_detail = _fsdp_step(spec, gpu, settings, (fwd, bwd, rec), lay, micro_batches=m)
        after["dp_comm"] += fsdp_detail["exposed_seconds"] + fsdp_detail["copy_seconds"]
        records += fsdp_detail.pop("records")
    for c in step_comm:
        if c.part not in ("pp_comm", "dp_comm"):
            continue
        seconds = collective_seconds(gpu, c)
        records.append((c, seconds))
        if c.name in ("pp_send_recv", "pp_scatter_gather_allgather"):
            per_mb["pp_comm"] = per_mb.get("pp_comm", 0.0) + (
                pp_exposed(gpu, c, seconds / m, stage.get("compute", 0.0)) if pp_hidden else seconds / m)
        elif c.part == "dp_comm":
            after["dp_comm"] += data_parallel_exposed(gpu, c, m, stage_fwd, stage_bwd, pp, spec.n_layers, style)
        else:
            after[c.part] += seconds

    ideal = {k: v * m for k, v in per_mb.items()}
    bubble = pipeline_bubble_fraction(pp, m, interleave, share) * sum(ideal.values())
    if lay.schedule == "dualpipe":   # W: the weight-gradient GEMMs, as many FLOPs as the forward's GEMMs
        bubble = dualpipe_bubble_seconds(pp, sum(per_mb.values()), stage_bwd, stage_layers * fwd["compute"])

    # 4. the optimizer on this GPU's shard (HSDP: the shard of one replica group)
    sharded_over = (dp // settings.replicate if settings is not None else dp) if zero >= 1 else 1
    # ZeRO shards the dense states over dp, an expert's over the EDP ranks that hold it (folding.py)
    shard_params = folding.zero_shard_params(placement, tp=tp, cp=cp, dp=sharded_over, ep=ep, etp=etp, zero=zero)
    n_tensors = parameter_tensors(spec) / pp / sharded_over
    numels = parameter_numels(spec, tp, pp, sharded_over) if cpu_op is not None else None
    trainable = None
    if run.finetune.adapters:   # the step and the accumulation over the adapters only (two tensors each, A and B)
        trainable, adapter_numels = finetune_mod.trainable_tensors(spec, run.finetune)
        shard_params, n_tensors = trainable / pp / sharded_over, len(adapter_numels) / pp / sharded_over
        numels = tuple(max(1, round(x / sharded_over)) for x in adapter_numels) if cpu_op is not None else None
    optim_kernels = optimizer_kernels(shard_params, max(1, round(n_tensors)), recipe.name, opt.name,
                                      framework=framework, tensor_numels=numels)
    optim = _time(gpu, optim_kernels, cpu_op=cpu_op)
    # past the first micro-batch the gradients are accumulated into .grad (FSDP2 accumulates in its own buffers)
    accumulate = _time(gpu, accumulation_kernels(placement["n_params_per_gpu"] if trainable is None else trainable / pp,
                                                 n_tensors * sharded_over,
                                                 m if settings is None else 1, recipe, framework), cpu_op=cpu_op)
    for part in ("memory_bound", "overhead"):
        ideal[part] = ideal.get(part, 0.0) + accumulate[part]

    breakdown = {part: 0.0 for part in PARTS}
    for key, value in ideal.items():
        breakdown[key] += value
    breakdown["optimizer"] = optim["optimizer"]
    breakdown["overhead"] += optim["overhead"]
    breakdown["pipeline_bubble"] = bubble
    breakdown["pp_comm"] += after["pp_comm"]
    breakdown["dp_comm"] += after["dp_comm"]
    straggler = wait_for_slowest(breakdown, num_gpus)     # the slowest of N GPUs sets the pace (stragglers.py)
    if cpu_op is not None and pp == 1:    # eager on an accelerator: the CPU and GPU timelines (account/time/timeline.py)
        norm = [k for k in optim_kernels if k.name.endswith("_norm")]
        clip, update = (_time(gpu, ks, cpu_op=cpu_op) for ks in (norm, [k for k in optim_kernels if k not in norm]))
        synced = synchronized_step_seconds(groups, edges, per_layer, m, accumulate, clip, update, kernels.loop)
        breakdown["overhead"] = exposed_cpu_seconds(synced, breakdown)
    if fsdp_detail is not None:
        breakdown["overhead"] += fsdp_detail["cpu_exposed_seconds"]
    step_seconds = sum(breakdown.values())

    seq_len, attention = b.seq_len, kernels.attention
    tokens = b.global_batch_size * seq_len
    model_flops = train_flops_per_token(spec, seq_len, attention, mtp=n_mtp > 0) * tokens
    hardware_flops = hardware_flops_per_token(spec, seq_len, attention, recompute, mtp=n_mtp > 0) * tokens
    finetune_flops = None
    if run.finetune.adapters:   # the FLOPs a LoRA step needs (account/time/finetune.py: its MFU convention)
        finetune_flops = finetune_mod.finetune_flops_per_token(spec, seq_len, run.finetune, attention)
        hardware_flops += (finetune_flops["total"] - train_flops_per_token(spec, seq_len, attention)) * tokens
        model_flops = finetune_flops["total"] * tokens
    ex = lay.experts
    result = {
        "model": spec.name, "gpu": gpu.name, "num_gpus": num_gpus, "step_seconds": step_seconds,
        "tokens_per_step": tokens, "tokens_per_s": tokens / step_seconds,
        "mfu": model_flops / (step_seconds * num_gpus * peak), "hfu": hardware_flops / (step_seconds * num_gpus * peak),
        "model_flops_per_step": model_flops, "hardware_flops_per_step": hardware_flops, "peak_flops_per_s": peak,
        "breakdown": breakdown, "bottleneck": "", "dp": dp, "tp": tp, "run": run,
        "sp": bool(lay.sp and tp > 1), "pp": pp, "interleave": interleave, "cp": cp, "zero": zero,
        "batch_size": b.batch_size, "global_batch_size": b.global_batch_size, "micro_batches": m, "seq_len": seq_len,
        "precision": recipe.name, "optimizer": opt.name, "recompute": recompute, "flash": kernels.flash,
        "framework": framework, "attention": attention, "attention_kernel": kernels.attention_kernel,
        "compiled": compiled, "loop": kernels.loop, "cpu_op_seconds": cpu_op, "launch_seconds": layer_cpu if compiled else None,
        "unaligned_vocabulary": (framework in EAGER_FRAMEWORKS and not compiled
                                 and unaligned(recipe_bytes(recipe.name)[0], spec.vocab_size / tp)),
        "per_micro_batch_seconds": sum(per_mb.values()), "bubble_fraction": (pipeline_bubble_fraction(pp, m, interleave, share) if lay.schedule == "1f1b"
                                                               else bubble / max(sum(ideal.values()), 1e-30)),
        "kernels_per_layer": round(fwd["kernels"] + bwd["kernels"] + rec["kernels"]),
        "collectives": [dict(c.to_dict(), seconds=s) for c, s in records],
        "compute_precision": compute, "straggler_slowdown": straggler, "ep": ep, "etp": tp if etp is None else etp,
        "tp_overlap": kernels.tp_overlap, "dp_overlap": kernels.dp_overlap, "pp_overlap": pp_hidden,
        "schedule": lay.schedule, "uneven_chunks": not even_chunks(spec.n_layers, pp, interleave, extras),
        "mtp_modules": n_mtp, "mla": spec.is_mla,
        "expert_parallel": dict(experts, per_step_calls=experts["calls"] * m, bytes_sent_per_step=experts["bytes_sent"] * m,
                                imbalance=ex.imbalance, capacity_factor=ex.capacity_factor, overlap=ex.overlap,
                                dispatcher=ex.dispatcher),
    }
    result["bottleneck"] = bottleneck(breakdown, pp, m, interleave,
                                      setup=dict(result, n_layers=spec.n_layers, gpus_per_node=gpu.gpus_per_node))
    if fsdp_detail is not None:
        result["fsdp"] = dict(fsdp_detail, settings=dict(settings.__dict__), assumption=settings.describe())
    if with_memory:
        memory = memory_per_gpu(spec, hardware, run)
        if lay.schedule == "dualpipe":   # its second copy of the parameters (DeepSeek-V3 report, Table 2)
            memory["peak_bytes"] += memory["params_bytes"]
            memory["headroom_bytes"] -= memory["params_bytes"]
            memory["fits"] = memory["headroom_bytes"] >= 0
        result.update(memory_bytes=memory["peak_bytes"], memory_per_gpu_bytes=hardware.memory_bytes, fits=memory["fits"],
                      reserve_bytes=memory["reserve_bytes"], headroom_bytes=memory["headroom_bytes"],
                      trainable_params=memory["trainable_params"], frozen_params=memory["frozen_params"],
                      memory={k: memory[k] for k in ("params_bytes", "grads_bytes", "master_params_bytes",
                                                       "optimizer_bytes", "activations_bytes", "total_bytes")})
    if fp8_mod.fp8_scheme(recipe.name) is not None:     # which GEMMs ran in FP8, and NVIDIA's Model TFLOP/s/GPU
        one_layer = layer_kernels(spec, shard, replace(kernels, compile=False), ep=ep, etp=etp)
        result.update(fp8_mod.convention(result), fp8_gemms=fp8_mod.fp8_gemms(one_layer, recipe.name))
    if finetune_flops is not None:
        result.update(mfu_convention=finetune_flops["convention"], finetune={
            "method": run.finetune.method, "quantize": run.finetune.base_storage, "trainable_params": trainable,
            "flops_per_token": {k: v for k, v in finetune_flops.items() if k != "convention"}})
        result.setdefault("trainable_params", trainable)    # as `memory` counts them, without it the adapters'
    result["assumptions"] = assumptions(gpu, result, records, narrow_sms)
    return result


def optimizer_dispatch_seconds(spec, gpu, precision: str, optimizer: str) -> float:
    """CPU seconds the optimizer step adds on a device that runs ops in turn (a calibrated CPU): its launches,
    views and Python, as step_time charges them to "overhead" (measure/profile.py moves them to "optimizer")."""
    kernels = optimizer_kernels(1.0, parameter_tensors(spec), precision, optimizer)
    return _time(gpu, kernels)["overhead"]


def _average_layer(spec, gpu, shard: Shard, run, groups: list):
    """The mean layer of the model over its kinds of layers (spec.layer_groups(): MoE or dense, sliding or global):
    forward, backward, recomputation seconds by part and the exposed TP/CP comm per layer of micro-batch `shard`
    under `run`, each kind weighted by how many layers it has; O(kinds of layers). Each kind hides its own
    collectives behind its own GEMMs. A pipeline stage is assumed to hold the same mix (its layers × this mean). A
    MoE layer with etp 1 has no TP collectives in its MLP block (account/time/folding.py)."""
    total = sum(count for count, *_ in groups)
    fwd, bwd, rec, comm = {}, {}, {}, {}
    records = None
    for (count, f, b, r), (layer, _) in zip(groups, spec.layer_groups()):
        mlp_tp = folding.mlp_tensor_parallel(spec, layer, shard.tp, run.layout.etp)
        per_layer, recs = _layer_comm(spec, gpu, shard, run, b, mlp_tp)
        records = records if records is not None else recs
        for mean, part in ((fwd, f), (bwd, b), (rec, r), (comm, per_layer)):
            _add(mean, {k: v for k, v in part.items() if k != "gemms"}, count / total)
    return fwd, bwd, rec, comm, records


def _layer_comm(spec, gpu, shard: Shard, run, bwd: dict, mlp_tp: bool = True) -> tuple[dict, list]:
    """Exposed seconds of one layer pass's TP and CP collectives ({"tp_comm", "cp_comm"}) and (collective, seconds)
    records of micro-batch `shard` under `run`, given the layer's backward times `bwd` (what the overlapped
    collectives hide behind)."""
    framework = run.kernels.framework
    layer_comm = comm_mod.layer_collectives(spec, shard, run, style=comm_mod.style_of(framework),
                                            gpus_per_node=gpu.gpus_per_node, mlp_tp=mlp_tp)
    per_layer = {"tp_comm": 0.0, "cp_comm": 0.0}
    hide = {"wgrad": [0.0, bwd["wgrad"], bwd["wgrad_narrow"]], "dgrad": [0.0, bwd["dgrad"], bwd["dgrad_narrow"]]}
    column = COLUMN_PARALLEL.get(framework, ())[:None if mlp_tp else 1]
    records = []
    for c in layer_comm:
        seconds = collective_seconds(gpu, c)
        records.append((c, seconds))
        own = [bwd.get("gemms", {}).get(f"{name}_{c.hides_behind}") for name in column]
        if c.hides_behind in hide and column and c.count == len(column) and all(own):
            # Megatron-LM overlaps each call with the GEMM of ITS column-parallel Linear only (one per block):
            # the input re-gather with that Linear's dgrad, the input-gradient all-reduce / reduce-scatter with
            # its wgrad (LinearWithGradAccumulationAndAsyncCommunication.backward)
            for full, narrow in own:
                per_layer[c.part] += overlapped_exposed(seconds / c.count, full, narrow)
        elif c.hides_behind in hide:
            hide[c.hides_behind][0] += seconds
        else:
            per_layer[c.part] += seconds
    per_layer["tp_comm"] += sum(overlapped_exposed(comm, gemms, narrow) for comm, gemms, narrow in hide.values())
    return per_layer, records


def layer_pass_seconds(spec, gpu, run, *, layer: int = 0) -> dict:
    """{"forward", "backward"} seconds of ONE layer (`layer`, 0-based) for one micro-batch of `run` (specs.run.Run:
    its micro-batch, sequence length and recipe, its layout's tp, sp and cp, recomputation and kernels) on one GPU,
    with its exposed TP comm: what Korthikanti et al. 2022, Table 4 measures for one 22B layer. The backward
    includes the recomputation (and a full recompute's forward collectives)."""
    shard = Shard.of(run, get_recipe(run.numerics.precision).name)
    narrow_sms = sms_beside_tp_comm(gpu, shard.tp, shard.cp, 1)
    [(_, fwd, bwd, rec)], _ = _layer_times(spec, gpu, shard, run, [(layer, 1)], narrow_sms=narrow_sms)
    total, _ = _layer_comm(spec, gpu, shard, run, bwd)
    _, records = _layer_comm(spec, gpu, shard, run.with_(recompute="none"), bwd)
    forward_comm = sum(seconds for c, seconds in records if c.name.endswith("_forward"))
    kernels = ("compute", "attention", "memory_bound", "overhead")
    forward = sum(fwd[k] for k in kernels) + forward_comm
    backward = sum(bwd[k] + rec[k] for k in kernels) + sum(total.values()) - forward_comm
    return {"forward": forward, "backward": backward}


def _layer_key(shard: Shard, run, narrow_sms: int | None, n_mtp: int) -> tuple:
    """What the kernel times of a layer and of the edges (`_layer_times`) depend on, for step_time's cache of one
    spec and gpu: the micro-batch's shard, the kernel settings that shape them, the recomputation, the expert
    layout, the SMs a TP collective leaves to the GEMMs and the multi-token-prediction modules."""
    k = run.kernels
    return (shard, k.flash, k.causal, k.framework, k.dropout, k.attention_kernel, k.compile, k.loss_upcast,
            run.levers.recompute, run.layout.ep, run.layout.etp, narrow_sms, n_mtp, run.finetune)


def _layer_times(spec, gpu, shard: Shard, run, layers: list[tuple[int, int]], *, narrow_sms: int | None = None,
                 cpu_op: float | None = None, n_mtp: int = 0):
    """([(count, forward, backward, recomputation)] seconds by part for each (representative layer, count) of
    `layers`, and the embedding and head kernels' seconds, for micro-batch `shard` as `run` runs it (its kernels,
    recomputation, ep and etp). The backward is also timed on `narrow_sms` SMs: what its GEMMs take while a TP
    collective holds the others. `cpu_op`: eager launches (see _time); `n_mtp`: multi-token-prediction modules."""
    k, ep, etp = run.kernels, run.layout.ep, run.layout.etp
    ak, recompute, a = k.attention_kernel, run.levers.recompute, shard.dtypes.a
    groups = []
    for layer, count in layers:
        lk = fp8_mod.layer_kernels(layer_kernels(spec, shard, k, layer=layer, ep=ep, etp=etp), shard.precision, a)
        lk = finetune_mod.frozen_layer_kernels(spec, shard, run.finetune, lk)     # LoRA/QLoRA (account/time/finetune.py)
        fwd, bwd = _time(gpu, lk["forward"], ak, cpu_op=cpu_op), _time(gpu, lk["backward"], ak, narrow_sms, cpu_op)
        kernels, weight = recompute_mod.recomputed_forward(lk["forward"], recompute, spec.n_layers)
        timed = _time(gpu, kernels, ak, cpu_op=cpu_op)
        rec = {key: v * weight for key, v in timed.items() if key not in ("gemms", "block")}
        if cpu_op is not None:
            rec["block"] = timed["block"].times(weight)
        groups.append((count, fwd, bwd, rec))
    edge = edge_kernels(spec, shard, k)
    if run.finetune.adapters:   # the frozen embedding, head and final norm: no weight gradients
        edge = {name: [x for x in ks if x.role != "wgrad"] for name, ks in edge.items()}
    if n_mtp:   # the multi-token-prediction modules: a layer like the last, the head again (account/time/mtp.py)
        lk = layer_kernels(spec, shard, k, layer=spec.n_layers - 1, ep=ep, etp=etp)
        edge.update(mtp_kernels(spec, n_mtp, fp8_mod.layer_kernels(lk, shard.precision, a), edge, shard))
    return groups, {name: _time(gpu, ks, ak, cpu_op=cpu_op) for name, ks in edge.items()}


def bottleneck(breakdown: dict, pp: int, micro_batches: int, interleave: int, setup: dict | None = None) -> str:
    """The largest part of the step in words, with its share and what would help given the flags in effect
    (`setup`: the step's settings, account.time.advice.bottleneck_advice)."""
    return bottleneck_advice(breakdown, dict(setup or {}, pp=pp, micro_batches=micro_batches, interleave=interleave))
