"""Accelerators as data: dense peak FLOP/s per dtype, memory and bandwidth, with the datasheet above each entry.

Peaks are dense (no 2:4 sparsity): vendor datasheets print sparse figures at 2x; those are never used here.
Units: FLOP/s, bytes (SI, as datasheets print them), bytes/s. Unknown names are errors that list what is known.
"""

from __future__ import annotations

from trainledger.errors import TrainledgerError
from trainledger.specs import performance as perf
from trainledger.specs.gpu_spec import GPUSpec  # noqa: F401  (re-exported: specs.hardware.GPUSpec)
from trainledger.specs.hardware_small import SMALL_DEVICE_NAME_PATTERNS, SMALL_GPUS


T = 1e12
GiB = 2**30

# Conventions. fp64 is the FP64 Tensor Core (matrix) peak where the datasheet has one; fp16/bf16/fp8 are
# tensor-core peaks with fp32 accumulation where a datasheet gives both (GeForce cards halve them);
# AMD fp32 is the matrix-core figure. Aliases: "a100" means the 80GB SXM part, "h100" the SXM part,
# as cloud catalogues and the lecture's "H100" (989.5 TFLOP/s bf16) mean.

# Memory. `memory_bytes` is the capacity CUDA reports, torch.cuda.get_device_properties(i).total_memory (=
# cudaDeviceProp.totalGlobalMem, what deviceQuery prints in bytes and torch's OOM message as "total capacity"): the
# most a process can allocate, so what `fit`, `memory`, `infer` and `layout` fill. It is below the datasheet's "80GB"
# on HBM3 parts and below nvidia-smi's total (which also counts memory the driver keeps: 81559MiB on an H100 80GB
# HBM3, 81920MiB on an A100 80GB, 40960MiB on an A100 40GB, modal-labs/modal-client#2797). It moves by ~0.1 % with
# the driver version. Where no reported figure was found, the datasheet figure is used and memory_source says so.
# `datasheet_memory_bytes` keeps the datasheet's figure beside it (`trainledger hardware` shows both).

# NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM column); tensor peaks are the dense figures
A100_40GB = GPUSpec(
    name="a100-40gb", aliases=("a100-40gb-sxm", "a100-sxm4-40gb"), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 19.5 * T, "fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T,
                      "int8": 624 * T},
    memory_bytes=42298834944, memory_bandwidth_bytes_per_s=1555e9, datasheet_memory_bytes=40e9,
    memory_source="deviceQuery on an A100-SXM4-40GB, driver 12.2: 42298834944 bytes (39.39 GiB; "
                  "bottlerocket-os/bottlerocket#3873); nvidia-smi shows 40960MiB",
    source="NVIDIA A100 Tensor Core GPU datasheet (A100 40GB SXM), dense tensor-core peaks",
    sm_count=108, gemm_efficiency={"fp16": perf.A100_SXM_FP16}, attention_efficiency={"flash-attention-2": perf.FA2_A100},
    memory_bandwidth_fraction=perf.A100_MEMORY_FRACTION,
    intra_node_link=perf.NVLINK3, inter_node_link=perf.IB_HDR,
    performance_source="A100 whitepaper (108 SMs); DGX A100: 8 GPUs on NVSwitch, one HDR NIC per GPU; matmul rates and the NVLink curve measured on the 80GB part (same chip, clocks and 400 W limit); specs/performance.py"
)

# NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column); tensor peaks are the dense figures
A100_80GB = GPUSpec(
    name="a100-80gb", aliases=("a100", "a100-sxm", "a100-80gb-sxm", "a100-sxm4-80gb"), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 19.5 * T, "fp32": 19.5 * T, "tf32": 156 * T, "bf16": 312 * T, "fp16": 312 * T,
                      "int8": 624 * T},
    memory_bytes=85100068864, memory_bandwidth_bytes_per_s=2039e9, datasheet_memory_bytes=80e9,
    memory_source="deviceQuery on an A100-SXM4-80GB, driver 12.5: 85100068864 bytes (79.26 GiB; thamada/nvidia-smi "
                  "nvsim/A100SXMx4_deviceQuery.py; 84987740160 with driver 12.2); nvidia-smi shows 81920MiB",
    source="NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM), dense tensor-core peaks",
    sm_count=108, gemm_efficiency={"fp16": perf.A100_SXM_FP16}, attention_efficiency={"flash-attention-2": perf.FA2_A100},
    memory_bandwidth_fraction=perf.A100_80GB_MEMORY_FRACTION,
    intra_node_link=perf.NVLINK3, inter_node_link=perf.IB_HDR,
    performance_source="A100 whitepaper (108 SMs); DGX A100: 8 GPUs on NVSwitch, one HDR NIC per GPU; specs/performance.py"
)

# NVIDIA H100 Tensor Core GPU datasheet (SXM5 column), dense = half of the printed sparse tensor-core figures
H100_SXM = GPUSpec(
    name="h100-sxm", aliases=("h100", "h100-sxm5", "h100-80gb"), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 67 * T, "fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T,
                      "fp8": 1979 * T, "int8": 1979 * T},
    memory_bytes=85017493504, memory_bandwidth_bytes_per_s=3.35e12, datasheet_memory_bytes=80e9,
    memory_source="totalGlobalMem of the recorded NVIDIA H100 80GB HBM3, driver 580: 85017493504 bytes (79.18 GiB; "
                  "tests/data/h100_2026_11_26/trace_gpt2.json.gz deviceProperties; torch's OOM message on it said "
                  "'total capacity of 79.18 GiB', shared/reference/facts.md); deviceQuery with driver 12.7: 85045477376"
                  " (thamada/nvidia-smi nvsim/H100SXMx8_deviceQuery.py); nvidia-smi shows 81559MiB",
    source="NVIDIA H100 Tensor Core GPU datasheet (SXM5), dense tensor-core peaks",
    sm_count=132, gemm_efficiency={"bf16": perf.H100_SXM_BF16, "fp8": perf.H100_SXM_FP8},
    # PyTorch's SDPA runs cuDNN's flash kernel on H100 (the recorded PyTorch 2.11 traces): the default, listed first
    attention_efficiency={"cudnn": perf.CUDNN_H100, "flash-attention-2": perf.FA2_H100},
    memory_bandwidth_fraction=perf.H100_MEMORY_FRACTION, kernel_overhead_seconds=perf.H100_KERNEL_OVERHEAD_SECONDS,
    unaligned_gemm_fraction=perf.H100_UNALIGNED_GEMM_FRACTION, access_fractions=perf.H100_ACCESS_FRACTIONS,
    intra_node_link=perf.NVLINK4, inter_node_link=perf.IB_NDR,
    performance_source="H100 whitepaper (132 SMs, SXM5); DGX H100: 8 GPUs on NVSwitch, one NDR NIC per GPU; STREAM "
                       "bandwidth (Azure ND H100 v5); kernel overhead and unaligned GEMMs from a recorded H100 trace; "
                       "specs/performance.py"
)

# The H100 of Meta's Grand Teton hosts, on which torchtitan's published benchmarks ran (pytorch/torchtitan
# docs/performance.md, 2024-12): "8 NVIDIA H100 GPUs fully connected with NVLink", "96GB HBM2e with 2.4 TB/sec
# peak memory bandwidth", "backend RDMA network with 400 Gb/s per GPU", "the default 500W power limit"; "HBM2e
# based lower TDP SXM H100 ... the actual peak TFLOPs number is between SXM and NVL, and we don't know its exact
# value" (same file, 2024-08), so torchtitan states MFU against the SXM peak, as here. Its matmuls run at the 700 W
# measurement scaled to the tensor rate the GH100 is rated at 500 W, between the H100 NVL (400 W) and SXM5 (700 W)
# datasheet figures (specs/performance.py, gh100_tensor_fraction: 0.896); memory streams at the H100 SXM's
# measured fraction (same die and controllers). Flash attention keeps the 700 W rates (it uses the tensor cores at
# a third of their rate and draws less power: an optimistic bound).
H100_HBM2E = GPUSpec(
    name="h100-hbm2e", aliases=("h100-96gb", "h100-sxm-96gb", "h100-hbm2e-96gb", "grand-teton-h100"), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 67 * T, "fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T,
                      "fp8": 1979 * T, "int8": 1979 * T},
    memory_bytes=96e9, memory_bandwidth_bytes_per_s=2.4e12,
    memory_source="no published CUDA-reported capacity found: the 96GB of torchtitan docs/performance.md",
    source="pytorch/torchtitan docs/performance.md (Grand Teton: H100 SXM, 96GB HBM2e, 2.4 TB/s, 500 W); peaks of the "
           "H100 SXM datasheet, against which torchtitan states MFU",
    sm_count=132, gemm_efficiency={"bf16": perf.H100_500W_BF16, "fp8": perf.H100_500W_FP8},
    # PyTorch's SDPA ran FlashAttention-2 on H100 then: cuDNN was made opt-in after 2.5 (pytorch/pytorch#138522;
    # "SDPA is not automatically choosing CUDNN impl", #142132, nightly 2024-12-04): the default, listed first
    attention_efficiency={"flash-attention-2": perf.FA2_H100, "cudnn": perf.CUDNN_H100},
    memory_bandwidth_fraction=perf.H100_HBM2E_MEMORY_FRACTION,
    # the same GH100 die as h100-sxm: its per-kernel overhead, unaligned-GEMM rate and access-pattern fractions
    kernel_overhead_seconds=perf.H100_KERNEL_OVERHEAD_SECONDS, unaligned_gemm_fraction=perf.H100_UNALIGNED_GEMM_FRACTION,
    access_fractions=perf.H100_ACCESS_FRACTIONS,
    intra_node_link=perf.NVLINK4, inter_node_link=perf.RDMA_400G,
    performance_source="GH100 SXM5 (132 SMs) at 500 W: matmul rates of the 700 W H100 SXM x 0.896 (the rated tensor "
                       "throughput between H100 NVL 400 W and SXM5 700 W, NVIDIA datasheet); flash attention at the "
                       "700 W rates (optimistic); STREAM fraction of the H100 SXM (same controllers); 8 GPUs on "
                       "NVLink 4, one 400 Gb/s RDMA NIC per GPU (torchtitan docs/performance.md)"
)

# NVIDIA H100 Tensor Core GPU datasheet (PCIe column), dense = half of the printed sparse tensor-core figures
H100_PCIE = GPUSpec(
    name="h100-pcie", aliases=("h100-pcie-80gb",), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 51 * T, "fp32": 51 * T, "tf32": 378 * T, "bf16": 756.5 * T, "fp16": 756.5 * T,
                      "fp8": 1513 * T, "int8": 1513 * T},
    memory_bytes=80e9, memory_bandwidth_bytes_per_s=2000e9,
    memory_source="no published CUDA-reported capacity found: the datasheet's 80GB",
    source="NVIDIA H100 Tensor Core GPU datasheet (PCIe), dense tensor-core peaks",
    sm_count=114, intra_node_link=perf.PCIE5,
    performance_source="H100 whitepaper (114 SMs, PCIe); PCIe 5.0 between cards (NVLink bridges pair only two); no "
                       "published matmul/attention efficiency or cluster network: --inter-node-bandwidth to span nodes"
)

# NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column), dense = half of the printed sparse figures
H200 = GPUSpec(
    name="h200", aliases=("h200-sxm", "h200-141gb"), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 67 * T, "fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T,
                      "fp8": 1979 * T, "int8": 1979 * T},
    memory_bytes=139.81 * GiB, memory_bandwidth_bytes_per_s=4.8e12, datasheet_memory_bytes=141e9,
    memory_source='torch\'s OOM message on H200 in public logs: "GPU 0 has a total capacity of 139.81 GiB" (found by '
                  'text search; no repository to cite; rounded to 0.01 GiB)',
    source="NVIDIA H200 Tensor Core GPU datasheet (H200 SXM), dense tensor-core peaks",
    sm_count=132, gemm_efficiency={"bf16": perf.H100_SXM_BF16, "fp8": perf.H200_SXM_FP8},
    memory_bandwidth_fraction=perf.H200_MEMORY_FRACTION, kernel_overhead_seconds=perf.H100_KERNEL_OVERHEAD_SECONDS,
    unaligned_gemm_fraction=perf.H100_UNALIGNED_GEMM_FRACTION, access_fractions=perf.H100_ACCESS_FRACTIONS,
    attention_efficiency={"cudnn": perf.CUDNN_H100, "flash-attention-2": perf.FA2_H100}, intra_node_link=perf.NVLINK4, inter_node_link=perf.IB_NDR,
    performance_source="H200 = the H100 SXM's GH100 compute (132 SMs, same peaks) with faster HBM3e: its bf16 matmul "
                       "and attention efficiencies are the H100 SXM measurements; fp8 matmuls and STREAM bandwidth "
                       "measured on H200 (Azure ND H200 v5); HGX H200: NVLink 4, 8 x 400 Gb/s NICs"
)

# NVIDIA HGX B200 datasheet (8-GPU board figures / 8), dense = half of the printed sparse tensor-core figures
B200 = GPUSpec(
    name="b200", aliases=("hgx-b200", "b200-sxm"), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 40 * T, "fp32": 80 * T, "tf32": 1125 * T, "bf16": 2250 * T, "fp16": 2250 * T,
                      "fp8": 4500 * T, "int8": 4500 * T}, block_scaled=("mxfp8",),
    memory_bytes=178.35 * GiB, memory_bandwidth_bytes_per_s=8e12, datasheet_memory_bytes=180e9,
    memory_source='cudaDeviceProp.totalGlobalMem on a B200: "Total Global Memory: 178.35" (pytorch/ao#4002, printed / '
                  '2^30), as torch\'s OOM messages on B200 say "total capacity of 178.35 GiB"; rounded to 0.01 GiB',
    source="NVIDIA HGX B200 datasheet (per GPU = board / 8), dense tensor-core peaks; MXFP8 (OCP MX block scaling, "
           "block_scaled) at the FP8 rate: the datasheet prints one FP8 figure for Blackwell's block-scaled FP8",
    intra_node_link=perf.NVLINK5, inter_node_link=perf.IB_NDR,
    # measured matmul fractions (specs/performance.py); MXFP8 GEMMs at the fp8 fraction (same tensor-core rate)
    gemm_efficiency={"bf16": perf.B200_BF16, "fp8": perf.BLACKWELL_FP8},
    attention_efficiency={"cudnn": perf.CUDNN_B200},
    performance_source="HGX B200 datasheet: NVLink 5, 8 x 400 Gb/s ConnectX-7; bf16 matmuls: mamf-finder's best "
                       "case; fp8: the sustained cuBLASLt fractions measured on GB200 (same die); cuDNN attention "
                       "bounded by FlashAttention-4's B200 rate; NVLink 5 busbw measured on GB200; no HBM bandwidth "
                       "or kernel-overhead measurement (specs/performance.py)"
)

# GB200 NVL72: 36 Grace CPUs + 72 Blackwell GPUs in ONE NVLink 5 domain (NVIDIA GB200 NVL72 product page: 130 TB/s
# NVLink = 1.8 TB/s per GPU, HBM3e 13.4 TB and 576 TB/s per rack = 186 GB and 8 TB/s per GPU). The Blackwell GPU of
# a GB200 runs at 1,200 W: dense FP8 5,000, BF16 2,500, TF32 1,250, FP64 45 TFLOP/s (NVIDIA Blackwell architecture
# technical brief, as tabulated at glennklockwood.com/garden/processors/B200; stas00/ml-engineering's TFLOPS table
# prints the same); MXFP8 (block_scaled) at the FP8 rate.
GB200 = GPUSpec(
    name="gb200", aliases=("gb200-nvl72", "dgx-gb200"), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 45 * T, "tf32": 1250 * T, "bf16": 2500 * T, "fp16": 2500 * T,
                      "fp8": 5000 * T, "int8": 5000 * T}, block_scaled=("mxfp8",),
    memory_bytes=13.4e12 / 72, memory_bandwidth_bytes_per_s=576e12 / 72,
    memory_source="no published CUDA-reported capacity found: the rack's 13.4 TB HBM3e / 72 (product page)",
    source="NVIDIA GB200 NVL72 product page (per GPU = rack / 72); Blackwell technical brief (GB200 at 1,200 W), "
           "dense tensor-core peaks",
    gpus_per_node=72, intra_node_link=perf.NVLINK5, inter_node_link=perf.IB_NDR,
    # fp8: the sustained fractions measured on GB200 itself; bf16: the B200's best case, applied to the GB200's higher
    # (1,200 W) peaks (the same Blackwell die); cuDNN attention as the B200's (specs/performance.py)
    gemm_efficiency={"bf16": perf.B200_BF16, "fp8": perf.BLACKWELL_FP8},
    attention_efficiency={"cudnn": perf.CUDNN_B200},
    performance_source="GB200 NVL72: 72 GPUs on NVLink 5 switches (one NVLink domain, gpus_per_node = 72); one "
                       "400 Gb/s NIC per GPU between racks; fp8 matmuls (cuBLASLt) and NVLink 5 busbw measured on "
                       "GB200 (Azure ND GB200 v6); bf16 matmul and attention fractions of the B200 (same die; assumed)"
)

# Blackwell Ultra (B300, GB300). Per-GPU datasheet figures, dense (NVIDIA prints 2:4-sparse tensor figures, halved
# here). Against Blackwell (B200/GB200), NVIDIA kept the FP8/BF16/TF32 tensor rates, raised dense NVFP4 to 15 PFLOP/s
# and HBM3e to 288 GB per GPU (12-high stacks, 8 TB/s), doubled the SFU's exponential throughput that attention's
# softmax needs (10.7 vs 5 TeraExponentials/s), and cut FP64 and INT8 to a few percent (NVIDIA technical blog "Inside
# NVIDIA Blackwell Ultra: The Chip Powering the AI Factory Era", 2025-08: 160 SMs in the full GPU, 288 GB, 8 TB/s,
# 15 PFLOP/s dense NVFP4, NVLink 5 1.8 TB/s, 2x attention-layer SFU throughput; per-GPU table of verda.com/blog/
# gb300-nvl72-architecture). Sustained rates: no B300/GB300 matmul, attention, STREAM or nccl-tests measurement was
# found, so the GB200/B200 measurements stand in (performance_source says which); the doubled SFU rate is not
# credited to attention (its kernels' rates on Blackwell Ultra are unpublished): a pessimistic side for attention.
# The SM count of the shipped parts is not set: NVIDIA gives 160 for the full GPU, and the B200 entries this one
# borrows its fractions from carry none.
_ULTRA_BORROWED = ("no Blackwell Ultra measurement published (assumptions): fp8 matmuls at the sustained cuBLASLt "
                   "fractions measured on GB200 (Azure ND GB200 v6), bf16 matmuls at the B200's mamf-finder fraction, "
                   "cuDNN attention at the B200's FlashAttention-4 bound (the doubled SFU not credited), HBM at the "
                   "datasheet rate, NVLink 5 at the all_reduce busbw measured on GB200; specs/performance.py")

# GB300 NVL72: 36 Grace CPUs + 72 Blackwell Ultra GPUs in ONE NVLink 5 domain, as the GB200 NVL72. NVIDIA GB300 NVL72
# product page, per rack (as summarized at vendordeep.com/report/nvidia-launches-blackwell-ultra-gb300 and
# glennklockwood.com/garden/processors/B300): FP4 1,080 PFLOP/s dense, FP8/FP6 720 (sparse), INT8 24 POPS (sparse),
# HBM3e 20 TB at 576 TB/s, NVLink 130 TB/s, 72 ConnectX-8 SuperNICs at 800 Gb/s. Per GPU (verda.com's table, the
# same figures / 72): dense FP8 5,000, BF16 2,500, TF32 1,250 TFLOP/s, INT8 165 TOPS (cut from the GB200's 5,000), FP4
# 15,000; 1.4 kW TDP. FP64 and FP32 are not carried (as for gb200: no per-GPU figure from NVIDIA found). Memory:
# 288 GB per GPU (NVIDIA's blog; 20 TB / 72 = 278 GB, verda prints 279 GB): no CUDA-reported capacity was found.
GB300 = GPUSpec(
    name="gb300", aliases=("gb300-nvl72", "dgx-gb300"), vendor="NVIDIA",
    peak_flops_per_s={"tf32": 1250 * T, "bf16": 2500 * T, "fp16": 2500 * T, "fp8": 5000 * T, "int8": 165 * T,
                      "fp4": 15000 * T}, block_scaled=("mxfp8",),
    memory_bytes=288e9, memory_bandwidth_bytes_per_s=576e12 / 72, tdp_w=1400,
    memory_source="no published CUDA-reported capacity found: the datasheet's 288 GB HBM3e (NVIDIA Blackwell Ultra "
                  "blog); the rack's 20 TB / 72 = 278 GB, verda.com prints 279 GB",
    source="NVIDIA GB300 NVL72 product page (per GPU = rack / 72, sparse tensor figures halved); NVIDIA technical blog "
           "'Inside NVIDIA Blackwell Ultra' (288 GB, 8 TB/s, 15 PFLOP/s dense NVFP4); per-GPU table of verda.com/blog/"
           "gb300-nvl72-architecture (INT8 0.165 POPS, 1.4 kW); MXFP8 (block_scaled) at the FP8 rate",
    gpus_per_node=72, intra_node_link=perf.NVLINK5, inter_node_link=perf.CX8_800G,
    gemm_efficiency={"bf16": perf.B200_BF16, "fp8": perf.BLACKWELL_FP8},
    attention_efficiency={"cudnn": perf.CUDNN_B200},
    performance_source="GB300 NVL72: 72 GPUs on NVLink 5 switches (one NVLink domain, gpus_per_node = 72); one "
                       "800 Gb/s ConnectX-8 per GPU between racks; " + _ULTRA_BORROWED
)

# HGX / DGX B300: 8 Blackwell Ultra GPUs on NVLink 5 switches. NVIDIA HGX page, HGX B300 column, per 8 GPUs (as
# tabulated at fibermall.com/blog/?p=17161; glennklockwood.com/garden/processors/B300 per GPU): FP8/FP6 72 PFLOP/s,
# FP16/BF16 36, TF32 18 (sparse), INT8 2 POPS (sparse; the HGX B200's 72), FP32 600 TFLOP/s, FP64/FP64 Tensor 10
# TFLOP/s (the HGX B200's 296), up to 2.3 TB HBM3e, NVLink 1.8 TB/s per GPU, networking 1.6 TB/s (8 x ConnectX-8 at
# 800 Gb/s), "2x" attention. Per GPU, dense: FP8 4,500, BF16 2,250, TF32 1,125, FP32 75, FP64 1.25 TFLOP/s, INT8 125
# TOPS (verda.com prints 0.15 POPS); 288 GB, 8 TB/s (NVIDIA's blog; verda prints 7.7 TB/s), 1.1 kW (verda.com: NVIDIA
# was not found to print the HGX part's power). Dense FP4 is not carried: the tabulations disagree (13.1 and 14
# PFLOP/s) and NVIDIA's page was not readable here.
B300 = GPUSpec(
    name="b300", aliases=("hgx-b300", "dgx-b300", "b300-sxm"), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 1.25 * T, "fp32": 75 * T, "tf32": 1125 * T, "bf16": 2250 * T, "fp16": 2250 * T,
                      "fp8": 4500 * T, "int8": 125 * T}, block_scaled=("mxfp8",),
    memory_bytes=288e9, memory_bandwidth_bytes_per_s=8e12, tdp_w=1100,
    memory_source="no published CUDA-reported capacity found: the datasheet's 288 GB HBM3e (HGX B300: up to 2.3 TB per "
                  "8 GPUs); device listings print 275 GB for 'NVIDIA B300 SXM6 AC' (unverified)",
    source="NVIDIA HGX B300 (per GPU = board / 8, sparse tensor figures halved; fibermall.com/blog/?p=17161, "
           "glennklockwood.com/garden/processors/B300); NVIDIA technical blog 'Inside NVIDIA Blackwell Ultra' (288 GB, "
           "8 TB/s); verda.com/blog/gb300-nvl72-architecture (1.1 kW); MXFP8 (block_scaled) at the FP8 rate",
    intra_node_link=perf.NVLINK5, inter_node_link=perf.CX8_800G,
    gemm_efficiency={"bf16": perf.B200_BF16, "fp8": perf.BLACKWELL_FP8},
    attention_efficiency={"cudnn": perf.CUDNN_B200},
    performance_source="HGX B300: 8 GPUs on NVLink 5 switches, 8 x 800 Gb/s ConnectX-8; " + _ULTRA_BORROWED
)

# H800 SXM5: the H100 SXM5 (same GH100 compute, HBM3 80 GB, 3.35 TB/s) sold in China with NVLink cut to 400 GB/s
# (200 GB/s per direction; NVIDIA H800 datasheet). DeepSeek-V3 (arXiv:2412.19437, Sec. 3.2.2) trained on it:
# "NVLink offers a bandwidth of 160 GB/s, roughly 3.2 times that of IB (50 GB/s)": the achieved NVLink rate.
# FP64 is cut on the H800 too; its figure is not carried here (no FP64 key).
H800 = GPUSpec(
    name="h800", aliases=("h800-sxm", "h800-sxm5"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 67 * T, "tf32": 494.5 * T, "bf16": 989.5 * T, "fp16": 989.5 * T,
                      "fp8": 1979 * T, "int8": 1979 * T},
    memory_bytes=80e9, memory_bandwidth_bytes_per_s=3.35e12,
    memory_source="no published CUDA-reported capacity of an H800 found: the datasheet's 80GB (its HBM3 is the "
                  "H100 SXM5's, which reports 79.18 GiB: an H800 likely does too, unverified)",
    source="NVIDIA H800 SXM5 datasheet (H100 SXM5 tensor peaks, NVLink 400 GB/s); DeepSeek-V3 (arXiv:2412.19437)",
    sm_count=132, gemm_efficiency={"bf16": perf.H100_SXM_BF16, "fp8": perf.H100_SXM_FP8},
    attention_efficiency={"cudnn": perf.CUDNN_H100, "flash-attention-2": perf.FA2_H100},
    memory_bandwidth_fraction=perf.H100_MEMORY_FRACTION, kernel_overhead_seconds=perf.H100_KERNEL_OVERHEAD_SECONDS,
    unaligned_gemm_fraction=perf.H100_UNALIGNED_GEMM_FRACTION, access_fractions=perf.H100_ACCESS_FRACTIONS,
    intra_node_link=perf.NVLINK_H800, inter_node_link=perf.IB_NDR,
    performance_source="the H100 SXM's GH100 measurements (same die and clocks); NVLink at DeepSeek-V3's 160 GB/s; "
                       "IB NDR 50 GB/s per GPU (DeepSeek-V3 Sec. 3.2.2)"
)

# NVIDIA L4 Tensor Core GPU datasheet, dense = half of the printed sparse tensor-core figures
L4 = GPUSpec(
    name="l4", aliases=(), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 30.3 * T, "tf32": 60 * T, "bf16": 121 * T, "fp16": 121 * T,
                      "fp8": 242.5 * T, "int8": 242.5 * T},
    memory_bytes=24e9, memory_bandwidth_bytes_per_s=300e9,
    memory_source="no published CUDA-reported capacity found: the datasheet's 24GB (nvidia-smi shows 23034MiB, "
                  "modal-labs/modal-client#2797)",
    source="NVIDIA L4 Tensor Core GPU datasheet, dense tensor-core peaks",
    sm_count=58, intra_node_link=perf.PCIE4,
    performance_source="L4 datasheet: 7,424 CUDA cores = 58 SMs of 128; cards talk over PCIe 4.0 x16"
)

# NVIDIA L40S datasheet, dense = half of the printed sparse tensor-core figures
L40S = GPUSpec(
    name="l40s", aliases=(), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 91.6 * T, "tf32": 183 * T, "bf16": 362 * T, "fp16": 362 * T,
                      "fp8": 733 * T, "int8": 733 * T},
    memory_bytes=44.42 * GiB, memory_bandwidth_bytes_per_s=864e9, datasheet_memory_bytes=48e9,
    memory_source='torch\'s OOM message on 8 x L40S: "GPU has a total capacity of 44.42 GiB" '
                  '(stepfun-ai/Step-Video-T2V#8; rounded to 0.01 GiB); nvidia-smi shows 46068MiB '
                  '(modal-labs/modal-client#2797)',
    source="NVIDIA L40S datasheet, dense tensor-core peaks",
    sm_count=142, intra_node_link=perf.PCIE4,
    performance_source="L40S datasheet: 18,176 CUDA cores = 142 SMs of 128; cards talk over PCIe 4.0 x16"
)

# NVIDIA Ampere GA102 GPU architecture whitepaper (GeForce RTX 3090 column): fp16/bf16 with fp32 accumulate
RTX_3090 = GPUSpec(
    name="rtx-3090", aliases=("3090", "rtx3090"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 35.6 * T, "tf32": 35.6 * T, "bf16": 71 * T, "fp16": 71 * T, "int8": 284 * T},
    memory_bytes=23.70 * GiB, memory_bandwidth_bytes_per_s=936e9, datasheet_memory_bytes=24e9,
    memory_source='torch\'s OOM message on an RTX 3090: "23.70 GiB total capacity" (GaoLii/DSP#10; rounded to 0.01 GiB)',
    source="NVIDIA Ampere GA102 GPU architecture whitepaper (RTX 3090), dense, fp32 accumulate",
    sm_count=82, intra_node_link=perf.PCIE4,
    performance_source="GA102 whitepaper: RTX 3090 has 82 SMs; cards talk over PCIe 4.0 x16"
)

# NVIDIA Ada GPU architecture whitepaper (GeForce RTX 4090 column): fp16/bf16/fp8 with fp32 accumulate
RTX_4090 = GPUSpec(
    name="rtx-4090", aliases=("4090", "rtx4090"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 82.6 * T, "tf32": 82.6 * T, "bf16": 165.2 * T, "fp16": 165.2 * T,
                      "fp8": 330.3 * T, "int8": 660.6 * T},
    memory_bytes=23.68 * GiB, memory_bandwidth_bytes_per_s=1008e9, datasheet_memory_bytes=24e9,
    memory_source='torch\'s OOM message on an RTX 4090: "23.68 GiB total capacity" (zai-org/CogVideo#36; rounded to '
                  '0.01 GiB)',
    source="NVIDIA Ada GPU architecture whitepaper (RTX 4090), dense, fp32 accumulate",
    sm_count=128, intra_node_link=perf.PCIE4,
    performance_source="Ada whitepaper: RTX 4090 has 128 SMs; cards talk over PCIe 4.0 x16"
)

# AMD Instinct MI250X datasheet: matrix-core peaks (no TF32, no FP8)
MI250X = GPUSpec(
    name="mi250x", aliases=("mi250",), vendor="AMD",
    peak_flops_per_s={"fp64": 95.7 * T, "fp32": 95.7 * T, "bf16": 383 * T, "fp16": 383 * T, "int8": 383 * T},
    memory_bytes=128e9, memory_bandwidth_bytes_per_s=3.2768e12,
    memory_source="no published ROCm-reported capacity found: the datasheet figure",
    source="AMD Instinct MI250X datasheet, dense matrix-core peaks",
)

# AMD Instinct MI300X datasheet: dense matrix-core peaks (sparse figures are 2x)
MI300X = GPUSpec(
    name="mi300x", aliases=(), vendor="AMD",
    peak_flops_per_s={"fp64": 163.4 * T, "fp32": 163.4 * T, "tf32": 653.7 * T, "bf16": 1307.4 * T,
                      "fp16": 1307.4 * T, "fp8": 2614.9 * T, "int8": 2614.9 * T},
    memory_bytes=192e9, memory_bandwidth_bytes_per_s=5.3e12,
    memory_source="no published ROCm-reported capacity found: the datasheet figure",
    source="AMD Instinct MI300X datasheet, dense matrix-core peaks",
    gemm_efficiency={"bf16": perf.MI300X_BF16}, intra_node_link=perf.XGMI_MI300X,
    performance_source="AMD MI300X platform: 8 GPUs on Infinity Fabric; specs/performance.py"
)

# Google Cloud TPU v4 system architecture page (per chip); PaLM ran on 6144 of them at 275 TFLOP/s bf16
TPU_V4 = GPUSpec(
    name="tpu-v4", aliases=("v4", "tpuv4"), vendor="Google",
    peak_flops_per_s={"bf16": 275 * T, "int8": 275 * T},
    memory_bytes=32 * GiB, memory_bandwidth_bytes_per_s=1200e9,
    memory_source="not a CUDA device: the HBM per chip of the Cloud TPU documentation",
    source="Google Cloud TPU v4 documentation (per chip)",
)

# Google Cloud TPU v5e documentation (per chip)
TPU_V5E = GPUSpec(
    name="tpu-v5e", aliases=("v5e", "tpuv5e", "v5litepod"), vendor="Google",
    peak_flops_per_s={"bf16": 197 * T, "int8": 394 * T},
    memory_bytes=16e9, memory_bandwidth_bytes_per_s=819e9,
    memory_source="not a CUDA device: the HBM per chip of the Cloud TPU documentation",
    source="Google Cloud TPU v5e documentation (per chip)",
)

# Google Cloud TPU v5p documentation (per chip)
TPU_V5P = GPUSpec(
    name="tpu-v5p", aliases=("v5p", "tpuv5p"), vendor="Google",
    peak_flops_per_s={"bf16": 459 * T, "int8": 918 * T},
    memory_bytes=95e9, memory_bandwidth_bytes_per_s=2765e9,
    memory_source="not a CUDA device: the HBM per chip of the Cloud TPU documentation",
    source="Google Cloud TPU v5p documentation (per chip)",
)

GPUS: list[GPUSpec] = [A100_40GB, A100_80GB, H100_SXM, H100_HBM2E, H100_PCIE, H200, B200, GB200, B300, GB300, H800, L4, L40S, RTX_3090, RTX_4090,
                       MI250X, MI300X, TPU_V4, TPU_V5E, TPU_V5P,
                       *SMALL_GPUS]   # workstation, GeForce and small data-center cards: specs/hardware_small.py


# torch.cuda.get_device_name() -> GPU, most specific pattern first ("NVIDIA H100 PCIe" before "H100").
DEVICE_NAME_PATTERNS = [
    (r"h100.*pcie", "h100-pcie"), (r"h100.*hbm2e", "h100-hbm2e"), (r"h100", "h100-sxm"), (r"h200", "h200"), (r"gb200", "gb200"), (r"b200", "b200"),
    (r"gb300", "gb300"), (r"b300", "b300"),
    (r"h800", "h800"),
    (r"a100.*40\s*gb", "a100-40gb"), (r"a100", "a100-80gb"), (r"l40s", "l40s"), (r"\bl4\b", "l4"),
    (r"rtx 3090", "rtx-3090"), (r"rtx 4090", "rtx-4090"), (r"mi300x", "mi300x"), (r"mi250", "mi250x"),
    *SMALL_DEVICE_NAME_PATTERNS,
]


def gpu_for_device_name(device_name: str) -> GPUSpec | None:
    """The GPUSpec a device reports itself as (`torch.cuda.get_device_name()`, e.g. "NVIDIA H100 80GB HBM3"),
    or None for a device not in the table (then there is no datasheet peak and no MFU: never guess an A100).

    A100 PCIe parts map to the SXM entry of the same memory: their dense peaks are the same.
    """
    import re

    text = str(device_name).lower()
    for pattern, name in DEVICE_NAME_PATTERNS:
        if re.search(pattern, text):
            return get_gpu(name)
    return None


def get_gpu(name: str, flag: str = "--gpu") -> GPUSpec:
    """The GPUSpec named `name` or one of its aliases (case-insensitive, `_`/space read as `-`); an error listing known names otherwise."""
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    for gpu in GPUS:
        if key == gpu.name or key in gpu.aliases:
            return gpu
    from trainledger.specs.names import did_you_mean
    known = ", ".join(gpu.name for gpu in GPUS)
    hint = did_you_mean(key, [n for gpu in GPUS for n in (gpu.name, *gpu.aliases)])
    raise TrainledgerError(f"unknown GPU {name!r} ({flag}).{hint} Known: {known} (see `trainledger hardware`)")
