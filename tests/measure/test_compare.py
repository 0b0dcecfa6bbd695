"""measure.compare: predicted (account/) vs measured for whole training steps."""

import pytest

from trainledger.errors import TrainledgerError
from trainledger.measure.compare import KEYS, measure_factory, measure_model
from trainledger.specs import get_model

CASES = [
    ("tiny", 2, 128, "fp32", "none", "fake"),
    ("tiny", 2, 64, "amp-bf16", "selective", "cpu"),
    ("tiny", 2, 64, "mixed-bf16", "full", "fake"),
    ("tiny", 2, 64, "bf16", "none", "fake"),
]


@pytest.mark.parametrize("name,batch_size,seq_len,precision,recompute,device", CASES, ids=lambda v: str(v))
def test_predictions_within_tolerance(name, batch_size, seq_len, precision, recompute, device):
    result = measure_model(get_model(name), batch_size, seq_len, precision=precision, recompute=recompute,
                           device=device)
    assert set(KEYS) <= set(result["predicted"]) and set(KEYS) <= set(result["measured"])
    error = result["relative_error"]
    for key in ("n_params", "forward_flops_per_step", "train_flops_per_step", "hardware_flops_per_step"):
        assert result["predicted"][key] == result["measured"][key], key        # FLOPs: exact
    assert error["activations_bytes"] == pytest.approx(0, abs=0.03)
    assert error["peak_bytes"] == pytest.approx(0, abs=0.05)
    assert error["later_step_peak_bytes"] == pytest.approx(0, abs=0.05)   # optimizer states held: the steady state
    for key in ("params_bytes", "grads_bytes", "master_params_bytes"):
        assert result["predicted"][key] == result["measured"][key], key
    # optimizer: torch-style optimizers keep a 4-byte step counter per tensor that the recipe does not count
    assert error["optimizer_bytes"] == pytest.approx(0, abs=1e-3)


def test_gpt2_on_fake_tensors():
    result = measure_model(get_model("gpt2"), 2, 1024, precision="amp-bf16", device="fake")
    assert result["relative_error"]["activations_bytes"] == pytest.approx(0, abs=0.03)
    assert result["relative_error"]["peak_bytes"] == pytest.approx(0, abs=0.05)
    assert result["relative_error"]["later_step_peak_bytes"] == pytest.approx(0, abs=0.05)
    assert result["relative_error"]["train_flops_per_step"] == 0


def test_cruncher():
    result = measure_model(get_model("cruncher"), 8, 1, device="cpu")
    assert result["measured"]["n_params"] == 8256
    assert result["relative_error"]["forward_flops_per_step"] == 0


def _factory(batch_size, seq_len):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    return model, (torch.ones(batch_size, 16),), lambda out: out.pow(2).mean()


def test_user_factory_is_measured_only():
    result = measure_factory(f"{__name__}:_factory", 4, 1, device="fake")
    assert result["predicted"] == {}
    assert result["measured"]["n_params"] == 16 * 32 + 32 + 32 + 1
    assert result["measured"]["forward_flops_per_step"] == 2 * 4 * (16 * 32 + 32 * 1)


def test_bad_device_and_factory():
    with pytest.raises(TrainledgerError, match="--device"):
        measure_model(get_model("tiny"), device="tpu")
    with pytest.raises(TrainledgerError, match="--model"):
        measure_factory("no_such_module_xyz:f", 1, 1)


def test_hugging_face_implementation_predicted_and_measured(tmp_path):
    """--impl hf on fake tensors: predicted, measured and relative_error all describe transformers' model."""
    transformers = pytest.importorskip("transformers", reason="--impl hf needs transformers; ours is tested above")
    from trainledger.measure.compare import measure_hf
    from trainledger.specs import get_model as load
    transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=64).save_pretrained(tmp_path)
    path = str(tmp_path / "config.json")
    result = measure_hf(path, load(path), 2, 16, device="fake")
    assert result["settings"]["impl"] == "hf" and result["settings"]["attn_impl"] == "sdpa"
    assert result["relative_error"]["n_params"] == 0 and result["relative_error"]["train_flops_per_step"] == 0
    assert result["relative_error"]["activations_bytes"] == pytest.approx(0, abs=0.03)


_LLAMA = get_model("llama-2-7b").with_(d_model=64, n_heads=4, n_kv_heads=2, d_ff=96, vocab_size=128, n_layers=2,
                                       max_seq_len=64)
_GPT = get_model("gpt2").with_(d_model=64, n_heads=4, d_ff=256, vocab_size=128, n_layers=2, max_seq_len=64)
FAMILIES = {"llama-gqa": _LLAMA, "gpt2-tied": _GPT, "mixtral-moe": _LLAMA.with_(n_experts=4, experts_per_token=2),
            "gpt-moe-untied": _GPT.with_(n_experts=3, experts_per_token=1, tied_embeddings=False)}
_PRECISIONS = ("fp32", "amp-bf16", "bf16", "mixed-bf16")
# every family under every recompute setting, the precision recipe rotating so each family meets three of four
STEP_GRID = [(family, _PRECISIONS[(i + j) % 4], recompute) for i, family in enumerate(FAMILIES)
             for j, recompute in enumerate(("none", "selective", "full"))]


@pytest.mark.parametrize("family,precision,recompute", STEP_GRID, ids=lambda v: str(v))
def test_whole_step_over_the_model_grid_on_cpu(family, precision, recompute):
    """The issue's grid (GPT-2 and Llama style, GQA, MoE, tied/untied) for a whole real CPU step: FLOPs exact,
    activations within 3%, peak within 5% (measured today: exact to the byte but for torch's step counters)."""
    result = measure_model(FAMILIES[family], 2, 32, precision=precision, recompute=recompute, device="cpu")
    error = result["relative_error"]
    for key in ("n_params", "forward_flops_per_step", "train_flops_per_step", "hardware_flops_per_step"):
        assert result["predicted"][key] == result["measured"][key], key
    assert error["activations_bytes"] == pytest.approx(0, abs=0.03)
    assert error["peak_bytes"] == pytest.approx(0, abs=0.05)
    assert error["later_step_peak_bytes"] == pytest.approx(0, abs=0.05)   # optimizer states held: the steady state


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adagrad", "rmsprop", "adam", "adamw"])
@pytest.mark.parametrize("precision", ["fp32", "mixed-bf16"])
def test_peak_for_every_optimizer(optimizer, precision):
    """The optimizer moment of the peak: states + the temporaries each trainledger.optim step makes
    (momentum SGD none — it was 33% over-predicted when a temporary was assumed for every optimizer)."""
    result = measure_model(get_model("tiny"), 1, 32, precision=precision, optimizer=optimizer, device="fake")
    assert result["relative_error"]["peak_bytes"] == pytest.approx(0, abs=0.05)
    assert result["relative_error"]["later_step_peak_bytes"] == pytest.approx(0, abs=0.05)
    assert result["relative_error"]["optimizer_bytes"] == pytest.approx(0, abs=1e-3)
