"""Built-in model presets: one literal each, with its source on the line above."""

from __future__ import annotations

from trainledger.specs.hf_config_moe import DEEPSEEK_V3_NOTES, GPT_OSS_NOTES
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
    name="gpt2", family="gpt2", vocab_size=50257, d_model=768, n_layers=12, n_heads=12, d_ff=3072, max_seq_len=1024,
    position="learned", norm="layernorm", norm_bias=True, mlp="gelu", qkv_bias=True, attn_out_bias=True,
    mlp_bias=True, tied_embeddings=True, source="config.json of openai-community/gpt2",
    published_n_params=124_439_808,
    pretrain_seq_len=1024,  # GPT-2 paper (Radford et al. 2019), Sec. 2.3: context size 1024 tokens
)

# config.json of meta-llama/Llama-2-7b-hf; 6,738,415,616 parameters
LLAMA_2_7B = TransformerSpec(
    name="llama-2-7b", family="llama", vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=11008,
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
        mlp="gelu", qkv_bias=True, attn_out_bias=True, mlp_bias=True, tied_embeddings=True, family="gpt2",
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
# Every row lands within 2% of its name (tests/specs/test_presets.py). 13B keeps the table's 40 × 128 = 5120
# attention width for d_model 5140 (d_head is a free choice there).
_GPT3 = "GPT-3 paper (arXiv:2005.14165) Table 2.1"
GPT3_SMALL = _gpt2("gpt3-125m", 768, 12, 12, _GPT3 + ", GPT-3 Small", d_head=64, max_seq_len=2048)
GPT3_MEDIUM = _gpt2("gpt3-350m", 1024, 24, 16, _GPT3 + ", GPT-3 Medium", d_head=64, max_seq_len=2048)
GPT3_LARGE = _gpt2("gpt3-760m", 1536, 24, 16, _GPT3 + ", GPT-3 Large", d_head=96, max_seq_len=2048)
# GPT-3 XL: Table 2.1 prints 24 heads × d_head 128 = 3072 for d_model 2048, which cannot both hold (2048/24 is no
# integer). Taken literally that is 1.52B parameters, not the 1.3B of the paper's name and of its Table 2.1 size
# column. We keep d_model 2048 and d_head 128 and take 2048/128 = 16 heads: 1.32B, the paper's 1.3B (the head
# split changes no count as long as heads × d_head = d_model). GPT-Neo 1.3B and Pythia-1.4B (arXiv:2304.01373,
# Table 1: 24 layers, d_model 2048, 16 heads), built to GPT-3 XL's size, use 16 heads too.
GPT3_XL = _gpt2("gpt3-1.3b", 2048, 24, 16, _GPT3 + ", GPT-3 XL (16 heads of 128)", d_head=128, max_seq_len=2048)
GPT3_2_7B = _gpt2("gpt3-2.7b", 2560, 32, 32, _GPT3 + ", GPT-3 2.7B", d_head=80, max_seq_len=2048)
GPT3_6_7B = _gpt2("gpt3-6.7b", 4096, 32, 32, _GPT3 + ", GPT-3 6.7B", d_head=128, max_seq_len=2048)
GPT3_13B = _gpt2("gpt3-13b", 5140, 40, 40, _GPT3 + ", GPT-3 13B", d_head=128, max_seq_len=2048)
GPT3_175B = _gpt2("gpt3-175b", 12288, 96, 96, _GPT3 + ", GPT-3 175B", d_head=128, max_seq_len=2048)

# config.json of meta-llama/Llama-2-13b-hf; 13,015,864,320 parameters
LLAMA_2_13B = TransformerSpec(
    name="llama-2-13b", family="llama", vocab_size=32000, d_model=5120, n_layers=40, n_heads=40, n_kv_heads=40, d_ff=13824,
    max_seq_len=4096, norm_eps=1e-5, rope_theta=10000.0, source="config.json of meta-llama/Llama-2-13b-hf",
    pretrain_seq_len=4096,  # Llama 2 paper (arXiv:2307.09288), Table 1: context length 4k
    published_n_params=13_015_864_320,
)

# config.json of meta-llama/Llama-2-70b-hf; 68,976,648,192 parameters
LLAMA_2_70B = TransformerSpec(
    name="llama-2-70b", family="llama", vocab_size=32000, d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ff=28672,
    max_seq_len=4096, norm_eps=1e-5, rope_theta=10000.0, source="config.json of meta-llama/Llama-2-70b-hf",
    pretrain_seq_len=4096,  # Llama 2 paper (arXiv:2307.09288), Table 1: context length 4k
    published_n_params=68_976_648_192,
)

# config.json of meta-llama/Meta-Llama-3-8B; 8,030,261,248 parameters
LLAMA_3_8B = TransformerSpec(
    name="llama-3-8b", family="llama", vocab_size=128256, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336,
    max_seq_len=8192, norm_eps=1e-5, rope_theta=500000.0, source="config.json of meta-llama/Meta-Llama-3-8B",
    pretrain_seq_len=8192,  # Llama 3 model card (meta-llama/Meta-Llama-3-8B): context length 8k
    published_n_params=8_030_261_248,
)

# config.json of meta-llama/Meta-Llama-3-70B; 70,553,706,496 parameters
LLAMA_3_70B = TransformerSpec(
    name="llama-3-70b", family="llama", vocab_size=128256, d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8, d_ff=28672,
    max_seq_len=8192, norm_eps=1e-5, rope_theta=500000.0, source="config.json of meta-llama/Meta-Llama-3-70B",
    pretrain_seq_len=8192,  # Llama 3 model card (meta-llama/Meta-Llama-3-70B): context length 8k
    published_n_params=70_553_706_496,
)

# config.json of meta-llama/Llama-3.1-405B (rope_scaling "llama3" changes no parameter); 405,853,388,800 parameters
LLAMA_3_1_405B = TransformerSpec(
    name="llama-3.1-405b", family="llama", vocab_size=128256, d_model=16384, n_layers=126, n_heads=128, n_kv_heads=8,
    d_ff=53248, max_seq_len=131072, norm_eps=1e-5, rope_theta=500000.0,
    source="config.json of meta-llama/Llama-3.1-405B", published_n_params=405_853_388_800,
    pretrain_seq_len=8192,  # arXiv:2407.21783 Sec. 3.4.1: 8K-token sequences; 128K only in the ~800B-token final stage
)

# Llama 3.1 and 3.2: rope_scaling "llama3" (factor 8 for 3.1, 32 for 3.2) changes no parameter; the bulk of
# pre-training used 8K-token sequences (arXiv:2407.21783 Sec. 3.4.1; Llama 3.2 1B and 3B were pruned and distilled
# from Llama 3.1 8B, model card meta-llama/Llama-3.2-1B, which publishes no shorter bulk context).
_LLAMA3_CONTEXT = 8192
# config.json of meta-llama/Llama-3.1-8B; 8,030,261,248 parameters
LLAMA_3_1_8B = TransformerSpec(
    name="llama-3.1-8b", family="llama", vocab_size=128256, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8,
    d_ff=14336, max_seq_len=131072, norm_eps=1e-5, rope_theta=500000.0, pretrain_seq_len=_LLAMA3_CONTEXT,
    source="config.json of meta-llama/Llama-3.1-8B", published_n_params=8_030_261_248,
)

# config.json of meta-llama/Llama-3.1-70B; 70,553,706,496 parameters
LLAMA_3_1_70B = TransformerSpec(
    name="llama-3.1-70b", family="llama", vocab_size=128256, d_model=8192, n_layers=80, n_heads=64, n_kv_heads=8,
    d_ff=28672, max_seq_len=131072, norm_eps=1e-5, rope_theta=500000.0, pretrain_seq_len=_LLAMA3_CONTEXT,
    source="config.json of meta-llama/Llama-3.1-70B", published_n_params=70_553_706_496,
)

# config.json of meta-llama/Llama-3.2-1B (tied head, head_dim 64); 1,235,814,400 parameters
LLAMA_3_2_1B = TransformerSpec(
    name="llama-3.2-1b", family="llama", vocab_size=128256, d_model=2048, n_layers=16, n_heads=32, n_kv_heads=8,
    d_ff=8192, max_seq_len=131072, norm_eps=1e-5, rope_theta=500000.0, tied_embeddings=True,
    pretrain_seq_len=_LLAMA3_CONTEXT, source="config.json of meta-llama/Llama-3.2-1B", published_n_params=1_235_814_400,
)

# config.json of meta-llama/Llama-3.2-3B (tied head, 24 heads of 128); 3,212,749,824 parameters
LLAMA_3_2_3B = TransformerSpec(
    name="llama-3.2-3b", family="llama", vocab_size=128256, d_model=3072, n_layers=28, n_heads=24, n_kv_heads=8,
    d_ff=8192, max_seq_len=131072, norm_eps=1e-5, rope_theta=500000.0, tied_embeddings=True,
    pretrain_seq_len=_LLAMA3_CONTEXT, source="config.json of meta-llama/Llama-3.2-3B", published_n_params=3_212_749_824,
)

# config.json of mistralai/Mistral-7B-v0.1 (sliding window 4096 on every layer); 7,241,732,096 parameters
MISTRAL_7B = TransformerSpec(
    name="mistral-7b", family="mistral", vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336,
    max_seq_len=32768, norm_eps=1e-5, rope_theta=10000.0, sliding_window=4096,
    source="config.json of mistralai/Mistral-7B-v0.1",
    pretrain_seq_len=8192,  # Mistral 7B paper (arXiv:2310.06825), Table 1: context_len 8192
    published_n_params=7_241_732_096,
)

# config.json of Qwen/Qwen2.5-7B (untied head, q/k/v biases); 7,615,616,512 parameters
QWEN2_5_7B = TransformerSpec(
    name="qwen2.5-7b", family="qwen2", vocab_size=152064, d_model=3584, n_layers=28, n_heads=28, n_kv_heads=4, d_ff=18944,
    max_seq_len=131072, norm_eps=1e-6, rope_theta=1000000.0, qkv_bias=True, tied_embeddings=False,
    source="config.json of Qwen/Qwen2.5-7B", published_n_params=7_615_616_512,
    pretrain_seq_len=4096,  # Qwen2.5 report (arXiv:2412.15115), Sec. 3.3: 4,096 tokens, 32,768 in the final stage
)

# config.json of mistralai/Mixtral-8x7B-v0.1 (8 experts, top-2); 46,702,792,704 parameters
MIXTRAL_8X7B = TransformerSpec(
    name="mixtral-8x7b", family="mixtral", vocab_size=32000, d_model=4096, n_layers=32, n_heads=32, n_kv_heads=8, d_ff=14336,
    max_seq_len=32768, norm_eps=1e-5, rope_theta=1000000.0, n_experts=8, experts_per_token=2,
    source="config.json of mistralai/Mixtral-8x7B-v0.1", published_n_params=46_702_792_704,
    pretrain_seq_len=32768,  # Mixtral paper (arXiv:2401.04088), Sec. 2: trained with a context size of 32k tokens
)

# config.json of EleutherAI/pythia-1.4b (gpt_neox: parallel residual, RoPE on 25% of each head, biases, untied);
# 1,414,647,808 parameters (the Pythia model card's exact count)
PYTHIA_1_4B = TransformerSpec(
    name="pythia-1.4b", family="gpt_neox", vocab_size=50304, d_model=2048, n_layers=24, n_heads=16, d_ff=8192, max_seq_len=2048,
    position="rope", rope_theta=10000.0, partial_rotary_factor=0.25, norm="layernorm", norm_bias=True,
    norm_eps=1e-5, mlp="gelu", gelu_approximate="none", qkv_bias=True, attn_out_bias=True, mlp_bias=True,
    parallel_residual=True, source="config.json of EleutherAI/pythia-1.4b", published_n_params=1_414_647_808,
    pretrain_seq_len=2048,  # Pythia paper (arXiv:2304.01373), Sec. 2: every model trained on sequences of 2048 tokens
)

# config.json of microsoft/Phi-3-mini-4k-instruct (phi3: fused qkv and gate_up, sliding window 2047 on every
# layer); 3,821,079,552 parameters
PHI_3_MINI_4K = TransformerSpec(
    name="phi-3-mini-4k", family="phi3", vocab_size=32064, d_model=3072, n_layers=32, n_heads=32, n_kv_heads=32, d_ff=8192,
    max_seq_len=4096, norm_eps=1e-5, rope_theta=10000.0, sliding_window=2047,
    source="config.json of microsoft/Phi-3-mini-4k-instruct", published_n_params=3_821_079_552,
    pretrain_seq_len=4096,  # Phi-3 report (arXiv:2404.14219), Sec. 2: phi-3-mini's default context length is 4K
)

# config.json of google/gemma-2-2b (gemma2: GeGLU, (1+w) RMSNorm, sandwich norms, embeddings × √d, soft-capping
# 50/30, sliding window 4096 on even layers); 2,614,341,888 parameters
GEMMA_2_2B = TransformerSpec(
    name="gemma-2-2b", family="gemma2", vocab_size=256000, d_model=2304, n_layers=26, n_heads=8, n_kv_heads=4, d_head=256,
    d_ff=9216, max_seq_len=8192, norm="gemma_rmsnorm", norm_eps=1e-6, mlp="geglu", rope_theta=10000.0,
    tied_embeddings=True, sandwich_norm=True, scale_embeddings=True, attn_softcap=50.0, final_softcap=30.0,
    sliding_window=4096, sliding_layers=tuple(range(0, 26, 2)),
    source="config.json of google/gemma-2-2b", published_n_params=2_614_341_888,
    pretrain_seq_len=8192,  # Gemma 2 report (arXiv:2408.00118), Table 1: context length 8192
)

# config.json of google/gemma-2-9b (as gemma-2-2b: GeGLU, sandwich norms, soft-capping 50/30, window 4096 on even
# layers; 16 heads of 256, 8 KV heads, query_pre_attn_scalar 256); 9,241,705,984 parameters
GEMMA_2_9B = TransformerSpec(
    name="gemma-2-9b", family="gemma2", vocab_size=256000, d_model=3584, n_layers=42, n_heads=16, n_kv_heads=8,
    d_head=256, d_ff=14336, max_seq_len=8192, norm="gemma_rmsnorm", norm_eps=1e-6, mlp="geglu", rope_theta=10000.0,
    tied_embeddings=True, sandwich_norm=True, scale_embeddings=True, attn_softcap=50.0, final_softcap=30.0,
    sliding_window=4096, sliding_layers=tuple(range(0, 42, 2)),
    source="config.json of google/gemma-2-9b", published_n_params=9_241_705_984,
    pretrain_seq_len=8192,  # Gemma 2 report (arXiv:2408.00118), Table 1: context length 8192
)

# config.json of google/gemma-3-1b-pt (gemma3_text: as Gemma 2 plus QK-norm, no soft-capping, window 512 on 5 of
# every 6 layers with RoPE θ 10000, θ 1e6 on the others); 999,885,952 parameters
GEMMA_3_1B = TransformerSpec(
    name="gemma-3-1b", family="gemma3_text", vocab_size=262144, d_model=1152, n_layers=26, n_heads=4, n_kv_heads=1, d_head=256,
    d_ff=6912, max_seq_len=32768, norm="gemma_rmsnorm", norm_eps=1e-6, mlp="geglu", rope_theta=1000000.0,
    rope_local_theta=10000.0, tied_embeddings=True, sandwich_norm=True, scale_embeddings=True, qk_norm=True,
    sliding_window=512, sliding_layers=tuple(i for i in range(26) if (i + 1) % 6),
    source="config.json of google/gemma-3-1b-pt", published_n_params=999_885_952,
    pretrain_seq_len=32768,  # Gemma 3 report (arXiv:2503.19786), Sec. 2: pre-trained with 32K sequences (1B is not extended)
)

# config.json of Qwen/Qwen3-8B (qwen3: QK-norm, d_head 128, no biases, untied); 8,190,735,360 parameters
QWEN3_8B = TransformerSpec(
    name="qwen3-8b", family="qwen3", vocab_size=151936, d_model=4096, n_layers=36, n_heads=32, n_kv_heads=8, d_ff=12288,
    max_seq_len=40960, norm_eps=1e-6, rope_theta=1000000.0, qk_norm=True,
    source="config.json of Qwen/Qwen3-8B", published_n_params=8_190_735_360,
    pretrain_seq_len=4096,  # Qwen3 report (arXiv:2505.09388), Sec. 3.2: stages S1 and S2 use 4,096 tokens; 32,768 only in S3
)

# config.json of mosaicml/mpt-7b (mpt: ALiBi, no biases, LayerNorm without bias, exact GELU, tied head);
# 6,649,286,656 parameters
MPT_7B = TransformerSpec(
    name="mpt-7b", family="mpt", vocab_size=50432, d_model=4096, n_layers=32, n_heads=32, d_ff=16384, max_seq_len=2048,
    position="alibi", alibi_bias_max=8.0, norm="layernorm", norm_eps=1e-5, mlp="gelu", gelu_approximate="none",
    tied_embeddings=True, source="config.json of mosaicml/mpt-7b", published_n_params=6_649_286_656,
    pretrain_seq_len=2048,  # MosaicML MPT-7B model card: trained with a context length of 2048 tokens
)

# config.json of Qwen/Qwen1.5-MoE-A2.7B (qwen2_moe: 60 experts of 1408, top-4 not renormalised, a shared expert of
# 5632 behind a sigmoid gate, q/k/v biases); 14,315,784,192 parameters, 2,689,173,504 active
QWEN1_5_MOE_A2_7B = TransformerSpec(
    name="qwen1.5-moe-a2.7b", family="qwen2_moe", vocab_size=151936, d_model=2048, n_layers=24, n_heads=16, n_kv_heads=16, d_ff=1408,
    max_seq_len=8192, norm_eps=1e-6, rope_theta=1000000.0, qkv_bias=True, n_experts=60, experts_per_token=4,
    renormalize_topk=False, shared_expert_d_ff=5632, shared_expert_gate=True,
    source="config.json of Qwen/Qwen1.5-MoE-A2.7B", published_n_params=14_315_784_192,
    pretrain_seq_len=8192,  # no published pre-training context: the config's position range (max_position_embeddings)
)

# config.json of Qwen/Qwen3-30B-A3B (qwen3_moe: 128 experts of 768, top-8 renormalised, QK-norm, d_head 128);
# 30,532,122,624 parameters, 3,353,032,704 active
QWEN3_30B_A3B = TransformerSpec(
    name="qwen3-30b-a3b", family="qwen3_moe", vocab_size=151936, d_model=2048, n_layers=48, n_heads=32, n_kv_heads=4, d_head=128,
    d_ff=768, max_seq_len=40960, norm_eps=1e-6, rope_theta=1000000.0, qk_norm=True, n_experts=128,
    experts_per_token=8, source="config.json of Qwen/Qwen3-30B-A3B", published_n_params=30_532_122_624,
    pretrain_seq_len=4096,  # Qwen3 report (arXiv:2505.09388), Sec. 3.2: stages S1 and S2 use 4,096 tokens; 32,768 only in S3
)

PRESETS = {spec.name: spec for spec in [
    TINY, CRUNCHER, GPT2, GPT2_MEDIUM, GPT2_LARGE, GPT2_XL,
    GPT3_SMALL, GPT3_MEDIUM, GPT3_LARGE, GPT3_XL, GPT3_2_7B, GPT3_6_7B, GPT3_13B, GPT3_175B,
    LLAMA_2_7B, LLAMA_2_13B, LLAMA_2_70B, LLAMA_3_8B, LLAMA_3_70B, LLAMA_3_1_405B,
    LLAMA_3_1_8B, LLAMA_3_1_70B, LLAMA_3_2_1B, LLAMA_3_2_3B,
    MISTRAL_7B, QWEN2_5_7B, MIXTRAL_8X7B, PYTHIA_1_4B, PHI_3_MINI_4K, GEMMA_2_2B, GEMMA_2_9B, GEMMA_3_1B, QWEN3_8B,
    MPT_7B,
    QWEN1_5_MOE_A2_7B, QWEN3_30B_A3B,
]}

# Other names for presets (the GPT-3 paper's size names).
ALIASES = {
    "gpt3-small": "gpt3-125m", "gpt3-medium": "gpt3-350m", "gpt3-large": "gpt3-760m", "gpt3-xl": "gpt3-1.3b",
    "gpt3": "gpt3-175b", "mistral-7b-v0.1": "mistral-7b",
    "mixtral-8x7b-v0.1": "mixtral-8x7b", "phi-3-mini": "phi-3-mini-4k",
    # the Hugging Face repository names fine-tuning tables and users write (meta-llama/Llama-3.1-8B, Qwen/Qwen2.5-7B)
    "llama-3.1-8b-instruct": "llama-3.1-8b", "meta-llama-3.1-8b": "llama-3.1-8b", "llama-3.2-1b-instruct": "llama-3.2-1b",
    "llama-3.2-3b-instruct": "llama-3.2-3b", "qwen2.5-7b-instruct": "qwen2.5-7b",
    "phi-3-mini-4k-instruct": "phi-3-mini-4k", "gemma-2-9b-it": "gemma-2-9b",
}

# config.json of deepseek-ai/DeepSeek-V3 (deepseek_v3: multi-head latent attention with q_lora_rank 1536, kv_lora_rank
# 512, qk_nope_head_dim 128 + qk_rope_head_dim 64, v_head_dim 128; 1 shared + 256 routed experts of 2048, top-8,
# the first 3 layers dense of 18432; 1 multi-token-prediction module, counted apart). README_WEIGHTS.md of
# deepseek-ai/DeepSeek-V3: 671B main-model parameters, 36.7B activated; the MTP module 11.5B unique.
DEEPSEEK_V3 = TransformerSpec(
    name="deepseek-v3", family="deepseek_v3", vocab_size=129280, d_model=7168, n_layers=61, n_heads=128, n_kv_heads=128, d_head=192,
    d_ff=2048, max_seq_len=163840, norm_eps=1e-6, rope_theta=10000.0, n_experts=256, experts_per_token=8,
    rope_layout="interleaved",  # transformers' DeepseekV3Config rope_interleave (default true)
    shared_expert_d_ff=2048, dense_layers=(0, 1, 2), dense_d_ff=18432,
    kv_lora_rank=512, q_lora_rank=1536, qk_rope_head_dim=64, v_head_dim=128, n_mtp_layers=1,
    expert_groups=8, expert_groups_per_token=4, approximations=DEEPSEEK_V3_NOTES,
    source="config.json of deepseek-ai/DeepSeek-V3", published_n_params=None,   # rounded on the card: 671B (tests/account/test_moe_presets.py)
    pretrain_seq_len=4096,  # DeepSeek-V3 report (arXiv:2412.19437), Sec. 4.2: sequence length 4K during pre-training
)

# config.json of Qwen/Qwen3-235B-A22B (qwen3_moe: 128 experts of 1536, top-8 renormalised, QK-norm, 4 KV heads);
# model card: 235B parameters, 22B activated
QWEN3_235B_A22B = TransformerSpec(
    name="qwen3-235b-a22b", family="qwen3_moe", vocab_size=151936, d_model=4096, n_layers=94, n_heads=64, n_kv_heads=4, d_head=128,
    d_ff=1536, max_seq_len=40960, norm_eps=1e-6, rope_theta=1000000.0, qk_norm=True, n_experts=128,
    experts_per_token=8, source="config.json of Qwen/Qwen3-235B-A22B", published_n_params=None,   # rounded on the card: 235B
    pretrain_seq_len=4096,  # Qwen3 report (arXiv:2505.09388), Sec. 3.2: stages S1 and S2 use 4,096 tokens; 32,768 only in S3
)

# config.json of openai/gpt-oss-120b (gpt_oss: 128 experts of 2880 with biases, top-4; q/k/v/o biases, a learned
# attention sink per head, sliding window 128 on even layers, router with bias, untied head); gpt-oss model card
# (arXiv:2508.10925) Table 1: 116.83B parameters, 5.13B active (without the token embedding)
GPT_OSS_120B = TransformerSpec(
    name="gpt-oss-120b", family="gpt_oss", vocab_size=201088, d_model=2880, n_layers=36, n_heads=64, n_kv_heads=8, d_head=64,
    d_ff=2880, max_seq_len=131072, norm_eps=1e-5, rope_theta=150000.0, qkv_bias=True, attn_out_bias=True,
    mlp_bias=True, n_experts=128, experts_per_token=4, router_bias=True, attention_sinks=True,
    sliding_window=128, sliding_layers=tuple(range(0, 36, 2)),
    approximations=GPT_OSS_NOTES + ("rope_scaling 'yarn' ignored: plain RoPE with θ as given (positions past the "
                                    "pre-scaling range differ; no count changes)",),
    source="config.json of openai/gpt-oss-120b", published_n_params=None,   # rounded on the card: 116.83B
    pretrain_seq_len=4096,  # config.json initial_context_length 4096 (the context before YaRN extension)
)

# A byte-level mixture of experts small enough for CPU runs of `train --ep` (trainledger's own): tiny with 8 GELU
# experts of 256, top-2
TINY_MOE = TransformerSpec(
    name="tiny-moe", vocab_size=256, d_model=128, n_layers=4, n_heads=4, d_ff=256, max_seq_len=256,
    position="learned", norm="layernorm", norm_bias=True, mlp="gelu", qkv_bias=True, attn_out_bias=True,
    mlp_bias=True, tied_embeddings=True, n_experts=8, experts_per_token=2,
    source="trainledger: byte-level mixture of experts for CPU training", pretrain_seq_len=128,
)

PRESETS.update({spec.name: spec for spec in [DEEPSEEK_V3, QWEN3_235B_A22B, GPT_OSS_120B, TINY_MOE]})
