"""`trainledger measure`: JSON contract (predicted / measured / relative_error), table, errors."""

import json

import pytest

from trainledger.cli.main import main

KEYS = {"n_params", "forward_flops_per_step", "train_flops_per_step", "params_bytes", "grads_bytes",
        "optimizer_bytes", "activations_bytes", "peak_bytes"}


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_json_contract(capsys):
    status, out, err = run(capsys, "measure", "--model", "tiny", "--batch-size", "2", "--seq-len", "64", "--json")
    assert status == 0 and err == ""
    result = json.loads(out)
    for part in ("predicted", "measured", "relative_error"):
        assert KEYS <= set(result[part])
    assert result["measured"]["n_params"] == 858_880
    assert result["relative_error"]["train_flops_per_step"] == 0
    assert abs(result["relative_error"]["activations_bytes"]) < 0.03
    assert result["settings"]["optimizer_impl"] == "trainledger.optim.AdamW"


def test_table(capsys):
    status, out, _ = run(capsys, "measure", "--model", "tiny", "--seq-len", "32", "--precision", "amp-bf16",
                         "--recompute", "selective")
    assert status == 0
    assert "activations" in out and "predicted" in out and "measured" in out


FACTORIES = """
import torch

def good(batch_size, seq_len):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    return model, (torch.ones(batch_size, 16),), lambda out: out.pow(2).mean()

def boom(batch_size, seq_len):
    raise ValueError("factory exploded")

def not_a_tuple(batch_size, seq_len):
    return 3

def vector_loss(batch_size, seq_len):
    return torch.nn.Linear(4, 4), (torch.ones(batch_size, 4),)

def bad_shapes(batch_size, seq_len):
    return torch.nn.Linear(4, 4), (torch.ones(batch_size, 5),), lambda out: out.sum()

not_callable = 5
"""


@pytest.fixture
def factories(tmp_path, monkeypatch):
    """A module of user factories in the current directory, which `trainledger measure` can import (as `python -m`)."""
    import sys
    name = f"r2_user_factories_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(FACTORIES)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield name
    sys.modules.pop(name, None)


def test_user_factory_from_the_current_directory(capsys, factories):
    status, out, err = run(capsys, "measure", "--model", f"{factories}:good", "--batch-size", "4", "--json")
    assert status == 0, err
    result = json.loads(out)
    assert result["predicted"] == {} and result["measured"]["n_params"] == 16 * 32 + 32 + 32 + 1
    assert result["measured"]["forward_flops_per_step"] == 2 * 4 * (16 * 32 + 32 * 1)


@pytest.mark.parametrize("attr, message", [
    ("boom", "the factory raised ValueError: factory exploded"),
    ("not_a_tuple", "must return (model, inputs)"),
    ("vector_loss", "the loss must be a scalar tensor"),
    ("bad_shapes", "one training step of the module failed with RuntimeError"),
    ("not_callable", "not a callable factory"),
    ("missing", "cannot import 'missing'"),
    ("", "expected package.module:factory"),
])
def test_user_factory_errors_are_one_line_exit_2(capsys, factories, attr, message):
    for device in ("fake", "cpu"):
        status, _, err = run(capsys, "measure", "--model", f"{factories}:{attr}", "--device", device)
        assert status == 2, err
        assert err.count("\n") == 1 and "--model" in err and message in err, err


def test_factory_without_module_name(capsys):
    status, _, err = run(capsys, "measure", "--model", ":good")
    assert status == 2 and "expected package.module:factory" in err and err.count("\n") == 1


@pytest.mark.parametrize("argv,flag", [
    (["--model", "nope"], "--model"),
    (["--model", "tiny", "--device", "tpu"], "--device"),
    (["--model", "tiny", "--batch-size", "0"], "--batch-size"),
    (["--model", "tiny", "--seq-len", "100000"], "--seq-len"),
    (["--model", "tiny", "--optimizer", "lion"], "--optimizer"),
    (["--model", "tiny", "--impl", "hf"], "--impl hf"),
    (["--model", "tests/no/config.json", "--impl", "hf", "--recompute", "full"], "--recompute full"),
    (["--model", "tiny", "--device", "cuda"] if not __import__("torch").cuda.is_available() else
     ["--model", "tiny", "--device", "npu"], "--device"),
])
def test_errors_are_one_line(capsys, argv, flag):
    status, out, err = run(capsys, "measure", *argv)
    assert status == 2
    assert flag in err and err.count("\n") == 1


def test_impl_hf_table_describes_transformers_model(capsys, tmp_path):
    transformers = pytest.importorskip("transformers", reason="--impl hf needs transformers; ours is tested above")
    transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=32).save_pretrained(tmp_path)
    status, out, err = run(capsys, "measure", "--model", str(tmp_path / "config.json"), "--impl", "hf",
                           "--seq-len", "16", "--attn-impl", "eager", "--precision", "mixed-bf16")
    assert status == 0 and err == ""          # no library warnings on stderr either
    assert "transformers (eager attention)" in out and "measured (hf)" not in out


def test_impl_hf_reads_a_config_of_any_file_name(capsys, tmp_path):
    """transformers is given the JSON we read, not the file's directory (which may hold another config.json)."""
    transformers = pytest.importorskip("transformers", reason="--impl hf needs transformers")
    config = transformers.GPT2Config(vocab_size=128, n_embd=32, n_layer=1, n_head=4, n_positions=32).to_dict()
    (tmp_path / "small-gpt2.json").write_text(json.dumps(config))
    (tmp_path / "config.json").write_text("{}")                  # a decoy beside it: never read
    status, out, err = run(capsys, "measure", "--model", str(tmp_path / "small-gpt2.json"), "--impl", "hf",
                           "--seq-len", "16", "--device", "cpu", "--json")
    result = json.loads(out)
    assert status == 0 and result["measured"]["n_params"] == result["predicted"]["n_params"]


def test_impl_hf_json_is_one_object_when_transformers_warns(capsys, tmp_path, monkeypatch):
    """transformers may print, warn and log while it builds a model: --json stdout still parses."""
    transformers = pytest.importorskip("transformers", reason="--impl hf needs transformers")
    import logging
    import warnings
    transformers.LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=32).save_pretrained(tmp_path)
    real = transformers.AutoModelForCausalLM.from_config

    def noisy(*args, **kwargs):
        print("a library's progress line on stdout")
        warnings.warn("a library's UserWarning")
        logging.getLogger("transformers.modeling_utils").warning("a library's logged warning")
        return real(*args, **kwargs)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", noisy)
    status, out, err = run(capsys, "measure", "--model", str(tmp_path / "config.json"), "--impl", "hf",
                           "--seq-len", "16", "--json")
    assert status == 0, err
    result = json.loads(out)
    assert result["settings"]["impl"] == "hf" and KEYS <= set(result["relative_error"])


@pytest.mark.parametrize("argv,flag", [
    (["--model", "tiny", "--attn-impl", "eager"], "--attn-impl"),
    (["--model", "tests/no/config.json", "--impl", "hf", "--attn-impl", "flash"], "--attn-impl"),
])
def test_attn_impl_errors(capsys, argv, flag):
    status, out, err = run(capsys, "measure", *argv)
    assert status == 2 and flag in err and err.count("\n") == 1


def test_small_moe_config_on_cpu(capsys, tmp_path):
    """A Mixtral-style config.json (4 experts, top-2) measured for real on CPU: FLOPs exact, activations to the byte."""
    config = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 32,
              "intermediate_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 1,
              "vocab_size": 128, "max_position_embeddings": 64, "num_local_experts": 4, "num_experts_per_tok": 2,
              "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(config))
    status, out, err = run(capsys, "measure", "--model", str(tmp_path / "config.json"), "--device", "cpu",
                           "--batch-size", "2", "--seq-len", "16", "--json")
    assert status == 0, err
    result = json.loads(out)
    assert result["relative_error"]["train_flops_per_step"] == 0 and result["relative_error"]["n_params"] == 0
    assert result["relative_error"]["activations_bytes"] == pytest.approx(0, abs=0.03)


@pytest.mark.parametrize("device", ["fake", "meta"])
def test_moe_on_fake_and_meta_tensors(capsys, tmp_path, device):
    """Our MoE routes meta and fake tensors in a balanced pattern (there is no data): N·k routed tokens as always, so
    FLOPs and saved bytes are those of any real routing (the cpu test above measures one)."""
    config = {"model_type": "mixtral", "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64,
              "num_local_experts": 4, "num_experts_per_tok": 2}
    (tmp_path / "config.json").write_text(json.dumps(config))
    status, out, err = run(capsys, "measure", "--model", str(tmp_path / "config.json"), "--device", device,
                           "--batch-size", "2", "--seq-len", "16", "--precision", "fp32", "--json")
    assert status == 0, err
    error = json.loads(out)["relative_error"]
    assert error["train_flops_per_step"] == 0 and error["n_params"] == 0 and error["activations_bytes"] == 0


def test_cruncher_with_the_default_fake_device(capsys):
    """The Cruncher's init cannot run on fake tensors: measured on cpu instead, and said so."""
    status, out, err = run(capsys, "measure", "--model", "cruncher", "--batch-size", "4", "--json")
    assert status == 0, err
    result = json.loads(out)
    assert result["settings"]["device"] == "cpu" and any("cannot run on fake tensors" in n for n in result["notes"])
    assert result["relative_error"]["n_params"] == 0 and result["relative_error"]["forward_flops_per_step"] == 0


@pytest.mark.parametrize("argv,flag", [
    (["memory", "--model", "gpt2", "--impl", "hf"], "--impl hf"),
    (["memory", "--params", "7e9", "--impl", "hf"], "--impl hf"),
    (["flops", "--model", "gpt2", "--attn-impl", "eager"], "--attn-impl"),
    (["memory", "--model", "CONFIG", "--impl", "hf", "--tp", "2"], "--tp"),
    (["memory", "--model", "CONFIG", "--impl", "hf", "--recompute", "full"], "--recompute"),
    (["memory", "--model", "CONFIG", "--impl", "hf", "--no-flash"], "--no-flash"),
    (["memory", "--model", "MPT", "--impl", "hf", "--attn-impl", "sdpa"], "--attn-impl sdpa"),
])
def test_memory_and_flops_impl_errors(capsys, tmp_path, argv, flag):
    """`memory`/`flops --impl hf` need a config.json and one device; no transformers needed (pure prediction)."""
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(
        {"model_type": "llama", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": 64}))
    (tmp_path / "mpt").mkdir()
    (tmp_path / "mpt" / "config.json").write_text(json.dumps(
        {"model_type": "mpt", "vocab_size": 128, "d_model": 64, "n_heads": 4, "n_layers": 2, "max_seq_len": 64}))
    paths = {"CONFIG": str(tmp_path / "llama" / "config.json"), "MPT": str(tmp_path / "mpt" / "config.json")}
    status, out, err = run(capsys, *[paths.get(a, a) for a in argv])
    assert status == 2 and flag in err and err.count("\n") == 1, err


def test_memory_and_flops_impl_hf(capsys, tmp_path):
    """memory --impl hf: transformers' activations (more than ours for GPT-2's gelu_new); flops: the same matmuls."""
    (tmp_path / "config.json").write_text(json.dumps(
        {"model_type": "gpt2", "vocab_size": 128, "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64}))
    base = ["--model", str(tmp_path / "config.json"), "--batch-size", "2", "--seq-len", "32", "--json"]
    answers = {}
    for command in ("memory", "flops"):
        for impl in ("trainledger", "hf"):
            extra = ["--precision", "fp32"] if command == "memory" else []
            status, out, err = run(capsys, command, *base, *extra, "--impl", impl)
            assert status == 0 and err == "", err
            answers[command, impl] = json.loads(out)
    assert answers["memory", "hf"]["activations_bytes"] > 2 * answers["memory", "trainledger"]["activations_bytes"]
    assert answers["memory", "hf"]["params_bytes"] == answers["memory", "trainledger"]["params_bytes"]
    assert answers["flops", "hf"]["train_flops_per_step"] == answers["flops", "trainledger"]["train_flops_per_step"]
    assert answers["flops", "hf"]["attn_impl"] == "sdpa"
