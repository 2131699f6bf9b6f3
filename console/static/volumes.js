// volumes.js: the Network volumes page (#/volumes). A user's volumes can be created, grown and
// deleted; the operator's (from the server's config) are listed, read-only. Endpoints naming a
// volume see it at /runpod-volume in every worker.

import {h, replace, errorBox, badge} from "./dom.js";
import * as api from "./api.js";

const scroller = (table) => h("div", {class: "table-scroll"}, table);
const gb = (n) => n + " GB";

export async function volumesView() {
  const out = h("div", {id: "volume-result"});
  const wrap = h("div", {id: "volumes"});
  const notice = (text) => replace(out, h("div", {class: "notice"}, text));
  const failed = (e) => { if (e.status !== 401) replace(out, errorBox(e)); };

  const row = (v) => {
    const size = h("input", {type: "number", min: v.size, max: 4096, value: v.size, class: "narrow", "aria-label": "New size in GB", dataset: {resize: v.id}});
    const actions = v.operator ? h("span", {class: "muted"}, "read-only") : h("span", {class: "row"}, size,
      h("button", {type: "button", dataset: {grow: v.id}, onclick: async () => {
        try { await api.patch("/v2/network-volumes/" + api.enc(v.id), {size: +size.value}); await load(); notice(`Volume ${v.id} is ${gb(size.value)} now.`); }
        catch (e) { failed(e); }
      }}, "Resize"),
      h("button", {type: "button", class: "danger", dataset: {delete: v.id}, onclick: async () => {
        if (!confirm(`Delete network volume ${v.name} (${v.id}) and all the data on it? This cannot be undone.`)) return;
        try { await api.del("/v2/network-volumes/" + api.enc(v.id)); await load(); notice(`Deleted volume ${v.id} and its data.`); }
        catch (e) { failed(e); }
      }}, "Delete"));
    return h("tr", {dataset: {id: v.id}},
      h("td", {class: "mono"}, v.id), h("td", {}, v.name), h("td", {class: "size"}, gb(v.size)), h("td", {}, v.dataCenter), h("td", {}, v.type),
      h("td", {}, v.operator ? badge("operator", "info") : "yours"),
      h("td", {}, v.createdAt ? new Date(v.createdAt).toLocaleString() : "–"), h("td", {}, actions));
  };
  const load = async () => {
    try {
      const list = await api.get("/v2/network-volumes");
      const vs = list.networkVolumes || [];
      replace(wrap, vs.length ? scroller(h("table", {}, h("thead", {}, h("tr", {}, ["Id", "Name", "Size", "Data center", "Type", "Owner", "Created", ""].map((t) => h("th", {}, t)))),
        h("tbody", {}, vs.map(row)))) : h("p", {class: "muted"}, "No network volumes yet."));
    } catch (e) { if (e.status !== 401) replace(wrap, errorBox(e)); }
  };

  const gpus = await api.get("/v2/catalog/gpus").catch(() => []);
  const dcs = [...new Set((gpus || []).map((g) => g.dataCenterId).filter(Boolean))];
  const name = h("input", {id: "volume-name", required: true, placeholder: "model-weights"});
  const size = h("input", {id: "volume-size", type: "number", min: 10, max: 4096, value: 50, required: true});
  const dc = h("select", {id: "volume-dc"}, dcs.map((d) => h("option", {value: d}, d)));
  const type = h("select", {id: "volume-type"}, ["STANDARD", "HIGH_PERFORMANCE"].map((t) => h("option", {value: t}, t)));
  const form = h("form", {class: "card row", id: "create-volume", onsubmit: async (ev) => {
    ev.preventDefault();
    try {
      const v = await api.post("/v2/network-volumes", {name: name.value, size: +size.value, dataCenter: dc.value, type: type.value});
      await load();
      notice(`Created volume ${v.id}. Name it in an endpoint's network volumes to see it at /runpod-volume.`);
    } catch (e) { failed(e); }
  }}, h("strong", {}, "New volume"),
    h("label", {for: "volume-name"}, "Name"), name, h("label", {for: "volume-size"}, "Size (GB)"), size,
    h("label", {for: "volume-dc"}, "Data center"), dc, h("label", {for: "volume-type"}, "Type"), type,
    h("button", {type: "submit"}, "Create"));
  await load();
  return h("div", {}, h("h1", {}, "Network volumes"),
    h("p", {class: "muted"}, "Storage that outlives workers: every worker of an endpoint naming a volume sees it at ", h("code", {}, "/runpod-volume"),
      ". A volume only grows, and cannot be deleted while an endpoint names it. Deleting one deletes its data."),
    form, out, wrap);
}
