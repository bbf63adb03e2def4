// The sbx ops dashboard: plain JS against the sbx API, with the admin key
// the operator enters. The key lives in this tab only (sessionStorage) and
// travels in the Authorization header, never in a URL; the live feed reads
// GET /v1/events with fetch() for that reason (EventSource cannot send
// headers). Everything shown is text (textContent), never parsed as HTML.
"use strict";

const REFRESH_MS = 5000;
const EVENTS_KEPT = 200;
const KEY_SLOT = "sbx-admin-key";

const state = {
  key: sessionStorage.getItem(KEY_SLOT) || "",
  nodes: [],
  sandboxes: [],          // admin records: the record plus its tenant
  selected: null,         // {tenant, id}
  lastEventId: "",
  feed: null,             // AbortController of the event stream
  refreshTimer: null,
  pending: null,          // debounced refresh after an event
  acting: false,          // an action (sleep, restart, destroy) is under way
  migrateAsked: "",       // the node whose Migrate button asks to be sure
  migrating: "",          // the node being migrated
};

const $ = (sel) => document.querySelector(sel);

function setStatus(text) {
  $("#status").textContent = text;
}

// The outcome of the last node action (drain, migrate): kept until the
// next one, while the connection status above is rewritten by every refresh.
function nodesStatus(text) {
  $("#nodes-status").textContent = text;
}

// One API call: JSON in and out; tenant names whose sandbox it is (an admin
// key acts on another tenant's sandbox with Sbx-Tenant).
async function api(method, path, { body, tenant } = {}) {
  const headers = { Authorization: "Bearer " + state.key };
  if (tenant) headers["Sbx-Tenant"] = tenant;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {
    method, headers, cache: "no-store", credentials: "omit",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = null; }
  if (!r.ok) {
    const msg = data && data.error ? data.error.code + ": " + data.error.message : "HTTP " + r.status;
    const err = new Error(msg);
    err.status = r.status;
    throw err;
  }
  return data;
}

function cell(tr, text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  if (cls) td.className = cls;
  tr.appendChild(td);
  return td;
}

function age(iso) {
  if (!iso) return "";
  const ms = Date.now() - Date.parse(iso);
  if (!isFinite(ms)) return "";
  const s = Math.max(0, Math.round(ms / 1000));
  if (s < 120) return s + " s";
  if (s < 7200) return Math.round(s / 60) + " min";
  if (s < 172800) return Math.round(s / 3600) + " h";
  return Math.round(s / 86400) + " d";
}

// ---- nodes --------------------------------------------------------------

function renderNodes() {
  const tbody = $("#nodes tbody");
  tbody.replaceChildren();
  for (const n of state.nodes) {
    const tr = document.createElement("tr");
    tr.dataset.node = n.name;
    cell(tr, n.name);
    cell(tr, n.state, "state-" + n.state);
    cell(tr, age(n.lastHeartbeat));
    cell(tr, n.capacity);
    cell(tr, n.load);
    cell(tr, n.sandboxes);
    cell(tr, n.version);
    const td = cell(tr, n.drained ? "drained " : "open ");
    const b = document.createElement("button");
    b.textContent = n.drained ? "Undrain" : "Drain";
    b.dataset.action = n.drained ? "undrain" : "drain";
    b.addEventListener("click", () => drain(n.name, !n.drained));
    td.appendChild(b);
    const m = document.createElement("button");
    m.dataset.action = "migrate";
    m.textContent = state.migrating === n.name ? "Migrating…"
      : state.migrateAsked === n.name ? "Really migrate?" : "Migrate";
    if (state.migrateAsked === n.name) m.classList.add("confirm");
    m.disabled = state.migrating !== "";
    m.addEventListener("click", () => migrate(n.name));
    td.appendChild(m);
    tbody.appendChild(tr);
  }
}

async function drain(node, on) {
  try {
    await api("POST", "/v1/nodes/" + encodeURIComponent(node) + "/drain", { body: { drain: on } });
    await refresh();
  } catch (e) {
    nodesStatus("drain " + node + ": " + e.message);
  }
}

// Drain the node and move its sandboxes away (POST …/drain {migrate}), one
// page after the other until the answer has no cursor. The first click
// asks; the second migrates. Sandboxes without persist stay (no force from
// the page: sleeping them would lose their files) and are reported.
async function migrate(node) {
  if (state.migrateAsked !== node) {
    state.migrateAsked = node;
    renderNodes();
    return;
  }
  state.migrateAsked = "";
  state.migrating = node;
  renderNodes();
  const moved = [], kept = [];
  try {
    let cursor = "";
    for (let pages = 0; pages < 1000; pages++) {
      const body = { migrate: true };
      if (cursor) body.cursor = cursor;
      const r = await api("POST", "/v1/nodes/" + encodeURIComponent(node) + "/drain", { body });
      moved.push(...r.migrated);
      kept.push(...r.skipped.map((k) => k.id + " (" + k.reason + ")"));
      if (!r.cursor) break;
      cursor = r.cursor;
    }
    nodesStatus("migrate " + node + ": " + moved.length + " moved, " + kept.length + " kept" +
      (kept.length ? ": " + kept.join(", ") : ""));
  } catch (e) {
    nodesStatus("migrate " + node + ": " + e.message + " (" + moved.length + " moved before)");
  } finally {
    state.migrating = "";
  }
  await refresh();
}

// ---- sandboxes ----------------------------------------------------------

// Every node's sandboxes (GET /v1/nodes/{n}/sandboxes, following cursors);
// a set scan may repeat a member across pages, so they are keyed.
async function loadSandboxes() {
  const seen = new Map();
  for (const n of state.nodes) {
    let cursor = "";
    for (let pages = 0; pages < 100; pages++) {
      const q = "?limit=500" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
      const page = await api("GET", "/v1/nodes/" + encodeURIComponent(n.name) + "/sandboxes" + q);
      for (const s of page.sandboxes) seen.set(s.tenant + "/" + s.id, s);
      if (!page.cursor) break;
      cursor = page.cursor;
    }
  }
  state.sandboxes = [...seen.values()].sort((a, b) =>
    (a.tenant + "/" + a.id).localeCompare(b.tenant + "/" + b.id));
}

function matches(s) {
  const t = $("#f-tenant").value.trim(), n = $("#f-node").value.trim();
  const st = $("#f-state").value, l = $("#f-label").value.trim();
  if (t && s.tenant !== t) return false;
  if (n && s.node !== n) return false;
  if (st && s.state !== st) return false;
  if (l) {
    const i = l.indexOf(":");
    const k = i < 0 ? l : l.slice(0, i), v = i < 0 ? null : l.slice(i + 1);
    if (!s.labels || !(k in s.labels) || (v !== null && s.labels[k] !== v)) return false;
  }
  return true;
}

function resources(r) {
  if (!r) return "";
  return r.memoryMiB + " MiB, " + r.cpus + " cpu, " + r.pids + " pids, " + r.diskMiB + " MiB disk";
}

function renderSandboxes() {
  const tbody = $("#sandboxes tbody");
  const shown = state.sandboxes.filter(matches);
  tbody.replaceChildren();
  for (const s of shown) {
    const tr = document.createElement("tr");
    tr.dataset.key = s.tenant + "/" + s.id;
    if (state.selected && state.selected.tenant === s.tenant && state.selected.id === s.id)
      tr.className = "selected";
    cell(tr, s.tenant);
    cell(tr, s.id);
    cell(tr, s.node);
    cell(tr, s.state, "state-" + s.state);
    cell(tr, age(s.createdAt));
    cell(tr, age(s.lastActiveAt));
    cell(tr, s.generation);
    cell(tr, s.epoch);
    cell(tr, resources(s.resources));
    cell(tr, Object.entries(s.labels || {}).map(([k, v]) => k + "=" + v).join(" "));
    tr.addEventListener("click", () => select(s.tenant, s.id));
    tbody.appendChild(tr);
  }
  $("#sandbox-count").textContent = "(" + shown.length + " of " + state.sandboxes.length + ")";
}

// ---- one sandbox --------------------------------------------------------

function show(id, value) {
  $(id).textContent = typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

async function select(tenant, id) {
  state.selected = { tenant, id };
  $("#detail").hidden = false;
  $("#detail-title").textContent = tenant + "/" + id;
  $("#detail-status").textContent = "";
  resetConfirm();
  renderSandboxes();
  await loadDetail();
}

const DETAIL_PANES = ["#detail-processes", "#detail-tunnels", "#detail-ports", "#detail-snapshots"];

async function loadDetail() {
  const sel = state.selected;
  if (!sel) return;
  const base = "/v1/sandboxes/" + encodeURIComponent(sel.id);
  const opt = { tenant: sel.tenant };
  let rec;
  // Gone from the list (destroyed): nothing to ask the API for.
  if (!state.sandboxes.some((s) => s.tenant === sel.tenant && s.id === sel.id)) {
    show("#detail-record", "(gone)");
    for (const p of DETAIL_PANES) show(p, "");
    return;
  }
  // Not while an action of ours changes the sandbox: it answers 503 in
  // the transition, 404 once destroyed. The refresh after the action
  // shows the outcome.
  if (state.acting) return;
  try {
    rec = await api("GET", base, opt);
  } catch (e) {
    show("#detail-record", e.status === 404 ? "(gone)" : e.message);
    for (const p of DETAIL_PANES) show(p, "");
    return;
  }
  show("#detail-record", rec);
  if (state.acting) return;
  // A data call would wake a sleeping sandbox: processes only while it runs.
  if (rec.state === "running") {
    api("GET", base + "/processes", opt).then((v) => show("#detail-processes", v),
      (e) => show("#detail-processes", e.message));
  } else {
    show("#detail-processes", "(not running)");
  }
  api("GET", base + "/tunnels", opt).then((v) => show("#detail-tunnels", v),
    (e) => show("#detail-tunnels", e.message));
  api("GET", base + "/ports", opt).then((v) => show("#detail-ports", v),
    (e) => show("#detail-ports", e.message));
  // Its snapshots (the tenant's, by this sandbox; first page, newest first).
  api("GET", "/v1/snapshots?limit=20&sandbox=" + encodeURIComponent(sel.id), opt)
    .then((v) => show("#detail-snapshots", v), (e) => show("#detail-snapshots", e.message));
}

function resetConfirm() {
  const b = $('#detail [data-action="destroy"]');
  b.textContent = "Destroy";
  b.classList.remove("confirm");
}

async function act(action) {
  const sel = state.selected;
  if (action === "close") {
    state.selected = null;
    $("#detail").hidden = true;
    renderSandboxes();
    return;
  }
  if (!sel) return;
  const b = $('#detail [data-action="destroy"]');
  if (action === "destroy" && !b.classList.contains("confirm")) {
    b.textContent = "Really destroy?";
    b.classList.add("confirm");
    return;
  }
  resetConfirm();
  const base = "/v1/sandboxes/" + encodeURIComponent(sel.id);
  const status = $("#detail-status");
  status.textContent = action + "…";
  state.acting = true;
  try {
    if (action === "destroy") {
      await api("DELETE", base, { tenant: sel.tenant });
      state.sandboxes = state.sandboxes.filter((s) => s.tenant !== sel.tenant || s.id !== sel.id);
    } else {
      await api("POST", base + "/" + action, { tenant: sel.tenant });
    }
    status.textContent = action + ": done";
  } catch (e) {
    status.textContent = action + ": " + e.message;
  } finally {
    state.acting = false;
  }
  await refresh();
}

// ---- the live feed --------------------------------------------------------

function addEvent(id, type, data) {
  const li = document.createElement("li");
  const when = new Date(Number(id.split("-")[0]));
  const who = data.tenant ? data.tenant + "/" + (data.id || "") : "";
  li.dataset.type = type;
  if (data.id) li.dataset.sandbox = data.id;
  li.textContent = when.toISOString().slice(11, 23) + " " + type + " " + who +
    (data.node ? " @" + data.node : "") + (data.generation ? " g" + data.generation : "");
  const list = $("#events");
  list.insertBefore(li, list.firstChild);
  while (list.children.length > EVENTS_KEPT) list.removeChild(list.lastChild);
}

// Parse one SSE block ("id: …\nevent: …\ndata: …"); comments are ignored.
function onBlock(block) {
  let id = "", type = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue;
    const i = line.indexOf(":");
    const k = i < 0 ? line : line.slice(0, i);
    const v = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
    if (k === "id") id = v;
    else if (k === "event") type = v;
    else if (k === "data") data += v;
  }
  if (!data) return;
  let obj;
  try { obj = JSON.parse(data); } catch (e) { return; }
  if (type === "error") {
    $("#events-status").textContent = "stream error: " + (obj.error ? obj.error.message : "");
    return;
  }
  if (id) state.lastEventId = id;
  addEvent(id || "0-0", type, obj);
  if (!state.pending) state.pending = setTimeout(() => { state.pending = null; refresh(); }, 300);
}

// Read /v1/events until it ends, then reconnect from the last id seen.
async function runFeed() {
  const ctl = new AbortController();
  state.feed = ctl;
  while (state.feed === ctl) {
    const headers = { Authorization: "Bearer " + state.key, Accept: "text/event-stream" };
    if (state.lastEventId) headers["Last-Event-ID"] = state.lastEventId;
    try {
      const r = await fetch("/v1/events", { headers, cache: "no-store", credentials: "omit",
        signal: ctl.signal });
      if (!r.ok) throw new Error("HTTP " + r.status);
      $("#events-status").textContent = "live";
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
        let at;
        while ((at = buf.indexOf("\n\n")) >= 0) {
          onBlock(buf.slice(0, at));
          buf = buf.slice(at + 2);
        }
      }
    } catch (e) {
      if (state.feed !== ctl) return;
      $("#events-status").textContent = "reconnecting (" + e.message + ")";
    }
    await new Promise((ok) => setTimeout(ok, 1000));
  }
}

// ---- the page -------------------------------------------------------------

async function refresh() {
  if (!state.key) return;
  try {
    state.nodes = (await api("GET", "/v1/nodes")).nodes;
    renderNodes();
    await loadSandboxes();
    renderSandboxes();
    await loadDetail();
    setStatus("connected, " + new Date().toISOString().slice(11, 19) + " UTC");
  } catch (e) {
    setStatus(e.status === 401 || e.status === 403 ? "the key is not an admin key (" + e.message + ")"
      : "error: " + e.message);
  }
}

function connect() {
  if (state.feed) state.feed.abort();
  state.feed = null;
  clearInterval(state.refreshTimer);
  if (!state.key) { setStatus("not connected"); return; }
  sessionStorage.setItem(KEY_SLOT, state.key);
  refresh();
  state.refreshTimer = setInterval(refresh, REFRESH_MS);
  runFeed();
}

$("#login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.key = $("#key").value.trim();
  $("#key").value = "";
  connect();
});
$("#forget").addEventListener("click", () => {
  sessionStorage.removeItem(KEY_SLOT);
  state.key = "";
  connect();
});
for (const id of ["#f-tenant", "#f-label", "#f-node", "#f-state"])
  $(id).addEventListener("input", renderSandboxes);
for (const b of document.querySelectorAll("#detail [data-action]"))
  b.addEventListener("click", () => act(b.dataset.action));
connect();
