"""Pure accounting formulas (stdlib only, never torch): parameters, FLOPs, activation and model-state memory, plans.

Modules, each importable on its own:
    params       parameter counts by component            param_counts(spec)
    flops        FLOPs per matmul, token and step          flops_per_step(spec, batch_size, seq_len, attention, recompute)
    activations  bytes autograd saves for backward         activations_bytes(spec, batch_size, seq_len, ...)
    memory       bytes per GPU by named part               memory_per_gpu(spec or n_params=..., precision, optimizer, zero, dp, tp, pp, ...)
    plan         time, GPUs, largest model, optimal size   training_time, gpus_needed, max_params, max_micro_batch, compute_optimal
    korthikanti  published reference formulas             Korthikanti et al. 2022 Table 2 and App. A, Megatron-LM Eq. 3
"""
