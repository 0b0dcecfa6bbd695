"""Expert parallelism: placement of the experts, the all-to-all by hand, step and layout with --ep, the published
MoE rows (Megatron Bridge performance summary) as an honest regression bound."""

import pytest

from trainledger.account.counting.experts import check_ep, routed_expert_params
from trainledger.account.counting.placement import params_per_gpu
from runs import memory as memory_per_gpu
from runs import layouts
from trainledger.account.planning.layout import expert_parallel_sizes
from trainledger.account.time import expert_parallel as xp
from runs import step as step_time
from trainledger.account.validation import moe
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu

OSS, H100 = get_model("gpt-oss-120b"), get_gpu("h100-sxm")
TINY_MOE = get_model("mixtral-8x7b").with_(n_layers=2, d_model=256, n_heads=4, n_kv_heads=4, d_ff=512, vocab_size=1000)


def test_ep_divides_the_experts_and_dp():
    assert check_ep(OSS, 8, 16) == 8
    for ep, dp, words in ((3, 6, "must divide the 8 experts"), (4, 6, r"must divide tp·cp·dp = 1·1·6"), (0, 1, "positive")):
        with pytest.raises(TrainledgerError, match=words):
            check_ep(get_model("mixtral-8x7b"), ep, dp)
    with pytest.raises(TrainledgerError, match="no experts"):
        check_ep(get_model("gpt2"), 2, 2)


def test_experts_are_split_over_ep():
    """gpt-oss-120b: 36 layers × 128 experts × (3·2880² + 2·2880 + 2880); ep 8 keeps 1/8 of them (down biases stay)."""
    experts = routed_expert_params(OSS)
    assert experts == 36 * 128 * (3 * 2880 * 2880 + 3 * 2880)
    one, eight = params_per_gpu(OSS, 1, 1, 1), params_per_gpu(OSS, 1, 1, 8)
    down_biases = 36 * 128 * 2880
    assert one["n_params_per_gpu"] - eight["n_params_per_gpu"] == pytest.approx((experts - down_biases) * 7 / 8)
    assert eight["expert_params_per_gpu"] == pytest.approx((experts - down_biases) / 8)


def test_zero_sharded_states_do_not_change_with_ep():
    """An expert's optimizer state is sharded over the dp/ep ranks holding it: all/dp per GPU, as without ep;
    the unsharded bf16 weights and gradients keep only 1/ep of the experts."""
    kw = dict(batch_size=1, seq_len=4096, precision="mixed-bf16", zero=1, dp=16, pp=4)
    one, eight = memory_per_gpu(OSS, **kw), memory_per_gpu(OSS, **kw, ep=8)
    assert eight["optimizer_bytes"] == pytest.approx(one["optimizer_bytes"])
    assert eight["params_bytes"] < one["params_bytes"] / 5
    assert eight["activations_bytes"] == one["activations_bytes"]


def test_all_to_all_by_hand():
    """S = 4096 tokens × top-4 × 2880 × 2 bytes; ep 8 inside a DGX node: 7/8 of S over NVLink 4 at its achieved rate;
    ep 16 over two nodes: 8/16 of S through each GPU's NIC (InfiniBand NDR) sets the time."""
    s = xp.dispatch_bytes(OSS, 4096, 2)
    assert s == 4096 * 4 * 2880 * 2
    nvlink, ib = H100.intra_node_link, H100.inter_node_link
    inside = xp.all_to_all_seconds(H100, s, 8, 8)
    assert inside["sent_bytes"] == pytest.approx(s * 7 / 8) and inside["inter_bytes"] == 0
    assert inside["seconds"] == pytest.approx(nvlink.call_latency_seconds + nvlink.step_latency_seconds
                                              + s * 7 / 8 / nvlink.effective_bytes_per_s)
    across = xp.all_to_all_seconds(H100, s, 16, 8)
    assert across["inter_bytes"] == pytest.approx(s / 2)
    assert across["seconds"] == pytest.approx(max(nvlink.call_latency_seconds + nvlink.step_latency_seconds,
                                                  ib.call_latency_seconds + ib.step_latency_seconds)
                                              + s / 2 / ib.effective_bytes_per_s)
    assert xp.ranks_per_node(8, 1, 1, 8) == 8 and xp.ranks_per_node(8, 2, 1, 8) == 4 and xp.ranks_per_node(4, 16, 1, 8) == 1


def test_step_with_ep():
    """ep adds 4 all-to-alls per MoE layer and micro-batch (6 with full recomputation); a skewed router stretches the
    experts' GEMMs; a capacity factor caps it and drops tokens; overlap hides the all-to-all (leaving the computation it slows);
    dense models refuse --ep."""
    kw = dict(batch_size=1, seq_len=4096, global_batch_size=64, num_gpus=64, precision="mixed-bf16", pp=4, zero=1,
              framework="megatron", with_memory=False)
    base, ep = step_time(OSS, H100, **kw), step_time(OSS, H100, **kw, ep=8)
    assert base["breakdown"]["ep_comm"] == 0 and ep["breakdown"]["ep_comm"] > 0
    m = ep["micro_batches"]
    assert ep["expert_parallel"]["per_step_calls"] == m * 4 * 36 / 4          # 9 MoE layers per stage
    assert ep["breakdown"]["compute"] < base["breakdown"]["compute"]        # bigger grouped GEMMs per expert
    full = step_time(OSS, H100, **kw, ep=8, recompute="full")
    assert full["expert_parallel"]["per_step_calls"] == m * 6 * 9
    skew = step_time(OSS, H100, **kw, ep=8, expert_imbalance=1.5)
    capped = step_time(OSS, H100, **kw, ep=8, expert_imbalance=1.5, capacity_factor=1.25)
    assert ep["step_seconds"] < capped["step_seconds"] < skew["step_seconds"]
    assert capped["expert_parallel"]["dropped_fraction"] == pytest.approx(1 - 1.25 / 1.5)
    hidden = step_time(OSS, H100, **kw, ep=8, ep_overlap=1.0)
    # hidden, only the computation it slows remains: (1 − 1/1.189) of the all-to-alls (interference.py's average)
    calls = ep["breakdown"]["ep_comm"] - ep["expert_parallel"]["sync_seconds"] * m
    assert hidden["breakdown"]["ep_comm"] == pytest.approx(calls * (1 - 1 / 1.189))
    assert hidden["breakdown"]["ep_comm"] < 0.2 * ep["breakdown"]["ep_comm"]
    assert ep["model_flops_per_step"] == base["model_flops_per_step"]       # ep moves work, it does not change it
    with pytest.raises(TrainledgerError, match="--ep"):
        step_time(get_model("llama-3-8b"), H100, **kw, ep=2)
    with pytest.raises(TrainledgerError, match="--expert-imbalance"):
        step_time(OSS, H100, **kw, ep=8, expert_imbalance=0.9)


def test_layout_searches_ep():
    assert expert_parallel_sizes(TINY_MOE, 4) == [1, 2, 4] and expert_parallel_sizes(get_model("gpt2"), 8) == [1]
    found = layouts(TINY_MOE, H100, num_gpus=8, global_batch_size=8, seq_len=512, framework="megatron", top=50)
    eps = {layout["ep"] for layout in found["layouts"]}
    # Megatron folds EP over TP × CP × DP (tests/account/test_moe_folding.py): etp·ep divides tp·cp·dp
    assert eps - {1} and all(TINY_MOE.n_experts % e == 0 and (r["tp"] * r["cp"] * r["dp"]) % (r["etp"] * e) == 0
                             for r in found["layouts"] for e in [r["ep"]])


def test_megatron_bridge_moe_rows_regression_bound():
    """Megatron Bridge performance summary, 25.11 BF16 MoE rows on DGX-H100/B200/GB200 (account.validation.moe). The
    issue asks >= 70 % of rows within 20 %; none is (Qwen3-235B-A22B on GB200 was, +18.2 %, until the interleaved
    schedule's sends ran beside the computation as Megatron Bridge runs them with VP: +23.3 %). These bounds hold
    today's numbers so a change is seen; they are not a pass mark. DeepSeek-V3 on GB200 (PP 4 × VP 4 over 61 layers,
    uneven chunks since 2026-12-01): +31.7 %; +39.6 % with the recipe's last stage of 13 layers and the loss
    (account/time/mtp.py); +45.0 % with the sends overlapped."""
    rows = moe.cases(moe.TAKEN)
    errors = {(r["gpu"], r["model"]): r["error"] for r in rows}
    # 2026-11-27 with the at-scale mechanisms (issue 27) and Blackwell's sustained rates (issue 28): +40.6 %, +274 %
    # (before them: +46 %, +382 %); GB200 (added when its hardware entry landed): +113 %, +18.5 %; with issue 29's
    # dispatch synchronization and TE's per-expert GEMMs on 4 streams: +39.3 %, +274 %, +112 %, +18.2 %; with the
    # experts' gradients reduced over EDP = dp/ep (issue 29 round 3, account/time/folding.py: B200 EP 8, pp 1, EDP
    # 8 one rank per node, 26.7 GiB of bf16 expert gradients through each GPU's own NIC): +35.5 %, +119 %, +112 %,
    # +18.2 %
    assert errors[("h100-sxm", "gpt-oss-120b")] == pytest.approx(0.355, abs=0.04)
    assert errors[("b200", "gpt-oss-120b")] == pytest.approx(1.19, abs=0.12)
    assert errors[("gb200", "gpt-oss-120b")] == pytest.approx(1.13, abs=0.11)
    assert errors[("gb200", "qwen3-235b-a22b")] == pytest.approx(0.233, abs=0.015)
    assert errors[("gb200", "deepseek-v3")] == pytest.approx(0.450, abs=0.03)
    assert moe.report(rows)["share_within"] == 0.0


def test_the_b200_row_as_its_recipe_runs_it():
    """Why the 25.11 B200 row is 3.7× off and the H100 row 1.4×: the summary prints EP 8 for DGX-B200, but the
    gpt-oss recipe of that time sets expert_model_parallel_size=64 on B200 (and MBS 1 on H100, printed 4).
    Read as the recipe runs them, both rows sit with the 26.02 rows: +39 % (B200: 2 s of all-to-all over
    InfiniBand) and +70 % (H100, 32 micro-batches: a smaller bubble). Bounds hold the 2026-11-27 numbers (H100
    +63 % since the experts' gradients reduce over EDP, account/time/folding.py)."""
    errors = {r["gpu"]: r["error"] for r in moe.cases(moe.RECIPE_READING)}
    aside = {r["gpu"]: r["error"] for r in moe.cases(moe.ASIDE) if r["model"] == "gpt-oss-120b"}
    assert errors["b200"] == pytest.approx(0.39, abs=0.04)
    assert errors["h100-sxm"] == pytest.approx(0.63, abs=0.06)
    # the same layout as 26.02's H100 row (GBS 1280, 80 micro-batches against 32: the experts' gradient reduction
    # over EDP, exposed once per step under pipelining, weighs more on the smaller batch)
    assert errors["h100-sxm"] == pytest.approx(aside["h100-sxm"], abs=0.04)
    assert aside["b200"] == pytest.approx(0.43, abs=0.04)


def test_megatron_bridge_fp8_moe_rows_regression_bound():
    """The FP8 MoE rows of the same summary (25.11): Qwen3 30B-A3B on DGX-H100 (FP8-CS), Qwen3 30B-A3B and 235B-A22B
    on DGX-B200 and Qwen3 30B-A3B on DGX-GB200 (MXFP8). Every row is predicted too fast (1.5× to 3.3×): the same
    missing MoE mechanisms as the BF16 rows (docs/time.md), but DeepSeek-V3 on DGX-GB200 (MXFP8, PP 8 × VP 4 over
    61 layers, uneven chunks since 2026-12-01): −2.3 %, then +9.7 % with the recipe's last stage and +18.5 % with
    the interleaved schedule's sends overlapped (Qwen3 30B-A3B on H100, PP 2 × VP 24: +146 → +172 %). Bounds hold
    today's numbers; not a pass mark."""
    rows = moe.cases(moe.FP8_TAKEN)
    errors = {(r["gpu"], r["model"]): r["error"] for r in rows}
    assert errors[("h100-sxm", "qwen3-30b-a3b")] == pytest.approx(1.72, abs=0.15)
    assert errors[("b200", "qwen3-30b-a3b")] == pytest.approx(2.26, abs=0.25)
    assert errors[("b200", "qwen3-235b-a22b")] == pytest.approx(0.70, abs=0.07)
    assert errors[("gb200", "qwen3-30b-a3b")] == pytest.approx(0.49, abs=0.05)
    # unlocked by MoE Parallel Folding (EP 32 over TP 2 × DP 16, ETP 1; the recipe's all-to-all overlap at 0.93):
    # +60 %; with nothing hidden it is −12 % (the all-to-alls over InfiniBand are 57 % of that step)
    assert errors[("h100-sxm", "qwen3-235b-a22b")] == pytest.approx(0.645, abs=0.06)
    assert moe.predict(moe.FOLDED[0], a2a_overlap=0.0)["error"] == pytest.approx(-0.12, abs=0.03)
    assert errors[("gb200", "deepseek-v3")] == pytest.approx(0.185, abs=0.03)      # −2.3 % with ceil(61/8) last
    assert all(r["micro_batches"] == r["published_ga"] for r in rows)     # the rows transcribed as printed
    assert moe.report(rows)["share_within"] == pytest.approx(1 / 6)


def test_the_folded_rows_need_their_recipes_expert_tp():
    """DGX-H100 Qwen3 235B-A22B FP8-CS: EP 32 on a DP of 16, folded over TP 2 × DP 16 with the recipe's ETP 1
    (MoE Parallel Folding). With ETP = TP 2 Megatron refuses it (ETP·EP·PP = 512 does not divide 256 GPUs), and so
    does check_ep, naming the flags."""
    row = moe.FOLDED[0]
    assert row in moe.FP8_TAKEN and moe.FOLDED[1] in moe.FP8_ASIDE
    assert moe.predict(row)["etp"] == 1
    with pytest.raises(TrainledgerError, match=r"--ep 32 × --etp 2 must divide tp·cp·dp = 2·1·16 = 32"):
        check_ep(get_model("qwen3-235b-a22b"), 32, 16, tp=2, cp=1)


def test_deepseek_v3_gpu_hours_through_the_report_layout():
    """DeepSeek-V3 report (arXiv:2412.19437): 2.664M H800 GPU-hours for 14.8T tokens on 2,048 H800, PP16, EP64,
    ZeRO-1 DP, FP8; DualPipe hides the all-to-alls (Sec. 3.2.1). The layout is the report's, the all-to-alls are
    counted (not zero) before they are hidden, and they fit under the computation that hides them (the report's
    computation-to-communication ratio is about 1:1). The dispatch is token-based (Sec. 3.2.2: once per node over
    IB, then NVLink) and hiding it is not free: DualPipe's 20 SMs slow the computation beside it (Sec. 3.2.2;
    account/time/expert_parallel.py); its group-limited routing sends a token to at most 4 nodes. The pipeline is
    DualPipe's, whose bubble is (PP/2 − 1)(F&B + B − 3W) (Table 2), not 1F1B's (PP − 1)(F + B). Today −11.0 %, with
    MLA's own GEMMs (until 2026-11-27 timed as ordinary attention with 192-dim heads: +14.8 %) and the MTP module
    the run trained on the last stage (1 layer + MTP + loss at PP16, Megatron Bridge's layout; MLA alone: −9.8 %);
    the FP8 dispatch is not modelled. The issue's bound: within 20 %."""
    result = moe.deepseek_v3_gpu_hours()
    assert result["layout"] == {"gpu": "h800", "num_gpus": 2048, "precision": "fp8-cs", "pp": 16, "ep": 64, "dp": 128,
                                "tp": 1, "zero": 1}
    # hidden by DualPipe: what remains is the computation its 20 SMs slow, (1 − 112/132) of the all-to-alls
    assert result["breakdown"]["ep_comm"] == pytest.approx(result["all_to_all_seconds"] * (1 - 112 / 132), rel=0.02)
    assert 0 < result["all_to_all_seconds"] < result["compute_seconds"]
    # 120 micro-batches × 4 calls × MoE layers of the busiest stage: ceil(61 / 16) = 4 layers, 58/61 of them MoE
    assert result["all_to_all_calls"] == pytest.approx(15360 / 128 * 4 * 4 * 58 / 61)
    assert abs(result["error"]) <= 0.20
    assert result["error"] == pytest.approx(-0.110, abs=0.03)
    assert result["breakdown"]["pipeline_bubble"] < 0.6 * step_time(
        get_model("deepseek-v3"), get_gpu("h800"), batch_size=1, seq_len=4096, global_batch_size=15360,
        num_gpus=2048, precision="fp8-cs", pp=16, ep=64, zero=1, framework="megatron", attention="causal",
        with_memory=False, ep_overlap=1.0, ep_dispatcher="deepep")["breakdown"]["pipeline_bubble"]


def test_fsdp_gathers_only_this_ranks_experts():
    """FSDP2 (torchtitan, zero 3) with --ep 8: each rank's units hold 1/8 of the routed experts (the down-projection
    biases stay whole), as the memory model places them, so the forward all-gather of the 36 blocks carries
    (experts − down biases) · 7/8 fewer parameters than with ep 1, at FSDP's parameter bytes. Before, account.time's
    FSDP units held every expert under any ep."""
    kw = dict(batch_size=1, seq_len=4096, global_batch_size=64, num_gpus=64, precision="mixed-bf16", zero=3,
              framework="torchtitan", with_memory=False)

    def forward_gather(ep):
        r = step_time(OSS, H100, **kw, ep=ep)
        return next(c["payload_bytes"] for c in r["collectives"] if c["name"] == "fsdp_allgather_forward"), r

    (one, r1), (eight, r8) = forward_gather(1), forward_gather(8)
    from trainledger.account.memory.fsdp import DTYPE_BYTES
    param_bytes = DTYPE_BYTES[r8["fsdp"]["settings"]["param_dtype"]]
    moved = (routed_expert_params(OSS) - 36 * 128 * 2880) * 7 / 8
    assert one - eight == pytest.approx(moved * param_bytes, rel=1e-9)
    assert r8["breakdown"]["dp_comm"] < r1["breakdown"]["dp_comm"]
