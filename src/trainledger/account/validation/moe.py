"""Published mixture-of-experts training throughput, and what account.time.step predicts with expert parallelism. Pure.

Source: NVIDIA-NeMo/Megatron-Bridge `docs/performance-summary.md` (read at commit df0289c1; its 25.11 and 26.02 NeMo
container tables). "In MoE training benchmarks, we force-balance the token distribution among experts and all
benchmarks are token-dropless": so the rows are modelled balanced (--expert-imbalance 1) and dropless. Every MoE row
of DGX-H100, DGX-B200 and DGX-GB200 and a model we have is used, BF16 and FP8; the DGX-GB300 and DGX-B300 rows
(BLACKWELL_ULTRA) are predicted apart and kept aside.
- TAKEN / FP8_TAKEN: the 25.11 rows (the table the model was built against).
- ASIDE / FP8_ASIDE: the 26.02 rows, kept for a check on our side.
Modelled as the recipes run them (scripts/performance/configs/*/..._workload_base_configs.py): Megatron kernels,
the precision of the row (BF16 -> mixed-bf16; FP8-CS -> fp8-cs; FP8-MX -> mxfp8), the distributed optimizer
(ZeRO-1), the layout of the row with VP as the interleave, FLOPs counted causal. The recipes recompute only the norms
and the MoE activation (recompute_modules ["layernorm", "moe_act"]): elementwise work, timed as no recomputation;
their memory is Megatron-Core's under those settings (account/memory/megatron_moe.py, framework "megatron").

DeepSeek-V3 pre-training (arXiv:2412.19437, Sec. 3.1 and 4.2; facts.md): 2.664M H800 GPU-hours for 14.8T tokens on
2,048 H800 (PP16, EP64 over 8 nodes, ZeRO-1), FP8, sequences of 4K, batch 15360 sequences after the ramp, DualPipe
hiding the all-to-alls (counted, then hidden: `deepseek_v3_gpu_hours`). The report's block-wise FP8 (1x128
activations, 128x128 weights) is asked as fp8-cs, the nearest recipe we have; the MTP module it trained (Sec. 2.2)
is in the step (framework megatron trains it by default: account/time/mtp.py). The DGX-GB200 DeepSeek-V3 rows
(Megatron places its 61 layers unevenly over PP x VP) are modelled since the step takes uneven chunks
(2026-12-01: account.time.schedule.published_interleave). Nothing here is fitted.
"""

from __future__ import annotations

from trainledger.account.validation.published_run import PublishedRun, evaluate, run_of
from trainledger.errors import TrainledgerError
from trainledger.specs.hardware import get_gpu

SOURCE = "NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md"
# (container, system, model preset, gpu, precision, GPUs, global batch, micro-batch, seq, tp, pp, vp, ep, GA,
#  published tokens/s per GPU): every column as printed (VP "n/a" = 1). GA is kept to check the transcription: every
#  row's GBS / (MBS · DP) equals it except 25.11 DGX-H100 gpt-oss-120b (GA 2 printed, 8 by its GBS, MBS and DP).
# The DGX-H100 qwen3-235b-a22b FP8-CS rows (TP 2, PP 8, EP 32 on 256 GPUs: EP 32 > DP 16) are modelled since MoE
# Parallel Folding (account/counting/experts.py): FOLDED below. The DGX-B200 DeepSeekV3 "(w/ MTP)" rows are modelled
# since the step trains the MTP module: DEEPSEEK_MTP below.
TAKEN = [
    ("25.11", "DGX-H100", "gpt-oss-120b", "h100-sxm", "mixed-bf16", 64, 512, 4, 4096, 1, 4, 1, 8, 2, 5630),
    ("25.11", "DGX-B200", "gpt-oss-120b", "b200", "mixed-bf16", 64, 512, 4, 4096, 1, 1, 1, 8, 2, 8213),
    ("25.11", "DGX-GB200", "gpt-oss-120b", "gb200", "mixed-bf16", 64, 1280, 1, 8192, 1, 1, 1, 64, 20, 15876),
    ("25.11", "DGX-GB200", "qwen3-235b-a22b", "gb200", "mixed-bf16", 256, 8192, 1, 4096, 1, 8, 3, 32, 256, 4916),
    ("25.11", "DGX-GB200", "deepseek-v3", "gb200", "mixed-bf16", 256, 4096, 1, 4096, 1, 4, 4, 64, 64, 3139),
]
ASIDE = [
    ("26.02", "DGX-H100", "gpt-oss-120b", "h100-sxm", "mixed-bf16", 64, 1280, 1, 4096, 1, 4, 1, 8, 80, 5993),
    ("26.02", "DGX-B200", "gpt-oss-120b", "b200", "mixed-bf16", 64, 1280, 4, 4096, 1, 1, 1, 64, 5, 8047),
    ("26.02", "DGX-GB200", "gpt-oss-120b", "gb200", "mixed-bf16", 64, 1280, 4, 4096, 1, 1, 1, 64, 5, 15784),
]
# The 25.11 rows as the recipes of that time run them (Megatron-Bridge scripts/performance/configs/gpt_oss/
# workload_base_configs.py, the version with GBS 512; the same settings at commit 6b296ac with GBS 1280): B200
# expert_model_parallel_size=64 with micro_batch_size=4 (the summary prints EP 8), H100 micro_batch_size=1 from the
# base config with PP 4 (the summary prints MBS 4). The 26.02 rows print exactly the recipe's values. A reading for
# the diagnosis in docs/time.md, not a replacement of the rows as printed.
RECIPE_READING = [
    ("25.11", "DGX-H100", "gpt-oss-120b", "h100-sxm", "mixed-bf16", 64, 512, 1, 4096, 1, 4, 1, 8, 32, 5630),
    ("25.11", "DGX-B200", "gpt-oss-120b", "b200", "mixed-bf16", 64, 512, 4, 4096, 1, 1, 1, 64, 2, 8213),
]
# The two 25.11 rows whose printed layout their recipe did not run (above): as printed they do not fit
MISPRINTED = [TAKEN[0], TAKEN[1]]
# A fully specified newer measurement: Megatron-Bridge skills/mbridge-perf-cuda-graphs/SKILL.md, pitfall 13 (2026-05-18):
# Qwen3 30B A3B H100 BF16 pretrain, all-to-all dispatcher, eager iterations 41.36 s (TE-scoped CUDA graphs of attn,
# moe_router, moe_preprocess: 42.00 s). Layout as the experiment's own record gives it (NVIDIA-NeMo/Megatron-Bridge
# pull request #3868, the handoff comment of 2026-05-18: "2 nodes, 8 GPUs/node, 16 GPUs total, EP=16", "TP=1, PP=1,
# CP=1, MBS=1, GBS=1024", all-to-all dispatcher, MoE overlap off) and the recipe (scripts/performance/configs/qwen/
# qwen3_workload_base_configs.py QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_BF16_V1: num_gpus=16, global_batch_size=1024,
# expert_model_parallel_size=16; TP 1, PP 1, MBS 1; Qwen3 recipes' sequence 4096): 2 nodes of 8 H100.
SKILL_STEP_SECONDS = 41.36
SKILL_RUN = ("2026-05-18", "2x DGX-H100", "qwen3-30b-a3b", "h100-sxm", "mixed-bf16", 16, 1024, 1, 4096, 1, 1, 1, 16, 64,
             1024 * 4096 / SKILL_STEP_SECONDS / 16)
SKILL_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge skills/mbridge-perf-cuda-graphs/SKILL.md, pitfall 13; layout from "
                "Megatron-Bridge pull request #3868")
# The FP8 MoE rows (FP8-CS: per-tensor current scaling; FP8-MX: MXFP8, 32-element blocks), same summary.
FP8_TAKEN = [
    ("25.11", "DGX-H100", "qwen3-30b-a3b", "h100-sxm", "fp8-cs", 16, 512, 2, 4096, 1, 2, 24, 8, 32, 5275),
    ("25.11", "DGX-B200", "qwen3-30b-a3b", "b200", "mxfp8", 8, 512, 1, 4096, 1, 1, 1, 8, 64, 9299),
    ("25.11", "DGX-B200", "qwen3-235b-a22b", "b200", "mxfp8", 64, 1024, 1, 4096, 1, 8, 2, 8, 128, 3269),
    ("25.11", "DGX-GB200", "qwen3-30b-a3b", "gb200", "mxfp8", 8, 512, 4, 4096, 1, 1, 1, 8, 16, 23766),
    ("25.11", "DGX-GB200", "deepseek-v3", "gb200", "mxfp8", 256, 4096, 1, 4096, 1, 8, 4, 32, 128, 4018),
]
FP8_ASIDE = [
    ("26.02", "DGX-H100", "qwen3-30b-a3b", "h100-sxm", "fp8-cs", 16, 1024, 1, 4096, 1, 2, 12, 8, 128, 2557),
    ("26.02", "DGX-B200", "qwen3-30b-a3b", "b200", "mxfp8", 8, 512, 1, 4096, 1, 1, 1, 8, 64, 9691),
    ("26.02", "DGX-B200", "qwen3-235b-a22b", "b200", "mxfp8", 256, 8192, 1, 4096, 1, 8, 1, 8, 256, 3805),
    ("26.02", "DGX-GB200", "qwen3-30b-a3b", "gb200", "mxfp8", 8, 512, 4, 4096, 1, 1, 1, 8, 16, 26084),
    ("26.02", "DGX-GB200", "qwen3-235b-a22b", "gb200", "mxfp8", 256, 8192, 1, 4096, 1, 8, 1, 32, 256, 5448),
    ("26.02", "DGX-GB200", "deepseek-v3", "gb200", "mxfp8", 256, 4096, 1, 4096, 1, 4, 4, 64, 64, 3955),
]
# The DeepSeek-V3 rows the summary prints "(w/o MTP)" (25.11 DGX-GB200 and DGX-GB300): their Model TFLOP/s /
# tokens/s is the count without the MTP module (GB200 BF16: 782e12 / 3139 = 2.49e11, FP8-MX 1003e12 / 4018 = 2.50e11;
# with it 2.61e11), so they are asked with --no-mtp; the 26.02 rows print nothing and count it (GB200 FP8-MX:
# 1028e12 / 3955 = 2.60e11), as the DGX-B200 "(w/ MTP)" rows do. tests/account/test_moe_gb200_deepseek.py checks it.
WITHOUT_MTP = {("25.11", "DGX-GB200", "deepseek-v3"), ("25.11", "DGX-GB300", "deepseek-v3")}
# DeepSeek-V3 on DGX-B200, trained with its multi-token-prediction module (25.11: "DeepSeekV3 (w/ MTP)"; 26.02: its
# Model TFLOP/s / tokens/s, 699e12 / 2689 = 2.60e11 FLOPs per token, is the count with MTP, 2.61e11, not without,
# 2.50e11): PP 16 with VP 1, so the 61 layers need no even split (Megatron Bridge's layout: 15 stages of 4, the last
# 1 + MTP + loss; account/time/mtp.py). The step trains the MTP module (framework megatron's default).
DEEPSEEK_MTP = [
    ("25.11", "DGX-B200", "deepseek-v3", "b200", "mxfp8", 256, 2048, 1, 4096, 1, 16, 1, 8, 128, 2139),
    ("26.02", "DGX-B200", "deepseek-v3", "b200", "mxfp8", 256, 4096, 1, 4096, 1, 16, 1, 8, 256, 2689),
]
# EP 32 > DP 16, folded over TP × DP (ETP 1): the 25.11 row is taken (FP8_TAKEN), the 26.02 one aside (FP8_ASIDE).
FOLDED = [
    ("25.11", "DGX-H100", "qwen3-235b-a22b", "h100-sxm", "fp8-cs", 256, 2048, 1, 4096, 2, 8, 4, 32, 128, 1575),
    ("26.02", "DGX-H100", "qwen3-235b-a22b", "h100-sxm", "fp8-cs", 256, 8192, 1, 4096, 2, 8, 4, 32, 512, 1633),
]
# The DGX-GB300 (25.11, 26.02) and DGX-B300 (26.02) MoE rows of the same summary, unlocked by the gb300 and b300
# entries: predicted and kept aside (`blackwell_ultra_cases`), never in the sets the thresholds count. 25.11
# DGX-GB300 Qwen3-235B prints GA 32 where its GBS, MBS and DP give 64. DeepSeek-V3's 61 layers do not split evenly
# over PP x VP: such rows are timed with their VP and uneven chunks, as `predict` does (until 2026-12-01 with
# --interleave 1); the 25.11 rows say "w/o MTP" (WITHOUT_MTP), the 26.02 rows say nothing and are asked with it.
BLACKWELL_ULTRA = [
    ("25.11", "DGX-GB300", "deepseek-v3", "gb300", "mixed-bf16", 256, 4096, 1, 4096, 1, 2, 4, 32, 32, 3848),
    ("25.11", "DGX-GB300", "deepseek-v3", "gb300", "mxfp8", 256, 4096, 1, 4096, 1, 2, 4, 32, 32, 4357),
    ("25.11", "DGX-GB300", "gpt-oss-120b", "gb300", "mixed-bf16", 64, 1280, 2, 8192, 1, 1, 1, 64, 10, 18347),
    ("25.11", "DGX-GB300", "qwen3-30b-a3b", "gb300", "mxfp8", 8, 512, 4, 4096, 1, 1, 1, 8, 16, 28934),
    ("25.11", "DGX-GB300", "qwen3-235b-a22b", "gb300", "mixed-bf16", 256, 8192, 2, 4096, 1, 4, 12, 16, 32, 6131),
    ("26.02", "DGX-GB300", "deepseek-v3", "gb300", "mxfp8", 256, 4096, 2, 4096, 1, 2, 8, 32, 16, 4612),
    ("26.02", "DGX-GB300", "gpt-oss-120b", "gb300", "mixed-bf16", 64, 1280, 4, 4096, 1, 1, 1, 64, 5, 19412),
    ("26.02", "DGX-GB300", "qwen3-30b-a3b", "gb300", "mxfp8", 8, 512, 8, 4096, 1, 1, 1, 8, 8, 30376),
    ("26.02", "DGX-GB300", "qwen3-235b-a22b", "gb300", "mxfp8", 256, 8192, 2, 4096, 1, 4, 1, 32, 64, 6583),
    ("26.02", "DGX-B300", "deepseek-v3", "b300", "mxfp8", 256, 4096, 1, 4096, 1, 16, 1, 8, 256, 2983),
    ("26.02", "DGX-B300", "gpt-oss-120b", "b300", "mixed-bf16", 64, 1280, 4, 4096, 1, 1, 1, 64, 5, 8359),
    ("26.02", "DGX-B300", "qwen3-30b-a3b", "b300", "mxfp8", 8, 512, 8, 4096, 1, 1, 1, 8, 8, 29521),
    ("26.02", "DGX-B300", "qwen3-235b-a22b", "b300", "mxfp8", 256, 8192, 1, 4096, 1, 8, 4, 8, 256, 2691),
]
FP8_TAKEN.append(FOLDED[0])
FP8_ASIDE.append(FOLDED[1])
# The 25.09 container's MoE rows of the same summary (docs/performance-summary.md at commit df0289c1, "25.09 NeMo
# Container"), printed "(tokendrop)": a capacity factor pads every expert to a fixed size, so the dispatch needs no
# host synchronization (Megatron-Core's cuda_sync_point is for dropless routing). No precision column: the footnote
# reads the bracketed figures as the other quantization (MXFP8 on B200/GB200, blockwise on H100), so the main
# figures are FP8-CS. Three share a layout with a later dropless row (25.11): the pair measures what dropless costs
# on top. Kept aside as a diagnosis (`tokendrop_cases`), never in the sets the thresholds count.
TOKENDROP_2509 = [
    ("25.09", "DGX-GB200", "qwen3-30b-a3b", "gb200", "fp8-cs", 8, 512, 4, 4096, 1, 1, 1, 8, 16, 22775),
    ("25.09", "DGX-GB200", "qwen3-235b-a22b", "gb200", "fp8-cs", 64, 1024, 1, 4096, 2, 1, 1, 64, 32, 4452),
    ("25.09", "DGX-B200", "qwen3-30b-a3b", "b200", "fp8-cs", 8, 512, 1, 4096, 1, 1, 1, 8, 64, 18066),
    ("25.09", "DGX-B200", "qwen3-235b-a22b", "b200", "fp8-cs", 64, 1024, 1, 4096, 1, 8, 2, 8, 128, 4104),
    ("25.09", "DGX-H100", "qwen3-30b-a3b", "h100-sxm", "fp8-cs", 16, 512, 2, 4096, 1, 2, 24, 8, 32, 10494),
    ("25.09", "DGX-H100", "qwen3-235b-a22b", "h100-sxm", "fp8-cs", 256, 2048, 1, 4096, 2, 8, 4, 32, 128, 1204),
]
# The dropless rows of the same layout, GPUs and micro-batch (25.11, FP8_TAKEN; B200 and GB200 in MXFP8 there)
DROPLESS_PAIRS = [(TOKENDROP_2509[0], FP8_TAKEN[3]), (TOKENDROP_2509[2], FP8_TAKEN[1]),
                  (TOKENDROP_2509[4], FP8_TAKEN[0])]
# The recipes' expert tensor-parallel size (Megatron-Bridge scripts/performance/configs/qwen/
# qwen3_workload_base_configs.py at commit 01b2977e: BASE_QWEN3_235B_A22B_CONFIG and BASE_QWEN3_30B_A3B_CONFIG set
# expert_tensor_parallel_size=1); models not listed run the Megatron default, ETP = TP (every such row has TP 1).
RECIPE_ETP = {"qwen3-235b-a22b": 1, "qwen3-30b-a3b": 1}
# Rows whose recipe overlaps the all-to-all with the other micro-batch's computation (the same file:
# QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V1, moe_a2a_overlap=True; the V2 recipe of the 26.02 row inherits it),
# asked with the one measured overlap ratio, 0.93 (arXiv:2603.07685 Sec. 4.2.3; account/validation/moe_report.py)
RECIPE_A2A_OVERLAP = {("DGX-H100", "qwen3-235b-a22b"): 0.93}
# NeMo Automodel: PyTorch FSDP2 + expert parallelism + DeepEP + TransformerEngine + grouped GEMM (NVIDIA blog
# "Accelerating Large-Scale Mixture-of-Experts Training in PyTorch", 2025-11), rows as printed, with every layout
# column, in NVIDIA-NeMo/Automodel docs/performance-summary.md, "Pre-Training Performance, System: DGX-H100, BF16",
# and docs.nvidia.com/nemo/automodel/latest/performance-summary.html: every row of a model we have. Force-balanced
# routing (`fake_balanced_gate: true`), mock data of full 4096-token sequences, Adam. Columns as printed: (model,
# GPUs, GBS, MBS, LBS, GA, seq, TP, PP, CP, EP, VP, FSDP, time per global step s, model TFLOPs/s per GPU, tokens/s
# per GPU), then the recipe's activation checkpointing and the benchmark config it is read from
# (examples/benchmark/configs/*.yaml at commit 037e04a6: `activation_checkpointing`, `ep_size`). GPT-OSS 120B prints
# EP "-"; its config sets ep_size 64 (all 64 GPUs), which is what is asked. Every row's GA is GBS / (LBS · DP) with
# DP = GPUs / PP, and FSDP = DP (tests/account/test_moe_automodel.py checks the transcription).
AUTOMODEL = [
    ("deepseek-v3", 1024, 8192, 1, 8, 4, 4096, 1, 4, 1, 64, 8, 256, 37.87, 216, 865, "full",
     "deepseek_v3_te_deepep_1024.yaml"),
    ("deepseek-v3", 256, 512, 1, 8, 1, 4096, 1, 4, 1, 64, 8, 64, 8.18, 250, 1002, "full", "deepseek_v3_te_deepep.yaml"),
    ("qwen3-30b-a3b", 8, 512, 4, 4, 16, 4096, 1, 1, 1, 8, 1, 8, 21.773, 277, 12040, "full",
     "qwen3_moe_30b_te_deepep.yaml"),
    ("gpt-oss-120b", 64, 512, 2, 2, 4, 4096, 1, 1, 1, 64, 1, 64, 4.30, 231, 7626, "none", "gptoss_120b_te_deepep.yaml"),
]
AUTOMODEL_SOURCE = "NVIDIA-NeMo/Automodel docs/performance-summary.md (DGX-H100, BF16)"
# What these runs keep in memory, as Automodel's code runs them (docs/time.md, "PyTorch MoE runs: NeMo Automodel"):
# - every weight, gradient and Adam state in bf16 (precision "bf16", 8 B/param): with `load_base_model: false` the
#   checkpointer calls `model.initialize_weights()` (nemo_automodel/components/checkpoint/checkpointing.py at
#   006c1ca6, `initialize_model_weights`), whose default dtype=torch.bfloat16 casts the model (gpt_oss/model.py at
#   037e04a6: `self.to(dtype)`; deepseek_v3/model.py and qwen3_moe/model.py at 05e09029: `cast_model_to_dtype`);
#   torch.optim.Adam makes its states like the parameters; FSDP2 reduce-scatters in fp32
#   (`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`, components/moe/parallelizer.py at 4a37629a) and
#   casts the reduced shard back to the parameter's dtype (pytorch torch/distributed/fsdp/_fully_shard/
#   _fsdp_collectives.py at 010ae4a8, `foreach_reduce`: `_to_dtype_if_needed(reduce_output, orig_dtype)`);
# - the loss on the bf16 logits: `loss_fn: MaskedCrossEntropy, fp32_upcast: false` in every config
#   (account.memory.activations.loss_bytes);
# - resharding after forward as each config sets it (`parallelizer.reshard_after_forward`; the Qwen3 config leaves
#   it to parallelize_model's default, False, components/moe/parallelizer.py at 4a37629a).
AUTOMODEL_PRECISION = "bf16"
AUTOMODEL_RESHARD_AFTER_FORWARD = {"deepseek_v3_te_deepep_1024.yaml": False, "deepseek_v3_te_deepep.yaml": False,
                                   "qwen3_moe_30b_te_deepep.yaml": False, "gptoss_120b_te_deepep.yaml": True}
DEEPSEEK_V3_GPU_HOURS = 2.664e6
DEEPSEEK_V3_TOKENS = 14.8e12


MEGATRON_ASSUMED = ("Megatron-LM's kernels", "balanced, dropless routing (the summary forces it)",
                    "the distributed optimizer (ZeRO-1)", "the recipe's expert TP and all-to-all overlap",
                    "VP as the interleave, uneven chunks where the layers do not split evenly",
                    "recompute_modules [layernorm, moe_act] timed as no recomputation", "FLOPs counted causal")
AUTOMODEL_ASSUMED = ("our eager-PyTorch FSDP2 model (--framework torchtitan)", "bf16 weights, gradients and Adam "
                     "states", "FSDP2 (ZeRO-3) with fp32 reduce-scatters and the config's resharding after forward",
                     "the DeepEP dispatcher", "the cross-entropy on the bf16 logits", "the CUDA reserve with the "
                     "caching allocator's cache", "FLOPs counted causal")


def moe_run(row, a2a_overlap: float | None = None) -> PublishedRun:
    """A Megatron Bridge MoE row (TAKEN, ASIDE, FP8_*, DEEPSEEK_MTP, BLACKWELL_ULTRA, ..., SKILL_RUN) as a published
    run: the recipe's expert TP (RECIPE_ETP) and all-to-all overlap (RECIPE_A2A_OVERLAP; `a2a_overlap` overrides it);
    the row's VP, with uneven chunks where its layers do not split evenly (account.time.schedule.published_interleave:
    the recipe's layout); the MTP module trained unless the row says "w/o MTP" (WITHOUT_MTP); the printed GA."""
    from trainledger.account.time.schedule import published_interleave
    from trainledger.specs import get_model
    container, system, model, gpu_name, precision, n, gbs, mbs, seq, tp, pp, vp, ep, ga, published = row
    overlap = RECIPE_A2A_OVERLAP.get((system, model), 0.0) if a2a_overlap is None else a2a_overlap
    interleave, uneven = published_interleave(get_model(model).n_layers, pp, vp, gbs // (n // (tp * pp) * mbs))
    run = run_of(batch_size=mbs, seq_len=seq, global_batch_size=gbs, precision=precision, optimizer="adamw", tp=tp,
                 sp=tp > 1, pp=pp, interleave=interleave, zero=1, ep=ep, recompute="none", flash=True,
                 attention="causal", framework="megatron", etp=RECIPE_ETP.get(model), overlap=overlap,
                 uneven_chunks=uneven, mtp=False if (container, system, model) in WITHOUT_MTP else None)
    source = SKILL_SOURCE if row == SKILL_RUN else f"{SOURCE}, {container} NeMo Container, System: {system}"
    return PublishedRun(f"{system} {container}: {model} on {n} GPUs, {precision}", source, model, gpu_name, n, run,
                        "tokens_per_s_per_gpu", published, figures=(("ga", ga), ("vp", vp)),
                        assumptions=MEGATRON_ASSUMED)


def predict(row, a2a_overlap: float | None = None) -> dict:
    """The prediction for one row (`moe_run`): tokens/s per GPU, the relative error, the step's breakdown and whether
    it fits."""
    container, system, model, gpu_name, precision, n, gbs, mbs, seq, tp, pp, vp, ep, ga, published = row
    case = moe_run(row, a2a_overlap)
    e = evaluate(case)
    r, lay = e["step"], case.run.layout
    return {"container": container, "system": system, "model": model, "gpu": gpu_name, "precision": precision,
            "num_gpus": n, "global_batch_size": gbs, "batch_size": mbs, "seq_len": seq, "tp": tp, "pp": pp, "vp": vp,
            "ep": ep, "etp": r["etp"], "ep_overlap": lay.experts.overlap, "interleave_modelled": lay.interleave,
            "uneven_chunks": lay.uneven_chunks, "mtp_modules": r["mtp_modules"], "published_ga": ga,
            "micro_batches": r["micro_batches"], "published_tokens_per_s_per_gpu": published,
            "predicted_tokens_per_s_per_gpu": e["predicted_tokens_per_s_per_gpu"], "error": e["error"],
            "mfu": r["mfu"], "fits": r["fits"], "memory_bytes": r["memory_bytes"],
            "reserve_bytes": r["reserve_bytes"], "memory_per_gpu_bytes": r["memory_per_gpu_bytes"],
            "breakdown": r["breakdown"], "source": case.source}


def automodel_run(row) -> PublishedRun:
    """An AUTOMODEL row as a published run, asked as our eager-PyTorch FSDP2 model runs it: framework torchtitan,
    with what Automodel keeps (AUTOMODEL_PRECISION: bf16 weights, gradients and Adam states; FSDP2 (ZeRO-3) with fp32
    reduce-scatters; the config's resharding after forward; the cross-entropy on the bf16 logits), the row's PP and
    EP, the DeepEP dispatcher, the recipe's activation checkpointing, FLOPs causal. Its VP, with uneven chunks where
    the layers do not split evenly ("interleave_modelled", "uneven_chunks": Automodel places DeepSeek-V3's 61 layers
    over 32 stages of 1-2 with layers_per_stage; until 2026-12-01 such rows were timed with --interleave 1)."""
    from trainledger.account.time.schedule import published_interleave
    from trainledger.specs import get_model
    model, n, gbs, mbs, lbs, ga, seq, tp, pp, cp, ep, vp, fsdp_size, step_s, tflops, published, recompute, _ = row
    micro_batches = gbs // (n // (tp * pp * cp) * mbs)
    modelled, uneven = published_interleave(get_model(model).n_layers, pp, vp, micro_batches)
    run = run_of(batch_size=mbs, seq_len=seq, global_batch_size=gbs, precision=AUTOMODEL_PRECISION, optimizer="adamw",
                 pp=pp, interleave=modelled, zero=3, param_dtype="auto", reduce_dtype="fp32",
                 reshard_after_forward=AUTOMODEL_RESHARD_AFTER_FORWARD[row[-1]], ep=ep, dispatcher="deepep",
                 recompute=recompute, flash=True, attention="causal", framework="torchtitan", loss_upcast=False,
                 uneven_chunks=uneven,
                 reserve="cuda")    # the CUDA reserve with the caching allocator's cache (no expandable segments)
    return PublishedRun(f"NeMo Automodel, DGX-H100: {model} on {n} GPUs, {AUTOMODEL_PRECISION}",
                        f"{AUTOMODEL_SOURCE}; layout: examples/benchmark/configs/{row[-1]}", model, "h100-sxm", n, run,
                        "tokens_per_s_per_gpu", published,
                        figures=(("step_seconds", step_s), ("tflops_per_gpu", tflops), ("ga", ga), ("vp", vp)),
                        assumptions=AUTOMODEL_ASSUMED)


def predict_automodel(row) -> dict:
    """The prediction for one AUTOMODEL row (`automodel_run`)."""
    model, n, gbs, mbs, lbs, ga, seq, tp, pp, cp, ep, vp, fsdp_size, step_s, tflops, published, recompute, _ = row
    case = automodel_run(row)
    e = evaluate(case)
    r, lay = e["step"], case.run.layout
    return {"model": model, "gpu": "h100-sxm", "precision": AUTOMODEL_PRECISION, "num_gpus": n, "global_batch_size": gbs,
            "batch_size": mbs, "seq_len": seq, "pp": pp, "vp": vp, "interleave_modelled": lay.interleave,
            "uneven_chunks": lay.uneven_chunks, "ep": ep,
            "dp": n // (tp * pp * cp), "recompute": recompute, "micro_batches": r["micro_batches"],
            "published_step_seconds": step_s, "published_tflops_per_gpu": tflops,
            "published_tokens_per_s_per_gpu": published,
            "predicted_tokens_per_s_per_gpu": e["predicted_tokens_per_s_per_gpu"], "error": e["error"],
            "mfu": r["mfu"], "fits": r["fits"], "memory_bytes": r["memory_bytes"],
            "step_seconds": r["step_seconds"], "breakdown": r["breakdown"], "memory": r["memory"],
            "reserve_bytes": r["reserve_bytes"], "memory_per_gpu_bytes": r["memory_per_gpu_bytes"],
            "source": case.source}


def automodel_cases() -> list[dict]:
    """The AUTOMODEL rows predicted (`predict_automodel`)."""
    return [predict_automodel(row) for row in AUTOMODEL]


def cases(rows=TAKEN) -> list[dict]:
    """Predictions for `rows` (TAKEN by default; ASIDE for the check kept on our side)."""
    return [predict(row) for row in rows]


def tokendrop_cases() -> list[dict]:
    """The 25.09 token-drop rows (TOKENDROP_2509) predicted as balanced routing, as every row is: kept aside."""
    return [predict(row) for row in TOKENDROP_2509]


def blackwell_ultra_cases() -> list[dict]:
    """The DGX-GB300 and DGX-B300 MoE rows (BLACKWELL_ULTRA) predicted: kept aside."""
    return [predict(row) for row in BLACKWELL_ULTRA]


def report(rows: list[dict], within: float = 0.20) -> dict:
    """{"n", "share_within", "mean_abs_error", "worst_abs_error"} of the rows' tokens/s per GPU (±`within`)."""
    errors = [abs(r["error"]) for r in rows]
    return {"n": len(errors), "share_within": sum(e <= within for e in errors) / len(errors),
            "mean_abs_error": sum(errors) / len(errors), "worst_abs_error": max(errors)}


def deepseek_v3_run(precision: str = "fp8-cs", gpu: str = "h800", global_batch_size: int = 15360,
                    batch_size: int = 1) -> PublishedRun:
    """DeepSeek-V3's pre-training as a published run (`deepseek_v3_gpu_hours`): 2,048 `gpu`, PP16 · EP64 · DP128,
    ZeRO-1, seq 4096, `precision`, DualPipe, the all-to-alls hidden (--ep-overlap 1) with the token-based dispatcher;
    the figure: 2.664M GPU-hours for 14.8T tokens."""
    run = run_of(batch_size=batch_size, seq_len=4096, global_batch_size=global_batch_size, precision=precision, pp=16,
                 ep=64, zero=1, framework="megatron", attention="causal", schedule="dualpipe", overlap=1.0,
                 dispatcher="deepep")
    return PublishedRun("DeepSeek-V3 pre-training", "DeepSeek-V3 (arXiv:2412.19437), Sec. 3.1 and 4.2", "deepseek-v3",
                        gpu, 2048, run, "gpu_hours", DEEPSEEK_V3_GPU_HOURS, tokens=DEEPSEEK_V3_TOKENS,
                        assumptions=("block-wise FP8 asked as fp8-cs", "DualPipe hides the all-to-alls (Sec. 3.2.1)",
                                     "the token-based dispatcher (Sec. 3.2.2)", "FLOPs counted causal"))


def deepseek_v3_gpu_hours(precision: str = "fp8-cs", gpu: str = "h800", global_batch_size: int = 15360,
                          batch_size: int = 1) -> dict:
    """DeepSeek-V3's pre-training GPU-hours as predicted: 14.8T tokens / (tokens/s per GPU) / 3600, on 2,048 `gpu`
    with PP16 · EP64 · DP128, ZeRO-1, seq 4096, FP8, as the report lays it out (arXiv:2412.19437 Sec. 3.1-3.3).

    The all-to-alls are hidden: "DualPipe ... hides most of the communication during training through
    computation-communication overlap ... achieving a near-zero all-to-all communication overhead" (Sec. 1 and
    3.2.1), so the step is asked with ep_overlap 1, and with the token-based dispatcher the report describes (Sec.
    3.2.2: each token over IB once per node to the GPU of the same in-node index, then over NVLink; 20 SMs, which
    slow the computation they overlap: account/time/expert_parallel.py). The pipeline is DualPipe's (Sec. 3.2.1,
    Table 2: a bubble of (PP/2 − 1)(F&B + B − 3W), account/time/schedule.py), not 1F1B's. Not modelled: the node limit (a token to at
    most 4 nodes) and the FP8 dispatch (Sec. 3.3), which both shrink the all-to-alls further. What is hidden is not
    dropped: the same step with ep_overlap 0
    gives the all-to-all seconds DualPipe must hide ("all_to_all_seconds"); the overlap is only possible while they
    do not exceed the computation they hide behind ("compute_seconds": GEMMs, attention, memory-bound kernels).
    A TrainledgerError names what is missing (an unknown GPU or recipe)."""
    from trainledger.account.time.step import step_time
    from trainledger.specs.recipes import get_recipe
    from trainledger.specs.run import Hardware
    get_recipe(precision)
    case = deepseek_v3_run(precision, gpu, global_batch_size, batch_size)
    e = evaluate(case, with_memory=False)
    r, hours = e["step"], e["predicted_gpu_hours"]
    exposed_run = case.run.with_(overlap=0.0)        # what DualPipe must hide: the same step, all-to-alls exposed
    exposed = step_time(case.spec, Hardware(get_gpu(gpu), 2048), exposed_run, with_memory=False)
    if not hours > 0:
        raise TrainledgerError("no prediction")
    compute = sum(r["breakdown"][part] for part in ("compute", "attention", "memory_bound"))
    return {"gpu_hours": hours, "published_gpu_hours": DEEPSEEK_V3_GPU_HOURS, "error": e["error"],
            "tokens_per_s_per_gpu": r["tokens_per_s"] / 2048, "mfu": r["mfu"], "breakdown": r["breakdown"],
            "layout": {key: r[key] for key in ("gpu", "num_gpus", "precision", "pp", "ep", "dp", "tp", "zero")},
            "all_to_all_seconds": exposed["breakdown"]["ep_comm"], "compute_seconds": compute,
            "all_to_all_calls": r["expert_parallel"]["per_step_calls"]}


def all_cases() -> list[dict]:
    """Every MoE validation row predicted, labelled by its set: the Megatron Bridge summary's (TAKEN, ASIDE,
    FP8_TAKEN, FP8_ASIDE, DEEPSEEK_MTP), the SKILL.md run, NeMo Automodel's PyTorch runs (AUTOMODEL) and the
    Megatron-Core MoE report's (moe_report.REPORT_TAKEN). Each
    {"set", "model", "gpu", "precision", "num_gpus", "published_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu",
    "error"}."""
    from trainledger.account.validation import moe_report
    keys = ("model", "gpu", "precision", "num_gpus", "published_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu",
            "error")
    rows = [dict({k: r[k] for k in keys}, set=name) for name, group in
            (("TAKEN", TAKEN), ("ASIDE", ASIDE), ("FP8_TAKEN", FP8_TAKEN), ("FP8_ASIDE", FP8_ASIDE),
             ("DEEPSEEK_MTP", DEEPSEEK_MTP), ("SKILL_RUN", [SKILL_RUN])) for r in cases(group)]
    rows += [dict({k: r[k] for k in keys}, set="AUTOMODEL") for r in automodel_cases()]
    for r in moe_report.cases():
        rows.append({"set": "REPORT", "model": r["model"], "gpu": moe_report.GPU[r["system"]],
                     "precision": moe_report.PRECISION[r["dtype"]]} | {k: r[k] for k in keys[3:]})
    return rows
