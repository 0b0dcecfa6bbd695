"""The kernels of the multi-token-prediction modules in a training step, and where the pipeline puts them. Pure.

DeepSeek-V3 (arXiv:2412.19437, Sec. 2.2, Eqs. 21-25), per module (spec.n_mtp_layers; depth 1 for DeepSeek-V3): the
token embedding of the next tokens (the embedding shared with the main model: a lookup, and its gradient into the
table), RMSNorm of the main model's last hidden state and RMSNorm of that embedding, their concatenation, the
projection 2·d -> d (eh_proj), one transformer block like the model's last layer (MLA + MoE for DeepSeek-V3:
account.time.kernels.layer_kernels, in FP8 when the layers are), and the shared output head with its final norm and
loss (account.time.kernels.edge_kernels' head), i.e. the same FLOPs as account.counting.flops.mtp_matmuls.

Placement: Megatron runs the MTP modules on the last pipeline stage, after the decoder's last layer and before
the loss. Megatron Bridge's DeepSeek-V3 recipes lay the stages out so that the first pp − 1 stages hold
ceil(61/pp) layers and the last the rest plus the MTP and the loss (megatron/bridge/recipes/deepseek/
deepseek_v3.py, set_deepseek_v3_pipeline_model_parallel_layout: PP4 16/16/16/13+mtp+loss, PP8 8×7 + 5+mtp+loss,
PP16 4×15 + 1+mtp+loss; with VP the same per stage): `last_stage_layers`. The decoder layers sit where they sit
whether or not the MTP modules train (the recipe appends `["mtp"] * mtp_num_layers + ["loss"]` to the last stage),
so `step --no-mtp` on such a model keeps the layout and only drops the MTP's work.
Not modelled: the MTP module's recomputation, its parameters and activations in memory, and the all-reduce of
the embedding's gradient between the first and the last stage that sharing it needs (once per step).
"""

from __future__ import annotations

from trainledger.specs.run_checks import mtp_modules  # noqa: F401 (moved to specs: the run's checks)

from trainledger.account.time.eager import ew, gemm, main_grad_gemm
from trainledger.account.time.shard import Shard

FP32 = 4


def last_stage_layers(n_layers: int, pp: int, n_mtp: int) -> int:
    """Decoder layers on the last pipeline stage: for a model with MTP modules (n_mtp: the spec's, trained or
    not), what the first pp − 1 stages of ceil(L/pp) leave (Megatron Bridge's DeepSeek-V3 layouts, module
    docstring); without, ceil(L/pp) like every stage."""
    per_stage = -(-n_layers // pp)
    if not n_mtp or pp == 1:
        return n_layers if pp == 1 else per_stage
    return max(n_layers - (pp - 1) * per_stage, 0)


def mtp_kernels(spec, n_mtp: int, layer: dict, head: dict, shard: Shard) -> dict[str, list]:
    """{"mtp_forward", "mtp_backward"} kernels of the `n_mtp` modules for micro-batch `shard` on one GPU, given the
    kernels of one layer like the model's last (`layer`: {"forward", "backward"}) and of the head (`head`:
    {"head_forward", "head_backward"}, account.time.kernels.edge_kernels)."""
    dt, tp = shard.dtypes, shard.tp
    a, r, dtype = dt.a, dt.r, dt.dtype
    n, n_sp = shard.tokens, shard.stream_tokens
    d = spec.d_model
    # the shared embedding: a gather forward; backward the gradient scattered into the table (fp32)
    fwd = [ew("mtp_embedding", n_sp * d * (r + a) + n_sp * 8),
           ew("mtp_norms", 2 * 2 * n_sp * d * a, count=2),                 # RMSNorm of h and of the embedding
           ew("mtp_concat", 2 * 2 * n_sp * d * a)]
    # eh_proj: 2d -> d, column-parallel over tp (its output gathered back into the sequence-parallel stream)
    fwd.append(gemm("mtp_eh_proj", n, d / tp, 2 * d, a, dtype))
    bwd = [gemm("mtp_eh_proj_dgrad", n, 2 * d, d / tp, a, dtype, role="dgrad"),
           main_grad_gemm("mtp_eh_proj_wgrad", d / tp, 2 * d, n, a, dtype),
           ew("mtp_concat_backward", 2 * 2 * n_sp * d * a, role="dgrad"),
           ew("mtp_norms_backward", 2 * 5 * n_sp * d * a, count=4, role="dgrad"),
           ew("mtp_embedding_backward", spec.vocab_size / tp * d * FP32 * 2 + n_sp * d * (r + FP32), count=2,
              role="wgrad")]
    fwd = (fwd + layer["forward"] + head["head_forward"]) * n_mtp
    bwd = (head["head_backward"] + layer["backward"] + bwd) * n_mtp
    return {"mtp_forward": fwd, "mtp_backward": bwd}

