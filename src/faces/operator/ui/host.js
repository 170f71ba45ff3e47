// subagentd live view: talking to the host (the admin API, with the token
// in a header), the session list, and the chosen session's live event
// stream (/admin/stream, SSE read through fetch).
"use strict";

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
    state.mcpServers = body.mcp_servers || [];
    drawSessions();
    // The page opens on a session: the one the address names, else the
    // first listed (once there is one).
    if (!state.session && !new URLSearchParams(location.hash.slice(1)).get("session") && state.sessions.length) {
      chooseSession(state.sessions[0].session_id);
    }
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
        <td class="agent" title="${escapeHtml(`${s.agent_id} (${s.peer})`)}">${escapeHtml(s.agent_id)}</td>
        <td class="age">${formatAge(s.age_seconds)}</td>
        <td>${chips || '<span class="muted">none</span>'}</td></tr>`;
    })
    .join("");
  const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;
  // Each MCP server with its state: "fs ready (14 tools)", "web failed: why".
  const servers = (state.mcpServers || []).map((server) =>
    server.state === "ready"
      ? `${server.name} ready (${plural(server.tools, "tool")})`
      : `${server.name} ${server.state}${server.reason ? `: ${server.reason}` : ""}`,
  );
  const mcp = servers.length ? ` · MCP: ${servers.join(", ")}` : "";
  $("host-summary").textContent = `${plural(state.sessions.length, "session")} · ${plural(total, "subagent")}${mcp}`;
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
  const event = message.event || {};
  // A person is asked (in any session): the panel shows it at once.
  if (event.event === "approval_requested" || event.event === "input_requested") loadPeople();
  if (message.session !== state.session) return;
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
  const shown = `${row.status}|${row.waiting_for}|${row.error}|${tokens(row.usage)}|${tokens(row.subtree_usage)}|${costText(row.subtree_usage)}`;
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
  // Who waits for a person: set by the announcement, gone with the wait.
  if (event.event === "approval_requested") row.waiting_for = "approval";
  else if (event.event === "input_requested") row.waiting_for = "input";
  else if (content.status && content.status !== "WAITING") row.waiting_for = null;
  if (content.usage) row.usage = content.usage;
  if (content.subtree_usage) row.subtree_usage = content.subtree_usage;
  if (content.usage || event.event === "spawned") scheduleTree(); // ancestors' subtree totals moved
  if (shown !== `${row.status}|${row.waiting_for}|${row.error}|${tokens(row.usage)}|${tokens(row.subtree_usage)}|${costText(row.subtree_usage)}`) draw();
  if (id === state.chosen) {
    drawTimeline();
    loadDetail();
  }
}
