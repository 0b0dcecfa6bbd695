// Calculators 9 and 10: the largest model that fits (`trainledger fit`) and the MFU of a measured throughput
// (`trainledger mfu`). Each is one spec registered with TL.register; its section and nav link are built from
// `title`, `nav` and `formula` (calculators.js, ensureSection). A further calculator is another spec like these.
"use strict";

(function () {
  const TL = window.TL;
  const { Fmt, el, valueNode, resultList } = TL;

  // An empty sequence length means the model's pre-training context (the CLI's default): the thumb goes there.
  function placeSeqLen(calc) {
    const seq = calc.fields["seq-len"];
    const m = TL.DATA.models.find((x) => x.name === calc.value("model"));
    const len = m && (m.default_seq_len || m.max_seq_len);
    if (seq.input.value === "" && len) seq.slider.value = Math.log2(len);
    seq.input.placeholder = len ? String(len) : "model's";
  }

  // ---------------- 9. the largest model that fits (fit) ----------------
  const fit = {
    id: "fit", command: "fit", title: "Largest model that fits", nav: "Fits",
    formula: [
      "largest model = (memory per GPU − reserve) / bytes per parameter per GPU: model states only (parameters, " +
        "gradients, fp32 master copy, optimizer states) under the precision recipe; ZeRO over all GPUs divides the " +
        "optimizer states (stage 1), the gradients too (2) and the parameters too (3). CS336 Lecture 2: 8 H100 × 80 GB " +
        "/ 16 B per parameter (fp32 AdamW) = 40B.",
      "With a model, also the largest micro-batch whose activations fit beside its states (trainledger memory).",
    ],
    fields: [
      { param: "gpu", label: "GPU", type: "select", value: "h100-sxm", options: [] },
      { param: "num-gpus", label: "Number of GPUs (the states are sharded over them)", type: "pow2", min: 0, max: 12, value: "8", inputmode: "numeric" },
      { param: "memory-per-gpu", label: "Memory per GPU (optional, overrides the GPU's)", type: "text", value: "", inputmode: "text",
        help: "e.g. 24GB or 40GiB: a custom size, labelled as such" },
      { param: "reserve", label: "Reserve per GPU (kept free)", type: "text", value: "", inputmode: "text", help: "e.g. 4GiB (CUDA context, fragmentation)" },
      { param: "precision", label: "Precision recipe", type: "select" },
      { param: "optimizer", label: "Optimizer", type: "select" },
      { param: "zero", label: "ZeRO stage over the GPUs", type: "select", value: "3", options: [] },
      { param: "model", label: "Model (optional: its largest micro-batch)", type: "select", value: "", options: [] },
      { param: "seq-len", label: "Sequence length (with a model)", type: "pow2", min: 6, max: 17, inputmode: "numeric" },
      { param: "recompute", label: "Activation recomputation (with a model)", type: "select" },
    ],
    prepare(calc) {
      TL.fill(calc.fields.gpu.input, TL.gpuOptions());
      TL.fill(calc.fields.zero.input, TL.ZERO_OPTIONS.filter(([value]) => value !== ""));
      calc.setValue("zero", "3");
      TL.fill(calc.fields.model.input, [["", "none: the states only"], ...TL.modelOptions((m) => m.kind === "transformer")]);
      for (const name of ["memory-per-gpu", "reserve"]) calc.fields[name].input.placeholder = name === "reserve" ? "0" : "the GPU's";
      calc.fields.model.field.onChange = (c) => syncFit(c);
      syncFit(calc);
    },
    render(calc, body) {
      const out = TL.clear(calc.out);
      out.append(TL.headline("Largest model:", "max_params", body.max_params, (v) => `${Fmt.count(v)} parameters`),
        el("p", {}, [`on ${body.num_gpus} × ${body.gpu_label || body.gpu}`]),
        resultList([
          { label: TL.labelFor("memory_per_gpu_bytes"), path: "memory_per_gpu_bytes", value: body.memory_per_gpu_bytes, format: Fmt.bytes },
          { label: TL.labelFor("reserve_bytes"), path: "reserve_bytes", value: body.reserve_bytes, format: Fmt.bytes },
          { label: TL.labelFor("bytes_per_param"), path: "bytes_per_param", value: body.bytes_per_param, format: TL.formatFor("bytes_per_param") },
          ...Object.entries(body.bytes_per_param_parts || {}).filter(([k]) => k !== "total").map(([k, v]) => ({ label: `  of which ${TL.labelFor(`${k}_bytes`)}`,
            path: `bytes_per_param_parts.${k}`, value: v, format: (x) => `${Fmt.sig(x, 4)} B` })),
          { label: TL.labelFor("bytes_per_param_per_gpu"), path: "bytes_per_param_per_gpu", value: body.bytes_per_param_per_gpu, format: TL.formatFor("bytes_per_param_per_gpu") },
          { label: TL.labelFor("max_params"), path: "max_params", value: body.max_params, format: (v) => `${Fmt.count(v)} (${Fmt.sig(v, 4)})` },
          { label: TL.labelFor("max_batch_size"), path: "max_batch_size", value: body.max_batch_size, format: Fmt.whole },
          { label: TL.labelFor("total_bytes_at_max_batch"), path: "total_bytes_at_max_batch",
            value: body.total_bytes_at_max_batch === null ? undefined : body.total_bytes_at_max_batch, format: Fmt.bytes },
          { label: "sequence length", path: "seq_len", value: body.seq_len, format: Fmt.whole },
        ]), TL.assumptions(body));
    },
  };
  function syncFit(calc) {
    placeSeqLen(calc);
    const none = calc.value("model") === "";
    for (const key of ["seq-len", "recompute"]) calc.fields[key].wrap.hidden = none;
  }

  // ---------------- 10. MFU of a measured throughput (mfu) ----------------
  const mfu = {
    id: "mfu", command: "mfu", title: "MFU of a measured throughput", nav: "MFU",
    formula: [
      "MFU = tokens per second × model FLOPs per token / (GPUs × dense peak FLOP/s) (PaLM, App. B); HFU counts " +
        "the FLOPs recomputation re-executes too. Model FLOPs per token come from the architecture at its sequence " +
        "length (trainledger flops), or 6·N for a bare parameter count.",
      "With a model, the predicted MFU is the time model's for the fastest layout that fits on the same GPUs, " +
        "one sequence per GPU (trainledger layout): far above the measured one, the run leaves the GPUs idle.",
    ],
    fields: [
      { param: "model", label: "Model", type: "select", value: "llama-3-8b", options: [],
        help: "a preset (its FLOPs per token at its context), or a bare parameter count" },
      { param: "params", label: "Parameters N (without a model: 6·N FLOPs per token)", type: "log", min: 6, max: 13, value: "8B" },
      { param: "tokens-per-s-per-gpu", label: "Measured tokens per second per GPU", type: "log", min: 1, max: 7, value: "3000" },
      { param: "gpu", label: "GPU", type: "select", value: "h100-sxm", options: [] },
      { param: "num-gpus", label: "Number of GPUs", type: "pow2", min: 0, max: 12, value: "8", inputmode: "numeric" },
      { param: "seq-len", label: "Sequence length", type: "pow2", min: 6, max: 17, inputmode: "numeric" },
      { param: "recompute", label: "Activation recomputation (HFU only)", type: "select" },
      { param: "attention", label: "Attention-score FLOPs", type: "select" },
    ],
    prepare(calc) {
      TL.fill(calc.fields.model.input, [["", "parameter count N (6·N per token)"], ...TL.modelOptions((m) => m.kind === "transformer")]);
      TL.fill(calc.fields.gpu.input, TL.gpuOptions());
      calc.fields.model.field.onChange = (c) => syncMfu(c);
      syncMfu(calc);
    },
    render(calc, body) {
      const out = TL.clear(calc.out);
      const shown = ["mfu", "hfu", "predicted_mfu", "num_gpus", "seq_len"];
      out.append(TL.headline("MFU:", "mfu", body.mfu, Fmt.percent),
        resultList([
          { label: TL.labelFor("hfu"), path: "hfu", value: body.hfu, format: Fmt.percent },
          { label: TL.labelFor("predicted_mfu"), path: "predicted_mfu", value: body.predicted_mfu === null ? undefined : body.predicted_mfu, format: Fmt.percent },
          ...TL.otherNumbers(body, shown),
        ]),
        ...(body.predicted_layout ? [TL.layoutLine(body.predicted_layout, "predicted_layout.", "fastest layout:")] : []),
        ...(body.predicted_mfu === null && body.predicted_note ? [el("p", { class: "note", text: `No prediction: ${body.predicted_note}` })] : []),
        TL.assumptions(body));
    },
  };
  function syncMfu(calc) {
    placeSeqLen(calc);
    calc.fields.params.wrap.hidden = calc.value("model") !== "";
    calc.fields["seq-len"].wrap.hidden = calc.value("model") === "";
  }

  TL.register(fit);
  TL.register(mfu);
})();
