"""One accelerator as data (GPUSpec): dense peaks, memory, bandwidth and the performance data beyond them.

The entries themselves live in specs/hardware.py, each with its datasheet; this module holds only the record and its
lookups, so that the table of entries can grow without this code. Pure: no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainledger.errors import TrainledgerError
from trainledger.specs.performance import AttentionEfficiency, GemmEfficiency, Link


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator. `peak_flops_per_s` maps a dtype name (fp64, fp32, tf32, bf16, fp16, fp8, int8) to dense FLOP/s."""

    name: str
    peak_flops_per_s: dict[str, float]
    memory_bytes: float                           # what CUDA reports (total_memory): what fitting uses
    memory_bandwidth_bytes_per_s: float
    aliases: tuple[str, ...] = ()
    vendor: str = ""
    source: str = ""
    datasheet_memory_bytes: float = 0.0           # the datasheet's "80GB" (SI bytes); 0: memory_bytes is the datasheet
    memory_source: str = ""                       # where memory_bytes was read, or why the datasheet figure is used
    # Performance beyond the peaks (specs/performance.py; None/empty where nothing is published):
    sm_count: int | None = None                   # streaming multiprocessors: GEMM wave quantization
    gemm_efficiency: dict[str, GemmEfficiency] = field(default_factory=dict)   # dtype -> measured fractions
    attention_efficiency: dict[str, AttentionEfficiency] = field(default_factory=dict)   # kernel -> rates; first = default
    memory_bandwidth_fraction: float = 1.0        # streaming kernels' share of the datasheet bandwidth
    # measured (bytes per op, achieved bytes/s) of a calibrated device (specs/calibration.py): caches make small ops
    # faster than DRAM; account.time.roofline interpolates it by op size. Empty for datasheet entries.
    memory_bandwidth_curve: tuple[tuple[float, float], ...] = ()
    # measured (bytes per op, bytes/s) of elementwise kernels that are not plain streams on a calibrated device,
    # keyed by the kernel name of account/time/kernels.py ("gelu", "gelu_backward": tanh-GELU is compute-bound on CPUs)
    elementwise_curves: dict[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    op_overhead_seconds: float = 0.0              # fixed cost per kernel / operator dispatch
    # How ops run (account/time/timeline.py): True on accelerators, where the CPU launches kernels ahead of the device
    # and a step costs the longer of the two timelines; False on a calibrated CPU, where each op runs in turn.
    async_launch: bool = True
    kernel_overhead_seconds: float = 0.0          # device time a kernel holds beyond its arithmetic (launch, ramp, tail)
    host_op_seconds: float = 0.0                  # CPU cost of an op that launches nothing (view); 0: a fraction of op_overhead
    launch_seconds: float = 0.0                   # CPU cost of one launch without dispatcher/autograd (compiled code); 0: default
    optimizer_tensor_seconds: float = 0.0         # CPU (Python) cost of the optimizer step per parameter tensor; 0: default
    # share of the streaming bandwidth an elementwise kernel reaches by how it walks memory ("broadcast", "strided",
    # "column_reduction": account.time.roofline Kernel.access); empty: every kernel streams
    access_fractions: dict[str, float] = field(default_factory=dict)
    unaligned_gemm_fraction: float = 0.0          # of the 16-bit peak, for GEMMs whose leading dims are not 16 B multiples
    # per operator of our Transformer's eager decoding step (a calibrated device: measure/calibrate.py); None: not
    # measured, account.time.inference uses op_overhead_seconds
    decode_op_overhead_seconds: float | None = None
    gpus_per_node: int = 8
    intra_node_link: Link | None = None
    inter_node_link: Link | None = None
    performance_source: str = ""
    # block-scaled low-precision GEMMs the tensor cores run natively at the FP8 rate ("mxfp8": OCP MX, Blackwell)
    block_scaled: tuple[str, ...] = ()
    tdp_w: float | None = None                    # maximum power per GPU (W) as its datasheet prints it; None: not carried

    def gemm_table(self, dtype: str) -> GemmEfficiency | None:
        """The measured GEMM efficiency for `dtype` (a peak key), or None. fp16 and bf16 share one table when only
        one was measured: their tensor-core peaks are equal on every GPU here (datasheets)."""
        key = self.peak_key(dtype)
        table = self.gemm_efficiency.get(key)
        if table is None and key in ("fp16", "bf16"):
            table = self.gemm_efficiency.get("bf16" if key == "fp16" else "fp16")
        return table

    def attention_table(self, kernel: str | None = None) -> AttentionEfficiency | None:
        """Measured rates of the attention kernel `kernel` (None: the default, the first listed), or None."""
        if not self.attention_efficiency:
            return None
        if kernel is None:
            return next(iter(self.attention_efficiency.values()))
        if kernel not in self.attention_efficiency:
            known = ", ".join(self.attention_efficiency)
            raise TrainledgerError(f"{self.name} has no measured {kernel!r} attention kernel; it has: {known}",
                                   "--attention-kernel")
        return self.attention_efficiency[kernel]

    def peak_key(self, dtype: str) -> str:
        """The key of `peak_flops_per_s` that `dtype` means ('bfloat16' -> 'bf16'); an error naming --dtype otherwise."""
        if dtype in self.peak_flops_per_s:
            return dtype
        self.peak(dtype)          # raises the error listing what this device has
        from trainledger.specs.dtypes import get_dtype
        return get_dtype(dtype).peak_key

    def peak(self, dtype: str) -> float:
        """Dense peak FLOP/s for `dtype`; an error listing the dtypes this device has otherwise.

        Besides the keys of `peak_flops_per_s`, any name `trainledger dtypes` knows works: 'BF16',
        'bfloat16', 'fp8-e4m3' and 'e5m2' map to the peak their matmuls run at (bf16, fp8).
        """
        key = dtype
        if key not in self.peak_flops_per_s:
            from trainledger.specs.dtypes import get_dtype
            try:
                key = get_dtype(dtype).peak_key
            except TrainledgerError:
                key = None
        if key not in self.peak_flops_per_s:
            known = ", ".join(self.peak_flops_per_s)
            raise TrainledgerError(f"{self.name} has no {dtype or repr(dtype)} peak; it has: {known}", "--dtype")
        return self.peak_flops_per_s[key]

    def to_dict(self) -> dict:
        link = lambda value: value.to_dict() if value is not None else None  # noqa: E731
        return {"name": self.name, "aliases": list(self.aliases), "vendor": self.vendor,
                "peak_flops_per_s": dict(self.peak_flops_per_s), "memory_bytes": self.memory_bytes,
                "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s, "source": self.source,
                "datasheet_memory_bytes": self.datasheet_memory_bytes or self.memory_bytes,
                "memory_source": self.memory_source,
                "sm_count": self.sm_count, "gemm_efficiency": {k: v.to_dict() for k, v in self.gemm_efficiency.items()},
                "attention_efficiency": {k: v.to_dict() for k, v in self.attention_efficiency.items()},
                "memory_bandwidth_fraction": self.memory_bandwidth_fraction, "op_overhead_seconds": self.op_overhead_seconds,
                "async_launch": self.async_launch, "kernel_overhead_seconds": self.kernel_overhead_seconds,
                "unaligned_gemm_fraction": self.unaligned_gemm_fraction, "host_op_seconds": self.host_op_seconds,
                "launch_seconds": self.launch_seconds, "optimizer_tensor_seconds": self.optimizer_tensor_seconds,
                "access_fractions": dict(self.access_fractions),
                "decode_op_overhead_seconds": self.decode_op_overhead_seconds,
                "memory_bandwidth_curve": [list(p) for p in self.memory_bandwidth_curve],
                "elementwise_curves": {k: [list(p) for p in v] for k, v in self.elementwise_curves.items()},
                "gpus_per_node": self.gpus_per_node, "intra_node_link": link(self.intra_node_link),
                "inter_node_link": link(self.inter_node_link), "performance_source": self.performance_source,
                "block_scaled": list(self.block_scaled), "tdp_w": self.tdp_w}
