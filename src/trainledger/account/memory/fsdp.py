"""FSDP2 as it runs: its settings, units and unsharded buffers (the collectives' cost: account.time.fsdp_comm). Pure.

PyTorch's FSDP2 (`torch.distributed.fsdp.fully_shard`, as torchtitan applies it: one unit per transformer block,
one root unit for the embedding, final norm and head) shards every parameter over the data-parallel ranks and,
per micro-batch:
- forward: all-gathers the root, then each block just before it runs. The next block's all-gather is issued
  while the current block computes (implicit forward prefetch: the CPU runs ahead of the GPU and the gather has
  its own stream), so only the root's and the first block's gathers are exposed, and any block's gather that
  outlasts its neighbour's compute;
- backward: each block is all-gathered again (`reshard_after_forward=True`; torchtitan keeps the last block, which
  backward needs at once, and FSDP2 keeps the root unsharded after forward). The gather of block i − 1 is
  prefetched during block i's backward, and the reduce-scatter of block i + 1's gradients runs then too (one
  NCCL communicator: the two share the link); the last reduce-scatters (the first block's, the root's) wait for
  the embedding's backward and are exposed;
- the mixed-precision policy (`MixedPrecisionPolicy(param_dtype, reduce_dtype)`) sets the gathered dtype (bf16
  for torchtitan, Lightning's and Accelerate's "bf16-mixed") and the reduce dtype (torchtitan: fp32); the
  sharded fp32 parameters are the master weights;
- the all-gather's copy-out into the parameters and the reduce-scatter's copy-in of the gradients run on the
  compute stream (pytorch/pytorch#157027: "FSDP::post_backward_reduce and FSDP::all_gather_copy_out ... on the
  critical path", 1.4 % of a Llama 3 70B step on 8 GPUs); they are memory traffic here;
- each unit's hooks cost CPU time: 0.37 ms per all-gather of a Llama 3 8B block (pytorch/pytorch#133369, after
  its fast path; 0.46 ms before), taken for every all-gather and reduce-scatter call. They delay the GPU only
  when the CPU falls behind it (`cpu_exposed`);
- gradient accumulation: "sharded" (FSDP2's default) gathers and reduce-scatters every micro-batch; "unsharded"
  (`set_requires_gradient_sync(False)` + `set_reshard_after_backward(False)` until the last micro-batch, what
  `torch.distributed.pipelining` does to FSDP stages) gathers once and reduce-scatters once per step, keeping
  unsharded parameters and fp32 gradients meanwhile;
- HSDP (`dp_replicate` R > 1): shards over dp/R ranks, replicates over R; each reduce-scatter is followed by an
  all-reduce of the shard over the R replicas (FSDP2 does it in the reduce-scatter stream).
(account.planning.zero_choice picks the stage a layout's user runs.)
"""

from __future__ import annotations

from dataclasses import dataclass

from trainledger.account.counting.params import norm_params, param_counts
from trainledger.errors import TrainledgerError

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
ACCUMULATE = ("sharded", "unsharded")
@dataclass(frozen=True)
class FsdpSettings:
    """How FSDP2 runs: the gathered (param) and reduce dtypes, resharding after forward, gradient accumulation, HSDP."""

    param_dtype: str = "fp32"
    reduce_dtype: str = "fp32"
    reshard_after_forward: bool = True
    accumulate: str = "sharded"
    replicate: int = 1
    mixed_precision: bool = False      # a MixedPrecisionPolicy casts the fp32 shards to param_dtype to gather them

    @property
    def param_bytes(self) -> int:
        return DTYPE_BYTES[self.param_dtype]

    @property
    def reduce_bytes(self) -> int:
        return DTYPE_BYTES[self.reduce_dtype]

    def describe(self) -> str:
        """One line: what FSDP2 is assumed to do (for a command's assumptions)."""
        policy = (f"MixedPrecisionPolicy(param_dtype={self.param_dtype}, reduce_dtype={self.reduce_dtype})"
                  if self.mixed_precision else f"{self.param_dtype} parameters gathered as stored, "
                                               f"{self.reduce_dtype} reduce-scatters")
        keep = "reshard_after_forward=True (re-gathered in backward)" if self.reshard_after_forward else \
            "reshard_after_forward=False (kept for backward)"
        accumulate = ("reduce-scatter every micro-batch" if self.accumulate == "sharded" else
                      "gradients kept unsharded until the last micro-batch")
        hsdp = f"; HSDP: {self.replicate} replicas" if self.replicate > 1 else ""
        return f"FSDP2 per block: {policy}, {keep}, {accumulate}{hsdp}"


def fsdp_settings(recipe, *, param_dtype: str | None = None, reduce_dtype: str | None = None,
                  reshard_after_forward: bool | None = None, accumulate: str | None = None, replicate: int = 1,
                  pp: int = 1, dp: int = 1) -> FsdpSettings:
    """FSDP2 settings for a precision recipe (specs.recipes), errors naming the flag.

    param_dtype "auto": the recipe's compute dtype (a MixedPrecisionPolicy, as torchtitan runs); None: the
    recipe's parameter dtype (no policy: autocast over fp32 gathers, as `trainledger train --parallel fsdp`).
    reduce_dtype None: fp32 under a policy (torchtitan's `mixed_precision_reduce`), else the gradient dtype.
    With pipelining (pp > 1) the defaults follow torchtitan and torch.distributed.pipelining: no resharding after
    forward, gradients reduced after the last micro-batch.
    """
    native = {4: "fp32", 2: recipe.compute_dtype if recipe.compute_dtype in ("bf16", "fp16") else "bf16"}
    if param_dtype == "auto":
        param_dtype = recipe.compute_dtype if recipe.compute_dtype in DTYPE_BYTES else "fp32"
    mixed = param_dtype is not None and DTYPE_BYTES.get(param_dtype) != recipe.params_bytes_per_param
    param_dtype = param_dtype if param_dtype is not None else native.get(int(recipe.params_bytes_per_param), "fp32")
    if reduce_dtype is None:
        reduce_dtype = "fp32" if mixed else native.get(int(recipe.grads_bytes_per_param), "fp32")
    for value, flag in ((param_dtype, "--fsdp-param-dtype"), (reduce_dtype, "--fsdp-reduce-dtype")):
        if value not in DTYPE_BYTES:
            raise TrainledgerError(f"{flag} must be one of {', '.join(DTYPE_BYTES)}, got {value!r}")
    accumulate = accumulate if accumulate is not None else ("unsharded" if pp > 1 else "sharded")
    if accumulate not in ACCUMULATE:
        raise TrainledgerError(f"--fsdp-accumulate must be one of {', '.join(ACCUMULATE)}, got {accumulate!r}")
    if isinstance(replicate, bool) or not isinstance(replicate, int) or replicate < 1:
        raise TrainledgerError(f"--dp-replicate must be a positive integer, got {replicate!r}")
    if dp % replicate:
        raise TrainledgerError(f"--dp-replicate {replicate} must divide the data-parallel size dp = {dp} "
                               "(HSDP shards over dp / replicate ranks)")
    keep = reshard_after_forward if reshard_after_forward is not None else pp == 1
    return FsdpSettings(param_dtype, reduce_dtype, bool(keep), accumulate, replicate, mixed)


def fsdp_settings_of(recipe, choices, *, pp: int, dp: int) -> FsdpSettings:
    """fsdp_settings for a run's FSDP2 choices (specs.run.Fsdp: --fsdp-param-dtype, where "stored" means no policy,
    --fsdp-reduce-dtype, --reshard-after-forward, --fsdp-accumulate, --dp-replicate)."""
    return fsdp_settings(recipe, param_dtype=None if choices.param_dtype == "stored" else choices.param_dtype,
                         reduce_dtype=choices.reduce_dtype, reshard_after_forward=choices.reshard_after_forward,
                         accumulate=choices.accumulate, replicate=choices.replicate, pp=pp, dp=dp)


def models_fsdp2(spec, run) -> bool:
    """Whether `run` (resolved) is ZeRO-3 as FSDP2 runs it in PyTorch: zero 3 over dp > 1 ranks of a Transformer,
    in a PyTorch framework, its FSDP choices not the ZeRO paper's counting (specs.run.Fsdp.impl)."""
    return (run.layout.zero == 3 and run.layout.dp > 1 and getattr(spec, "kind", None) == "transformer"
            and run.kernels.framework != "megatron" and run.layout.fsdp.impl == "fsdp2")


def compute_precision(precision: str, settings: FsdpSettings | None, zero: int) -> str:
    """The recipe the model computes in: under FSDP2 with a 16-bit MixedPrecisionPolicy an amp-* recipe runs as
    mixed-* (bf16 parameters gathered, no autocast casts, a 16-bit residual stream); otherwise `precision`."""
    if settings is None or zero != 3 or not settings.mixed_precision or settings.param_bytes != 2:
        return precision
    return {"amp-bf16": "mixed-bf16", "amp-fp16": "mixed-fp16"}.get(precision, precision)


def units(spec, placement: dict, tp: int = 1, pp: int = 1, separate_embeddings: bool = False) -> dict:
    """Parameters (a count, per GPU after TP, before sharding) of one FSDP2 block unit and of the root unit on the
    busiest pipeline stage, and the blocks on it: {"block", "root", "blocks"}.

    `placement` is account.memory.per_gpu.params_per_gpu(spec, tp, pp). The root holds what is outside the blocks: the
    token embedding and learned positions on the first stage, the final norm and the head (a tied head: the
    embedding) on the last; the vocabulary-split embedding and head divided by tp. Blocks share the rest equally.
    `separate_embeddings` (--fsdp-separate-embeddings, torchtune's custom_sharded_layers): the embedding and the head
    are units of their own; what is gathered beside the blocks at the start of backward is the head's unit (with the
    final norm), the embedding's comes last, alone, at the end of backward: the root counts as the last stage's."""
    c = param_counts(spec)["components"]
    blocks = spec.n_layers if pp == 1 else placement["layers_per_stage"]
    token, head = c["token_embedding"], c["lm_head"] if not spec.tied_embeddings else c["token_embedding"]
    first = token / tp + c["position_embedding"]
    last = head / tp + norm_params(spec)
    whole = first + (c["lm_head"] / tp if not spec.tied_embeddings else 0.0) + norm_params(spec)
    block = (placement["n_params_per_gpu"] - {"all": whole, "first": first, "last": last}[placement["stage"]]) / blocks
    if separate_embeddings:        # beside the blocks: the head's unit on the last stage, nothing on the first
        whole, first = last, 0.0
    root = {"all": whole, "first": first, "last": last}[placement["stage"]]
    return {"block": block, "root": root, "blocks": blocks}


def buffers(u: dict, settings: FsdpSettings) -> dict:
    """Bytes of FSDP2's unsharded buffers at the start of backward (the peak of a step), per GPU, by part.

    params: the root unit, gathered for forward and kept until its reduce-scatter; blocks: the current and the
    prefetched one (all of them without resharding after forward or with unsharded accumulation); grads: the
    root's unsharded gradients (the head's exist from the start of backward), the current block's and its
    reduce-scatter input in the reduce dtype (all blocks' in the reduce dtype under unsharded accumulation,
    where FSDP2 accumulates in it). `u`: `units`. Returns {"params_bytes", "grads_bytes", "detail"}.
    """
    pb, rb = settings.param_bytes, settings.reduce_bytes
    keep_all = not settings.reshard_after_forward or settings.accumulate == "unsharded"
    held_blocks = u["blocks"] if keep_all else min(2, u["blocks"])
    params = u["root"] * pb + held_blocks * u["block"] * pb
    accumulated = u["blocks"] * u["block"] * rb if settings.accumulate == "unsharded" else 0.0
    grads = u["root"] * pb + u["block"] * (pb + rb) + accumulated
    return {"params_bytes": params, "grads_bytes": grads,
            "detail": {"root_params": u["root"] * pb, "block_params": held_blocks * u["block"] * pb,
                       "root_grads": u["root"] * pb, "block_grads": u["block"] * (pb + rb),
                       "accumulated_grads": accumulated, "blocks_held": held_blocks}}
