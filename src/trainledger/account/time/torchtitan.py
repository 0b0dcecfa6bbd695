"""torchtitan's Llama where its kernels differ from our Transformer's (account/time/eager.py), eager and compiled. Pure.

`--framework torchtitan` describes pytorch/torchtitan's Llama 3 as its published runs trained it
(torchtitan/models/llama/model.py and torchtitan/parallelisms/parallelize_llama.py, 2024): the same RMSNorm ops,
SwiGLU, SDPA and fp32 cross-entropy as our Transformer (`_norm(x.float()).type_as(x) * weight`; `w2(silu(w1(x)) *
w3(x))`; keys and values expanded by `repeat_kv` for grouped-query attention; `cross_entropy(pred.flatten(0,
1).float(), ...)`), two differences:

- RoPE (`apply_rotary_emb`) multiplies complex numbers: `view_as_complex(xq.float().reshape(..., -1, 2))`
  times the complex64 `freqs_cis` table, `view_as_real(...).flatten(3).type_as(xq)`, on q and k as the Linears
  wrote them, (batch, seqlen, heads, head_dim) — before the transpose to SDPA's layout, so its kernels walk
  contiguous memory (ours rotate permuted views: account/time/eager.py `rope`, the "strided" access). Per rotated
  element: the cast to fp32 (a + 4 bytes), the complex product with a table broadcast over batch and heads
  (4 + 4, a product with a broadcast operand), the cast back (4 + a); backward the same three on the gradient
  (the product with the conjugate table).
- `torch.compile` is applied to each TransformerBlock (`apply_compile`: "Apply torch.compile to each
  TransformerBlock"), after activation checkpointing and before FSDP: the embedding, the final norm, the output
  Linear and the loss run eager (the loss was not compiled then: "TODO: compiling loss function causes CUDA
  errors, turning off for now", torchtitan train.py, 2024). Inside a block Inductor fuses everything but RoPE:
  it "does not support code generation for complex operators" (torch/_inductor/lowering.py,
  `unsupported_input_tensor`: a complex input or output makes the node a fallback to the eager ATen kernel), so
  the complex product stays an eager kernel and the casts around it cannot fuse across it — the three kernels
  each way, as in eager mode.
"""

from __future__ import annotations

from trainledger.account.time.eager import FP32, ew, host

FRAMEWORK = "torchtitan"


def rope(n: float, width: float, rotary: float, a: int) -> tuple[list, list]:
    """(forward, backward) kernels of torchtitan's complex RoPE on one tensor of n tokens × `width` (q: heads ×
    head_dim; k: kv heads × head_dim; `rotary` of it rotated: all of it in torchtitan's Llama), eager or compiled
    (module docstring): 20 bytes per element each way at a = 2, the product at the broadcast access fraction, the
    casts streaming; views cost the CPU a dispatch."""
    x = n * rotary
    casts = x * 2 * (a + FP32)                  # .float() and .type_as(xq) (backward: the gradient's two casts)
    product = x * 2 * FP32                      # complex64 × broadcast complex64 table: read 4, write 4 per element
    fwd = [ew("rope_complex_casts", casts, count=2), ew("rope_complex_mul", product, access="broadcast")]
    bwd = [ew("rope_complex_casts_backward", casts, count=2, role="dgrad"),
           ew("rope_complex_mul_backward", product, role="dgrad", access="broadcast")]
    # reshape, view_as_complex, freqs slice + view, view_as_real, flatten; their backward nodes
    return fwd + host("rope_complex_views", 5), bwd + host("rope_complex_views_backward", 4, "dgrad")
