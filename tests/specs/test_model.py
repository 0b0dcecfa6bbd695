"""TransformerSpec helpers (specs/model.py)."""

from trainledger.specs.presets import PRESETS


def test_layer_groups_count_every_layer_once_without_walking_them():
    """Per-layer sums go over kinds of layers: O(named layers), so 10^400 layers (a web request) answers at once."""
    gemma = PRESETS["gemma-2-2b"]
    groups = gemma.layer_groups()
    assert sum(count for _, count in groups) == gemma.n_layers
    assert sum(count for layer, count in groups if gemma.is_sliding(layer)) == sum(map(gemma.is_sliding, range(gemma.n_layers)))
    moe = PRESETS["qwen1.5-moe-a2.7b"].with_(dense_layers=(0, 5), dense_d_ff=1024)
    assert moe.n_moe_layers == moe.n_layers - 2 == sum(map(moe.is_moe_layer, range(moe.n_layers)))
    huge = PRESETS["gpt2"].with_(n_layers=10**400)
    assert huge.layer_groups() == [(0, 10**400)] and huge.n_moe_layers == 0
