// charts.js: line charts drawn as SVG by hand (no chart library, nothing from the network).

const NS = "http://www.w3.org/2000/svg";
const W = 520, H = 200, L = 46, R = 10, T = 10, B = 26;

function svg(tag, attrs, ...kids) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const k of kids) el.appendChild(typeof k === "string" ? document.createTextNode(k) : k);
  return el;
}

// ticks returns the round values for an axis from 0 (or lo) up to at least hi: a step of 1, 2
// or 5 times a power of ten giving at most max intervals, every multiple of it from the first
// at or below lo to the first at or above hi. A range with nothing in it is 0 to 1.
export function ticks(lo, hi, max = 5) {
  if (!(hi > lo)) { lo = Math.min(lo, 0); hi = lo + 1; }
  const raw = (hi - lo) / max;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  let step = 10 * p;
  for (const m of [1, 2, 5]) if (m * p >= raw - 1e-12 * raw) { step = m * p; break; }
  const out = [];
  const first = Math.floor(lo / step + 1e-9), last = Math.ceil(hi / step - 1e-9);
  for (let i = first; i <= last; i++) out.push(Number((i * step).toPrecision(12)));
  return out;
}

const MIN = 60000, HOUR = 60 * MIN;
// TIME_STEPS are the round steps of a time axis, in ms.
const TIME_STEPS = [10000, 15000, 30000, MIN, 2 * MIN, 5 * MIN, 10 * MIN, 15 * MIN, 30 * MIN, HOUR, 2 * HOUR, 3 * HOUR, 6 * HOUR, 12 * HOUR, 24 * HOUR];

// timeTicks returns the round times (ms) within [t0, t1] for a time axis: the smallest step of
// TIME_STEPS giving at most max ticks, at its multiples in local time (a 15-minute step at :00,
// :15, :30, :45; a 3-hour step at 00:00, 03:00...). offsetMin is the zone's offset east of UTC
// in minutes (default: the browser's).
export function timeTicks(t0, t1, max = 6, offsetMin) {
  const off = (offsetMin === undefined ? -new Date(t0).getTimezoneOffset() : offsetMin) * MIN;
  const step = TIME_STEPS.find((s) => (t1 - t0) / s <= max) || TIME_STEPS[TIME_STEPS.length - 1];
  const out = [];
  for (let t = Math.ceil((t0 + off) / step) * step - off; t <= t1; t += step) out.push(t);
  return out;
}

function fmt(v, unit) {
  if (unit === "s") {
    if (v === 0) return "0";
    if (v < 1) return Math.round(v * 1000) + "ms";
    return (v < 10 ? v.toFixed(1) : Math.round(v)) + "s";
  }
  if (v >= 100) return Math.round(v).toString();
  return (Math.round(v * 100) / 100).toString();
}

const clock = (t) => new Date(t).toTimeString().slice(0, 5);

// STATUS_CLASS colours the job statuses the same in every chart and badge: COMPLETED green,
// FAILED red, TIMED_OUT amber, CANCELLED grey.
const STATUS_CLASS = {COMPLETED: "st-completed", FAILED: "st-failed", TIMED_OUT: "st-timed-out", CANCELLED: "st-cancelled"};

// seriesClass is the colour class of series n (the i-th): its status's, else a palette's.
export function seriesClass(n, i) { return STATUS_CLASS[n] || "s" + (i % 6); }

// lineChart draws series ({name: [[t, v]]}) over time; unit "s" formats seconds; opts.from
// and opts.to fix the time axis (ms; default: the points' span). Axis ticks are round: values
// of 1, 2, 5 x 10^n steps, times at round minutes or hours. The chart's element carries
// data-points (the number of points drawn), data-max (the largest value) and data-xticks / data-yticks (the ticks' labels).
export function lineChart(title, series, unit, opts = {}) {
  const names = Object.keys(series).sort();
  const pts = names.flatMap((n) => series[n]);
  const box = document.createElement("div");
  box.className = "chart";
  const h3 = document.createElement("h3");
  h3.textContent = title;
  box.appendChild(h3);
  box.dataset.points = String(pts.length);
  box.dataset.max = String(Math.max(0, ...pts.map((p) => p[1])));
  box.dataset.title = title;
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title});
  const now = Date.now();
  const t0 = opts.from ?? (pts.length ? Math.min(...pts.map((p) => p[0])) : now - 60000);
  const t1 = opts.to ?? (pts.length ? Math.max(...pts.map((p) => p[0]), t0 + 1000) : now);
  const yt = ticks(0, Math.max(0, ...pts.map((p) => p[1])), 4);
  const ymax = yt[yt.length - 1];
  const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0);
  const y = (v) => T + (H - T - B) * (1 - v / ymax);
  for (const v of yt) {
    root.appendChild(svg("line", {class: v ? "grid" : "axis", x1: L, x2: W - R, y1: y(v), y2: y(v)}));
    root.appendChild(svg("text", {x: L - 6, y: y(v) + 3, "text-anchor": "end"}, fmt(v, unit)));
  }
  root.appendChild(svg("line", {class: "axis", x1: L, x2: L, y1: T, y2: H - B}));
  const xt = timeTicks(t0, t1, 6);
  box.dataset.xticks = xt.map(clock).join(" ");
  box.dataset.yticks = yt.join(" ");
  for (const t of xt) {
    root.appendChild(svg("line", {class: "axis", x1: x(t), x2: x(t), y1: H - B, y2: H - B + 4}));
    root.appendChild(svg("text", {x: x(t), y: H - 8, "text-anchor": "middle"}, clock(t)));
  }
  names.forEach((n, i) => {
    const ps = series[n];
    const cls = seriesClass(n, i);
    if (ps.length > 1) {
      root.appendChild(svg("polyline", {class: "line " + cls, points: ps.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ")}));
    }
    if (ps.length <= 40) for (const p of ps) root.appendChild(svg("circle", {class: cls, cx: x(p[0]), cy: y(p[1]), r: 2.4}));
  });
  if (!pts.length) root.appendChild(svg("text", {x: W / 2, y: H / 2, "text-anchor": "middle"}, "no data yet"));
  box.appendChild(root);
  const legend = document.createElement("div");
  legend.className = "legend";
  names.forEach((n, i) => {
    const s = document.createElement("span");
    s.className = seriesClass(n, i);
    const last = series[n][series[n].length - 1];
    s.textContent = n + (last ? " " + fmt(last[1], unit) : "");
    legend.appendChild(s);
  });
  box.appendChild(legend);
  return box;
}
