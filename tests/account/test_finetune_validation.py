"""torchtune's fine-tuning tables (account/validation/finetune.py) against the accounting.

The rows are transcribed from torchtune's README (reference/finetune.md) and asked as their configs run. Issue 38's
targets are peak memory within 10 % for >= 80 % of the scored rows and tokens/s within 25 % for >= 70 %; the tokens
target is met, the memory target is not (12 of 17 rows, docs/validation.md says which rows miss and why). The floors
below are what the accounting reaches today: a change that loses a row fails here.
"""

import pytest

from trainledger.account.validation import finetune as v
from trainledger.account.counting.params import param_counts
from trainledger.specs import get_model


@pytest.fixture(scope="module")
def rows():
    return {r["label"]: r for r in v.evaluate_all()}


def test_rows_are_the_published_tables():
    cases = v.memory_and_speed_cases() + v.optimization_flags_cases()
    assert len(cases) == 8 + 10
    published = {c.label: (c.published, dict(c.figures)["peak_memory_bytes"] / 2**30) for c in cases}
    assert published["llama-3.1-8b full 1xrtx-4090"] == (1650, pytest.approx(18.9))
    assert published["llama-3.1-8b qlora 1xrtx-4090"] == (2413, pytest.approx(7.4))
    assert published["llama-3.2-3b + 8-bit AdamW"] == (6960, pytest.approx(17.6))
    by_label = {c.label: c.run for c in cases}
    full = by_label["llama-3.1-8b full 1xrtx-4090"]
    assert full.numerics.optimizer == "paged-adamw-8bit" and full.levers.optimizer_in_backward
    assert full.levers.recompute == "full" and full.kernels.compile and full.batch.seq_len == 2048
    qlora = by_label["llama-3.1-405b qlora 8xa100-80gb"]
    assert qlora.finetune.method == "qlora" and qlora.finetune.lora_rank == 16 and qlora.layout.zero == 3
    seventy = by_label["llama-3.1-70b full 8xa100-80gb"]
    assert seventy.levers.cpu_offload == "params" and seventy.layout.fsdp.separate_embeddings
    assert seventy.numerics.optimizer_impl == "fused"
    lora3b = by_label["llama-3.2-3b LoRA"]
    assert lora3b.finetune.lora_rank == 64 and not lora3b.levers.optimizer_in_backward
    assert lora3b.numerics.optimizer == "adamw"


def test_eight_gpu_tokens_per_second_are_totals():
    """Read per GPU, 70B LoRA's 3,497 tokens/s would need more than an A100's dense bf16 peak (312 TFLOP/s) three
    times over: forward and input gradients, 4 FLOPs per parameter and token, without the frozen weight gradients."""
    flops_per_token = 4 * param_counts(get_model("llama-3.1-70b"))["n_params"]
    assert flops_per_token * 3497 > 3 * 312e12
    assert flops_per_token * 3497 / 8 < 312e12


def test_each_lever_of_the_optimization_flags_table_is_within_10_percent(rows):
    """Llama 3.2 3B on one A100, each technique on top of the previous: packed, compile (the layers' min-cut
    partition), chunked cross-entropy (compiled chunks), checkpointing, optimizer in backward, offloading, LoRA,
    QLoRA — peak memory within 10 % each; 8-bit AdamW misses (−10.6 %)."""
    for technique in ("+ packed dataset", "+ compile", "+ chunked cross-entropy", "+ activation checkpointing",
                      "+ optimizer in backward", "+ activation offloading", "LoRA", "QLoRA"):
        row = rows[f"llama-3.2-3b {technique}"]
        assert abs(row["memory_error"]) <= 0.10, (technique, row["memory_error"])
        assert abs(row["tokens_error"]) <= 0.10, (technique, row["tokens_error"])


def test_the_accounting_keeps_what_it_reaches(rows):
    """Issue 38: tokens/s within 25 % for >= 70 % of the scored rows (met: 14 of 17); peak memory within 10 % for >= 80 %
    (not met: 12 of 17). Floors at today's counts."""
    r = v.report(list(rows.values()))
    assert r["n"] == 17
    assert r["tokens_within_25"] >= 14 and r["tokens_share"] >= 0.70
    assert r["memory_within_10"] >= 12
