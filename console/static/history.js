// history.js: an endpoint's history as the server keeps it (GET /v2/{id}/metrics): jobs ended
// per step by status, and delay and execution time percentiles, over the last hour (by minute)
// or day (by 15 minutes). The server keeps it in its store, so it is there when a page opens,
// the same from every replica; the metrics tab reads it again at each /metrics sample, which
// extends it live.
import * as api from "./api.js";

export const RANGES = ["1h", "24h"];

// load reads the endpoint's history over range ("1h" or "24h").
export function load(id, range) {
  return api.get("/v2/" + api.enc(id) + "/metrics?range=" + encodeURIComponent(range));
}

const STATUSES = [["COMPLETED", "completed"], ["FAILED", "failed"], ["TIMED_OUT", "timedOut"], ["CANCELLED", "cancelled"]];

// series turns a history into chart series: ended ({status: [[t, jobs]]}: COMPLETED always,
// the other statuses when some ended in the range), delay and exec ({p50, p90, p99: [[t,
// seconds]]}, steps with no job left out), and the range's bounds from and to (ms).
export function series(h) {
  const step = h.stepSeconds * 1000;
  const ended = {}, delay = {p50: [], p90: [], p99: []}, exec = {p50: [], p90: [], p99: []};
  for (const [status, field] of STATUSES) {
    if (status === "COMPLETED" || h.buckets.some((b) => b[field] > 0)) ended[status] = [];
  }
  for (const b of h.buckets) {
    const t = Date.parse(b.start);
    for (const [status, field] of STATUSES) if (ended[status]) ended[status].push([t, b[field]]);
    for (const [times, out] of [[b.delay, delay], [b.execution, exec]]) {
      if (!times.count) continue;
      out.p50.push([t, times.p50Ms / 1000]);
      out.p90.push([t, times.p90Ms / 1000]);
      out.p99.push([t, times.p99Ms / 1000]);
    }
  }
  const from = h.buckets.length ? Date.parse(h.buckets[0].start) : Date.now() - 3600000;
  return {ended, delay, exec, step, from, to: from + h.buckets.length * step};
}
