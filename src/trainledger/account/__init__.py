"""Pure accounting formulas (stdlib only, never torch), in layers; each imports only the layers above it here.

    counting/    what a model is and costs per token: params, flops, matmul, tensor, recompute, korthikanti
                 (published reference formulas), placement (parameters per GPU under TP/PP, ZeRO's divisors)
    finetune/    what fine-tuning changes in the counts: LoRA targets (role names onto each family's modules, PEFT's
                 target_modules), trainable and frozen parameters, quantized storage of frozen weights (NF4, NF4-DQ,
                 int8 as torchao and bitsandbytes lay them out)
    memory/      bytes: activations (what autograd saves), hf_activations, per_gpu (bytes per GPU by named part,
                 the CUDA reserve), fsdp (FSDP2's settings, units and unsharded buffers)
    time/        seconds: roofline (one kernel), eager/compiled/torchtitan/kernels (a step's kernels), comm (one
                 collective), fsdp_comm, overlap, schedule (one pipeline schedule), timeline, step (a whole
                 step: step_time), inference
    planning/    questions over many steps: plan (time to train, largest model, optimal size), layout (the
                 search), suggest, zero_choice, failures
    validation/  published runs as a user would type them, predicted beside the published figure
"""
