"""PyTorch-native runs: torchtitan's published tokens/s per GPU (account/validation/runs.py) and the ZeRO stage a layout's
user runs (account/planning/zero_choice.py), including the issue's GPT-3 175B example."""

import pytest

from trainledger.account.planning import zero_choice
from trainledger.account.time.kernels import edge_kernels, layer_kernels
from trainledger.account.time.shard import Shard
from trainledger.account.memory.per_gpu import CUDA_CONTEXT_BYTES, CUDA_CONTEXT_EAGER_BYTES, cuda_reserve_bytes
from trainledger.account.time.roofline import gemm_efficiency
from trainledger.account.memory.fsdp import fsdp_settings
from runs import STEP_DEFAULTS, run_of
from runs import step as step_time
from trainledger.specs.run import Hardware, Kernels
from trainledger.account.validation.runs import TORCHTITAN, summary, torchtitan_cases
from trainledger.specs import get_model
from trainledger.specs.hardware import get_gpu
from trainledger.specs import performance as perf
from trainledger.specs.recipes import get_recipe

LLAMA8 = get_model("llama-3-8b")


@pytest.fixture(scope="module")
def cases():
    return torchtitan_cases()


def test_the_published_rows_are_the_tables(cases):
    """pytorch/torchtitan docs/performance.md: 8 A100 rows (3 Llama 3, 5 Llama 2), 4 H100 rows of Tables 1 and 3
    (two with torch.compile), the 405B 2D row."""
    a100 = [(r[0], r[9]) for r in TORCHTITAN if r[2] == "a100-80gb"]
    assert [tps for _, tps in a100] == [2904, 2973, 331, 2162, 1914, 1904, 355, 353]
    assert [r[9] for r in TORCHTITAN if r[2] == "h100-hbm2e"] == [5762, 6667, 5605, 6514, 109]
    assert all(r["cli"].startswith("trainledger step --model") for r in cases)


def test_torchtitan_a100_rows_within_15_percent(cases):
    """FSDP2 on 64 A100-80GB (torchtitan's A100 tables): at least 80 % of rows within 15 %, mean |error| ≤ 10 %,
    none beyond 20 %. Published from torchtitan's WPS per GPU; predicted as `torchtitan_cli` asks."""
    a100 = [r for r in cases if r["gpu"] == "a100-80gb"]
    s = summary(a100)
    assert s["n"] == 8 and s["share_within"] >= 0.8 and s["mean_abs_error"] <= 0.10, s
    assert s["worst_abs_error"] <= 0.20, s


def test_every_run_fits_in_memory(cases):
    """They ran: `memory` must say each fits in the GPU's capacity (H100 HBM2e 96 GB; A100 80GB: the 79.26 GiB it
    reports, specs/hardware.py) with the reserve torchtitan's launcher leaves (expandable segments: the CUDA context
    under lazy module loading, measured on the recorded H100, and two cuBLAS workspaces). The tightest, Llama 2 13B
    without recomputation (78.61 GiB peak), fits by 0.1 GiB; with every kernel module loaded (the 666,632,192 B
    eager context) it would not, by 30 MiB."""
    assert all(r["fits"] for r in cases if r["modelled"]), [r["label"] for r in cases if r["modelled"] and not r["fits"]]
    tightest = min((r for r in cases if r["modelled"]), key=lambda r: r["memory_per_gpu_bytes"] - r["memory_bytes"])
    eager = cuda_reserve_bytes(0.0, expandable_segments=True)["total"] - CUDA_CONTEXT_BYTES + CUDA_CONTEXT_EAGER_BYTES
    assert tightest["label"] == "Llama 2 13B, no AC"
    assert tightest["memory_bytes"] + eager > tightest["memory_per_gpu_bytes"]


def test_h100_rows_are_reported(cases):
    """The H100 runs (500 W parts) are predicted with torchtitan's kernels and listed with their error. They stay
    optimistic: the GH100's tensor rate at 500 W is interpolated between datasheet ratings, not measured (docs/
    time.md); this bounds where the model stands so that a change which moves them is seen."""
    h100 = [r for r in cases if r["gpu"] == "h100-hbm2e"]
    assert len(h100) == 5 and all(r["modelled"] and "--framework torchtitan" in r["cli"] for r in h100)
    assert all(0.0 < r["error"] < 0.32 for r in h100), [round(r["error"], 3) for r in h100]


def test_torch_compile_saves_what_torchtitan_saved(cases):
    """The seconds per step torch.compile saved in torchtitan's runs (Tables 1 and 3: 5,762 → 6,667 and 5,605 →
    6,514 tokens/s per GPU of 2 × 8192 tokens: 386 and 408 ms) against the model's: what compilation removes is
    memory-bound work (per-block compile, torchtitan's complex RoPE unfused, the head and loss eager), which the
    unmeasured 500 W tensor rate does not touch. Before torchtitan's kernels were modelled it saved 601 ms."""
    by = {(r["num_gpus"], r["compile"]): r for r in cases if r["model"] == "llama-3-8b" and r["gpu"] == "h100-hbm2e"}
    tokens = 2 * 8192
    for n in (8, 128):
        saved = {kind: tokens / by[n, False][key] - tokens / by[n, True][key]
                 for kind, key in (("published", "published_tokens_per_s_per_gpu"),
                                   ("predicted", "predicted_tokens_per_s_per_gpu"))}
        # 8 % off before the wait for the slowest GPU (account/time/stragglers.py) scaled the memory-bound work
        # that compilation removes by 3 % (8 GPUs) and 4 % (128 GPUs): 11 % off now
        assert saved["predicted"] == pytest.approx(saved["published"], rel=0.12), (n, saved)


def test_gh100_rated_tensor_rate_by_power_limit():
    """NVIDIA's datasheet rates the 132-SM GH100 at 989.5 dense bf16 TFLOP/s as the SXM5 (700 W) and 835.5 as the
    NVL (400 W); the 500 W part is linear between them (torchtitan: "between SXM and NVL"): 886.8 TFLOP/s."""
    assert perf.gh100_tensor_fraction(700) == pytest.approx(1.0)
    assert perf.gh100_tensor_fraction(400) * 989.5 == pytest.approx(835.5)
    assert perf.gh100_tensor_fraction(500) * 989.5 == pytest.approx(886.83, abs=0.01)
    assert perf.gh100_tensor_fraction(300) == perf.gh100_tensor_fraction(400)      # clamped to the rated parts
    sxm, hbm2e = get_gpu("h100-sxm"), get_gpu("h100-hbm2e")
    shape = (16384, 4096, 4096, "bf16")
    assert gemm_efficiency(hbm2e, *shape)["efficiency"] == pytest.approx(
        gemm_efficiency(sxm, *shape)["efficiency"] * perf.H100_500W_TENSOR_FRACTION)
    assert hbm2e.memory_bandwidth_fraction == sxm.memory_bandwidth_fraction
    assert hbm2e.attention_table().kernel == "flash-attention-2"


def _kernels(ks, prefix):
    return [k for k in ks if k.name.startswith(prefix) and k.kind == "elementwise"]


@pytest.mark.parametrize("compiled", [False, True])
def test_torchtitan_rope_is_complex_and_unfused(compiled):
    """torchtitan's apply_rotary_emb: cast to fp32, complex product with the broadcast table, cast back — 20 bytes
    per rotated element each way (bf16), on contiguous q and k, in eager mode and under Inductor alike (complex
    operators fall back to ATen). Our Transformer's RoPE moves as many bytes on permuted views (strided)."""
    shape = Shard(2, 8192, "mixed-bf16")
    tt = layer_kernels(LLAMA8, shape, Kernels(framework="torchtitan", compile=compiled))
    elements = 2 * 8192 * (LLAMA8.n_heads + LLAMA8.kv_heads) * LLAMA8.head_dim
    for phase in ("forward", "backward"):
        rope = _kernels(tt[phase], "rope_complex")
        assert sum(k.bytes for k in rope) == pytest.approx(20 * elements)
        assert {k.access for k in rope} == {"stream", "broadcast"}
    ours = layer_kernels(LLAMA8, shape, Kernels(framework="trainledger", compile=compiled))
    if compiled:
        assert sum(k.bytes for k in _kernels(ours["forward"], "fused_rope")) == pytest.approx(4 * elements)
    else:
        assert sum(k.bytes for k in _kernels(ours["forward"], "rope")) == pytest.approx(20 * elements)
        assert {k.access for k in _kernels(ours["forward"], "rope")} == {"strided"}


def test_torchtitan_compiles_blocks_only():
    """apply_compile wraps each TransformerBlock; the embedding, final norm, output Linear and loss run eager."""
    shape = Shard(2, 8192, "mixed-bf16")
    titan = [edge_kernels(LLAMA8, shape, Kernels(framework="torchtitan", compile=c)) for c in (True, False)]
    assert titan[0] == titan[1]
    ours = [edge_kernels(LLAMA8, shape, Kernels(framework="trainledger", compile=c)) for c in (True, False)]
    assert ours[0] != ours[1]


@pytest.mark.parametrize("framework, compiled", [("trainledger", False), ("torchtitan", False), ("torchtitan", True)])
def test_sequence_parallel_copies(framework, compiled):
    """DTensor SP gathers and reduce-scatters the (batch, seq, d) stream on Shard(1): the functional collectives
    copy the gathered tensor once each (torch.cat of the chunks), four times forward and four backward per block."""
    kernels = Kernels(framework=framework, compile=compiled)
    with_sp, without = (layer_kernels(LLAMA8, Shard(2, 8192, "mixed-bf16", tp=8, sp=sp), kernels) for sp in (True, False))
    full = 2 * 2 * 8192 * LLAMA8.d_model * 2                   # read + write the gathered bf16 stream
    for phase in ("forward", "backward"):
        copies = _kernels(with_sp[phase], "sp_")
        assert len(copies) == 4 and sum(k.bytes for k in copies) == pytest.approx(4 * full)
        assert not _kernels(without[phase], "sp_")


def test_torchtitan_framework_on_the_command_line(capsys):
    """`step --framework torchtitan` answers (eager and --compile); Megatron's kernels refuse --compile."""
    from trainledger.cli.main import main
    base = ["step", "--model", "llama-3-8b", "--gpu", "h100-hbm2e", "--num-gpus", "8", "--batch-size", "2",
            "--seq-len", "8192", "--recompute", "full", "--framework", "torchtitan", "--json"]
    assert main(base) == 0 and main(base + ["--compile"]) == 0
    capsys.readouterr()
    assert main(base[:-3] + ["--framework", "megatron", "--compile"]) == 2
    assert "error: " in capsys.readouterr().err


@pytest.mark.parametrize("dp, pp, framework, zero", [
    (1, 1, "trainledger", 0), (64, 1, "trainledger", 3), (16, 8, "trainledger", 1), (8, 1, "megatron", 1),
])
def test_default_zero_is_what_the_layout_runs(dp, pp, framework, zero):
    assert zero_choice.default_zero(dp=dp, pp=pp, framework=framework)[0] == zero


def test_gpt3_175b_default_and_lever():
    """The issue's case: GPT-3 175B on 1,024 A100-80GB, TP 8, PP 8, DP 16, global batch 1,536 of micro-batch 1 (96
    micro-batches), mixed-bf16, Adam. The default stage does not re-gather per micro-batch; ZeRO-3 as FSDP2 runs it
    without pipelining's keep-unsharded (re-gathering each micro-batch) spends most of the step in data-parallel
    communication, and the lever names --zero 1 with the time and memory the model gives for it."""
    spec, gpu = get_model("gpt3-175b"), get_gpu("a100-80gb")
    settings = dict(batch_size=1, seq_len=2048, global_batch_size=1536, num_gpus=1024, precision="mixed-bf16",
                    optimizer="adam", tp=8, pp=8)
    zero, _ = zero_choice.default_zero(dp=16, pp=8, framework="trainledger")
    default = step_time(spec, gpu, **settings, zero=zero)
    assert zero == 1 and default["breakdown"]["dp_comm"] < 0.1 * default["step_seconds"]
    regather = fsdp_settings(get_recipe("mixed-bf16"), reshard_after_forward=True, accumulate="sharded", pp=8, dp=16)
    slow = step_time(spec, gpu, **settings, zero=3, fsdp=regather)
    assert slow["breakdown"]["dp_comm"] > 0.5 * slow["step_seconds"]
    asked = {k: v for k, v in settings.items() if k != "num_gpus"}
    found = zero_choice.lever(spec, Hardware(gpu, 1024), run_of(STEP_DEFAULTS, **asked, zero=3, fsdp=regather), slow)
    assert found["zero"] == 1 and "96 micro-batches" in found["text"] and "--zero 1" in found["text"]
    assert found["step_seconds"] == pytest.approx(default["step_seconds"])
    assert found["memory_bytes"] == pytest.approx(default["memory_bytes"])
