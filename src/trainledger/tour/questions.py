"""Tour section on the lecture's two napkin-math questions, answered by trainledger.account.

Follows CS336 Lecture 2 (Spring 2025), `motivating_questions`. Every number below the published
values is computed by `trainledger.account` from the question's inputs (70B, 15T, 1024 H100, MFU 0.5;
8 H100 of 80 GB with naive float32 AdamW) and the H100 datasheet peak in `trainledger.specs.hardware`.
"""

from __future__ import annotations

from trainledger.tour.runner import Section, Tour

# motivating_questions: total_flops = 6 * 70e9 * 15e12; flops_per_day at 1024 H100, MFU 0.5; days (facts.md)
LECTURE_TOTAL_FLOPS = 6.3e24
LECTURE_FLOPS_PER_DAY = 4.37723136e22
LECTURE_DAYS = 143.93
# motivating_questions: bytes_per_parameter = 4 + 4 + (4 + 4); num_parameters = 8 * 80e9 / 16 = 4e10
LECTURE_BYTES_PER_PARAM = 16
LECTURE_MAX_PARAMS = 4.0e10


def motivating_questions(tour: Tour) -> None:
    from trainledger.account.counting.flops import train_flops
    from trainledger.account.planning.plan import max_params, training_time
    from trainledger.specs.hardware import get_gpu

    h100 = get_gpu("h100")
    peak = h100.peak("bf16")
    tour.inspect("h100_flop_per_sec (dense bf16, specs.hardware)", peak)
    with tour.claim("H100 dense bf16 peak = 1979e12 / 2 (the datasheet's sparse figure halved)") as c:
        c.check(peak == 1979e12 / 2, peak_flops_per_s=peak)

    total_flops = train_flops(70e9, 15e12)
    tour.inspect("total_flops = 6 · 70e9 · 15e12", total_flops)
    with tour.claim("70B parameters × 15T tokens: 6ND = 6.3e24 FLOPs (account.counting.flops.train_flops)") as c:
        c.approx(total_flops, LECTURE_TOTAL_FLOPS, rel=1e-12, predicted=total_flops, lecture=LECTURE_TOTAL_FLOPS)
    time = training_time(total_flops, num_gpus=1024, peak_flops_per_s=peak, mfu=0.5)
    tour.inspect("flops_per_day (1024 H100, MFU 0.5)", time["flops_per_day"])
    tour.inspect("days", time["train_days"])
    with tour.claim("1024 H100 at MFU 0.5 deliver 4.377e22 FLOPs a day (account.planning.plan.training_time)") as c:
        c.approx(time["flops_per_day"], LECTURE_FLOPS_PER_DAY, rel=1e-9, predicted=time["flops_per_day"],
                 lecture=LECTURE_FLOPS_PER_DAY)
    with tour.claim("so the 70B × 15T run takes ≈ 144 days (143.93)") as c:
        c.approx(time["train_days"], LECTURE_DAYS, rel=1e-4, predicted_days=time["train_days"], lecture_days=LECTURE_DAYS)

    # the lecture's 80e9 bytes: the datasheet's "80GB" (a real H100 reports 79.18 GiB = 85.0e9 B: `trainledger fit`)
    fit = max_params(h100.datasheet_memory_bytes, num_gpus=8, precision="fp32", optimizer="adamw")
    tour.inspect("h100_bytes (specs.hardware, datasheet)", h100.datasheet_memory_bytes)
    tour.inspect("bytes_per_parameter (fp32 AdamW: params, grads, m, v)", fit["bytes_per_param_parts"])
    tour.inspect("num_parameters that fit on 8 H100", fit["max_params"])
    with tour.claim("naive float32 AdamW needs 4 + 4 + (4 + 4) = 16 bytes per parameter (account.planning.plan.max_params)") as c:
        c.check(fit["bytes_per_param"] == LECTURE_BYTES_PER_PARAM, predicted=fit["bytes_per_param"],
                lecture=LECTURE_BYTES_PER_PARAM, parts=fit["bytes_per_param_parts"])
    with tour.claim("the largest model on 8 H100 (80e9 bytes each) is ≈ 40B parameters, activations not counted") as c:
        c.check(h100.datasheet_memory_bytes == 80e9, h100_bytes=h100.datasheet_memory_bytes)
        c.approx(fit["max_params"], LECTURE_MAX_PARAMS, rel=1e-12, predicted=fit["max_params"], lecture=LECTURE_MAX_PARAMS)
    with tour.claim("caveat 1: bf16 params and grads plus an fp32 master copy (ZeRO's 2 + 2 + 12) save no memory") as c:
        mixed = max_params(h100.datasheet_memory_bytes, num_gpus=8, precision="mixed-bf16", optimizer="adamw")
        tour.inspect("bytes_per_parameter, mixed-bf16 AdamW", mixed["bytes_per_param_parts"])
        c.check(mixed["bytes_per_param"] == fit["bytes_per_param"], mixed_bf16=mixed["bytes_per_param"],
                fp32=fit["bytes_per_param"])
    tour.note("both answers are napkin math: no communication, failures or activations (caveat 2), as the lecture says")


SECTIONS = [
    Section("motivating-questions", "Motivating questions: how long, and how big?", motivating_questions,
            "motivating_questions"),
]
