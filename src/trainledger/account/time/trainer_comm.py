"""Bytes one rank of `trainledger train` sends in one step: account.time.comm's "torch" style, for one pipeline stage.

Pure Python. Starts from `account.time.comm.step_collectives(style="torch")` and makes it exact for the rank at
hand (the trainer compares it with what it measured each step):
- pipeline point-to-point: a stage sends its activations forward unless it is the last, and input
  gradients backward unless it is the first (one message of a micro-batch's hidden states each);
  `step_collectives` gives the busiest (middle) stage, which does both;
- the tied embedding's gradient all-reduce between the first and last stage involves those two only;
- FSDP2 under gradient accumulation: the trainer turns gradient sync off for all but the last micro-batch
  (`set_requires_gradient_sync`), so gradients are reduce-scattered once per step; and FSDP2 does not
  reshard the root module after forward (torch/distributed/fsdp/_fully_shard/_fsdp_state.py: "For the root,
  do not reshard after forward"), so the embeddings, the untied head and the final norm — the parameters
  outside the blocks — are not all-gathered again for backward;
- tensor parallelism of the embedding and the head (train/tensor_parallel.py), which `step_collectives`
  leaves out: the vocabulary-split embedding's output is all-reduced in forward; the head's input gradient is
  all-reduced in backward (without SP), or its input all-gathered in forward and its gradient
  reduce-scattered in backward (SP), where the gradient of the embedding's output, split along the
  sequence before the first block, is also all-gathered; the vocabulary-parallel cross-entropy all-reduces
  three fp32 values per token (the max logit, the sum of exponentials, the target's logit; Megatron-LM's
  `vocab_parallel_cross_entropy` does the same three); under SP the norm weights' gradients are partial sums
  over the sequence shards and are all-reduced once per step;
- payload dtypes under autocast (amp-bf16, amp-fp16: fp32 weights): PyTorch's autocast casts matmul
  outputs to the low precision, but the residual stream, the norms' outputs and the embeddings stay fp32.
  So the row-parallel outputs (TP forward all-reduce, SP forward reduce-scatter) and their gradients (SP
  backward all-gather) travel in 16 bits, and everything else that carries activations — the column-parallel
  inputs' gradients, SP's forward all-gathers of norm outputs, the pipeline's hidden states and their
  gradients, the embedding and head collectives — in fp32 (measured with `measure --comm`: Megatron-LM,
  whose style assumes 16-bit activations throughout, keeps its residual stream in bf16).
"""

from __future__ import annotations

from trainledger.account.counting.experts import routed_expert_params
from trainledger.account.time.comm import Collective, step_collectives
from trainledger.account.time.expert_parallel import CALLS_BACKWARD, CALLS_FORWARD, dispatch_bytes
from trainledger.account.time.shard import Shard
from trainledger.account.counting.placement import params_per_gpu
from trainledger.account.counting.params import norm_params, norm_params_per_layer, param_counts
from trainledger.specs.dtypes import bytes_per_element
from trainledger.specs.recipes import get_recipe

PARTS = ("tp_comm", "cp_comm", "pp_comm", "dp_comm")
# collectives whose payload is the fp32 residual stream (or its gradient) under autocast
FP32_UNDER_AUTOCAST = ("tp_allreduce_backward", "sp_allgather_forward", "sp_reducescatter_backward", "pp_send_recv",
                       "tp_embedding_allreduce", "tp_head_allreduce_backward", "sp_embedding_split_allgather_backward",
                       "sp_head_allgather_forward", "sp_head_reducescatter_backward")


def trainer_bytes_sent(spec, run, *, micro_batches: int = 1, pp_rank: int = 0, stage_blocks: int | None = None) -> dict:
    """{part: bytes} this rank sends in one step of `run` (specs.run.Run: the trainer's micro-batch, sequence
    length and recipe; its layout's tp, sp, pp, dp (None: 1), zero (None: 0) and ep), plus "total". The step runs
    `micro_batches` micro-batches; `pp_rank` is this rank's pipeline stage and `stage_blocks` the blocks on it
    (default: ceil(n_layers / pp)). `ep`: expert parallelism (train/expert_parallel.py; tp = pp = 1), whose experts
    data parallelism leaves alone: an "ep_comm" part (`expert_parallel_bytes`)."""
    lay, b, precision = run.layout, run.batch, run.numerics.precision
    batch_size, seq_len = b.batch_size, b.seq_len
    tp, sp, pp, dp, ep = lay.tp, lay.sp, lay.pp, lay.dp or 1, lay.ep
    first, last = pp_rank == 0, pp_rank == pp - 1
    blocks = stage_blocks if stage_blocks is not None else -(-spec.n_layers // pp)
    stage_root = _outside_blocks(spec, tp, first, last) if pp > 1 else _outside_blocks(spec, tp)
    stage_params = blocks * _block_params(spec) / tp + stage_root if pp > 1 else None
    whole = params_per_gpu(spec, tp, pp)["n_params_per_gpu"]
    if ep > 1:                 # DDP / FSDP2 hold, gather and reduce only the dense parameters
        whole -= routed_expert_params(spec)
        stage_params = whole
    collectives = step_collectives(spec, Shard(batch_size, seq_len, precision, tp, sp), run, style="torch",
                                   micro_batches=micro_batches, layers_per_stage=blocks if pp > 1 else None,
                                   params_per_gpu=stage_params)
    if tp > 1:
        collectives += _vocab_parallel(spec, batch_size * seq_len, micro_batches, precision, tp, sp)
    recipe = get_recipe(precision)
    low = recipe.activation_dtype in ("bf16", "fp16")
    widen = 2.0 if low and recipe.params_bytes_per_param == 4 else 1.0      # autocast: fp32 residual stream
    parts = dict.fromkeys(PARTS, 0.0)
    for c in collectives:
        sent = c.bytes_per_step * (widen if c.name in FP32_UNDER_AUTOCAST else 1.0)
        if c.name == "pp_send_recv":
            sent *= ((0 if last else 1) + (0 if first else 1)) / 2
        elif c.name == "pp_tied_embedding_allreduce" and not (first or last):
            sent = 0.0
        elif c.name == "fsdp_grad_reducescatter":
            sent = c.bytes_per_call
        elif c.name == "fsdp_param_allgather_backward" and pp > 1:
            # inside a pipeline stage the blocks are gathered for the first micro-batch's backward only
            # (PipelineStage keeps them unsharded after the other backwards), the stage's root not at all
            sent = c.bytes_per_call * (1 - stage_root / stage_params)
        elif c.name == "fsdp_param_allgather_backward":
            sent *= 1 - stage_root / whole
        elif c.name == "fsdp_param_allgather_forward" and pp > 1:
            # the blocks are gathered for every micro-batch's forward, the stage's root once per step
            sent = c.bytes_per_call * (micro_batches * (1 - stage_root / stage_params) + stage_root / stage_params)
        parts[c.part] += sent
    if ep > 1:
        parts["ep_comm"] = expert_parallel_bytes(spec, batch_size * seq_len, micro_batches, precision, dp, ep)
        # the global gradient norm over unlike expert shards (train.distributed.clip_grad_norm): one float64 all-reduce
        parts["dp_comm"] += 2 * (dp - 1) / dp * 8
    parts["total"] = sum(parts.values())
    return parts


def expert_parallel_bytes(spec, tokens: int, micro_batches: int, precision: str, dp: int, ep: int) -> float:
    """Bytes one rank sends per step for expert parallelism in `train --ep` (balanced routing: forced, or the mean).

    Per micro-batch and MoE layer: the per-expert counts (n_experts int64) and, forward and backward, the dispatch
    and the combine of tokens × top-k rows of d_model (fp32 under autocast too: the norm's output), each sending
    (ep − 1)/ep of its rows away (account.time.expert_parallel); and, when dp/ep ranks hold the same experts, their
    gradients all-reduced among them once per step (2(n − 1)/n of the local experts' bytes, n = dp/ep)."""
    widen = 4 if get_recipe(precision).params_bytes_per_param == 4 else bytes_per_element(get_recipe(precision).activation_dtype)
    away = (ep - 1) / ep
    per_layer = (spec.n_experts * 8 + (CALLS_FORWARD + CALLS_BACKWARD) * dispatch_bytes(spec, tokens, widen)) * away
    copies = dp // ep
    local = routed_expert_params(spec) / ep                 # + one presence flag per expert tensor
    flags = spec.n_moe_layers * spec.n_experts / ep * (4 if spec.mlp_bias else 2) * (3 if spec.gated_mlp else 2) / 2
    grads = (2 * (copies - 1) / copies * (local + flags) * get_recipe(precision).grads_bytes_per_param
             if copies > 1 else 0.0)
    return micro_batches * spec.n_moe_layers * per_layer + grads


def _vocab_parallel(spec, tokens: int, micro_batches: int, precision: str, tp: int, sp: bool) -> list[Collective]:
    """The TP collectives of the embedding, the head, the cross-entropy (and SP's norm gradients) in one step."""
    recipe = get_recipe(precision)
    act = bytes_per_element(recipe.activation_dtype)      # widened to fp32 under autocast by the caller
    hidden, m = tokens * spec.d_model * act, micro_batches
    out = [Collective("tp_embedding_allreduce", "tp_comm", "all_reduce", hidden, tp, "intra", m),
           Collective("tp_cross_entropy_allreduce", "tp_comm", "all_reduce", tokens * 4, tp, "intra", 3 * m)]
    if not sp:
        return out + [Collective("tp_head_allreduce_backward", "tp_comm", "all_reduce", hidden, tp, "intra", m)]
    norms = spec.n_layers * norm_params_per_layer(spec) + norm_params(spec)
    return out + [Collective("sp_embedding_split_allgather_backward", "tp_comm", "all_gather", hidden, tp, "intra", m),
                  Collective("sp_head_allgather_forward", "tp_comm", "all_gather", hidden, tp, "intra", m),
                  Collective("sp_head_reducescatter_backward", "tp_comm", "reduce_scatter", hidden, tp, "intra", m),
                  Collective("sp_norm_grad_allreduce", "tp_comm", "all_reduce", norms * recipe.grads_bytes_per_param,
                             tp, "intra", 1)]


def _outside_blocks(spec, tp: int, first: bool = True, last: bool = True) -> float:
    """Parameters of the root module on one rank under FSDP2 (not in a block): the token embedding and an untied
    head (split over the vocabulary by TP), the learned positions and the final norm (whole). A pipeline
    stage holds the embeddings if it is the first, the head and final norm if it is the last (a tied
    embedding on both: train/pipeline.py)."""
    c = param_counts(spec)["components"]
    token = c["token_embedding"] if first or (last and spec.tied_embeddings) else 0
    head = c["lm_head"] if last else 0
    return (token + head) / tp + (c["position_embedding"] if first else 0) + (norm_params(spec) if last else 0)


def _block_params(spec) -> float:
    """Parameters of one block (the mean over blocks): all parameters but the embeddings, head and final norm."""
    return (param_counts(spec)["n_params"] - _outside_blocks(spec, 1)) / spec.n_layers
