"""Tour sections on compute: FLOPs of a matmul, its measured time, FLOP/s and MFU; gradients and their FLOPs.

Follows CS336 Lecture 2 (Spring 2025), `tensor_operations_flops`, `gradients_basics` and
`gradients_flops`. FLOPs are predicted by `trainledger.account` and measured by
`trainledger.measure.flops` (torch's FlopCounterMode); time, FLOP/s, peak and MFU by `trainledger.measure`.
Sizes are the lecture's CPU sizes (B=1024, D=256, K=64); on CUDA the lecture uses 16384 × 32768 × 8192.
"""

from __future__ import annotations

from trainledger.tour.runner import Section, Tour

# tensor_operations_flops: "8 H100s for 2 weeks: total_flops = 8 * (60 * 60 * 24 * 7) * h100_flop_per_sec"
# printed 4.788e+21 — one week of seconds (facts.md, "Known quirks")
LECTURE_8_H100_TWO_WEEKS_PRINTED = 4.788e21
# ../shared/reference/facts.md, "Known quirks": "two weeks is 9.58e21"
FACTS_8_H100_TWO_WEEKS = 9.58e21
# tensor_operations_flops: "Training GPT-3 (2020) took 3.14e23 FLOPs" (175B parameters, 300B tokens: Brown et al. 2020)
LECTURE_GPT3_FLOPS = 3.14e23
# gradients_flops (facts.md): two-layer linear net, B=1024 D=256 K=64
LECTURE_FORWARD_FLOPS = 167_772_160
LECTURE_BACKWARD_FLOPS = 335_544_320
CPU_SIZES = {"B": 1024, "D": 256, "K": 64}      # the lecture's sizes without CUDA
CUDA_SIZES = {"B": 16384, "D": 32768, "K": 8192}  # the lecture's sizes with CUDA (tensor_operations_flops)
SECONDS_PER_DAY = 86400


def tensor_operations_flops(tour: Tour) -> None:
    import torch

    from trainledger.account.counting.flops import train_flops
    from trainledger.account.counting.matmul import matmul_flops
    from trainledger.account.planning.plan import budget_flops
    from trainledger.measure.flops import count_flops
    from trainledger.specs.hardware import get_gpu

    with tour.claim("GPT-3: 6 × 175B parameters × 300B tokens ≈ 3.14e23 FLOPs (the lecture's figure)") as c:
        gpt3 = train_flops(175e9, 300e9)
        tour.inspect("GPT-3 training FLOPs (6ND)", gpt3)
        c.approx(gpt3, LECTURE_GPT3_FLOPS, rel=0.01, predicted=gpt3, lecture=LECTURE_GPT3_FLOPS)

    peak = get_gpu("h100").peak("bf16")
    one_week = budget_flops(8, 7 * SECONDS_PER_DAY, peak, mfu=1.0)
    two_weeks = budget_flops(8, 14 * SECONDS_PER_DAY, peak, mfu=1.0)
    tour.inspect("8 H100 × 2 weeks at peak (account.planning.plan.budget_flops)", two_weeks)
    with tour.claim("8 H100s for two weeks at peak: 9.58e21 FLOPs, twice what the lecture's cell printed") as c:
        c.approx(one_week, LECTURE_8_H100_TWO_WEEKS_PRINTED, rel=1e-3, one_week=one_week,
                 lecture_printed=LECTURE_8_H100_TWO_WEEKS_PRINTED)
        c.approx(two_weeks, FACTS_8_H100_TWO_WEEKS, rel=1e-3, two_weeks=two_weeks, facts_two_weeks=FACTS_8_H100_TWO_WEEKS)
    tour.note(f"the lecture's '8 H100s for 2 weeks' multiplies by 60·60·24·7 seconds — one week — and prints "
              f"{LECTURE_8_H100_TWO_WEEKS_PRINTED:.4g}; two weeks are {two_weeks:.4g} FLOPs")

    sizes = CUDA_SIZES if tour.cuda else CPU_SIZES
    B, D, K = sizes["B"], sizes["D"], sizes["K"]
    tour.inspect("B, D, K", (B, D, K))
    tour.note(f"sizes: the lecture's own choice per device — B={B}, D={D}, K={K} on {tour.device} "
              f"(it uses 16384 × 32768 × 8192 with CUDA, 1024 × 256 × 64 without)")
    x = torch.ones(B, D, device=tour.device)
    w = torch.randn(D, K, device=tour.device)
    with tour.claim("x[B, D] @ w[D, K] costs 2·B·D·K FLOPs: FlopCounterMode (measured) = account (predicted)") as c:
        _, report = count_flops(torch.matmul, x, w)
        predicted = matmul_flops(B, D, K)
        tour.inspect("actual_num_flops", report.total)
        c.check(report.total == predicted == 2 * B * D * K, measured=report.total, predicted=predicted)

    _time_matmul_claims(tour, x, w, matmul_flops(B, D, K))


def _time_matmul_claims(tour: Tour, x, w, flops: int) -> None:
    """Time x @ w in float32 and bfloat16 with trainledger.measure.timing (warm-up, then the median of 5 runs)."""
    import statistics

    import torch

    results = {}
    for dtype, short in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        a, b = x.to(dtype), w.to(dtype)
        name = str(dtype).removeprefix("torch.")
        with tour.claim(f"{name} matmul timed after warm-up (measure.timing): FLOP/s > 0 and MFU > 0, "
                        "and MFU ≤ 1 where the peak is a ceiling (a datasheet, or cpufreq's max clock)") as c:
            from trainledger.measure.timing import mfu, peak_flops_per_s, peak_is_ceiling, time_fn

            cold = time_fn(lambda: a @ b, warmup=0, repeats=5, device=tour.device)  # the lecture's time_matmul
            timing = time_fn(lambda: a @ b, warmup=2, repeats=5, device=tour.device)
            rate = flops / timing.median_s
            results[name] = rate
            peak, source = peak_flops_per_s(tour.device, short)
            tour.inspect(f"{name}: actual_time (s), median after warm-up", timing.median_s)
            tour.inspect(f"{name}: time_matmul as the lecture runs it (mean, no warm-up)", statistics.mean(cold.times_s))
            tour.inspect(f"{name}: actual_flop_per_sec", rate)
            tour.inspect(f"{name}: promised_flop_per_sec", peak)
            tour.inspect(f"{name}: promised from", source)
            c.check(timing.median_s > 0 and rate > 0, seconds=timing.median_s, flops_per_s=rate)
            if peak is None:
                c.skip(f"no peak FLOP/s for this device, so no MFU ({source})")
            utilization = mfu(flops, timing.median_s, peak)
            tour.inspect(f"{name}: mfu", utilization)
            ceiling = peak_is_ceiling(tour.device)
            c.check(0 < utilization and (utilization <= 1 or not ceiling), mfu=utilization,
                    peak_flops_per_s=peak, peak_source=source, peak_is_ceiling=ceiling)
    with tour.claim("on a GPU, bfloat16 matmuls run at a higher FLOP/s than float32") as c:
        if not tour.cuda:
            c.skip("a claim about GPU tensor cores; on a CPU bf16 matmuls are often no faster than fp32")
        c.check(results["bfloat16"] > results["float32"], **results)
    tour.note("the lecture's time_matmul averages 5 runs with no warm-up, so one-time costs (first-call "
              "allocation, kernel selection, CUDA context) land in its average; the tour warms up twice and "
              "takes the median of 5 (both are shown)")


def gradients_basics(tour: Tour) -> None:
    import torch

    x = torch.tensor([1.0, 2, 3])
    w = torch.tensor([1.0, 1, 1], requires_grad=True)
    pred_y = x @ w
    loss = 0.5 * (pred_y - 5).pow(2)
    tour.inspect("loss = 0.5 (x·w - 5)²", loss)
    with tour.claim("forward: x·w = 6 and loss = 0.5") as c:
        c.check(pred_y.item() == 6 and loss.item() == 0.5, pred_y=pred_y.item(), loss=loss.item())
    loss.backward()
    tour.inspect("w.grad", w.grad)
    with tour.claim("backward: w.grad == [1, 2, 3] = (x·w - 5)·x") as c:
        c.check(torch.equal(w.grad, torch.tensor([1.0, 2, 3])), w_grad=w.grad)
    with tour.claim("loss.grad, pred_y.grad and x.grad are None (non-leaf, non-leaf, no requires_grad)") as c:
        import warnings
        with warnings.catch_warnings():  # reading .grad of a non-leaf warns, which is the point here
            warnings.simplefilter("ignore")
            c.check(loss.grad is None and pred_y.grad is None and x.grad is None)


def gradients_flops(tour: Tour) -> None:
    import torch

    from trainledger.account.counting.matmul import matmul_flops
    from trainledger.measure.flops import count_step_flops

    B, D, K = CPU_SIZES["B"], CPU_SIZES["D"], CPU_SIZES["K"]
    tour.inspect("B, D, K", (B, D, K))
    tour.note("sizes: the lecture's CPU sizes B=1024, D=256, K=64 on every device, because its published "
              "counts (167,772,160 and 335,544,320) are for those; FLOP counts do not depend on the device")
    # the lecture's model x --w1--> h1 --w2--> h2 -> loss; account's prediction, matmul by matmul
    forward_predicted = matmul_flops(B, D, D) + matmul_flops(B, D, K)
    backward_predicted = (matmul_flops(D, B, K) + matmul_flops(B, K, D)    # w2.grad, h1.grad
                          + matmul_flops(D, B, D) + matmul_flops(B, D, D))  # w1.grad, x.grad
    gen = torch.Generator(device=tour.device).manual_seed(0)

    def step(x_requires_grad: bool):
        x = torch.ones(B, D, device=tour.device, requires_grad=x_requires_grad)
        w1 = torch.randn(D, D, device=tour.device, generator=gen, requires_grad=True)
        w2 = torch.randn(D, K, device=tour.device, generator=gen, requires_grad=True)
        tensors = {}

        def forward():
            h1 = x @ w1
            h2 = h1 @ w2
            h1.retain_grad()
            h2.retain_grad()
            tensors.update(h1=h1, h2=h2, w1=w1, w2=w2)
            return h2.pow(2).mean()
        return count_step_flops(forward), tensors

    flops, tensors = step(x_requires_grad=True)
    tour.inspect("num_forward_flops (measured)", flops.forward.total)
    tour.inspect("num_backward_flops (measured)", flops.backward.total)
    with tour.claim("forward FLOPs 2BDD + 2BDK = 167,772,160: measured = predicted = the lecture's value") as c:
        c.check(flops.forward.total == forward_predicted == LECTURE_FORWARD_FLOPS, measured=flops.forward.total,
                predicted=forward_predicted, lecture=LECTURE_FORWARD_FLOPS)
    with tour.claim("backward FLOPs = 2 × forward = 335,544,320 (four gradient matmuls): measured = predicted = lecture") as c:
        c.check(flops.backward.total == backward_predicted == 2 * forward_predicted == LECTURE_BACKWARD_FLOPS,
                measured=flops.backward.total, predicted=backward_predicted, lecture=LECTURE_BACKWARD_FLOPS)
    with tour.claim("gradient shapes: w2.grad [D, K], h1.grad [B, D], h2.grad [B, K]") as c:
        shapes = {name: tuple(tensors[name].grad.shape) for name in ("w1", "w2", "h1", "h2")}
        c.check(shapes == {"w1": (D, D), "w2": (D, K), "h1": (B, D), "h2": (B, K)}, shapes=shapes)
    with tour.claim("with the lecture's exact code (x needs no gradient) autograd skips x.grad: 2·BDD fewer FLOPs") as c:
        lecture_flops, _ = step(x_requires_grad=False)
        skipped = backward_predicted - matmul_flops(B, D, D)
        c.check(lecture_flops.backward.total == skipped, measured=lecture_flops.backward.total, predicted=skipped)
    tour.note("the lecture counts 4·B·(# parameters) for the backward, which includes x.grad; its x is a leaf "
              "without requires_grad, so autograd never computes x.grad and measures 3 of the 4 products. "
              "The tour makes x require a gradient (as the input of a deeper layer does) for the 2× claim")
    with tour.claim("total = 6 × B × (# parameters) (the rule of six)") as c:
        n_params = D * D + D * K
        total = flops.forward.total + flops.backward.total
        c.check(total == 6 * B * n_params, measured=total, six_b_n=6 * B * n_params)


SECTIONS = [
    Section("tensor-operations-flops", "FLOPs of a matmul, its time, FLOP/s and MFU", tensor_operations_flops,
            "tensor_operations_flops, time_matmul, get_promised_flop_per_sec"),
    Section("gradients-basics", "Gradients: the w.grad == [1, 2, 3] example", gradients_basics, "gradients_basics"),
    Section("gradients-flops", "Gradient FLOPs of a two-layer linear net, measured and predicted", gradients_flops,
            "gradients_flops"),
]
