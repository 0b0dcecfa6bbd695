"""Every published multi-GPU run of account/validation/runs.py in one form, and how far the model is off per
source: the table of docs/time.md ("Time at scale") and the rows account/validation/interval.py rests on. Pure.

A row: source, label, framework kind ("megatron", "pytorch", or "deepspeed" for Megatron-DeepSpeed, which no
--framework models: its rows count in the table but never in the interval of a `--framework megatron` answer), gpu, gpu_kind (a100, hopper), num_gpus,
predicted_step_seconds, published_step_seconds and error = predicted / published − 1 of the step (positive: the
prediction is slower than the run; negative: optimistic), publication (the document: a source of the dense table, the
document of an MoE set) and software_year (the year of the code it ran). Steps come from the published figure as printed:
seconds per iteration (Korthikanti Table 5), tokens/s per GPU (torchtitan: step = tokens per step / (tokens/s per
GPU · GPUs)), TFLOP/s per GPU (Narayanan: step = their Eq. 3 FLOPs / (TFLOP/s · GPUs)), MFU (Llama 3 Table 4: the step error is published MFU / predicted MFU − 1).
"""

from __future__ import annotations

from functools import lru_cache

SOURCES = {
    "korthikanti": "Korthikanti et al. 2022 (arXiv:2205.05198), Table 5: Megatron-LM GPT 22B-1T on A100-80GB",
    "narayanan": "Narayanan et al. 2021 (arXiv:2104.04473), Tables 1 and 2: Megatron-LM GPT 1.7B-1T on 32-3072 "
                 "A100-80GB, TFLOP/s per GPU by their Eq. 3",
    "mt-nlg": "Smith et al. 2022 (arXiv:2201.11990), Sec. 2.4: MT-NLG 530B on 2240-3360 A100-80GB, seconds per "
              "iteration (Megatron-DeepSpeed: DeepSpeed's pipeline with Megatron's tensor slicing)",
    "llama3": "Llama 3 (arXiv:2407.21783), Table 4: 405B on 8,192-16,384 H100, BF16 MFU (causal count)",
    "torchtitan-a100": "pytorch/torchtitan docs/performance.md (A100 version, 2024-08): FSDP2 on 64 A100 80GB",
    "torchtitan-h100": "pytorch/torchtitan docs/performance.md (2024-12; arXiv:2410.06511): H100 96GB HBM2e at 500 W",
}
# The year of the code each source ran (its software era, account/validation/interval.py ERAS): Narayanan's Megatron-LM
# of 2021 (commit aed2f75 era), MT-NLG's Megatron-DeepSpeed of 2021, Korthikanti's Megatron-LM of 2022, Llama 3's
# and torchtitan's stacks of 2024, the MoE runs' Megatron Bridge / Megatron-Core / NeMo Automodel of 2025-26.
SOFTWARE_YEAR = {"korthikanti": 2022, "narayanan": 2021, "mt-nlg": 2021, "llama3": 2024, "torchtitan-a100": 2024,
                 "torchtitan-h100": 2024}
MOE_SOFTWARE_YEAR = 2025
# The publication each MoE set comes from: rows of one document share its biases, so the interval's check holds a
# whole document out at once (interval_check.leave_one_source_out). The Megatron Bridge summary's 25.11 and 26.02
# tables are one document.
MOE_PUBLICATION = {"TAKEN": "megatron-bridge summary", "ASIDE": "megatron-bridge summary",
                   "FP8_TAKEN": "megatron-bridge summary", "FP8_ASIDE": "megatron-bridge summary",
                   "DEEPSEEK_MTP": "megatron-bridge summary", "SKILL_RUN": "megatron-bridge SKILL.md",
                   "AUTOMODEL": "nemo automodel", "REPORT": "megatron-core moe report"}


def gpu_kind(gpu_name: str) -> str:
    """The chip a GPU entry is made of, for "runs like this one": a100 (both memory sizes), hopper (H100, H200)."""
    name = gpu_name.lower()
    if name.startswith("a100"):
        return "a100"
    if name.startswith(("h100", "h200", "h800", "gh200")):
        return "hopper"
    return name


def framework_kind(framework: str) -> str:
    """megatron (Megatron-LM's fused kernels), deepspeed (Megatron-DeepSpeed, only in published rows) or pytorch
    (eager PyTorch: trainledger, torchtitan)."""
    return framework if framework in ("megatron", "deepspeed") else "pytorch"


@lru_cache(maxsize=1)
def published_rows() -> tuple[dict, ...]:
    """All rows, predicted now with the model as it is (about a second; cached for the process)."""
    from trainledger.account.validation import megatron_runs, runs
    rows = []
    for r in runs.korthikanti_cases():
        rows.append(_row("korthikanti", f"{r['model']} {r['setting']}", "megatron", "a100-80gb",
                         r["num_gpus"], r["predicted_seconds"], r["published_seconds"], cli=r["cli"]))
    for r in megatron_runs.narayanan_cases():
        rows.append(_row("narayanan", r["label"], "megatron", "a100-80gb", r["num_gpus"], r["predicted_seconds"],
                         r["published_seconds"], cli=r["cli"]))
    for r in megatron_runs.mtnlg_cases():
        rows.append(_row("mt-nlg", r["label"], "deepspeed", "a100-80gb", r["num_gpus"], r["predicted_seconds"],
                         r["published_seconds"], cli=r["cli"]))
    for r in runs.llama3_cases():
        step = r["step_seconds"]
        rows.append(_row("llama3", f"{r['gpus']} GPUs, seq {r['seq_len']}, cp {r['cp']}", "megatron", "h100-sxm",
                         r["gpus"], step, step * r["predicted_mfu"] / r["published_mfu"], cli=r["cli"]))
    for r in runs.torchtitan_cases():
        if "error" not in r:
            continue
        tokens = r["batch_size"] * r["dp"] * r["seq_len"]
        source = "torchtitan-a100" if r["gpu"].startswith("a100") else "torchtitan-h100"
        rows.append(_row(source, r["label"], "pytorch", r["gpu"], r["num_gpus"], r["step_seconds"],
                         tokens / (r["published_tokens_per_s_per_gpu"] * r["num_gpus"]), cli=r["cli"]))
    return tuple(rows)


@lru_cache(maxsize=1)
def moe_rows() -> tuple[dict, ...]:
    """The published mixture-of-experts runs (account/validation/moe.py all_cases: the Megatron Bridge summary, the
    SKILL.md run, the Megatron-Core MoE report, NeMo Automodel's runs) in the same form, for the error bar of an MoE
    answer: a step per token per GPU, 1 / (tokens/s per GPU), so that predicted / published − 1 is the step's error.
    Framework kind "megatron", but "pytorch" for Automodel's (PyTorch FSDP2, set AUTOMODEL). Kept apart from
    published_rows (dense), whose table issue 27 reports."""
    from trainledger.account.validation import moe
    return tuple(dict(_row(f"moe {r['set']}", f"{r['model']} on {r['num_gpus']} {r['gpu']}, {r['precision']}",
                           "pytorch" if r["set"] == "AUTOMODEL" else "megatron",
                           r["gpu"], r["num_gpus"], 1 / r["predicted_tokens_per_s_per_gpu"],
                           1 / r["published_tokens_per_s_per_gpu"]),
                      publication=MOE_PUBLICATION[r["set"]], software_year=MOE_SOFTWARE_YEAR) for r in moe.all_cases())


def published_runs() -> list:
    """Every dense published run behind published_rows, as account.validation.published_run.PublishedRun values, in
    the same order (Korthikanti, Narayanan, MT-NLG, Llama 3, torchtitan)."""
    from trainledger.account.validation import megatron_runs, runs
    return (runs.korthikanti_runs() + megatron_runs.narayanan_runs() + megatron_runs.mtnlg_runs()
            + runs.llama3_runs() + runs.torchtitan_runs())


def moe_runs() -> list:
    """Every mixture-of-experts published run behind moe_rows (moe.all_cases' order), as PublishedRun values."""
    from trainledger.account.validation import moe, moe_report
    groups = (moe.TAKEN, moe.ASIDE, moe.FP8_TAKEN, moe.FP8_ASIDE, moe.DEEPSEEK_MTP, [moe.SKILL_RUN])
    return ([moe.moe_run(row) for group in groups for row in group] + [moe.automodel_run(row) for row in moe.AUTOMODEL]
            + [moe_report.report_run(row) for row in moe_report.REPORT_TAKEN])


def every_run() -> list:
    """Every published run of every validation table (dense, FP8, MoE, DeepSeek-V3's pre-training), each once."""
    from dataclasses import replace

    from trainledger.account.validation import fp8, moe
    fp8_runs = ([fp8.megatron_bridge_run(r) for r in fp8.MEGATRON_BRIDGE + fp8.MEGATRON_BRIDGE_MX]
                + [fp8.blackwell_ultra_run(container, row) for container, row in fp8.BLACKWELL_ULTRA]
                + [fp8.torchtitan_run(r) for r in fp8.TORCHTITAN_FLOAT8 + fp8.TORCHTITAN_FLOAT8_ASIDE])
    moe_more = [moe.moe_run(row) for row in moe.TOKENDROP_2509 + moe.BLACKWELL_ULTRA]
    readings = [replace(case, label=f"{case.label}, as its recipe ran it") for case in map(moe.moe_run,
                                                                                           moe.RECIPE_READING)]
    return published_runs() + fp8_runs + moe_runs() + moe_more + readings + [moe.deepseek_v3_run()]


def _row(source, label, framework, gpu, num_gpus, predicted, published, cli=None) -> dict:
    """A row (module docstring); `publication` (the document, for holding a source out) and `software_year` (the
    year of the code it ran) of a dense source are its own."""
    return {"source": source, "label": label, "framework_kind": framework, "gpu": gpu, "gpu_kind": gpu_kind(gpu),
            "num_gpus": num_gpus, "predicted_step_seconds": predicted, "published_step_seconds": published,
            "error": predicted / published - 1, "cli": cli, "publication": source,
            "software_year": SOFTWARE_YEAR.get(source, MOE_SOFTWARE_YEAR)}


def per_source(rows=None, within: float = 0.15) -> dict:
    """{source: {"n", "within", "mean_signed_error", "worst_error"}} and "all": rows within ±`within`, the mean
    of the signed step errors, the error of largest magnitude (signed)."""
    rows = published_rows() if rows is None else rows
    groups = {}
    for r in rows:
        groups.setdefault(r["source"], []).append(r["error"])
    groups["all"] = [r["error"] for r in rows]
    return {name: {"n": len(errors), "within": sum(abs(e) <= within for e in errors),
                   "mean_signed_error": sum(errors) / len(errors), "worst_error": max(errors, key=abs)}
            for name, errors in groups.items()}
