"""Performance data of accelerators beyond their peaks: links, GEMM and attention efficiency, each with its source.

These are properties of the hardware and its libraries (cuBLAS, NCCL, FlashAttention), taken from datasheets
and published measurements, never fitted to a training run we test against. `specs/hardware.py` attaches them
to each GPUSpec; `account/` reads them (interpolation, wave quantization and α–β costs live there). A
calibrated device (`bench --calibrate`, `--gpu cpu`) fills the same structures with its own measurements.

Representation (the contract other modules and the calibration profile build on):
- `Link`: one level of the interconnect as one GPU sees it: datasheet bandwidth per direction, the fraction of
  it NCCL's ring collectives achieve (measured bus bandwidth / datasheet), a latency per ring step and a fixed
  latency per collective call.
- `GemmEfficiency`: achieved fraction of the dense peak of one dtype's matmuls at measured shapes (m, n, k).
  `full_waves=True` marks best-case points (every SM busy): account/ then scales them by the wave-quantization
  utilisation of the asked shape on `GPUSpec.sm_count` SMs. A calibration profile lists many shapes with
  `full_waves=False` and no SM count; account/ interpolates between them in log-shape space.
- `AttentionEfficiency`: achieved fraction of the dense peak of a fused (flash) attention kernel by sequence
  length, forward and backward, with the FLOPs counted as the kernel executes them. A GPUSpec keeps one per
  kernel name (`attention_efficiency`, the first is the default: what PyTorch's SDPA runs there).
Units: bytes/s, seconds, fractions in (0, 1]. Pure data, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainledger.errors import TrainledgerError

GB = 1e9
US = 1e-6


@dataclass(frozen=True)
class Link:
    """One level of the interconnect as one GPU sees it (inside a node, or between nodes).

    bandwidth_bytes_per_s: datasheet bandwidth per GPU per direction; bus_bandwidth_fraction: what NCCL's ring
    collectives achieve of it (nccl-tests "busbw", which is defined so that it compares with the link rate);
    step_latency_seconds: per ring step (NCCL's tuning model, `hwLat`, Simple protocol); call_latency_seconds:
    fixed per collective call (NCCL `baseLat`); sm_channels: the SMs a running collective occupies (NCCL launches
    one CTA per channel and does not share the SM with compute kernels: NVIDIA, NVIDIA/nccl#689), which the
    GEMMs it overlaps lose; 0 where no channel count is published (then no interference is modelled).
    busbw_curve: measured nccl-tests all_reduce bus bandwidth by message size, ((bytes, bytes/s), ...) ascending,
    where one is published: it replaces the α–β terms for collectives on this link (account.time.comm), since NCCL's
    achieved rate below ~1 GB falls short of what fixed latencies predict (protocol, channel and algorithm
    choices change with size).
    """

    name: str
    bandwidth_bytes_per_s: float
    bus_bandwidth_fraction: float = 1.0
    step_latency_seconds: float = 0.0
    call_latency_seconds: float = 0.0
    source: str = ""
    sm_channels: int = 0          # SMs NCCL's kernel holds while a collective runs (one CTA per channel); 0: unknown
    busbw_curve: tuple[tuple[float, float], ...] = ()   # measured (message bytes, all_reduce busbw bytes/s)

    def __post_init__(self):
        if not self.bandwidth_bytes_per_s > 0:
            raise TrainledgerError(f"link {self.name!r}: bandwidth must be positive, got {self.bandwidth_bytes_per_s!r}")
        if not 0 < self.bus_bandwidth_fraction <= 1:
            raise TrainledgerError(f"link {self.name!r}: bus_bandwidth_fraction must be in (0, 1]")
        sizes = [size for size, _ in self.busbw_curve]
        if sizes != sorted(sizes) or any(not (size > 0 and rate > 0) for size, rate in self.busbw_curve):
            raise TrainledgerError(f"link {self.name!r}: busbw_curve needs positive (bytes, bytes/s) points in "
                                   "ascending size")

    @property
    def effective_bytes_per_s(self) -> float:
        """Bandwidth a ring collective sustains on this link (bytes/s): datasheet × measured bus-bandwidth fraction."""
        return self.bandwidth_bytes_per_s * self.bus_bandwidth_fraction

    def to_dict(self) -> dict:
        return dict(self.__dict__) | {"effective_bytes_per_s": self.effective_bytes_per_s}


@dataclass(frozen=True)
class GemmEfficiency:
    """Achieved fraction of one dtype's dense peak by matmul shape: points (m, n, k, fraction), C[m,n] = A[m,k]·B[k,n]."""

    points: tuple[tuple[int, int, int, float], ...]
    full_waves: bool = True
    source: str = ""

    def __post_init__(self):
        if not self.points:
            raise TrainledgerError("a GemmEfficiency needs at least one (m, n, k, fraction) point")
        for m, n, k, fraction in self.points:
            if min(m, n, k) <= 0 or not 0 < fraction <= 1:
                raise TrainledgerError(f"GEMM efficiency point ({m}, {n}, {k}, {fraction}) needs positive sizes "
                                       "and a fraction in (0, 1]")

    def to_dict(self) -> dict:
        return {"points": [list(p) for p in self.points], "full_waves": self.full_waves, "source": self.source}


@dataclass(frozen=True)
class AttentionEfficiency:
    """Achieved fraction of the dense peak of a fused attention kernel: points (seq_len, forward, backward).

    `causal_ratio` (seq_len, causal / non-causal forward rate) when the source measured the causal kernel too
    (FLOPs counted as executed: half the T×T square); account/ applies the same ratio to the backward.
    `head_dim` and `dtype`: what the points were measured at (a kernel's rate depends on the head size: a head of
    64 does half the arithmetic per byte of one of 128); `other_head_dims`: the same kernel measured at other
    head sizes (account/ takes the nearest, interpolating in log2 between two). The fractions are of `dtype`'s
    peak: another dtype (fp32, which flash kernels do not run) falls back to the GEMM efficiency.
    """

    kernel: str
    points: tuple[tuple[int, float, float], ...]
    causal_ratio: tuple[tuple[int, float], ...] = ()
    source: str = ""
    head_dim: int = 128
    dtype: str = "bf16"
    other_head_dims: tuple["AttentionEfficiency", ...] = ()

    def at_head_dims(self) -> list["AttentionEfficiency"]:
        """This table and its other head sizes, by head size."""
        return sorted((self, *self.other_head_dims), key=lambda t: t.head_dim)

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "points": [list(p) for p in self.points],
                "causal_ratio": [list(p) for p in self.causal_ratio], "source": self.source,
                "head_dim": self.head_dim, "dtype": self.dtype,
                "other_head_dims": [t.to_dict() for t in self.other_head_dims]}


# --- NCCL's latency model -------------------------------------------------------------------------------------
# NVIDIA/nccl src/graph/tuning.cc (2.18+): baseLat Ring/Simple 8.4 µs per call; hwLat Ring/Simple per step:
# NVLink 3.4 µs, PCIe 5.7 µs, network 14.0 µs. Large messages use the Simple protocol.
_NCCL = "NVIDIA/nccl src/graph/tuning.cc (Ring, Simple protocol: baseLat 8.4 us, hwLat NVLink 3.4 / PCI 5.7 / NET 14 us)"
NCCL_CALL_LATENCY = 8.4 * US

# --- inside a node --------------------------------------------------------------------------------------------
# NVIDIA A100 datasheet: NVLink 600 GB/s (both directions) = 300 GB/s per direction. Measured nccl-tests
# all_reduce bus bandwidth on 8 × A100 SXM: 235 GB/s (stas00/ml-engineering, network/README.md, "case study");
# 232.5 GB/s in NVIDIA/nccl-tests#175; NVIDIA: "~230GB/s", reached only near 8 GB messages (nccl-tests#149).
# By message size (Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md: 8 × A100-SXM4-80GB on
# NVSwitch, NCCL 2.18.5, all_reduce_perf -b 8 -e 8G -f 2 -g 8, in-place busbw, GB/s):
#   32K 1.37, 256K 10.11, 1M 36.22, 4M 71.43, 16M 109.22, 32M 132.77, 64M 166.63, 128M 174.18, 256M 213.87,
#   512M 221.58, 1G 228.10, 2G 230.22, 4G 230.48, 8G 231.58 (sizes are powers of two: "64M" = 2^26 bytes)
# NCCL builds 24 ring channels on an HGX A100 with NVSwitch (NCCL INFO "Channel 23/24" log in NVIDIA/nccl-tests#100).
_KIB = 1024
A100_NVSWITCH_ALLREDUCE_BUSBW = tuple((size * _KIB, gbps * GB) for size, gbps in (
    (32, 1.37), (256, 10.11), (1024, 36.22), (4096, 71.43), (16384, 109.22), (32768, 132.77), (65536, 166.63),
    (131072, 174.18), (262144, 213.87), (524288, 221.58), (1048576, 228.10), (2097152, 230.22),
    (4194304, 230.48), (8388608, 231.58)))
NVLINK3 = Link("NVLink 3 (NVSwitch)", 300 * GB, 235 / 300, 3.4 * US, NCCL_CALL_LATENCY,
               "A100 datasheet (600 GB/s bidirectional); busbw 235 GB/s on 8x A100 (stas00/ml-engineering network/README.md); "
               "busbw by message size on 8x A100-SXM4-80GB, NCCL 2.18.5 (Azure/AI-benchmarking-guide ND_A100_v4_results.md); "
               + _NCCL + "; 24 channels on HGX A100 (NVIDIA/nccl-tests#100)", sm_channels=24,
               busbw_curve=A100_NVSWITCH_ALLREDUCE_BUSBW)
# NVIDIA H100 datasheet: NVLink 900 GB/s = 450 GB/s per direction. Ring all_reduce (NVLS/SHARP off) on 8 × H200
# (same NVLink 4): 367.61 GB/s busbw (stas00/ml-engineering, network/benchmarks/results/all-reduce-8xH200.md).
NVLINK4 = Link("NVLink 4 (NVSwitch)", 450 * GB, 367.61 / 450, 3.4 * US, NCCL_CALL_LATENCY,
               "H100 datasheet (900 GB/s bidirectional); ring busbw 367.61 GB/s on 8x H200, NVLS off "
               "(stas00/ml-engineering all-reduce-8xH200.md); " + _NCCL)
# NVIDIA HGX B200 datasheet: NVLink 5 1.8 TB/s per GPU = 900 GB/s per direction. Measured all_reduce (Ring, in-place)
# bus bandwidth by message size on GB200 NVLink 5 (Azure/AI-benchmarking-guide, Azure_Results/ND_GB200_v6_results.md,
# "NCCL Bandwidth", NCCL 2.25.1; the GPU count is not stated), GB/s; the sizes printed as 1K ... 8G are powers of two:
#   1K 0.10, 4K 0.38, 16K 1.46, 65K 5.71, 256K 22.41, 1M 80.48, 2M 110.43, 4M 146.27, 8M 253.46, 16M 331.09,
#   33M 422.62, 67M 550.73, 134M 574.19, 268M 593.53, 536M 618.74, 1G 646.87, 2G 666.63, 4G 673.06, 8G 679.61
# 679.61 of 900 GB/s = 0.755 at 8 GiB. The HGX B200 board has the same NVLink 5 switches: the same curve (assumed).
NVLINK5_ALLREDUCE_BUSBW = tuple((2 ** log2_size, gbps * GB) for log2_size, gbps in (
    (10, 0.10), (12, 0.38), (14, 1.46), (16, 5.71), (18, 22.41), (20, 80.48), (21, 110.43), (22, 146.27),
    (23, 253.46), (24, 331.09), (25, 422.62), (26, 550.73), (27, 574.19), (28, 593.53), (29, 618.74),
    (30, 646.87), (31, 666.63), (32, 673.06), (33, 679.61)))
NVLINK5 = Link("NVLink 5 (NVSwitch)", 900 * GB, 679.61 / 900, 3.4 * US, NCCL_CALL_LATENCY,
               "HGX B200 datasheet (1.8 TB/s bidirectional); all_reduce busbw by message size on GB200, NCCL 2.25.1 "
               "(Azure/AI-benchmarking-guide ND_GB200_v6_results.md); " + _NCCL,
               busbw_curve=NVLINK5_ALLREDUCE_BUSBW)
# H800 NVLink: 400 GB/s bidirectional = 200 GB/s per direction (NVIDIA H800 datasheet); DeepSeek-V3 (arXiv:2412.19437,
# Sec. 3.2.2) states the achieved rate: "NVLink offers a bandwidth of 160 GB/s".
NVLINK_H800 = Link("NVLink (H800, 400 GB/s)", 200 * GB, 160 / 200, 3.4 * US, NCCL_CALL_LATENCY,
                   "H800 datasheet (400 GB/s bidirectional); 160 GB/s achieved (DeepSeek-V3, Sec. 3.2.2); " + _NCCL)
# PCIe 3.0 x16: 8 GT/s x 16 lanes with 128b/130b coding = 15.75 GB/s per direction (PCI-SIG; T4, V100 PCIe).
PCIE3 = Link("PCIe 3.0 x16", 15.75 * GB, 1.0, 5.7 * US, NCCL_CALL_LATENCY, "PCI-SIG PCIe 3.0 x16 per direction; " + _NCCL)
# PCIe 4.0 / 5.0 x16: 31.5 / 63 GB/s per direction (PCI-SIG; stas00/ml-engineering network/README.md table).
PCIE4 = Link("PCIe 4.0 x16", 31.5 * GB, 1.0, 5.7 * US, NCCL_CALL_LATENCY, "PCI-SIG PCIe 4.0 x16 per direction; " + _NCCL)
PCIE5 = Link("PCIe 5.0 x16", 63 * GB, 1.0, 5.7 * US, NCCL_CALL_LATENCY, "PCI-SIG PCIe 5.0 x16 per direction; " + _NCCL)
# AMD Instinct MI300X platform: 7 × 64 GB/s xGMI links per GPU = 448 GB/s per direction; measured all_reduce
# busbw on 8 × MI300X with a 4 GB payload: 312.912 GB/s (stas00/ml-engineering network/README.md).
XGMI_MI300X = Link("Infinity Fabric xGMI", 448 * GB, 312.912 / 448, 3.4 * US, NCCL_CALL_LATENCY,
                   "AMD MI300X platform (7 x 64 GB/s); busbw 312.9 GB/s on 8x MI300X (stas00/ml-engineering network/README.md); "
                   "latency: NCCL's NVLink figures (RCCL has the same tuning model)")

# --- between nodes (one NIC per GPU, as in DGX/HGX nodes) -----------------------------------------------------
# InfiniBand HDR 200 Gb/s = 25 GB/s per direction. NVIDIA measures 192 GB/s all_reduce busbw on a DGX-A100 with
# 8 × 200 Gb/s NICs, i.e. 24 GB/s per GPU (NVIDIA/nccl#812, quoted in NVIDIA/nccl#1576; 24 GB/s also in nccl#412).
# "If you are on DGX with 8 NICs and a top speed of 190 GB/s, then it would use 16 SMs" (NVIDIA, NVIDIA/nccl#689).
IB_HDR = Link("InfiniBand HDR 200 Gb/s", 25 * GB, 24 / 25, 14.0 * US, NCCL_CALL_LATENCY,
              "InfiniBand HDR 200 Gb/s per GPU; 192 GB/s busbw per DGX-A100 node = 24 GB/s per GPU (NVIDIA/nccl#812, #1576); "
              + _NCCL + "; 16 SMs on a DGX A100 with 8 NICs (NVIDIA/nccl#689)", sm_channels=16)
# InfiniBand NDR 400 Gb/s = 50 GB/s per direction; "for NDR @ 400Gbps you should see 46-48GB/s per NIC"
# (NVIDIA, NVIDIA/nccl-tests#290).
IB_NDR = Link("InfiniBand NDR 400 Gb/s", 50 * GB, 47 / 50, 14.0 * US, NCCL_CALL_LATENCY,
              "InfiniBand NDR 400 Gb/s per GPU; 46-48 GB/s per NIC measured (NVIDIA/nccl-tests#290); " + _NCCL)

# ConnectX-8 SuperNIC, 800 Gb/s per GPU = 100 GB/s per direction: GB300 NVL72 has 72 ConnectX-8 NICs, one per GPU
# (NVIDIA GB300 NVL72 product page: "ConnectX-8 SuperNIC ... 800 Gb/s" per GPU); HGX/DGX B300, 8 x ConnectX-8
# ("Networking Bandwidth 1.6 TB/s" per 8 GPUs, both directions, against the HGX B200's 0.8 TB/s: NVIDIA HGX page as
# tabulated at fibermall.com/blog/?p=17161). No nccl-tests result at 800 Gb/s was found: the fraction NVIDIA states
# for a 400 Gb/s NDR NIC (46-48 of 50 GB/s, NVIDIA/nccl-tests#290) is assumed to carry over to the faster NIC.
CX8_800G = Link("ConnectX-8 800 Gb/s", 100 * GB, 47 / 50, 14.0 * US, NCCL_CALL_LATENCY,
                "ConnectX-8 800 Gb/s per GPU (GB300 NVL72 product page; HGX B300: 1.6 TB/s per 8 GPUs); bus-bandwidth "
                "fraction of a 400 Gb/s NDR NIC (46-48 of 50 GB/s, NVIDIA/nccl-tests#290), assumed: none published at "
                "800 Gb/s; " + _NCCL)

# RDMA at 400 Gb/s per GPU (RoCE or InfiniBand NDR, one NIC per GPU): Meta's Grand Teton hosts of the torchtitan
# benchmarks ("Hosts are inter-connected with backend RDMA network with 400 Gb/s per GPU", pytorch/torchtitan
# docs/performance.md, 2024-12); a 400 Gb/s NIC sustains 46-48 GB/s of NCCL bus bandwidth (NVIDIA in
# NVIDIA/nccl-tests#290, NDR); the same line rate, so the same measured fraction.
RDMA_400G = Link("RDMA 400 Gb/s per GPU", 50 * GB, 47 / 50, 14.0 * US, NCCL_CALL_LATENCY,
                 "400 Gb/s RDMA per GPU (torchtitan docs/performance.md, Grand Teton); 46-48 GB/s per 400G NIC measured "
                 "(NVIDIA/nccl-tests#290); " + _NCCL)

# --- memory bandwidth achieved by a streaming kernel --------------------------------------------------------
# A100 40GB: a device memcopy measures 1355 GB/s of the 1555 GB/s datasheet (PTsolvers/gpu-workshop-JuliaCon23#7,
# the JuliaCon 2023 GPU workshop's reference figure): 87.1%.
A100_MEMORY_FRACTION = 1355 / 1555
# A100 80GB SXM: STREAM Copy 1.61 TB/s of the 2039 GB/s datasheet (Add/Triad 1.70, Dot 1.75): 79.0%
# (Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md, "HBM Bandwidth", A100-SXM4-80GB).
A100_80GB_MEMORY_FRACTION = 1610 / 2039

# H100 SXM 80GB: STREAM Copy 2.90 TB/s of the 3.35 TB/s datasheet (Mul 2.90, Add/Triad 2.97, Dot 3.18): 86.6%
# (Azure/AI-benchmarking-guide, Azure_Results/ND_H100_v5_results.md, "HBM Bandwidth", NVIDIA H100 80GB HBM3).
# The recorded calibration of one H100 (tests/data/h100_2026_11_26) measured 2.92-3.00 TB/s for 256 MiB-1 GiB adds.
H100_MEMORY_FRACTION = 2900 / 3350
# H100 SXM 96GB HBM2e (2.4 TB/s, torchtitan's Grand Teton part): no STREAM figure is published. It is the same
# GH100 die and memory controllers as the measured H100 SXM, whose fraction is taken (an assumption: on the A100
# the fraction moved with the memory, 87 % for the 40GB HBM2 part, 79 % for the 80GB HBM2e one). Before this the
# entry streamed at 100 % of the datasheet while its access-pattern fractions (of the stream) were the H100's.
H100_HBM2E_MEMORY_FRACTION = H100_MEMORY_FRACTION

# H200 SXM: STREAM Copy 4.01 TB/s of the 4.8 TB/s datasheet (Add/Triad 4.15, Dot 4.48): 83.5%
# (Azure/AI-benchmarking-guide, Azure_Results/ND_H200_v5_results.md, "HBM Bandwidth", NVIDIA H200 141GB).
H200_MEMORY_FRACTION = 4010 / 4800

# --- GEMM efficiency ------------------------------------------------------------------------------------------
# A100 SXM, sustained: Azure/AI-benchmarking-guide, Azure_Results/ND_A100_v4_results.md, "GEMM CuBLASLt": FP16,
# random inputs, 10,000 warm-up iterations (the clocks a long training run settles at: random data draws more
# power than zeros, and the A100 throttles to stay within 400 W), A100-SXM4-80GB, CUDA 12.5, TFLOP/s by (m, n, k).
# Corroborated at 8192³: 257 TFLOP/s with random inputs vs 295 with zeros on an A100 (Horace He, "Strangely,
# Matrix Multiplications on GPUs Run Faster When Given 'Predictable' Data!", thonking.ai, 2024). The maximum
# over a brute-force shape search after 50 warm-ups, 271.2 TFLOP/s at 1024x10240x5120 (stas00/ml-engineering
# MAMF table), is a best case (the top of a search, short runs) and is not used where a sustained fixed-shape
# table exists; H100, MI300X below have only that best case, which makes them optimistic.
_AZURE_A100 = "Azure/AI-benchmarking-guide ND_A100_v4_results.md (cuBLASLt fp16, random data, 10k warm-up, A100-SXM4-80GB)"
A100_SXM_FP16 = GemmEfficiency(tuple((m, n, k, tflops / 312) for m, n, k, tflops in (
    (1024, 1024, 1024, 119.4), (2048, 2048, 2048, 221.8), (4096, 4096, 4096, 228.0), (8192, 8192, 8192, 253.7),
    (16384, 16384, 16384, 256.5), (1024, 2145, 1024, 132.8), (6144, 12288, 12288, 250.8),
    (802816, 192, 768, 157.8))), source=_AZURE_A100)
_MAMF = "stas00/ml-engineering compute/accelerator/README.md, Maximum Achievable Matmul FLOPS table"
# H200 SXM fp8, sustained: the same Azure benchmark (ND_H200_v5_results.md, "GEMM CuBLASLt": FP8, random
# inputs, 10,000 warm-up iterations, CUDA 12.6), TFLOP/s by (m, n, k) of the 1979 TFLOP/s dense fp8 peak.
_AZURE_H200 = "Azure/AI-benchmarking-guide ND_H200_v5_results.md (cuBLASLt fp8, random data, 10k warm-up, H200 141GB)"
H200_SXM_FP8 = GemmEfficiency(tuple((m, n, k, tflops / 1979) for m, n, k, tflops in (
    (1024, 1024, 1024, 290.8), (2048, 2048, 2048, 1013.4), (4096, 4096, 4096, 1249.1), (8192, 8192, 8192, 1300.6),
    (16384, 16384, 16384, 1366.3), (32768, 32768, 32768, 1349.5), (1024, 2145, 1024, 407.9),
    (6144, 12288, 12288, 1318.0), (802816, 192, 768, 717.5))), source=_AZURE_H200)
H100_SXM_BF16 = GemmEfficiency(((2048, 2048, 13312, 794.5 / 989.5),),
                               source=_MAMF + ": H100 SXM bf16 794.5 of 989 TFLOP/s at 2048x2048x13312 (torch 2.7.0+cu126)")
H100_SXM_FP8 = GemmEfficiency(((1024, 9216, 14336, 1402.6 / 1979),),
                              source=_MAMF + ": H100 SXM fp8 e4m3 1402.6 of 1979 TFLOP/s at 1024x9216x14336")
MI300X_BF16 = GemmEfficiency(((10240, 15360, 8192, 668.4 / 1307.4),), full_waves=False,
                             source=_MAMF + ": MI300X bf16 668.4 TFLOP/s at 10240x15360x8192 (ROCm 6.3, TunableOp); "
                                            "no wave model for CDNA: applied to every shape")

# B200 SXM, maximum achievable matmul FLOP/s (mamf-finder.py): bf16 1745.0 of 2250 TFLOP/s (77.6 %), fp8 3432.5 of
# 4500 (76.3 %), as tabulated in the guide "When Is It Worth Upgrading GPUs?" (MAMF section, H200 vs B200; it links
# stas00/ml-engineering's MAMF table and mamf-finder.py). The best shape is not printed there: one fraction for
# every shape (full_waves False; the B200 entry has no SM count for a wave model either).
_B200_MAMF = 'mamf-finder on B200 SXM, "When Is It Worth Upgrading GPUs?" (MAMF tables; best shape not printed)'
B200_BF16 = GemmEfficiency(((8192, 8192, 8192, 1745.0 / 2250),), full_waves=False,
                           source=_B200_MAMF + ": bf16 1745.0 of 2250 TFLOP/s, applied to every shape")
B200_FP8 = GemmEfficiency(((8192, 8192, 8192, 3432.5 / 4500),), full_waves=False,
                          source=_B200_MAMF + ": fp8 3432.5 of 4500 TFLOP/s, applied to every shape")
# Blackwell fp8, sustained: Azure/AI-benchmarking-guide, Azure_Results/ND_GB200_v6_results.md, "GEMM CuBLASLt
# (FP8)": random inputs, 10,000 warm-up iterations (the clocks a long run settles at under its power limit, as for
# the A100 and H200 tables above), GB200 185GB, CUDA 12.8, driver 570.133.20, TFLOP/s by (m, n, k) of the GB200's
# 5,000 TFLOP/s dense fp8 peak. The best case of a short shape search (mamf-finder's 3432.5 of 4500 on B200, above:
# 0.763 of peak) is 31 % above the best of these sustained fractions (2906.9 of 5000 at 16384³ = 0.581) and is not
# used for fp8 where this table exists. The B200 takes the same fractions of its own (1,000 W) peak: the same
# die, an assumption (no sustained B200 table is published).
_AZURE_GB200 = ("Azure/AI-benchmarking-guide ND_GB200_v6_results.md (cuBLASLt fp8, random data, 10k warm-up, GB200 "
                "185GB, CUDA 12.8)")
GB200_FP8_PEAK_TFLOPS = 5000
BLACKWELL_FP8 = GemmEfficiency(tuple((m, n, k, tflops / GB200_FP8_PEAK_TFLOPS) for m, n, k, tflops in (
    (1024, 1024, 1024, 489.2), (2048, 2048, 2048, 2243.6), (4096, 4096, 4096, 2834.6), (8192, 8192, 8192, 2876.6),
    (16384, 16384, 16384, 2906.9), (32768, 32768, 32768, 2825.6), (1024, 2145, 1024, 1022.2),
    (6144, 12288, 12288, 2895.6), (802816, 192, 768, 1459.5))), full_waves=False,
    source=_AZURE_GB200 + ": fractions of the GB200's 5,000 TFLOP/s (the B200's of its 4,500: same die, assumed); "
                          "no SM count: interpolated by shape")

# --- the same die at a lower power limit -------------------------------------------------------------------------
# A GPU's tensor cores run at the clock its power limit sustains under tensor-core load, and NVIDIA rates each
# part's tensor throughput at that clock: the GH100 die with 132 SMs is rated 989.5 dense bf16 TFLOP/s as the
# H100 SXM5 at 700 W (132 SMs × 4,096 FLOP/clock × 1.83 GHz, below its 1.98 GHz maximum boost) and 835.5 as the
# H100 NVL at up to 400 W (1.545 GHz, below its 1.785 GHz maximum boost) (NVIDIA H100 Tensor Core GPU datasheet:
# 1,979 and 1,671 TFLOP/s with sparsity). A part between the two limits is rated between them — torchtitan says
# of its 500 W H100 SXM "the actual peak TFLOPs number is between SXM and NVL" (docs/performance.md, 2024-12) —
# so its rate is taken linearly in the power limit between the two datasheet points: 886.8 TFLOP/s at 500 W,
# 0.896 of the 700 W rate (a clock ∝ power^(1/3), the dynamic-power law with voltage ∝ clock, gives 0.894). The
# measured 700 W matmul efficiency is scaled by that fraction: its shortfall from the rated peak (data,
# scheduling) is taken to be the same at both clocks. Kernels that use the tensor cores at a fraction of their
# rate (flash attention at 30-40 %) or stream memory draw less power and are not scaled (optimistic bound).
H100_SXM_POWER_W, H100_SXM_BF16_TFLOPS = 700.0, 989.5
H100_NVL_POWER_W, H100_NVL_BF16_TFLOPS = 400.0, 1671 / 2


def gh100_tensor_fraction(power_limit_w: float) -> float:
    """Rated dense tensor throughput of the GH100 (132 SMs) at `power_limit_w`, as a fraction of the 700 W H100
    SXM5's: linear between the datasheet's H100 NVL (400 W) and H100 SXM5 (700 W) ratings, clamped there."""
    w = min(max(power_limit_w, H100_NVL_POWER_W), H100_SXM_POWER_W)
    t = (w - H100_NVL_POWER_W) / (H100_SXM_POWER_W - H100_NVL_POWER_W)
    return (H100_NVL_BF16_TFLOPS + t * (H100_SXM_BF16_TFLOPS - H100_NVL_BF16_TFLOPS)) / H100_SXM_BF16_TFLOPS


def power_limited(table: GemmEfficiency, fraction: float, note: str) -> GemmEfficiency:
    """`table` measured at a higher power limit, its fractions of peak scaled by `fraction` (gh100_tensor_fraction)."""
    return GemmEfficiency(tuple((m, n, k, f * fraction) for m, n, k, f in table.points), table.full_waves,
                          f"{table.source}; × {fraction:.3f} ({note})")


# The H100 SXM 96GB HBM2e of torchtitan's benchmarks (Meta's Grand Teton hosts) at "the default 500W power limit"
H100_HBM2E_POWER_W = 500.0
H100_500W_TENSOR_FRACTION = gh100_tensor_fraction(H100_HBM2E_POWER_W)
_AT_500W = ("at 500 W: the GH100's rated tensor throughput between the H100 NVL at 400 W and the SXM5 at 700 W, "
            "NVIDIA H100 datasheet")
H100_500W_BF16 = power_limited(H100_SXM_BF16, H100_500W_TENSOR_FRACTION, _AT_500W)
H100_500W_FP8 = power_limited(H100_SXM_FP8, H100_500W_TENSOR_FRACTION, _AT_500W)

# --- attention kernels ---------------------------------------------------------------------------------------
# FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608), Figs. 5-6: H100 80GB SXM5, head dim 128, BF16,
# TFLOP/s by sequence length 512 ... 16k (FLOPs as executed: a causal kernel does half the square; the backward
# 2.5 × the forward's matmuls):
#   FlashAttention-2 forward 309 350 362 368 370 370, causal 191 260 298 319 333 335, backward 214 260 291 310 318 322
#   cuDNN            forward 497 574 617 609 600 595, causal 315 410 484 518 529 539, backward 305 408 465 499 518 516
_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
_FA3_PAPER = "FlashAttention-3 paper (arXiv:2407.08608) Figs. 5-6, H100 SXM5, head dim 128, bf16"


def _h100_table(kernel: str, fwd, bwd, fwd_causal, head_dim: int = 128, others=()) -> AttentionEfficiency:
    source = _FA3_PAPER.replace("head dim 128", f"head dim {head_dim}")
    return AttentionEfficiency(kernel, tuple((s, f / 989.5, b / 989.5) for s, f, b in zip(_SEQ, fwd, bwd)),
                               tuple((s, c / f) for s, c, f in zip(_SEQ, fwd_causal, fwd)), f"{source}: {kernel}",
                               head_dim=head_dim, other_head_dims=tuple(others))


# The same figures at head dim 64 (the head size of GPT-2 and Llama 3.2 1B), TFLOP/s by sequence length:
#   FlashAttention-2 forward 282 306 318 321 322 324, causal 180 229 262 284 295 299, backward 198 238 264 279 287 291
#   cuDNN            forward 335 373 395 408 412 413, causal 225 288 334 363 379 388, backward 266 348 395 417 432 433
# Checked against the recorded H100 traces (tests/data/h100_2026_11_26, PyTorch 2.11 SDPA = cuDNN): causal forward
# 277 TFLOP/s at 1024 (paper 288), 375 at 2048 (334); backward 266 at 1024, 343 at 2048.
FA2_H100 = _h100_table("flash-attention-2", (309, 350, 362, 368, 370, 370), (214, 260, 291, 310, 318, 322),
                       (191, 260, 298, 319, 333, 335),
                       others=[_h100_table("flash-attention-2", (282, 306, 318, 321, 322, 324),
                                           (198, 238, 264, 279, 287, 291), (180, 229, 262, 284, 295, 299), 64)])
CUDNN_H100 = _h100_table("cudnn", (497, 574, 617, 609, 600, 595), (305, 408, 465, 499, 518, 516),
                         (315, 410, 484, 518, 529, 539),
                         others=[_h100_table("cudnn", (335, 373, 395, 408, 412, 413), (266, 348, 395, 417, 432, 433),
                                             (225, 288, 334, 363, 379, 388), 64)])
# B200: the fastest published attention kernel, FlashAttention-4 (Zadouri et al. 2026, arXiv:2603.05451, abstract),
# reaches "up to 1613 TFLOPs/s (71% utilization)" in BF16, and is "1.1-1.3x faster than cuDNN 9.13 in forward"
# (Together AI's FlashAttention-4 post). cuDNN, which Transformer Engine runs, is therefore at most 1613 / 1.1 =
# 1466 TFLOP/s forward: 0.652 of the 2,250 dense peak, an upper bound and the only B200 figure published (flat in the
# sequence length). Its backward and causal rates are not published: the H100 cuDNN's measured backward / forward
# ratio at 16k (516 / 595) and its causal / full ratios by sequence (FA3 paper, above) are applied (assumed to carry
# over). The GB200 takes the same fractions of its higher peak (the same die, as for the GEMMs).
_FA4_BEST_TFLOPS, _FA4_OVER_CUDNN_AT_LEAST, B200_BF16_TFLOPS = 1613.0, 1.1, 2250.0
_B200_CUDNN_FORWARD = _FA4_BEST_TFLOPS / _FA4_OVER_CUDNN_AT_LEAST / B200_BF16_TFLOPS
CUDNN_B200 = AttentionEfficiency(
    "cudnn", ((16384, _B200_CUDNN_FORWARD, _B200_CUDNN_FORWARD * 516 / 595),), CUDNN_H100.causal_ratio,
    "FlashAttention-4 (arXiv:2603.05451): up to 1613 TFLOP/s bf16 on B200, >= 1.1x cuDNN 9.13 forward: cuDNN <= 1466 "
    "TFLOP/s (an upper bound, flat in sequence); backward / forward and causal ratios of the H100 cuDNN (FA3 paper)")

# FlashAttention-2 paper (Dao 2023, arXiv:2307.08691), abstract and Sec. 4.1: 50-73% of the A100's peak across
# its benchmark (sequence 512 ... 16k, head dim 64/128); coarse: the range spread from the shortest to the longest.
FA2_A100 = AttentionEfficiency(
    "flash-attention-2", ((512, 0.50, 0.50), (16384, 0.73, 0.73)), (),
    "FlashAttention-2 paper (arXiv:2307.08691): 50-73% of A100 peak over sequence 512..16k (coarse: the range only)")

# --- eager PyTorch on a GPU: what one kernel costs beyond its arithmetic ------------------------------------
# Measured on one H100 SXM (PyTorch 2.11, CUDA 13, driver 580) in the recorded Kineto trace of gpt2 8 × 1024
# amp-bf16 (tests/data/h100_2026_11_26/trace_gpt2.json.gz, the second profiled step, 1,172 GPU events): the
# shortest kernel took 0.96 µs and consecutive kernels that were already queued started a median 1.54 µs after
# the previous one ended (1.60 µs in the Llama 1B trace). A kernel therefore holds the GPU for about
# 0.96 + 1.54 = 2.5 µs even when it does almost nothing: the latency term of the latency-bandwidth (Hockney)
# model, t = overhead + bytes / bandwidth.
H100_KERNEL_OVERHEAD_SECONDS = (0.96 + 1.54) * US
# cuBLAS runs the Hopper tensor-core kernels (nvjet, CUTLASS sm90) only when the leading dimensions are
# multiples of 16 bytes (8 elements of bf16/fp16): cuBLAS documentation, "Tensor Core Usage" (alignment of
# lda/ldb/ldc and pointers), and NVIDIA's Matrix Multiplication Background User's Guide, "Tensor Core
# Requirements". Otherwise it falls back to older kernels with 1-element loads. In the recorded gpt2 trace the
# three LM-head GEMMs over the 50,257-token vocabulary ran as cutlass_75_tensorop_bf16_s1688gemm_*_align1:
# 2·8192·768·50257 FLOPs each in 6.63, 4.29 and 4.50 ms, 123 TFLOP/s together: 12.4% of the dense bf16 peak,
# where the aligned GEMMs of the same run reached 555-760 TFLOP/s (nanoGPT pads the vocabulary to 50,304 for
# this reason).
H100_UNALIGNED_GEMM_FRACTION = 3 * 2 * 8192 * 768 * 50257 / ((6634.5 + 4288.3 + 4503.1) * US) / 989.5e12
# The CPU side of an eager op that launches a kernel (Python, dispatcher, autograd bookkeeping, the launch), for a
# GPU known only by its datasheet: the reference host of the recorded H100 (a 16-vCPU VM; `bench --calibrate
# --device cuda`, tests/data/h100_2026_11_26/calibration-cuda-h100.json: 17.6 µs per op, forward and backward
# under autograd). A datasheet says nothing about the host: calibrate yours (`bench --calibrate --device cuda`).
EAGER_OP_CPU_SECONDS = 17.64e-6
EAGER_OP_CPU_SOURCE = ("the reference host of the recorded H100 (16-vCPU VM, PyTorch 2.11): 17.6 µs per launched op "
                       "under autograd (tests/data/h100_2026_11_26); calibrate yours with `bench --calibrate`")
# A host synchronization on an empty queue beyond the launch of the op that asks (the copy of a count to the host
# and the CPU's wake-up): measured on an H200 host (2026-11-28, tests/data/h200_2026_11_28/microbench.json,
# benchmarks/bench_gpu_host_sync.py): launching a 1024-element sum and reading it back (.item()) took 17.37 µs, the
# launch alone 8.46 µs (medians of 50 on an idle GPU): 8.9 µs per synchronization.
HOST_SYNC_SECONDS = 17.37e-6 - 8.46e-6
# An eager op that launches nothing (a view, a transpose, autograd's hand-over of a first gradient to .grad, a
# no-op .to()) still passes the dispatcher or the autograd engine. In the recorded traces (same files, both
# profiled steps of both models) the median such op took 0.18-0.29 of the median op launching one kernel
# (forward 5.5 / 30.8 µs and backward 6.3 / 21.6 µs for GPT-2, 4.0 / 14.8 and 5.9 / 21.9 µs for Llama 1B):
# 0.27 (the median of the four). A calibration measures it directly (`host_op_seconds`).
HOST_OP_FRACTION = 0.27
# The CPU cost of one kernel launch from compiled code (Inductor's wrapper calls kernels directly: no dispatcher or
# autograd per op): on the reference host, the shortest wall-clock time per call of a no-grad torch.add(out=)
# loop, which the CPU's dispatch bounds (the recorded calibration's 4 MiB add: 5.75 µs per call, whose kernel
# takes 1.4 µs at the measured bandwidth). A calibration measures it (`launch_seconds`).
EAGER_LAUNCH_SECONDS = 5.75e-6
# Our optimizers' Python around their foreach calls, per parameter tensor (lists of parameters, gradients and
# states, the step counters' bias corrections, zero_grad's loop): in the recorded traces, the CPU time between
# the profiled ops of the optimizer region (clipping, step, zero_grad) — Python, not inflated by the profiler's
# per-op events — was 4.00 and 4.40 ms for GPT-2's 196 tensors and 2.80 ms for Llama 1B's 146 (its other step
# was held up by a full launch queue): 20.4, 22.4 and 19.2 µs per tensor; 20.4 µs, the median. A calibration
# measures it (`optimizer_tensor_seconds`).
OPTIMIZER_TENSOR_SECONDS = 20.4e-6
# How PyTorch's elementwise kernels walk memory sets their speed as much as the bytes do. In the recorded Llama 1B
# trace (one layer, 16.8 M-element q of 2 bytes, tensors of the Llama-3.2-1B shapes at 4 × 2048 tokens), against
# the 2.92 TB/s an add streams at (the recorded calibration, 256 MiB):
# - "strided": RoPE's mul, neg, cat, mul, add on q and k, which are permuted (b, h, t, d) views of the Linear's
#   output: TensorIterator's generic kernel computes a 4-D offset per element. 335 MB in 352 µs for q, 84 MB in
#   87 µs for k: 0.95 TB/s, 0.33 of the stream;
# - "broadcast": RMSNorm's x·rsqrt(var) and weight·normed, an operand broadcast over rows or columns: 134 MB in
#   57.2-58.1 µs, 2.33 TB/s: 0.80;
# - "column_reduction": sums over the tokens (bias and norm-weight gradients): Llama's norm weight 67 MB in 42.6 µs,
#   GPT-2's LayerNorm weight and bias 50 MB in 46 µs, its MLP bias 50 MB in 34 µs: 1.09-1.57 TB/s, 0.44 (median).
H100_ACCESS_FRACTIONS = {"strided": 0.33, "broadcast": 0.80, "column_reduction": 0.44}
