"""The CPU side of our eager mixture of experts (models/mlp.MoE): the aten ops it dispatches per expert. Pure.

models/mlp.MoE runs its experts one at a time: torch.where(top_index == e) (eq, then nonzero, which copies the
number of matches to the host, a synchronization: account/time/timeline.py Synced), index_select of the expert's
tokens, its Linears and activation, the gather of the routing weights and their product, index_put_ back into the
output; the backward runs each step's gradient in turn. On a GPU every one of these ops costs the CPU its dispatch
whatever the expert's size, and the synchronization starts each expert with an empty queue, so a layer of many small
experts is bound by its host: on an H200 one layer of 64 experts (d_model 1024, d_ff 512, top-8) took 38.5 ms
forward and 63.7 ms forward + backward at 2,048 tokens, and still 29.9 and 76.6 ms at 32,768
(tests/data/h200_2026_11_28/microbench.json, benchmarks/bench_gpu_host_sync.py).

PER_EXPERT_OPS were counted with a TorchDispatchMode (every aten op below autograd, autocast's casts included)
over models/mlp.MoE with 4 and 8 experts, per expert = the difference / 4, for each MLP kind: launching ops (a
kernel each) and views (t, unbind, unsqueeze, detach, squeeze: dispatch only). tests/account/test_moe_loop.py
counts them again from the model and fails when the model's code changes them.
"""

from __future__ import annotations

# (gated MLP, Linear bias, autocast) -> per expert: (forward launching, forward views, backward launching,
# backward views)
PER_EXPERT_OPS = {
    (True, False, False): (11, 5, 20, 16), (True, False, True): (16, 5, 26, 16),
    (True, True, False): (11, 5, 23, 22), (True, True, True): (19, 5, 32, 22),
    (False, False, False): (9, 4, 15, 11), (False, False, True): (12, 4, 19, 11),
    (False, True, False): (9, 4, 17, 15), (False, True, True): (14, 4, 23, 15),
}


def per_expert_ops(spec, autocast: bool) -> tuple[int, int, int, int]:
    """(forward launching, forward views, backward launching, backward views) aten ops of one expert of
    models/mlp.MoE for `spec`'s MLP (gated or not, with or without bias), under autocast or not."""
    return PER_EXPERT_OPS[(bool(spec.gated_mlp), bool(spec.mlp_bias), bool(autocast))]
