"""A launch-by-launch simulation of eager PyTorch's two timelines, to check account/time/timeline.py against."""


def simulate(ops, lag=0.0, latency=0.0):
    """(CPU seconds, GPU end) after `ops`: kernel i starts when the CPU has launched it and the GPU has finished
    kernel i − 1; an op "sync" makes the CPU wait until the GPU is done, then `latency` more (the copy and the
    wake-up), and the GPU restarts from there."""
    cpu, gpu_end = 0.0, lag
    for op in ops:
        if op == "sync":
            cpu = max(cpu, gpu_end) + latency
            gpu_end = cpu
            continue
        c, d = op
        cpu += c
        gpu_end = max(gpu_end, cpu) + d
    return cpu, gpu_end
