// subagentd live view: one subagent in detail, its timeline, and the
// operator's cancel and terminate.
"use strict";

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
    <dt>Cost</dt><dd id="detail-cost">${costText(d.usage)}; subtree ${costText(d.subtree_usage)}</dd>
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
