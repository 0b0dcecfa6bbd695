"""What one GPU runs of a layer in one micro-batch (`Shard`), and the element sizes its kernels move (`Dtypes`). Pure.

A training step times the kernels of one micro-batch of `batch_size × seq_len` tokens on one GPU: its sequence cut
over the cp context-parallel ranks, its heads and MLP over the tp tensor-parallel ranks and, with sequence
parallelism, its residual stream over them too (Korthikanti et al. 2022, Sec. 4.2.2), in the compute precision of
the run (the recipe, or the dtype FSDP2 gathers the parameters in: account.memory.fsdp.compute_precision). That is
the `Shard`: account.time.kernels builds a layer's kernels from it, account.time.comm its collectives and
account.time.expert_parallel its all-to-alls; account.time.step makes it once from the resolved run (`Shard.of`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainledger.account.memory.activations import recipe_bytes
from trainledger.specs.recipes import get_recipe


@dataclass(frozen=True)
class Dtypes:
    """Bytes per element a layer's kernels move under a precision recipe (account.memory.activations.recipe_bytes):
    `a` the matmul inputs, `r` the residual stream, norms and loss, `w` the per-forward weight copies autocast makes
    (0: no autocast: the model itself is 16-bit or fp32); `dtype` the matmuls' dtype (the GPU peak they run at)."""

    a: int
    r: int
    w: int
    dtype: str

    @property
    def amp(self) -> bool:
        """Whether torch.autocast runs the matmuls (fp32 weights cast to 16 bit at each use)."""
        return self.w > 0

    @classmethod
    def of(cls, precision: str) -> "Dtypes":
        """The element sizes of recipe `precision` (an unknown name is an error naming --precision)."""
        recipe = get_recipe(precision)
        a, r, w = recipe_bytes(recipe.name)
        return cls(a, r, w, recipe.compute_dtype)

    def without_autocast(self) -> "Dtypes":
        """The same sizes with no autocast casts: Megatron's 16-bit model, Transformer Engine's Linears."""
        return replace(self, w=0)


@dataclass(frozen=True)
class Shard:
    """One micro-batch of a layer on one GPU: `batch_size` sequences of `seq_len` tokens in recipe `precision`,
    the sequence split over `cp` ranks, heads and MLP over `tp`, and the residual stream too when `sp` (sequence
    parallelism, which only tp > 1 makes a difference)."""

    batch_size: float
    seq_len: int
    precision: str = "amp-bf16"
    tp: int = 1
    sp: bool = False
    cp: int = 1

    @classmethod
    def of(cls, run, precision: str | None = None) -> "Shard":
        """The shard of a resolved specs.run.Run, computed in `precision` (default: the run's recipe)."""
        b, lay = run.batch, run.layout
        return cls(b.batch_size, b.seq_len, precision or run.numerics.precision, lay.tp, lay.sp and lay.tp > 1,
                   lay.cp)

    @property
    def tokens(self) -> float:
        """Tokens of this rank's sequence shard in one micro-batch (the tensor-parallel work is over all of them)."""
        return self.batch_size * self.seq_len / self.cp

    @property
    def stream_tokens(self) -> float:
        """Tokens of the residual stream, norms and dropout on this rank: tokens / tp under sequence parallelism."""
        n = self.tokens
        return n / self.tp if self.sp else n

    @property
    def dtypes(self) -> Dtypes:
        """The element sizes of the shard's recipe (`Dtypes.of`)."""
        return Dtypes.of(self.precision)
