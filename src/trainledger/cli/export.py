"""`trainledger export`: a run's model as model.safetensors + config.json that Hugging Face transformers loads."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common

HELP = "write a run's model as a Hugging Face directory (model.safetensors + config.json) that transformers loads"
DESCRIPTION = """\
Takes the newest good checkpoint of RUN_OR_CHECKPOINT (a run's --out-dir, a --checkpoint-dir or one
step_NNNNNNNN directory) and writes OUT_DIR with model.safetensors, config.json and, when the run's tokenizer is
a file, tokenizer.json. GPT-2-style models (learned positions, LayerNorm, GELU; the `tiny` and gpt2 presets)
become GPT2LMHeadModel, Llama-style ones (RoPE, RMSNorm, SwiGLU, grouped-query attention) LlamaForCausalLM;
other families are refused. Then, in Python:

    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained("OUT_DIR")     # the same logits as trainledger's model

Nothing is unpickled: checkpoints load with torch.load(weights_only=True), the output is safetensors.
OUT_DIR is written atomically (a temporary directory beside it, then renamed); an existing non-empty OUT_DIR is
refused unless --force. `train --init-from OUT_DIR` and `generate OUT_DIR` read it back.

A fine-tuning run (train --finetune lora|qlora) holds adapters on a frozen base: OUT_DIR (or --merge OUT) gets the
merged model (every adapted weight W + (alpha/r)·B·A, NF4/int8 weights dequantized), --adapter OUT its adapters as
PEFT writes them, which `PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(BASE), OUT)` loads. The base
named by the run's --init-from must still be the one it trained on (sha256 checked).

examples:
  trainledger export runs/tiny-stdlib hf/tiny-stdlib
  trainledger export runs/lora --adapter hf/lora-adapter
  trainledger export runs/qlora --merge hf/qlora-merged
  trainledger export runs/tiny-stdlib/checkpoints/step_00000300 hf/tiny-300 --force
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN_OR_CHECKPOINT", help="a run's --out-dir, a --checkpoint-dir or one checkpoint")
    parser.add_argument("out_dir", metavar="OUT_DIR", nargs="?",
                        help="directory to write (must not exist or be empty, unless --force)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--adapter", metavar="OUT", help="a fine-tuning run's adapters in PEFT's format "
                       "(adapter_config.json + adapter_model.safetensors) into OUT, instead of OUT_DIR")
    where.add_argument("--merge", metavar="OUT", help="the adapters merged into the (dequantized) base weights: a "
                       "Hugging Face model directory OUT, instead of OUT_DIR")
    parser.add_argument("--force", action="store_true", help="replace a non-empty OUT_DIR")
    common.add_json_flag(parser)


def run(args) -> int:
    from trainledger.errors import TrainledgerError
    from trainledger.train.export import export
    given = [(mode, out) for mode, out in (("model", args.out_dir), ("adapter", args.adapter), ("merge", args.merge))
             if out is not None]
    if len(given) != 1:
        raise TrainledgerError("give one destination: OUT_DIR, --adapter OUT or --merge OUT" + (
            f" (got {' and '.join(('OUT_DIR' if m == 'model' else '--' + m) for m, _ in given)})" if given else ""))
    mode, out_dir = given[0]
    result = export(args.run, out_dir, force=args.force, mode=mode)
    if args.json:
        common.print_json(result)
        return 0
    step = f" (step {result['step']})" if result["step"] is not None else ""
    what = "merged " if result["merged"] else ""
    print(f"exported {what}{result['model']}{step} from {result['source']} as {result['architecture']} "
          f"({units.format_count(result['n_params'])} parameters, {result['dtype']}) to {result['out_dir']}:")
    for f in result["files"]:
        print(f"  {f['name']:<20} {units.format_bytes(f['bytes'])}")
    if result["tokenizer"] == "bytes":
        print("  (byte-level tokenizer: token ids are the UTF-8 bytes of the text, no tokenizer file)")
    return 0
