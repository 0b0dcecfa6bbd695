"""`trainledger params`: parameter count of a model by component, with the non-embedding and active totals.

    trainledger params --model llama-3-8b
    trainledger params --model path/to/config.json --json
"""

from __future__ import annotations

from trainledger.cli import common
from trainledger.units import format_count

HELP = "parameter count and breakdown of --model (a preset or a Hugging Face config.json)"
DESCRIPTION = HELP + """

n_params counts unique parameters (a tied LM head once); n_params_non_embedding leaves out the token and
position embeddings and an untied LM head (the Llama/Qwen model-card convention); n_params_active counts
only the experts a token is routed to (MoE); n_params_active_excl_embedding (MoE models) leaves the token
embedding's lookup out of it, as the gpt-oss and DeepSeek-V3 cards count active parameters (Qwen3's cards
count it in). Kaplan's 12·n_layers·d_model² is shown for comparison."""


def add_arguments(parser) -> None:
    parser.add_argument("--model", default="gpt2",
                        help="preset name (see `trainledger models`) or path to a Hugging Face config.json (default: gpt2)")
    common.add_json_flag(parser)


def compute(args) -> dict:
    from trainledger.account.counting.params import kaplan_non_embedding_params, param_counts
    from trainledger.specs import get_model

    spec = get_model(args.model, "--model")
    counts = param_counts(spec)
    result = {"model": spec.name, "kind": spec.kind, **counts,
              "published_n_params": spec.published_n_params, "source": spec.source}
    if spec.kind == "transformer":
        result["kaplan_non_embedding_params"] = kaplan_non_embedding_params(spec)
    result["assumptions"] = common.approximation_notes(spec)
    return result


def render(result: dict, args) -> None:
    total = result["n_params"]
    tied = result["components"].get("lm_head") == 0 and result["components"].get("token_embedding")
    rows = [[name + (" (tied to token_embedding)" if name == "lm_head" and tied else ""), f"{count:,}",
             format_count(count) if count else "0", f"{100 * count / total:.1f}%"]
            for name, count in result["components"].items()
            if count or name in ("lm_head", "norms")]   # drop empty rows (router of a dense model, positions under RoPE)
    rows.append(["n_params (unique)", f"{total:,}", format_count(total), "100.0%"])
    moe = result["components"].get("router", 0) > 0
    for key in ("n_params_non_embedding", "n_params_active", "n_params_active_excl_embedding",
                "kaplan_non_embedding_params", "published_n_params"):
        value = result.get(key)
        if key == "n_params_active_excl_embedding" and not moe:
            continue                   # a dense model's would only repeat n_params minus the embedding row
        if value is not None:
            rows.append([key, f"{value:,}", format_count(value), f"{100 * value / total:.1f}%"])
    caption = "\n".join([f"source: {result['source']}",
                         "non-embedding excludes token/position embeddings and an untied LM head; kaplan = 12·L·d_model²"]
                        + (["active_excl_embedding: the active count without the token embedding's lookup (how the "
                            "gpt-oss and DeepSeek-V3 cards count; Qwen3's count it in)"] if moe else [])
                        + result.get("assumptions", []))
    from rich import box

    table = common.table(f"Parameters of {result['model']} (counts)", ["component", "parameters", "SI", "share"],
                         rows, caption)
    table.box, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, True
    common.console().print(table)
