"""LoRA: low-rank adapters beside frozen Linear layers (Hu et al. 2021, "LoRA", arXiv:2106.09685, Sec. 4.1).

    y = base(x) + (α/r) · B·(A·dropout(x))        A: r × d_in, B: d_out × r, base frozen (and maybe quantized)

A starts Kaiming-uniform with a = √5 (bound 1/√d_in) and B at zero, so the adapted model starts exactly at the base
model: PEFT's `init_lora_weights=True` (peft/tuners/lora/layer.py, reset_lora_parameters). The scale is α/r
(`use_rslora=False`). Dropout (PEFT's lora_dropout) acts on the adapter's input only, in train mode only.
Trainable parameters of one adapted Linear: r·(d_in + d_out) (the paper's Sec. 4.1 count).

Targets are role names mapped onto this Transformer's modules:
    q, k, v, o      attention's q_proj, k_proj, v_proj, o_proj
    gate, up, down  the MLP's matrices (every expert's and the shared expert's too, in a mixture of experts)
    head            the untied output head (a tied head is the embedding: refused)
    all-linear      PEFT's meaning: every nn.Linear of the model but the output head (routers and MLA's
                    low-rank projections included)
Our attention keeps q, k and v as three Linears, so choosing some of them adapts only those parts; when GPT-2's
fused c_attn is written for PEFT (train/adapter_export.py) the chosen parts become one adapter on c_attn of rank
r × (parts chosen), block-structured so that it computes exactly the same thing.
Everything that is not an adapter is frozen (requires_grad False), as PEFT's get_peft_model leaves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainledger.errors import TrainledgerError

ROLES = ("q", "k", "v", "o", "gate", "up", "down", "head")
ALL_LINEAR = "all-linear"
ROLE_OF = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "gate": "gate", "up": "up", "down": "down",
           "lm_head": "head"}
DEFAULT_TARGETS = "q,v"         # PEFT's default for Llama (q_proj, v_proj) and the LoRA paper's Sec. 7.1 choice


def parse_targets(text: str, flag: str = "--lora-targets") -> tuple[str, ...]:
    """The roles of `--lora-targets` ("q,v", "all-linear"), in ROLES order; a one-line error naming what is allowed."""
    parts = [part.strip().lower() for part in str(text).split(",") if part.strip()]
    if parts == [ALL_LINEAR]:
        return (ALL_LINEAR,)
    unknown = [part for part in parts if part not in ROLES]
    if unknown or not parts:
        raise TrainledgerError(f"{flag} {text!r}: unknown target {unknown[0] if unknown else '(none)'!r}; allowed: a "
                               f"comma-separated list of {', '.join(ROLES)}, or {ALL_LINEAR}")
    return tuple(role for role in ROLES if role in parts)


@dataclass(frozen=True)
class LoRASettings:
    """One run's adapters: rank r, α (scale α/r), the target roles (parse_targets) and the adapter-input dropout."""

    rank: int = 8
    alpha: float = 16.0
    targets: tuple[str, ...] = ("q", "v")
    dropout: float = 0.0

    @property
    def scaling(self) -> float:
        return self.alpha / self.rank


class LoRALinear(nn.Module):
    """A frozen `base` (nn.Linear or models.quantize.QuantizedLinear) plus the adapter (module docstring)."""

    def __init__(self, base: nn.Module, rank: int, alpha: float, dropout: float = 0.0):
        super().__init__()
        self.base = base
        self.in_features, self.out_features = base.in_features, base.out_features
        self.rank, self.alpha, self.scaling = rank, alpha, alpha / rank
        factory = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_A = nn.Parameter(torch.empty(rank, self.in_features, **factory))
        self.lora_B = nn.Parameter(torch.zeros(self.out_features, rank, **factory))
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.reset_lora_parameters()

    @torch.no_grad()
    def reset_lora_parameters(self) -> None:
        """A ~ Kaiming-uniform(a=√5), B = 0 (PEFT's default init: the adapted layer starts equal to its base)."""
        if self.lora_A.device.type != "meta":
            nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
            nn.init.zeros_(self.lora_B)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + F.linear(F.linear(self.dropout(x), self.lora_A), self.lora_B) * self.scaling

    @torch.no_grad()
    def delta_weight(self) -> torch.Tensor:
        """(α/r)·B·A in fp32, the d_out × d_in update merging adds to the base weight (PEFT's get_delta_weight)."""
        return (self.lora_B.float() @ self.lora_A.float()) * self.scaling

    def extra_repr(self) -> str:
        return f"rank={self.rank}, alpha={self.alpha:g}"


def _targeted(name: str, module: nn.Module, targets: tuple[str, ...]) -> bool:
    """Whether the nn.Linear at `name` gets an adapter for `targets`."""
    leaf = name.rsplit(".", 1)[-1]
    if targets == (ALL_LINEAR,):
        return leaf != "lm_head"
    return ROLE_OF.get(leaf) in targets


def apply_lora(model: nn.Module, settings: LoRASettings) -> list[str]:
    """Freezes every parameter of `model` and wraps the targeted nn.Linear layers in LoRALinear (in place); their names.

    One-line errors: no module for the targets, a tied head as target, a rank of 0 or above a layer's width
    (min(d_in, d_out): a wider adapter adds parameters without adding rank)."""
    if settings.rank < 1:
        raise TrainledgerError(f"--lora-rank must be a positive integer, got {settings.rank}")
    if not settings.alpha > 0:
        raise TrainledgerError(f"--lora-alpha must be positive, got {settings.alpha}")
    if "head" in settings.targets and getattr(model, "lm_head", None) is None:
        raise TrainledgerError("--lora-targets head: this model's output head is tied to its token embedding (no "
                               "separate Linear to adapt); leave head out")
    for p in model.parameters():
        p.requires_grad_(False)
    chosen = [(name, module) for name, module in model.named_modules()
              if type(module) is nn.Linear and _targeted(name, module, settings.targets)]
    if not chosen:
        raise TrainledgerError(f"--lora-targets {','.join(settings.targets)}: no such layer in this model (its "
                               f"Linears: {', '.join(sorted({n.rsplit('.', 1)[-1] for n, m in model.named_modules() if type(m) is nn.Linear}))})")
    for name, linear in chosen:
        width = min(linear.in_features, linear.out_features)
        if settings.rank > width:
            raise TrainledgerError(f"--lora-rank {settings.rank} exceeds the width {width} of {name} "
                                   f"({linear.in_features} -> {linear.out_features}); allowed: 1..{width}")
    for name, linear in chosen:
        parent_name, _, leaf = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, leaf, LoRALinear(linear, settings.rank, settings.alpha, settings.dropout))
    return [name for name, _ in chosen]


def lora_layers(model: nn.Module) -> dict[str, LoRALinear]:
    """{module name: LoRALinear} of an adapted model, in module order."""
    return {name: module for name, module in model.named_modules() if isinstance(module, LoRALinear)}


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The trainable tensors of an adapted model by their state-dict names (what a fine-tuning checkpoint holds)."""
    return {name: p.detach() for name, p in model.named_parameters() if p.requires_grad}


def trainable_counts(model: nn.Module) -> tuple[int, int]:
    """(trainable, frozen) parameter counts; a quantized weight counts its logical elements."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters()) - trainable


@torch.no_grad()
def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The plain state dict of the model the adapters make: each adapted weight W + (α/r)·B·A (dequantized first when
    quantized, summed in fp32, cast back to W's dtype), every quantized weight dequantized, the rest as it is.
    Its names are those of the unadapted Transformer, so models.hf_weights.to_hf takes it as it is."""
    from trainledger.models.quantize import QuantizedLinear

    def plain(linear) -> torch.Tensor:
        return linear.dequantized_weight() if isinstance(linear, QuantizedLinear) else linear.weight.detach()

    owned: dict[str, tuple[torch.Tensor, torch.Tensor | None]] = {}
    adapters = lora_layers(model)
    for name, module in model.named_modules():
        if name in adapters:
            weight = plain(module.base)
            merged = (weight.float() + module.delta_weight().to(weight.device)).to(weight.dtype)
            owned[name] = (merged, module.base.bias)
        elif isinstance(module, QuantizedLinear) and name.rpartition(".")[0] not in adapters:
            owned[name] = (plain(module), module.bias)
    out = {}
    for key, tensor in model.state_dict().items():
        parts = key.split(".")
        if not any(".".join(parts[:i]) in owned for i in range(1, len(parts))):
            out[key] = tensor
    for name, (weight, bias) in owned.items():
        out[f"{name}.weight"] = weight
        if bias is not None:
            out[f"{name}.bias"] = bias.detach()
    return out
