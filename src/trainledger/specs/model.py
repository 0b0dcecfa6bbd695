"""Model architecture as data: one `TransformerSpec` for every decoder family trainledger builds; `CruncherSpec` for the lecture's deep linear model.

Families: GPT-2/GPT-3, Llama, Mistral, Qwen2/Qwen3, Mixtral, Qwen2-MoE/Qwen3-MoE, GPT-NeoX (Pythia), Phi-3,
Gemma 2/Gemma 3, MPT, Phi (phi-1/1.5/2) and Falcon (specs/hf_config.py and specs/hf_config_parallel.py read
their config.json files).
This module is the contract between `account/` (formulas), `models/` (torch modules) and `measure/`:
every field below changes a parameter count, a FLOP count, a saved activation or the forward pass, and all
three layers read the same fields. Pure data — no torch.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import cached_property

from trainledger.errors import TrainledgerError

POSITIONS = ("learned", "rope", "alibi")   # GPT-2 learned absolute positions | rotary (no parameters) | ALiBi bias (MPT)
NORMS = ("layernorm", "rmsnorm", "gemma_rmsnorm")  # LayerNorm | RMSNorm w·x̂ (Llama) | RMSNorm (1 + w)·x̂ in fp32 (Gemma)
MLPS = ("gelu", "swiglu", "geglu")   # 2 matrices d->d_ff->d with GELU | 3: down(act(gate(x)) * up(x)), act silu | gelu
GELU_APPROXIMATIONS = ("tanh", "none")  # torch's F.gelu(approximate=...): tanh (GPT-2 gelu_new, Gemma) | none (erf)
ROPE_LAYOUTS = ("half", "interleaved")  # RoPE pairs (i, i + d/2): Hugging Face | (2i, 2i + 1): Meta, DeepSeek (models/rope.py)
# Default --seq-len of a config.json (which does not record its pre-training context): the bulk pre-training
# context of Llama 3 (arXiv:2407.21783, Sec. 3.4.1: 8K tokens before the long-context stage) and Mistral 7B
# (arXiv:2310.06825, Table 1: context_len 8192). Presets name their own (specs/presets.py).
DEFAULT_CONTEXT_CAP = 8192


@dataclass(frozen=True)
class TransformerSpec:
    """A decoder-only transformer, as the models the presets come from are built.

    Layer l (pre-norm): x + attn(norm1(x)), then x + mlp(norm2(x)); with `parallel_residual` (GPT-NeoX)
    x + attn(norm1(x)) + mlp(norm2(x)), and with `parallel_shared_norm` too (Phi, Falcon-7B) x + attn(h) + mlp(h),
    h = norm1(x), one norm per layer; with `sandwich_norm` (Gemma 2/3) the attention and MLP outputs pass
    through one more norm each before they are added. A final norm; an LM head d_model -> vocab_size (tied to
    the token embedding when `tied_embeddings`; with a bias when `lm_head_bias`). Attention has n_heads query heads of size d_head and
    n_kv_heads key/value heads (grouped-query attention when n_kv_heads < n_heads).
    MoE (n_experts > 1): each layer's MLP (except `dense_layers`) is n_experts copies of the MLP plus a
    bias-free router d_model -> n_experts; each token runs through `experts_per_token` of them (Mixtral),
    plus an always-on shared expert of `shared_expert_d_ff` when set (Qwen2-MoE).
    """

    name: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int                           # MLP width; for MoE the width of one routed expert
    n_kv_heads: int | None = None       # None: = n_heads (multi-head attention)
    d_head: int | None = None           # None: = d_model // n_heads (GPT-3 13B has 40 × 128 = 5120 != 5140)
    max_seq_len: int = 2048             # context length; learned position table size
    pretrain_seq_len: int | None = None  # context most pre-training tokens were seen at (the default --seq-len)
    position: str = "rope"
    norm: str = "rmsnorm"
    norm_bias: bool = False             # LayerNorm bias (GPT-2: True)
    norm_eps: float = 1e-5
    mlp: str = "swiglu"
    gelu_approximate: str = "tanh"      # GELU of the gelu/geglu MLPs: "tanh" (GPT-2, Gemma) or "none" (erf: NeoX, MPT)
    qkv_bias: bool = False              # biases on q, k, v projections (GPT-2, Qwen2: True)
    attn_out_bias: bool = False         # bias on the attention output projection (GPT-2: True)
    mlp_bias: bool = False              # biases on the MLP matrices (GPT-2: True)
    tied_embeddings: bool = False       # LM head shares the token-embedding matrix (GPT-2: True)
    n_experts: int = 1                  # > 1: mixture of experts
    experts_per_token: int = 1          # top-k routing
    rope_theta: float = 10000.0
    rope_layout: str = "half"           # which dims RoPE pairs (ROPE_LAYOUTS); the same counts, other weights
    # --- features of the newer families (defaults: the GPT-2/Llama behaviour) ---------------------------
    partial_rotary_factor: float = 1.0  # RoPE rotates the first int(d_head · factor) dims of each head (NeoX: 0.25)
    rope_local_theta: float | None = None  # RoPE θ of the sliding-window layers (Gemma 3: 10000; global 1e6)
    parallel_residual: bool = False     # x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX use_parallel_residual)
    parallel_shared_norm: bool = False  # ... both branches read one norm: x + attn(h) + mlp(h), h = norm1(x) (Phi, Falcon-7B)
    lm_head_bias: bool = False          # the LM head d_model -> vocab has a bias (Phi)
    sandwich_norm: bool = False         # norms on the attention and MLP outputs too: 4 per layer (Gemma 2/3)
    qk_norm: bool = False               # a `norm` over d_head on every query and key head, before RoPE (Qwen3, Gemma 3)
    scale_embeddings: bool = False      # token embeddings × √d_model, rounded to the activation dtype (Gemma)
    attn_scale: float | None = None     # softmax scale of QKᵀ; None: 1/√d_head (Gemma 2 27B: 144^-0.5; MPT softmax_scale)
    attn_softcap: float | None = None   # attention logits s -> c·tanh(s/c) before the mask (Gemma 2: 50)
    final_softcap: float | None = None  # output logits z -> c·tanh(z/c) (Gemma 2: 30)
    clip_qkv: float | None = None       # q, k, v clamped to ±clip_qkv (MPT-30B: 6)
    alibi_bias_max: float = 8.0         # ALiBi slopes 2^(-bias_max·i/H'), H' = heads rounded up to a power of 2 (MPT)
    sliding_window: int | None = None   # a query sees the last `sliding_window` keys (itself included) ...
    sliding_layers: tuple[int, ...] | None = None  # ... in these layers (None: every layer; Gemma 2: 0, 2, 4, ...)
    renormalize_topk: bool = True       # MoE: the top-k router probabilities are rescaled to sum to 1 (Mixtral)
    shared_expert_d_ff: int | None = None  # MoE: an always-on expert of this width in every MoE layer (Qwen2-MoE)
    shared_expert_gate: bool = False    # ... scaled by sigmoid(x·w), w a bias-free d_model -> 1 linear (Qwen2-MoE)
    dense_layers: tuple[int, ...] = ()  # MoE: layers with a dense MLP of `dense_d_ff` instead (mlp_only_layers)
    dense_d_ff: int | None = None
    # --- multi-head latent attention (DeepSeek-V2/V3, arXiv:2412.19437 Sec. 2.1.1); None: ordinary attention ---
    # With kv_lora_rank set, d_head is the query/key head size (qk_nope_head_dim + qk_rope_head_dim) and
    # v_head_dim the value head size; q_lora_rank None means a direct d_model -> n_heads·d_head query.
    kv_lora_rank: int | None = None     # keys/values compressed to this latent (+ a shared RoPE key of qk_rope_head_dim)
    q_lora_rank: int | None = None      # queries compressed to this latent first (DeepSeek-V3: 1536)
    qk_rope_head_dim: int | None = None  # the rotary part of each query/key head (DeepSeek-V3: 64)
    v_head_dim: int | None = None       # value head size (DeepSeek-V3: 128); None: = d_head
    # --- further MoE / attention details of the 2025 families --------------------------------------------
    attention_sinks: bool = False       # one learned logit per head joins each softmax (gpt-oss)
    router_bias: bool = False           # the router d_model -> n_experts has a bias (gpt-oss)
    n_mtp_layers: int = 0               # multi-token-prediction modules (DeepSeek-V3: 1), counted apart from n_params
    # group-limited routing (DeepSeek-V3 config n_group 8, topk_group 4; arXiv:2412.19437 Sec. 2.1.2, 3.2.2): the
    # experts in `expert_groups` equal groups, a token's top-k taken within `expert_groups_per_token` of them; 0: none
    expert_groups: int = 0
    expert_groups_per_token: int = 0
    # the Hugging Face model_type whose module names (and fused projections) the spec's Linears carry, for LoRA
    # targets (account/finetune/targets.py); "" = trainledger's own Transformer (q_proj ... o_proj, gate, up, down)
    family: str = ""
    approximations: tuple[str, ...] = ()  # parts of the source config our Transformer does not reproduce
    source: str = ""                    # where the numbers come from (config.json, paper table)
    published_n_params: int | None = None  # the published / Hugging Face count, for tests

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise TrainledgerError(f"model '{self.name}': {name} must be a positive integer, got {value!r}")
        if self.pretrain_seq_len is not None and not (isinstance(self.pretrain_seq_len, int) and self.pretrain_seq_len > 0):
            raise TrainledgerError(f"model '{self.name}': pretrain_seq_len must be a positive integer, got {self.pretrain_seq_len!r}")
        for name in ("shared_expert_d_ff", "dense_d_ff", "sliding_window", "kv_lora_rank", "q_lora_rank",
                     "qk_rope_head_dim", "v_head_dim"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value <= 0):
                raise TrainledgerError(f"model '{self.name}': {name} must be a positive integer or None, got {value!r}")
        if self.n_kv_heads is not None and (self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads):
            raise TrainledgerError(f"model '{self.name}': n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.d_head is None and self.d_model % self.n_heads:
            raise TrainledgerError(f"model '{self.name}': n_heads={self.n_heads} must divide d_model={self.d_model} (or give d_head)")
        for name, allowed in (("position", POSITIONS), ("norm", NORMS), ("mlp", MLPS),
                              ("gelu_approximate", GELU_APPROXIMATIONS), ("rope_layout", ROPE_LAYOUTS)):
            if getattr(self, name) not in allowed:
                raise TrainledgerError(f"model '{self.name}': {name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.n_experts < 1 or not 1 <= self.experts_per_token <= self.n_experts:
            raise TrainledgerError(f"model '{self.name}': need 1 <= experts_per_token <= n_experts, got "
                                   f"{self.experts_per_token} of {self.n_experts}")
        if self.expert_groups and (self.n_experts % self.expert_groups
                                   or not 1 <= self.expert_groups_per_token <= self.expert_groups
                                   or self.expert_groups_per_token * self.n_experts // self.expert_groups
                                   < self.experts_per_token):
            raise TrainledgerError(f"model '{self.name}': expert_groups={self.expert_groups} must divide n_experts="
                                   f"{self.n_experts} and expert_groups_per_token={self.expert_groups_per_token} "
                                   f"groups must hold the {self.experts_per_token} experts of a token")
        if not 0 < self.partial_rotary_factor <= 1 or self.rotary_dim % 2:
            rotated = self.rotary_dim if 0 < self.partial_rotary_factor <= 1 else "none"
            raise TrainledgerError(f"model '{self.name}': partial_rotary_factor={self.partial_rotary_factor} must give an "
                                   f"even number of rotated dims in (0, d_head={self.head_dim}], got {rotated}")
        for name in ("attn_scale", "attn_softcap", "final_softcap", "clip_qkv"):
            value = getattr(self, name)
            if value is not None and not (_is_number(value) and 0 < value < math.inf):
                raise TrainledgerError(f"model '{self.name}': {name} must be a positive number or None, got {value!r}")
        _check_ranges(self)
        if self.dense_layers and self.dense_d_ff is None:
            raise TrainledgerError(f"model '{self.name}': dense_layers {self.dense_layers} need dense_d_ff")
        if self.is_mla and (self.qk_rope_head_dim is None or not self.qk_rope_head_dim < self.head_dim):
            raise TrainledgerError(f"model '{self.name}': multi-head latent attention needs qk_rope_head_dim < d_head="
                                   f"{self.head_dim}, got {self.qk_rope_head_dim!r}")
        if not isinstance(self.n_mtp_layers, int) or self.n_mtp_layers < 0:
            raise TrainledgerError(f"model '{self.name}': n_mtp_layers must be a non-negative integer, got {self.n_mtp_layers!r}")
        if self.parallel_shared_norm and not self.parallel_residual:
            raise TrainledgerError(f"model '{self.name}': parallel_shared_norm needs parallel_residual (one norm feeds "
                                   "both branches of a parallel block)")
        if self.shared_expert_gate and self.shared_expert_d_ff is None:
            raise TrainledgerError(f"model '{self.name}': shared_expert_gate needs shared_expert_d_ff")

    kind = "transformer"

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads (= n_heads without grouped-query attention)."""
        return self.n_kv_heads or self.n_heads

    @property
    def head_dim(self) -> int:
        """Size of one attention head."""
        return self.d_head or self.d_model // self.n_heads

    @property
    def value_dim(self) -> int:
        """Size of one value head: v_head_dim (multi-head latent attention) or d_head."""
        return self.v_head_dim or self.head_dim

    @property
    def is_mla(self) -> bool:
        """Whether attention is DeepSeek's multi-head latent attention (kv_lora_rank set)."""
        return self.kv_lora_rank is not None

    @property
    def rotary_dim(self) -> int:
        """Dims of each head that RoPE rotates: int(d_head · partial_rotary_factor), as transformers computes it
        (multi-head latent attention: qk_rope_head_dim)."""
        if self.kv_lora_rank is not None and self.qk_rope_head_dim:
            return self.qk_rope_head_dim
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 1

    @property
    def default_seq_len(self) -> int:
        """Tokens per sequence when --seq-len is not given: the pre-training context (`pretrain_seq_len`).

        A config.json does not say it; then min(max_seq_len, DEFAULT_CONTEXT_CAP): a long-context model's
        position range (128K for Llama 3.1) is reached only in a short final stage, not in bulk pre-training.
        Never more than max_seq_len (a shrunken copy of a preset, `with_(max_seq_len=64)`, gets 64).
        """
        return min(self.pretrain_seq_len or DEFAULT_CONTEXT_CAP, self.max_seq_len)

    @property
    def gated_mlp(self) -> bool:
        """True for the 3-matrix MLPs (SwiGLU, GeGLU): down(act(gate(x)) · up(x))."""
        return self.mlp in ("swiglu", "geglu")

    @cached_property
    def _named_layers(self) -> tuple[frozenset, frozenset | None]:
        """(dense_layers, sliding_layers or None) as sets, built once: a membership test per layer is then O(1), not
        O(named layers) (a 16,384-layer Gemma config named 16,384 layers, and `step` asked about each of them)."""
        return frozenset(self.dense_layers), None if self.sliding_layers is None else frozenset(self.sliding_layers)

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer `layer` (0-based) has a mixture of experts (False for a dense model or a `dense_layers` entry)."""
        return self.is_moe and layer not in self._named_layers[0]

    @property
    def n_moe_layers(self) -> int:
        """Number of layers with a mixture of experts."""
        return sum(count for layer, count in self.layer_groups() if self.is_moe_layer(layer))

    def layer_groups(self) -> list[tuple[int, int]]:
        """(a representative layer, how many layers are like it) for each kind of layer (MoE or dense, sliding or
        not, hence its RoPE θ). Only `dense_layers` and `sliding_layers` name layers; every other layer is alike,
        so per-layer sums cost O(named layers), never O(n_layers): a request may name 10^400 layers. Computed once
        per spec (the accounting asks hundreds of times per answer)."""
        return list(self._layer_groups)

    @cached_property
    def _layer_groups(self) -> tuple[tuple[int, int], ...]:
        named = sorted({i for i in (*self.dense_layers, *(self.sliding_layers or ())) if 0 <= i < self.n_layers})
        groups: dict[tuple[bool, bool], list[int]] = {}
        for i in named:
            groups.setdefault((self.is_moe_layer(i), self.is_sliding(i)), [i, 0])[1] += 1
        if self.n_layers > len(named):
            taken = set(named)
            first = next(i for i in range(len(named) + 1) if i not in taken)
            groups.setdefault((self.is_moe_layer(first), self.is_sliding(first)), [first, 0])[1] += self.n_layers - len(named)
        return tuple((layer, count) for layer, count in groups.values())

    def is_sliding(self, layer: int) -> bool:
        """Whether layer `layer` attends only within `sliding_window`."""
        sliding = self._named_layers[1]
        return self.sliding_window is not None and (sliding is None or layer in sliding)

    def layer_rope_theta(self, layer: int) -> float:
        """RoPE θ of layer `layer`: `rope_local_theta` in sliding-window layers when set, else `rope_theta`."""
        return self.rope_local_theta if self.rope_local_theta is not None and self.is_sliding(layer) else self.rope_theta

    def with_(self, **changes) -> "TransformerSpec":
        """A copy with some fields changed (e.g. `spec.with_(n_layers=2)` for a tiny test config)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self) | {"kind": self.kind}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# The numbers a forward pass divides by or raises to a power: outside these ranges the model computes NaN or
# infinities from the first step (a negative RMSNorm eps takes the root of a negative number; θ <= 1 gives RoPE
# frequencies that do not fall, θ = -inf gives NaN angles), and training then stops at step 1 blaming the
# learning rate. Published values: eps 1e-12 (BERT) to 1e-5, θ 10,000 (RoFormer) to 5e6; ALiBi's bias_max 8.
NORM_EPS_RANGE = (0.0, 1.0)               # exclusive at both ends


def _check_ranges(spec: "TransformerSpec") -> None:
    """A one-line TrainledgerError for a value outside the range a forward pass can compute with."""
    low, high = NORM_EPS_RANGE
    if not (_is_number(spec.norm_eps) and low < spec.norm_eps < high):
        raise TrainledgerError(f"model '{spec.name}': norm_eps (rms_norm_eps / layer_norm_epsilon) must be a number in "
                               f"(0, 1), e.g. 1e-5, got {spec.norm_eps!r}")
    for name in ("rope_theta", "rope_local_theta"):
        value = getattr(spec, name)
        if value is not None and not (_is_number(value) and 1 < value < math.inf):
            raise TrainledgerError(f"model '{spec.name}': {name} must be a finite number above 1 (the RoPE base; "
                                   f"10,000 in most models), got {value!r}")
    if not (_is_number(spec.alibi_bias_max) and 0 < spec.alibi_bias_max < math.inf):
        raise TrainledgerError(f"model '{spec.name}': alibi_bias_max must be a finite positive number (MPT: 8), got "
                               f"{spec.alibi_bias_max!r}")


@dataclass(frozen=True)
class CruncherSpec:
    """The lecture's deep linear model: `n_layers` × Linear(dim, dim), then Linear(dim, 1); no biases.

    Parameters: dim²·n_layers + dim (Cruncher(dim=64, num_layers=2) has 8,256).
    """

    name: str = "cruncher"
    dim: int = 64
    n_layers: int = 2
    source: str = "CS336 Lecture 2, `Cruncher` (custom_model)"
    published_n_params: int | None = None

    kind = "cruncher"

    def __post_init__(self):
        for name in ("dim", "n_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise TrainledgerError(f"model '{self.name}': {name} must be a positive integer, got {value!r}")

    def with_(self, **changes) -> "CruncherSpec":
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self) | {"kind": self.kind}


ModelSpec = TransformerSpec | CruncherSpec
