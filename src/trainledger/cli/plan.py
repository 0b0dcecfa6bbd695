"""`trainledger plan`: how long training takes, and how many GPUs meet a deadline.

Also holds the small helpers the planning commands share (a duration type, model loading, a
two-column table), so each command module stays a page long. No formulas here: they live in account/.
"""

from __future__ import annotations

import argparse
import math

from trainledger import units
from trainledger.cli import common
from trainledger.cli.interval import interval_line, range_text
from trainledger.errors import TrainledgerError

HELP = "time to train: FLOPs, days and GPU-hours for a model (or parameter count) on N GPUs"
DESCRIPTION = """Time to train: seconds = train FLOPs / (num_gpus × peak FLOP/s × MFU).

With --params N the FLOPs are 6·N per token (--count 6n: Kaplan et al. 2020; CS336 Lecture 2; all
parameters, no attention term). With --model the FLOPs per token are the model's training FLOPs at
--seq-len (--count matmul; default: the context the model was pre-trained at; every matmul a token meets
incl. the LM head, not the input-embedding lookup, plus the attention scores of --attention, backward =
2 × forward; see `trainledger flops`). The two differ (llama-3-8b: 5.79e10 vs 4.82e10); the answer says
both, and `--model M --count 6n` counts as `--params` does.
No flags: the lecture's question, 70B parameters on 15T tokens on 1024 H100 at MFU 0.5 (~143.9 days).

At scale the run is interrupted (account/planning/failures.py): the job's mean time between interruptions
M = 1 / (--failures-per-gpu-day × num_gpus); a checkpoint (weights + optimizer states of --precision and
--optimizer) takes δ = bytes / (--checkpoint-bandwidth per node × nodes of 8 GPUs); each interruption
costs the work since the last checkpoint plus --restart. The checkpoint interval is Daly's (2006)
refinement of Young's (1974) sqrt(2·δ·M); goodput = failure-free time / expected wall time.
--simulate cross-checks the closed form with a seeded Monte Carlo of the same assumptions.

examples:
  trainledger plan
  trainledger plan --model llama-2-7b --tokens 2T --gpu a100 --num-gpus 512 --mfu 0.4
  trainledger plan --params 70B --tokens 15T --deadline 30d
  trainledger plan --params 405B --tokens 15.6T --num-gpus 16384 --mfu 0.4 --simulate
"""


def duration(default_unit: str):
    """An argparse type for a positive duration in seconds: '14d', '2w', '36h'; a bare number is in `default_unit`."""
    def convert(text):
        try:
            value = units.parse_seconds(text, default_unit=default_unit)
        except TrainledgerError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be a positive duration like 14d or 2w, got {text!r}")
        return value
    convert.__name__ = "duration"
    return convert


def nonnegative_bytes(text: str) -> float:
    """An argparse type for a size that may be 0: '0', '2GiB', '500MB'."""
    try:
        value = units.parse_bytes(text)
    except TrainledgerError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative size like 2GiB, got {text!r}")
    return value


def load_transformer(name: str, seq_len: int | None, flag: str = "--model"):
    """(spec, seq_len) for --model and --seq-len: seq_len defaults to the context the model was pre-trained at.

    (`spec.default_seq_len`: the preset's pretrain_seq_len, or min(max_seq_len, 8192) for a config.json.)
    A --seq-len longer than a learned position table is an error (the model cannot run it).
    """
    from trainledger.specs import get_model
    spec = get_model(name, flag)
    max_len = getattr(spec, "max_seq_len", None)
    if seq_len is None:
        seq_len = getattr(spec, "default_seq_len", 1)
    from trainledger.specs.bounds import check_request
    check_request(seq_len, "seq_len", "--seq-len")          # past any model's positions: an error, not a warning
    if max_len and getattr(spec, "position", None) == "learned" and seq_len > max_len:
        raise TrainledgerError(f"--seq-len {seq_len} exceeds the {max_len} learned positions of '{spec.name}'")
    return spec, seq_len


def model_of(args):
    """(spec, seq_len) of --model and --seq-len (cli/plan.load_transformer), with the vocabulary a run file's
    [model] gives (a trained run's, which followed its tokenizer)."""
    spec, seq_len = load_transformer(args.model, args.seq_len)
    vocab = getattr(args, "_model_vocab", None)
    if vocab is not None and vocab != spec.vocab_size:
        from trainledger.specs.run_checks import check_positive_int
        spec = spec.with_(vocab_size=check_positive_int(vocab, "model.vocab_size"))
    return spec, seq_len


def seq_len_assumption(spec, seq_len: int, given: int | None) -> str:
    """Where the sequence length came from, for the first lines of an answer."""
    if given is not None:
        return f"seq_len {seq_len:,} (--seq-len)"
    if getattr(spec, "pretrain_seq_len", None):
        return f"seq_len {seq_len:,}: the context {spec.name} was pre-trained at (--seq-len to change)"
    if getattr(spec, "kind", None) == "transformer":
        return (f"seq_len {seq_len:,}: min(max_position_embeddings {spec.max_seq_len:,}, 8192), since a config.json "
                "does not record its pre-training context (--seq-len to change)")
    return f"seq_len {seq_len}"


def seq_len_warnings(spec, seq_len: int) -> list[str]:
    """A warning when seq_len leaves the model's position range (RoPE extrapolates; the numbers still compute)."""
    max_len = getattr(spec, "max_seq_len", None)
    warnings = common.outlandish(seq_len=seq_len)
    if max_len and seq_len > max_len:
        warnings.append(f"--seq-len {seq_len:,} is beyond the {max_len:,} positions '{spec.name}' was built for")
    return warnings


def print_table(title: str, rows: list[tuple[str, str]], assumptions: list[str]) -> None:
    """A two-column table of quantities, its assumptions in the first lines (under the title), not a footnote."""
    out = common.console()
    out.print(title, style="bold", soft_wrap=True)
    for line in assumptions:
        out.print(f"- {line}", style="dim", soft_wrap=True)
    out.print(common.table(None, ["quantity", "value"], rows))


RUN_FLAGS = True        # cli/main.py merges --config and the run's flags (cli/run_flags.py) before compute()
HARDWARE_DEFAULTS = {"gpu": "h100", "num_gpus": 1024}     # after --config: the defaults of --gpu and --num-gpus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainledger.cli.run_flags import add_config_flags, add_run_flags
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--model", help="preset name or Hugging Face config.json path (train FLOPs per token at --seq-len)")
    what.add_argument("--params", type=common.positive_count, help="parameter count, e.g. 70B (6·N FLOPs per token; default 70B)")
    parser.add_argument("--tokens", type=common.positive_count, default=15e12, help="training tokens, e.g. 15T (default 15T)")
    parser.add_argument("--gpu", default=None, help="accelerator (`trainledger hardware`; default h100)")
    parser.add_argument("--num-gpus", type=common.gpu_count, default=None, help="number of GPUs (default 1024)")
    parser.add_argument("--mfu", type=mfu_or_auto, default=0.5,
                        help="model FLOPs utilization in (0, 1], or 'auto': the MFU of the fastest layout that fits "
                             "(`trainledger layout`, needs --model) (default 0.5)")
    parser.add_argument("--dtype", default="bf16", help="dtype whose dense peak FLOP/s is used (default bf16)")
    parser.add_argument("--count", type=str.lower, choices=FLOP_COUNTS, default=None,
                        help="how training FLOPs per token are counted: matmul = 3 × forward of every matmul a token "
                             "meets, LM head included, input embeddings excluded, plus the attention scores of "
                             "--attention (PaLM App. B; needs --model, its default there); 6n = 6 × all N parameters, "
                             "no attention term (Kaplan et al. 2020, CS336 Lecture 2; the default with --params)")
    add_run_flags(parser, "plan", helps={
        "--seq-len": "context length for --model (default: the context the model was pre-trained at)",
        "--attention": "attention-score FLOPs over the full T×T (PaLM) or half of it (Megatron) (default full)",
        "--global-batch-size": "sequences per step for --mfu auto (default: one per GPU)",
        "--reserve": "with --mfu auto: bytes per GPU kept back from each layout besides its peak ('auto' (default): "
                     "what a CUDA process holds besides its tensors; 'expandable'; or a size like 2GiB)",
        "--precision": "precision recipe: its weights + optimizer states are the checkpoint, and --mfu auto lays it "
                       "out (default amp-bf16)",
        "--optimizer": "optimizer: its states are in the checkpoint (default adamw)"})
    parser.add_argument("--recompute", choices=("none", "selective", "full"), default=None,
                        help="activation recomputation: with --mfu auto the layouts use only this one (default: the "
                             "lightest that fits each layout); hardware FLOPs count it")
    parser.add_argument("--deadline", type=duration("d"), help="also report GPUs needed to finish within this time, e.g. 30d, 2w (bare number = days)")
    add_failure_arguments(parser)
    add_config_flags(parser)
    common.add_calibration_flag(parser)
    common.add_json_flag(parser)


def add_failure_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of the failure-aware figures (account/planning/failures.py), defaults with their sources."""
    from trainledger.account.planning import failures
    g = parser.add_argument_group("interruptions and checkpoints (account/planning/failures.py)")
    g.add_argument("--failures-per-gpu-day", type=common.positive_float, default=failures.LLAMA3_FAILURES_PER_GPU_DAY,
                   help="unexpected job interruptions per GPU per day (default 4.736e-4 = 419 in 54 days on 16,384 "
                        "GPUs, Llama 3, arXiv:2407.21783 Sec. 3.3.4)")
    g.add_argument("--checkpoint-bandwidth", type=bandwidth, default=failures.LLAMA3_CHECKPOINT_BYTES_PER_S_PER_NODE,
                   help="checkpoint write bandwidth per node of 8 GPUs, e.g. 3.4GB/s (default 3.418GB/s = Llama 3's "
                        "7 TB/s storage peak over its 2,048 nodes, arXiv:2407.21783 Sec. 3.3.1)")
    g.add_argument("--restart", type=nonnegative_duration, default=failures.DEFAULT_RESTART_SECONDS,
                   help="time to restart after an interruption, e.g. 10min, 90s (bare number = seconds; default 600 "
                        "s = 10 min, the restart time of Daly 2006's worked examples)")
    g.add_argument("--simulate", action="store_true", help="cross-check the closed form with a Monte Carlo of the same assumptions")
    g.add_argument("--trials", type=trials, default=100, help="runs simulated by --simulate, 1 to 10000 (default 100)")
    g.add_argument("--seed", type=common.seed, default=0, help="random seed of --simulate (default 0)")


def mfu_or_auto(text: str):
    """An argparse type for --mfu: a number in (0, 1] or 'auto'."""
    if text.strip().lower() == "auto":
        return "auto"
    return common.fraction(text)


def auto_mfu(args, spec, seq_len: int, gpu) -> tuple[float, dict, list[str]]:
    """(MFU, the fastest layout, assumption lines) for `--mfu auto`: account.planning.layout's best on these GPUs."""
    from trainledger.account.planning.layout import search
    from trainledger.cli.run_flags import asked
    from trainledger.specs.run import Hardware
    global_batch = args.global_batch_size if args.global_batch_size is not None else args.num_gpus
    run = asked(args).with_(seq_len=seq_len, global_batch_size=global_batch, precision=args.precision)
    found = search(spec, Hardware(gpu, args.num_gpus), run, top=1,
                   recomputes=(args.recompute,) if args.recompute else None)
    best = found["layouts"][0]
    words = (f"MFU {best['mfu']:.3f} (--mfu auto): the fastest of {found['fitting']} layouts that fit "
             f"(`trainledger layout`): tp {best['tp']}{' + sp' if best['sp'] else ''}, pp {best['pp']} "
             f"(interleave {best['interleave']}), cp {best['cp']}, dp {best['dp']}, ep {best.get('ep', 1)}"
             f"{'' if best.get('etp', best['tp']) == best['tp'] else ' (etp ' + str(best['etp']) + ')'}, ZeRO {best['zero']}, micro-batch "
             f"{best['batch_size']}, recompute {best['recompute']}; global batch {global_batch} × {seq_len:,} tokens, "
             f"{args.precision} + {args.optimizer}, {best['step_seconds']:.3g} s per step")
    return best["mfu"], best, [words]


def layout_interval(layout: dict, args, seq_len: int, gpu_name: str, train_seconds: float, moe: bool = False) -> dict:
    """The error bar of --mfu auto's step (cli/interval.py) and the training time it spans (train_seconds_low/high)."""
    from trainledger.cli.interval import interval_of
    global_batch = args.global_batch_size if args.global_batch_size is not None else args.num_gpus
    out = interval_of(layout["step_seconds"], global_batch * seq_len, "trainledger", gpu_name, args.num_gpus, moe=moe)
    scale = train_seconds / layout["step_seconds"]
    low, high = out["step_seconds_low"] * scale, out["step_seconds_high"] * scale     # the same ratio to the estimate
    return dict(out, train_seconds_low=low, train_seconds_high=high, train_days_low=low / 86400,
                train_days_high=high / 86400, gpu_hours_low=low * args.num_gpus / 3600,
                gpu_hours_high=high * args.num_gpus / 3600)


def trials(text: str) -> int:
    """An argparse type for --trials: 1..10000 (the simulation's cost grows with it)."""
    value = common.positive_int(text)
    if value > 10_000:
        raise argparse.ArgumentTypeError(f"must be at most 10000, got {text!r}")
    return value


bandwidth = common.bandwidth   # bytes/s: 3.4GB/s (shared with the interconnect flags)


def nonnegative_duration(text: str) -> float:
    """An argparse type for a duration that may be 0: '600', '10min', '0'."""
    try:
        value = units.parse_seconds(text)
    except TrainledgerError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative duration like 10min or 600s, got {text!r}")
    return value


def _datasheet(name: str):
    from trainledger.specs.hardware import get_gpu
    return get_gpu(name)


def compute(args) -> dict:
    from trainledger.account.counting import flops as F
    from trainledger.account.planning.plan import gpus_needed, training_time
    from trainledger.cli.run_flags import asked, document_of
    from trainledger.specs.run_checks import default_precision
    gpu = common.resolve_gpu(args.gpu, calibration=args.calibration) if args.calibration else _datasheet(args.gpu)
    args.precision = args.precision if args.precision is not None else default_precision(gpu)
    peak = gpu.peak(args.dtype)
    spec, warnings = None, []
    count = args.count or ("matmul" if args.model is not None else "6n")
    if args.model is not None:
        from trainledger.account.counting.params import param_counts
        spec, seq_len = model_of(args)
        n_params = param_counts(spec)["n_params"]
        by_count = {"matmul": F.train_flops_per_token(spec, seq_len, args.attention),
                    "6n": F.kaplan_train_flops_per_token(n_params)}
        settings = [seq_len_assumption(spec, seq_len, None if seq_len == spec.default_seq_len else seq_len)]
        if count == "matmul":
            settings.append(f"attention {args.attention}: {ATTENTION_WORDS[args.attention]} (--attention)")
        warnings += seq_len_warnings(spec, seq_len)
    else:
        if args.seq_len is not None:
            raise TrainledgerError("--seq-len needs --model (with --params the FLOPs are 6·N per token)")
        if count == "matmul":
            raise TrainledgerError("--count matmul needs --model: the matmuls a token meets and its attention scores "
                                   "come from the architecture; with --params only 6·N is known (--count 6n)", "--count")
        n_params, seq_len = (args.params if args.params is not None else 70e9), None
        by_count = {"6n": F.kaplan_train_flops_per_token(n_params)}
        settings = []
    flops_per_token = by_count[count]
    if args.tokens < 1:
        raise TrainledgerError(f"--tokens must be at least 1 token, got {args.tokens:g}")
    if n_params < 1:
        raise TrainledgerError(f"--params must be at least 1 parameter, got {n_params:g}")
    layout = None
    if args.mfu == "auto":
        if spec is None:
            raise TrainledgerError("--mfu auto needs --model: the layout search times the model's own layers")
        if count != "matmul":
            raise TrainledgerError("--count 6n with --mfu auto: the layout's MFU is of the model's matmuls and "
                                   "attention scores (--count matmul); give --mfu X to count 6·N", "--count")
        args.mfu, layout, lines = auto_mfu(args, spec, seq_len, gpu)
        settings += lines
    elif args.global_batch_size is not None:
        settings.append("--global-batch-size not used: it sizes the layouts of --mfu auto")
    if layout is None and args.reserve != "auto":
        settings.append("--reserve not used: it keeps memory back from the layouts of --mfu auto")
    total = flops_per_token * args.tokens
    if not math.isfinite(total):
        which = "--tokens" if args.model is not None else "--params × --tokens"
        raise TrainledgerError(f"{which} is too large: {units.format_count(n_params)} parameters × "
                               f"{units.format_count(args.tokens)} tokens overflows the training FLOPs; use realistic values")
    convention = convention_line(count, by_count, n_params, spec, seq_len, args)
    result = {
        "n_params": n_params, "n_tokens": args.tokens, "flops_per_token": flops_per_token, "train_flops": total,
        "gpu": gpu.name, "dtype": args.dtype, "num_gpus": args.num_gpus, "peak_flops_per_s": peak, "mfu": args.mfu,
        "seq_len": seq_len, "flop_count": count, "flops_per_token_by_count": by_count,
        **training_time(total, args.num_gpus, peak, args.mfu),
    }
    if count == "6n" and args.attention != "full":
        result_note = f"--attention {args.attention} not used: with --count 6n the FLOPs are 6·N per token (no attention term)"
    else:
        result_note = None
    run = asked(args).with_(seq_len=seq_len, precision=args.precision)
    result["run"] = (document_of(args, layout.pop("run"), args.num_gpus, derived=[]) if layout is not None
                     else document_of(args, run, args.num_gpus))
    if layout is not None:
        result["layout"] = layout
        result.update(layout_interval(layout, args, seq_len, gpu.name, result["train_seconds"],
                                      moe=spec is not None and spec.is_moe))
    if spec is not None:
        result["hardware_flops_per_token"] = F.hardware_flops_per_token(spec, seq_len, args.attention, args.recompute or "none")
    if args.deadline is not None:
        result["deadline_seconds"] = args.deadline
        result["gpus_needed"] = gpus_needed(total, args.deadline, peak, args.mfu)
    result["assumptions"] = settings + [
        convention,
        f"{gpu.name} dense {args.dtype} peak {units.format_rate(peak)} (no 2:4 sparsity), sustained at MFU {args.mfu:.3g}",
        "failure-free time = train_flops / (num_gpus × peak × mfu); no evaluation or data-loading stalls",
    ]
    if result_note:
        result["assumptions"].append(result_note)
    result.update(failure_figures(args, spec, n_params, seq_len, result["train_seconds"]))
    warnings += common.outlandish(tokens=args.tokens, params=n_params, num_gpus=args.num_gpus, mfu=args.mfu,
                                  train_seconds=result["train_seconds"])
    if result.get("gpus_needed", 0) > common.OUTLANDISH["num_gpus"][0]:
        warnings.append(f"--deadline {units.format_seconds(args.deadline)} needs {result['gpus_needed']:.3g} GPUs, "
                        f"{common.OUTLANDISH['num_gpus'][1]}: no cluster meets it; check the value and its unit "
                        "(a bare number is days)")
    if warnings:
        result["warnings"] = warnings
    return result


FLOP_COUNTS = ("matmul", "6n")


def convention_line(count: str, by_count: dict, n_params: float, spec, seq_len, args) -> str:
    """The FLOP convention of `plan`'s answer in one line, and what the other convention gives and why, so that
    `plan --model M` and `plan --params N` say side by side why they differ (and how to make them agree: --count).

    matmul: 3 × forward of every matmul a token meets, the LM head once, plus the attention scores (PaLM,
    arXiv:2204.02311, App. B: 6·N + 12·L·H·Q·T with N the non-embedding weights); 6n: 6·N of all N parameters, the
    embeddings included and no attention term (Kaplan et al. 2020, arXiv:2001.08361, Sec. 2.1, as CS336 Lecture 2
    applies it to the total)."""
    fmt, n = units.format_flops, units.format_count(n_params)
    six_n = f"6·N of all {n} parameters, embeddings included, attention scores excluded (Kaplan et al. 2020; CS336 Lecture 2)"
    if spec is None:
        return (f"FLOPs per token {fmt(by_count['6n'])} by --count 6n (the default with --params): {six_n}; "
                "`plan --model M` counts each matmul a token meets plus the attention scores instead (--count matmul; "
                "`plan --model M --count 6n` counts as here)")
    if count == "6n":
        return (f"FLOPs per token {fmt(by_count['6n'])} by --count 6n: {six_n}, as `plan --params {n}` counts; the "
                f"model's matmuls plus attention scores (--count matmul, the default with --model) give "
                f"{fmt(by_count['matmul'])}")
    from trainledger.account.counting.flops import matmul_params_per_token
    other = by_count["6n"] / by_count["matmul"] - 1
    return (f"FLOPs per token {fmt(by_count['matmul'])} by --count matmul (the default with --model): 3 × forward "
            f"of every matmul of '{spec.name}' a token meets ({units.format_count(matmul_params_per_token(spec))} "
            f"weights, the LM head included, the input-embedding lookup not) plus the attention scores ({args.attention}) "
            f"at seq_len {seq_len:,} (PaLM App. B; `trainledger flops`); 6·N of all {n} parameters, as `plan --params "
            f"{n}` counts (--count 6n), gives {fmt(by_count['6n'])} ({100 * other:+.0f} %)")


ATTENTION_WORDS = {"full": "scores over the full T×T (PaLM App. B, nanoGPT); causal halves them (Megatron)",
                   "causal": "half of the T×T scores (Megatron-LM); full counts all of them (PaLM)"}


def failure_figures(args, spec, n_params: float, seq_len, train_seconds: float) -> dict:
    """The failure-aware keys of `plan` (account/planning/failures.py), with the checkpoint bytes from account/memory/per_gpu.py."""
    from trainledger.account.planning import failures
    from trainledger.account.memory.per_gpu import memory_per_gpu

    from trainledger.specs.run import Run
    from trainledger.specs.run_checks import ParameterCount
    states = Run().with_(precision=args.precision, optimizer=args.optimizer, seq_len=seq_len, zero=0, reserve=0.0)
    memory = memory_per_gpu(spec if spec is not None else ParameterCount(n_params), None, states)
    checkpoint_bytes = memory["params_bytes"] + memory["master_params_bytes"] + memory["optimizer_bytes"]
    plan = failures.failure_plan(train_seconds, args.num_gpus, checkpoint_bytes, args.failures_per_gpu_day,
                                 args.checkpoint_bandwidth, args.restart)
    notes = [
        f"interruptions: one every {units.format_seconds(plan['mtbf_seconds'])} = 1 / ({args.failures_per_gpu_day:.4g} per "
        f"GPU-day × {args.num_gpus:,} GPUs) (default: Llama 3's 419 in 54 days on 16,384 GPUs), Poisson",
        f"checkpoint: {units.format_bytes(checkpoint_bytes)} ({args.precision} weights + {args.optimizer} states) at "
        f"{args.checkpoint_bandwidth / 1e9:.3g} GB/s per node × {plan['nodes']:,} nodes of 8 GPUs, synchronous; "
        f"restart {units.format_seconds(args.restart)}",
        "checkpoint every τ: Daly 2006's refinement of Young 1974's sqrt(2·δ·M); time with failures: Daly's "
        "expected wall time M·e^(R/M)·(e^((τ+δ)/M) − 1) per τ of training",
    ]
    if plan["goodput"] < 0.5:
        notes.append("goodput below 0.5: checkpoints or restarts take too long for this failure rate "
                     "(faster storage, asynchronous checkpoints or fewer GPUs)")
    out = {**plan, "failure_assumptions": notes, "checkpoint_precision": args.precision,
           "checkpoint_optimizer": args.optimizer}
    if args.simulate:
        out["simulation"] = failures.simulate(failures.FailureModel.of_plan(train_seconds, plan), trials=args.trials,
                                              seed=args.seed, progress=_progress_bar())
    return out


def _progress_bar():
    """A progress callback for --simulate on an interactive terminal (stderr), or None."""
    import sys
    if not sys.stderr.isatty():
        return None
    from rich.console import Console
    from rich.progress import Progress
    progress = Progress(transient=True, console=Console(stderr=True))
    task = None

    def update(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            progress.start()
            task = progress.add_task("simulating runs", total=total)
        progress.update(task, completed=done)
        if done == total:
            progress.stop()
    return update


def render(result: dict, args) -> None:
    rows = [
        ("parameters", units.format_count(result["n_params"])),
        ("tokens", units.format_count(result["n_tokens"])),
        ("FLOPs per token", units.format_flops(result["flops_per_token"]) + COUNT_WORDS[result["flop_count"]]),
        ("training FLOPs", units.format_flops(result["train_flops"])),
        ("GPUs", f"{result['num_gpus']:,} × {result['gpu']}"),
        ("peak per GPU", units.format_rate(result["peak_flops_per_s"])),
        ("MFU", f"{result['mfu']:g}"),
        ("FLOPs per day", units.format_flops(result["flops_per_day"])),
        ("time without failures", format_days(result["train_seconds"]) + (
            f" (expect {range_text(result, 'train_seconds', format_days)})" if "interval_words" in result else "")),
        ("GPU-hours", units.format_count(result["gpu_hours"])),
        ("interruptions: one every", units.format_seconds(result["mtbf_seconds"])),
        ("checkpoint write (δ)", units.format_seconds(result["checkpoint_seconds"])),
        ("checkpoint every (τ)", f"{units.format_seconds(result['checkpoint_interval_seconds'])} of training "
                                 f"(Young: {units.format_seconds(result['young_interval_seconds'])})"),
        ("restart (R)", units.format_seconds(result["restart_seconds"])),
        ("expected interruptions", format_interruptions(result["expected_interruptions"])),
        ("goodput", f"{result['goodput']:.3f}"),
        ("time with failures", format_days(result["train_seconds_with_failures"])),
    ]
    if "simulation" in result:
        sim = result["simulation"]
        if sim["trials"]:
            rows.append((f"simulated ({sim['trials']} runs)",
                         f"goodput {sim['goodput']:.3f} ± {sim['goodput_stderr']:.3f}, "
                         f"{format_interruptions(sim['expected_interruptions'])} interruptions"))
        else:
            rows.append(("simulated", "not run: a checkpoint segment would need more retries than can be drawn"))
    if "gpus_needed" in result:
        rows.append((f"GPUs for {units.format_seconds(result['deadline_seconds'])}", f"{result['gpus_needed']:,}"))
    print_table("Time to train", rows, result["assumptions"] + result["failure_assumptions"])
    if "interval_words" in result:      # --mfu auto: the range of its layout's step, in days and GPU-hours
        common.console().print(interval_line(
            "time without failures", f"{format_days(result['train_seconds'])} "
                                     f"({units.format_count(result['gpu_hours'])} GPU-hours)",
            f"{range_text(result, 'train_seconds', format_days)} ({range_text(result, 'gpu_hours', units.format_count)}"
            " GPU-hours)", result), soft_wrap=True)


COUNT_WORDS = {"matmul": " (matmuls + attention)", "6n": " (6·N)"}     # the --count of the row, in a few words


def format_interruptions(count: float) -> str:
    """'560', or '4.69e+18' when absurd."""
    return f"{count:,.0f}" if count < 1e6 else f"{count:.3g}"


def format_days(seconds: float) -> str:
    """A training time for the table: '143.93 days' below 1000 days, else in years (scientific when absurd)."""
    if not math.isfinite(seconds):
        return "never (the job cannot finish)"
    days = seconds / 86400
    if 1 <= days < 1000:
        return f"{days:.2f} days"
    return units.format_seconds(seconds)
