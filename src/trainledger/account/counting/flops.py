"""FLOPs of a model spec: per matmul, per token, per step; model FLOPs and hardware FLOPs. Pure arithmetic, no torch.

Conventions (DESIGN.md; each is a choice, stated so a measurement can check it):
- A matmul (m×k)·(k×n) costs 2·m·k·n FLOPs (a multiply and an add per term; CS336 Lecture 2).
- Counted per token, forward: every weight matrix the token passes through — q (n_heads·d_head),
  k and v (n_kv_heads·d_head each: grouped-query attention), o, the MLP's 2 (GELU) or 3 (SwiGLU, GeGLU)
  matrices, for mixture-of-experts layers the router d_model→n_experts plus `experts_per_token` experts
  (plus the shared expert and its d_model→1 gate, Qwen2-MoE; dense layers of an MoE model count their
  dense MLP), and the LM head d_model→vocab at every position (the model computes logits for all B·T
  positions).
- Attention: per token and layer QKᵀ costs 2·T·d_head·n_heads and A·V the same. `full` counts the
  whole T×T score matrix (PaLM App. B, nanoGPT; what a dense SDPA kernel multiplies); `causal`
  counts half of it (the Megatron-LM convention). Sliding-window layers are counted the same way: our
  kernels multiply the full T×T and mask it (a windowed kernel would do T×W; not modelled).
- Backward = 2 × forward for every matmul (one product for the input gradient, one for the weight
  gradient); train = 3 × forward.
- Model FLOPs exclude recomputation. Hardware FLOPs add it: `selective` recomputes the attention
  core (QKᵀ, softmax, A·V) once more (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 5 and App. A);
  `full` re-runs every transformer layer's forward once more, not the LM head (Narayanan et al. 2021,
  arXiv:2104.04473, Eq. 3).
- Not counted: biases, norms (QK-norm too), softmax, activations, soft-capping, RoPE, ALiBi and masks,
  residual adds, embedding lookups, the loss and the optimizer step (elementwise, O(d) per token, or
  O(T) per score: < 1% of a transformer's matmul FLOPs).
"""

from __future__ import annotations

from trainledger.account.counting.params import mla_attention_matrices
from trainledger.errors import TrainledgerError
from trainledger.specs.model import CruncherSpec, ModelSpec

ATTENTION = ("full", "causal")
from trainledger.specs.run import RECOMPUTE_POLICIES as RECOMPUTE  # noqa: E402 (the run's vocabulary)


def matmul_flops(m: float, k: float, n: float) -> float:
    """FLOPs of an (m×k)·(k×n) matrix product: 2·m·k·n (CS336 Lecture 2, tensor_operations_flops)."""
    return 2 * m * k * n


def check_choice(value: str, choices: tuple, flag: str) -> str:
    """`value` if it is one of `choices`, else a TrainledgerError naming the flag."""
    if value not in choices:
        raise TrainledgerError(f"{flag} must be one of {', '.join(choices)}, got {value!r}")
    return value


def weight_matmuls(spec: ModelSpec) -> list[tuple[str, int, int, int]]:
    """The weight matrices one token is multiplied by in a forward pass: (name, in_features, out_features, times).

    `times` is how often per token the matrix is applied: n_layers for per-layer matrices,
    (MoE layers)·experts_per_token for routed experts, MoE layers for the router and a shared expert, the dense
    layers for an MoE model's dense MLPs (same names, their own width), 1 for the LM head (and the Cruncher's
    layers). Each costs 2·in·out·times FLOPs per token.
    """
    if isinstance(spec, CruncherSpec):
        # CS336 Lecture 2 `Cruncher`: n_layers × Linear(dim, dim) then Linear(dim, 1)
        return [("linear", spec.dim, spec.dim, spec.n_layers), ("head", spec.dim, 1, 1)]
    d, L = spec.d_model, spec.n_layers
    q_dim, kv_dim = spec.n_heads * spec.head_dim, spec.kv_heads * spec.head_dim
    moe = spec.n_moe_layers
    mats = [("q_proj", d, q_dim, L), ("k_proj", d, kv_dim, L), ("v_proj", d, kv_dim, L), ("o_proj", q_dim, d, L)]
    if spec.is_mla:   # DeepSeek-V3's multi-head latent attention: its five matrices (account.counting.params)
        mats = [(name, fan_in, fan_out, L) for name, fan_in, fan_out in mla_attention_matrices(spec)]
    if moe:
        mats.append(("router", d, spec.n_experts, moe))
        mats += _mlp_matrices(spec, "mlp", spec.d_ff, moe * spec.experts_per_token)   # k routed experts per token
        if spec.shared_expert_d_ff:
            mats += _mlp_matrices(spec, "shared", spec.shared_expert_d_ff, moe)
        if spec.shared_expert_gate:
            mats.append(("shared_expert_gate", d, 1, moe))
    if L - moe:
        mats += _mlp_matrices(spec, "mlp", spec.dense_d_ff if spec.is_moe else spec.d_ff, L - moe)
    mats.append(("lm_head", d, spec.vocab_size, 1))
    return mats


def _mlp_matrices(spec, prefix: str, d_ff: int, times: int) -> list[tuple[str, int, int, int]]:
    """An MLP's matrices: gate, up, down for SwiGLU/GeGLU, up and down for GELU."""
    d = spec.d_model
    gate = [(f"{prefix}_gate", d, d_ff, times)] if spec.gated_mlp else []
    return gate + [(f"{prefix}_up", d, d_ff, times), (f"{prefix}_down", d_ff, d, times)]


def matmul_params_per_token(spec: ModelSpec) -> int:
    """Weight-matrix entries a token is multiplied by (a count): PaLM's N for 6N, counting active experts only and the head once."""
    return sum(fan_in * fan_out * times for _, fan_in, fan_out, times in weight_matmuls(spec))


def attention_flops_per_token(spec: ModelSpec, seq_len: int, attention: str = "full") -> float:
    """Forward FLOPs per token of the attention core (QKᵀ and A·V over all layers).

    Full: 2·(2·T·d_head·n_heads) per layer (PaLM, arXiv:2204.02311, App. B: the 12·L·H·Q·T training term
    is 3 × this forward); causal: half. Grouped-query attention does not change it: every query head
    scores T keys. Multi-head latent attention (DeepSeek-V3) scores with heads of d_head = nope + rope and
    mixes values of v_head_dim: 2·T·H·(d_head + v_head_dim) per layer. 0 for models without attention.
    """
    check_choice(attention, ATTENTION, "--attention")
    if isinstance(spec, CruncherSpec):
        return 0.0
    full = spec.n_layers * (matmul_flops(1, spec.head_dim * spec.n_heads, seq_len)
                            + matmul_flops(1, spec.value_dim * spec.n_heads, seq_len))
    return full if attention == "full" else full / 2


def mtp_matmuls(spec: ModelSpec) -> list[tuple[str, int, int, int]]:
    """The weight matrices one token meets in the multi-token-prediction modules (name, in, out, times); [] without.

    DeepSeek-V3 (arXiv:2412.19437, Sec. 2.2, Eqs. 21-25), per module (n_mtp_layers of them): the projection
    M·[RMSNorm(h); RMSNorm(Emb(t))] of 2·d_model -> d_model (eh_proj), one transformer block like the model's last
    layer (its attention and, DeepSeek-V3, its MoE MLP: router, k routed experts, shared expert), and the output
    head shared with the main model, applied once more. The embedding lookup is shared and costs no matmul.
    """
    if isinstance(spec, CruncherSpec) or not spec.n_mtp_layers:
        return []
    k = spec.n_mtp_layers
    last = spec.n_layers - 1          # the block is like the model's last layer (MoE or dense)
    one = spec.with_(n_layers=1, dense_layers=(0,) if spec.is_moe and not spec.is_moe_layer(last) else ())
    block = [(f"mtp_{name}", fan_in, fan_out, times * k) for name, fan_in, fan_out, times in weight_matmuls(one)
             if name != "lm_head"]
    return [("mtp_eh_proj", 2 * spec.d_model, spec.d_model, k)] + block + [("mtp_lm_head", spec.d_model, spec.vocab_size, k)]


def mtp_flops_per_token(spec: ModelSpec, seq_len: int, attention: str = "full") -> float:
    """Forward FLOPs per token of the multi-token-prediction modules: 2 × their matrices (`mtp_matmuls`) plus one
    attention core per module. 0 for a model without them. The Megatron-Core MoE report's Table 11 counts them
    (arXiv:2603.07685: its DeepSeek-V3 TFLOPS / tokens/s is our causal count with this, to 0.3 %)."""
    mats = mtp_matmuls(spec)
    if not mats:
        return 0.0
    core = attention_flops_per_token(spec, seq_len, attention) / spec.n_layers * spec.n_mtp_layers
    return sum(2.0 * fan_in * fan_out * times for _, fan_in, fan_out, times in mats) + core


def forward_flops_breakdown(spec: ModelSpec, seq_len: int, attention: str = "full") -> dict:
    """Forward FLOPs per token by matrix name plus `attention_scores` (QKᵀ + A·V) and `total`."""
    parts = {}
    for name, fan_in, fan_out, times in weight_matmuls(spec):
        parts[name] = parts.get(name, 0.0) + times * matmul_flops(1, fan_in, fan_out)
    parts["attention_scores"] = attention_flops_per_token(spec, seq_len, attention)
    parts["total"] = sum(parts.values())
    return parts


def forward_flops_per_token(spec: ModelSpec, seq_len: int, attention: str = "full", mtp: bool = False) -> float:
    """Forward FLOPs of one token at context length `seq_len`: 2·N_matmul + attention scores (+ the
    multi-token-prediction modules with `mtp`, `mtp_flops_per_token`)."""
    extra = mtp_flops_per_token(spec, seq_len, attention) if mtp else 0.0
    return 2.0 * matmul_params_per_token(spec) + attention_flops_per_token(spec, seq_len, attention) + extra


def train_flops_per_token(spec: ModelSpec, seq_len: int, attention: str = "full", mtp: bool = False) -> float:
    """FLOPs of one token's forward + backward pass: 3 × forward (backward = 2 × forward per matmul).

    Equals PaLM's 6·N + 12·L·H·Q·T (arXiv:2204.02311, App. B) for full attention, with N the weight
    entries a token meets (`matmul_params_per_token`); excludes recomputation (model FLOPs). `mtp`: with the
    multi-token-prediction modules (DeepSeek-V3 trains them; `mtp_flops_per_token`).
    """
    return 3.0 * forward_flops_per_token(spec, seq_len, attention, mtp)


def recompute_flops_per_token(spec: ModelSpec, seq_len: int, attention: str = "full", recompute: str = "none") -> float:
    """Extra forward FLOPs per token that activation recomputation spends (0 for `none`).

    selective: the attention core's forward once more (Korthikanti et al. 2022, Sec. 5: QKᵀ, softmax, A·V).
    Korthikanti's App. A prints 72BLsh²(1 + s/(3h) + V/(12hL)), whose increment over Eq. 7 is the core's
    forward + backward (3 × this); we count what a checkpoint re-executes, one forward, as for `full`;
    full: every transformer layer once more, LM head excluded (Narayanan et al. 2021, Eq. 3:
    4 forward passes of the layers, 3 of the head).
    """
    check_choice(recompute, RECOMPUTE, "--recompute")
    if recompute == "none":
        return 0.0
    attention_core = attention_flops_per_token(spec, seq_len, attention)
    if recompute == "selective":
        return attention_core
    if recompute in ("selective-op", "selective-layer"):   # torchtitan's policies (account.counting.recompute)
        from trainledger.account.counting.recompute import checkpointed_fraction, recomputed_matmuls
        mats = recomputed_matmuls(weight_matmuls(spec), recompute)
        gemms = sum(2.0 * fan_in * fan_out * times for _, fan_in, fan_out, times in mats)
        if recompute == "selective-op":
            return gemms
        return checkpointed_fraction(spec.n_layers, recompute) * (gemms + attention_core)
    head = sum(2.0 * fan_in * fan_out * times for name, fan_in, fan_out, times in weight_matmuls(spec) if name in ("lm_head", "head"))
    return forward_flops_per_token(spec, seq_len, attention) - head


def hardware_flops_per_token(spec: ModelSpec, seq_len: int, attention: str = "full", recompute: str = "none",
                             mtp: bool = False) -> float:
    """FLOPs the hardware executes per training token: model train FLOPs + recomputation (of the main model's
    layers; the multi-token-prediction module's is not counted)."""
    return (train_flops_per_token(spec, seq_len, attention, mtp)
            + recompute_flops_per_token(spec, seq_len, attention, recompute))


def flops_per_step(spec: ModelSpec, batch_size: int, seq_len: int, attention: str = "full", recompute: str = "none",
                   mtp: bool = False) -> dict:
    """FLOPs per token and per step (batch_size × seq_len tokens) of a training step, model and hardware
    (`mtp`: with the multi-token-prediction modules).

    Keys: forward_flops_per_token, train_flops_per_token, hardware_flops_per_token,
    forward_flops_per_step, train_flops_per_step, hardware_flops_per_step, tokens_per_step.
    """
    tokens = batch_size * seq_len
    forward = forward_flops_per_token(spec, seq_len, attention, mtp)
    hardware = hardware_flops_per_token(spec, seq_len, attention, recompute, mtp)
    return {
        "forward_flops_per_token": forward,
        "train_flops_per_token": 3 * forward,
        "hardware_flops_per_token": hardware,
        "tokens_per_step": tokens,
        "forward_flops_per_step": forward * tokens,
        "train_flops_per_step": 3 * forward * tokens,
        "hardware_flops_per_step": hardware * tokens,
    }


def kaplan_train_flops_per_token(n_params: float) -> float:
    """Training FLOPs per token ≈ 6·N (Kaplan et al. 2020, arXiv:2001.08361, Sec. 2.1; CS336 Lecture 2: 6ND).

    N is the non-embedding parameter count in Kaplan; the lecture applies it to the total. Ignores the
    context-dependent attention term.
    """
    return 6.0 * n_params


def kaplan_forward_flops_per_token(n_params_non_embedding: float, n_layers: int, n_ctx: int, d_attn: int) -> float:
    """Forward FLOPs per token: 2·N + 2·n_layer·n_ctx·d_attn (Kaplan et al. 2020, Table 1; causal-style attention term)."""
    return 2.0 * n_params_non_embedding + 2.0 * n_layers * n_ctx * d_attn


def palm_train_flops_per_token(n_params: float, n_layers: int, n_heads: int, d_head: int, seq_len: int) -> float:
    """Training FLOPs per token: 6·N + 12·L·H·Q·T (PaLM, Chowdhery et al. 2022, arXiv:2204.02311, App. B; full attention)."""
    return 6.0 * n_params + 12.0 * n_layers * n_heads * d_head * seq_len


def train_flops(n_params: float, n_tokens: float) -> float:
    """Training FLOPs of N parameters on D tokens: 6·N·D (CS336 Lecture 2: 70B × 15T → 6.3e24)."""
    return 6.0 * n_params * n_tokens
