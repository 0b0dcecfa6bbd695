"""Weights-only quantized inference (`infer --dtype nf4|nf4-dq|int8|int4`): the weight bytes equal the tensors
bitsandbytes and torchao make on CPU, a bandwidth-bound decoding step shrinks by the ratio of bytes it reads, the
prefill does not get faster, and bad input is one line with exit status 2 (account/time/inference.py,
account/finetune/quant.py)."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest

from trainledger.account.counting.params import n_params
from trainledger.account.finetune.quant import inference_weight_bytes, quantized_base_bytes, torchao_int4_bytes
from trainledger.account.time.inference import InferenceRequest, inference, kv_cache_bytes
from trainledger.cli.main import main
from trainledger.errors import TrainledgerError
from trainledger.specs import get_gpu, get_model
from trainledger.specs.hf_config import spec_from_config_dict

LLAMA31_8B = get_model("llama-3.1-8b")
TINY_LLAMA = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64}


def _nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _int4_opaque():
    """torchao's CPU int4 weight (prototype Int4OpaqueTensor, A16W4 tinygemm path): qdata (N, K/2) uint8 and
    scale_and_zero (K/group, N, 2) in the weight dtype -- the bytes of Int4Tensor's qdata + scale + zero_point, which
    needs the CUDA-only mslk kernels to build."""
    pytest.importorskip("torchao")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.prototype.quantization.int4.int4_opaque_tensor import Int4OpaqueTensor
    return Int4OpaqueTensor


@pytest.mark.parametrize("shape", [(256, 512), (1024, 4096), (4096, 1024), (384, 128)], ids=str)
def test_int4_bytes_are_torchaos_cpu_int4_tensor(shape):
    torch = pytest.importorskip("torch")
    w = torch.randn(*shape, dtype=torch.bfloat16)
    q = _int4_opaque().from_hp(w, [1, 128])
    measured = sum(_nbytes(getattr(q, name)) for name in q.tensor_data_names)
    rows, cols = shape
    assert torchao_int4_bytes(rows, cols)["total"] == measured
    # hand arithmetic, int4_tensor.py's layout: rows·cols/2 packed bytes, a bf16 scale and zero per 128-group
    assert measured == rows * cols // 2 + 2 * 2 * rows * cols // 128
    assert 8 * measured / w.numel() == pytest.approx(4.25)


def test_int4_whole_tiny_llama_equals_torchao_and_skips_what_torchao_skips():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = {k: v for k, v in TINY_LLAMA.items() if k != "model_type"}
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model("llama", **fields))
    model = model.to(torch.bfloat16)
    opaque, total, quantized = _int4_opaque(), 0, set()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and not name.endswith("lm_head"):
            q = opaque.from_hp(module.weight.detach(), [1, 128])
            total += sum(_nbytes(getattr(q, n)) for n in q.tensor_data_names)
            quantized.add(id(module.weight))
    total += sum(_nbytes(p) for p in {id(p): p for p in model.parameters() if id(p) not in quantized}.values())
    spec = spec_from_config_dict(TINY_LLAMA, name="tiny-llama")
    assert inference_weight_bytes(spec, "int4")["total_bytes"] == total
    # mlp_down's in_features 320 is no multiple of 128: torchao leaves such a Linear in bf16, and so do we
    odd = spec_from_config_dict(TINY_LLAMA | {"intermediate_size": 320}, name="odd")
    q = inference_weight_bytes(odd, "int4")
    # per layer q, o 256x256; k, v 256x128 (2 KV heads of 64); gate, up 256x320; two layers
    assert q["quantized_params"] == 2 * (2 * 256 * 256 + 2 * 256 * 128 + 2 * 256 * 320)
    assert q["total_bytes"] == q["quantized_weight_bytes"] + 2 * (n_params(odd) - q["quantized_params"])


@pytest.mark.parametrize("scheme", ["nf4", "nf4-dq", "int8"])
def test_bitsandbytes_schemes_are_the_bytes_quant_py_tests_against_the_library(scheme):
    """nf4, nf4-dq and int8 are bitsandbytes' Params4bit / Int8Params: the bytes test_finetune_quant.py checks against
    quantize_4bit and Linear8bitLt, tensor by tensor; one llama weight re-checked here against bitsandbytes."""
    spec = spec_from_config_dict(TINY_LLAMA, name="tiny-llama")
    assert inference_weight_bytes(spec, scheme) == quantized_base_bytes(spec, scheme, "bitsandbytes")
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bnb = pytest.importorskip("bitsandbytes")
        import bitsandbytes.functional as functional
    w = torch.randn(512, 256, dtype=torch.bfloat16)                        # mlp_up of the tiny llama
    if scheme == "int8":
        layer = bnb.nn.Linear8bitLt(256, 512, bias=False, has_fp16_weights=False)
        layer.weight.data = w.to(torch.float16)
        layer = layer.to("cpu")
        measured = _nbytes(layer.weight.data) + _nbytes(layer.weight.SCB)
    else:
        data, state = functional.quantize_4bit(w, blocksize=64, compress_statistics=scheme == "nf4-dq", quant_type="nf4")
        measured = _nbytes(data) + _nbytes(state.absmax) + _nbytes(state.code) + (
            _nbytes(state.state2.absmax) + _nbytes(state.state2.code) + _nbytes(state.offset) if scheme == "nf4-dq" else 0)
    from trainledger.account.finetune.quant import weight_bytes
    assert weight_bytes(512, 256, scheme, "bitsandbytes") == measured


def _decode_bytes(quantized: dict | None, request: InferenceRequest) -> float:
    """Bytes a batch-1 decoding step reads, by hand: every Linear of the layers (bf16, or its packed bytes), the bf16
    LM head (vocab · d; the embedding reads one row), the KV cache at the mean context."""
    spec = LLAMA31_8B
    head = spec.vocab_size * spec.d_model * 2
    layers = quantized["quantized_weight_bytes"] if quantized else 2 * (n_params(spec) - 2 * spec.vocab_size * spec.d_model)
    kv = kv_cache_bytes(spec, 1, round(request.prompt_len + request.gen_len / 2), 2)
    return layers + head + kv


@pytest.mark.parametrize("scheme", ["nf4", "nf4-dq", "int8", "int4"])
def test_batch_1_decode_is_faster_by_the_ratio_of_bytes_read(scheme):
    """Llama 3.1 8B on an H100, batch 1: the step is bandwidth-bound, so bf16 / nf4 time = bf16 / nf4 bytes read
    (15.0 GB vs 4.98 GB: 3.0x for nf4)."""
    request = InferenceRequest(batch_size=1, prompt_len=512, gen_len=128)
    bf16 = inference(LLAMA31_8B, get_gpu("h100"), request)
    q = inference(LLAMA31_8B, get_gpu("h100"), dataclasses.replace(request, dtype=scheme))
    assert not LLAMA31_8B.tied_embeddings
    byte_ratio = _decode_bytes(None, request) / _decode_bytes(inference_weight_bytes(LLAMA31_8B, scheme), request)
    time_ratio = bf16["decode_seconds_per_token"] / q["decode_seconds_per_token"]
    assert time_ratio == pytest.approx(byte_ratio, rel=0.02)
    if scheme == "nf4":
        assert 2.9 < time_ratio < 3.1
    assert q["kv_dtype"] == "bf16" and q["kv_cache_bytes"] == bf16["kv_cache_bytes"]


@pytest.mark.parametrize("scheme", ["nf4", "nf4-dq", "int8", "int4"])
def test_prefill_is_not_faster_and_bitsandbytes_4bit_pays_its_dequantize_past_1536_rows(scheme):
    h100 = get_gpu("h100")
    for prompt in (512, 4096):
        request = InferenceRequest(batch_size=1, prompt_len=prompt, gen_len=16)
        bf16 = inference(LLAMA31_8B, h100, request)["prefill_seconds"]
        q = inference(LLAMA31_8B, h100, dataclasses.replace(request, dtype=scheme))["prefill_seconds"]
        assert q >= bf16 * (1 - 1e-9)
        if prompt > 1536 and scheme in ("nf4", "nf4-dq"):
            # a dequantize kernel per Linear: packed bytes read + 2 bytes written a weight, at the bandwidth
            packed = inference_weight_bytes(LLAMA31_8B, scheme)
            copy = packed["quantized_weight_bytes"] + 2 * packed["quantized_params"]
            assert q - bf16 == pytest.approx(copy / h100.memory_bandwidth_bytes_per_s, rel=0.35)
        else:
            assert q == pytest.approx(bf16, rel=0.01)


def test_tensor_parallel_splits_the_quantized_linears():
    one, two = inference_weight_bytes(LLAMA31_8B, "nf4"), inference_weight_bytes(LLAMA31_8B, "nf4", tp=2)
    assert two["quantized_weight_bytes"] == one["quantized_weight_bytes"] / 2
    r = inference(LLAMA31_8B, get_gpu("h100"), InferenceRequest(dtype="nf4", tp=2))
    assert r["weights_bytes"] == two["total_bytes"] < one["total_bytes"]


def test_errors_name_the_flag():
    h100 = get_gpu("h100")
    with pytest.raises(TrainledgerError, match="--kv-dtype must be one of bf16, fp16, fp32, fp8, got 'nf4'") as e:
        inference(LLAMA31_8B, h100, InferenceRequest(dtype="nf4", kv_dtype="nf4"))
    assert e.value.flag == "--kv-dtype"
    with pytest.raises(TrainledgerError, match="--dtype must be one of") as e:
        inference(LLAMA31_8B, h100, InferenceRequest(dtype="nf5"))
    assert e.value.flag == "--dtype"
    with pytest.raises(TrainledgerError, match="--dtype nf4: .* mixture of experts"):
        inference(get_model("mixtral-8x7b"), h100, InferenceRequest(dtype="nf4"))
    cpu_like = dataclasses.replace(h100, name="cpu-like", peak_flops_per_s={"fp32": 1e12})
    with pytest.raises(TrainledgerError, match="--dtype int4 keeps the weights packed .* no bf16 matmul peak") as e:
        inference(LLAMA31_8B, cpu_like, InferenceRequest(dtype="int4"))
    assert e.value.flag == "--dtype"


def _run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_names_the_quantized_weights(capsys):
    code, out, _ = _run(capsys, "infer", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--dtype", "nf4")
    assert code == 0
    assert "nf4 Linears" in out and "bf16 embeddings, norms, LM head" in out and "bitsandbytes" in out
    code, out, _ = _run(capsys, "infer", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--dtype", "int4", "--json")
    r = json.loads(out)
    assert code == 0 and r["quantization_library"] == "torchao" and r["kv_dtype"] == "bf16"
    q = inference_weight_bytes(LLAMA31_8B, "int4")
    assert (r["quantized_weight_bytes"], r["unquantized_weight_bytes"], r["quantized_params"]) == (
        q["quantized_weight_bytes"], q["other_params_bytes"], q["quantized_params"])
    assert r["weights_bytes"] == r["quantized_weight_bytes"] + r["unquantized_weight_bytes"]
    code, out, _ = _run(capsys, "infer", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", "--json")
    r = json.loads(out)
    assert r["quantized_weight_bytes"] is None and r["quantization_library"] is None


@pytest.mark.parametrize("argv, flag", [(["--dtype", "nf5"], "--dtype"), (["--dtype", "nf4", "--kv-dtype", "nf4"], "--kv-dtype"),
                                        (["--kv-dtype", "int4"], "--kv-dtype")])
def test_cli_bad_input_is_one_line_exit_2(capsys, argv, flag):
    code, _, err = _run(capsys, "infer", "--model", "llama-3.1-8b", "--gpu", "rtx-4090", *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and flag in err and "Traceback" not in err
