"""The GPUs fine-tuners own (specs/hardware_small.py): each figure against its datasheet, the capacities CUDA reports
with where they were read, the per-SM arithmetic that reproduces the whitepaper figures, and the bf16 refusal on
Turing and Volta."""

import json

import pytest

from trainledger.errors import TrainledgerError
from trainledger.specs.fp8 import BF16_RECIPES, check_gpu_supports
from trainledger.specs.hardware import GPUS, get_gpu, gpu_for_device_name
from trainledger.specs.hardware_small import SMALL_GPUS

T, GB, GiB = 1e12, 1e9, 2**30

# name, dense TFLOP/s by dtype as the datasheet / whitepaper prints them (sparse figures halved), datasheet memory
# bytes, memory bandwidth GB/s
DATASHEETS = [
    ("rtx-a6000", {"fp32": 38.7, "tf32": 77.4, "bf16": 154.8, "fp16": 154.8, "int8": 309.7}, 48 * GB, 768),
    ("rtx-6000-ada", {"fp32": 91.1, "tf32": 182.1, "bf16": 364.2, "fp8": 728.5}, 48 * GB, 960),
    ("a10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125, "fp16": 125, "int8": 250}, 24 * GB, 600),
    ("a10g", {"fp32": 35.0, "bf16": 70.0}, 24 * GB, 600),                      # derived: no NVIDIA datasheet
    ("t4", {"fp32": 8.1, "fp16": 65, "int8": 130}, 16 * GB, 320),
    ("v100-16gb", {"fp64": 7.8, "fp32": 15.7, "fp16": 125}, 16 * GB, 900),
    ("v100-32gb", {"fp64": 7.8, "fp32": 15.7, "fp16": 125}, 32 * GB, 900),
    ("rtx-5090", {"fp32": 104.8, "bf16": 209.5, "fp8": 419}, 32 * GB, 1792),
    ("rtx-4080", {"fp32": 48.7, "bf16": 97.5, "fp8": 194.9}, 16 * GB, 716.8),
    ("rtx-3060", {"fp32": 12.7, "bf16": 25.5}, 12 * GB, 360),
    # the three that already existed, checked against the same sources
    ("l4", {"fp32": 30.3, "tf32": 60, "bf16": 121, "fp8": 242.5}, 24 * GB, 300),
    ("rtx-4090", {"fp32": 82.6, "bf16": 165.2, "fp8": 330.3, "int8": 660.6}, 24 * GB, 1008),
    ("rtx-3090", {"fp32": 35.6, "tf32": 35.6, "bf16": 71, "int8": 284}, 24 * GB, 936),
]


@pytest.mark.parametrize("name, peaks, memory_bytes, bandwidth_gb_s", DATASHEETS, ids=[d[0] for d in DATASHEETS])
def test_datasheet_figures(name, peaks, memory_bytes, bandwidth_gb_s):
    gpu = get_gpu(name)
    for dtype, tflops in peaks.items():
        assert gpu.peak(dtype) == pytest.approx(tflops * T, rel=1e-12), dtype
    assert gpu.to_dict()["datasheet_memory_bytes"] == pytest.approx(memory_bytes, rel=1e-12)
    assert gpu.memory_bandwidth_bytes_per_s == pytest.approx(bandwidth_gb_s * GB, rel=1e-12)


# (name, SMs, boost MHz, FLOP per SM per clock of: fp32, 16-bit tensor with fp32 accumulate) -- the whitepapers'
# per-SM rates: GA102/GA106 GeForce 256 / 512, professional and data-center GA102 256 / 1024, Ada GeForce 256 / 512,
# Ada professional 256 / 1024, Blackwell GeForce 256 / 512. The product reproduces each printed figure.
PER_SM = [
    ("rtx-3090", 82, 1695, 256, 512), ("rtx-3060", 28, 1777, 256, 512), ("a10g", 80, 1710, 256, 512),
    ("rtx-a6000", 84, 1800, 256, 1024), ("a10", 72, 1695, 256, 1024), ("rtx-4090", 128, 2520, 256, 512),
    ("rtx-4080", 76, 2505, 256, 512), ("rtx-6000-ada", 142, 2505, 256, 1024), ("rtx-5090", 170, 2407, 256, 512),
]


@pytest.mark.parametrize("name, sms, mhz, fp32_per_clock, tensor_per_clock", PER_SM, ids=[p[0] for p in PER_SM])
def test_peaks_are_sms_times_clock_times_the_per_sm_rate(name, sms, mhz, fp32_per_clock, tensor_per_clock):
    """The datasheet figures are SMs x boost clock x FLOP/clk/SM (to the printed rounding): a figure typed wrong, or a
    sparse one taken for dense, is off by far more than 0.5 %."""
    gpu = get_gpu(name)
    assert gpu.sm_count == sms
    assert gpu.peak("fp32") == pytest.approx(sms * mhz * 1e6 * fp32_per_clock, rel=5e-3)
    assert gpu.peak("bf16") == pytest.approx(sms * mhz * 1e6 * tensor_per_clock, rel=5e-3)


# Capacity CUDA reports (what fitting fills), each with the public report that names the card
REPORTED = [
    ("rtx-6000-ada", 44.43 * GiB, "DINGYANB/MTVCrafter#21"),
    ("a10", 21.99 * GiB, "zai-org/CogVLM#236"),
    ("a10g", 21.99 * GiB, "bigcode-project/starcoder#151"),
    ("t4", 14.56 * GiB, "Zheng-Chong/CatVTON#133"),
    ("v100-16gb", 15.78 * GiB, "kchengiva/Shift-GCN#34"),
    ("v100-32gb", 31.74 * GiB, "liucongg/ChatGLM-Finetuning#73"),
    ("rtx-5090", 31.36 * GiB, "TrajectoryCrafter/TrajectoryCrafter#20"),
    ("rtx-3060", 11.75 * GiB, "Kunhao-Liu/StyleGaussian#12"),
]


@pytest.mark.parametrize("name, reported_bytes, where", REPORTED, ids=[r[0] for r in REPORTED])
def test_memory_is_what_cuda_reports(name, reported_bytes, where):
    gpu = get_gpu(name)
    assert gpu.memory_bytes == pytest.approx(reported_bytes, rel=1e-12)
    assert where in gpu.memory_source
    assert abs(gpu.memory_bytes / gpu.datasheet_memory_bytes - 1) < 0.07


def test_cards_without_a_named_report_keep_the_datasheet_figure_and_say_so():
    for name in ("rtx-a6000", "rtx-4080"):
        gpu = get_gpu(name)
        assert not gpu.datasheet_memory_bytes and "no published" in gpu.memory_source


def test_turing_and_volta_have_no_bf16_or_tf32():
    """T4 (Turing) and V100 (Volta) datasheets list FP16 tensor cores and no BF16 or TF32 (those came with Ampere)."""
    for name in ("t4", "v100-16gb", "v100-32gb"):
        peaks = get_gpu(name).peak_flops_per_s
        assert "fp16" in peaks and "bf16" not in peaks and "tf32" not in peaks and "fp8" not in peaks


def test_names_aliases_and_the_table():
    assert get_gpu("a6000").name == "rtx-a6000" and get_gpu("RTX A6000").name == "rtx-a6000"
    assert get_gpu("v100").name == "v100-16gb" and get_gpu("RTX 3060").name == "rtx-3060"
    assert all(gpu in GPUS for gpu in SMALL_GPUS)


@pytest.mark.parametrize("device_name, expected", [
    ("NVIDIA RTX A6000", "rtx-a6000"), ("NVIDIA RTX 6000 Ada Generation", "rtx-6000-ada"), ("NVIDIA A10G", "a10g"),
    ("NVIDIA A10", "a10"), ("Tesla T4", "t4"), ("NVIDIA GeForce RTX 5090", "rtx-5090"),
    ("NVIDIA GeForce RTX 4080", "rtx-4080"), ("NVIDIA GeForce RTX 4080 SUPER", None),
    ("NVIDIA GeForce RTX 3060", "rtx-3060"), ("NVIDIA GeForce RTX 3060 Ti", None),
    ("NVIDIA A100-SXM4-80GB", "a100-80gb"), ("Tesla V100-PCIE-16GB", None),
])
def test_device_names(device_name, expected):
    gpu = gpu_for_device_name(device_name)
    assert (gpu.name if gpu else None) == expected


@pytest.mark.parametrize("gpu_name", ["t4", "v100", "v100-32gb"])
@pytest.mark.parametrize("precision", sorted(BF16_RECIPES))
def test_bf16_recipes_are_refused_without_bf16(gpu_name, precision):
    with pytest.raises(TrainledgerError) as error:
        check_gpu_supports(precision, get_gpu(gpu_name))
    message = str(error.value)
    assert "\n" not in message and "--precision" in message and BF16_RECIPES[precision] in message
    assert "fp16" in message


@pytest.mark.parametrize("precision", ["fp32", "amp-fp16", "mixed-fp16"])
def test_fp16_and_fp32_recipes_run_on_turing_and_volta(precision):
    for name in ("t4", "v100"):
        check_gpu_supports(precision, get_gpu(name))


def test_bf16_runs_where_bf16_exists_and_fp8_on_t4_names_an_fp16_recipe():
    for name in ("a10", "a10g", "rtx-3060", "rtx-a6000", "rtx-5090"):
        check_gpu_supports("amp-bf16", get_gpu(name))
    with pytest.raises(TrainledgerError, match="mixed-fp16"):
        check_gpu_supports("fp8-cs", get_gpu("t4"))


def _run(capsys, *argv):
    from trainledger.cli.main import main

    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_cli_refuses_bf16_on_a_t4_and_a_v100(capsys):
    status, _, err = _run(capsys, "memory", "--model", "gpt2", "--gpu", "t4", "--precision", "amp-bf16")
    assert status == 2 and "amp-fp16" in err and len(err.strip().splitlines()) == 1
    status, _, err = _run(capsys, "step", "--model", "gpt2", "--gpu", "v100", "--precision", "mixed-bf16",
                          "--batch-size", "1", "--seq-len", "128")
    assert status == 2 and "mixed-fp16" in err and len(err.strip().splitlines()) == 1
    status, out, _ = _run(capsys, "memory", "--model", "gpt2", "--gpu", "t4", "--precision", "amp-fp16", "--json")
    assert status == 0 and json.loads(out)["total_bytes"] > 0


def test_hardware_command_lists_them(capsys):
    status, out, _ = _run(capsys, "hardware", "--json")
    records = {r["name"]: r for r in json.loads(out)}
    assert status == 0
    for gpu in SMALL_GPUS:
        assert records[gpu.name]["peak_flops_per_s"] == gpu.peak_flops_per_s and records[gpu.name]["source"]
    status, out, _ = _run(capsys, "hardware")
    assert all(gpu.name in out for gpu in SMALL_GPUS)
