"""Inference accounting: KV cache and weight bytes, the largest batch that fits, prefill and decoding time. Pure.

API: `inference(spec, gpu, request)` -> dict with kv_cache_bytes, weights_bytes, max_batch_size, prefill_seconds,
decode_seconds_per_token, time_to_first_token_seconds, tokens_per_s, bottleneck, and their parts, for an
`InferenceRequest` (batch size, prompt and generated tokens, dtype, KV-cache dtype, tp, reserve, cache, sampling:
what `infer` and `generate` ask; a serving request, not a training run). Per GPU when tp > 1.

- KV cache: every layer stores a key and a value vector per KV head for every cached position:
      bytes = Σ_layers 2 · batch · n_kv_heads · head_dim · positions · bytes per element
  (the factor 2: keys and values). Multi-head attention caches n_heads heads; grouped-query attention n_kv_heads
  < n_heads, multi-query 1 (Ainslie et al. 2023, arXiv:2305.13245, Sec. 2; Shazeer 2019, arXiv:1911.02150;
  Llama 2, arXiv:2307.09288, Sec. 2.2 uses GQA to shrink this cache). A sliding-window layer keeps only its last W
  positions (Mistral 7B, arXiv:2310.06825, Sec. 2, rolling buffer). Positions = prompt + generated tokens, as
  models/kv_cache.py allocates it (the two agree to the byte: tests/models/test_generation.py).
  With tensor parallelism the KV heads are split over the tp GPUs (replicated when tp > n_kv_heads).
- Weights: the parameters one GPU holds (account.memory.per_gpu.params_per_gpu) × bytes per element of --dtype.
  Weights-only quantized --dtype nf4, nf4-dq, int8 (bitsandbytes) or int4 (torchao, group 128): the layers' Linears
  as those libraries store them, packed codes + constants (account.finetune.quant.inference_weight_bytes: 4.5, 4.127,
  8 + 32/cols, 4.25 bits a weight), embeddings, norms and the LM head in bf16; the matmuls run in bf16 and read the
  packed bytes (decoding: bitsandbytes' gemm_4bit / int8_scaled_mm, torchao's bf16i4bf16_rowwise / tinygemm), except
  a bitsandbytes 4-bit Linear over more than BNB_4BIT_FUSED_MAX_ROWS rows, which first dequantizes into a bf16 copy.
- Largest batch: floor((memory − weights − reserve) / KV cache bytes of one sequence). The reserve may be
  automatic (`reserve_bytes` None, `infer --reserve auto`, as `memory` and `step` keep back on a CUDA device):
  account.memory.per_gpu.cuda_reserve_bytes of the peak (weights + KV cache): the CUDA context and cuBLAS
  workspaces plus the caching allocator's share of the peak, so the largest batch solves
  weights + b·kv + fixed + slack·(weights + b·kv) <= memory.
- Prefill (the prompt, all positions at once) is compute-bound: every GEMM on the roofline of account.time.roofline
  with the device's measured matmul efficiency at its shape (m = batch · prompt tokens), the causal attention
  core at its measured kernel rate, elementwise ops by their bytes; the LM head only for the last position.
- Decoding one token per sequence is bandwidth-bound: each step reads every weight once and the whole KV cache
  for a few FLOPs per byte (2·batch FLOPs per weight: arithmetic intensity ≈ batch), so its time is ≈ (weight
  bytes + KV cache bytes) / memory bandwidth until the batch reaches the device's FLOP/byte ratio (Pope et al.
  2022, "Efficiently Scaling Transformer Inference", arXiv:2211.05102, Sec. 2 and 3.1). Each kernel takes the
  longer of its FLOPs at the matmul rate and its bytes at the bandwidth; the KV cache read is evaluated at the
  mean context of the generation (prompt + gen/2 positions; exact for the parts linear in it).
- Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053, Sec. 3) splits the heads and the MLP
  over tp GPUs and adds two all-reduces of the activations per layer (after attention and after the MLP), timed
  by account.time.comm on the node's link.
- Fixed costs: every operator dispatched costs the device's per-op overhead (0 for datasheet GPUs; measured on a
  calibrated CPU: `decode_op_overhead_seconds`); the operator counts are account.time.inference_ops's. On a CPU the
  overhead adds to the arithmetic (one thread of control does both); on a GPU the CPU's launches and the GPU's
  kernels overlap and the longer sets the pace.
Not modelled: batching with different lengths (paged attention, continuous batching), speculative decoding,
the arithmetic of dequantizing inside a fused kernel (taken as hidden under its bytes), bitsandbytes int8's int8 tensor-core rate and outlier columns (its matmuls are timed at the bf16 rate), the sampling's own FLOPs, CUDA graphs (which remove launch overhead), a
GPU's fixed time per kernel (GPUSpec.kernel_overhead_seconds: it depends on how many kernels an implementation
launches; fused inference engines launch far fewer than our eager model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from trainledger.account.time.comm import collective_seconds
from trainledger.account.time.inference_ops import decode_step_ops, forward_ops
from trainledger.account.time.kernels import ew, gemm
from trainledger.account.counting.placement import check_positive_int, params_per_gpu
from trainledger.account.memory.per_gpu import ALLOCATOR_SLACK_FRACTION, cuda_reserve_bytes
from trainledger.account.time.roofline import Kernel, gemm_efficiency, kernel_seconds, memory_seconds
from trainledger.errors import TrainledgerError
from trainledger.specs.dtypes import get_dtype

QUANTIZED = ("nf4", "nf4-dq", "int8", "int4")   # weights-only: account.finetune.quant.inference_weight_bytes
DTYPES = ("bf16", "fp16", "fp32", "fp8") + QUANTIZED
KV_DTYPES = ("bf16", "fp16", "fp32", "fp8")      # the cache is written and read by bf16 attention: no packed codes
# bitsandbytes 0.50 backends/cuda/ops.py (gemm_4bit): past this many rows a 4-bit Linear dequantizes its weight into
# a bf16 copy and calls F.linear; at most this many it runs the fused kernel that reads the packed bytes
BNB_4BIT_FUSED_MAX_ROWS = 1536
SKINNY_ROWS = 64      # GEMMs with at most this many rows are timed without tile quantization (see _kernel_time)
PARTS = ("weights_read", "kv_cache_read", "compute", "attention", "memory_bound", "overhead", "tp_comm")
WORDS = {
    "weights_read": "memory bandwidth, reading the weights",
    "kv_cache_read": "memory bandwidth, reading the KV cache",
    "compute": "compute (matrix multiplications)",
    "attention": "the attention core",
    "memory_bound": "memory-bound elementwise ops",
    "overhead": "per-operator dispatch overhead",
    "tp_comm": "tensor-parallel all-reduces",
}


@dataclass(frozen=True)
class InferenceRequest:
    """What a generation asks (`infer`'s flags, `generate`'s run): `batch_size` sequences of a `prompt_len`-token
    prompt and `gen_len` new tokens each, the weights in `dtype` and the KV cache in `kv_dtype` (None: `dtype`),
    tensor-parallel over `tp` GPUs, `reserve_bytes` per GPU kept back (None: what a CUDA process holds besides its
    tensors, account.memory.per_gpu.cuda_reserve_bytes of weights + KV cache); `cache` False: no KV cache, every step
    re-runs the whole sequence (`generate --no-cache`); `greedy`: argmax sampling, else top-k / top-p
    (account.time.inference_ops). `inference` checks each value and names the flag."""

    batch_size: int = 1
    prompt_len: int = 512
    gen_len: int = 128
    dtype: str = "bf16"
    kv_dtype: str | None = None
    tp: int = 1
    reserve_bytes: float | None = 0.0
    cache: bool = True
    greedy: bool = True


def check_dtype(name: str, allowed: tuple[str, ...], flag: str) -> str:
    """The canonical name of `name` ('bfloat16' -> 'bf16', 'fp8-e4m3' -> 'fp8') if it is one of `allowed`."""
    if name in allowed and name in QUANTIZED:
        return name
    why = " (the KV cache holds bf16, fp16, fp32 or fp8 elements; weights-only quantization is --dtype)" if (
        name in QUANTIZED) else ""
    try:
        dtype = get_dtype(name, flag)
    except TrainledgerError:
        raise TrainledgerError(f"{flag} must be one of {', '.join(allowed)}, got {name!r}{why}", flag) from None
    key = "fp8" if dtype.peak_key == "fp8" else dtype.name
    if key not in allowed:
        raise TrainledgerError(f"{flag} must be one of {', '.join(allowed)}, got {name!r}{why}", flag)
    return key


def kv_heads_per_gpu(spec, tp: int) -> int:
    """KV heads one GPU caches: n_kv_heads / tp, or 1 when tp > n_kv_heads (each KV head replicated)."""
    check_positive_int(tp, "--tp")
    kv = spec.kv_heads
    if spec.n_heads % tp:
        raise TrainledgerError(f"--tp {tp} must divide n_heads={spec.n_heads} of '{spec.name}'")
    if kv % tp == 0:
        return kv // tp
    if tp % kv == 0:
        return 1
    raise TrainledgerError(f"--tp {tp} must divide n_kv_heads={kv} of '{spec.name}' or be a multiple of it")


def layer_positions(spec, layer: int, tokens: float) -> float:
    """Positions layer `layer` caches for a sequence of `tokens`: all, or its sliding window's last W."""
    return min(tokens, spec.sliding_window) if spec.is_sliding(layer) else tokens


def kv_cache_bytes(spec, batch_size: int, tokens: int, bytes_per_element: float, tp: int = 1) -> float:
    """Bytes of the KV cache on one GPU: Σ_layers batch · kv_heads · (head_dim + value_dim) · positions · bytes
    (module doc; value_dim = head_dim except under multi-head latent attention, whose full keys and values are
    cached, not the latent)."""
    check_positive_int(batch_size, "--batch-size")
    kv = kv_heads_per_gpu(spec, tp)
    per_position = batch_size * kv * (spec.head_dim + spec.value_dim) * bytes_per_element
    return sum(count * per_position * layer_positions(spec, layer, tokens) for layer, count in spec.layer_groups())


def weights_bytes(spec, bytes_per_element: float, tp: int = 1) -> float:
    """Bytes of the parameters one GPU holds (tensor-parallel parts divided by tp)."""
    return params_per_gpu(spec, tp)["n_params_per_gpu"] * bytes_per_element


def compute_dtype(dtype: str) -> str:
    """The dtype the matmuls run in: a weights-only quantized model (nf4, nf4-dq, int8, int4) computes in bf16."""
    return "bf16" if dtype in QUANTIZED else dtype


def _quantized(spec, request: InferenceRequest) -> dict | None:
    if request.dtype not in QUANTIZED:
        return None
    from trainledger.account.finetune.quant import inference_weight_bytes
    return inference_weight_bytes(spec, request.dtype, request.tp)


def _element_bytes(spec, request: InferenceRequest) -> tuple[float, float, float]:
    """(weights of the layers' Linears, activations, KV cache) bytes per element of a checked request: its --dtype
    (activations at least 16-bit: fp8 and quantized weights compute in bf16) and its --kv-dtype. A quantized --dtype:
    the packed bytes + constants per weight (account.finetune.quant)."""
    q = _quantized(spec, request)
    if q is not None:
        return q["quantized_weight_bytes"] / q["quantized_params"], 2, get_dtype(request.kv_dtype).bytes
    w = get_dtype(request.dtype).bytes
    return w, max(w, 2), get_dtype(request.kv_dtype).bytes


def _layer_kernels(spec, layer: int, request: InferenceRequest, *, tokens: float, context: float,
                   prefill_len: int | None) -> list[Kernel]:
    """Kernels of one layer over `tokens` new positions (batch · 1 decoding, batch · prompt in prefill) against
    `context` cached positions, for `request`'s batch, dtypes and tp."""
    w, a, kv = _element_bytes(spec, request)
    batch, tp, dtype = request.batch_size, request.tp, compute_dtype(request.dtype)
    # a 4-bit bitsandbytes weight over more than BNB_4BIT_FUSED_MAX_ROWS rows is dequantized into a bf16 copy first
    # (a kernel reading the packed bytes and writing 2 a weight) and the bf16 GEMM reads that copy; fewer rows
    # (decoding) run bitsandbytes' fused gemm_4bit on the packed bytes. torchao's int4 (mslk bf16i4bf16_rowwise,
    # tinygemm) and bitsandbytes' int8 (int8_scaled_mm) read the packed weight at any row count.
    dequant = request.dtype in ("nf4", "nf4-dq") and tokens > BNB_4BIT_FUSED_MAX_ROWS
    copies = []
    d, dh = spec.d_model, spec.head_dim
    h, k = spec.n_heads / tp, kv_heads_per_gpu(spec, tp)
    f = (spec.dense_d_ff if (spec.is_moe and spec.dense_d_ff and not spec.is_moe_layer(layer)) else spec.d_ff) / tp
    out = [ew("norms", 2 * 2 * tokens * d * a, count=2)]

    def linear(name, fan_in, fan_out, times=1.0, rows=tokens):
        """`times` Linears over `rows` tokens each: 2·rows·in·out FLOPs apiece; reads the inputs and the weights in
        --dtype (w bytes), writes the outputs (a bytes)."""
        shape = gemm(name, rows, fan_out, fan_in, a, dtype).shape           # (m, n, k, 1), rounded for the tiles
        read = w
        if dequant:
            copies.append(ew(f"dequantize_{name}", fan_in * fan_out * (w + 2) * times))
            read = 2
        moved = (rows * fan_in + rows * fan_out) * a * times + fan_in * fan_out * read * times
        return Kernel(name, "compute", "gemm", 2.0 * rows * fan_in * fan_out * times, moved, shape, dtype, 1)

    for name, width in (("q_proj", h * dh), ("k_proj", k * dh), ("v_proj", k * dh), ("o_proj", h * dh)):
        out.append(linear(name, d if name != "o_proj" else width, width if name != "o_proj" else d))
    if spec.position == "rope":
        out.append(ew("rope", 5 * 2 * tokens * (h + k) * dh * a, count=10))
    out.append(ew("kv_cache_write", 2 * 2 * tokens * k * dh * kv, count=2))
    positions = layer_positions(spec, layer, context)
    if prefill_len is None:         # one query per sequence against the cache: read all of it
        flops = 2 * 2 * batch * h * positions * dh
        moved = 2 * batch * k * positions * dh * kv + 2 * tokens * h * dh * a
        out.append(Kernel("attention_decode", "attention", "attention_decode", flops, moved, (batch, positions, dh),
                          dtype, 1))
    else:                           # the causal core over the prompt (a window is an additive mask: the full square)
        full = 2 * 2 * batch * h * prefill_len * prefill_len * dh
        masked = spec.is_sliding(layer) or spec.position == "alibi" or spec.attn_softcap is not None
        io = batch * prefill_len * (2 * h + 2 * k) * dh * a
        out.append(Kernel("flash_attention", "attention", "flash_attention", full if masked else full / 2, io,
                          (prefill_len, False, not masked), dtype, 1))
    if spec.is_moe_layer(layer):
        busy = min(spec.n_experts, tokens * spec.experts_per_token)
        mats = 3 if spec.gated_mlp else 2
        out.append(linear("router", d, spec.n_experts))
        # each token runs through k experts; the weights of every busy expert are read once
        per_expert_rows = tokens * spec.experts_per_token / busy
        for name in ("expert_up",) * (mats - 1) + ("expert_down",):
            fan_in, fan_out = (d, spec.d_ff / tp) if name == "expert_up" else (spec.d_ff / tp, d)
            out.append(linear(name, fan_in, fan_out, times=busy, rows=per_expert_rows))
        if spec.shared_expert_d_ff:
            fs = spec.shared_expert_d_ff / tp
            out += [linear("shared_up", d, fs)] * (mats - 1) + [linear("shared_down", fs, d)]
    else:
        ups = ("mlp_gate", "mlp_up") if spec.gated_mlp else ("mlp_up",)
        out += [linear(name, d, f) for name in ups] + [linear("mlp_down", f, d)]
        out.append(ew("activation", (5 if spec.gated_mlp else 2) * tokens * f * a, count=2 if spec.gated_mlp else 1))
    out.append(ew("residual_adds", 2 * 3 * tokens * d * a, count=2))
    return out + copies


def _edge_kernels(spec, request: InferenceRequest, tokens: float, logits_rows: float) -> list[Kernel]:
    """Embedding lookup, final norm and the LM head over `logits_rows` positions, in `request`'s dtypes and tp."""
    w, a, _ = _element_bytes(spec, request)
    dtype, d, v = compute_dtype(request.dtype), spec.d_model, spec.vocab_size / request.tp
    if request.dtype in QUANTIZED:
        w = 2                       # the LM head stays bf16 (transformers' get_keys_to_not_convert)
    head = gemm("lm_head", logits_rows, v, d, a, dtype)
    moved = d * v * w + logits_rows * (d * a + v * 4)
    return [ew("embedding", tokens * d * 2 * a), ew("final_norm", 2 * logits_rows * d * a),
            Kernel("lm_head", "compute", "gemm", head.flops, moved, head.shape, dtype, 1)]


def _kernel_time(gpu, kernel: Kernel, working_set: float) -> tuple[str, float]:
    """(part, seconds) of one kernel: the longer of its FLOPs at the achieved rate and its bytes at the bandwidth.

    GEMMs and the decoding attention read data that is touched again only at the next step: their bytes stream at
    the rate measured for `working_set` bytes (a calibrated CPU's caches hold a small model's weights)."""
    if kernel.kind == "elementwise":
        return kernel.part, memory_seconds(gpu, kernel.bytes, kernel.bytes)
    if kernel.kind == "flash_attention":
        return "attention", kernel_seconds(gpu, kernel)
    peak = gpu.peak(kernel.dtype)
    if kernel.kind == "gemm":
        m, n, k, batch = kernel.shape
        shape = (m, n, k, batch)
    else:                           # decoding attention: one query per sequence against `positions` keys
        b, positions, dh = kernel.shape
        shape = (max(1, b), max(1, round(positions)), dh, 1)
    eff = gemm_efficiency(gpu, shape[0], shape[1], shape[2], kernel.dtype, shape[3])
    # a skinny GEMM (a few rows: decoding) runs as a memory-bound GEMV-like kernel, not in tensor-core output
    # tiles: the measured rate without wave quantization, whose 128-row tiles would waste all but m of their rows
    efficiency = eff["measured"] if shape[0] <= SKINNY_ROWS else eff["efficiency"]
    compute = kernel.flops / (peak * efficiency)
    memory = memory_seconds(gpu, kernel.bytes, working_set)
    if compute >= memory:
        return ("compute" if kernel.kind == "gemm" else "attention"), compute
    return ("weights_read" if kernel.kind == "gemm" else "kv_cache_read"), memory


def _pass_seconds(spec, gpu, request: InferenceRequest, *, tokens: float, context: float, prefill_len: int | None,
                  logits_rows: float, n_ops: int) -> dict:
    """Seconds of one forward (a decoding step or the prefill) of `request` on one GPU, by part (PARTS): `tokens`
    new positions against `context` cached ones, the logits of `logits_rows`, `n_ops` operators dispatched."""
    tp, a = request.tp, _element_bytes(spec, request)[1]
    kernels = []
    for layer, count in spec.layer_groups():
        kernels += [(k, count) for k in _layer_kernels(spec, layer, request, tokens=tokens, context=context,
                                                       prefill_len=prefill_len)]
    kernels += [(k, 1) for k in _edge_kernels(spec, request, tokens, logits_rows)]
    working_set = sum(k.bytes * count for k, count in kernels)
    parts = {part: 0.0 for part in PARTS}
    for kernel, count in kernels:
        part, seconds = _kernel_time(gpu, kernel, working_set)
        parts[part] += seconds * count
    if tp > 1:
        link = gpu.intra_node_link
        if link is None:
            raise TrainledgerError(f"--tp {tp}: {gpu.name} has no published link between GPUs; use --tp 1")
        per_call = collective_seconds("all_reduce", tokens * spec.d_model * a, tp, link)
        parts["tp_comm"] = 2 * spec.n_layers * per_call         # Megatron-LM: after attention and after the MLP
    overhead = n_ops * op_overhead_seconds(gpu)
    if is_cpu(gpu):
        parts["overhead"] = overhead
    else:                           # launches overlap the GPU's kernels: the longer timeline sets the pace
        parts["overhead"] = max(0.0, overhead - sum(parts.values()))
    parts["total"] = sum(parts[p] for p in PARTS)
    parts["working_set_bytes"] = working_set
    return parts


def is_cpu(gpu) -> bool:
    """Whether ops run one after the other on `gpu` (a calibrated CPU: GPUSpec.async_launch False), so dispatch and
    arithmetic add; on an accelerator the CPU launches ahead and the longer timeline counts."""
    return not gpu.async_launch


def op_overhead_seconds(gpu) -> float:
    """Seconds per dispatched operator when decoding: the calibrated inference figure, else the training one."""
    value = getattr(gpu, "decode_op_overhead_seconds", None)
    return value if value is not None else gpu.op_overhead_seconds


def bottleneck(parts: dict) -> str:
    """The largest part of a decoding step, in words, with its share."""
    total = sum(parts[p] for p in PARTS)
    part = max(PARTS, key=lambda p: parts[p])
    share = parts[part] / total if total else 0.0
    return f"{WORDS[part]}: {share:.0%} of a decoding step"


def inference(spec, gpu, request: InferenceRequest = InferenceRequest()) -> dict:
    """Memory and time of generating `gen_len` tokens after a `prompt_len` prompt for `batch_size` sequences on `gpu`
    as `request` (an InferenceRequest) asks (module docstring). `cache=False`: no KV cache, every step re-runs the
    whole sequence (what `generate --no-cache` does): each step is a prefill of the sequence so far, with the
    logits of every position."""
    batch_size, prompt_len, gen_len, tp = request.batch_size, request.prompt_len, request.gen_len, request.tp
    reserve_bytes, cache, greedy = request.reserve_bytes, request.cache, request.greedy
    for value, flag in ((batch_size, "--batch-size"), (prompt_len, "--prompt-len"), (gen_len, "--gen-len"),
                        (tp, "--tp")):
        check_positive_int(value, flag)
    if spec.kind != "transformer":
        raise TrainledgerError(f"inference accounting needs a transformer; '{spec.name}' is a {spec.kind} (--model)")
    if reserve_bytes is not None and (reserve_bytes < 0 or not math.isfinite(reserve_bytes)):
        raise TrainledgerError(f"--reserve must be a non-negative size, got {reserve_bytes!r}")
    dtype = check_dtype(request.dtype, DTYPES, "--dtype")
    kv_dtype = check_dtype(request.kv_dtype or compute_dtype(dtype), KV_DTYPES, "--kv-dtype")
    if dtype in QUANTIZED and "bf16" not in gpu.peak_flops_per_s:
        raise TrainledgerError(f"--dtype {dtype} keeps the weights packed and runs the matmuls in bf16; {gpu.name} has "
                               f"no bf16 matmul peak (it has {', '.join(gpu.peak_flops_per_s)}): use --dtype fp32 "
                               "or a GPU", "--dtype")
    gpu.peak(compute_dtype(dtype))                   # a device without this dtype's peak: an error naming --dtype
    request = replace(request, dtype=dtype, kv_dtype=kv_dtype)
    w, a, kv = _element_bytes(spec, request)         # fp8 weights: activations stay 16-bit
    tokens = prompt_len + gen_len
    quant = _quantized(spec, request)
    weights = quant["total_bytes"] if quant else weights_bytes(spec, w, tp)
    kv_total = kv_cache_bytes(spec, batch_size, tokens, kv, tp) if cache else 0.0
    kv_one = kv_cache_bytes(spec, 1, tokens, kv, tp)
    reserve_parts = None
    if reserve_bytes is None:                        # automatic: the CUDA reserve of this peak (module docstring)
        reserve_parts = cuda_reserve_bytes(weights + kv_total)
        reserve_bytes = reserve_parts["total"]
        fixed, scale = reserve_parts["context"] + reserve_parts["workspaces"], 1.0 + ALLOCATOR_SLACK_FRACTION
        free = (gpu.memory_bytes - fixed) / scale - weights
    else:
        free = gpu.memory_bytes - weights - reserve_bytes
    max_batch = max(0, math.floor(free / kv_one)) if kv_one > 0 else 0
    prefill = _pass_seconds(spec, gpu, request, tokens=batch_size * prompt_len, context=prompt_len,
                            prefill_len=prompt_len, logits_rows=batch_size * (1 if cache else prompt_len),
                            n_ops=forward_ops(spec, False, batch_size, prompt_len) + 4)
    if cache:
        context = prompt_len + gen_len / 2           # mean positions a decoding step reads
        decode = _pass_seconds(spec, gpu, request, tokens=batch_size, context=context, prefill_len=None,
                               logits_rows=batch_size, n_ops=decode_step_ops(spec, batch_size, greedy))
        step_seconds = decode["total"]
    else:                                            # step j re-runs prompt + j tokens; the mean over the steps
        steps = [_pass_seconds(spec, gpu, request, tokens=batch_size * (prompt_len + j), context=prompt_len + j,
                               prefill_len=prompt_len + j, logits_rows=batch_size * (prompt_len + j),
                               n_ops=forward_ops(spec, False, batch_size, prompt_len + j) + 4)
                 for j in _sample_steps(gen_len)]
        decode = {key: sum(s[key] for s in steps) / len(steps) for key in steps[0]}
        step_seconds = decode["total"]
    prefill_seconds = prefill["total"]
    total = prefill_seconds + (gen_len - 1) * step_seconds
    result = {
        "model": spec.name, "gpu": gpu.name, "batch_size": batch_size, "prompt_len": prompt_len, "gen_len": gen_len,
        "dtype": dtype, "kv_dtype": kv_dtype, "tp": tp, "num_gpus": tp, "cache": cache,
        "kv_cache_bytes": kv_total, "kv_cache_bytes_per_sequence": kv_one, "weights_bytes": weights,
        "reserve_bytes": float(reserve_bytes), "reserve_parts": reserve_parts, "memory_bytes": weights + kv_total,
        "memory_per_gpu_bytes": gpu.memory_bytes, "fits": weights + kv_total + reserve_bytes <= gpu.memory_bytes,
        "max_batch_size": max_batch,
        "prefill_seconds": prefill_seconds, "prefill_tokens_per_s": batch_size * prompt_len / prefill_seconds,
        "decode_seconds_per_token": step_seconds, "time_to_first_token_seconds": prefill_seconds,
        "tokens_per_s": batch_size / step_seconds, "total_seconds": total,
        "end_to_end_tokens_per_s": batch_size * gen_len / total,
        "bottleneck": bottleneck(decode), "prefill_bottleneck": bottleneck(prefill).replace("a decoding step", "the prefill"),
        "prefill_breakdown": {p: prefill[p] for p in PARTS}, "decode_breakdown": {p: decode[p] for p in PARTS},
        "decode_ops": decode_step_ops(spec, batch_size, greedy) if cache else None,
        "op_overhead_seconds": op_overhead_seconds(gpu),
        "quantized_weight_bytes": quant["quantized_weight_bytes"] if quant else None,
        "unquantized_weight_bytes": quant["other_params_bytes"] if quant else None,
        "quantized_params": quant["quantized_params"] if quant else None,
        "quantization_library": quant["library"] if quant else None,
    }
    result["assumptions"] = _assumptions(spec, gpu, result)
    return result


def _sample_steps(gen_len: int, most: int = 64) -> list[int]:
    """The decoding steps j = 1 .. gen_len − 1 (at most `most` of them, evenly spaced) whose mean stands for all."""
    if gen_len <= 1:
        return [1]
    n = gen_len - 1
    if n <= most:
        return list(range(1, gen_len))
    return sorted({1 + round(i * (n - 1) / (most - 1)) for i in range(most)})


def _assumptions(spec, gpu, r: dict) -> list[str]:
    if r["quantized_params"]:
        weights = (f"weights-only {r['dtype']} ({r['quantization_library']}): the layers' Linears, "
                   f"{8 * r['quantized_weight_bytes'] / r['quantized_params']:.3f} bits a weight with its constants; "
                   "embeddings, norms, biases and the LM head stay bf16; matmuls in bf16 reading the packed weight "
                   f"(bitsandbytes 4-bit over more than {BNB_4BIT_FUSED_MAX_ROWS} rows: dequantized into a bf16 copy "
                   "first)")
    else:
        weights = f"weights in {r['dtype']}"
    lines = [f"{weights}, KV cache in {r['kv_dtype']}, activations in "
             f"{'bf16' if r['dtype'] in ('fp8',) + QUANTIZED else r['dtype']}; positions cached = prompt + generated = "
             f"{r['prompt_len'] + r['gen_len']} per sequence"
             + (" (sliding-window layers keep their last " f"{spec.sliding_window})" if spec.sliding_window else ""),
             "decoding reads every weight and the KV cache at the mean context once per step (bandwidth-bound: "
             "Pope et al. 2022); prefill runs the prompt's GEMMs on the measured matmul roofline",
             "the largest batch: (memory − weights − reserve) / KV cache of one sequence; no activation workspace, "
             "the LM head over the last position only"]
    if r["tp"] > 1:
        lines.append(f"tensor parallel over {r['tp']} GPUs: heads, MLP and vocabulary split, two all-reduces per layer "
                     f"on {gpu.intra_node_link.name}")
    if r["op_overhead_seconds"]:
        lines.append(f"{r['decode_ops']} operators per decoding step × {r['op_overhead_seconds'] * 1e6:.2f} µs of "
                     "dispatch each (this machine's calibration)" if r["decode_ops"] else
                     f"{r['op_overhead_seconds'] * 1e6:.2f} µs of dispatch per operator (this machine's calibration)")
    if not r["fits"]:
        lines.append("does NOT fit: weights + KV cache + reserve exceed the memory of one GPU")
    return lines
