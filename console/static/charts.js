// charts.js: line charts drawn as SVG by hand (no chart library, nothing from the network).

const NS = "http://www.w3.org/2000/svg";
const W = 520, H = 200, L = 46, R = 10, T = 10, B = 26;

function svg(tag, attrs, ...kids) {
  const el = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
  for (const k of kids) el.appendChild(typeof k === "string" ? document.createTextNode(k) : k);
  return el;
}

// nice rounds a maximum up to 1, 2 or 5 times a power of ten.
function nice(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
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

const clock = (t) => new Date(t).toTimeString().slice(0, 8);

// lineChart draws series ({name: [[t, v]]}) over time; unit "s" formats seconds. The chart's
// element carries data-points, the number of points drawn.
export function lineChart(title, series, unit) {
  const names = Object.keys(series).sort();
  const pts = names.flatMap((n) => series[n]);
  const box = document.createElement("div");
  box.className = "chart";
  const h3 = document.createElement("h3");
  h3.textContent = title;
  box.appendChild(h3);
  box.dataset.points = String(pts.length);
  box.dataset.title = title;
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title});
  const t0 = pts.length ? Math.min(...pts.map((p) => p[0])) : Date.now() - 60000;
  const t1 = pts.length ? Math.max(...pts.map((p) => p[0]), t0 + 1000) : Date.now();
  const ymax = nice(Math.max(0, ...pts.map((p) => p[1])));
  const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0);
  const y = (v) => T + (H - T - B) * (1 - v / ymax);
  for (let i = 0; i <= 4; i++) {
    const v = ymax * i / 4;
    root.appendChild(svg("line", {class: i ? "grid" : "axis", x1: L, x2: W - R, y1: y(v), y2: y(v)}));
    root.appendChild(svg("text", {x: L - 6, y: y(v) + 3, "text-anchor": "end"}, fmt(v, unit)));
  }
  root.appendChild(svg("line", {class: "axis", x1: L, x2: L, y1: T, y2: H - B}));
  root.appendChild(svg("text", {x: L, y: H - 8}, clock(t0)));
  root.appendChild(svg("text", {x: W - R, y: H - 8, "text-anchor": "end"}, clock(t1)));
  names.forEach((n, i) => {
    const ps = series[n];
    const cls = "s" + (i % 6);
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
    s.className = "s" + (i % 6);
    const last = series[n][series[n].length - 1];
    s.textContent = n + (last ? " " + fmt(last[1], unit) : "");
    legend.appendChild(s);
  });
  box.appendChild(legend);
  return box;
}
