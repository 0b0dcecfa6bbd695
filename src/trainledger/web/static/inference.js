// The inference calculator (`trainledger infer`): a self-contained block. It waits for the page's framework
// (app.js) and the shared data (calculators.js: hardware and model lists, the API schema), then builds its own
// Calculator in the #calc-infer section. Numbers shown are the API's JSON values (data-path: their key).
"use strict";

(function () {
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  const infer = {
    id: "infer", command: "infer",
    fields: [
      { param: "model", label: "Model", type: "select", value: "llama-3-8b", options: [] },
      { param: "gpu", label: "GPU", type: "select", value: "h100-sxm", options: [] },
      { param: "batch-size", label: "Sequences decoded together (batch)", type: "pow2", min: 0, max: 10, value: "1", inputmode: "numeric" },
      { param: "prompt-len", label: "Prompt tokens", type: "pow2", min: 4, max: 17, value: "512", inputmode: "numeric" },
      { param: "gen-len", label: "New tokens", type: "pow2", min: 0, max: 14, value: "128", inputmode: "numeric" },
      { param: "dtype", label: "Weights and matmuls", type: "select", value: "bf16", options: ["bf16", "fp16", "fp32", "fp8", "nf4", "nf4-dq", "int8", "int4"] },
      { param: "kv-dtype", label: "KV cache elements", type: "select", value: "", options: [["", "same as the weights (bf16 if quantized)"], "bf16", "fp16", "fp32", "fp8"] },
      { param: "tp", label: "Tensor-parallel GPUs", type: "pow2", min: 0, max: 3, value: "1", inputmode: "numeric" },
    ],
    prepare(calc) {
      const { Fmt } = window.TL;
      const data = window.TL.DATA;
      fill(calc.fields.model.input, data.models.filter((m) => m.kind === "transformer").map((m) => [m.name, `${m.name} (${Fmt.count(m.n_params)})`]));
      fill(calc.fields.gpu.input, data.hardware.map((g) => [g.name, `${g.name} (${Fmt.bytes(g.memory_bytes)})`]));
    },
    render(calc, body) {
      const { Fmt, el, valueNode, resultList } = window.TL;
      const out = clear(calc.out);
      const step = body.decode_seconds_per_token;
      const parts = Object.entries(body.decode_breakdown || {}).filter(([, v]) => v > 0)
        .map(([k, v]) => ({ label: k.replace(/_/g, " "), value: v }));
      out.append(
        el("p", { class: "headline" }, ["Decoding: ", valueNode("tokens_per_s", body.tokens_per_s, (v) => `${Fmt.count(v)} tokens/s`),
          ` (${body.batch_size} sequence${body.batch_size === 1 ? "" : "s"}), first token after `,
          valueNode("time_to_first_token_seconds", body.time_to_first_token_seconds, Fmt.seconds)]),
        el("p", { class: body.fits ? "verdict-fits" : "verdict-oom" },
          [valueNode("memory_bytes", body.memory_bytes, Fmt.bytes), ` per GPU of ${Fmt.bytes(body.memory_per_gpu_bytes)}: `,
           valueNode("fits", body.fits, (f) => (f ? "fits" : "does not fit"))]),
        el("p", { class: "bottleneck" }, [`Bottleneck: ${body.bottleneck}`]),
        window.Charts.stackedBar({ parts, total: step, format: Fmt.seconds, title: "one decoding step by part" }),
        resultList([
          { label: "KV cache (all sequences)", path: "kv_cache_bytes", value: body.kv_cache_bytes, format: Fmt.bytes },
          { label: "KV cache per sequence", path: "kv_cache_bytes_per_sequence", value: body.kv_cache_bytes_per_sequence, format: Fmt.bytes },
          { label: "weights", path: "weights_bytes", value: body.weights_bytes, format: Fmt.bytes },
          { label: "largest batch that fits", path: "max_batch_size", value: body.max_batch_size, format: Fmt.exact },
          { label: "prefill (time to first token)", path: "prefill_seconds", value: body.prefill_seconds, format: Fmt.seconds },
          { label: "prefill tokens per second", path: "prefill_tokens_per_s", value: body.prefill_tokens_per_s, format: Fmt.count },
          { label: "one decoding step", path: "decode_seconds_per_token", value: step, format: Fmt.seconds },
          { label: "all tokens, end to end", path: "total_seconds", value: body.total_seconds, format: Fmt.seconds },
          { label: "tokens per second, end to end", path: "end_to_end_tokens_per_s", value: body.end_to_end_tokens_per_s, format: Fmt.count },
          ...Object.entries(body.decode_breakdown || {}).map(([k, v]) => ({ label: `decoding: ${k.replace(/_/g, " ")}`, path: `decode_breakdown.${k}`, value: v, format: Fmt.seconds })),
        ]),
        Array.isArray(body.assumptions) && body.assumptions.length
          ? el("ul", { class: "assumptions" }, body.assumptions.map((a) => el("li", { text: a }))) : el("span"));
    },
  };

  function fill(select, options) {
    const current = select.value;
    clear(select);
    for (const [value, text] of options) select.appendChild(window.TL.el("option", { value, text }));
    if ([...select.options].some((o) => o.value === current)) select.value = current;
  }

  async function start() {
    const section = document.getElementById("calc-infer");
    if (!section || !window.TL || !window.TL.DATA) return;
    const calc = new window.TL.Calculator(infer);
    calc.build();
    infer.prepare(calc);
    window.TL.calculators = Object.assign(window.TL.calculators || {}, { infer: calc });
    if (window.TL.schema().infer) await calc.update();
  }

  // calculators.js loads the schema and the lists, builds its calculators, then marks the page ready
  function whenReady() {
    if (document.body.dataset.ready === "true") { start(); return; }
    const watch = new MutationObserver(() => {
      if (document.body.dataset.ready === "true") { watch.disconnect(); start(); }
    });
    watch.observe(document.body, { attributes: true, attributeFilter: ["data-ready"] });
  }
  document.addEventListener("DOMContentLoaded", whenReady);
})();
