// console.mjs drives the Gantry web console in Debian's Chromium through playwright-core (no
// browser download). It reads BASE (the server), KEY (an `all` key), OUT (the screenshot
// directory) and CHROMIUM (the browser, default /usr/bin/chromium). Each step prints one JSON
// line: {"step", "ok"} or {"step", "error"}; a step that fails saves failure-<step>.png.
// Every request must go to BASE: anything else is a failure (the console works offline).
import {chromium} from "playwright-core";
import {mkdirSync} from "node:fs";

const BASE = process.env.BASE, KEY = process.env.KEY, KEY2 = process.env.KEY2, OUT = process.env.OUT || "artifacts";
mkdirSync(OUT, {recursive: true});
const LONG = 60000;

const browser = await chromium.launch({executablePath: process.env.CHROMIUM || "/usr/bin/chromium", headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]});
const context = await browser.newContext({viewport: {width: 1280, height: 900}});
const page = await context.newPage();
page.setDefaultTimeout(LONG);
page.on("dialog", (d) => d.accept());

const problems = [];
const origin = new URL(BASE).origin;
await context.route("**/*", (route) => {
  const u = route.request().url();
  if (!u.startsWith(origin + "/") && !u.startsWith("data:")) {
    problems.push("a request left the server: " + u);
    return route.abort();
  }
  if (u.includes(KEY)) problems.push("the key is in a URL: " + u);
  return route.continue();
});
page.on("console", (m) => { if (m.type() === "error" && !m.text().startsWith("Failed to load resource")) problems.push("console error: " + m.text()); });
page.on("pageerror", (e) => problems.push("page error: " + e.message));

let failed = false;
const state = {};
async function step(name, fn) {
  if (failed) return console.log(JSON.stringify({step: name, error: "not run: an earlier step failed"}));
  try {
    await fn();
    if (problems.length) throw new Error(problems.join("; "));
    await page.screenshot({path: `${OUT}/${name}.png`, fullPage: true});
    console.log(JSON.stringify({step: name, ok: true}));
  } catch (e) {
    failed = true;
    await page.screenshot({path: `${OUT}/failure-${name}.png`, fullPage: true}).catch(() => {});
    console.log(JSON.stringify({step: name, error: String(e && e.stack || e)}));
  }
}

await step("csp", async () => {
  const resp = await page.goto(BASE + "/");
  const csp = resp.headers()["content-security-policy"] || "";
  if (!csp.includes("script-src 'self'") || csp.includes("unsafe-inline")) throw new Error("CSP is " + JSON.stringify(csp));
  if (await page.locator("script:not([src])").count()) throw new Error("the page has an inline script");
});

await step("signin-page", async () => {
  // the sign-in page says how to get a key
  await page.waitForSelector("#get-key");
  const text = await page.textContent("#get-key");
  if (!text.includes("gantry key create --data ./gantry-data --user NAME") || !text.includes("operator")) throw new Error("the sign-in page does not say how to get a key: " + text);
  await shots("signin");
});

await step("signin", async () => {
  await page.fill("#key", "gk_not-a-key");
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("#signin .error");
  await page.fill("#key", KEY);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("#create-endpoint");
  const stored = await page.evaluate(() => [sessionStorage.getItem("gantry.key"), JSON.stringify(localStorage), document.cookie]);
  if (stored[0] !== KEY || stored[1] !== "{}" || stored[2] !== "") throw new Error("the key is not kept in sessionStorage only: " + JSON.stringify(stored));
  if (page.url().includes(KEY)) throw new Error("the key is in the URL");
});

await step("create-endpoint", async () => {
  if (await page.inputValue("#create-max") !== "3") throw new Error("Workers max defaults to " + await page.inputValue("#create-max") + "; want the API's 3");
  await page.fill("#create-name", "console-echo");
  await page.selectOption("#create-template", "gantry-echo");
  if (await page.inputValue("#create-type") !== "QUEUE") throw new Error("choosing gantry-echo did not set the type QUEUE");
  await page.fill("#create-max", "1");
  await page.click("#create-endpoint button[type=submit]");
  await page.waitForURL(/#\/endpoints\/[^/]+\/playground$/);
  state.ep = decodeURIComponent(page.url().split("#/endpoints/")[1].split("/")[0]);
});

await step("create-lb-endpoint", async () => {
  // a LOAD_BALANCER endpoint from the form: the template sets the type and the scaling
  await page.goto(BASE + "/#/endpoints");
  await page.waitForSelector("#create-endpoint");
  await page.fill("#create-name", "console-web");
  await page.selectOption("#create-template", "gantry-http-echo");
  if (await page.inputValue("#create-type") !== "LOAD_BALANCER") throw new Error("choosing gantry-http-echo did not set the type LOAD_BALANCER");
  if (await page.inputValue("#create-scaling") !== "REQUEST_COUNT") throw new Error("a LOAD_BALANCER endpoint's scaling is not REQUEST_COUNT");
  // a refusal with one error shows it once
  await page.fill("#create-min", "5");
  await page.click("#create-endpoint button[type=submit]");
  await page.waitForSelector("#create-endpoint .error");
  const err = await page.textContent("#create-endpoint .error");
  if (!err.includes("workers.max") || err.split("must not exceed").length !== 2) throw new Error("the 422 is not shown once: " + JSON.stringify(err));
  await page.fill("#create-min", "0");
  await page.fill("#create-scaling-value", "2");
  await page.fill("#create-idle", "3");
  await page.fill("#create-gpu-count", "1");
  await page.selectOption("#create-flashboot", "FLASHBOOT");
  await page.click("#create-endpoint button[type=submit]");
  await page.waitForURL(/#\/endpoints\/[^/]+\/requests$/);
  state.lb = decodeURIComponent(page.url().split("#/endpoints/")[1].split("/")[0]);
  const ep = await apiCall("GET", `/v2/serverless/${state.lb}`);
  const want = {type: "LOAD_BALANCER", scaling: "REQUEST_COUNT 2", idle: 3, flashboot: "FLASHBOOT", gpus: 1, max: 3};
  const got = {type: ep.type, scaling: `${ep.scaling.type} ${ep.scaling.requestCount}`, idle: ep.workers.idleTimeout, flashboot: ep.flashboot, gpus: ep.gpu.count, max: ep.workers.max};
  if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error("created " + JSON.stringify(got) + "; want " + JSON.stringify(want));
  await page.waitForSelector(".tabs a[data-tab=requests]");
  const tabs = await page.$$eval(".tabs a", (as) => as.map((a) => a.dataset.tab));
  if (tabs.includes("playground") || tabs.includes("jobs") || !tabs.includes("requests")) throw new Error("a LOAD_BALANCER endpoint's tabs are " + tabs);
});

await step("lb-requests", async () => {
  // the request tester sends through /lb/{id}/... and shows status, latency, headers, body
  await page.selectOption("#lb-method", "POST");
  await page.fill("#lb-path", "/echo?from=console");
  await page.fill("#lb-body", JSON.stringify({hello: "lb"}));
  await page.click("#lb-send");
  await page.waitForSelector("#lb-status .badge", {timeout: 90000});
  const status = await page.textContent("#lb-status");
  if (!status.startsWith("200")) throw new Error("the echo answered " + status + ": " + await page.textContent("#lb-result"));
  if (!/^\d+ ms$/.test(await page.textContent("#lb-latency"))) throw new Error("no latency shown");
  if (!(await page.locator("#lb-headers tr").count())) throw new Error("no headers shown");
  const body = await page.textContent("#lb-answer");
  if (!body.includes("hello") || !body.includes('"/echo"') || !body.includes("from=console")) throw new Error("the answer's body shown is " + JSON.stringify(body));
  if (body.includes(KEY)) throw new Error("the worker got the key");
  await shots("lb-requests");
  await page.selectOption("#lb-method", "GET");
  await page.fill("#lb-path", "/status/503");
  await page.click("#lb-send");
  await page.waitForSelector("#lb-status .badge.bad:has-text('503')");
  await page.fill("#lb-path", "/status/404");
  await page.click("#lb-send");
  await page.waitForSelector("#lb-status .badge.warn:has-text('404')");
});

await step("lb-metrics", async () => {
  // /metrics has the endpoint's requests by status class, and the charts draw them
  const text = await (await fetch(BASE + "/metrics")).text();
  for (const code of ["2xx", "4xx", "5xx"]) {
    const re = new RegExp(`^gantry_lb_request_duration_seconds_count\\{code="${code}",endpoint="${state.lb}"\\} [1-9]`, "m");
    if (!re.test(text)) throw new Error(`/metrics has no ${code} count of ${state.lb}`);
  }
  await page.click("a[data-tab=metrics]");
  await page.waitForFunction(() => {
    const charts = [...document.querySelectorAll("#charts .chart")];
    const rate = charts.find((c) => c.dataset.title.startsWith("Requests per minute"));
    const lat = charts.find((c) => c.dataset.title.startsWith("Request latency"));
    return rate && +rate.dataset.points > 0 && rate.textContent.includes("2xx") && rate.textContent.includes("5xx") && lat && +lat.dataset.points > 0;
  }, null, {timeout: 45000});
  await shots("lb-metrics");
});

await step("lb-settings", async () => {
  // the settings form shows and saves what the API has: scaling, FlashBoot, pools, GPUs
  await page.click("a[data-tab=settings]");
  await page.waitForSelector("#settings");
  if (await page.inputValue("#set-flashboot") !== "FLASHBOOT") throw new Error("FlashBoot shown is " + await page.inputValue("#set-flashboot"));
  if (!(await page.isDisabled("#set-scaling option[value=QUEUE_DELAY]"))) throw new Error("QUEUE_DELAY is offered to a LOAD_BALANCER endpoint");
  if (await page.inputValue("#set-scaling-value") !== "2") throw new Error("the request count shown is " + await page.inputValue("#set-scaling-value"));
  if (await page.locator("#set-pools input:checked").count() !== 1) throw new Error("the endpoint's one pool is not the one checked");
  await page.selectOption("#set-flashboot", "OFF");
  await page.fill("#set-scaling-value", "3");
  await page.click("#settings button[type=submit]");
  await page.waitForSelector("#settings .notice:text('Saved.')");
  const ep = await apiCall("GET", `/v2/serverless/${state.lb}`);
  if (ep.flashboot !== "OFF" || ep.scaling.requestCount !== 3) throw new Error("saved " + JSON.stringify({flashboot: ep.flashboot, scaling: ep.scaling}));
  await shots("lb-settings");
});

await step("endpoint-list", async () => {
  await page.goto(BASE + "/#/endpoints");
  await page.waitForSelector(`#endpoints tr[data-id="${state.ep}"] .health .badge`);
  const types = await page.$$eval("#endpoints tbody tr", (rows) => Object.fromEntries(rows.map((r) => [r.dataset.id, r.querySelector("td.type").textContent])));
  if (types[state.ep] !== "Queue" || types[state.lb] !== "Load balancer") throw new Error("the Type column says " + JSON.stringify(types));
  await shots("endpoints");
});

await step("playground", async () => {
  await page.goto(BASE + `/#/endpoints/${state.ep}/playground`);
  await page.fill("#pg-input", JSON.stringify({stream: ["part-one", "part-two"], sleep_ms: 800}));
  await page.click("#pg-send");
  await page.waitForSelector("#pg-status .badge:text('COMPLETED')", {timeout: 90000});
  const stream = await page.textContent("#pg-stream");
  const output = await page.textContent("#pg-output");
  if (!stream.includes("part-one") || !stream.includes("part-two")) throw new Error("stream parts shown: " + JSON.stringify(stream));
  if (!output.includes("part-two")) throw new Error("output shown: " + JSON.stringify(output));
  state.job = await page.textContent("#pg-status a.mono");
});

await step("jobs-list", async () => {
  await page.click("a[data-tab=jobs]");
  await page.waitForSelector("#jobs table");
  await page.selectOption("#jobs-status", "COMPLETED");
  await page.waitForSelector(`#jobs tr[data-id="${state.job}"]`);
  await page.click(`#jobs tr[data-id="${state.job}"]`);
  await page.waitForSelector("#job-output");
  if (!(await page.textContent("#job-output")).includes("part-one")) throw new Error("the job's output is not shown");
});

await step("job-detail", async () => {
  await page.goto(BASE + `/#/endpoints/${state.ep}/jobs/${state.job}`);
  await page.waitForSelector("#job-detail .badge:text('COMPLETED')");
  // a COMPLETED job can be neither cancelled nor retried: both buttons are disabled
  if (!(await page.isDisabled("#job-retry")) || !(await page.isDisabled("#job-cancel"))) throw new Error("Cancel or Retry is enabled on a COMPLETED job");
  await shots("job-detail");
});

// The API as a client uses it, from Node (not the page): the key in the header.
async function apiCall(method, path, body) {
  const resp = await fetch(BASE + path, {method, headers: {Authorization: "Bearer " + KEY, "Content-Type": "application/json"},
    body: body === undefined ? undefined : JSON.stringify(body)});
  if (!resp.ok) throw new Error(`${method} ${path}: ${resp.status} ${await resp.text()}`);
  return resp.json();
}

// shots saves the page at 1400 and 390 px wide (name-1400.png, name-390.png).
async function shots(name) {
  for (const width of [1400, 390]) {
    await page.setViewportSize({width, height: 900});
    await page.evaluate(() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))); // laid out at the new width
    await page.screenshot({path: `${OUT}/${name}-${width}.png`, fullPage: true});
    if (width === 390) await noClipping(name);
  }
  await page.setViewportSize({width: 1280, height: 900});
}

// noClipping checks, at a phone's width, that the page does not run off the screen's right
// edge and that every table either fits or scrolls sideways inside its wrapper.
async function noClipping(name) {
  const bad = await page.evaluate(() => {
    const out = [];
    const w = document.documentElement.clientWidth;
    if (document.documentElement.scrollWidth > w + 1) out.push(`the page is ${document.documentElement.scrollWidth} px wide`);
    for (const t of document.querySelectorAll("main table")) {
      const wrap = t.closest(".table-scroll");
      const right = (wrap || t).getBoundingClientRect().right;
      if (right > w + 1) out.push(`table ${t.id || ""} ends at ${Math.round(right)} px`);
      if (!wrap && t.scrollWidth > t.clientWidth + 1) out.push(`table ${t.id || ""} is clipped`);
    }
    return out;
  });
  if (bad.length) throw new Error(`${name} at 390 px: ` + bad.join("; "));
}

await step("stream-not-taken", async () => {
  // A client streams a job while its job page is open: the client gets every part, and the
  // page shows them all too (the console reads with peek=true and takes nothing).
  const parts = ["p1", "p2", "p3", "p4", "p5", "p6"];
  const {id} = await apiCall("POST", `/v2/${state.ep}/run`, {input: {stream: parts, sleep_ms: 6000}});
  await page.goto(BASE + `/#/endpoints/${state.ep}/jobs/${id}`);
  await page.waitForSelector("#job-detail");
  const got = [];
  for (const deadline = Date.now() + 90000; Date.now() < deadline;) {
    const s = await apiCall("GET", `/v2/${state.ep}/stream/${id}`);
    for (const c of s.stream) got.push(c.output);
    if (["COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"].includes(s.status)) {
      for (const c of (await apiCall("GET", `/v2/${state.ep}/stream/${id}`)).stream) got.push(c.output);
      break;
    }
  }
  if (got.join(" ") !== parts.join(" ")) throw new Error("the client got " + JSON.stringify(got) + " while the job page was open; want every part");
  await page.waitForSelector("#job-detail .badge:text('COMPLETED')");
  await page.waitForFunction((n) => (document.querySelector("#job-stream") || {}).textContent?.trim().split("\n").length === n, parts.length);
  const shown = await page.textContent("#job-stream");
  for (const p of parts) if (!shown.includes(p)) throw new Error("the job page does not show " + p + ": " + JSON.stringify(shown));
});

await step("playground-live", async () => {
  // the badge follows the job (queued or running, then done), a progress value shows
  await page.goto(BASE + `/#/endpoints/${state.ep}/playground`);
  await page.fill("#pg-input", JSON.stringify({progress: [{percent: 50}], sleep_ms: 4000, echo: "done"}));
  await page.click("#pg-send");
  await page.waitForSelector("#pg-status .badge:text('IN_PROGRESS')", {timeout: 60000});
  await page.waitForSelector("#pg-progress:has-text('50')");
  await page.waitForSelector("#pg-status .badge:text('COMPLETED')", {timeout: 60000});
  if (await page.locator("#pg-stream").isVisible()) throw new Error("an empty Stream box is shown for a job that streamed nothing");
  if (!(await page.textContent("#pg-output")).includes("done")) throw new Error("the output is not shown");
  await shots("playground");
});

await step("failed-job", async () => {
  // a failed job's error is shown as an error; Retry is enabled, Cancel is not
  await page.fill("#pg-input", JSON.stringify({error: "boom"}));
  await page.click("#pg-send");
  await page.waitForSelector("#pg-error:has-text('boom')", {timeout: 60000});
  const id = await page.textContent("#pg-status a.mono");
  await page.goto(BASE + `/#/endpoints/${state.ep}/jobs/${id}`);
  await page.waitForSelector("#job-detail .badge:text('FAILED')");
  if (!(await page.textContent("#job-error.error")).includes("boom")) throw new Error("the error is not shown as an error");
  if (await page.locator("#job-stream").count()) throw new Error("an empty Stream box is shown");
  if (await page.isDisabled("#job-retry") || !(await page.isDisabled("#job-cancel"))) throw new Error("a FAILED job: Retry must be enabled and Cancel disabled");
  await shots("job-failed");
  await page.click("#job-retry");
  await page.waitForSelector(".notice:text('Queued again.')");
  await page.waitForSelector("#job-detail .badge:text('FAILED')", {timeout: 60000}); // it fails again
});

await step("jobs-refresh", async () => {
  // the job list shows a job sent elsewhere while it is open, without a reload
  await page.goto(BASE + `/#/endpoints/${state.ep}/jobs`);
  await page.waitForSelector("#jobs table");
  const {id} = await apiCall("POST", `/v2/${state.ep}/run`, {input: {echo: "later"}});
  await page.waitForSelector(`#jobs tr[data-id="${id}"]`, {timeout: 15000});
  await page.waitForSelector(`#jobs tr[data-id="${id}"][data-status="COMPLETED"]`, {timeout: 60000});
});

await step("api-tab", async () => {
  await context.grantPermissions(["clipboard-read", "clipboard-write"], {origin});
  await page.click("a[data-tab=api]");
  await page.waitForSelector("#request-urls tr[data-op=run]");
  const run = await page.textContent("#request-urls tr[data-op=run] .url");
  if (run !== `${BASE}/v2/${state.ep}/run`) throw new Error("the run URL shown is " + JSON.stringify(run));
  for (const id of ["curl", "python", "js"]) {
    const text = await page.textContent("#snippet-" + id);
    if (!text.includes(state.ep) || !text.includes("GANTRY_API_KEY")) throw new Error(`the ${id} snippet does not name the endpoint and the key variable: ${text}`);
  }
  if ((await page.textContent("main")).includes(KEY)) throw new Error("the page shows the real key");
  if (!(await page.textContent("#snippet-python")).includes("runpod.Endpoint(")) throw new Error("the Python snippet does not use the runpod SDK");
  await page.click("#copy-curl");
  await page.waitForSelector("#api :text('Copied.')");
  const copied = await page.evaluate(() => navigator.clipboard.readText());
  if (copied !== await page.textContent("#snippet-curl")) throw new Error("Copy put something else on the clipboard: " + copied);
  await shots("api");
});

await step("workers", async () => {
  await page.click("a[data-tab=workers]");
  await page.waitForSelector("#workers tr[data-id]");
  await page.waitForFunction(() => (document.querySelector("#log-lines") || {}).textContent?.includes("polling for jobs"), null, {timeout: 30000});
  // GPUs as GPUs (a count and what they are), not slot indices; the jobs column says what it counts
  const gpus = await page.textContent("#workers tbody tr td.gpus");
  if (!/^\d+ (× .+|CPU slots?)$/.test(gpus)) throw new Error("the GPUs cell says " + JSON.stringify(gpus));
  const heads = await page.$$eval("#workers th", (ths) => ths.map((t) => t.textContent));
  if (!heads.includes("Jobs held")) throw new Error("the workers table's columns are " + heads);
});

await step("metrics-history", async () => {
  // a Metrics tab opened afresh already shows the jobs run above (the server's history), in
  // their statuses' colours, before /metrics could have been sampled twice
  await page.goto(BASE + `/#/endpoints/${state.ep}/metrics`);
  await page.reload();
  const opened = Date.now();
  await page.waitForFunction(() => {
    const ended = [...document.querySelectorAll("#charts .chart")].find((c) => c.dataset.title.startsWith("Jobs ended"));
    return ended && +ended.dataset.max >= 1 && ended.querySelector(".legend .st-failed");
  }, null, {timeout: 4000});
  if (Date.now() - opened > 4500) throw new Error("the history took more than a sample interval to show");
  const colours = await page.evaluate(() => {
    const ended = [...document.querySelectorAll("#charts .chart")].find((c) => c.dataset.title.startsWith("Jobs ended"));
    const stroke = (cls) => getComputedStyle(ended.querySelector("polyline." + cls)).stroke;
    return {completed: stroke("st-completed"), failed: stroke("st-failed"), xticks: ended.dataset.xticks};
  });
  if (colours.completed !== "rgb(22, 163, 74)" || colours.failed !== "rgb(192, 57, 43)") throw new Error("status colours: " + JSON.stringify(colours));
  if (!colours.xticks.split(" ").every((t) => /^\d\d:\d0$/.test(t))) throw new Error("time ticks are not at round minutes: " + colours.xticks);
  await shots("metrics-history");
});

await step("metrics", async () => {
  await page.click("a[data-tab=metrics]");
  // real data: the execution-time percentiles of the jobs run above, and worker states over
  // several samples (a line)
  await page.waitForFunction(() => {
    const charts = [...document.querySelectorAll("#charts .chart")];
    const exec = charts.find((c) => c.dataset.title.startsWith("Execution time"));
    const workers = charts.find((c) => c.dataset.title.startsWith("Workers by state"));
    return exec && +exec.dataset.points > 0 && exec.querySelector("circle") && workers && workers.querySelector("polyline");
  }, null, {timeout: 45000});
});

await step("worker-exited", async () => {
  // a load balancer's workers table counts requests in flight
  await page.goto(BASE + `/#/endpoints/${state.lb}/workers`);
  await page.waitForSelector("#workers thead");
  if (!(await page.textContent("#workers thead")).includes("Requests in flight")) throw new Error("a load balancer's workers table does not count requests in flight");
  // the queue endpoint's worker retires after its 10 s idle timeout: its log says why it
  // exited and is not "followed live"
  await page.goto(BASE + `/#/endpoints/${state.ep}/workers`);
  await page.waitForSelector("#workers tr[data-status=EXITED]", {timeout: 90000});
  await page.click("#workers tr[data-status=EXITED]");
  await page.waitForSelector("#exit-reason");
  const reason = await page.textContent("#exit-reason");
  if (!reason.startsWith("It exited")) throw new Error("the exit reason says " + JSON.stringify(reason));
  if ((await page.textContent("#worker-log h2")).includes("followed live")) throw new Error("an exited worker's log is marked followed live");
  await shots("worker-exited");
});

await step("usage", async () => {
  await page.goto(BASE + "/#/usage");
  await page.waitForSelector("#models tbody tr");
  // a ready-made model runs from the console: its output and cost
  await page.selectOption("#run-model", "gantry-image");
  if (!(await page.inputValue("#run-input")).includes("prompt")) throw new Error("no example input for the model");
  await page.click("#run-send");
  await page.waitForSelector("#run-output", {timeout: 90000});
  if (!(await page.textContent("#run-output")).includes("image_url")) throw new Error("the model's output is not shown");
  if (!/\d+\.\d+ USD/.test(await page.textContent("#run-cost"))) throw new Error("the cost shown is " + await page.textContent("#run-cost"));
  const job = (await page.textContent("#run-result .mono")).trim();
  await page.waitForSelector(`#usage-items td:text("${job}")`); // the charge is listed without a reload
  await shots("usage");
});

await step("volumes", async () => {
  await page.goto(BASE + "/#/volumes");
  await page.waitForSelector("#create-volume");
  await page.fill("#volume-name", "console-weights");
  await page.fill("#volume-size", "10");
  await page.click("#create-volume button[type=submit]");
  await page.waitForSelector("#volume-result .notice, #volume-result .error");
  if (await page.locator("#volume-result .error").count()) {
    // a server none of whose pools keeps volumes says so, at the data center
    const text = await page.textContent("#volume-result .error");
    if (!text.includes("store network volumes")) throw new Error("creating a volume failed: " + text);
    return shots("volumes-unsupported");
  }
  const id = await page.$eval("#volumes tbody tr:last-child", (r) => r.dataset.id);
  await page.fill(`input[data-resize="${id}"]`, "20");
  await page.click(`button[data-grow="${id}"]`);
  await page.waitForFunction((id) => document.querySelector(`#volumes tr[data-id="${id}"] .size`)?.textContent === "20 GB", id);
  await page.fill(`input[data-resize="${id}"]`, "15"); // a volume never shrinks: the API's 400 shows
  await page.click(`button[data-grow="${id}"]`);
  await page.waitForSelector("#volume-result .error");
  if (!(await page.textContent("#volume-result .error")).includes("only grows")) throw new Error("a shrink is not refused with why");
  await shots("volumes");
  await page.click(`button[data-delete="${id}"]`); // the confirm dialog is accepted
  await page.waitForFunction((id) => !document.querySelector(`#volumes tr[data-id="${id}"]`), id);
});

await step("keys", async () => {
  await page.goto(BASE + "/#/keys");
  await page.waitForSelector("#keys table");
  await page.selectOption("#key-scope", "all");
  await page.click("#create-key button[type=submit]");
  await page.waitForSelector("#new-key input");
  state.newKey = await page.inputValue("#new-key input");
  state.newKeyId = await page.getAttribute("#new-key", "data-id");
  if (!state.newKey.startsWith("gk_")) throw new Error("the new key's secret is not shown");
  await page.waitForSelector(`#keys tr[data-id="${state.newKeyId}"]`);
  // revoke the key this session signed in with (every key but the new one): signed out
  const others = await page.$$eval("#keys tr[data-id]", (rows, keep) => rows.map((r) => r.dataset.id).filter((id) => id !== keep), state.newKeyId);
  if (!others.length) throw new Error("the signed-in key is not listed");
  for (const id of others) {
    if (!(await page.locator(`button[data-revoke="${id}"]`).count())) break;
    await page.click(`button[data-revoke="${id}"]`);
    // signed out, or this key gone from the list: only then is the next button where it was
    await page.waitForFunction((id) => document.querySelector("#signin") || !document.querySelector(`button[data-revoke="${id}"]`), id);
  }
  await page.waitForSelector("#signin .notice");
  if (await page.evaluate(() => sessionStorage.getItem("gantry.key"))) throw new Error("the revoked key is still stored");
  // the key made with the revoked one went with it (a child never outlives its parent)
  await page.fill("#key", state.newKey);
  await page.click("#signin button[type=submit]");
  await page.getByText("That key was refused.").waitFor();
  // another user's key still signs in
  await page.fill("#key", KEY2);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("#create-endpoint");
});

await browser.close();
process.exit(failed ? 1 : 0);
