// SVG drawing for the calculators: plain DOM, no library. These functions only place the numbers the API
// returned; they compute no quantity of their own (positions on a log axis are log10 of a given value).
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"];

function svg(tag, attrs = {}, children = []) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of [].concat(children)) {
    if (child === null || child === undefined) continue;
    node.appendChild(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function svgRoot(width, height, title) {
  return svg("svg", { viewBox: `0 0 ${width} ${height}`, width: "100%", role: "img", "aria-label": title,
                      preserveAspectRatio: "xMinYMin meet" }, [svg("title", {}, title)]);
}

function text(x, y, content, attrs = {}) {
  return svg("text", Object.assign({ x, y }, attrs), String(content));
}

// A horizontal stacked bar of named parts against a capacity line (memory per GPU vs the GPU's memory).
// `total` is the API's total (the bar's length is where the last part ends).
function stackedBar({ parts, total, capacity, capacityLabel, format, title }) {
  const width = 720, barY = 34, barH = 44, left = 10, right = 10, legendY = 130, rowH = 20;
  const charW = 6.8;  // an 11px label's average advance, rounded up: an estimate must never cut a label off
  const end = parts.reduce((at, part) => at + Math.max(part.value, 0), 0);
  const scaleMax = Math.max(end, capacity || 0) * 1.04 || 1;
  const x = (value) => left + (width - left - right) * value / scaleMax;
  // the legend is laid out first, on as many rows as its entries need, and the picture made that tall
  const legend = [];
  let lx = left, ly = legendY;
  parts.forEach((part, i) => {
    if (part.value <= 0) return;
    const label = `${part.label} ${format(part.value)}`;
    const w = 24 + label.length * charW;
    if (lx > left && lx + w > width - right) { lx = left; ly += rowH; }
    legend.push({ x: lx, y: ly, label, color: PALETTE[i % PALETTE.length] });
    lx += w;
  });
  const root = svgRoot(width, ly + rowH, title);
  const labels = [];
  let at = 0;
  parts.forEach((part, i) => {
    if (part.value <= 0) return;
    const x0 = x(at), x1 = x(at + part.value);
    root.appendChild(svg("rect", { x: x0, y: barY, width: Math.max(x1 - x0, 0.5), height: barH,
                                   fill: PALETTE[i % PALETTE.length], class: "part" },
                         [svg("title", {}, `${part.label}: ${format(part.value)}`)]));
    if (x1 - x0 > part.label.length * charW + 12) {  // only a label that fits its part; the legend names every part
      labels.push(text((x0 + x1) / 2, barY + barH / 2 + 4, part.label,
                       { "text-anchor": "middle", class: "bar-label", stroke: PALETTE[i % PALETTE.length] }));
    }
    at += part.value;
  });
  root.appendChild(text(left, 22, `total ${format(total)}`, { class: "axis-label" }));
  if (capacity) {
    const cx = x(capacity);
    root.appendChild(svg("line", { x1: cx, x2: cx, y1: barY - 12, y2: barY + barH + 12, class: "capacity" }));
    root.appendChild(text(Math.min(cx, width - 4), barY + barH + 28, capacityLabel || `capacity ${format(capacity)}`,
                          { "text-anchor": cx > width - 150 ? "end" : "middle", class: "axis-label" }));
  }
  labels.forEach((label) => root.appendChild(label));  // drawn after the capacity line, which never crosses them
  for (const entry of legend) {
    root.appendChild(svg("rect", { x: entry.x, y: entry.y, width: 10, height: 10, fill: entry.color }));
    root.appendChild(text(entry.x + 14, entry.y + 9, entry.label, { class: "legend" }));
  }
  return root;
}

// Horizontal bars, one per row ({label, value, note}), sharing one linear or log scale.
function barList({ rows, format, title, log = false }) {
  const width = 720, rowH = 22, labelW = 190, valueW = 130;
  const root = svgRoot(width, rows.length * rowH + 8, title);
  const positive = rows.map((r) => r.value).filter((v) => v > 0);
  const max = Math.max(...positive, 1e-300), min = Math.min(...positive, max);
  const span = width - labelW - valueW;
  const lmin = Math.log10(min) - 1, lmax = Math.log10(max);
  const len = (v) => v <= 0 ? 0 : log ? span * (Math.log10(v) - lmin) / (lmax - lmin || 1) : span * v / max;
  rows.forEach((row, i) => {
    const y = 4 + i * rowH;
    root.appendChild(text(labelW - 8, y + 15, row.label, { "text-anchor": "end", class: "legend" }));
    root.appendChild(svg("rect", { x: labelW, y: y + 3, width: Math.max(len(row.value), row.value > 0 ? 1 : 0),
                                   height: rowH - 6, fill: row.color || PALETTE[i % PALETTE.length] },
                         [svg("title", {}, `${row.label}: ${format(row.value)}`)]));
    root.appendChild(text(labelW + len(row.value) + 6, y + 15, format(row.value) + (row.note ? `  ${row.note}` : ""),
                          { class: "legend" }));
  });
  return root;
}

// The bit layout of a number format: one box per bit, coloured sign / exponent / mantissa.
function bitBoxes(dtype) {
  const width = 720, height = 58, left = 96;
  const root = svgRoot(width, height, `${dtype.name} bit layout`);
  const fields = dtype.kind === "int"
    ? [["sign", dtype.sign_bits, "bit-sign"], ["value", dtype.mantissa_bits, "bit-mantissa"]]
    : [["sign", dtype.sign_bits, "bit-sign"], ["exponent", dtype.exponent_bits, "bit-exponent"],
       ["mantissa", dtype.mantissa_bits, "bit-mantissa"]];
  const shown = fields.reduce((s, f) => s + f[1], 0);
  const padding = dtype.bits - shown;  // TF32 lives in 32-bit storage: 13 unused bits
  const all = padding > 0 ? fields.concat([["unused", padding, "bit-unused"]]) : fields;
  const box = Math.min(22, (width - left - 4) / dtype.bits);
  root.appendChild(text(0, 24, dtype.name, { class: "dtype-name" }));
  root.appendChild(text(0, 42, `${dtype.bits} bits`, { class: "legend" }));
  let at = 0;
  for (const [name, count, cls] of all) {
    if (count <= 0) continue;
    for (let b = 0; b < count; b++) {
      root.appendChild(svg("rect", { x: left + (at + b) * box, y: 8, width: box - 1, height: 22, class: cls },
                           [svg("title", {}, `${name} bit`)]));
    }
    const mid = left + (at + count / 2) * box;
    root.appendChild(text(mid, 46, count * box > 40 ? `${name} ${count}` : String(count),
                          { "text-anchor": "middle", class: "legend" }));
    at += count;
  }
  return root;
}

// Dynamic range of each format on a log10 axis: subnormals (pale), normals (solid), and a marker value.
function rangeChart({ dtypes, marker, markerLabel, roundedByName }) {
  const width = 720, rowH = 26, left = 86, right = 14, top = 30;
  const floats = dtypes.filter((d) => d.kind === "float");
  const lo = -50, hi = 45;  // fp64 (1e-324 .. 1e308) is clipped at the edges
  const root = svgRoot(width, top + floats.length * rowH + 34, "dynamic range of each dtype (log scale)");
  const x = (value) => left + (width - left - right) * (Math.min(Math.max(Math.log10(value), lo), hi) - lo) / (hi - lo);
  for (let e = lo; e <= hi; e += 10) {
    root.appendChild(svg("line", { x1: x(10 ** e), x2: x(10 ** e), y1: top - 6, y2: top + floats.length * rowH, class: "grid" }));
    root.appendChild(text(x(10 ** e), top + floats.length * rowH + 16, `1e${e}`, { "text-anchor": "middle", class: "legend" }));
  }
  floats.forEach((d, i) => {
    const y = top + i * rowH;
    root.appendChild(text(left - 8, y + 15, d.name, { "text-anchor": "end", class: "legend" }));
    root.appendChild(svg("rect", { x: x(d.smallest_subnormal), y: y + 4, width: x(d.smallest_normal) - x(d.smallest_subnormal),
                                   height: rowH - 8, class: "range-subnormal" },
                         [svg("title", {}, `${d.name} subnormals from ${d.smallest_subnormal.toExponential(3)}`)]));
    root.appendChild(svg("rect", { x: x(d.smallest_normal), y: y + 4, width: x(d.max) - x(d.smallest_normal),
                                   height: rowH - 8, class: "range-normal" },
                         [svg("title", {}, `${d.name} normals ${d.smallest_normal.toExponential(3)} … ${d.max.toExponential(3)}`)]));
    const rounded = roundedByName && roundedByName[d.name];
    if (rounded !== undefined) {
      const flushed = rounded === 0;
      root.appendChild(text(width - right, y + 15, flushed ? "→ 0" : "", { "text-anchor": "end", class: "underflow" }));
    }
  });
  if (marker > 0) {
    const mx = x(marker);
    root.appendChild(svg("line", { x1: mx, x2: mx, y1: top - 14, y2: top + floats.length * rowH, class: "marker" }));
    root.appendChild(text(mx, top - 18, markerLabel || String(marker), { "text-anchor": "middle", class: "marker-label" }));
  }
  return root;
}

// A line chart with log axes: `series` is [{x, y}] sorted by x; `point` ({x, y, label}) is highlighted.
function logLineChart({ series, point, xLabel, yLabel, title, xFormat, yFormat }) {
  const width = 720, height = 300, left = 64, right = 20, top = 16, bottom = 46;
  const root = svgRoot(width, height, title);
  const xs = series.map((p) => p.x), ys = series.map((p) => p.y).filter(Number.isFinite);
  const x0 = Math.log10(Math.min(...xs)), x1 = Math.log10(Math.max(...xs));
  let y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (y1 - y0 < 1e-9) { y0 -= 0.5; y1 += 0.5; }
  const pad = (y1 - y0) * 0.06; y1 += pad;
  y0 -= point ? pad * 4 : pad;  // room under the curve for the point's label
  const X = (v) => left + (width - left - right) * (Math.log10(v) - x0) / (x1 - x0 || 1);
  const Y = (v) => top + (height - top - bottom) * (1 - (v - y0) / (y1 - y0));
  for (let e = Math.ceil(x0); e <= Math.floor(x1); e++) {
    root.appendChild(svg("line", { x1: X(10 ** e), x2: X(10 ** e), y1: top, y2: height - bottom, class: "grid" }));
    root.appendChild(text(X(10 ** e), height - bottom + 16, xFormat(10 ** e), { "text-anchor": "middle", class: "legend" }));
  }
  for (let i = 0; i <= 4; i++) {
    const v = y0 + (y1 - y0) * i / 4;
    root.appendChild(svg("line", { x1: left, x2: width - right, y1: Y(v), y2: Y(v), class: "grid" }));
    root.appendChild(text(left - 6, Y(v) + 4, yFormat(v), { "text-anchor": "end", class: "legend" }));
  }
  const d = series.filter((p) => Number.isFinite(p.y)).map((p, i) => `${i ? "L" : "M"}${X(p.x).toFixed(1)},${Y(p.y).toFixed(1)}`).join("");
  root.appendChild(svg("path", { d, class: "curve" }));
  if (point) {
    root.appendChild(svg("circle", { cx: X(point.x), cy: Y(point.y), r: 6, class: "optimum" },
                         [svg("title", {}, point.label)]));
    // under the point, where a curve with its minimum near the point leaves room; kept inside the plot
    const lx = Math.min(Math.max(X(point.x), left + 110), width - right - 110);
    root.appendChild(text(lx, Math.min(Y(point.y) + 22, height - bottom - 6), point.label,
                          { class: "marker-label", "text-anchor": "middle" }));
  }
  root.appendChild(text((left + width - right) / 2, height - 8, xLabel, { "text-anchor": "middle", class: "axis-label" }));
  root.appendChild(text(14, (top + height - bottom) / 2, yLabel,
                        { "text-anchor": "middle", class: "axis-label", transform: `rotate(-90 14 ${(top + height - bottom) / 2})` }));
  return root;
}

window.Charts = { svg, svgRoot, text, stackedBar, barList, bitBoxes, rangeChart, logLineChart, PALETTE };
