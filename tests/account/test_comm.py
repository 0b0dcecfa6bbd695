"""Collective volumes and α–β costs (account/time/comm.py), each checked on a case worked by hand."""

import pytest

from trainledger.account.time import comm
from trainledger.account.time.shard import Shard
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.performance import Link
from trainledger.specs.run import Run

GB = 1e9
LINK = Link("test link", 100 * GB, 1.0, 0.0, 0.0)          # 100 GB/s per direction, no latency


@pytest.mark.parametrize("kind, n, expected_bytes, why", [
    ("all_reduce", 8, 1.75e9, "2(n−1)/n · S = 2·7/8 · 1 GB"),
    ("all_reduce", 2, 1.0e9, "2·1/2 · S: two ranks each send half twice"),
    ("reduce_scatter", 8, 0.875e9, "(n−1)/n · S = 7/8 · 1 GB"),
    ("all_gather", 4, 0.75e9, "(n−1)/n · S = 3/4 · 1 GB"),
    ("send_recv", 2, 1.0e9, "the whole message"),
    ("all_reduce", 1, 0.0, "a group of one sends nothing"),
])
def test_ring_volumes(kind, n, expected_bytes, why):
    assert comm.ring_bytes_sent(kind, 1e9, n) == pytest.approx(expected_bytes), why


def test_alpha_beta_time_by_hand():
    # all-reduce of 1 GB over 8 ranks at 100 GB/s: 1.75 GB / 100 GB/s = 17.5 ms (facts.md ring formula)
    assert comm.collective_seconds("all_reduce", 1e9, 8, LINK) == pytest.approx(17.5e-3)
    assert comm.collective_seconds("reduce_scatter", 1e9, 8, LINK) == pytest.approx(8.75e-3)
    assert comm.collective_seconds("all_gather", 1e9, 8, LINK) == pytest.approx(8.75e-3)
    assert comm.collective_seconds("send_recv", 1e9, 2, LINK) == pytest.approx(10e-3)
    # latency: base 8 µs + 2(n−1) = 6 steps × 3 µs for a 4-rank all-reduce of 0 bytes = 26 µs
    slow = Link("latency", 100 * GB, 1.0, 3e-6, 8e-6)
    assert comm.collective_seconds("all_reduce", 0.0, 4, slow) == pytest.approx(8e-6 + 6 * 3e-6)
    assert comm.collective_seconds("all_gather", 0.0, 4, slow) == pytest.approx(8e-6 + 3 * 3e-6)
    # the achieved bandwidth is the datasheet rate × the measured bus-bandwidth fraction
    half = Link("half", 100 * GB, 0.5)
    assert comm.collective_seconds("all_reduce", 1e9, 8, half) == pytest.approx(35e-3)
    assert comm.collective_seconds("all_reduce", 1e9, 1, half) == 0.0


def test_nvlink3_bus_bandwidth_is_the_published_measurement():
    """stas00/ml-engineering: nccl-tests all_reduce on 8 × A100 gives 235 GB/s bus bandwidth (of 300 per direction)."""
    from trainledger.specs.hardware import get_gpu
    a100 = get_gpu("a100")
    assert a100.intra_node_link.effective_bytes_per_s == pytest.approx(235e9)
    assert a100.inter_node_link.effective_bytes_per_s == pytest.approx(24e9)     # 192 GB/s per DGX node / 8


def test_measured_busbw_curve_replaces_alpha_beta():
    """A link with a measured all_reduce busbw curve: ring bytes / busbw(S), interpolated in log2(S).

    Azure ND A100 v4 (8 × A100-SXM4-80GB, NCCL 2.18.5): 166.63 GB/s at 64 MiB, 174.18 at 128 MiB."""
    from trainledger.specs.hardware import get_gpu
    nvlink = get_gpu("a100-80gb").intra_node_link
    mib64, mib128 = 2**26, 2**27
    assert comm.collective_seconds("all_reduce", mib64, 8, nvlink) == pytest.approx(1.75 * mib64 / 166.63e9)
    assert comm.collective_seconds("all_reduce", mib128, 8, nvlink) == pytest.approx(1.75 * mib128 / 174.18e9)
    # halfway in log2 between the two points: the mean rate
    s = 2**26.5
    assert comm.collective_seconds("all_reduce", s, 8, nvlink) == pytest.approx(1.75 * s / ((166.63e9 + 174.18e9) / 2))
    # reduce-scatter and all-gather move half an all-reduce's bytes at the same bus bandwidth
    assert comm.collective_seconds("reduce_scatter", mib64, 8, nvlink) == pytest.approx(0.875 * mib64 / 166.63e9)
    # a 100 MB tensor-parallel all-reduce costs ~30 % more than the large-message 235 GB/s suggests
    flat = comm.collective_seconds("all_reduce", 100e6, 8, Link("flat", 300 * GB, 235 / 300))
    assert 1.25 < comm.collective_seconds("all_reduce", 100e6, 8, nvlink) / flat < 1.45
    # below the smallest measured size (32 KiB): that size's time, a latency floor
    tiny = comm.collective_seconds("all_reduce", 32 * 1024, 8, nvlink)
    assert comm.collective_seconds("all_reduce", 8, 8, nvlink) == pytest.approx(tiny)
    assert tiny == pytest.approx(1.75 * 32 * 1024 / 1.37e9)            # ~42 µs
    # above the largest (8 GiB): its rate; point-to-point keeps α–β
    assert comm.collective_seconds("all_reduce", 2**34, 8, nvlink) == pytest.approx(1.75 * 2**34 / 231.58e9)
    assert comm.collective_seconds("send_recv", 1e9, 2, nvlink) == pytest.approx(
        nvlink.call_latency_seconds + nvlink.step_latency_seconds + 1e9 / nvlink.effective_bytes_per_s)


def test_busbw_curve_must_ascend():
    with pytest.raises(TrainledgerError, match="busbw_curve"):
        Link("bad", 100 * GB, busbw_curve=((2e6, 1e10), (1e6, 2e10)))
    with pytest.raises(TrainledgerError, match="busbw_curve"):
        Link("bad", 100 * GB, busbw_curve=((1e6, 0.0),))


def test_ddp_sends_the_gradients_once():
    """DDP over 2 ranks: one all-reduce of every fp32 gradient (amp keeps fp32 grads): 2·1/2·S = S bytes each."""
    gpt2 = get_model("gpt2")
    sent = comm.bytes_sent_per_rank(gpt2, Shard(4, 128, "amp-bf16"), Run().with_(dp=2, zero=0), micro_batches=3,
                                    style="torch")
    assert sent["dp_comm"] == pytest.approx(124_439_808 * 4)
    assert sent["total"] == sent["dp_comm"]


def test_fsdp2_gathers_twice_and_reduce_scatters():
    """FSDP2 (ZeRO-3) over 4 ranks, 2 micro-batches: all-gather params in forward and backward, reduce-scatter grads,
    each (n−1)/n · S per micro-batch."""
    gpt2 = get_model("gpt2")
    n = 124_439_808
    sent = comm.bytes_sent_per_rank(gpt2, Shard(1, 128, "mixed-bf16"), Run().with_(dp=4, zero=3), micro_batches=2,
                                    style="torch")
    per_mb = 3 / 4 * (n * 2) + 3 / 4 * (n * 2) + 3 / 4 * (n * 2)      # bf16 params and grads in mixed-bf16
    assert sent["dp_comm"] == pytest.approx(2 * per_mb)


def test_tensor_parallel_megatron_four_allreduces_per_layer():
    """Megatron TP (Shoeybi et al. 2019, Sec. 3): 2 all-reduces forward + 2 backward per layer of b·s·h 16-bit values."""
    spec = get_model("gpt2")
    b, s, h, L, t = 2, 1024, 768, 12, 4
    cs = comm.step_collectives(spec, Shard(b, s, "mixed-bf16", tp=t), Run(), style="megatron")
    ars = [c for c in cs if c.kind == "all_reduce"]
    assert sum(c.count for c in ars) == 4 * L
    assert all(c.payload_bytes == b * s * h * 2 for c in ars)
    assert sum(c.bytes_per_step for c in cs) == pytest.approx(4 * L * 2 * 3 / 4 * b * s * h * 2)


def test_sequence_parallel_moves_the_same_bytes_as_tensor_parallel_forward():
    """Korthikanti et al. 2022, Sec. 4.2.2: an all-reduce is a reduce-scatter plus an all-gather, so sequence
    parallelism's forward (2 all-gathers + 2 reduce-scatters per layer) sends what TP's 2 all-reduces send."""
    spec = get_model("llama-2-7b")
    tp, sp = ({c.name: c for c in comm.step_collectives(spec, Shard(1, 4096, "mixed-bf16", tp=8, sp=sp), Run(),
                                                        style="megatron")} for sp in (False, True))
    assert (sp["sp_allgather_forward"].bytes_per_step + sp["sp_reducescatter_forward"].bytes_per_step
            == pytest.approx(tp["tp_allreduce_forward"].bytes_per_step))


def test_dtensor_tp_all_reduces_each_column_parallel_input_gradient():
    """torch DTensor ColwiseParallel: q, k, v and (SwiGLU) gate, up each all-reduce their input gradient."""
    spec = get_model("llama-2-7b")
    cs = comm.step_collectives(spec, Shard(1, 256, tp=2), Run(), style="torch", layers_per_stage=1)
    backward = next(c for c in cs if c.name == "tp_allreduce_backward")
    assert backward.count == 5


def test_pipeline_point_to_point():
    """1F1B with m micro-batches and v chunks: each rank sends m·v activations and m·v gradients of b·s·h."""
    spec = get_model("gpt3-175b")
    cs = comm.step_collectives(spec, Shard(1, 2048, "mixed-fp16", tp=8, sp=True), Run().with_(pp=8, interleave=3),
                               style="megatron", micro_batches=64)
    p2p = next(c for c in cs if c.name == "pp_send_recv")
    assert p2p.count == 2 * 64 * 3
    assert p2p.payload_bytes == 2048 * 12288 * 2 / 8          # Megatron sends the sequence-parallel shard
    assert p2p.link == "inter"                                 # 64 GPUs, TP 8 fills a node: stages cross nodes


def test_group_placement_on_nodes():
    assert comm.group_links(tp=8, cp=1, pp=16, dp=64, gpus_per_node=8) == {
        "tp": "intra", "cp": "intra", "dp": "inter", "pp": "inter"}
    assert comm.group_links(tp=1, cp=1, pp=1, dp=8, gpus_per_node=8)["dp"] == "intra"


def test_errors():
    with pytest.raises(TrainledgerError, match="kind"):
        comm.ring_bytes_sent("broadcast", 1, 2)
    with pytest.raises(TrainledgerError, match="style"):
        comm.step_collectives(get_model("gpt2"), Shard(1, 8), Run(), style="deepspeed")
