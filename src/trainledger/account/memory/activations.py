"""Bytes of activations that autograd saves for backward in trainledger's own models (pure, no torch).

"Activations" = every tensor the forward pass creates and autograd keeps alive until backward: inputs of
each matmul, norm inputs and statistics (QK-norm's and Gemma's sandwich norms too), activation-function
inputs, attention outputs (+ logsumexp with flash attention, the T×T probabilities without, tanh and softmax
outputs in Gemma 2's soft-capped attention), the additive masks of sliding windows and ALiBi, the tanh of
final-logit soft-capping, the fp32 log-softmax of the loss. The batch itself
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

from dataclasses import dataclass

from trainledger.errors import TrainledgerError
from trainledger.specs.run_checks import pipeline_stage_layers

from trainledger.specs.run import RECOMPUTE_POLICIES as RECOMPUTE  # noqa: E402 (the run's vocabulary)

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
    # FP8 recipes (specs/fp8.py): the 16-bit recipe they build on; the FP8 copies of saved Linear inputs and the
    # cached FP8 weights are adjusted by account/memory/fp8.py
    "fp8-cs": (2, 2, 0),
    "fp8-delayed": (2, 2, 0),
    "fp8-rowwise": (2, 4, 2),
    "mxfp8": (2, 2, 0),
}
_FP32 = 4
_INDEX = 8  # int64


def recipe_bytes(precision: str) -> tuple[int, int, int]:
    """(matmul-input bytes, residual/norm bytes, autocast weight-copy bytes) per element for a precision recipe."""
    if precision not in _RECIPES:
        raise TrainledgerError(f"unknown precision recipe {precision!r} (--precision). Known: {', '.join(_RECIPES)}")
    return _RECIPES[precision]


@dataclass(frozen=True)
class ActivationShard:
    """One GPU's share of one micro-batch, and how it is computed: what the activations it saves depend on.

    `seq_len`: the tokens of a sequence on this GPU (a context-parallel rank holds seq_len / cp); `precision`: the
    recipe the model computes in (under FSDP2's mixed-precision policy not always the run's own,
    account/memory/fsdp.py compute_precision); `sp` None means off. Checked when built: every error names the flag.
    `of(run, precision)` reads it from a resolved specs.run.Run."""

    batch_size: int
    seq_len: int
    precision: str = "fp32"
    recompute: str = "none"
    flash: bool = True
    tp: int = 1
    sp: bool = False
    pp: int = 1
    loss_upcast: bool = True
    split: tuple = (False, False)       # (embedding, loss) as layers of the pipeline split (Megatron's flags)
    loss_chunks: int = 1                # --chunked-loss: the loss's logits-sized buffers exist 1/N at a time
    compiled: bool = False              # --compile: each block under torch.compile saves less (_Layer.__init__)

    def __post_init__(self):
        for name, value in (("--batch-size", self.batch_size), ("--seq-len", self.seq_len), ("--tp", self.tp),
                            ("--pp", self.pp)):
            if not isinstance(value, int) or value <= 0:
                raise TrainledgerError(f"{name} must be a positive integer, got {value!r}")
        if self.recompute not in RECOMPUTE:
            raise TrainledgerError(f"--recompute must be one of {', '.join(RECOMPUTE)}, got {self.recompute!r}")
        recipe_bytes(self.precision)
        object.__setattr__(self, "sp", bool(self.sp))

    @classmethod
    def of(cls, run, precision: str) -> "ActivationShard":
        """The shard of a resolved run (specs.run_checks.resolve): its micro-batch, seq_len / cp tokens (1 without a
        sequence: a Cruncher's one "token"), recompute, flash, tp, sp, pp and loss upcast, computed in `precision`."""
        seq_len = run.batch.seq_len // run.layout.cp if run.batch.seq_len is not None else 1
        return cls(run.batch.batch_size, seq_len, precision, run.levers.recompute, run.kernels.flash, run.layout.tp,
                   run.layout.sp, run.layout.pp, run.kernels.loss_upcast,
                   (run.layout.account_for_embedding_in_pipeline_split, run.layout.account_for_loss_in_pipeline_split),
                   getattr(run.levers, "chunked_loss", 1), run.kernels.compile)

    @property
    def n_tokens(self) -> int:
        """Tokens of the micro-batch on this GPU: batch_size · seq_len."""
        return self.batch_size * self.seq_len


def activations_bytes(spec, shard: ActivationShard) -> dict:
    """Bytes saved for backward by one forward pass of one micro-batch (`shard`: its share on one GPU and how it is
    computed), per GPU, as named parts + "total".

    TransformerSpec parts: per_layer (the largest layer, as stored), layers (all layers on the busiest pipeline
    stage), embeddings, rope, masks, final_norm, head_input, head_logits, loss, weight_copies (AMP), total, and
    first_stage / last_stage (what each end of the pipeline holds; both = total when pp = 1).
    CruncherSpec: the input of each Linear after the first (the lecture's B·D·num_layers) and the output.

    Sharding (tp > 1, sp) follows Korthikanti et al. Sec. 4.2.2: without sequence parallelism the norms and
    the inputs of column-parallel matmuls (q/k/v, MLP up/gate) are replicated, everything else is divided
    by tp; with sp everything is divided by tp. This is an extrapolation: only tp = 1 is measured.
    Pipeline (pp > 1), 1F1B schedule (Korthikanti Sec. 4.2.3): the first stage holds pp micro-batches of
    ceil(L/pp) layers (≈ L layers' worth, of the largest layer when layers differ) plus the embeddings; the
    head and loss live on the last stage; the total is the larger of the two stages. With Megatron's
    --account-for-embedding/loss-in-pipeline-split (`shard.split`) the first and the last stage hold one layer fewer
    (specs.run_checks.pipeline_stage_layers), and the second stage, pp − 1 micro-batches of a full stage's layers,
    may then hold more than the first (it counts as the first stage's part).
    `loss_upcast` False: the cross-entropy runs on the logits in the matmul dtype, as the model returns them
    (NeMo Automodel's MaskedCrossEntropy(fp32_upcast=False): F.cross_entropy without logits.float()), so the
    log-softmax it saves is N·V·a bytes instead of N·V·4 (`loss_bytes`).
    """
    batch_size, seq_len, precision, recompute = shard.batch_size, shard.seq_len, shard.precision, shard.recompute
    tp, sp, pp, flash, loss_upcast, split = shard.tp, shard.sp, shard.pp, shard.flash, shard.loss_upcast, shard.split
    compiled, chunks_compiled = shard.compiled, compiled_loss(shard)
    if getattr(spec, "kind", None) == "cruncher":
        return _cruncher(spec, batch_size, precision)
    a, r, w = recipe_bytes(precision)
    n, T, d, v = batch_size * seq_len, seq_len, spec.d_model, spec.vocab_size

    def shard(x, replicated_without_sp=False):
        if tp == 1 or (replicated_without_sp and not sp):
            return x
        return x / tp

    layer = _Layer(spec, batch_size, seq_len, precision, recompute, flash, compiled)
    per_group = [(layer.bytes(i, shard), count) for i, count in spec.layer_groups()]
    per_layer = max(b for b, _ in per_group)
    counts = pipeline_stage_layers(spec.n_layers, pp, *split)       # ceil(L / pp) each without the split flags
    layers_per_stage = counts["first"]
    # 1F1B: stage 0 holds pp micro-batches of its layers; with pp = 1 that is every layer, each as it is. With the
    # embedding as a layer of the split, stage 1 (pp − 1 micro-batches of one layer more) may hold more
    layers = sum(b * count for b, count in per_group) if pp == 1 else per_layer * layers_per_stage * pp
    second = per_layer * counts["middle"] * (pp - 1) if pp > 2 and split[0] else 0.0

    # --- outside the layers ----------------------------------------------------------------------
    embeddings = T * _INDEX if spec.position == "learned" else 0            # position ids arange(T)
    thetas = {spec.layer_rope_theta(i) for i, _ in spec.layer_groups()} if spec.position == "rope" else set()
    rope = len(thetas) * 2 * T * spec.rotary_dim * r                         # cos, sin tables (T, rotary_dim) per θ
    masks = layer.mask_bytes()
    eager = _Layer(spec, batch_size, seq_len, precision, recompute, flash) if compiled else layer
    final_norm = shard(eager.norm(r, n, d), replicated_without_sp=True)      # its output is the head's input:
    head_input = n * d * a                                                   # listed separately
    # the head's output is not saved (the loss saves its log-softmax), but final soft-capping saves tanh's output
    head_logits = n * v * a if spec.final_softcap is not None else 0
    loss = loss_bytes(n, v, a, loss_upcast)  # cross_entropy: its log_softmax output + total_weight
    if chunks_compiled:
        loss = n * v * a + 2 * n * _FP32     # the 16-bit logits chunks and each row's max and logsumexp
    # AMP: the 16-bit weight copies autocast makes are saved by their matmuls; inside checkpointed
    # blocks (full recompute) they are remade in backward, so only the LM head's copy stays
    copied = spec.d_model * spec.vocab_size if recompute == "full" else _matmul_params(spec)
    weight_copies = shard(w * copied) / pp if w else 0
    first_stage = max(layers + embeddings, second) + rope + masks
    last_stage = per_layer * counts["last"] + rope + masks + final_norm + head_input + head_logits + loss
    if pp == 1:
        first_stage, last_stage = first_stage + final_norm + head_input + head_logits + loss, 0
    parts = {
        "per_layer": per_layer,
        "layers": max(layers, second),
        "embeddings": embeddings,
        "rope": rope,
        "masks": masks,
        "final_norm": final_norm,
        "head_input": head_input,
        "head_logits": head_logits,
        "loss": loss,
        "weight_copies": weight_copies,
    }
    parts["total"] = max(first_stage, last_stage) + weight_copies
    # the stages apart (with pp = 1 one GPU holds both): the step's peak puts the loss's transients on the last
    parts["first_stage"] = first_stage + weight_copies
    parts["last_stage"] = (last_stage if pp > 1 else first_stage) + weight_copies
    return parts


def loss_bytes(n_tokens: float, vocab: float, a: int, loss_upcast: bool = True) -> float:
    """Bytes the cross-entropy saves for backward: its log-softmax output, N·V elements, and the fp32 total weight.

    In fp32 (4 B) when the logits are upcast first (logits.float(), trainledger's Transformer and torchtitan's
    cross_entropy_loss), else in the logits' own dtype of `a` bytes: NeMo Automodel's MaskedCrossEntropy with
    fp32_upcast=False (nemo_automodel/components/loss/masked_ce.py at 38fe8ba7: `if self.fp32_upcast: logits =
    logits.float()`, then F.cross_entropy), which every benchmark config sets (examples/benchmark/configs/*.yaml).
    """
    return n_tokens * vocab * (_FP32 if loss_upcast else a) + _FP32


def compiled_loss(shard) -> bool:
    """Whether the cross-entropy runs compiled: --compile with --chunked-loss N as torchtune runs them
    (torchtune.training.compile_loss compiles CEWithChunkedOutputLoss.compute_cross_entropy, whose logits.float()
    is inside the compiled graph). Inductor then saves each chunk's 16-bit logits and two fp32 values per row (the
    max and the logsumexp) instead of an fp32 log-softmax, and its backward writes the 16-bit gradient of the
    logits directly: measured on CPU, tests/account/test_compile_memory.py."""
    return shard.compiled and shard.loss_chunks > 1 and shard.loss_upcast and recipe_bytes(shard.precision)[0] != _FP32


def check_loss_upcast(loss_upcast: bool, framework: str) -> None:
    """A TrainledgerError for --no-loss-upcast with --framework megatron, whose vocab-parallel cross entropy
    (megatron/core/tensor_parallel/cross_entropy.py) always upcasts the logits to fp32."""
    if not loss_upcast and framework == "megatron":
        raise TrainledgerError("--no-loss-upcast describes a PyTorch loop's cross-entropy on 16-bit logits; "
                               "Megatron-Core's vocab-parallel cross entropy upcasts them (--framework megatron)")


class _Layer:
    """What one layer of trainledger.models.Transformer saves, term by term (N = B·T tokens; a, r as above).

    Each method names the op that keeps each tensor; tests/account and tests/models measure the sums.
    """

    def __init__(self, spec, batch_size: int, seq_len: int, precision: str, recompute: str, flash: bool,
                 compiled: bool = False):
        self.spec, self.B, self.T, self.recompute, self.flash = spec, batch_size, seq_len, recompute, flash
        self._precision = precision
        self.a, self.r, w = recipe_bytes(precision)
        self.amp = w > 0
        # torch.compile (AOTAutograd's min-cut rematerialization partitioner, the default under Inductor) saves the
        # fewest bytes it can recompute from: an RMSNorm keeps its input and rstd (the fp32 copy and the cast x̂ are
        # recomputed in backward); a gated MLP keeps gate, up and the product (the activation's output is recomputed).
        # Measured on CPU (same partitioner as on CUDA) on Hugging Face's Llama layer in bf16:
        # tests/account/test_compile_memory.py. Not measured, so not changed: autocast recipes, LayerNorm (already
        # input + statistics), GELU MLPs, Gemma's (1 + w) norm, MoE layers
        self.compiled = compiled and not self.amp
        self.n = batch_size * seq_len
        self.eager = spec.attn_softcap is not None        # soft-capped attention, written out (Attention.softcapped_core)

    def norm(self, i: int, rows: float, width: int, shares_input: bool = False) -> float:
        """Bytes a norm over `width` keeps for `rows` rows of an input of i bytes per element (its output excluded).

        LayerNorm (F.layer_norm): its input and the per-row mean and rstd, in the input dtype on CPU and under
        FakeTensorMode (CUDA keeps them in fp32). RMSNorm as Hugging Face Llama: x₃₂ = x.float() (the input itself
        when fp32) saved by pow and mul, rstd (fp32), the normalised x cast back (saved by weight · x̂).
        Gemma's (1 + w) RMSNorm: x₃₂, rstd, the fp32 normalised x and this call's (1 + w) (width fp32 values).
        `shares_input`: the input is already counted (GPT-NeoX's two norms read the same residual).
        """
        kind, own_input = self.spec.norm, (0 if shares_input else 1)
        if kind == "layernorm":
            return own_input * rows * width * i + 2 * rows * i
        if kind == "rmsnorm" and self.compiled:
            return own_input * rows * width * i + rows * _FP32
        x32 = (own_input if i == _FP32 else 1) * rows * width * _FP32
        if kind == "rmsnorm":
            return x32 + rows * _FP32 + rows * width * i
        return x32 + rows * _FP32 + rows * width * _FP32 + width * _FP32

    def norm_with_consumers(self, consumers: int, shares_input: bool = False) -> float:
        """A norm on the residual stream and the matmul inputs made from its output (one tensor, or under
        autocast one 16-bit copy per nn.Linear that reads it)."""
        return self.norm(self.r, self.n, self.spec.d_model, shares_input) + (consumers if self.amp else 1) * self.n * self.spec.d_model * self.a

    def attention(self) -> float:
        """Projections' outputs kept by clamp (clip_qkv) and QK-norm; the core's saved tensors; the o_proj input."""
        spec, n, a, r, B, T = self.spec, self.n, self.a, self.r, self.B, self.T
        h, hkv, dh = spec.n_heads, spec.kv_heads, spec.head_dim
        extra = n * (h + 2 * hkv) * dh * a if spec.clip_qkv is not None else 0     # clamp keeps its input
        if spec.qk_norm:   # over (token, head) rows of the 16-bit projection outputs
            extra += self.norm(a, n * h, dh) + self.norm(a, n * hkv, dh)
            if self.amp and spec.norm == "layernorm" and a != _FP32:
                # Phi's qk_layernorm under autocast: a 16-bit input with the fp32 weight runs F.layer_norm's mixed-type
                # kernel, whose mean and rstd are fp32 (measured: tests/account/test_activations.py, family phi)
                extra += 2 * n * (h + hkv) * (_FP32 - a)
        out = n * h * dh * a   # the core's output = o_proj's input (SDPA lays it out (B, T, H, dh): a view)
        rotated_fp32 = self.amp and spec.position == "rope"   # under autocast RoPE's fp32 tables make q, k fp32
        if self.recompute == "selective":
            # the core is checkpointed: its inputs q, k, v stay (fp32 q, k in AMP + RoPE), its output is o_proj's
            # input; everything inside (logsumexp, or the eager path's scores) is recomputed
            qk = (h + hkv) * dh * (r if rotated_fp32 else a)
            return extra + n * qk + n * hkv * dh * a + out
        if self.eager:
            # q stacked per key/value group (a copy), k, v; tanh's output and the fp32 softmax, B·H·T·T each, and
            # the probabilities cast back when the activation dtype is not fp32
            scores = B * h * T * T * (a + _FP32 + (a if a != _FP32 else 0))
            return extra + n * (h + 2 * hkv) * dh * a + scores + out
        if self.flash:
            # SDPA (flash) saves q, k (after RoPE), v with Hkv heads (enable_gqa), its output and the fp32 logsumexp.
            # Partial RoPE concatenates q (and k) into a (B, H, T, dh) layout; the kernel's output follows it, so
            # merging heads for o_proj copies it: one more N·H·dh tensor
            copy = out if spec.position == "rope" and spec.rotary_dim < dh else 0
            return extra + n * (h + 2 * hkv) * dh * a + out + copy + B * h * T * _FP32
        # math path (no flash kernel): the softmax probabilities B·H·T·T; k and v are expanded to H heads.
        # Verified on the meta device in fp32 (no mask); in 16 bit PyTorch's CPU math path upcasts to fp32 (saving
        # fp32 copies this formula does not count), the CUDA math path does not.
        return extra + n * 3 * h * dh * a + out + B * h * T * T * a

    def mlp(self, layer: int) -> float:
        """The MLP's saved tensors beyond its input: GELU: up output, GELU output (2·f); gated: gate output,
        up output, act output, their product (4·f); a mixture of experts per `_moe_per_token`."""
        spec = self.spec
        if spec.is_moe_layer(layer):
            return self.n * _moe_per_token(spec, self.a, self.amp)
        f = spec.dense_d_ff if spec.is_moe else spec.d_ff
        if spec.gated_mlp and self.compiled:
            return self.n * 3 * f * self.a
        return self.n * (4 if spec.gated_mlp else 2) * f * self.a

    def bytes(self, layer: int, shard) -> float:
        """Bytes layer `layer` keeps (sharded per `shard`)."""
        spec, n, d = self.spec, self.n, self.spec.d_model
        if self.recompute in ("selective-op", "selective-layer"):    # torchtitan's policies (account.counting.recompute)
            from trainledger.account.counting import recompute as policies
            if self.recompute == "selective-op" and not spec.is_moe_layer(layer):
                row, col = policies.selective_op_layer_bytes(spec, n, self.a, self.r)
                return shard(row, replicated_without_sp=True) + shard(col)
            w = policies.checkpointed_fraction(spec.n_layers, "selective-layer" if self.recompute != "selective-op"
                                               else "none")
            args = (spec, self.B, self.T)
            kept = _Layer(*args, self._precision, "none", self.flash, self.compiled)
            full = _Layer(*args, self._precision, "full", self.flash, self.compiled)
            return w * full.bytes(layer, shard) + (1 - w) * kept.bytes(layer, shard)
        if self.recompute == "full":
            return shard(n * d * self.r, replicated_without_sp=True)   # the block's input only
        moe = spec.is_moe_layer(layer)
        # router (+ the shared expert's gate, up and gate) in an MoE layer; gate and up of a gated MLP; up of GELU
        consumers = 1 + (3 if moe and spec.shared_expert_gate else 2 if moe and spec.shared_expert_d_ff else 0) \
            if moe else (2 if spec.gated_mlp else 1)
        if spec.parallel_shared_norm:   # Phi, Falcon-7B: one norm's output feeds q, k, v and the MLP's first matrices
            attn_norm, mlp_norm = self.norm_with_consumers(3 + consumers), 0
        else:
            attn_norm = self.norm_with_consumers(3)                       # q_proj, k_proj, v_proj
            # GPT-NeoX's two norms read the same residual: LayerNorm keeps that one tensor (an RMSNorm's fp32 copy is
            # shared only when the residual already is fp32)
            shares = spec.parallel_residual and (spec.norm == "layernorm" or self.r == _FP32)
            mlp_norm = self.norm_with_consumers(consumers, shares_input=shares)
        post = 0
        if spec.sandwich_norm:   # Gemma: norms of the o_proj and MLP outputs (16-bit under autocast)
            post = 2 * self.norm(self.a if self.amp else self.r, n, d)
        replicated = attn_norm + mlp_norm + post
        return shard(replicated, replicated_without_sp=True) + shard(self.attention() + self.mlp(layer))

    def mask_bytes(self) -> float:
        """Additive masks (Transformer._layer_inputs) alive after the forward: (T, T), or (H, T, T) with ALiBi, in
        the matmul dtype, one per kind (window or not) that some layer uses. SDPA keeps its mask; the written-out
        soft-capped core adds it (keeps nothing) unless a checkpoint holds it as an input (any recompute)."""
        spec, T = self.spec, self.T
        kinds = set()
        for i, _ in spec.layer_groups():
            sliding = spec.is_sliding(i) and T > spec.sliding_window
            if sliding or spec.position == "alibi" or self.eager:
                kinds.add(sliding)
        if self.eager and self.recompute == "none":
            return 0
        return len(kinds) * T * T * self.a * (spec.n_heads if spec.position == "alibi" else 1)


def _moe_per_token(spec, a: int, amp: bool) -> float:
    """Bytes a mixture-of-experts MLP saves per token (top-k of E experts, as trainledger.models.mlp.MoE).

    Router: fp32 softmax output (E), top-k indices (int64), and with renormalisation the fp32 weights and their
    sum; per routed token: the gathered input (two autocast copies, gate and up, for a gated expert under AMP),
    the expert MLP, the expert output and its weight (saved by the weighting multiply) and the token and slot
    indices (int64). Shared expert (Qwen2-MoE): its MLP on every token, its output and, with the gate, the gate's
    output and the sigmoid (saved by the product).
    """
    d, f, e, k = spec.d_model, spec.d_ff, spec.n_experts, spec.experts_per_token
    router = e * _FP32 + k * _INDEX + ((k * _FP32 + _FP32) if spec.renormalize_topk else 0)
    expert = (4 if spec.gated_mlp else 2) * f * a
    r = _FP32 if amp else a                      # the routing weight is in the residual dtype
    per_routed = d * a * (2 if amp and spec.gated_mlp else 1) + expert + d * a + r + 2 * _INDEX
    shared = 0
    if spec.shared_expert_d_ff:
        shared = (4 if spec.gated_mlp else 2) * spec.shared_expert_d_ff * a
        if spec.shared_expert_gate:
            shared += d * a + a                  # the shared output and sigmoid(gate) (1 wide), saved by their product
    return router + k * per_routed + shared


def _matmul_params(spec) -> int:
    """Weights of every matmul (attention, every expert's and the shared expert's MLP, routers and gates, dense MLPs,
    the LM head): the tensors autocast copies to 16 bit (each once per forward: autocast caches weight casts)."""
    d, dh, m = spec.d_model, spec.head_dim, (3 if spec.gated_mlp else 2)
    attn = d * (spec.n_heads + 2 * spec.kv_heads) * dh + spec.n_heads * dh * d
    moe = spec.n_moe_layers
    experts = spec.n_experts * m * d * spec.d_ff + d * spec.n_experts + m * d * (spec.shared_expert_d_ff or 0) \
        + (d if spec.shared_expert_gate else 0)
    dense = m * d * ((spec.dense_d_ff or 0) if spec.is_moe else spec.d_ff)
    return spec.n_layers * attn + moe * experts + (spec.n_layers - moe) * dense + d * spec.vocab_size


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


def step_peak_bytes(spec, shard: ActivationShard, memory: dict, *, optimizer_states: int = 2,
                    optimizer_temporaries: int | None = None, later_steps: bool = False, grad_accum: int = 1,
                    inplace_loss: bool = False) -> dict:
    """Peak bytes of a training step (forward, backward, optimizer step) on one GPU, by candidate moment, for the
    micro-batch `shard` (its tokens, recipe, recomputation, tp and loss upcast).

    `memory` holds the model-state parts of account.memory.per_gpu.memory_per_gpu (params_bytes, grads_bytes,
    master_params_bytes, optimizer_bytes, activations_bytes, and optionally its "activations" parts, whose
    first_stage / last_stage put the loss on the last pipeline stage). Every moment adds params + master params:
      forward:   activations + the logits (16-bit under autocast/16-bit weights) + their fp32 copy for the loss;
      backward (start): activations + the fp32 gradients of the log-softmax and of the logits (2·N·V·4);
      backward (end): grads + the gradient of the embedding output (N·d);
      backward (full recompute): a layer's activations rebuilt, either the last layer's (with the other
                 layers' inputs held) or the first layer's (with all grads present);
      optimizer: grads + optimizer states + `optimizer_temporaries` state-sized temporaries (default 1
                 when there are states: a foreach optimizer's √v list, trainledger.optim.Adam/AdaGrad/RMSProp;
                 SGD with momentum makes none: its buffer is a clone of the gradient, then updated in
                 place) + fp32 grad copies of a mixed-precision master step.
    Total = the largest. The first step creates the optimizer states during its optimizer step; `later_steps`
    (every step after the first: the steady state of a run) holds them through forward and backward too, so
    optimizer_bytes is added to the other moments. Under tensor parallelism the head and the loss are
    vocabulary-parallel: the logits-sized buffers are divided by `tp`. With gradient accumulation
    (`grad_accum` > 1 micro-batches per step) the micro-batches after the first run forward and backward with
    the gradients of the earlier ones held (backward adds into .grad; zero_grad comes after the optimizer
    step), so grads_bytes is added to those moments too. `inplace_loss`: Megatron-Core's vocab-parallel cross
    entropy (megatron/core/tensor_parallel/cross_entropy.py) upcasts the 16-bit logits once, exponentiates and
    normalises that fp32 buffer in place (torch.exp(..., out=exp_logits); exp_logits.div_) and saves it, and its
    backward turns the same buffer into the gradient (grad_input = softmax): beside the saved fp32 softmax ("loss")
    only the 16-bit logits (forward) or their 16-bit gradient (backward start) exist. `loss_upcast` False (the
    cross-entropy on the 16-bit logits, `loss_bytes`): forward holds the logits beside their saved 16-bit
    log-softmax; backward starts with the gradients of the log-softmax and of the logits, both 16-bit, while the
    logits stay referenced by the loop that made them (NeMo Automodel's train_ft recipe: `out = model(**batch)`,
    `calculate_loss(..., logits=out.logits)` and `.backward()` in one scope): 3·N·V·a. Derived from what the tracker in
    measure.memory sees in our Transformer (first and second steps); the caching allocator's reserve and
    the CUDA context are not included (account.memory.per_gpu.cuda_reserve_bytes).
    """
    batch_size, seq_len, precision, tp, loss_upcast = (shard.batch_size, shard.seq_len, shard.precision, shard.tp,
                                                       shard.loss_upcast)
    a, r, w = recipe_bytes(precision)
    temporaries = (1 if optimizer_states else 0) if optimizer_temporaries is None else optimizer_temporaries
    if getattr(spec, "kind", None) == "cruncher":
        n_tokens, vocab, d = batch_size, 1, spec.dim
    else:
        n_tokens, vocab, d = batch_size * seq_len, spec.vocab_size / tp, spec.d_model
    base = memory["params_bytes"] + memory.get("master_params_bytes", 0)
    acts, grads, states = memory["activations_bytes"], memory["grads_bytes"], memory["optimizer_bytes"]
    stages = memory.get("activations") or {}
    first_stage, last_stage = stages.get("first_stage", acts), stages.get("last_stage", acts)
    held = (states if later_steps else 0) + (grads if grad_accum > 1 else 0)
    # --chunked-loss N (torchtune's CEWithChunkedOutputLoss, models/losses.py): the logits, their fp32 copy and the
    # backward's fp32 gradients exist one sequence chunk at a time; the saved log-softmax stays whole ("loss")
    chunk = 1 / shard.loss_chunks
    logits = chunk * n_tokens * vocab * (a if a == _FP32 or inplace_loss or not loss_upcast else a + _FP32)
    loss_grads = chunk * n_tokens * vocab * (a if inplace_loss else 2 * _FP32 if loss_upcast else 3 * a)
    if compiled_loss(shard):        # the saved 16-bit chunks are the logits; the backward's gradient is 16-bit
        logits, loss_grads = 0.0, chunk * n_tokens * vocab * a
    moments = {
        "forward": max(first_stage, last_stage + logits) + held,
        "backward_start": max(first_stage, last_stage + loss_grads) + held,
        "backward_end": grads + n_tokens * d * r + (states if later_steps else 0),
        "optimizer": grads + states + (states / optimizer_states * temporaries if optimizer_states else 0)
                     + memory.get("master_params_bytes", 0),
    }
    if shard.recompute == "full" and getattr(spec, "kind", None) != "cruncher":
        vocab = spec.vocab_size          # parameter counts below (the recompute moments assume tp = 1)
        # the last layer's activations are rebuilt while all checkpointed ones are still held
        # (the loss, head and final-norm tensors are already freed; the head's weight gradient exists)
        parts = activations_bytes(spec, ActivationShard(batch_size, seq_len, precision, "full",
                                                        loss_upcast=loss_upcast))
        one_layer = activations_bytes(spec, ActivationShard(batch_size, seq_len, precision, compiled=shard.compiled))["per_layer"]
        if w:   # under autocast a rebuilt layer casts its weights to 16 bit again
            one_layer += w * (_matmul_params(spec) - spec.d_model * spec.vocab_size) / spec.n_layers
        held_acts = acts - parts["loss"] - parts["head_input"] - parts["final_norm"]
        moments["forward_layer"] = held_acts + one_layer + held    # a checkpointed layer runs with all it makes
        grad_bytes = memory["grads_bytes"] / memory["n_params"] if memory.get("n_params") else r
        moments["backward_recompute_first"] = held_acts + one_layer + n_tokens * d * r + grad_bytes * d * vocab + held
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
        extra_hidden = hidden * (2 if spec.gated_mlp else 1)
        not_yet = 0 if grad_accum > 1 else grad_bytes * (embed + layer_params - d * spec.d_ff)   # accumulating: all exist
        moments["backward_recompute_last"] = (grads - not_yet + one_layer + extra_hidden + 2 * n_tokens * d * r
                                              + (states if later_steps else 0))
    peak = {k: base + v for k, v in moments.items()}
    peak["total"] = max(peak.values())
    return peak
