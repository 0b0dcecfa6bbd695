"""Tensor and sequence parallelism of trainledger's Transformer with DTensor (torch.distributed.tensor.parallel).

Megatron-LM's layout (Shoeybi et al. 2019, arXiv:1909.08053, Sec. 3), written with `parallelize_module`:
- attention: q, k, v column-parallel (each rank holds n_heads/tp query heads and n_kv_heads/tp key/value
  heads), o_proj row-parallel; MLP: up (and gate) column-parallel, down row-parallel. A row-parallel output
  is all-reduced in forward; each column-parallel input's gradient is all-reduced in backward;
- vocabulary parallel: the token embedding is split by rows of the vocabulary (RowwiseParallel: each rank
  looks up its own rows, the partial embeddings are all-reduced), the LM head by the same rows (the tied
  embedding or an untied head), so the logits come out split over the vocabulary and the cross-entropy is
  computed on the shards under `loss_parallel()` (max and sum of exponentials all-reduced, never the logits);
- sequence parallel (`sp`, Korthikanti et al. 2022, arXiv:2205.05198, Sec. 4.2.2): between the blocks
  the residual stream is split along the sequence; norms run on the shard (SequenceParallel), the input
  of attention and MLP is all-gathered and their row-parallel outputs are reduce-scattered instead of
  all-reduced. The embedding's output (tokens + learned positions) is split before the first block (a
  local slice; its gradient is all-gathered), and the final norm's output is all-gathered for the head.

Parameters that are not split (norms without SP, learned positions) stay plain tensors, identical on the
TP ranks because their gradients are.
"""

from __future__ import annotations

from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel,
                                               parallelize_module)

from trainledger.errors import TrainledgerError


def check_divisible(spec, tp: int, seq_len: int, sp: bool) -> None:
    """One-line errors for a model that cannot be split `tp` ways."""
    for name, value in (("n_heads", spec.n_heads), ("n_kv_heads", spec.kv_heads), ("d_ff", spec.d_ff),
                        ("vocab_size", spec.vocab_size)):
        if value % tp:
            raise TrainledgerError(f"--tp {tp}: model '{spec.name}' has {name} = {value}, not divisible by {tp}")
    if spec.qk_norm or spec.position == "alibi":
        raise TrainledgerError(f"--tp: model '{spec.name}' uses QK-norm or ALiBi, which this split does not handle")
    if spec.is_moe:
        raise TrainledgerError(f"--tp: mixture-of-experts models ('{spec.name}') are not supported; use --parallel fsdp")
    if sp and seq_len % tp:
        raise TrainledgerError(f"--sp: --seq-len {seq_len} is not divisible by --tp {tp}")
    if sp and spec.sandwich_norm:
        raise TrainledgerError("--sp: sandwich norms (Gemma 2/3) are not supported; drop --sp")


def parallelize(model: nn.Module, tp_mesh, sp: bool) -> nn.Module:
    """Splits `model` (a trainledger Transformer that passed check_divisible) over the 1-D mesh `tp_mesh` in place;
    returns it."""
    tp = tp_mesh.size()
    parallelize_module(model.tok_embeddings, tp_mesh, RowwiseParallel(input_layouts=Replicate(),
                                                                       output_layouts=Replicate()))
    if model.lm_head is not None:   # the head is applied as F.linear(norm(x), weight): only its weight is split
        parallelize_module(model.lm_head, tp_mesh, ColwiseParallel())
    seq_in = Shard(1) if sp else Replicate()
    for block in model.blocks:
        plan = {"attn.q_proj": ColwiseParallel(), "attn.k_proj": ColwiseParallel(), "attn.v_proj": ColwiseParallel(),
                "attn.o_proj": RowwiseParallel(output_layouts=seq_in)}
        mlp_names = [name for name, _ in block.mlp.named_children()]
        for name in mlp_names:
            plan[f"mlp.{name}"] = RowwiseParallel(output_layouts=seq_in) if name == "down" else ColwiseParallel()
        if sp:
            plan.update({"norm1": SequenceParallel(), "norm2": SequenceParallel(),
                         "attn": PrepareModuleInput(input_layouts=(Shard(1), None, None, None),
                                                    desired_input_layouts=(Replicate(), None, None, None)),
                         "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))})
        parallelize_module(block, tp_mesh, plan)
        block.attn.n_heads //= tp
        block.attn.n_kv_heads //= tp
    if sp:
        parallelize_module(model.norm, tp_mesh, SequenceParallel())
        model.blocks[0].register_forward_pre_hook(_split_sequence(tp_mesh))
    model.norm.register_forward_hook(_to_head_input(tp_mesh, sp))
    return model


def _split_sequence(tp_mesh):
    """Forward pre-hook of the first block: keep this rank's slice of the sequence (backward all-gathers)."""
    def hook(module, args):
        x = DTensor.from_local(args[0], tp_mesh, [Replicate()], run_check=False)
        return (x.redistribute(tp_mesh, [Shard(1)]).to_local(), *args[1:])
    return hook


def _to_head_input(tp_mesh, sp: bool):
    """Forward hook of the final norm: its output as a replicated DTensor, the input of the vocabulary-split head.

    Under SP the norm's output is a sequence shard: all-gathered here (reduce-scattered in backward). Without
    SP the backward all-reduces the head's input gradient (a partial sum over the vocabulary shards).
    """
    def hook(module, args, output):
        if isinstance(output, DTensor):
            return output.redistribute(tp_mesh, [Replicate()])
        return DTensor.from_local(output, tp_mesh, [Replicate()], run_check=False)
    return hook
