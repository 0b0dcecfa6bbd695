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
- Megatron's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split (`split_problem`): the
  embedding and the loss count as a layer each, n_layers + extras must divide into pp · v equal chunks, and a chunk
  may then hold the embedding or the loss alone (more chunks than transformer layers: Llama 3.1 405B's 126 layers
  over PP 16 × VP 8; Llama 3, arXiv:2407.21783 Sec. 3.3.2: "the first model chunk on the first stage has only the
  embedding, and the last model chunk on the last stage has only output projection and loss calculation"). The
  first stage holds one transformer layer fewer, the last one fewer (`pipeline_stage_layers`), and the step is
  paced by the slowest of the first (its layers and the embedding), a middle (all its layers) and the last stage
  (its layers, the head and the loss).
"""

from __future__ import annotations

# the rules are checked with the run (specs/run_checks.py), where these functions now live
from trainledger.specs.run_checks import (_even_chunks, check_schedule, derive_layout, dualpipe_problem,  # noqa: F401
                                          even_chunks, pipeline_stage_layers, schedule_problem, split_problem)



def chunk_share(n_layers: int, pp: int, interleave: int, extras: int = 0) -> float:
    """The largest model chunk's share of its stage's layers: 1/v when the layers (with `extras` of the embedding and
    the loss counted in the split: the units) split into equal chunks (`even_chunks`), else ceil(n_layers / (pp·v)) /
    ceil(n_layers / pp) (a balanced uneven split).

    Each of the pp − 1 hops that fill and drain an interleaved pipeline waits for one chunk's forward or backward
    (Narayanan et al. 2021, Sec. 2.2.2: a bubble of (p − 1)/v stage-passes per step with equal chunks); with
    unequal chunks we charge every hop the largest chunk, an upper bound."""
    if even_chunks(n_layers, pp, interleave, extras):
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
from trainledger.specs.run import SCHEDULES  # noqa: E402,F401 (the run's vocabulary)


def dualpipe_bubble_seconds(pp: int, pair_seconds: float, backward_seconds: float, weight_grad_seconds: float) -> float:
    """(PP/2 − 1)(F&B + B − 3W) of Table 2, with F&B = `pair_seconds`: one micro-batch's forward and backward on a
    stage (run together they hide each other's communication, not each other's computation)."""
    return (pp / 2 - 1) * max(0.0, pair_seconds + backward_seconds - 3 * weight_grad_seconds)


