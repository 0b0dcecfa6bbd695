"""Hugging Face interop: `export` writes a directory transformers loads with the same logits and greedy tokens;
`--init-from` reads a transformers-saved model with the same logits; nothing is ever unpickled."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from gen_helpers import SPECS, make_model, write_run
from trainledger.cli.main import main
from trainledger.errors import TrainledgerError
from trainledger.train.hf_io import load_hf_model

transformers = pytest.importorskip("transformers", reason="transformers is not installed: the reference is its models")


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def _hf_random(kind: str, directory, vocab: int = 101, **save):
    """A random transformers model (biases and norms perturbed, so copying them is tested), saved as safetensors."""
    torch.manual_seed(3)
    if kind == "gpt2":
        config = transformers.GPT2Config(vocab_size=vocab, n_embd=64, n_layer=2, n_head=4, n_positions=48,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=48,
                                          rope_theta=5000.0, rms_norm_eps=1e-5, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p)) if p.ndim == 1 else None
    model.eval().save_pretrained(directory, safe_serialization=True, **save)
    return model


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_export_loads_in_transformers_with_our_logits_and_greedy_tokens(kind, tmp_path, capsys):
    ours = write_run(tmp_path / "run", SPECS[kind])
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "hf"), "--json"]) == 0
    written = _json(capsys)
    assert sorted(f["name"] for f in written["files"]) == ["config.json", "model.safetensors"]
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(hf).__name__ == {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}[kind]
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, got = ours(idx), hf(idx).logits
    assert expected.std() > 0.1                        # logits spread 1000× wider than the tolerance
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    # greedy decoding: transformers' generate and ours from the same checkpoint give the same tokens
    prompt = [int(i) for i in idx[0, :6]]
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False, pad_token_id=0)[0, 6:].tolist()
    assert main(["generate", str(tmp_path / "run"), "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens",
                 "30", "--temperature", "0", "--no-predict", "--json"]) == 0
    result = _json(capsys)
    assert result["tokens"] == theirs and len(set(theirs)) > 1
    # and ours reads the exported directory back to the same tokens
    assert main(["generate", str(tmp_path / "hf"), "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens",
                 "30", "--no-predict", "--json"]) == 0
    assert _json(capsys)["tokens"] == theirs


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_transformers_saved_model_loads_with_its_logits(kind, tmp_path):
    hf = _hf_random(kind, tmp_path / "hf")
    ours, spec = load_hf_model(tmp_path / "hf")
    idx = torch.randint(0, 101, (2, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, got = hf(idx).logits, ours.eval()(idx)
    assert expected.std() > 0.1
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    assert spec.vocab_size == 101 and spec.max_seq_len == 48


def test_train_init_from_starts_with_the_checkpoints_weights(tmp_path, capsys):
    hf = _hf_random("llama", tmp_path / "hf", vocab=256)           # a byte-level model: the run's text is bytes
    text = tmp_path / "text.txt"
    text.write_text("hello world, " * 400)
    from trainledger.cli.train import config_from_args
    from trainledger.cli.main import build_parser
    from trainledger.train.loop import Trainer
    config = config_from_args(build_parser().parse_args(["train", "--init-from", str(tmp_path / "hf"), "--text",
                                                         str(text), "--out-dir", str(tmp_path / "run"), "--seq-len", "16",
                                                         "--steps", "1", "--no-plot"]))
    assert config.model == str((tmp_path / "hf").resolve()) == config.init_from
    trainer = Trainer(config, quiet=True)
    idx = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(trainer.model.eval()(idx), hf(idx).logits, atol=1e-4, rtol=0)
    assert main(["train", "--init-from", str(tmp_path / "hf"), "--model", "tiny", "--steps", "1"]) == 2
    assert "leave --model" in capsys.readouterr().err
    # a checkpoint whose vocabulary is not the run's tokenizer's: one line naming --tokenizer
    _hf_random("gpt2", tmp_path / "hf101")
    capsys.readouterr()
    assert main(["train", "--init-from", str(tmp_path / "hf101"), "--text", str(text), "--out-dir", str(tmp_path / "r2"),
                 "--seq-len", "16", "--steps", "1", "--no-plot", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "vocabulary of 101 tokens" in err and "--tokenizer" in err and err.count("\n") == 1


def test_sharded_safetensors_with_an_index_load(tmp_path):
    hf = _hf_random("gpt2", tmp_path / "hf", max_shard_size="100KB")
    assert (tmp_path / "hf" / "model.safetensors.index.json").is_file()
    ours, _ = load_hf_model(tmp_path / "hf")
    idx = torch.randint(0, 101, (1, 20))
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(idx), hf(idx).logits, atol=1e-4, rtol=0)
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    index["weight_map"]["lm_head.weight"] = "../elsewhere.safetensors"
    (tmp_path / "hf" / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(TrainledgerError, match="not a .safetensors file inside"):
        load_hf_model(tmp_path / "hf")


class _Payload:
    """Unpickling this writes a file: proof that a pickle was loaded."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_pickled_checkpoints_are_refused_unread(tmp_path, capsys):
    directory = tmp_path / "hf"
    _hf_random("gpt2", directory)
    capsys.readouterr()
    (directory / "model.safetensors").unlink()
    marker = tmp_path / "pwned"
    (directory / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(marker)))
    for argv in (["train", "--init-from", str(directory), "--steps", "1", "--seq-len", "16", "--out-dir", str(tmp_path / "r")],
                 ["generate", str(directory), "--prompt-ids", "1,2", "--no-predict"],
                 ["export", str(directory), str(tmp_path / "out")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and "pytorch_model.bin" in err and "safetensors" in err
    assert not marker.exists()


def test_other_families_are_refused_with_what_differs(tmp_path, capsys):
    config = {"model_type": "mistral", "vocab_size": 256, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
              "max_position_embeddings": 64, "sliding_window": 8}
    (tmp_path / "mistral.json").write_text(json.dumps(config))
    from trainledger.specs import get_model
    mistral = get_model(str(tmp_path / "mistral.json"))
    write_run(tmp_path / "run", mistral, make_model(mistral), model_name=str(tmp_path / "mistral.json"))
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "sliding-window attention" in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_out_dir_rules_and_atomic_replace(tmp_path, capsys):
    write_run(tmp_path / "run", SPECS["gpt2"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert main(["export", str(tmp_path / "run"), str(out)]) == 2
    assert "--force" in capsys.readouterr().err and (out / "keep.txt").exists()
    assert main(["export", str(tmp_path / "run"), str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]          # no temporary directory left
    assert main(["export", str(tmp_path / "run"), str(tmp_path), "--force"]) == 2  # would delete the run itself
    assert "holds the run" in capsys.readouterr().err and (tmp_path / "run").is_dir()
    (tmp_path / "file").write_text("x")
    assert main(["export", str(tmp_path / "run"), str(tmp_path / "file")]) == 2


def test_a_sharded_dcp_checkpoint_is_gathered_safely(tmp_path, capsys):
    """An FSDP run's checkpoint (model/ written by torch.distributed.checkpoint) exports like a full one."""
    import torch.distributed.checkpoint as dcp

    from trainledger.train import checkpoint as ckpt
    from trainledger.train.config import TrainConfig
    spec = SPECS["llama"]
    model = make_model(spec)
    (tmp_path / "model.json").write_text(json.dumps(__import__("trainledger.models.hf_weights", fromlist=["x"]).hf_config(
        spec, torch.float32)))
    config = TrainConfig(model=str(tmp_path / "model.json")).to_dict()
    tmp = ckpt.begin(tmp_path / "ckpts", 3)
    dcp.save({"model": model.state_dict(), "optimizer": {"state": {}}}, checkpoint_id=str(tmp / ckpt.SHARDED_DIR),
             no_dist=True)
    ckpt.write_trainer_state(tmp, {"format": "dcp", "step": 3, "tokens": 0, "world_size": 2, "config": config})
    ckpt.commit(tmp, tmp_path / "ckpts", 3, "dcp", {"config": config})
    assert main(["export", str(tmp_path / "ckpts"), str(tmp_path / "hf")]) == 0
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    idx = torch.randint(0, 256, (1, 20))
    with torch.no_grad():
        torch.testing.assert_close(hf(idx).logits, model(idx), atol=1e-4, rtol=0)
