// The terminal page: pick a sandbox, open (or make) a terminal, type.
// The API key stays in this tab (sessionStorage) and goes only to the
// API; the WebSocket carries a single-use ticket instead (browsers cannot
// set headers on a WebSocket).
"use strict";

const $ = (id) => document.getElementById(id);
const state = { ws: null, sandbox: null, id: null };

const term = new Terminal({ cursorBlink: true, convertEol: false, scrollback: 5000 });
const fit = new FitAddon.FitAddon();
term.loadAddon(fit);
term.open($("term"));
fit.fit();
window.sbxTerm = term;          // for tests and the console
window.sbxState = state;

function status(text) {
  $("status").textContent = text;
}

async function api(method, path, body) {
  const r = await fetch(path, {
    method,
    headers: Object.assign({ Authorization: "Bearer " + $("key").value.trim() },
      body ? { "Content-Type": "application/json" } : {}),
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await r.text();
  const data = text ? JSON.parse(text) : null;
  if (!r.ok) {
    const err = data && data.error ? data.error.code + ": " + data.error.message : r.statusText;
    throw new Error(err);
  }
  return data;
}

async function loadSandboxes() {
  sessionStorage.setItem("sbx-key", $("key").value.trim());
  const sel = $("sandbox");
  sel.textContent = "";
  let cursor = "";
  do {
    const page = await api("GET", "/v1/sandboxes" + (cursor ? "?cursor=" + encodeURIComponent(cursor) : ""));
    for (const sb of page.sandboxes) {
      const o = document.createElement("option");
      o.value = o.textContent = sb.id;
      sel.appendChild(o);
    }
    cursor = page.cursor || "";
  } while (cursor);
  if (sel.options.length) await loadTerminals();
  status(sel.options.length + " sandbox(es)");
}

async function loadTerminals() {
  const sel = $("terminal");
  sel.length = 1;
  if (!$("sandbox").value) return;
  const list = await api("GET", "/v1/sandboxes/" + $("sandbox").value + "/terminals");
  for (const t of list.terminals) {
    if (t.status !== "running") continue;
    const o = document.createElement("option");
    o.value = t.id;
    o.textContent = t.id + " (" + (t.command || "shell") + ")";
    sel.appendChild(o);
  }
}

function sendResize() {
  if (state.ws && state.ws.readyState === WebSocket.OPEN)
    state.ws.send(JSON.stringify({ type: "resize", cols: term.cols, rows: term.rows }));
}

async function open() {
  const sandbox = $("sandbox").value;
  if (!sandbox) throw new Error("pick a sandbox first");
  if (state.ws) state.ws.close();
  fit.fit();
  let id = $("terminal").value;
  if (!id) {
    const rec = await api("POST", "/v1/sandboxes/" + sandbox + "/terminals", { cols: term.cols, rows: term.rows });
    id = rec.id;
  }
  const { ticket } = await api("POST", "/v1/sandboxes/" + sandbox + "/terminals/" + id + "/ticket");
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(proto + "//" + location.host + "/v1/sandboxes/" + sandbox +
    "/terminals/" + id + "/ws?ticket=" + ticket);
  ws.binaryType = "arraybuffer";
  Object.assign(state, { ws, sandbox, id });
  term.reset();
  status("connecting to " + id);
  ws.onmessage = (ev) => {
    if (ev.data instanceof ArrayBuffer) {
      term.write(new Uint8Array(ev.data));
      return;
    }
    const msg = JSON.parse(ev.data);
    if (msg.type === "ready") {
      status(sandbox + " / " + id);
      sendResize();
      term.focus();
    } else if (msg.type === "exit") {
      status("exited with " + msg.code + (msg.signal ? " (" + msg.signal + ")" : ""));
    } else if (msg.type === "error") {
      status("error: " + msg.message);
    }
  };
  ws.onclose = (ev) => {
    if (state.ws === ws) status("closed (" + ev.code + ")");
  };
}

const encoder = new TextEncoder();
term.onData((d) => {
  if (state.ws && state.ws.readyState === WebSocket.OPEN) state.ws.send(encoder.encode(d));
});
term.onResize(sendResize);
window.addEventListener("resize", () => fit.fit());

const fail = (e) => status("error: " + e.message);
$("key").value = sessionStorage.getItem("sbx-key") || "";
$("load").onclick = () => loadSandboxes().catch(fail);
$("sandbox").onchange = () => loadTerminals().catch(fail);
$("bar").onsubmit = (ev) => { ev.preventDefault(); open().catch(fail); };
