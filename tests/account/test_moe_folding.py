"""MoE Parallel Folding (Megatron-Core; arXiv:2504.14960, arXiv:2603.07685 Sec. 3.3): --etp, EP up to tp·cp·dp, the
experts' placement and optimizer sharding over EDP, their GEMM shapes, the all-to-all group's placement, their
gradient reduction over EDP, and the one-line errors. Expected values derived by hand in each test."""

import subprocess
import sys

import pytest

from trainledger.account.counting.experts import check_ep, expert_data_parallel, routed_expert_params
from trainledger.account.counting.placement import params_per_gpu
from runs import memory as memory_per_gpu
from trainledger.account.time.kernels import layer_kernels
from trainledger.account.time.shard import Shard
from trainledger.specs.run import Kernels
from runs import step as step_time
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu

QWEN = get_model("qwen3-235b-a22b")            # 94 layers, 128 experts of d_ff 1536, d_model 4096, top-8
H100 = get_gpu("h100-sxm")
# one expert: gate, up, down of 4096 × 1536, no biases; 12 layers on the busiest of 8 stages (ceil(94 / 8))
EXPERT = 3 * 4096 * 1536
STAGE_EXPERTS = 12 * 128 * EXPERT


def test_the_rules_megatron_folds_by():
    """ETP·EP must divide TP·CP·DP (Megatron: "decoder world_size ... is not divisible by
    expert_tensor_model_pipeline_parallel size"); EP may then exceed DP."""
    assert check_ep(QWEN, 32, 16, tp=2, cp=1, etp=1) == 32            # 1 · 32 = 2 · 16: EDP 1
    assert check_ep(QWEN, 16, 8, tp=1, cp=2) == 16                    # folded over CP with ETP = TP = 1
    assert expert_data_parallel(2, 1, 16, 32, 1) == 1 and expert_data_parallel(2, 1, 16, 16, 1) == 2
    assert expert_data_parallel(1, 1, 64, 8) == 8                      # unfolded: dp/ep
    cases = [
        (dict(ep=32, dp=16, tp=2), r"--ep 32 × --etp 2 must divide tp·cp·dp = 2·1·16 = 32"),
        (dict(ep=64, dp=16, tp=2, etp=1), r"--ep 64 × --etp 1 must divide tp·cp·dp"),
        (dict(ep=8, dp=16, tp=2, etp=5), r"--etp 5 must divide the experts' d_ff=1536"),
        (dict(ep=8, dp=16, tp=2, etp=0), r"--etp must be a positive integer"),
        (dict(ep=8, dp=16, tp=2, etp=1, sp=False), r"--etp 1 with --tp 2 needs sequence parallelism \(--sp\)"),
        (dict(ep=8, dp=16, tp=2, etp=1, framework="torchtitan"), r"--etp 1 differs from --tp 2: .* --framework megatron"),
        (dict(ep=3, dp=16, tp=2, etp=1), r"--ep 3 must divide the 128 experts"),
    ]
    for kw, words in cases:
        with pytest.raises(TrainledgerError, match=words):
            check_ep(QWEN, kw.pop("ep"), kw.pop("dp"), **kw)
    with pytest.raises(TrainledgerError, match=r"--etp 1 needs a mixture-of-experts model; 'gpt2' has no experts"):
        check_ep(get_model("gpt2"), 1, 4, tp=2, etp=1)


def test_experts_per_gpu_under_folding():
    """Each GPU holds 1/(etp·ep) of its stage's routed experts: TP 2, EP 32, ETP 1 → 12·128·3·4096·1536/32; with
    ETP = TP 2 and EP 1 the same experts are split over tp only (1/2). The dense part is unchanged."""
    folded, plain = params_per_gpu(QWEN, 2, 8, 32, 1), params_per_gpu(QWEN, 2, 8, 1)
    assert folded["expert_params_per_gpu"] == pytest.approx(STAGE_EXPERTS / 32)
    assert plain["expert_params_per_gpu"] == pytest.approx(STAGE_EXPERTS / 2)
    assert plain["n_params_per_gpu"] - folded["n_params_per_gpu"] == pytest.approx(STAGE_EXPERTS * (1 / 2 - 1 / 32))
    assert routed_expert_params(QWEN) == 94 * 128 * EXPERT


@pytest.mark.parametrize("ep, edp", [(32, 1), (16, 2)])
def test_optimizer_states_sharded_over_edp(ep, edp):
    """Megatron's distributed optimizer shards an expert's states over the EDP ranks holding it, the dense ones over
    DP (arXiv:2603.07685 Sec. 3.3.2). mixed-bf16 AdamW, ZeRO-1, DP 16, TP 2, ETP 1: fp32 master (4 B) + two fp32
    moments (8 B) per parameter, dense/16 + experts/EDP of them; bf16 weights (2 B) of all this GPU holds."""
    m = memory_per_gpu(QWEN, batch_size=1, seq_len=4096, precision="mixed-bf16", zero=1, dp=16, tp=2, pp=8, sp=True,
                       ep=ep, etp=1, framework="megatron")
    experts = STAGE_EXPERTS / ep                                  # etp 1: whole experts, ep of them share the stage's
    dense = params_per_gpu(QWEN, 2, 8, ep, 1)["n_params_per_gpu"] - experts
    assert m["optimizer_bytes"] == pytest.approx((dense / 16 + experts / edp) * 8, rel=1e-9)
    assert m["master_params_bytes"] == pytest.approx((dense / 16 + experts / edp) * 4, rel=1e-9)
    assert m["params_bytes"] == pytest.approx((dense + experts) * 2, rel=1e-9)


def test_expert_activations_follow_the_tokens_each_rank_routes():
    """With sequence parallelism a rank routes its n/tp tokens; ETP 1 keeps them (no gather over TP), so the saved
    fc1 input per routed copy shrinks by tp and the fc1 output keeps its size (full d_ff, 1/tp of the copies)."""
    from trainledger.account.memory.megatron_moe import moe_bytes_per_token
    same, folded = (moe_bytes_per_token(QWEN, "mixed-bf16", tp=2, sp=True, etp=e) for e in (2, 1))
    assert folded["fc1_input"] == pytest.approx(same["fc1_input"] / 2) == 8 * 4096 * 2 / 2
    assert folded["fc1_output"] == pytest.approx(same["fc1_output"]) == pytest.approx(8 * 2 * 1536 * 2 / 2)


def test_expert_gemms_same_flops_other_shapes():
    """ETP 1 under TP 2 (sequence parallel): each local expert runs the routed copies of this rank's n/2 tokens at
    full d_ff instead of n tokens at d_ff/2: the same FLOPs, half the rows, twice the width."""
    shard, kernels = Shard(1, 4096, "mixed-bf16", tp=2, sp=True), Kernels(framework="megatron")

    def experts(etp):
        ks = layer_kernels(QWEN, shard, kernels, ep=16, etp=etp, layer=0)["forward"]
        return [k for k in ks if k.kind == "gemm" and k.name.startswith("expert_up")]
    same, folded = experts(2), experts(1)
    assert sum(k.flops for k in folded) == pytest.approx(sum(k.flops for k in same))
    m2, n2, k2, _ = same[0].shape
    m1, n1, k1, _ = folded[0].shape
    tokens = 4096 * 8 * 16 / 128                 # n·k·ep/E routed copies per expert, n = 4096
    assert (m2, n2, k2) == (tokens, 1536 / 2, 4096) and (m1, n1, k1) == (tokens / 2, 1536, 4096)


def test_step_places_the_folded_groups():
    """Qwen3-235B on 256 H100, TP 2 (SP), PP 8, EP 32, ETP 1 (the DGX-H100 row's recipe): the EP group's members are
    ETP = 1 rank apart, so 8 of them share a node (not 4, as TP-strided ranks would); EDP is 1, so no expert gradient
    is reduced; with EP 16 (EDP 2, members 16 ranks apart: other nodes) they are, over 2 ranks across nodes. ETP 1
    drops the MoE layers' MLP TP collectives (only attention's pair): less TP time than ETP 2 at the same EP 16."""
    kw = dict(batch_size=1, seq_len=4096, global_batch_size=2048, num_gpus=256, precision="mixed-bf16", tp=2, sp=True,
              pp=8, zero=1, framework="megatron", attention="causal", with_memory=False)
    r32 = step_time(QWEN, H100, **kw, ep=32, etp=1)
    assert r32["expert_parallel"]["ranks_per_node"] == 8 and r32["etp"] == 1
    assert not [c for c in r32["collectives"] if c["name"].startswith("expert_")]
    r16 = step_time(QWEN, H100, **kw, ep=16, etp=1)
    reduce = [c for c in r16["collectives"] if c["name"] == "expert_dp_grad_reducescatter"]
    assert len(reduce) == 1 and reduce[0]["group_size"] == 2 and reduce[0]["link"] == "inter"
    assert reduce[0]["payload_bytes"] == pytest.approx(STAGE_EXPERTS / 16 * 2)      # bf16 gradients
    dense = next(c for c in r16["collectives"] if c["name"] == "dp_grad_reducescatter")
    assert dense["group_size"] == 16
    r16_tp = step_time(QWEN, H100, **kw, ep=16)                                       # ETP = TP 2
    assert r16_tp["expert_parallel"]["ranks_per_node"] == 4
    assert r16["breakdown"]["tp_comm"] < r16_tp["breakdown"]["tp_comm"]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "trainledger.cli.main", *args], capture_output=True, text=True)


def test_cli_errors_name_the_flags():
    """Bad --ep/--etp: one line on stderr naming the flag, exit 2; the folded layout runs."""
    base = ["step", "--model", "qwen3-235b-a22b", "--gpu", "h100-sxm", "--num-gpus", "256", "--tp", "2", "--sp",
            "--pp", "8", "--global-batch-size", "2048", "--seq-len", "4096", "--precision", "mixed-bf16"]
    for extra, words in ((["--ep", "32", "--framework", "megatron"], "--ep 32 × --etp 2 must divide tp·cp·dp"),
                         (["--ep", "32", "--etp", "1"], "--etp 1 differs from --tp 2"),
                         (["--ep", "8", "--etp", "0", "--framework", "megatron"], "--etp")):
        done = _cli(*base, *extra)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and words in done.stderr
    done = _cli(*base, "--ep", "32", "--etp", "1", "--framework", "megatron", "--json")
    assert done.returncode == 0, done.stderr


def test_layout_searches_folded_layouts():
    """With Megatron, layout asks EP over the divisors of gcd(n_experts, tp·cp·dp): ETP = TP where EP divides cp·dp,
    ETP 1 beside it for every EP > 1 under TP with sequence parallelism; other frameworks keep EP | DP."""
    from runs import layouts
    from trainledger.account.planning.layout import expert_layouts
    pairs = expert_layouts(QWEN, 2, True, 1, 16, "megatron")
    assert (32, 1) in pairs and (16, None) in pairs and (16, 1) in pairs and (32, None) not in pairs
    assert (64, 1) not in pairs                                          # 64 does not divide tp·cp·dp = 32
    assert all(etp is None for _, etp in expert_layouts(QWEN, 2, False, 1, 16, "megatron"))   # no SP: no ETP 1
    assert expert_layouts(QWEN, 2, True, 1, 16, "torchtitan") == [(e, None) for e in (1, 2, 4, 8, 16)]
    tiny = get_model("mixtral-8x7b").with_(n_layers=2, d_model=256, n_heads=4, n_kv_heads=4, d_ff=512, vocab_size=1000)
    found = layouts(tiny, H100, num_gpus=8, global_batch_size=8, seq_len=512, framework="megatron", top=1000)
    folded = [r for r in found["layouts"] if r["ep"] > r["dp"]]
    assert folded and all(r["etp"] == 1 and r["sp"] for r in folded if r["tp"] > 1)
    for r in found["layouts"]:                                           # every pick is one Megatron accepts
        assert check_ep(tiny, r["ep"], r["dp"], tp=r["tp"], cp=r["cp"], etp=r["etp"], sp=r["sp"]) == r["ep"]
