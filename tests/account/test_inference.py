"""Inference accounting (account/time/inference.py): the KV cache formula, weights, the largest batch, and the roofline
of prefill (compute-bound) and decoding (bandwidth-bound, Pope et al. 2022)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from trainledger.account.time.inference import InferenceRequest, inference, kv_cache_bytes, weights_bytes
from trainledger.account.counting.params import n_params
from trainledger.cli.main import compute, main
from trainledger.errors import TrainledgerError
from trainledger.specs import get_gpu, get_model

LLAMA3_8B = get_model("llama-3-8b")
H100 = get_gpu("h100")
KEYS = ("kv_cache_bytes weights_bytes max_batch_size prefill_seconds decode_seconds_per_token "
        "time_to_first_token_seconds tokens_per_s bottleneck").split()


def test_llama3_8b_kv_cache_at_batch_32_and_8k_context_on_one_h100():
    """KV cache = 2 (keys and values) · layers · kv_heads · head_dim · tokens · batch · 2 bytes (bf16).

    Llama 3 8B: 32 layers, 8 KV heads of 128 (config.json of meta-llama/Meta-Llama-3-8B; grouped-query attention,
    Ainslie et al. 2023): 2·32·8·128·8192·32·2 B = 32 GiB."""
    layers, kv_heads, head_dim, tokens, batch = 32, 8, 128, 8192, 32
    expected = 2 * layers * kv_heads * head_dim * tokens * batch * 2
    result = inference(LLAMA3_8B, H100, InferenceRequest(batch_size=batch, prompt_len=tokens - 128, gen_len=128,
                                                         dtype="bf16"))
    assert result["kv_cache_bytes"] == expected == 32 * 2**30
    assert result["weights_bytes"] == 2 * 8_030_261_248          # published parameter count × 2 bytes
    # what is left of the 79.18 GiB an H100 80GB HBM3 reports (85,017,493,504 B) after the weights, per sequence
    assert result["max_batch_size"] == math.floor((85_017_493_504 - result["weights_bytes"]) / (expected / batch))
    assert all(key in result for key in KEYS)


def test_grouped_and_multi_query_attention_shrink_the_cache():
    mha = get_model("llama-2-7b")                                  # 32 KV heads of 128: 512 KiB per token in bf16
    assert kv_cache_bytes(mha, 1, 1, 2) == 2 * 32 * 32 * 128 * 2 == 512 * 1024
    assert kv_cache_bytes(LLAMA3_8B, 1, 1, 2) == 2 * 32 * 8 * 128 * 2 == 128 * 1024     # GQA: a quarter
    mqa = LLAMA3_8B.with_(n_kv_heads=1)
    assert kv_cache_bytes(mqa, 4, 1000, 2) == kv_cache_bytes(LLAMA3_8B, 4, 1000, 2) / 8


def test_sliding_windows_keep_their_last_w_positions():
    mistral = get_model("mistral-7b")                              # window 4096 on every layer
    assert kv_cache_bytes(mistral, 2, 16384, 2) == kv_cache_bytes(mistral, 2, 4096, 2)
    assert kv_cache_bytes(mistral, 2, 1000, 2) == 2 * 32 * 8 * 128 * 1000 * 2 * 2
    gemma = get_model("gemma-2-2b")                                # 13 of 26 layers with a 4096 window
    per_position = 2 * 4 * 256 * 2
    assert kv_cache_bytes(gemma, 1, 8192, 2) == 13 * per_position * 8192 + 13 * per_position * 4096


def test_kv_dtype_and_tensor_parallelism():
    assert kv_cache_bytes(LLAMA3_8B, 8, 4096, 1) == kv_cache_bytes(LLAMA3_8B, 8, 4096, 2) / 2   # fp8
    assert kv_cache_bytes(LLAMA3_8B, 8, 4096, 2, tp=8) == kv_cache_bytes(LLAMA3_8B, 8, 4096, 2) / 8
    # tp 16 > 8 KV heads: each GPU keeps one KV head (replicated), the same bytes as tp 8
    assert kv_cache_bytes(LLAMA3_8B.with_(n_heads=32), 1, 10, 2, tp=16) == kv_cache_bytes(LLAMA3_8B, 1, 10, 2, tp=8)
    assert weights_bytes(LLAMA3_8B, 2, tp=8) < weights_bytes(LLAMA3_8B, 2) / 7.5


def test_decoding_at_batch_1_is_bound_by_reading_the_weights():
    """Pope et al. 2022 (arXiv:2211.05102), Sec. 3.1: at small batch a step takes about the time to read the weights
    (and the KV cache) from memory; the matmuls do 2 FLOPs per weight byte-pair, far below the H100's ~295 FLOP/B."""
    r = inference(LLAMA3_8B, H100, InferenceRequest(batch_size=1, prompt_len=512, gen_len=128))
    read = r["weights_bytes"] - 128256 * 4096 * 2         # every weight but the embedding table (one row is looked up)
    achieved = H100.memory_bandwidth_bytes_per_s * H100.memory_bandwidth_fraction    # the streaming rate measured
    floor = (read + kv_cache_bytes(LLAMA3_8B, 1, 512 + 64, 2)) / achieved
    assert floor <= r["decode_seconds_per_token"] < 1.1 * floor
    assert r["bottleneck"].startswith("memory bandwidth, reading the weights")
    assert r["tokens_per_s"] == pytest.approx(1 / r["decode_seconds_per_token"])


def test_large_batches_make_decoding_compute_bound_and_prefill_is_compute_bound():
    r = inference(LLAMA3_8B, H100, InferenceRequest(batch_size=4096, prompt_len=16, gen_len=16))
    assert r["bottleneck"].startswith("compute")
    long_prompt = inference(LLAMA3_8B, H100, InferenceRequest(batch_size=1, prompt_len=8192, gen_len=1))
    assert long_prompt["prefill_bottleneck"].startswith("compute")
    ideal = 2 * n_params(LLAMA3_8B) * 8192 / H100.peak("bf16")     # matmul FLOPs at the dense peak: a lower bound
    assert ideal < long_prompt["prefill_seconds"] < 3 * ideal
    assert long_prompt["time_to_first_token_seconds"] == long_prompt["prefill_seconds"]


def test_tensor_parallel_decoding_splits_the_reads_and_adds_all_reduces():
    request = InferenceRequest(batch_size=1, prompt_len=512, gen_len=128)
    one = inference(get_model("llama-3-70b"), H100, replace(request, tp=8))
    assert one["decode_breakdown"]["tp_comm"] > 0
    assert one["decode_breakdown"]["weights_read"] == pytest.approx(
        inference(get_model("llama-3-70b"), H100, request)["decode_breakdown"]["weights_read"] / 8, rel=0.05)


def test_fp8_weights_halve_the_weight_bytes():
    assert inference(LLAMA3_8B, H100, InferenceRequest(dtype="fp8"))["weights_bytes"] == inference(LLAMA3_8B, H100)["weights_bytes"] / 2


def test_no_cache_steps_cost_a_forward_of_the_whole_sequence():
    cached = inference(LLAMA3_8B, H100, InferenceRequest(prompt_len=512, gen_len=64))
    uncached = inference(LLAMA3_8B, H100, InferenceRequest(prompt_len=512, gen_len=64, cache=False))
    assert uncached["kv_cache_bytes"] == 0
    assert uncached["decode_seconds_per_token"] > 2 * cached["decode_seconds_per_token"]
    # a step re-runs the sequence so far: about a prefill of the mean length (prompt + half the new tokens)
    mean = inference(LLAMA3_8B, H100, InferenceRequest(prompt_len=512 + 32, gen_len=1, cache=False))["prefill_seconds"]
    assert uncached["decode_seconds_per_token"] == pytest.approx(mean, rel=0.1)


@pytest.mark.parametrize("kwargs, flag", [
    ({"dtype": "fp64"}, "--dtype"), ({"kv_dtype": "fp64"}, "--kv-dtype"), ({"tp": 3}, "--tp"), ({"batch_size": 0},
     "--batch-size"), ({"prompt_len": 0}, "--prompt-len"), ({"gen_len": -1}, "--gen-len"), ({"reserve_bytes": -1.0}, "--reserve")])
def test_bad_inputs_name_their_flag(kwargs, flag):
    with pytest.raises(TrainledgerError, match=flag):
        inference(LLAMA3_8B, H100, InferenceRequest(**kwargs))


def test_cli_json_has_the_contract_keys(capsys):
    result = compute(["infer", "--model", "llama-3-8b", "--gpu", "h100", "--batch-size", "32", "--prompt-len", "8064",
                      "--gen-len", "128"])
    assert result["kv_cache_bytes"] == 32 * 2**30 and all(key in result for key in KEYS)
    assert main(["infer", "--model", "llama-3-8b", "--batch-size", "200", "--prompt-len", "8000"]) == 0
    out, err = capsys.readouterr()
    assert "does NOT fit" in out and "warning:" in err


@pytest.mark.parametrize("argv", [["--model", "cruncher"], ["--model", "llama-3-8b", "--dtype", "fp64"],
                                  ["--model", "llama-3-8b", "--gpu", "h1000"], ["--model", "gpt2", "--tp", "5"]])
def test_cli_bad_inputs_exit_2_with_one_line(capsys, argv):
    assert main(["infer", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1
