// Calculator: what it takes to fit a fine-tune (`trainledger fit --model M --gpu G --seq-len T --batch-size B`).
// The API answers the ladder (account/planning/ladder.py); this file only draws the rungs it returned: one bar per
// rung, its peak + reserve per GPU against a line at the GPU's memory, fitting rungs green, the others red.
"use strict";

(function () {
  const TL = window.TL;
  const C = window.Charts;
  const { Fmt, el, valueNode } = TL;

  // One horizontal bar per rung on one linear scale, with the GPU's memory as a vertical line.
  function ladderChart(rungs, capacity) {
    const width = 720, rowH = 24, labelW = 230, valueW = 170, top = 6;
    const root = C.svgRoot(width, rungs.length * rowH + top + 22, "peak memory per GPU of each rung against the GPU's memory");
    const max = Math.max(capacity || 0, ...rungs.map((r) => r.required_bytes || 0)) * 1.02 || 1;
    const span = width - labelW - valueW;
    const x = (v) => labelW + span * Math.max(v, 0) / max;
    rungs.forEach((rung, i) => {
      const y = top + i * rowH;
      const state = rung.error ? "refused" : rung.fits ? "fits" : "oom";
      root.appendChild(C.text(labelW - 8, y + 16, rung.label, { "text-anchor": "end", class: "legend" }));
      root.appendChild(C.svg("rect", { x: labelW, y: y + 4, width: Math.max(x(rung.required_bytes || 0) - labelW, 1),
                                       height: rowH - 8, class: `rung ${state}`, "data-key": rung.key,
                                       fill: state === "fits" ? "#59a14f" : state === "oom" ? "#e15759" : "#bab0ac" },
                           [C.svg("title", {}, `${rung.label}: ${rung.required_bytes ? Fmt.bytes(rung.required_bytes) : "—"}`)]));
      const note = rung.error ? "refused" : `${Fmt.bytes(rung.required_bytes)} ${rung.fits ? "fits" : "does not fit"}` +
        (rung.fits && rung.tokens_per_s ? `, ${Fmt.whole(Math.round(rung.tokens_per_s))} tok/s` : "");
      root.appendChild(C.text(x(rung.required_bytes || 0) + 6, y + 16, note, { class: "legend" }));
    });
    if (capacity) {
      const cx = x(capacity), bottom = top + rungs.length * rowH;
      root.appendChild(C.svg("line", { x1: cx, x2: cx, y1: top, y2: bottom + 4, class: "capacity" }));
      root.appendChild(C.text(cx, bottom + 18, `GPU memory ${Fmt.bytes(capacity)}`, { "text-anchor": "middle", class: "axis-label" }));
    }
    return root;
  }

  const finetune = {
    id: "finetune", command: "fit", title: "What it takes to fit a fine-tune", nav: "Fine-tune",
    formula: [
      "Each rung is a run priced by trainledger memory and trainledger step, in the order fine-tuners climb them " +
        "(torchtune's): full bf16 with AdamW → + activation checkpointing → + chunked loss → + optimizer step in " +
        "backward → + activation offload → + 8-bit AdamW → LoRA → QLoRA (NF4 base); with more GPUs the data-parallel " +
        "and FSDP rungs follow. Peak per GPU = the tensors at the busiest moment of a step + the CUDA reserve.",
      "The fastest rung that fits is named; every rung's run is a run file `step --config` takes.",
    ],
    fields: [
      { param: "model", label: "Model", type: "select", value: "llama-3.1-8b", options: [] },
      { param: "gpu", label: "GPU", type: "select", value: "rtx-4090", options: [] },
      { param: "num-gpus", label: "Number of GPUs", type: "pow2", min: 0, max: 3, value: "1", inputmode: "numeric" },
      { param: "seq-len", label: "Sequence length (tokens)", type: "pow2", min: 7, max: 15, value: "2048", inputmode: "numeric" },
      { param: "batch-size", label: "Micro-batch (sequences per GPU)", type: "pow2", min: 0, max: 6, value: "2", inputmode: "numeric" },
      { param: "lora-rank", label: "LoRA rank (the LoRA and QLoRA rungs)", type: "pow2", min: 0, max: 8, value: "8", inputmode: "numeric" },
    ],
    prepare(calc) {
      TL.fill(calc.fields.model.input, TL.modelOptions((m) => m.kind === "transformer"));
      calc.setValue("model", "llama-3.1-8b");
      TL.fill(calc.fields.gpu.input, TL.gpuOptions());
      calc.setValue("gpu", "rtx-4090");
    },
    render(calc, body) {
      const out = TL.clear(calc.out);
      const rungs = body.ladder || [];
      const best = rungs.find((r) => r.key === body.fastest_fitting);
      const gpu = TL.DATA.hardware.find((g) => g.name === body.gpu);
      const capacity = body.memory_per_gpu_bytes || (gpu && gpu.memory_bytes);
      out.append(
        el("p", { class: best ? "verdict-fits" : "verdict-oom" }, best
          ? ["Fastest that fits: ", valueNode("fastest_fitting", best.label, (v) => v),
             ` — ${Fmt.bytes(best.required_bytes)} per GPU, ${Fmt.whole(Math.round(best.tokens_per_s))} tokens/s`]
          : ["No rung fits on ", valueNode("ladder_num_gpus", body.ladder_num_gpus, Fmt.whole), ` × ${body.gpu}`]),
        ladderChart(rungs, capacity),
        el("p", { class: "note", text: "Peak per GPU includes the CUDA reserve (--reserve auto); tokens/s is the rung's predicted step (trainledger step)." }));
    },
  };

  TL.register(finetune);
})();
