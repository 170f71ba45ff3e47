// subagentd live view: reads /admin/* and follows /admin/stream (SSE read
// through fetch, so the admin token can travel in a header). The tree is
// one array in tree order; only the rows in view are in the DOM, and every
// change is drawn once per animation frame.
//
// This script comes last (index.html loads common.js, host.js, tree.js,
// detail.js and people.js before it): it keeps the choice in the address, wires the page's
// controls and starts it.
"use strict";

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
loadPeople();
setInterval(loadSessions, SESSIONS_POLL_MS);
restoreLocation();
