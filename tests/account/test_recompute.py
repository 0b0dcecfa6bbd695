"""torchtitan's selective activation checkpointing (account/counting/recompute.py): what each policy re-runs and keeps."""

import pytest

from trainledger.account.counting import recompute
from trainledger.account.memory.activations import ActivationShard, activations_bytes
from trainledger.account.counting.flops import recompute_flops_per_token
from trainledger.account.time.kernels import layer_kernels
from trainledger.account.time.shard import Shard
from runs import step as step_time
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu

LLAMA = get_model("llama-3-8b")          # d 4096, 32 heads of 128, 8 KV heads, d_ff 14336, 32 layers


def test_per_op_policy_reruns_every_second_matmul():
    """torchtitan's policy saves every mm of its list except each second one of a block's forward: of q, k, v, o,
    gate, up, down, the block re-runs k, o and up, with the elementwise ops; the attention core's output is kept."""
    forward = layer_kernels(LLAMA, Shard(1, 1024, "mixed-bf16"))["forward"]
    kernels, weight = recompute.recomputed_forward(forward, "selective-op")
    gemms = [k.name for k in kernels if k.kind == "gemm"]
    assert gemms == ["k_proj", "o_proj", "mlp_up"] and weight == 1.0
    assert not any(k.core for k in kernels)
    assert {k.name for k in kernels if k.kind == "elementwise"} == {k.name for k in forward
                                                                  if k.kind == "elementwise" and not k.core}


@pytest.mark.parametrize("layers, fraction, why", [
    (32, 0.5, "blocks 2, 4, ..., 32 of 32"),
    (5, 0.4, "blocks 2 and 4 of 5"),
    (1, 0.0, "a single block is never the second"),
])
def test_per_layer_policy_checkpoints_every_second_block(layers, fraction, why):
    assert recompute.checkpointed_fraction(layers, "selective-layer") == pytest.approx(fraction), why


def test_recompute_flops_by_hand():
    """Per token, selective-op re-runs k (4096·1024), o (4096²) and up (4096·14336) in each of 32 blocks: 2 FLOPs per
    weight; selective-layer re-runs half of what full does."""
    per_op = 32 * 2 * (4096 * 1024 + 4096 * 4096 + 4096 * 14336)
    assert recompute_flops_per_token(LLAMA, 8192, recompute="selective-op") == pytest.approx(per_op)
    assert recompute_flops_per_token(LLAMA, 8192, recompute="selective-layer") == pytest.approx(
        0.5 * recompute_flops_per_token(LLAMA, 8192, recompute="full"))


def test_per_op_policy_keeps_by_hand():
    """A block keeps its input and the outputs of q (4096), v (1024), gate (14336) and down (4096) in bf16, the
    attention output (4096) and its fp32 logsumexp (32 heads): 31,744 × 2 + 128 bytes per token."""
    n = 8192

    def per_layer(recompute="none"):
        return activations_bytes(LLAMA, ActivationShard(1, n, precision="mixed-bf16", recompute=recompute))["per_layer"]

    kept = per_layer("selective-op")
    assert kept == pytest.approx(n * ((4096 + 4096 + 1024 + 14336 + 4096 + 4096) * 2 + 32 * 4))
    none, full, layer = per_layer(), per_layer("full"), per_layer("selective-layer")
    assert full < kept < none and layer == pytest.approx((none + full) / 2)


def test_policies_order_time_and_memory():
    """More recomputation, more time; the layer's backward grows by exactly what each re-runs."""
    a100 = get_gpu("a100-80gb")
    kw = dict(batch_size=1, seq_len=4096, num_gpus=1, precision="mixed-bf16", with_memory=False)
    steps = {r: step_time(LLAMA, a100, recompute=r, **kw)["step_seconds"] for r in recompute.POLICIES}
    assert steps["none"] < steps["selective"] < steps["selective-op"] < steps["full"]
    assert steps["none"] < steps["selective-layer"] < steps["full"]
    assert steps["selective-layer"] - steps["none"] == pytest.approx(0.5 * (steps["full"] - steps["none"]), rel=1e-6)
