"""Korthikanti et al. 2022 (arXiv:2205.05198) Table 2: the six per-layer activation formulas.

Each formula is checked twice: against a hand computation at GPT-3 175B sizes, and against an
independent enumeration of the tensors of Sec. 4.1 (which tensor, its bytes, whether tensor parallelism
splits it, whether selective recompute drops it), so a wrong coefficient in either place fails.
"""

import pytest

from trainledger.account.counting import korthikanti as K
# Sec. 4.1, one layer, 16-bit activations, 1-byte dropout masks.
# (name, bytes as a function of s, b, h, a, split by tensor parallelism, dropped by selective recompute)
TENSORS = [
    # attention block: 11sbh + 5as²b
    ("QKV input (LayerNorm output)", lambda s, b, h, a: 2 * s * b * h, False, False),
    ("Q and K for QKᵀ", lambda s, b, h, a: 4 * s * b * h, True, False),
    ("softmax output", lambda s, b, h, a: 2 * a * s * s * b, True, True),
    ("softmax dropout mask", lambda s, b, h, a: a * s * s * b, True, True),
    ("dropout output (A in A·V)", lambda s, b, h, a: 2 * a * s * s * b, True, True),
    ("V for A·V", lambda s, b, h, a: 2 * s * b * h, True, False),
    ("output projection input", lambda s, b, h, a: 2 * s * b * h, True, False),
    ("attention dropout mask", lambda s, b, h, a: s * b * h, False, False),
    # MLP: 19sbh
    ("first linear input", lambda s, b, h, a: 2 * s * b * h, False, False),
    ("GeLU input (4h)", lambda s, b, h, a: 8 * s * b * h, True, False),
    ("second linear input (4h)", lambda s, b, h, a: 8 * s * b * h, True, False),
    ("MLP dropout mask", lambda s, b, h, a: s * b * h, False, False),
    # two LayerNorms: 4sbh
    ("LayerNorm 1 input", lambda s, b, h, a: 2 * s * b * h, False, False),
    ("LayerNorm 2 input", lambda s, b, h, a: 2 * s * b * h, False, False),
]


def enumerate_bytes(s, b, h, a, t=1, sequence_parallel=False, selective=False):
    """Sum of the tensors above: split by t if tensor parallelism (or sequence parallelism) splits them."""
    total = 0.0
    for _, size, tp_split, recomputed in TENSORS:
        if selective and recomputed:
            continue
        total += size(s, b, h, a) / (t if (tp_split or sequence_parallel) else 1)
    return total


# GPT-3 175B (Korthikanti Table 3): s=2048, b=1, h=12288, a=96, t=8
S, B, H, A, T = 2048, 1, 12288, 96, 8


def test_enumeration_is_34_sbh_plus_5_as2b():
    assert enumerate_bytes(S, B, H, A) == 34 * S * B * H + 5 * A * S * S * B


def test_no_parallelism():
    expected = S * B * H * 34 + 5 * A * S * S * B            # hand: 34sbh + 5as²b
    assert K.no_parallelism_bytes_per_layer(S, B, H, A) == pytest.approx(expected)
    assert K.no_parallelism_bytes_per_layer(S, B, H, A) == pytest.approx(enumerate_bytes(S, B, H, A))
    assert expected == 2_868_903_936                         # 855,638,016 + 2,013,265,920 bytes: the s² term dominates


def test_tensor_parallel():
    hand = S * B * H * (10 + 24 / T) + 5 * A * S * S * B / T
    assert K.tensor_parallel_bytes_per_layer(S, B, H, A, T) == pytest.approx(hand)
    assert K.tensor_parallel_bytes_per_layer(S, B, H, A, T) == pytest.approx(enumerate_bytes(S, B, H, A, t=T))


def test_tensor_sequence_parallel():
    hand = (34 * S * B * H + 5 * A * S * S * B) / T
    assert K.tensor_sequence_parallel_bytes_per_layer(S, B, H, A, T) == pytest.approx(hand)
    assert K.tensor_sequence_parallel_bytes_per_layer(S, B, H, A, T) == pytest.approx(
        enumerate_bytes(S, B, H, A, t=T, sequence_parallel=True))


def test_tensor_parallel_selective():
    hand = S * B * H * (10 + 3)                               # 24/8 = 3
    assert K.tensor_parallel_selective_bytes_per_layer(S, B, H, T) == pytest.approx(hand)
    assert K.tensor_parallel_selective_bytes_per_layer(S, B, H, T) == pytest.approx(
        enumerate_bytes(S, B, H, A, t=T, selective=True))


def test_tensor_sequence_parallel_selective():
    hand = 34 * S * B * H / 8
    assert K.tensor_sequence_parallel_selective_bytes_per_layer(S, B, H, T) == pytest.approx(hand)
    assert K.tensor_sequence_parallel_selective_bytes_per_layer(S, B, H, T) == pytest.approx(
        enumerate_bytes(S, B, H, A, t=T, sequence_parallel=True, selective=True))


def test_full_recompute_keeps_the_16_bit_layer_input():
    assert K.full_recompute_bytes_per_layer(S, B, H) == 2 * S * B * H == 50_331_648


@pytest.mark.parametrize("s, b, h, a, t", [(1024, 4, 1024, 16, 2), (4096, 2, 8192, 64, 4), (512, 8, 768, 12, 1)])
def test_rows_agree_with_enumeration_at_other_sizes(s, b, h, a, t):
    assert K.no_parallelism_bytes_per_layer(s, b, h, a) == pytest.approx(enumerate_bytes(s, b, h, a))
    assert K.tensor_parallel_bytes_per_layer(s, b, h, a, t) == pytest.approx(enumerate_bytes(s, b, h, a, t=t))
    assert K.tensor_sequence_parallel_bytes_per_layer(s, b, h, a, t) == pytest.approx(enumerate_bytes(s, b, h, a, t, True))
    assert K.tensor_parallel_selective_bytes_per_layer(s, b, h, t) == pytest.approx(enumerate_bytes(s, b, h, a, t, selective=True))
    assert K.tensor_sequence_parallel_selective_bytes_per_layer(s, b, h, t) == pytest.approx(enumerate_bytes(s, b, h, a, t, True, True))


def test_first_pipeline_stage_holds_l_layers():
    # Sec. 4.2: first stage of p holds p micro-batches × L/p layers = L layers' worth
    per_layer = K.tensor_sequence_parallel_selective_bytes_per_layer(S, B, H, T)
    assert K.first_stage_bytes(per_layer, 96) == pytest.approx(96 * 34 * S * B * H / T)
