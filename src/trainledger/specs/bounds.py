"""Bounds on the sizes of a model read from a config.json (or a preset): what no real model comes within 100× of.

A config is data from anywhere (a file a user was sent, the body of a web request). Its sizes are checked here,
where it is read (specs.get_model, specs.hf_config.spec_from_config_dict), so that no command (`params`, `flops`,
`step`, `layout`, the web worker, `train`) loops or allocates on a size that no machine could hold: a 1e15-token
vocabulary made `step` loop for ever over optimizer chunks, a 65,536-expert × 2,000-layer gpt_oss config made it
list 400 million tensors, `params` answered 2.55e21 parameters without a word.

Each bound is at least 100× the largest published value (the model beside it, its number from its paper or its
config.json; presets in specs/presets.py), rounded up to a power of two:

    layers                 MAX_LAYERS        16,384   Llama 3.1 405B: 126 (preset)                       130×
    widths                 MAX_WIDTH      8,388,608   PaLM 540B: d_ff 73,728, d_model 18,432             113×
      (d_model, d_ff, the dense/shared experts' width, the latent ranks of multi-head latent attention)
    heads (query, kv)      MAX_HEADS         16,384   Llama 3.1 405B, DeepSeek-V3: 128 (presets)         128×
    head size              MAX_HEAD_DIM      65,536   Gemma 2/3: 256 (presets)                           256×
    vocabulary             MAX_VOCAB     33,554,432   Gemma 3: 262,144 (preset)                          128×
    experts per layer      MAX_EXPERTS      262,144   Switch-C: 2,048 (Fedus et al. 2021, Table 9)       128×
    experts × MoE layers   MAX_EXPERT_LAYERS 4,194,304  Kimi K2: 384 × 60 = 23,040; DeepSeek-V3 256 × 58  182×
    context (positions)    MAX_SEQ_LEN  1,073,741,824  Llama 4 Scout: 10M (Meta, 2025)                   107×
    parameters             MAX_PARAMS      5.6e14 (2^49)  Switch-C: 1.571e12 (Fedus et al. 2021, Table 9)  358×

Two bounds of a request rather than of a model, checked where a command reads them (cli/common.py):

    sequence (--seq-len)   MAX_SEQ_LEN  1,073,741,824  as the context bound above: no model has positions for more
    GPUs (--num-gpus)      MAX_NUM_GPUS     1,048,576  (2^20) over 40× the 24,576-GPU clusters Llama 3 trained on
                                                        (arXiv:2407.21783, Sec. 3.3.1: 16,384 H100 used) and 5× the
                                                        ~200,000-GPU clusters announced for 2025 (xAI Colossus)

Past these a request is an error (exit 2): no machine runs it; below them an unusual value is a warning.

The parameter bound is checked on an estimate (`params_estimate`: every matrix of every layer, both
embeddings), not on the exact count of account/counting/params.py, so that this check needs nothing above specs/. A config beyond a bound is a one-line TrainledgerError naming the field, the bound and the flag.
"""

from __future__ import annotations

from trainledger.errors import TrainledgerError

MAX_LAYERS = 1 << 14
MAX_WIDTH = 1 << 23
MAX_HEADS = 1 << 14
MAX_HEAD_DIM = 1 << 16
MAX_VOCAB = 1 << 25
MAX_EXPERTS = 1 << 18
MAX_EXPERT_LAYERS = 1 << 22
MAX_SEQ_LEN = 1 << 30
MAX_PARAMS = 1 << 49
MAX_NUM_GPUS = 1 << 20     # GPUs of one job (module docstring: 40× Llama 3's 24,576-GPU clusters)

# field -> (bound, the published value it is checked against, for the message)
FIELD_BOUNDS = {
    "n_layers": (MAX_LAYERS, "Llama 3.1 405B has 126"),
    "n_mtp_layers": (MAX_LAYERS, "DeepSeek-V3 has 1"),
    "d_model": (MAX_WIDTH, "PaLM 540B has 18,432"),
    "d_ff": (MAX_WIDTH, "PaLM 540B has 73,728"),
    "dense_d_ff": (MAX_WIDTH, "DeepSeek-V3 has 18,432"),
    "shared_expert_d_ff": (MAX_WIDTH, "Qwen1.5-MoE has 5,632"),
    "kv_lora_rank": (MAX_WIDTH, "DeepSeek-V3 has 512"),
    "q_lora_rank": (MAX_WIDTH, "DeepSeek-V3 has 1,536"),
    "n_heads": (MAX_HEADS, "Llama 3.1 405B has 128"),
    "n_kv_heads": (MAX_HEADS, "DeepSeek-V3 has 128"),
    "d_head": (MAX_HEAD_DIM, "Gemma 3 has 256"),
    "v_head_dim": (MAX_HEAD_DIM, "DeepSeek-V3 has 128"),
    "qk_rope_head_dim": (MAX_HEAD_DIM, "DeepSeek-V3 has 64"),
    "vocab_size": (MAX_VOCAB, "Gemma 3 has 262,144"),
    "n_experts": (MAX_EXPERTS, "Switch-C has 2,048"),
    "max_seq_len": (MAX_SEQ_LEN, "Llama 4 Scout has 10M"),
    "pretrain_seq_len": (MAX_SEQ_LEN, "Llama 4 Scout has 10M"),
    "sliding_window": (MAX_SEQ_LEN, "Gemma 2 has 4,096"),
}


def params_estimate(spec) -> int:
    """Parameters of `spec`, estimated (a count, an int) for the bound check only: both embeddings (2·V·d, tied or
    not; learned positions T·d), and per layer the q, k, v, o matrices (with the latent projections of multi-head
    latent attention), the router and every expert's matrices or the dense MLP, whichever is larger, plus the shared
    expert; norms and biases left out. Within -0.05 %..+31 % of the exact count of every preset (the exact count is
    account/counting/params.py's; tests/specs/test_bounds.py compares them)."""
    d, mats = spec.d_model, 3 if spec.gated_mlp else 2
    q, kv, v = spec.n_heads * spec.head_dim, spec.kv_heads * spec.head_dim, spec.n_heads * spec.value_dim
    attention = d * q + 2 * d * kv + v * d + (spec.kv_lora_rank or 0) * (d + q + v) + (spec.q_lora_rank or 0) * (d + q)
    experts = spec.n_experts * (mats * d * spec.d_ff + d) + mats * d * (spec.shared_expert_d_ff or 0)
    dense = mats * d * (spec.dense_d_ff or spec.d_ff)
    per_layer = attention + max(experts if spec.is_moe else 0, dense)
    positions = spec.max_seq_len * d if spec.position == "learned" else 0
    return 2 * spec.vocab_size * d + positions + (spec.n_layers + spec.n_mtp_layers) * per_layer


def check_bounds(spec, flag: str = "--model"):
    """`spec` unchanged when every size is within its bound (module docstring); a one-line TrainledgerError naming
    the first that is not, its bound and `flag` otherwise. Costs O(1): no layer is visited."""
    if getattr(spec, "kind", None) != "transformer":
        return spec
    name = str(spec.name)[:60]
    for field, (bound, example) in FIELD_BOUNDS.items():
        value = getattr(spec, field)
        if value is not None and value > bound:
            raise TrainledgerError(f"model {name!r}: {field} {value:,} is beyond trainledger's bound of {bound:,} "
                                   f"(over 100× any published model: {example}; docs/specs.md \"Bounds\"); a typo "
                                   f"or a damaged config ({flag})", flag)
    expert_layers = spec.n_experts * spec.n_moe_layers if spec.is_moe else 0
    if expert_layers > MAX_EXPERT_LAYERS:
        raise TrainledgerError(f"model {name!r}: {spec.n_experts:,} experts in each of {spec.n_moe_layers:,} layers "
                               f"make {expert_layers:,} experts, beyond trainledger's bound of {MAX_EXPERT_LAYERS:,} "
                               f"(over 100× any published model: Kimi K2 has 23,040; docs/specs.md \"Bounds\") ({flag})",
                               flag)
    params = params_estimate(spec)
    if params > MAX_PARAMS:
        raise TrainledgerError(f"model {name!r} has about {params:.3g} parameters, beyond trainledger's bound of "
                               f"{MAX_PARAMS:.3g} (2^49: over 100× any published model, Switch-C has 1.57e12; "
                               f"docs/specs.md \"Bounds\"); a typo or a damaged config ({flag})", flag)
    return spec


def check_request(value, what: str, flag: str) -> None:
    """A TrainledgerError naming `flag` when a request's `what` ("num_gpus" or "seq_len") is past its bound (module
    docstring: MAX_NUM_GPUS, MAX_SEQ_LEN): a request no machine runs, refused rather than warned about."""
    bound, why = {"num_gpus": (MAX_NUM_GPUS, "GPUs: over 40× the 24,576-GPU clusters Llama 3 trained on and 5× the "
                                            "largest announced (~200,000)"),
                  "seq_len": (MAX_SEQ_LEN, "tokens in a sequence: over 100× the longest context of any published "
                                           "model (Llama 4 Scout: 10M)")}[what]
    if value is not None and value > bound:
        shown = f"{value:,}" if isinstance(value, int) else f"{value:.4g}"
        raise TrainledgerError(f"{flag} {shown} is beyond any model or machine that exists: at most {bound:,} {why} "
                               f"(docs/specs.md \"Bounds\")", flag)
