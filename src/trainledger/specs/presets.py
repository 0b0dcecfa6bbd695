"""Built-in model presets: one literal each, with its source on the line above."""

from __future__ import annotations

from trainledger.specs.model import CruncherSpec, TransformerSpec

# A byte-level GPT-2-style model small enough to train on 2 CPU cores in minutes (trainledger's own).
TINY = TransformerSpec(
    name="tiny", vocab_size=256, d_model=128, n_layers=4, n_heads=4, d_ff=512, max_seq_len=256,
    position="learned", norm="layernorm", norm_bias=True, mlp="gelu", qkv_bias=True, attn_out_bias=True,
    mlp_bias=True, tied_embeddings=True, source="trainledger: byte-level GPT for CPU training",
)

# CS336 Lecture 2 `Cruncher(dim=64, num_layers=2)`: 8,256 parameters
CRUNCHER = CruncherSpec(name="cruncher", dim=64, n_layers=2, published_n_params=8256)

# config.json of openai-community/gpt2; 124,439,808 parameters
GPT2 = TransformerSpec(
    name="gpt2", vocab_size=50257, d_model=768, n_layers=12, n_heads=12, d_ff=3072, max_seq_len=1024,
    position="learned", norm="layernorm", norm_bias=True, mlp="gelu", qkv_bias=True, attn_out_bias=True,
    mlp_bias=True, tied_embeddings=True, source="config.json of openai-community/gpt2",
    published_n_params=124_439_808,
)

# config.json of meta-llama/Llama-2-7b-hf; 6,738,415,616 parameters
LLAMA_2_7B = TransformerSpec(
    name="llama-2-7b", vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=11008,
    max_seq_len=4096, norm_eps=1e-5, source="config.json of meta-llama/Llama-2-7b-hf",
    published_n_params=6_738_415_616,
)

PRESETS = {spec.name: spec for spec in [TINY, CRUNCHER, GPT2, LLAMA_2_7B]}
