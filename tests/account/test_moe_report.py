"""The Megatron-Core MoE report (NVIDIA, arXiv:2603.07685): its FLOP convention against our count, its all-to-all
and HybridEP latencies (Table 7) against our two dispatchers, the cost of hiding the all-to-alls (Sec. 4.2.3), and
its throughput rows (Table 11 with Table 20) as validation rows (account/validation/moe_report.py)."""

import math

import pytest

from trainledger.account.time import expert_parallel as xp
from trainledger.account.time.shard import Shard
from runs import step as step_time
from trainledger.account.validation import moe_report as R
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu
from trainledger.specs.run import Run

DSV3, H100, GB200 = get_model("deepseek-v3"), get_gpu("h100-sxm"), get_gpu("gb200")


@pytest.mark.parametrize("row", R.REPORT_ROWS, ids=lambda r: f"{r[0]}-{r[1]}-{r[4]}-{r[3]}")
def test_table11_flops_per_token_is_our_causal_count_plus_mtp(row):
    """Table 11 prints TFLOPS/GPU and tokens/s/GPU for every row: their ratio, the FLOPs of one token, is our causal
    count (+ DeepSeek-V3's MTP module) to 1.2 % (the worst: Qwen3-235B H100 BF16; the MXFP8 rows 0.3 %), at 4K
    and at 128K tokens."""
    f = R.row_fields(row)
    published = f["published_tflops_per_gpu"] * 1e12 / f["published_tokens_per_s_per_gpu"]
    assert R.report_flops_per_token(f["model"], f["seq_len"]) == pytest.approx(published, rel=0.013)


def test_deepseek_v3_flops_need_the_mtp_module():
    """Without its multi-token-prediction module our count is 4 % under the report's for DeepSeek-V3: the runs
    train the MTP module (Table 17's layout ends in "tmL") and count its FLOPs."""
    from trainledger.account.counting.flops import train_flops_per_token
    published = 1048e12 / 4020
    assert published / train_flops_per_token(DSV3, 4096, "causal") == pytest.approx(1.041, abs=0.003)
    assert R.report_flops_per_token("deepseek-v3", 4096) == pytest.approx(published, rel=0.003)


def test_expert_group_hit_by_hand():
    """h(g) = 1 − C(E − g, k)/C(E, k): 4 experts, top-2, one expert: 1 − 3/6; all experts: 1; DeepSeek-V3's 256
    experts, top-8, the 32 of one GPU at EP 8: 1 − C(224, 8)/C(256, 8)."""
    assert xp.expert_group_hit(4, 2, 1) == pytest.approx(0.5)
    assert xp.expert_group_hit(256, 8, 256) == 1.0
    assert xp.expert_group_hit(256, 8, 32) == pytest.approx(1 - math.comb(224, 8) / math.comb(256, 8))


def test_group_limited_routing_by_hand():
    """Group-limited routing: 4 experts in 2 groups of 2, top-1 within 1 group: one expert is hit 1/2 · 1/2 of the
    time, a whole group 1/2. DeepSeek-V3 (8 groups of 32, a token within 4): with a group per node (EP 64 on 8
    nodes) a token reaches 8·h(32) = 3.63 nodes on average, never more than 4 (arXiv:2412.19437 Sec. 3.2.2: "each
    token will be sent to at most 4 nodes"), where uniform routing would reach 5.29."""
    assert xp.expert_group_hit(4, 1, 1, 2, 1) == pytest.approx(0.25)
    assert xp.expert_group_hit(4, 1, 2, 2, 1) == pytest.approx(0.5)
    assert (DSV3.expert_groups, DSV3.expert_groups_per_token) == (8, 4)
    assert 8 * xp.expert_group_hit(256, 8, 32, 8, 4) == pytest.approx(3.63, abs=0.01)
    assert 8 * xp.expert_group_hit(256, 8, 32) == pytest.approx(5.29, abs=0.01)


def test_token_dispatch_sends_one_copy_per_gpu_and_per_node():
    """Inside one node (EP 8) a token goes once to each of the 7 other GPUs that hold one of its experts; over two
    nodes (EP 16, 8 per node) once over the NIC to the other node if any of its 128 experts is chosen, and the
    NVLink carries the own node's copies plus the forwarding on arrival."""
    unit, groups = 4096 * DSV3.d_model * 2, (8, 4)           # DeepSeek-V3 routes within 4 of 8 groups
    one_node = xp.token_dispatch_seconds(DSV3, H100, 4096, 2, 8, 8)
    assert one_node["inter_bytes"] == 0
    assert one_node["intra_bytes"] == pytest.approx(unit * 7 * xp.expert_group_hit(256, 8, 32, *groups))
    two = xp.token_dispatch_seconds(DSV3, H100, 4096, 2, 16, 8)
    gpu_hit, node_hit = xp.expert_group_hit(256, 8, 16, *groups), xp.expert_group_hit(256, 8, 128, *groups)
    assert two["inter_bytes"] == pytest.approx(unit * node_hit)
    assert two["intra_bytes"] == pytest.approx(unit * (7 * gpu_hit + 8 * gpu_hit - node_hit))
    # fewer bytes than the all-to-all dispatcher's k copies per token
    assert two["sent_bytes"] < xp.all_to_all_seconds(H100, xp.dispatch_bytes(DSV3, 4096, 2), 16, 8)["sent_bytes"]


@pytest.mark.parametrize("key", sorted(R.TABLE7_US), ids=lambda k: f"{k[0]}-{k[1]}")
def test_table7_latencies_of_both_dispatchers(key):
    """Table 7 (hidden 7168, sequence 4096, 256 experts; EP 8-64 on GB200 NVL72 and on 8-GPU H100 nodes): our
    all-to-all dispatcher within 26 % of the all-to-all column and our token-based dispatcher, with DeepSeek-V3's
    group-limited routing, within 27 % of the HybridEP column (all cells too fast, as the all-to-all column; the
    worst GB200 EP 8 dispatch and H100 EP 16 combine), in every cell; token-based is the faster in every cell, as
    published."""
    system, phase = key
    for ep in R.TABLE7_US[key]:
        t = R.table7_all_to_all(system, ep, phase)
        assert abs(t["error"]) <= 0.27, (ep, t["error"])
        assert -0.28 <= t["hybridep_error"] <= 0, (ep, t["hybridep_error"])
        assert t["predicted_hybridep_seconds"] < t["predicted_seconds"]


def test_table7_the_jump_from_nvlink_to_the_nic():
    """On H100 the all-to-all goes from one node (EP 8) to two (EP 16): 4.56 × slower published, 4.4 × ours."""
    published = 5774 / 1265
    ours = R.table7_all_to_all("H100", 16)["predicted_seconds"] / R.table7_all_to_all("H100", 8)["predicted_seconds"]
    assert ours == pytest.approx(published, rel=0.05)


def _dsv3_h100(**kw):
    """DeepSeek-V3 on 1,024 H100 as Table 20 lays it out (TP2 PP4 EP64, MBS 1, GBS 8192, FP8)."""
    return step_time(DSV3, H100, batch_size=1, seq_len=4096, global_batch_size=8192, num_gpus=1024,
                     precision="fp8-cs", tp=2, sp=True, pp=4, zero=1, ep=64, framework="megatron",
                     attention="causal", with_memory=False, **kw)


def _share(r, part="ep_comm"):
    return r["breakdown"]["ep_comm"] / r["step_seconds"] if part == "ep_comm" else part / r["step_seconds"]


def test_all_to_all_share_of_the_step_deepseek_v3_h100():
    """Sec. 9.2.2: on H100 "EP64 spans 8 nodes, and cross-node all-to-all latency would consume nearly 50% of step
    time with the standard all-to-all dispatcher" (ours 53 %); "under 5%" exposed with the 1F1B overlap (93 % of it
    hidden; ours 4.7 %). With DeepEP ours is 43 % (regression value; the report's "30-40%" is the strict xfail below)."""
    assert 0.40 <= _share(_dsv3_h100()) <= 0.55
    assert _share(_dsv3_h100(ep_dispatcher="deepep")) == pytest.approx(0.431, abs=0.02)
    hidden = _dsv3_h100(ep_dispatcher="deepep", ep_overlap=R.A2A_OVERLAP_RATIO)
    exposed = hidden["breakdown"]["ep_comm"] - hidden["expert_parallel"]["overlap_seconds"] * hidden["micro_batches"]
    assert _share(hidden, exposed) < 0.05


@pytest.mark.xfail(strict=True, reason="since MLA's own GEMMs are in the step (2026-11-27) the computation beside the "
                   "all-to-alls is shorter: DeepEP's all-to-alls are 43 % of our step; the row is predicted 27 % too "
                   "fast, so the published step has time our kernels do not explain (docs/time.md)")
def test_deepep_share_of_the_step_deepseek_v3_h100_as_published():
    """Sec. 4.2.3: "30-40%" of the step in all-to-alls after DeepEP (DeepSeek-V3, 1,024 H100, EP 64)."""
    assert 0.30 <= _share(_dsv3_h100(ep_dispatcher="deepep")) <= 0.40


def test_hidden_all_to_all_slows_the_computation_beside_it():
    """Sec. 4.2.3: "DeepEP uses 20 SMs per GPU and introduces roughly 20% GEMM-efficiency overhead": with DeepEP
    the computation beside a hidden all-to-all runs 132/112 = 1.18 × slower on H100, so hiding H seconds costs
    H·(1 − 112/132); the exposed part is (1 − overlap) of the all-to-alls and syncs."""
    assert xp.overlap_factor(H100, "inter", "deepep") == pytest.approx(132 / 112)
    assert xp.overlap_factor(H100, "inter", "deepep") == pytest.approx(1.2, abs=0.03)
    run, shard = Run().with_(ep=64, recompute="none", dispatcher="deepep"), Shard(1, 4096, "amp-bf16")  # 2-byte inputs
    plain, hidden = (xp.expert_parallel_per_micro_batch(DSV3, H100, shard, run.with_(overlap=overlap), moe_layers=15,
                                                        compute_seconds=1.0) for overlap in (0.0, 0.93))
    calls = plain["ep_comm"] - plain["sync_seconds"]
    assert hidden["overlap_seconds"] == pytest.approx(0.93 * calls * (1 - 112 / 132))
    assert hidden["ep_comm"] == pytest.approx(0.07 * plain["ep_comm"] + hidden["overlap_seconds"])


def test_ep_dispatcher_is_checked():
    with pytest.raises(TrainledgerError, match="--ep-dispatcher must be one of alltoall, deepep, hybridep"):
        _dsv3_h100(ep_dispatcher="nccl")


def test_report_rows_not_modelled_say_why():
    """Every row is modelled now: Qwen3-235B on H100 (DP 16) and on GB300 at sequence 131072 (DP 2) fold EP 32
    over TP × CP × DP with ETP 1 (parallel folding); the GB300 rows are predicted apart (REPORT_GB300), not in
    REPORT_TAKEN."""
    assert R.REPORT_NOT_MODELLED == []
    folded = [row for row in R.REPORT_ROWS if row[0] == "qwen3-235b-a22b" and row[1] in ("H100", "GB300")
              and row[3] == 131072 or (row[0] == "qwen3-235b-a22b" and row[1] == "H100")]
    assert len(folded) == 2 and all(R.not_modelled_reason(row) is None for row in folded)
    assert [row[1] for row in R.REPORT_GB300] == ["GB300", "GB300", "GB300"]
    assert all(row[1] != "GB300" for row in R.REPORT_TAKEN)


def test_report_rows_regression_bound():
    """Table 11's six rows we can model (GB200, H100), with their dispatcher and 1F1B overlap. With MLA's own GEMMs
    and the MTP module in the step (before: DeepSeek-V3 -18.3 %, -17.7 %, -3.1 %) every row is predicted too fast.
    DeepSeek-V3's 61 layers over PP 4 × VPP 4 are timed with VPP 4 and uneven chunks since 2026-12-01 (before: one
    chunk per stage, +15.2, +23.8, +26.4 %): the bubble shrinks by 4×, the point-to-point sends grow by 4× (and run
    beside the computation, as Megatron overlaps them with VPP: GB200 MXFP8 +13.2 → +17.7 %, Qwen3 GB200 BF16 +41.7 →
    +58.3 %).
    DeepSeek-V3 on GB200 does not fit as we model its memory (the runs offload the optimizer states and keep FP8
    primary weights); Qwen3-235B on H100 folds EP 32 over TP 2 × DP 16 with ETP 1 (DeepEP, 93 % hidden)."""
    rows = {(r["model"], r["system"], r["dtype"]): r for r in R.cases()}
    expected = {("deepseek-v3", "GB200", "MXFP8"): 0.177, ("deepseek-v3", "GB200", "BF16"): 0.298,
                ("deepseek-v3", "H100", "FP8-BLK"): 0.311, ("qwen3-235b-a22b", "GB200", "MXFP8"): 0.353,
                ("qwen3-235b-a22b", "GB200", "BF16"): 0.583, ("qwen3-235b-a22b", "H100", "BF16"): 0.258}
    assert set(rows) == set(expected)
    for key, error in expected.items():
        assert rows[key]["error"] == pytest.approx(error, abs=0.03), key
    assert rows[("deepseek-v3", "GB200", "MXFP8")]["interleave_modelled"] == 4       # 61 layers over PP4 x VPP4,
    assert rows[("deepseek-v3", "GB200", "MXFP8")]["uneven_chunks"]                  # in 16 chunks of 3-4
    assert rows[("qwen3-235b-a22b", "GB200", "MXFP8")]["interleave_modelled"] == 6
    assert rows[("qwen3-235b-a22b", "H100", "BF16")]["etp"] == 1 and rows[("deepseek-v3", "H100", "FP8-BLK")]["etp"] == 2
    assert sum(abs(r["error"]) <= 0.20 for r in rows.values()) == 1


def test_all_moe_rows_in_one_table():
    """moe.all_cases(): the 21 Megatron Bridge rows (2 unlocked by MoE Parallel Folding, 3 DGX-GB200 DeepSeek-V3
    rows by uneven pipeline chunks), its 2 DeepSeek-V3 rows with MTP, the SKILL.md run, NeMo Automodel's 4 PyTorch
    rows and the report's 6 rows, each with its error; 7 of 34 within 20 % today (4 of the 30 Megatron rows, 3 of
    the 4 Automodel ones; the issue asks 70 %; before uneven chunks 5 of 31, 8 before the interleaved schedule's
    sends ran beside the computation as Megatron overlaps them)."""
    from trainledger.account.validation import moe
    rows = moe.all_cases()
    sets = [r["set"] for r in rows]
    assert (sets.count("TAKEN"), sets.count("ASIDE"), sets.count("FP8_TAKEN"), sets.count("FP8_ASIDE"),
            sets.count("DEEPSEEK_MTP"), sets.count("SKILL_RUN"), sets.count("AUTOMODEL"),
            sets.count("REPORT")) == (5, 3, 6, 7, 2, 1, 4, 6)
    assert all(r["error"] == pytest.approx(r["predicted_tokens_per_s_per_gpu"] / r["published_tokens_per_s_per_gpu"]
                                           - 1) for r in rows)
    assert sum(abs(r["error"]) <= 0.20 for r in rows) == 7
    assert sum(abs(r["error"]) <= 0.20 for r in rows if r["set"] == "AUTOMODEL") == 3
