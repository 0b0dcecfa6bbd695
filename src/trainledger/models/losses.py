"""The cross-entropy over N chunks of the sequence, so that the logits (and their fp32 upcast) never exist whole.

torchtune's CEWithChunkedOutputLoss (torchtune/modules/loss/ce_chunked_output_loss.py; its README's "Optimization
flags" table: Llama 3.2 3B, 51.0 -> 42.9 GiB peak active): the final hidden states are split along the sequence
into N chunks; each chunk goes through the output head, is upcast to fp32 and gets its summed cross-entropy; the
sum over chunks is divided by the number of tokens. The loss is the mean of the unchunked one (only the summation
order differs: equal to about 1e-7 relative in fp32).

What it changes in memory: without chunks the model holds the whole (B, T, V) logits, their fp32 copy (under a
16-bit recipe) and log_softmax's fp32 output at once, and backward makes a (B, T, V) fp32 gradient; with N chunks
the logits and the upcast exist one chunk at a time (autograd's backward also walks the chunks one after the other).
What it keeps: log_softmax's fp32 output is saved for backward in every chunk, B·T·V·4 bytes in all, as torchtune.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def chunked_cross_entropy(hidden: Tensor, targets: Tensor, head, chunks: int) -> Tensor:
    """Mean next-token cross-entropy (nats) of `head(hidden)` against `targets`, over `chunks` sequence chunks.

    `hidden`: (batch, seq, d_model), the final norm's output; `head`: hidden chunk -> logits chunk (the model's
    output projection, soft-capping included); the logits chunks are upcast to fp32 before the loss."""
    total = hidden.new_zeros((), dtype=torch.float32)
    for h, y in zip(hidden.chunk(chunks, dim=1), targets.chunk(chunks, dim=1), strict=True):
        logits = head(h)
        total = total + F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum")
    return total / targets.numel()
