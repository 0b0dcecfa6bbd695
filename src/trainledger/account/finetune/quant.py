"""Bytes of frozen base weights stored quantized, tensor by tensor, as the libraries that run them lay them out.

Schemes (`--quantize`), each with the library that stores it and the tensors it keeps per weight of n elements:

    scheme  library        tensors (bytes)                                                          bits/weight (n large)
    nf4     bitsandbytes   data ceil(n/2) uint8 (two 4-bit codes a byte); absmax fp32 per 64-block;    4 + 32/64 = 4.5
                           the 16-entry NF4 code (fp32)
    nf4-dq  bitsandbytes   data ceil(n/2); absmax uint8 per 64-block, quantized with the dynamic      4 + 8/64 + 32/(64·256)
                           8-bit map in blocks of 256 with an fp32 absmax each; its 256-entry map       = 4.127
                           (fp32), the offset (the mean absmax subtracted first, fp32), the NF4 code
    nf4-dq  torchao        quantized_data n/2 uint8; quantized_scalers n/64 int8; quantization_factor  4 + 8/64 + 16/(64·256)
                           n/(64·256) in the weight dtype; scaler_mean, one value in the weight dtype;    (bf16) = 4.126
                           nf4, the 16-entry lookup in the weight dtype
    int8    bitsandbytes   CB rows·cols int8; SCB one fp32 absmax per output row (LLM.int8 row-wise)   8 + 32/cols

Sources: Dettmers et al. 2023, "QLoRA" (arXiv:2305.14314), Sec. 3: NF4 in 64-blocks with an fp32 absmax (0.5 bits
of constants a weight), double quantization of the absmax to 8 bits in 256-blocks (8/64 + 32/(64·256) = 0.127
bits: 0.373 saved); bitsandbytes 0.50 functional.quantize_4bit (compress_statistics: the absmax minus its mean,
quantize_blockwise(blocksize=256)) and QuantState; torchao 0.18 quantization/quantize_/workflows/nf4/nf4_tensor.py
(NF4Tensor.from_tensor, double_quantize_scalers: torchao always double-quantizes, its second-level constants in the
weight dtype, not fp32); Dettmers et al. 2022, "LLM.int8()" (arXiv:2208.07339), bitsandbytes Int8Params (CB, SCB).
torchtune's QLoRA (FrozenNF4Linear, to_nf4 with block 64 and scaler block 256) is the torchao row; Hugging Face
BitsAndBytesConfig(load_in_4bit, bnb_4bit_use_double_quant) the bitsandbytes rows, load_in_8bit the int8 row.
Which weights are quantized: every Linear of the layers; embeddings, norms, biases and the LM head stay in 16 bits
(torchtune keeps its output projection an nn.Linear; transformers' bitsandbytes integration skips lm_head).
Bytes are the tensors' own (numel · element size), before the CUDA caching allocator's 512-byte rounding.
"""

from __future__ import annotations

from trainledger.account.counting.params import n_params
from trainledger.account.finetune.targets import projections
from trainledger.errors import TrainledgerError

SCHEMES = ("none", "nf4", "nf4-dq", "int8")
LIBRARIES = ("torchao", "bitsandbytes")
# the library a scheme is stored by unless asked: torchtune's QLoRA (torchao) for nf4-dq, bitsandbytes otherwise
DEFAULT_LIBRARY = {"nf4": "bitsandbytes", "nf4-dq": "torchao", "int8": "bitsandbytes"}
NF4_BLOCK = 64            # QLoRA Sec. 3: blocks of 64 weights share one absmax
DQ_BLOCK = 256            # QLoRA Sec. 3: the absmax constants quantized in blocks of 256
FP32 = 4
NF4_CODES = 16            # the NF4 data type's 16 values (a lookup tensor beside each weight)
DYNAMIC_MAP_CODES = 256   # bitsandbytes' dynamic 8-bit map (create_dynamic_map) the absmax are quantized with


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _check_elements(n_elements) -> int:
    if isinstance(n_elements, bool) or not isinstance(n_elements, int) or n_elements <= 0:
        raise TrainledgerError(f"a quantized weight needs a positive integer element count, got {n_elements!r}")
    return n_elements


def torchao_nf4_bytes(n_elements: int, dtype_bytes: int = 2, block_size: int = NF4_BLOCK,
                      scaler_block_size: int = DQ_BLOCK) -> dict:
    """Bytes of torchao's NF4Tensor of one weight, by inner tensor (to_nf4(t, block_size, scaler_block_size) of a
    weight in a dtype of `dtype_bytes`): quantized_data, quantized_scalers, quantization_factor, scaler_mean, nf4, and
    total. torchao needs n divisible by block_size and n / block_size by scaler_block_size (it asserts both)."""
    n = _check_elements(n_elements)
    if n % block_size or (n // block_size) % scaler_block_size:
        raise TrainledgerError(f"torchao's to_nf4 needs the element count divisible by {block_size} and its "
                               f"{block_size}-blocks by {scaler_block_size}; {n} elements are not")
    blocks = n // block_size
    parts = {"quantized_data": n // 2, "quantized_scalers": blocks,
             "quantization_factor": blocks // scaler_block_size * dtype_bytes, "scaler_mean": dtype_bytes,
             "nf4": NF4_CODES * dtype_bytes}
    return parts | {"total": sum(parts.values())}


def bnb_nf4_bytes(n_elements: int, double_quant: bool, block_size: int = NF4_BLOCK,
                  nested_block_size: int = DQ_BLOCK) -> dict:
    """Bytes of bitsandbytes' 4-bit NF4 weight (quantize_4bit, quant_type="nf4", quant_storage uint8) by tensor: data,
    absmax, code, and with double_quant (compress_statistics) nested_absmax, nested_code, offset; and total. The last
    block of a size not divisible by the block is padded (ceil), as bitsandbytes does."""
    n = _check_elements(n_elements)
    blocks = _ceil(n, block_size)
    parts = {"data": _ceil(n, 2), "absmax": blocks * (1 if double_quant else FP32), "code": NF4_CODES * FP32}
    if double_quant:
        parts |= {"nested_absmax": _ceil(blocks, nested_block_size) * FP32, "nested_code": DYNAMIC_MAP_CODES * FP32,
                  "offset": FP32}
    return parts | {"total": sum(parts.values())}


def bnb_int8_bytes(rows: int, cols: int) -> dict:
    """Bytes of bitsandbytes' LLM.int8 weight (Int8Params of a Linear of `rows` outputs x `cols` inputs): CB (int8)
    and SCB (the fp32 absmax of each output row), and total."""
    rows, cols = _check_elements(rows), _check_elements(cols)
    parts = {"CB": rows * cols, "SCB": rows * FP32}
    return parts | {"total": sum(parts.values())}


def weight_bytes(rows: int, cols: int, scheme: str, library: str | None = None, dtype_bytes: int = 2) -> int:
    """Bytes one frozen weight of rows x cols stores under `scheme` with `library` (None: DEFAULT_LIBRARY; "none":
    the dtype's rows·cols·dtype_bytes)."""
    if scheme not in SCHEMES:
        raise TrainledgerError(f"--quantize must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    if scheme == "none":
        return rows * cols * dtype_bytes
    library = library or DEFAULT_LIBRARY[scheme]
    if library not in LIBRARIES:
        raise TrainledgerError(f"quantization library must be one of {', '.join(LIBRARIES)}, got {library!r}")
    if library == "torchao":
        if scheme != "nf4-dq":
            raise TrainledgerError(f"--quantize {scheme} is not what torchao stores for QLoRA: its NF4Tensor always "
                                   "double-quantizes (nf4-dq); nf4 and int8 are bitsandbytes' layouts")
        return torchao_nf4_bytes(rows * cols, dtype_bytes)["total"]
    if scheme == "int8":
        return bnb_int8_bytes(rows, cols)["total"]
    return bnb_nf4_bytes(rows * cols, double_quant=scheme == "nf4-dq")["total"]


def quantized_base_bytes(spec, scheme: str, library: str | None = None, dtype_bytes: int = 2) -> dict:
    """Bytes of the frozen base under `scheme`: quantized_weight_bytes (every Linear weight of the layers, each stored
    as `library` stores it), quantized_params (their element count), other_params_bytes (embeddings, norms, biases
    and the LM head, kept in the dtype of `dtype_bytes`) and total_bytes; bits_per_quantized_param beside.

    The Linears are the family's modules (account.finetune.targets.projections), so per-tensor constants count once
    per module as the library makes them (a fused query_key_value is one tensor). Mixtures of experts are refused:
    transformers 5 keeps experts as fused 3-D parameters, which neither library quantizes as Linears."""
    if spec.is_moe and scheme != "none":
        raise TrainledgerError(f"--quantize {scheme}: model {spec.name!r} is a mixture of experts, whose experts neither "
                               "torchao's to_nf4 nor bitsandbytes' Linear4bit/8bitLt quantize as Linears; not counted")
    layers = [p for p in projections(spec) if not any(role == "head" for role, _ in p.parts)]
    quantized_params = sum(p.count * p.in_features * p.out_features for p in layers)
    quantized = sum(p.count * weight_bytes(p.out_features, p.in_features, scheme, library, dtype_bytes) for p in layers)
    other = (n_params(spec) - quantized_params) * dtype_bytes
    return {"scheme": scheme, "library": None if scheme == "none" else library or DEFAULT_LIBRARY[scheme],
            "quantized_params": quantized_params, "quantized_weight_bytes": quantized, "other_params_bytes": other,
            "total_bytes": quantized + other, "bits_per_quantized_param": 8 * quantized / quantized_params}


INT4_GROUP = 128          # torchao Int4WeightOnlyConfig's default group_size


def torchao_int4_bytes(rows: int, cols: int, group_size: int = INT4_GROUP, dtype_bytes: int = 2) -> dict:
    """Bytes of torchao's int4 weight-only weight (Int4WeightOnlyConfig(group_size=128), version 2, plain packing:
    torchao/quantization/quantize_/workflows/int4/int4_tensor.py, Int4Tensor): qdata (rows, cols/2) two 4-bit codes a
    byte; scale and zero_point (cols/group_size, rows) each in the weight dtype (from_hp: scale.to(w.dtype)); total.
    4 + 2·16/128 = 4.25 bits a weight in bf16."""
    rows, cols = _check_elements(rows), _check_elements(cols)
    if cols % group_size:
        raise TrainledgerError(f"torchao's int4 weight-only needs in_features divisible by group_size {group_size}; "
                               f"{cols} is not")
    groups = rows * (cols // group_size)
    parts = {"qdata": rows * cols // 2, "scale": groups * dtype_bytes, "zero_point": groups * dtype_bytes}
    return parts | {"total": sum(parts.values())}


def inference_weight_bytes(spec, scheme: str, tp: int = 1) -> dict:
    """Weights-only quantization for `infer --dtype nf4|nf4-dq|int8|int4`: every Linear of the layers stored as
    bitsandbytes (nf4, nf4-dq, int8) or torchao (int4) stores it, embeddings, norms, biases and the LM head in bf16
    (transformers' get_keys_to_not_convert keeps the output embeddings / lm_head unquantized). Per GPU under tp: the
    layers' Linears split over tp GPUs (Megatron), the rest as params_per_gpu holds it. Keys as quantized_base_bytes.
    int4: torchao's Int4WeightOnlyConfig() (group 128, torchao_int4_bytes); a Linear whose in_features is not a
    multiple of 128 torchao leaves unquantized (quant_api._int4_weight_only_quantize_tensor skips it): counted bf16."""
    if spec.is_moe:
        raise TrainledgerError(f"--dtype {scheme}: model {spec.name!r} is a mixture of experts, whose fused expert "
                               "weights bitsandbytes and torchao do not quantize as Linears; not counted", "--dtype")
    if scheme == "int4":
        layers = [p for p in projections(spec) if not any(role == "head" for role, _ in p.parts)
                  and p.in_features % INT4_GROUP == 0]
        qp = sum(p.count * p.in_features * p.out_features for p in layers)
        if not qp:
            raise TrainledgerError(f"--dtype int4: no Linear of {spec.name!r} has in_features divisible by torchao's "
                                   f"group size {INT4_GROUP}; nothing would be quantized", "--dtype")
        qb = sum(p.count * torchao_int4_bytes(p.out_features, p.in_features)["total"] for p in layers)
        base = {"scheme": scheme, "library": "torchao", "quantized_params": qp, "quantized_weight_bytes": qb,
                "other_params_bytes": (n_params(spec) - qp) * 2, "bits_per_quantized_param": 8 * qb / qp}
    else:
        base = quantized_base_bytes(spec, scheme, "bitsandbytes", 2)   # Params4bit / Int8Params
    if tp > 1:
        from trainledger.account.counting.placement import params_per_gpu
        per_gpu = params_per_gpu(spec, tp)["n_params_per_gpu"]
        qp = base["quantized_params"] / tp
        base = base | {"quantized_params": qp, "quantized_weight_bytes": base["quantized_weight_bytes"] / tp,
                       "other_params_bytes": (per_gpu - qp) * 2}
    return base | {"total_bytes": base["quantized_weight_bytes"] + base["other_params_bytes"]}
