"""FSDP2 as it runs (account/memory/fsdp.py, account/time/fsdp_comm.py, overlap.fsdp_step) and k-NIC rings (comm.group_seconds): each piece by hand."""

import pytest

from trainledger.account.memory import fsdp
from trainledger.account.time import comm, fsdp_comm
from runs import memory as memory_per_gpu
from trainledger.account.memory.per_gpu import params_per_gpu
from runs import step as step_time
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu
from trainledger.specs.performance import Link
from trainledger.specs.recipes import get_recipe

AMP = get_recipe("amp-bf16")
LLAMA3_8B = get_model("llama-3-8b")
# Llama 3 8B: one block = q, o (4096²) + k, v (4096·1024) + gate, up, down (4096·14336) + 2 norms (4096)
BLOCK = 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
ROOT = 2 * 128256 * 4096 + 4096            # token embedding + untied head + final norm
UNITS = fsdp.units(LLAMA3_8B, params_per_gpu(LLAMA3_8B))


def test_units_of_llama3_8b():
    assert UNITS == {"block": pytest.approx(BLOCK), "root": pytest.approx(ROOT), "blocks": 32}


def test_one_pass_by_hand():
    """3 blocks; forward 10 s, backward 20 s each; a block gathers in 4 s, reduce-scatters in 8 s; the root in 6 / 5.
    Forward: root + first block exposed (10), the next two hide behind 10 s of compute. Backward: block 3 hides the
    gather of block 2, block 2 the gather of block 1 and the reduce-scatter of block 3, block 1 that of block 2;
    then block 1's and the root's reduce-scatters (8 + 5) are exposed."""
    times = {"ag": 4.0, "ag_root": 6.0, "rs": 8.0, "rs_root": 5.0}
    kw = dict(gather_forward=True, gather_backward=True, reduce=True)
    assert fsdp_comm.pass_exposed(3, 10.0, 20.0, times, **kw) == pytest.approx((10.0, 13.0))
    # backward blocks of 5 s: block 2 carries 4 + 8 = 12 s of comm (7 exposed), block 1 carries 8 (3 exposed)
    assert fsdp_comm.pass_exposed(3, 10.0, 5.0, times, **kw) == pytest.approx((10.0, 7.0 + 3.0 + 13.0))
    # forward blocks of 1 s: two gathers of 4 s behind 1 s each: 3 s each exposed
    assert fsdp_comm.pass_exposed(3, 1.0, 20.0, times, **kw)[0] == pytest.approx(10.0 + 2 * 3.0)
    # nothing gathered in backward (reshard_after_forward=False), no reduction: nothing in backward
    assert fsdp_comm.pass_exposed(3, 10.0, 5.0, times, **dict(kw, gather_backward=False, reduce=False))[1] == 0.0


def test_accumulation_sharded_vs_unsharded():
    """Sharded accumulation pays every micro-batch; unsharded gathers in the first forward, reduces after the last."""
    times = {"ag": 4.0, "ag_root": 6.0, "rs": 8.0, "rs_root": 5.0}
    one = lambda gf, gb, red: sum(fsdp_comm.pass_exposed(3, 1.0, 5.0, times, gather_forward=gf,  # noqa: E731
                                                    gather_backward=gb, reduce=red))
    exposed = lambda s: fsdp_comm.step_exposed(s, 4, 3, 1.0, 5.0, times, lambda c, h: max(0.0, c - h))  # noqa: E731
    sharded = fsdp.FsdpSettings("bf16", "fp32", True, "sharded")
    unsharded = fsdp.FsdpSettings("bf16", "fp32", False, "unsharded")
    assert exposed(sharded) == pytest.approx(4 * one(True, True, True))
    assert exposed(unsharded) == pytest.approx(one(True, False, False) + one(False, False, True))
    assert exposed(unsharded) < exposed(sharded)


def test_settings_defaults_and_errors():
    policy = fsdp.fsdp_settings(AMP, param_dtype="auto", dp=8)
    assert (policy.param_dtype, policy.reduce_dtype, policy.mixed_precision) == ("bf16", "fp32", True)
    assert (policy.reshard_after_forward, policy.accumulate) == (True, "sharded")
    plain = fsdp.fsdp_settings(AMP, dp=8)            # no policy: autocast over fp32 gathers (our trainer)
    assert (plain.param_dtype, plain.reduce_dtype, plain.mixed_precision) == ("fp32", "fp32", False)
    piped = fsdp.fsdp_settings(AMP, param_dtype="auto", pp=4, dp=8)   # torch.distributed.pipelining
    assert (piped.reshard_after_forward, piped.accumulate) == (False, "unsharded")
    assert fsdp.compute_precision("amp-bf16", policy, 3) == "mixed-bf16"
    assert fsdp.compute_precision("amp-bf16", plain, 3) == "amp-bf16"
    assert fsdp.compute_precision("amp-bf16", policy, 1) == "amp-bf16"
    for kwargs, flag in ((dict(replicate=3, dp=8), "--dp-replicate"), (dict(param_dtype="int8"), "--fsdp-param-dtype"),
                         (dict(accumulate="never"), "--fsdp-accumulate"), (dict(replicate=0), "--dp-replicate")):
        with pytest.raises(TrainledgerError, match=flag):
            fsdp.fsdp_settings(AMP, **kwargs)


def test_bf16_policy_gathers_two_bytes_per_parameter():
    """The issue's 29.9 GiB of fp32 gathers for Llama 3 8B on 64 ranks: with a bf16 policy each forward gathers the
    8.03B parameters in 2 bytes (16.1 GB), the backward all but the last block and the root again, and the gradients
    are reduce-scattered in fp32 (32.1 GB)."""
    n = BLOCK * 32 + ROOT
    c = {x.name: x for x in fsdp_comm.collectives(UNITS, fsdp.fsdp_settings(AMP, param_dtype="auto", dp=64), tp=1,
                                             cp=1, dp=64, micro_batches=1, gpus_per_node=8)}
    assert c["fsdp_allgather_root"].payload_bytes + c["fsdp_allgather_forward"].payload_bytes == pytest.approx(2 * n)
    assert c["fsdp_allgather_backward"].payload_bytes == pytest.approx(2 * 31 * BLOCK)
    assert c["fsdp_reducescatter"].payload_bytes == pytest.approx(4 * n)
    assert {x.ranks_per_node for x in c.values()} == {8} and {x.link for x in c.values()} == {"inter"}


def test_buffers_copies_and_cpu_by_hand():
    s = fsdp.fsdp_settings(AMP, param_dtype="auto", dp=64)
    b = fsdp.buffers(UNITS, s)
    assert b["params_bytes"] == pytest.approx(2 * ROOT + 2 * 2 * BLOCK)         # the root and two blocks in bf16
    assert b["grads_bytes"] == pytest.approx(2 * ROOT + (2 + 4) * BLOCK)        # root grads, a block's + its fp32 copy
    # one micro-batch: copy-out of every gather (read + write 2 B), copy-in of every reduce (read 2, write 4)
    gathered = 32 * BLOCK + ROOT + 31 * BLOCK
    assert fsdp_comm.copy_bytes(s, 1, BLOCK, ROOT, 32) == pytest.approx(4 * gathered + 6 * (32 * BLOCK + ROOT))
    cpu = fsdp_comm.cpu_seconds(s, 32)
    assert cpu["forward"] == pytest.approx(33 * 0.37e-3) and cpu["backward"] == pytest.approx((31 + 33) * 0.37e-3)


def test_memory_with_fsdp_policy_fits_what_torchtitan_ran():
    """torchtitan ran Llama 3 8B, batch 1 × 8192, per-op selective AC, FSDP2 over 64 A100-80GB; without the FSDP2
    model (fp32 autocast activations, no buffers) the same layout needed 81.6 GiB by this tool's count."""
    s = fsdp.fsdp_settings(AMP, param_dtype="auto", dp=64)
    m = memory_per_gpu(LLAMA3_8B, batch_size=1, seq_len=8192, precision="amp-bf16", zero=3, dp=64,
                       recompute="selective-op", memory_per_gpu_bytes=get_gpu("a100-80gb").memory_bytes, fsdp=s)
    assert m["fits"] and m["activations_precision"] == "mixed-bf16"
    assert m["params_bytes"] == pytest.approx(4 * (32 * BLOCK + ROOT) / 64 + fsdp.buffers(UNITS, s)["params_bytes"])


def test_hsdp_shards_inside_a_node_and_all_reduces_across():
    s = fsdp.fsdp_settings(AMP, param_dtype="auto", replicate=8, dp=64)
    c = {x.name: x for x in fsdp_comm.collectives(UNITS, s, tp=1, cp=1, dp=64, micro_batches=1, gpus_per_node=8)}
    assert c["fsdp_allgather_forward"].group_size == 8 and c["fsdp_allgather_forward"].link == "intra"
    ar = c["hsdp_allreduce"]
    assert (ar.group_size, ar.link, ar.ranks_per_node) == (8, "inter", 1)
    assert ar.payload_bytes == pytest.approx(4 * (32 * BLOCK + ROOT) / 8)
    m = memory_per_gpu(LLAMA3_8B, batch_size=1, seq_len=8192, precision="amp-bf16", zero=3, dp=64, fsdp=s)
    assert m["optimizer_bytes"] == pytest.approx(8 * (32 * BLOCK + ROOT) / 8)     # states over the 8 of a replica
    r = step_time(LLAMA3_8B, get_gpu("a100-80gb"), batch_size=1, seq_len=8192, num_gpus=64, zero=3, fsdp=s,
                  recompute="selective-op")
    assert {x["name"] for x in r["collectives"]} >= {"fsdp_allgather_forward", "hsdp_allreduce"}
    with pytest.raises(TrainledgerError, match="--dp-replicate"):
        step_time(LLAMA3_8B, get_gpu("a100-80gb"), batch_size=1, seq_len=8192, num_gpus=64, zero=1, fsdp=s)


def test_group_members_per_node():
    assert comm.group_ranks_per_node(8, 1, 16, 8)["dp"] == 1          # TP 8 fills the node
    assert comm.group_ranks_per_node(1, 1, 64, 8)["dp"] == 8
    assert comm.group_ranks_per_node(2, 1, 32, 8)["dp"] == 4
    hsdp = comm.group_ranks_per_node(1, 1, 64, 8, replicate=8)
    assert (hsdp["dp_shard"], hsdp["dp_replicate"]) == (8, 1)


def test_a_group_spanning_nodes_drives_one_nic_per_member():
    """16 ranks, 8 per node: NCCL's rings leave each node through 8 NICs (8 × 10 GB/s), capped by the 100 GB/s inside;
    latency: call + 14 NVLink steps + 1 network step (NCCL's ring model, src/graph/tuning.cc)."""
    intra = Link("in", 100e9, 1.0, 1e-6, 5e-6)
    inter = Link("net", 10e9, 1.0, 10e-6, 5e-6)
    c = comm.Collective("ag", "dp_comm", "all_gather", 1e9, 16, "inter", 1, ranks_per_node=8)
    sent = 15 / 16 * 1e9
    assert comm.group_seconds(c, intra, inter) == pytest.approx(5e-6 + 14 * 1e-6 + 10e-6 + sent / 80e9)
    fast = Link("fast", 1000e9, 1.0, 10e-6, 5e-6)           # then NVLink bounds it
    assert comm.group_seconds(c, intra, fast) == pytest.approx(5e-6 + 14 * 1e-6 + 10e-6 + sent / 100e9)
    one = comm.Collective("ag", "dp_comm", "all_gather", 1e9, 16, "inter", 2, ranks_per_node=1)
    assert comm.group_seconds(one, intra, inter) == pytest.approx(2 * comm.collective_seconds("all_gather", 1e9, 16, inter))


def test_nccl_dgx_a100_allreduce_busbw_from_eight_nics():
    """NVIDIA measures 192 GB/s all-reduce bus bandwidth across DGX-A100 nodes with 8 × HDR (NVIDIA/nccl#812): an
    8 GB all-reduce over 2 nodes of 8 runs at 8 × 24 GB/s here (NVLink at 8 GB: 231.6 GB/s, not the bound)."""
    a100 = get_gpu("a100-80gb")
    c = comm.Collective("ar", "dp_comm", "all_reduce", 8 * 2**30, 16, "inter", 1, ranks_per_node=8)
    seconds = comm.group_seconds(c, a100.intra_node_link, a100.inter_node_link)
    busbw = 2 * 15 / 16 * 8 * 2**30 / seconds
    assert busbw == pytest.approx(192e9, rel=0.01)
