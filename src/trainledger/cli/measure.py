"""`trainledger measure`: predicted vs measured parameters, FLOPs and memory of one training step."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common
from trainledger.errors import TrainledgerError

HELP = "predicted vs measured params, FLOPs and memory of one training step (fake tensors by default)"
DESCRIPTION = """Runs one training step — forward, backward, optimizer step — and puts what account/ predicts
beside what was measured, with the relative error (predicted - measured) / measured.

Measured: n_params from the module; FLOPs by torch's FlopCounterMode plus the CPU flash-attention kernel it
misses (model FLOPs with recompute off; with --recompute the counted total is the hardware FLOPs);
bytes by a live-storage tracker: params, grads, optimizer states, activations (what the forward leaves
alive for backward) and the peak of the first step (the batch itself excluded). A second step measures the
peak of every later step (the optimizer states now exist through forward and backward: the steady state of a
run). "reserved" is what PyTorch's CUDA caching allocator holds for both steps: measured by torch.cuda on
--device cuda, else replayed from the steps' allocations (measure/allocator.py); predicted = the later
step's peak + the allocator's cache and cuBLAS workspaces (account.memory.per_gpu.cuda_reserve_bytes). A CUDA
process holds its context (~0.6 GiB) besides.

--device fake (default) runs on FakeTensorMode: shapes and dtypes only, no memory, any model size;
meta runs no kernels (SDPA takes its math path); cpu / cuda run for real, after checking that the
predicted peak fits in the RAM (or the free GPU memory, with the allocator's reserve) available: otherwise
exit 2 with the numbers and the largest batch that fits (TRAINLEDGER_NO_MEMORY_CHECK=1 runs anyway).

--finetune full|lora|qlora measures a fine-tuning step on real tensors (--device cpu or cuda, --precision fp32
or bf16): trainable and frozen parameters, the frozen/quantized base, adapters' grads and states, activations,
host bytes of --activation-offload and the peak, beside account.memory.per_gpu (cli/measure_finetune.py).

Defaults as in `trainledger memory`: --precision amp-bf16, --seq-len the context the model was
pre-trained at, --batch-size 1 (the micro-batch of the one measured step).

--model NAME|config.json builds trainledger's own Transformer. --model package.module:factory measures
your own nn.Module: factory(batch_size, seq_len) returns (model, inputs, loss_fn) where inputs is a tuple
passed as model(*inputs) and loss_fn(output) returns the scalar loss (or returns (model, inputs) and the
output must be the loss). There is no analytic prediction for such a module: only measurements.
--impl hf predicts and measures Hugging Face transformers' own model built from the config.json
(GPT2LMHeadModel, LlamaForCausalLM, ...): the prediction follows transformers' code for that model_type
(account/memory/hf_activations.py: its activation functions, eager or SDPA attention, dropout masks in train
mode, KV-cache copies, the loss's labels). --attn-impl eager|sdpa picks the attention (default: what
transformers picks: sdpa, eager for gemma2 and mpt). All --precision recipes; mixed-* keep fp32 masters.

examples:
  trainledger measure --model gpt2 --batch-size 4 --seq-len 1024 --precision amp-bf16
  trainledger measure --model llama-2-7b --seq-len 4096 --recompute selective --json
  trainledger measure --model tiny --device cpu
  trainledger measure --model config.json --impl hf --attn-impl eager --precision amp-bf16 --device cpu
  torchrun --nproc_per_node 2 -m trainledger.cli.main measure --model tiny --comm --tp 2 --seq-len 64

--comm (under torchrun) runs one forward and backward of a layout (--parallel, --tp, --sp, --pp,
--grad-accum) on random tokens and compares the bytes each rank sent in collectives, counted as they
ran, with account/'s prediction (the `comm_bytes` / `predicted_comm_bytes` of `train`'s records).
"""

ROWS = [("n_params", "parameters", "count"), ("forward_flops_per_step", "forward FLOPs / step", "flops"),
        ("train_flops_per_step", "train FLOPs / step", "flops"),
        ("hardware_flops_per_step", "hardware FLOPs / step", "flops"), ("params_bytes", "params", "bytes"),
        ("grads_bytes", "grads", "bytes"), ("master_params_bytes", "master params", "bytes"),
        ("optimizer_bytes", "optimizer states", "bytes"), ("activations_bytes", "activations", "bytes"),
        ("peak_bytes", "peak of the first step", "bytes"), ("later_step_peak_bytes", "peak of a later step", "bytes"),
        ("reserved_bytes", "reserved (CUDA allocator)", "bytes")]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, help="preset name, Hugging Face config.json path, or package.module:factory")
    parser.add_argument("--batch-size", type=common.positive_int, default=1, help="micro-batch: sequences in the measured step (default 1)")
    parser.add_argument("--seq-len", type=common.positive_int, help="tokens per sequence (default: the context the model was pre-trained at; 128 for a factory)")
    common.add_precision_flag(parser, "amp-bf16", "as in `memory`", refused=common.FP8_NOT_MEASURED)
    common.add_optimizer_flag(parser)
    parser.add_argument("--recompute", choices=("none", "selective", "full"), default="none", help="activation recomputation")
    parser.add_argument("--device", choices=("fake", "meta", "cpu", "cuda"), default="fake", help="where the step runs (default fake)")
    add_impl_flags(parser, "predict and measure")
    g = parser.add_argument_group("communication (--comm, under torchrun)")
    g.add_argument("--comm", action="store_true", help="measured vs predicted bytes sent per rank in one step of a layout")
    g.add_argument("--parallel", choices=("none", "ddp", "fsdp"), default="none", help="data parallelism (default none)")
    g.add_argument("--tp", type=common.positive_int, default=1, help="tensor-parallel ranks (default 1)")
    g.add_argument("--sp", action="store_true", help="sequence parallelism on the --tp ranks")
    g.add_argument("--pp", type=common.positive_int, default=1, help="pipeline stages (default 1)")
    g.add_argument("--grad-accum", type=common.positive_int, default=1, help="micro-batches in the step (default 1)")
    from trainledger.cli import measure_finetune
    measure_finetune.add_arguments(parser)
    common.add_json_flag(parser)


def add_attn_impl_flag(parser: argparse.ArgumentParser) -> None:
    """--attn-impl eager|sdpa, for --impl hf (memory, flops and measure share it)."""
    parser.add_argument("--attn-impl", choices=("eager", "sdpa"), default=None,
                        help="with --impl hf: transformers' attention implementation (default: what transformers picks for the model)")


def add_impl_flags(parser: argparse.ArgumentParser, what: str = "predict") -> None:
    """--impl trainledger|hf and --attn-impl, for `memory`, `flops` (`what` they do: predict) and `measure`."""
    parser.add_argument("--impl", choices=("trainledger", "hf"), default="trainledger",
                        help=f"whose model of a config.json to {what}: trainledger's Transformer (default) or transformers' own")
    add_attn_impl_flag(parser)


def check_attn_impl(args) -> None:
    """--attn-impl only with --impl hf: a one-line error otherwise."""
    if getattr(args, "impl", "trainledger") != "hf" and getattr(args, "attn_impl", None) is not None:
        raise TrainledgerError("--attn-impl applies to --impl hf (transformers' model); trainledger's Transformer uses SDPA")


def hf_impl_of(args):
    """The account.memory.hf_activations.HfImpl that --impl hf and --attn-impl name for --model (None without --impl hf)."""
    check_attn_impl(args)
    if getattr(args, "impl", "trainledger") != "hf":
        return None
    from pathlib import Path

    from trainledger.account.memory.hf_activations import hf_impl_from_config
    from trainledger.specs.hf_config import read_config_file
    model = getattr(args, "model", None)
    if model is None or not (model.endswith(".json") or Path(model).exists()):
        raise TrainledgerError(f"--impl hf needs --model to be a Hugging Face config.json path, got {model!r}")
    return hf_impl_from_config(read_config_file(model), args.attn_impl)


def compute(args) -> dict:
    if args.comm:
        return _compute_comm(args)
    from trainledger.measure import compare
    if ":" in args.model and not args.model.endswith(".json"):
        return compare.measure_factory(args.model, args.batch_size, args.seq_len or 128, optimizer=args.optimizer,
                                       device=args.device)
    check_attn_impl(args)
    if args.impl == "hf" and args.recompute != "none":
        raise TrainledgerError(f"--recompute {args.recompute} applies to trainledger's Transformer, not to "
                               "--impl hf (transformers' own model); drop one of them")
    from trainledger.specs import get_model
    spec = get_model(args.model)
    seq_len = args.seq_len or getattr(spec, "default_seq_len", 1)
    if args.impl == "hf":
        return compare.measure_hf(args.model, spec, args.batch_size, seq_len, precision=args.precision,
                                  optimizer=args.optimizer, device=args.device, attn_impl=args.attn_impl)
    if getattr(spec, "kind", None) == "transformer" and seq_len > spec.max_seq_len and spec.position == "learned":
        raise TrainledgerError(f"--seq-len {seq_len} exceeds the {spec.max_seq_len} learned positions of '{spec.name}'")
    if args.finetune is not None:
        from trainledger.cli import measure_finetune
        return measure_finetune.compute(args, spec, seq_len)
    result = compare.measure_model(spec, args.batch_size, seq_len, precision=args.precision, optimizer=args.optimizer,
                                   recompute=args.recompute, device=args.device)
    result["notes"] = result.get("notes", []) + common.approximation_notes(spec)
    from trainledger.cli.sanity import absurd_bytes
    warnings = absurd_bytes(result.get("predicted", {}).get("peak_bytes") or 0, "the predicted peak of this step",
                            "check --batch-size and --seq-len")
    if warnings:
        result["warnings"] = result.get("warnings", []) + warnings
    return result


def _compute_comm(args) -> dict:
    from trainledger.specs import get_model
    from trainledger.train.comm_count import measure_one_step
    if args.sp and args.tp < 2:
        raise TrainledgerError(f"--sp needs --tp 2 or more, got --tp {args.tp}")
    spec = get_model(args.model)
    if getattr(spec, "kind", None) != "transformer":
        raise TrainledgerError(f"--comm measures a Transformer; '{args.model}' is not one")
    device = args.device if args.device in ("cpu", "cuda") else None
    result = measure_one_step(spec, batch_size=args.batch_size, seq_len=args.seq_len or spec.default_seq_len,
                              grad_accum=args.grad_accum, precision=args.precision, parallel=args.parallel,
                              tp=args.tp, sp=args.sp, pp=args.pp, device=device)
    if result["rank"] != 0:       # every rank computed; rank 0 alone prints
        args.json = False
    return result


def _render_comm(result: dict) -> None:
    if result["rank"] != 0:
        return
    st = result["settings"]
    title = (f"{st['model']}, {st['batch_size']}×{st['seq_len']} × {st['grad_accum']} micro-batches, {st['precision']}, "
             f"{st['world_size']} ranks: --parallel {st['parallel']} --tp {st['tp']}{' --sp' if st['sp'] else ''} --pp {st['pp']}")
    rows = [[str(r["rank"]), _fmt(r["predicted_comm_bytes"], "bytes"), _fmt(r["comm_bytes"], "bytes"),
             _percent((r["predicted_comm_bytes"] - r["comm_bytes"]) / r["comm_bytes"] if r["comm_bytes"] else None),
             ", ".join(f"{k} {v}" for k, v in sorted(r["calls"].items()))] for r in result["ranks"]]
    common.console().print(common.table(title, ["rank", "predicted", "measured", "error", "calls"], rows,
                                        caption="bytes one rank sends in one step (ring volumes of the measured payloads)"))


def _fmt(value, kind: str) -> str:
    if value is None:
        return "—"
    if kind == "count":
        return units.format_count(value)
    if kind == "flops":
        return units.format_flops(value)
    return units.format_bytes(value)


def _percent(error) -> str:
    return "—" if error is None else f"{100 * error:+.2f}%"


def render(result: dict, args) -> None:
    if getattr(args, "comm", False):
        return _render_comm(result)
    console = common.console()
    st = result.get("settings", {})
    title = f"{st.get('model')}, {st.get('batch_size')}×{st.get('seq_len')}"
    title += "".join(f", {st[k]}" for k in ("precision", "optimizer") if k in st)
    title += f", recompute {st['recompute']}" if "recompute" in st else ""
    title += f", {st.get('device')}"
    if st.get("impl") == "hf":
        title += f", transformers ({st.get('attn_impl')} attention)"
    columns = ["", "predicted", "measured", "error"]
    rows = []
    if st.get("finetune"):
        from trainledger.cli.measure_finetune import FINETUNE_ROWS
        title += f", --finetune {st['finetune']}" + (f" ({st['quantize']})" if st.get("quantize") else "") + "".join(
            f", {lever}" for lever in st.get("levers", []))
    for key, label, kind in (FINETUNE_ROWS if st.get("finetune") else ROWS):
        measured = result["measured"].get(key)
        predicted = result.get("predicted", {}).get(key)
        if measured is None and predicted is None:
            continue
        row = [label, _fmt(predicted, kind), _fmt(measured, kind), _percent(result.get("relative_error", {}).get(key))]
        rows.append(row)
    console.print(common.table(title, columns, rows, caption="\n".join(result.get("notes", []))))
    details = result.get("details", {})
    if details.get("peak_phase"):
        console.print(f"peak during: {details['peak_phase']} {details.get('peak_module', '')}".rstrip())
