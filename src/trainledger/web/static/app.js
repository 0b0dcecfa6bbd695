// The calculator framework: form fields, the URL state, debounced API calls, errors beside fields.
// Every number shown comes from the JSON API (/api/<command>), which runs the command line's own compute();
// this file only formats numbers for display (SI counts, IEC bytes) and never computes a quantity.
"use strict";

// ---------- display formatting (never a formula: base units in, labelled text out) ----------
const Fmt = {
  sig(x, digits = 3) {
    if (x === 0) return "0";
    const text = Number(x).toPrecision(digits);
    return text.includes("e") ? text.replace("e+", "e") : String(Number(text));  // 1.244e7, as the rest of the page
  },
  count(n) {
    if (n === null || n === undefined || !Number.isFinite(n)) return String(n);
    const units = [["E", 1e18], ["P", 1e15], ["T", 1e12], ["B", 1e9], ["M", 1e6], ["K", 1e3]];
    for (const [suffix, scale] of units) if (Math.abs(n) >= scale) return Fmt.sig(n / scale) + suffix;
    return Fmt.sig(n, 4);
  },
  exact(n) { return Number.isInteger(n) ? n.toLocaleString("en-US") : Fmt.sig(n, 6); },
  flops(n) {
    if (!Number.isFinite(n)) return String(n);
    if (n === 0) return "0";
    const [mantissa, exponent] = n.toExponential(2).split("e");
    return `${mantissa}e${Number(exponent)}`;
  },
  rate(n) {
    for (const [prefix, scale] of [["P", 1e15], ["T", 1e12], ["G", 1e9], ["M", 1e6]]) {
      if (Math.abs(n) >= scale) return `${Fmt.sig(n / scale, 4)} ${prefix}FLOP/s`;
    }
    return `${Fmt.sig(n, 4)} FLOP/s`;
  },
  bytes(n) {
    if (!Number.isFinite(n)) return String(n);
    const units = [["PiB", 2 ** 50], ["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]];
    for (const [suffix, scale] of units) if (Math.abs(n) >= scale) return `${Fmt.sig(n / scale)} ${suffix}`;
    return `${Fmt.sig(n, 4)} B`;
  },
  seconds(s) {
    if (!Number.isFinite(s)) return String(s);
    const units = [["years", 365 * 86400], ["days", 86400], ["h", 3600], ["min", 60]];
    for (const [unit, scale] of units) if (s >= 2 * scale || (unit === "days" && s >= scale)) return `${(s / scale).toFixed(1)} ${unit}`;
    if (s >= 1) return `${s.toFixed(2)} s`;
    if (s >= 1e-3) return `${(s * 1e3).toFixed(2)} ms`;
    if (s >= 1e-6) return `${Fmt.sig(s * 1e6)} µs`;
    if (s === 0) return "0 s";
    return `${Fmt.sig(s * 1e9)} ns`;  // a 64 × 64 × 64 matmul's ideal time is tens of nanoseconds
  },
  byteRate(n) {  // a bandwidth, SI as datasheets print it: 3.42 GB/s
    if (!Number.isFinite(n)) return String(n);
    for (const [prefix, scale] of [["T", 1e12], ["G", 1e9], ["M", 1e6], ["k", 1e3]]) {
      if (Math.abs(n) >= scale) return `${Fmt.sig(n / scale)} ${prefix}B/s`;
    }
    return `${Fmt.sig(n)} B/s`;
  },
  whole(n) { return Number.isFinite(n) ? Math.round(n).toLocaleString("en-US") : String(n); },  // a count: no decimals
  number(n) { return typeof n === "number" ? Fmt.sig(n, 4) : String(n); },
  percent(x) { return typeof x === "number" ? `${(100 * x).toFixed(1)}%` : String(x); },
  plain(v) { return String(v); },
};

// Reads what a user typed ("70B", "1.5e13", "4K") only to place a slider's thumb; the API parses the value itself.
function parseLoose(text) {
  const match = /^\s*([-+]?[\d.]+(?:e[-+]?\d+)?)\s*([kKMBGTPE]?)\s*$/.exec(String(text).replace(/[_,]/g, ""));
  if (!match) return NaN;
  const scale = { "": 1, k: 1e3, K: 1e3, M: 1e6, B: 1e9, G: 1e9, T: 1e12, P: 1e15, E: 1e18 }[match[2]];
  return Number(match[1]) * scale;
}

function el(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of [].concat(children)) {
    if (child === null || child === undefined) continue;
    node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

// ---------- the API ----------
async function callApi(command, params) {
  const query = new URLSearchParams(params.map(([k, v]) => [k, String(v)]));
  let response;
  try {
    response = await fetch(`api/${command}?${query}`, { headers: { Accept: "application/json" } });
  } catch (error) {
    return { ok: false, status: 0, body: { error: `cannot reach the server (${error.message})` }, argv: null };
  }
  const argv = JSON.parse(response.headers.get("X-Trainledger-Argv") || "null");
  let body;
  try { body = await response.json(); } catch (error) { body = { error: `HTTP ${response.status}: not JSON` }; }
  return { ok: response.ok, status: response.status, body, argv };
}

function shellQuote(word) { return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, "'\\''")}'`; }

// ---------- page state in the URL hash: #plan.params=70B&memory.zero=3 ----------
const UrlState = {
  values: new URLSearchParams(location.hash.slice(1)),
  get(key) { return this.values.get(key); },
  set(key, value, isDefault) {
    if (isDefault) this.values.delete(key); else this.values.set(key, value);
    clearTimeout(this.timer);
    this.timer = setTimeout(() => history.replaceState(null, "", `#${this.values.toString()}`), 150);
  },
};

// ---------- one calculator ----------
let SCHEMA = {};
const MAX_WAIT_MS = 250;  // during a continuous drag, at most this long between requests

class Calculator {
  // spec: {id, command, fields: [...], render(calc, body), params(calc) (optional), extra(calc) (optional)}
  constructor(spec) {
    this.spec = spec;
    this.section = document.getElementById(`calc-${spec.id}`);
    this.form = this.section.querySelector(".controls");
    this.out = this.section.querySelector(".results");
    this.errorBox = this.section.querySelector(".calc-error");
    this.commandLine = this.section.querySelector(".command-line");
    this.fields = {};
    this.seq = 0;
    this.timer = null;
    this.lastSent = -Infinity;
  }

  flagInfo(param) {
    const command = SCHEMA[this.spec.command];
    return command ? command.flags.find((f) => f.param === param) : undefined;
  }

  build() {
    for (const field of this.spec.fields) this.addField(field);
    if (!SCHEMA[this.spec.command]) {
      this.showError({ error: `this server has no \`${this.spec.command}\` command` });
    }
  }

  addField(field) {
    const id = `${this.spec.id}-${field.key || field.param}`.replace(/[^\w-]/g, "-");
    const info = field.param ? this.flagInfo(field.param) : undefined;
    const wrap = el("div", { class: `field field-${field.type}`, "data-param": field.param || "" });
    const label = el("label", { for: id, text: field.label });
    const help = field.help || (info && info.help) || "";
    const error = el("div", { class: "field-error", id: `${id}-error`, role: "alert", "aria-live": "polite" });
    let input, slider = null;
    if (field.type === "select") {
      input = el("select", { id, name: field.param, "aria-describedby": `${id}-error` });
      const options = field.options || (info && info.choices) || [];
      const values = options.map((option) => (Array.isArray(option) ? option[0] : option));
      const runTimeDefault = field.value === undefined && info && (info.default === null || info.default === undefined);
      if (runTimeDefault && !values.includes("")) {  // the CLI picks it at run time: say so, never show a blank box
        const named = /\(default:? ([\w.-]+)/.exec((info && info.help) || "");
        input.appendChild(el("option", { value: "", text: named ? `default (${named[1]})` : "default" }));
      }
      for (const option of options) {
        const [value, text] = Array.isArray(option) ? option : [option, option];
        input.appendChild(el("option", { value, text }));
      }
    } else if (field.type === "bool") {
      input = el("input", { id, type: "checkbox", name: field.param, "aria-describedby": `${id}-error` });
    } else {
      input = el("input", { id, type: "text", name: field.param, inputmode: field.inputmode || "decimal",
                            autocomplete: "off", spellcheck: "false", "aria-describedby": `${id}-error` });
      if (field.type !== "text") {
        slider = el("input", { id: `${id}-slider`, type: "range", min: field.min, max: field.max,
                               step: field.step || (field.type === "log" ? 0.01 : 1), "aria-describedby": `${id}-error`,
                               "aria-label": `${field.label} (slider)` });
      }
    }
    const row = el("div", { class: "field-row" }, [slider ? el("label", { for: `${id}-slider`, class: "sr-only", text: `${field.label} slider` }) : null, slider, input]);
    wrap.append(label, row);
    if (help) wrap.append(el("div", { class: "field-help", text: help }));
    wrap.append(error);
    (field.parent || this.form).appendChild(wrap);

    const entry = { field, input, slider, error, wrap, id };
    this.fields[field.key || field.param] = entry;
    let initial = field.value;
    if ((initial === undefined || initial === null) && info && info.default !== null && info.default !== undefined) initial = String(info.default);
    entry.defaultValue = initial === undefined || initial === null ? "" : String(initial);
    if (info && info.default !== null && info.default !== undefined && (field.value === undefined || String(field.value) === String(info.default))) {
      entry.cliDefault = info.boolean ? String(!!info.default) : String(info.default);
    }
    if (entry.defaultValue === "" && input.type === "text") input.placeholder = field.placeholder || "default";
    const fromUrl = field.noState ? null : UrlState.get(`${this.spec.id}.${field.key || field.param}`);
    this.setValue(field.key || field.param, fromUrl !== null ? fromUrl : entry.defaultValue, false);

    const changed = (fromSlider) => {
      if (fromSlider) input.value = this.sliderToText(field, Number(slider.value));
      else if (slider) this.placeSlider(entry);
      if (!field.noState) UrlState.set(`${this.spec.id}.${field.key || field.param}`, this.valueOf(entry), this.valueOf(entry) === entry.defaultValue);
      if (field.onChange) field.onChange(this, entry);
      this.schedule();
    };
    if (slider) slider.addEventListener("input", () => changed(true));
    input.addEventListener(field.type === "select" || field.type === "bool" ? "change" : "input", () => changed(false));
    return entry;
  }

  sliderToText(field, position) {
    if (field.type === "log" && field.textFormat === "sci") return Number((10 ** position).toPrecision(2)).toExponential().replace("e+", "e");
    if (field.type === "log") return Fmt.count(Number((10 ** position).toPrecision(2)));
    if (field.type === "pow2") return String(2 ** position);
    if (field.type === "float") return String(Number(position.toFixed(6)));
    return String(position);
  }

  placeSlider(entry) {
    const { field, slider, input } = entry;
    const value = parseLoose(input.value);
    if (!Number.isFinite(value) || value <= 0 && field.type !== "int" && field.type !== "float") return;
    if (field.type === "log") slider.value = Math.log10(value);
    else if (field.type === "pow2") slider.value = Math.log2(value);
    else slider.value = value;
  }

  valueOf(entry) {
    return entry.field.type === "bool" ? (entry.input.checked ? "true" : "false") : entry.input.value.trim();
  }

  value(key) { return this.valueOf(this.fields[key]); }

  setValue(key, value, notify = false) {
    const entry = this.fields[key];
    if (!entry) return;
    if (entry.field.type === "bool") entry.input.checked = value === true || value === "true";
    else {
      if (entry.field.type === "select" && ![...entry.input.options].some((o) => o.value === String(value))) {
        entry.input.appendChild(el("option", { value: String(value), text: String(value) }));
      }
      entry.input.value = String(value);
    }
    if (entry.slider) this.placeSlider(entry);
    if (!entry.field.noState) UrlState.set(`${this.spec.id}.${key}`, this.valueOf(entry), this.valueOf(entry) === entry.defaultValue);
    if (notify) this.schedule();
  }

  // [[param, value], ...] sent to the API: every visible field with a param and a value.
  params() {
    if (this.spec.params) return this.spec.params(this);
    return this.fieldParams();
  }

  fieldParams(skip = () => false) {
    const out = [];
    for (const [key, entry] of Object.entries(this.fields)) {
      const { field } = entry;
      if (!field.param || entry.wrap.hidden || skip(key, entry)) continue;
      const value = this.valueOf(entry);
      if (value === "" || (field.omitWhen !== undefined && value === field.omitWhen)) continue;
      if (entry.cliDefault !== undefined && value === entry.cliDefault) continue;  // the command's own default
      out.push([field.param, value]);
    }
    return out;
  }

  // Debounced (a request 100 ms after the last change), but never starved: while a slider keeps moving, a
  // request goes out as soon as MAX_WAIT_MS have passed since the last one, so the answer follows the drag.
  schedule(delay = 100) {
    clearTimeout(this.timer);
    this.section.classList.add("pending");
    const idle = performance.now() - this.lastSent >= MAX_WAIT_MS;
    this.timer = setTimeout(() => { this.timer = null; this.update(); }, idle ? 0 : delay);
  }

  async update() {
    const seq = ++this.seq;
    this.lastSent = performance.now();
    const params = this.params();
    const reply = await callApi(this.spec.command, params);
    if (seq !== this.seq) return;  // a newer request is on its way
    if (this.timer === null) this.section.classList.remove("pending");  // else a newer change is still to be sent
    this.clearErrors();
    if (!reply.ok) { this.showError(reply.body); this.section.dataset.state = "error"; this.finished(); return; }
    if (reply.argv && this.commandLine) {
      // one unbreakable span per word, so a long line wraps between flags and never inside "--dp=8"
      const words = ["trainledger", ...reply.argv.filter((a) => a !== "--"), "--json"].map(shellQuote);
      this.commandLine.replaceChildren(...words.flatMap((word, i) => [i ? " " : "", el("span", { class: "word", text: word })]));
    }
    try {
      await this.spec.render(this, reply.body, params);
      if (seq !== this.seq) return;
      this.section.dataset.state = "ok";
    } catch (error) {
      this.showError(error.body || { error: `cannot draw this answer: ${error.message}` });
      this.section.dataset.state = "error";
    }
    this.finished();
  }

  // Tests and scripts wait for data-updates to grow: one more answer (or error) is on the page.
  finished() { this.section.dataset.updates = String(Number(this.section.dataset.updates || 0) + 1); }

  clearErrors() {
    for (const entry of Object.values(this.fields)) { entry.error.textContent = ""; entry.input.removeAttribute("aria-invalid"); }
    this.errorBox.textContent = "";
    this.errorBox.hidden = true;
    this.out.classList.remove("stale");
  }

  // 422 bodies name the flag: show the CLI's message beside that field, or above the results.
  showError(body) {
    const message = body.error || body.detail || "error";
    const param = body.param;
    const key = param && param.startsWith("arch.") ? param.slice(5) : param;
    const entry = key && (this.fields[key] || Object.values(this.fields).find((e) => e.field.param === key || e.field.errorFor === key ||
                                                                              (key === "arch" && e.field.arch)));
    if (entry && !entry.wrap.hidden) {
      entry.error.textContent = message;
      entry.input.setAttribute("aria-invalid", "true");
    } else {
      this.errorBox.textContent = message;
      this.errorBox.hidden = false;
    }
    this.out.classList.add("stale");
  }
}

// ---------- result rendering helpers: every shown number carries its raw value and JSON path ----------
function valueNode(path, value, format) {
  const shown = value === null || value === undefined ? "—" : format(value);
  const raw = typeof value === "object" ? JSON.stringify(value) : String(value);
  return el("span", { class: "value", "data-path": path, "data-value": raw, title: raw, text: shown });
}

function resultList(items) {
  const list = el("dl", { class: "result-list" });
  for (const item of items) {
    if (item.value === undefined) continue;
    list.append(el("dt", { text: item.label }), el("dd", {}, [valueNode(item.path, item.value, item.format || Fmt.number),
                                                                item.note ? el("span", { class: "note", text: ` ${item.note}` }) : null]));
  }
  return list;
}

function pick(object, path) {
  return path.split(".").reduce((o, k) => (o === null || o === undefined ? undefined : o[k]), object);
}

function debounce(fn, delay) { let t; return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), delay); }; }

window.TL = { Fmt, el, callApi, Calculator, UrlState, valueNode, resultList, pick, debounce, parseLoose,
              setSchema(schema) { SCHEMA = schema; }, schema() { return SCHEMA; } };
