"""The training loop: gradient accumulation, clipping, warmup+cosine, precision recipes, eval, checkpoints, signals.

One optimizer step, on each of W ranks with A micro-batches (B = --global-batch-size, the GLOBAL batch;
the CLI's --batch-size is the micro-batch B / (W · A)):

    drawn = sampler.draw(B)                          # same draw on every rank (shared seeded generator)
    for a in range(A):                               # rank r trains rows r·B/W + a·B/(W·A) ... of `drawn`
        loss_a = model(x_a, y_a)                     # mean over the micro-batch's tokens
        backward(loss_a / A)                         # grads sync (DDP all-reduce, FSDP reduce-scatter) on a = A−1 only
    grads are now the mean over the global batch     # DDP/FSDP average over ranks, 1/A over micro-batches
    loss = mean over ranks of Σ_a loss_a / A         # what is logged: the global batch's mean loss
    stop if loss is NaN/Inf (weights not updated; names the last checkpoint whose loss was finite, not a spike)
    clip to --grad-clip (global L2 norm), lr from the schedule, optimizer step (GradScaler under amp-fp16)

FLOPs per step and the memory prediction come from trainledger.account; this module holds no formula.
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
import torch

from trainledger import units
from trainledger.account.counting.flops import flops_per_step
from trainledger.account.memory.per_gpu import memory_per_gpu
from trainledger.data import seed_everything
from trainledger.errors import TrainledgerError
from trainledger.files import matplotlib_png_problem, replace_output
from trainledger.measure.compare import check_gpu_memory
from trainledger.models import build_model
from trainledger.models.offload import ActivationOffload
from trainledger.train.fp8 import TORCHAO_RECIPES, check_fp8_training, convert_to_fp8
from trainledger.models.precision import MASTER_COPY, MasterParams, autocast, grad_scaler, param_dtype
from trainledger.optim import CosineWithWarmup, clip_grad_norm_
from trainledger.optim.levers import build_training_optimizer
from trainledger.measure.timing import StepTimer, achieved_flops_per_s, mfu, peak_flops_per_s
from trainledger.measure.timing import peak_memory_bytes, peak_memory_kind
from trainledger.specs import get_model
from trainledger.specs.recipes import get_recipe
from trainledger.tensors import local
from trainledger.train import checkpoint as ckpt
from trainledger.train import distributed as dist_
from trainledger.train import finetune
from trainledger.train.batches import RegressionBatches, TokenBatches
from trainledger.train.checkpointing import Checkpointing
from trainledger.train.comm_count import StepComm
from trainledger.train.config import TrainConfig, replace, with_world
from trainledger.train.corpus import check_ids, load_data, record_tokenizer
from trainledger.train.data_identity import data_identity
from trainledger.train.vocab import data_summary, follow_tokenizer, model_sha256, vocabulary_line
from trainledger.train.run_file import write_for as write_run_file
from trainledger.train.metrics import (MetricsWriter, Progress, accounted_optimizer, plot_loss, predicted_line,
                                      predicted_step, read_metrics, step_time_gap)
from trainledger.train.fresh_start import StartPaths
from trainledger.train.runlock import unlock_all
from trainledger.train.signals import (LAUNCHER_EXIT, install_signal_handlers, launcher_gone, launcher_pid,
                                      restore_signal_handlers)

# Test hook: the loss of this optimizer step (1-based) is replaced by NaN, to exercise the divergence stop.
FAULT_NAN_STEP_ENV = "TRAINLEDGER_FAULT_NAN_STEP"
# Test hook: seconds to sleep after each step's record is written (outside the timed step), so that the
# signal tests can stop a run between known steps on a loaded machine, however fast its steps are.
STEP_DELAY_ENV = "TRAINLEDGER_TEST_STEP_DELAY_S"
# A loss spike: more than SPIKE_FACTOR × the median of the previous SPIKE_WINDOW losses. A rise of that size is
# a blow-up, not noise (step-to-step noise of a language model's loss is a few per cent); a checkpoint taken
# at a spike may already hold diverging weights, so a NaN stop does not point at it.
SPIKE_FACTOR, SPIKE_WINDOW = 2.0, 20


class TrainingDiverged(TrainledgerError):
    """The loss became NaN or Inf; the run stopped before the weights were updated with it."""


class Trainer(Checkpointing):
    """Owns the model, optimizer, schedule, scaler, sampler and counters of one run; train() runs it.

    Each stateful piece has state_dict()/load_state_dict(); `state_dict()` (train/checkpointing.py) gathers
    them for a checkpoint, and `save()` / `_resume()` write and find checkpoints.
    """

    def __init__(self, config: TrainConfig, world: dist_.World | None = None, log=print, quiet: bool = False,
                 given: set[str] | None = None, early_stop=None, save_config: str | None = None):
        """`given`: the config fields set by flags or --config (on --resume the others keep the checkpoint's
        value; None: all of them). `early_stop()`: the name of a signal caught before train() took over."""
        self.config, self.save_config = config, save_config     # save_config: where run.toml is also written
        self.given, self.early_stop = given, early_stop
        self.world = world or dist_.World(device=dist_.pick_device(config.device))
        self.log = log if self.world.is_main and not quiet else (lambda *a, **k: None)
        self.quiet = quiet
        self.spec = get_model(config.model)
        self.is_lm = self.spec.kind == "transformer"
        if self.is_lm and config.seq_len > self.spec.max_seq_len:
            raise TrainledgerError(f"--seq-len {config.seq_len} exceeds the context of model '{self.spec.name}' "
                                   f"({self.spec.max_seq_len} tokens)")
        self.per_rank, self.micro = with_world(config, self.world.dp_size)
        self.seq_len = config.seq_len if self.is_lm else 1
        self._check_fits()                              # before anything is allocated
        self.fresh = StartPaths(config)                 # what the start makes: a refusal takes it back (fresh_start.py)
        self.locks = self.fresh.make(self._lock)        # the directories, then the locks: before anything is written
        try:
            self._setup()
        except BaseException:
            self.release(refused=True)
            raise

    def _setup(self) -> None:
        config = self.config
        self.step = 0               # optimizer steps done
        self.tokens = 0             # tokens (sequences × seq_len; samples for the Cruncher) trained on
        self.stop_signal: str | None = None
        self.recent_losses: deque[float] = deque(maxlen=SPIKE_WINDOW)
        self.last_loss: float | None = None
        self.last_loss_spike = False
        self.expected_checkpoint_bytes = 0
        self.launcher_pid = launcher_pid()

        check_fp8_training(config.precision, self.world.device, parallel=config.parallel, tp=self.world.tp,
                           pp=self.world.pp)              # FP8 needs FP8 tensor cores and torchao (train/fp8.py)
        finetune.check_libraries(config, self.world.device)   # torchao for NF4/8-bit states, CUDA for paging/offload
        generator = seed_everything(config.seed)          # python, numpy, torch; the sampler's generator
        self.train_batches, self.eval_source = self._data(generator)
        if self.is_lm and self.spec.vocab_size != self.preset_vocab_size:
            self._check_fits()                          # again with the tokenizer's vocabulary (logits grow with it)
        self.tuned = finetune.is_finetune(config)
        if not self.tuned:      # fits the GPU? (no fine-tuning accounting yet: a full-training refusal would be wrong)
            check_gpu_memory(self.spec, self.world.device, batch_size=self.micro, seq_len=self.seq_len,
                             precision=config.precision, optimizer=accounted_optimizer(config.optimizer),
                             flag="micro-batch", hint=" (raise --grad-accum)", zero=3 if config.parallel == "fsdp" else 0,
                             dp=self.world.dp_size, tp=self.world.tp, pp=self.world.pp, grad_accum=config.grad_accum, recompute=config.recompute)
        model = self._make_model()                        # fp32 init on CPU: identical on every device
        self._fp32_init = ([p.detach().clone() for p in model.parameters() if p.requires_grad]
                           if config.precision in MASTER_COPY else None)
        self.model = model.to(device=self.world.device, dtype=param_dtype(config.precision))
        self.quantized = finetune.quantize_base(self.model, config) if self.tuned else []   # the frozen base (torchao)
        self.fp8_linears = convert_to_fp8(self.model, config.precision) if config.precision in TORCHAO_RECIPES else []
        sharded = config.parallel == "fsdp" or self.world.tp > 1 or self.world.pp > 1 or config.ep > 1
        self.fmt = "dcp" if sharded and self.world.distributed else "full"

    # ----- setup -------------------------------------------------------------------------------------
    def _make_model(self):
        """The model on the CPU in fp32: built (and --init-from's weights) or, fine-tuning, base + adapters
        (train/finetune.py; a checkpoint then holds the adapters only, so the base is always loaded)."""
        config = self.config
        if self.tuned:
            model = finetune.base_model(self.spec, config)
            self.adapted, self.base_identity = finetune.adapt(model, config), finetune.base_identity(config)
        else:
            model = build_model(self.spec)
            if config.init_from and not (config.resume and ckpt.list_checkpoints(config.resolved_checkpoint_dir())):
                from trainledger.train.hf_io import init_from
                init_from(model, config.init_from)        # a Hugging Face checkpoint's weights (safetensors only)
        if self.is_lm:      # models/losses.py; --recompute full: a checkpoint per block
            model.loss_chunks, model.recompute = config.chunked_loss, config.recompute
        return model

    def _data(self, generator):
        """(training sampler, factory of held-out samplers)."""
        if not self.is_lm:
            eval_seed = self.config.seed + 1
            return (RegressionBatches(self.spec.dim, generator),
                    lambda: RegressionBatches(self.spec.dim, np.random.default_rng(eval_seed)))
        if self.world.is_main:      # rank 0 builds any cached token file first; the others then only read it
            data = load_data(self.config, None if self.quiet else self.log)
        dist_.barrier(self.world)
        if not self.world.is_main:
            data = load_data(self.config)
        self._follow_tokenizer(data)
        seed = self.config.seed + 1
        train_tokens, eval_tokens = data.train, data.held_out
        return (TokenBatches(train_tokens, self.seq_len, generator),
                lambda: TokenBatches(eval_tokens, self.seq_len, np.random.default_rng(seed)))

    def _follow_tokenizer(self, data) -> None:
        """The model's vocabulary becomes the tokenizer's (padded to --vocab-multiple); the run records both."""
        self.data = data
        self.preset_vocab_size = self.spec.vocab_size
        self.spec, model_vocab = follow_tokenizer(self.spec, data.vocab_size, self.config.vocab_multiple)
        check_ids(data, data.vocab_size or model_vocab, self.config.model)
        data_bytes, data_sha256 = data_identity(data.path, data.flag)       # checked on --resume (train/config.py)
        self.config = replace(self.config, tokenizer_name=data.tokenizer_name, tokenizer_sha256=data.tokenizer_sha256,
                              model_vocab_size=model_vocab, model_sha256=model_sha256(self.config.model),
                              data_bytes=data_bytes, data_sha256=data_sha256)
        if self.world.is_main:
            record_tokenizer(data, Path(self.config.out_dir))

    def _build(self) -> None:
        """Wrap for DDP/FSDP, compile, build the optimizer, schedule and grad scaler (fresh state)."""
        config = self.config
        self.resume_notes: list[str] = []
        self.model = dist_.wrap(self.model, config.parallel, self.world, config.sp, config.grad_accum, self.seq_len,
                                config.ep, config.force_balance)
        self.comm = StepComm(self)                        # comm_bytes / predicted_comm_bytes of each step
        if config.compile:
            self.model = torch.compile(self.model)
        # decay the matrices (and embeddings) only, not biases and norm gains (GPT-2/nanoGPT practice)
        params = [p for p in self.model.parameters() if p.requires_grad]    # fine-tuning: the adapters only
        self.master = None
        if self._fp32_init is not None:                   # mixed-*: the optimizer steps the fp32 master copy
            self.master = MasterParams([p for p in dist_.unwrap(self.model).parameters() if p.requires_grad],
                                       self._fp32_init)
            params = self.master.params
        groups = [{"params": [p for p in params if p.ndim >= 2]},
                  {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
        self.optimizer = build_training_optimizer(config.optimizer, [g for g in groups if g["params"]], lr=config.lr,
                                                  weight_decay=config.weight_decay, device=self.world.device,
                                                  in_backward=config.optimizer_in_backward, cpu_offload=config.cpu_offload)
        self.offload = ActivationOffload(dist_.unwrap(self.model)) if config.activation_offload else None
        self.schedule = CosineWithWarmup(self.optimizer, config.warmup_steps, config.steps,
                                         min_lr_ratio=config.min_lr / config.lr)
        self.scaler = grad_scaler(config.precision, self.world.device)

    # ----- one step ----------------------------------------------------------------------------------
    def _loss(self, x, y) -> torch.Tensor:
        with autocast(self.config.precision, self.world.device):
            if self.is_lm:
                _, loss = self.model(x, y)
            else:
                loss = torch.nn.functional.mse_loss(self.model(x.to(param_dtype(self.config.precision))).float(), y)
        return loss

    def train_step(self) -> dict:
        """One optimizer step over the global batch; {loss, grad_norm, lr, skipped}."""
        config, world, accum = self.config, self.world, self.config.grad_accum
        drawn = self.train_batches.draw(config.batch_size)
        first = world.dp_rank * self.per_rank
        loss_sum = torch.zeros((), device=world.device)
        if world.pp > 1:                                  # the 1F1B schedule runs the micro-batches
            x, y = self.train_batches.rows(drawn, first, first + self.per_rank, world.device)
            loss_sum = self.model.train_micro_batches(x, y)
        for a in range(accum if world.pp == 1 else 0):
            x, y = self.train_batches.rows(drawn, first + a * self.micro, first + (a + 1) * self.micro, world.device)
            dist_.set_grad_sync(self.model, a == accum - 1)
            with dist_.loss_context(world):               # loss_parallel under --tp
                with self.offload or contextlib.nullcontext():   # --activation-offload: saved tensors to the host
                    loss = self._loss(x, y)
                if os.environ.get(FAULT_NAN_STEP_ENV) == str(self.step + 1):
                    loss = loss * float("nan")
                if config.optimizer_in_backward and not math.isfinite(float(loss.detach())):
                    self._diverged(float(loss.detach()))  # before backward, which would step the weights with it
                scaled = loss / accum
                (self.scaler.scale(scaled) if self.scaler else scaled).backward()
            loss_sum += local(loss.detach().float())
        if world.pp > 1 and os.environ.get(FAULT_NAN_STEP_ENV) == str(self.step + 1):
            loss_sum = loss_sum * float("nan")
        loss_value = float(dist_.mean_across(loss_sum / accum, world))
        if not math.isfinite(loss_value):
            self._diverged(loss_value)
        self.last_loss_spike = (len(self.recent_losses) > 0
                                and loss_value > SPIKE_FACTOR * statistics.median(self.recent_losses))
        self.last_loss = loss_value
        self.recent_losses.append(loss_value)
        if self.master is not None:
            self.master.to_master_grads()
        if self.scaler:
            self.scaler.unscale_(self.optimizer)
        grad_norm = None if config.optimizer_in_backward else self._clip()   # (in backward: no gradient left)
        lr = self.optimizer.param_groups[0]["lr"]
        skipped = False
        if self.scaler:
            scale = self.scaler.get_scale()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            skipped = self.scaler.get_scale() < scale      # inf/NaN grads: step skipped, scale halved
        else:
            self.optimizer.step()
        if self.master is not None:
            self.master.to_model()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step()
        self.step += 1
        self.tokens += config.batch_size * self.seq_len
        return {"loss": loss_value, "grad_norm": grad_norm, "lr": lr, "skipped": skipped}

    def _diverged(self, loss_value: float) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)            # the 16-bit grads of a master-copy recipe
        raise TrainingDiverged(f"loss is {loss_value} at step {self.step + 1}; stopped before updating the weights. "
                               + self._last_good_advice())

    def _clip(self) -> float:
        """The global L2 norm of the gradient before clipping; clips to --grad-clip when set.

        Under FSDP the gradients are DTensor shards and the norm comes back as a DTensor: full_tensor()
        sums the squares across ranks.
        """
        params = [p for p in (self.master.params if self.master else self.model.parameters()) if p.grad is not None]
        max_norm = self.config.grad_clip if self.config.grad_clip is not None else math.inf
        if self.config.ep > 1:           # experts held by several ranks: their gradients summed first
            from trainledger.train.expert_parallel import reduce_expert_copies
            reduce_expert_copies(dist_.unwrap(self.model))
        if self.world.tp > 1 or self.world.pp > 1 or self.config.ep > 1:
            return dist_.clip_grad_norm(params, max_norm, self.world)
        norm = clip_grad_norm_(params, max_norm)     # max_norm = inf: the scale is 1, nothing changes
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean loss over --eval-batches global batches of the held-out split (the same batches every time)."""
        self.model.eval()
        source, total = self.eval_source(), torch.zeros((), device=self.world.device)
        for _ in range(self.config.eval_batches):
            drawn = source.draw(self.config.batch_size)
            first = self.world.dp_rank * self.per_rank
            x, y = source.rows(drawn, first, first + self.per_rank, self.world.device)
            if self.world.pp > 1:
                total += self.model.eval_loss(x, y)
                continue
            with dist_.loss_context(self.world):
                total += local(self._loss(x, y).float())
        self.model.train()
        return float(dist_.mean_across(total / self.config.eval_batches, self.world))

    # ----- the run -----------------------------------------------------------------------------------
    def _memory(self) -> dict:
        """account.memory.per_gpu's bytes per device of this run (params, grads, optimizer, activations, total_bytes)."""
        from trainledger.train.run_file import trained_run     # the ZeRO paper's sharding, no reserve: the tensors
        run = trained_run(self.config, self.world, self.micro, self.seq_len).with_(impl="paper", reserve=0.0, ep=1)
        return memory_per_gpu(self.spec, None, run)

    def _check_fits(self) -> None:
        """Refuses, before anything is allocated, a run that cannot fit in this machine's RAM (measure/resources.py:
        MemAvailable, cgroup and ulimit): the global batch's drawn rows (8-byte starts, or the Cruncher's inputs),
        which every rank holds in RAM, plus on CPU account.memory.per_gpu's total for the micro-batch. A --batch-size of
        10^8 is one line instead of a MemoryError after minutes. The GPU's own memory is checked by
        measure.compare.check_gpu_memory once the data is loaded."""
        config, device = self.config, self.world.device
        if device.type not in ("cpu", "cuda"):
            return
        from trainledger.measure.resources import available_cpu_bytes
        need = config.batch_size * (8 if self.is_lm else 4 * self.spec.dim)
        if device.type == "cpu":
            need += self._memory()["total_bytes"]
        have, source = available_cpu_bytes()
        if need > have:
            raise TrainledgerError(
                f"--batch-size {self.micro} (--global-batch-size {config.batch_size}) × --seq-len {self.seq_len} needs "
                f"about {units.format_bytes(need)} of RAM (predicted by account.memory.per_gpu, with the drawn batch), more "
                f"than the {units.format_bytes(have)} available ({source}); lower --batch-size, --global-batch-size "
                "or --seq-len")

    def describe_plan(self) -> dict:
        """Predicted FLOPs per step and bytes per device (from trainledger.account), and the peak FLOP/s used for MFU."""
        config = self.config
        flops = flops_per_step(self.spec, config.batch_size, self.seq_len)
        memory = self._memory()
        peak, source = peak_flops_per_s(self.world.device, get_recipe(config.precision).compute_dtype)
        return {"train_flops_per_step": flops["train_flops_per_step"], "memory": memory,
                "peak_flops_per_s": peak, "peak_source": source}

    def train(self) -> dict:
        """Runs to --steps (or until SIGTERM/SIGINT); a summary dict. Raises TrainingDiverged on NaN/Inf.

        The run's locks (taken in __init__) are released when it returns or raises."""
        config, world = self.config, self.world
        if config.parallel != "none" and not world.distributed:
            self.log(f"--parallel {config.parallel}: one process (not launched by torchrun), so no data parallelism")
        try:
            return self._train()
        except TrainledgerError as error:       # refused before a step ran: nothing of this start stays behind
            self.release(refused=not isinstance(error, TrainingDiverged) and self.step == 0 and not ckpt.list_checkpoints(
                config.resolved_checkpoint_dir()))
            raise
        finally:
            self.release()

    def release(self, refused: bool = False) -> None:
        """Releases the run's locks (idempotent): another trainer may then use its directories. `refused`: first
        removes what this start created (train/fresh_start.py), while the locks still keep others out."""
        if refused and getattr(self, "fresh", None) is not None:
            self.fresh.undo()
            self.fresh = None
        unlock_all(getattr(self, "locks", None))

    def _train(self) -> dict:
        world = self.world
        self._build()
        resume_from = self._resume()
        write_run_file(self)            # <out_dir>/run.toml: this run, as `step --config` reads it (once resume is checked)
        config = self.config          # on --resume: with the checkpoint's values for settings not given
        if resume_from:
            self.log(f"resumed from {resume_from} at step {self.step} ({units.format_count(self.tokens)} tokens seen)")
            if self.resume_notes:
                lr = self.optimizer.param_groups[0]["lr"]
                self.log(f"--resume changed {', '.join(self.resume_notes)}; the schedule continues from step "
                         f"{self.step} on warmup {config.warmup_steps} + cosine from {config.lr:g} to {config.min_lr:g} "
                         f"ending at step {config.steps} (lr now {lr:.3g})")
        plan = self.describe_plan()
        memory = plan["memory"]
        # what one checkpoint holds: the parameters, master copies and optimizer states, whole (sharded: × ranks)
        self.expected_checkpoint_bytes = int((memory["params_bytes"] + memory.get("master_params_bytes", 0)
                                              + memory["optimizer_bytes"]) * (world.world_size if self.fmt == "dcp" else 1))
        self.log(f"model {self.spec.name}: {units.format_count(memory['n_params'])} parameters; "
                 f"{config.batch_size} × {self.seq_len} tokens per step (--global-batch-size {config.batch_size} = "
                 f"--batch-size {self.micro} × {world.dp_size} data-parallel rank{'s' if world.dp_size > 1 else ''} × "
                 f"{config.grad_accum} micro-batch{'es' if config.grad_accum > 1 else ''}) on {world.world_size} × {world.device.type}, "
                 f"precision {config.precision}, optimizer {config.optimizer}")
        if self.is_lm:
            self.log(vocabulary_line(self.data, self.spec, self.preset_vocab_size, config))
            self.log(self.data.describe_split())
        if self.tuned:       # what a checkpoint holds: the adapters and their states, not the base
            self.log(finetune.describe(dist_.unwrap(self.model), self.adapted, self.quantized, config))
            self.expected_checkpoint_bytes = finetune.expected_checkpoint_bytes(self.model)
        self.log(predicted_line(plan, memory, self.tuned))
        metrics_path = config.resolved_metrics()
        writer = MetricsWriter(metrics_path, fresh=resume_from is None) if world.is_main else None
        self.locks.claim_metrics(metrics_path, checkpointed=resume_from is not None)
        progress = Progress(config.steps, self.step, enabled=world.is_main and not self.quiet)
        self.log = progress.print if world.is_main and not self.quiet else self.log
        old_handlers = install_signal_handlers(self)
        if self.stop_signal is None and self.early_stop is not None:
            self.stop_signal = self.early_stop()     # caught before the handlers above were installed
        peak_all = plan["peak_flops_per_s"] * world.world_size if plan["peak_flops_per_s"] else None
        predicted = None if self.tuned else predicted_step(   # (fine-tuning: no accounting of its step yet)
            self.spec, micro_batch=self.micro, global_batch=config.batch_size, seq_len=self.seq_len,
            precision=config.precision, optimizer=accounted_optimizer(config.optimizer), device=world.device,
            world_size=world.world_size, zero=3 if config.parallel == "fsdp" and world.distributed else 0,
            tp=config.tp, pp=config.pp, compiled=config.compile, recompute=config.recompute)
        if predicted and predicted.get("warning") and world.is_main:
            print(f"warning: {predicted['warning']}", file=sys.stderr)
        saved_at, started = None, time.perf_counter()
        try:
            while self.step < config.steps:
                peak_memory_bytes(world.device, reset=True)          # start this step's window (CUDA)
                with StepTimer(world.device) as timer, self.comm.counting():
                    out = self.train_step()
                seconds, step_flops = timer.seconds, plan["train_flops_per_step"]
                record = {"step": self.step, "loss": out["loss"], "lr": out["lr"], "grad_norm": out["grad_norm"],
                          "tokens": self.tokens, "step_time_s": seconds,
                          "predicted_step_time_s": predicted["step_seconds"] if predicted else None,
                          "tokens_per_s": config.batch_size * self.seq_len / seconds,
                          "flops_per_s": achieved_flops_per_s(step_flops, seconds),
                          "mfu": mfu(step_flops, seconds, peak_all),
                          "peak_memory_bytes": peak_memory_bytes(world.device), "peak_memory_kind": peak_memory_kind(
                              world.device), **self.comm.record()}
                if out["skipped"]:
                    record["skipped"] = True
                if config.eval_every and (self.step % config.eval_every == 0 or self.step == config.steps):
                    record["eval_loss"] = self.evaluate()
                if writer:
                    writer.write(record)
                progress.update(record)
                if os.environ.get(STEP_DELAY_ENV):
                    time.sleep(float(os.environ[STEP_DELAY_ENV]))
                if self.stop_signal is None and launcher_gone(self.launcher_pid):
                    self.stop_signal = LAUNCHER_EXIT         # torchrun was killed: stop with a checkpoint
                stop = dist_.any_across(self.stop_signal is not None, world)
                if self.step % config.checkpoint_every == 0 or self.step == config.steps or stop:
                    saved_at = self.save()
                if stop:
                    self.log(f"received {self.stop_signal or 'a stop signal'}: checkpoint saved at step {self.step} "
                             f"({saved_at}); continue with --resume")
                    break
        finally:
            restore_signal_handlers(old_handlers)
            progress.close()
            if writer:
                writer.close()
        summary = {"steps": self.step, "tokens": self.tokens, "seconds": time.perf_counter() - started,
                   "train_flops_per_step": plan["train_flops_per_step"], "peak_flops_per_s": plan["peak_flops_per_s"],
                   "predicted_memory_bytes": memory["total_bytes"], "predicted_peak_memory_bytes": memory["peak_bytes"],
                   "peak_memory_bytes": peak_memory_bytes(world.device),
                   "stopped_by": self.stop_signal, "metrics": str(metrics_path), "checkpoint": str(saved_at) if saved_at else None,
                   "resumed_from": str(resume_from) if resume_from else None}
        if self.is_lm:
            summary.update(data_summary(self.data, self.spec, config))
        if world.is_main:
            records = read_metrics(metrics_path)
            summary["final_loss"] = records[-1]["loss"] if records else None
            evals = [r["eval_loss"] for r in records if r.get("eval_loss") is not None]
            summary["final_eval_loss"] = evals[-1] if evals else None
            summary["step_time"] = step_time_gap(records, predicted)
            if config.plot and records:
                summary["loss_curve"] = self._plot(records)
        return summary

    def _plot(self, records: list[dict]) -> str | None:
        """Writes loss.png atomically; its path, or None with one `warning:` line when it cannot be written (a full
        disk): the run's checkpoints and metrics are already safe, so the run still succeeds."""
        path = Path(self.config.out_dir) / "loss.png"
        try:
            with replace_output(path, "--out-dir", "a loss curve", ours=matplotlib_png_problem) as scratch:
                plot_loss(records, scratch, self.spec.name, fmt="png")
        except (OSError, TrainledgerError) as error:        # a full disk, a file planted there meanwhile
            reason = str(error) if isinstance(error, TrainledgerError) else ckpt.os_reason(error)
            print(f"warning: could not write the loss curve {path}: {reason}; the run itself is saved "
                  f"(metrics {self.config.resolved_metrics()}, checkpoints)", file=sys.stderr, flush=True)
            return None
        return str(path)
