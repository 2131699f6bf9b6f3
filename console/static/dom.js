// dom.js: building elements without innerHTML, so that no value from the API is ever read as
// markup.

// h makes an element: h("a", {href: "#/x", class: "c", onclick: fn}, "text", child, [more]).
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k === "value") el.value = v;
    else if (v === true) el.setAttribute(k, "");
    else el.setAttribute(k, String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
}

// replace puts children in place of el's.
export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// errorBox shows an API error: its detail and each of its errors lines (a line that says what
// the detail says, as a problem with one error does, is shown once).
export function errorBox(err) {
  const message = (err && err.message) || String(err);
  const lines = ((err && err.errors) || []).filter((l) => l !== message);
  return h("div", {class: "error", role: "alert"}, message,
    lines.length ? h("ul", {}, lines.map((l) => h("li", {}, l))) : null);
}

// badge is a small coloured label; kind is ok, warn, bad, idle or info.
export function badge(text, kind) {
  return h("span", {class: "badge " + (kind || "idle")}, text);
}

// statusKind is the badge colour of a job or worker status. Job statuses match the charts'
// (charts.js): COMPLETED green, FAILED red, TIMED_OUT amber, CANCELLED grey.
export function statusKind(s) {
  switch (s) {
    case "COMPLETED": case "IDLE": case "RUNNING": case "ready": return "ok";
    case "IN_QUEUE": case "IN_PROGRESS": case "INITIALIZING": case "booting": return "info";
    case "FAILED": case "UNHEALTHY": case "unhealthy": return "bad";
    case "TIMED_OUT": case "STOPPING": case "throttled": return "warn";
    case "CANCELLED": return "idle";
    default: return "idle";
  }
}

// ms renders milliseconds for people.
export function ms(v) {
  if (v === undefined || v === null) return "–";
  if (v < 1000) return v + " ms";
  if (v < 60000) return (v / 1000).toFixed(v < 10000 ? 2 : 1) + " s";
  return (v / 60000).toFixed(1) + " min";
}

// json renders a value as indented JSON.
export function json(v) {
  return v === undefined ? "" : JSON.stringify(v, null, 2);
}
