"""The lecture's `Cruncher`: a deep linear model, num_layers × Linear(dim, dim) then Linear(dim, 1)."""

from __future__ import annotations

from einops import rearrange
from jaxtyping import Float
from torch import Tensor, nn

from trainledger.models.linear import Linear


class Cruncher(nn.Module):
    """CS336 Lecture 2's `Cruncher(dim, num_layers)`: parameters dim²·num_layers + dim (8,256 for dim=64, 2 layers).

    forward(x) with x of shape (B, dim) returns shape (B,): the final (B, 1) output with its last dimension
    removed. Forward FLOPs 2·B·(dim²·num_layers + dim); no nonlinearity (the lecture's example is linear).
    """

    def __init__(self, dim: int, num_layers: int, *, device=None, dtype=None):
        super().__init__()
        self.dim = dim
        self.num_layers = num_layers
        self.layers = nn.ModuleList([Linear(dim, dim, device=device, dtype=dtype) for _ in range(num_layers)])
        self.final = Linear(dim, 1, device=device, dtype=dtype)

    @classmethod
    def from_spec(cls, spec, *, device=None, dtype=None) -> "Cruncher":
        """A Cruncher from a `CruncherSpec` (dim, n_layers)."""
        return cls(spec.dim, spec.n_layers, device=device, dtype=dtype)

    def forward(self, x: Float[Tensor, "batch dim"]) -> Float[Tensor, " batch"]:
        for layer in self.layers:
            x = layer(x)
        return rearrange(self.final(x), "batch 1 -> batch")

    def n_params(self) -> int:
        """Number of parameters (count)."""
        return sum(p.numel() for p in self.parameters())
