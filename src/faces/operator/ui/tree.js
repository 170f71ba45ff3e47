// subagentd live view: the subagent tree. One array in tree order; only the
// rows in view are in the DOM, and every change is drawn once per animation
// frame.
"use strict";

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
      <span>${statusBadge(row.status)}${row.waiting_for ? ` <span class="waiting-mark" data-waiting="${escapeHtml(row.waiting_for)}" title="Waiting for a person: ${escapeHtml(row.waiting_for)}">✋ ${escapeHtml(row.waiting_for)}</span>` : ""}</span>
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
