// Human labels and units for the JSON keys the calculators show: one table, so that every panel says
// "mean time between interruptions: 2.1 days" rather than "mtbf seconds 178161.3". Display only: the value shown
// is the API's (data-value keeps it raw); this file only names it and picks its unit.
"use strict";

(function () {
  const { Fmt } = window.TL;
  const fraction = (x) => Fmt.percent(x);
  // key: [label, format]. Keys are JSON keys of `trainledger <command> --json` (base units: seconds, bytes, FLOPs).
  const LABELS = {
    // plan
    n_params: ["model parameters (count)", Fmt.count],
    n_tokens: ["tokens", Fmt.count],
    flops_per_token: ["FLOPs per token", Fmt.flops],
    hardware_flops_per_token: ["hardware FLOPs per token (with recomputation)", Fmt.flops],
    train_flops: ["training FLOPs", Fmt.flops],
    peak_flops_per_s: ["peak per GPU", Fmt.rate],
    flops_per_day: ["FLOPs per day (all GPUs)", Fmt.flops],
    train_seconds: ["wall-clock without failures", Fmt.seconds],
    train_days: ["days without failures", (d) => `${Fmt.sig(d, 4)} days`],
    gpu_hours: ["GPU-hours", Fmt.count],
    deadline_seconds: ["deadline", Fmt.seconds],
    gpus_needed: ["GPUs needed for the deadline", Fmt.whole],
    failures_per_gpu_day: ["interruptions per GPU per day", (x) => Fmt.sig(x, 4)],
    mtbf_seconds: ["mean time between interruptions (whole job)", Fmt.seconds],
    checkpoint_bytes: ["checkpoint size (weights + optimizer states)", Fmt.bytes],
    checkpoint_bytes_per_s_per_node: ["checkpoint write bandwidth per node", Fmt.byteRate],
    nodes: ["nodes", Fmt.whole],
    checkpoint_seconds: ["time to write a checkpoint (δ)", Fmt.seconds],
    restart_seconds: ["time to restart after an interruption (R)", Fmt.seconds],
    young_interval_seconds: ["checkpoint interval, Young's first-order formula", Fmt.seconds],
    checkpoint_interval_seconds: ["checkpoint every (τ, Daly's formula), in training time", Fmt.seconds],
    goodput: ["goodput (training time / wall-clock)", fraction],
    expected_interruptions: ["expected interruptions", (n) => `about ${Fmt.whole(n)}`],
    train_seconds_with_failures: ["wall-clock with failures", Fmt.seconds],
    // memory
    params_bytes: ["parameters", Fmt.bytes],
    grads_bytes: ["gradients", Fmt.bytes],
    master_params_bytes: ["fp32 master parameters", Fmt.bytes],
    optimizer_bytes: ["optimizer states", Fmt.bytes],
    activations_bytes: ["activations (saved for backward)", Fmt.bytes],
    reserve_bytes: ["reserve (kept free)", Fmt.bytes],
    total_bytes: ["total", Fmt.bytes],
    n_params_per_gpu: ["parameters stored per GPU (after ZeRO)", Fmt.count],
    n_params_per_gpu_before_zero: ["parameters per GPU before ZeRO (after tp, pp)", Fmt.count],
    bytes_per_param: ["bytes per parameter (unsharded)", (x) => `${Fmt.sig(x, 4)} B`],
    bytes_per_param_per_gpu: ["bytes per parameter per GPU (after ZeRO)", (x) => `${Fmt.sig(x, 4)} B`],
    memory_per_gpu_bytes: ["memory per GPU", Fmt.bytes],
    headroom_bytes: ["headroom (memory − peak − reserve)", Fmt.bytes],
    peak_bytes: ["peak of a training step (after the first)", Fmt.bytes],
    first_step_peak_bytes: ["peak of the first step (before the optimizer states exist)", Fmt.bytes],
    grad_accum: ["micro-batches accumulated per step", Fmt.whole],
    // optimal
    budget_flops: ["budget", (v) => `${Fmt.flops(v)} FLOPs`],
    tokens_per_param: ["tokens per parameter", (x) => Fmt.sig(x, 3)],
    predicted_loss: ["predicted loss (Chinchilla Approach 3 fit)", (v) => `${Fmt.sig(v, 4)} nats/token`],
    seconds: ["wall-clock budget", Fmt.seconds],
    // fit
    max_params: ["largest model", Fmt.count],
    max_batch_size: ["largest micro-batch of the model (sequences per GPU)", Fmt.whole],
    total_bytes_at_max_batch: ["memory per GPU at that micro-batch", Fmt.bytes],
    // mfu and step
    tokens_per_s: ["tokens per second (all GPUs)", Fmt.count],
    tokens_per_s_per_gpu: ["tokens per second per GPU", Fmt.count],
    model_flops_per_token: ["model FLOPs per token", Fmt.flops],
    model_flops_per_s_per_gpu: ["model FLOP/s per GPU", Fmt.rate],
    hardware_flops_per_s_per_gpu: ["hardware FLOP/s per GPU (with recomputation)", Fmt.rate],
    mfu: ["MFU (model FLOPs utilization)", Fmt.percent],
    hfu: ["HFU (with recomputation)", Fmt.percent],
    predicted_mfu: ["predicted MFU of the fastest layout (trainledger layout)", Fmt.percent],
    step_seconds: ["step time", Fmt.seconds],
    tokens_per_step: ["tokens per step", Fmt.whole],
    model_flops_per_step: ["model FLOPs per step", Fmt.flops],
    hardware_flops_per_step: ["hardware FLOPs per step", Fmt.flops],
    per_micro_batch_seconds: ["one micro-batch on the slowest stage", Fmt.seconds],
    bubble_fraction: ["pipeline bubble fraction", Fmt.percent],
    kernels_per_layer: ["kernels per layer (forward + backward)", Fmt.whole],
    memory_bytes: ["memory per GPU", Fmt.bytes],
    dp: ["data-parallel ranks", Fmt.whole],
    micro_batches: ["micro-batches accumulated per step", Fmt.whole],
    num_gpus: ["GPUs", Fmt.whole],
    seq_len: ["tokens per sequence", Fmt.whole],
    batch_size: ["micro-batch (sequences per GPU)", Fmt.whole],
    global_batch_size: ["global batch (sequences per step)", Fmt.whole],
  };
  // The parts of a step (account/time/step.py's breakdown), in words.
  const PARTS = {
    compute: "matrix multiplications (GEMMs)", attention: "attention core",
    memory_bound: "memory-bound ops (norms, activations, casts)", overhead: "per-op dispatch overhead",
    optimizer: "optimizer step", tp_comm: "tensor-parallel communication", cp_comm: "context-parallel communication",
    pp_comm: "pipeline sends and receives", dp_comm: "data-parallel communication", pipeline_bubble: "pipeline bubble",
    ep_comm: "expert-parallel all-to-all",
  };

  // A label and a format for any key: the table's, else one read from the key's unit suffix (never a raw key).
  function labelOf(key) {
    if (LABELS[key]) return LABELS[key][0];
    let label = key, unit = "";
    for (const [suffix, name] of [["_bytes_per_s", "rate"], ["_flops_per_s", "FLOP/s"], ["_seconds", ""], ["_bytes", ""],
                                  ["_per_s", "per second"], ["_flops", "FLOPs"]]) {
      if (label.endsWith(suffix)) { label = label.slice(0, -suffix.length); unit = name; break; }
    }
    if (label.startsWith("n_")) label = label.slice(2);
    label = label.replace(/_/g, " ").replace(/\bparams\b/g, "parameters").replace(/\bgpus?\b/gi, (w) => w.toUpperCase())
      .replace(/\bmfu\b/g, "MFU").replace(/\bhfu\b/g, "HFU");
    return unit && unit !== "rate" ? `${label} ${unit}` : label;
  }
  function formatOf(key) {
    if (LABELS[key]) return LABELS[key][1];
    if (/_bytes_per_s/.test(key)) return Fmt.byteRate;
    if (/bytes/.test(key)) return Fmt.bytes;
    if (/flops_per_s/.test(key)) return Fmt.rate;
    if (/flops/.test(key)) return Fmt.flops;
    if (/_s$|seconds/.test(key)) return Fmt.seconds;
    if (/^n_|^num_|_count$|params|tokens/.test(key)) return Fmt.count;
    return Fmt.number;
  }
  window.TL.Labels = { LABELS, PARTS, labelOf, formatOf, partOf: (key) => PARTS[key] || labelOf(key) };
})();
