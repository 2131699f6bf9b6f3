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
