"""The validation tables of the docs, rendered from the validation rows as the model predicts them now. Pure.

Each table sits in a page between `<!-- table: NAME -->` and `<!-- /table -->`;
`python -m trainledger.account.validation.tables --write docs/validation.md docs/time.md` rewrites those blocks
and `--check` (tests/account/test_validation_tables.py) fails when a page's block is not what the model gives
now, so no page can fall behind the model. Every row is a published run (account/validation/published_run.py):
`--runs` lists them with the `trainledger step` command that asks each, `--run-file LABEL` prints one's run file
(TOML, for `trainledger step --config FILE`) and `--model-config LABEL` the config.json of a model built from a
paper's shapes (the run file's `--model`). Errors are predicted / published − 1: of the step for the dense
table (negative: the prediction is faster than the run), of tokens/s or MFU where the source prints those
(positive: faster).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

BLOCK = re.compile(r"(<!-- table: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %".replace("-", "−")


def _seconds(s: float) -> str:
    return f"{s / 60:.1f} min" if s >= 180 else f"{s:.2f} s"


def _rows(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def per_source() -> str:
    """Per source: runs, how many within 15 % of the published step, the mean signed error and the worst."""
    from trainledger.account.validation.published import SOURCES, per_source as summary
    stats = summary()
    rows = [[name, SOURCES[name], str(s["n"]), str(s["within"]), _pct(s["mean_signed_error"]), _pct(s["worst_error"])]
            for name, s in stats.items() if name != "all"]
    a = stats["all"]
    rows.append(["**all**", "", f"**{a['n']}**", f"**{a['within']} ({100 * a['within'] / a['n']:.0f} %)**",
                 f"**{_pct(a['mean_signed_error'])}**", _pct(a["worst_error"])])
    return _rows(["source", "what", "runs", "within 15 %", "mean signed error", "worst"], rows)


def published() -> str:
    """Every dense published run: its step, ours, the error and the interval built without its source (the honest
    check: interval_check.leave_one_source_out), with the leave-one-row-out coverage beside it."""
    from trainledger.account.validation.interval import leave_one_out
    from trainledger.account.validation.interval_check import leave_one_source_out
    from trainledger.account.validation.published import published_rows
    runs = published_rows()
    held = {c["label"]: c for g in leave_one_source_out(runs) if g["by"] == "source" for c in g["checks"]}
    checks = [held[run["label"]] for run in runs]
    rows = [[run["source"], run["label"], f"{run['num_gpus']:,}", _seconds(run["published_step_seconds"]),
             _seconds(run["predicted_step_seconds"]), _pct(run["error"]),
             f"{_seconds(check['low'])} … {_seconds(check['high'])} ({check['rows']} runs)",
             "yes" if check["inside"] else "no"] for run, check in zip(runs, checks)]
    inside = sum(c["inside"] for c in checks)
    width = statistics.median(c["width"] for c in checks)
    loo = leave_one_out(runs)
    return (_rows(["source", "run", "GPUs", "published step", "predicted", "error",
                   "interval built without this row's source", "inside"], rows)
            + f"\n\nLeave-one-source-out: the published step lies inside its interval for {inside} of {len(checks)} "
              f"({100 * inside / len(checks):.0f} %), median width {100 * width:.0f} % of the step. Leave-one-row-out "
              f"(its source's other rows in): {sum(c['inside'] for c in loo)} of {len(loo)}, median width "
              f"{100 * statistics.median(c['width'] for c in loo):.0f} %.")


def interval_sources() -> str:
    """Leave-one-source-out coverage of the interval: every publication, then every framework kind, held out in
    turn, dense and MoE pools; and whether a headline moved by the neighbours' mean would have helped."""
    from trainledger.account.validation.interval_check import headline_check, leave_one_source_out
    rows = []
    for pool, moe in (("dense", False), ("MoE", True)):
        for g in leave_one_source_out(moe=moe):
            rows.append([pool, g["by"], g["held_out"], str(g["n"]), f"{g['inside']} ({100 * g['coverage']:.0f} %)",
                         f"{100 * g['median_width']:.0f} %", str(g["widened"])])
    lines = []
    for pool, moe in (("dense", False), ("MoE", True)):
        h = headline_check(moe=moe)
        lines.append(f"{pool}: the {h['publications']} publications' mean ln(predicted / published), rms "
                     f"{100 * h['raw']:.1f} % about the model's own estimate, {100 * h['moved']:.1f} % about the estimate "
                     f"moved by the other publications' neighbours' mean")
    return (_rows(["pool", "held out by", "held out", "runs", "inside", "median width", "widened"], rows)
            + "\n\nHeadline check (interval_check.headline_check): " + "; ".join(lines) + ".")


def korthikanti() -> str:
    """Korthikanti et al. 2022 Table 5: seconds per iteration, full and seq+sel recomputation."""
    from trainledger.account.validation.runs import korthikanti_cases
    cases = korthikanti_cases()
    rows = [[f"{c['model']} {c['setting']}", f"{c['published_seconds']:.2f} s", f"{c['predicted_seconds']:.2f} s",
             _pct(c["error"])] for c in cases]
    errors = [abs(c["error"]) for c in cases]
    return (_rows(["model, recomputation", "published", "predicted", "error"], rows)
            + f"\n\nMean |error| {100 * statistics.mean(errors):.1f} %, worst {100 * max(errors):.1f} %.")


def llama3() -> str:
    """Llama 3 Table 4: BF16 MFU of the 405B (causal FLOP count)."""
    from trainledger.account.validation.runs import llama3_cases
    rows = [[f"{c['gpus']:,}", str(c["tp"]), str(c["cp"]), str(c["pp"]), str(c["dp"]), f"{c['seq_len']:,}",
             f"{100 * c['published_mfu']:.0f} %", f"{100 * c['predicted_mfu']:.1f} %", _pct(c["error"])]
            for c in llama3_cases()]
    return _rows(["GPUs", "TP", "CP", "PP", "DP", "seq", "published MFU", "predicted", "error"], rows)


def torchtitan() -> str:
    """torchtitan's published tokens/s per GPU, each run as a user asks it (`--framework torchtitan`)."""
    from trainledger.account.validation.runs import torchtitan_cases
    rows = []
    for c in torchtitan_cases():
        if not c["modelled"]:
            continue
        memory = f"{c['memory_bytes'] / 2**30:.1f} of {c['memory_per_gpu_bytes'] / 2**30:.0f} GiB"
        rows.append([c["label"], c["gpu"], str(c["num_gpus"]), c["recompute"], "yes" if c["compile"] else "no",
                     f"{c['published_tokens_per_s_per_gpu']:,}", f"{c['predicted_tokens_per_s_per_gpu']:,.0f}",
                     _pct(c["error"]), memory + (", fits" if c["fits"] else ", does NOT fit")])
    return _rows(["run", "GPU", "GPUs", "AC", "compile", "published tokens/s/GPU", "predicted", "error", "memory"],
                 rows)


def fp8() -> str:
    """The published FP8 runs: the main set and the rows kept aside, tokens/s per GPU."""
    from trainledger.account.validation import fp8 as v
    out = []
    for name, cases in (("main", v.main_cases()), ("aside", v.aside_cases())):
        report = v.report(cases)
        for c in cases:
            out.append([name, c["label"], f"{c['published_tokens_per_s_per_gpu']:,.0f}",
                        f"{c['predicted_tokens_per_s_per_gpu']:,.0f}", _pct(c["error"])])
        out.append([f"**{name}**", f"{round(report['share_within'] * report['n'])} of {report['n']} within 15 %, "
                    f"mean {_pct(report['mean_signed_error'])}", "", "", ""])
    return _rows(["set", "row", "published tokens/s/GPU", "predicted", "error"], out)


def moe() -> str:
    """The published mixture-of-experts runs, by set: how many within 20 % of the published tokens/s per GPU."""
    from trainledger.account.validation import moe as v
    from trainledger.account.validation.interval import leave_one_out
    from trainledger.account.validation.interval_check import leave_one_source_out
    cases = v.all_cases()
    rows = []
    for name in dict.fromkeys(c["set"] for c in cases):
        errors = [c["error"] for c in cases if c["set"] == name]
        rows.append([name, str(len(errors)), str(sum(abs(e) <= 0.20 for e in errors)), _pct(statistics.median(errors)),
                     f"{_pct(min(errors))} … {_pct(max(errors))}"])
    errors = [c["error"] for c in cases]
    rows.append(["**all**", f"**{len(errors)}**", f"**{sum(abs(e) <= 0.20 for e in errors)}**",
                 _pct(statistics.median(errors)), f"{_pct(min(errors))} … {_pct(max(errors))}"])
    checks = leave_one_out(moe=True)
    inside = sum(c["inside"] for c in checks)
    width = statistics.median(c["width"] for c in checks)
    held = [c for g in leave_one_source_out(moe=True) if g["by"] == "source" for c in g["checks"]]
    return (_rows(["set", "runs", "within 20 %", "median error", "range"], rows)
            + f"\n\nLeave-one-out over the {len(checks)}: inside for {inside} ({100 * inside / len(checks):.0f} %), "
              f"median width {100 * width:.0f} % of the step; each publication held out in turn: inside for "
              f"{sum(c['inside'] for c in held)} of {len(held)}, median width "
              f"{100 * statistics.median(c['width'] for c in held):.0f} %.")


def finetune() -> str:
    """torchtune's fine-tuning tables (account/validation/finetune.py): peak memory and tokens/s per row."""
    from trainledger.account.validation import finetune as v
    rows, cases = [], v.evaluate_all()

    def gib(x):
        return "—" if x is None else f"{x / 2**30:.1f} GiB"
    for c in cases:
        note = "" if c["scored"] else " (not scored)"
        if c["refused"]:
            note += " refused: " + c["refused"][:80]
        rows.append([c["label"] + note, c["table"], gib(c["published_peak_bytes"]), gib(c["predicted_peak_bytes"]),
                     "—" if c["memory_error"] is None else _pct(c["memory_error"]), f"{c['published_tokens_per_s']:,.0f}",
                     "—" if c["predicted_tokens_per_s"] is None else f"{c['predicted_tokens_per_s']:,.0f}",
                     "—" if c["tokens_error"] is None else _pct(c["tokens_error"])])
    r = v.report(cases)
    return (_rows(["row", "table", "published peak", "predicted peak", "error", "published tokens/s", "predicted",
                   "error"], rows)
            + f"\n\nScored rows: {r['n']}; peak memory within 10 %: {r['memory_within_10']}; tokens/s within 25 %: "
              f"{r['tokens_within_25']}.")


TABLES = {"finetune": finetune, "per-source": per_source, "published": published, "interval-sources": interval_sources, "korthikanti": korthikanti, "llama3": llama3,
          "torchtitan": torchtitan, "fp8": fp8, "moe": moe}


def render(text: str, cache: dict | None = None) -> str:
    """`text` with every table block replaced by the table the model gives now (unknown names: left, with an error)."""
    cache = {} if cache is None else cache

    def fill(match):
        name = match.group("name")
        if name not in TABLES:
            raise KeyError(f"unknown table {name!r} (known: {', '.join(TABLES)})")
        if name not in cache:
            cache[name] = TABLES[name]()
        return f"{match.group(1)}{cache[name]}\n{match.group(4)}"
    return BLOCK.sub(fill, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainledger.account.validation.tables", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pages", nargs="*", type=Path, help="Markdown pages with table blocks")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the pages' blocks in place")
    mode.add_argument("--check", action="store_true", help="exit 1 when a page's blocks are not current")
    parser.add_argument("--print", dest="table", choices=sorted(TABLES), help="print one table")
    asks = parser.add_mutually_exclusive_group()
    asks.add_argument("--runs", action="store_true", help="list every published run and the command that asks it")
    asks.add_argument("--run-file", metavar="LABEL", help="print the run file (TOML) of the published run LABEL")
    asks.add_argument("--model-config", metavar="LABEL", help="print the config.json of LABEL's model (one built "
                                                              "from a paper's shapes)")
    args = parser.parse_args(argv)
    if args.table:
        print(TABLES[args.table]())
        return 0
    if args.runs or args.run_file or args.model_config:
        return _ask(args, parser)
    cache, stale = {}, []
    for page in args.pages:
        text = page.read_text()
        new = render(text, cache)
        if new != text:
            stale.append(str(page))
            if args.write:
                page.write_text(new)
    if args.check and stale:
        print(f"stale validation tables in {', '.join(stale)}: run python -m trainledger.account.validation.tables "
              f"--write {' '.join(stale)}", file=sys.stderr)
        return 1
    return 0


def _ask(args, parser) -> int:
    """--runs, --run-file LABEL, --model-config LABEL (main)."""
    import json

    from trainledger.account.validation import published_run as pr
    from trainledger.account.validation.published import every_run
    from trainledger.specs import run_file
    cases = every_run()
    if args.runs:
        for case in cases:
            ask = pr.command(case) or f"(run file only: {', '.join(pr.unflagged(case.run))} has no flag)"
            print(f"{case.label} [{case.source}]\n  {ask}")
        return 0
    label = args.run_file or args.model_config
    case = next((c for c in cases if c.label == label), None)
    if case is None:
        parser.error(f"no published run labelled {label!r} (--runs lists them)")
    if args.run_file:
        print(run_file.to_toml(pr.document(case)), end="")
        return 0
    config = pr.model_config(case)
    if config is None:
        parser.error(f"{label!r} runs the preset {case.model!r}: it has no config.json of its own")
    print(json.dumps(config, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
