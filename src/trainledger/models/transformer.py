"""A decoder-only, pre-norm transformer built from a `TransformerSpec`: GPT-2/3, Llama, Mistral, Qwen2/3, Mixtral,
Qwen-MoE, GPT-NeoX, Phi-3, Gemma 2/3, MPT."""

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
from trainledger.models.losses import chunked_cross_entropy
from trainledger.models.mla import LatentAttention
from trainledger.models.masks import alibi_slopes, attention_mask
from trainledger.models.mlp import MoE, make_expert
from trainledger.models.norms import make_norm
from trainledger.models.rope import rope_cos_sin

RECOMPUTE = ("none", "selective", "full")
INIT_STD = 0.02  # GPT-2 / nanoGPT: every weight N(0, 0.02²)


class Block(nn.Module):
    """One layer: x + attn(norm1(x)), then x + mlp(norm2(x)) (GPT-2 / Llama ordering).

    `parallel_residual` (GPT-NeoX): x + attn(norm1(x)) + mlp(norm2(x)), both branches reading the block input;
    with `parallel_shared_norm` (Phi, Falcon-7B) both read norm1(x) and there is no norm2.
    `sandwich_norm` (Gemma 2/3): x + attn_out_norm(attn(norm1(x))), then x + mlp_out_norm(mlp(norm2(x))).
    The MLP of layer `layer` is a mixture of experts when spec.is_moe_layer(layer), else dense (of
    `dense_d_ff` in an MoE model's dense layers).
    """

    def __init__(self, spec, layer: int = 0, *, device=None, dtype=None):
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.parallel = spec.parallel_residual
        self.norm1 = make_norm(spec, **factory)
        self.attn = LatentAttention(spec, **factory) if spec.is_mla else Attention(spec, **factory)
        self.attn_out_norm = make_norm(spec, **factory) if spec.sandwich_norm else None
        self.norm2 = None if spec.parallel_shared_norm else make_norm(spec, **factory)   # Phi, Falcon-7B: one norm
        if spec.is_moe_layer(layer):
            self.mlp = MoE(spec, **factory)
        else:
            self.mlp = make_expert(spec, spec.dense_d_ff if spec.is_moe else None, **factory)
        self.mlp_out_norm = make_norm(spec, **factory) if spec.sandwich_norm else None

    def forward(self, x: Float[Tensor, "batch seq d_model"], cos: Tensor | None = None,
                sin: Tensor | None = None, mask: Tensor | None = None, cache=None) -> Float[Tensor, "batch seq d_model"]:
        # the cache only when decoding: training keeps the 4 positional inputs that TP's PrepareModuleInput expects
        h = self.norm1(x)
        inputs = (h, cos, sin, mask) + ((cache,) if cache is not None else ())
        a = self.attn(*inputs)
        if self.parallel:
            return x + a + self.mlp(h if self.norm2 is None else self.norm2(x))
        if self.attn_out_norm is not None:
            a = self.attn_out_norm(a)
        x = x + a
        m = self.mlp(self.norm2(x))
        if self.mlp_out_norm is not None:
            m = self.mlp_out_norm(m)
        return x + m


def run_block(block: nn.Module, x: Tensor, cos: Tensor | None, sin: Tensor | None, mask: Tensor | None,
              full: bool) -> Tensor:
    """block(x, cos, sin, mask); with `full`, under one torch.utils.checkpoint(use_reentrant=False): only the block's
    input is kept for backward, which re-runs the block's forward. Early stop is off, so backward re-runs the whole
    block (every matmul, as Megatron-LM's full recompute counts it) rather than stopping after the last saved tensor
    (before MLP `down`). Transformer.forward and the pipeline stages (train/pipeline.py) run their blocks here."""
    if not full:
        return block(x, cos, sin, mask)
    with set_checkpoint_early_stop(False):
        return checkpoint(block, x, cos, sin, mask, use_reentrant=False)


class Transformer(nn.Module):
    """Decoder-only language model for `spec`: embeddings, n_layers pre-norm blocks, final norm, LM head.

    forward(idx) returns logits (batch, seq, vocab) in the model's dtype; forward(idx, targets) returns
    (logits, loss) with the mean cross-entropy over all batch×seq positions computed in fp32.

    Every spec field is honoured: positions learned (a (max_seq_len, d_model) table, GPT-2), RoPE (rope_theta,
    partial_rotary_factor, rope_local_theta in sliding layers) or ALiBi (alibi_bias_max); LayerNorm
    (norm_bias), RMSNorm or Gemma's (1 + w) RMSNorm, with norm_eps; GELU (tanh or erf), SwiGLU or GeGLU MLPs
    with mlp_bias; q/k/v biases (qkv_bias) and output bias (attn_out_bias); grouped-query attention
    (n_kv_heads); head size d_head; QK-norm; parallel residual; sandwich norms; embeddings × √d_model
    (scale_embeddings); attn_scale, attn_softcap, final_softcap, clip_qkv; sliding windows (sliding_window,
    sliding_layers); mixture of experts (n_experts, experts_per_token, renormalize_topk, shared expert,
    dense_layers); the LM head is the token-embedding matrix when tied_embeddings, else an nn.Linear (with a bias
    when lm_head_bias: Phi); parallel_shared_norm (one norm for both branches of a parallel block).
    See docs/models.md for each against the transformers implementation it reproduces.

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
        self.blocks = nn.ModuleList([Block(spec, i, **factory) for i in range(spec.n_layers)])
        self.norm = make_norm(spec, **factory)
        # a tied head with a bias (Phi's lm_head bias under tie_word_embeddings) keeps the bias as its own parameter
        self.lm_head_bias = (nn.Parameter(torch.empty(spec.vocab_size, **factory))
                             if spec.tied_embeddings and spec.lm_head_bias else None)
        if spec.tied_embeddings:
            self.lm_head = None
        else:
            self.lm_head = nn.Linear(spec.d_model, spec.vocab_size, bias=spec.lm_head_bias, **factory)
        self.recompute = recompute
        self.loss_chunks = 1        # > 1: forward(idx, targets) returns (None, the chunked cross-entropy)
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

    def recomputes_blocks(self) -> bool:
        """Whether this forward checkpoints each block (recompute "full" while autograd records)."""
        return self._recompute == "full" and torch.is_grad_enabled()

    def output_weight(self) -> Float[Tensor, "vocab d_model"]:
        """The LM-head matrix (vocab, d_model): the token embedding when tied."""
        return self.tok_embeddings.weight if self.lm_head is None else self.lm_head.weight

    def output_bias(self) -> Tensor | None:
        """The LM head's bias (vocab,) when spec.lm_head_bias (Phi), else None."""
        return self.lm_head_bias if self.lm_head is None else self.lm_head.bias

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
        if self.lm_head_bias is not None:
            nn.init.zeros_(self.lm_head_bias)

    # ----- forward -----------------------------------------------------------------------------------
    def forward(self, idx: Int[Tensor, "batch seq"], targets: Int[Tensor, "batch seq"] | None = None):
        """Logits (batch, seq, vocab); with `targets`, (logits, loss) where loss is the fp32 mean cross-entropy."""
        spec, seq_len = self.spec, idx.shape[1]
        if seq_len > spec.max_seq_len and self.pos_embeddings is not None:
            raise TrainledgerError(f"sequence length {seq_len} exceeds max_seq_len {spec.max_seq_len} "
                                   f"of model '{spec.name}' (--seq-len)")
        x = self.tok_embeddings(idx)
        if spec.scale_embeddings:   # Gemma: × √d_model rounded to the activation dtype (a Python scalar: saves nothing)
            x = x * torch.tensor(spec.d_model ** 0.5, dtype=x.dtype, device="cpu").item()
        if self.pos_embeddings is not None:
            x = x + self.pos_embeddings(torch.arange(seq_len, device=idx.device))
        rope, masks = self._layer_inputs(seq_len, idx.device, x.dtype)
        full = self.recomputes_blocks()
        for i, block in enumerate(self.blocks):
            cos, sin = rope.get(spec.layer_rope_theta(i), (None, None))
            mask = masks.get(spec.is_sliding(i) and seq_len > spec.sliding_window)
            x = run_block(block, x, cos, sin, mask, full)
        h = self.norm(x)
        if targets is not None and self.loss_chunks > 1:     # models/losses.py: the logits never exist whole
            return None, chunked_cross_entropy(h, targets, self.head, self.loss_chunks)
        logits = self.head(h)
        if targets is None:
            return logits
        return logits, self.loss(logits, targets)

    def head(self, h: Float[Tensor, "batch seq d_model"]) -> Float[Tensor, "batch seq vocab"]:
        """The output projection (tied or not, with Phi's bias; an adapted head through its LoRA module) and Gemma 2's
        soft-capping."""
        if self.lm_head is None or type(self.lm_head) is nn.Linear:
            logits = F.linear(h, self.output_weight(), self.output_bias())
        else:
            logits = self.lm_head(h)
        if self.spec.final_softcap is not None:   # Gemma 2: logits -> c·tanh(logits / c)
            logits = torch.tanh(logits / self.spec.final_softcap) * self.spec.final_softcap
        return logits

    @torch.no_grad()
    def forward_cached(self, idx: Int[Tensor, "batch new"], cache, last_only: bool = True
                       ) -> Float[Tensor, "batch new_or_1 vocab"]:
        """Logits of the new tokens `idx` at positions cache.length, ... (inference: no autograd), with a KV cache.

        The keys and values of the new tokens are stored in `cache` (models.kv_cache.KVCache), and each new
        query attends to the cached positions it may see, so generating one more token runs one position through
        the model instead of the whole sequence. From an empty cache this is forward(idx) exactly (the same
        masks and kernels). `last_only`: the logits of the last position only (what sampling needs; the LM head
        over the other positions is skipped).
        """
        spec, start, new = self.spec, cache.length, idx.shape[1]
        end = start + new
        if self.pos_embeddings is not None and end > spec.max_seq_len:
            raise TrainledgerError(f"position {end - 1} is past the {spec.max_seq_len} learned positions of model "
                                   f"'{spec.name}' (--max-new-tokens)")
        x = self.tok_embeddings(idx)
        if spec.scale_embeddings:
            x = x * torch.tensor(spec.d_model ** 0.5, dtype=x.dtype, device="cpu").item()
        if self.pos_embeddings is not None:
            x = x + self.pos_embeddings(torch.arange(start, end, device=idx.device))
        rope, masks = self._layer_inputs(end, idx.device, x.dtype) if start == 0 else (self._rope(end, idx.device, x.dtype), {})
        for i, block in enumerate(self.blocks):
            cos, sin = rope.get(spec.layer_rope_theta(i), (None, None))
            if cos is not None:
                cos, sin = cos[start:], sin[start:]
            mask = masks.get(spec.is_sliding(i) and end > spec.sliding_window)
            x = block(x, cos, sin, mask, cache.layers[i])
        cache.advance(new)
        if last_only:
            x = x[:, -1:]
        return self.head(self.norm(x))

    def _rope(self, seq_len: int, device, dtype) -> dict:
        """{θ: (cos, sin)} for positions 0..seq_len-1, one table per distinct θ of the layers."""
        spec = self.spec
        if spec.position != "rope":
            return {}
        return {theta: rope_cos_sin(seq_len, spec.rotary_dim, theta, device=device, dtype=dtype,
                                    layout=spec.rope_layout)
                for theta in sorted({spec.layer_rope_theta(i) for i in range(spec.n_layers)})}

    def _layer_inputs(self, seq_len: int, device, dtype) -> tuple[dict, dict]:
        """RoPE tables per θ ({θ: (cos, sin)}) and additive masks per window state ({sliding: mask}) for this forward.

        Each distinct table and mask is built once and shared by the layers that use it. A layer gets no mask
        (SDPA's is_causal) unless it needs one: a window shorter than the sequence, ALiBi, or soft-capping
        (written-out attention). Masks are made in the dtype the attention kernel sees (the autocast dtype under
        AMP), so the kernel never makes a per-layer copy.
        """
        spec = self.spec
        rope = {}
        if spec.position == "rope":
            for theta in sorted({spec.layer_rope_theta(i) for i in range(spec.n_layers)}):
                rope[theta] = rope_cos_sin(seq_len, spec.rotary_dim, theta, device=device, dtype=dtype,
                                           layout=spec.rope_layout)
        if device.type in ("cpu", "cuda") and torch.is_autocast_enabled(device.type):   # (meta has no autocast)
            dtype = torch.get_autocast_dtype(device.type)
        alibi = alibi_slopes(spec.n_heads, spec.alibi_bias_max) if spec.position == "alibi" else None
        masks = {}
        for i in range(spec.n_layers):
            sliding = spec.is_sliding(i) and seq_len > spec.sliding_window
            if sliding not in masks and (sliding or alibi is not None or spec.attn_softcap is not None):
                masks[sliding] = attention_mask(seq_len, window=spec.sliding_window if sliding else None, alibi=alibi,
                                                device=device, dtype=dtype)
        return rope, masks

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
