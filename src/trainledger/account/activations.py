"""Bytes of activations that autograd saves for backward in trainledger's own models (pure, no torch).

"Activations" = every tensor the forward pass creates and autograd keeps alive until backward: inputs of
each matmul, norm inputs and statistics, activation-function inputs, attention outputs (+ logsumexp with
flash attention, the T×T probabilities without), the fp32 log-softmax of the loss. The batch itself
(token ids, targets) and the parameters are not activations; 16-bit weight copies that autocast makes
and autograd saves are (they live exactly as long as the activations).

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
arXiv:2205.05198, Sec. 4, Table 2) is the guide: per layer sbh(34 + 5as/h) bytes with 16-bit activations
and dropout. Our models have no dropout and use PyTorch's fused kernels, so the terms differ; each term
below names the op that saves it, and tests/measure checks the total against tensors tracked in a real
(or fake-tensor) step of `trainledger.models.Transformer`.

Notation: N = batch_size·seq_len tokens, d = d_model, f = d_ff, V = vocab, H/Hkv heads of size dh,
`a` = bytes of a matmul-input activation, `r` = bytes of the residual stream (fp32 under AMP autocast).
"""

from __future__ import annotations

from trainledger.errors import TrainledgerError

RECOMPUTE = ("none", "selective", "full")

# precision recipe -> (a: bytes of matmul inputs / activations, r: bytes of residual stream, norms and loss,
#                      w: bytes of the per-forward weight copies autocast saves (0: none))
# amp-*: fp32 weights, autocast casts matmul inputs and weights to 16 bit (PyTorch AMP); norms, softmax and
# the loss run in fp32 (autocast's fp32 op list). mixed-* / bf16: the model itself is 16-bit.
_RECIPES = {
    "fp32": (4, 4, 0),
    "amp-bf16": (2, 4, 2),
    "amp-fp16": (2, 4, 2),
    "mixed-bf16": (2, 2, 0),
    "mixed-fp16": (2, 2, 0),
    "bf16": (2, 2, 0),
}
_FP32 = 4
_INDEX = 8  # int64


def recipe_bytes(precision: str) -> tuple[int, int, int]:
    """(matmul-input bytes, residual/norm bytes, autocast weight-copy bytes) per element for a precision recipe."""
    if precision not in _RECIPES:
        raise TrainledgerError(f"unknown precision recipe {precision!r} (--precision). Known: {', '.join(_RECIPES)}")
    return _RECIPES[precision]


def _check(batch_size, seq_len, recompute, tp, pp):
    for name, value in (("--batch-size", batch_size), ("--seq-len", seq_len), ("--tp", tp), ("--pp", pp)):
        if not isinstance(value, int) or value <= 0:
            raise TrainledgerError(f"{name} must be a positive integer, got {value!r}")
    if recompute not in RECOMPUTE:
        raise TrainledgerError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {recompute!r}")


def activations_bytes(spec, batch_size: int, seq_len: int, *, precision: str = "fp32", recompute: str = "none",
                      flash: bool = True, tp: int = 1, sp: bool | None = None, pp: int = 1) -> dict:
    """Bytes saved for backward by one forward pass of one micro-batch, per GPU, as named parts + "total".

    TransformerSpec parts: per_layer (one layer, as stored), layers (all layers on the busiest pipeline
    stage), embeddings, rope, final_norm, head_input, head_logits, loss, weight_copies (AMP), total.
    CruncherSpec: the input of each Linear after the first (the lecture's B·D·num_layers) and the output.

    Sharding (tp > 1, sp) follows Korthikanti et al. Sec. 4.2.2: without sequence parallelism the norms and
    the inputs of column-parallel matmuls (q/k/v, MLP up/gate) are replicated, everything else is divided
    by tp; with sp everything is divided by tp. This is an extrapolation: only tp = 1 is measured.
    Pipeline (pp > 1), 1F1B schedule (Korthikanti Sec. 4.2.3): the first stage holds pp micro-batches of
    ceil(L/pp) layers (≈ L layers' worth) plus the embeddings; the head and loss live on the last stage;
    the total is the larger of the two stages.
    """
    _check(batch_size, seq_len, recompute, tp, pp)
    if getattr(spec, "kind", None) == "cruncher":
        return _cruncher(spec, batch_size, precision)
    sp = bool(sp) if sp is not None else False
    a, r, w = recipe_bytes(precision)
    amp = w > 0
    n = batch_size * seq_len
    d, f, v = spec.d_model, spec.d_ff, spec.vocab_size
    h, hkv, dh = spec.n_heads, spec.kv_heads, spec.head_dim

    def shard(x, replicated_without_sp=False):
        if tp == 1 or (replicated_without_sp and not sp):
            return x
        return x / tp

    def norm(consumers: int) -> float:
        """A norm on the residual stream and the matmul inputs made from its output."""
        if spec.norm == "layernorm":
            # F.layer_norm saves its input (the residual) and mean + rstd per row, in the input's dtype on
            # CPU and under FakeTensorMode (CUDA keeps them in fp32: 4 bytes more per token per norm in 16 bit)
            saved = n * d * r + 2 * n * r
        else:
            # RMSNorm as Hugging Face Llama: x32 = x.float() (the residual itself when fp32) saved by pow and
            # mul, rstd (fp32), the normalised x cast back to x's dtype (saved by weight * normed)
            saved = n * d * _FP32 + n * _FP32 + n * d * r
        # matmul inputs: the norm output, shared by its consumers; under autocast each nn.Linear
        # makes and saves its own 16-bit copy of it
        saved += (consumers if amp else 1) * n * d * a
        return shard(saved, replicated_without_sp=True)

    # --- one layer -------------------------------------------------------------------------------
    attn_norm = norm(3)                                            # q_proj, k_proj, v_proj
    # SDPA (flash) saves q, k (after RoPE), v with Hkv heads (enable_gqa), its output (the o_proj input:
    # the kernel lays it out (B, T, H, dh), so merging heads is a view) and the fp32 logsumexp.
    qkv = n * (h + 2 * hkv) * dh * a
    out = n * h * dh * a
    if flash:
        scores = batch_size * h * seq_len * _FP32                   # logsumexp
    else:
        # math path (no flash kernel): the softmax probabilities B·H·T·T; k and v are expanded to H heads.
        # Verified on the meta device in fp32; in 16 bit PyTorch's CPU math path upcasts to fp32 (saving
        # fp32 copies this formula does not count), the CUDA math path does not.
        scores = batch_size * h * seq_len * seq_len * a
        qkv = n * 3 * h * dh * a
    if recompute == "selective":
        # the SDPA call is checkpointed: its inputs q, k, v stay (in amp + RoPE: the fp32 rotated q, k
        # that SDPA's autocast would cast), its output is the o_proj input; the logsumexp is recomputed
        if amp and spec.position == "rope":
            qkv = n * (h + hkv) * dh * r + n * hkv * dh * a
        scores = 0
    attention = shard(qkv + out + scores)
    mlp_norm = norm(2 if spec.mlp == "swiglu" and not spec.is_moe else 1)
    # MLP per token: GELU: up output, GELU output (2f); SwiGLU: gate output, up output, silu output,
    # their product (4f)
    mlp_per_token = (4 if spec.mlp == "swiglu" else 2) * f * a
    if spec.is_moe:
        mlp = shard(_moe_per_token(spec, a, amp) * n)
    else:
        mlp = shard(n * mlp_per_token)
    full_layer = attn_norm + attention + mlp_norm + mlp
    per_layer = shard(n * d * r, replicated_without_sp=True) if recompute == "full" else full_layer

    layers_per_stage = -(-spec.n_layers // pp)                # ceil(L / pp)
    layers = per_layer * layers_per_stage * pp                # 1F1B: stage 0 holds pp micro-batches

    # --- outside the layers ----------------------------------------------------------------------
    embeddings = seq_len * _INDEX if spec.position == "learned" else 0        # position ids arange(T)
    rope = 2 * seq_len * dh * r if spec.position == "rope" else 0             # cos, sin tables (T, dh)
    final_norm = norm(1) - n * d * a                  # the head's input is listed separately
    head_input = n * d * a
    head_logits = 0                         # the head's output is not saved: the loss saves its log-softmax
    loss = n * v * _FP32 + _FP32            # cross_entropy on fp32 logits: log_softmax output + total_weight
    # AMP: the 16-bit weight copies autocast makes are saved by their matmuls; inside checkpointed
    # blocks (full recompute) they are remade in backward, so only the LM head's copy stays
    copied = spec.d_model * spec.vocab_size if recompute == "full" else _matmul_params(spec)
    weight_copies = shard(w * copied) / pp if amp else 0
    first_stage = layers + embeddings + rope
    last_stage = per_layer * layers_per_stage + rope + final_norm + head_input + head_logits + loss
    if pp == 1:
        first_stage, last_stage = first_stage + final_norm + head_input + head_logits + loss, 0
    parts = {
        "per_layer": per_layer,
        "layers": layers,
        "embeddings": embeddings,
        "rope": rope,
        "final_norm": final_norm,
        "head_input": head_input,
        "head_logits": head_logits,
        "loss": loss,
        "weight_copies": weight_copies,
    }
    parts["total"] = max(first_stage, last_stage) + weight_copies
    return parts


def _moe_per_token(spec, a: int, amp: bool) -> float:
    """Bytes a mixture-of-experts MLP saves per token (top-k of E experts, as trainledger.models.mlp.MoE).

    Router: fp32 softmax output (E), top-k indices (int64) and fp32 weights + their sum; per routed token:
    the gathered input (autocast copy too under AMP), the expert MLP, the expert output and its weight
    (saved by the weighting multiply) and the token index (int64) kept by index_select/index_add.
    """
    d, f, e, k = spec.d_model, spec.d_ff, spec.n_experts, spec.experts_per_token
    router = e * _FP32 + k * (_INDEX + _FP32) + _FP32
    expert = (4 if spec.mlp == "swiglu" else 2) * f * a
    r = _FP32 if amp else a                      # the routing weight is in the residual dtype
    per_routed = d * a * (2 if amp and spec.mlp == "swiglu" else 1) + expert + d * a + r + 2 * _INDEX
    return router + k * per_routed


def _matmul_params(spec) -> int:
    """Weights of every matmul (attention, MLP/experts, router, LM head): the tensors autocast copies to 16 bit."""
    d, f, dh = spec.d_model, spec.d_ff, spec.head_dim
    attn = d * (spec.n_heads + 2 * spec.kv_heads) * dh + spec.n_heads * dh * d
    mlp = (3 if spec.mlp == "swiglu" else 2) * d * f * spec.n_experts
    router = d * spec.n_experts if spec.is_moe else 0
    return spec.n_layers * (attn + mlp + router) + d * spec.vocab_size


def _cruncher(spec, batch_size: int, precision: str) -> dict:
    """Cruncher: each of the n_layers Linear(D, D) outputs is saved as the next Linear's input (B·D each).

    CS336 Lecture 2 counts num_activations = B·D·num_layers; the model input x is data, not an activation.
    The last Linear(D, 1)'s output (B·1) is saved by whatever loss squares it; it is listed as `output`.
    """
    a, _, w = recipe_bytes(precision)
    hidden = batch_size * spec.dim * spec.n_layers * a
    output = batch_size * a
    weight_copies = w * (spec.dim * spec.dim * spec.n_layers + spec.dim) if w else 0
    return {"hidden": hidden, "output": output, "weight_copies": weight_copies,
            "total": hidden + output + weight_copies}


def step_peak_bytes(spec, batch_size: int, seq_len: int, memory: dict, *, precision: str = "fp32",
                    recompute: str = "none", optimizer_states: int = 2,
                    optimizer_temporaries: int | None = None) -> dict:
    """Peak bytes of the first training step (forward, backward, optimizer step) on one GPU, by candidate moment.

    `memory` holds the model-state parts of account.memory.memory_per_gpu (params_bytes, grads_bytes,
    master_params_bytes, optimizer_bytes, activations_bytes). Every moment adds params + master params:
      forward:   activations + the logits (16-bit under autocast/16-bit weights) + their fp32 copy for the loss;
      backward (start): activations + the fp32 gradients of the log-softmax and of the logits (2·N·V·4);
      backward (end): grads + the gradient of the embedding output (N·d);
      backward (full recompute): a layer's activations rebuilt, either the last layer's (with the other
                 layers' inputs held) or the first layer's (with all grads present);
      optimizer: grads + optimizer states + `optimizer_temporaries` state-sized temporaries (default 1
                 when there are states: a foreach optimizer's √v list, trainledger.optim.Adam/AdaGrad/RMSProp;
                 SGD with momentum makes none: its buffer is a clone of the gradient, then updated in
                 place) + fp32 grad copies of a mixed-precision master step.
    Total = the largest. First step: the optimizer states are created during it; later steps hold them
    throughout (add optimizer_bytes to the other moments). Derived from what the tracker in measure.memory
    sees in our Transformer; allocator fragmentation and CUDA workspaces are not included.
    """
    a, r, w = recipe_bytes(precision)
    temporaries = (1 if optimizer_states else 0) if optimizer_temporaries is None else optimizer_temporaries
    if getattr(spec, "kind", None) == "cruncher":
        n_tokens, vocab, d = batch_size, 1, spec.dim
    else:
        n_tokens, vocab, d = batch_size * seq_len, spec.vocab_size, spec.d_model
    base = memory["params_bytes"] + memory.get("master_params_bytes", 0)
    acts, grads, states = memory["activations_bytes"], memory["grads_bytes"], memory["optimizer_bytes"]
    logits = n_tokens * vocab * (a if a == _FP32 else a + _FP32)
    moments = {
        "forward": acts + logits,
        "backward_start": acts + 2 * n_tokens * vocab * _FP32,
        "backward_end": grads + n_tokens * d * r,
        "optimizer": grads + states + (states / optimizer_states * temporaries if optimizer_states else 0)
                     + memory.get("master_params_bytes", 0),
    }
    if recompute == "full" and getattr(spec, "kind", None) != "cruncher":
        # the last layer's activations are rebuilt while all checkpointed ones are still held
        # (the loss, head and final-norm tensors are already freed; the head's weight gradient exists)
        parts = activations_bytes(spec, batch_size, seq_len, precision=precision, recompute="full")
        one_layer = activations_bytes(spec, batch_size, seq_len, precision=precision)["per_layer"]
        if w:   # under autocast a rebuilt layer casts its weights to 16 bit again
            one_layer += w * (_matmul_params(spec) - spec.d_model * spec.vocab_size) / spec.n_layers
        held = acts - parts["loss"] - parts["head_input"] - parts["final_norm"]
        moments["forward_layer"] = held + one_layer         # a checkpointed layer runs with all it makes
        grad_bytes = memory["grads_bytes"] / memory["n_params"] if memory.get("n_params") else r
        moments["backward_recompute_first"] = held + one_layer + n_tokens * d * r + grad_bytes * d * vocab
        # the first layer, rebuilt last: the grads of every other layer and of the head exist (not yet its
        # own, nor an untied token embedding's or the position table's); its input and incoming gradient
        embed = vocab * d * (0 if spec.tied_embeddings else 1) + (spec.max_seq_len * d if spec.position == "learned" else 0)
        n_params = memory.get("n_params") or 0
        layer_params = (n_params - vocab * d * (1 if spec.tied_embeddings else 2) - embed + vocab * d
                        * (0 if spec.tied_embeddings else 1)) / spec.n_layers if n_params else 0
        # inside its MLP backward: the down projection's saved input is released, its weight gradient and
        # the hidden gradients (GELU: 2, SwiGLU: 3 of size N·d_ff; MoE: per expert, N·k/E tokens) exist
        tokens = n_tokens * spec.experts_per_token / spec.n_experts if spec.is_moe else n_tokens
        hidden = tokens * spec.d_ff * a
        extra_hidden = hidden * (1 if spec.mlp == "gelu" else 2)
        moments["backward_recompute_last"] = (grads - grad_bytes * (embed + layer_params - d * spec.d_ff)
                                              + one_layer + extra_hidden + 2 * n_tokens * d * r)
    peak = {k: base + v for k, v in moments.items()}
    peak["total"] = max(peak.values())
    return peak
