"""The GPUs one- to eight-GPU fine-tuning runs on: workstation cards (RTX A6000, RTX 6000 Ada), GeForce cards
(RTX 5090, 4080, 3060 12GB) and small data-center cards (A10, A10G, T4, V100), each with its datasheet above it.

specs/hardware.py lists these after its own entries (`trainledger hardware` shows them all); the conventions are
that module's: dense peaks (2:4-sparse figures halved, never used), tensor-core 16-bit peaks with fp32 accumulation
(GeForce cards run that at half their fp16-accumulate rate), `memory_bytes` the capacity CUDA reports
(torch.cuda.get_device_properties().total_memory, the "total capacity" of torch's out-of-memory message) where a
public report names the card, else the datasheet figure with memory_source saying so. Turing (T4) and Volta (V100)
have no bf16 and no tf32 tensor cores: their tables carry no such key, and specs/fp8.check_gpu_supports refuses bf16
recipes on them (one line naming the fp16 recipe to use instead).
Cards whose ECC is on by default (A10, A10G, T4, RTX 6000 Ada in data centers) report less than the datasheet: the
ECC check bits take 1/16 of GDDR6 (nvidia-smi's 15360MiB of a T4's 16 GiB).
"""

from __future__ import annotations

from trainledger.specs import performance as perf
from trainledger.specs.gpu_spec import GPUSpec

T = 1e12
GiB = 2**30

# NVIDIA RTX A6000 datasheet and the NVIDIA Ampere GA102 GPU architecture whitepaper (RTX A6000 column): 84 SMs at
# 1,800 MHz; professional GA102 runs fp16/bf16 with fp32 accumulate at the full rate (the A40's datasheet prints the
# same split: TF32 half of BF16, INT8 twice); 48 GB GDDR6 with ECC, 768 GB/s; PCIe 4.0 x16 (NVLink bridges pair two)
RTX_A6000 = GPUSpec(
    name="rtx-a6000", aliases=("a6000", "rtxa6000"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 38.7 * T, "tf32": 77.4 * T, "bf16": 154.8 * T, "fp16": 154.8 * T, "int8": 309.7 * T},
    memory_bytes=48e9, memory_bandwidth_bytes_per_s=768e9,
    memory_source="no published CUDA-reported capacity of an RTX A6000 found (a named report): the datasheet's 48 GB",
    source="NVIDIA RTX A6000 datasheet (38.7 TFLOP/s fp32, 309.7 tensor sparse); GA102 whitepaper, dense",
    sm_count=84, intra_node_link=perf.PCIE4,
    performance_source="GA102 whitepaper: RTX A6000 has 84 SMs; cards talk over PCIe 4.0 x16 (an NVLink bridge pairs two)",
)

# NVIDIA RTX 6000 Ada Generation datasheet and the NVIDIA Ada GPU architecture whitepaper (RTX 6000 Ada column):
# 142 SMs at 2,505 MHz: fp32 91.1, fp16/bf16 (fp32 accumulate) 364.2, fp8 728.5, TF32 182.1 TFLOP/s dense (1,457
# sparse fp8 on the datasheet); 48 GB GDDR6 with ECC, 960 GB/s; PCIe 4.0 x16, no NVLink
RTX_6000_ADA = GPUSpec(
    name="rtx-6000-ada", aliases=("rtx6000-ada", "6000-ada"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 91.1 * T, "tf32": 182.1 * T, "bf16": 364.2 * T, "fp16": 364.2 * T,
                      "fp8": 728.5 * T, "int8": 728.5 * T},
    memory_bytes=44.43 * GiB, memory_bandwidth_bytes_per_s=960e9, datasheet_memory_bytes=48e9,
    memory_source='torch\'s OOM message on an "NVIDIA RTX 6000 Ada Gene..." (nvidia-smi 46068MiB, ECC on): "GPU 0 has '
                  'a total capacity of 44.43 GiB" (DINGYANB/MTVCrafter#21; rounded to 0.01 GiB)',
    source="NVIDIA RTX 6000 Ada Generation datasheet; Ada whitepaper (RTX 6000 Ada), dense, fp32 accumulate",
    sm_count=142, intra_node_link=perf.PCIE4,
    performance_source="Ada whitepaper: RTX 6000 Ada has 142 SMs (18,176 CUDA cores); cards talk over PCIe 4.0 x16",
)

# NVIDIA A10 Tensor Core GPU datasheet: FP32 31.2, TF32 62.5, BF16/FP16 125, INT8 250 TOPS dense (sparse figures 2x);
# 24 GB GDDR6 (ECC), 600 GB/s; 72 SMs; PCIe 4.0 x16
A10 = GPUSpec(
    name="a10", aliases=("a10-24gb", "nvidia-a10"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 31.2 * T, "tf32": 62.5 * T, "bf16": 125 * T, "fp16": 125 * T, "int8": 250 * T},
    memory_bytes=21.99 * GiB, memory_bandwidth_bytes_per_s=600e9, datasheet_memory_bytes=24e9,
    memory_source='torch\'s OOM message on a Lambda "a10" instance: "a total capacty of 21.99 GiB" (zai-org/CogVLM#236; '
                  'another A10 reported 22.18 GiB, OpenBMB/MiniCPM-V#640: the smaller is kept); nvidia-smi shows '
                  '23028MiB (modal-labs/modal-client#2797)',
    source="NVIDIA A10 Tensor Core GPU datasheet, dense tensor-core peaks",
    sm_count=72, intra_node_link=perf.PCIE4,
    performance_source="A10 datasheet/GA102: 9,216 CUDA cores = 72 SMs; cards talk over PCIe 4.0 x16",
)

# NVIDIA A10G (AWS EC2 G5): NVIDIA publishes no datasheet for this AWS part. 24 GB GDDR6 at 600 GB/s as the A10 (AWS
# G5 documentation; baseten.co "NVIDIA A10 vs A10G for ML model inference": the A10G has more CUDA-core and less
# tensor throughput than the A10). Peaks DERIVED here from its 80 SMs at 1,710 MHz with GA102's per-SM rates as a
# GeForce GA102 runs them (the RTX 3090's whitepaper figures per SM and clock: fp32 256 FLOP/clk, fp16/bf16 with
# fp32 accumulate 512, TF32 256, INT8 2048): fp32 35.0, bf16 70.0, TF32 35.0, INT8 140 TFLOP/s
A10G = GPUSpec(
    name="a10g", aliases=("nvidia-a10g", "aws-a10g"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 35.0 * T, "tf32": 35.0 * T, "bf16": 70.0 * T, "fp16": 70.0 * T, "int8": 140.1 * T},
    memory_bytes=21.99 * GiB, memory_bandwidth_bytes_per_s=600e9, datasheet_memory_bytes=24e9,
    memory_source='torch\'s OOM message on Hugging Face\'s "4xA10G Large": "a total capacty of 21.99 GiB" '
                  '(bigcode-project/starcoder#151); nvidia-smi on an NVIDIA A10G shows 23028MiB '
                  '(huggingface/local-gemma#20)',
    source="no NVIDIA datasheet: derived from 80 SMs x 1,710 MHz x GeForce GA102 per-SM rates (module comment); "
           "24 GB, 600 GB/s (AWS G5; baseten.co A10 vs A10G)",
    sm_count=80, intra_node_link=perf.PCIE4,
    performance_source="A10G: 80 SMs (10,240 CUDA cores); cards talk over PCIe 4.0 x16 (EC2 G5)",
)

# NVIDIA T4 Tensor Core GPU datasheet: FP32 8.1, mixed-precision FP16/FP32 65 TFLOP/s, INT8 130 TOPS; no bf16, no
# TF32 (Turing); 16 GB GDDR6 (ECC on), 320 GB/s; 40 SMs; PCIe 3.0 x16
T4 = GPUSpec(
    name="t4", aliases=("tesla-t4", "nvidia-t4"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 8.1 * T, "fp16": 65 * T, "int8": 130 * T},
    memory_bytes=14.56 * GiB, memory_bandwidth_bytes_per_s=320e9, datasheet_memory_bytes=16e9,
    memory_source='torch\'s OOM message on a Tesla T4 (GCP): "GPU 0 has a total capacity of 14.56 GiB" '
                  '(Zheng-Chong/CatVTON#133; the same on AlphaGPU/leetgpu-challenges#52); older drivers reported '
                  '14.75-14.76 GiB (xinge008/Cylinder3D#109); nvidia-smi shows 15360MiB (modal-labs/modal-client#2797)',
    source="NVIDIA T4 Tensor Core GPU datasheet (Turing: no bf16, no TF32)",
    sm_count=40, intra_node_link=perf.PCIE3,
    performance_source="T4 datasheet: 2,560 CUDA cores = 40 SMs of 64; cards talk over PCIe 3.0 x16",
)

# NVIDIA Tesla V100 datasheet (SXM2 column, the part in DGX-1 / EC2 P3): FP64 7.8, FP32 15.7, tensor (fp16 with fp32
# accumulate) 125 TFLOP/s, no sparsity; no bf16, no TF32 (Volta); HBM2 16 or 32 GB at 900 GB/s; 80 SMs; NVLink 2,
# 300 GB/s per GPU in DGX-1's hybrid cube mesh, which is no switch: intra_node_link is not set (give
# --intra-node-bandwidth for multi-GPU time). The PCIe card's peaks are lower (14 / 112): not these entries.
_V100 = "NVIDIA Tesla V100 datasheet (SXM2), dense (Volta has no sparsity; no bf16, no TF32)"
_V100_PERF = ("V100 whitepaper: 80 SMs; NVLink 2 hybrid cube mesh (DGX-1), not a switch: no intra-node link carried; "
              "give --intra-node-bandwidth")

# NVIDIA Tesla V100 datasheet (SXM2 16GB): the part of EC2 p3 instances and DGX-1; `v100` means this one
V100_16GB = GPUSpec(
    name="v100-16gb", aliases=("v100", "v100-sxm2", "v100-sxm2-16gb", "tesla-v100"), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 7.8 * T, "fp32": 15.7 * T, "fp16": 125 * T},
    memory_bytes=15.78 * GiB, memory_bandwidth_bytes_per_s=900e9, datasheet_memory_bytes=16e9,
    memory_source='torch\'s OOM message on "a 16G V100": "15.78 GiB total capacity" (kchengiva/Shift-GCN#34); '
                  'nvidia-smi shows 16130-16160MiB on a Tesla V100-SXM2 (yangjianxin1/GPT2-chitchat#19)',
    source=_V100, sm_count=80, performance_source=_V100_PERF,
)

# NVIDIA Tesla V100 datasheet (SXM2 32GB): the same chip and peaks with 32 GB of HBM2 (EC2 p3dn, DGX-1 32GB)
V100_32GB = GPUSpec(
    name="v100-32gb", aliases=("v100-sxm2-32gb",), vendor="NVIDIA",
    peak_flops_per_s={"fp64": 7.8 * T, "fp32": 15.7 * T, "fp16": 125 * T},
    memory_bytes=31.74 * GiB, memory_bandwidth_bytes_per_s=900e9, datasheet_memory_bytes=32e9,
    memory_source='torch\'s OOM message on a "V100 32GB": "31.74 GiB total capacity" (liucongg/ChatGLM-Finetuning#73)',
    source=_V100, sm_count=80, performance_source=_V100_PERF,
)

# NVIDIA RTX Blackwell GPU architecture whitepaper (GeForce RTX 5090 column): 170 SMs at 2,407 MHz: fp32 104.8,
# fp16/bf16 with fp32 accumulate 209.5, fp8 (fp32 accumulate) 419, INT8 838 dense (838 fp16 and 3,352 fp4 "AI TOPS"
# are sparse, fp16-accumulate figures); 32 GB GDDR7, 28 Gb/s x 512 bit = 1,792 GB/s; PCIe 5.0 x16
RTX_5090 = GPUSpec(
    name="rtx-5090", aliases=("5090", "rtx5090"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 104.8 * T, "tf32": 104.8 * T, "bf16": 209.5 * T, "fp16": 209.5 * T, "fp8": 419 * T,
                      "int8": 838 * T},
    memory_bytes=31.36 * GiB, memory_bandwidth_bytes_per_s=1792e9, datasheet_memory_bytes=32e9,
    memory_source='torch\'s OOM message on an RTX 5090: "GPU 0 has a total capacity of 31.36 GiB" '
                  '(TrajectoryCrafter/TrajectoryCrafter#20; 31.37 GiB in Wan-Video/Wan2.1#465)',
    source="NVIDIA RTX Blackwell GPU architecture whitepaper (RTX 5090), dense, fp32 accumulate",
    sm_count=170, intra_node_link=perf.PCIE5,
    performance_source="RTX Blackwell whitepaper: RTX 5090 has 170 SMs (21,760 CUDA cores); cards talk over PCIe 5.0 x16",
)

# NVIDIA Ada GPU architecture whitepaper (GeForce RTX 4080 16GB column, AD103): 76 SMs at 2,505 MHz: fp32 48.7,
# fp16/bf16 with fp32 accumulate 97.5, fp8 (fp32 accumulate) 194.9, INT8 389.9 dense; 16 GB GDDR6X at 22.4 Gb/s x
# 256 bit = 716.8 GB/s; PCIe 4.0 x16 (the RTX 4080 SUPER is another card)
RTX_4080 = GPUSpec(
    name="rtx-4080", aliases=("4080", "rtx4080"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 48.7 * T, "tf32": 48.7 * T, "bf16": 97.5 * T, "fp16": 97.5 * T, "fp8": 194.9 * T,
                      "int8": 389.9 * T},
    memory_bytes=16e9, memory_bandwidth_bytes_per_s=716.8e9,
    memory_source="no published CUDA-reported capacity of an RTX 4080 under Linux found (Windows' WDDM reports "
                  "15.99 GiB, aigc-apps/sd-webui-EasyPhoto#281): the datasheet's 16 GB",
    source="NVIDIA Ada GPU architecture whitepaper (RTX 4080 16GB), dense, fp32 accumulate",
    sm_count=76, intra_node_link=perf.PCIE4,
    performance_source="Ada whitepaper: RTX 4080 has 76 SMs (9,728 CUDA cores); cards talk over PCIe 4.0 x16",
)

# NVIDIA Ampere GA102/GA106 whitepaper figures for the GeForce RTX 3060 12GB (GA106): 28 SMs at 1,777 MHz: fp32 12.7,
# fp16/bf16 with fp32 accumulate 25.5, TF32 12.7, INT8 101.9 dense; 12 GB GDDR6 at 15 Gb/s x 192 bit = 360 GB/s;
# PCIe 4.0 x16 (the 8 GB RTX 3060 and the 3060 Ti are other cards)
RTX_3060 = GPUSpec(
    name="rtx-3060", aliases=("3060", "rtx3060", "rtx-3060-12gb"), vendor="NVIDIA",
    peak_flops_per_s={"fp32": 12.7 * T, "tf32": 12.7 * T, "bf16": 25.5 * T, "fp16": 25.5 * T, "int8": 101.9 * T},
    memory_bytes=11.75 * GiB, memory_bandwidth_bytes_per_s=360e9, datasheet_memory_bytes=12e9,
    memory_source='torch\'s OOM message on an RTX 3060 (Linux): "11.75 GiB total capacity" (Kunhao-Liu/StyleGaussian'
                  '#12; smy20011/dreambooth-gui#78; 11.76 GiB in TencentARC/PhotoMaker#47: the smaller is kept)',
    source="NVIDIA Ampere GA102 GPU architecture whitepaper (GeForce RTX 30 series table, RTX 3060), dense, fp32 "
           "accumulate",
    sm_count=28, intra_node_link=perf.PCIE4,
    performance_source="RTX 3060: 28 SMs (3,584 CUDA cores); cards talk over PCIe 4.0 x16",
)

SMALL_GPUS: list[GPUSpec] = [RTX_A6000, RTX_6000_ADA, A10, A10G, T4, V100_16GB, V100_32GB, RTX_5090, RTX_4080, RTX_3060]

# torch.cuda.get_device_name() -> entry, most specific first (specs.hardware.DEVICE_NAME_PATTERNS appends these).
# V100s are not mapped: "Tesla V100-PCIE-*" has lower peaks than these SXM2 entries.
SMALL_DEVICE_NAME_PATTERNS = [
    (r"rtx a6000", "rtx-a6000"), (r"rtx 6000 ada", "rtx-6000-ada"), (r"\ba10g\b", "a10g"), (r"\ba10\b", "a10"),
    (r"\bt4\b", "t4"), (r"rtx 5090", "rtx-5090"), (r"rtx 4080(?!\s*super)", "rtx-4080"),
    (r"rtx 3060(?!\s*ti)(?!.*laptop)", "rtx-3060"),
]
