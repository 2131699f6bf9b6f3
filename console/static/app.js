// app.js: the Gantry console. Pages are chosen by the URL's hash (#/endpoints, #/keys, ...);
// each view builds its DOM with h() from what the API answers. Views that follow something
// live (a job, a worker's log, the charts) register a stopper that runs when the page changes.

import {h, replace, errorBox, badge, statusKind, ms, json} from "./dom.js";
import * as api from "./api.js";
import * as metrics from "./metrics.js";
import * as history from "./history.js";
import {lineChart} from "./charts.js";
import {volumesView} from "./volumes.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
let stoppers = [];
let flash = "";     // a message for the next page rendered (render takes it)
let generation = 0; // of render calls: a slow view finishing after a newer render is dropped
function onLeave(fn) { stoppers.push(fn); }
function every(msec, fn) { const t = setInterval(fn, msec); onLeave(() => clearInterval(t)); }

// submitted remembers the inputs of jobs sent from the playground in this tab: the API hands a
// job's input back to its webhook only.
const submitted = new Map();

api.onUnauthorized(() => signOut("Your key was refused (revoked or expired): sign in again."));

function signOut(message) {
  if (!api.key()) return; // signed out already (several calls refused at once)
  api.clearKey();
  metrics.stop();
  flash = message;
  if (location.hash === "#/signin") render();
  else location.hash = "#/signin"; // hashchange renders
}

document.getElementById("signout").addEventListener("click", () => signOut("Signed out."));
window.addEventListener("hashchange", () => render());
queueMicrotask(render); // once the whole module has run (the views' constants below are set)

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean).map(decodeURIComponent);
  return parts.length ? parts : ["endpoints"];
}

async function render() {
  for (const s of stoppers) s();
  stoppers = [];
  const gen = ++generation;
  const message = flash;
  flash = "";
  const parts = route();
  if (!api.key() || parts[0] === "signin") {
    nav.hidden = true;
    return replace(main, signInView(message));
  }
  nav.hidden = false;
  metrics.start();
  metrics.watch(parts[0] === "endpoints" && parts.length > 1 ? parts[1] : null); // its series alone
  for (const a of nav.querySelectorAll("a")) a.classList.toggle("active", a.dataset.nav === parts[0]);
  const view = {endpoints: parts.length > 1 ? endpointView : endpointsView, keys: keysView, usage: usageView, volumes: volumesView}[parts[0]];
  replace(main, h("p", {class: "muted"}, "Loading…"));
  try {
    const page = await (view || notFoundView)(parts);
    if (gen === generation) replace(main, message ? h("div", {class: "notice"}, message) : null, page);
  } catch (e) {
    if (e.status !== 401 && gen === generation) replace(main, errorBox(e));
  }
}

function notFoundView() { return h("p", {}, "No such page. ", h("a", {href: "#/endpoints"}, "Endpoints")); }

// --- sign in ---------------------------------------------------------------------------

function signInView(message) {
  const input = h("input", {type: "password", id: "key", name: "key", autocomplete: "off", required: true, placeholder: "your API key"});
  const out = h("div");
  const form = h("form", {class: "card signin", id: "signin", onsubmit: async (ev) => {
    ev.preventDefault();
    const k = input.value.trim();
    try {
      await api.get("/v2/serverless?limit=1", {key: k}); // any management call checks the key
      api.setKey(k);
      input.value = "";
      if (location.hash === "#/endpoints") render();
      else location.hash = "#/endpoints"; // hashchange renders
    } catch (e) {
      replace(out, errorBox(e.status === 401 ? new Error("That key was refused.") : e));
    }
  }},
  h("h1", {}, "Sign in"),
  message ? h("div", {class: "notice"}, message) : null,
  h("p", {class: "muted"}, "Your key stays in this tab's session storage and is sent only to this server, in the Authorization header."),
  h("p", {}, input), h("button", {type: "submit"}, "Sign in"), out,
  h("div", {class: "howto", id: "get-key"}, h("h2", {}, "No key yet?"),
    h("p", {}, "Whoever runs this server makes one, on its machine, with its data directory:"),
    h("pre", {class: "snippet"}, "gantry key create --data ./gantry-data --user NAME"),
    h("p", {class: "muted"}, "It prints the key once. Or ask the server's operator for one. Once signed in, the Keys page makes more.")));
  setTimeout(() => input.focus());
  return form;
}

// --- endpoints ---------------------------------------------------------------------------

async function endpointsView() {
  const list = await api.get("/v2/serverless?limit=100");
  const rows = h("tbody");
  const table = h("table", {id: "endpoints"}, h("thead", {}, h("tr", {}, ["Name", "Id", "Type", "Image", "Workers", "Jobs", "Health"].map((t) => h("th", {}, t)))), rows);
  for (const ep of list.items) {
    const health = h("td", {class: "health"}, h("span", {class: "muted"}, "…"));
    const jobs = h("td", {}, "…");
    const href = "#/endpoints/" + api.enc(ep.id) + "/" + defaultTab(ep);
    rows.appendChild(h("tr", {class: "clickable", dataset: {id: ep.id, type: ep.type || "QUEUE"}, onclick: () => { location.hash = href; }},
      h("td", {}, h("a", {href}, ep.name)), h("td", {class: "mono"}, ep.id), h("td", {class: "type"}, isLB(ep) ? "Load balancer" : "Queue"),
      h("td", {class: "mono"}, ep.image || ""), h("td", {}, `${ep.workers.min}–${ep.workers.max}`), jobs, health));
    fillHealth(ep, health, jobs);
  }
  return h("div", {},
    h("div", {class: "row"}, h("h1", {}, "Endpoints"), h("span", {class: "muted"}, list.items.length + " endpoint(s)")),
    list.items.length ? scroller(table) : h("p", {class: "muted"}, "No endpoints yet: create one below."),
    await createForm());
}

// scroller wraps a table so that a narrow screen scrolls it sideways instead of clipping it.
function scroller(table) { return h("div", {class: "table-scroll"}, table); }

const isLB = (ep) => ep.type === "LOAD_BALANCER";
// defaultTab is the tab an endpoint opens on: the playground of a queue, the request tester of
// a load balancer.
const defaultTab = (ep) => isLB(ep) ? "requests" : "playground";

// healthBadges are an endpoint's workers by state, and what is wrong, as badges.
function healthBadges(hl) {
  const w = hl.workers || {};
  const out = [];
  const add = (n, label, kind) => { if (n) out.push(badge(`${n} ${label}`, kind)); };
  add(w.running, "running", "ok"); add(w.idle, "idle", "ok"); add(w.initializing, "initializing", "info");
  add(w.suspended, "suspended", "idle"); add(w.throttled, "throttled", "warn"); add(w.unhealthy, "unhealthy", "bad");
  if (!out.length) out.push(badge("scaled to zero", "idle"));
  if (hl.reason) out.push(h("div", {class: "error"}, hl.reason));
  return out;
}

async function fillHealth(ep, cell, jobsCell) {
  try {
    const hl = await api.get("/v2/" + api.enc(ep.id) + "/health");
    replace(cell, healthBadges(hl));
    replace(jobsCell, isLB(ep) ? h("span", {class: "muted"}, "requests: see Metrics")
      : `${hl.jobs.inQueue} queued · ${hl.jobs.inProgress} running · ${hl.jobs.completed} done · ${hl.jobs.failed} failed`);
  } catch (e) {
    replace(cell, badge("health unavailable", "warn"));
  }
}

const DEFAULT_WORKERS_MAX = 3; // the API's default (core.DefaultWorkersMax)
const FLASHBOOT = ["OFF", "FLASHBOOT", "PRIORITY_FLASHBOOT"];

// servesHTTP says whether a template's container serves HTTP (a port NNN/http): such a
// template is for a LOAD_BALANCER endpoint, any other for a QUEUE one.
const servesHTTP = (t) => (t.ports || []).some((p) => p.endsWith("/http"));

// poolChecks are a checkbox per pool of the GPU catalog, in its order (the order the API tries
// them in), those of chosen checked; picked() lists the checked ones.
function poolChecks(id, gpus, chosen) {
  const box = h("div", {id, class: "checks"}, (gpus || []).map((g) => h("label", {class: "check"},
    h("input", {type: "checkbox", value: g.pool, checked: chosen.includes(g.pool)}),
    ` ${g.pool}: ${g.displayName} (${g.count} ${g.id === "CPU" ? "CPU slots" : "GPUs"})`)));
  box.picked = () => [...box.querySelectorAll("input:checked")].map((i) => i.value);
  return box;
}

// scalingFields are the scaling type and value fields of an endpoint form, and the idle
// timeout, kept consistent with its type: a LOAD_BALANCER endpoint scales on REQUEST_COUNT
// only, and the idle timeout does not apply to a QUEUE endpoint scaling on REQUEST_COUNT.
function scalingFields(prefix, typeOf, scaling, idle) {
  const f = {
    scaling: h("select", {id: prefix + "-scaling"}, ["QUEUE_DELAY", "REQUEST_COUNT"].map((s) => h("option", {value: s, selected: scaling.type === s}, s))),
    value: h("input", {id: prefix + "-scaling-value", type: "number", value: scaling.queueDelay || scaling.requestCount || 4}),
    valueLabel: h("label", {for: prefix + "-scaling-value"}),
    idle: h("input", {id: prefix + "-idle", type: "number", min: 1, max: 3600, value: idle || "", placeholder: "10 (the default)"}),
  };
  f.sync = () => {
    const lb = typeOf() === "LOAD_BALANCER";
    f.scaling.options[0].disabled = lb;
    if (lb) f.scaling.value = "REQUEST_COUNT";
    const qd = f.scaling.value === "QUEUE_DELAY";
    replace(f.valueLabel, qd ? "Queue delay (s)" : "Requests per worker");
    f.value.min = qd ? 0.5 : 1;
    f.value.step = qd ? 0.5 : 1;
    f.idle.disabled = !lb && !qd;
    f.idle.title = f.idle.disabled ? "does not apply to a QUEUE endpoint scaling on REQUEST_COUNT" : "";
    if (f.idle.disabled) f.idle.value = "";
  };
  f.scaling.addEventListener("change", f.sync);
  f.body = () => f.scaling.value === "QUEUE_DELAY" ? {type: "QUEUE_DELAY", queueDelay: +f.value.value} : {type: "REQUEST_COUNT", requestCount: +f.value.value};
  f.sync();
  return f;
}

async function createForm() {
  const [templates, gpus, vols] = await Promise.all([api.get("/v2/catalog/templates").catch(() => []), api.get("/v2/catalog/gpus").catch(() => []),
    api.get("/v2/network-volumes").then((l) => l.networkVolumes || []).catch(() => [])]);
  const serverless = (templates || []).filter((t) => t.isServerless);
  const out = h("div");
  const hint = h("span", {class: "muted", id: "create-type-hint"});
  const f = {
    name: h("input", {id: "create-name", name: "name", required: true, maxlength: 191, placeholder: "my-endpoint"}),
    template: h("select", {id: "create-template", name: "template"}, h("option", {value: ""}, "(none: give an image)"),
      serverless.map((t) => h("option", {value: t.id}, `${t.name} (${t.id})`))),
    image: h("input", {id: "create-image", name: "image", placeholder: "registry/image:tag (unless a template is chosen)"}),
    type: h("select", {id: "create-type", name: "type"}, h("option", {value: "QUEUE"}, "QUEUE: jobs in a queue"), h("option", {value: "LOAD_BALANCER"}, "LOAD_BALANCER: HTTP requests to workers")),
    pools: poolChecks("create-pools", gpus, (gpus || []).slice(0, 1).map((g) => g.pool)),
    gpuCount: h("input", {id: "create-gpu-count", type: "number", min: 1, max: 64, value: 1}),
    min: h("input", {id: "create-min", type: "number", min: 0, value: 0}),
    max: h("input", {id: "create-max", type: "number", min: 0, value: DEFAULT_WORKERS_MAX}),
    timeout: h("input", {id: "create-timeout", type: "number", min: 1, placeholder: "300 (the default)"}),
    flashboot: h("select", {id: "create-flashboot"}, FLASHBOOT.map((v) => h("option", {value: v}, v))),
    volumes: h("select", {id: "create-volumes", multiple: true, size: Math.min(Math.max(vols.length, 1), 4)},
      vols.map((v) => h("option", {value: v.id}, `${v.name} (${v.id}, ${v.dataCenter}, ${v.size} GB)`))),
  };
  const sc = scalingFields("create", () => f.type.value, {type: "QUEUE_DELAY", queueDelay: 4});
  f.type.addEventListener("change", () => { replace(hint); sc.sync(); });
  f.template.addEventListener("change", () => { // a template's container says which type it is for
    const t = serverless.find((x) => x.id === f.template.value);
    if (!t) return replace(hint);
    f.type.value = servesHTTP(t) ? "LOAD_BALANCER" : "QUEUE";
    replace(hint, servesHTTP(t) ? `set from the template: it serves HTTP (${t.ports.join(", ")})` : "set from the template: a queue worker");
    sc.sync();
  });
  return h("form", {class: "card grid", id: "create-endpoint", onsubmit: async (ev) => {
    ev.preventDefault();
    const pools = f.pools.picked();
    if (!pools.length) return replace(out, errorBox(new Error("Pools: choose at least one.")));
    const body = {name: f.name.value.trim(), type: f.type.value, gpu: {pools, count: +f.gpuCount.value || 1},
      scaling: sc.body(), workers: {min: +f.min.value, max: +f.max.value}, flashboot: f.flashboot.value};
    if (sc.idle.value) body.workers.idleTimeout = +sc.idle.value;
    if (f.timeout.value) body.timeout = Math.round(+f.timeout.value * 1000);
    if (f.template.value) body.templateId = f.template.value;
    if (f.image.value.trim()) body.image = f.image.value.trim();
    const volumes = [...f.volumes.selectedOptions].map((o) => o.value);
    if (volumes.length) body.networkVolumes = volumes;
    try {
      const ep = await api.post("/v2/serverless", body);
      flash = api.warnings().join(" "); // a pool that cannot mount a volume says what it does
      location.hash = "#/endpoints/" + api.enc(ep.id) + "/" + defaultTab(ep);
    } catch (e) { replace(out, errorBox(e)); }
  }},
  h("h2", {class: "full"}, "Create an endpoint"),
  h("label", {for: "create-name"}, "Name"), f.name,
  h("label", {for: "create-template"}, "Template"), f.template,
  h("label", {for: "create-image"}, "Image"), f.image,
  h("label", {for: "create-type"}, "Type"), h("div", {class: "row"}, f.type, hint),
  h("label", {}, "Pools (tried in order)"), f.pools,
  h("label", {for: "create-gpu-count"}, "GPUs per worker"), f.gpuCount,
  h("label", {for: "create-min"}, "Workers min"), f.min,
  h("label", {for: "create-max"}, "Workers max"), f.max,
  h("label", {for: "create-scaling"}, "Scaling"), sc.scaling,
  sc.valueLabel, sc.value,
  h("label", {for: "create-idle"}, "Idle timeout (s)"), sc.idle,
  h("label", {for: "create-timeout"}, "Execution timeout (s)"), f.timeout,
  h("label", {for: "create-flashboot"}, "FlashBoot"), f.flashboot,
  h("label", {for: "create-volumes"}, "Network volumes (at /runpod-volume)"),
  vols.length ? f.volumes : h("span", {class: "muted"}, "none yet (", h("a", {href: "#/volumes"}, "Volumes"), " makes one)"),
  h("div", {class: "full"}, h("button", {type: "submit"}, "Create")), h("div", {class: "full"}, out));
}

// --- one endpoint ----------------------------------------------------------------------------

// tabsOf are an endpoint's tabs: a queue's take jobs (playground, jobs), a load balancer's
// take HTTP requests (the request tester).
const tabsOf = (ep) => isLB(ep) ? ["settings", "requests", "workers", "metrics", "api"] : ["settings", "playground", "jobs", "workers", "metrics", "api"];
const TAB_LABELS = {api: "API"};

async function endpointView(parts) {
  const id = parts[1];
  const ep = await api.get("/v2/serverless/" + api.enc(id));
  const tabs = tabsOf(ep);
  const tab = tabs.includes(parts[2]) ? parts[2] : defaultTab(ep);
  const base = "#/endpoints/" + api.enc(id) + "/";
  const body = await {settings: settingsTab, playground: playgroundTab, jobs: jobsTab, requests: requestsTab, workers: workersTab, metrics: metricsTab, api: apiTab}[tab](ep, parts.slice(3));
  return h("div", {},
    h("div", {class: "row"}, h("h1", {}, ep.name), h("span", {class: "mono muted"}, ep.id), h("span", {class: "muted", id: "ep-type"}, ep.type || "QUEUE")),
    h("div", {class: "tabs"}, tabs.map((t) => h("a", {href: base + t, class: t === tab ? "active" : null, dataset: {tab: t}}, TAB_LABELS[t] || t[0].toUpperCase() + t.slice(1)))),
    body);
}

async function settingsTab(ep) {
  const gpus = await api.get("/v2/catalog/gpus").catch(() => []);
  const out = h("div");
  const f = {
    name: h("input", {id: "set-name", value: ep.name}),
    image: h("input", {id: "set-image", value: ep.image || ""}),
    pools: poolChecks("set-pools", gpus, (ep.gpu && ep.gpu.pools) || []),
    gpuCount: h("input", {id: "set-gpu-count", type: "number", min: 1, max: 64, value: (ep.gpu && ep.gpu.count) || 1}),
    min: h("input", {id: "set-min", type: "number", min: 0, value: ep.workers.min}),
    max: h("input", {id: "set-max", type: "number", min: 0, value: ep.workers.max}),
    timeout: h("input", {id: "set-timeout", type: "number", min: 1, value: ep.timeout}),
    flashboot: h("select", {id: "set-flashboot"}, FLASHBOOT.map((v) => h("option", {value: v, selected: ep.flashboot === v}, v))),
    env: h("textarea", {id: "set-env"}, json(ep.env || {})),
  };
  const sc = scalingFields("set", () => ep.type, ep.scaling, ep.workers.idleTimeout);
  return h("form", {class: "card grid", id: "settings", onsubmit: async (ev) => {
    ev.preventDefault();
    let env;
    try { env = JSON.parse(f.env.value || "{}"); } catch (e) { return replace(out, errorBox(new Error("env: not a JSON object: " + e.message))); }
    const pools = f.pools.picked();
    if (!pools.length) return replace(out, errorBox(new Error("Pools: choose at least one.")));
    const body = {name: f.name.value.trim(), workers: {min: +f.min.value, max: +f.max.value}, scaling: sc.body(), timeout: +f.timeout.value, env,
      gpu: {pools, count: +f.gpuCount.value || 1}, flashboot: f.flashboot.value};
    if (sc.idle.value) body.workers.idleTimeout = +sc.idle.value;
    if (f.image.value.trim() && f.image.value.trim() !== ep.image) body.image = f.image.value.trim();
    try {
      await api.patch("/v2/serverless/" + api.enc(ep.id), body);
      replace(out, h("div", {class: "notice"}, "Saved."));
    } catch (e) { replace(out, errorBox(e)); }
  }},
  h("label", {for: "set-name"}, "Name"), f.name,
  h("label", {for: "set-image"}, "Image"), f.image,
  h("label", {}, "Pools (tried in order)"), f.pools,
  h("label", {for: "set-gpu-count"}, "GPUs per worker"), f.gpuCount,
  h("label", {for: "set-min"}, "Workers min"), f.min,
  h("label", {for: "set-max"}, "Workers max"), f.max,
  h("label", {for: "set-scaling"}, "Scaling"), sc.scaling,
  sc.valueLabel, sc.value,
  h("label", {for: "set-idle"}, "Idle timeout (s)"), sc.idle,
  h("label", {for: "set-timeout"}, "Execution timeout (ms)"), f.timeout,
  h("label", {for: "set-flashboot"}, "FlashBoot"), f.flashboot,
  h("label", {for: "set-env"}, "Environment (JSON)"), f.env,
  h("div", {class: "full row"}, h("button", {type: "submit"}, "Save"),
    h("button", {type: "button", class: "danger", onclick: async () => {
      if (!confirm(`Delete endpoint ${ep.name}? ` + (isLB(ep) ? "Its workers are stopped." : "Its queued jobs are cancelled."))) return;
      try { await api.del("/v2/serverless/" + api.enc(ep.id)); location.hash = "#/endpoints"; } catch (e) { replace(out, errorBox(e)); }
    }}, "Delete endpoint")),
  h("div", {class: "full"}, out));
}

// --- a load balancer's request tester -------------------------------------------------------

const METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
const SHOWN_BODY = 64 << 10; // characters of an answer's body shown

// requestsTab sends a request through /lb/{id}/... with the signed-in key, as a client would,
// and shows the answer: status, latency, headers and body.
function requestsTab(ep) {
  const base = "/lb/" + api.enc(ep.id);
  const method = h("select", {id: "lb-method"}, METHODS.map((m) => h("option", {value: m}, m)));
  const path = h("input", {id: "lb-path", value: "/ping", placeholder: "/path?query"});
  const ctype = h("input", {id: "lb-ctype", value: "application/json"});
  const body = h("textarea", {id: "lb-body", placeholder: "the request body (none for GET and HEAD)"});
  const result = h("div", {id: "lb-result"});
  const syncBody = () => { body.disabled = ctype.disabled = method.value === "GET" || method.value === "HEAD"; };
  method.addEventListener("change", syncBody);
  syncBody();
  let sent = 0; // the request whose answer may still be shown
  onLeave(() => { sent = -1; });
  const send = async (ev) => {
    ev.preventDefault();
    let p = path.value.trim() || "/";
    if (!p.startsWith("/")) p = "/" + p;
    const me = ++sent;
    const headers = {Authorization: "Bearer " + api.key()};
    const init = {method: method.value, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer"};
    if (!body.disabled && body.value !== "") { init.body = body.value; headers["Content-Type"] = ctype.value || "text/plain"; }
    replace(result, h("p", {class: "muted"}, `Sending ${method.value} ${base}${p}… (a worker that is starting may take up to a minute)`));
    const t0 = performance.now();
    let resp, text;
    try {
      resp = await fetch(base + p, init);
      text = await resp.text();
    } catch (e) {
      if (me === sent) replace(result, errorBox(new Error("the request failed: " + e.message)));
      return;
    }
    const took = Math.round(performance.now() - t0);
    if (me !== sent) return;
    let shown = text.length > SHOWN_BODY ? text.slice(0, SHOWN_BODY) : text;
    if ((resp.headers.get("Content-Type") || "").includes("json")) { try { shown = json(JSON.parse(text)); } catch (e) { /* as sent */ } }
    const kind = resp.status < 300 ? "ok" : resp.status < 500 ? "warn" : "bad";
    replace(result,
      h("div", {class: "row"}, h("span", {id: "lb-status"}, badge(`${resp.status} ${resp.statusText}`.trim(), kind)),
        h("span", {class: "muted", id: "lb-latency"}, `${took} ms`), h("span", {class: "muted mono"}, method.value + " " + base + p)),
      h("h3", {}, "Headers"),
      scroller(h("table", {id: "lb-headers", class: "kvtable"}, h("tbody", {}, [...resp.headers.entries()].map(([k, v]) => h("tr", {}, h("td", {class: "mono"}, k), h("td", {class: "mono"}, v)))))),
      h("h3", {}, "Body", text.length > SHOWN_BODY ? h("span", {class: "muted"}, ` (the first ${SHOWN_BODY} of ${text.length} characters)`) : null),
      text === "" ? h("p", {class: "muted", id: "lb-body-empty"}, "(empty)") : h("pre", {id: "lb-answer"}, shown));
  };
  return h("div", {},
    h("form", {class: "card grid", id: "lb-request", onsubmit: send},
      h("label", {for: "lb-method"}, "Method"), method,
      h("label", {for: "lb-path"}, "Path"), h("div", {class: "row nowrap"}, h("span", {class: "mono muted"}, base), path),
      h("label", {for: "lb-ctype"}, "Content-Type"), ctype,
      h("label", {for: "lb-body"}, "Body"), body,
      h("div", {class: "full row"}, h("button", {type: "submit", id: "lb-send"}, "Send"),
        h("span", {class: "muted"}, "Sent with your key, as a client would send it; it counts against your rate limits."))),
    result);
}

// --- how to call an endpoint ----------------------------------------------------------------

const KEY_VAR = "GANTRY_API_KEY"; // the snippets name the key by this variable, never its value

// snippet is a titled code block with a Copy button.
function snippet(id, title, text) {
  const pre = h("pre", {id: "snippet-" + id, class: "snippet"}, text);
  const note = h("span", {class: "muted", "aria-live": "polite"});
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(text);
      replace(note, "Copied.");
    } catch (e) { // no clipboard (a page not served from localhost or https): select the text
      const range = document.createRange();
      range.selectNodeContents(pre);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      replace(note, "Selected: press Ctrl+C (⌘C) to copy.");
    }
  };
  return h("div", {class: "card snippet-card"}, h("div", {class: "row"}, h("h3", {}, title),
    h("button", {type: "button", class: "secondary", id: "copy-" + id, onclick: copy}, "Copy"), note), pre);
}

function apiTab(ep) {
  const origin = location.origin;
  const urls = ep.requestUrls || {};
  const input = '{"input": {"prompt": "hello"}}';
  const key = "$" + KEY_VAR;
  const intro = h("p", {class: "muted"}, "Set ", h("code", {}, KEY_VAR), " to one of your API keys (the ", h("a", {href: "#/keys"}, "Keys"),
    " page creates one); the snippets read it from there and never hold the key itself.");
  if (ep.type === "LOAD_BALANCER") {
    const base = urls.base || origin + "/lb/" + ep.id;
    return h("div", {id: "api"}, intro,
      scroller(h("table", {id: "request-urls"}, h("thead", {}, h("tr", {}, h("th", {}, "Request"), h("th", {}, "URL"))), h("tbody", {},
        h("tr", {}, h("td", {}, "any method and path"), h("td", {class: "mono url"}, base + "/…")), h("tr", {}, h("td", {}, "GET health"), h("td", {class: "mono url"}, urls.health || ""))))),
      snippet("curl", "curl", `export ${KEY_VAR}=your-api-key\ncurl -s ${base}/ping \\\n  -H "Authorization: Bearer ${key}"`),
      snippet("js", "JavaScript (fetch)", `const resp = await fetch("${base}/ping", {\n  headers: {Authorization: "Bearer " + process.env.${KEY_VAR}},\n});\nconsole.log(resp.status, await resp.text());`));
  }
  const job = (u) => (u || "").replace("{job_id}", "JOB_ID");
  const rows = [["POST", "run", "queue a job; answers its id", urls.run], ["POST", "runsync", "run a job and wait for its result", urls.runSync],
    ["GET", "status", "a job's status and output", job(urls.status)], ["GET", "stream", "a job's stream parts (each handed out once)", job(urls.stream)],
    ["POST", "cancel", "cancel a queued or running job", job(urls.cancel)], ["POST", "retry", "queue a FAILED or TIMED_OUT job again", job(urls.retry)],
    ["POST", "purge-queue", "cancel every queued job", urls.purgeQueue], ["GET", "health", "workers and job counts", urls.health]];
  const runpodBase = urls.run ? urls.run.replace(/\/[^/]+\/run$/, "") : origin + "/v2"; // the SDKs' base URL
  return h("div", {id: "api"},
    h("h2", {}, "Request URLs"),
    scroller(h("table", {id: "request-urls"}, h("thead", {}, h("tr", {}, ["Method", "Operation", "URL", "What it does"].map((t) => h("th", {}, t)))),
      h("tbody", {}, rows.map(([m, op, what, u]) => h("tr", {dataset: {op}}, h("td", {class: "mono"}, m), h("td", {}, op), h("td", {class: "mono url"}, u || ""), h("td", {class: "muted"}, what)))))),
    intro,
    snippet("curl", "curl", `export ${KEY_VAR}=your-api-key

# run a job and wait for its result
curl -s -X POST ${urls.runSync} \\
  -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" \\
  -d '${input}'

# or queue it, then read its status and stream
curl -s -X POST ${urls.run} \\
  -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" \\
  -d '${input}'
curl -s ${job(urls.status)} -H "Authorization: Bearer ${key}"
curl -s ${job(urls.stream)} -H "Authorization: Bearer ${key}"`),
    snippet("python", "Python (the runpod SDK: pip install runpod)", `import os
import runpod

runpod.api_key = os.environ["${KEY_VAR}"]
runpod.endpoint_url_base = "${runpodBase}"
endpoint = runpod.Endpoint("${ep.id}")

print(endpoint.run_sync(${input}, timeout=60))

job = endpoint.run(${input})
for part in job.stream():
    print(part)
print(job.status(), job.output())`),
    snippet("js", "JavaScript (the runpod-sdk package: npm install runpod-sdk)", `import runpodSdk from "runpod-sdk";

const runpod = runpodSdk(process.env.${KEY_VAR}, {baseUrl: "${runpodBase}"});
const endpoint = runpod.endpoint("${ep.id}");

console.log(await endpoint.runSync(${input}));

const {id} = await endpoint.run(${input});
for await (const part of endpoint.stream(id)) console.log(part);
console.log(await endpoint.status(id));`));
}

// --- following a job ----------------------------------------------------------------------

const ACTIVE = ["IN_QUEUE", "IN_PROGRESS"];  // cancel is allowed
const RETRYABLE = ["FAILED", "TIMED_OUT"];    // retry is allowed (core.Transitions, spec 3)
const TERMINAL = ["COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"];

// peeker reads a job's stream without taking it (/stream?peek=true): every part stays for the
// API client that waits for it, and the console may read a part again. Each next() returns
// the parts after those it returned before; reset() starts over (a job queued again).
function peeker(p, id) {
  let after = 0;
  return {
    reset() { after = 0; },
    async next() {
      const s = await api.get(p + "/stream/" + api.enc(id) + "?peek=true&after=" + after);
      const parts = s.stream || [];
      if (parts.length) after = parts[parts.length - 1].seq;
      return parts;
    },
  };
}

// runWatch returns a function that says, of each status read of one job, whether the job was
// queued again since the read before (retried, or taken back from a lost worker): the store
// drops a run's parts then.
function runWatch() {
  let status = "", retries;
  return (j) => {
    const again = (j.status === "IN_QUEUE" && status !== "" && status !== "IN_QUEUE") || (retries !== undefined && (j.retries || 0) !== retries);
    status = j.status;
    retries = j.retries || 0;
    return again;
  };
}

// progressOf is the last progress value of an IN_PROGRESS job, or undefined.
function progressOf(j) { return j.status === "IN_PROGRESS" ? j.output : undefined; }

const sleep = (msec) => new Promise((done) => setTimeout(done, msec));

function playgroundTab(ep) {
  const p = "/v2/" + api.enc(ep.id);
  const input = h("textarea", {id: "pg-input"}, '{\n  "prompt": "hello"\n}');
  const status = h("div", {id: "pg-status"});
  const stream = h("pre", {id: "pg-stream"});
  const streamBox = h("div", {hidden: true}, h("h2", {}, "Stream"), stream);
  const output = h("pre", {id: "pg-output"});
  const outputBox = h("div", {hidden: true}, h("h2", {}, "Output"), output);
  const failure = h("div");
  const out = h("div");
  let following = 0; // the follow loop that may still show what it reads
  onLeave(() => { following = -1; });
  const send = async (ev) => {
    ev.preventDefault();
    let parsed;
    try { parsed = JSON.parse(input.value); } catch (e) { return replace(out, errorBox(new Error("input: not JSON: " + e.message))); }
    following++; // a job followed before is no longer shown
    replace(out); replace(stream); replace(output); replace(failure); replace(status);
    streamBox.hidden = true; outputBox.hidden = true;
    try {
      const ack = await api.post(p + "/run", {input: parsed});
      submitted.set(ack.id, parsed);
      showStatus(ack);
      follow(ack.id, ++following);
    } catch (e) { replace(out, errorBox(e)); }
  };
  const showStatus = (j) => {
    const progress = progressOf(j);
    replace(status, h("div", {class: "row"}, "Job ", h("a", {class: "mono", href: "#/endpoints/" + api.enc(ep.id) + "/jobs/" + api.enc(j.id)}, j.id), " ",
      badge(j.status, statusKind(j.status)), j.delayTime !== undefined ? h("span", {class: "muted"}, `delay ${ms(j.delayTime)} · execution ${ms(j.executionTime)}`) : null,
      j.workerId ? h("span", {class: "muted mono"}, "worker " + j.workerId) : null,
      progress !== undefined ? h("span", {id: "pg-progress"}, "progress ", h("code", {}, JSON.stringify(progress))) : null),
      j.reason ? h("p", {class: "muted"}, j.reason) : null);
  };
  // follow shows the job's status, parts and result until it ends, reading every second; it
  // stops when another job is sent or the page is left (following moves on).
  const follow = async (id, me) => {
    const parts = peeker(p, id);
    const newRun = runWatch();
    const shown = () => me === following;
    const append = (list) => {
      for (const c of list) { streamBox.hidden = false; stream.appendChild(document.createTextNode(JSON.stringify(c.output) + "\n")); }
    };
    while (shown()) {
      try {
        const got = await parts.next();
        const j = await api.get(p + "/status/" + api.enc(id));
        if (!shown()) return;
        if (newRun(j)) { parts.reset(); replace(stream); streamBox.hidden = true; } // queued again: its parts are gone
        else append(got);
        showStatus(j);
        if (TERMINAL.includes(j.status)) {
          append(await parts.next()); // any part read after the one before the end
          if (j.error) replace(failure, h("div", {class: "error", role: "alert", id: "pg-error"}, j.status + ": " + j.error));
          if (j.output !== undefined) { outputBox.hidden = false; replace(output, json(j.output)); }
          return;
        }
      } catch (e) { if (shown() && e.status !== 401) replace(out, errorBox(e)); return; }
      await sleep(1000);
    }
  };
  return h("form", {class: "card", id: "playground", onsubmit: send},
    h("label", {for: "pg-input"}, "Input (the job's ", h("code", {}, "input"), " object)"), input,
    h("p", {}, h("button", {type: "submit", id: "pg-send"}, "Send")),
    status, failure, streamBox, outputBox, out);
}

const STATUSES = ["", "IN_QUEUE", "IN_PROGRESS", "COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"];

async function jobsTab(ep, rest) {
  if (rest[0]) return jobDetail(ep, rest[0]);
  const wrap = h("div", {id: "jobs"});
  const filter = h("select", {id: "jobs-status"}, STATUSES.map((s) => h("option", {value: s}, s || "any status")));
  let shown; // the cursor of the page shown (undefined = the newest)
  let loading = false;
  const load = async (cursor) => {
    if (loading) return;
    loading = true;
    const q = new URLSearchParams({limit: "50"});
    if (filter.value) q.set("status", filter.value);
    if (cursor) q.set("cursor", cursor);
    try {
      const list = await api.get("/v2/" + api.enc(ep.id) + "/jobs?" + q);
      shown = cursor;
      const rows = (list.items || []).map((j) => h("tr", {class: "clickable", dataset: {id: j.id, status: j.status}, onclick: () => { location.hash = "#/endpoints/" + api.enc(ep.id) + "/jobs/" + api.enc(j.id); }},
        h("td", {class: "mono"}, j.id), h("td", {}, badge(j.status, statusKind(j.status))), h("td", {}, j.createdAt ? new Date(j.createdAt).toLocaleString() : ""),
        h("td", {}, ms(j.delayTime)), h("td", {}, ms(j.executionTime)), h("td", {}, j.retries || 0), h("td", {class: "mono"}, j.workerId || "")));
      replace(wrap, rows.length ? scroller(h("table", {}, h("thead", {}, h("tr", {}, ["Job", "Status", "Created", "Delay", "Execution", "Retries", "Worker"].map((t) => h("th", {}, t)))), h("tbody", {}, rows)))
        : h("p", {class: "muted"}, "No jobs" + (filter.value ? " with status " + filter.value : "") + "."),
        list.nextCursor ? h("button", {class: "secondary", onclick: () => load(list.nextCursor)}, "Older jobs") : null);
    } catch (e) {
      if (e.status !== 401) replace(wrap, errorBox(e));
    } finally { loading = false; }
  };
  filter.addEventListener("change", () => load());
  await load();
  every(3000, () => load(shown)); // the page shown, refreshed while open
  return h("div", {}, h("div", {class: "row"}, h("label", {for: "jobs-status"}, "Status"), h("span", {}, filter), jobIdForm(ep),
    h("span", {class: "muted"}, "refreshed every 3 s")), wrap);
}

function jobIdForm(ep) {
  const id = h("input", {placeholder: "job id", id: "job-id"});
  return h("form", {class: "row", onsubmit: (ev) => { ev.preventDefault(); if (id.value.trim()) location.hash = "#/endpoints/" + api.enc(ep.id) + "/jobs/" + api.enc(id.value.trim()); }},
    id, h("button", {type: "submit", class: "secondary"}, "Open"));
}

async function jobDetail(ep, jobId) {
  const p = "/v2/" + api.enc(ep.id);
  const box = h("div", {id: "job-detail"});
  const out = h("div");
  const streamed = h("pre", {id: "job-stream"});
  const parts = peeker(p, jobId);
  let nparts = 0, busy = false;
  const newRun = runWatch();
  const cancel = h("button", {class: "danger", id: "job-cancel", disabled: true}, "Cancel");
  const retry = h("button", {class: "secondary", id: "job-retry", disabled: true}, "Retry");
  const show = (j) => {
    const progress = progressOf(j);
    cancel.disabled = busy || !ACTIVE.includes(j.status);
    cancel.title = ACTIVE.includes(j.status) ? "Cancel this job" : "Only a queued or running job can be cancelled";
    retry.disabled = busy || !RETRYABLE.includes(j.status);
    retry.title = RETRYABLE.includes(j.status) ? "Queue this job again, with the same input" : "Only a FAILED or TIMED_OUT job can be retried";
    replace(box, h("dl", {class: "kv card"},
      h("dt", {}, "Job"), h("dd", {class: "mono"}, j.id),
      h("dt", {}, "Status"), h("dd", {}, badge(j.status, statusKind(j.status)), j.reason ? h("span", {class: "muted"}, j.reason) : null),
      h("dt", {}, "Delay"), h("dd", {}, ms(j.delayTime)), h("dt", {}, "Execution"), h("dd", {}, ms(j.executionTime)),
      h("dt", {}, "Retries"), h("dd", {}, j.retries || 0), h("dt", {}, "Worker"), h("dd", {class: "mono"}, j.workerId || "–"),
      h("dt", {}, "Input"), h("dd", {}, submitted.has(j.id) ? h("pre", {}, json(submitted.get(j.id))) : h("span", {class: "muted"}, "not returned by the API (sent from another client)")),
      progress !== undefined ? [h("dt", {}, "Progress"), h("dd", {}, h("pre", {id: "job-progress"}, json(progress)))] : null,
      j.error ? [h("dt", {}, "Error"), h("dd", {}, h("div", {class: "error", role: "alert", id: "job-error"}, j.error))] : null,
      progress === undefined ? [h("dt", {}, "Output"), h("dd", {}, j.output !== undefined ? h("pre", {id: "job-output"}, json(j.output)) : h("span", {class: "muted"}, "–"))] : null,
      nparts ? [h("dt", {}, "Stream"), h("dd", {}, streamed, h("div", {class: "muted"}, `${nparts} part(s), read without taking them: an API client reading /stream still gets each one`))] : null));
  };
  const refresh = async () => {
    const j = await api.get(p + "/status/" + api.enc(jobId));
    if (newRun(j)) { parts.reset(); replace(streamed); nparts = 0; } // queued again: its parts are gone
    const got = await parts.next().catch(() => []);
    for (const c of got) streamed.appendChild(document.createTextNode(JSON.stringify(c.output) + "\n"));
    nparts += got.length;
    show(j);
    return j;
  };
  const act = (what) => async () => {
    busy = true; cancel.disabled = retry.disabled = true;
    try {
      await api.post(p + "/" + what + "/" + api.enc(jobId));
      replace(out, h("div", {class: "notice"}, what === "cancel" ? "Cancelled." : "Queued again."));
    } catch (e) { replace(out, errorBox(e)); }
    busy = false;
    await refresh().catch(() => {});
  };
  cancel.addEventListener("click", act("cancel"));
  retry.addEventListener("click", act("retry"));
  await refresh();
  every(2000, () => refresh().catch(() => {}));
  return h("div", {}, h("p", {}, h("a", {href: "#/endpoints/" + api.enc(ep.id) + "/jobs"}, "← all jobs")), box,
    h("div", {class: "row"}, cancel, retry), out);
}

// gpuLabel says what a worker holds, in its pool's words: "1 × A100 80GB", "2 CPU slots"; the
// device indices within the pool go to the cell's title.
function gpuLabel(w, pools) {
  const n = (w.gpus || []).length;
  const g = pools.get(w.pool);
  if (!n) return "none";
  if (g && g.id === "CPU") return `${n} CPU slot${n === 1 ? "" : "s"}`;
  return `${n} × ${g ? g.displayName || g.id : "GPU"}`;
}

// exitNote says why an exited worker ended: its error, or that Gantry stopped it.
function exitNote(w) {
  const at = w.exitedAt ? " at " + new Date(w.exitedAt).toLocaleTimeString() : "";
  return w.error ? `It exited${at}: ${w.error}` : `It exited${at} without an error: Gantry stopped it (idle past its idle timeout, scaled down, or the endpoint changed or was deleted).`;
}

async function workersTab(ep, rest) {
  const p = "/v2/serverless/" + api.enc(ep.id) + "/workers";
  const table = h("div", {id: "workers"});
  const logBox = h("div", {id: "worker-log"});
  const gpus = await api.get("/v2/catalog/gpus").catch(() => []);
  const pools = new Map((gpus || []).map((g) => [g.pool, g]));
  const jobsHead = isLB(ep) ? "Requests in flight" : "Jobs held";
  let selected = rest[0] || null;
  let workers = [];
  const load = async () => {
    const list = await api.get(p);
    workers = list.items;
    if (!selected && list.items.length) selected = list.items[0].id;
    replace(table, list.items.length ? scroller(h("table", {}, h("thead", {}, h("tr", {}, ["Worker", "Status", "Pool", "GPUs", jobsHead, "Started", "Cold start"].map((t) => h("th", {}, t)))),
      h("tbody", {}, list.items.map((w) => h("tr", {class: "clickable" + (w.id === selected ? " selected" : ""), dataset: {id: w.id, status: w.status}, onclick: () => { selected = w.id; load().catch(() => {}); loadLog(); }},
        h("td", {class: "mono"}, w.id), h("td", {}, badge(w.status, statusKind(w.status)), w.error ? h("div", {class: "error small"}, w.error) : null), h("td", {}, w.pool),
        h("td", {class: "gpus", title: (w.gpus || []).length ? "device indices in the pool: " + w.gpus.join(", ") : null}, gpuLabel(w, pools)),
        h("td", {class: "jobs", title: isLB(ep) ? "LOAD_BALANCER requests it is answering now" : "jobs it has taken and not yet finished"}, w.jobs || 0),
        h("td", {}, new Date(w.startedAt).toLocaleTimeString()), h("td", {}, ms(w.coldStartMs)))))))
      : h("p", {class: "muted"}, isLB(ep) ? "No workers: the endpoint is scaled to zero. Send a request to start one." : "No workers: the endpoint is scaled to zero. Send a job to start one."));
  };
  const pre = h("pre", {class: "log", id: "log-lines"});
  const loadLog = async () => {
    if (!selected) return replace(logBox);
    const w = workers.find((x) => x.id === selected);
    const exited = w && w.status === "EXITED";
    try {
      const text = await api.get(p + "/" + api.enc(selected) + "/logs?tail=500");
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      replace(pre, text || "(no output)");
      if (atEnd) pre.scrollTop = pre.scrollHeight;
      replace(logBox, h("h2", {}, "Log of ", h("span", {class: "mono"}, selected), " ",
        h("span", {class: "muted", id: "log-state"}, exited ? "(its last lines; it has exited)" : "(followed live)")),
      exited ? h("div", {class: w.error ? "error" : "notice", id: "exit-reason"}, exitNote(w)) : null, pre);
    } catch (e) { replace(logBox, h("h2", {}, "Log of " + selected), exited ? h("div", {class: "notice", id: "exit-reason"}, exitNote(w)) : null, errorBox(e)); }
  };
  await load();
  await loadLog();
  every(2000, async () => { await load().catch(() => {}); loadLog(); });
  return h("div", {}, table, logBox);
}

// metricsTab draws the endpoint's history (history.js: the server's, there when the tab opens,
// read again at each sample) and its live gauges (metrics.js: /metrics, sampled while open).
async function metricsTab(ep) {
  const wrap = h("div", {class: "charts", id: "charts"});
  const want = {endpoint: ep.id};
  let range = "1h", hist = null;
  const note = h("span", {class: "muted", id: "history-note"});
  const loadHistory = async () => {
    const asked = range;
    try {
      const got = history.series(await history.load(ep.id, asked));
      if (asked !== range) return; // the range changed meanwhile: its own read draws it
      hist = got;
      replace(note, "");
    } catch (e) { replace(note, "The history cannot be read: " + e.message); }
  };
  const draw = () => {
    if (isLB(ep)) return replace(wrap, ...lbCharts(ep, want));
    const cold = metrics.gauge("gantry_cold_start_seconds_count", want, "mode");
    const coldMean = {};
    for (const mode of Object.keys(cold)) {
      const sums = metrics.gauge("gantry_cold_start_seconds_sum", {endpoint: ep.id, mode}, "mode")[mode] || [];
      coldMean[mode + " mean"] = sums.map(([t, s], i) => [t, cold[mode][i] && cold[mode][i][1] ? s / cold[mode][i][1] : 0]);
    }
    const span = hist ? {from: hist.from, to: hist.to} : {};
    const per = range === "1h" ? "minute" : "15 minutes";
    replace(wrap,
      lineChart(`Jobs ended per ${per}, by status`, hist ? hist.ended : {}, undefined, span),
      lineChart("Jobs queued and running", {...prefix("queued ", metrics.gauge("gantry_queue_jobs", want, "priority")), ...prefix("", {running: (metrics.gauge("gantry_jobs_in_progress", want, "endpoint")[ep.id] || [])})}),
      lineChart(`Delay time (queue), p50 / p90 / p99 per ${per}`, hist ? hist.delay : {}, "s", span),
      lineChart(`Execution time, p50 / p90 / p99 per ${per}`, hist ? hist.exec : {}, "s", span),
      lineChart("Cold starts (count, by mode)", cold),
      lineChart("Cold start mean duration, by mode", coldMean, "s"),
      lineChart("Workers by state", metrics.gauge("gantry_workers", want, "state")));
  };
  const select = h("select", {id: "history-range", onchange: async () => { range = select.value; await loadHistory(); draw(); }},
    history.RANGES.map((r) => h("option", {value: r}, r === "1h" ? "last hour" : "last 24 hours")));
  await loadHistory();
  draw();
  onLeave(metrics.onSample(() => { loadHistory().then(draw); }));
  return h("div", {}, h("p", {class: "muted"}, "Jobs and times: the server's history over the ", select,
    ` (kept 24 h, the same from every replica). Queue, workers and cold starts: read from /metrics every ${metrics.EVERY_MS / 1000} s while the console is open. `, note), wrap);
}

// lbCharts are a load balancer's charts: its requests by status class and their latency
// (gantry_lb_request_duration_seconds), cold starts and workers.
function lbCharts(ep, want) {
  return [
    lineChart("Requests per minute, by status", metrics.rate("gantry_lb_request_duration_seconds_count", want, "code")),
    lineChart("Request latency, p50 / p90 / p99 over 5 min", metrics.quantiles("gantry_lb_request_duration_seconds", want), "s"),
    lineChart("Cold starts (count, by mode)", metrics.gauge("gantry_cold_start_seconds_count", want, "mode")),
    lineChart("Workers by state", metrics.gauge("gantry_workers", want, "state"))];
}

function prefix(p, o) {
  const out = {};
  for (const [k, v] of Object.entries(o)) out[p + k] = v;
  return out;
}

// --- keys and usage ---------------------------------------------------------------------------

async function keysView() {
  const out = h("div");
  const wrap = h("div", {id: "keys"});
  const load = async () => {
    try {
      const list = await api.get("/v2/keys");
      replace(wrap, scroller(h("table", {}, h("thead", {}, h("tr", {}, ["Id", "User", "Scope", "Endpoints", "Created", "Expires", ""].map((t) => h("th", {}, t)))),
        h("tbody", {}, (list.items || []).map((k) => h("tr", {dataset: {id: k.id}},
          h("td", {class: "mono"}, k.id), h("td", {}, k.user), h("td", {}, k.scope), h("td", {class: "mono"}, (k.endpoints || []).join(", ") || "all"),
          h("td", {}, new Date(k.createdAt).toLocaleString()), h("td", {}, k.expiresAt ? new Date(k.expiresAt).toLocaleString() : "never"),
          h("td", {}, h("button", {class: "danger", dataset: {revoke: k.id}, onclick: async () => {
            if (!confirm(`Revoke key ${k.id}? Anything using it stops working.`)) return;
            try { await api.del("/v2/keys/" + api.enc(k.id)); await load(); replace(out, h("div", {class: "notice"}, "Revoked.")); }
            catch (e) { if (e.status !== 401) replace(out, errorBox(e)); }
          }}, "Revoke"))))))));
    } catch (e) { if (e.status !== 401) replace(wrap, errorBox(e)); }
  };
  const scope = h("select", {id: "key-scope"}, [["all", "all: everything you may do"], ["read", "read: reads only"], ["jobs", "jobs: job operations only"]].map(([v, t]) => h("option", {value: v}, t)));
  const days = h("input", {id: "key-days", type: "number", min: 1, placeholder: "never"});
  const form = h("form", {class: "card row", id: "create-key", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      const body = {scope: scope.value};
      if (days.value) body.expiresIn = Math.round(+days.value * 86400);
      const k = await api.post("/v2/keys", body);
      replace(out, h("div", {class: "secret", id: "new-key", dataset: {id: k.id}}, "Key ", h("span", {class: "mono"}, k.id), " created. Its secret is shown this once; copy it now: ",
        h("input", {readonly: true, value: k.secret, class: "mono", onfocus: (e) => e.target.select()})));
      await load();
    } catch (e) { replace(out, errorBox(e)); }
  }}, h("strong", {}, "New key"), h("label", {for: "key-scope"}, "Scope"), scope, h("label", {for: "key-days"}, "Expires in (days)"), days, h("button", {type: "submit"}, "Create"));
  await load();
  return h("div", {}, h("h1", {}, "API keys"), h("p", {class: "muted"}, "The keys of your user. Revoking the key you signed in with signs you out."), form, out, wrap);
}

// EXAMPLES are an input to start from, per model type (docs/models.md has one request each).
const EXAMPLES = {
  IMAGE_GENERATION: {prompt: "a lighthouse at dusk", width: 512, height: 512},
  VIDEO_GENERATION: {prompt: "waves", frames: 12, fps: 12},
  TEXT_TO_SPEECH: {text: "Hello from Gantry.", voice: "en-us"},
  TEXT_GENERATION: {prompt: "the quick brown fox", max_tokens: 6},
};

// modelRunForm runs a ready-made model with /runsync (then reads /status while the job is not
// done) and shows its output and what it cost.
function modelRunForm(models, ran) {
  const model = h("select", {id: "run-model"}, models.map((m) => h("option", {value: m.id}, `${m.name} (${m.id})`)));
  const input = h("textarea", {id: "run-input"});
  const out = h("div", {id: "run-result"});
  const example = () => {
    const m = models.find((x) => x.id === model.value);
    input.value = json(EXAMPLES[m && m.type] || {prompt: "hello"});
  };
  model.addEventListener("change", example);
  example();
  let sent = 0;
  onLeave(() => { sent = -1; });
  const run = async (ev) => {
    ev.preventDefault();
    let parsed;
    try { parsed = JSON.parse(input.value); } catch (e) { return replace(out, errorBox(new Error("input: not JSON: " + e.message))); }
    const me = ++sent, id = model.value, p = "/v2/" + api.enc(id);
    replace(out, h("p", {class: "muted"}, "Running…"));
    try {
      let j = await api.post(p + "/runsync", {input: parsed});
      while (me === sent && ACTIVE.includes(j.status)) { // not done within runsync's wait
        replace(out, h("p", {class: "muted"}, "Job ", h("span", {class: "mono"}, j.id), " ", badge(j.status, statusKind(j.status))));
        await sleep(1000);
        j = await api.get(p + "/status/" + api.enc(j.id));
      }
      if (me !== sent) return;
      const c = j.cost;
      if (c) ran(); // its charge is in the usage now
      replace(out,
        h("div", {class: "row"}, "Job ", h("span", {class: "mono"}, j.id), badge(j.status, statusKind(j.status)),
          h("span", {class: "muted"}, `execution ${ms(j.executionTime)}`),
          c ? h("span", {id: "run-cost"}, "cost ", h("strong", {class: "mono"}, `${c.cost} ${c.currency}`), h("span", {class: "muted"}, ` (${c.units} ${c.unit} × ${c.unitPrice})`)) : null),
        j.error ? h("div", {class: "error", role: "alert"}, j.status + ": " + j.error) : null,
        j.output !== undefined ? h("pre", {id: "run-output"}, json(j.output)) : null);
    } catch (e) { if (me === sent && e.status !== 401) replace(out, errorBox(e)); }
  };
  return h("form", {class: "card grid", id: "run-form", onsubmit: run},
    h("h2", {class: "full"}, "Run a model"),
    h("label", {for: "run-model"}, "Model"), model,
    h("label", {for: "run-input"}, "Input (the job's ", h("code", {}, "input"), ")"), input,
    h("div", {class: "full row"}, h("button", {type: "submit", id: "run-send"}, "Run"), h("span", {class: "muted"}, "Billed to your user, as over the API.")),
    h("div", {class: "full"}, out));
}

async function usageView() {
  const models = await api.get("/v2/models");
  const usageBox = h("div");
  const loadUsage = async () => {
    const usage = await api.get("/v2/billing/usage?limit=100").catch((e) => ({error: e}));
    if (usage.error) return replace(usageBox, usage.error.status === 401 ? null : errorBox(usage.error));
    replace(usageBox, h("div", {id: "usage"},
      h("p", {}, "Total: ", h("strong", {class: "mono", id: "usage-total"}, usage.cost + " " + usage.currency), " over " + (usage.items || []).length + " job(s) shown."),
      (usage.totals || []).length ? scroller(h("table", {}, h("thead", {}, h("tr", {}, ["Model", "Jobs", "Cost"].map((t) => h("th", {}, t)))),
        h("tbody", {}, usage.totals.map((t) => h("tr", {}, h("td", {}, t.model), h("td", {}, t.jobs ?? t.count ?? ""), h("td", {class: "mono"}, t.cost)))))) : null,
      (usage.items || []).length ? scroller(h("table", {id: "usage-items"}, h("thead", {}, h("tr", {}, ["Completed", "Job", "Model", "Quantity", "Cost"].map((t) => h("th", {}, t)))),
        h("tbody", {}, usage.items.map((r) => h("tr", {}, h("td", {}, new Date(r.completedAt).toLocaleString()), h("td", {class: "mono"}, r.jobId), h("td", {}, r.model),
          h("td", {}, `${r.quantity} ${r.measure}`), h("td", {class: "mono"}, r.cost)))))) : h("p", {class: "muted"}, "No model jobs completed yet.")));
  };
  await loadUsage();
  return h("div", {},
    h("h1", {}, "Usage"),
    h("h2", {}, "Ready-made models and their prices"),
    scroller(h("table", {id: "models"}, h("thead", {}, h("tr", {}, ["Model", "Type", "Unit", "Price (USD per unit)"].map((t) => h("th", {}, t)))),
      h("tbody", {}, (models.items || []).map((m) => h("tr", {}, h("td", {}, h("div", {}, m.name), h("div", {class: "mono muted"}, m.id)), h("td", {}, m.type),
        h("td", {}, m.unit.id, h("div", {class: "muted"}, m.unit.description)), h("td", {class: "mono"}, m.price.perUnit)))))),
    (models.items || []).length ? modelRunForm(models.items, () => loadUsage()) : null,
    h("h2", {}, "Your usage"),
    usageBox);
}
