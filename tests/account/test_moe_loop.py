"""Our eager mixture of experts on a GPU: the ops it dispatches per expert (counted again from models/mlp.MoE), the
timeline of a loop that synchronizes once per expert (against a launch-by-launch simulation), and the predicted
layer against what one H200 measured (tests/data/h200_2026_11_28)."""

import collections
import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainledger.account.time import kernels as K
from trainledger.account.time import step as S
from trainledger.account.time import timeline as TL
from trainledger.account.time.moe_loop import PER_EXPERT_OPS
from trainledger.account.time.shard import Shard
from trainledger.models.mlp import MoE
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu
from trainledger.specs.hf_config import spec_from_config_file
from trainledger.specs.performance import EAGER_OP_CPU_SECONDS, HOST_SYNC_SECONDS

sys.path.insert(0, str(Path(__file__).parent))
from timeline_sim import simulate  # noqa: E402

DATA = Path(__file__).parents[1] / "data" / "h200_2026_11_28"
VIEWS = {"t", "unbind", "unsqueeze", "view", "detach", "squeeze", "expand", "alias", "_unsafe_view", "transpose"}


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def counted(spec, autocast: bool) -> tuple:
    """(forward launching, forward views, backward launching, backward views) of one MoE layer of `spec`."""
    layer = MoE(spec)
    x = torch.randn(1, 256, spec.d_model, requires_grad=True)
    forward, backward = Count(), Count()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        with forward:
            y = layer(x)
    with backward:
        y.float().sum().backward()
    split = [(sum(n for op, n in c.items() if op not in VIEWS), sum(n for op, n in c.items() if op in VIEWS))
             for c in (forward.ops, backward.ops)]
    return split[0] + split[1]


@pytest.mark.parametrize("gated, bias, autocast", sorted(PER_EXPERT_OPS))
def test_per_expert_ops_are_what_the_model_dispatches(gated, bias, autocast):
    """8 experts minus 4, over 4: the ops one more expert adds, as models/mlp.MoE runs today."""
    torch.manual_seed(0)
    base = dataclasses.replace(get_model("tiny-moe"), mlp="swiglu" if gated else "gelu", mlp_bias=bias,
                               experts_per_token=2)
    four, eight = (counted(dataclasses.replace(base, n_experts=n), autocast) for n in (4, 8))
    assert tuple((b - a) / 4 for a, b in zip(four, eight)) == PER_EXPERT_OPS[(gated, bias, autocast)]


# --- a loop that synchronizes once per iteration --------------------------------------------------------------
@pytest.mark.parametrize("before, iteration, after", [
    ([(1, 50)], [(5, 1), (5, 1)], [(1, 2)]),                 # a GPU-bound stretch, then a CPU-bound loop
    ([(5, 1)], [(1, 9), (1, 9)], [(3, 30), (1, 1)]),         # a GPU-bound loop between CPU- and GPU-bound ops
    ([], [(2, 2)], [(0, 4)]),
], ids=["gpu-then-loop", "gpu-bound-loop", "bare"])
@pytest.mark.parametrize("n", [1, 3, 8])
def test_a_synchronizing_loop_composes_as_the_launch_by_launch_timeline(before, iteration, after, n):
    latency = 0.5
    loop = TL.synced_loop(TL.sequence(TL.op(c, d) for c, d in iteration), n, latency)
    ops = before + (["sync"] + iteration) * n + after
    block = TL.sequence([*(TL.op(c, d) for c, d in before), loop, *(TL.op(c, d) for c, d in after)])
    for lag in (-2.0, 0.0, 6.0):
        assert block.synchronized_seconds(lag) == pytest.approx(max(simulate(ops, lag, latency)))
    twice = block.then(block)           # two layers: the second's loop waits for the first's tail
    assert twice.synchronized_seconds() == pytest.approx(max(simulate(ops + ops, 0.0, latency)))
    assert block.times(2).synchronized_seconds() == pytest.approx(max(simulate(ops + ops, 0.0, latency)))


# --- against the H200 ----------------------------------------------------------------------------------------
def predicted_layer(row, loop: bool = True) -> tuple[float, float]:
    """Forward and forward + backward seconds of one MoE layer as timed for our trainer (amp-bf16 on the H200's
    datasheet entry, the reference host's CPU cost per op)."""
    spec = spec_from_config_file(DATA / Path(row["config"]).name.replace(".json", "-config.json"))
    fwd, bwd = K._moe_mlp(spec, Shard(row["tokens"], 1, "amp-bf16"), fused=False, loop=loop)   # n tokens, autocast
    gpu = get_gpu("h200")
    f, b = (S._time(gpu, ks, cpu_op=EAGER_OP_CPU_SECONDS)["block"] for ks in (fwd, bwd))
    return f.synchronized_seconds(), f.then(b).synchronized_seconds()


def measured_rows():
    return json.loads((DATA / "microbench.json").read_text())["moe_layer"]


def test_the_host_synchronization_is_the_measured_round_trip_less_the_launch():
    sync = json.loads((DATA / "microbench.json").read_text())["host_sync"]
    assert HOST_SYNC_SECONDS == pytest.approx(sync["round_trip_seconds"] - sync["launch_seconds"], rel=1e-3)


@pytest.mark.parametrize("row", measured_rows(), ids=lambda r: f"{r['n_experts']}experts-{r['tokens']}tokens")
def test_an_eager_moe_layer_forward_and_backward_is_within_a_third_of_the_h200(row):
    """Every measured layer (8 and 64 experts, 2,048-32,768 tokens): forward + backward within 35 % (today −14 …
    −31 %). The experts timed as one grouped GEMM (loop False, no counted ops, no synchronization) are more than
    55 % short; the model before the counted ops said −61 … −74 %."""
    _, both = predicted_layer(row)
    assert both / row["forward_backward_seconds"] - 1 == pytest.approx(0, abs=0.35)
    _, before = predicted_layer(row, loop=False)
    assert abs(before / row["forward_backward_seconds"] - 1) > 0.55


@pytest.mark.xfail(strict=True, reason="the forward of 64 small experts is still −46 % at 2,048 and 8,192 tokens: "
                   "the Python of each expert's iteration (module calls, advanced indexing) costs more than the "
                   "aten ops it dispatches at the reference host's 17.6 µs (account/time/moe_loop.py)")
def test_an_eager_moe_layer_forward_is_within_a_quarter_of_the_h200():
    for row in measured_rows():
        forward, _ = predicted_layer(row)
        assert forward / row["forward_seconds"] - 1 == pytest.approx(0, abs=0.25)
