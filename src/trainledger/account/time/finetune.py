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
