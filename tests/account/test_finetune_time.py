"""Fine-tuning FLOPs (account/time/finetune.py) against what torch actually runs: FlopCounterMode on CPU over a
LoRA step of our Transformer (models/lora.py, the base frozen). SDPA on the math backend (FlopCounterMode counts 0
for the CPU flash kernel; tests/models/test_model_flops.py)."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from trainledger.account.time.finetune import finetune_flops_per_token
from trainledger.models import Transformer
from trainledger.models.lora import LoRASettings, apply_lora, parse_targets
from trainledger.specs.model import TransformerSpec
from trainledger.specs.run import Finetune

B, T = 2, 16
SPEC = TransformerSpec(name="t", vocab_size=64, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=48,
                       max_seq_len=T)


def _counted(spec, targets: str, rank: int = 4) -> tuple[int, int]:
    torch.manual_seed(0)
    model = Transformer(spec)
    apply_lora(model, LoRASettings(rank=rank, alpha=8.0, targets=parse_targets(targets)))
    idx = torch.randint(0, spec.vocab_size, (B, T))
    with sdpa_kernel(SDPBackend.MATH):
        with FlopCounterMode(display=False) as fwd:
            _, loss = model(idx, idx)
        with FlopCounterMode(display=False) as bwd:
            loss.backward()
    return fwd.get_total_flops(), bwd.get_total_flops()


@pytest.mark.parametrize("targets", ["q,v", "all-linear", "k", "o,down", "q,k,v,o,gate,up,down"])
def test_lora_step_flops_equal_what_torch_counts(targets):
    forward, backward = _counted(SPEC, targets)
    predicted = finetune_flops_per_token(SPEC, T, Finetune(method="lora", lora_rank=4, lora_targets=targets))
    assert predicted["forward"] * B * T == forward
    assert predicted["total"] * B * T == forward + backward


def test_the_skipped_weight_gradients_show_in_the_counted_flops():
    forward, backward = _counted(SPEC, "q,v")
    full = finetune_flops_per_token(SPEC, T, Finetune())
    lora = finetune_flops_per_token(SPEC, T, Finetune(method="lora", lora_rank=4, lora_targets="q,v"))
    # a full step's backward is twice its forward; LoRA's is about half of that: no weight gradient
    assert backward < 0.6 * 2 * forward
    assert lora["total"] < full["total"] * 0.72
    assert lora["skipped_weight_grad"] > 0
