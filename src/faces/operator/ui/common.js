// subagentd live view, shared by its scripts: constants, the page state and
// formatting helpers. The scripts are classic scripts loaded in order
// (common.js, host.js, tree.js, detail.js, app.js) and share one global
// scope: one calls into another only once all are loaded (app.js, the
// last, starts the page).
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
  return usage ? `${usage.input_tokens || 0} in / ${usage.output_tokens || 0} out; ${costText(usage)}` : "";
}

// Dollars, or "no price" when no call was priced: a route without a price
// has no cost, and 0 would claim it was free.
function costText(usage) {
  if (!usage || usage.cost_usd == null) return "no price";
  return dollars(usage.cost_usd);
}

function dollars(amount) {
  if (amount === 0) return "$0";
  return amount >= 0.01 ? `$${amount.toFixed(2)}` : `$${amount.toPrecision(2)}`;
}

function budgetText(budget) {
  if (!budget) return "—";
  const parts = [];
  if (budget.tokens != null) parts.push(`${budget.tokens} tok`);
  if (budget.steps != null) parts.push(`${budget.steps} steps`);
  if (budget.wall_seconds != null) parts.push(`${Math.round(budget.wall_seconds)} s`);
  if (budget.cost_usd != null) parts.push(dollars(budget.cost_usd));
  return parts.length ? parts.join(", ") : "—";
}

function statusBadge(status) {
  return `<span class="status s-${escapeHtml(status)}">${escapeHtml(status)}</span>`;
}
