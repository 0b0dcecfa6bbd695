"""Fixtures shared across test folders."""

import pytest


@pytest.fixture
def one_torch_thread():
    """One intra-op thread: the CI machine has 2 cores, and runs in and out of process then agree bit for bit."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
