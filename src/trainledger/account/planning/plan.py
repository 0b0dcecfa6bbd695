"""Planning answers: training time, GPUs for a deadline, the largest model / micro-batch that fits, compute-optimal N and D. Pure, no torch.

Time (CS336 Lecture 2, motivating_questions): seconds = train FLOPs / (num_gpus · peak FLOP/s · MFU);
70B params × 15T tokens = 6.3e24 FLOPs on 1024 H100 (989.5e12 dense bf16) at MFU 0.5 → 4.377e22 FLOPs
per day → 143.93 days.
Compute-optimal (Hoffmann et al. 2022, "Chinchilla", arXiv:2203.15556): C = 6·N·D with D = r·N
(r ≈ 20 tokens per parameter) gives N = sqrt(C / (6r)); or Approach 3's fitted loss
L(N, D) = E + A/N^α + B/D^β minimised under C = 6ND in closed form (Sec. 3.3, App. D.2).
"""

from __future__ import annotations

import math

from trainledger.account.memory.per_gpu import d_model_estimate, memory_per_gpu
from trainledger.errors import TrainledgerError
from trainledger.specs.recipes import adafactor_elements_per_param, bytes_per_param, get_optimizer, get_recipe

SECONDS_PER_DAY = 86400.0
LAWS = ("chinchilla-20", "approach3")
# Chinchilla Approach 3 fit (Hoffmann et al. 2022, Sec. 3.3, Eq. 10). The rounded constants put the
# optimum for Gopher's 5.76e23 FLOPs at ~32B parameters (the paper's figure shows ~40B).
APPROACH3 = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def _positive(value, flag: str) -> float:
    if value is None or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise TrainledgerError(f"{flag} must be positive, got {value!r}")
    return value


def training_time(train_flops: float, num_gpus: int, peak_flops_per_s: float, mfu: float) -> dict:
    """Seconds, days and GPU-hours to spend `train_flops` on `num_gpus` GPUs at `mfu` of their peak FLOP/s.

    seconds = FLOPs / (num_gpus · peak · mfu) (CS336 Lecture 2). Returns train_seconds, train_days,
    gpu_hours, flops_per_day (all GPUs together, at that MFU).
    """
    _positive(train_flops, "--tokens")
    _positive(num_gpus, "--num-gpus")
    _positive(peak_flops_per_s, "--gpu")
    if not 0 < mfu <= 1:
        raise TrainledgerError(f"--mfu must be in (0, 1], got {mfu!r}")
    rate = num_gpus * peak_flops_per_s * mfu
    seconds = train_flops / rate
    return {"train_seconds": seconds, "train_days": seconds / SECONDS_PER_DAY, "gpu_hours": seconds * num_gpus / 3600.0,
            "flops_per_day": rate * SECONDS_PER_DAY}


def model_flops_utilization(tokens_per_s: float, flops_per_token: float, peak_flops_per_s: float) -> float:
    """MFU, a fraction: observed tokens/s × model FLOPs per token / peak FLOP/s of all the devices together.

    PaLM (Chowdhery et al. 2022, arXiv:2204.02311, Sec. 4.1 and App. B): model FLOPs exclude
    recomputation, so MFU does not reward rematerialisation; PaLM 540B at 238.3K tokens/s on 6144 TPU v4
    (275e12 bf16 each) with 6N + 12·L·H·Q·T FLOPs per token is 46.2%.
    """
    _positive(tokens_per_s, "tokens_per_s")
    _positive(flops_per_token, "flops_per_token")
    _positive(peak_flops_per_s, "peak_flops_per_s")
    return tokens_per_s * flops_per_token / peak_flops_per_s


def budget_flops(num_gpus: int, seconds: float, peak_flops_per_s: float, mfu: float) -> float:
    """FLOPs `num_gpus` GPUs deliver in `seconds` at `mfu` of peak: num_gpus · seconds · peak · mfu.

    CS336 Lecture 2's "8 H100s for 2 weeks" multiplies by one week of seconds (4.79e21 at MFU 1);
    two weeks are 9.58e21.
    """
    return _positive(num_gpus, "--num-gpus") * _positive(seconds, "--days") * peak_flops_per_s * mfu


def gpus_needed(train_flops: float, deadline_seconds: float, peak_flops_per_s: float, mfu: float) -> int:
    """Smallest whole number of GPUs (a count) that spends `train_flops` within `deadline_seconds` at `mfu`."""
    _positive(deadline_seconds, "--deadline")
    return max(1, math.ceil(train_flops / (deadline_seconds * peak_flops_per_s * mfu) - 1e-9))


def _per_gpu_bytes_per_param(parts: dict, zero: int, num_gpus: int) -> float:
    """Bytes per parameter on one GPU when ZeRO stage `zero` shards states over `num_gpus` ranks."""
    shard = lambda stage: num_gpus if zero >= stage else 1  # noqa: E731
    return (parts["params"] / shard(3) + parts["grads"] / shard(2)
            + (parts["master_params"] + parts["optimizer"]) / shard(1))


def _with_fp8_copies(parts: dict, precision: str) -> dict:
    """Bytes per parameter with an FP8 recipe's cached weight copies (specs/fp8.py) added to "params", counted
    for every parameter (without a model the Linear share is unknown: an upper bound by the embeddings' share)."""
    from trainledger.specs.fp8 import fp8_scheme
    scheme = fp8_scheme(precision)
    if scheme is None or not scheme.weight_copies:
        return parts
    extra = scheme.weight_copies * scheme.fp8_bytes_per_element()
    return dict(parts, params=parts["params"] + extra, total=parts["total"] + extra, fp8_weight_copies=extra)


def max_params(memory_per_gpu_bytes: float, num_gpus: int, precision: str = "fp32", optimizer: str = "adamw",
               zero: int = 3, reserve_bytes: float = 0.0) -> dict:
    """Largest parameter count whose model states fit on `num_gpus` GPUs: usable memory / bytes per parameter per GPU.

    zero = 3 (the default) shards every state over all GPUs, which is what the lecture computes:
    8 × 80e9 B / 16 B/param (naive fp32 AdamW) = 4.0e10 (CS336 Lecture 2). zero = 0 replicates the
    states on every GPU (plain data parallelism): 80e9 / 16 = 5e9. Activations are not counted.
    Returns memory_per_gpu_bytes, bytes_per_param (unsharded), bytes_per_param_per_gpu, max_params.
    """
    _positive(memory_per_gpu_bytes, "--memory-per-gpu")
    _positive(num_gpus, "--num-gpus")
    if zero not in (0, 1, 2, 3):
        raise TrainledgerError(f"--zero must be one of 0, 1, 2, 3, got {zero!r}")
    usable = memory_per_gpu_bytes - reserve_bytes
    if usable <= 0:
        raise TrainledgerError(f"--reserve ({reserve_bytes:.4g} B) leaves nothing of the {memory_per_gpu_bytes:.4g} B per GPU; "
                               "it must be smaller than the GPU memory (--memory-per-gpu)")
    recipe, opt = get_recipe(precision), get_optimizer(optimizer)
    elements = None
    n = usable * num_gpus / 16.0
    for _ in range(8 if opt.factored else 1):      # Adafactor's state depends on d_model, which depends on N
        if opt.factored:
            elements = adafactor_elements_per_param(d_model_estimate(n))
        parts = _with_fp8_copies(bytes_per_param(recipe, opt, elements), recipe.name)
        per_gpu = _per_gpu_bytes_per_param(parts, zero, num_gpus)
        n = usable / per_gpu
    return {"memory_per_gpu_bytes": float(memory_per_gpu_bytes), "num_gpus": num_gpus, "reserve_bytes": float(reserve_bytes),
            "bytes_per_param": parts["total"], "bytes_per_param_parts": parts, "bytes_per_param_per_gpu": per_gpu,
            "max_params": n, "precision": recipe.name, "optimizer": opt.name, "zero": zero}


def max_micro_batch(spec, hardware, run) -> dict:
    """Largest micro-batch size (a count, 0 if none) of `run` whose peak bytes per GPU + reserve fit `hardware`.

    Memory grows monotonically with the batch (activations), so a doubling then bisection search over
    account.memory.per_gpu.memory_per_gpu finds it exactly; the global batch is one micro-batch per data-parallel
    rank. Returns max_batch_size and the memory at that size.
    """
    def fits(b):
        m = memory_per_gpu(spec, hardware, run.with_(batch_size=b, global_batch_size=None))
        return m["fits"], m

    ok, m = fits(1)
    if not ok:
        return {"max_batch_size": 0, "memory_at_max": m}
    lo, hi = 1, 2
    while hi <= 2**40 and fits(hi)[0]:
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid)[0] else (lo, mid)
    return {"max_batch_size": lo, "memory_at_max": fits(lo)[1]}


def approach3_loss(n_params: float, n_tokens: float) -> float:
    """Predicted loss (nats/token): E + A/N^α + B/D^β with Chinchilla's Approach 3 constants (Hoffmann et al. 2022, Eq. 10)."""
    c = APPROACH3
    return c["E"] + c["A"] / n_params ** c["alpha"] + c["B"] / n_tokens ** c["beta"]


def _smallest_budget(law: str, tokens_per_param: float) -> float:
    """The FLOPs from which compute_optimal gives N >= 1 and D >= 1 (C = 6·N·D).

    chinchilla-20: N = sqrt(C/(6r)) >= 1 and D = r·N >= 1, so C >= 6·max(r, 1/r).
    approach3: N = g·(C/6)^e >= 1 and D = (C/6)/N >= 1, so C/6 >= max(g^(-1/e), g^(1/(1-e))).
    """
    if law == "chinchilla-20":
        return 6.0 * max(tokens_per_param, 1.0 / tokens_per_param)
    c = APPROACH3
    g = (c["alpha"] * c["A"] / (c["beta"] * c["B"])) ** (1 / (c["alpha"] + c["beta"]))
    e = c["beta"] / (c["alpha"] + c["beta"])
    return 6.0 * max(g ** (-1 / e), g ** (1 / (1 - e)))


def compute_optimal(budget: float, law: str = "chinchilla-20", tokens_per_param: float = 20.0) -> dict:
    """Compute-optimal parameters and tokens for `budget` FLOPs, with C = 6·N·D.

    chinchilla-20: D = r·N, N = sqrt(C/(6r)) (Hoffmann et al. 2022, Table 3: ~20 tokens per parameter).
    approach3: N = G·(C/6)^(β/(α+β)), G = (αA/(βB))^(1/(α+β)), D = C/(6N) (Sec. 3.3, App. D.2).
    Both report approach3_loss(N, D) as `predicted_loss`.
    """
    _positive(budget, "--budget-flops")
    if law not in LAWS:
        raise TrainledgerError(f"--law must be one of {', '.join(LAWS)}, got {law!r}")
    if law == "chinchilla-20":
        _positive(tokens_per_param, "--tokens-per-param")
        n = math.sqrt(budget / (6.0 * tokens_per_param))
    else:
        c = APPROACH3
        g = (c["alpha"] * c["A"] / (c["beta"] * c["B"])) ** (1 / (c["alpha"] + c["beta"]))
        n = g * (budget / 6.0) ** (c["beta"] / (c["alpha"] + c["beta"]))
    if not n >= 1 or not budget / (6.0 * n) >= 1:     # C = 6·N·D: under 6 FLOPs not one parameter and one token
        raise TrainledgerError(f"--budget-flops {budget:g} is too small: the compute-optimal model would have "
                               f"{n:.3g} parameters; a budget gives at least one parameter and one token from about "
                               f"{_smallest_budget(law, tokens_per_param):.3g} FLOPs", "--budget-flops")
    d = budget / (6.0 * n)
    return {"budget_flops": budget, "n_params": n, "n_tokens": d, "tokens_per_param": d / n, "law": law,
            "predicted_loss": approach3_loss(n, d)}
