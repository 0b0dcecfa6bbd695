"""Model architecture as data: one `TransformerSpec` for GPT-2, GPT-3, Llama, Mistral, Qwen2 and Mixtral; `CruncherSpec` for the lecture's deep linear model.

This module is the contract between `account/` (formulas), `models/` (torch modules) and `measure/`:
every field below changes a parameter count, a FLOP count or a saved activation, and all three layers
read the same fields. Pure data — no torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from trainledger.errors import TrainledgerError

POSITIONS = ("learned", "rope")   # GPT-2 learned absolute positions | rotary (no parameters)
NORMS = ("layernorm", "rmsnorm")  # LayerNorm (weight, optional bias) | RMSNorm (weight only)
MLPS = ("gelu", "swiglu")         # 2 matrices d->d_ff->d with GELU | 3 matrices: down(silu(gate(x)) * up(x))
# Default --seq-len of a config.json (which does not record its pre-training context): the bulk pre-training
# context of Llama 3 (arXiv:2407.21783, Sec. 3.4.1: 8K tokens before the long-context stage) and Mistral 7B
# (arXiv:2310.06825, Table 1: context_len 8192). Presets name their own (specs/presets.py).
DEFAULT_CONTEXT_CAP = 8192


@dataclass(frozen=True)
class TransformerSpec:
    """A decoder-only transformer, pre-norm, as the models the presets come from are built.

    Layer l: x + attn(norm1(x)), then x + mlp(norm2(x)); a final norm; an LM head d_model -> vocab_size
    (tied to the token embedding when `tied_embeddings`). Attention has n_heads query heads of size d_head
    and n_kv_heads key/value heads (grouped-query attention when n_kv_heads < n_heads).
    MoE (n_experts > 1): each layer's MLP is n_experts copies of the MLP plus a bias-free router
    d_model -> n_experts; each token runs through `experts_per_token` of them (Mixtral).
    """

    name: str
    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    d_ff: int
    n_kv_heads: int | None = None       # None: = n_heads (multi-head attention)
    d_head: int | None = None           # None: = d_model // n_heads (GPT-3 13B has 40 × 128 = 5120 != 5140)
    max_seq_len: int = 2048             # context length; learned position table size
    pretrain_seq_len: int | None = None  # context most pre-training tokens were seen at (the default --seq-len)
    position: str = "rope"
    norm: str = "rmsnorm"
    norm_bias: bool = False             # LayerNorm bias (GPT-2: True)
    norm_eps: float = 1e-5
    mlp: str = "swiglu"
    qkv_bias: bool = False              # biases on q, k, v projections (GPT-2, Qwen2: True)
    attn_out_bias: bool = False         # bias on the attention output projection (GPT-2: True)
    mlp_bias: bool = False              # biases on the MLP matrices (GPT-2: True)
    tied_embeddings: bool = False       # LM head shares the token-embedding matrix (GPT-2: True)
    n_experts: int = 1                  # > 1: mixture of experts
    experts_per_token: int = 1          # top-k routing
    rope_theta: float = 10000.0
    source: str = ""                    # where the numbers come from (config.json, paper table)
    published_n_params: int | None = None  # the published / Hugging Face count, for tests

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise TrainledgerError(f"model '{self.name}': {name} must be a positive integer, got {value!r}")
        if self.pretrain_seq_len is not None and not (isinstance(self.pretrain_seq_len, int) and self.pretrain_seq_len > 0):
            raise TrainledgerError(f"model '{self.name}': pretrain_seq_len must be a positive integer, got {self.pretrain_seq_len!r}")
        if self.n_kv_heads is not None and (self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads):
            raise TrainledgerError(f"model '{self.name}': n_kv_heads={self.n_kv_heads} must divide n_heads={self.n_heads}")
        if self.d_head is None and self.d_model % self.n_heads:
            raise TrainledgerError(f"model '{self.name}': n_heads={self.n_heads} must divide d_model={self.d_model} (or give d_head)")
        if self.position not in POSITIONS:
            raise TrainledgerError(f"model '{self.name}': position must be one of {POSITIONS}, got {self.position!r}")
        if self.norm not in NORMS:
            raise TrainledgerError(f"model '{self.name}': norm must be one of {NORMS}, got {self.norm!r}")
        if self.mlp not in MLPS:
            raise TrainledgerError(f"model '{self.name}': mlp must be one of {MLPS}, got {self.mlp!r}")
        if self.n_experts < 1 or not 1 <= self.experts_per_token <= self.n_experts:
            raise TrainledgerError(f"model '{self.name}': need 1 <= experts_per_token <= n_experts, got "
                                   f"{self.experts_per_token} of {self.n_experts}")

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

    def with_(self, **changes) -> "TransformerSpec":
        """A copy with some fields changed (e.g. `spec.with_(n_layers=2)` for a tiny test config)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self) | {"kind": self.kind}


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
