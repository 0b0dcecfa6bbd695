"""Activation-checkpointing policies: what each re-runs in backward and what it keeps. Pure, no torch.

- "none": nothing recomputed; "full": each block keeps only its input and re-runs its forward (Narayanan et al.
  2021); "selective": the attention core is checkpointed (Korthikanti et al. 2022, Sec. 5).
- "selective-op": torchtitan's per-op selective activation checkpointing (`activation_checkpoint.mode =
  "selective"`, `selective_ac_option = "op"`; torchtitan's `_apply_ac_to_transformer_block`): a block runs under
  `create_selective_checkpoint_contexts` with a policy that saves the output of the ops in its save list —
  `aten.mm`, SDPA (flash, efficient), the c10d reduce-scatter, `aten.max` — except every second mm of the block's
  forward (a counter reset per checkpointed call), and recomputes every other op. In a Llama block the mms run
  q, k, v, o, w1 (gate), w3 (up), w2 (down): q, v, gate and down are kept, k, o and up re-run, with every norm,
  RoPE, activation and product; the attention core's output and logsumexp are kept, so it does not re-run.
- "selective-layer": torchtitan's per-layer selective checkpointing (`selective_ac_option = "2"`, the value in its
  configs): every second block fully checkpointed (blocks 2, 4, ...), the others keep everything.
"""

from __future__ import annotations

from trainledger.specs.run import RECOMPUTE_POLICIES as POLICIES  # noqa: F401 (the run's vocabulary, specs/run.py)

LAYER_EVERY = 2          # torchtitan's selective_ac_option = "2": every second block is checkpointed
FP32 = 4


def checkpointed_fraction(n_layers: int, recompute: str) -> float:
    """Share of the blocks that are fully checkpointed: 1 for "full", ⌊L/2⌋/L for "selective-layer", else 0."""
    if recompute == "full":
        return 1.0
    if recompute == "selective-layer":
        return (n_layers // LAYER_EVERY) / n_layers if n_layers else 0.0
    return 0.0


def recomputed_forward(forward: list, recompute: str, n_layers: int = 2) -> tuple[list, float]:
    """(kernels a block's backward re-runs, weight): the forward `Kernel`s (account.time.kernels, in execution order) a
    policy recomputes, and the share of blocks that do (the mean block is re-timed with kernels × weight).

    selective: the attention core; full: everything; selective-layer: everything, in ⌊L/2⌋ of L blocks;
    selective-op: every forward kernel but the attention core and the 1st, 3rd, 5th ... GEMM (torchtitan's policy).
    """
    if recompute == "none":
        return [], 0.0
    if recompute == "selective":
        return [k for k in forward if k.core], 1.0
    if recompute in ("full", "selective-layer"):
        return list(forward), checkpointed_fraction(n_layers, recompute)
    if recompute == "selective-op":
        out, count = [], 0
        for k in forward:
            if k.kind == "gemm" and not k.core:
                count += 1
                if count % 2 == 1:
                    continue          # an odd mm: its output is saved
            elif k.core:
                continue              # SDPA's output is saved
            out.append(k)
        return out, 1.0
    raise ValueError(f"unknown recompute policy {recompute!r}")


def recomputed_matmuls(matrices: list[tuple[str, int, int, int]], recompute: str) -> list[tuple[str, int, int, int]]:
    """The (name, fan_in, fan_out, times) weight matrices of account.counting.flops.weight_matmuls (in a block's forward
    order, LM head last) whose forward a policy re-runs: selective-op the 2nd, 4th, ... of a block; "full" and
    "selective-layer" all but the head (the caller weights selective-layer by checkpointed_fraction)."""
    block = [mat for mat in matrices if mat[0] not in ("lm_head", "head")]
    if recompute == "selective-op":
        return [mat for i, mat in enumerate(block) if i % 2 == 1]
    if recompute in ("full", "selective-layer"):
        return block
    return []


def selective_op_layer_bytes(spec, n_tokens: float, a: int, r: int) -> tuple[float, float]:
    """(bytes split by tp only with sequence parallelism, bytes split by tp) one block keeps under torchtitan's
    per-op policy: its input (the checkpoint's argument, residual dtype `r`) and the row-parallel outputs it keeps
    (down), then the column-parallel ones (q, v, gate / up) with the attention output and its fp32 logsumexp
    (`a`: bytes of a 16-bit activation). The odd mms of q, k, v, o, gate, up, down are kept (Korthikanti Sec.
    4.2.2 for the split: row-parallel outputs are whole on each rank without SP)."""
    h, kv, dh, d = spec.n_heads, spec.kv_heads, spec.head_dim, spec.d_model
    f = spec.dense_d_ff if spec.is_moe else spec.d_ff
    mms = [(h * dh, "col"), (kv * dh, "col"), (kv * dh, "col"), (d, "row")]          # q, k, v, o
    mms += [(f, "col"), (f, "col"), (d, "row")] if spec.gated_mlp else [(f, "col"), (d, "row")]
    kept = [mm for i, mm in enumerate(mms) if i % 2 == 0]
    row = d * r + sum(width for width, kind in kept if kind == "row") * a
    col = sum(width for width, kind in kept if kind == "col") * a + h * dh * a + h * FP32
    return n_tokens * row, n_tokens * col
