"""RNG states of torch, numpy and Python's `random` as plain tensors, ints, lists and dicts.

A checkpoint must carry them to continue a run exactly (nanoGPT's checkpoints don't; ours do), and
`torch.load(weights_only=True)` refuses numpy arrays, so numpy's MT19937 key is stored as a list of ints.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_state_dict() -> dict:
    """The global RNG states of torch (CPU and, when present, CUDA), numpy and Python `random`."""
    numpy_state = np.random.get_state(legacy=False)
    numpy_state["state"] = {"key": numpy_state["state"]["key"].tolist(), "pos": int(numpy_state["state"]["pos"])}
    state = {"torch": torch.get_rng_state(), "numpy": numpy_state, "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def load_rng_state_dict(state: dict) -> None:
    """Restore the states saved by `rng_state_dict()`."""
    torch.set_rng_state(state["torch"])
    numpy_state = dict(state["numpy"])
    numpy_state["state"] = {"key": np.asarray(numpy_state["state"]["key"], dtype=np.uint32),
                            "pos": numpy_state["state"]["pos"]}
    np.random.set_state(numpy_state)
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def generator_state(generator: np.random.Generator) -> dict:
    """A numpy Generator's bit-generator state as plain Python ints and dicts (PCG64: two 128-bit ints)."""
    return _plain(generator.bit_generator.state)


def set_generator_state(generator: np.random.Generator, state: dict) -> None:
    """Restore a state from `generator_state`."""
    generator.bit_generator.state = state


def _plain(value):
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.integer):
        return int(value)
    return value
