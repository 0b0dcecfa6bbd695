"""Quantized storage of frozen weights (account/finetune/quant.py) equals the bytes of the tensors torchao and
bitsandbytes make of real tensors (CPU), weight by weight and for whole models, and reproduces QLoRA's figures
(Dettmers et al. 2023, arXiv:2305.14314, Sec. 3)."""

import warnings

import pytest

from trainledger.account.counting.params import n_params
from trainledger.account.finetune.quant import (bnb_int8_bytes, bnb_nf4_bytes, quantized_base_bytes, torchao_nf4_bytes,
                                                weight_bytes)
from trainledger.errors import TrainledgerError
from trainledger.specs import get_model
from trainledger.specs.hf_config import spec_from_config_dict

torch = pytest.importorskip("torch")

SHAPES = [(256, 64), (4096, 1024), (1024, 4096), (3584, 512), (128, 512), (64, 65536)]


def _nbytes(tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _to_nf4():
    pytest.importorskip("torchao")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import to_nf4
    return to_nf4


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["bfloat16", "float32", "float16"])
def test_torchao_nf4_bytes_are_its_inner_tensors(shape, dtype):
    """torchao's NF4Tensor holds quantized_data, quantized_scalers, quantization_factor, scaler_mean and the nf4 lookup
    (__tensor_flatten__): their bytes, one by one, are the prediction."""
    t = torch.randn(*shape, dtype=getattr(torch, dtype))
    q = _to_nf4()(t, 64, 256)
    names, _ = q.__tensor_flatten__()
    measured = {name: _nbytes(getattr(q, name)) for name in names}
    predicted = torchao_nf4_bytes(t.numel(), t.element_size())
    assert predicted == measured | {"total": sum(measured.values())}


def test_torchao_refuses_what_it_cannot_store():
    with pytest.raises(AssertionError):
        _to_nf4()(torch.randn(64, 64), 64, 256)           # 64 blocks of 64: not a multiple of 256
    with pytest.raises(TrainledgerError, match="divisible"):
        torchao_nf4_bytes(64 * 64)


def _bnb():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bnb = pytest.importorskip("bitsandbytes")
        import bitsandbytes.functional as functional
    return bnb, functional


@pytest.mark.parametrize("shape", SHAPES + [(7, 100), (3, 1000)], ids=str)
@pytest.mark.parametrize("double_quant", [False, True])
def test_bitsandbytes_nf4_bytes_are_its_quant_state(shape, double_quant):
    """bitsandbytes' quantize_4bit (nf4, 64-blocks, uint8 storage): the packed data and every tensor of its
    QuantState (absmax, code; with compress_statistics the nested absmax and code and the offset)."""
    _, functional = _bnb()
    t = torch.randn(*shape, dtype=torch.bfloat16)
    data, state = functional.quantize_4bit(t, blocksize=64, compress_statistics=double_quant, quant_type="nf4")
    measured = {"data": _nbytes(data), "absmax": _nbytes(state.absmax), "code": _nbytes(state.code)}
    if double_quant:
        measured |= {"nested_absmax": _nbytes(state.state2.absmax), "nested_code": _nbytes(state.state2.code),
                     "offset": _nbytes(state.offset)}
    assert bnb_nf4_bytes(t.numel(), double_quant) == measured | {"total": sum(measured.values())}


@pytest.mark.parametrize("shape", [(128, 256), (4096, 1024), (3, 7)], ids=str)
def test_bitsandbytes_int8_bytes_are_its_int8_params(shape):
    """LLM.int8 as bitsandbytes stores a frozen Linear (Linear8bitLt, has_fp16_weights=False): CB int8, SCB fp32 a row."""
    bnb, _ = _bnb()
    rows, cols = shape
    layer = bnb.nn.Linear8bitLt(cols, rows, bias=False, has_fp16_weights=False)
    layer.weight.data = torch.randn(rows, cols, dtype=torch.float16)
    layer = layer.to("cpu")
    assert bnb_int8_bytes(rows, cols) == {"CB": _nbytes(layer.weight.data), "SCB": _nbytes(layer.weight.SCB),
                                          "total": _nbytes(layer.weight.data) + _nbytes(layer.weight.SCB)}


def test_qlora_section_3_figures():
    """QLoRA Sec. 3: NF4's absmax constants cost 32/64 = 0.5 bits a weight; double quantization 8/64 + 32/(64·256)
    = 0.127 bits, "a reduction of 0.373 bits per parameter", "approximately 3 GB for a 65B model" (Sec. 1)."""
    n = 64 * 256 * 4096
    nf4, dq = bnb_nf4_bytes(n, False), bnb_nf4_bytes(n, True)
    nf4_constants = 8 * nf4["absmax"] / n
    dq_constants = 8 * (dq["absmax"] + dq["nested_absmax"]) / n
    assert nf4_constants == pytest.approx(0.5, abs=1e-12)
    assert round(dq_constants, 3) == 0.127 and round(nf4_constants - dq_constants, 3) == 0.373
    assert (nf4_constants - dq_constants) * 65e9 / 8 == pytest.approx(3e9, rel=0.02)
    assert 8 * nf4["total"] / n == pytest.approx(4.5, rel=1e-4) and 8 * dq["total"] / n == pytest.approx(4.127, rel=1e-4)
    # torchao keeps its second-level constants in the weight dtype: 16/(64·256) instead of 32/(64·256) in bf16
    assert 8 * torchao_nf4_bytes(n)["total"] / n == pytest.approx(4 + 8 / 64 + 16 / (64 * 256), rel=1e-6)


# Whole models: every Linear (GPT-2: Conv1D) of transformers' model but the head quantized as the library does it, the
# rest in bf16; the bytes of all of it against quantized_base_bytes. Dims divisible as torchao needs.
TINY = {
    "llama": {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64},
    "gpt_neox": {"model_type": "gpt_neox", "hidden_size": 256, "intermediate_size": 1024, "num_attention_heads": 4,
                 "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64},
    "gpt2": {"model_type": "gpt2", "n_embd": 256, "n_head": 4, "n_layer": 2, "n_positions": 64, "vocab_size": 128,
             "bos_token_id": 0, "eos_token_id": 0},
}


def _quantized_model_bytes(config: dict, scheme: str, library: str) -> int:
    transformers = pytest.importorskip("transformers")
    from transformers.pytorch_utils import Conv1D

    torch.manual_seed(0)
    fields = {k: v for k, v in config.items() if k != "model_type"}
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(config["model_type"], **fields))
    model = model.to(torch.bfloat16)
    total, quantized = 0, set()
    for name, module in model.named_modules():
        if isinstance(module, (torch.nn.Linear, Conv1D)) and not name.endswith("lm_head"):
            w = module.weight.detach()
            quantized.add(id(module.weight))
            if library == "torchao":
                q = _to_nf4()(w.contiguous(), 64, 256)
                total += sum(_nbytes(getattr(q, n)) for n in q.__tensor_flatten__()[0])
            elif scheme == "int8":
                bnb, _ = _bnb()
                rows, cols = (w.shape[1], w.shape[0]) if isinstance(module, Conv1D) else w.shape
                layer = bnb.nn.Linear8bitLt(cols, rows, bias=False, has_fp16_weights=False)
                layer.weight.data = w.reshape(rows, cols).to(torch.float16)
                layer = layer.to("cpu")
                total += _nbytes(layer.weight.data) + _nbytes(layer.weight.SCB)
            else:
                _, functional = _bnb()
                data, state = functional.quantize_4bit(w, blocksize=64, compress_statistics=scheme == "nf4-dq",
                                                       quant_type="nf4")
                total += _nbytes(data) + _nbytes(state.absmax) + _nbytes(state.code)
                if scheme == "nf4-dq":
                    total += _nbytes(state.state2.absmax) + _nbytes(state.state2.code) + _nbytes(state.offset)
    rest = {id(p): p for p in model.parameters() if id(p) not in quantized}
    return total + sum(_nbytes(p) for p in rest.values())


@pytest.mark.parametrize("family", TINY)
@pytest.mark.parametrize("scheme, library", [("nf4-dq", "torchao"), ("nf4", "bitsandbytes"),
                                             ("nf4-dq", "bitsandbytes"), ("int8", "bitsandbytes")])
def test_whole_model_bytes_equal_the_quantized_tensors(family, scheme, library):
    spec = spec_from_config_dict(TINY[family], name=family)
    predicted = quantized_base_bytes(spec, scheme, library)
    assert predicted["total_bytes"] == _quantized_model_bytes(TINY[family], scheme, library)
    assert predicted["quantized_params"] + predicted["other_params_bytes"] // 2 == n_params(spec)


def test_llama_3_1_8b_base_and_errors():
    spec = get_model("llama-3.1-8b")
    none, dq = quantized_base_bytes(spec, "none"), quantized_base_bytes(spec, "nf4-dq")
    assert none["total_bytes"] == 2 * n_params(spec) and dq["library"] == "torchao"
    # 6.98B Linear weights at 4.126 bits + 1.05B embedding and head parameters in bf16
    assert dq["quantized_params"] == 6_979_321_856
    assert dq["total_bytes"] == pytest.approx(6_979_321_856 * 4.126 / 8 + 2 * (n_params(spec) - 6_979_321_856), rel=1e-4)
    with pytest.raises(TrainledgerError, match="--quantize"):
        weight_bytes(64, 64, "nf3")
    with pytest.raises(TrainledgerError, match="always double-quantizes"):
        weight_bytes(256, 256, "nf4", "torchao")
    with pytest.raises(TrainledgerError, match="mixture of experts"):
        quantized_base_bytes(get_model("mixtral-8x7b"), "nf4")
