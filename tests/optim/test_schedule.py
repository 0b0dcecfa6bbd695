"""The warmup + cosine schedule as a table with a reason per row, and the LambdaLR wrapper against it."""

import io
import math

import pytest
import torch

from trainledger.errors import TrainledgerError
from trainledger.optim import AdamW, CosineWithWarmup, cosine_with_warmup

# max_lr = 1, min_lr = 0.1, warmup = 10 steps, cosine over steps 10..18
MAX_LR, MIN_LR, WARMUP, TOTAL = 1.0, 0.1, 10, 18
TABLE = [
    (0, 0.0, "warmup starts at zero"),
    (1, 0.1, "warmup is linear: 1/10 of max_lr"),
    (5, 0.5, "halfway through warmup"),
    (9, 0.9, "last warmup step"),
    (10, 1.0, "peak at the end of warmup"),
    (12, 0.1 + 0.45 * (1 + math.cos(math.pi / 4)), "a quarter into the cosine"),
    (14, 0.55, "middle of cosine: halfway between max and min"),
    (18, 0.1, "cosine reaches the floor at total_steps"),
    (19, 0.1, "constant at the floor after total_steps"),
    (1000, 0.1, "long after the end"),
]


@pytest.mark.parametrize("step, expected, reason", TABLE, ids=[row[2] for row in TABLE])
def test_schedule_table(step, expected, reason):
    assert cosine_with_warmup(step, MAX_LR, MIN_LR, WARMUP, TOTAL) == pytest.approx(expected, rel=1e-12, abs=1e-12), reason


def test_no_warmup_starts_at_max_lr():
    assert cosine_with_warmup(0, 3e-4, 3e-5, 0, 100) == pytest.approx(3e-4)


def test_schedule_is_monotone_after_warmup():
    values = [cosine_with_warmup(t, MAX_LR, MIN_LR, WARMUP, TOTAL) for t in range(WARMUP, TOTAL + 5)]
    assert all(a >= b for a, b in zip(values, values[1:]))


@pytest.mark.parametrize("kwargs", [dict(warmup_steps=20, total_steps=10), dict(warmup_steps=-1, total_steps=10),
                                    dict(min_lr=2.0)], ids=["warmup>total", "negative-warmup", "min>max"])
def test_bad_schedule_raises(kwargs):
    args = dict(step=0, max_lr=1.0, min_lr=0.1, warmup_steps=2, total_steps=10) | kwargs
    with pytest.raises(TrainledgerError):
        cosine_with_warmup(**args)


def _optimizer(lr=2e-3):
    return AdamW([torch.nn.Parameter(torch.zeros(2))], lr=lr)


def test_scheduler_sets_the_lr_of_each_step():
    optimizer = _optimizer()
    scheduler = CosineWithWarmup(optimizer, warmup_steps=WARMUP, total_steps=TOTAL, min_lr_ratio=MIN_LR)
    seen = []
    for _ in range(25):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    expected = [cosine_with_warmup(t, 2e-3, 2e-3 * MIN_LR, WARMUP, TOTAL) for t in range(25)]
    assert seen == pytest.approx(expected, rel=1e-12, abs=1e-15)


def test_scheduler_state_dict_round_trip_continues_exactly():
    optimizer = _optimizer()
    scheduler = CosineWithWarmup(optimizer, warmup_steps=WARMUP, total_steps=TOTAL, min_lr_ratio=MIN_LR)
    for _ in range(7):
        optimizer.step()
        scheduler.step()
    buffer = io.BytesIO()
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    fresh_optimizer = _optimizer()
    fresh = CosineWithWarmup(fresh_optimizer, warmup_steps=1, total_steps=2)  # settings come from the state
    fresh_optimizer.load_state_dict(state["optimizer"])
    fresh.load_state_dict(state["scheduler"])
    for _ in range(5):
        optimizer.step(), scheduler.step()
        fresh_optimizer.step(), fresh.step()
        assert fresh_optimizer.param_groups[0]["lr"] == optimizer.param_groups[0]["lr"]
    assert fresh.last_epoch == 12
