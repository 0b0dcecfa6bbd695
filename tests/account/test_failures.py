"""account/planning/failures.py: MTBF, Young/Daly checkpoint intervals, expected wall time, and the Monte Carlo beside them."""

import math

import pytest

from trainledger.account.planning import failures as F
from trainledger.errors import TrainledgerError

HOUR, MINUTE = 3600.0, 60.0


def test_default_rate_is_llama3_snapshot():
    # Llama 3 (arXiv:2407.21783, Sec. 3.3.4): 419 unexpected interruptions in 54 days on 16,384 GPUs
    assert F.mtbf_seconds(F.LLAMA3_FAILURES_PER_GPU_DAY, 16384) == pytest.approx(54 * 86400 / 419)
    assert F.mtbf_seconds(F.LLAMA3_FAILURES_PER_GPU_DAY, 16384) / HOUR == pytest.approx(3.09, abs=0.01)


def test_fewer_gpus_fail_less_often():
    mtbfs = [F.mtbf_seconds(F.LLAMA3_FAILURES_PER_GPU_DAY, n) for n in (16384, 8192, 1024, 8)]
    assert mtbfs == sorted(mtbfs) and mtbfs[1] == pytest.approx(2 * mtbfs[0])


@pytest.mark.parametrize("mtbf_minutes, published_minutes, why", [
    (24 * 60, 117, "Daly 2006, Fig. 3: M = 24 h, δ = 5 min"),
    (6 * 60, 57, "Daly 2006, Fig. 4: M = 6 h, δ = 5 min"),
    (15, 9.1, "Daly 2006, Fig. 5: M = 15 min, δ = 5 min"),
])
def test_daly_reproduces_the_papers_intervals(mtbf_minutes, published_minutes, why):
    tau = F.daly_interval(5 * MINUTE, mtbf_minutes * MINUTE) / MINUTE
    assert tau == pytest.approx(published_minutes, abs=0.5 if published_minutes > 20 else 0.05), why


def _exact_optimum(delta, mtbf, restart=600.0):
    """The interval minimising expected_wall_seconds, by ternary search (an independent check of Daly's series)."""
    lo, hi = 1e-6 * mtbf, 5 * mtbf
    for _ in range(200):
        a, b = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        if F.expected_wall_seconds(1e6, a, delta, mtbf, restart) < F.expected_wall_seconds(1e6, b, delta, mtbf, restart):
            hi = b
        else:
            lo = a
    return (lo + hi) / 2


@pytest.mark.parametrize("ratio", [1e-4, 1e-2, 0.1, 0.5, 1.0])
def test_daly_interval_is_the_minimum_of_the_cost_model(ratio):
    mtbf = 10_000.0
    delta = ratio * mtbf
    exact, daly, young = _exact_optimum(delta, mtbf), F.daly_interval(delta, mtbf), F.young_interval(delta, mtbf)
    assert daly == pytest.approx(exact, rel=0.02)
    wall = lambda tau: F.expected_wall_seconds(1e6, tau, delta, mtbf, 600.0)  # noqa: E731
    assert wall(daly) == pytest.approx(wall(exact), rel=2e-4)       # Daly's τ costs < 0.02 % more than the optimum
    assert wall(young) >= wall(daly)                                 # Young's first order is never better
    if ratio <= 0.01:
        assert young == pytest.approx(daly, rel=0.15)                # δ ≪ M: the two agree (Young 1974)


def test_daly_interval_when_the_checkpoint_outlasts_the_mtbf():
    assert F.daly_interval(3 * HOUR, 1 * HOUR) == 1 * HOUR          # δ ≥ 2M: checkpoint every M


def test_expected_wall_time_limits():
    # no failures to speak of: wall time = work + checkpoints
    assert F.expected_wall_seconds(1e6, 1000.0, 10.0, 1e15, 0.0) == pytest.approx(1e6 * 1010 / 1000, rel=1e-6)
    # first order: each failure loses half a segment plus the restart, failures every M of wall time
    work, tau, mtbf, restart = 1e7, 600.0, 1e6, 300.0
    wall = F.expected_wall_seconds(work, tau, 0.0, mtbf, restart)
    assert wall == pytest.approx(work * (1 + (tau / 2 + restart) / mtbf), rel=1e-3)
    assert F.expected_wall_seconds(1e6, 1e6, 1e6, 1.0, 0.0) == math.inf


def test_failure_plan_keys_and_figures():
    plan = F.failure_plan(60 * 86400.0, 16384, 405e9 * 12)
    for key in ("mtbf_seconds", "checkpoint_seconds", "restart_seconds", "checkpoint_interval_seconds", "goodput",
                "expected_interruptions", "train_seconds_with_failures"):
        assert key in plan
    # 4.86 TB over 2,048 nodes at 7 TB/s / 2,048 each
    assert plan["checkpoint_seconds"] == pytest.approx(405e9 * 12 / 7e12)
    assert plan["train_seconds_with_failures"] == pytest.approx(60 * 86400 / plan["goodput"])
    assert plan["expected_interruptions"] == pytest.approx(plan["train_seconds_with_failures"] / plan["mtbf_seconds"])
    # Llama 3 reports > 90 % effective training time on this setup
    assert 0.9 < plan["goodput"] < 1


@pytest.mark.parametrize("work_days, num_gpus, checkpoint_bytes, restart", [
    (60, 16384, 4.86e12, 600.0),      # Llama 3 405B scale
    (30, 2048, 1e14, 1800.0),         # slow storage: δ is a good fraction of M
    (5, 64, 1e12, 60.0),              # few GPUs: rare failures
])
def test_monte_carlo_agrees_with_the_closed_form(work_days, num_gpus, checkpoint_bytes, restart):
    plan = F.failure_plan(work_days * 86400.0, num_gpus, checkpoint_bytes, restart_s=restart)
    sim = F.simulate(F.FailureModel.of_plan(work_days * 86400.0, plan), trials=40, seed=1)
    assert sim["goodput"] == pytest.approx(plan["goodput"], abs=max(0.01, 5 * sim["goodput_stderr"]))
    assert sim["expected_interruptions"] == pytest.approx(plan["expected_interruptions"], rel=0.1, abs=3)


def test_simulation_is_seeded_and_reports_progress():
    calls = []
    job = F.FailureModel(1e6, 1000.0, 10.0, 2e4, 60.0)
    a = F.simulate(job, trials=5, seed=3, progress=lambda done, total: calls.append((done, total)))
    b = F.simulate(job, trials=5, seed=3)
    assert a == b and calls[-1] == (5, 5) and len(calls) == 5
    assert F.simulate(job, trials=5, seed=4) != a


def test_hopeless_runs_do_not_loop_forever():
    sim = F.simulate(F.FailureModel(1e6, 1e5, 1e5, 100.0, 0.0), trials=3)
    assert sim["goodput"] == 0 and sim["train_seconds_with_failures"] == math.inf
    plan = F.failure_plan(1e6, 16384, 1e20)          # a 14e6 s checkpoint against a 3 h MTBF
    assert plan["goodput"] == 0 and plan["train_seconds_with_failures"] == math.inf


def test_simulation_cost_is_bounded():
    """Many trials of a long run: segments per trial shrink so trials × segments stays within the draw budget."""
    sim = F.simulate(F.FailureModel(1e9, 100.0, 1.0, 1e4, 60.0), trials=10_000)
    assert sim["scaled"] and sim["trials"] * sim["segments_per_trial"] <= F.SIMULATION_DRAWS
    plan = F.failure_plan(1e9, 8192, 1e12)
    assert F.simulate(F.FailureModel.of_plan(1e9, plan), trials=10_000)["goodput"] == pytest.approx(plan["goodput"],
                                                                                                  abs=0.01)


@pytest.mark.parametrize("kwargs, flag", [
    ({"failures_per_gpu_day": 0}, "--failures-per-gpu-day"),
    ({"failures_per_gpu_day": -1e-4}, "--failures-per-gpu-day"),
    ({"bytes_per_s_per_node": 0}, "--checkpoint-bandwidth"),
    ({"restart_s": -1}, "--restart"),
])
def test_bad_rates_name_their_flag(kwargs, flag):
    with pytest.raises(TrainledgerError, match=flag):
        F.failure_plan(1e6, 8, 1e9, **kwargs)


def test_the_simulated_job_is_the_plan_s():
    """FailureModel.of_plan reads the job failure_plan describes: Daly's interval, the checkpoint, MTBF and restart."""
    plan = F.failure_plan(30 * 86400.0, 2048, 1e13, restart_s=900.0)
    job = F.FailureModel.of_plan(30 * 86400.0, plan)
    assert job == F.FailureModel(30 * 86400.0, plan["checkpoint_interval_seconds"], plan["checkpoint_seconds"],
                                 plan["mtbf_seconds"], 900.0)
