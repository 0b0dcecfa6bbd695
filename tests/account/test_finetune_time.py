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


def _step(method: str, **kw):
    from trainledger.account.time.step import step_time
    from trainledger.specs import PRESETS
    from trainledger.specs.hardware import get_gpu
    from trainledger.specs.run import Batch, Hardware, Numerics, Run
    run = Run(batch=Batch(batch_size=2, seq_len=2048), numerics=Numerics(precision="bf16"),
              finetune=Finetune(method=method, **kw))
    return step_time(PRESETS["llama-3.1-8b"], Hardware(get_gpu("rtx-4090"), 1), run, with_memory=False)


def test_a_lora_step_is_faster_than_full_and_qlora_slower_than_lora_by_the_dequantization():
    full, lora, qlora = _step("full"), _step("lora"), _step("qlora")
    assert lora["step_seconds"] < full["step_seconds"]
    assert lora["breakdown"]["compute"] < 0.75 * full["breakdown"]["compute"]     # no weight-gradient GEMMs
    assert lora["breakdown"]["optimizer"] < 1e-3 * full["breakdown"]["optimizer"]  # 3.4 M adapters, not 8 B
    extra = qlora["breakdown"]["memory_bound"] - lora["breakdown"]["memory_bound"]
    assert qlora["step_seconds"] > lora["step_seconds"] and extra > 0
    # the dequantization reads each stored NF4 weight and writes its bf16 copy, forward and backward
    from trainledger.account.finetune.quant import quantized_base_bytes
    from trainledger.specs import PRESETS
    base = quantized_base_bytes(PRESETS["llama-3.1-8b"], "nf4-dq")
    assert lora["mfu_convention"].startswith("model FLOPs = the FLOPs the step needs")
    assert base["quantized_weight_bytes"] > 0


def test_step_answers_with_the_trainable_and_frozen_counts_memory_gives():
    """`step --json` carries trainable_params and frozen_params, the counts `memory` gives for the same run."""
    from trainledger.account.memory.per_gpu import memory_per_gpu
    from trainledger.account.time.step import step_time
    from trainledger.specs import get_model
    from trainledger.specs.hardware import get_gpu
    from trainledger.specs.run import Hardware, Run
    spec, hardware = get_model("llama-3-8b"), Hardware(get_gpu("rtx-a6000"), 1)
    run = Run().with_(batch_size=1, seq_len=1024, method="lora", lora_targets="all-linear", precision="bf16")
    step, memory = step_time(spec, hardware, run), memory_per_gpu(spec, hardware, run)
    assert step["trainable_params"] == memory["trainable_params"] > 0
    assert step["frozen_params"] == memory["frozen_params"] > 100 * step["trainable_params"]
