"""Choosing the next token from the logits: greedy, temperature, top-k and nucleus (top-p) sampling.

- temperature T: sample from softmax(logits / T); T = 0 means greedy (argmax), the limit T → 0.
- top-k (Fan et al. 2018, arXiv:1805.04833, Sec. 5.4): only the k most likely tokens may be drawn.
- top-p, nucleus sampling (Holtzman et al. 2019, arXiv:1904.09751, Sec. 3.1): only the smallest set of most
  likely tokens whose probabilities sum to at least p (the most likely token always stays).
Filters apply in that order (temperature, then top-k, then top-p over what is left), as Hugging Face's
generation does; the draw uses the caller's torch.Generator, so a --seed repeats the same text.
"""

from __future__ import annotations

import math

import torch
from jaxtyping import Float, Int
from torch import Tensor

from trainledger.errors import TrainledgerError


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """A TrainledgerError naming the flag for a temperature, top-k or top-p that is not allowed."""
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not math.isfinite(temperature) \
            or temperature < 0:
        raise TrainledgerError(f"--temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise TrainledgerError(f"--top-k must be a positive integer, got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))
                              or not 0 < top_p <= 1):
        raise TrainledgerError(f"--top-p must be a number in (0, 1], got {top_p!r}")


def next_token(logits: Float[Tensor, "batch vocab"], temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, generator: torch.Generator | None = None) -> Int[Tensor, "batch"]:
    """The next token id of each row of `logits`: argmax when temperature is 0, else a draw (module docstring)."""
    check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(dim=-1)
    # float64, the best first: a temperature of 1e-40 (1e-50 is 0 in float32) or a top-p of 1e-100 (0 in float32,
    # which dropped every token: NaN probabilities) still pick the most likely token, the limit T → 0
    scores = logits.double()
    scores = (scores - scores.max(dim=-1, keepdim=True).values) / temperature
    if top_k is not None and top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_scores, order = torch.sort(scores, dim=-1, descending=True)
        probs = torch.softmax(sorted_scores, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs          # mass of the more likely tokens
        drop = before >= top_p
        drop[..., 0] = False                                   # the most likely token always stays
        scores = scores.scatter(-1, order, sorted_scores.masked_fill(drop, float("-inf")))
    probs = torch.softmax(scores, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)
