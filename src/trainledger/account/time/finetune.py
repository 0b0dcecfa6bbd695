"""FLOPs of a fine-tuning step: a frozen base skips its weight gradients; LoRA adapters add their small GEMMs. Pure.

Per token, as autograd runs it (torch only builds a backward node where an input requires grad):
- every base Linear runs its forward GEMM, 2·d_in·d_out, and its input-gradient GEMM, 2·d_in·d_out, only where its
  input requires grad; a frozen weight has no weight-gradient GEMM (the 2·d_in·d_out that 6·N counts);
- an adapter (Hu et al. 2021, arXiv:2106.09685: y = W·x + (α/r)·B·A·x, A: r × d_in, B: rows × r) runs A and B
  forward (2·r·d_in + 2·r·rows), both weight gradients (the same again), B's input gradient (2·r·rows: A is trainable)
  and A's input gradient (2·r·d_in) only where the Linear's input requires grad;
- the frozen embedding needs no gradient, so in the first layer nothing before the first adapted output requires
  grad: its q, k, v take no input gradient, and the attention core's backward computes only the gradients of the
  operands that require grad (QKᵀ: dQ if q does, dK if k does; A·V: dP if q or k does, dV if v does).
The count is checked exactly against torch's FlopCounterMode on models/lora.py's adapters (tests/account/
test_finetune_time.py).

MFU convention for fine-tuning: model FLOPs = the FLOPs the step needs (this count: forward + the input gradients +
the trainable weights' gradients; no skipped weight gradient), as NeMo Automodel (NVIDIA-NeMo/Automodel#786: "TFLOPS
multiplier for PEFT: (1 + 1 + trainable ratio) / 3") and litgpt (Lightning-AI/litgpt#404: the estimate "without the
frozen weights") report it, not 6·N.
"""

from __future__ import annotations

from trainledger.account.counting.flops import attention_flops_per_token, check_choice, weight_matmuls
from trainledger.account.finetune.targets import targeted

ATTENTION_ROLES = ("q", "k", "v", "o")
BASE_ROLE = {"q_proj": "q", "k_proj": "k", "v_proj": "v", "o_proj": "o", "lm_head": "head"}


def _adapters(spec, finetune) -> dict[str, list[tuple[int, int, int]]]:
    """{role: [(d_in, adapted rows, modules per model)]} of the adapters of `finetune` (a specs.run.Finetune); a
    fused projection (one A shared by its chosen parts) is listed under its first chosen role."""
    if not finetune.adapters:
        return {}
    out: dict[str, list] = {}
    roles = finetune.lora_targets
    for projection, rows in targeted(spec, roles):
        chosen = [role for role, _ in projection.parts if projection.rows((role,)) and role in _roles(roles)]
        out.setdefault(chosen[0], []).append((projection.in_features, rows, projection.count))
    return out


def _roles(targets) -> tuple[str, ...]:
    from trainledger.account.finetune.targets import parse_lora_targets
    return parse_lora_targets(targets)


def finetune_flops_per_token(spec, seq_len: int, finetune, attention: str = "full") -> dict:
    """FLOPs per token of one fine-tuning step of `spec` (a dense TransformerSpec) at `seq_len` under `finetune`
    (specs.run.Finetune; method full gives 3 × forward): forward, input_grad (the base's input gradients and the
    attention core's backward), adapter (the adapters' forward and backward), skipped_weight_grad (the frozen
    weights' gradients a full step would run) and total (what the step needs: the MFU numerator)."""
    check_choice(attention, ("full", "causal"), "--attention")
    mats = weight_matmuls(spec)
    forward_base = sum(2.0 * i * o * t for _, i, o, t in mats)
    core = attention_flops_per_token(spec, seq_len, attention)          # QKᵀ + A·V over all layers, forward
    if not finetune.adapters:
        total = 3.0 * (forward_base + core)
        return {"forward": forward_base + core, "input_grad": forward_base + core, "adapter": 0.0,
                "skipped_weight_grad": 0.0, "total": total, "convention": "3 × forward (6·N + attention)"}
    adapters = _adapters(spec, finetune)
    held = set(adapters) | {role for role in _roles(finetune.lora_targets)}
    L = spec.n_layers
    # requires-grad in layer 0 (its input, the frozen embedding's output, does not)
    q0, k0, v0 = ("q" in held), ("k" in held), ("v" in held)
    core0 = q0 or k0 or v0
    attn_out0 = core0 or "o" in held
    mlp_in0 = False if spec.parallel_residual else attn_out0
    act0 = mlp_in0 or bool({"gate", "up"} & held)
    stream1 = attn_out0 or act0 or "down" in held       # the stream leaving layer 0 (and every later one)
    layer_stream = stream1                              # layers 1..L-1 take a stream that requires grad iff this

    def dgrad_layers(role: str) -> float:
        """How many layers run the input gradient of a Linear of `role`."""
        if not layer_stream:
            return 0.0
        first = {"q": False, "k": False, "v": False, "o": core0}.get(role, mlp_in0 if role in ("gate", "up") else act0)
        return (L - 1) + first

    input_grad = 0.0
    for name, fan_in, fan_out, times in mats:
        if name in ("lm_head", "head"):
            input_grad += 2.0 * fan_in * fan_out * times * layer_stream
            continue
        role = BASE_ROLE.get(name, "down" if name.endswith("_down") else "up")
        input_grad += 2.0 * fan_in * fan_out * times / L * dgrad_layers(role)
    # the attention core's backward: steady layers 2 × forward; layer 0 only the operands that require grad
    per_layer_core = core / L
    half = per_layer_core / 2                           # QKᵀ and A·V cost the same
    first_core = half * (q0 + k0) + half * ((q0 or k0) + v0)
    input_grad += layer_stream * (2 * per_layer_core * (L - 1) + first_core)
    adapter = adapter_forward = 0.0
    for role, entries in adapters.items():
        for fan_in, rows, count in entries:
            a, b = 2.0 * finetune.lora_rank * fan_in, 2.0 * finetune.lora_rank * rows
            # forward A and B, both weight gradients, B's input gradient; A's input gradient where x requires grad
            adapter += count * (2 * a + 3 * b) + a * (dgrad_layers(role) if role != "head" else layer_stream)
            adapter_forward += count * (a + b)
    return {"forward": forward_base + core + adapter_forward, "input_grad": input_grad, "adapter": adapter,
            "skipped_weight_grad": forward_base, "total": forward_base + core + input_grad + adapter,
            "convention": "model FLOPs = the FLOPs the step needs: forward + input gradients + the adapters' "
                          "gradients; the frozen weights' gradients are not run and not counted (not 6·N)"}


def frozen_layer_kernels(spec, shard, finetune, kernels: dict) -> dict:
    """A layer's (or the edges') {"forward": [...], "backward": [...]} kernels under `finetune`: with adapters every
    weight-gradient kernel (role "wgrad": the GEMM, its casts, bias and norm-weight sums, the embedding's) is gone —
    the base is frozen; a quantized base (--quantize) drops autocast's weight casts and dequantizes each Linear's
    weight in forward and again in backward (torchao's LinearNF4: F.linear(input, weight.to(input.dtype)) forward,
    grad_output @ weight.to(grad_output.dtype) backward; bitsandbytes' MatMul4Bit.backward: dequantize_4bit(B)),
    priced as one memory-bound kernel that reads the stored bytes (account/finetune/quant.py) and writes the 16-bit
    copy, as bitsandbytes' kDequantizeBlockwise and a compiled torchao dequantize run it (torchao's eager
    get_original_weight, a dozen ops through int64 indices, moves about 11× more: not modelled)."""
    from dataclasses import replace as _replace
    from trainledger.account.finetune.quant import weight_bytes
    from trainledger.account.time.eager import ew
    if not finetune.adapters:
        return kernels
    quantized = finetune.base_storage != "none"
    fwd = [k for k in kernels["forward"] if not (quantized and k.name.endswith("_weight_cast"))]
    bwd = [k for k in kernels["backward"] if k.role != "wgrad"]
    is_layer = any(k.name in ("q_proj", "qkv") for k in kernels["forward"])
    if quantized and is_layer:
        a = shard.dtypes.a
        for p in _layer_projections(spec):
            rows, cols = p.out_features / shard.tp, p.in_features
            stored = weight_bytes(p.out_features, p.in_features, finetune.base_storage) / shard.tp
            moved = stored + rows * cols * a
            fwd.append(ew(f"{p.module}_dequantize", moved))
            bwd.append(_replace(ew(f"{p.module}_dequantize_backward", moved), role="dgrad"))
    if is_layer:
        extra_fwd, extra_bwd = adapter_kernels(spec, shard, finetune)
        fwd, bwd = fwd + extra_fwd, bwd + extra_bwd
    return {"forward": fwd, "backward": bwd}


def _layer_projections(spec):
    from trainledger.account.finetune.targets import projections
    return [p for p in projections(spec) if not any(role == "head" for role, _ in p.parts)]


def adapter_kernels(spec, shard, finetune) -> tuple[list, list]:
    """(forward, backward) kernels of one layer's adapters over the micro-batch's n tokens: A (n × d_in → r) and
    B (→ rows) GEMMs, the α/r scale and the add into the base output; backward B's input and weight gradients, A's
    weight and input gradients, the scale's backward and the sum of x's two gradients (base and adapter)."""
    from trainledger.account.time.eager import ew, gemm
    n, a, dtype, r = shard.tokens, shard.dtypes.a, shard.dtypes.dtype, finetune.lora_rank
    fwd, bwd = [], []
    for p, rows in targeted(spec, finetune.lora_targets):
        if any(role == "head" for role, _ in p.parts):
            continue
        rows, d_in, name = rows / shard.tp, p.in_features, f"{p.module}_lora"
        fwd += [gemm(f"{name}_A", n, r, d_in, a, dtype), gemm(f"{name}_B", n, rows, r, a, dtype),
                ew(f"{name}_scale_add", 5 * n * rows * a, count=2)]
        bwd += [ew(f"{name}_scale_backward", 2 * n * rows * a, role="dgrad"),
                gemm(f"{name}_B_dgrad", n, r, rows, a, dtype, role="dgrad"),
                gemm(f"{name}_B_wgrad", rows, r, n, a, dtype, role="wgrad"),
                gemm(f"{name}_A_wgrad", r, d_in, n, a, dtype, role="wgrad"),
                gemm(f"{name}_A_dgrad", n, d_in, r, a, dtype, role="dgrad"),
                ew(f"{name}_input_grad_sum", 3 * n * d_in * a, role="dgrad")]
    return fwd, bwd


def trainable_tensors(spec, finetune) -> tuple[int, tuple]:
    """(trainable parameters, the elements of each trainable tensor: A r × d_in and B rows × r of every adapted
    module) of `finetune`; what the optimizer step walks (account/finetune/lora.py counts the same)."""
    r = finetune.lora_rank
    numels = []
    for p, rows in targeted(spec, finetune.lora_targets):
        numels += [r * p.in_features, rows * r] * p.count
    return sum(numels), tuple(numels)
