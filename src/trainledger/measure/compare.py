"""Predicted (account/) vs measured (one real, meta or fake-tensor training step) params, FLOPs and memory.

    measure_model("gpt2", batch_size=1, seq_len=1024, precision="amp-bf16", device="fake")
        -> {"predicted": {...}, "measured": {...}, "relative_error": {...}, "settings": {...}, "notes": [...]}

The step is: loss = model(idx, targets); loss.backward(); optimizer.step(); optimizer.zero_grad().
Devices: "fake" (FakeTensorMode: shapes, dtypes and CPU kernels' outputs, no data, no memory; the
default, any size on a laptop), "meta" (no kernels: SDPA runs its math path), "cpu", "cuda" (real).
relative_error = (predicted - measured) / measured.
"""

from __future__ import annotations

import contextlib
import dataclasses

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainledger.errors import TrainledgerError, first_line
from trainledger.measure.flops import count_step_flops
from trainledger.measure.memory import storage_bytes
from trainledger.measure.timing import DTYPES as _TORCH_DTYPES

DEVICES = ("fake", "meta", "cpu", "cuda")
KEYS = ("n_params", "forward_flops_per_step", "train_flops_per_step", "hardware_flops_per_step", "params_bytes",
        "grads_bytes", "master_params_bytes", "optimizer_bytes", "activations_bytes", "peak_bytes",
        "later_step_peak_bytes", "reserved_bytes")



def optimizer_class(name: str, torch_only: bool = False):
    """(class, defaults, where it comes from) for an optimizer name: trainledger.optim when present, else torch.optim.

    torch_only: torch.optim (the meta device: trainledger.optim reads its step counters with .item()).
    """
    try:
        from trainledger.optim import OPTIMIZERS
        if name in OPTIMIZERS and not torch_only:
            cls, defaults = OPTIMIZERS[name]
            return cls, defaults, f"trainledger.optim.{cls.__name__}"
    except ImportError:
        pass
    fallback = {"sgd": (torch.optim.SGD, {"lr": 1e-3}), "momentum": (torch.optim.SGD, {"lr": 1e-3, "momentum": 0.9}),
                "adagrad": (torch.optim.Adagrad, {}), "rmsprop": (torch.optim.RMSprop, {}),
                "adam": (torch.optim.Adam, {}), "adamw": (torch.optim.AdamW, {})}
    if name not in fallback:
        raise TrainledgerError(f"--optimizer {name!r} cannot be measured; measurable: {', '.join(fallback)}")
    cls, defaults = fallback[name]
    return cls, defaults, f"torch.optim.{cls.__name__}"


class MasterWeights:
    """Mixed precision (ZeRO Sec. 3.1): 16-bit model weights and grads, fp32 master weights the optimizer updates.

    step(): master.grad = fp32 copy of the 16-bit grad; optimizer step on the masters; weights = masters cast.
    `state` maps to the inner optimizer's state, so the tracker counts the states.
    """

    def __init__(self, params, optimizer_cls, **defaults):
        self.params = [p for p in params if p.requires_grad]
        self.masters = [p.detach().float().requires_grad_(True) for p in self.params]
        self.inner = optimizer_cls(self.masters, **defaults)

    @property
    def state(self):
        return self.inner.state

    @torch.no_grad()
    def step(self):
        for p, m in zip(self.params, self.masters):
            m.grad = None if p.grad is None else p.grad.float()
        self.inner.step()
        for p, m in zip(self.params, self.masters):
            p.copy_(m)
            m.grad = None

    def zero_grad(self, set_to_none: bool = True):
        for p in self.params:
            p.grad = None


@contextlib.contextmanager
def _fake_mode():
    """FakeTensorMode with its logger quiet: a failing op is reported once, as our one-line error, not a traceback."""
    import logging

    from torch._subclasses.fake_tensor import FakeTensorMode
    logger = logging.getLogger("torch._subclasses.fake_tensor")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with FakeTensorMode(allow_non_fake_inputs=False):
            yield
    finally:
        logger.setLevel(level)


def _context(device: str):
    if device == "fake":
        return _fake_mode()
    if device == "meta":
        return torch.device("meta")
    if device == "cuda" and not torch.cuda.is_available():
        raise TrainledgerError("--device cuda: no CUDA device is available here (use fake, meta or cpu)")
    return contextlib.nullcontext()


def predict(spec, batch_size: int, seq_len: int, precision: str, optimizer: str, recompute: str,
            flash: bool = True, hf_impl=None) -> dict:
    """Predictions from account/ for one step: n_params, FLOPs per step, bytes by part, peak bytes.

    hf_impl (an account.memory.hf_activations.HfImpl): the activations (and so the peak) of transformers' model.
    """
    from trainledger.account.counting.flops import flops_per_step
    from trainledger.account.memory.per_gpu import cuda_reserve_bytes, memory_per_gpu
    from trainledger.account.counting.params import param_counts

    flops = flops_per_step(spec, batch_size, seq_len, recompute=recompute)
    from trainledger.specs.run import Run
    run = Run().with_(batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
                      recompute=recompute, flash=flash, zero=0, reserve=0.0)     # one device, its tensors only
    if hf_impl is not None:
        from trainledger.account.memory.hf_activations import hf_memory_per_gpu
        memory = hf_memory_per_gpu(spec, hf_impl, None, run.with_(flash=True))
    else:
        memory = memory_per_gpu(spec, None, run)
    predicted = {"n_params": param_counts(spec)["n_params"],
                 "forward_flops_per_step": flops["forward_flops_per_step"],
                 "train_flops_per_step": flops["train_flops_per_step"],
                 "hardware_flops_per_step": flops["hardware_flops_per_step"]}
    for key in ("params_bytes", "grads_bytes", "master_params_bytes", "optimizer_bytes", "activations_bytes"):
        predicted[key] = memory[key]
    # account.memory.per_gpu's step peaks (trainledger.optim's foreach steps: one state-sized temporary, SGD none)
    predicted["peak_bytes"] = memory["first_step_peak_bytes"]
    predicted["later_step_peak_bytes"] = memory["peak_bytes"]
    # what the CUDA caching allocator reserves: the peak + its cache + the cuBLAS workspaces (no context: not PyTorch's)
    reserve = cuda_reserve_bytes(memory["peak_bytes"], context=False)
    predicted["reserved_bytes"] = memory["peak_bytes"] + reserve["total"]
    return predicted


def _batch(spec, model, batch_size: int, seq_len: int, device: str):
    dev = "cpu" if device == "fake" else device
    if getattr(spec, "kind", None) == "cruncher":
        x = torch.ones(batch_size, spec.dim, device=dev, dtype=next(model.parameters()).dtype)
        return (x,), lambda m, b: m(*b).pow(2).mean()
    idx = torch.randint(0, spec.vocab_size, (batch_size, seq_len), device=dev)
    targets = torch.randint(0, spec.vocab_size, (batch_size, seq_len), device=dev)
    return (idx, targets), None


def measure_model(spec, batch_size: int = 1, seq_len: int | None = None, *, precision: str = "fp32",
                  optimizer: str = "adamw", recompute: str = "none", device: str = "fake") -> dict:
    """{"predicted", "measured", "relative_error", "settings", "notes"} for one training step of our model of `spec`.

    Measured: n_params from the module, FLOPs by FlopCounterMode (+ CPU flash attention), bytes by the
    live-storage tracker (measure.memory). Model FLOPs are counted with recompute off; with recompute
    on, the counted forward + backward is the hardware FLOPs.
    """
    from trainledger.models import build_model
    from trainledger.specs.recipes import get_recipe

    if device not in DEVICES:
        raise TrainledgerError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
    recipe = get_recipe(precision)
    fallback_note = None
    if getattr(spec, "kind", None) == "cruncher" and device == "fake":
        # nn.init.trunc_normal_ in its Linear layers is data-dependent, which FakeTensorMode cannot run;
        # the Cruncher is small (dim² × layers parameters): measure it for real instead
        device, fallback_note = "cpu", "the Cruncher runs on cpu: its truncated-normal init cannot run on fake tensors"
    seq_len = seq_len or getattr(spec, "default_seq_len", 1)
    amp = recipe.name.startswith("amp")
    model_dtype = torch.float32 if recipe.params_bytes_per_param == 4 else _TORCH_DTYPES[recipe.compute_dtype]
    autocast_dtype = _TORCH_DTYPES[recipe.compute_dtype] if amp else None
    cls, defaults, optimizer_source = optimizer_class(optimizer, torch_only=device == "meta")
    notes = [f"optimizer: {optimizer_source}", f"device: {device}"] + ([fallback_note] if fallback_note else [])
    if getattr(spec, "kind", None) == "cruncher":
        notes.append("backward: the input batch needs no gradient, so autograd skips the first layer's input "
                     "gradient that the 2 × forward convention counts (measured train FLOPs are lower)")
    if device == "meta":
        notes.append("meta device: SDPA runs its math path (T×T scores saved): predicted with flash off")
    _check_memory_first(spec, batch_size, seq_len, recipe.name, optimizer, recompute, device)
    with _context(device):
        real_device = "cuda" if device == "cuda" else ("meta" if device == "meta" else "cpu")
        model = build_model(spec, recompute=recompute, dtype=model_dtype, device=real_device)
        model.train()
        batch, loss_fn = _batch(spec, model, batch_size, seq_len, real_device)
        measured = {"n_params": sum(p.numel() for p in model.parameters())}
        if recompute != "none" and hasattr(model, "recompute"):
            model.recompute = "none"
            fl = _count(model, batch, loss_fn, autocast_dtype, real_device)
            model.recompute = recompute
            measured["forward_flops_per_step"] = fl.forward.total
            measured["train_flops_per_step"] = fl.train
        if recipe.master_params_bytes_per_param:
            opt = MasterWeights(model.parameters(), cls, **defaults)
        else:
            opt = cls(model.parameters(), **defaults)
        report, later, replayed = _two_steps(model, batch, opt, device, loss_fn=loss_fn, autocast_dtype=autocast_dtype)
        if recompute == "none" or "forward_flops_per_step" not in measured:
            measured["forward_flops_per_step"] = report.forward_flops
            measured["train_flops_per_step"] = report.forward_flops + report.backward_flops
        measured["hardware_flops_per_step"] = report.forward_flops + report.backward_flops
        measured.update(_memory_rows(report, later, opt, device, replayed))
    predicted = predict(spec, batch_size, seq_len, recipe.name, optimizer, recompute, flash=device != "meta")
    relative_error = {k: (predicted[k] - measured[k]) / measured[k] if measured.get(k) else
                      (0.0 if predicted.get(k) == measured.get(k) else None) for k in KEYS}
    return {"predicted": {k: predicted[k] for k in KEYS}, "measured": {k: measured[k] for k in KEYS},
            "relative_error": relative_error,
            "settings": {"model": spec.name, "batch_size": batch_size, "seq_len": seq_len, "precision": recipe.name,
                         "optimizer": optimizer, "recompute": recompute, "device": device,
                         "optimizer_impl": optimizer_source},
            "details": {"peak_phase": report.peak_phase, "peak_module": report.peak_module,
                        "later_step_peak_phase": later.peak_phase, "phase_peak_bytes": report.phase_peak_bytes,
                        "saved_bytes": report.saved_bytes, "activations_by_module": report.activations_by_module,
                        "allocator_replay": replayed},
            "notes": notes + [_reserved_note(device)]}


def _two_steps(model, batch, opt, device: str, **kwargs):
    """(first step's MemoryReport, a later step's, the allocator replay of both) of a model and its optimizer."""
    from trainledger.measure.memory import two_steps
    return two_steps(model, batch, opt, device, extra_storages=opt.masters if isinstance(opt, MasterWeights) else (),
                     **kwargs)


def _memory_rows(report, later, opt, device: str, replayed: dict) -> dict:
    from trainledger.measure.memory import memory_rows
    return memory_rows(report, later, storage_bytes(opt.masters) if isinstance(opt, MasterWeights) else 0, device,
                       replayed)


def _reserved_note(device: str) -> str:
    from trainledger.measure.memory import reserved_note
    return reserved_note(device)


def _check_memory_first(spec, batch_size, seq_len, precision, optimizer, recompute, device) -> None:
    """Before a real step allocates anything: the predicted peak of its later step must fit in the RAM left
    (measure.resources) or in the GPU's free memory with the caching allocator's reserve (measure.device_memory)."""
    if device == "cpu":
        from trainledger.measure.resources import check_fits
        check_fits(predict(spec, batch_size, seq_len, precision, optimizer, recompute)["later_step_peak_bytes"], device)
    elif device == "cuda":
        _context(device)            # no CUDA here: the usual one-line error first
        check_gpu_memory(spec, device, batch_size=batch_size, seq_len=seq_len, precision=precision, optimizer=optimizer,
                         recompute=recompute, what="one measured training step")


def check_gpu_memory(spec, device, *, batch_size: int, seq_len: int, precision: str, optimizer: str,
                     recompute: str = "none", **kwargs) -> dict | None:
    """The pre-check of `train`, `profile` and `measure` before they allocate on a GPU: measure.device_memory's
    check_before_run, with the replay of this step's allocations on fake tensors for trainledger's Transformer
    (asked only when the analytic margin decides nothing). kwargs: what, flag, hint, sharding, mem_get_info."""
    from trainledger.measure.device_memory import check_before_run
    replay = None
    if getattr(spec, "kind", None) == "transformer":
        def replay(batch):
            return measure_model(spec, batch, seq_len, precision=precision, optimizer=optimizer, recompute=recompute,
                                 device="fake")["measured"]["reserved_bytes"]
    return check_before_run(spec, device, batch_size=batch_size, seq_len=seq_len, precision=precision,
                            optimizer=optimizer, recompute=recompute, replay=replay, **kwargs)


def _count(model, batch, loss_fn, autocast_dtype, device):
    def forward():
        ctx = torch.autocast("cpu" if device == "meta" else device, dtype=autocast_dtype) if autocast_dtype else contextlib.nullcontext()
        with ctx:
            out = loss_fn(model, batch) if loss_fn else model(*batch)
        return out[1] if isinstance(out, tuple) else out
    flops = count_step_flops(forward)
    model.zero_grad(set_to_none=True)
    return flops


def _measure_module(build, optimizer: str, device: str, autocast_dtype=None) -> dict:
    """Measured n_params, FLOPs and bytes of one step of the module `build()` returns as (model, inputs, loss_fn)."""
    cls, defaults, source = optimizer_class(optimizer, torch_only=device == "meta")
    with _context(device):
        model, inputs, loss_fn = build()
        model.train()
        opt = cls(model.parameters(), **defaults)
        report, later, replayed = _two_steps(model, inputs, opt, device, loss_fn=loss_fn, autocast_dtype=autocast_dtype)
        n_params = sum(p.numel() for p in model.parameters())
    return {"n_params": n_params, "forward_flops_per_step": report.forward_flops,
            "train_flops_per_step": report.forward_flops + report.backward_flops,
            "hardware_flops_per_step": report.forward_flops + report.backward_flops,
            **_memory_rows(report, later, opt, device, replayed), "optimizer_impl": source,
            "peak_phase": report.peak_phase}


def measure_factory(target: str, batch_size: int, seq_len: int, *, optimizer: str = "adamw",
                    device: str = "fake") -> dict:
    """Measurements of a user's module: `target` = "package.module:factory".

    factory(batch_size, seq_len) returns (model, inputs) or (model, inputs, loss_fn): inputs is a tuple
    passed as model(*inputs); loss_fn(output) -> scalar loss (default: the output is the loss, or
    output[1] / output.loss when it is a tuple / a Hugging Face output). It runs inside the device's
    context (FakeTensorMode for "fake"), so it must create its tensors there. Nothing is predicted.
    """
    factory = _import_factory(target)

    def build():
        try:
            made = factory(batch_size, seq_len)
        except TrainledgerError:
            raise
        except Exception as error:     # the user's code failed: say so in one line, naming the flag
            raise TrainledgerError(f"--model {target!r}: the factory raised {type(error).__name__}: "
                                   f"{first_line(error, '(no message)')}") from None
        if not isinstance(made, tuple) or len(made) not in (2, 3) or not isinstance(made[0], torch.nn.Module):
            raise TrainledgerError(f"--model {target!r}: the factory must return (model, inputs) or (model, inputs, loss_fn) "
                                   "with model an nn.Module")
        model, inputs = made[0], made[1] if isinstance(made[1], tuple) else (made[1],)
        user_loss = made[2] if len(made) == 3 else _as_loss

        def loss_fn(m, b):
            loss = user_loss(m(*b))
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                shape = tuple(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
                raise TrainledgerError(f"--model {target!r}: the loss must be a scalar tensor, got {shape}; "
                                       "return (model, inputs, loss_fn) with loss_fn(output) -> scalar")
            return loss
        return model, inputs, loss_fn

    try:
        measured = _measure_module(build, optimizer, device)
    except TrainledgerError:
        raise
    except Exception as error:         # the user's module failed in forward, backward or the optimizer step
        raise TrainledgerError(f"--model {target!r}: one training step of the module failed with "
                               f"{type(error).__name__}: {first_line(error, '(no message)')}") from None
    return {"predicted": {}, "measured": {k: measured.get(k) for k in KEYS}, "relative_error": {},
            "settings": {"model": target, "batch_size": batch_size, "seq_len": seq_len, "optimizer": optimizer,
                         "device": device, "optimizer_impl": measured["optimizer_impl"]},
            "details": {"peak_phase": measured["peak_phase"]},
            "notes": ["a user module: measured only, account/ has no formula for it"]}


def _import_factory(target: str):
    """The callable named by "package.module:factory"; the current directory is importable, as for `python -m`."""
    import importlib
    import os
    import sys

    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise TrainledgerError(f"--model {target!r}: expected package.module:factory")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as error:
        raise TrainledgerError(f"--model {target!r}: cannot import {attr!r} from {module_name!r} ({error})") from None
    except Exception as error:     # the module itself raised on import
        raise TrainledgerError(f"--model {target!r}: importing {module_name!r} raised {type(error).__name__}: "
                               f"{first_line(error, '(no message)')}") from None
    if not callable(factory):
        raise TrainledgerError(f"--model {target!r}: {attr!r} is a {type(factory).__name__}, not a callable factory")
    return factory


def _as_loss(output):
    if isinstance(output, tuple):
        return output[1] if len(output) > 1 else output[0]
    return getattr(output, "loss", output)


def measure_hf(config_path: str, spec, batch_size: int, seq_len: int, *, precision: str = "fp32",
               optimizer: str = "adamw", device: str = "fake", attn_impl: str | None = None) -> dict:
    """{"predicted", "measured", "relative_error", ...} of one training step of transformers' own model of a config.json.

    Predicted: account.memory.hf_activations (transformers' code for that model_type: its activation functions, eager or
    SDPA attention, dropout in train mode, KV-cache copies, the loss's labels) on top of account/'s parameter,
    FLOP and model-state formulas. Measured: AutoModelForCausalLM.from_config(config) built with
    `attn_implementation` (default: what transformers picks), one step of loss = model(input_ids, labels).loss,
    backward, optimizer step, by the same trackers as measure_model. mixed-* recipes: 16-bit model, fp32 master
    weights (MasterWeights). transformers' logging and warnings are kept off stdout (one JSON object with --json).
    """
    from pathlib import Path

    from trainledger.account.memory.hf_activations import hf_impl_from_config, hf_impl_note
    from trainledger.specs.hf_config import read_config_file
    from trainledger.specs.recipes import get_recipe
    if not Path(config_path).exists():
        raise TrainledgerError(f"--impl hf needs --model to be a Hugging Face config.json path, got {config_path!r}")
    if device not in DEVICES:
        raise TrainledgerError(f"--device must be one of {', '.join(DEVICES)}, got {device!r}")
    raw_config = read_config_file(config_path)
    impl = hf_impl_from_config(raw_config, attn_impl)
    if device == "meta":
        impl = dataclasses.replace(impl, meta=True)
    transformers = _quiet_transformers()
    recipe = get_recipe(precision)
    dtype = torch.float32 if recipe.params_bytes_per_param == 4 else _TORCH_DTYPES[recipe.compute_dtype]
    autocast_dtype = _TORCH_DTYPES[recipe.compute_dtype] if recipe.name.startswith("amp") else None
    _check_memory_first(spec, batch_size, seq_len, recipe.name, optimizer, "none", device)
    cls, defaults, optimizer_source = optimizer_class(optimizer, torch_only=device == "meta")
    dev = "meta" if device == "meta" else ("cuda" if device == "cuda" else "cpu")
    with _quiet(), _context(device), (GroupedMmShapes() if device in ("fake", "meta") else contextlib.nullcontext()):
        # from the JSON already read and checked: a file of any name (not only `config.json`), nothing re-read
        config = transformers.AutoConfig.for_model(**raw_config)
        with torch.device(dev):
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=impl.attn_impl)
        model.train()
        idx = torch.randint(0, spec.vocab_size, (batch_size, seq_len), device=dev)
        opt = MasterWeights(model.parameters(), cls, **defaults) if recipe.master_params_bytes_per_param \
            else cls(model.parameters(), **defaults)
        report, later, replayed = _two_steps(model, (idx,), opt, device, autocast_dtype=autocast_dtype,
                                             loss_fn=lambda m, b: m(input_ids=b[0], labels=b[0]).loss)
        measured = {"n_params": sum(p.numel() for p in model.parameters()),
                    "forward_flops_per_step": report.forward_flops,
                    "train_flops_per_step": report.forward_flops + report.backward_flops,
                    "hardware_flops_per_step": report.forward_flops + report.backward_flops,
                    **_memory_rows(report, later, opt, device, replayed)}
        ran_attn = getattr(model.config, "_attn_implementation", impl.attn_impl)
    predicted = predict(spec, batch_size, seq_len, recipe.name, optimizer, "none", hf_impl=impl)
    relative_error = {k: (predicted[k] - measured[k]) / measured[k] if measured.get(k) else
                      (0.0 if predicted.get(k) == measured.get(k) else None) for k in KEYS}
    notes = [f"optimizer: {optimizer_source}", f"device: {device}", hf_impl_note(impl),
             f"transformers {transformers.__version__}: {type(model).__name__}, attn_implementation {ran_attn!r}"]
    if device == "meta" and autocast_dtype is not None:
        notes.append("meta device: autocast does not cast meta tensors, so this amp step computes in fp32 while the "
                     "prediction is for amp; use --device fake")
    if not transformers.__version__.startswith("5."):
        notes.append(f"transformers {transformers.__version__}: account/memory/hf_activations.py follows transformers 5.x "
                     "(tested with 5.24); other versions may save other tensors")
    if device in ("fake", "meta") and getattr(spec, "is_moe", False):
        notes.append(f"{device} device: the experts' routing is whatever the {device} tensors give; FLOPs and saved "
                     "bytes do not depend on it (every token reaches experts_per_token experts)")
    return {"predicted": {k: predicted[k] for k in KEYS}, "measured": measured, "relative_error": relative_error,
            "settings": {"model": spec.name, "impl": "hf", "attn_impl": impl.attn_impl, "batch_size": batch_size,
                         "seq_len": seq_len, "precision": recipe.name, "optimizer": optimizer, "device": device,
                         "optimizer_impl": optimizer_source},
            "details": {"peak_phase": report.peak_phase, "peak_module": report.peak_module,
                        "phase_peak_bytes": report.phase_peak_bytes, "saved_bytes": report.saved_bytes,
                        "activations_by_module": report.activations_by_module, "transformers_attn_impl": ran_attn,
                        "allocator_replay": replayed},
            "notes": notes + [_reserved_note(device)]}


class GroupedMmShapes(TorchDispatchMode):
    """aten._grouped_mm on fake and meta tensors in any dtype: its meta kernel accepts only bf16 (the CUDA kernel's
    rule), while the CPU kernel also runs fp32. Entered below the trackers, so they still see (and count) the op;
    the output is an empty tensor of the shape the kernel would return."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._overloadpacket is not torch.ops.aten._grouped_mm:
            return func(*args, **kwargs)
        a, b = args[0], args[1]
        offs = args[2] if len(args) > 2 else kwargs.get("offs")
        if a.dim() == 2 and b.dim() == 3:
            shape = (a.shape[0], b.shape[-1])
        elif a.dim() == 2 and b.dim() == 2:            # weight gradient: one (K, N) block per group
            shape = (offs.shape[0], a.shape[0], b.shape[1])
        elif a.dim() == 3 and b.dim() == 3:
            shape = (a.shape[0], a.shape[1], b.shape[-1])
        else:                                          # (G, M, K) × (K, N): groups along N
            shape = (a.shape[1], b.shape[-1])
        dtype = kwargs.get("out_dtype") or a.dtype
        return torch.empty(shape, dtype=dtype, device=a.device)


def _quiet_transformers():
    """transformers, imported with its logging at errors only (its warnings go to stderr, never stdout)."""
    try:
        with _quiet():
            import transformers
    except ImportError:
        raise TrainledgerError("--impl hf needs the `transformers` package (pip install 'trainledger[hf]')") from None
    transformers.logging.set_verbosity_error()
    return transformers


@contextlib.contextmanager
def _quiet():
    """Python warnings silenced and anything printed to stdout sent to stderr, so --json stays one JSON object."""
    import sys
    import warnings
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
        warnings.simplefilter("ignore")
        yield
