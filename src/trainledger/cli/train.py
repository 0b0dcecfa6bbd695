"""`trainledger train`: train a model with live accounting, atomic checkpoints, exact resume and DDP/FSDP."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys

from trainledger.cli import common
from trainledger.errors import TrainledgerError
from trainledger.train.config import OPTIMIZERS as TRAIN_OPTIMIZERS, PRECISIONS as TRAIN_PRECISIONS

HELP = "train a model with live accounting (FLOP/s, MFU, memory), checkpoints, exact resume and DDP/FSDP"
DESCRIPTION = """\
Trains the Transformer LM on a token file (--data), a text file (--text) or a dataset (--dataset: .jsonl,
.parquet, Arrow), tokenized once into <out-dir>/data/ with --tokenizer (bytes, a tokenizer.json or a .tiktoken
file), or the lecture's Cruncher regression (--model cruncher). The model's vocabulary is the tokenizer's
(--vocab-multiple pads it), and a token file of another vocabulary is refused. With no arguments: the `tiny`
byte-level GPT on the Python standard library's own .py sources (a few MB, cached under the run dir),
about 2.5 minutes on an idle 2-core machine. Settings come from the defaults, then --config FILE.toml, then flags.
--model cruncher has defaults of its own: --steps 200, --seq-len 1, --lr 0.05, --min-lr 0.005, --warmup-steps 10,
--weight-decay 0, --optimizer adam, --eval-every 50, --out-dir runs/cruncher.

Outputs (under --out-dir): metrics.jsonl (one record per step: step, loss, lr, grad_norm, tokens,
step_time_s, tokens_per_s, flops_per_s, mfu, peak_memory_bytes, eval_loss; comm_bytes and
predicted_comm_bytes under torchrun), checkpoints/step_NNNNNNNN/
(sha256-verified, last --keep-checkpoints kept), loss.png.

SIGTERM / SIGINT save a checkpoint at the next step boundary and exit 0 (also when they arrive while torch
is still loading); --resume continues exactly (the same losses as an uninterrupted run). --resume may change
--lr, --min-lr, --warmup-steps, --grad-clip, --steps (to extend), eval and checkpoint intervals; settings not
given keep the checkpoint's values. A NaN/Inf loss stops the run (exit 2) and names the last checkpoint whose
loss was finite and not a spike. One trainer per run: locks on the checkpoint directory, the out-dir and the
metrics file, taken before anything is written; a fresh start never overwrites another run's metrics. Keeping K
checkpoints needs disk room for K+1. A checkpoint whose files or content are damaged (sha256, zip CRC-32, its
step) is skipped for the previous one; `trainledger checkpoints DIR` lists them. Under torchrun, ranks whose
launcher was killed stop with a checkpoint.

Batch flags, as in `memory` and `step`: --batch-size is the micro-batch per GPU (per data-parallel rank, per
forward/backward), --global-batch-size the sequences per optimizer step, and global = micro × data-parallel ranks
× --grad-accum, where data-parallel ranks = processes / (--tp × --pp). Until this release train's --batch-size
was the global batch: on one process without --grad-accum both meanings coincide; scripts that passed it under
torchrun or with --grad-accum keep their batch with --global-batch-size instead. Precisions and optimizers are
those of `memory`: all six precision recipes (mixed-bf16/mixed-fp16: 16-bit weights and grads, an fp32 master
copy stepped by the optimizer, on one process or with ddp) and every optimizer but the accounting-only
adafactor and adam-8bit, plus adamw-8bit (torchao) and paged-adamw-8bit (bitsandbytes, CUDA).

Fine-tuning: --finetune lora|qlora trains LoRA adapters beside the frozen base of --init-from (NF4 for qlora),
checkpoints the adapters only (the base's sha256s are checked on resume), and `export --adapter` / `--merge` hand
them to PEFT / transformers. Memory levers (full training too): --optimizer adamw-8bit, --optimizer-in-backward,
--activation-offload, --cpu-offload, --chunked-loss, --recompute full (docs/train.md, "Fine-tuning").

examples:
  trainledger train                                          # tiny GPT on the stdlib corpus
  trainledger train --text book.txt --steps 2000 --metrics m.jsonl
  trainledger train --dataset docs.parquet --tokenizer tokenizer.json --vocab-multiple 64
  trainledger train --model cruncher --steps 100
  trainledger train --init-from hf/tiny-stdlib --text more.txt     # continue from exported / HF weights
  trainledger train --finetune qlora --init-from hf/tiny-stdlib --text more.txt   # LoRA on an NF4 base
  trainledger train --finetune lora --lora-targets all-linear --lora-rank 16 --init-from HF_DIR --text more.txt
  trainledger train --optimizer adamw-8bit --optimizer-in-backward --activation-offload --chunked-loss 4
  trainledger train --resume                                 # continue the default run
  trainledger train --batch-size 8 --global-batch-size 32      # 4 micro-batches of 8 per step
  torchrun --nproc_per_node 2 -m trainledger.cli.main train --parallel ddp --global-batch-size 16
  torchrun --nproc_per_node 2 -m trainledger.cli.main train --tp 2 --sp
  torchrun --nproc_per_node 2 -m trainledger.cli.main train --pp 2 --grad-accum 4
  torchrun --nproc_per_node 4 -m trainledger.cli.main train --parallel fsdp --tp 2
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("what to train")
    g.add_argument("--model", help="preset name (`trainledger models`), a Hugging Face config.json path, or 'cruncher' "
                                   "for the lecture's regression (default: tiny)")
    g.add_argument("--text", metavar="FILE", help="UTF-8 text file, tokenized once with --tokenizer (bytes unless "
                                                  "given: vocabulary 256) and cached in <out-dir>/data/")
    g.add_argument("--dataset", metavar="FILE", help=".jsonl, .parquet or Arrow (.arrow/.feather) file: the strings of "
                                                     "--text-column, streamed, tokenized once and cached like --text")
    g.add_argument("--text-column", metavar="NAME", help="the dataset's text column or JSON field (default: text)")
    g.add_argument("--data", metavar="TOKENS_FILE", help="token file: .tokens with header (`trainledger tokenize`) or a 1-D integer .npy")
    g.add_argument("--tokenizer", metavar="bytes|FILE", help="'bytes', a tokenizer.json or a .tiktoken file; sets the "
                                                             "model's vocabulary; unset: the one --data records, "
                                                             "else bytes; copied to <out-dir>/tokenizer.json")
    g.add_argument("--special-token", metavar="TOKEN", action="append", dest="special_tokens",
                   help="a special token added to --tokenizer (repeatable), e.g. '<|im_start|>': one id, matched whole "
                        "in the text, never split; kept in <out-dir>/tokenizer.json")
    g.add_argument("--allow-special", metavar="TOKEN", action="append", dest="allowed_special",
                   help="a special token of --tokenizer (repeatable; 'all' for every one) that --text/--dataset may "
                        "contain as itself, e.g. '<|endoftext|>' between documents; any other special token's "
                        "string in the text is ordinary text, as tiktoken encodes it; without the flag, every one is")
    g.add_argument("--vocab-multiple", metavar="N", type=common.positive_int,
                   help="pad the model's vocabulary up to a multiple of N (nanoGPT: 64, 50257 -> 50304); the "
                        "parameters and FLOPs it adds are shown; 1 pads nothing (default: 1)")
    g.add_argument("--init-from", metavar="HF_DIR",
                   help="start from the weights of a local Hugging Face GPT-2 or Llama checkpoint (config.json + "
                        "model.safetensors; pickled .bin files are refused); the model is its config.json (leave "
                        "--model out) and the tokenizer its tokenizer.json when there is one")
    g.add_argument("--config", metavar="FILE.toml", help="TOML file with any of these settings (keys like batch-size or "
                                                        "batch_size, optionally under [train]), or a run file (a "
                                                        "run.toml, `step --save-config`, a `layout --json` "
                                                        "candidate's run); flags override it")
    g.add_argument("--save-config", metavar="FILE", help="also write the run as a run file to FILE (as "
                                                         "<out-dir>/run.toml is written; `step --config FILE` predicts it)")
    g = parser.add_argument_group("optimization")
    g.add_argument("--steps", type=common.positive_int, help="optimizer steps (default: 600)")
    g.add_argument("--batch-size", type=common.positive_int,
                   help="micro-batch: sequences per GPU (per data-parallel rank) per forward/backward, as in `memory` "
                        "and `step`; default: --global-batch-size / (data-parallel ranks × --grad-accum), so 32 on one "
                        "process. Before this release it meant the global batch: the same on one process without "
                        "--grad-accum; otherwise use --global-batch-size")
    g.add_argument("--global-batch-size", type=common.positive_int,
                   help="sequences per optimizer step over all ranks = --batch-size × data-parallel ranks × --grad-accum "
                        "(default: 32)")
    g.add_argument("--grad-accum", type=common.positive_int,
                   help="micro-batches per optimizer step on each rank; default 1, or global / (micro × data-parallel "
                        "ranks) when --batch-size and --global-batch-size are both given (then it may be left out)")
    g.add_argument("--seq-len", type=common.positive_int, help="tokens per sequence (default: 128)")
    g.add_argument("--lr", type=common.positive_float, help="peak learning rate per step (default: 3e-3)")
    g.add_argument("--min-lr", type=_nonnegative_float, help="learning rate at the end of the cosine (default: 3e-4)")
    g.add_argument("--warmup-steps", type=common.nonnegative_int, help="linear warmup steps from 0 to --lr (default: min(40, --steps/10))")
    g.add_argument("--weight-decay", type=_nonnegative_float, help="decoupled weight decay (AdamW) or L2 (default: 0.1)")
    g.add_argument("--grad-clip", type=common.positive_float, help="max global L2 norm of the gradient (default: 1.0)")
    g.add_argument("--no-grad-clip", dest="grad_clip", action="store_const", const=_NO_CLIP, help="do not clip gradients")
    common.add_optimizer_flag(g, "adamw", names=TRAIN_OPTIMIZERS, refused=ACCOUNTING_ONLY_OPTIMIZERS)
    common.add_precision_flag(g, "fp32", "amp-*: fp32 weights with autocast; mixed-*: 16-bit weights and grads, fp32 "
                              "master copy the optimizer steps (one process or ddp); bf16: all bf16; the fp16 ones "
                              "scale the loss (GradScaler)", names=TRAIN_PRECISIONS,
                              refused={name: "a Transformer Engine recipe `train` does not run (accounted in memory, "
                                             "step, layout, plan); train FP8 with fp8-rowwise or fp8-cs (torchao)"
                                       for name in ("fp8-delayed", "mxfp8")})
    parser.set_defaults(optimizer=None, precision=None)     # unset: --config, then the defaults above, apply
    g.add_argument("--seed", type=common.nonnegative_int, help="seeds init, data order, torch/numpy/random (default: 0)")
    g = parser.add_argument_group("checkpoints and outputs")
    g.add_argument("--out-dir", metavar="DIR", help="where metrics, checkpoints, loss.png and cached tokens go (default: runs/<model>-<name of --text/--data>, "
                        "runs/tiny-stdlib for the built-in corpus)")
    g.add_argument("--checkpoint-dir", metavar="DIR", help="default: <out-dir>/checkpoints")
    g.add_argument("--checkpoint-every", type=common.positive_int, help="steps between checkpoints; one is always written at the end (default: 100)")
    g.add_argument("--keep-checkpoints", metavar="K", type=common.positive_int, help="keep the last K checkpoints (default: 3)")
    g.add_argument("--resume", action="store_true", default=None, help="continue from the newest checkpoint that loads (fresh start if none, "
                        "unless the metrics file holds another run's records); settings not given keep "
                        "the checkpoint's values, and --lr, --min-lr, --warmup-steps, --grad-clip, --steps and the "
                        "eval/checkpoint intervals may change")
    g.add_argument("--allow-new-data", action="store_true", default=None,
                   help="with --resume: continue although the token file's size or sha256 differs from the one the "
                        "checkpoint was trained on (refused otherwise: the run would silently train on other data)")
    g.add_argument("--metrics", metavar="FILE", help="JSONL, one record per step (default: <out-dir>/metrics.jsonl)")
    g.add_argument("--eval-every", type=common.nonnegative_int, help="steps between held-out evaluations, 0 = never (default: 100)")
    g.add_argument("--eval-batches", type=common.positive_int, help="global batches per evaluation (default: 8)")
    g.add_argument("--no-plot", dest="plot", action="store_false", default=None, help="do not write loss.png")
    g = parser.add_argument_group("execution")
    g.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when available)")
    g.add_argument("--compile", action="store_true", default=None, help="torch.compile the model (the step time "
                   "is then predicted for the compiled model)")
    g.add_argument("--threads", type=common.positive_int, help="torch intra-op threads on CPU (torch.set_num_threads; "
                   "default: the cores other processes leave idle, measured from /proc/stat while torch loads, at most "
                   "one per physical core, or OMP_NUM_THREADS when set; the run prints its choice). Threads that share "
                   "a core with other work wait for each other; give --threads for bit-identical reruns")
    g.add_argument("--parallel", choices=["none", "ddp", "fsdp"],
                   help="data parallelism under torchrun: ddp (replicated) or fsdp (FSDP2 fully_shard); gloo on CPU, nccl on CUDA")
    g.add_argument("--tp", type=common.positive_int, help="tensor-parallel ranks: attention heads, MLP and vocabulary "
                                                          "split with DTensor (default: 1)")
    g.add_argument("--sp", action="store_true", default=None, help="sequence parallelism for norms on the --tp ranks")
    g.add_argument("--pp", type=common.positive_int, help="pipeline stages, 1F1B schedule over --grad-accum micro-batches (default: 1)")
    g.add_argument("--ep", type=common.positive_int, help="expert-parallel ranks: a mixture-of-experts model's experts split "
                   "over them, tokens moved by all-to-all (with --parallel ddp or fsdp; default: 1)")
    g.add_argument("--force-balance", action="store_true", default=None,
                   help="with --ep: every expert gets the same number of tokens (copy p to expert p mod n_experts, the "
                        "router's weights kept), as published MoE benchmarks force it; the all-to-all bytes are then "
                        "exactly the balanced prediction")
    g.add_argument("--quiet", action="store_true", help="no progress output (errors and the summary still print)")
    _add_finetune_arguments(parser)
    common.add_json_flag(parser)


def _add_finetune_arguments(parser: argparse.ArgumentParser) -> None:
    """Fine-tuning (LoRA / QLoRA on an --init-from base) and the memory levers (docs/train.md, "Fine-tuning")."""
    g = parser.add_argument_group("fine-tuning (docs/train.md)")
    g.add_argument("--finetune", choices=["full", "lora", "qlora"],
                   help="full: train every weight (default); lora: low-rank adapters beside the frozen base "
                        "(--init-from HF_DIR, or a random base); qlora: LoRA on an NF4 base (--quantize nf4-dq)")
    g.add_argument("--lora-rank", type=common.positive_int, help="adapter rank r (default: 8)")
    g.add_argument("--lora-alpha", type=common.positive_float, help="alpha: the adapters are scaled by alpha / r (default: 16)")
    g.add_argument("--lora-targets", metavar="ROLES", help="comma-separated q,k,v,o,gate,up,down,head, or all-linear "
                                                            "(every Linear but the head, as PEFT) (default: q,v)")
    g.add_argument("--lora-dropout", type=_nonnegative_float, help="dropout on the adapters' input (default: 0)")
    g.add_argument("--quantize", choices=["none", "nf4", "nf4-dq", "int8"],
                   help="frozen base weights: nf4-dq (torchao NF4, double-quantized constants) or int8 (torchao, per "
                        "row); default none, nf4-dq with --finetune qlora; needs trainledger[finetune]")
    g = parser.add_argument_group("memory levers (full training and fine-tuning)")
    g.add_argument("--optimizer-in-backward", action="store_true", default=None,
                   help="step each parameter and free its gradient inside backward (no --grad-accum, no clipping)")
    g.add_argument("--activation-offload", action="store_true", default=None,
                   help="keep what autograd saves for backward in host memory (pinned on CUDA)")
    g.add_argument("--cpu-offload", choices=["optimizer", "params"],
                   help="optimizer: states and step on the host (torchao CPUOffloadOptimizer, CUDA); params: FSDP2's "
                        "CPUOffloadPolicy (--parallel fsdp on CUDA)")
    g.add_argument("--recompute", choices=["none", "full"],
                   help="full: one torch.utils.checkpoint per transformer block (non-reentrant): only each block's "
                        "input is kept for backward, which re-runs the block's forward (about a third more compute, "
                        "the same losses); what `layout` picks when the activations would not fit (default: none)")
    g.add_argument("--chunked-loss", metavar="N", type=common.positive_int,
                   help="cross-entropy over N chunks of the sequence, so the logits never exist whole (default: 1)")


_NO_CLIP = "none"

# The optimizers of specs/recipes.py that the trainer implements (TRAIN_OPTIMIZERS, train/config.py), and a
# hint for the others, which `memory`, `step` and `fit` account for but `train` cannot run.

ACCOUNTING_ONLY_OPTIMIZERS = {
    "adafactor": "train has no Adafactor; use adamw (or `trainledger memory --optimizer adafactor` for its bytes)",
    "adam-8bit": "train has no 8-bit Adam with L2 decay; use adamw-8bit (torchao's AdamW8bit) or adamw",
}


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {text!r}")
    return value


def config_from_args(args):
    """The resolved TrainConfig: defaults < --config TOML < flags given."""
    return _config_and_given(args)[0]


def _config_and_given(args):
    """(TrainConfig, names of the fields set by a flag or --config)."""
    from trainledger.train.config import FIELDS, resolve
    flags = {name: getattr(args, name, None) for name in FIELDS}
    flags["global_batch_size"] = getattr(args, "global_batch_size", None)
    no_clip = flags.get("grad_clip") == _NO_CLIP
    if no_clip:
        flags["grad_clip"] = None
    values = _file_values(args) if args.config else {}      # the file's keys mean what the flags mean
    values.update({name: value for name, value in flags.items() if value is not None})
    given = set(values) | ({"grad_clip"} if no_clip else set())     # --no-grad-clip is a value given: None
    _model_from_init(values)
    _map_batch_flags(values)
    given |= {"batch_size"} if given & {"batch_size", "global_batch_size"} else set()
    given.discard("global_batch_size")
    config = resolve(values)
    if no_clip:
        from dataclasses import replace
        config = replace(config, grad_clip=None)
    return config, given


def _file_values(args) -> dict:
    """The settings of --config: a run file (train/run_file.py: it has a version) or a TOML of the trainer's keys."""
    from trainledger.train.config import load_toml
    from trainledger.train.run_file import is_run_file, values_of
    if not is_run_file(args.config):
        return load_toml(args.config)
    values = values_of(args.config)
    args._expected_ranks = values.pop("_expected_ranks")
    return values


def _model_from_init(values: dict) -> None:
    """--init-from DIR: the model is DIR's config.json (an absolute path, so a --resume from elsewhere finds it)."""
    init = values.get("init_from")
    if not init:
        return
    from pathlib import Path
    directory = Path(str(init))
    if not (directory / "config.json").is_file():
        raise TrainledgerError(f"--init-from {str(init)!r}: no config.json there; give a Hugging Face model directory "
                               "(config.json + model.safetensors, e.g. one written by `trainledger export`)")
    from trainledger.train.hf_io import weight_files
    weight_files(directory, "--init-from")            # safetensors there, or the refusal of a pickle, before any work
    resolved = str(directory.resolve())
    if values.get("model") not in (None, resolved, str(init)):
        _check_model_matches(values["model"], directory)
    values["model"], values["init_from"] = resolved, resolved
    if not values.get("tokenizer") and (directory / "tokenizer.json").is_file():
        values["tokenizer"] = str((directory / "tokenizer.json").resolve())     # the checkpoint's own vocabulary


def _check_model_matches(model, directory) -> None:
    """--model beside --init-from: accepted when it describes the directory's config.json, else one line saying what
    differs (the model always comes from DIR/config.json)."""
    from dataclasses import fields

    from trainledger.specs import get_model
    from trainledger.specs.hf_config import spec_from_config_file
    theirs = spec_from_config_file(directory, "--init-from")
    try:
        ours = get_model(str(model), "--model")
    except TrainledgerError:
        ours = None
    if ours is not None and ours.kind == theirs.kind and ours.with_(name=theirs.name, source=theirs.source) == theirs:
        return
    differs = [f"{f.name} {getattr(ours, f.name)!r} vs {getattr(theirs, f.name)!r}" for f in fields(theirs)
               if ours is not None and f.name not in ("name", "source") and getattr(ours, f.name, None) != getattr(theirs, f.name)]
    detail = f" ({', '.join(differs[:3])}{', ...' if len(differs) > 3 else ''})" if differs else ""
    raise TrainledgerError(f"--init-from {directory}: its config.json describes another model than --model "
                           f"{str(model)!r}{detail}; leave --model out (the model comes from {directory}/config.json)")


def _map_batch_flags(values: dict) -> None:
    """Turns --batch-size (micro-batch per rank) and --global-batch-size into the config's fields, in place:
    batch_size = the global batch, grad_accum = micro-batches per rank (train/config.py batch_layout)."""
    import os

    from trainledger.train.config import _coerce, batch_layout
    micro, global_batch = values.pop("batch_size", None), values.pop("global_batch_size", None)
    micro = _coerce("batch_size", micro)
    global_batch = None if global_batch is None else _coerce("batch_size", global_batch)
    accum = _coerce("grad_accum", values.get("grad_accum"))
    for flag, value in (("--batch-size", micro), ("--global-batch-size", global_batch), ("--grad-accum", accum)):
        if value is not None and value <= 0:
            raise TrainledgerError(f"{flag} must be a positive integer, got {value}")
    # data-parallel ranks = processes / (tp × pp); torchrun sets WORLD_SIZE (a layout that does not divide is
    # refused by train/distributed.py check_layout, after this)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    model_parallel = _coerce("tp", values.get("tp", 1)) * _coerce("pp", values.get("pp", 1))
    dp = world // model_parallel if model_parallel > 0 and world % model_parallel == 0 else 1
    global_batch, accum = batch_layout(micro, global_batch, accum, dp)
    if global_batch is not None:
        values["batch_size"] = global_batch
    if accum != 1 or "grad_accum" in values:
        values["grad_accum"] = accum


# Signals caught before the trainer installs its own handlers (while torch and the data load): the trainer
# picks the first up and stops at its first step boundary with a checkpoint, instead of dying silently.
_EARLY_SIGNALS: list[str] = []


def _catch_early(signum, frame):
    if _EARLY_SIGNALS and signum == signal.SIGINT:
        raise KeyboardInterrupt          # a second Ctrl-C: stop now
    _EARLY_SIGNALS.append(signal.Signals(signum).name)


def _install_early_handlers() -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(ValueError):   # not the main thread (an embedding program): leave its handlers alone
            signal.signal(sig, _catch_early)


def _early_stop() -> str | None:
    return _EARLY_SIGNALS[0] if _EARLY_SIGNALS else None


def _pick_threads(config, world, others) -> str | None:
    """Sets torch's intra-op threads of a CPU run given no --threads to the cores other processes leave idle
    (measure/cpu_load.py choose_threads; never more than torch's default); the line that says so, else None."""
    import torch

    if config.threads is not None or world.device.type != "cpu":
        return None
    from trainledger.measure.cpu_load import choose_threads
    import os
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if world.distributed else 1
    threads, line = choose_threads(torch.get_num_threads(), others, ranks_here=ranks_here)
    torch.set_num_threads(threads)
    return line


def run(args) -> int:
    """Trains; prints where outputs go and a summary (JSON with --json). Exit 0 when finished or stopped by a signal."""
    _install_early_handlers()            # before the heavy imports: a SIGTERM now is not lost
    from trainledger.measure.cpu_load import OthersCpu
    others = OthersCpu()                 # other processes' CPU use while torch loads: which cores are idle
    config, given = _config_and_given(args)
    if config.resume:       # settings not given on the command line continue as the checkpoint has them
        from trainledger.train.checkpoint import newest_config
        from trainledger.train.config import inherit
        saved = newest_config(config.resolved_checkpoint_dir())
        config = inherit(config, saved, given) if saved else config
    adapters = sorted(given & {"lora_rank", "lora_alpha", "lora_targets", "lora_dropout"})
    if adapters and config.finetune == "full":
        raise TrainledgerError(f"--{adapters[0].replace('_', '-')} sets the adapters of --finetune lora or qlora; this "
                               "run trains every weight (--finetune full)")
    import torch  # (after argument checks: the help and bad flags stay fast)
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    from trainledger.train import distributed
    from trainledger.train.loop import Trainer
    from trainledger.train.signals import LAUNCHER_EXIT
    world = distributed.setup(config.parallel, config.device, config.tp, config.pp)
    from trainledger.train.run_file import check_world
    check_world(getattr(args, "_expected_ranks", None), world.world_size, args.config)
    threads_line = _pick_threads(config, world, others)
    trainer = None
    try:
        trainer = Trainer(config, world, quiet=args.quiet or args.json, given=given, early_stop=_early_stop,
                          save_config=args.save_config)
        if world.is_main and not (args.quiet or args.json):
            print(f"outputs: metrics {config.resolved_metrics()}, checkpoints {config.resolved_checkpoint_dir()}/, "
                  f"loss curve {config.out_dir}/loss.png")
            if threads_line:
                print(threads_line, flush=True)
        summary = trainer.train()
        summary["threads"] = torch.get_num_threads() if world.device.type == "cpu" else None
        summary["threads_choice"] = threads_line
        # every rank has finished its last collective before any closes its sockets: gloo aborts (SIGABRT) a rank
        # whose peer tore the group down while a message to it was still in flight
        distributed.barrier(world)
    except TrainledgerError:
        if world.is_main:
            raise
        return 2        # every rank meets the same error; rank 0 alone prints it
    finally:      # a launcher that died took its rendezvous store along: close without it
        distributed.teardown(world, through_store=getattr(trainer, "stop_signal", None) != LAUNCHER_EXIT)
    if summary["stopped_by"] and world.distributed:    # every rank says it stopped cleanly (exit 0)
        print(f"rank {world.rank}: stopped by {summary['stopped_by']} at step {summary['steps']}, exit 0",
              file=sys.stderr, flush=True)
    if world.is_main:
        if args.json:
            common.print_json(summary)
        else:
            done = "stopped by " + summary["stopped_by"] if summary["stopped_by"] else "done"
            final = f"final loss {summary['final_loss']:.4f}" if summary.get("final_loss") is not None else ""
            held = f", held-out {summary['final_eval_loss']:.4f}" if summary.get("final_eval_loss") is not None else ""
            print(f"{done}: {summary['steps']} steps, {summary['tokens']:,} tokens in {summary['seconds']:.1f} s; {final}{held}")
            if summary.get("held_out"):
                print(summary["held_out"])
            if summary.get("step_time"):
                print(summary["step_time"]["text"])
            print(f"metrics: {summary['metrics']}  checkpoint: {summary['checkpoint']}"
                  + (f"  loss curve: {summary['loss_curve']}" if summary.get("loss_curve") else ""))
    return 0
