"""Global batches that every rank draws identically and slices: LM windows from a token array, or the lecture's regression.

A step draws the GLOBAL batch (batch_size rows) from one np.random.Generator seeded by the run's seed;
rank r keeps rows [r·B/W, (r+1)·B/W) and splits them into --grad-accum micro-batches. Since every rank's
generator holds the same state, this is what broadcasting rank 0's draw would give, without the message,
and the rows a step trains on do not depend on the number of ranks or micro-batches.

state_dict() is the generator's bit-generator state as plain Python ints and dicts (PCG64: two 128-bit
integers), which `torch.load(weights_only=True)` accepts; numpy arrays it would refuse.
"""

from __future__ import annotations

import numpy as np
import torch

from trainledger.data import gather_batch, sample_starts
from trainledger.train.rng import generator_state, set_generator_state


class TokenBatches:
    """Random (x, y) windows of `seq_len` tokens from a 1-D token array (an np.memmap is fine)."""

    def __init__(self, tokens, seq_len: int, generator: np.random.Generator):
        self.tokens = tokens
        self.seq_len = seq_len
        self.generator = generator

    def draw(self, batch_size: int) -> np.ndarray:
        """The int64 start positions of one global batch (advances the generator)."""
        return sample_starts(len(self.tokens), batch_size, self.seq_len, self.generator)

    def rows(self, drawn: np.ndarray, lo: int, hi: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(x, y) int64 of shape (hi − lo, seq_len) on `device` for rows lo..hi of a drawn batch."""
        return gather_batch(self.tokens, drawn[lo:hi], self.seq_len, device)

    def state_dict(self) -> dict:
        return {"generator": generator_state(self.generator)}

    def load_state_dict(self, state: dict) -> None:
        set_generator_state(self.generator, state["generator"])


class RegressionBatches:
    """The lecture's `train_loop` data: x ~ N(0, 1)^dim, y = x · true_w with true_w = (0, 1, ..., dim − 1).

    CS336 Lecture 2, `train_loop`: "Generate data from linear function with weights (0, 1, 2, ..., D-1)".
    x is drawn from the numpy generator (not torch.randn) so that its state checkpoints like the LM sampler's.
    """

    def __init__(self, dim: int, generator: np.random.Generator):
        self.dim = dim
        self.generator = generator
        self.true_w = np.arange(dim, dtype=np.float32)

    def draw(self, batch_size: int) -> np.ndarray:
        """x of one global batch, float32 (batch_size, dim)."""
        return self.generator.standard_normal((batch_size, self.dim), dtype=np.float32)

    def rows(self, drawn: np.ndarray, lo: int, hi: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        x = drawn[lo:hi]
        y = x @ self.true_w
        return torch.from_numpy(np.ascontiguousarray(x)).to(device), torch.from_numpy(y).to(device)

    def state_dict(self) -> dict:
        return {"generator": generator_state(self.generator)}

    def load_state_dict(self, state: dict) -> None:
        set_generator_state(self.generator, state["generator"])
