"""The small pieces a transformer is made of, written out: an embedding table, SiLU, softmax (CS336 Lecture 2 builds
each by hand; torch's own are the references they are tested against: tests/models/test_primitives.py).

- `Embedding(num_embeddings, embedding_dim)`: a (vocab, d) weight looked up by index, `weight[ids]`; the gradient
  of a row is the sum of the gradients of the positions that used it (what torch.nn.Embedding computes). Init
  N(0, 1), as torch.nn.Embedding's (the Transformer re-draws it with GPT-2's 0.02: models/transformer.py).
- `silu(x) = x · σ(x)` (Hendrycks & Gimpel 2016, "SiLU"; Ramachandran et al. 2017, "Swish"): the gate of SwiGLU.
- `softmax(x, dim)`: exp(x - max) / Σ exp(x - max) along `dim`. Subtracting the maximum changes nothing
  mathematically (numerator and denominator scale by the same e^-max) and keeps exp from overflowing: a logit of
  1000 gives e^0 instead of inf. A row of -inf everywhere has no maximum to subtract and gives NaN, as torch's.
The model's own layers keep torch's fused kernels (F.embedding, F.silu, SDPA's softmax): the same numbers up to
rounding, and the saved tensors and FLOPs that account/ counts for them.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn


class Embedding(nn.Module):
    """A lookup table of `num_embeddings` vectors of `embedding_dim`: forward(ids) = weight[ids] (no FLOPs)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, *, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Re-draw the table: N(0, 1), as torch.nn.Embedding (a no-op on the meta device)."""
        nn.init.normal_(self.weight, mean=0.0, std=1.0)

    def forward(self, ids: Int[Tensor, "..."]) -> Float[Tensor, "... embedding_dim"]:
        return self.weight[ids]

    def extra_repr(self) -> str:
        return f"num_embeddings={self.num_embeddings}, embedding_dim={self.embedding_dim}"


def silu(x: Float[Tensor, "..."]) -> Float[Tensor, "..."]:
    """x · sigmoid(x), elementwise."""
    return x * torch.sigmoid(x)


def softmax(x: Float[Tensor, "..."], dim: int = -1) -> Float[Tensor, "..."]:
    """exp(x - max) / sum(exp(x - max)) along `dim` (see the module docstring)."""
    shifted = x - x.amax(dim=dim, keepdim=True)
    exps = shifted.exp()
    return exps / exps.sum(dim=dim, keepdim=True)
