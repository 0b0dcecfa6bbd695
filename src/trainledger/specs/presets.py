"""Built-in model presets: one literal each, with its source on the line above."""

from __future__ import annotations

from trainledger.specs.model import CruncherSpec, TransformerSpec

# A byte-level GPT-2-style model small enough to train on 2 CPU cores in minutes (trainledger's own).
TINY = TransformerSpec(
    name="tiny", vocab_size=256, d_model=128, n_layers=4, n_heads=4, d_ff=512, max_seq_len=256,
    position="learned", norm="layernorm", norm_bias=True, mlp="gelu", qkv_bias=True, attn_out_bias=True,
    mlp_bias=True, tied_embeddings=True, source="trainledger: byte-level GPT for CPU training",
    pretrain_seq_len=128,  # `trainledger train`'s default --seq-len
)

# CS336 Lecture 2 `Cruncher(dim=64, num_layers=2)`: 8,256 parameters
CRUNCHER = CruncherSpec(name="cruncher", dim=64, n_layers=2, published_n_params=8256)

# config.json of openai-community/gpt2; 124,439,808 parameters
GPT2 = TransformerSpec(
    name="gpt2", vocab_size=50257, d_model=768, n_layers=12, n_heads=12, d_ff=3072, max_seq_len=1024,
    position="learned", norm="layernorm", norm_bias=True, mlp="gelu", qkv_bias=True, attn_out_bias=True,
    mlp_bias=True, tied_embeddings=True, source="config.json of openai-community/gpt2",
    published_n_params=124_439_808,
    pretrain_seq_len=1024,  # GPT-2 paper (Radford et al. 2019), Sec. 2.3: context size 1024 tokens
)

# config.json of meta-llama/Llama-2-7b-hf; 6,738,415,616 parameters
LLAMA_2_7B = TransformerSpec(
    name="llama-2-7b", vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=11008,
    max_seq_len=4096, norm_eps=1e-5, source="config.json of meta-llama/Llama-2-7b-hf",
    pretrain_seq_len=4096,  # Llama 2 paper (arXiv:2307.09288), Table 1: context length 4k
    published_n_params=6_738_415_616,
)

def _gpt2(name: str, d_model: int, n_layers: int, n_heads: int, source: str, published_n_params: int | None = None,
          d_head: int | None = None, max_seq_len: int = 1024) -> TransformerSpec:
    """A GPT-2-style spec (learned positions, LayerNorm with bias, GELU MLP of 4·d_model, all biases, tied head).

    Pre-trained at their full context: GPT-2 1024 tokens (Radford et al. 2019, Sec. 2.3), GPT-3 2048
    (Brown et al. 2020, Sec. 2.1: n_ctx = 2048 for every size).
    """
    return TransformerSpec(
        name=name, vocab_size=50257, d_model=d_model, n_layers=n_layers, n_heads=n_heads, d_head=d_head,
        d_ff=4 * d_model, max_seq_len=max_seq_len, pretrain_seq_len=max_seq_len, position="learned", norm="layernorm", norm_bias=True,
        mlp="gelu", qkv_bias=True, attn_out_bias=True, mlp_bias=True, tied_embeddings=True,
        source=source, published_n_params=published_n_params,
    )


# config.json of openai-community/gpt2-medium; 354,823,168 parameters
GPT2_MEDIUM = _gpt2("gpt2-medium", 1024, 24, 16, "config.json of openai-community/gpt2-medium", 354_823_168)
# config.json of openai-community/gpt2-large; 774,030,080 parameters
GPT2_LARGE = _gpt2("gpt2-large", 1280, 36, 20, "config.json of openai-community/gpt2-large", 774_030_080)
# config.json of openai-community/gpt2-xl; 1,557,611,200 parameters
GPT2_XL = _gpt2("gpt2-xl", 1600, 48, 25, "config.json of openai-community/gpt2-xl", 1_557_611_200)

# GPT-3 (Brown et al. 2020, arXiv:2005.14165) Table 2.1: n_layers, d_model, n_heads, d_head; context 2048,
# d_ff = 4·d_model, GPT-2 architecture and tokenizer (vocab 50257). The paper's sizes (125M, ...) are rounded,
# so published_n_params stays None; the alternating sparse attention layers have no parameters of their own.
# XL and 13B have n_heads·d_head != d_model (24 × 128 = 3072 for 2048; 40 × 128 = 5120 for 5140). Taken
# literally, XL's row gives 1.52B parameters, not the 1.3B in its name (24 heads cannot split 2048 evenly,
# so the table is inconsistent there); every other row lands within 2% of its name.
_GPT3 = "GPT-3 paper (arXiv:2005.14165) Table 2.1"
GPT3_SMALL = _gpt2("gpt3-125m", 768, 12, 12, _GPT3 + ", GPT-3 Small", d_head=64, max_seq_len=2048)
GPT3_MEDIUM = _gpt2("gpt3-350m", 1024, 24, 16, _GPT3 + ", GPT-3 Medium", d_head=64, max_seq_len=2048)
GPT3_LARGE = _gpt2("gpt3-760m", 1536, 24, 16, _GPT3 + ", GPT-3 Large", d_head=96, max_seq_len=2048)
GPT3_XL = _gpt2("gpt3-1.3b", 2048, 24, 24, _GPT3 + ", GPT-3 XL", d_head=128, max_seq_len=2048)
GPT3_2_7B = _gpt2("gpt3-2.7b", 2560, 32, 32, _GPT3 + ", GPT-3 2.7B", d_head=80, max_seq_len=2048)
GPT3_6_7B = _gpt2("gpt3-6.7b", 4096, 32, 32, _GPT3 + ", GPT-3 6.7B", d_head=128, max_seq_len=2048)
GPT3_13B = _gpt2("gpt3-13b", 5140, 40, 40, _GPT3 + ", GPT-3 13B", d_head=128, max_seq_len=2048)
GPT3_175B = _gpt2("gpt3-175b", 12288, 96, 96, _GPT3 + ", GPT-3 175B", d_head=128, max_seq_len=2048)

# config.json of meta-llama/Llama-2-13b-hf; 13,015,864,320 parameters
LLAMA_2_13B = TransformerSpec(
    name="llama-2-13b", vocab_size=32000, d_model=5120, n_layers=40, n_heads=40, n_kv_heads=40, d_ff=13824,
    max_seq_len=4096, norm_eps=1e-5, rope_theta=10000.0, source="config.json of meta-llama/Llama-2-13b-hf",
    pretrain_seq_len=4096,  # Llama 2 paper (arXiv:2307.09288), Table 1: context length 4k
    published_n_params=13_015_864_320,
)

# config.json of meta-llama/Llama-2-70b-hf; 68,976,648,192 parameters
LLAMA_2_70B = TransformerSpec(
    name="llama-2-70b", vocab_size=32000, d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ff=28672,
    max_seq_len=4096, norm_eps=1e-5, rope_theta=10000.0, source="config.json of meta-llama/Llama-2-70b-hf",
    pretrain_seq_len=4096,  # Llama 2 paper (arXiv:2307.09288), Table 1: context length 4k
    published_n_params=68_976_648_192,
)

# config.json of meta-llama/Meta-Llama-3-8B; 8,030,261,248 parameters
LLAMA_3_8B = TransformerSpec(
    name="llama-3-8b", vocab_size=128256, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336,
    max_seq_len=8192, norm_eps=1e-5, rope_theta=500000.0, source="config.json of meta-llama/Meta-Llama-3-8B",
    pretrain_seq_len=8192,  # Llama 3 model card (meta-llama/Meta-Llama-3-8B): context length 8k
    published_n_params=8_030_261_248,
)

# config.json of meta-llama/Meta-Llama-3-70B; 70,553,706,496 parameters
LLAMA_3_70B = TransformerSpec(
    name="llama-3-70b", vocab_size=128256, d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ff=28672,
    max_seq_len=8192, norm_eps=1e-5, rope_theta=500000.0, source="config.json of meta-llama/Meta-Llama-3-70B",
    pretrain_seq_len=8192,  # Llama 3 model card (meta-llama/Meta-Llama-3-70B): context length 8k
    published_n_params=70_553_706_496,
)

# config.json of meta-llama/Llama-3.1-405B (rope_scaling "llama3" changes no parameter); 405,853,388,800 parameters
LLAMA_3_1_405B = TransformerSpec(
    name="llama-3.1-405b", vocab_size=128256, d_model=16384, n_layers=126, n_heads=128, n_kv_heads=8,
    d_ff=53248, max_seq_len=131072, norm_eps=1e-5, rope_theta=500000.0,
    source="config.json of meta-llama/Llama-3.1-405B", published_n_params=405_853_388_800,
    pretrain_seq_len=8192,  # arXiv:2407.21783 Sec. 3.4.1: 8K-token sequences; 128K only in the ~800B-token final stage
)

# config.json of mistralai/Mistral-7B-v0.1 (sliding window 4096 changes no parameter); 7,241,732,096 parameters
MISTRAL_7B = TransformerSpec(
    name="mistral-7b", vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336,
    max_seq_len=32768, norm_eps=1e-5, rope_theta=10000.0, source="config.json of mistralai/Mistral-7B-v0.1",
    pretrain_seq_len=8192,  # Mistral 7B paper (arXiv:2310.06825), Table 1: context_len 8192
    published_n_params=7_241_732_096,
)

# config.json of Qwen/Qwen2.5-7B (untied head, q/k/v biases); 7,615,616,512 parameters
QWEN2_5_7B = TransformerSpec(
    name="qwen2.5-7b", vocab_size=152064, d_model=3584, n_layers=28, n_heads=28, n_kv_heads=4, d_ff=18944,
    max_seq_len=131072, norm_eps=1e-6, rope_theta=1000000.0, qkv_bias=True, tied_embeddings=False,
    source="config.json of Qwen/Qwen2.5-7B", published_n_params=7_615_616_512,
    pretrain_seq_len=4096,  # Qwen2.5 report (arXiv:2412.15115), Sec. 3.3: 4,096 tokens, 32,768 in the final stage
)

# config.json of mistralai/Mixtral-8x7B-v0.1 (8 experts, top-2); 46,702,792,704 parameters
MIXTRAL_8X7B = TransformerSpec(
    name="mixtral-8x7b", vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336,
    max_seq_len=32768, norm_eps=1e-5, rope_theta=1000000.0, n_experts=8, experts_per_token=2,
    source="config.json of mistralai/Mixtral-8x7B-v0.1", published_n_params=46_702_792_704,
    pretrain_seq_len=32768,  # Mixtral paper (arXiv:2401.04088), Sec. 2: trained with a context size of 32k tokens
)

PRESETS = {spec.name: spec for spec in [
    TINY, CRUNCHER, GPT2, GPT2_MEDIUM, GPT2_LARGE, GPT2_XL,
    GPT3_SMALL, GPT3_MEDIUM, GPT3_LARGE, GPT3_XL, GPT3_2_7B, GPT3_6_7B, GPT3_13B, GPT3_175B,
    LLAMA_2_7B, LLAMA_2_13B, LLAMA_2_70B, LLAMA_3_8B, LLAMA_3_70B, LLAMA_3_1_405B,
    MISTRAL_7B, QWEN2_5_7B, MIXTRAL_8X7B,
]}

# Other names for presets (the GPT-3 paper's size names).
ALIASES = {
    "gpt3-small": "gpt3-125m", "gpt3-medium": "gpt3-350m", "gpt3-large": "gpt3-760m", "gpt3-xl": "gpt3-1.3b",
    "gpt3": "gpt3-175b", "mistral-7b-v0.1": "mistral-7b",
    "mixtral-8x7b-v0.1": "mixtral-8x7b",
}
