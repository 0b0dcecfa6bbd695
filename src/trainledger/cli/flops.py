"""`trainledger flops`: forward, training and hardware FLOPs of a model, per token and per step."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.cli.plan import ATTENTION_WORDS, load_transformer, print_table, seq_len_assumption, seq_len_warnings

HELP = "FLOPs of --model at --batch-size and --seq-len: forward, train (3×), hardware (with recomputation)"
DESCRIPTION = """FLOPs of one training step (account/counting/flops.py).

Counted: every matmul a token passes through (q, k, v with grouped-query sizes, o, the MLP's 2 or 3
matrices, MoE router + experts_per_token experts, the LM head at every position) as 2·in·out, plus
attention scores QKᵀ and A·V (--attention full: the whole T×T, PaLM/nanoGPT; causal: half, Megatron).
Backward = 2 × forward, train = 3 × forward. Hardware FLOPs add recomputation: selective re-runs the
attention core (Korthikanti et al. 2022), full re-runs each layer's forward (Narayanan et al. 2021).
Not counted: biases, norms, softmax, activations, embedding lookups, loss, optimizer step.

Batches, as in every command: --batch-size is the micro-batch (sequences per GPU per forward/backward);
--global-batch-size is the sequences per optimizer step over all GPUs and accumulation steps (default:
one micro-batch). FLOPs per step are for the global batch; FLOPs do not depend on how it is split.
Default --seq-len: the context the model was pre-trained at.

examples:
  trainledger flops --model gpt2 --batch-size 8 --seq-len 1024
  trainledger flops --model llama-2-7b --seq-len 4096 --attention causal --recompute selective
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="preset name or Hugging Face config.json path")
    parser.add_argument("--batch-size", type=common.positive_int, default=1, help="micro-batch: sequences per GPU per forward/backward (default 1)")
    parser.add_argument("--global-batch-size", type=common.positive_int,
                        help="sequences per optimizer step over all GPUs and accumulation (default: --batch-size)")
    parser.add_argument("--seq-len", type=common.positive_int, help="tokens per sequence (default: the context the model was pre-trained at)")
    parser.add_argument("--attention", choices=("full", "causal"), default="full", help="attention-score convention (default full)")
    parser.add_argument("--recompute", choices=common.RECOMPUTE_CHOICES, default="none", help=common.RECOMPUTE_HELP)
    from trainledger.cli.measure import add_impl_flags
    add_impl_flags(parser)
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.counting import flops as F
    from trainledger.errors import TrainledgerError
    from trainledger.cli.measure import hf_impl_of
    impl = hf_impl_of(args)
    spec, seq_len = load_transformer(args.model, args.seq_len)
    global_batch = args.global_batch_size or args.batch_size
    if global_batch % args.batch_size:
        raise TrainledgerError(f"--global-batch-size {global_batch} must be a multiple of the micro-batch --batch-size "
                               f"{args.batch_size} (global = micro-batch × GPUs × accumulation steps)")
    result = {"model": spec.name, "batch_size": args.batch_size, "global_batch_size": global_batch, "seq_len": seq_len,
              "attention": args.attention, "recompute": args.recompute,
              **F.flops_per_step(spec, global_batch, seq_len, args.attention, args.recompute),
              "forward_flops_per_token_breakdown": F.forward_flops_breakdown(spec, seq_len, args.attention),
              "matmul_params_per_token": F.matmul_params_per_token(spec)}
    result["assumptions"] = [
        seq_len_assumption(spec, seq_len, args.seq_len),
        f"attention {args.attention}: {ATTENTION_WORDS[args.attention]} (--attention)",
        f"a step is the global batch: {global_batch} sequence{'s' if global_batch > 1 else ''} (--global-batch-size; "
        f"micro-batch {args.batch_size} per GPU, --batch-size)",
        "matmul FLOPs = 2·m·k·n; backward = 2 × forward; LM head at all positions; biases, norms, softmax, "
        "elementwise ops and embedding lookups excluded",
        f"hardware FLOPs = model FLOPs + recompute '{args.recompute}'",
    ]
    if getattr(spec, "sliding_window", None) and seq_len > spec.sliding_window:
        windowed = sum(count for i, count in spec.layer_groups() if spec.is_sliding(i))
        result["assumptions"].append(f"sliding window of {spec.sliding_window} tokens in {windowed} of {spec.n_layers} "
                                     "layers: counted over the full T×T, as our kernels compute it before masking")
    if impl is not None:
        result["impl"], result["attn_impl"] = "hf", impl.attn_impl
        result["assumptions"].append(f"--impl hf: transformers' {impl.model_type} runs the same matmuls ({impl.attn_impl} "
                                     "attention computes the same QKᵀ and A·V; MoE experts by grouped_mm): the same FLOPs")
    result["assumptions"] += common.approximation_notes(spec)
    if seq_len_warnings(spec, seq_len):
        result["warnings"] = seq_len_warnings(spec, seq_len)
    if getattr(spec, "kind", None) == "cruncher":  # the lecture's deep linear model: a "token" is one input vector
        result["assumptions"][:2] = [f"cruncher: a token is one {spec.dim}-dim input vector (seq_len 1), so a step is "
                                     f"{global_batch} vectors; no attention, the head is Linear({spec.dim}, 1)"]
    return result


def render(result: dict, args) -> None:
    per_token = result["forward_flops_per_token_breakdown"]
    rows = [(f"forward/token: {name}", units.format_flops(value)) for name, value in per_token.items() if name != "total"]
    rows += [
        ("forward FLOPs per token", units.format_flops(result["forward_flops_per_token"])),
        ("train FLOPs per token", units.format_flops(result["train_flops_per_token"])),
        (f"tokens per step ({result['global_batch_size']} × {result['seq_len']})", f"{result['tokens_per_step']:,}"),
        ("forward FLOPs per step", units.format_flops(result["forward_flops_per_step"])),
        ("train FLOPs per step", units.format_flops(result["train_flops_per_step"])),
        (f"hardware FLOPs per step (recompute {result['recompute']})", units.format_flops(result["hardware_flops_per_step"])),
    ]
    print_table(f"FLOPs of {result['model']}", rows, result["assumptions"])
