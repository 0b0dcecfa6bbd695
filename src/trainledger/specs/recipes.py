"""Precision recipes and optimizers as data: bytes per parameter for params, grads, master params and optimizer states.

A precision recipe says in which dtype each of the model states lives; an optimizer says how many
state tensors it keeps per parameter. Together they give the bytes per parameter of a training run
(DESIGN.md, "Memory per GPU"). The peers disagree exactly here, so every recipe is named and sourced.

    recipe       params grads master  state dtype  activations   AdamW B/param
    fp32            4     4     0      fp32         fp32             16   (CS336 Lecture 2: 4+4+(4+4))
    amp-bf16        4     4     0      fp32         bf16             16   (PyTorch AMP: fp32 weights, autocast)
    amp-fp16        4     4     0      fp32         fp16             16   (+ a GradScaler: a few scalars)
    mixed-bf16      2     2     4      fp32         bf16             16   (ZeRO Sec. 3.1: 2+2+12)
    mixed-fp16      2     2     4      fp32         fp16             16   (ZeRO Sec. 3.1: 2+2+12)
    bf16            2     2     0      bf16         bf16              8   (pure bf16, no master copy)
    fp8-cs          2     2     4      fp32         bf16/FP8         16   (+ FP8 weight copies: specs/fp8.py)
    fp8-delayed     2     2     4      fp32         bf16/FP8         16   (+ FP8 copies, amax histories)
    fp8-rowwise     4     4     0      fp32         bf16             16   (torchao: casts each pass, keeps none)
    mxfp8           2     2     4      fp32         bf16/MXFP8       16   (+ MXFP8 copies; Blackwell only)

Units: bytes per parameter (or per optimizer-state element). No torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainledger.errors import TrainledgerError


@dataclass(frozen=True)
class PrecisionRecipe:
    """Where the model states live: bytes per parameter of params, grads and master params, bytes per optimizer-state element."""

    name: str
    params_bytes_per_param: float
    grads_bytes_per_param: float
    master_params_bytes_per_param: float
    state_bytes_per_element: float      # dtype of optimizer states (momentum, variance)
    activation_dtype: str               # dtype autograd saves for backward (matmul inputs under autocast)
    compute_dtype: str                  # dtype of the matmuls: picks the GPU peak
    description: str = ""
    source: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class OptimizerRecipe:
    """An optimizer's per-parameter state: `n_states` full-size tensors, or a factored second moment (Adafactor).

    `state_bytes_per_element` overrides the recipe's state dtype (8-bit Adam keeps 1-byte states);
    `overhead_bytes_per_element` adds per-element bookkeeping (8-bit Adam's block-wise fp32 scales).
    """

    name: str
    n_states: int
    factored: bool = False
    state_bytes_per_element: float | None = None
    overhead_bytes_per_element: float = 0.0
    description: str = ""
    source: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


_ZERO = "Rajbhandari et al. 2019, ZeRO (arXiv:1910.02054), Sec. 3.1: mixed-precision Adam keeps 2Ψ + 2Ψ + 12Ψ bytes"
_FP8 = "FP8 recipes of specs/fp8.py (Transformer Engine, torchao float8, OCP MX v1.0)"
_AMP = "PyTorch AMP docs (torch.amp.autocast, torch.amp.GradScaler): parameters, grads and optimizer states stay fp32; autocast runs matmuls in 16-bit"

RECIPES: dict[str, PrecisionRecipe] = {r.name: r for r in [
    PrecisionRecipe("fp32", 4, 4, 0, 4, "fp32", "fp32",
                    "everything fp32 (the lecture's naive AdamW: 4 + 4 + (4 + 4) = 16 B/param)",
                    "CS336 Lecture 2, motivating_questions: bytes_per_parameter = 4 + 4 + (4 + 4)"),
    PrecisionRecipe("amp-bf16", 4, 4, 0, 4, "bf16", "bf16",
                    "fp32 weights, grads and states; bf16 autocast activations", _AMP),
    PrecisionRecipe("amp-fp16", 4, 4, 0, 4, "fp16", "fp16",
                    "fp32 weights, grads and states; fp16 autocast activations with a grad scaler (a few scalars, not counted)", _AMP),
    PrecisionRecipe("mixed-bf16", 2, 2, 4, 4, "bf16", "bf16",
                    "bf16 weights and grads; fp32 master weights and optimizer states", _ZERO),
    PrecisionRecipe("mixed-fp16", 2, 2, 4, 4, "fp16", "fp16",
                    "fp16 weights and grads; fp32 master weights and optimizer states (ZeRO's K = 12 for Adam)", _ZERO),
    PrecisionRecipe("bf16", 2, 2, 0, 2, "bf16", "bf16",
                    "everything bf16, no master copy (AdamW: 2 + 2 + 2·2 = 8 B/param)",
                    "DESIGN.md `bf16` recipe; pure low-precision training, states in the parameter dtype"),
    # FP8: the Linear GEMMs in FP8, the rest as the 16-bit recipe below them; compute_dtype stays bf16 (the peak of
    # attention, norms and head, and of MFU as NVIDIA and torchtitan state it). What FP8 adds: specs/fp8.py.
    PrecisionRecipe("fp8-cs", 2, 2, 4, 4, "bf16", "bf16",
                    "FP8 Linear GEMMs, per-tensor current scaling (TE/Megatron); bf16 weights and grads, fp32 master "
                    "and states as mixed-bf16, + FP8 weight copies (specs/fp8.py)", _ZERO + "; " + _FP8),
    PrecisionRecipe("fp8-delayed", 2, 2, 4, 4, "bf16", "bf16",
                    "FP8 Linear GEMMs, per-tensor delayed scaling with an amax history (TE/Megatron); states as "
                    "mixed-bf16, + FP8 weight copies and amax histories (specs/fp8.py)", _ZERO + "; " + _FP8),
    PrecisionRecipe("fp8-rowwise", 4, 4, 0, 4, "bf16", "bf16",
                    "FP8 Linear GEMMs, torchao rowwise scaling; fp32 weights, grads and states as amp-bf16 (nothing "
                    "FP8 kept between passes)", _AMP + "; " + _FP8),
    PrecisionRecipe("mxfp8", 2, 2, 4, 4, "bf16", "bf16",
                    "MXFP8 Linear GEMMs (32-element blocks, E8M0 scales; Blackwell only); states as mixed-bf16, + "
                    "row- and column-wise MXFP8 weight copies (specs/fp8.py)", _ZERO + "; " + _FP8),
]}

# Adafactor keeps no momentum by default (beta1 = None) and factors the second moment of every matrix
# into a row vector and a column vector: rows + cols elements instead of rows·cols; vectors keep a full
# second moment. Shazeer & Stern 2018, "Adafactor" (arXiv:1804.04235), Sec. 3 and Alg. 4.
# 8-bit Adam: both states in 1 byte with block-wise quantization, one fp32 absmax scale per block of
# 2048 elements. Dettmers et al. 2021, "8-bit Optimizers via Block-wise Quantization" (arXiv:2110.02861), Sec. 2.
ADAMW8_BLOCK_SIZE = 256     # torchao AdamW8bit and bitsandbytes' 8-bit optimizers (optimizer.py: blocksize = 256)
ADAM8_BLOCK_SIZE = 2048

OPTIMIZERS: dict[str, OptimizerRecipe] = {o.name: o for o in [
    OptimizerRecipe("sgd", 0, description="plain SGD: no state", source="torch.optim.SGD (momentum=0)"),
    OptimizerRecipe("momentum", 1, description="SGD with momentum: one velocity buffer",
                    source="torch.optim.SGD(momentum>0): momentum_buffer"),
    OptimizerRecipe("adagrad", 1, description="AdaGrad: sum of squared gradients",
                    source="Duchi et al. 2011; torch.optim.Adagrad state 'sum'"),
    OptimizerRecipe("rmsprop", 1, description="RMSProp: running mean of squared gradients",
                    source="Tieleman & Hinton 2012; torch.optim.RMSprop state 'square_avg'"),
    OptimizerRecipe("rmsprop-centered", 2, description="centered RMSProp: + running mean of gradients",
                    source="Graves 2013; torch.optim.RMSprop(centered=True) state 'grad_avg'"),
    OptimizerRecipe("adam", 2, description="Adam: first and second moments",
                    source="Kingma & Ba 2014 (arXiv:1412.6980); torch.optim.Adam exp_avg, exp_avg_sq"),
    OptimizerRecipe("adamw", 2, description="AdamW: first and second moments (decoupled weight decay)",
                    source="Loshchilov & Hutter 2017 (arXiv:1711.05101); torch.optim.AdamW exp_avg, exp_avg_sq"),
    OptimizerRecipe("adafactor", 1, factored=True,
                    description="Adafactor without momentum: factored second moment, rows + cols per matrix",
                    source="Shazeer & Stern 2018 (arXiv:1804.04235), Sec. 3, Alg. 4"),
    OptimizerRecipe("adam-8bit", 2, state_bytes_per_element=1, overhead_bytes_per_element=4 / ADAM8_BLOCK_SIZE,
                    description="8-bit Adam: 2 states × 1 byte + one fp32 scale per 2048-element block",
                    source="Dettmers et al. 2021 (arXiv:2110.02861), block-wise quantization, block size 2048"),
    OptimizerRecipe("adamw-8bit", 2, state_bytes_per_element=1, overhead_bytes_per_element=4 / ADAMW8_BLOCK_SIZE,
                    description="8-bit AdamW as the libraries store it: 2 states × 1 byte + one fp32 absmax per "
                                "256-element block of each (tensors under 4096 values keep fp32 states)",
                    source="torchao.optim.AdamW8bit (OptimState8bit, block_size=256, quantizes tensors >= 4096 "
                           "values); bitsandbytes AdamW8bit (init_state: absmax1/absmax2 per 256-block, "
                           "min_8bit_size=4096)"),
    OptimizerRecipe("paged-adamw-8bit", 2, state_bytes_per_element=1, overhead_bytes_per_element=4 / ADAMW8_BLOCK_SIZE,
                    description="bitsandbytes' PagedAdamW8bit: adamw-8bit's states in CUDA unified memory, which "
                                "the driver pages out to host memory under GPU memory pressure",
                    source="bitsandbytes PagedAdamW8bit (is_paged=True: get_state_buffer -> cuda managed memory); "
                           "Dettmers et al. 2023 (arXiv:2305.14314) Sec. 3, paged optimizers"),
]}


def get_recipe(name: str, flag: str = "--precision") -> PrecisionRecipe:
    """The precision recipe named `name`; an error listing the known recipes otherwise."""
    key = str(name).strip().lower()
    if key not in RECIPES:
        raise TrainledgerError(f"unknown precision recipe {name!r} ({flag}). Known: {', '.join(RECIPES)}")
    return RECIPES[key]


def get_optimizer(name: str, flag: str = "--optimizer") -> OptimizerRecipe:
    """The optimizer recipe named `name`; an error listing the known optimizers otherwise."""
    key = str(name).strip().lower()
    if key not in OPTIMIZERS:
        raise TrainledgerError(f"unknown optimizer {name!r} ({flag}). Known: {', '.join(OPTIMIZERS)}")
    return OPTIMIZERS[key]


def optimizer_bytes_per_element(recipe: PrecisionRecipe, optimizer: OptimizerRecipe) -> float:
    """Bytes one optimizer-state element costs (the recipe's state dtype unless the optimizer fixes its own) plus overhead."""
    per_element = recipe.state_bytes_per_element if optimizer.state_bytes_per_element is None else optimizer.state_bytes_per_element
    return per_element + optimizer.overhead_bytes_per_element


def adafactor_elements_per_param(d_model: float) -> float:
    """Adafactor second-moment elements per parameter, ≈ 2/d_model (a ratio), when the matrix shapes are unknown.

    A d×d matrix keeps d + d elements for its d² parameters, i.e. 2/d per parameter; Transformer matrices
    are d×d or d×4d (rows + cols over rows·cols = 5/(4d)), so 2/d is an upper estimate within 1.6×.
    With a model spec, account.memory.per_gpu counts rows + cols of every matrix exactly instead.
    """
    return 2.0 / d_model


def bytes_per_param(recipe: PrecisionRecipe, optimizer: OptimizerRecipe, optimizer_elements_per_param: float | None = None) -> dict:
    """Bytes per parameter (unsharded) of each model state: params, grads, master_params, optimizer, total.

    optimizer = n_states × (state bytes + overhead); for the factored Adafactor the caller passes
    `optimizer_elements_per_param` (state elements / parameters, from the shapes); without it Adafactor
    is an error, because the answer depends on the shapes.
    """
    if optimizer.factored:
        if optimizer_elements_per_param is None:
            raise TrainledgerError(f"optimizer {optimizer.name!r} needs matrix shapes (a --model) or an estimate of d_model", "--optimizer")
        elements = optimizer_elements_per_param
    else:
        elements = optimizer.n_states
    parts = {
        "params": recipe.params_bytes_per_param,
        "grads": recipe.grads_bytes_per_param,
        "master_params": recipe.master_params_bytes_per_param,
        "optimizer": elements * optimizer_bytes_per_element(recipe, optimizer),
    }
    parts["total"] = sum(parts.values())
    return parts
