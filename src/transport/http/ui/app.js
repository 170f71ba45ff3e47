// subagentd live view: reads /admin/* and follows /admin/stream (SSE read
// through fetch, so the admin token can travel in a header). The tree is
// one array in tree order; only the rows in view are in the DOM, and every
// change is drawn once per animation frame.
"use strict";

const ROW_HEIGHT = 26;
const TIMELINE_MAX = 200; // events kept per subagent
const TREE_REFRESH_MS = 1000; // at most one tree reload per second
const SESSIONS_POLL_MS = 3000;
const DRAW_EVERY_MS = 100; // the tree is redrawn at most ten times a second
const BUSY = new Set(["RUNNING", "WAITING"]);
const STATUSES = ["READY", "RUNNING", "WAITING", "COMPLETED", "FAILED", "CANCELLED", "TERMINATED"];

const state = {
  token: sessionStorage.getItem("subagentd-admin-token") || "",
  sessions: [],
  session: null, // the chosen session's id
  rows: new Map(), // id -> row (from the API, kept up to date by events)
  order: [], // ids in tree order
  visible: [], // ids shown (filter and collapsed subtrees applied)
  collapsed: new Set(),
  chosen: null, // the chosen subagent's id
  detail: null,
  timelines: new Map(), // id -> [{at, event, status, text}]
  filter: "",
  stream: null, // AbortController of the attached stream
  treeTimer: null,
  treeLoading: false,
  treeAgain: false,
  lastTreeLoad: 0,
  drawQueued: false,
  lastDraw: 0,
  scrollQueued: false,
  truncated: false,
};

const $ = (id) => document.getElementById(id);

function escapeHtml(text) {
  return String(text ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function formatMs(ms) {
  if (ms == null) return "—";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${Math.floor(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} m`;
}

function formatAge(seconds) {
  return formatMs(seconds * 1000);
}

function tokens(usage) {
  if (!usage) return 0;
  return (usage.input_tokens || 0) + (usage.output_tokens || 0);
}

function tokensTitle(usage) {
  return usage ? `${usage.input_tokens || 0} in / ${usage.output_tokens || 0} out` : "";
}

function budgetText(budget) {
  if (!budget) return "—";
  const parts = [];
  if (budget.tokens != null) parts.push(`${budget.tokens} tok`);
  if (budget.steps != null) parts.push(`${budget.steps} steps`);
  if (budget.wall_seconds != null) parts.push(`${Math.round(budget.wall_seconds)} s`);
  return parts.length ? parts.join(", ") : "—";
}

function statusBadge(status) {
  return `<span class="status s-${escapeHtml(status)}">${escapeHtml(status)}</span>`;
}

// ---- talking to the host -------------------------------------------------

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (state.token) h.Authorization = `Bearer ${state.token}`;
  return h;
}

class Unauthorized extends Error {}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ headers: headers(), cache: "no-store" }, options || {}));
  if (response.status === 401) throw new Unauthorized();
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function askForToken(refused) {
  const dialog = $("token-dialog");
  $("token-error").hidden = !refused;
  $("token-button").hidden = false;
  if (!dialog.open) dialog.showModal();
}

function failed(error) {
  if (error instanceof Unauthorized) {
    askForToken(Boolean(state.token));
    return true;
  }
  return false;
}

// ---- sessions ------------------------------------------------------------

async function loadSessions() {
  try {
    const body = await api("/admin/sessions");
    state.sessions = body.sessions || [];
    drawSessions();
    if (state.session && !state.sessions.some((s) => s.session_id === state.session)) {
      $("tree-note").textContent = "This session has ended.";
    }
  } catch (error) {
    if (!failed(error)) $("host-summary").textContent = `cannot reach the host: ${error.message}`;
  }
}

function drawSessions() {
  const body = $("sessions").tBodies[0];
  $("no-sessions").hidden = state.sessions.length > 0;
  $("session-count").textContent = `(${state.sessions.length})`;
  let total = 0;
  body.innerHTML = state.sessions
    .map((s) => {
      const counts = s.subagents || {};
      total += s.total || 0;
      const chips = STATUSES.filter((k) => counts[k])
        .map((k) => `<span class="status s-${k}" title="${k}">${counts[k]}</span>`)
        .join(" ");
      const classes = [s.session_id === state.session ? "selected" : "", counts.FAILED ? "has-failures" : ""].join(" ");
      return `<tr data-session="${escapeHtml(s.session_id)}" class="${classes}">
        <td class="mono" title="${escapeHtml(s.session_id)}">${escapeHtml(s.session_id.slice(0, 8))}…</td>
        <td>${escapeHtml(s.transport)}</td>
        <td title="${escapeHtml(s.peer)}">${escapeHtml(s.agent_id)}</td>
        <td class="age">${formatAge(s.age_seconds)}</td>
        <td>${chips || '<span class="muted">none</span>'}</td></tr>`;
    })
    .join("");
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  $("host-summary").textContent = `${plural(state.sessions.length, "session")} · ${plural(total, "subagent")}`;
}

function chooseSession(id) {
  if (state.session === id) return;
  state.session = id;
  state.rows = new Map();
  state.order = [];
  state.collapsed.clear();
  state.timelines = new Map();
  chooseSubagent(null);
  $("tree-title").textContent = `Session ${id}`;
  $("tree-note").textContent = "";
  saveLocation();
  drawSessions();
  attach(id);
  loadTree();
}

// ---- the stream ------------------------------------------------------------

function setConnection(text, kind) {
  const conn = $("conn");
  conn.textContent = text;
  conn.className = `conn conn-${kind}`;
}

async function attach(session) {
  if (state.stream) state.stream.abort();
  const controller = new AbortController();
  state.stream = controller;
  setConnection("connecting", "idle");
  try {
    const response = await fetch(`/admin/stream?session=${encodeURIComponent(session)}`, {
      headers: headers(),
      signal: controller.signal,
      cache: "no-store",
    });
    if (response.status === 401) throw new Unauthorized();
    if (!response.ok || !response.body) throw new Error(`HTTP ${response.status}`);
    setConnection("live", "live");
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      // Every complete event in the chunk, then one cut of the buffer (a
      // cut per event would copy the rest of the chunk each time).
      let start = 0;
      let end;
      while ((end = buffer.indexOf("\n\n", start)) >= 0) {
        onBlock(buffer.slice(start, end));
        start = end + 2;
      }
      if (start > 0) buffer = buffer.slice(start);
    }
  } catch (error) {
    if (controller.signal.aborted) return;
    if (failed(error)) {
      setConnection("no token", "reconnecting");
      return;
    }
  }
  if (controller.signal.aborted || state.stream !== controller) return;
  // The stream ended (the host restarted, or the network dropped): come back.
  setConnection("reconnecting", "reconnecting");
  setTimeout(() => {
    if (state.stream === controller && state.session === session) {
      attach(session);
      loadTree();
    }
  }, 2000);
}

function onBlock(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  if (!data.length) return;
  let message;
  try {
    message = JSON.parse(data.join("\n"));
  } catch {
    return;
  }
  if (event === "subagent") onEvent(message);
  else if (event === "session") loadSessions();
  else if (event === "resync") loadTree();
}

// One SUBAGENT_EVENT of the chosen session.
function onEvent(message) {
  if (message.session !== state.session) return;
  const event = message.event || {};
  const id = event.subagent_id;
  const content = event.content || {};
  const at = event.ts ? event.ts * 1000 : Date.now();
  const line = { at, event: event.event, status: content.status, text: content.error || content.message || "" };
  const timeline = state.timelines.get(id) || [];
  timeline.push(line);
  if (timeline.length > TIMELINE_MAX) timeline.splice(0, timeline.length - TIMELINE_MAX);
  state.timelines.set(id, timeline);
  const row = state.rows.get(id);
  if (!row) {
    // A new subagent: its name and place come with the next tree load.
    scheduleTree();
    return;
  }
  // Task times run on this browser's clock, from when the page heard of them.
  const now = Date.now();
  const wasBusy = BUSY.has(row.status);
  // Only what the row shows redraws it (progress, messages and merges do not).
  const shown = `${row.status}|${row.error}|${tokens(row.usage)}|${tokens(row.subtree_usage)}`;
  if (content.status) row.status = content.status;
  if (event.event === "delegated" || event.event === "resumed") {
    row.task_ms = 0;
    row.error = null;
    row.loadedAt = now;
  } else if (wasBusy && !BUSY.has(row.status) && row.task_ms != null) {
    row.task_ms += Math.max(0, now - row.loadedAt);
    row.loadedAt = now;
  }
  if (content.error) row.error = content.error;
  if (content.usage) row.usage = content.usage;
  if (content.subtree_usage) row.subtree_usage = content.subtree_usage;
  if (content.usage || event.event === "spawned") scheduleTree(); // ancestors' subtree totals moved
  if (shown !== `${row.status}|${row.error}|${tokens(row.usage)}|${tokens(row.subtree_usage)}`) draw();
  if (id === state.chosen) {
    drawTimeline();
    loadDetail();
  }
}

// ---- the tree ------------------------------------------------------------

function scheduleTree() {
  if (state.treeTimer) return;
  const wait = Math.max(0, state.lastTreeLoad + TREE_REFRESH_MS - Date.now());
  state.treeTimer = setTimeout(() => {
    state.treeTimer = null;
    loadTree();
  }, wait);
}

async function loadTree() {
  const session = state.session;
  if (!session) return;
  if (state.treeLoading) {
    state.treeAgain = true;
    return;
  }
  state.treeLoading = true;
  state.lastTreeLoad = Date.now();
  try {
    const body = await api(`/admin/sessions/${encodeURIComponent(session)}?limit=100000`);
    if (state.session !== session) return;
    const now = Date.now();
    const rows = new Map();
    for (const row of body.subagents) {
      row.loadedAt = now;
      rows.set(row.subagent_id, row);
    }
    state.rows = rows;
    state.order = body.subagents.map((row) => row.subagent_id);
    state.truncated = body.truncated;
    $("tree-note").textContent = body.truncated ? "Only the first 100 000 subagents are shown." : "";
    drawCounts(body.session.subagents || {});
    // The sessions table's counts for this session are as fresh as its tree.
    const listed = state.sessions.findIndex((s) => s.session_id === session);
    if (listed >= 0) {
      state.sessions[listed] = body.session;
      drawSessions();
    }
    if (state.chosen && !rows.has(state.chosen)) chooseSubagent(null);
    draw();
  } catch (error) {
    if (!failed(error)) $("tree-note").textContent = `This session cannot be read: ${error.message}`;
  } finally {
    state.treeLoading = false;
    if (state.treeAgain) {
      state.treeAgain = false;
      scheduleTree();
    }
  }
}

function drawCounts(counts) {
  $("tree-counts").innerHTML = STATUSES.filter((k) => counts[k])
    .map((k) => `<span class="chip">${statusBadge(k)} ${counts[k]}</span>`)
    .join("");
}

// The ids shown: the filter, or (with none) the tree minus collapsed subtrees.
function computeVisible() {
  const filter = state.filter.toLowerCase();
  const visible = [];
  let skipDeeperThan = Infinity;
  for (const id of state.order) {
    const row = state.rows.get(id);
    if (!row) continue;
    if (filter) {
      const haystack = `${row.name} ${row.subagent_id} ${row.model} ${row.status}`.toLowerCase();
      if (haystack.includes(filter)) visible.push(id);
      continue;
    }
    if (row.depth > skipDeeperThan) continue;
    skipDeeperThan = state.collapsed.has(id) ? row.depth : Infinity;
    visible.push(id);
  }
  state.visible = visible;
}

// Batches every change into one redraw, at most every DRAW_EVERY_MS and
// on an animation frame (none while the tab is hidden).
function draw() {
  if (state.drawQueued) return;
  state.drawQueued = true;
  const wait = Math.max(0, state.lastDraw + DRAW_EVERY_MS - performance.now());
  setTimeout(() => requestAnimationFrame(() => {
    state.drawQueued = false;
    state.lastDraw = performance.now();
    computeVisible();
    drawRows();
  }), wait);
}

// Scrolling redraws the rows in view at once (the tree has not changed).
function drawScrolled() {
  if (state.scrollQueued) return;
  state.scrollQueued = true;
  requestAnimationFrame(() => {
    state.scrollQueued = false;
    drawRows();
  });
}

function runningMs(row) {
  if (row.task_ms == null) return null;
  if (BUSY.has(row.status) && row.loadedAt != null) return row.task_ms + (Date.now() - row.loadedAt);
  return row.task_ms;
}

function drawRows() {
  const viewport = $("tree-viewport");
  const total = state.visible.length;
  $("tree-spacer").style.height = `${total * ROW_HEIGHT}px`;
  const first = Math.max(0, Math.floor(viewport.scrollTop / ROW_HEIGHT) - 10);
  const last = Math.min(total, Math.ceil((viewport.scrollTop + viewport.clientHeight) / ROW_HEIGHT) + 10);
  const html = [];
  for (let i = first; i < last; i++) {
    const row = state.rows.get(state.visible[i]);
    const caret = row.children ? (state.collapsed.has(row.subagent_id) ? "closed" : "open") : "";
    const indent = state.filter ? 0 : row.depth * 16;
    html.push(`<div class="row row-grid s-${escapeHtml(row.status)}${row.subagent_id === state.chosen ? " selected" : ""}"
      data-id="${escapeHtml(row.subagent_id)}" data-status="${escapeHtml(row.status)}" title="${escapeHtml(row.error || "")}">
      <span class="name" data-indent="${indent}"><span class="caret ${caret}" data-caret="1"></span>
        <span class="label">${escapeHtml(row.name)}</span> <span class="id mono">${escapeHtml(row.subagent_id)}</span></span>
      <span class="mono">${escapeHtml(row.model)}</span>
      <span>${statusBadge(row.status)}</span>
      <span class="num">${row.depth}</span>
      <span class="num time">${formatMs(runningMs(row))}</span>
      <span class="num" title="${tokensTitle(row.usage)}">${tokens(row.usage)}</span>
      <span class="num" title="${tokensTitle(row.subtree_usage)}">${tokens(row.subtree_usage)}</span>
      <span class="num">${budgetText(row.budget_remaining)}</span></div>`);
  }
  const rows = $("tree-rows");
  rows.style.transform = `translateY(${first * ROW_HEIGHT}px)`;
  rows.innerHTML = html.join("");
  // Through the CSSOM: the content security policy refuses style attributes.
  for (const name of rows.querySelectorAll(".name[data-indent]")) name.style.paddingLeft = `${name.dataset.indent}px`;
}

// Running times tick while tasks run.
setInterval(() => {
  for (const element of document.querySelectorAll(".row.s-RUNNING .time, .row.s-WAITING .time")) {
    const row = state.rows.get(element.parentElement.dataset.id);
    if (row) element.textContent = formatMs(runningMs(row));
  }
}, 1000);

// ---- one subagent --------------------------------------------------------

function chooseSubagent(id) {
  state.chosen = id;
  state.detail = null;
  saveLocation();
  if (!id) {
    $("detail-title").textContent = "No subagent chosen";
    $("detail-body").innerHTML = "Click a subagent in the tree.";
    $("detail-body").className = "muted";
    $("timeline").innerHTML = "";
    $("cancel-button").disabled = true;
    $("terminate-button").disabled = true;
  } else {
    loadDetail();
  }
  draw();
}

async function loadDetail() {
  const id = state.chosen;
  const session = state.session;
  if (!id || !session) return;
  try {
    const detail = await api(`/admin/sessions/${encodeURIComponent(session)}/subagents/${encodeURIComponent(id)}`);
    if (state.chosen !== id) return;
    state.detail = detail;
    drawDetail();
  } catch (error) {
    if (!failed(error)) $("detail-body").textContent = `Cannot read ${id}: ${error.message}`;
  }
}

function json(value) {
  let text = JSON.stringify(value, null, 2);
  if (text && text.length > 20000) text = `${text.slice(0, 20000)}\n… (cut at 20 000 characters)`;
  return `<pre class="json">${escapeHtml(text)}</pre>`;
}

function drawDetail() {
  const d = state.detail;
  if (!d) return;
  $("detail-title").innerHTML = `${escapeHtml(d.name)} <span class="mono muted">${escapeHtml(d.subagent_id)}</span>`;
  const body = $("detail-body");
  body.className = "";
  const parts = [];
  if (d.error) parts.push(`<div class="error-box" id="detail-error"><strong>Error:</strong> ${escapeHtml(d.error)}</div>`);
  parts.push(`<dl>
    <dt>Status</dt><dd>${statusBadge(d.status)}${d.queued ? " (queued for a running slot)" : ""}</dd>
    <dt>Model</dt><dd class="mono">${escapeHtml(d.model)}</dd>
    <dt>Parent</dt><dd class="mono">${d.parent ? `<a href="#" data-goto="${escapeHtml(d.parent)}">${escapeHtml(d.parent)}</a>` : "— (top level)"}</dd>
    <dt>Depth</dt><dd>${d.depth}</dd>
    <dt>Children</dt><dd>${d.children}</dd>
    <dt>Task time</dt><dd>${formatMs(d.task_ms)}</dd>
    <dt>Tokens</dt><dd>${tokens(d.usage)} (${tokensTitle(d.usage)}); subtree ${tokens(d.subtree_usage)}</dd>
    <dt>Budget left</dt><dd>${budgetText(d.budget_remaining)}</dd>
  </dl>`);
  if (d.task) {
    parts.push(`<h3>Task: ${escapeHtml(d.task.name)}</h3><div>${escapeHtml(d.task.instruction)}</div>`);
    if (d.task.metadata && Object.keys(d.task.metadata).length) parts.push(json(d.task.metadata));
  }
  if (d.result) parts.push(`<h3>Result</h3>${json(d.result)}`);
  parts.push(`<h3>Config</h3>${json(d.config)}`);
  body.innerHTML = parts.join("");
  $("cancel-button").disabled = !BUSY.has(d.status) && !d.queued;
  $("terminate-button").disabled = d.status === "TERMINATED";
  drawTimeline();
}

// What the host's record says of the task, for the time before the page
// heard its events.
function recordedTimeline(d) {
  const lines = [];
  if (d.task_started_at != null) lines.push({ at: d.task_started_at * 1000, event: "task started", recorded: true, text: d.task ? d.task.name : "" });
  if (d.task_ended_at != null) lines.push({ at: d.task_ended_at * 1000, event: "task ended", status: d.status, recorded: true, text: d.error || "" });
  return lines;
}

function drawTimeline() {
  const heard = state.timelines.get(state.chosen) || [];
  const firstHeard = heard.length ? heard[0].at : Infinity;
  const recorded = state.detail && state.detail.subagent_id === state.chosen ? recordedTimeline(state.detail) : [];
  const lines = recorded.filter((line) => line.at < firstHeard - 1).concat(heard);
  const items = lines
    .slice()
    .reverse()
    .map((line) => {
      const time = new Date(line.at).toLocaleTimeString();
      const bad = line.event === "failed" || line.event === "timeout" || line.status === "FAILED";
      return `<li class="${line.recorded ? "recorded" : ""}"><time>${escapeHtml(time)}</time><span>${escapeHtml(line.event)} ${line.status ? statusBadge(line.status) : ""}</span>
        <span class="${bad ? "error" : ""}">${escapeHtml(line.text)}</span></li>`;
    });
  if (!items.length) items.push('<li class="muted">No task yet, and no events since this page opened.</li>');
  $("timeline").innerHTML = items.join("");
}

async function act(action) {
  const d = state.detail;
  if (!d || !state.session) return;
  const below = action === "terminate" ? ` and everything under it (${d.children} direct children)` : " and the tasks under it";
  const verb = action === "terminate" ? "Terminate" : "Cancel the task of";
  if (!window.confirm(`${verb} ${d.name} (${d.subagent_id})${below}?\n\nThe session's client is told, as if it had asked.`)) return;
  try {
    const path = `/admin/sessions/${encodeURIComponent(state.session)}/subagents/${encodeURIComponent(d.subagent_id)}/${action}`;
    const body = await api(path, { method: "POST", headers: headers({ "X-Subagentd-Confirm": "yes" }) });
    $("tree-note").textContent = `${action}: ${body.stopped.length} subagents stopped.`;
    loadTree();
    loadDetail();
  } catch (error) {
    if (!failed(error)) window.alert(`${action} failed: ${error.message}`);
  }
}

function nextFailure() {
  const failedIds = state.visible.filter((id) => state.rows.get(id)?.status === "FAILED");
  if (!failedIds.length) {
    $("tree-note").textContent = "No failed subagent in view.";
    return;
  }
  const after = failedIds.findIndex((id) => state.visible.indexOf(id) > state.visible.indexOf(state.chosen));
  const id = failedIds[after >= 0 ? after : 0];
  chooseSubagent(id);
  scrollToRow(id);
}

function scrollToRow(id) {
  const index = state.visible.indexOf(id);
  if (index < 0) return;
  const viewport = $("tree-viewport");
  const top = index * ROW_HEIGHT;
  if (top < viewport.scrollTop || top > viewport.scrollTop + viewport.clientHeight - ROW_HEIGHT) {
    viewport.scrollTop = Math.max(0, top - viewport.clientHeight / 3);
  }
}

// ---- the address keeps the choice (a reload comes back to it) -------------

function saveLocation() {
  const params = new URLSearchParams();
  if (state.session) params.set("session", state.session);
  if (state.chosen) params.set("subagent", state.chosen);
  history.replaceState(null, "", `#${params}`);
}

function restoreLocation() {
  const params = new URLSearchParams(location.hash.slice(1));
  const session = params.get("session");
  if (session) {
    chooseSession(session);
    const subagent = params.get("subagent");
    if (subagent) chooseSubagent(subagent);
  }
}

// ---- wiring ----------------------------------------------------------------

$("sessions").addEventListener("click", (event) => {
  const row = event.target.closest("tr[data-session]");
  if (row) chooseSession(row.dataset.session);
});
$("tree-rows").addEventListener("click", (event) => {
  const row = event.target.closest(".row");
  if (!row) return;
  const id = row.dataset.id;
  if (event.target.dataset.caret && state.rows.get(id)?.children) {
    if (state.collapsed.has(id)) state.collapsed.delete(id);
    else state.collapsed.add(id);
    draw();
    return;
  }
  chooseSubagent(id);
});
$("detail-body").addEventListener("click", (event) => {
  const link = event.target.closest("[data-goto]");
  if (!link) return;
  event.preventDefault();
  chooseSubagent(link.dataset.goto);
  scrollToRow(link.dataset.goto);
});
$("tree-viewport").addEventListener("scroll", drawScrolled, { passive: true });
window.addEventListener("resize", () => draw());
$("filter").addEventListener("input", (event) => {
  state.filter = event.target.value.trim();
  draw();
});
$("next-failure").addEventListener("click", nextFailure);
$("cancel-button").addEventListener("click", () => act("cancel"));
$("terminate-button").addEventListener("click", () => act("terminate"));
$("token-button").addEventListener("click", () => askForToken(false));
$("token-form").addEventListener("submit", () => {
  state.token = $("token-input").value.trim();
  sessionStorage.setItem("subagentd-admin-token", state.token);
  loadSessions();
  if (state.session) {
    attach(state.session);
    loadTree();
  }
});

setConnection("polling", "polling");
loadSessions();
setInterval(loadSessions, SESSIONS_POLL_MS);
restoreLocation();
