"""get_batch: uniform starts over exactly the valid positions, x/y alignment, int64, reproducibility, memmaps."""

import numpy as np
import pytest
import torch

from trainledger.data import BatchSampler, Prefetcher, get_batch, open_tokens, seed_everything, write_tokens
from trainledger.errors import TrainledgerError

N, T = 20, 5  # valid starts: 0 .. N − T − 1 = 14


def positions(n=N, dtype=np.uint16):
    return np.arange(n, dtype=dtype)  # value = position, so x[:, 0] is the start


def test_every_valid_start_occurs_and_no_other():
    generator = np.random.default_rng(0)
    starts = set()
    for _ in range(60):
        x, _ = get_batch(positions(), batch_size=64, context_length=T, generator=generator)
        starts.update(x[:, 0].tolist())
    assert starts == set(range(N - T))  # P(some start missing) ≤ 15·(14/15)^3840 ≈ 0


def test_starts_are_uniform():
    x, _ = get_batch(positions(), batch_size=30_000, context_length=T, generator=np.random.default_rng(1))
    counts = np.bincount(x[:, 0].numpy(), minlength=N - T)
    expected = 30_000 / (N - T)
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 40  # 14 degrees of freedom: P(chi2 > 40) ≈ 3e-4


def test_x_and_y_are_consecutive_and_shifted_by_one():
    x, y = get_batch(positions(1000), batch_size=16, context_length=32, generator=np.random.default_rng(2))
    assert x.shape == y.shape == (16, 32)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(y, x + 1)
    assert torch.equal(x[:, 1:], x[:, :-1] + 1)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert x.is_contiguous() and y.is_contiguous()


def test_exactly_context_length_plus_one_tokens_has_one_start():
    x, y = get_batch(positions(T + 1), batch_size=4, context_length=T)
    assert torch.equal(x, torch.arange(T).expand(4, T))
    assert torch.equal(y, torch.arange(1, T + 1).expand(4, T))


def test_too_short_data_raises():
    with pytest.raises(TrainledgerError, match="fewer than --seq-len"):
        get_batch(positions(T), batch_size=1, context_length=T)


@pytest.mark.parametrize("kwargs", [dict(batch_size=0), dict(context_length=0), dict(batch_size=2.5)],
                         ids=["zero-batch", "zero-context", "float-batch"])
def test_bad_sizes_raise(kwargs):
    with pytest.raises(TrainledgerError):
        get_batch(positions(), **({"batch_size": 2, "context_length": 3} | kwargs))


def test_float_data_raises():
    with pytest.raises(TrainledgerError, match="integers"):
        get_batch(np.zeros(100, dtype=np.float32), batch_size=2, context_length=3)


def test_generator_makes_batches_reproducible_and_seed_everything_the_default():
    a = get_batch(positions(500), 8, 16, generator=np.random.default_rng(7))
    b = get_batch(positions(500), 8, 16, generator=np.random.default_rng(7))
    assert torch.equal(a[0], b[0])
    seed_everything(3)
    c = get_batch(positions(500), 8, 16)
    seed_everything(3)
    d = get_batch(positions(500), 8, 16)
    assert torch.equal(c[0], d[0])


def test_values_survive_int64_conversion_for_every_token_dtype(tmp_path):
    for dtype in ("uint8", "uint16", "int32", "uint32", "int64"):
        top = np.iinfo(dtype).max
        path = write_tokens(tmp_path / f"{dtype}.tokens", np.array([top, 0, top, 1], dtype=dtype))
        x, y = get_batch(open_tokens(path), batch_size=2, context_length=3)
        assert x[0].tolist() == [top, 0, top] and y[0].tolist() == [0, top, 1]


def test_sampler_state_round_trip_gives_the_same_next_batches():
    import io
    sampler = BatchSampler(positions(300), batch_size=4, context_length=8, seed=5)
    sampler.sample()
    buffer = io.BytesIO()
    torch.save(sampler.state_dict(), buffer)
    expected = [sampler.sample()[0] for _ in range(3)]
    buffer.seek(0)
    restored = BatchSampler(positions(300), batch_size=4, context_length=8, seed=999)
    restored.load_state_dict(torch.load(buffer, weights_only=True))
    assert all(torch.equal(restored.sample()[0], e) for e in expected)
    assert restored.n_batches == 4


def test_prefetcher_yields_the_sampler_sequence_and_checkpoints_what_was_consumed():
    reference = BatchSampler(positions(300), 4, 8, seed=1)
    expected = [reference.sample()[0] for _ in range(6)]
    with Prefetcher(BatchSampler(positions(300), 4, 8, seed=1), depth=3) as prefetcher:
        got = [next(prefetcher)[0] for _ in range(3)]
        state = prefetcher.state_dict()  # the producer has already run ahead
    resumed = BatchSampler(positions(300), 4, 8, seed=0)
    resumed.load_state_dict(state)
    got += [resumed.sample()[0] for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_prefetcher_reraises_errors_of_the_producer():
    sampler = BatchSampler(positions(300), 4, 8)
    sampler.context_length = 1000  # now too long for the data
    with Prefetcher(sampler) as prefetcher, pytest.raises(TrainledgerError, match="fewer than"):
        next(prefetcher)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA; the CPU path is covered by the tests above")
def test_cuda_batches_are_on_the_device_and_equal_the_cpu_ones():
    cpu = get_batch(positions(1000), 8, 16, "cpu", np.random.default_rng(4))
    gpu = get_batch(positions(1000), 8, 16, "cuda", np.random.default_rng(4))
    assert gpu[0].is_cuda and torch.equal(gpu[0].cpu(), cpu[0]) and torch.equal(gpu[1].cpu(), cpu[1])
