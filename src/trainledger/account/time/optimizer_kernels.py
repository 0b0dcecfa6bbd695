"""The optimizer step as kernels: our foreach optimizers pass by pass, PyTorch's multi-tensor launches, Megatron's. Pure.

On a GPU each torch._foreach_* call runs as multi_tensor_apply kernels (PyTorch,
aten/src/ATen/native/cuda/MultiTensorApply.cuh): the tensors of the call are cut into chunks of 65,536
elements (kChunkSize), one thread block per chunk, and a kernel is launched whenever 320 blocks are queued
(depth_to_max_blocks) or a tensor's last chunk fills the call's tensor slots (depth_to_max_tensors 110, 64, 48,
36, 30 for 1-5 tensor lists; 96, 64, ... with a list of scalars), and once more at the end. The 32 KB
kernel-argument variant (2,240 blocks, 770 tensors) serves only functors built for it, the fused optimizers
(torch._fused_adamw_); the foreach ops in the recorded H100 traces launch 7 kernels per call for GPT-2's 124 M
parameters and 60 for Llama 1B's 1.24 B: ceil(chunks / 320). A CPU runs the same calls tensor by tensor.
"""

from __future__ import annotations

from functools import lru_cache

from trainledger.account.time.eager import EAGER_FRAMEWORKS
from trainledger.account.time.roofline import Kernel
from trainledger.specs.recipes import get_optimizer, get_recipe

CHUNK_ELEMENTS = 65536                              # kChunkSize
MAX_BLOCKS = 320                                    # depth_to_max_blocks (4 KB kernel arguments)
MAX_TENSORS = (110, 64, 48, 36, 30)                 # depth_to_max_tensors, by the number of tensor lists
MAX_TENSORS_SCALARLIST = (96, 64, 48, 36, 30)       # depth_to_max_tensors_scalarlist
FUSED_MAX_BLOCKS, FUSED_MAX_TENSORS = 2240, (770, 448, 336, 252, 210)   # the 32 KB variant (fused optimizers)
FP32 = 4


@lru_cache(maxsize=4096)
def multi_tensor_launches(numels: tuple, depth: int, scalar_list: bool = False, fused: bool = False) -> int:
    """Kernels one multi_tensor_apply call launches over tensors of `numels` elements with `depth` tensor lists
    (the loop of MultiTensorApply.cuh, chunk by chunk, counted a tensor at a time)."""
    depth = min(max(depth, 1), 5)
    max_blocks = FUSED_MAX_BLOCKS if fused else MAX_BLOCKS
    max_tensors = (FUSED_MAX_TENSORS if fused else (MAX_TENSORS_SCALARLIST if scalar_list else MAX_TENSORS))[depth - 1]
    launches = blocks = tensors = 0
    for numel in numels:
        chunks = -(-int(numel) // CHUNK_ELEMENTS)
        if chunks <= 0:
            continue
        tensors += 1
        while chunks:
            take = min(chunks, max_blocks - blocks)
            blocks += take
            chunks -= take
            if blocks == max_blocks or (chunks == 0 and tensors == max_tensors):
                launches += 1
                blocks = 0
                tensors = 1 if chunks else 0          # a tensor cut by a full launch carries over
    return launches + (blocks > 0)


def optimizer_kernels(n_params: float, n_tensors: int, precision: str = "amp-bf16", optimizer: str = "adamw", *,
                      framework: str = "trainledger", clip: bool = True,
                      tensor_numels: tuple | None = None) -> list[Kernel]:
    """The `optimizer` step (specs/recipes.py: its states, each of the recipe's state dtype unless the optimizer
    fixes its own) over `n_params` parameters in `n_tensors` tensors under recipe `precision`, as memory traffic.

    `tensor_numels` (the elements of each parameter tensor on this GPU): the step runs on a GPU, each foreach call
    as multi-tensor kernels (`multi_tensor_launches`); None: on a CPU, one op per tensor and call.

    An optimizer implemented in trainledger.optim (framework "trainledger"; torchtitan's torch.optim.AdamW with
    foreach=True runs the same passes: torch/optim/adamw.py _multi_tensor_adamw): its foreach passes one by one
    (`FOREACH_PASSES`). Megatron's mixed-precision optimizer: `megatron_optimizer_kernels`. Otherwise (an
    optimizer we only account for, e.g. adafactor, adam-8bit) the least traffic: read the gradient and the
    weight (the fp32 master copy when there is one), read and write each state and the weight, write the
    16-bit model copy of a mixed-precision recipe, read the gradients once more for clipping.
    """
    recipe, opt = get_recipe(precision), get_optimizer(optimizer)
    n_states = opt.n_states
    state_bytes = opt.state_bytes_per_element if opt.state_bytes_per_element is not None else recipe.state_bytes_per_element
    if framework == "megatron" and recipe.master_params_bytes_per_param:
        return megatron_optimizer_kernels(n_params, n_tensors, recipe, n_states, state_bytes)
    grad, master = recipe.grads_bytes_per_param, recipe.master_params_bytes_per_param
    weight = master if master else recipe.params_bytes_per_param
    if framework in EAGER_FRAMEWORKS and opt.name in FOREACH_PASSES:
        return foreach_optimizer_kernels(n_params, n_tensors, opt.name, recipe, state_bytes, clip=clip,
                                         tensor_numels=tensor_numels)
    per_param = grad + 2 * weight + 2 * n_states * state_bytes + (recipe.params_bytes_per_param if master else 0)
    if clip:
        per_param += grad
    return [Kernel("optimizer_step", "optimizer", "elementwise", 0.0, n_params * per_param, (), "bf16",
                   max(1, int(n_tensors)) * (10 + n_states), "forward")]


# trainledger.optim's step counters (torch.optim's 0-dim "step" tensors), one add per tensor: launches, no bytes
STEP_COUNT = ("add_", "", "")
# The torch._foreach_* passes of trainledger.optim's default configurations, in order: (op, tensors read, tensors
# written) per parameter, each tensor a gradient "g", a weight "w" or a state "s" (an optimizer state, or a
# temporary of the state's dtype: Adam's denominator). A tensor read twice by one op (addcmul(v, g, g)) is read
# once. tests/account/test_time.py checks these against the aten ops our optimizers dispatch.
FOREACH_PASSES = {
    "sgd": (("add_", "wg", "w"),),                                                  # w ← w − lr·g
    "momentum": (("mul_", "s", "s"), ("add_", "sg", "s"), ("add_", "ws", "w")),      # b ← μb + g; w ← w − lr·b
    "adagrad": (STEP_COUNT, ("addcmul_", "sg", "s"), ("sqrt", "s", "s"), ("add_", "s", "s"),
                ("addcdiv_", "wgs", "w")),
    "rmsprop": (STEP_COUNT, ("mul_", "s", "s"), ("addcmul_", "sg", "s"), ("sqrt", "s", "s"), ("add_", "s", "s"),
                ("addcdiv_", "wgs", "w")),
    "rmsprop-centered": (STEP_COUNT, ("mul_", "s", "s"), ("addcmul_", "sg", "s"), ("lerp_", "sg", "s"),
                         ("addcmul", "ss", "s"), ("sqrt_", "s", "s"), ("add_", "s", "s"), ("addcdiv_", "wgs", "w")),
    "adam": (STEP_COUNT, ("lerp_", "sg", "s"), ("mul_", "s", "s"), ("addcmul_", "sg", "s"), ("sqrt", "s", "s"),
             ("div_", "s", "s"), ("add_", "s", "s"), ("addcdiv_", "wss", "w")),
    "adamw": (STEP_COUNT, ("mul_", "w", "w"), ("lerp_", "sg", "s"), ("mul_", "s", "s"), ("addcmul_", "sg", "s"),
              ("sqrt", "s", "s"), ("div_", "s", "s"), ("add_", "s", "s"), ("addcdiv_", "wss", "w")),
}
# trainledger.optim.clip_grad_norm_: one norm per gradient, then every gradient scaled by the clip factor
CLIP_PASSES = (("norm", "g", ""), ("mul_", "g", "g"))
# Tensor lists each foreach call of FOREACH_PASSES passes (its multi-tensor depth) where it differs from the
# distinct tensors read and written: addcmul_(v, g, g) and addcdiv_(w, m, d) take three lists, sqrt(v) two
# (out of place: an output list), norm one. Calls taking a list of scalars (the per-tensor bias corrections) have
# their own tensor limits.
FOREACH_DEPTH = {"addcmul_": 3, "addcmul": 3, "addcdiv_": 3, "sqrt": 2, "norm": 1, "lerp_": 2}
SCALAR_LIST_OPS = {"div_", "addcdiv_"}


def foreach_optimizer_kernels(n_params: float, n_tensors: int, optimizer: str, recipe, state_bytes: float, *,
                              clip: bool = True, tensor_numels: tuple | None = None) -> list[Kernel]:
    """trainledger.optim's `optimizer` step (+ clip_grad_norm_) pass by pass, as memory traffic, for a precision
    `recipe` (specs/recipes.py: gradients in its gradient dtype, the updated weight its fp32 master copy when it has
    one, then cast into the 16-bit model weights) with states of `state_bytes` per element.

    Each torch._foreach_* pass reads and writes its tensors for every parameter. On a CPU it runs tensor by tensor
    (one op per tensor); on a GPU (`tensor_numels` given) as multi-tensor kernels over chunks of the tensors
    (`multi_tensor_launches`; its depth is the number of tensor lists the call takes: addcmul_(v, g, g) takes 3),
    and the step counters, 0-dim CPU tensors, launch nothing on it. A pass sweeps every tensor before the next
    begins, so what it streams is the whole pass (`working_set_bytes`): nothing it touched is still cached when
    the next pass comes back to the same tensor, unless the whole pass fits. AdamW in fp32: 80 bytes per
    parameter (+ 12 for clipping), against the 28 a fused kernel needs.
    """
    master = recipe.master_params_bytes_per_param
    grad_bytes, weight_bytes = recipe.grads_bytes_per_param, master if master else recipe.params_bytes_per_param
    model_copy_bytes = recipe.params_bytes_per_param if master else 0
    size = {"g": grad_bytes, "w": weight_bytes, "s": state_bytes}
    launches = max(1, int(n_tensors))
    passes = (CLIP_PASSES if clip else ()) + FOREACH_PASSES[optimizer]
    out = []
    for i, (op, read, written) in enumerate(passes):
        per_param = sum(size[t] for t in read) + sum(size[t] for t in written)
        moved = n_params * per_param
        count = launches
        if tensor_numels is not None:
            if not per_param:            # the step counters live on the CPU
                continue
            count = multi_tensor_launches(tensor_numels, FOREACH_DEPTH.get(op, len(set(read + written)) or 1),
                                          op in SCALAR_LIST_OPS)
        out.append(Kernel(f"optimizer_{i}_{op}", "optimizer", "elementwise", 0.0, moved, (), "bf16", count,
                          "forward", working_set_bytes=moved))
    # per tensor, on the CPU: the clip's norm moved to the device (a no-op .to()) and the step counter read back
    # (float(step)); on a GPU also the counter's increment, a CPU-tensor op (the "add_" pass above is skipped);
    # and the optimizer's Python around them (kind "python": GPUSpec.optimizer_tensor_seconds each)
    out.append(Kernel("optimizer_per_tensor", "optimizer", "host", 0.0, 0.0, (), "bf16",
                      (2 + (tensor_numels is not None)) * launches, "forward"))
    out.append(Kernel("optimizer_python", "optimizer", "python", 0.0, 0.0, (), "bf16", launches, "forward"))
    if model_copy_bytes:     # a master copy: the updated fp32 weights cast into the model's 16-bit ones
        moved = n_params * (weight_bytes + model_copy_bytes)
        count = launches if tensor_numels is None else multi_tensor_launches(tensor_numels, 2)
        out.append(Kernel("optimizer_copy_to_model", "optimizer", "elementwise", 0.0, moved, (), "bf16", count,
                          "forward", working_set_bytes=moved))
    return out


def megatron_optimizer_kernels(n_params: float, n_tensors: int, recipe, n_states: int = 2,
                               state_bytes: float = 4) -> list[Kernel]:
    """Megatron-LM's mixed-precision optimizer step (Float16OptimizerWithFloat16Params, contiguous fp32 main_grad
    buffers, apex multi-tensor kernels), pass by pass, as memory traffic per parameter of this GPU's shard:

    - fp16 only: unscale the fp32 gradients by 1/loss-scale and check them for inf/NaN
      (torch._amp_foreach_non_finite_check_and_unscale_): read 4 + write 4 B; bf16 runs without a loss scaler;
    - gradient norm for clipping (multi_tensor_l2norm): read 4 B (the rescale runs only when the norm exceeds
      the clip value: not counted);
    - Adam (apex FusedAdam, multi_tensor_adam): read gradient, fp32 weight and the states, write weight and
      states: 4 + 2·4 + 2·n_states·state_bytes = 28 B for two fp32 states;
    - copy the fp32 main weights into the 16-bit model weights (_copy_main_params_to_model_params): 4 + 2 B;
    - zero the fp32 main_grad buffer for the next step: write 4 B.
    fp16: 8 + 4 + 28 + 6 + 4 = 50 B per parameter; bf16: 42 B. The main_grad → main_param.grad "copy" is an
    alias in fp32 (no traffic). Launches: a handful of multi-tensor kernels per ~chunk of tensors: counted as
    n_tensors/110 (apex's default of 110 tensors per launch list) per pass, at least 1.
    """
    master, model = recipe.master_params_bytes_per_param, recipe.params_bytes_per_param
    main_grad = FP32            # gradient_accumulation_fusion accumulates into an fp32 buffer
    launches = max(1, -(-int(n_tensors) // 110))
    passes = []
    if recipe.name == "mixed-fp16":
        passes.append(("unscale_check_inf", 2 * main_grad))
    passes += [("grad_norm", main_grad),
               ("adam", main_grad + 2 * master + 2 * n_states * state_bytes),
               ("copy_main_to_model", master + model),
               ("zero_main_grad", main_grad)]
    return [Kernel(f"optimizer_{name}", "optimizer", "elementwise", 0.0, n_params * per_param, (), "bf16", launches,
                   "forward") for name, per_param in passes]


def parameter_numels(spec, tp: int = 1, pp: int = 1, shards: int = 1) -> tuple:
    """The elements of each parameter tensor of `spec` on one GPU, in model order: what one foreach call of the
    optimizer walks (weight matrices split over tp, layers over pp stages, everything over `shards` ZeRO ranks).
    As account.time.step.parameter_tensors counts the tensors: q, k, v, o (+ biases), the MLP matrices (+ biases) or
    the router and experts, the norms; the embedding, learned positions, the final norm, an untied head."""
    d, dh = spec.d_model, spec.head_dim
    q, kv = spec.n_heads * dh, spec.kv_heads * dh
    norm = [d] * (2 if spec.norm_bias else 1)
    out = [spec.vocab_size * d / tp] + ([spec.max_seq_len * d] if spec.position == "learned" else [])
    for layer_index, count in spec.layer_groups():
        tensors = [d * q / tp, d * kv / tp, d * kv / tp, q * d / tp]
        tensors += [q / tp, kv / tp, kv / tp] if spec.qkv_bias else []
        tensors += [d] if spec.attn_out_bias else []
        n_norms = 2 + 2 * spec.sandwich_norm
        tensors += norm * n_norms + ([dh] * (2 if spec.norm_bias else 1) * 2 if spec.qk_norm else [])
        mats = 3 if spec.gated_mlp else 2
        if spec.is_moe_layer(layer_index):
            tensors += [d * spec.n_experts]
            for _ in range(spec.n_experts):
                tensors += [d * spec.d_ff / tp] * mats + ([spec.d_ff / tp] * (mats - 1) + [d]) * spec.mlp_bias
            if spec.shared_expert_d_ff:
                tensors += [d * spec.shared_expert_d_ff / tp] * mats
            tensors += [d] * spec.shared_expert_gate
        else:
            f = spec.dense_d_ff if (spec.is_moe and spec.dense_d_ff) else spec.d_ff
            tensors += [d * f / tp] * mats + ([f / tp] * (mats - 1) + [d]) * spec.mlp_bias
        out += tensors * max(1, round(count / pp))
    out += norm + ([] if spec.tied_embeddings else [spec.vocab_size * d / tp])
    return tuple(max(1, round(x / shards)) for x in out)


def accumulation_kernels(n_params: float, n_tensors: float, micro_batches: int, recipe, framework: str) -> list[Kernel]:
    """Gradient accumulation over micro-batches in eager PyTorch: the first backward hands its gradient to .grad
    (AccumulateGrad steals it: no kernel), each later one adds into it (read both, write: 3 × the gradient's
    bytes per parameter). Megatron accumulates inside the weight-gradient GEMM (gradient_accumulation_fusion)."""
    if framework not in EAGER_FRAMEWORKS or micro_batches <= 1:
        return []
    later = micro_batches - 1
    return [Kernel("grad_accumulate", "memory_bound", "elementwise", 0.0,
                   later * n_params * 3 * recipe.grads_bytes_per_param, (), "bf16",
                   max(1, round(later * n_tensors)), "wgrad")]


def parameter_tensors(spec) -> int:
    """Parameter tensors of `spec` (weights, biases, norm vectors): what a per-tensor optimizer loops over.

    Per layer: q, k, v, o (+ their biases); the MLP's 2 or 3 matrices (+ biases), or in an MoE layer the router,
    each expert's matrices, the shared expert's and its gate; 2 norms (4 with sandwich norms, + the q/k norms),
    each a weight (+ a bias). Outside the layers: the embedding, the final norm, learned positions, an untied
    head. Equals len(list(model.parameters())) of models/ (tests/account/test_time.py)."""
    mats = 3 if spec.gated_mlp else 2
    norm = 2 if spec.norm_bias else 1
    total = 0
    for layer, count in spec.layer_groups():
        tensors = 4 + 3 * spec.qkv_bias + spec.attn_out_bias
        tensors += norm * (2 + 2 * spec.sandwich_norm + 2 * spec.qk_norm)
        if spec.is_moe_layer(layer):
            tensors += 1 + mats * spec.n_experts * (1 + spec.mlp_bias)
            tensors += mats * (spec.shared_expert_d_ff is not None) + spec.shared_expert_gate
        else:
            tensors += mats * (1 + spec.mlp_bias)
        total += count * tensors
    return total + 1 + norm + (spec.position == "learned") + (not spec.tied_embeddings)
