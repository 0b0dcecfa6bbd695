"""A training job as a run file (specs/run_file.py): what `train --config RUN` reads and what each output directory
holds as run.toml, so that `trainledger step --config runs/x/run.toml` predicts the run that was trained.

The run's groups map onto the trainer's settings (train/config.py TrainConfig):
- [model] name -> --model; [hardware] gpu -> --device (cpu, or cuda for a GPU); its num_gpus is the launch's
  world size (torchrun --nproc_per_node), checked against it;
- [batch] batch_size (the micro-batch per rank), global_batch_size, seq_len; [numerics] precision, optimizer;
- [layout] dp, zero (0: DDP or one process, 3: --parallel fsdp), tp, sp, pp, ep; [kernels] compile;
  [levers] recompute (none, or full: --recompute full), optimizer_in_backward, activation_offload, cpu_offload,
  chunked_loss; [finetune] method (--finetune), lora_rank, lora_alpha, lora_targets, quantize;
- [train]: the trainer's own settings (steps, lr, the data, the output directory...), keys as in a --config TOML.
A setting of the run the trainer does not implement (ZeRO 1 or 2, context parallelism, the interleaved or DualPipe
schedule, another framework's kernels, selective recomputation, ...) is refused in one line naming its key, never
ignored.
"""

from __future__ import annotations

from pathlib import Path

from trainledger.errors import TrainledgerError
from trainledger.specs import run_file
from trainledger.specs.run import Run

RUN_TOML = "run.toml"
# key: (the run's value the trainer runs, why another is refused)
ONLY = {
    "layout.cp": (1, "context parallelism"), "layout.interleave": (1, "the interleaved pipeline schedule"),
    "layout.schedule": ("1f1b", "another pipeline schedule"), "layout.uneven_chunks": (False, "uneven pipeline chunks"),
    "layout.account_for_embedding_in_pipeline_split": (False, "Megatron's split with the embedding as a layer"),
    "layout.account_for_loss_in_pipeline_split": (False, "Megatron's split with the loss as a layer"),
    "layout.experts.imbalance": (1.0, "a routing imbalance (the trainer routes as its model does)"),
    "layout.experts.capacity_factor": (None, "a capacity factor (the trainer's MoE is dropless)"),
    "layout.experts.overlap": (0.0, "an overlapped all-to-all"),
    "layout.experts.dispatcher": ("alltoall", "another token dispatcher"),
    "levers.recompute": (("none", "full"), "selective activation recomputation"),   # full: train --recompute full
    "kernels.framework": ("trainledger", "another framework's kernels"),
    "kernels.flash": (True, "attention without a flash kernel"),
    "kernels.loss_upcast": (True, "the cross-entropy on 16-bit logits"),
    "kernels.mtp": (False, "multi-token-prediction modules"),
}
# unset in a run file: decided by the run's other settings (specs/run_checks.py), the trainer's value without them
DECIDED_LATER = {"kernels.mtp", "layout.experts.overlap", "layout.experts.dispatcher"}


def _at(run, path: str):
    value = run
    for part in path.split("."):
        value = getattr(value, part)
    return value


def is_run_file(path) -> bool:
    """Whether the TOML (or JSON) file at `path` is a run file (it has a `version`), not a TOML of trainer keys."""
    import json
    import tomllib

    from trainledger.files import read_regular_file
    if not Path(path).is_file() or Path(path).is_symlink():
        return False                # train/config.py's reader says what is wrong with it
    text = read_regular_file(Path(path), "--config", run_file.MAX_RUN_FILE_BYTES).decode("utf-8", "replace")
    try:
        data = json.loads(text) if str(path).lower().endswith(".json") else tomllib.loads(text)
    except ValueError:
        return str(path).lower().endswith(".json")      # a broken JSON file: the run file's reader says why
    return isinstance(data, dict) and "version" in data


def values_of(path) -> dict:
    """The trainer's settings of the run file at `path` (the names cli/train.py's flags fill: batch_size is the
    micro-batch, global_batch_size the global batch), refusing what the trainer does not run."""
    read = run_file.load(path)
    run, where = read.run, f"--config {path}"
    for key, (value, what) in ONLY.items():
        allowed = value if isinstance(value, tuple) else (value,)
        if _at(run, key) not in allowed and not (key in DECIDED_LATER and _at(run, key) is None):
            runs = " or ".join(f"{key} = {v!r}" for v in allowed)
            raise TrainledgerError(f"{where}: {key} = {_at(run, key)!r} asks for {what}, which `train` does not run "
                                   f"(it runs {runs}); `trainledger step --config` predicts it", "--config")
    lay = run.layout
    if lay.etp not in (None, lay.tp):
        raise TrainledgerError(f"{where}: layout.etp = {lay.etp} differs from layout.tp = {lay.tp}: `train` gives the "
                               "experts the attention's tensor parallelism", "--config")
    if lay.zero in (1, 2):
        raise TrainledgerError(f"{where}: layout.zero = {lay.zero}: `train` shards with FSDP2 (zero 3) or not at all "
                               "(zero 0: DDP)", "--config")
    values = dict(read.sections.get("train", {}))
    if "name" in read.model:
        values["model"] = read.model["name"]
        if "vocab_size" in read.model:      # the tokenizer in [train] sets the vocabulary again; it must agree
            values["_vocab_size"] = read.model["vocab_size"]
    elif "params" in read.model:
        raise TrainledgerError(f"{where}: [model] gives a parameter count; `train` needs a model (name = ...)", "--config")
    gpu = read.hardware.get("gpu")
    if gpu is not None:
        values["device"] = "cpu" if str(gpu).lower() == "cpu" else "cuda"
    b = run.batch
    ft, lev = run.finetune, run.levers
    values.update(batch_size=b.batch_size, seq_len=b.seq_len, optimizer=run.numerics.optimizer,
                  tp=lay.tp, sp=lay.sp, pp=lay.pp, ep=lay.ep, compile=run.kernels.compile,
                  recompute=lev.recompute, finetune=ft.method, optimizer_in_backward=lev.optimizer_in_backward,
                  activation_offload=lev.activation_offload, chunked_loss=lev.chunked_loss,
                  cpu_offload=None if lev.cpu_offload == "none" else lev.cpu_offload)
    if ft.adapters:
        values.update(lora_rank=ft.lora_rank, lora_alpha=ft.lora_alpha, lora_targets=ft.lora_targets,
                      quantize=ft.base_storage)
    if b.global_batch_size is not None:
        values["global_batch_size"] = b.global_batch_size
    if run.numerics.precision is not None:
        values["precision"] = run.numerics.precision
    values = {k: v for k, v in values.items() if v is not None}
    if lay.zero == 3:
        values["parallel"] = "fsdp"
    elif (lay.dp or 1) > 1:
        values["parallel"] = "ddp"
    values["_expected_ranks"] = read.hardware.get("num_gpus")
    values.pop("_vocab_size", None)     # recorded for `step --config`; the trainer derives it from the tokenizer
    return values


def check_world(expected: int | None, world_size: int, path) -> None:
    """A run file's GPU count against the launch's ranks."""
    if expected is not None and expected != world_size:
        raise TrainledgerError(f"--config {path} is a run on {expected} GPUs (hardware.num_gpus); this launch has "
                               f"{world_size} rank{'s' if world_size > 1 else ''} (torchrun --nproc_per_node, "
                               "--nnodes)", "--config")


def trained_run(config, world, micro_batch: int, seq_len: int) -> Run:
    """The run (specs.run.Run) a trainer with `config` on `world` runs: its micro-batch per rank, global batch and
    sequence, recipe and optimizer, layout (dp, ZeRO 3 under --parallel fsdp, tp, sp, pp, ep) and compile."""
    from trainledger.train.metrics import accounted_optimizer     # the 8-bit AdamWs as the 8-bit Adam specs/ prices
    fsdp = config.parallel == "fsdp" and world.distributed
    return Run().with_(batch_size=micro_batch, global_batch_size=config.batch_size, seq_len=seq_len,
                       precision=config.precision, optimizer=accounted_optimizer(config.optimizer), dp=world.dp_size,
                       zero=3 if fsdp else 0,
                       tp=world.tp, sp=config.sp, pp=world.pp, ep=config.ep, compile=config.compile,
                       param_dtype="stored",        # --parallel fsdp: no mixed-precision policy (autocast over the shards)
                       reserve="auto", mtp=False, recompute=config.recompute, method=config.finetune,
                       lora_rank=config.lora_rank, lora_alpha=float(config.lora_alpha),
                       lora_targets=config.lora_targets,
                       quantize=config.quantize if config.finetune != "full" else None,
                       optimizer_in_backward=bool(config.optimizer_in_backward),
                       activation_offload=bool(config.activation_offload), chunked_loss=config.chunked_loss,
                       cpu_offload=config.cpu_offload or "none")


def document(config, world, micro_batch: int, gpu_name: str, vocab_size: int | None = None) -> dict:
    """The run file of a training job: its model (`vocab_size`: the vocabulary it trains with, where the tokenizer
    changed the named model's) and device, the run the trainer runs (the layout of `world`, the micro-batch per
    rank), and [train] with the trainer's other settings."""
    from dataclasses import asdict

    from trainledger.train.config import RECORDED
    mapped = {"model", "batch_size", "grad_accum", "seq_len", "precision", "optimizer", "tp", "sp", "pp", "ep",
              "compile", "parallel", "device", "recompute", "finetune", "lora_rank", "lora_alpha", "lora_targets",
              "quantize", "optimizer_in_backward", "activation_offload", "chunked_loss", "cpu_offload"}
    run = trained_run(config, world, micro_batch, config.seq_len)
    # not the run's settings: --resume and --allow-new-data say how this launch continues; the adapters' settings
    # do not apply to a run that trains every weight
    skip = {"resume", "allow_new_data"} | ({"lora_dropout"} if config.finetune == "full" else set())
    train = {k: v for k, v in asdict(config).items()
             if k not in mapped and k not in RECORDED and k not in skip and v is not None}
    train = {k: list(v) if isinstance(v, tuple) else v for k, v in train.items()}
    model = {"name": config.model, **({"vocab_size": vocab_size} if vocab_size is not None else {})}
    return run_file.document(model, {"gpu": gpu_name, "num_gpus": world.world_size}, run, {"train": train})


def save(out_dir, doc: dict) -> Path:
    """`doc` as `out_dir`/run.toml (specs.run_file.save: atomic, never over a foreign file or through a link)."""
    path = Path(out_dir) / RUN_TOML
    run_file.save(path, doc, "--out-dir")
    return path


def write_for(trainer) -> None:
    """<out_dir>/run.toml (and --save-config) of a Trainer (train/loop.py) once it is set up: the run as it trains,
    on its device (a CUDA GPU by its datasheet entry when the table has it); rank 0 writes it."""
    if not trainer.world.is_main:
        return
    import torch
    device = trainer.world.device
    gpu = "cpu" if device.type == "cpu" else "cuda"
    if device.type == "cuda":
        from trainledger.specs.hardware import gpu_for_device_name
        known = gpu_for_device_name(torch.cuda.get_device_name(device))
        gpu = known.name if known is not None else "cuda"
    spec = trainer.spec
    vocab = spec.vocab_size if trainer.is_lm and spec.vocab_size != trainer.preset_vocab_size else None
    doc = document(trainer.config, trainer.world, trainer.micro, gpu, vocab)
    save(trainer.config.out_dir, doc)
    if trainer.save_config:
        run_file.save(trainer.save_config, doc, "--save-config")
