"""`trainledger infer`: KV cache, weights, largest batch, prefill and decoding time of a model on a GPU."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.errors import TrainledgerError
from trainledger.cli.plan import print_table

HELP = "inference: KV cache and weight bytes, the largest batch that fits, prefill time, decoding tokens/s, bottleneck"
DESCRIPTION = """Serving --batch-size sequences of --prompt-len prompt tokens and --gen-len new tokens each (account/time/inference.py):

  KV cache bytes  = Σ_layers 2 · batch · kv_heads · head_dim · (prompt + gen) · bytes of --kv-dtype
                    (grouped-/multi-query attention caches fewer heads; a sliding-window layer its last W positions)
  weights bytes   = parameters per GPU · bytes of --dtype (fp8: 1 byte a weight, activations in bf16; nf4, nf4-dq,
                    int8, int4: the layers' Linears packed as bitsandbytes / torchao store them, the rest bf16)
  largest batch   = (GPU memory − weights − --reserve) / KV cache bytes of one sequence
  prefill         = the prompt's forward, compute-bound: GEMMs on the measured matmul roofline, causal attention;
                    time to first token = prefill
  decoding step   = one new token per sequence, bandwidth-bound: every weight and the KV cache read once per step
                    (Pope et al. 2022); tokens/s = batch / seconds per step
With --tp N the heads and MLP split over N GPUs, which add two all-reduces per layer; all figures are per GPU.
--gpu cpu / cuda uses this machine's calibration (`trainledger bench --calibrate`), as `generate` does.

examples:
  trainledger infer --model llama-3-8b --gpu h100 --batch-size 32 --prompt-len 8064 --gen-len 128
  trainledger infer --model llama-3-70b --gpu h100 --tp 8 --batch-size 1 --prompt-len 512 --gen-len 256
  trainledger infer --model mistral-7b --gpu a100 --batch-size 8 --prompt-len 16384 --gen-len 512 --kv-dtype fp8
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="preset name or Hugging Face config.json path")
    parser.add_argument("--gpu", default="h100", help="accelerator (`trainledger hardware`; cpu/cuda: this machine, "
                                                      "calibrated) (default h100)")
    parser.add_argument("--batch-size", type=common.positive_int, default=1, help="sequences decoded together (default 1)")
    parser.add_argument("--prompt-len", type=common.positive_int, default=512, help="prompt tokens per sequence (default 512)")
    parser.add_argument("--gen-len", type=common.positive_int, default=128, help="new tokens per sequence (default 128)")
    parser.add_argument("--dtype", default=None, help="weights and matmuls: bf16, fp16, fp32 or fp8; or weights-only "
                        "quantized nf4, nf4-dq, int8 (bitsandbytes) or int4 (torchao, group 128): the layers' Linears "
                        "quantized, embeddings/norms/LM head bf16, matmuls bf16 (default: bf16; fp32 on a device "
                        "without a bf16 peak, e.g. --gpu cpu, as `step` picks)")
    parser.add_argument("--kv-dtype", default=None, help="KV cache elements: bf16, fp16, fp32 or fp8 (default: --dtype; bf16 "
                        "for a quantized --dtype)")
    parser.add_argument("--tp", type=common.positive_int, default=1, help="tensor-parallel GPUs (default 1)")
    from trainledger.cli.reserve import reserve_size
    parser.add_argument("--reserve", type=reserve_size, default=None,
                        help="bytes per GPU kept back besides weights and KV cache, e.g. 4GiB; 'auto' (the default, "
                             "as `memory` and `step` keep back: on NVIDIA and AMD GPUs the CUDA context + two cuBLAS "
                             "workspaces + 10%% of the peak for the caching allocator, account/memory/per_gpu.py; 0 on "
                             "other devices); 'expandable' (context and workspaces only)")
    parser.add_argument("--no-cache", dest="cache", action="store_false",
                        help="no KV cache: each step re-runs the whole sequence (what `generate --no-cache` does)")
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.time.inference import InferenceRequest, inference
    from trainledger.specs import get_model

    spec = get_model(args.model)
    gpu = common.resolve_gpu(args.gpu)
    dtype, note = default_dtype(args.dtype, gpu)
    from trainledger.cli.reserve import reserve_of
    context = args.prompt_len + args.gen_len
    max_len = getattr(spec, "max_seq_len", None)             # a transformer's; inference() refuses the others
    if max_len and context > max_len:     # positions the model has none for: no answer to give
        flag = "--prompt-len" if args.prompt_len >= max_len else "--gen-len"
        raise TrainledgerError(f"--prompt-len {args.prompt_len:,} + --gen-len {args.gen_len:,} = {context:,} tokens is "
                               f"beyond the {max_len:,}-token context of '{spec.name}' (its "
                               "max_position_embeddings): shorten the prompt or the generation", flag)
    request = InferenceRequest(batch_size=args.batch_size, prompt_len=args.prompt_len, gen_len=args.gen_len,
                               dtype=dtype, kv_dtype=args.kv_dtype, tp=args.tp, reserve_bytes=reserve_of(args, gpu),
                               cache=args.cache)
    result = inference(spec, gpu, request)
    from trainledger.cli.memory import reserve_line
    result["assumptions"].append(reserve_line(result))
    warnings = common.outlandish(seq_len=context)
    if result["reserve_bytes"] >= gpu.memory_bytes:
        warnings.append(f"--reserve {units.format_bytes(result['reserve_bytes'])} is all of the "
                        f"{units.format_bytes(gpu.memory_bytes)} of {gpu.name}: nothing is left for the model; "
                        "lower --reserve")
    elif result["weights_bytes"] > gpu.memory_bytes:
        warnings.append(f"the weights alone need {units.format_bytes(result['weights_bytes'])} per GPU, more than the "
                        f"{units.format_bytes(gpu.memory_bytes)} of {gpu.name}: use --tp or --dtype fp8")
    elif result["weights_bytes"] + result["reserve_bytes"] > gpu.memory_bytes:
        warnings.append(f"the weights ({units.format_bytes(result['weights_bytes'])} per GPU) and --reserve "
                        f"{units.format_bytes(result['reserve_bytes'])} exceed the {units.format_bytes(gpu.memory_bytes)} "
                        f"of {gpu.name}: lower --reserve, or use --tp or --dtype fp8")
    elif not result["fits"]:
        warnings.append(f"weights + KV cache need {units.format_bytes(result['memory_bytes'] + result['reserve_bytes'])} "
                        f"per GPU, more than the {units.format_bytes(gpu.memory_bytes)} of {gpu.name}: lower "
                        f"--batch-size (at most {result['max_batch_size']}), use --kv-dtype fp8 or --tp")
    result["assumptions"] = common.approximation_notes(spec) + ([note] if note else []) + result["assumptions"]
    if warnings:
        result["warnings"] = warnings
    return result


def default_dtype(asked: str | None, gpu) -> tuple[str, str | None]:
    """(dtype, note): `asked`, or by default bf16, fp32 on a device without a bf16 peak (a CPU), said once."""
    if asked is not None:
        return asked, None
    if "bf16" in gpu.peak_flops_per_s:
        return "bf16", None
    return "fp32", f"--dtype fp32 (default here: {gpu.name} has no bf16 matmul peak; bf16 elsewhere)"


def render(result: dict, args) -> None:
    f = units.format_seconds
    rows = [
        ("KV cache", f"{units.format_bytes(result['kv_cache_bytes'])} ({units.format_bytes(result['kv_cache_bytes_per_sequence'])} "
                     "per sequence)"),
        ("weights", units.format_bytes(result["weights_bytes"]) + (
            f" ({units.format_bytes(result['quantized_weight_bytes'])} {result['dtype']} Linears + "
            f"{units.format_bytes(result['unquantized_weight_bytes'])} bf16 embeddings, norms, LM head)"
            if result.get("quantized_params") else "")),
        (f"memory per GPU ({result['gpu']})", f"{units.format_bytes(result['memory_bytes'])} of "
                                              f"{units.format_bytes(result['memory_per_gpu_bytes'])}: "
                                              f"{'fits' if result['fits'] else 'does NOT fit'}"),
        ("largest batch that fits", f"{result['max_batch_size']:,}"),
        ("prefill (time to first token)", f"{f(result['prefill_seconds'])} ({units.format_count(result['prefill_tokens_per_s'])} "
                                          "tokens/s)"),
        ("decoding step", f(result["decode_seconds_per_token"])),
        ("decoding tokens/s", f"{units.format_count(result['tokens_per_s'])} ({units.count_of(result['batch_size'], 'sequence')})"),
        ("all tokens", f"{f(result['total_seconds'])} ({units.format_count(result['end_to_end_tokens_per_s'])} tokens/s "
                       "end to end)"),
        ("bottleneck", result["bottleneck"]),
    ]
    for part, seconds in sorted(result["decode_breakdown"].items(), key=lambda kv: -kv[1]):
        if seconds > 0:
            rows.append((f"  decoding: {part.replace('_', ' ')}", f"{f(seconds)} "
                         f"({100 * seconds / result['decode_seconds_per_token']:.0f}%)"))
    title = (f"Inference of {result['model']} on {result['num_gpus']} × {result['gpu']}: batch {result['batch_size']}, "
             f"{result['prompt_len']} + {result['gen_len']} tokens, {result['dtype']} (KV cache {result['kv_dtype']})")
    print_table(title, rows, result["assumptions"])
