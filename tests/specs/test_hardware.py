"""Accelerator table: the dense peaks of ../shared/reference/facts.md (vendor datasheets), ordering sanity, lookups."""

import inspect

import pytest

from trainledger.errors import TrainledgerError
from trainledger.specs import hardware
from trainledger.specs.hardware import GPUS, get_gpu

T, GB, GiB = 1e12, 1e9, 2**30

# facts.md "Hardware (dense peaks, TFLOP/s)": name, {dtype: TFLOP/s}, datasheet memory bytes, bandwidth GB/s.
FACTS = [
    ("a100-40gb", {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 40 * GB, 1555),
    ("a100-80gb", {"fp32": 19.5, "tf32": 156, "bf16": 312, "fp16": 312}, 80 * GB, 2039),
    ("h100-sxm", {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979}, 80 * GB, 3350),
    ("h100-pcie", {"fp32": 51, "tf32": 378, "bf16": 756.5, "fp16": 756.5, "fp8": 1513}, 80 * GB, 2000),
    ("h200", {"fp32": 67, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5, "fp8": 1979}, 141 * GB, 4800),
    ("b200", {"fp32": 80, "tf32": 1125, "bf16": 2250, "fp16": 2250, "fp8": 4500}, 180 * GB, 8000),
    ("l4", {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp16": 121, "fp8": 242.5}, 24 * GB, 300),
    ("l40s", {"fp32": 91.6, "tf32": 183, "bf16": 362, "fp16": 362, "fp8": 733}, 48 * GB, 864),
    ("rtx-4090", {"fp32": 82.6, "tf32": 82.6, "bf16": 165.2, "fp16": 165.2, "fp8": 330.3}, 24 * GB, 1008),
    ("mi300x", {"fp32": 163.4, "tf32": 653.7, "bf16": 1307.4, "fp16": 1307.4, "fp8": 2614.9}, 192 * GB, 5300),
    ("tpu-v4", {"bf16": 275}, 32 * GiB, 1200),
    ("tpu-v5e", {"bf16": 197}, 16 * GB, 819),
    ("tpu-v5p", {"bf16": 459}, 95 * GB, 2765),
]


@pytest.mark.parametrize("name, peaks, memory_bytes, bandwidth_gb_s", FACTS, ids=[f[0] for f in FACTS])
def test_facts_table(name, peaks, memory_bytes, bandwidth_gb_s):
    gpu = get_gpu(name)
    for dtype, tflops in peaks.items():
        assert gpu.peak(dtype) == pytest.approx(tflops * T, rel=1e-12), dtype
    assert gpu.to_dict()["datasheet_memory_bytes"] == pytest.approx(memory_bytes, rel=1e-12)
    assert gpu.memory_bandwidth_bytes_per_s == pytest.approx(bandwidth_gb_s * GB, rel=1e-12)


# The capacity CUDA reports (torch total_memory = totalGlobalMem), what fitting uses; each with where it was read.
# The H100 figure is the recorded device's own (its trace's deviceProperties, read back below).
REPORTED = [
    ("a100-40gb", 42298834944, "bottlerocket-os/bottlerocket#3873 (deviceQuery)"),
    ("a100-80gb", 85100068864, "thamada/nvidia-smi nvsim/A100SXMx4_deviceQuery.py"),
    ("h100-sxm", 85017493504, "tests/data/h100_2026_11_26 trace deviceProperties.totalGlobalMem"),
    ("h200", 139.81 * GiB, "torch OOM messages on H200, rounded to 0.01 GiB"),
    ("b200", 178.35 * GiB, "pytorch/ao#4002, rounded to 0.01 GiB"),
    ("l40s", 44.42 * GiB, "stepfun-ai/Step-Video-T2V#8, rounded to 0.01 GiB"),
    ("rtx-3090", 23.70 * GiB, "GaoLii/DSP#10, rounded to 0.01 GiB"),
    ("rtx-4090", 23.68 * GiB, "zai-org/CogVideo#36, rounded to 0.01 GiB"),
]


@pytest.mark.parametrize("name, reported_bytes, where", REPORTED, ids=[r[0] for r in REPORTED])
def test_memory_is_what_cuda_reports(name, reported_bytes, where):
    """Fitting fills what the device reports, not the datasheet's "80GB": the HBM3 H100 reports 79.18 GiB, 6 % more
    than 80e9 B (74.5 GiB). Reported capacities sit within 6 % of the datasheet figure and below nvidia-smi's total."""
    gpu = get_gpu(name)
    assert gpu.memory_bytes == pytest.approx(reported_bytes, rel=1e-12), where
    assert gpu.memory_source and gpu.datasheet_memory_bytes > 0
    assert abs(gpu.memory_bytes / gpu.datasheet_memory_bytes - 1) < 0.07


def test_recorded_h100_reports_the_capacity_in_the_table():
    """The recorded H100 80GB HBM3's own totalGlobalMem (its Kineto trace) is h100-sxm's memory_bytes, 79.18 GiB;
    nvidia-smi's 81559MiB (modal-labs/modal-client#2797) is larger: it counts memory the driver keeps."""
    import gzip
    import json
    from pathlib import Path

    trace = Path(__file__).parents[1] / "data" / "h100_2026_11_26" / "trace_gpt2.json.gz"
    props = json.loads(gzip.decompress(trace.read_bytes()))["deviceProperties"][0]
    assert props["name"] == "NVIDIA H100 80GB HBM3"
    assert get_gpu("h100").memory_bytes == props["totalGlobalMem"]
    assert round(props["totalGlobalMem"] / GiB, 2) == 79.18
    assert props["totalGlobalMem"] < 81559 * 2**20


@pytest.mark.parametrize("gpu", [g for g in GPUS if not g.datasheet_memory_bytes], ids=lambda g: g.name)
def test_entries_without_a_reported_capacity_say_so(gpu):
    """Where no reported figure was found the datasheet figure is used, and the entry says which."""
    assert "no published" in gpu.memory_source or "not a CUDA device" in gpu.memory_source


def test_8_h100_and_8_a100_80gb_fit_the_same_model():
    """Both report ~79.2 GiB (A100 80GB: 79.26, H100 80GB HBM3: 79.18): the largest model on 8 of either agrees
    within 0.1 % (42.5B with fp32 AdamW), where the datasheet's 80e9 B gave the lecture's 40B for 8 H100."""
    from trainledger.account.planning.plan import max_params

    h100 = max_params(get_gpu("h100").memory_bytes, num_gpus=8, precision="fp32", optimizer="adamw")["max_params"]
    a100 = max_params(get_gpu("a100-80gb").memory_bytes, num_gpus=8, precision="fp32", optimizer="adamw")["max_params"]
    assert h100 == pytest.approx(a100, rel=1e-3)
    assert h100 == pytest.approx(85017493504 / 2, rel=1e-12)
    assert max_params(80e9, num_gpus=8, precision="fp32", optimizer="adamw")["max_params"] == pytest.approx(4.0e10)


def test_lecture_peaks():
    """CS336 Lecture 2: A100 19.5 (fp32) / 312 (bf16) TFLOP/s; H100 989.5 bf16 dense (the lecture prints the
    sparse 1979 for bf16 and 67.5 for fp32; the datasheet's dense SXM figures are 989.5 and 67)."""
    assert get_gpu("a100").peak("fp32") == pytest.approx(19.5e12)
    assert get_gpu("a100").peak("bf16") == pytest.approx(312e12)
    assert get_gpu("h100").peak("bf16") == pytest.approx(989.5e12)


@pytest.mark.parametrize("gpu", GPUS, ids=[g.name for g in GPUS])
def test_peaks_are_ordered_and_dense(gpu):
    """Lower precision is never slower: fp4 >= fp8 >= bf16 >= tf32 >= fp32 >= fp64 where present; bf16 == fp16.
    INT8 runs at least at the bf16 rate, except on Blackwell Ultra (b300, gb300), whose datasheets cut it to
    125-165 TOPS, below a twelfth of the bf16 rate (NVIDIA HGX B300 / GB300 NVL72 pages)."""
    p = gpu.peak_flops_per_s
    chain = [p[k] for k in ("fp64", "fp32", "tf32", "bf16", "fp8", "fp4") if k in p]
    assert chain == sorted(chain), p
    if "fp16" in p and "bf16" in p:
        assert p["fp16"] == p["bf16"]
    half = p.get("bf16", p.get("fp16"))   # the 16-bit tensor rate: fp16 on Turing/Volta (t4, v100), which lack bf16
    if "int8" in p and gpu.name in ("b300", "gb300"):
        assert p["int8"] < p["bf16"] / 12
    elif "int8" in p:
        assert p["int8"] >= half
    assert all(value > 0 for value in p.values())
    assert set(p) <= {"fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"}
    if gpu.block_scaled:      # MX block scaling is a Blackwell FP8 mode: never without plain FP8 tensor cores
        assert "fp8" in p and set(gpu.block_scaled) <= {"mxfp8"}
    assert gpu.memory_bytes > 0 and gpu.memory_bandwidth_bytes_per_s > 0 and gpu.source


def test_no_sparse_figure_is_used_as_a_peak():
    """Datasheets print 2:4-sparse figures at 2x the dense ones: the H100 SXM sparse bf16 is 1979, our bf16 is half."""
    h100 = get_gpu("h100-sxm")
    assert h100.peak("bf16") == pytest.approx(1979e12 / 2)
    assert get_gpu("b200").peak("fp8") == pytest.approx(9000e12 / 2)


def test_each_entry_names_its_datasheet_on_the_line_above():
    from trainledger.specs import hardware_small   # the small cards' entries live beside (specs/hardware_small.py)

    lines = inspect.getsource(hardware).splitlines() + inspect.getsource(hardware_small).splitlines()
    entries = [i for i, line in enumerate(lines) if "= GPUSpec(" in line]
    assert len(entries) == len(GPUS)
    for i in entries:
        assert lines[i - 1].startswith("# "), lines[i]


def test_lookup_aliases_and_errors():
    assert get_gpu("H100").name == "h100-sxm"
    assert get_gpu("a100").name == "a100-80gb"
    assert get_gpu("A100_40GB").name == "a100-40gb"
    assert get_gpu("RTX 4090").name == "rtx-4090"
    assert get_gpu("v5p").name == "tpu-v5p"
    keys = [g.name for g in GPUS] + [a for g in GPUS for a in g.aliases]
    assert len(keys) == len(set(keys)), "an alias names two GPUs"
    with pytest.raises(TrainledgerError) as error:
        get_gpu("h1000")
    message = str(error.value)
    assert "--gpu" in message and "h100-sxm" in message and "a100-40gb" in message and "\n" not in message
    with pytest.raises(TrainledgerError, match="has no fp8 peak"):
        get_gpu("a100").peak("fp8")


# (what torch.cuda.get_device_name() reports, our entry)
DEVICE_NAMES = [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("NVIDIA H100 PCIe", "h100-pcie"), ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-40GB", "a100-40gb"), ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"), ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("AMD Instinct MI300X", "mi300x"),
    ("Tesla V100-SXM2-16GB", None), ("NVIDIA GeForce RTX 3080", None),
]


@pytest.mark.parametrize("device_name, expected", DEVICE_NAMES, ids=[d[0] for d in DEVICE_NAMES])
def test_gpu_for_device_name(device_name, expected):
    """Unknown devices give None (no peak, no MFU), never a guessed A100."""
    from trainledger.specs.hardware import gpu_for_device_name

    gpu = gpu_for_device_name(device_name)
    assert (gpu.name if gpu else None) == expected


def test_peak_takes_every_dtype_name_the_dtype_table_knows():
    # `plan --dtype bfloat16` must mean what `matmul --dtype bfloat16` means
    h100 = get_gpu("h100")
    for name in ("bf16", "BF16", "bfloat16", "half", "fp16"):
        assert h100.peak(name) == pytest.approx(989.5e12), name
    for name in ("fp8", "fp8-e4m3", "e5m2", "float8_e4m3fn"):
        assert h100.peak(name) == pytest.approx(1979e12), name
    assert h100.peak("tensorfloat32") == pytest.approx(494.5e12)
    for name in ("int4", "fp99", ""):
        with pytest.raises(TrainledgerError, match="--dtype"):
            h100.peak(name)
    with pytest.raises(TrainledgerError, match="tpu-v4 has no float32 peak; it has: bf16, int8"):
        get_gpu("tpu-v4").peak("float32")


@pytest.mark.parametrize("name, shape, dtype, tflops", [
    ("a100-80gb", (8192, 8192, 8192), "fp16", 253.7),          # Azure ND A100 v4, cuBLASLt, random data
    ("a100-80gb", (6144, 12288, 12288), "fp16", 250.8),
    ("a100-40gb", (4096, 4096, 4096), "bf16", 228.0),           # same chip and clocks: the 80GB's table
    ("h200", (8192, 8192, 8192), "fp8", 1300.6),                # Azure ND H200 v5, cuBLASLt fp8
    ("h200", (16384, 16384, 16384), "fp8", 1366.3),
])
def test_sustained_matmul_measurements_are_reproduced(name, shape, dtype, tflops):
    """At a measured shape the model returns the published measurement (its wave utilisation divided out, then
    multiplied back in)."""
    from trainledger.account.time.roofline import gemm_efficiency
    gpu = get_gpu(name)
    assert gemm_efficiency(gpu, *shape, dtype)["efficiency"] * gpu.peak(dtype) == pytest.approx(tflops * 1e12)


def test_published_stream_bandwidth_fractions():
    """STREAM Copy: A100-SXM4-80GB 1.61 of 2.039 TB/s, H200 4.01 of 4.8 TB/s (Azure); A100 40GB memcopy 1355 of
    1555 GB/s (JuliaCon 2023 GPU workshop)."""
    assert get_gpu("a100-80gb").memory_bandwidth_fraction * 2039e9 == pytest.approx(1610e9)
    assert get_gpu("h200").memory_bandwidth_fraction * 4.8e12 == pytest.approx(4010e9)
    assert get_gpu("a100-40gb").memory_bandwidth_fraction * 1555e9 == pytest.approx(1355e9)
