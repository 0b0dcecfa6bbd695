"""`trainledger models`: the built-in model presets with their shapes, parameter counts and sources."""

from __future__ import annotations

from trainledger.cli import common
from trainledger.units import format_count

HELP = "list the built-in model presets (shapes, parameter counts, sources)"


def add_arguments(parser) -> None:
    common.add_json_flag(parser)


_FEATURES = ("gelu_approximate", "partial_rotary_factor", "rope_local_theta", "parallel_residual", "sandwich_norm",
             "qk_norm", "scale_embeddings", "attn_scale", "attn_softcap", "final_softcap", "clip_qkv", "alibi_bias_max",
             "sliding_window", "sliding_layers", "renormalize_topk", "shared_expert_d_ff", "shared_expert_gate",
             "dense_layers", "dense_d_ff", "approximations")


def _record(spec) -> dict:
    from trainledger.account.counting.params import param_counts
    from trainledger.specs import PRESET_ALIASES

    counts = param_counts(spec)
    record = {"name": spec.name, "aliases": [a for a, target in PRESET_ALIASES.items() if target == spec.name],
              "kind": spec.kind, "n_params": counts["n_params"],
              "n_params_non_embedding": counts["n_params_non_embedding"], "n_params_active": counts["n_params_active"],
              "published_n_params": spec.published_n_params}
    if spec.kind == "cruncher":
        record |= {"dim": spec.dim, "n_layers": spec.n_layers}
    else:
        record |= {"d_model": spec.d_model, "n_layers": spec.n_layers, "n_heads": spec.n_heads,
                   "n_kv_heads": spec.kv_heads, "d_head": spec.head_dim, "d_ff": spec.d_ff,
                   "vocab_size": spec.vocab_size, "max_seq_len": spec.max_seq_len,
                   "pretrain_seq_len": spec.pretrain_seq_len, "default_seq_len": spec.default_seq_len,
                   "position": spec.position,
                   "norm": spec.norm, "mlp": spec.mlp, "tied_embeddings": spec.tied_embeddings,
                   "n_experts": spec.n_experts, "experts_per_token": spec.experts_per_token,
                   "rope_theta": spec.rope_theta if spec.position == "rope" else None, "norm_eps": spec.norm_eps}
        # the architecture fields of the newer families (defaults: GPT-2 / Llama behaviour)
        record |= {key: getattr(spec, key) for key in _FEATURES}
    return record | {"source": spec.source}


def compute(args) -> list:
    from trainledger.specs import PRESETS

    return [_record(spec) for spec in PRESETS.values()]


def _k(tokens: int) -> str:
    """8192 -> '8K', 131072 -> '128K', 256 -> '256' (contexts are powers of two: K = 1024)."""
    return f"{tokens // 1024}K" if tokens >= 1024 and tokens % 1024 == 0 else str(tokens)


def render(result: list, args) -> None:
    from rich import box

    from trainledger.specs.hf_config import SUPPORTED

    rows, notes = [], []
    for r in result:
        if r["kind"] == "cruncher":
            rows.append([r["name"], format_count(r["n_params"]), f"dim {r['dim']}", r["n_layers"], "", "", "", ""])
            continue
        rows.append([r["name"], format_count(r["n_params"]), r["d_model"], r["n_layers"],
                     f"{r['n_heads']}/{r['n_kv_heads']}", r["d_ff"], r["vocab_size"], f"{_k(r['default_seq_len'])}/{_k(r['max_seq_len'])}"])
        if r["n_experts"] > 1:
            shared = f" + a shared expert of {r['shared_expert_d_ff']}" if r["shared_expert_d_ff"] else ""
            notes.append(f"{r['name']}: {r['n_experts']} experts of {r['d_ff']}, {r['experts_per_token']} per token"
                         f"{shared}, {format_count(r['n_params_active'])} active parameters")
    tied = ", ".join(r["name"] for r in result if r.get("tied_embeddings"))
    table = common.table(
        "Model presets (unique parameters, SI counts: 124M = 1.24e8)",
        ["name", "params", "d_model", "layers", "heads/kv", "d_ff", "vocab", "context"], rows,
        "\n".join(notes + [f"LM head tied to the token embedding: {tied}",
                            "context: pre-trained at (the default --seq-len) / position range; K = 1024 tokens.",
                            "Sources (config.json or paper table) and all fields: `trainledger models --json`.",
                            f"--model also takes a Hugging Face config.json ({', '.join(SUPPORTED)})."]))
    table.box, table.pad_edge, table.collapse_padding = box.SIMPLE_HEAD, False, True
    for column in table.columns:
        column.no_wrap = True
    common.console().print(table)
