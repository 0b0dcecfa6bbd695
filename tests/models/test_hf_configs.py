"""A config.json read by specs/hf_config.py, built as our Transformer, has exactly the parameters of the Hugging Face model.

Reference: the Hugging Face model class itself, built on the meta device from the same config
(STYLE.md: an independent implementation). Sizes are the real ones of each model family, so the
check covers GQA, q/k/v biases, tied and untied heads and experts at scale, at no memory cost.
"""

from __future__ import annotations

import json

import pytest
import torch

from trainledger.account.counting.params import param_counts
from trainledger.models import Transformer
from trainledger.specs.hf_config import spec_from_config_file

transformers = pytest.importorskip("transformers", reason="transformers is not installed; presets are still checked "
                                   "against param_counts and published counts in test_transformer.py")

CONFIGS = {
    # openai-community/gpt2-medium config.json: 354,823,168 parameters (facts.md)
    "gpt2-medium": ("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=50257, n_embd=1024, n_layer=24, n_head=16,
                                                          n_positions=1024)),
    # meta-llama/Meta-Llama-3-8B config.json: 8,030,261,248 parameters (facts.md)
    "llama-3-8b": ("LlamaConfig", "LlamaForCausalLM", dict(vocab_size=128256, hidden_size=4096, num_hidden_layers=32,
                                                            num_attention_heads=32, num_key_value_heads=8,
                                                            intermediate_size=14336, max_position_embeddings=8192,
                                                            rope_theta=500000.0, tie_word_embeddings=False)),
    # Qwen/Qwen2-0.5B-style: q/k/v biases, GQA 14/2, tied embeddings
    "qwen2-0.5b": ("Qwen2Config", "Qwen2ForCausalLM", dict(vocab_size=151936, hidden_size=896, num_hidden_layers=24,
                                                            num_attention_heads=14, num_key_value_heads=2,
                                                            intermediate_size=4864, max_position_embeddings=32768,
                                                            tie_word_embeddings=True)),
    # mistralai/Mixtral-8x7B-v0.1-style, 2 layers: 8 experts, top-2, GQA 32/8
    "mixtral-2-layers": ("MixtralConfig", "MixtralForCausalLM", dict(vocab_size=32000, hidden_size=4096,
                                                                      num_hidden_layers=2, num_attention_heads=32,
                                                                      num_key_value_heads=8, intermediate_size=14336,
                                                                      num_local_experts=8, num_experts_per_tok=2)),
    # a Llama with every bias and head_dim != hidden/heads
    "llama-biases-head-dim": ("LlamaConfig", "LlamaForCausalLM", dict(vocab_size=1000, hidden_size=256,
                                                                       num_hidden_layers=2, num_attention_heads=4,
                                                                       num_key_value_heads=2, head_dim=96,
                                                                       intermediate_size=512, attention_bias=True,
                                                                       mlp_bias=True)),
    # EleutherAI/pythia-1.4b config.json: 1,414,647,808 parameters (the Pythia model card)
    "pythia-1.4b": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(vocab_size=50304, hidden_size=2048, num_hidden_layers=24,
                                                                num_attention_heads=16, intermediate_size=8192,
                                                                rotary_pct=0.25, hidden_act="gelu")),
    # microsoft/Phi-3-mini-4k-instruct config.json
    "phi-3-mini-4k": ("Phi3Config", "Phi3ForCausalLM", dict(vocab_size=32064, hidden_size=3072, num_hidden_layers=32,
                                                            num_attention_heads=32, num_key_value_heads=32,
                                                            intermediate_size=8192, sliding_window=2047,
                                                            pad_token_id=32000)),
    # google/gemma-2-2b config.json
    "gemma-2-2b": ("Gemma2Config", "Gemma2ForCausalLM", dict(vocab_size=256000, hidden_size=2304, num_hidden_layers=26,
                                                             num_attention_heads=8, num_key_value_heads=4, head_dim=256,
                                                             intermediate_size=9216)),
    # google/gemma-3-1b-pt config.json
    "gemma-3-1b": ("Gemma3TextConfig", "Gemma3ForCausalLM", dict(vocab_size=262144, hidden_size=1152, num_hidden_layers=26,
                                                                 num_attention_heads=4, num_key_value_heads=1, head_dim=256,
                                                                 intermediate_size=6912, sliding_window=512)),
    # Qwen/Qwen3-8B config.json
    "qwen3-8b": ("Qwen3Config", "Qwen3ForCausalLM", dict(vocab_size=151936, hidden_size=4096, num_hidden_layers=36,
                                                         num_attention_heads=32, num_key_value_heads=8, head_dim=128,
                                                         intermediate_size=12288, tie_word_embeddings=False)),
    # mosaicml/mpt-7b config.json
    "mpt-7b": ("MptConfig", "MptForCausalLM", dict(vocab_size=50432, d_model=4096, n_heads=32, n_layers=32)),
    # Qwen/Qwen1.5-MoE-A2.7B-style, 2 layers: 60 experts of 1408, top-4, a shared expert of 5632
    "qwen1.5-moe-2-layers": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(
        vocab_size=151936, hidden_size=2048, num_hidden_layers=2, num_attention_heads=16, num_key_value_heads=16,
        intermediate_size=5632, moe_intermediate_size=1408, shared_expert_intermediate_size=5632, num_experts=60,
        num_experts_per_tok=4)),
    # Qwen/Qwen3-30B-A3B-style, 3 layers, the middle one dense (mlp_only_layers): 128 experts of 768, top-8
    "qwen3-moe-3-layers": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        vocab_size=151936, hidden_size=2048, num_hidden_layers=3, num_attention_heads=32, num_key_value_heads=4,
        head_dim=128, intermediate_size=6144, moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
        mlp_only_layers=[1])),
}

PUBLISHED = {"gpt2-medium": 354_823_168, "llama-3-8b": 8_030_261_248,   # facts.md
             "pythia-1.4b": 1_414_647_808}                              # the Pythia model card


@pytest.mark.parametrize("name", CONFIGS)
def test_config_json_params_match_hugging_face(name, tmp_path):
    config_cls, model_cls, kwargs = CONFIGS[name]
    config = getattr(transformers, config_cls)(**kwargs)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config.to_dict()))
    spec = spec_from_config_file(path)
    with torch.device("meta"):
        hf = getattr(transformers, model_cls)(config)
    expected = sum(p.numel() for p in hf.parameters())
    ours = Transformer(spec, device="meta")
    assert ours.n_params() == expected
    assert param_counts(spec)["n_params"] == expected
    if name in PUBLISHED:
        assert expected == PUBLISHED[name]
