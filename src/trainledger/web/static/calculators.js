// The calculators: which fields each has, which command it calls, and how its answer is drawn. Each is a spec
// registered with TL.register(spec) (this file's eight, then calculators_more.js's); a spec with a `title` and no
// section in index.html gets one built (ensureSection), so a new calculator is one object in one file.
// Numbers shown are the API's JSON values (data-value carries the raw value, data-path its key in the JSON).
"use strict";

(function () {
  const { Fmt, el, callApi, Calculator, valueNode, resultList, pick } = window.TL;
  const C = window.Charts;
  const DATA = { hardware: [], dtypes: [], models: [] };

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
  function headline(label, path, value, format) {
    return el("p", { class: "headline" }, [label, " ", valueNode(path, value, format)]);
  }
  function fieldset(calc, legend) {
    const box = el("fieldset", {}, [el("legend", { text: legend })]);
    calc.form.appendChild(box);
    return box;
  }
  function gpuOptions() { return DATA.hardware.map((g) => [g.name, `${g.name} (${Fmt.bytes(g.memory_bytes)})`]); }
  function modelOptions(filter = () => true) { return DATA.models.filter(filter).map((m) => [m.name, `${m.name} (${Fmt.count(m.n_params)})`]); }
  // Numbers in the answer that the calculator did not place elsewhere, listed so nothing returned is hidden.
  function otherNumbers(body, shown, prefix = "") {
    return Object.entries(body)
      .filter(([k, v]) => typeof v === "number" && !shown.includes(k))
      .map(([k, v]) => ({ label: labelFor(k), path: prefix + k, value: v, format: formatFor(k) }));
  }
  // human labels and units (labels.js): "mtbf_seconds" → "mean time between interruptions (whole job)", a duration
  const labelFor = (key) => window.TL.Labels.labelOf(key);
  const formatFor = (key) => window.TL.Labels.formatOf(key);
  function assumptions(body) {
    const list = body.assumptions || body.notes;
    // an empty span when there are none: DOM append() would print a null as the text "null"
    return Array.isArray(list) && list.length ? el("ul", { class: "assumptions" }, list.map((a) => el("li", { text: a }))) : el("span");
  }

  // ---------------- 1. training time (plan) ----------------
  const plan = {
    id: "plan", command: "plan",
    fields: [
      { param: "model", label: "Model", type: "select", value: "", options: [] , help: "a preset (its FLOPs per token at its context length), or a bare parameter count" },
      { param: "params", label: "Parameters N", type: "log", min: 6, max: 13, value: "70B" },
      { param: "tokens", label: "Training tokens D", type: "log", min: 8, max: 14.3, value: "15T" },
      { param: "gpu", label: "GPU", type: "select", value: "h100-sxm", options: [] },
      { param: "dtype", label: "Matmul dtype (peak FLOP/s)", type: "select", value: "bf16", options: ["bf16", "fp16", "fp8", "tf32", "fp32"] },
      { param: "num-gpus", label: "Number of GPUs", type: "pow2", min: 0, max: 15, value: "1024", inputmode: "numeric" },
      { param: "mfu", label: "MFU (model FLOPs utilization)", type: "float", min: 0.05, max: 1, step: 0.01, value: "0.5" },
      { key: "mfu-auto", label: "MFU auto: the fastest layout's (needs a model)", type: "bool", value: "false",
        help: "--mfu auto: the MFU `trainledger layout` predicts for the fastest layout that fits, one sequence per GPU" },
      { param: "deadline", label: "Deadline (optional)", type: "text", value: "", inputmode: "text",
        help: "e.g. 30d or 2w: also how many GPUs finish in time" },
    ],
    prepare(calc) {
      calc.fields.deadline.input.placeholder = "none";
      fill(calc.fields.model.input, [["", "parameter count N (6·N per token)"], FROM_PARAMS, ...modelOptions((m) => m.kind === "transformer")]);
      fill(calc.fields.gpu.input, gpuOptions());
      calc.fields.model.field.onChange = (c) => syncPlan(c);
      calc.fields["mfu-auto"].field.onChange = (c) => syncPlan(c);
      syncPlan(calc);
    },
    params(calc) {
      const sent = withModelFromParams(calc);
      if (calc.value("mfu-auto") !== "true") return sent;
      return [...sent.filter(([param]) => param !== "mfu"), ["mfu", "auto"]];
    },
    render(calc, body) {
      const out = clear(calc.out);
      const best = body.layout && typeof body.layout === "object" ? body.layout : null;
      const days = (d) => `${Fmt.sig(d, 4)} days`;
      out.append(headline("Time to train:", "train_days", body.train_days, days),
        ...(body.interval_words ? [el("p", { class: "interval" }, [  // --mfu auto: the error bar of its layout's step
          "expect ", valueNode("train_days_low", body.train_days_low, days), " … ",
          valueNode("train_days_high", body.train_days_high, days), " (",
          valueNode("gpu_hours_low", body.gpu_hours_low, Fmt.count), " … ",
          valueNode("gpu_hours_high", body.gpu_hours_high, Fmt.count), ` GPU-hours): ${body.interval_words}`])] : []),
        resultList([
          { label: "MFU of the fastest layout (--mfu auto)", path: "mfu", value: best ? body.mfu : undefined, format: Fmt.percent },
          { label: "parameters", path: "n_params", value: body.n_params, format: Fmt.count },
          { label: "tokens", path: "n_tokens", value: body.n_tokens, format: Fmt.count },
          { label: "FLOPs per token", path: "flops_per_token", value: body.flops_per_token, format: Fmt.flops },
          { label: "training FLOPs", path: "train_flops", value: body.train_flops, format: Fmt.flops },
          { label: `peak per GPU (${body.gpu}, ${body.dtype})`, path: "peak_flops_per_s", value: body.peak_flops_per_s, format: Fmt.rate },
          { label: "FLOPs per day (all GPUs)", path: "flops_per_day", value: body.flops_per_day, format: Fmt.flops },
          { label: "wall-clock", path: "train_seconds", value: body.train_seconds, format: Fmt.seconds },
          { label: "GPU-hours", path: "gpu_hours", value: body.gpu_hours, format: Fmt.count },
          { label: "deadline", path: "deadline_seconds", value: body.deadline_seconds, format: Fmt.seconds },
          { label: "GPUs needed for the deadline", path: "gpus_needed", value: body.gpus_needed, format: Fmt.exact },
          ...otherNumbers(body, ["n_params", "n_tokens", "flops_per_token", "train_flops", "peak_flops_per_s", "flops_per_day",
                                 "train_seconds", "train_days", "gpu_hours", "num_gpus", "mfu", "seq_len", "deadline_seconds", "gpus_needed",
                                 "train_days_low", "train_days_high", "gpu_hours_low", "gpu_hours_high"]),
        ]), ...(best ? [layoutLine(best, "layout.", "fastest layout:")] : []), assumptions(body));
      calc.section.querySelector(".formula-numbers").textContent =
        `${Fmt.flops(body.train_flops)} FLOPs = ${Fmt.flops(body.flops_per_token)} × ${Fmt.count(body.n_tokens)} tokens;  ` +
        `${Fmt.flops(body.train_seconds)} s = ${Fmt.flops(body.train_flops)} / (${body.num_gpus} × ${Fmt.rate(body.peak_flops_per_s)} × ${body.mfu})` +
        ` = ${Fmt.seconds(body.train_seconds)}`;
    },
  };
  function syncPlan(calc) {
    calc.fields.params.wrap.hidden = calc.value("model") !== "";
    const auto = calc.value("mfu-auto") === "true";
    calc.fields.mfu.input.disabled = auto;
    calc.fields.mfu.slider.disabled = auto;
    calc.fields.mfu.wrap.classList.toggle("not-applicable", auto);
  }
  // One layout in words, its numbers carrying their JSON paths: "tp 4 (sp) · pp 1 · ... · 0.48 s · MFU 39.6%".
  function layoutLine(layout, prefix, label) {
    const part = (key, text, format = Fmt.exact) => [` ${text} `, valueNode(prefix + key, layout[key], format)];
    return el("p", { class: "layout-line" }, [label,
      ...part("tp", "tp"), layout.sp ? " (sp)" : "", " ·", ...part("pp", "pp"), " ·", ...part("interleave", "interleave"),
      " ·", ...part("cp", "cp"), " ·", ...part("dp", "dp"), " ·", ...part("zero", "ZeRO"), " ·",
      ...part("batch_size", "micro-batch"), ` · recompute ${layout.recompute} ·`,
      ...part("step_seconds", "step", Fmt.seconds), " ·", ...part("mfu", "MFU", Fmt.percent), " ·",
      ...part("memory_bytes", "memory per GPU", Fmt.bytes)]);
  }

  // "the model of calculator 5": its preset, or its custom sizes (arch.* fields, a config.json on the server).
  const FROM_PARAMS = ["from-params", "the model of calculator 5 (Parameters)"];
  function withModelFromParams(calc) {
    const own = calc.fieldParams();
    const source = window.TL.calculators && window.TL.calculators.params;
    if (calc.value("model") !== FROM_PARAMS[0] || !source) return own;
    return [...source.params(), ...own.filter(([param]) => param !== "model")];
  }
  function followParams() {  // calculators that use calculator 5's model recompute when it changes
    for (const calc of Object.values(window.TL.calculators || {})) {
      if (calc.fields.model && calc.spec.id !== "params" && calc.value("model") === FROM_PARAMS[0]) calc.schedule();
    }
  }

  // ---------------- 2. tensor layout (tensor) ----------------
  const tensor = {
    id: "tensor", command: "tensor",
    fields: [],  // built from the command's own flags in prepare()
    prepare(calc) { Tensor.prepare(calc); },
    params(calc) { return Tensor.params(calc); },
    render(calc, body, sent) { return Tensor.render(calc, body, sent); },
  };

  const Tensor = {
    prepare(calc) {
      const fields = [
        { param: "shape", label: "Shape (comma-separated sizes)", type: "text", value: "4,6", inputmode: "text",
          help: "e.g. 4,6 or 2,3,4 or the lecture's 49152,12288; the sliders set the last two sizes" },
        { key: "rows", label: "rows (second-to-last size)", type: "int", min: 1, max: 32, value: "4", noState: true, inputmode: "numeric" },
        { key: "cols", label: "columns (last size)", type: "int", min: 1, max: 32, value: "6", noState: true, inputmode: "numeric" },
        { param: "dtype", label: "dtype", type: "select", value: "fp32", options: DATA.dtypes.map((d) => [d.name, `${d.name} (${d.bytes} B)`]) },
        { param: "transpose", label: "Transpose (dims)", type: "select", value: "", omitWhen: "",
          options: [["", "none"], ["0,1", "x.transpose(0, 1)"], ["1,2", "x.transpose(1, 2)"], ["0,2", "x.transpose(0, 2)"], ["-2,-1", "x.transpose(-2, -1)"]] },
        { param: "slice", label: "Slice (Python indexing)", type: "text", value: "", inputmode: "text",
          help: "applied after the transpose, e.g. 1:3,::2 or 0 or :,1" },
      ];
      for (const field of fields) calc.addField(field);
      calc.fields.shape.field.onChange = (c) => Tensor.shapeToSliders(c);
      for (const key of ["rows", "cols"]) calc.fields[key].field.onChange = (c) => Tensor.slidersToShape(c);
      Tensor.shapeToSliders(calc);
    },
    sizes(calc) { return calc.value("shape").split(/[,x]/).map((p) => p.trim()).filter((p) => p !== ""); },
    shapeToSliders(calc) {
      const sizes = Tensor.sizes(calc);
      if (sizes.length >= 1) calc.setValue("cols", sizes[sizes.length - 1]);
      if (sizes.length >= 2) calc.setValue("rows", sizes[sizes.length - 2]);
      calc.fields.rows.wrap.hidden = sizes.length < 2;
    },
    slidersToShape(calc) {
      const sizes = Tensor.sizes(calc);
      if (sizes.length >= 1) sizes[sizes.length - 1] = calc.value("cols");
      if (sizes.length >= 2) sizes[sizes.length - 2] = calc.value("rows");
      calc.setValue("shape", sizes.join(","));
    },
    params(calc) { return calc.fieldParams((key) => key === "rows" || key === "cols"); },
    async render(calc, body, sent) {
      const out = clear(calc.out);
      const list = (v) => `[${v.join(", ")}]`;
      out.append(headline(`${body.expression}:`, "view_bytes", body.view_bytes, (v) => `${Fmt.exact(v)} bytes addressed`),
        resultList([
          { label: "storage (allocation)", path: "storage_bytes", value: body.storage_bytes, format: (v) => v < 1024 ? `${Fmt.exact(v)} B` : `${Fmt.exact(v)} B (${Fmt.bytes(v)})` },
          { label: "elements", path: "numel", value: body.numel, format: Fmt.exact },
          { label: "bytes per element", path: "element_bytes", value: body.element_bytes, format: String },
          { label: "shape → view shape", path: "view_shape", value: body.view_shape, format: (v) => `${list(body.shape)} → ${list(v)}` },
          { label: "stride (elements)", path: "stride", value: body.stride, format: list },
          { label: "stride (bytes)", path: "stride_bytes", value: body.stride_bytes, format: list },
          { label: "row-major stride of x", path: "row_major_stride", value: body.row_major_stride, format: list },
          { label: "storage offset", path: "storage_offset", value: body.storage_offset, format: String },
          { label: "contiguous", path: "contiguous", value: body.contiguous, format: (v) => (v ? "yes" : "no") },
          { label: ".view(-1) without a copy", path: "view_flat_possible", value: body.view_flat_possible, format: (v) => (v ? "yes" : "no (.reshape copies)") },
          { label: ".contiguous() allocates", path: "contiguous_copy_bytes", value: body.contiguous_copy_bytes, format: (v) => `${Fmt.exact(v)} B` },
        ]));
      const reply = await callApi("tensor-storage", sent);
      if (!reply.ok) return;
      if (!reply.body.drawable) {
        out.append(el("p", { class: "note", text: `The drawing shows tensors of up to ${reply.body.limit} elements; this one has ${Fmt.exact(reply.body.numel)}.` }));
        return;
      }
      out.append(Tensor.drawing(body, reply.body.storage_index));
    },
    // The view as a grid (last size across), each cell labelled with the storage slot it reads, and the
    // storage below, slot by slot, coloured where the view reads it.
    drawing(body, index) {
      const shape = body.view_shape, cols = shape.length ? shape[shape.length - 1] : 1;
      const rows = cols ? index.length / cols : 0;
      const perLine = Math.min(Math.max(body.shape.length ? body.shape[body.shape.length - 1] : 1, 1), 24);
      const cell = Math.min(28, 680 / Math.max(cols, perLine, 1));
      const storageLines = Math.ceil(body.numel / perLine);
      const viewH = rows * cell, top = 22, gap = 40;
      const height = top + viewH + gap + storageLines * cell + 10;
      const root = C.svgRoot(720, height, `storage layout of ${body.expression}`);
      const colorOfSlot = new Map();
      root.appendChild(C.text(0, 14, `view ${body.expression}: shape [${shape.join(", ")}], stride [${body.stride.join(", ")}], offset ${body.storage_offset} — each cell shows the storage slot it reads`, { class: "storage-label" }));
      index.forEach((slot, i) => {
        const r = Math.floor(i / (cols || 1)), c = i % (cols || 1);
        const color = C.PALETTE[r % C.PALETTE.length];
        colorOfSlot.set(slot, color);
        root.appendChild(C.svg("rect", { x: c * cell, y: top + r * cell, width: cell, height: cell, fill: color, class: "cell" }));
        if (cell >= 16) root.appendChild(C.text(c * cell + cell / 2, top + r * cell + cell / 2 + 4, slot, { "text-anchor": "middle", class: "cell-text" }));
      });
      const y0 = top + viewH + gap;
      root.appendChild(C.text(0, y0 - 8, `storage x: ${Fmt.exact(body.numel)} slots × ${body.element_bytes} B = ${Fmt.exact(body.storage_bytes)} B, in address order (grey: not in the view)`, { class: "storage-label" }));
      for (let slot = 0; slot < body.numel; slot++) {
        const r = Math.floor(slot / perLine), c = slot % perLine;
        const color = colorOfSlot.get(slot);
        root.appendChild(C.svg("rect", { x: c * cell, y: y0 + r * cell, width: cell, height: cell, fill: color || "#e6e9ef", class: "cell" }));
        if (cell >= 16) root.appendChild(C.text(c * cell + cell / 2, y0 + r * cell + cell / 2 + 4, slot,
                                                { "text-anchor": "middle", class: color ? "cell-text" : "storage-label" }));
      }
      return root;
    },
  };

  // ---------------- 3. number formats (dtypes) ----------------
  const dtypes = {
    id: "dtypes", command: "dtypes",
    fields: [
      { key: "marker", label: "Store a value in each format", type: "log", min: -45, max: 39, value: "1e-8", errorFor: "value", textFormat: "sci",
        help: "e.g. 1e-8 (the lecture's example: fp16 rounds it to 0, bf16 keeps it), 70000, 0.1" },
    ],
    params() { return []; },
    prepare(calc) { calc.fields.marker.field.onChange = (c) => c.lastBody && c.schedule(); },
    async render(calc, body) {
      calc.lastBody = body;
      const marker = Number(calc.value("marker"));
      const reply = await callApi("dtype-round", [["value", calc.value("marker")]]);
      if (!reply.ok) throw Object.assign(new Error(reply.body.error), { body: reply.body });
      const out = clear(calc.out);
      // fp8-e4m3 has no infinity: a value past its max comes back as ±max (the API's rounding), worth saying so
      const saturates = (r) => { const d = body.find((x) => x.name === r.name);
        return !r.overflows && r.rounded !== null && d && Math.abs(r.rounded) === d.max && Math.abs(r.value) > d.max; };
      const rounding = el("table", { class: "grid" });
      rounding.appendChild(el("thead", {}, el("tr", {}, [el("th", { scope: "col", text: "dtype" }),
        el("th", { scope: "col", text: `stored value of ${calc.value("marker")}` }), el("th", { scope: "col", text: "" })])));
      rounding.appendChild(el("tbody", {}, reply.body.map((r, i) => el("tr", {}, [el("th", { scope: "row", text: r.name }),
        el("td", {}, valueNode(`round.${i}.rounded`, r.rounded, (v) => (v === null ? "NaN" : String(v)))),
        el("td", { class: r.underflows || r.overflows || saturates(r) ? "verdict-oom" : "",
                   text: r.underflows ? "underflows to 0" : r.overflows ? "overflows" : saturates(r) ? "saturates at its max (no infinity)" : "" })]))));
      out.append(el("h3", { class: "sub", text: "Rounding a value to each format" }), rounding);
      out.append(el("h3", { class: "sub", text: "Bit layouts (sign · exponent · mantissa)" }));
      const roundedByName = Object.fromEntries(reply.body.map((r) => [r.name, r.rounded]));
      body.forEach((d) => out.appendChild(C.bitBoxes(d)));
      out.append(el("h3", { class: "sub", text: "Dynamic range (log scale): pale = subnormals, solid = normals" }),
                 C.rangeChart({ dtypes: body, marker: Math.abs(marker), markerLabel: `${calc.value("marker")}`, roundedByName }));
      const table = el("table", { class: "grid" });
      table.appendChild(el("thead", {}, el("tr", {}, ["dtype", "bits", "bytes", "max", "smallest normal", "smallest subnormal", "eps"]
        .map((h) => el("th", { scope: "col", text: h })))));
      const tbody = el("tbody");
      body.forEach((d, i) => {
        const float = d.kind === "float";
        tbody.appendChild(el("tr", {}, [el("th", { scope: "row", text: d.name }),
          el("td", {}, valueNode(`${i}.bits`, d.bits, String)),
          el("td", {}, valueNode(`${i}.bytes`, d.bytes, String)),
          el("td", {}, valueNode(`${i}.max`, d.max, (v) => Fmt.sig(v, 5))),
          el("td", {}, float ? valueNode(`${i}.smallest_normal`, d.smallest_normal, (v) => Fmt.sig(v, 4)) : "—"),
          el("td", {}, float ? valueNode(`${i}.smallest_subnormal`, d.smallest_subnormal, (v) => Fmt.sig(v, 4)) : "—"),
          el("td", {}, float ? valueNode(`${i}.eps`, d.eps, (v) => Fmt.sig(v, 4)) : "—")]));
      });
      table.appendChild(tbody);
      out.appendChild(table);
    },
  };

  // ---------------- 4. matmul ----------------
  const matmul = {
    id: "matmul", command: "matmul",
    fields: [
      { param: "m", label: "m (rows of A)", type: "pow2", min: 0, max: 17, inputmode: "numeric" },
      { param: "k", label: "k (inner dimension)", type: "pow2", min: 0, max: 17, inputmode: "numeric" },
      { param: "n", label: "n (columns of B)", type: "pow2", min: 0, max: 17, inputmode: "numeric" },
      { param: "dtype", label: "dtypes (comma-separated)", type: "text", value: "fp32,tf32,bf16,fp8", inputmode: "text" },
    ],
    render(calc, body) {
      const out = clear(calc.out);
      out.append(headline(`${body.m} × ${body.k} by ${body.k} × ${body.n}:`, "flops", body.flops, (v) => `${Fmt.flops(v)} FLOPs`));
      const gpus = [...new Set(body.results.map((r) => r.gpu))];
      const table = el("table", { class: "grid" });
      table.appendChild(el("thead", {}, el("tr", {}, [el("th", { scope: "col", text: "GPU · ideal time" }),
        ...body.dtypes.map((d) => el("th", { scope: "col", text: d }))])));
      const tbody = el("tbody");
      for (const gpu of gpus) {
        const cells = body.dtypes.map((dtype) => {
          const i = body.results.findIndex((r) => r.gpu === gpu && r.dtype === dtype);
          if (i < 0) return el("td", { text: "—", title: `${gpu} has no ${dtype} peak` });
          const r = body.results[i];
          return el("td", { title: `${Fmt.rate(r.peak_flops_per_s)} peak; ${r.bound}-bound` },
                    [valueNode(`results.${i}.ideal_time_s`, r.ideal_time_s, Fmt.seconds),
                     el("span", { class: "note", text: r.bound === "memory" ? " (mem)" : "" })]);
        });
        tbody.appendChild(el("tr", {}, [el("th", { scope: "row", text: gpu }), ...cells]));
      }
      table.appendChild(tbody);
      out.append(table, el("p", { class: "note", text: "(mem): memory-bound — moving A, B and C takes longer than the FLOPs; ideal time = max(compute, memory time)." }));
      const bf16 = body.results.map((r, i) => [r, i]).filter(([r]) => r.dtype === body.dtypes[Math.min(2, body.dtypes.length - 1)]);
      if (bf16.length) {
        out.append(C.barList({ rows: bf16.map(([r]) => ({ label: `${r.gpu} ${r.dtype}`, value: r.ideal_time_s })),
                               format: Fmt.seconds, title: "ideal time per GPU", log: true }));
      }
    },
  };

  // ---------------- 5. transformer parameters (params) ----------------
  const ARCH = [
    { key: "family", label: "Family", type: "select", value: "llama", options: [["llama", "llama (RoPE, RMSNorm, SwiGLU)"], ["gpt2", "gpt2 (learned pos., LayerNorm, GELU, biases)"]] },
    { key: "d_model", label: "d_model", type: "pow2", min: 6, max: 15, value: "4096" },
    { key: "n_layers", label: "layers", type: "int", min: 1, max: 128, value: "32" },
    { key: "n_heads", label: "attention heads", type: "int", min: 1, max: 128, value: "32" },
    { key: "n_kv_heads", label: "key/value heads", type: "int", min: 1, max: 128, value: "32" },
    { key: "d_ff", label: "d_ff (MLP width)", type: "int", min: 64, max: 65536, step: 64, value: "11008" },
    { key: "vocab_size", label: "vocabulary", type: "log", min: 2, max: 6, value: "32000" },
    { key: "tied", label: "tied embeddings", type: "bool", value: "false" },
  ];
  const params = {
    id: "params", command: "params",
    fields: [{ param: "model", label: "Preset", type: "select", value: "llama-2-7b", options: [] }],
    prepare(calc) {
      const sel = calc.fields.model.input;
      const current = calc.value("model");
      clear(sel).append(el("option", { value: "custom", text: "custom (the sliders below)" }),
                        ...modelOptions((m) => m.kind === "transformer").map(([v, t]) => el("option", { value: v, text: t })));
      sel.value = current;
      const box = fieldset(calc, "architecture");
      for (const spec of ARCH) calc.addField(Object.assign({ parent: box, arch: true }, spec));
      calc.fields.model.field.onChange = (c) => { if (c.value("model") !== "custom") presetToSliders(c); };
      for (const spec of ARCH) {
        calc.fields[spec.key].field.onChange = (c) => { if (c.value("model") !== "custom") c.setValue("model", "custom"); };
      }
      const toCustom = calc.fields.family.field.onChange;
      calc.fields.family.field.onChange = (c) => { toCustom(c); syncFamily(c); };
      if (calc.value("model") !== "custom") presetToSliders(calc);
      syncFamily(calc);
    },
    params(calc) {
      if (calc.value("model") !== "custom") return [["model", calc.value("model")]];
      const unused = calc.value("family") === "gpt2" ? GPT2_FIXED : [];
      return ARCH.filter((a) => !unused.includes(a.key)).map((a) => [`arch.${a.key}`, calc.value(a.key)]).filter(([, v]) => v !== "");
    },
    render(calc, body) {
      followParams();
      const out = clear(calc.out);
      out.append(headline("Parameters:", "n_params", body.n_params, (v) => `${Fmt.count(v)} (${Fmt.exact(v)})`));
      const comps = Object.entries(body.components || {});
      out.append(C.barList({ rows: comps.map(([k, v]) => ({ label: k.replace(/_/g, " "), value: v })),
                             format: Fmt.count, title: "parameters by component" }));
      out.append(resultList([
        ...comps.map(([k, v]) => ({ label: k.replace(/_/g, " "), path: `components.${k}`, value: v, format: Fmt.exact })),
        { label: "total", path: "n_params", value: body.n_params, format: Fmt.exact },
        { label: "non-embedding", path: "n_params_non_embedding", value: body.n_params_non_embedding, format: Fmt.exact },
        { label: "active per token (MoE)", path: "n_params_active", value: body.n_params_active, format: Fmt.exact },
        ...((body.components || {}).router ? [{ label: "active, without the token embedding (gpt-oss, DeepSeek-V3 cards)",
            path: "n_params_active_excl_embedding", value: body.n_params_active_excl_embedding, format: Fmt.exact }] : []),
        { label: "per layer", path: "n_params_per_layer", value: body.n_params_per_layer, format: Fmt.exact },
        { label: "Kaplan 12·L·d² (comparison)", path: "kaplan_non_embedding_params", value: body.kaplan_non_embedding_params, format: Fmt.exact },
        { label: "published count", path: "published_n_params", value: body.published_n_params === null ? undefined : body.published_n_params, format: Fmt.exact },
      ]));
    },
  };
  function presetToSliders(calc) {
    const m = DATA.models.find((x) => x.name === calc.value("model"));
    if (!m || m.kind !== "transformer") return;
    const values = { family: m.mlp === "gelu" ? "gpt2" : "llama", d_model: m.d_model, n_layers: m.n_layers, n_heads: m.n_heads,
                     n_kv_heads: m.n_kv_heads || m.n_heads, d_ff: m.d_ff, vocab_size: m.vocab_size, tied: String(!!m.tied_embeddings) };
    for (const [k, v] of Object.entries(values)) calc.setValue(k, String(v));
    syncFamily(calc);
  }
  // GPT-2 has no grouped key/value heads and always ties its LM head to the embedding (GPT2Config):
  // those two fields are shown disabled, with the values the family implies, and not sent.
  const GPT2_FIXED = ["n_kv_heads", "tied"];
  function syncFamily(calc) {
    const gpt2 = calc.value("family") === "gpt2";
    for (const key of GPT2_FIXED) {
      const entry = calc.fields[key];
      entry.input.disabled = gpt2;
      if (entry.slider) entry.slider.disabled = gpt2;
      entry.wrap.classList.toggle("not-applicable", gpt2);
      entry.wrap.title = gpt2 ? "fixed by the gpt2 family" : "";
    }
    if (gpt2) { calc.setValue("tied", "true"); calc.setValue("n_kv_heads", calc.value("n_heads")); }
  }

  // --zero: what each stage shards over the data-parallel ranks (Rajbhandari et al. 2019, Sec. 5); "" = the default
  const ZERO_OPTIONS = [["", "default: 3 (FSDP full shard)"], ["0", "0: nothing sharded (DDP)"], ["1", "1: optimizer states"],
                        ["2", "2: + gradients"], ["3", "3: + parameters (FSDP)"]];

  // ---------------- 6. memory per GPU (memory) ----------------
  const memory = {
    id: "memory", command: "memory",
    fields: [
      { param: "model", label: "Model", type: "select", value: "llama-2-7b", options: [] },
      { param: "gpu", label: "GPU (capacity)", type: "select", value: "h100-sxm", options: [] },
      { param: "batch-size", label: "Micro-batch size", type: "pow2", min: 0, max: 10, inputmode: "numeric" },
      { param: "seq-len", label: "Sequence length", type: "pow2", min: 6, max: 17, inputmode: "numeric" },
      { param: "precision", label: "Precision recipe", type: "select" },
      { param: "optimizer", label: "Optimizer", type: "select" },
      { param: "recompute", label: "Activation recomputation", type: "select" },
      { param: "flash", label: "Flash attention", type: "bool" },
      { param: "zero", label: "ZeRO stage (what is sharded over the data-parallel ranks)", type: "select", value: "", options: ZERO_OPTIONS },
      // the GPU count, as on every command (dp = GPUs / tp); 8 H100 with ZeRO 3 holds llama-2-7b: the page opens on
      // a run that fits (on one GPU its 16 B/param of AdamW states alone exceed 80 GB)
      { param: "num-gpus", label: "Number of GPUs (data-parallel ranks = GPUs / tensor-parallel ranks)", type: "pow2",
        min: 0, max: 12, value: "8", inputmode: "numeric" },
      { param: "tp", label: "Tensor-parallel ranks", type: "pow2", min: 0, max: 4, inputmode: "numeric" },
    ],
    prepare(calc) {
      fill(calc.fields.model.input, [...modelOptions((m) => m.kind === "transformer"), FROM_PARAMS]);
      fill(calc.fields.gpu.input, gpuOptions());
      const seq = calc.fields["seq-len"];
      const placeSeq = () => {  // an empty length means the model's own: put the thumb there
        const m = DATA.models.find((x) => x.name === calc.value("model"));
        const len = m && (m.default_seq_len || m.max_seq_len);  // the CLI's default: the pre-training context
        if (seq && seq.input.value === "" && len) seq.slider.value = Math.log2(len);
        seq.input.placeholder = len ? String(len) : "model's";  // grey: the default in use
      };
      calc.fields.model.field.onChange = placeSeq;
      placeSeq();
      for (const [key, entry] of Object.entries(calc.fields)) {  // flags this build of `memory` lacks are hidden
        if (entry.field.param && !calc.flagInfo(entry.field.param)) entry.wrap.hidden = true;
      }
    },
    params: withModelFromParams,
    render(calc, body) {
      const out = clear(calc.out);
      const partKeys = Object.keys(body).filter((k) => k.endsWith("_bytes") && k !== "total_bytes" &&
        !/capacity|memory_per_gpu|limit|available|free|headroom|peak/.test(k) && typeof body[k] === "number");
      const parts = partKeys.map((k) => ({ label: labelFor(k), value: body[k] }));
      const gpu = DATA.hardware.find((g) => g.name === (body.gpu || calc.value("gpu")) || (g.aliases || []).includes(calc.value("gpu")));
      const capacityKey = ["memory_per_gpu_bytes", "gpu_memory_bytes", "capacity_bytes"].find((k) => typeof body[k] === "number");
      const capacity = capacityKey ? body[capacityKey] : gpu ? gpu.memory_bytes : null;
      const fits = typeof body.fits === "boolean" ? body.fits : null;
      out.append(headline("Per GPU:", "total_bytes", body.total_bytes, Fmt.bytes));
      if (fits !== null) {
        out.append(el("p", { class: fits ? "verdict-fits" : "verdict-oom" },
          [valueNode("fits", fits, (f) => (f ? "fits" : "does not fit")), ` on ${gpu ? gpu.name : "the GPU"} (${capacity ? Fmt.bytes(capacity) : "?"})`]));
      }
      out.append(C.stackedBar({ parts, total: body.total_bytes, capacity, format: Fmt.bytes, title: "bytes per GPU by part",
                                capacityLabel: capacity ? `${gpu ? gpu.name : "GPU"} ${Fmt.bytes(capacity)}` : undefined }));
      out.append(resultList([
        ...partKeys.map((k) => ({ label: labelFor(k), path: k, value: body[k], format: Fmt.bytes })),
        { label: "total", path: "total_bytes", value: body.total_bytes, format: Fmt.bytes },
        ...otherNumbers(body, [...partKeys, "total_bytes", "batch_size", "seq_len", "zero", "dp", "tp", "pp"]),
      ]), assumptions(body));
    },
  };

  // ---------------- 7. compute-optimal (optimal + its iso-FLOP curve) ----------------
  const optimal = {
    id: "optimal", command: "optimal",
    fields: [
      { key: "mode", label: "Budget from", type: "select", value: "gpus", options: [["gpus", "GPUs × days × MFU"], ["flops", "a FLOP budget"]] },
      { param: "gpu", label: "GPU", type: "select", value: "h100-sxm", options: [] },
      { param: "num-gpus", label: "Number of GPUs", type: "pow2", min: 0, max: 15, value: "32", inputmode: "numeric" },
      { param: "days", label: "Days", type: "log", min: -1, max: 3, value: "14" },
      { param: "mfu", label: "MFU", type: "float", min: 0.05, max: 1, step: 0.01, value: "0.5" },
      { param: "budget-flops", label: "FLOP budget", type: "log", min: 18, max: 27, value: "1e23" },
      { param: "law", label: "Scaling law", type: "select" },
    ],
    prepare(calc) {
      fill(calc.fields.gpu.input, gpuOptions());
      calc.fields.mode.field.onChange = (c) => syncOptimal(c);
      for (const [key, entry] of Object.entries(calc.fields)) {
        if (entry.field.param && !calc.flagInfo(entry.field.param)) { entry.wrap.hidden = true; entry.missing = true; }
      }
      syncOptimal(calc);
    },
    async render(calc, body, sent) {
      const out = clear(calc.out);
      out.append(headline("Compute-optimal:", "n_params", body.n_params, (v) => `${Fmt.count(v)} parameters`),
        resultList([
          { label: "budget", path: "budget_flops", value: body.budget_flops, format: (v) => `${Fmt.flops(v)} FLOPs` },
          { label: "parameters N", path: "n_params", value: body.n_params, format: Fmt.count },
          { label: "tokens D", path: "n_tokens", value: body.n_tokens, format: Fmt.count },
          { label: "tokens per parameter", path: "tokens_per_param", value: body.tokens_per_param, format: Fmt.number },
          { label: "predicted loss (Approach 3 fit)", path: "predicted_loss", value: body.predicted_loss, format: (v) => `${Fmt.sig(v, 4)} nats/token` },
          ...otherNumbers(body, ["budget_flops", "n_params", "n_tokens", "tokens_per_param", "predicted_loss", "num_gpus", "mfu"]),
        ]), assumptions(body));
      const reply = await callApi("optimal-curve", sent);
      if (!reply.ok) { out.append(el("p", { class: "calc-error", text: reply.body.error || "no curve" })); return; }
      const curve = reply.body;
      out.append(C.logLineChart({
        series: curve.points.map((p) => ({ x: p.n_params, y: p.predicted_loss })),
        point: { x: curve.optimum.n_params, y: curve.optimum.predicted_loss,
                 label: `${Fmt.count(curve.optimum.n_params)} params, ${Fmt.count(curve.optimum.n_tokens)} tokens` },
        xLabel: `parameters N (tokens D = C / 6N, C = ${Fmt.flops(curve.budget_flops)} FLOPs)`, yLabel: "predicted loss",
        title: "iso-FLOP curve: predicted loss of each split of the budget", xFormat: Fmt.count, yFormat: (v) => v.toFixed(2),
      }));
      out.lastChild.dataset.points = String(curve.points.length);
    },
  };
  function syncOptimal(calc) {
    const byFlops = calc.value("mode") === "flops";
    for (const key of ["gpu", "num-gpus", "days", "mfu"]) if (calc.fields[key] && !calc.fields[key].missing) calc.fields[key].wrap.hidden = byFlops;
    if (!calc.fields["budget-flops"].missing) calc.fields["budget-flops"].wrap.hidden = !byFlops;
  }

  // ---------------- 8. step time & layout (step + layout) ----------------
  const LAYOUT_KEYS = ["tp", "sp", "pp", "interleave", "cp", "ep", "etp", "zero", "batch_size", "recompute"];  // what "Use" copies
  const LAYOUT_TOP = 5;
  // The run's settings on the form: one field per flag of the command in /api/schema that has a label (specs/run.py,
  // the table the CLI's flags come from), its widget from its kind, shaped by the table's `web` hints (a pow2
  // slider's range, a placeholder), in the fieldset of its group (none: the top of the form).
  const LAYOUT_BOX = "layout of the step (the table's Use button fills it)";
  const FIELDSETS = { layout: LAYOUT_BOX, levers: LAYOUT_BOX, "layout.fsdp": "FSDP2 with ZeRO 3",
                      "layout.experts": "mixture of experts: routing and dispatch (MoE models)", kernels: "framework, kernels and overlaps" };
  const WIDGETS = { count: { type: "int", min: 1, max: 8, inputmode: "numeric" }, zero: { type: "select", value: "", options: ZERO_OPTIONS },
                    choice: { type: "select" }, flag: { type: "bool" }, switch: { type: "bool" },
                    fraction: { type: "float", min: 0, max: 1, step: 0.05 }, positive: { type: "float", min: 0.5, max: 4, step: 0.05 },
                    at_least_one: { type: "float", min: 1, max: 4, step: 0.05 } };
  function runField(flag) {
    const kind = flag.kind.replace("?", ""), web = flag.web || {};
    const widget = kind === "switch" && flag.default === null  // on, off, or decided from the rest of the run: three choices
      ? { type: "select", value: "", options: [["", web.placeholder || "default"], ["true", `on (${flag.flag})`], ["false", `off (--no-${flag.param})`]] }
      : WIDGETS[kind] || { type: "text", inputmode: "text" };
    return { ...widget, ...web, param: flag.param, label: flag.label };
  }
  function addRunFields(calc) {
    const boxes = {};
    for (const flag of window.TL.schema()[calc.spec.command].flags.filter((f) => f.label)) {
      const legend = FIELDSETS[flag.group];
      calc.addField({ ...runField(flag), parent: legend && (boxes[legend] = boxes[legend] || fieldset(calc, legend)) });
    }
  }
  const step = {
    id: "step", command: "step",
    fields: [
      { param: "model", label: "Model", type: "select", value: "llama-2-7b", options: [] },
      { param: "gpu", label: "GPU", type: "select", value: "h100-sxm", options: [] },
      { param: "num-gpus", label: "Number of GPUs", type: "pow2", min: 0, max: 12, value: "8", inputmode: "numeric" },
    ],
    prepare(calc) {
      fill(calc.fields.model.input, [...modelOptions((m) => m.kind === "transformer"), FROM_PARAMS]);
      fill(calc.fields.gpu.input, gpuOptions());
      addRunFields(calc);
      const capacity = calc.fields["capacity-factor"];  // blank = dropless, no cap: the thumb rests at the right end
      if (capacity.input.value === "") capacity.slider.value = capacity.slider.max;
      const seq = calc.fields["seq-len"];
      const placeSeq = () => {  // an empty length means the model's own pre-training context, as in the CLI
        const m = DATA.models.find((x) => x.name === calc.value("model"));
        const len = m && (m.default_seq_len || m.max_seq_len);
        if (seq.input.value === "" && len) seq.slider.value = Math.log2(len);
        seq.input.placeholder = len ? String(len) : "model's";
      };
      calc.fields.model.field.onChange = placeSeq;
      placeSeq();
    },
    params: withModelFromParams,
    async render(calc, body, sent) {
      const out = clear(calc.out);
      const partOf = window.TL.Labels.partOf;
      const parts = Object.entries(body.breakdown || {}).map(([k, v]) => ({ label: partOf(k), value: v }));
      out.append(headline("One step:", "step_seconds", body.step_seconds, Fmt.seconds),
        ...(body.interval_words ? [el("p", { class: "interval" }, [  // the error bar of account/validation/interval.py
          "expect ", valueNode("step_seconds_low", body.step_seconds_low, Fmt.seconds), " … ",
          valueNode("step_seconds_high", body.step_seconds_high, Fmt.seconds), " per step (",
          valueNode("tokens_per_s_low", body.tokens_per_s_low, Fmt.count), " … ",
          valueNode("tokens_per_s_high", body.tokens_per_s_high, Fmt.count), ` tokens/s): ${body.interval_words}`])] : []),
        el("p", { class: body.fits ? "verdict-fits" : "verdict-oom" },
          [valueNode("memory_bytes", body.memory_bytes, Fmt.bytes), ` per GPU of ${Fmt.bytes(body.memory_per_gpu_bytes)}: `,
           valueNode("fits", body.fits, (f) => (f ? "fits" : "does not fit"))]),
        el("p", { class: "bottleneck" }, [`Bottleneck: ${body.bottleneck}`]),
        ...(body.suggestion ? [suggestionLine(body.suggestion)] : []),
        C.stackedBar({ parts, total: body.step_seconds, format: Fmt.seconds, title: "seconds of one step by part" }),
        resultList([
          { label: "tokens per second", path: "tokens_per_s", value: body.tokens_per_s, format: Fmt.count },
          { label: "MFU", path: "mfu", value: body.mfu, format: Fmt.percent },
          { label: "HFU (with recomputation)", path: "hfu", value: body.hfu, format: Fmt.percent },
          { label: "model FLOPs per step", path: "model_flops_per_step", value: body.model_flops_per_step, format: Fmt.flops },
          { label: "hardware FLOPs per step", path: "hardware_flops_per_step", value: body.hardware_flops_per_step, format: Fmt.flops },
          { label: "data-parallel ranks", path: "dp", value: body.dp, format: Fmt.exact },
          { label: "micro-batches accumulated", path: "micro_batches", value: body.micro_batches, format: Fmt.exact },
          { label: "pipeline bubble fraction", path: "bubble_fraction", value: body.bubble_fraction, format: Fmt.percent },
          ...Object.entries(body.breakdown || {}).map(([k, v]) => ({ label: partOf(k), path: `breakdown.${k}`, value: v, format: Fmt.seconds })),
        ]), assumptions(body));
      // launch=torchrun: the reply carries both launch texts (torchrun line and sbatch script) of cli/launch.py
      const layoutTakes = new Set(window.TL.schema().layout.flags.map((f) => f.param));  // it searches the rest
      const query = [...sent.filter(([param]) => !calc.flagInfo(param) || layoutTakes.has(param)), ["top", String(LAYOUT_TOP)],
                     ["launch", "torchrun"]];
      const key = JSON.stringify(query);
      if (!calc.layoutReply || calc.layoutKey !== key) {  // the search runs again only when its inputs change
        calc.layoutKey = key;
        calc.layoutReply = await callApi("layout", query);
      }
      out.append(layoutTable(calc, calc.layoutReply));
    },
  };
  // `step`'s suggestion (account/time/advice.py): a faster setting on the same GPUs, or one that fits.
  function suggestionLine(s) {
    return el("p", { class: "suggestion" }, [s.why === "fits" ? "Fits with " : "Faster with ", el("code", { text: s.changes.join(" ") }),
      ": ", valueNode("suggestion.step_seconds", s.step_seconds, Fmt.seconds), ", MFU ",
      valueNode("suggestion.mfu", s.mfu, Fmt.percent), ", ", valueNode("suggestion.memory_bytes", s.memory_bytes, Fmt.bytes),
      " per GPU (", valueNode("suggestion.micro_batches", s.micro_batches, Fmt.whole), " micro-batches per step)"]);
  }
  function layoutTable(calc, reply) {
    const box = el("div", { class: "layouts" }, [el("h3", { text: `Fastest layouts that fit (trainledger layout --top ${LAYOUT_TOP})` })]);
    if (!reply.ok) { box.append(el("p", { class: "calc-error", text: reply.body.error || "no layouts" })); return box; }
    const rows = reply.body.layouts;
    const head = ["", "tp", "sp", "pp", "interleave", "cp", "dp", "ep", "etp", "ZeRO", "micro-batch", "recompute", "step", "MFU", "memory per GPU"];
    const table = el("table", { class: "grid layout-table" }, [el("thead", {}, [el("tr", {}, head.map((h) => el("th", { text: h })))])]);
    const tbody = el("tbody");
    rows.forEach((r, i) => {
      const cell = (key, format = Fmt.exact) => el("td", {}, [valueNode(`layouts.${i}.${key}`, r[key], format)]);
      const use = el("button", { type: "button", class: "use-layout", "data-rank": String(i), text: "Use",
                                 "aria-label": `use layout ${i + 1} in the step form` });
      use.addEventListener("click", () => {  // an etp equal to the row's tp is the CLI's default: left blank
        for (const k of LAYOUT_KEYS) calc.setValue(k.replace("_", "-"), k === "etp" && r.etp === r.tp ? "" : String(r[k]));
        calc.schedule();
      });
      tbody.append(el("tr", {}, [el("td", {}, [use]), cell("tp"), el("td", { text: r.sp ? "yes" : "no" }), cell("pp"),
        cell("interleave"), cell("cp"), cell("dp"), cell("ep"), cell("etp"), cell("zero"), cell("batch_size"), el("td", { text: r.recompute }),
        cell("step_seconds", Fmt.seconds), cell("mfu", Fmt.percent), cell("memory_bytes", Fmt.bytes)]));
    });
    table.append(tbody);
    box.append(table, el("p", { class: "note" }, [`searched `, valueNode("considered", reply.body.considered, Fmt.exact),
      " layouts, ", valueNode("fitting", reply.body.fitting, Fmt.exact), " fit in memory"]));
    if (reply.body.launch) box.append(launchBlock(reply.body.launch));
    return box;
  }
  // `trainledger layout --launch torchrun|slurm`: the text that runs the layout with `trainledger train`, to copy.
  function launchBlock(launch) {
    const part = (kind, title) => {
      const text = launch[kind];
      const copy = el("button", { type: "button", class: "copy-launch", "data-launch": kind, text: "Copy" });
      copy.addEventListener("click", () => {
        const done = (word) => { copy.textContent = word; setTimeout(() => { copy.textContent = "Copy"; }, 1500); };
        if (navigator.clipboard) navigator.clipboard.writeText(text).then(() => done("Copied"), () => done("Select the text to copy"));
        else done("Select the text to copy");
      });
      return el("div", { class: "launch-part" }, [el("h4", {}, [title, " ", copy]),
        el("pre", { class: "launch-text", "data-launch": kind, tabindex: "0", text })]);
    };
    const runs = launch.runnable ? `layout #${launch.layout}` : "no listed layout (the text says why)";
    return el("details", { class: "launch" }, [
      el("summary", { text: `Run ${runs} with trainledger train (trainledger layout --launch torchrun | slurm)` }),
      part("torchrun", "By hand: the same line on every node (NODE_RANK, MASTER_ADDR, DATA, RUN_DIR set)"),
      part("slurm", "Slurm: an sbatch script (DATA set, on storage every node mounts)")]);
  }

  function fill(select, options) {
    const current = select.value;
    clear(select);
    for (const [value, text] of options) select.appendChild(el("option", { value, text }));
    if ([...select.options].some((o) => o.value === current)) select.value = current;
  }

  // ---------------- the registry: calculators in page order ----------------
  const REGISTRY = [plan, tensor, dtypes, matmul, params, memory, optimal, step];
  // spec: {id, command, fields, render(calc, body, sent), prepare?, params?, title?, nav?, formula?: [paragraph, ...]}
  function register(spec) { REGISTRY.push(spec); }
  // The section (and its link in the nav) of a calculator that index.html does not have, built like the others.
  function ensureSection(spec) {
    if (document.getElementById(`calc-${spec.id}`)) return;
    const number = document.querySelectorAll("main section.calc").length + 1;  // after every section already there
    const titleId = `calc-${spec.id}-title`;
    const title = el("h2", { id: titleId }, [`${number}. ${spec.title} `, el("code", { text: `trainledger ${spec.command}` })]);
    const formula = el("div", { class: "formula" }, [el("h3", { text: "Formula" }), ...(spec.formula || []).map((p) => el("p", { text: p }))]);
    const form = el("form", { class: "controls" });
    form.addEventListener("submit", (event) => event.preventDefault());
    const section = el("section", { class: "calc", id: `calc-${spec.id}`, "aria-labelledby": titleId }, [title, form,
      el("div", { class: "output" }, [el("div", { class: "calc-error", role: "alert", hidden: true }),
        el("div", { class: "results", "aria-live": "polite" }), formula,
        el("p", { class: "cli" }, ["Same answer: ", el("code", { class: "command-line" })])])]);
    document.querySelector("main").appendChild(section);
    const link = el("a", { href: `#calc-${spec.id}`, "data-nav": true, text: spec.nav || spec.title });
    link.addEventListener("click", navigate);
    document.querySelector("nav[aria-label=calculators]").appendChild(link);
  }

  // ---------------- start ----------------
  async function start() {
    const status = document.getElementById("server-status");
    const [schema, hardware, dtypeList, models] = await Promise.all(
      ["schema", "hardware", "dtypes", "models"].map((c) => callApi(c, [])));
    if (!schema.ok) { status.textContent = `The API does not answer: ${schema.body.error || schema.status}`; status.hidden = false; return; }
    window.TL.setSchema(schema.body);
    DATA.hardware = hardware.ok ? hardware.body : [];
    DATA.dtypes = dtypeList.ok ? dtypeList.body : [];
    DATA.models = models.ok ? models.body : [];
    const calcs = REGISTRY.map((spec) => { ensureSection(spec); return new Calculator(spec); });
    for (const calc of calcs) {
      calc.build();
      if (calc.spec.prepare) calc.spec.prepare(calc);
    }
    window.TL.calculators = Object.fromEntries(calcs.map((c) => [c.spec.id, c]));
    await Promise.all(calcs.filter((c) => window.TL.schema()[c.spec.command]).map((c) => c.update()));
    document.body.dataset.ready = "true";
  }

  function navigate(event) {
    event.preventDefault();  // the hash holds the page state; scroll without touching it
    const target = document.querySelector(event.currentTarget.getAttribute("href"));
    target.scrollIntoView({ behavior: "smooth" });
    target.querySelector("h2").setAttribute("tabindex", "-1");
    target.querySelector("h2").focus({ preventScroll: true });
  }
  document.querySelectorAll("a[data-nav]").forEach((a) => a.addEventListener("click", navigate));

  window.TL.DATA = DATA;
  // for calculators_more.js (and any later file): the registry and the helpers the calculators here share
  Object.assign(window.TL, { register, clear, headline, fieldset, gpuOptions, modelOptions, otherNumbers, labelFor,
                             formatFor, assumptions, layoutLine, fill, ZERO_OPTIONS });
  document.addEventListener("DOMContentLoaded", start);
})();
