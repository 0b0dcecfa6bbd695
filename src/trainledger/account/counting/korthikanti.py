"""Published reference formulas: activation bytes per layer and FLOPs per iteration of a GPT-style transformer.

Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models"
(arXiv:2205.05198). Symbols: s sequence length, b micro-batch size, h hidden size, a attention heads,
t tensor-parallel size, L layers, V vocabulary, B global batch. 16-bit activations, 1-byte dropout
masks, LayerNorm (not RMSNorm), a 4h GELU MLP, no flash attention (the s×s scores are stored).

Per layer (Sec. 4.1, Table 2): attention 11sbh + 5as²b, MLP 19sbh, two LayerNorms 4sbh → sbh(34 + 5as/h).

These are the paper's figures for the paper's model, kept as a reference to test against. What OUR
torch model saves (RMSNorm fp32 copies, SwiGLU, fp32 logits) is predicted by account.memory.activations.
"""

from __future__ import annotations


def no_parallelism_bytes_per_layer(s: float, b: float, h: float, a: float) -> float:
    """Activation bytes of one layer without parallelism: sbh(34 + 5as/h) (Table 2, row 1)."""
    return s * b * h * (34 + 5 * a * s / h)


def tensor_parallel_bytes_per_layer(s: float, b: float, h: float, a: float, t: float) -> float:
    """Bytes per layer per GPU with tensor parallelism: sbh(10 + 24/t + 5as/(ht)) (Table 2, row 2; Eq. 2)."""
    return s * b * h * (10 + 24 / t + 5 * a * s / (h * t))


def tensor_sequence_parallel_bytes_per_layer(s: float, b: float, h: float, a: float, t: float) -> float:
    """Bytes per layer per GPU with tensor + sequence parallelism: sbh/t·(34 + 5as/h) (Table 2, row 3; Eq. 4)."""
    return s * b * h / t * (34 + 5 * a * s / h)


def tensor_parallel_selective_bytes_per_layer(s: float, b: float, h: float, t: float) -> float:
    """Bytes per layer per GPU, tensor parallel + selective recompute: sbh(10 + 24/t) (Table 2, row 4)."""
    return s * b * h * (10 + 24 / t)


def tensor_sequence_parallel_selective_bytes_per_layer(s: float, b: float, h: float, t: float) -> float:
    """Bytes per layer per GPU, tensor + sequence parallel + selective recompute: 34·sbh/t (Table 2, row 5; Eq. 6)."""
    return 34 * s * b * h / t


def full_recompute_bytes_per_layer(s: float, b: float, h: float) -> float:
    """Bytes per layer with full recompute: 2sbh, the 16-bit layer input only (Table 2, row 6)."""
    return 2 * s * b * h


def first_stage_bytes(bytes_per_layer: float, n_layers: int) -> float:
    """Activation bytes on the first pipeline stage under 1F1B: L × bytes per layer (Sec. 4.2).

    The first of p stages holds L/p layers for p micro-batches in flight (Narayanan et al. 2021,
    arXiv:2104.04473, Sec. 2.2: PipeDream-Flush/1F1B), i.e. L layers' worth whatever p is.
    Leaves out the embedding dropout and the output layer (Sec. 4.3).
    """
    return n_layers * bytes_per_layer


def model_flops_per_iteration(B: float, s: float, L: float, h: float, V: float) -> float:
    """Model FLOPs of one training iteration: 72·B·L·s·h²·(1 + s/(6h) + V/(12hL)) (Korthikanti App. A, Eq. 7).

    Forward per layer 24Bsh² + 4Bs²h (full s×s attention), LM head 2BshV, times 3 for forward + backward.
    """
    return 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))


def selective_recompute_hardware_flops_per_iteration(B: float, s: float, L: float, h: float, V: float) -> float:
    """Hardware FLOPs with selective recompute: 72·B·L·s·h²·(1 + s/(3h) + V/(12hL)) (Korthikanti App. A)."""
    return 72 * B * L * s * h**2 * (1 + s / (3 * h) + V / (12 * h * L))


def megatron_flops_per_iteration(B: float, s: float, l: float, h: float, V: float) -> float:
    """FLOPs per iteration with full recompute: 96·B·s·l·h²·(1 + s/(6h) + V/(16lh)) (Narayanan et al. 2021, arXiv:2104.04473, Eq. 3)."""
    return 96 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
