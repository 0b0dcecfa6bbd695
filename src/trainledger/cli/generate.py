"""`trainledger generate`: text from a run's checkpoint, with tokens/s and KV cache bytes measured beside predicted."""

from __future__ import annotations

import argparse

from trainledger import units
from trainledger.cli import common

HELP = "generate text from a run's checkpoint (KV cache, sampling); speed and KV cache bytes measured vs predicted"
DESCRIPTION = """\
Loads the newest good checkpoint of a run (RUN_OR_CHECKPOINT: a run's --out-dir, a --checkpoint-dir, one
step_NNNNNNNN directory, or a Hugging Face directory written by `trainledger export`), encodes the prompt with the
run's tokenizer (bytes unless the run recorded another) and generates --max-new-tokens tokens.

Sampling: --temperature 0 is greedy (the most likely token each time; the same tokens with or without the KV
cache); above 0 a draw from softmax(logits / temperature), optionally kept to the --top-k most likely tokens and
to the smallest set whose probabilities reach --top-p, seeded by --seed. --no-cache re-runs the whole sequence for
every new token instead of keeping keys and values (slower; what the cache saves).

Measured: prefill tokens/s (the prompt's forward) and decoding tokens/s (one new token per step), after one
untimed warm-up; the KV cache's bytes (its key and value tensors). Predicted: account/time/inference.py for the same
model and lengths on this machine's calibrated device (`trainledger bench --calibrate`, measured once and cached;
`trainledger infer` gives the same prediction for any GPU). Timings on a busy machine are slower: the 1-minute
load average is reported beside them. Without --threads, generate takes the cores other processes leave idle (as
`train` does; OMP_NUM_THREADS is kept) and prints its choice.

examples:
  trainledger generate runs/tiny-stdlib --prompt "def " --max-new-tokens 200
  trainledger generate runs/tiny-stdlib --prompt "import os" --temperature 0.8 --top-k 40 --seed 1
  trainledger generate runs/tiny-stdlib/checkpoints/step_00000600 --prompt-ids 100,101,102 --json
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN_OR_CHECKPOINT", help="a run's --out-dir, a checkpoint directory, or a "
                                                                 "Hugging Face directory (config.json + model.safetensors)")
    prompt = parser.add_argument("--prompt", metavar="TEXT", help="the prompt as text, encoded with the run's tokenizer")
    prompt.own_empty_check = True        # generate says "the prompt is empty" itself (cli/main.py OneLineParser)
    parser.add_argument("--prompt-ids", metavar="IDS", help="the prompt as token ids: 1,2,3")
    parser.add_argument("--allow-special", metavar="TOKEN", action="append", default=[],
                        help="a special token (repeatable; 'all' for every one) that --prompt may contain as itself, "
                             "e.g. '<|endoftext|>'; any other special token's string is ordinary text (tiktoken's rule)")
    parser.add_argument("--max-new-tokens", type=common.positive_int, default=64,
                        help="tokens to generate (default 64); prompt + new tokens must fit the model's context")
    parser.add_argument("--temperature", type=_temperature, default=0.0,
                        help="0 = greedy (default); > 0 samples from softmax(logits / temperature)")
    parser.add_argument("--top-k", type=common.positive_int, default=None, help="sample among the k most likely tokens")
    parser.add_argument("--top-p", type=_top_p, default=None,
                        help="sample among the most likely tokens whose probabilities sum to p, in (0, 1]")
    parser.add_argument("--seed", type=common.seed, default=0, help="seed of the sampling (default 0)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to run (default cpu)")
    parser.add_argument("--threads", type=common.positive_int, default=None,
                        help="torch intra-op threads on CPU, at most 4 per core (default: the cores other processes "
                             "leave idle, as `train` picks them, or OMP_NUM_THREADS when set; printed); the "
                             "calibration is per thread count")
    parser.add_argument("--no-cache", dest="cache", action="store_false",
                        help="no KV cache: every step re-runs the whole sequence")
    parser.add_argument("--no-predict", dest="predict", action="store_false",
                        help="skip the prediction (and the one-time calibration of this machine it may need)")
    common.add_json_flag(parser)


def _temperature(text: str) -> float:
    value = common._float(text)
    if not (value >= 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (0 = greedy), got {text!r}")
    return value


def _top_p(text: str) -> float:
    value = common._float(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be a number in (0, 1], got {text!r}")
    return value


def run(args) -> int:
    from trainledger.measure.cpu_load import OthersCpu, check_threads, set_threads
    others = OthersCpu()          # other processes' CPU use while torch loads: which cores are idle (as train)
    if args.threads is not None:
        check_threads(args.threads)
    import torch  # noqa: F401  (after argument checks: the help and bad flags stay fast)

    from trainledger.train.generate import run as generate
    threads_line = set_threads(args.threads, args.device, others)
    result = generate(args.run, prompt=args.prompt, prompt_ids=args.prompt_ids, max_new_tokens=args.max_new_tokens,
                      temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                      device=args.device, use_cache=args.cache, predict=args.predict, allowed_special=args.allow_special)
    result["threads_choice"] = threads_line
    if args.json:
        common.print_json(result)
        return 0
    render(result)
    return 0


def _rate(value) -> str:
    return "—" if value is None else f"{value:,.1f}"


def render(r: dict) -> None:
    import sys
    for line in r["warnings"]:
        sys.stderr.write(f"warning: {line}\n")
    if r["text"] is None:
        print(f"(no tokenizer: ids only) {r['tokens']}")
    else:
        common.console().print(r["prompt_text"], style="bold", end="", markup=False, highlight=False, soft_wrap=True)
        print(r["text"])
    print()
    how = "greedy" if r["temperature"] == 0 else f"temperature {r['temperature']:g}" + (
        f", top-k {r['top_k']}" if r["top_k"] else "") + (f", top-p {r['top_p']:g}" if r["top_p"] else "")
    rows = [["prefill tokens/s", _rate(r["prefill_tokens_per_s"]), _rate(r["predicted_prefill_tokens_per_s"])],
            ["decoding tokens/s", _rate(r["decode_tokens_per_s"]), _rate(r["predicted_decode_tokens_per_s"])],
            ["KV cache", units.format_bytes(r["kv_cache_bytes"]) if r["cache"] else "none (--no-cache)",
             units.format_bytes(r["predicted_kv_cache_bytes"]) if r["predicted_kv_cache_bytes"] is not None else "—"]]
    step = f" step {r['step']}" if r["step"] is not None else ""
    caption = [f"{r['model']}{step} from {r['source']}; {r['prompt_len']} prompt + {r['n_new_tokens']} new tokens, {how}, "
               f"{'KV cache' if r['cache'] else 'no cache'}, {r['dtype']} on {r['device']} ({r['threads']} thread{'s' if r['threads'] > 1 else ''}), "
               f"load average {r['load_average']:.2f}" if r["load_average"] is not None else ""]
    console = common.console()
    if r.get("threads_choice"):               # the thread count generate picked (as train does), and why
        console.print(r["threads_choice"], soft_wrap=True)
    console.print(common.table("generation: measured vs predicted", ["", "measured", "predicted"], rows))
    for line in caption + r["assumptions"]:
        if line:
            console.print(f"  {line}", soft_wrap=True)
