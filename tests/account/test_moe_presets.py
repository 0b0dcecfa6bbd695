"""The 2025 mixture-of-experts presets against their model cards (published, rounded figures), and MLA's FLOPs.

Exact counts are checked against transformers' own DeepseekV3 / GptOss / Qwen3Moe models built on the meta device
in tests/account/test_params.py::test_preset_count_equals_meta_device_model; here the published totals."""

import pytest

from trainledger.account.counting.flops import attention_flops_per_token, forward_flops_breakdown
from trainledger.account.counting.params import param_counts
from trainledger.specs import get_model


def test_deepseek_v3_model_card():
    """README_WEIGHTS.md of deepseek-ai/DeepSeek-V3: main model 671B, 36.7B activated; the MTP module 11.5B unique
    parameters (embedding and head shared). arXiv:2412.19437 Sec. 1: 671B total, 37B activated.
    Our active count (every parameter but the 248 idle routed experts of each MoE layer) is 37.55B: +1.5 % over the
    paper's rounded 37B. The README's 36.7B is met (0.2 %) only without the token embedding, although the README
    says it includes it; `params` prints both (n_params_active, n_params_active_excl_embedding)."""
    counts = param_counts(get_model("deepseek-v3"))
    assert counts["n_params"] == pytest.approx(671e9, rel=0.001)
    assert counts["n_params_mtp"] == pytest.approx(11.5e9, rel=0.01)
    assert counts["n_params_active"] == pytest.approx(37e9, rel=0.02)
    assert counts["n_params_active_excl_embedding"] == pytest.approx(36.7e9, rel=0.01)
    assert counts["n_params_active"] - counts["n_params_active_excl_embedding"] == counts["components"]["token_embedding"]


def test_qwen3_235b_a22b_model_card():
    """Qwen/Qwen3-235B-A22B model card: 235B parameters, 22B activated (embeddings included, as for Qwen3-30B-A3B)."""
    counts = param_counts(get_model("qwen3-235b-a22b"))
    assert counts["n_params"] == pytest.approx(235e9, rel=0.01)
    assert counts["n_params_active"] == pytest.approx(22e9, rel=0.01)


def test_params_prints_both_active_counts_for_moe_models_only(capsys):
    """The cards differ in what "active" counts; `params` prints both for an MoE model, one for a dense one."""
    from trainledger.cli.main import main
    assert main(["params", "--model", "gpt-oss-120b"]) == 0
    out = capsys.readouterr().out
    assert "n_params_active_excl_embedding" in out and "5.13B" in out and "5.71B" in out
    assert main(["params", "--model", "llama-3-8b"]) == 0
    assert "excl_embedding" not in capsys.readouterr().out
    assert main(["params", "--model", "llama-3-8b", "--json"]) == 0
    import json
    data = json.loads(capsys.readouterr().out)
    assert data["n_params_active_excl_embedding"] == data["n_params"] - data["components"]["token_embedding"]


def test_gpt_oss_120b_model_card():
    """gpt-oss model card (arXiv:2508.10925) Table 1, gpt-oss-120b: MLP 114.71B, attention 0.96B, embed + unembed
    1.16B, total 116.83B, active 5.13B (the unembedding counted, the token embedding not)."""
    counts = param_counts(get_model("gpt-oss-120b"))
    c = counts["components"]
    assert counts["n_params"] == pytest.approx(116.83e9, rel=0.001)
    assert c["mlp"] + c["router"] == pytest.approx(114.71e9, rel=0.001)
    assert c["attention"] == pytest.approx(0.96e9, rel=0.01)
    assert c["token_embedding"] + c["lm_head"] == pytest.approx(1.16e9, rel=0.01)
    assert counts["n_params_active_excl_embedding"] == pytest.approx(5.13e9, rel=0.01)


def test_mla_matrices_and_attention_core():
    """DeepSeek-V3 attention per layer and token (arXiv:2412.19437 Sec. 2.1.1): five matrices, 187.1M weights,
    by hand; the core scores 192-dim keys and mixes 128-dim values: 2·T·128·(192 + 128) per layer."""
    spec = get_model("deepseek-v3")
    parts = forward_flops_breakdown(spec, seq_len=4096)
    by_hand = (7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168)
    mla = sum(parts[name] for name in ("q_a_proj", "q_b_proj", "kv_a_proj", "kv_b_proj", "o_proj"))
    assert mla == 2 * 61 * by_hand
    assert attention_flops_per_token(spec, 4096) == 61 * 2 * 4096 * 128 * (192 + 128)
    assert attention_flops_per_token(spec, 4096, "causal") == attention_flops_per_token(spec, 4096) / 2
