"""A decoder-only, pre-norm transformer built from a `TransformerSpec`: GPT-2, Llama, Mistral, Qwen2, Mixtral."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from jaxtyping import Float, Int
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from trainledger.errors import TrainledgerError
from trainledger.models.attention import Attention
from trainledger.models.mlp import MoE, make_expert
from trainledger.models.norms import make_norm
from trainledger.models.rope import rope_cos_sin

RECOMPUTE = ("none", "selective", "full")
INIT_STD = 0.02  # GPT-2 / nanoGPT: every weight N(0, 0.02²)


class Block(nn.Module):
    """One pre-norm layer: x + attn(norm1(x)), then x + mlp(norm2(x)) (GPT-2 / Llama ordering)."""

    def __init__(self, spec, *, device=None, dtype=None):
        super().__init__()
        self.norm1 = make_norm(spec, device=device, dtype=dtype)
        self.attn = Attention(spec, device=device, dtype=dtype)
        self.norm2 = make_norm(spec, device=device, dtype=dtype)
        self.mlp = MoE(spec, device=device, dtype=dtype) if spec.is_moe else make_expert(spec, device=device, dtype=dtype)

    def forward(self, x: Float[Tensor, "batch seq d_model"], cos: Tensor | None = None,
                sin: Tensor | None = None) -> Float[Tensor, "batch seq d_model"]:
        x = x + self.attn(self.norm1(x), cos, sin)
        return x + self.mlp(self.norm2(x))


class Transformer(nn.Module):
    """Decoder-only language model for `spec`: embeddings, n_layers pre-norm blocks, final norm, LM head.

    forward(idx) returns logits (batch, seq, vocab) in the model's dtype; forward(idx, targets) returns
    (logits, loss) with the mean cross-entropy over all batch×seq positions computed in fp32.

    Every spec field is honoured: positions learned (a (max_seq_len, d_model) table, GPT-2) or RoPE
    (rope_theta, head_dim); LayerNorm (norm_bias) or RMSNorm, both with norm_eps; GELU (tanh) or SwiGLU MLPs
    with mlp_bias; q/k/v biases (qkv_bias) and output bias (attn_out_bias); grouped-query attention
    (n_kv_heads); head size d_head; mixture of experts (n_experts, experts_per_token); the LM head is the
    token-embedding matrix when tied_embeddings, else a bias-free nn.Linear.

    `recompute`: "none", "selective" (checkpoint the SDPA call of each layer) or "full" (checkpoint each
    block; only its input is kept, and backward re-runs the whole block: early stop is off), with
    torch.utils.checkpoint(use_reentrant=False). It applies whenever
    autograd is recording (torch.is_grad_enabled()), in train or eval mode alike (the model has no dropout).

    Builds on the meta device (`with torch.device("meta"): Transformer(spec)`); `dtype` sets the
    parameters' dtype.
    """

    def __init__(self, spec, *, recompute: str = "none", dtype: torch.dtype | None = None, device=None):
        super().__init__()
        if getattr(spec, "kind", None) != "transformer":
            raise TrainledgerError(f"Transformer needs a TransformerSpec, got {type(spec).__name__} ({getattr(spec, 'name', spec)!r})")
        self.spec = spec
        factory = {"device": device, "dtype": dtype}
        self.tok_embeddings = nn.Embedding(spec.vocab_size, spec.d_model, **factory)
        self.pos_embeddings = (nn.Embedding(spec.max_seq_len, spec.d_model, **factory)
                               if spec.position == "learned" else None)
        self.blocks = nn.ModuleList([Block(spec, **factory) for _ in range(spec.n_layers)])
        self.norm = make_norm(spec, **factory)
        if spec.tied_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nn.Linear(spec.d_model, spec.vocab_size, bias=False, **factory)
        self.recompute = recompute
        self.reset_parameters()

    # ----- configuration -------------------------------------------------------------------------------
    @property
    def recompute(self) -> str:
        return self._recompute

    @recompute.setter
    def recompute(self, value: str) -> None:
        if value not in RECOMPUTE:
            raise TrainledgerError(f"recompute must be one of {', '.join(RECOMPUTE)}, got {value!r} (--recompute)")
        self._recompute = value
        for block in self.blocks:
            block.attn.selective = value == "selective"

    def output_weight(self) -> Float[Tensor, "vocab d_model"]:
        """The LM-head matrix (vocab, d_model): the token embedding when tied."""
        return self.tok_embeddings.weight if self.lm_head is None else self.lm_head.weight

    def n_params(self, non_embedding: bool = False) -> int:
        """Number of unique parameters (count); a tied head is counted once.

        non_embedding=True leaves out the token and position embeddings and an untied LM head
        (the Qwen / Llama model-card convention used by `trainledger params`).
        """
        total = sum(p.numel() for p in self.parameters())  # parameters() yields a shared tensor once
        if non_embedding:
            total -= self.tok_embeddings.weight.numel()
            if self.pos_embeddings is not None:
                total -= self.pos_embeddings.weight.numel()
            if self.lm_head is not None:
                total -= self.lm_head.weight.numel()
        return total

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2 initialisation: weights and embeddings N(0, 0.02²), biases 0, norm weights 1; residual projections N(0, (0.02/√(2·n_layers))²).

        The scaled residual init is GPT-2's (Radford et al. 2019, Sec. 2.3: "scale the weights of residual
        layers at initialization by 1/√N", N residual layers = 2 per block), as nanoGPT writes it
        (`c_proj.weight` std 0.02/sqrt(2·n_layer)). Applies to attention o_proj and every MLP/expert `down`.
        Works on the meta device (a no-op there); call it again after `to_empty(device=...)`.
        """
        if any(p.is_meta for p in self.parameters()):
            return   # nothing to draw on meta; torch's meta normal_ costs ~5 ms a tensor (3 s for a 70B model)
        residual_std = INIT_STD / math.sqrt(2 * self.spec.n_layers)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                residual = name.endswith("o_proj") or name.endswith("down")
                nn.init.normal_(module.weight, mean=0.0, std=residual_std if residual else INIT_STD)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            elif module is not self and hasattr(module, "reset_parameters") and not list(module.children()):
                module.reset_parameters()   # norms: weight 1, bias 0

    # ----- forward -----------------------------------------------------------------------------------
    def forward(self, idx: Int[Tensor, "batch seq"], targets: Int[Tensor, "batch seq"] | None = None):
        """Logits (batch, seq, vocab); with `targets`, (logits, loss) where loss is the fp32 mean cross-entropy."""
        seq_len = idx.shape[1]
        if seq_len > self.spec.max_seq_len and self.pos_embeddings is not None:
            raise TrainledgerError(f"sequence length {seq_len} exceeds max_seq_len {self.spec.max_seq_len} "
                                   f"of model '{self.spec.name}' (--seq-len)")
        x = self.tok_embeddings(idx)
        cos = sin = None
        if self.pos_embeddings is not None:
            x = x + self.pos_embeddings(torch.arange(seq_len, device=idx.device))
        else:
            cos, sin = rope_cos_sin(seq_len, self.spec.head_dim, self.spec.rope_theta, device=idx.device, dtype=x.dtype)
        full = self._recompute == "full" and torch.is_grad_enabled()
        for block in self.blocks:
            if full:
                # Early stop off: the backward re-runs the whole block forward (every matmul, as Megatron-LM's
                # full recompute counts it) rather than stopping after the last saved tensor (before MLP `down`).
                with set_checkpoint_early_stop(False):
                    x = checkpoint(block, x, cos, sin, use_reentrant=False)
            else:
                x = block(x, cos, sin)
        logits = F.linear(self.norm(x), self.output_weight())
        if targets is None:
            return logits
        return logits, self.loss(logits, targets)

    @staticmethod
    def loss(logits: Float[Tensor, "batch seq vocab"], targets: Int[Tensor, "batch seq"]) -> Float[Tensor, ""]:
        """Mean next-token cross-entropy in nats over all positions, computed in fp32 (the logits are upcast)."""
        return F.cross_entropy(rearrange(logits.float(), "b t v -> (b t) v"), rearrange(targets, "b t -> (b t)"))


def build_model(spec, *, recompute: str = "none", dtype: torch.dtype | None = None, device=None) -> nn.Module:
    """The torch module for any model spec: `Transformer` for a TransformerSpec, `Cruncher` for a CruncherSpec."""
    if getattr(spec, "kind", None) == "cruncher":
        from trainledger.models.cruncher import Cruncher
        return Cruncher.from_spec(spec, device=device, dtype=dtype)
    return Transformer(spec, recompute=recompute, dtype=dtype, device=device)
