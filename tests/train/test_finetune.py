"""`train --finetune lora|qlora --init-from HF_DIR` end to end on CPU: it trains, checkpoints only the adapters and
resumes exactly, PEFT loads `export --adapter` with our logits, transformers loads `export --merge` and decodes our
tokens; the memory levers give the losses of the plain run; bad input is one line and exit 2."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

import pytest
import torch

from train_helpers import SMALL, env, losses, run_train, train_cmd, train_in_process
from trainledger.cli.main import main
from trainledger.train import checkpoint as ckpt

transformers = pytest.importorskip("transformers", reason="the bases and references are transformers models")
pytest.importorskip("torchao", reason="QLoRA's NF4 base is torchao's (pip install 'trainledger[finetune]')")

FAST = ["--seq-len", "16", "--batch-size", "4", "--eval-every", "0", "--no-plot", "--quiet"]


def _save(model, directory):
    """A random transformers model with spread-out weights (greedy decoding then varies), saved as safetensors."""
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0) if p.ndim > 1 else p.add_(0.1 * torch.randn_like(p))
    model.eval().save_pretrained(directory, safe_serialization=True)
    return directory


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A byte-level Llama (every block Linear a multiple of 64·256 weights: NF4 with double quantization applies)."""
    torch.manual_seed(3)
    config = transformers.LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=None)
    return _save(transformers.LlamaForCausalLM(config), tmp_path_factory.mktemp("llama"))


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    torch.manual_seed(4)
    config = transformers.GPT2Config(vocab_size=256, n_embd=128, n_layer=2, n_head=4, n_positions=64, resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None)
    return _save(transformers.GPT2LMHeadModel(config), tmp_path_factory.mktemp("gpt2"))


def _tune(capsys, token_file, out, base, *flags, steps=12, lr="1e-2"):
    status, _, err = train_in_process(capsys, "--data", token_file, "--init-from", base, "--out-dir", out,
                                      "--steps", steps, "--lr", lr, *FAST, *flags)
    assert status == 0, err
    return losses(out / "metrics.jsonl")


def test_qlora_trains_and_checkpoints_only_the_adapters(token_file, tmp_path, llama_dir, capsys):
    values = _tune(capsys, token_file, tmp_path / "run", llama_dir, "--finetune", "qlora", "--lora-targets",
                   "all-linear", steps=30)
    first, last = [values[s] for s in range(1, 6)], [values[s] for s in range(26, 31)]
    assert sum(last) / 5 < sum(first) / 5 - 0.3              # the loss falls
    ref = ckpt.list_checkpoints(tmp_path / "run" / "checkpoints")[-1]
    state = ckpt.load_trainer_state(ref.path)
    assert state["config"]["quantize"] == "nf4-dq"          # qlora means NF4 with double quantization
    assert all(".lora_A" in name or ".lora_B" in name for name in state["model"])
    assert len(state["model"]) == 2 * 2 * 7                 # 2 layers × 7 Linears × (A, B)
    assert state["base"]["kind"] == "hf" and set(state["base"]["files"]) == {"config.json", "model.safetensors"}
    base_bytes = (llama_dir / "model.safetensors").stat().st_size
    assert ckpt.checkpoint_bytes(ref.path) < base_bytes / 2   # the frozen base is not in it


def test_a_stopped_qlora_run_resumes_to_the_same_losses(token_file, tmp_path, llama_dir, capsys, monkeypatch):
    args = ["--finetune", "qlora", "--checkpoint-every", 3, "--lora-dropout", "0.1"]   # dropout: the RNG is restored
    reference = _tune(capsys, token_file, tmp_path / "ref", llama_dir, *args)
    monkeypatch.setenv("TRAINLEDGER_FAULT_NAN_STEP", "8")    # stops at step 8, after the checkpoint of step 6
    status, _, err = train_in_process(capsys, "--data", token_file, "--init-from", llama_dir, "--out-dir",
                                      tmp_path / "run", "--steps", 12, "--lr", "1e-2", *FAST, *args)
    assert status == 2 and "step_00000006" in err
    monkeypatch.delenv("TRAINLEDGER_FAULT_NAN_STEP")
    assert _tune(capsys, token_file, tmp_path / "run", llama_dir, *args, "--resume") == reference


def test_a_changed_base_is_refused_on_resume_and_export(token_file, tmp_path, llama_dir, capsys):
    base = tmp_path / "base"
    base.mkdir()
    for f in llama_dir.iterdir():
        (base / f.name).write_bytes(f.read_bytes())
    _tune(capsys, token_file, tmp_path / "run", base, "--finetune", "lora", steps=3)
    weights = base / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1                                          # one bit of the last weight
    weights.write_bytes(bytes(data))
    status, _, err = train_in_process(capsys, "--data", token_file, "--init-from", base, "--out-dir", tmp_path / "run",
                                      "--steps", 6, *FAST, "--finetune", "lora", "--resume")
    assert status == 2 and err.count("\n") == 1 and "model.safetensors changed (sha256" in err
    capsys.readouterr()
    assert main(["export", str(tmp_path / "run"), "--merge", str(tmp_path / "m")]) == 2
    assert "not the one the adapters were trained on" in capsys.readouterr().err


def _ours_and_peft(run, base_dir, adapter_dir, dequantize: bool, idx):
    """(our logits, PEFT's, the base's without adapters) on `idx`."""
    peft = pytest.importorskip("peft", reason="PEFT is the reference loader of adapters")
    from trainledger.train.run_model import load_model
    ours = load_model(run).model
    base = transformers.AutoModelForCausalLM.from_pretrained(base_dir).eval()
    if dequantize:      # the base the QLoRA adapters were trained on: torchao's NF4 of each block Linear
        from trainledger.models.quantize import nf4_module
        with torch.no_grad():
            for name, module in base.named_modules():
                if isinstance(module, torch.nn.Linear) and name != "lm_head":
                    module.weight.copy_(nf4_module().to_nf4(module.weight.contiguous(), 64, 256).get_original_weight())
    with torch.no_grad():
        untuned = base(idx).logits                 # (PEFT injects the adapters into `base` itself)
        tuned = peft.PeftModel.from_pretrained(base, adapter_dir).eval()
        return ours(idx), tuned(idx).logits, untuned


@pytest.mark.parametrize("kind, method, targets", [
    ("llama", "lora", "q,k,v,o,gate,up,down,head"),
    ("llama", "qlora", "all-linear"),
    ("gpt2", "lora", "q,v,o,down"),         # GPT-2's fused c_attn: q and v only, one block-structured adapter
])
def test_peft_loads_export_adapter_with_our_logits(kind, method, targets, token_file, tmp_path, llama_dir, gpt2_dir,
                                                   capsys):
    base_dir = llama_dir if kind == "llama" else gpt2_dir
    run = tmp_path / "run"
    _tune(capsys, token_file, run, base_dir, "--finetune", method, "--lora-targets", targets)
    assert main(["export", str(run), "--adapter", str(tmp_path / "adapter"), "--json"]) == 0
    written = json.loads(capsys.readouterr().out)
    assert sorted(f["name"] for f in written["files"]) == ["adapter_config.json", "adapter_model.safetensors"]
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 8 and config["lora_alpha"] == 16
    from safetensors.torch import load_file
    keys = load_file(tmp_path / "adapter" / "adapter_model.safetensors")
    if kind == "llama":
        assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in keys
    else:
        assert keys["base_model.model.transformer.h.0.attn.c_attn.lora_B.weight"].shape == (3 * 128, 2 * 8)
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(0))
    expected, got, untuned = _ours_and_peft(run, base_dir, tmp_path / "adapter", method == "qlora", idx)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=0)
    assert (untuned - expected).abs().max() > 1e-2          # the adapters trained: without them the logits differ


def test_export_merge_loads_in_transformers_and_decodes_our_tokens(token_file, tmp_path, llama_dir, capsys):
    run = tmp_path / "run"     # a few small steps: the model still decodes varied tokens, not the corpus' spaces
    _tune(capsys, token_file, run, llama_dir, "--finetune", "qlora", "--lora-targets", "all-linear", steps=4, lr="2e-3")
    assert main(["export", str(run), "--merge", str(tmp_path / "merged"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["merged"] is True
    merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
    base = transformers.AutoModelForCausalLM.from_pretrained(llama_dir).eval()
    w, w0 = merged.model.layers[0].mlp.up_proj.weight, base.model.layers[0].mlp.up_proj.weight
    assert 0 < (w - w0).abs().max() < 0.5 * w0.abs().max()      # dequantized NF4 + the adapters' update
    prompt = [72, 101, 108, 108, 111, 44]
    with torch.no_grad():
        theirs = merged.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=False,
                                 pad_token_id=0)[0, len(prompt):].tolist()
    assert main(["generate", str(run), "--prompt-ids", ",".join(map(str, prompt)), "--max-new-tokens", "24",
                 "--temperature", "0", "--no-predict", "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)["tokens"]
    assert ours == theirs and len(set(theirs)) > 1


# ----- the memory levers: 20 steps on and off ---------------------------------------------------------------------
LEVERS = [
    # (flags on, flags of the run it must equal, how exactly)
    (["--optimizer-in-backward"], ["--no-grad-clip"], 0.0),                     # no clipping either way
    (["--activation-offload"], [], 0.0),                                        # values copied, not changed
    (["--chunked-loss", "4"], [], 1e-5),                                        # only the summation order differs
]


@pytest.mark.parametrize("finetune", ["full", "lora"])
@pytest.mark.parametrize("on, off, tolerance", LEVERS, ids=["optimizer-in-backward", "activation-offload",
                                                            "chunked-loss"])
def test_a_lever_trains_to_the_losses_of_the_plain_run(finetune, on, off, tolerance, token_file, tmp_path, capsys):
    runs = {}
    for name, flags in (("on", on), ("off", off)):
        status, _, err = train_in_process(capsys, "--data", token_file, "--out-dir", tmp_path / name, "--steps", 20,
                                          "--finetune", finetune, *FAST, *flags)
        assert status == 0, err
        runs[name] = losses(tmp_path / name / "metrics.jsonl")
    assert sorted(runs["on"]) == list(range(1, 21))
    if tolerance == 0:
        assert runs["on"] == runs["off"]
    else:
        assert all(abs(runs["on"][s] - runs["off"][s]) <= tolerance * runs["off"][s] for s in runs["off"])
    assert runs["on"][20] < runs["on"][1]


@pytest.mark.slow             # torch.compile of torchao's step, cold: ~15 s on 2 cores
def test_adamw_8bit_trains_within_its_quantization_error_of_adamw(token_file, tmp_path, capsys):
    runs = {}
    for name, optimizer in (("on", "adamw-8bit"), ("off", "adamw")):
        status, _, err = train_in_process(capsys, "--data", token_file, "--out-dir", tmp_path / name, "--steps", 20,
                                          "--optimizer", optimizer, *FAST)
        assert status == 0, err
        runs[name] = losses(tmp_path / name / "metrics.jsonl")
    # 8-bit block-wise moments (arXiv:2110.02861): within 2 % of AdamW's loss at every step of 20
    assert all(abs(runs["on"][s] - runs["off"][s]) <= 0.02 * runs["off"][s] for s in runs["off"])
    assert runs["on"] != runs["off"] and runs["on"][20] < runs["on"][1]


# ----- bad input: one line, exit 2 --------------------------------------------------------------------------------
def _one_line(capsys, argv) -> str:
    capsys.readouterr()
    status = main(argv)
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_bad_input_is_one_line_and_exit_2(token_file, tmp_path, llama_dir, capsys, monkeypatch):
    train = ["train", "--data", str(token_file), "--steps", "1", *map(str, FAST)]
    assert "describes another model than --model 'tiny'" in _one_line(
        capsys, [*train, "--init-from", str(llama_dir), "--model", "tiny", "--finetune", "lora",
                 "--out-dir", str(tmp_path / "a")])
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text((llama_dir / "config.json").read_text())
    assert "has no model.safetensors" in _one_line(capsys, [*train, "--init-from", str(bare), "--finetune", "qlora",
                                                            "--out-dir", str(tmp_path / "b")])
    assert "pages its states" in _one_line(capsys, [*train, "--optimizer", "paged-adamw-8bit",
                                                    "--out-dir", str(tmp_path / "c")])
    assert "not with --grad-accum 2" in _one_line(capsys, [*train, "--optimizer-in-backward", "--grad-accum", "2",
                                                           "--out-dir", str(tmp_path / "d")])
    assert "--lora-rank" in _one_line(capsys, [*train, "--finetune", "lora", "--lora-rank", "0"])
    assert "above the model width d_model = 128" in _one_line(capsys, [*train, "--finetune", "lora", "--lora-rank", "129",
                                                         "--out-dir", str(tmp_path / "e")])
    assert "unknown target 'qkv'" in _one_line(capsys, [*train, "--finetune", "lora", "--lora-targets", "qkv"])
    assert "quantized weights cannot be trained" in _one_line(capsys, [*train, "--quantize", "nf4-dq"])
    assert "--lora-rank sets the adapters of --finetune lora or qlora" in _one_line(capsys, [*train, "--lora-rank", "4"])
    # export --adapter of a run that trained every weight
    assert train_in_process(capsys, "--data", token_file, "--out-dir", tmp_path / "full", "--steps", 1, *FAST)[0] == 0
    assert "has no adapters" in _one_line(capsys, ["export", str(tmp_path / "full"), "--adapter", str(tmp_path / "x")])
    # --finetune qlora without torchao: the extra is named
    for name in [m for m in sys.modules if m == "torchao" or m.startswith("torchao.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "torchao", None)
    assert "needs torchao, which is not installed: pip install 'trainledger[finetune]'" in _one_line(
        capsys, [*train, "--finetune", "qlora", "--out-dir", str(tmp_path / "f")])


# ----- SIGKILL at random moments ----------------------------------------------------------------------------------
def _max_step(metrics) -> int:
    try:
        return max((json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.endswith("}")),
                   default=0)
    except (FileNotFoundError, ValueError):
        return 0


@pytest.mark.slow
def test_qlora_sigkilled_at_random_moments_resumes_bit_identically(token_file, tmp_path, llama_dir):
    args = ["--data", token_file, "--init-from", llama_dir, "--finetune", "qlora", "--steps", 16,
            "--checkpoint-every", 2, *SMALL]
    reference = run_train(*args, "--out-dir", tmp_path / "ref")
    assert reference.returncode == 0, reference.stderr
    expected = losses(tmp_path / "ref" / "metrics.jsonl")
    out = tmp_path / "run"
    metrics, rng, kills = out / "metrics.jsonl", random.Random(39), 0
    for _ in range(2):
        target = min(12, _max_step(metrics) + rng.randint(2, 4))
        process = subprocess.Popen(train_cmd(*args, "--out-dir", out, "--resume"), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env={**env(), "TRAINLEDGER_TEST_STEP_DELAY_S": "0.04"})
        deadline = time.monotonic() + 120
        while _max_step(metrics) < target and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.02))
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.wait(timeout=30)
    assert kills == 2 and _max_step(metrics) < 16
    result = run_train(*args, "--out-dir", out, "--resume")
    assert result.returncode == 0, result.stderr
    assert losses(metrics) == expected


@pytest.mark.slow             # two processes under torchrun
def test_qlora_under_ddp_matches_one_process(token_file, tmp_path, llama_dir, capsys):
    args = ["--data", token_file, "--init-from", llama_dir, "--finetune", "qlora", "--steps", 6, "--seq-len", 16,
            "--eval-every", 0, "--no-plot", "--quiet"]
    single = train_in_process(capsys, *args, "--out-dir", tmp_path / "one", "--batch-size", 8)
    assert single[0] == 0, single[2]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m",
               "trainledger.cli.main", "train", *map(str, args), "--parallel", "ddp", "--global-batch-size", "8",
               "--out-dir", str(tmp_path / "two")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env())
    assert done.returncode == 0, done.stderr[-3000:]
    one, two = losses(tmp_path / "one" / "metrics.jsonl"), losses(tmp_path / "two" / "metrics.jsonl")
    assert sorted(two) == list(range(1, 7))
    # the same function on the same global batch: batches of 4 and 8 rows round differently in the matmuls, which
    # this base's spread-out weights (× 4) amplify: 1.7e-5 at step 1, 1.3e-4 at step 6 measured
    assert all(two[s] == pytest.approx(one[s], rel=1e-3) for s in one)
    from trainledger.train.metrics import read_metrics
    record = read_metrics(tmp_path / "two" / "metrics.jsonl")[-1]
    # the adapters' gradients alone are all-reduced: 4 bytes × 2 layers × (q, v) × 8 · (128 + 128), and a loss
    assert record["comm_bytes"] == 4 * 2 * 2 * 8 * 256 + 4 and record["predicted_comm_bytes"] is None


def test_a_lora_run_says_what_the_accounting_predicts(token_file, tmp_path, capsys):
    """The trainer's predicted line and summary carry the fine-tuning accounting: trainable and frozen counts and the
    peak of a step, equal to what `memory --config run.toml` predicts for the run it trained."""
    status, out, err = train_in_process(capsys, "--data", token_file, "--out-dir", tmp_path / "run", "--steps", 2,
                                        "--finetune", "lora", "--seq-len", "16", "--batch-size", "4", "--eval-every",
                                        "0", "--no-plot", "--json")
    assert status == 0, err
    summary = json.loads(out)
    status, out, err = train_in_process(capsys, "--data", token_file, "--out-dir", tmp_path / "again", "--steps", 1,
                                        "--finetune", "lora", "--seq-len", "16", "--batch-size", "4", "--eval-every",
                                        "0", "--no-plot")
    line = next(x for x in out.splitlines() if x.startswith("predicted:"))
    assert "trainable" in line and "frozen" in line and "peak of a step" in line
    capsys.readouterr()
    # the file names --gpu cpu, this machine, as the run trained on
    assert main(["memory", "--config", str(tmp_path / "run" / "run.toml"), "--reserve", "0", "--json"]) == 0
    memory = json.loads(capsys.readouterr().out)
    assert memory["trainable_params"] > 0 and memory["frozen_params"] > memory["trainable_params"]
    assert summary["predicted_peak_memory_bytes"] == pytest.approx(memory["peak_bytes"], rel=1e-9)
    assert summary["predicted_memory_bytes"] == pytest.approx(memory["total_bytes"], rel=1e-9)
