// metrics.test.mjs: unit tests of static/metrics.js under Node's test runner (node --test),
// with fetch stubbed; console_test.go's TestMetricsJS runs them. metrics.js is loaded from a
// data: URL, as the module it is in the browser (static/ has no package.json saying so).
import {test} from "node:test";
import assert from "node:assert/strict";
import {readFileSync} from "node:fs";

const src = readFileSync(new URL("../static/metrics.js", import.meta.url), "utf8");
const metrics = await import("data:text/javascript," + encodeURIComponent(src));

// exposition is /metrics of a server with n endpoints, each with the series of one echo job.
function exposition(n) {
  const lines = ["# HELP go_goroutines x", "go_goroutines 12", 'gantry_requests_total{operation="runJob",status="200"} 3'];
  for (let i = 0; i < n; i++) {
    const ep = `ep${i}`;
    for (const le of ["0.005", "0.01", "1", "+Inf"]) lines.push(`gantry_job_delay_seconds_bucket{endpoint="${ep}",le="${le}"} 1`);
    lines.push(`gantry_job_delay_seconds_count{endpoint="${ep}"} 1`);
    lines.push(`gantry_jobs_ended_total{endpoint="${ep}",status="COMPLETED"} ${i}`);
    lines.push(`gantry_queue_jobs{endpoint="${ep}",priority="normal"} 0`);
  }
  lines.push('gantry_other{pool="endpoint=\\"ep1\\""} 1'); // the label's text elsewhere
  return lines.join("\n") + "\n";
}

let fetches = 0;
globalThis.fetch = async () => {
  fetches++;
  return {ok: true, text: async () => exposition(1000)};
};

test("only the shown endpoint's series are kept, and none when no endpoint is shown", async () => {
  metrics.watch(null);
  await metrics.sampleNow();
  assert.equal(fetches, 0, "/metrics read while no endpoint is shown");
  assert.equal(metrics.count(), 0);

  metrics.watch("ep1");
  for (let i = 0; i < 5; i++) await metrics.sampleNow();
  assert.equal(metrics.count(), 5);
  assert.equal(metrics.held(), 5 * 7, "series held over 5 samples of 1000 endpoints; want ep1's 7 in each");
  assert.deepEqual(metrics.total("gantry_jobs_ended_total", {endpoint: "ep1"}), 1);
  assert.equal(metrics.total("gantry_jobs_ended_total", {endpoint: "ep2"}), null, "another endpoint's series kept");

  metrics.watch("ep2"); // another endpoint: ep1's samples go
  assert.equal(metrics.count(), 0);
  await metrics.sampleNow();
  assert.equal(metrics.held(), 7);
  assert.deepEqual(metrics.total("gantry_jobs_ended_total", {endpoint: "ep2"}), 2);
  metrics.stop();
});

test("parse keeps every gantry_ series without an endpoint, and one endpoint's with it", () => {
  const text = exposition(3);
  assert.equal(metrics.parse(text).length, 3 * 7 + 2);
  const ep0 = metrics.parse(text, "ep0");
  assert.equal(ep0.length, 7);
  assert.ok(ep0.every((s) => s.labels.endpoint === "ep0"));
});

// charts.js's axis ticks: round values and round times.
const chartsSrc = readFileSync(new URL("../static/charts.js", import.meta.url), "utf8");
const charts = await import("data:text/javascript," + encodeURIComponent(chartsSrc));

test("value ticks are 1, 2 or 5 times a power of ten, from 0 to at least the maximum", () => {
  assert.deepEqual(charts.ticks(0, 7, 4), [0, 2, 4, 6, 8]);
  assert.deepEqual(charts.ticks(0, 3, 4), [0, 1, 2, 3]);
  assert.deepEqual(charts.ticks(0, 0.37, 4), [0, 0.1, 0.2, 0.3, 0.4]);
  assert.deepEqual(charts.ticks(0, 1234, 4), [0, 500, 1000, 1500]);
  assert.deepEqual(charts.ticks(0, 0, 4), [0, 0.5, 1], "an empty chart: 0 to 1");
  for (const hi of [0.003, 0.9, 1, 13, 99, 101, 4567, 2.5e6]) {
    const t = charts.ticks(0, hi, 4);
    const step = t[1] - t[0];
    const m = step / Math.pow(10, Math.floor(Math.log10(step) + 1e-9));
    assert.ok([1, 2, 5].some((x) => Math.abs(m - x) < 1e-9), `ticks(0, ${hi}) step ${step} is not 1, 2 or 5 x 10^n`);
    assert.ok(t[t.length - 1] >= hi && t.length - 1 <= 4, `ticks(0, ${hi}) = ${t}`);
  }
});

test("time ticks fall on round minutes and hours", () => {
  const MIN = 60000, HOUR = 60 * MIN;
  const t0 = Date.UTC(2026, 10, 27, 16, 37, 12); // 16:37:12 UTC
  // an hour by minute: every 10 minutes, on the tens
  const hour = charts.timeTicks(t0, t0 + HOUR, 6, 0);
  assert.deepEqual(hour.map((t) => new Date(t).toISOString().slice(11, 16)), ["16:40", "16:50", "17:00", "17:10", "17:20", "17:30"]);
  // a day: every 6 hours, at 00, 06, 12, 18 in the zone (here UTC+5:30)
  const day = charts.timeTicks(t0, t0 + 24 * HOUR, 6, 330);
  assert.equal(day.length, 4);
  for (const t of day) assert.equal((t + 330 * MIN) % (6 * HOUR), 0, new Date(t).toISOString());
  // five minutes of live samples: every minute
  const live = charts.timeTicks(t0, t0 + 5 * MIN, 6, 0);
  assert.deepEqual(live.map((t) => new Date(t).toISOString().slice(11, 19)), ["16:38:00", "16:39:00", "16:40:00", "16:41:00", "16:42:00"]);
});

test("job statuses have their own colours", () => {
  assert.equal(charts.seriesClass("COMPLETED", 3), "st-completed");
  assert.equal(charts.seriesClass("FAILED", 0), "st-failed");
  assert.equal(charts.seriesClass("TIMED_OUT", 0), "st-timed-out");
  assert.equal(charts.seriesClass("CANCELLED", 0), "st-cancelled");
  assert.equal(charts.seriesClass("p50", 1), "s1");
});

test("the server's history becomes chart series", async () => {
  const history = await import(new URL("../static/history.js", import.meta.url));
  const none = {count: 0, meanMs: 0, p50Ms: 0, p90Ms: 0, p99Ms: 0};
  const h = {range: "1h", stepSeconds: 60, buckets: [
    {start: "2026-11-27T17:00:00Z", completed: 0, failed: 0, timedOut: 0, cancelled: 0, delay: none, execution: none},
    {start: "2026-11-27T17:01:00Z", completed: 4, failed: 1, timedOut: 0, cancelled: 0,
      delay: {count: 5, meanMs: 20, p50Ms: 10, p90Ms: 40, p99Ms: 50}, execution: {count: 5, meanMs: 900, p50Ms: 750, p90Ms: 1500, p99Ms: 1950}},
  ]};
  const s = history.series(h);
  const t0 = Date.parse("2026-11-27T17:00:00Z");
  assert.deepEqual(Object.keys(s.ended), ["COMPLETED", "FAILED"], "statuses with no job in the range are left out, COMPLETED is always there");
  assert.deepEqual(s.ended.COMPLETED, [[t0, 0], [t0 + 60000, 4]]);
  assert.deepEqual(s.exec.p90, [[t0 + 60000, 1.5]], "times in seconds, steps without a job left out");
  assert.deepEqual([s.from, s.to], [t0, t0 + 120000]);
});
