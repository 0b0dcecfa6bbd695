"""Random language-model batches from a token array: get_batch, a stateful sampler and a background prefetcher.

A batch is B windows of T+1 consecutive tokens; x is the first T of each, y the last T (x shifted by one),
so y[b, t] is the token that follows x[b, t]. Starts are uniform over every valid position
[0, len(data) − T − 1]: the lecture's `torch.randint(len(data) − T, (B,))` (CS336 Lecture 2, "data loading"),
with the window one longer so the target of the last position exists.

The lecture gathers rows with a Python list comprehension, `torch.tensor([data[s:s+T] for s in starts])`;
here one fancy index `data[starts[:, None] + arange(T + 1)]` gathers all rows at once (NumPy reads only
the touched pages of a memmap), and on CUDA the host tensor is pinned so the copy can run asynchronously.
"""

from __future__ import annotations

import queue
import random
import threading

import numpy as np
import torch

from trainledger.errors import TrainledgerError


def seed_everything(seed: int) -> np.random.Generator:
    """A fresh np.random.Generator(seed), after seeding Python's random, NumPy's global RNG and torch (CPU+CUDA)."""
    seed = int(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return np.random.default_rng(seed)


def sample_starts(n_tokens: int, batch_size: int, context_length: int,
                  generator: np.random.Generator | None = None) -> np.ndarray:
    """The int64 start positions of a batch, uniform over [0, n_tokens − context_length − 1] inclusive."""
    _check_sizes(n_tokens, batch_size, context_length)
    high = n_tokens - context_length  # exclusive bound: the last start needs T + 1 tokens
    if generator is None:
        return np.random.randint(0, high, size=batch_size).astype(np.int64)  # NumPy's global RNG (seed_everything)
    return generator.integers(0, high, size=batch_size, dtype=np.int64)


def get_batch(data, batch_size: int, context_length: int, device: str | torch.device = "cpu",
              generator: np.random.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y): two int64 tensors of shape (batch_size, context_length) on `device`, y = x shifted by one token.

    `data` is a 1-D integer array (an np.memmap from `open_tokens` works, however large the file).
    Pass a np.random.Generator to make batches reproducible; without one NumPy's global RNG is used.
    """
    if not isinstance(data, np.ndarray):
        data = np.asarray(data)
    if data.ndim != 1:
        raise TrainledgerError(f"token data must be 1-D, got shape {data.shape}")
    if data.dtype.kind not in "iu":
        raise TrainledgerError(f"token data must hold integers, got {data.dtype}")
    starts = sample_starts(len(data), batch_size, context_length, generator)
    return gather_batch(data, starts, context_length, device)


def gather_batch(data: np.ndarray, starts: np.ndarray, context_length: int,
                 device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(x, y) for the given start positions: rows data[s : s+T] and data[s+1 : s+T+1], int64, on `device`."""
    offsets = np.arange(context_length + 1, dtype=np.int64)
    windows = np.asarray(data)[starts[:, None] + offsets].astype(np.int64)  # (B, T+1), one gather, no Python loop
    windows = torch.from_numpy(windows)
    device = torch.device(device)
    if device.type == "cuda":
        windows = windows.pin_memory().to(device, non_blocking=True)
    elif device.type != "cpu":
        windows = windows.to(device)
    return windows[:, :-1].contiguous(), windows[:, 1:].contiguous()


class BatchSampler:
    """Draws (x, y) batches from `data` with its own np.random.Generator; state_dict() checkpoints the RNG.

    After load_state_dict(state) the sampler yields exactly the batches it would have yielded next.
    """

    def __init__(self, data, batch_size: int, context_length: int, device: str | torch.device = "cpu",
                 seed: int = 0):
        self.data = data
        self.batch_size = batch_size
        self.context_length = context_length
        self.device = device
        _check_sizes(len(data), batch_size, context_length)
        self.generator = np.random.default_rng(seed)
        self.n_batches = 0

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (x, y) batch."""
        self.n_batches += 1
        return get_batch(self.data, self.batch_size, self.context_length, self.device, self.generator)

    def __iter__(self):
        while True:
            yield self.sample()

    def state_dict(self) -> dict:
        """{'bit_generator': the RNG state (128-bit integers as strings, torch.load(weights_only=True)-safe), 'n_batches'}."""
        return {"bit_generator": _stringify(self.generator.bit_generator.state), "n_batches": self.n_batches}

    def load_state_dict(self, state: dict) -> None:
        self.generator.bit_generator.state = _unstringify(state["bit_generator"])
        self.n_batches = int(state["n_batches"])


class Prefetcher:
    """Iterator of batches prepared by a background thread (a bounded queue of `depth` batches ahead).

    state_dict() is the sampler's state right after the last batch *consumed* (not the ones queued ahead),
    so a checkpoint taken while prefetching resumes with exactly the next batch.
    """

    def __init__(self, sampler: BatchSampler, depth: int = 2):
        if depth < 1:
            raise TrainledgerError(f"prefetch depth must be at least 1, got {depth}")
        self.sampler = sampler
        self._state = sampler.state_dict()
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="trainledger-prefetch", daemon=True)
        self._thread.start()

    def _produce(self) -> None:
        while not self._stop.is_set():
            try:
                item = ("batch", self.sampler.sample(), self.sampler.state_dict())
            except Exception as error:  # handed to the consumer, raised there
                item = ("error", error, None)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if item[0] == "error":
                return

    def __iter__(self):
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        kind, value, state = self._queue.get()
        if kind == "error":
            raise value
        self._state = state
        return value

    def state_dict(self) -> dict:
        return self._state

    def close(self) -> None:
        """Stops the background thread (the sampler's own state has then run ahead; use state_dict())."""
        self._stop.set()
        self._thread.join(timeout=5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _check_sizes(n_tokens: int, batch_size: int, context_length: int) -> None:
    if not (isinstance(batch_size, (int, np.integer)) and batch_size > 0):
        raise TrainledgerError(f"--batch-size must be a positive integer, got {batch_size!r}")
    if not (isinstance(context_length, (int, np.integer)) and context_length > 0):
        raise TrainledgerError(f"--seq-len must be a positive integer, got {context_length!r}")
    if n_tokens < context_length + 1:
        raise TrainledgerError(f"the token data has {n_tokens} tokens, fewer than --seq-len + 1 = {context_length + 1}; "
                               "use more text or a shorter --seq-len")


def _stringify(value):
    if isinstance(value, dict):
        return {k: _stringify(v) for k, v in value.items()}
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _unstringify(value):
    if isinstance(value, dict):
        return {k: _unstringify(v) for k, v in value.items()}
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value
