"""Which pipeline schedules exist: the divisibility rules of 1F1B and the interleaved schedule. Pure, no torch.

A layout is checked for validity before it is timed: `step` refuses an invalid one (exit 2) and `layout` never
searches one. The rules, with where each is enforced in Megatron-LM (github.com/NVIDIA/Megatron-LM):

- Every pipeline stage holds at least one layer: pp ≤ n_layers. With one chunk per stage (1F1B, Narayanan et al.
  2021 Sec. 2.2.1) the stages may be uneven (torch.distributed.pipelining and trainledger's `train --pp` balance
  them by FLOPs; Megatron-LM's --decoder-first/last-pipeline-num-layers); account.time.step then paces the pipeline
  by the fullest stage, ceil(n_layers / pp) layers.
- The interleaved schedule (v > 1 model chunks per GPU, Narayanan et al. 2021 Sec. 2.2.2) needs
  - more than one stage: pp ≥ 2 (megatron/training/arguments.py, validate_args: "when interleaved schedule is
    used, pipeline-model-parallel size should be greater than 1" with p2p overlap, greater than 2 without it and
    in older releases);
  - the same number of layers in every chunk: n_layers divisible by pp · v (validate_args: "number of layers of
    the model must be divisible pipeline model parallel size" and "number of layers per pipeline stage must be
    divisible number of layers per virtual pipeline stage"), where the embedding and the loss may each count as
    one layer of the split (--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split;
    Llama 3 405B's 126 layers on 16 stages, arXiv:2407.21783 Sec. 3.3.2: one layer fewer on the first and the
    last stage): n_layers + e divisible by pp · v for e in {0, 1, 2}; and never more chunks than layers,
    pp · v ≤ n_layers;
  - the micro-batches in whole rounds over the stages: micro_batches divisible by pp
    (megatron/core/pipeline_parallel/schedules.py, forward_backward_pipelining_with_interleaving: "number of
    microbatches ... is not divisible by pipeline-model-parallel-size ... when using interleaved schedule").
- Uneven chunks (`uneven_chunks`, `step --uneven-chunks`): Megatron-Core's flexible pipeline layout
  (--pipeline-model-parallel-layout, megatron/core/transformer/pipeline_parallel_layer_layout.py: each virtual
  stage lists its own layers, e.g. DeepSeek-V3's 61 layers, its MTP module and the loss over PP × VP) and
  NeMo Automodel's `layers_per_stage` (torch.distributed.pipelining stages of any size) lift the equal-chunk rule:
  every chunk holds at least one layer, pp · v ≤ n_layers; the other rules stay. The fullest stage still holds
  ceil(n_layers / pp) layers (a balanced split), and the largest chunk ceil(n_layers / (pp · v)).
"""

from __future__ import annotations

from trainledger.errors import TrainledgerError
from trainledger.account.counting.placement import check_positive_int


def schedule_problem(n_layers: int, pp: int, interleave: int, micro_batches: int,
                     uneven_chunks: bool = False) -> str | None:
    """Why (pp, interleave, micro_batches) is not a valid pipeline schedule for `n_layers` layers, or None if it is.
    `uneven_chunks`: the interleaved schedule's chunks may hold unequal numbers of layers (module docstring)."""
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


def _even_chunks(n_layers: int, chunks: int) -> bool:
    """Whether `n_layers` split into `chunks` equal model chunks, counting the embedding and the loss as a layer
    each where that helps (Megatron-LM's --account-for-embedding/loss-in-pipeline-split), never more chunks than layers."""
    return chunks <= n_layers and any((n_layers + extra) % chunks == 0 for extra in (0, 1, 2))


def check_schedule(n_layers: int, pp: int, interleave: int, micro_batches: int, uneven_chunks: bool = False) -> None:
    """Raise a TrainledgerError naming the flag when the schedule is invalid (`schedule_problem`)."""
    problem = schedule_problem(n_layers, pp, interleave, micro_batches, uneven_chunks)
    if problem:
        raise TrainledgerError(problem)


def even_chunks(n_layers: int, pp: int, interleave: int) -> bool:
    """Whether the interleaved schedule's pp · v chunks hold equal numbers of layers (always with one chunk per stage)."""
    return interleave == 1 or _even_chunks(n_layers, pp * interleave)


def chunk_share(n_layers: int, pp: int, interleave: int) -> float:
    """The largest model chunk's share of its stage's layers: 1/v when the layers split into equal chunks
    (`_even_chunks`), else ceil(n_layers / (pp·v)) / ceil(n_layers / pp) (a balanced uneven split).

    Each of the pp − 1 hops that fill and drain an interleaved pipeline waits for one chunk's forward or backward
    (Narayanan et al. 2021, Sec. 2.2.2: a bubble of (p − 1)/v stage-passes per step with equal chunks); with
    unequal chunks we charge every hop the largest chunk, an upper bound."""
    if even_chunks(n_layers, pp, interleave):
        return 1 / interleave
    return -(-n_layers // (pp * interleave)) / -(-n_layers // pp)


def published_interleave(n_layers: int, pp: int, interleave: int, micro_batches: int) -> tuple[int, bool]:
    """(interleave, uneven_chunks) to time a published run that used `interleave` chunks per GPU: its own VP, with
    uneven chunks when its layers do not split evenly (Megatron-LM refuses such a VP unless a custom layout is given,
    so a run that printed one ran a layout: Megatron Bridge's DeepSeek-V3 recipes set
    --pipeline-model-parallel-layout, megatron/bridge/recipes/deepseek/deepseek_v3.py
    set_deepseek_v3_pipeline_model_parallel_layout; NeMo Automodel sets layers_per_stage); (1, False) when no
    interleaved schedule can run it (fewer layers than chunks, or micro-batches not a multiple of pp)."""
    if schedule_problem(n_layers, pp, interleave, micro_batches) is None:
        return interleave, False
    if schedule_problem(n_layers, pp, interleave, micro_batches, uneven_chunks=True) is None:
        return interleave, True
    return 1, False


def valid_interleaves(n_layers: int, pp: int, micro_batches: int, largest: int) -> list[int]:
    """Every interleave v ≤ `largest` (chunks per GPU) with a valid schedule, 1 first (when pp itself is valid)."""
    return [v for v in range(1, largest + 1) if schedule_problem(n_layers, pp, v, micro_batches) is None]


# DeepSeek-V3's bidirectional pipeline (arXiv:2412.19437, Sec. 3.2.1 and Table 2): micro-batches enter from both
# ends, each GPU holds two stages (the first and the last, and so on), and a forward chunk of one direction runs
# beside a backward chunk of the other. "DualPipe only requires that the pipeline stages and micro-batches be
# divisible by 2"; it keeps two copies of the parameters and PP + 1 micro-batches of activations. Its bubble (Table
# 2): (PP/2 − 1)(F&B + B − 3W), against 1F1B's (PP − 1)(F + B); F, B, W: the forward, the full backward and the
# weight-gradient part of one chunk, F&B the pair run together.
SCHEDULES = ("1f1b", "dualpipe")


def dualpipe_problem(pp: int, interleave: int, micro_batches: int) -> str | None:
    """Why DualPipe cannot run (pp, interleave, micro_batches), or None."""
    if interleave != 1:
        return f"--schedule dualpipe places two stages per GPU itself: use --interleave 1, got {interleave}"
    if pp < 2 or pp % 2 or micro_batches % 2:
        return (f"--schedule dualpipe needs an even --pp (2 or more) and an even number of micro-batches "
                f"(DeepSeek-V3 report, Sec. 3.2.1), got --pp {pp} and {micro_batches} micro-batches")
    return None


def dualpipe_bubble_seconds(pp: int, pair_seconds: float, backward_seconds: float, weight_grad_seconds: float) -> float:
    """(PP/2 − 1)(F&B + B − 3W) of Table 2, with F&B = `pair_seconds`: one micro-batch's forward and backward on a
    stage (run together they hide each other's communication, not each other's computation)."""
    return (pp / 2 - 1) * max(0.0, pair_seconds + backward_seconds - 3 * weight_grad_seconds)


def derive_layout(num_gpus: int | None, tp: int, pp: int, cp: int, dp: int | None, batch_size: int,
                  global_batch_size: int | None) -> tuple[int, int, int, int]:
    """(num_gpus, dp, global_batch_size, micro_batches) with dp = num_gpus/(tp·pp·cp) when not given; errors name the flag."""
    for value, flag in ((tp, "--tp"), (pp, "--pp"), (cp, "--cp"), (batch_size, "--batch-size")):
        check_positive_int(value, flag)
    model = tp * pp * cp
    if dp is None:
        num_gpus = num_gpus if num_gpus is not None else model
        if num_gpus % model:
            raise TrainledgerError(f"--num-gpus {num_gpus} is not a multiple of tp·pp·cp = {tp}·{pp}·{cp} = {model}")
        dp = num_gpus // model
    else:
        check_positive_int(dp, "--dp")
        if num_gpus is not None and num_gpus != dp * model:
            raise TrainledgerError(f"--dp {dp} does not match --num-gpus {num_gpus}: dp·tp·pp·cp = {dp * model}; "
                                   f"use --dp {num_gpus // model if num_gpus % model == 0 else '(none fits)'} or leave --dp out")
        num_gpus = dp * model
    per_step = batch_size * dp
    global_batch_size = global_batch_size if global_batch_size is not None else per_step
    check_positive_int(global_batch_size, "--global-batch-size")
    if global_batch_size % per_step:
        raise TrainledgerError(f"--global-batch-size {global_batch_size} must be a multiple of --batch-size × dp = "
                               f"{batch_size} × {dp} = {per_step}")
    return num_gpus, dp, global_batch_size, global_batch_size // per_step
