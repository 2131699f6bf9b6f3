// api.js: the console's client of the Gantry API. The key is kept in sessionStorage (this tab
// only, gone when it closes) and sent as a bearer token; it is never put in a URL.

const KEY = "gantry.key";

export function key() { return sessionStorage.getItem(KEY); }
export function setKey(k) { sessionStorage.setItem(KEY, k); }
export function clearKey() { sessionStorage.removeItem(KEY); }

// APIError is a refused call: status, the problem's detail as message, its errors lines.
export class APIError extends Error {
  constructor(status, problem) {
    super((problem && (problem.detail || problem.title)) || "HTTP " + status);
    this.status = status;
    this.errors = (problem && problem.errors) || [];
  }
}

// onUnauthorized is called when a call is refused with 401: the key is no longer valid.
let unauthorized = () => {};
export function onUnauthorized(fn) { unauthorized = fn; }

// call sends method path with the key and, when body is given, a JSON body; it returns the
// decoded JSON answer (text for text/plain, null for 204) or throws an APIError.
export async function call(method, path, body, opts = {}) {
  const headers = {"Accept": "application/json, text/plain"};
  const k = opts.key || key();
  if (k) headers["Authorization"] = "Bearer " + k;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let resp;
  try {
    resp = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer"});
  } catch (e) {
    throw new APIError(0, {detail: "the server cannot be reached: " + e.message});
  }
  lastWarnings = parseWarnings(resp.headers.get("Warning"));
  const type = resp.headers.get("Content-Type") || "";
  let data = null;
  if (resp.status !== 204) {
    data = type.includes("json") ? await resp.json().catch(() => null) : await resp.text();
  }
  if (!resp.ok) {
    if (resp.status === 401 && !opts.key) unauthorized();
    throw new APIError(resp.status, typeof data === "object" ? data : {detail: data});
  }
  return data;
}

export const get = (p, o) => call("GET", p, undefined, o);
export const post = (p, b, o) => call("POST", p, b, o);
export const patch = (p, b) => call("PATCH", p, b);
export const del = (p) => call("DELETE", p);

// warnings returns the texts of the last answer's Warning headers (RFC 9111 code 299): a pool
// that cannot mount an endpoint's network volume at /runpod-volume says what it does instead.
let lastWarnings = [];
export function warnings() { return lastWarnings; }

function parseWarnings(v) {
  if (!v) return [];
  return v.split(/,\s*(?=\d{3} )/).map((w) => {
    const m = /^\d{3} \S+ "((?:[^"\\]|\\.)*)"/.exec(w);
    return m ? m[1].replace(/\\(.)/g, "$1") : w;
  });
}

// enc escapes a path segment.
export const enc = encodeURIComponent;
