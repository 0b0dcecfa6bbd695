"""What a run needs from its model and hardware: the checks and defaults that a Run alone cannot know. Pure, no torch.

specs/run.py's groups check each value on its own (a positive --tp, a known --precision). What depends on the model
or the machine is here, and `resolve(model, hardware, run)` applies all of it at once, so the accounting
(account/) and every command receive a run that is whole and valid:
- the layout against the model: tp divides the heads, pp at most the layers (`check_parallel`), ep and etp against
  the experts and the grid (`check_ep`), the pipeline schedule's divisibility rules (`schedule_problem`, with the
  sources of each rule; with Megatron's --account-for-embedding/loss-in-pipeline-split, `split_problem` and
  `pipeline_stage_layers`), DualPipe's (`dualpipe_problem`), cp dividing the sequence;
- the layout against the GPU count: dp = num_gpus / (tp · pp · cp) and the micro-batches per step (`derive_layout`);
- defaults that follow from the rest: the sequence length (the model's pre-training context), the precision recipe
  (amp-bf16; fp32 on a device without a bf16 peak), the ZeRO stage a user of the layout runs (`default_zero`), the
  pipeline-send overlap (`pp_overlap_default`), whether the multi-token-prediction modules train (`mtp_modules`),
  the all-to-all's overlap and dispatcher (DualPipe's with --schedule dualpipe: `experts_defaults`) and the expert
  tensor parallelism (etp = tp).
Every error names the flag a user typed. account/ modules re-export these functions where they were first written.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainledger.errors import TrainledgerError
from trainledger.specs.model import TransformerSpec

ZERO_STAGES = (0, 1, 2, 3)


def check_positive_int(value, flag: str) -> int:
    """`value` if it is a positive integer, else a TrainledgerError naming the flag."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TrainledgerError(f"{flag} must be a positive integer, got {value!r}")
    return value


def check_parallel(spec, tp: int, pp: int, dp: int, zero: int) -> None:
    """Validate --tp, --pp, --dp, --zero against the model; a TrainledgerError naming the flag otherwise."""
    for value, flag in ((tp, "--tp"), (pp, "--pp"), (dp, "--dp")):
        check_positive_int(value, flag)
    if zero not in ZERO_STAGES:
        raise TrainledgerError(f"--zero must be one of 0, 1, 2, 3, got {zero!r}")
    check_split(spec, tp, pp)


def check_split(spec, tp: int, pp: int) -> None:
    """Whether `spec` splits over --tp (its query and key/value heads: Megatron-LM shards attention by heads,
    Shoeybi et al. 2019, Sec. 3) and --pp (at least one layer per stage); checked before the GPU count is
    (resolve), so a tp the model cannot take is named as the cause, not the --num-gpus it does not divide."""
    if isinstance(spec, TransformerSpec):
        if spec.n_heads % tp or spec.kv_heads % tp:
            raise TrainledgerError(f"--tp {tp} must divide n_heads={spec.n_heads} and n_kv_heads={spec.kv_heads} of "
                                   f"'{spec.name}'", "--tp")
        if pp > spec.n_layers:
            raise TrainledgerError(f"--pp {pp} must be at most n_layers={spec.n_layers} of '{spec.name}'", "--pp")
    elif spec is not None and (tp > 1 or pp > 1):
        raise TrainledgerError(f"--tp/--pp need a transformer; '{spec.name}' is a {spec.kind}", "--tp")


def check_ep(spec, ep, dp: int | None = None, tp: int = 1, cp: int = 1, etp=None, sp: bool | None = None,
             framework: str | None = None) -> int:
    """`ep` if it is a valid expert-parallel size for `spec` on a layout tp·cp·dp (and `etp` a valid expert
    tensor-parallel size, default tp); else a one-line error naming the flag.

    ep must be a positive integer; above 1 it needs a mixture-of-experts model whose n_experts it divides. Folded
    (module docstring): etp·ep must divide tp·cp·dp; etp must divide the experts' d_ff; an etp other than tp needs
    sequence parallelism when tp > 1 (Megatron-LM arguments.py: "When using MoE and tensor parallelism, sequence
    parallelism must be used") and Megatron-Core (`framework` "megatron"; the other step models give experts the
    attention's tp). `dp` None: no check against the layout (the count alone).
    """
    if isinstance(ep, bool) or not isinstance(ep, int) or ep <= 0:
        raise TrainledgerError(f"--ep must be a positive integer, got {ep!r}")
    if etp is not None and (isinstance(etp, bool) or not isinstance(etp, int) or etp <= 0):
        raise TrainledgerError(f"--etp must be a positive integer, got {etp!r}")
    moe = isinstance(spec, TransformerSpec) and spec.is_moe
    if ep > 1 or (etp is not None and etp != tp):
        if not moe:
            what = f"'{spec.name}' has no experts" if spec is not None else "--params gives no experts"
            flag = f"--ep {ep}" if ep > 1 else f"--etp {etp}"
            raise TrainledgerError(f"{flag} needs a mixture-of-experts model; {what}")
    if ep > 1 and spec.n_experts % ep:
        raise TrainledgerError(f"--ep {ep} must divide the {spec.n_experts} experts of '{spec.name}' "
                               f"(each GPU holds n_experts/ep whole experts)")
    if etp is not None and etp != tp:
        if framework is not None and framework != "megatron":
            raise TrainledgerError(f"--etp {etp} differs from --tp {tp}: expert tensor parallelism of its own is "
                                   f"modelled for --framework megatron only (Megatron-Core's expert grid)")
        if spec.d_ff % etp:
            raise TrainledgerError(f"--etp {etp} must divide the experts' d_ff={spec.d_ff} of '{spec.name}'")
        if tp > 1 and sp is False:
            raise TrainledgerError(f"--etp {etp} with --tp {tp} needs sequence parallelism (--sp): Megatron-LM "
                                   f"requires it for MoE with tensor parallelism")
    e = tp if etp is None else etp
    if dp is not None and (tp * cp * dp) % (e * ep):
        raise TrainledgerError(f"--ep {ep} × --etp {e} must divide tp·cp·dp = {tp}·{cp}·{dp} = {tp * cp * dp} "
                               f"(Megatron-Core folds the expert grid ETP × EP × EDP over attention's TP × CP × DP)")
    return ep


def derive_layout(num_gpus: int | None, tp: int, pp: int, cp: int, dp: int | None, batch_size: int,
                  global_batch_size: int | None) -> tuple[int, int, int, int]:
    """(num_gpus, dp, global_batch_size, micro_batches) with dp = num_gpus/(tp·pp·cp) when not given; errors name the flag."""
    for value, flag in ((tp, "--tp"), (pp, "--pp"), (cp, "--cp"), (batch_size, "--batch-size")):
        check_positive_int(value, flag)
    model = tp * pp * cp
    if dp is None:
        num_gpus = num_gpus if num_gpus is not None else model
        if num_gpus % model:
            raise TrainledgerError(f"--num-gpus {num_gpus} is not a multiple of tp·pp·cp = {tp}·{pp}·{cp} = {model}",
                                   "--num-gpus")
        dp = num_gpus // model
    else:
        check_positive_int(dp, "--dp")
        if num_gpus is not None and num_gpus != dp * model:
            raise TrainledgerError(f"--dp {dp} does not match --num-gpus {num_gpus}: dp·tp·pp·cp = {dp * model}; "
                                   f"use --dp {num_gpus // model if num_gpus % model == 0 else '(none fits)'} or leave --dp out",
                                   "--dp")
        num_gpus = dp * model
    per_step = batch_size * dp
    global_batch_size = global_batch_size if global_batch_size is not None else per_step
    check_positive_int(global_batch_size, "--global-batch-size")
    if global_batch_size % per_step:
        raise TrainledgerError(f"--global-batch-size {global_batch_size} must be a multiple of --batch-size × dp = "
                               f"{batch_size} × {dp} = {per_step}")
    return num_gpus, dp, global_batch_size, global_batch_size // per_step


def schedule_problem(n_layers: int, pp: int, interleave: int, micro_batches: int,
                     uneven_chunks: bool = False, extras: int = 0) -> str | None:
    """Why (pp, interleave, micro_batches) is not a valid pipeline schedule for `n_layers` layers, or None if it is.
    `uneven_chunks`: the interleaved schedule's chunks may hold unequal numbers of layers (module docstring);
    `extras`: how many of the embedding and the loss count as layers of the split (`split_problem`)."""
    if extras:
        return split_problem(n_layers, pp, interleave, micro_batches, uneven_chunks, extras)
    if pp > n_layers:
        return f"--pp {pp} stages need at least one layer each, but the model has {n_layers} layers"
    if interleave == 1:
        return None
    if pp < 2:
        return f"--interleave {interleave} needs pipeline stages to interleave over (--pp 2 or more), got --pp {pp}"
    if uneven_chunks and pp * interleave > n_layers:
        return (f"--pp {pp} × --interleave {interleave} = {pp * interleave} model chunks need a layer each, but the "
                f"model has {n_layers} layers; with --pp {pp} use --interleave {n_layers // pp} or less")
    if not uneven_chunks and not _even_chunks(n_layers, pp * interleave):
        valid = [1] + [v for v in range(2, n_layers // pp + 1) if _even_chunks(n_layers, pp * v)]
        uneven = (" (or add --uneven-chunks: chunks of unequal size, as Megatron-Core's "
                  "--pipeline-model-parallel-layout lays them)" if pp * interleave <= n_layers else "")
        return (f"--pp {pp} × --interleave {interleave} = {pp * interleave} model chunks, but the model's {n_layers} layers "
                f"{'are fewer' if pp * interleave > n_layers else 'do not divide into equal chunks'} (Megatron-LM's "
                f"interleaved schedule); with --pp {pp} use --interleave {' or '.join(map(str, valid))}{uneven}")
    if micro_batches % pp:
        return (f"--interleave {interleave} needs a number of micro-batches that is a multiple of --pp {pp} "
                f"(Megatron-LM's interleaved schedule), got {micro_batches} = global batch / (dp × --batch-size)")
    return None


SPLIT_FLAGS = "--account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split"


def split_problem(n_layers: int, pp: int, interleave: int, micro_batches: int, uneven_chunks: bool,
                  extras: int) -> str | None:
    """schedule_problem with `extras` (1 or 2) of the embedding and the loss counted as layers of the split, as
    Megatron-Core's TransformerConfig checks it (megatron/core/transformer/transformer_config.py: n_layers + extras
    a multiple of pp · vp; transformer_block.py get_num_layers_to_build: the split is even, the first stage builds
    one layer fewer for the embedding, the last one fewer for the loss): every chunk holds one of the n_layers + extras
    units or more, so a chunk may hold the embedding or the loss alone (Llama 3.1 405B: 126 + 2 over PP 16 × VP 8)."""
    units, chunks = n_layers + extras, pp * interleave
    if pp < 2:
        return f"{SPLIT_FLAGS} place the embedding or the loss in a pipeline split: they need --pp 2 or more"
    if uneven_chunks:
        return (f"{SPLIT_FLAGS} split the layers evenly; --uneven-chunks lays each chunk itself (Megatron-Core's "
                "--pipeline-model-parallel-layout, which Megatron does not combine with them): use one or the other")
    if units % chunks:
        valid = [v for v in range(1, units // pp + 1) if units % (pp * v) == 0]
        return (f"--pp {pp} × --interleave {interleave} = {chunks} model chunks must divide the {n_layers} layers + "
                f"{extras} ({'the embedding and the loss' if extras == 2 else 'the embedding or the loss'}) = {units} "
                f"units of the split ({SPLIT_FLAGS}, Megatron-Core); with --pp {pp} use --interleave "
                f"{' or '.join(map(str, valid)) or '(none)'}")
    if interleave > 1 and micro_batches % pp:
        return (f"--interleave {interleave} needs a number of micro-batches that is a multiple of --pp {pp} "
                f"(Megatron-LM's interleaved schedule), got {micro_batches} = global batch / (dp × --batch-size)")
    return None


def pipeline_stage_layers(n_layers: int, pp: int, embedding: bool = False, loss: bool = False) -> dict:
    """Transformer layers on the first, a middle and the last pipeline stage, and the most any stage holds.

    Without Megatron's split flags every stage is paced as ceil(n_layers / pp) layers (the embedding beside the first
    stage's, the head and loss beside the last's). With --account-for-embedding-in-pipeline-split (`embedding`) and
    --account-for-loss-in-pipeline-split (`loss`) the embedding and the output layer with the loss count as a layer
    each: (n_layers + extras) / pp units per stage, the first stage one transformer layer fewer, the last one fewer
    (megatron/core/transformer/transformer_block.py, get_num_layers_to_build)."""
    if pp == 1:
        return {"first": n_layers, "middle": n_layers, "last": n_layers, "most": n_layers}
    per = -(-(n_layers + int(embedding) + int(loss)) // pp)
    return {"first": per - int(embedding), "middle": per, "last": per - int(loss), "most": per}


def _even_chunks(n_layers: int, chunks: int) -> bool:
    """Whether `n_layers` split into `chunks` equal model chunks, counting the embedding and the loss as a layer
    each where that helps (Megatron-LM's --account-for-embedding/loss-in-pipeline-split), never more chunks than layers."""
    return chunks <= n_layers and any((n_layers + extra) % chunks == 0 for extra in (0, 1, 2))


def check_schedule(n_layers: int, pp: int, interleave: int, micro_batches: int, uneven_chunks: bool = False,
                   extras: int = 0) -> None:
    """Raise a TrainledgerError naming the flag when the schedule is invalid (`schedule_problem`)."""
    problem = schedule_problem(n_layers, pp, interleave, micro_batches, uneven_chunks, extras)
    if problem:
        raise TrainledgerError(problem)


def even_chunks(n_layers: int, pp: int, interleave: int, extras: int = 0) -> bool:
    """Whether the interleaved schedule's pp · v chunks hold equal numbers of layers (always with one chunk per stage;
    with `extras` of the embedding and loss in the split, of n_layers + extras units)."""
    if extras:
        return (n_layers + extras) % (pp * interleave) == 0
    return interleave == 1 or _even_chunks(n_layers, pp * interleave)


def dualpipe_problem(pp: int, interleave: int, micro_batches: int) -> str | None:
    """Why DualPipe cannot run (pp, interleave, micro_batches), or None."""
    if interleave != 1:
        return f"--schedule dualpipe places two stages per GPU itself: use --interleave 1, got {interleave}"
    if pp < 2 or pp % 2 or micro_batches % 2:
        return (f"--schedule dualpipe needs an even --pp (2 or more) and an even number of micro-batches "
                f"(DeepSeek-V3 report, Sec. 3.2.1), got --pp {pp} and {micro_batches} micro-batches")
    return None


def default_zero(*, dp: int, pp: int, framework: str) -> tuple[int, str]:
    """(ZeRO stage, why) a user of this layout runs when --zero is not given.

    dp = 1: nothing to shard (0). Megatron-LM: its distributed optimizer (ZeRO-1). Pipelining: ZeRO-1 — Megatron's
    distributed optimizer; torchtitan's FSDP under torch.distributed.pipelining gathers once and reduces once
    per step (no per-micro-batch re-gathering), ZeRO-1's traffic. Otherwise FSDP2 full shard (ZeRO-3),
    torchtitan's default data parallelism.
    """
    if dp == 1:
        return 0, "dp 1: nothing to shard"
    if framework == "megatron":
        return 1, "Megatron-LM's distributed optimizer shards the optimizer states (ZeRO-1)"
    if pp > 1:
        return 1, ("with pipelining the parameters are gathered once per step, not per micro-batch (Megatron-LM's "
                   "distributed optimizer; FSDP under torch.distributed.pipelining): ZeRO-1's traffic")
    return 3, "FSDP2 full shard, torchtitan's default data parallelism"


def pp_overlap_default(framework: str, pp: int, interleave: int) -> bool:
    """Whether a framework runs the pipeline's sends beside computation by default: Megatron-LM's interleaved
    schedule does (`overlap_p2p_comm`, on unless --no-overlap-p2p-communication, since Megatron-LM's 2023 code;
    Megatron Bridge's recipes keep it); its plain 1F1B and the other frameworks' schedules wait for each send."""
    return framework == "megatron" and pp > 1 and interleave > 1


def mtp_modules(spec, mtp: bool | None, framework: str = "megatron") -> int:
    """How many multi-token-prediction modules a step trains: None, as `framework` runs the model (Megatron-Core
    trains the spec's modules, mtp_num_layers; our torch Transformer and torchtitan's do not build them); False
    none; True the spec's. True where there are none, or with a framework that has none, is an error naming --mtp."""
    if mtp and not spec.n_mtp_layers:
        raise TrainledgerError(f"--mtp needs a model with multi-token-prediction modules; {spec.name} has none "
                               "(n_mtp_layers 0)", "--mtp")
    if mtp and framework != "megatron":
        raise TrainledgerError(f"--mtp is modelled as Megatron-Core trains it (--framework megatron); the "
                               f"{framework} model does not build the multi-token-prediction modules", "--mtp")
    if mtp is None:
        return spec.n_mtp_layers if framework == "megatron" else 0
    return spec.n_mtp_layers if mtp else 0


@dataclass(frozen=True)
class ParameterCount:
    """A model known only by its parameter count (`memory --params`, `fit`): model states only, no activations."""

    n_params: float
    name: str = "params"
    kind = "params"

    def __post_init__(self):
        if not (isinstance(self.n_params, (int, float)) and not isinstance(self.n_params, bool)
                and self.n_params > 0 and self.n_params == self.n_params and self.n_params != float("inf")):
            raise TrainledgerError(f"--params must be positive, got {self.n_params!r}", "--params")


@dataclass(frozen=True)
class Resolved:
    """A run made whole for its model and hardware: every default decided, every check passed (`resolve`)."""

    hardware: object           # specs.run.Hardware with num_gpus filled in
    run: object                # specs.run.Run with seq_len, precision, dp, zero, global batch, etp, mtp, pp_overlap
    micro_batches: int         # micro-batches per optimizer step on each data-parallel rank


def split_extras(layout) -> int:
    """How many of the embedding and the loss a layout counts as layers of its pipeline split (0, 1 or 2)."""
    return int(layout.account_for_embedding_in_pipeline_split) + int(layout.account_for_loss_in_pipeline_split)


def experts_defaults(experts, schedule: str):
    """`experts` (specs.run.Experts) with the all-to-all's overlap and dispatcher decided: DualPipe's by default with
    --schedule dualpipe (DeepSeek-V3, arXiv:2412.19437: Sec. 3.2.1, each forward chunk paired with a backward chunk of
    the other direction "hides most of the communication", so the all-to-all is hidden, overlap 1; Sec. 3.2.2, the
    token-based dispatch, each token over IB once per node then over NVLink: deepep), else exposed with Megatron's
    alltoall dispatcher. What the user gave is kept."""
    dual = schedule == "dualpipe"
    overlap = experts.overlap if experts.overlap is not None else (1.0 if dual else 0.0)
    dispatcher = experts.dispatcher if experts.dispatcher is not None else ("deepep" if dual else "alltoall")
    return replace(experts, overlap=overlap, dispatcher=dispatcher)


def default_precision(gpu) -> str:
    """The recipe a run gets when --precision is not given: amp-bf16; amp-fp16 on a GPU without bf16 but with fp16
    tensor cores (Turing, Volta: PyTorch AMP's fp16 with a grad scaler, what runs there); fp32 on a device without
    either (a CPU)."""
    peaks = getattr(gpu, "peak_flops_per_s", {})
    if "bf16" in peaks:
        return "amp-bf16"
    if "fp16" in peaks and getattr(gpu, "vendor", "") in ("NVIDIA", "AMD"):
        return "amp-fp16"
    return "fp32"


def check_finetune(model, finetune):
    """`finetune` (specs.run.Finetune) for `model`, its base storage decided (qlora: nf4-dq): LoRA needs the model's
    Linears (not a bare parameter count), and a rank above the model width is no low-rank update (Hu et al. 2021:
    r << min(d_in, d_out))."""
    if not finetune.adapters:
        return replace(finetune, quantize=finetune.base_storage)
    if not isinstance(model, TransformerSpec):
        raise TrainledgerError(f"--finetune {finetune.method} adapts the model's Linears: give --model (or --config "
                               "with [model] name), not a parameter count", "--finetune")
    if finetune.lora_rank > model.d_model:
        raise TrainledgerError(f"--lora-rank {finetune.lora_rank} is above the model width d_model = {model.d_model}: "
                               f"a LoRA rank is at most {model.d_model} (usually 8 to 64)", "--lora-rank")
    return replace(finetune, quantize=finetune.base_storage)


def check_levers(run, micro_batches: int) -> None:
    """The memory levers' own conditions: the optimizer step in backward frees each gradient as it is made, so there
    is nothing to accumulate (torchtune refuses optimizer_in_bwd with gradient_accumulation_steps > 1)."""
    if run.levers.optimizer_in_backward and micro_batches > 1:
        raise TrainledgerError(f"--optimizer-in-backward steps on each micro-batch's gradients; this run accumulates "
                               f"{micro_batches} micro-batches per step (--global-batch-size): make it one micro-batch "
                               "per GPU, or drop --optimizer-in-backward", "--optimizer-in-backward")


def resolve(model, hardware, run) -> Resolved:
    """`run` on `hardware` for `model` with every default filled in and every check of the module docstring passed.

    `model`: a TransformerSpec, a CruncherSpec or a ParameterCount; `hardware`: specs.run.Hardware (its num_gpus may
    be None: tp · pp · cp · dp). Idempotent: resolving a resolved run changes nothing."""
    b, lay, k = run.batch, run.layout, run.kernels
    transformer = isinstance(model, TransformerSpec)
    seq_len = b.seq_len
    if seq_len is None and transformer:
        seq_len = model.default_seq_len
    precision = run.numerics.precision if run.numerics.precision is not None else default_precision(hardware.gpu)
    spec = model if not isinstance(model, ParameterCount) else None
    for value, flag in ((lay.tp, "--tp"), (lay.pp, "--pp")):
        check_positive_int(value, flag)
    check_split(spec, lay.tp, lay.pp)          # the model's own limit first: the cause, not the GPU count it misses
    num_gpus, dp, global_batch, micro_batches = derive_layout(hardware.num_gpus, lay.tp, lay.pp, lay.cp, lay.dp,
                                                              b.batch_size, b.global_batch_size)
    zero = lay.zero if lay.zero is not None else default_zero(dp=dp, pp=lay.pp, framework=k.framework)[0]
    check_parallel(spec, lay.tp, lay.pp, dp, zero)
    check_ep(spec, lay.ep, dp, lay.tp, lay.cp, lay.etp, lay.sp, k.framework)
    mtp, pp_overlap = k.mtp, k.pp_overlap
    if transformer:
        check_schedule(model.n_layers, lay.pp, lay.interleave, micro_batches, lay.uneven_chunks, split_extras(lay))
        mtp = mtp_modules(model, k.mtp, k.framework) > 0
    if lay.schedule == "dualpipe" and dualpipe_problem(lay.pp, lay.interleave, micro_batches):
        raise TrainledgerError(dualpipe_problem(lay.pp, lay.interleave, micro_batches), "--schedule")
    if seq_len is not None and seq_len % lay.cp:
        raise TrainledgerError(f"--cp {lay.cp} must divide --seq-len {seq_len}", "--cp")
    if lay.fsdp.replicate > 1 and (zero != 3 or dp == 1):
        raise TrainledgerError(f"--dp-replicate {lay.fsdp.replicate} needs --zero 3 and --dp > 1 (HSDP shards inside "
                               "each replica group)", "--dp-replicate")
    if pp_overlap is None:
        pp_overlap = pp_overlap_default(k.framework, lay.pp, lay.interleave)
    check_levers(run, micro_batches)
    resolved = replace(run, batch=replace(b, seq_len=seq_len, global_batch_size=global_batch),
                       finetune=check_finetune(model, run.finetune),
                       numerics=replace(run.numerics, precision=precision),
                       layout=replace(lay, dp=dp, zero=zero, etp=lay.tp if lay.etp is None else lay.etp,
                                      experts=experts_defaults(lay.experts, lay.schedule)),
                       kernels=replace(k, mtp=bool(mtp) if mtp is not None else False, pp_overlap=pp_overlap))
    return Resolved(replace(hardware, num_gpus=num_gpus), resolved, micro_batches)
