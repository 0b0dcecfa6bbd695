"""Measured FLOPs, memory by category and time of real, meta-device or fake-tensor training steps (torch).

    from trainledger.measure.flops import count_flops, count_step_flops        # FlopReport, StepFlops
    from trainledger.measure.memory import track_step, LiveTracker             # MemoryReport
    from trainledger.measure.timing import time_fn, bench_matmul, StepTimer, peak_memory_bytes, mfu
    from trainledger.measure.compare import measure_model                      # predicted vs measured

Submodules are imported on demand, so `import trainledger.measure` stays cheap.
"""
