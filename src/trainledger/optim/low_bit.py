"""AdamW with 8-bit states, the library way: torchao's AdamW8bit (CPU and CUDA), bitsandbytes' PagedAdamW8bit (CUDA).

adamw-8bit        torchao.optim.AdamW8bit (pip install 'trainledger[finetune]'): both moments stored as 8-bit codes
                  of a dynamic quantization map in blocks of 256 values with one fp32 scale per block (Dettmers et al.
                  2022, "8-bit Optimizers via Block-wise Quantization", arXiv:2110.02861), dequantized to fp32 for each
                  update, which torch.compile fuses into one kernel per parameter. As bitsandbytes does, only tensors
                  of at least 4,096 values whose size is a multiple of 256 get 8-bit states; smaller ones keep fp32.
                  States: 2 × (1 + 4/256) bytes per value, against AdamW's 8.
paged-adamw-8bit  bitsandbytes.optim.PagedAdamW8bit: the same 8-bit states in CUDA unified memory, which the driver
                  pages out to host RAM when the GPU runs short (QLoRA paper, arXiv:2305.14314, Sec. 3). CUDA only:
                  refused on CPU, where there is no device memory to page out of.

The learning rate: torchao keeps each group's lr as a tensor (so that a compiled step does not recompile as it
changes); the wrapper below keeps floats in param_groups, as every other optimizer here (the schedule sets them,
the metrics log them), and hands torchao tensors only during step(). Checkpoints: torchao's state tensors are
tensor subclasses; state_dict() writes their plain parts (codes, scale, qmap, signed) and load_state_dict()
rebuilds them, so that a checkpoint loads with torch.load(weights_only=True) whether or not torchao is imported.
"""

from __future__ import annotations

import warnings

import torch

from trainledger.errors import TrainledgerError

LOW_BIT = ("adamw-8bit", "paged-adamw-8bit")
STATE_8BIT = "__optim_state_8bit__"


def build_low_bit(name: str, groups: list[dict], lr: float, weight_decay: float, device: torch.device):
    """The 8-bit AdamW `name` (a LOW_BIT entry) over `groups`; one-line errors where it cannot run."""
    from trainledger.models.quantize import torchao_module
    if name == "paged-adamw-8bit":
        check_paged(device)
        import bitsandbytes
        return bitsandbytes.optim.PagedAdamW8bit(groups, lr=lr, weight_decay=weight_decay)
    if name != "adamw-8bit":
        raise TrainledgerError(f"unknown --optimizer {name!r}. Known: {', '.join(LOW_BIT)}")
    optim = torchao_module("torchao.optim", "--optimizer adamw-8bit")
    return _with_plain_states(optim.AdamW8bit)(groups, lr=lr, weight_decay=weight_decay)


def check_paged(device: torch.device) -> None:
    """Refuses paged-adamw-8bit off CUDA, or without bitsandbytes, in one line."""
    if device.type != "cuda":
        raise TrainledgerError(f"--optimizer paged-adamw-8bit pages its states between a CUDA GPU's memory and the "
                               f"host (bitsandbytes); this run is on {device.type}: use --optimizer adamw-8bit (torchao, "
                               "runs on CPU)")
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        raise TrainledgerError("--optimizer paged-adamw-8bit needs bitsandbytes: pip install bitsandbytes") from None


_CLASSES: dict = {}


def _with_plain_states(base: type) -> type:
    """A subclass of torchao's optimizer `base` with float learning rates and plain-tensor checkpoints (module doc)."""
    if base in _CLASSES:
        return _CLASSES[base]

    class PlainStates(base):
        @torch.no_grad()
        def step(self, closure=None):
            floats = [group["lr"] for group in self.param_groups]
            for group, lr in zip(self.param_groups, floats):
                group["lr"] = torch.tensor(float(lr), dtype=torch.float32)
            try:
                with warnings.catch_warnings():     # torch's note to tensor-subclass authors, once per compile
                    warnings.filterwarnings("ignore", message=".*_stable_hash_for_caching.*")
                    return super().step(closure)
            finally:
                for group, lr in zip(self.param_groups, floats):
                    group["lr"] = float(lr)

        def add_param_group(self, param_group: dict) -> None:
            super().add_param_group(param_group)
            group = self.param_groups[-1]
            group["lr"] = float(group["lr"])            # torchao makes it a tensor: floats outside step()

        def state_dict(self) -> dict:
            state = super().state_dict()
            state["state"] = {index: {key: _plain(value) for key, value in entry.items()}
                              for index, entry in state["state"].items()}
            return state

        def load_state_dict(self, state_dict: dict) -> None:
            saved = state_dict["state"]
            kept = {index: {k: v for k, v in entry.items() if not _is_plain_8bit(v)} for index, entry in saved.items()}
            super().load_state_dict({**state_dict, "state": kept})
            params = [p for group in self.param_groups for p in group["params"]]
            for index, entry in saved.items():
                for key, value in entry.items():
                    if _is_plain_8bit(value):
                        self.state[params[int(index)]][key] = _rebuild(value, params[int(index)])

    PlainStates.__name__ = PlainStates.__qualname__ = base.__name__
    _CLASSES[base] = PlainStates
    return PlainStates


def _plain(value):
    """A torchao 8-bit state tensor as a dict of its plain tensors; anything else as it is."""
    if type(value).__name__ != "OptimState8bit":
        return value
    return {STATE_8BIT: True, "codes": value.codes.clone(), "scale": value.scale.clone(), "qmap": value.qmap.clone(),
            "signed": bool(value.signed)}


def _is_plain_8bit(value) -> bool:
    return isinstance(value, dict) and value.get(STATE_8BIT) is True


def _rebuild(value: dict, param: torch.Tensor):
    from torchao.optim.subclass_8bit import OptimState8bit
    device = param.device
    return OptimState8bit(value["codes"].to(device), value["scale"].to(device), value["qmap"].to(device),
                          bool(value["signed"]), dtype=param.dtype)
