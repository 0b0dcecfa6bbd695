"""LoRA's trainable and frozen parameters (a count), from the projections account.finetune.targets maps roles onto.

LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", arXiv:2106.09685, Sec. 4.1) trains
W + B·A beside a frozen W of d_out × d_in, with A of r × d_in and B of d_out × r: r·(d_in + d_out) parameters per
adapted matrix. The shared reference's example: Llama 2 7B, r = 8 on q and v of 32 layers,
32 · 2 · 8 · (4096 + 4096) = 4,194,304.

A fused projection (GPT-NeoX's and Falcon's query_key_value, GPT-2's c_attn, Phi-3's qkv_proj and gate_up_proj)
is counted two ways:
- fused="parts" (what a role means here): the adapter covers the chosen parts only, one A of r × d_in shared by
  them and a B with rows for the chosen parts: r·(d_in + chosen rows). "q,v" on Falcon-7B's query_key_value
  (4544 -> 4544 + 2·64) has r·(4544 + 4544 + 64).
- fused="whole" (PEFT): PEFT adapts the whole module its name targets (peft.tuners.lora.layer.Linear:
  lora_A in_features -> r, lora_B r -> out_features), so naming query_key_value for "q,v" trains
  r·(4544 + 4672): the count PEFT's get_nb_trainable_parameters reports for targets.peft_target_modules().
On families without fused projections the two are equal. PEFT's defaults are assumed: bias="none" (no bias is
trained), no modules_to_save, no DoRA magnitude vectors. Every base parameter is frozen.
"""

from __future__ import annotations

from trainledger.account.counting.params import n_params
from trainledger.account.finetune.targets import Projection, targeted
from trainledger.errors import TrainledgerError

FUSED = ("parts", "whole")


def lora_params(projection: Projection, rank: int, rows: int) -> int:
    """Adapter parameters on every module of `projection` (a count): r·(d_in + rows) each, `rows` the output rows
    the adapter's B covers (Hu et al. 2021, Sec. 4.1)."""
    return projection.count * rank * (projection.in_features + rows)


def check_lora_rank(spec, rank, targets, flag: str = "--lora-rank") -> int:
    """`rank` as an int, after checking it is a positive integer no larger than any adapted matrix's narrower side
    (a rank beyond min(d_in, rows) adds parameters and no expressiveness: B·A has rank <= that); a one-line error
    naming `flag` otherwise."""
    if isinstance(rank, bool) or not isinstance(rank, int) or rank <= 0:
        raise TrainledgerError(f"{flag} must be a positive integer, got {rank!r}")
    for projection, rows in targeted(spec, targets):
        width = min(projection.in_features, rows)
        if rank > width:
            raise TrainledgerError(f"{flag} {rank} is above the width {width} of {projection.module} "
                                   f"({projection.in_features} -> {rows} adapted rows); give at most {width}")
    return rank


def lora_trainable_params(spec, rank: int, targets, fused: str = "parts") -> int:
    """Trainable parameters of LoRA of rank `rank` on the roles `targets` (a count): the sum of lora_params over the
    targeted projections, a fused one counted on its chosen parts (fused="parts") or whole (fused="whole", PEFT)."""
    if fused not in FUSED:
        raise TrainledgerError(f"fused must be one of {', '.join(FUSED)}, got {fused!r}")
    rank = check_lora_rank(spec, rank, targets)
    return sum(lora_params(p, rank, rows if fused == "parts" else p.out_features) for p, rows in targeted(spec, targets))


def lora_frozen_params(spec) -> int:
    """Frozen parameters under LoRA (a count): every base parameter, n_params(spec) (PEFT's all_param minus its
    trainable count, with bias="none")."""
    return n_params(spec)


def lora_breakdown(spec, rank: int, targets) -> list[dict]:
    """Per targeted projection: module, count, in_features, out_features, adapted_rows, params (the chosen parts,
    all modules of the kind) and params_whole (PEFT's count of the module), for tables and JSON."""
    rank = check_lora_rank(spec, rank, targets)
    return [{"module": p.module, "count": p.count, "in_features": p.in_features, "out_features": p.out_features,
             "adapted_rows": rows, "params": lora_params(p, rank, rows), "params_whole": lora_params(p, rank, p.out_features)}
            for p, rows in targeted(spec, targets)]
