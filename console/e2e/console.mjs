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
  await page.fill("#create-name", "console-echo");
  await page.selectOption("#create-template", "gantry-echo");
  await page.fill("#create-max", "1");
  await page.click("#create-endpoint button[type=submit]");
  await page.waitForURL(/#\/endpoints\/[^/]+\/playground$/);
  state.ep = decodeURIComponent(page.url().split("#/endpoints/")[1].split("/")[0]);
});

await step("endpoint-list", async () => {
  await page.goto(BASE + "/#/endpoints");
  await page.waitForSelector(`#endpoints tr[data-id="${state.ep}"] .health .badge`);
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
  }
  await page.setViewportSize({width: 1280, height: 900});
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

await step("usage", async () => {
  await page.goto(BASE + "/#/usage");
  await page.waitForSelector("#models tbody tr");
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
    // the revoke's outcome, before the next: signed out, or the row gone from the list
    await page.waitForFunction((id) => document.querySelector("#signin") || !document.querySelector(`#keys tr[data-id="${id}"]`), id);
  }
  await page.waitForSelector("#signin .notice");
  if (await page.evaluate(() => sessionStorage.getItem("gantry.key"))) throw new Error("the revoked key is still stored");
  // the key made with the revoked one went with it (a child never outlives its parent)
  await page.fill("#key", state.newKey);
  await page.click("#signin button[type=submit]");
  await page.getByText("That key was refused.").waitFor();
  // a key issued apart from it still signs in
  await page.fill("#key", KEY2);
  await page.click("#signin button[type=submit]");
  await page.waitForSelector("#create-endpoint");
});

await browser.close();
process.exit(failed ? 1 : 0);
