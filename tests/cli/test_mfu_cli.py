"""`trainledger mfu` (issue 14, Why 13): a measured throughput turned into MFU and HFU, checked against published runs."""

import json

import pytest

from trainledger.cli import main as cli_main

# Korthikanti et al. 2022 (arXiv:2205.05198), Table 3/5: the 22B GPT (h 6144, 64 heads, 48 layers, vocab 51200,
# seq 2048) on 8 A100 (312 TFLOP/s fp16), global batch 4, 1.10 s per iteration with sequence parallel +
# selective recompute; the Megatron-LM README reports that run as 41.5 % MFU.
GPT_22B = {"model_type": "gpt2", "n_embd": 6144, "n_layer": 48, "n_head": 64, "vocab_size": 51200, "n_positions": 2048}


def run_json(capsys, *argv):
    status = cli_main.main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


@pytest.fixture
def gpt_22b(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GPT_22B))
    return str(path)


def test_megatron_22b_mfu(capsys, gpt_22b):
    tokens_per_s = 4 * 2048 / 1.10
    data = run_json(capsys, "mfu", "--model", gpt_22b, "--tokens-per-s", str(tokens_per_s), "--gpu", "a100-80gb",
                    "--num-gpus", "8", "--dtype", "fp16")
    assert data["mfu"] == pytest.approx(0.415, abs=0.005)
    # the same from Korthikanti's App. A Eq. 7 by hand: 72·B·L·s·h²·(1 + s/(6h) + V/(12hL)) per iteration
    B, L, s, h, V = 4, 48, 2048, 6144, 51200
    eq7 = 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    assert data["mfu"] == pytest.approx(eq7 / 1.10 / (8 * 312e12), rel=2e-3)     # ours also counts biases: no


def test_hfu_with_full_recompute_is_megatron_eq3(capsys, gpt_22b):
    # Narayanan et al. 2021 (arXiv:2104.04473) Eq. 3: 96·B·s·l·h²·(1 + s/(6h) + V/(16lh)), a full recompute included
    B, L, s, h, V = 4, 48, 2048, 6144, 51200
    data = run_json(capsys, "mfu", "--model", gpt_22b, "--tokens-per-s", str(B * s / 1.42), "--gpu", "a100-80gb",
                    "--num-gpus", "8", "--dtype", "fp16", "--recompute", "full")
    eq3 = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    assert data["hfu"] == pytest.approx(eq3 / 1.42 / (8 * 312e12), rel=2e-3)
    assert data["hfu"] > data["mfu"]


def test_per_gpu_and_total_throughput_agree(capsys):
    total = run_json(capsys, "mfu", "--model", "llama-3-8b", "--tokens-per-s", "24000", "--num-gpus", "8")
    per_gpu = run_json(capsys, "mfu", "--model", "llama-3-8b", "--tokens-per-s-per-gpu", "3000", "--num-gpus", "8")
    assert total["mfu"] == pytest.approx(per_gpu["mfu"]) and total["tokens_per_s_per_gpu"] == 3000
    from trainledger.account.counting.flops import train_flops_per_token
    from trainledger.specs import get_model
    assert per_gpu["mfu"] == pytest.approx(3000 * train_flops_per_token(get_model("llama-3-8b"), 8192) / 989.5e12)
    # the prediction beside the measurement: the fastest layout `trainledger layout` finds on these 8 GPUs
    assert 0 < per_gpu["predicted_mfu"] < 1 and per_gpu["predicted_layout"]["dp"] * per_gpu["predicted_layout"]["tp"] \
        * per_gpu["predicted_layout"]["pp"] * per_gpu["predicted_layout"]["cp"] == 8


def test_params_only_uses_6n(capsys):
    data = run_json(capsys, "mfu", "--params", "70B", "--tokens-per-s", "1e6", "--num-gpus", "1024", "--recompute", "full")
    assert data["model_flops_per_token"] == 6 * 70e9 and data["hardware_flops_per_token"] == pytest.approx(8 * 70e9)
    assert data["mfu"] == pytest.approx(1e6 * 6 * 70e9 / (1024 * 989.5e12))


@pytest.mark.parametrize("argv, flag", [
    (["mfu", "--model", "gpt2"], "--tokens-per-s"),
    (["mfu", "--tokens-per-s", "1000"], "--model"),
    (["mfu", "--model", "gpt2", "--tokens-per-s", "0"], "--tokens-per-s"),
    (["mfu", "--model", "gpt2", "--tokens-per-s", "1", "--tokens-per-s-per-gpu", "1"], "--tokens-per-s"),
    (["mfu", "--params", "7B", "--tokens-per-s", "1000", "--recompute", "selective"], "--recompute selective"),
    (["mfu", "--params", "7B", "--tokens-per-s", "1000", "--seq-len", "4096"], "--seq-len"),
    (["mfu", "--model", "gpt2", "--tokens-per-s", "1000", "--gpu", "h1000"], "--gpu"),
])
def test_errors(capsys, argv, flag):
    assert cli_main.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err


def test_impossible_throughput_warns(capsys):
    status = cli_main.main(["mfu", "--model", "gpt2", "--tokens-per-s", "1e9", "--json"])
    captured = capsys.readouterr()
    assert status == 0 and "warning: HFU" in captured.err and json.loads(captured.out)["mfu"] > 1
