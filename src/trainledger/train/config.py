"""The resolved configuration of a training run: built-in defaults < TOML file (--config) < command-line flags.

Every field is a plain value (str, int, float, bool or None) so the config can be stored in a checkpoint
and compared on --resume. Paths are strings; `None` means unset (no magic -1).

The default run (no arguments): the `tiny` byte-level GPT on the Python standard library's own `.py`
sources, sized to finish in about 2.5 minutes on an idle 2-core machine (2 min 32 s measured, README).
"""

from __future__ import annotations

import os

import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from trainledger.errors import TrainledgerError, first_line
from trainledger.files import read_regular_file

PRECISIONS = ("fp32", "amp-bf16", "amp-fp16", "mixed-bf16", "mixed-fp16", "bf16", "fp8-cs", "fp8-rowwise")
PARALLEL = ("none", "ddp", "fsdp")
OPTIMIZERS = ("sgd", "momentum", "adagrad", "rmsprop", "rmsprop-centered", "adam", "adamw",  # optim.build_optimizer
              "adamw-8bit", "paged-adamw-8bit")                                                # optim/low_bit.py
FINETUNE = ("full", "lora", "qlora")    # train/finetune.py
QUANTIZE = ("none", "nf4", "nf4-dq", "int8")     # models/quantize.py (the frozen base weights)
CPU_OFFLOAD = ("optimizer", "params")            # optim/levers.py
RECOMPUTE = ("none", "full")     # full: one torch.utils.checkpoint per block (models/transformer.py run_block)


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Units: tokens for sizes, steps for intervals, learning rates per step."""

    model: str = "tiny"                 # preset name or config.json path; "cruncher" = the lecture's regression
    text: str | None = None             # UTF-8 text file, byte-tokenized into <out_dir>/data/
    data: str | None = None             # token file (.tokens with header, or 1-D .npy)
    dataset: str | None = None          # .jsonl / .parquet / Arrow file: its text_column, tokenized into <out_dir>/data/
    text_column: str = "text"           # the dataset's column (JSON field) of documents
    tokenizer: str | None = None        # "bytes" or a tokenizer.json / .tiktoken path; None: the token file's, else bytes
    special_tokens: tuple[str, ...] = ()   # added to --tokenizer (--special-token, repeatable): one id each, never split
    allowed_special: tuple[str, ...] = ()  # special tokens of --tokenizer matched in --text/--dataset ("all"); else text
    allow_new_data: bool = False        # --resume on a data file whose size or sha256 changed since the checkpoint
    init_from: str | None = None        # a Hugging Face directory (config.json + safetensors) whose weights start the run
    vocab_multiple: int = 1             # the model's vocabulary padded up to a multiple of this (nanoGPT: 64)
    # recorded by the trainer, not settings: the tokenizer trained with and the model's vocabulary
    tokenizer_name: str | None = None
    tokenizer_sha256: str | None = None
    model_vocab_size: int | None = None
    model_sha256: str | None = None     # of the spec a --model config.json gave (train/vocab.py); None for presets
    data_bytes: int | None = None       # size and sha256 of the token file trained on (train/data_identity.py)
    data_sha256: str | None = None
    steps: int = 600                    # optimizer steps
    batch_size: int = 32                # GLOBAL sequences per optimizer step (all ranks, all micro-batches): the
                                        # CLI's --global-batch-size; its --batch-size (micro-batch) maps here
                                        # through batch_layout()
    grad_accum: int = 1                 # micro-batches per optimizer step on each rank
    seq_len: int = 128                  # tokens per sequence (context length)
    lr: float = 3e-3                    # peak learning rate
    min_lr: float = 3e-4                # learning rate at the end of the cosine
    warmup_steps: int = 40              # linear warmup from 0 to lr
    weight_decay: float = 0.1
    grad_clip: float | None = 1.0       # max global L2 norm of the gradient; None: no clipping
    optimizer: str = "adamw"
    precision: str = "fp32"
    seed: int = 0
    out_dir: str = "runs/tiny-stdlib"
    checkpoint_dir: str | None = None   # default <out_dir>/checkpoints
    checkpoint_every: int = 100         # steps between checkpoints (a final one is always written)
    keep_checkpoints: int = 3
    resume: bool = False
    metrics: str | None = None          # default <out_dir>/metrics.jsonl
    eval_every: int = 100               # steps between held-out evaluations (and at the end); 0: never
    eval_batches: int = 8               # global batches per evaluation
    eval_fraction: float = 0.05         # share of the tokens held out for evaluation (the end of the file)
    compile: bool = False
    parallel: str = "none"              # ddp | fsdp under torchrun; none for one process
    tp: int = 1                         # tensor-parallel ranks (DTensor); needs torchrun
    sp: bool = False                    # sequence parallelism on the TP ranks (--tp > 1)
    pp: int = 1                         # pipeline stages (1F1B); needs torchrun and --grad-accum >= pp
    ep: int = 1                         # expert-parallel ranks (a MoE model's experts split over them); needs torchrun
    force_balance: bool = False         # --ep: route token copy p to expert p mod n_experts (the benchmarks' forced balance)
    device: str | None = None           # cpu, cuda, cuda:1; default: cuda when available
    threads: int | None = None          # torch intra-op threads (torch.set_num_threads); None: torch's default
    plot: bool = True                   # write <out_dir>/loss.png at the end
    # fine-tuning (train/finetune.py): adapters on a frozen base, maybe quantized
    finetune: str = "full"              # full | lora | qlora (LoRA on an NF4 base)
    lora_rank: int = 8                  # r
    lora_alpha: float = 16.0            # the adapters' scale is alpha / r
    lora_targets: str = "q,v"           # roles (q,k,v,o,gate,up,down,head) or all-linear (models/lora.py)
    lora_dropout: float = 0.0           # on the adapters' input (PEFT's lora_dropout)
    quantize: str = "none"              # frozen base weights: none | nf4-dq | int8 (qlora: nf4-dq unless given)
    # memory levers (full training too)
    optimizer_in_backward: bool = False  # each parameter steps and frees its gradient inside backward
    activation_offload: bool = False    # saved activations to host memory (models/offload.py)
    cpu_offload: str | None = None      # optimizer (torchao CPUOffloadOptimizer) | params (FSDP2 CPUOffloadPolicy)
    chunked_loss: int = 1               # cross-entropy over this many chunks of the sequence (models/losses.py)
    recompute: str = "none"             # full: each block's forward re-run in backward (only its input is kept)

    def resolved_checkpoint_dir(self) -> Path:
        return Path(self.checkpoint_dir) if self.checkpoint_dir else Path(self.out_dir) / "checkpoints"

    def resolved_metrics(self) -> Path:
        return Path(self.metrics) if self.metrics else Path(self.out_dir) / "metrics.jsonl"

    def to_dict(self) -> dict:
        return asdict(self)


FIELDS = {f.name: f for f in fields(TrainConfig)}
# Fields that define what is trained: a --resume with a different value is refused (it would be another run).
IDENTITY = ("model", "text", "data", "dataset", "text_column", "vocab_multiple", "batch_size", "seq_len",
            "weight_decay", "optimizer", "precision", "seed", "eval_fraction", "init_from", "finetune", "lora_rank",
            "lora_alpha", "lora_targets", "lora_dropout", "quantize", "optimizer_in_backward", "cpu_offload",
            "allowed_special")
# Fields a --resume takes from the checkpoint when not given, but may name differently: the tokenizer's path
# may move; its identity (tokenizer_sha256) is what must not change (check_resume). The activation levers change
# no state: a resumed run may switch them.
INHERITED = ("tokenizer", "special_tokens", "activation_offload", "chunked_loss", "recompute")
# Fields the trainer records; never read from flags or --config.
RECORDED = ("tokenizer_name", "tokenizer_sha256", "model_vocab_size", "model_sha256", "data_bytes", "data_sha256")
DATA_SOURCES = ("text", "data", "dataset")
# Fields a --resume may change (--lr and --grad-clip after a NaN, --steps to extend): a notice lists the
# changes. Any of them not given on the command line (or in --config) keeps the checkpoint's value.
RESUMABLE = ("lr", "min_lr", "warmup_steps", "grad_clip", "steps", "eval_every", "eval_batches",
             "checkpoint_every", "keep_checkpoints")
# Defaults for the lecture's Cruncher regression (CS336 Lecture 2 `train_loop` uses SGD at lr 0.01 with batch 4
# on 10 steps; its targets x·(0..D−1) have a variance of ~85,000 at D=64, so SGD with clipping crawls and
# without it diverges: Adam, whose step size does not scale with the gradient, fits it in 200 steps).
CRUNCHER_DEFAULTS = {"steps": 200, "batch_size": 32, "seq_len": 1, "lr": 0.05, "min_lr": 0.005,
                     "warmup_steps": 10, "weight_decay": 0.0, "optimizer": "adam", "out_dir": "runs/cruncher",
                     "eval_every": 50}


# --config keys that are flags of the CLI but not fields: cli/train.py maps them (batch_layout) before resolve().
CLI_KEYS = ("global_batch_size",)


def max_threads() -> int:
    """The most --threads a run takes: 4 per core of this machine (torch.set_num_threads(10**6) crashes, SIGSEGV)."""
    return 4 * (os.cpu_count() or 1)


MAX_SEED = 2**63 - 1             # torch.manual_seed takes a signed or unsigned 64-bit integer; the seed + 1 of the
                                # held-out sampler must fit as well
MAX_CONFIG_BYTES = 1 << 20      # a TOML of settings is a few hundred bytes; a larger file is refused unread


def load_toml(path: str | Path) -> dict:
    """The keys of a TOML config file (dashes or underscores), checked against the known fields.

    The file must be a regular file of at most MAX_CONFIG_BYTES (a FIFO, /dev/zero or a directory is one line,
    never a hang); the settings are the top level or a [train] table.
    """
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise TrainledgerError(f"config file {path} does not exist", "--config")
    data = read_regular_file(path, "--config", MAX_CONFIG_BYTES)
    try:
        raw = tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, RecursionError) as error:
        raise TrainledgerError(f"config file {path} is not valid TOML: {first_line(error)[:160]}", "--config") from None
    table = raw.get("train", raw)
    if not isinstance(table, dict):
        raise TrainledgerError(f"`train` in {path} must be a table of settings ([train] followed by key = value "
                               f"lines), got {table!r:.40}", "--config")
    values = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in FIELDS and name not in CLI_KEYS or name in RECORDED:
            raise TrainledgerError(f"unknown key {key!r} in {path} (--config). Known: "
                                   + ", ".join(f.replace("_", "-") for f in (*FIELDS, *CLI_KEYS) if f not in RECORDED))
        values[name] = value
    return values


def resolve(flags: dict, config_file: str | None = None) -> TrainConfig:
    """Defaults, then the TOML file, then the flags that were given (value not None); validated.

    `flags` maps field names to values, None for a flag that was not given.
    """
    values = load_toml(config_file) if config_file else {}
    if "global_batch_size" in values:       # a --config key: the field batch_size is the global batch
        values["batch_size"] = values.pop("global_batch_size")
    values.update({k: v for k, v in flags.items() if v is not None and k in FIELDS and k not in RECORDED})
    if str(values.get("model", "")).lower() == "cruncher":
        values = {**CRUNCHER_DEFAULTS, **values}
    elif values.get("text") or values.get("data") or values.get("dataset"):
        name = Path(values.get("text") or values.get("data") or values.get("dataset")).stem
        model = Path(str(values.get("model", "tiny")))     # a config.json path or an --init-from directory: its name
        label = model.parent.name if model.suffix == ".json" else model.name
        values.setdefault("out_dir", f"runs/{label or 'model'}-{name}")
    if values.get("finetune") == "qlora" and "quantize" not in values:
        values["quantize"] = "nf4-dq"      # QLoRA: LoRA on a double-quantized NF4 base (arXiv:2305.14314)
    if values.get("optimizer_in_backward") and "grad_clip" not in values:
        values["grad_clip"] = None         # no moment holds every gradient to clip by their norm (optim/in_backward.py)
    if "warmup_steps" not in values:   # the default warmup never exceeds a tenth of a short run
        steps = values.get("steps", FIELDS["steps"].default)
        values["warmup_steps"] = min(FIELDS["warmup_steps"].default, steps // 10 if isinstance(steps, int) else 0)
    config = TrainConfig(**{k: _coerce(k, v) for k, v in values.items()})
    validate(config)
    return config


def _coerce(name: str, value):
    """`value` converted to the type of field `name`; a one-line error naming the key otherwise."""
    flag = "--" + name.replace("_", "-")
    default = FIELDS[name].default
    if value is None:
        return None
    if name in ("special_tokens", "allowed_special"):
        if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise TrainledgerError(f"--{'special-token' if name == 'special_tokens' else 'allow-special'} must be a "
                                   f"list of strings, got {value!r:.60}")
        return tuple(value)
    kind = type(default) if default is not None else {"grad_clip": float, "threads": int, "data_bytes": int,
                                                      "model_vocab_size": int}.get(name, str)
    if kind is bool:
        if not isinstance(value, bool):
            raise TrainledgerError(f"{flag} must be true or false, got {value!r}")
        return value
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TrainledgerError(f"{flag} must be an integer, got {value!r}")
        return value
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TrainledgerError(f"{flag} must be a number, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise TrainledgerError(f"{flag} must be a string, got {value!r:.60}")
    return value


def validate(config: TrainConfig) -> None:
    """Raises a TrainledgerError naming the flag for the first value that is not allowed."""
    for name in ("model", "out_dir", "text", "data", "dataset", "checkpoint_dir", "metrics", "device"):
        value = getattr(config, name)
        if value is not None and not value.strip():
            raise TrainledgerError(f"{_flag(name)} must not be empty, got {value!r}" + (
                " (an empty --out-dir would write into the current directory)" if name == "out_dir" else ""))
    for name, flag in (("special_tokens", "--special-token"), ("allowed_special", "--allow-special")):
        if getattr(config, name) and config.tokenizer in (None, "bytes"):
            raise TrainledgerError(f"{flag} needs --tokenizer FILE (a tokenizer.json, .tiktoken or vocab.json): "
                                   "the byte tokenizer has only the 256 byte values")
    if not 0 <= config.seed <= MAX_SEED:
        raise TrainledgerError(f"--seed must be an integer in 0..2^63-1 (what torch.manual_seed and numpy's "
                               f"generators take), got {config.seed}")
    for name in ("steps", "batch_size", "grad_accum", "seq_len", "keep_checkpoints", "eval_batches",
                 "checkpoint_every", "tp", "pp", "ep", "vocab_multiple", "lora_rank", "chunked_loss"):
        if getattr(config, name) <= 0:
            raise TrainledgerError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(config, name)}")
    for name in ("warmup_steps", "eval_every"):
        if getattr(config, name) < 0:
            raise TrainledgerError(f"--{name.replace('_', '-')} must be >= 0, got {getattr(config, name)}")
    if config.threads is not None and not 0 < config.threads <= max_threads():
        raise TrainledgerError(f"--threads must be an integer in 1..{max_threads()} (4 × the {os.cpu_count()} cores "
                               f"here: more threads than cores only slow a step), got {config.threads}")
    if config.warmup_steps > config.steps:
        raise TrainledgerError(f"--warmup-steps {config.warmup_steps} exceeds --steps {config.steps}")
    if not config.lr > 0 or not 0 <= config.min_lr <= config.lr:
        raise TrainledgerError(f"need --lr > 0 and 0 <= --min-lr <= --lr, got lr={config.lr}, min_lr={config.min_lr}")
    if config.weight_decay < 0:
        raise TrainledgerError(f"--weight-decay must be >= 0, got {config.weight_decay}")
    if config.grad_clip is not None and not config.grad_clip > 0:
        raise TrainledgerError(f"--grad-clip must be positive, got {config.grad_clip}")
    if not 0 < config.eval_fraction < 1:
        raise TrainledgerError(f"eval_fraction must be in (0, 1), got {config.eval_fraction}")
    if config.precision.startswith("mixed-") and (config.parallel == "fsdp" or config.tp > 1 or config.pp > 1):
        raise TrainledgerError(f"--precision {config.precision} runs on one process or with --parallel ddp; with "
                               f"--parallel fsdp, --tp or --pp use amp-{config.precision[6:]} (fp32 weights and states, "
                               "the same bytes as the master copy + states) or bf16")
    if config.precision not in PRECISIONS:
        raise TrainledgerError(f"unknown --precision {config.precision!r}. Known: {', '.join(PRECISIONS)}")
    if config.parallel not in PARALLEL:
        raise TrainledgerError(f"unknown --parallel {config.parallel!r}. Known: {', '.join(PARALLEL)}")
    if config.optimizer not in OPTIMIZERS:
        raise TrainledgerError(f"unknown --optimizer {config.optimizer!r}. Known: {', '.join(OPTIMIZERS)}")
    if config.sp and config.tp < 2:
        raise TrainledgerError(f"--sp needs --tp 2 or more (sequence parallelism splits over the TP ranks), got --tp {config.tp}")
    sources = [f"--{name}" for name in DATA_SOURCES if getattr(config, name)]
    if len(sources) > 1:
        raise TrainledgerError(f"give --text or --data or --dataset, one data source (got {' and '.join(sources)})")
    if not config.text_column.strip():
        raise TrainledgerError("--text-column must name a column, got ''")
    if config.model.lower() == "cruncher" and (config.tokenizer or config.dataset or config.vocab_multiple != 1):
        raise TrainledgerError("--model cruncher is a regression without a vocabulary: --tokenizer, --dataset and "
                               "--vocab-multiple apply to language models")
    if config.batch_size % config.grad_accum:
        raise TrainledgerError(f"--global-batch-size {config.batch_size} is not divisible by --grad-accum {config.grad_accum}")
    validate_levers(config)


def validate_levers(config: TrainConfig) -> None:
    """The fine-tuning and memory-lever settings: one line naming the flag for the first that is not allowed."""
    for name, allowed in (("finetune", FINETUNE), ("quantize", QUANTIZE)):
        if getattr(config, name) not in allowed:
            raise TrainledgerError(f"unknown {_flag(name)} {getattr(config, name)!r}. Known: {', '.join(allowed)}")
    if config.recompute not in RECOMPUTE:
        raise TrainledgerError(f"unknown --recompute {config.recompute!r}. Known: {', '.join(RECOMPUTE)} (train "
                               "recomputes whole blocks or nothing; selective recomputation is accounted, not trained)")
    if config.recompute != "none" and config.model.lower() == "cruncher":
        raise TrainledgerError("--recompute full checkpoints each block of a language model: not the cruncher")
    if config.cpu_offload is not None and config.cpu_offload not in CPU_OFFLOAD:
        raise TrainledgerError(f"unknown --cpu-offload {config.cpu_offload!r}. Known: {', '.join(CPU_OFFLOAD)}")
    tuned = config.finetune != "full"
    if config.quantize != "none" and not tuned:
        raise TrainledgerError(f"--quantize {config.quantize}: quantized weights cannot be trained; quantize the frozen "
                               "base of --finetune lora or qlora")
    if config.quantize == "nf4":
        raise TrainledgerError("--quantize nf4 (one fp32 absmax per 64 weights) is bitsandbytes' storage, which `train` "
                               "does not run; torchao's NF4 always double-quantizes its constants: use --quantize nf4-dq")
    if config.finetune == "qlora" and config.quantize == "none":
        raise TrainledgerError("--finetune qlora is LoRA on a quantized base: give --quantize nf4-dq or int8, or use "
                               "--finetune lora")
    if not config.lora_alpha > 0:
        raise TrainledgerError(f"--lora-alpha must be positive, got {config.lora_alpha}")
    if not 0 <= config.lora_dropout < 1:
        raise TrainledgerError(f"--lora-dropout must be in [0, 1), got {config.lora_dropout}")
    if tuned:             # (models/ imports torch: only a fine-tuning run's targets are read here)
        from trainledger.models.lora import parse_targets
        parse_targets(config.lora_targets)
    one_process = config.parallel == "none" and config.tp == config.pp == config.ep == 1
    cruncher = config.model.lower() == "cruncher"
    if tuned and (cruncher or config.parallel == "fsdp" or config.tp > 1 or config.pp > 1 or config.ep > 1
                  or config.precision.startswith("fp8")):
        raise TrainledgerError(f"--finetune {config.finetune} trains a language model on one process or with --parallel "
                               "ddp, in fp32, amp-*, mixed-* or bf16 (not the cruncher, fsdp, --tp, --pp, --ep or fp8)")
    if config.optimizer_in_backward:
        if config.grad_accum > 1:
            raise TrainledgerError(f"--optimizer-in-backward steps each parameter as soon as its gradient is ready: not "
                                   f"with --grad-accum {config.grad_accum} (the step would see one micro-batch's part)")
        if config.grad_clip is not None:
            raise TrainledgerError("--optimizer-in-backward cannot clip by the global gradient norm (no moment holds "
                                   "every gradient): leave --grad-clip out (it then defaults to none)")
        if config.precision.endswith("fp16") or config.precision in ("mixed-bf16",) or not one_process:
            raise TrainledgerError("--optimizer-in-backward runs on one process, in fp32, amp-bf16 or bf16 (loss scaling "
                                   "and master copies need every gradient first)")
    if config.chunked_loss > 1 and (cruncher or config.tp > 1 or config.pp > 1):
        raise TrainledgerError(f"--chunked-loss {config.chunked_loss} splits a language model's cross-entropy on one "
                               "process or under --parallel ddp/fsdp (not the cruncher, --tp or --pp)")
    if config.chunked_loss > config.seq_len:
        raise TrainledgerError(f"--chunked-loss {config.chunked_loss} exceeds --seq-len {config.seq_len}: allowed "
                               f"1..{config.seq_len} chunks of the sequence")
    if config.activation_offload and (cruncher or config.parallel == "fsdp" or not config.tp == config.pp == 1):
        raise TrainledgerError("--activation-offload runs on one process or with --parallel ddp (not fsdp, --tp or --pp)")


def check_resume(saved: dict, config: TrainConfig, given: set[str] | None = None,
                 step: int = 0) -> tuple[TrainConfig, list[str]]:
    """The config to continue a checkpoint with, and one line per setting changed; refuses identity changes.

    `saved` is the checkpoint's config, `given` the fields set by flags or --config (None: all of them),
    `step` the checkpoint's step. IDENTITY fields must match (the error names only those that differ);
    RESUMABLE fields not given keep the saved value, given ones may differ.
    """
    current = config.to_dict()
    changed = [k for k in IDENTITY if k in saved and saved[k] != current[k]]
    old_sha, new_sha = saved.get("tokenizer_sha256"), current.get("tokenizer_sha256")
    if old_sha and new_sha and old_sha != new_sha:
        raise TrainledgerError(f"--resume: the checkpoint was trained with tokenizer {saved.get('tokenizer_name')} "
                               f"(sha256 {old_sha[:12]}…) but this run's is {current.get('tokenizer_name')} "
                               f"(sha256 {new_sha[:12]}…); a resumed run cannot change its tokenizer: pass the "
                               "original --tokenizer, or choose another --out-dir/--checkpoint-dir")
    check_data_identity(saved, current)
    old_model, new_model = saved.get("model_sha256"), current.get("model_sha256")
    if old_model and new_model and old_model != new_model:
        raise TrainledgerError(f"--resume: --model {current['model']} has changed since the checkpoint was written "
                               f"(its spec's sha256 was {old_model[:12]}…, now {new_model[:12]}…); restore the "
                               "config.json the run was trained with, or choose another --out-dir/--checkpoint-dir")
    if changed:
        detail = ", ".join(f"{_flag(k)} {saved[k]!r} (now {current[k]!r})" for k in changed)
        raise TrainledgerError(f"--resume: the checkpoint was written with {detail}, which a resumed run cannot "
                               "change; use the original value or another --out-dir/--checkpoint-dir")
    values, notes = {}, []
    for name in RESUMABLE:
        if name not in saved:
            continue
        if given is not None and name not in given:
            values[name] = saved[name]
        elif saved[name] != current[name]:
            notes.append(f"--{name.replace('_', '-')} {_shown(saved[name])} -> {_shown(current[name])}")
    merged = replace(config, **values)
    if merged.steps < step:
        raise TrainledgerError(f"--steps {merged.steps} is below the checkpoint's step {step}; "
                               f"to continue, pass --steps above {step}")
    validate(merged)
    return merged, notes


def check_data_identity(saved: dict, current: dict) -> None:
    """Refuses (one line) a --resume whose token file differs in size or sha256 from the one the checkpoint was
    trained on (a --data file rewritten with other text, a --text whose cache was rebuilt), unless
    --allow-new-data; checkpoints from before the identity was recorded are not checked."""
    old_sha, new_sha = saved.get("data_sha256"), current.get("data_sha256")
    if not old_sha or not new_sha or current.get("allow_new_data"):
        return
    if (old_sha, saved.get("data_bytes")) != (new_sha, current.get("data_bytes")):
        raise TrainledgerError(f"--resume: the data has changed since the checkpoint was written ({saved.get('data_bytes')}"
                               f" bytes, sha256 {old_sha[:12]}…; now {current.get('data_bytes')} bytes, sha256 "
                               f"{new_sha[:12]}…): the run would continue on other data. Restore the data the run "
                               "trained on, or pass --allow-new-data (not inherited: asked each time) to continue on "
                               "this data on purpose")


def _shown(value) -> str:
    """A setting as a notice shows it: None (no clipping) is `none`."""
    return "none" if value is None else str(value)


def _flag(name: str) -> str:
    """The CLI flag of a field (batch_size holds the global batch: --global-batch-size)."""
    return "--global-batch-size" if name == "batch_size" else "--" + name.replace("_", "-")


def inherit(config: TrainConfig, saved: dict, given: set[str]) -> TrainConfig:
    """`config` with every IDENTITY and RESUMABLE setting not in `given` taken from `saved` (a checkpoint's
    config), so that `--resume` alone continues a run started with other flags; validated."""
    sources = set(DATA_SOURCES)
    skip = set(given) | (sources if given & sources else set())    # the data source is one choice
    values = {k: saved[k] for k in (*IDENTITY, *RESUMABLE, *INHERITED) if k not in skip and k in saved}
    try:
        merged = replace(config, **{k: _coerce(k, v) for k, v in values.items()})
        validate(merged)
    except (TypeError, TrainledgerError):   # a manifest from another version, or damaged: the resume checks it
        return config
    return merged


def batch_layout(micro: int | None, global_batch: int | None, accum: int | None, dp: int) -> tuple[int | None, int]:
    """(global batch, micro-batches per rank) from the CLI's batch flags; None for a flag not given.

    --batch-size is the micro-batch per data-parallel rank (sequences per forward/backward), --global-batch-size
    the sequences per optimizer step over all ranks, as in `memory` and `step`:
        global = micro × dp × accum.
    Any two of the three fix the third; --grad-accum alone defaults to 1. A global batch of None means "not
    given": the config default (or on --resume the checkpoint's) applies, split by with_world().
    """
    if micro is not None and global_batch is not None:
        per_pass = micro * dp
        if global_batch % per_pass:
            raise TrainledgerError(f"--global-batch-size {global_batch} is not a multiple of --batch-size {micro} × {dp} "
                                   f"data-parallel rank{'s' if dp > 1 else ''} = {per_pass}; allowed: multiples of {per_pass}")
        derived = global_batch // per_pass
        if accum is not None and accum != derived:
            raise TrainledgerError(f"--grad-accum {accum} disagrees with --global-batch-size {global_batch} / (--batch-size "
                                   f"{micro} × {dp} data-parallel rank{'s' if dp > 1 else ''}) = {derived}; give --grad-accum "
                                   f"{derived} or leave it out")
        return global_batch, derived
    accum = 1 if accum is None else accum
    if micro is not None:
        return micro * dp * accum, accum
    if global_batch is not None and global_batch % (dp * accum):
        raise TrainledgerError(f"--global-batch-size {global_batch} is not divisible by {dp} data-parallel rank"
                               f"{'s' if dp > 1 else ''} × --grad-accum {accum} = {dp * accum}; allowed: multiples of {dp * accum}")
    return global_batch, accum


def with_world(config: TrainConfig, world_size: int) -> tuple[int, int]:
    """(sequences per rank per step, sequences per micro-batch) for `world_size` data-parallel ranks."""
    if config.batch_size % world_size:
        raise TrainledgerError(f"--global-batch-size {config.batch_size} is not divisible by the {world_size} "
                               "data-parallel ranks")
    per_rank = config.batch_size // world_size
    if per_rank % config.grad_accum:
        raise TrainledgerError(f"--global-batch-size {config.batch_size} / {world_size} data-parallel ranks = {per_rank} "
                               f"sequences per rank, not divisible by --grad-accum {config.grad_accum}")
    return per_rank, per_rank // config.grad_accum


__all__ = ["TrainConfig", "batch_layout", "resolve", "load_toml", "validate", "check_resume", "inherit", "with_world", "replace"]
