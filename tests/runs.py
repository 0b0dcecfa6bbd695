"""The tests' spelling of a run: the keyword names the accounting took before a run was one value (specs/run.py).

Tests asked `step_time(spec, gpu, batch_size=8, tp=2, ...)` and `memory_per_gpu(spec, precision=..., dp=8)`;
they now build the same run with `run_of(...)` and call the accounting with it (`step`, `memory` below), so what
they assert is unchanged. Each function's old defaults are kept: step_time computed in amp-bf16 with ZeRO 0 and,
for ZeRO-3 in PyTorch, FSDP2 gathering the parameters as stored; memory_per_gpu counted fp32, no reserve, and
ZeRO-3 as the paper shards it unless FSDP settings were given.
"""

from __future__ import annotations

from dataclasses import replace

from trainledger.specs.run import Fsdp, Hardware, Run
from trainledger.specs.run_checks import ParameterCount

RENAMED = {"compiled": "compile", "expert_imbalance": "imbalance", "ep_overlap": "overlap",
           "ep_dispatcher": "dispatcher", "reserve_bytes": "reserve"}
STEP_DEFAULTS = {"precision": "amp-bf16", "zero": 0, "reserve_bytes": None}
MEMORY_DEFAULTS = {"precision": "fp32", "zero": 0, "reserve_bytes": 0.0, "dp": 1}


def fsdp_of(settings) -> Fsdp:
    """The choices (specs.run.Fsdp) that give these resolved account.memory.fsdp.FsdpSettings."""
    return Fsdp(param_dtype=settings.param_dtype, reduce_dtype=settings.reduce_dtype,
                reshard_after_forward=settings.reshard_after_forward, accumulate=settings.accumulate,
                replicate=settings.replicate)


def run_of(defaults: dict | None = None, **keywords) -> Run:
    """A Run from the old keyword names (and the new field names), `defaults` filling what is not given."""
    keywords = {**(defaults or {}), **keywords}
    fsdp = keywords.pop("fsdp", "unset")
    grad_accum = keywords.pop("grad_accum", None)
    if keywords.get("reserve_bytes", "x") is None:     # the CUDA reserve (step_time: on CUDA devices only)
        keywords["reserve_bytes"] = "cuda"
    if keywords.get("sp") is None:
        keywords.pop("sp", None)
    changes = {RENAMED.get(name, name): value for name, value in keywords.items()}
    run = Run().with_(**changes)
    if fsdp == "unset":
        fsdp = Fsdp(param_dtype="stored", impl="fsdp2" if defaults is STEP_DEFAULTS else "paper")
    elif fsdp is None:
        fsdp = Fsdp(param_dtype="stored", impl="paper")
    elif not isinstance(fsdp, Fsdp):
        fsdp = fsdp_of(fsdp)
    run = replace(run, layout=replace(run.layout, fsdp=fsdp))
    if grad_accum is not None:
        dp = run.layout.dp or 1
        run = run.with_(global_batch_size=grad_accum * dp * run.batch.batch_size)
    return run


def step(spec, gpu, *, num_gpus=None, with_memory=True, cache=None, **keywords) -> dict:
    """account.time.step.step_time of the run the old keywords describe."""
    from trainledger.account.time.step import step_time
    from trainledger.account.memory.per_gpu import default_reserve
    if keywords.get("reserve_bytes") is None and default_reserve(gpu) is not None:   # step_time: 0 off CUDA
        keywords["reserve_bytes"] = default_reserve(gpu)
    return step_time(spec, Hardware(gpu, num_gpus), run_of(STEP_DEFAULTS, **keywords), with_memory=with_memory,
                     cache=cache)


def memory(spec=None, *, n_params=None, gpu=None, memory_per_gpu_bytes=None, **keywords) -> dict:
    """account.memory.per_gpu.memory_per_gpu of the run the old keywords describe."""
    from trainledger.account.memory.per_gpu import memory_per_gpu
    model = spec if spec is not None else ParameterCount(n_params)
    if keywords.get("seq_len") is not None and keywords.get("cp", 1) > 1:
        keywords["seq_len"] *= keywords["cp"]      # memory_per_gpu took each context-parallel rank's tokens
    hardware = Hardware(gpu, memory_per_gpu_bytes=memory_per_gpu_bytes)
    return memory_per_gpu(model, hardware, run_of(MEMORY_DEFAULTS, **keywords))


SEARCH_RENAMED = {"fsdp_param_dtype": "param_dtype", "compiled": "compile", "reserve_bytes": "reserve"}


def layouts(spec, gpu, *, num_gpus, memory_per_gpu_bytes=None, top=10, recomputes=None, **keywords) -> dict:
    """account.planning.layout.search of the settings the old keywords name (amp-bf16 unless given)."""
    from trainledger.account.planning.layout import search
    keywords = {"precision": "amp-bf16", **keywords}
    if keywords.get("reserve_bytes", "x") is None:     # search(): the device's default, default_reserve
        from trainledger.account.memory.per_gpu import default_reserve
        keywords["reserve_bytes"] = "cuda" if default_reserve(gpu) is None else default_reserve(gpu)
    run = Run().with_(**{SEARCH_RENAMED.get(k, k): v for k, v in keywords.items()})
    return search(spec, Hardware(gpu, num_gpus, memory_per_gpu_bytes), run, top=top, recomputes=recomputes)
