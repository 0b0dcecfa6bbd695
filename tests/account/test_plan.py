"""account/planning/plan.py against the lecture's napkin math, Chinchilla's Table 3 and Approach 3, and ZeRO's sharding."""

import math

import pytest

from trainledger.account.planning import plan as P
from runs import MEMORY_DEFAULTS, run_of
from runs import memory as memory_per_gpu
from trainledger.specs.run import Hardware
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model

H100_BF16 = 989.5e12   # dense bf16, the lecture's h100_flop_per_sec = 1979e12 / 2


def test_lecture_70b_on_15t_tokens():
    # CS336 Lecture 2: 6 × 70e9 × 15e12 = 6.3e24; 1024 H100 at MFU 0.5: 4.37723136e22 FLOPs/day; 143.93 days
    t = P.training_time(6 * 70e9 * 15e12, 1024, H100_BF16, 0.5)
    assert t["flops_per_day"] == pytest.approx(4.37723136e22, rel=1e-12)
    assert t["train_days"] == pytest.approx(143.93, abs=0.005)
    assert t["gpu_hours"] == pytest.approx(t["train_seconds"] * 1024 / 3600)


def test_gpus_needed_for_deadline():
    flops = 6.3e24
    n = P.gpus_needed(flops, 30 * 86400, H100_BF16, 0.5)
    assert P.training_time(flops, n, H100_BF16, 0.5)["train_days"] <= 30
    assert P.training_time(flops, n - 1, H100_BF16, 0.5)["train_days"] > 30
    assert n == math.ceil(1024 * 143.9265938 / 30)


def test_lecture_largest_model_on_8_h100():
    # CS336 Lecture 2: 8 × 80e9 bytes / (4 + 4 + 4 + 4) bytes per param = 4.0e10 (all 8 GPUs' memory pooled = ZeRO-3)
    fit = P.max_params(80e9, 8, "fp32", "adamw")
    assert fit["bytes_per_param"] == 16
    assert fit["max_params"] == pytest.approx(4.0e10)
    assert P.max_params(80e9, 8, "fp32", "adamw", zero=0)["max_params"] == pytest.approx(5e9)    # replicated
    assert P.max_params(80e9, 8, "bf16", "adamw")["max_params"] == pytest.approx(8e10)          # 8 B/param


def test_max_params_agrees_with_memory_per_gpu():
    # the largest model under ZeRO-1 over 64 GPUs fills one GPU exactly (memory_per_gpu as the independent side)
    fit = P.max_params(80e9, 64, "mixed-bf16", "adam", zero=1, reserve_bytes=4e9)
    m = memory_per_gpu(n_params=fit["max_params"], precision="mixed-bf16", optimizer="adam", zero=1, dp=64)
    assert m["total_bytes"] == pytest.approx(76e9)


def test_lecture_two_weeks_quirk():
    # CS336 Lecture 2 "8 H100s for 2 weeks" multiplies one week of seconds: 4.79e21; two weeks are 9.58e21 (MFU 1)
    assert P.budget_flops(8, 7 * 86400, H100_BF16, 1.0) == pytest.approx(4.788e21, rel=1e-3)
    assert P.budget_flops(8, 14 * 86400, H100_BF16, 1.0) == pytest.approx(9.58e21, rel=1e-3)


def test_32_h100_for_two_weeks():
    # the lecture's opening question at MFU 0.5 with Chinchilla's 20 tokens per parameter
    budget = P.budget_flops(32, 14 * 86400, H100_BF16, 0.5)
    assert budget == pytest.approx(1.91503872e22)
    opt = P.compute_optimal(budget)
    assert opt["n_params"] == pytest.approx(math.sqrt(budget / 120))
    assert opt["n_tokens"] == pytest.approx(20 * opt["n_params"])
    assert 6 * opt["n_params"] * opt["n_tokens"] == pytest.approx(budget)


@pytest.mark.parametrize("n_params, flops, n_tokens, tokens_rel", [
    (400e6, 1.92e19, 8.0e9, 0.05),
    (10e9, 1.23e22, 2.05e11, 0.05),
    (67e9, 5.76e23, 1.5e12, 0.08),   # Table 3 uses 22.4 tokens/param at this size; 20/param gives 7.6% fewer tokens
])
def test_chinchilla_table_3(n_params, flops, n_tokens, tokens_rel):
    # Hoffmann et al. 2022 (arXiv:2203.15556), Table 3 (Approach 1 rows)
    opt = P.compute_optimal(flops, "chinchilla-20")
    assert opt["n_params"] == pytest.approx(n_params, rel=0.05)
    assert opt["n_tokens"] == pytest.approx(n_tokens, rel=tokens_rel)
    assert 6 * n_params * n_tokens == pytest.approx(flops, rel=0.05)     # C = 6ND holds for the table's rows


def test_tokens_per_param_option():
    opt = P.compute_optimal(1e22, tokens_per_param=100)
    assert opt["n_tokens"] / opt["n_params"] == pytest.approx(100)


def test_approach3_gopher_budget():
    # Chinchilla Approach 3 with the rounded constants: ~32B for Gopher's 5.76e23 FLOPs (the paper's plot shows ~40B)
    opt = P.compute_optimal(5.76e23, "approach3")
    assert opt["n_params"] == pytest.approx(32e9, rel=0.05)
    # it is the minimum of the loss along C = 6ND: nudging N either way raises the loss
    for factor in (0.9, 1.1):
        n = opt["n_params"] * factor
        assert P.approach3_loss(n, 5.76e23 / (6 * n)) > opt["predicted_loss"]
    assert opt["predicted_loss"] == pytest.approx(1.69 + 406.4 / opt["n_params"] ** 0.34 + 410.7 / opt["n_tokens"] ** 0.28)


def test_max_micro_batch_is_the_boundary():
    spec = get_model("gpt2")
    found = P.max_micro_batch(spec, Hardware(None, memory_per_gpu_bytes=40e9),
                              run_of(MEMORY_DEFAULTS, seq_len=1024, reserve_bytes=1e9, precision="mixed-bf16", optimizer="adamw"))
    b = found["max_batch_size"]
    assert b > 1
    mem = lambda n: memory_per_gpu(spec, batch_size=n, seq_len=1024, precision="mixed-bf16", optimizer="adamw")["peak_bytes"]  # noqa: E731
    assert mem(b) + 1e9 <= 40e9 < mem(b + 1) + 1e9
    assert P.max_micro_batch(spec, Hardware(None, memory_per_gpu_bytes=1e9),
                             run_of(MEMORY_DEFAULTS, seq_len=1024))["max_batch_size"] == 0


def test_bad_inputs_name_flags():
    with pytest.raises(TrainledgerError, match="--mfu"):
        P.training_time(1e20, 8, H100_BF16, 1.5)
    with pytest.raises(TrainledgerError, match="--law"):
        P.compute_optimal(1e20, "kaplan")
    with pytest.raises(TrainledgerError, match="--budget-flops"):
        P.compute_optimal(0)
    with pytest.raises(TrainledgerError, match="--reserve"):
        P.max_params(80e9, 8, reserve_bytes=90e9)
    with pytest.raises(TrainledgerError, match="--optimizer"):
        P.max_params(80e9, 8, optimizer="lion")


def test_palm_540b_mfu_is_46_percent():
    # PaLM (Chowdhery et al. 2022, arXiv:2204.02311) Table 3 / App. B: 540.35B params, L=118, H=48, Q=256,
    # T=2048, 238.3K tokens/s on 6144 TPU v4 chips at 275 TFLOP/s (bf16) -> 46.2% MFU
    from trainledger.account.counting.flops import palm_train_flops_per_token
    from trainledger.account.planning.plan import model_flops_utilization
    from trainledger.specs.hardware import get_gpu
    per_token = palm_train_flops_per_token(540.35e9, 118, 48, 256, 2048)
    peak = 6144 * get_gpu("tpu-v4").peak("bf16")
    assert model_flops_utilization(238.3e3, per_token, peak) == pytest.approx(0.462, abs=0.0005)


def test_llama_3_405b_training_flops():
    # Llama 3 (arXiv:2407.21783, Sec. 3.2.1): 405B parameters on 15.6T tokens = 3.8e25 FLOPs (6ND)
    from trainledger.account.counting.flops import train_flops
    assert train_flops(405e9, 15.6e12) == pytest.approx(3.8e25, rel=0.01)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_mfu_rejects_non_positive_inputs(bad):
    from trainledger.account.planning.plan import model_flops_utilization
    with pytest.raises(TrainledgerError):
        model_flops_utilization(bad, 1.0, 1.0)
