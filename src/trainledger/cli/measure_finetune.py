"""`trainledger measure --finetune full|lora|qlora`: predicted vs measured memory of a fine-tuning step, by category.

Measured by measure/finetune.py (real tensors, a random base: LoRA adapters written by us, NF4 and 8-bit states by
torchao, activation offload through saved_tensors_hooks); predicted by account.memory.per_gpu for the same run.
NF4 and the levers need real kernels, so the step runs on --device cpu (or cuda); fake and meta tensors are refused.
"""

from __future__ import annotations

import argparse

from trainledger.cli import common
from trainledger.errors import TrainledgerError

FINETUNE_ROWS = [("trainable_params", "trainable parameters", "count"), ("frozen_params", "frozen parameters", "count"),
                 ("params_bytes", "params (frozen, quantized, adapters)", "bytes"), ("grads_bytes", "grads", "bytes"),
                 ("optimizer_bytes", "optimizer states", "bytes"), ("activations_bytes", "activations", "bytes"),
                 ("host_bytes", "host (offloaded activations)", "bytes"), ("peak_bytes", "peak of a later step", "bytes")]
PRECISIONS = ("fp32", "bf16")       # what measure/finetune.py builds its model in


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("fine-tuning (--finetune: real tensors, --device cpu or cuda)")
    g.add_argument("--finetune", choices=("full", "lora", "qlora"), default=None,
                   help="measure a fine-tuning step instead: every weight (full), LoRA adapters on a frozen base, or "
                        "QLoRA (the base in NF4)")
    g.add_argument("--lora-rank", type=common.positive_int, default=8, help="adapter rank r (default 8)")
    g.add_argument("--lora-alpha", type=float, default=16.0, help="adapter scale α; the update is α/r · B·A (default 16)")
    g.add_argument("--lora-targets", default="q,v", help="roles q,k,v,o,gate,up,down,head or all-linear (default q,v)")
    g.add_argument("--quantize", choices=("nf4-dq", "int8"), default=None,
                   help="the frozen base's storage (default: nf4-dq with qlora, bf16/fp32 with lora)")
    g.add_argument("--optimizer-in-backward", action="store_true", help="each parameter steps in its gradient hook")
    g.add_argument("--activation-offload", action="store_true", help="saved activations to host memory")
    g.add_argument("--chunked-loss", type=common.positive_int, default=1, metavar="N",
                   help="the cross-entropy over N chunks of the sequence (default 1)")


def compute(args, spec, seq_len: int) -> dict:
    """{"settings", "predicted", "measured", "relative_error", "notes"} of one fine-tuning step of `spec`."""
    from trainledger.account.memory.per_gpu import memory_per_gpu
    from trainledger.measure.finetune import Levers, finetune_step_memory
    from trainledger.models.lora import LoRASettings, parse_targets
    from trainledger.specs.run import Hardware, Run
    if args.device not in ("cpu", "cuda"):
        raise TrainledgerError(f"--finetune measures real tensors (NF4 and the levers run real kernels): use --device "
                               f"cpu or cuda, not {args.device}", "--device")
    precision = args.precision if args.precision in PRECISIONS else None
    if precision is None:
        raise TrainledgerError(f"--finetune measures a model stored in {' or '.join(PRECISIONS)} (--precision "
                               f"{' or --precision '.join(PRECISIONS)}), got {args.precision}", "--precision")
    if args.optimizer not in ("adamw", "adamw-8bit"):
        raise TrainledgerError(f"--finetune measures --optimizer adamw or adamw-8bit, got {args.optimizer}", "--optimizer")
    quantize = args.quantize or ("nf4-dq" if args.finetune == "qlora" else None)
    run = Run().with_(batch_size=args.batch_size, seq_len=seq_len, precision=precision, optimizer=args.optimizer,
                      method=args.finetune, lora_rank=args.lora_rank, lora_alpha=args.lora_alpha,
                      lora_targets=args.lora_targets, quantize=quantize, reserve=0,
                      optimizer_in_backward=args.optimizer_in_backward, activation_offload=args.activation_offload,
                      chunked_loss=args.chunked_loss)
    predicted = memory_per_gpu(spec, Hardware(None), run)      # checks the run first: every error names its flag
    lora = None if args.finetune == "full" else LoRASettings(args.lora_rank, args.lora_alpha,
                                                             parse_targets(args.lora_targets))
    levers = Levers(optimizer=args.optimizer, optimizer_in_backward=args.optimizer_in_backward,
                    activation_offload=args.activation_offload, chunked_loss=args.chunked_loss)
    raw = finetune_step_memory(spec, batch_size=args.batch_size, seq_len=seq_len, lora=lora,
                               quantize=quantize or "none", precision=precision, levers=levers, device=args.device)
    measured = {"trainable_params": raw["trainable_params"], "frozen_params": raw["frozen_params"],
                "params_bytes": sum(raw[k] for k in ("trainable_params_bytes", "frozen_params_bytes",
                                                     "quantized_weights_bytes", "quantization_constants_bytes")),
                "grads_bytes": raw["grads_bytes"], "optimizer_bytes": raw["optimizer_bytes"],
                "activations_bytes": raw["activations_bytes"], "host_bytes": raw["host_activations_bytes"],
                "peak_bytes": raw["peak_bytes"] - raw["inputs_bytes"]}
    predicted = {key: predicted[key] for key in measured}
    errors = {k: (predicted[k] - measured[k]) / measured[k] if measured[k] else None for k in measured}
    return {"settings": {"model": spec.name, "batch_size": args.batch_size, "seq_len": seq_len, "precision": precision,
                         "optimizer": args.optimizer, "finetune": args.finetune, "quantize": quantize,
                         "device": args.device, "levers": run_levers(args)},
            "predicted": predicted, "measured": measured, "relative_error": errors,
            "notes": ["measured: the live tensors of the second step (the batch excluded), host bytes where "
                      "--activation-offload keeps them; a random base (the bytes do not depend on the values)"]}


def run_levers(args) -> list[str]:
    return [flag for flag, on in (("--optimizer-in-backward", args.optimizer_in_backward),
                                  ("--activation-offload", args.activation_offload),
                                  (f"--chunked-loss {args.chunked_loss}", args.chunked_loss > 1)) if on]
