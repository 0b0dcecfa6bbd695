"""Model presets: provenance, the GPT-3 paper's Table 2.1, config values that change counts, lookups."""

import inspect

import pytest

from trainledger.account.counting.params import n_params
from trainledger.errors import TrainledgerError
from trainledger.specs import PRESET_ALIASES, PRESETS, get_model, presets

# GPT-3 (arXiv:2005.14165) Table 2.1: name, nominal size, n_layers, d_model, n_heads, d_head (XL: the table prints
# 24 heads, which cannot split d_model 2048 into heads of 128; the preset takes 16, see specs/presets.py)
GPT3_TABLE = [
    ("gpt3-125m", 125e6, 12, 768, 12, 64),
    ("gpt3-350m", 350e6, 24, 1024, 16, 64),
    ("gpt3-760m", 760e6, 24, 1536, 16, 96),
    ("gpt3-1.3b", 1.3e9, 24, 2048, 16, 128),
    ("gpt3-2.7b", 2.7e9, 32, 2560, 32, 80),
    ("gpt3-6.7b", 6.7e9, 32, 4096, 32, 128),
    ("gpt3-13b", 13e9, 40, 5140, 40, 128),
    ("gpt3-175b", 175e9, 96, 12288, 96, 128),
]


@pytest.mark.parametrize("name, nominal, layers, d_model, heads, d_head", GPT3_TABLE, ids=[r[0] for r in GPT3_TABLE])
def test_gpt3_table_2_1(name, nominal, layers, d_model, heads, d_head):
    spec = get_model(name)
    assert (spec.n_layers, spec.d_model, spec.n_heads, spec.head_dim) == (layers, d_model, heads, d_head)
    assert (spec.max_seq_len, spec.vocab_size, spec.d_ff) == (2048, 50257, 4 * d_model)
    assert spec.tied_embeddings and spec.position == "learned" and spec.mlp == "gelu"
    # every row within 2% of the paper's size (its name and Table 2.1's n_params column)
    assert n_params(spec) == pytest.approx(nominal, rel=0.02)


def test_gpt3_xl_literal_row_would_miss_its_size():
    # the literal row, 24 heads × 128 = 3072 wide attention for d_model 2048, is 1.52B: 17% over the paper's 1.3B
    literal = get_model("gpt3-1.3b").with_(n_heads=24)
    assert n_params(literal) == pytest.approx(1.517e9, rel=1e-3)
    assert n_params(get_model("gpt3-1.3b")) == pytest.approx(1.316e9, rel=1e-3)


def test_config_values_that_matter():
    qwen = get_model("qwen2.5-7b")
    assert not qwen.tied_embeddings and qwen.qkv_bias and not qwen.attn_out_bias
    assert (qwen.kv_heads, qwen.rope_theta, qwen.norm_eps) == (4, 1e6, 1e-6)
    llama3 = get_model("llama-3-8b")
    assert (llama3.kv_heads, llama3.rope_theta, llama3.max_seq_len, llama3.vocab_size) == (8, 500000.0, 8192, 128256)
    assert get_model("llama-3.1-405b").max_seq_len == 131072
    assert get_model("llama-2-70b").kv_heads == 8 and get_model("llama-2-13b").kv_heads == 40
    mixtral = get_model("mixtral-8x7b")
    assert (mixtral.n_experts, mixtral.experts_per_token, mixtral.rope_theta) == (8, 2, 1e6)
    assert get_model("mistral-7b").kv_heads == 8
    gpt2 = get_model("gpt2")
    assert gpt2.tied_embeddings and gpt2.norm_bias and gpt2.mlp_bias and gpt2.max_seq_len == 1024
    pythia = get_model("pythia-1.4b")
    assert pythia.parallel_residual and pythia.rotary_dim == 32 and pythia.gelu_approximate == "none"
    gemma2 = get_model("gemma-2-2b")
    assert (gemma2.attn_softcap, gemma2.final_softcap, gemma2.is_sliding(0), gemma2.is_sliding(1)) == (50.0, 30.0, True, False)
    gemma3 = get_model("gemma-3-1b")
    assert [gemma3.is_sliding(i) for i in range(6)] == [True] * 5 + [False] and gemma3.layer_rope_theta(0) == 1e4
    assert gemma3.layer_rope_theta(5) == 1e6 and gemma3.qk_norm and not gemma3.attn_softcap
    assert get_model("mpt-7b").position == "alibi" and get_model("phi-3-mini").sliding_window == 2047
    qwen_moe = get_model("qwen1.5-moe-a2.7b")
    assert (qwen_moe.shared_expert_d_ff, qwen_moe.renormalize_topk, get_model("qwen3-30b-a3b").renormalize_topk) == (5632, False, True)


def test_every_preset_names_its_source_on_the_line_above():
    lines = inspect.getsource(presets).splitlines()
    literals = [i for i, line in enumerate(lines) if "= TransformerSpec(" in line or "= CruncherSpec(" in line
                or "= _gpt2(" in line]
    assert len(literals) == len(PRESETS)
    for i in literals:
        above = lines[i - 1]
        assert above.startswith("# ") or above.startswith("_GPT3") or lines[i - 1].startswith("GPT3_"), lines[i]
    for spec in PRESETS.values():
        assert spec.source, spec.name


def test_lookup_aliases_and_errors():
    assert get_model("GPT2") is PRESETS["gpt2"]
    assert get_model("gpt3-xl") is PRESETS["gpt3-1.3b"]
    for alias, target in PRESET_ALIASES.items():
        assert target in PRESETS and alias not in PRESETS
    with pytest.raises(TrainledgerError) as error:
        get_model("gpt5")
    message = str(error.value)
    assert "--model" in message and "llama-3-8b" in message and "\n" not in message


def test_every_transformer_preset_names_its_pretraining_context():
    """Issue 14: --seq-len defaults to the context a model was pre-trained at, never silently to a 128K position range."""
    source = inspect.getsource(presets)
    for spec in PRESETS.values():
        if spec.kind != "transformer":
            continue
        assert spec.pretrain_seq_len is not None and spec.default_seq_len <= spec.max_seq_len, spec.name
    assert "pretrain_seq_len=8192,  # arXiv:2407.21783" in source          # the source sits beside the value
    assert PRESETS["llama-3.1-405b"].default_seq_len == 8192 and PRESETS["qwen2.5-7b"].default_seq_len == 4096
    assert PRESETS["gpt2"].default_seq_len == 1024 and PRESETS["mixtral-8x7b"].default_seq_len == 32768


def test_config_json_default_context_is_capped():
    from trainledger.specs.model import DEFAULT_CONTEXT_CAP
    spec = PRESETS["qwen2.5-7b"].with_(pretrain_seq_len=None)              # what a config.json gives
    assert spec.default_seq_len == DEFAULT_CONTEXT_CAP == 8192
    assert PRESETS["gpt2"].with_(pretrain_seq_len=None).default_seq_len == 1024
