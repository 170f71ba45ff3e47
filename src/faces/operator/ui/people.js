// subagentd live view: the "Waiting for you" panel. Every approval and
// question waiting for a person, across sessions (/admin/approvals), with
// who asks (session and path, each a link into the tree), the tool and its
// arguments (pretty-printed, long values folded), age and time left; each
// answered from here (POST /admin/approvals/{id}, after a confirmation).
"use strict";

const PEOPLE_POLL_MS = 2000;
const FOLD_AT = 160; // characters of a string shown before it is folded

const people = { pending: [], shown: "" };

// A JSON value as indented HTML, strings past FOLD_AT folded.
function jsonHtml(value, depth) {
  const pad = (d) => `<div class="json-line" style="padding-left:${d * 14}px">`;
  if (typeof value === "string") {
    if (value.length <= FOLD_AT) return `<span class="json-str">${escapeHtml(JSON.stringify(value))}</span>`;
    return `<details class="fold"><summary><span class="json-str">${escapeHtml(JSON.stringify(value.slice(0, FOLD_AT)).slice(0, -1))}…"</span>
      <span class="muted">(${value.length} characters)</span></summary><pre>${escapeHtml(value)}</pre></details>`;
  }
  if (Array.isArray(value)) {
    if (!value.length) return "[]";
    return `[${value.map((item) => `${pad(depth + 1)}${jsonHtml(item, depth + 1)},</div>`).join("")}${pad(depth)}]</div>`;
  }
  if (value && typeof value === "object") {
    const keys = Object.keys(value);
    if (!keys.length) return "{}";
    const lines = keys.map((key) => `${pad(depth + 1)}<span class="json-key">${escapeHtml(JSON.stringify(key))}</span>: ${jsonHtml(value[key], depth + 1)},</div>`);
    return `{${lines.join("")}${pad(depth)}}</div>`;
  }
  return `<span class="json-lit">${escapeHtml(JSON.stringify(value))}</span>`;
}

function pathHtml(request) {
  const session = `<a href="#" data-session-link="${escapeHtml(request.session_id)}" class="mono">${escapeHtml(request.session_id.slice(0, 8))}</a>`;
  const steps = (request.path || []).map((id) =>
    `<a href="#" data-session-of="${escapeHtml(request.session_id)}" data-goto-sub="${escapeHtml(id)}" class="mono">${escapeHtml(id)}</a>`);
  return [session, ...steps].join(" › ");
}

function askHtml(request) {
  const id = escapeHtml(request.id);
  const times = `<span class="muted">asked <span data-age>${formatAge(request.age_seconds)}</span> ago ·
    <span data-left>${formatAge(request.left_seconds)}</span> left</span>`;
  if (request.kind === "question") {
    const choices = (request.choices || []).map((choice) =>
      `<button type="button" data-answer="${escapeHtml(choice)}">${escapeHtml(choice)}</button>`).join(" ");
    return `<div class="ask" data-id="${id}" data-kind="question">
      <div class="ask-head"><strong>Question</strong> · ${pathHtml(request)} · ${times}</div>
      <div class="ask-question">${escapeHtml(request.question)}</div>
      <div class="ask-actions">${choices}
        <input class="answer-text" type="text" placeholder="Your answer" autocomplete="off">
        <button type="button" data-answer-text="1">Answer</button></div></div>`;
  }
  const server = request.server ? ` <span class="muted">on ${escapeHtml(request.server)}</span>` : "";
  return `<div class="ask" data-id="${id}" data-kind="approval">
    <div class="ask-head"><strong class="mono">${escapeHtml(request.tool)}</strong>${server} · ${pathHtml(request)} · ${times}</div>
    <div class="ask-reason muted">${escapeHtml(request.reason || "")}</div>
    <div class="args mono">${jsonHtml(request.arguments ?? {}, 0)}</div>
    <div class="ask-actions">
      <input class="note" type="text" placeholder="Note (the agent is told it with a denial)" autocomplete="off">
      <button type="button" data-decision="approve">Approve</button>
      <button type="button" class="danger" data-decision="deny">Deny</button></div></div>`;
}

function drawPeople() {
  const pane = $("people-pane");
  pane.hidden = people.pending.length === 0;
  $("people-count").textContent = people.pending.length ? `(${people.pending.length})` : "";
  const ids = people.pending.map((request) => request.id).join(" ");
  if (ids !== people.shown) {
    // Redrawn only when the set changes: a note being typed stays.
    $("people-list").innerHTML = people.pending.map(askHtml).join("");
    people.shown = ids;
    return;
  }
  for (const request of people.pending) {
    const row = document.querySelector(`.ask[data-id="${CSS.escape(request.id)}"]`);
    if (!row) continue;
    row.querySelector("[data-age]").textContent = formatAge(request.age_seconds);
    row.querySelector("[data-left]").textContent = formatAge(request.left_seconds);
  }
}

async function loadPeople() {
  try {
    const body = await api("/admin/approvals");
    people.pending = body.pending || [];
    drawPeople();
  } catch (error) {
    failed(error);
  }
}

async function answerPerson(id, body, asked) {
  if (!window.confirm(asked)) return;
  try {
    const reply = await api(`/admin/approvals/${encodeURIComponent(id)}`, {
      method: "POST",
      headers: headers({ "X-Subagentd-Confirm": "yes", "Content-Type": "application/json" }),
      body: JSON.stringify(body),
    });
    $("people-note").textContent = `${reply.decision}: ${reply.accepted ? "sent to the agent" : "the agent was gone"}.`;
  } catch (error) {
    if (!failed(error)) window.alert(`Answer failed: ${error.message}`);
  }
  loadPeople();
  if (state.session) loadTree();
}

$("people-list").addEventListener("click", (event) => {
  const link = event.target.closest("a");
  if (link) {
    event.preventDefault();
    const session = link.dataset.sessionLink || link.dataset.sessionOf;
    if (session && session !== state.session) chooseSession(session);
    if (link.dataset.gotoSub) {
      chooseSubagent(link.dataset.gotoSub);
    }
    return;
  }
  const row = event.target.closest(".ask");
  if (!row) return;
  const request = people.pending.find((r) => r.id === row.dataset.id);
  if (!request) return;
  const who = `${request.subagent_id} (${(request.path || []).join(" › ")})`;
  const decision = event.target.dataset.decision;
  if (decision) {
    const note = row.querySelector(".note").value.trim();
    const verb = decision === "approve" ? "Approve" : "Deny";
    answerPerson(request.id, { decision, note }, `${verb} ${request.tool} for ${who}?\n\n${JSON.stringify(request.arguments)}`);
    return;
  }
  const answer = event.target.dataset.answer ?? (event.target.dataset.answerText ? row.querySelector(".answer-text").value : null);
  if (answer != null && answer !== "") {
    answerPerson(request.id, { answer }, `Answer ${who}:\n\n${answer}`);
  }
});

setInterval(loadPeople, PEOPLE_POLL_MS);
