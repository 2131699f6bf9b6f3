// metrics.js: the console's view of /metrics. While the console shows an endpoint it reads
// /metrics every few seconds (without the key: /metrics needs none) and keeps that endpoint's
// gantry_* series of the last 30 minutes in memory, and no other's: a server with many
// endpoints serves megabytes of series, and keeping them all grew an open tab by megabytes
// each sample. The charts are drawn from these samples. Rates come from the difference of two
// samples, percentiles from the histogram buckets' difference over a window, as Prometheus's
// rate() and histogram_quantile() would compute them.

export const EVERY_MS = 5000;
const KEEP = 360; // samples: 30 min at 5 s

const samples = [];
let timer = null;
let shown = null; // the endpoint whose series are kept; null = none (nothing is read)
const listeners = new Set();

// watch keeps the series of endpoint id from now on (null: none, and /metrics is not read).
// Another endpoint's samples are dropped.
export function watch(id) {
  if (id === shown) return;
  shown = id;
  samples.length = 0;
  if (id !== null && timer) sampleNow();
}

// parse reads the Prometheus text format into [{name, labels, value}], gantry_* series only;
// with endpoint set, only the series whose endpoint label is that id.
export function parse(text, endpoint) {
  const out = [];
  const label = endpoint == null ? null : 'endpoint="' + endpoint + '"';
  for (const line of text.split("\n")) {
    if (!line.startsWith("gantry_")) continue;
    if (label !== null && !line.includes(label)) continue; // cheap: most lines are other endpoints'
    let i = 0;
    while (i < line.length && line[i] !== "{" && line[i] !== " ") i++;
    const name = line.slice(0, i);
    const labels = {};
    if (line[i] === "{") {
      i++;
      while (line[i] !== "}") {
        const eq = line.indexOf("=", i);
        const key = line.slice(i, eq).trim();
        let j = eq + 2, val = "";
        for (; line[j] !== '"'; j++) {
          if (line[j] === "\\") {
            j++;
            val += line[j] === "n" ? "\n" : line[j];
          } else val += line[j];
        }
        labels[key] = val;
        i = j + 1;
        if (line[i] === ",") i++;
      }
      i++;
    }
    const value = parseFloat(line.slice(i).trim().split(" ")[0]);
    if (endpoint != null && labels.endpoint !== endpoint) continue; // the text was in another label
    out.push({name, labels, value});
  }
  return out;
}

// sampleNow reads /metrics once and keeps the shown endpoint's series as a sample.
export async function sampleNow() {
  const id = shown;
  if (id === null) return;
  try {
    const resp = await fetch("/metrics", {cache: "no-store", credentials: "omit"});
    if (!resp.ok) return;
    const series = parse(await resp.text(), id);
    if (id !== shown) return; // another endpoint was shown meanwhile
    samples.push({t: Date.now(), series});
    if (samples.length > KEEP) samples.shift();
    for (const fn of listeners) fn();
  } catch (e) { /* the next tick tries again */ }
}

// start samples every EVERY_MS until stop.
export function start() {
  if (timer) return;
  sampleNow();
  timer = setInterval(sampleNow, EVERY_MS);
}
export function stop() { clearInterval(timer); timer = null; samples.length = 0; shown = null; }

// onSample calls fn after each new sample; it returns the function that stops that.
export function onSample(fn) { listeners.add(fn); return () => listeners.delete(fn); }

const matches = (labels, want) => Object.entries(want).every(([k, v]) => labels[k] === v);

// sum adds the values of the series of name whose labels include want.
function sum(s, name, want) {
  let v = 0, found = false;
  for (const x of s.series) if (x.name === name && matches(x.labels, want)) { v += x.value; found = true; }
  return found ? v : null;
}

// values returns, per value of label by, the summed series of name matching want.
function byLabel(s, name, want, by) {
  const out = {};
  for (const x of s.series) {
    if (x.name === name && matches(x.labels, want)) out[x.labels[by]] = (out[x.labels[by]] || 0) + x.value;
  }
  return out;
}

// buckets returns a histogram's cumulative buckets [[le, count]] summed over matching series.
function buckets(s, base, want) {
  const m = new Map();
  for (const x of s.series) {
    if (x.name === base + "_bucket" && matches(x.labels, want)) {
      const le = x.labels.le === "+Inf" ? Infinity : parseFloat(x.labels.le);
      m.set(le, (m.get(le) || 0) + x.value);
    }
  }
  return [...m.entries()].sort((a, b) => a[0] - b[0]);
}

// quantile is histogram_quantile: linear within the bucket that holds rank q.
export function quantile(q, bks) {
  if (!bks.length) return null;
  const total = bks[bks.length - 1][1];
  if (!(total > 0)) return null;
  const rank = q * total;
  let prevLe = 0, prevCount = 0;
  for (const [le, count] of bks) {
    if (count >= rank) {
      if (le === Infinity) return prevLe;
      return prevLe + (le - prevLe) * ((rank - prevCount) / Math.max(count - prevCount, 1e-9));
    }
    prevLe = le; prevCount = count;
  }
  return prevLe;
}

const WINDOW_MS = 5 * 60 * 1000;

// gauge is the series of a gauge per value of label by: {value: [[t, v]]}.
export function gauge(name, want, by) {
  const out = {};
  for (const s of samples) {
    for (const [k, v] of Object.entries(byLabel(s, name, want, by))) (out[k] ||= []).push([s.t, v]);
  }
  return out;
}

// rate is a counter's per-minute rate between consecutive samples, per value of label by.
export function rate(name, want, by) {
  const out = {};
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1], b = samples[i];
    const va = byLabel(a, name, want, by), vb = byLabel(b, name, want, by);
    for (const [k, v] of Object.entries(vb)) {
      const d = v - (va[k] || 0);
      (out[k] ||= []).push([b.t, Math.max(d, 0) * 60000 / (b.t - a.t)]);
    }
  }
  return out;
}

// quantiles are a histogram's p50, p90 and p99 over the last 5 minutes at each sample (since
// the first sample while fewer minutes are kept), in the histogram's unit.
export function quantiles(base, want) {
  const out = {p50: [], p90: [], p99: []};
  for (let i = 0; i < samples.length; i++) {
    const s = samples[i];
    let j = 0;
    while (j < i && s.t - samples[j].t > WINDOW_MS) j++;
    const now = buckets(s, base, want);
    const then = j < i ? new Map(buckets(samples[j], base, want)) : new Map();
    const diff = now.map(([le, c]) => [le, c - (then.get(le) || 0)]);
    for (const [q, k] of [[0.5, "p50"], [0.9, "p90"], [0.99, "p99"]]) {
      const v = quantile(q, diff);
      if (v !== null) out[k].push([s.t, v]);
    }
  }
  return out;
}

// total is a counter's value in the last sample, or null.
export function total(name, want) {
  return samples.length ? sum(samples[samples.length - 1], name, want) : null;
}

export function count() { return samples.length; }

// held is how many series the samples hold, all together (what the tab's memory grows with).
export function held() { return samples.reduce((n, s) => n + s.series.length, 0); }
