"""memory_per_gpu of LoRA / QLoRA runs and the memory levers (account/memory/finetune.py, levers.py) against the bytes
measure/finetune.py measures in a real step of the same run on CPU (real tensors), category by category, and the
one-line errors of the fine-tuning flags through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainledger.account.finetune.lora import lora_trainable_params
from trainledger.account.memory.per_gpu import memory_per_gpu
from trainledger.specs import get_model
from trainledger.specs.run import Hardware, Run

TINY = get_model("tiny")     # d_model 128, d_ff 512, 4 layers, vocab 256: every Linear NF4-quantizable
CASES = {   # name: (spec, measure/finetune.py keywords, the run's fields)
    "lora": (TINY, {}, {"method": "lora"}),
    "qlora": (TINY, {"quantize": "nf4-dq"}, {"method": "qlora"}),
    "lora-all-linear": (TINY, {"lora": "all"}, {"method": "lora", "lora_targets": "all-linear"}),
    "lora-bf16": (TINY, {"precision": "bf16"}, {"method": "lora", "precision": "bf16"}),
    "lora-in-backward": (TINY, {"levers": {"optimizer_in_backward": True}}, {"method": "lora", "optimizer_in_backward": True}),
    "full-in-backward-1x8": (TINY, {"lora": None, "levers": {"optimizer_in_backward": True}, "shape": (1, 8)},
                             {"optimizer_in_backward": True, "shape": (1, 8)}),
    "lora-offload": (TINY, {"levers": {"activation_offload": True}}, {"method": "lora", "activation_offload": True}),
    "full-offload": (TINY, {"lora": None, "levers": {"activation_offload": True}}, {"activation_offload": True}),
    "lora-r32-adamw-8bit": (TINY, {"lora": "r32", "levers": {"optimizer": "adamw-8bit"}},
                            {"method": "lora", "lora_rank": 32, "optimizer": "adamw-8bit"}),
    "full-chunked-v4096": (TINY.with_(vocab_size=4096), {"lora": None, "levers": {"chunked_loss": 4}}, {"chunked_loss": 4}),
    "lora-chunked-v4096": (TINY.with_(vocab_size=4096), {"levers": {"chunked_loss": 4}}, {"method": "lora", "chunked_loss": 4}),
}


def _measured(spec, kwargs):
    from trainledger.measure.finetune import Levers, finetune_step_memory
    from trainledger.models.lora import LoRASettings
    kwargs = dict(kwargs)
    if kwargs.get("lora") == "all":
        kwargs["lora"] = LoRASettings(targets=("all-linear",))
    if kwargs.get("lora") == "r32":      # A and B of 32 × 128 = 4096 values: torchao's 8-bit states
        kwargs["lora"] = LoRASettings(rank=32, alpha=64.0)
    if "levers" in kwargs:
        kwargs["levers"] = Levers(**kwargs["levers"])
    batch_size, seq_len = kwargs.pop("shape", (4, 64))
    return finetune_step_memory(spec, batch_size=batch_size, seq_len=seq_len, **kwargs)


def _predicted(spec, fields):
    fields = {"precision": "fp32", **fields}
    batch_size, seq_len = fields.pop("shape", (4, 64))
    return memory_per_gpu(spec, Hardware(None), Run().with_(batch_size=batch_size, seq_len=seq_len, reserve=0, **fields))


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if "8bit" in n else n for n in CASES])
def test_predicted_equals_measured_by_category(name):
    pytest.importorskip("torchao", reason="measure/finetune.py's quantized bases are torchao's")
    spec, measure_kwargs, fields = CASES[name]
    measured, predicted = _measured(spec, measure_kwargs), _predicted(spec, fields)
    params = sum(measured[k] for k in ("trainable_params_bytes", "frozen_params_bytes", "quantized_weights_bytes",
                                       "quantization_constants_bytes"))
    # torchao's constants are read as their storages (measure/finetune.py), which we count as tensors: within 2.2 %
    assert predicted["params_bytes"] == pytest.approx(params, rel=0.022)
    for key in ("grads_bytes", "optimizer_bytes", "activations_bytes"):
        assert predicted[key] == pytest.approx(measured[key], rel=0.02, abs=64), key
    assert predicted["host_bytes"] == pytest.approx(measured["host_activations_bytes"], rel=0.02, abs=64)
    assert predicted["peak_bytes"] == pytest.approx(measured["peak_bytes"] - measured["inputs_bytes"], rel=0.02)
    assert predicted["trainable_params"] == measured["trainable_params"]
    assert predicted["frozen_params"] == measured["frozen_params"]


def test_quantized_codes_and_frozen_bytes_equal_the_measured():
    pytest.importorskip("torchao")
    measured, predicted = _measured(TINY, {"quantize": "nf4-dq"}), _predicted(TINY, {"method": "qlora"})
    parts = predicted["finetune_parts"]
    for key in ("trainable_params_bytes", "frozen_params_bytes", "quantized_weights_bytes"):
        assert parts[key] == measured[key], key


@pytest.mark.parametrize("targets", ["q,v", "all-linear", "q,k,v,o,gate,up,down"])
@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen2.5-7b", "gpt2"])
def test_trainable_params_are_loras_count(model, targets):
    # account/finetune/lora.py's count is checked against PEFT's in tests/account/test_finetune_lora.py
    spec = get_model(model)
    m = memory_per_gpu(spec, Hardware(None), Run().with_(method="lora", lora_targets=targets, seq_len=256))
    assert m["trainable_params"] == lora_trainable_params(spec, 8, targets)
    assert m["frozen_params"] == m["n_params"]
    assert m["grads_bytes"] == 4 * m["trainable_params"]          # amp-bf16: fp32 adapters and gradients


def test_llama_8b_on_a_4090_fits_with_qlora_not_full_bf16_adamw():
    from trainledger.specs.hardware import get_gpu
    spec, hw = get_model("llama-3.1-8b"), Hardware(get_gpu("rtx-4090"), 1)
    base = Run().with_(batch_size=2, seq_len=2048)
    assert not memory_per_gpu(spec, hw, base.with_(precision="bf16"))["fits"]
    # torchtune's QLoRA recipe config (llama3_1/8B_qlora_single_device.yaml) checkpoints activations
    qlora = memory_per_gpu(spec, hw, base.with_(method="qlora", precision="bf16", recompute="full"))
    assert qlora["fits"] and qlora["trainable_params"] == 3_407_872       # r 8 on q, v: 32·(8·(4096+4096) + 8·(4096+1024))


def _cli(*args):
    code = "import sys; from trainledger.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)


@pytest.mark.parametrize("args, flag", [
    (["--finetune", "lora", "--lora-rank", "0"], "--lora-rank"),
    (["--finetune", "lora", "--lora-rank", "5000"], "--lora-rank"),
    (["--finetune", "lora", "--lora-targets", "q,x"], "--lora-targets"),
    (["--quantize", "nf4", "--finetune", "full"], "--quantize"),
    (["--optimizer-in-backward", "--grad-accum", "4"], "--optimizer-in-backward"),
    (["--cpu-offload", "params", "--zero", "1", "--dp", "2"], "--cpu-offload"),
    (["--finetune", "lora", "--gpu", "t4", "--precision", "bf16"], "--precision"),
])
def test_bad_finetune_input_is_one_line_and_exit_2(args, flag):
    out = _cli("memory", "--model", "llama-3.2-1b", *args)
    assert out.returncode == 2, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and flag in out.stderr


def test_memory_json_reports_trainable_frozen_and_host_bytes():
    out = _cli("memory", "--model", "llama-3.2-1b", "--finetune", "qlora", "--activation-offload", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["trainable_params"] < 0.01 * result["frozen_params"]
    assert result["host_bytes"] > 0 and "--activation-offload" in result["levers"]


@pytest.mark.parametrize("model", ["tiny", "gpt2", "llama-3.2-1b", "qwen2.5-7b", "gemma-2-9b", "phi-3-mini"])
def test_model_tensors_are_the_transformers_parameters(model):
    torch = pytest.importorskip("torch")
    from trainledger.account.memory.finetune import model_tensors
    from trainledger.models import Transformer
    spec = get_model(model)
    with torch.device("meta"):
        real = sorted(p.numel() for p in Transformer(spec).parameters())
    assert sorted(n for n, c in model_tensors(spec) for _ in range(c)) == real


@pytest.mark.slow            # torch.compile of torchao's fused step
def test_full_training_adamw_8bit_states_tensor_by_tensor_equal_the_measured():
    pytest.importorskip("torchao")
    measured = _measured(TINY, {"lora": None, "levers": {"optimizer": "adamw-8bit"}})
    predicted = _predicted(TINY, {"optimizer": "adamw-8bit"})
    assert predicted["optimizer_bytes"] == measured["optimizer_bytes"]
    assert predicted["peak_bytes"] == pytest.approx(measured["peak_bytes"] - measured["inputs_bytes"], rel=0.02)


def test_offload_under_full_recompute_copies_each_block_input_once():
    """--activation-offload with --recompute full: the checkpointed blocks save only their inputs, so the host holds
    those (and the rest of what is saved) once each, with no second copy of the tensors two ops share inside a block."""
    kept = _predicted(TINY, {"method": "lora", "recompute": "full"})
    offloaded = _predicted(TINY, {"method": "lora", "recompute": "full", "activation_offload": True})
    loss = kept["activations"]["loss"]
    assert offloaded["host_bytes"] == pytest.approx(kept["activations_bytes"] + loss)
    assert offloaded["activations_bytes"] == 0
