"""FP8 recipes (specs/fp8.py, specs/recipes.py) and the GPUs that can run them (specs/hardware.py)."""

import pytest

from trainledger.errors import TrainledgerError
from trainledger.specs.fp8 import SCHEMES, check_gpu_supports, fp8_scheme
from trainledger.specs.hardware import get_gpu
from trainledger.specs.recipes import bytes_per_param, get_optimizer, get_recipe

FP8_RECIPES = ("fp8-cs", "fp8-delayed", "fp8-rowwise", "mxfp8")


@pytest.mark.parametrize("name", FP8_RECIPES)
def test_every_fp8_recipe_is_a_precision_recipe_with_a_source(name):
    recipe, scheme = get_recipe(name), fp8_scheme(name)
    assert scheme is not None and scheme.source and recipe.source
    assert set(scheme.fp8_gemms) <= {"forward", "dgrad", "wgrad"} and scheme.fp8_gemms
    # attention, norms and the head stay 16-bit: the recipe's compute dtype (its non-FP8 matmuls) is bf16
    assert recipe.compute_dtype == "bf16" and recipe.activation_dtype == "bf16"
    # AdamW model states: 16 B/param like the 16-bit recipe each builds on (ZeRO 2+2+12, or AMP's 4+4+8)
    assert bytes_per_param(recipe, get_optimizer("adamw"))["total"] == 16


def test_mxfp8_costs_one_e8m0_byte_per_32_elements():
    """OCP MX v1.0: 32 elements share one 8-bit scale: 1 + 1/32 bytes per element."""
    assert SCHEMES["mxfp8"].fp8_bytes_per_element() == pytest.approx(1 + 1 / 32)
    assert SCHEMES["fp8-cs"].fp8_bytes_per_element() == 1.0       # one fp32 scale per tensor: negligible


def test_what_each_recipe_keeps():
    """TE caches the FP8 weight and its transpose and saves FP8 inputs; torchao keeps nothing FP8 (recasts)."""
    assert SCHEMES["fp8-cs"].weight_copies == 2 and SCHEMES["fp8-cs"].saved_fp8
    assert SCHEMES["fp8-rowwise"].weight_copies == 0 and not SCHEMES["fp8-rowwise"].saved_fp8
    assert SCHEMES["fp8-delayed"].amax_history == 1024 and not SCHEMES["fp8-delayed"].amax_pass
    assert SCHEMES["fp8-cs"].amax_pass
    assert fp8_scheme("amp-bf16") is None


@pytest.mark.parametrize("gpu", ["h100", "h200", "h800", "b200", "gb200", "l40s", "rtx-4090"])
def test_fp8_runs_on_gpus_with_fp8_tensor_cores(gpu):
    check_gpu_supports("fp8-cs", get_gpu(gpu))
    check_gpu_supports("fp8-rowwise", get_gpu(gpu))


@pytest.mark.parametrize("gpu", ["a100", "a100-40gb", "rtx-3090", "mi250x", "tpu-v5p"])
def test_fp8_refused_without_fp8_tensor_cores(gpu):
    with pytest.raises(TrainledgerError, match=r"--precision fp8-cs needs FP8 tensor cores"):
        check_gpu_supports("fp8-cs", get_gpu(gpu))


@pytest.mark.parametrize("gpu", ["h100", "h200", "h800", "l40s"])
def test_mxfp8_refused_before_blackwell(gpu):
    with pytest.raises(TrainledgerError, match=r"mxfp8 needs MX block-scaled FP8 tensor cores \(Blackwell"):
        check_gpu_supports("mxfp8", get_gpu(gpu))
    check_gpu_supports("mxfp8", get_gpu("b200"))
    check_gpu_supports("mxfp8", get_gpu("gb200"))


def test_new_systems_carry_their_sources():
    """GB200 NVL72: 72 GPUs in one NVLink domain; H800: H100 compute, NVLink at DeepSeek-V3's 160 GB/s."""
    gb200, h800, h100 = get_gpu("gb200-nvl72"), get_gpu("h800"), get_gpu("h100")
    assert gb200.gpus_per_node == 72 and gb200.peak("fp8") == pytest.approx(5000e12)
    assert gb200.memory_bytes == pytest.approx(13.4e12 / 72)
    assert h800.peak("fp8") == h100.peak("fp8")
    link = h800.intra_node_link
    assert link.bandwidth_bytes_per_s * link.bus_bandwidth_fraction == pytest.approx(160e9)
    assert link.bandwidth_bytes_per_s < h100.intra_node_link.bandwidth_bytes_per_s
