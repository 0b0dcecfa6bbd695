"""FP8 training recipes as data: which GEMMs run in FP8, what stays 16-bit, what memory they keep, which kernels they add.

The four recipes are named as the ecosystem names them (specs/recipes.py registers each as a PrecisionRecipe for
its model states; this module holds what FP8 changes beyond them). Units: bytes per element or per parameter.

    recipe       GEMMs in FP8            scale granularity       weight copies kept      saved activations  source
    fp8-cs       fprop, dgrad, wgrad     one fp32 per tensor,    FP8 weight + its        FP8 (+ scale)      Transformer Engine
                                         from this tensor's amax transpose (Hopper)                         Float8CurrentScaling
    fp8-delayed  fprop, dgrad, wgrad     one fp32 per tensor,    FP8 weight + transpose  FP8 (+ scale)      TE DelayedScaling
                                         from an amax history
    fp8-rowwise  fprop, dgrad, wgrad     one fp32 per row        none (cast each pass)   bf16 (recast in    torchao float8
                                                                                          backward)         "rowwise"
    mxfp8        fprop, dgrad, wgrad     one E8M0 byte per 32    row- and column-wise    MXFP8 (+ scales)   OCP MX v1.0; TE
                                         elements                MXFP8 copies                               MXFP8BlockScaling

In all four the attention core (QKᵀ, softmax, A·V), the norms, the embedding and the LM head stay in bf16 (TE:
only te.Linear / LayerNormLinear / LayerNormMLP GEMMs take FP8 inside fp8_autocast, DotProductAttention only with
fp8_dpa; torchao converts nn.Linear modules and torchtitan leaves the output projection out: its float8 converter
filters "output"). Forward tensors are E4M3; backward gradients E5M2 in TE's default HYBRID format; torchao's
recipes use E4M3 throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainledger.errors import TrainledgerError

_TE = ("NVIDIA Transformer Engine user guide, 'Using FP8 with Transformer Engine' (recipes DelayedScaling, "
       "Float8CurrentScaling, MXFP8BlockScaling; fp8_autocast covers Linear, LayerNormLinear, LayerNormMLP GEMMs: "
       "fprop, dgrad, wgrad; FP8 weights cached across micro-batches via is_first_microbatch)")
_TORCHAO = ("pytorch/ao torchao/float8/README.md (Float8LinearConfig.from_recipe_name: 'tensorwise', 'rowwise'); "
            "torchao/float8/float8_linear.py: matmul_with_hp_or_float8_args saves input_hp and weight_hp_t for "
            "backward and casts again there")
_MX = ("Open Compute Project, 'OCP Microscaling Formats (MX) Specification' v1.0 (2023), Sec. 5: MXFP8 = blocks "
       "of 32 FP8 (E4M3/E5M2) elements sharing one E8M0 scale (8 bits); NVIDIA Blackwell tensor cores run it "
       "natively (TE MXFP8BlockScaling: Blackwell only)")
_HOPPER_LAYOUT = ("Hopper FP8 tensor-core GEMMs take only the 'TN' layout (cuBLASLt docs, FP8 on sm_90), so TE "
                  "keeps a transposed FP8 copy of weights and activations for dgrad/wgrad (fused cast_transpose)")

FP32 = 4


@dataclass(frozen=True)
class Fp8Scheme:
    """What one FP8 recipe changes against bf16 training (module docstring).

    fp8_gemms: the Linear GEMMs that run in FP8 ("forward", "dgrad", "wgrad"); scale_block: elements per scale
    (0: one scale per tensor; -1: one per row); scale_bytes: bytes per scale; weight_copies: FP8 weight copies
    kept across micro-batches (per Linear parameter, each 1 byte + scales); saved_fp8: Linear inputs saved for
    backward in FP8 (else in bf16, recast in backward); saved_copies: FP8 copies of each saved input (TE keeps
    only the column-wise usage wgrad reads: te.pytorch linear.py, update_usage(rowwise_usage=False)); amax_history: fp32 entries per scaled tensor (delayed scaling); amax_pass:
    current scaling reads a tensor once for its amax before casting it (delayed scaling fuses both in one kernel);
    requires: the GPU capability: "fp8" (an fp8 peak in specs.hardware) or "mxfp8" (also in GPUSpec.block_scaled).
    """

    name: str
    fp8_gemms: tuple[str, ...]
    scale_block: int
    scale_bytes: float
    weight_copies: int
    saved_fp8: bool
    saved_copies: int
    amax_history: int
    amax_pass: bool
    requires: str
    framework: str
    description: str
    source: str

    def scale_bytes_per_element(self) -> float:
        """Bytes of scales per FP8 element: scale_bytes / block for block scaling, ~0 for per-tensor/per-row."""
        return self.scale_bytes / self.scale_block if self.scale_block > 0 else 0.0

    def fp8_bytes_per_element(self) -> float:
        """Bytes one FP8 element costs with its share of the scales (MXFP8: 1 + 1/32)."""
        return 1.0 + self.scale_bytes_per_element()

    def to_dict(self) -> dict:
        return dict(self.__dict__, fp8_bytes_per_element=self.fp8_bytes_per_element())


GEMMS = ("forward", "dgrad", "wgrad")
# TE's DelayedScaling default amax_history_len (TE API reference, transformer_engine.common.recipe.DelayedScaling)
TE_AMAX_HISTORY_LEN = 1024
MX_BLOCK = 32

SCHEMES: dict[str, Fp8Scheme] = {s.name: s for s in [
    Fp8Scheme("fp8-cs", GEMMS, 0, FP32, 2, True, 1, 0, True, "fp8", "Transformer Engine / Megatron-LM",
              "per-tensor current scaling: each tensor's amax is reduced right before its cast; FP8 weight and "
              "transpose cached across micro-batches, each Linear input saved as one FP8 copy (the column-wise one wgrad reads)",
              _TE + "; " + _HOPPER_LAYOUT),
    Fp8Scheme("fp8-delayed", GEMMS, 0, FP32, 2, True, 1, TE_AMAX_HISTORY_LEN, False, "fp8",
              "Transformer Engine / Megatron-LM",
              "per-tensor delayed scaling: the scale comes from an amax history (TE default 1024 steps per tensor, "
              "fp32), the amax of this cast fused into it; FP8 weight and transpose cached, inputs saved in FP8",
              _TE + "; " + _HOPPER_LAYOUT),
    Fp8Scheme("fp8-rowwise", GEMMS, -1, FP32, 0, False, 0, 0, True, "fp8", "torchao float8 (torchtitan)",
              "torchao rowwise scaling: one fp32 scale per row of each operand, E4M3 throughout; nothing FP8 is "
              "kept: weights and inputs are cast on each pass, bf16 inputs are saved and cast again in backward",
              _TORCHAO),
    Fp8Scheme("mxfp8", GEMMS, MX_BLOCK, 1, 2, True, 1, 0, True, "mxfp8", "Transformer Engine (Blackwell)",
              "MX block scaling: 32 elements share one E8M0 scale; row-wise and column-wise MXFP8 copies of "
              "weights (each block runs along the GEMM's reduction dimension), each saved input as its column-wise copy",
              _MX + "; " + _TE),
]}

# What a refusal names for each capability: the GPUs that have it (specs.hardware peak keys)
REQUIREMENTS = {
    "fp8": "FP8 tensor cores (compute capability >= 8.9: Ada L4/L40S/RTX 4090, Hopper H100/H200/H800, Blackwell)",
    "mxfp8": "MX block-scaled FP8 tensor cores (Blackwell: B200, GB200, B300, GB300)",
}


def fp8_scheme(precision: str) -> Fp8Scheme | None:
    """The FP8 scheme of a precision recipe name, or None for a recipe without FP8 (fp32, amp-*, mixed-*, bf16)."""
    return SCHEMES.get(str(precision).strip().lower())


def check_gpu_supports(precision: str, gpu, flag: str = "--precision") -> None:
    """Refuse an FP8 recipe on a GPU without the tensor cores it needs, and a bf16 recipe on a GPU without bf16
    (check_bf16_supported); data-driven: the GPU's peak keys."""
    scheme = fp8_scheme(precision)
    if scheme is None:
        check_bf16_supported(precision, gpu, flag)
        return
    if "fp8" in gpu.peak_flops_per_s and (scheme.requires == "fp8" or scheme.requires in gpu.block_scaled):
        return
    # MXFP8 refused where FP8 runs; a GPU without bf16 (Turing, Volta) gets the fp16 recipe
    instead = "fp8-cs" if "fp8" in gpu.peak_flops_per_s else "mixed-bf16" if "bf16" in gpu.peak_flops_per_s \
        else "mixed-fp16"
    raise TrainledgerError(f"{flag} {scheme.name} needs {REQUIREMENTS[scheme.requires]}; {gpu.name} has none: "
                           f"use --precision {instead} here, or a GPU with them (see `trainledger hardware`)")


# bf16 recipes (specs/recipes.py: bf16 weights, activations or matmuls) -> the fp16 recipe with the same states
BF16_RECIPES = {"amp-bf16": "amp-fp16", "mixed-bf16": "mixed-fp16", "bf16": "mixed-fp16"}


def check_bf16_supported(precision: str, gpu, flag: str = "--precision") -> None:
    """Refuse a bf16 recipe on a GPU whose tensor cores have fp16 but no bf16 (Turing T4, Volta V100: bf16 arrived
    with Ampere, NVIDIA A100 whitepaper; the T4 and V100 datasheets list FP16 and no BF16), naming the fp16 recipe.

    A device without a 16-bit peak at all (a calibrated CPU that measured only fp32) is left to the peak lookup's
    own error. Pure bf16 has no fp16 twin without a master copy: mixed-fp16 (fp32 master weights) is named.
    """
    name = str(precision).strip().lower()
    if name not in BF16_RECIPES:
        return
    peaks = gpu.peak_flops_per_s
    if "bf16" in peaks or "fp16" not in peaks:
        return
    raise TrainledgerError(f"{flag} {name} needs bf16 tensor cores; {gpu.name} has fp16 but no bf16: use "
                           f"{flag} {BF16_RECIPES[name]} here (fp16 with a loss scaler), or a GPU with bf16 "
                           f"(Ampere or newer; see `trainledger hardware`)")
