"""Autoregressive generation with or without a KV cache, timed by phase (prefill, then decoding).

Prefill runs the whole prompt through the model once and picks the first new token; each decoding step then runs
one token. With the cache (models.kv_cache) a decoding step feeds only the newest token; without it every step
re-runs the whole sequence so far and keeps the last position's logits (what `--no-cache` measures). Greedy
decoding (temperature 0) picks the same tokens either way: both compute the same function of the same prefix.
Times are wall-clock seconds with the device synchronized at each phase's ends (CUDA runs asynchronously), so a
GPU's kernels and the CPU's launches of the next step overlap as they do in use.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from jaxtyping import Int
from torch import Tensor

from trainledger.errors import TrainledgerError
from trainledger.models.kv_cache import KVCache
from trainledger.models.sampling import check_sampling, next_token


@dataclass
class Generation:
    """What one generate() call produced and how long each phase took.

    tokens: the new ids of each sequence (prompt excluded); prefill_seconds: the prompt's forward and the first
    token's choice; decode_seconds: the other max_new_tokens − 1 steps together; kv_cache_bytes: bytes of the
    cache's key and value tensors (0 without a cache); cache_positions: the positions it was allocated for.
    """

    tokens: list[list[int]]
    prefill_seconds: float
    decode_seconds: float
    decode_steps: int
    kv_cache_bytes: int = 0
    cache_positions: int = 0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def check_lengths(spec, prompt_len: int, max_new_tokens: int) -> None:
    """One-line errors for an empty prompt, a prompt or prompt + new tokens longer than the model's context."""
    if prompt_len == 0:
        raise TrainledgerError("the prompt is empty (--prompt, --prompt-ids): give at least one token")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise TrainledgerError(f"--max-new-tokens must be a positive integer, got {max_new_tokens!r}")
    context = spec.max_seq_len
    if prompt_len >= context:
        raise TrainledgerError(f"the prompt is {prompt_len} tokens, but model '{spec.name}' has a context of {context} "
                               f"tokens and needs room for at least one new one (--prompt, --prompt-ids): shorten it")
    if prompt_len + max_new_tokens > context:
        raise TrainledgerError(f"--max-new-tokens {max_new_tokens}: the prompt ({prompt_len} tokens) plus the new tokens "
                               f"exceed the context of model '{spec.name}' ({context} tokens); allowed: at most "
                               f"{context - prompt_len}")


@torch.inference_mode()
def generate(model, prompt: Int[Tensor, "batch prompt"], max_new_tokens: int, *, temperature: float = 0.0,
             top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None,
             use_cache: bool = True) -> Generation:
    """`max_new_tokens` new tokens after `prompt` (token ids on the model's device), sampled as models.sampling says.

    The cache is allocated for prompt + max_new_tokens positions (the context the sequence may reach), in the
    dtype of the model's parameters.
    """
    spec = model.spec
    check_sampling(temperature, top_k, top_p)
    check_lengths(spec, prompt.shape[1], max_new_tokens)
    vocab = spec.vocab_size
    if prompt.numel() and (int(prompt.min()) < 0 or int(prompt.max()) >= vocab):
        raise TrainledgerError(f"prompt token ids must lie in [0, {vocab - 1}] (the vocabulary of model "
                               f"'{spec.name}'), got values in [{int(prompt.min())}, {int(prompt.max())}]")
    model.eval()
    device = prompt.device
    batch, positions = prompt.shape[0], prompt.shape[1] + max_new_tokens
    cache = None
    if use_cache:
        dtype = next(model.parameters()).dtype
        cache = KVCache(spec, batch, positions, device=device, dtype=dtype)

    def step(ids: Tensor, seq: Tensor) -> Tensor:
        if cache is not None:
            return model.forward_cached(ids, cache)[:, -1]
        return model(seq)[:, -1]

    _sync(device)
    start = time.perf_counter()
    chosen = [next_token(step(prompt, prompt).float(), temperature, top_k, top_p, generator)]
    _sync(device)
    prefill = time.perf_counter() - start
    seq = prompt
    start = time.perf_counter()
    for _ in range(max_new_tokens - 1):       # no synchronization inside: the next step's launches may overlap
        last = chosen[-1][:, None]             # the GPU's work on this one (the token stays on the device)
        seq = torch.cat((seq, last), dim=1) if cache is None else seq
        chosen.append(next_token(step(last, seq).float(), temperature, top_k, top_p, generator))
    _sync(device)
    decode = time.perf_counter() - start
    tokens = torch.stack(chosen, dim=1).tolist()
    return Generation(tokens=tokens, prefill_seconds=prefill, decode_seconds=decode, decode_steps=max_new_tokens - 1,
                      kv_cache_bytes=cache.nbytes if cache is not None else 0,
                      cache_positions=positions if cache is not None else 0)
