"""measure/allocator.py: PyTorch's CUDA caching-allocator policy, rule by rule, and the recorded H100 out-of-memory error.

The rules are those of c10/cuda/CUDACachingAllocator.cpp (default configuration); each test works one of them out
by hand. The last test replays two training steps of the recorded Llama 1B run (tests/data/h100_2026_11_26/README.md):
on the H100 it failed asking for 7.83 GiB with 67.6 GiB allocated and 6.6 GiB reserved but unallocated.
"""

from pathlib import Path

import pytest
import torch

from trainledger.measure.allocator import CachingAllocator, OutOfMemory, replay, rounded_request, segment_bytes

MIB, GIB = 2**20, 2**30
DATA = Path(__file__).resolve().parents[1] / "data" / "h100_2026_11_26"


@pytest.mark.parametrize("request_bytes, rounded, segment, why", [
    (1, 512, 2 * MIB, "at least kMinBlockSize; small pool packs into 2 MiB"),
    (513, 1024, 2 * MIB, "rounded up to a multiple of 512"),
    (MIB, MIB, 2 * MIB, "1 MiB is still small"),
    (MIB + 1, MIB + 512, 20 * MIB, "1-10 MiB: a 20 MiB segment"),
    (10 * MIB - 512, 10 * MIB - 512, 20 * MIB, "just under kMinLargeAlloc"),
    (10 * MIB, 10 * MIB, 10 * MIB, "10 MiB and above: its own size"),
    (11 * MIB + 1, 11 * MIB + 512, 12 * MIB, "rounded up to 2 MiB"),
])
def test_request_and_segment_sizes(request_bytes, rounded, segment, why):
    assert rounded_request(request_bytes) == rounded, why
    assert segment_bytes(rounded) == segment, why


def test_a_small_segment_is_shared_and_given_back_whole():
    a = CachingAllocator()
    blocks = [a.malloc(512 * 1024) for _ in range(4)]          # four 512 KiB requests share one 2 MiB segment
    assert a.reserved_bytes == 2 * MIB and a.allocated_bytes == 2 * MIB
    blocks.append(a.malloc(512))                               # a fifth needs a second one
    assert a.reserved_bytes == 4 * MIB
    for b in blocks:
        a.free(b)
    assert a.allocated_bytes == 0 and a.reserved_bytes == 4 * MIB   # cached, not returned to CUDA


def test_best_fit_reuses_the_split_tail_of_a_large_segment():
    a = CachingAllocator()
    first = a.malloc(5 * MIB)                # a 20 MiB segment, split: 5 MiB used, 15 MiB cached
    assert a.reserved_bytes == 20 * MIB and a.allocated_bytes == 5 * MIB
    second = a.malloc(3 * MIB)               # served from the 15 MiB tail: nothing new reserved
    assert a.reserved_bytes == 20 * MIB and second.address == first.address + 5 * MIB


def test_a_large_block_is_split_only_when_more_than_1_mib_remains():
    a = CachingAllocator()
    a.free(a.malloc(12 * MIB))               # one cached 12 MiB segment
    kept_whole = a.malloc(11 * MIB)          # 1 MiB would remain: not split, the whole 12 MiB is handed out
    assert a.allocated_bytes == 12 * MIB
    a.free(kept_whole)
    a.malloc(10 * MIB + 512 * 1024)          # 1.5 MiB remains: split
    assert a.allocated_bytes == 10 * MIB + 512 * 1024 and a.reserved_bytes == 12 * MIB


def test_freed_neighbours_merge_back_into_one_block():
    a = CachingAllocator()
    x, y = a.malloc(4 * MIB), a.malloc(4 * MIB)          # both in one 20 MiB segment
    a.free(x)
    a.free(y)                                            # x + y + the 12 MiB tail: one 20 MiB free block
    whole = a.malloc(19 * MIB)
    assert a.reserved_bytes == 20 * MIB and whole.address == x.address


def test_out_of_memory_first_releases_whole_cached_segments():
    a = CachingAllocator(capacity_bytes=64 * MIB)
    a.free(a.malloc(40 * MIB))               # a whole free 40 MiB segment, cached
    a.malloc(48 * MIB)                       # 40 + 48 > 64: the cached segment is released, then it fits
    assert a.reserved_bytes == 48 * MIB


def test_out_of_memory_reports_what_stays_cached_in_split_segments():
    a = CachingAllocator(capacity_bytes=64 * MIB)
    big = a.malloc(40 * MIB)
    a.free(big)
    keep = a.malloc(4 * MIB)                 # splits the cached 40 MiB segment: 36 MiB stay cached, unusable whole
    with pytest.raises(OutOfMemory) as error:
        a.malloc(40 * MIB)
    assert error.value.state == {"asked_bytes": 40 * MIB, "allocated_bytes": 4 * MIB, "reserved_bytes": 40 * MIB,
                                 "unallocated_bytes": 36 * MIB}
    assert keep is not None


def test_replay_of_an_event_log():
    events = [("alloc", "a", 5 * MIB), ("alloc", "b", 0), ("free", "a"), ("alloc", "c", 30 * MIB), ("free", "b")]
    result = replay(events)
    assert result == {"out_of_memory": False, "peak_allocated_bytes": 30 * MIB, "peak_reserved_bytes": 50 * MIB}
    failed = replay(events, capacity_bytes=40 * MIB)   # the cached 20 MiB segment is released, 30 MiB fits
    assert failed["out_of_memory"] is False and failed["peak_reserved_bytes"] == 30 * MIB


@pytest.mark.slow
def test_replay_reproduces_the_recorded_h100_out_of_memory_error():
    """`profile --model llama1b-config.json --batch-size 8 --seq-len 2048 --device cuda` (amp-bf16, trainledger AdamW)
    failed on an H100 (85,017,493,504 B, calibration-cuda-h100.json): asked 7.83 GiB with 67.6 GiB allocated and
    6.6 GiB reserved but unallocated. Its step kept the logits (`_, loss = model(x, y)`) until the step returned.
    Two such steps on fake tensors, replayed on the device less a CUDA context, fail at the same request with the
    same figures; without holding the logits (what `train` does) the same steps fit."""
    from trainledger.account.memory.per_gpu import CUBLAS_WORKSPACE_BYTES, CUDA_CONTEXT_BYTES
    from trainledger.measure.compare import _fake_mode
    from trainledger.measure.memory import track_steps
    from trainledger.models import build_model
    from trainledger.optim import build_optimizer
    from trainledger.specs import get_model

    spec = get_model(str(DATA / "llama1b-config.json"))
    capacity = 85_017_493_504 - CUDA_CONTEXT_BYTES
    results = {}
    for keep_logits in (True, False):
        with _fake_mode():
            model = build_model(spec)
            opt = build_optimizer("adamw", list(model.parameters()), lr=1e-4)
            batch = (torch.zeros(8, 2048, dtype=torch.long), torch.zeros(8, 2048, dtype=torch.long))
            held = []

            def loss_fn(m, b):
                held.clear()                          # the previous step's logits go when the next step starts
                logits, loss = m(*b)
                if keep_logits:
                    held.append(logits)
                return loss
            _, results[keep_logits] = track_steps(model, batch, opt, loss_fn=loss_fn, autocast_dtype=torch.bfloat16,
                                                  workspace_bytes=CUBLAS_WORKSPACE_BYTES, capacity_bytes=capacity)
    failed = results[True]
    assert failed["out_of_memory"]
    assert failed["asked_bytes"] == 8 * 2048 * 128256 * 4                         # 7.83 GiB: fp32 logits-sized
    assert failed["allocated_bytes"] / GIB == pytest.approx(67.6, abs=0.05)
    assert failed["unallocated_bytes"] / GIB == pytest.approx(6.6, abs=0.1)
    assert not results[False]["out_of_memory"]
    assert results[False]["peak_reserved_bytes"] < capacity
