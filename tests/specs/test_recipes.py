"""specs/recipes.py: bytes per parameter of each precision recipe and optimizer (DESIGN.md, ZeRO Sec. 3.1, the lecture)."""

import pytest

from trainledger.errors import TrainledgerError
from trainledger.specs.recipes import OPTIMIZERS, RECIPES, bytes_per_param, get_optimizer, get_recipe

ADAMW = get_optimizer("adamw")


@pytest.mark.parametrize("recipe, total, parts", [
    ("fp32", 16, (4, 4, 0, 8)),          # CS336 Lecture 2: 4 + 4 + (4 + 4)
    ("amp-bf16", 16, (4, 4, 0, 8)),      # PyTorch AMP: fp32 states
    ("amp-fp16", 16, (4, 4, 0, 8)),
    ("mixed-bf16", 16, (2, 2, 4, 8)),    # ZeRO Sec. 3.1: 2Ψ + 2Ψ + 12Ψ
    ("mixed-fp16", 16, (2, 2, 4, 8)),
    ("bf16", 8, (2, 2, 0, 4)),
])
def test_adamw_bytes_per_param(recipe, total, parts):
    b = bytes_per_param(get_recipe(recipe), ADAMW)
    assert b["total"] == total
    assert (b["params"], b["grads"], b["master_params"], b["optimizer"]) == parts


def test_zero_k_is_12_for_mixed_adam():
    # ZeRO Sec. 3.1: K = 12 (fp32 master params, momentum, variance)
    b = bytes_per_param(get_recipe("mixed-fp16"), get_optimizer("adam"))
    assert b["master_params"] + b["optimizer"] == 12


@pytest.mark.parametrize("name, states", [("sgd", 0), ("momentum", 1), ("adagrad", 1), ("rmsprop", 1),
                                          ("rmsprop-centered", 2), ("adam", 2), ("adamw", 2)])
def test_state_counts(name, states):
    assert bytes_per_param(get_recipe("fp32"), get_optimizer(name))["optimizer"] == 4 * states


def test_adam_8bit_ignores_recipe_state_dtype():
    # Dettmers et al. 2021: 1-byte states whatever the recipe, + fp32 absmax per 2048-element block
    for recipe in RECIPES:
        assert bytes_per_param(get_recipe(recipe), get_optimizer("adam-8bit"))["optimizer"] == pytest.approx(2 * (1 + 4 / 2048))


def test_adafactor_needs_shapes():
    with pytest.raises(TrainledgerError, match="--optimizer"):
        bytes_per_param(get_recipe("fp32"), get_optimizer("adafactor"))
    assert bytes_per_param(get_recipe("fp32"), get_optimizer("adafactor"), 0.01)["optimizer"] == pytest.approx(0.04)


def test_unknown_names_list_known():
    with pytest.raises(TrainledgerError, match="mixed-bf16") as e:
        get_recipe("fp64")
    assert "--precision" in str(e.value)
    with pytest.raises(TrainledgerError, match="adamw") as e:
        get_optimizer("lion")
    assert "--optimizer" in str(e.value)


def test_every_entry_has_a_source():
    assert all(r.source for r in RECIPES.values()) and all(o.source for o in OPTIMIZERS.values())
