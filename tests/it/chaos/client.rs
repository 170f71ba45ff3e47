//! The chaos clients' workload and its checks: each client builds trees
//! (steps, and parents with two children), never sends a changing request
//! twice, remembers every result it was told, and at the end checks its
//! session against it.

use super::http_wire::HttpWire;
use super::tcp_wire::TcpWire;
use super::wire::Wire;
use super::{
    AbortOnPanic, Shared, Stats, ABORTED, HTTP_CLIENTS, PATIENCE, SETTLED, SPAWN_BUDGET, SPAWN_SLACK, TERMINAL,
};
use fastrand::Rng;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A result a client was told.
struct Told {
    pub(super) status: Value,
    result: Value,
}

enum Delegated {
    Accepted,
    /// May or may not have been served: the subagent is left alone.
    Unknown,
    Refused,
}

struct Client<W: Wire> {
    pub(super) wire: W,
    pub(super) label: String,
    pub(super) rng: Rng,
    pub(super) rounds: u64,
    /// Every result told, by subagent id (its status updated when the
    /// client terminates it).
    pub(super) told: BTreeMap<String, Told>,
    /// Parents whose result (with their two children) was told.
    parents: BTreeSet<String>,
    /// Every subagent whose task a delegate accepted.
    pub(super) accepted: BTreeSet<String>,
    /// Subagents whose delegate may or may not have been served.
    pub(super) uncertain: BTreeSet<String>,
    /// Subagents not terminated, at most (the session's quota is 256).
    live: usize,
    /// Spawns sent (children and abandoned ones included).
    spawned: u64,
    pub(super) notes: Vec<String>,
    pub(super) violations: Vec<String>,
}

/// `steps` progress steps with short sleeps, then `{"token": token}`.
fn step_script(token: &str, rng: &mut Rng) -> Value {
    let mut script = Vec::new();
    for n in 0..rng.usize(2..=5) {
        script.push(json!({ "progress": format!("s{n}") }));
        script.push(json!({ "sleep_ms": rng.u64(50..=300) }));
    }
    script.push(json!({ "return": { "token": token } }));
    Value::Array(script)
}

/// A parent that spawns children `NAME-a` and `NAME-b`, awaits them and
/// returns `{"token": NAME}` (with `children` added by the adapter).
fn tree_script(name: &str, rng: &mut Rng) -> Value {
    let mut child = |suffix: &str| {
        let child_name = format!("{name}-{suffix}");
        let script =
            json!([{ "progress": "c" }, { "sleep_ms": rng.u64(100..=400) }, { "return": { "child": child_name } }]);
        let task = json!({ "name": "c", "instruction": "c", "metadata": { "script": script } });
        json!({ "spawn": { "agent": { "name": child_name, "model": "scripted" }, "task": task } })
    };
    let (a, b) = (child("a"), child("b"));
    json!([{ "progress": "p" }, a, b, { "await_children": {} }, { "return": { "token": name } }])
}

impl<W: Wire> Client<W> {
    pub(super) fn new(wire: W, label: &str, seed: u64) -> Self {
        Self {
            wire,
            label: label.to_owned(),
            rng: Rng::with_seed(seed),
            rounds: 0,
            told: BTreeMap::new(),
            parents: BTreeSet::new(),
            accepted: BTreeSet::new(),
            uncertain: BTreeSet::new(),
            live: 0,
            spawned: 0,
            notes: Vec::new(),
            violations: Vec::new(),
        }
    }

    pub(super) fn note(&mut self, what: String) {
        if self.notes.len() < 20 {
            self.notes.push(format!("{}: {what}", self.label));
        }
    }

    /// The new subagent's id; `None` when the spawn may or may not have
    /// been served, or failed.
    pub(super) fn spawn(&mut self, name: &str, shared: &Shared) -> Result<Option<String>, String> {
        let spawn = json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": name, "model": "scripted" } });
        let reply = self.wire.request(spawn, false, shared)?;
        self.live += 1;
        self.spawned += 1;
        let id = reply.as_ref().and_then(|reply| reply["subagent_id"].as_str().map(str::to_owned));
        if let (None, Some(reply)) = (&id, &reply) {
            self.note(format!("spawn {name}: {reply}"));
        }
        Ok(id)
    }

    pub(super) fn delegate(&mut self, id: &str, script: Value, shared: &Shared) -> Result<Delegated, String> {
        let task = json!({ "name": "t", "instruction": "run", "metadata": { "script": script } });
        let delegate = json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": id, "task": task });
        Ok(match self.wire.request(delegate, false, shared)? {
            None => Delegated::Unknown,
            Some(reply) if reply["accepted"] == true => Delegated::Accepted,
            Some(reply) if reply["type"] == "error" => {
                self.note(format!("delegate to {id}: {reply}"));
                Delegated::Unknown
            }
            Some(reply) => {
                self.note(format!("a delegate to a fresh subagent {id} was refused: {reply}"));
                Delegated::Refused
            }
        })
    }

    /// Awaits `id` until its status is one of `wanted` (or an error, or
    /// `within` passed): the last answer.
    fn await_until(&mut self, id: &str, wanted: &[&str], within: Duration, shared: &Shared) -> Result<Value, String> {
        let deadline = Instant::now() + within;
        loop {
            let ask = json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": id });
            let answer = self.wire.request(ask, true, shared)?.unwrap_or_default();
            let status = answer["status"].as_str().unwrap_or_default();
            if answer["type"] == "error" || wanted.contains(&status) || Instant::now() > deadline {
                return Ok(answer);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn terminate(&mut self, id: &str, shared: &Shared) -> Result<(), String> {
        let terminate = json!({ "type": "SUBAGENT_TERMINATE_REQ", "subagent_id": id });
        let reply = self.wire.request(terminate, true, shared)?.unwrap_or_default();
        if reply["event"] == "terminated" {
            if let Some(told) = self.told.get_mut(id) {
                told.status = json!("TERMINATED");
            }
            let stopped = if self.parents.contains(id) { 3 } else { 1 };
            self.live = self.live.saturating_sub(stopped);
        } else {
            self.note(format!("terminate {id}: {reply}"));
        }
        Ok(())
    }

    /// What a finished task should have returned; a parent with more than
    /// the two children its script spawns is a subagent spawned twice.
    fn check_outcome(&mut self, id: &str, name: &str, tree: bool, answer: &Value) {
        let result = &answer["result"];
        if answer["status"] != "COMPLETED" || result["token"] != name {
            self.note(format!("{id} ({name}) ended otherwise than its script says: {answer}"));
            return;
        }
        if !tree {
            return;
        }
        let children = result["children"].as_object().map_or(0, |children| children.len());
        let text = result["children"].to_string();
        for suffix in ["a", "b"] {
            let seen = text.matches(&format!("\"{name}-{suffix}\"")).count();
            if seen > 1 {
                self.violations.push(format!(
                    "{}: child {name}-{suffix} of {id} appears {seen} times in its result: {result}",
                    self.label
                ));
            }
        }
        if children > 2 {
            self.violations.push(format!(
                "{}: parent {id} ({name}) has {children} children, its script spawns two: {result}",
                self.label
            ));
        } else if children < 2 {
            self.note(format!("parent {id} ({name}) has {children} children: {result}"));
        }
    }

    /// Sends a request and gives up on it at once: a list, or a spawn under
    /// a name of its own (listed once at most).
    pub(super) fn abandon(&mut self, round: u64) {
        let message = if self.rng.bool() {
            json!({ "type": "SUBAGENT_LIST_REQ" })
        } else {
            self.live += 1;
            self.spawned += 1;
            let name = format!("{}-r{round}x", self.label);
            json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": name, "model": "scripted" } })
        };
        self.wire.abandon(message, &mut self.rng);
    }

    /// One round: a subagent (or a parent with two children) spawned, a
    /// task delegated and awaited, the subagent often terminated after.
    pub(super) fn round(&mut self, shared: &Shared) -> Result<(), String> {
        self.rounds += 1;
        let round = self.rounds;
        let pick = self.rng.u32(0..100);
        if pick < 8 {
            self.abandon(round);
            return Ok(());
        }
        let tree = pick >= 72;
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            if started.elapsed() > 2 * PATIENCE {
                return Err(format!("{}: round {round} got no task through in {:?}", self.label, 2 * PATIENCE));
            }
            attempt += 1;
            let name = format!("{}-r{round}{}{attempt}", self.label, if tree { "p" } else { "s" });
            let Some(id) = self.spawn(&name, shared)? else { continue };
            let script = if tree { tree_script(&name, &mut self.rng) } else { step_script(&name, &mut self.rng) };
            match self.delegate(&id, script, shared)? {
                Delegated::Accepted => {
                    self.accepted.insert(id.clone());
                }
                Delegated::Unknown => {
                    self.uncertain.insert(id);
                    continue;
                }
                Delegated::Refused => continue,
            }
            let answer = self.await_until(&id, &TERMINAL, PATIENCE, shared)?;
            if !TERMINAL.contains(&answer["status"].as_str().unwrap_or_default()) {
                return Err(format!("{}: the accepted task of {id} ({name}) never ended: {answer}", self.label));
            }
            self.check_outcome(&id, &name, tree, &answer);
            self.told.insert(id.clone(), Told { status: answer["status"].clone(), result: answer["result"].clone() });
            if tree {
                self.parents.insert(id.clone());
                self.live += 2;
                self.spawned += 2;
            }
            if self.rng.u32(0..100) < 70 || self.live > 150 {
                self.terminate(&id, shared)?;
            }
            return Ok(());
        }
    }

    pub(super) fn list(&mut self, shared: &Shared) -> Result<Vec<Value>, String> {
        let reply = self.wire.request(json!({ "type": "SUBAGENT_LIST_REQ" }), true, shared)?.unwrap_or_default();
        reply["subagents"].as_array().cloned().ok_or_else(|| format!("not a list: {reply}"))
    }

    /// The invariants, on this session; false when it did not answer.
    fn verify(&mut self, shared: &Shared) -> bool {
        let (label, session) = (self.label.clone(), self.wire.session().to_owned());
        let rows = match self.list(shared) {
            Ok(rows) => rows,
            Err(err) => {
                self.violations.push(format!("{label}: session {session} never answered a list: {err}"));
                return false;
            }
        };
        // No subagent twice.
        let mut ids: BTreeMap<&str, usize> = BTreeMap::new();
        let mut names: BTreeMap<&str, usize> = BTreeMap::new();
        let mut children: BTreeMap<&str, usize> = BTreeMap::new();
        for row in &rows {
            *ids.entry(row["subagent_id"].as_str().unwrap_or_default()).or_default() += 1;
            *names.entry(row["name"].as_str().unwrap_or_default()).or_default() += 1;
            if let Some(parent) = row["parent_agent_id"].as_str() {
                *children.entry(parent).or_default() += 1;
            }
        }
        for (id, n) in ids.iter().filter(|(_, n)| **n > 1) {
            self.violations.push(format!("{label}: subagent {id} listed {n} times in session {session}"));
        }
        for (name, n) in names.iter().filter(|(_, n)| **n > 1) {
            self.violations.push(format!("{label}: {n} subagents named {name} (spawned once) in session {session}"));
        }
        for parent in &self.parents {
            let n = children.get(parent.as_str()).copied().unwrap_or(0);
            if n != 2 {
                self.violations
                    .push(format!("{label}: parent {parent} has {n} children listed, its script spawns two"));
            }
        }
        // Every result told is unchanged.
        let told: Vec<(String, Value, Value)> =
            self.told.iter().map(|(id, told)| (id.clone(), told.status.clone(), told.result.clone())).collect();
        for (id, status, result) in &told {
            match self.await_until(id, &TERMINAL, PATIENCE, shared) {
                Ok(answer) if answer["status"] == *status && answer["result"] == *result => {}
                Ok(answer) => self
                    .violations
                    .push(format!("{label}: the result of {id} changed: told {status} {result}, now {answer}")),
                Err(err) => {
                    self.violations.push(format!("{label}: session {session} stopped answering: {err}"));
                    return false;
                }
            }
        }
        // Every accepted task reached a terminal state; no task is left
        // running (a delegate that may have been served included).
        let mut pending: Vec<(String, bool)> =
            self.accepted.iter().filter(|id| !self.told.contains_key(*id)).map(|id| (id.clone(), true)).collect();
        pending.extend(self.uncertain.iter().map(|id| (id.clone(), false)));
        for (id, accepted) in pending {
            let wanted: &[&str] = if accepted { &TERMINAL } else { &SETTLED };
            match self.await_until(&id, wanted, PATIENCE, shared) {
                Ok(answer) if wanted.contains(&answer["status"].as_str().unwrap_or_default()) => {}
                Ok(answer) => self.violations.push(format!("{label}: the task of {id} never ended: {answer}")),
                Err(err) => {
                    self.violations.push(format!("{label}: session {session} stopped answering: {err}"));
                    return false;
                }
            }
        }
        match self.list(shared) {
            Ok(rows) => {
                for row in rows.iter().filter(|row| row["status"] == "RUNNING" || row["status"] == "WAITING") {
                    self.violations.push(format!("{label}: still running once every task was awaited: {row}"));
                }
                true
            }
            Err(err) => {
                self.violations.push(format!("{label}: session {session} stopped answering: {err}"));
                false
            }
        }
    }
}

/// What a client thread hands back.
pub(super) struct Report {
    pub(super) label: String,
    pub(super) session: String,
    pub(super) fatal: Option<String>,
    pub(super) violations: Vec<String>,
    pub(super) notes: Vec<String>,
    pub(super) stats: Stats,
    /// Its session answered the final checks.
    pub(super) checked: bool,
    pub(super) rounds: u64,
    pub(super) told: usize,
    pub(super) uncertain: usize,
}

impl Report {
    pub(super) fn failed(label: &str, fatal: String) -> Self {
        Self {
            label: label.to_owned(),
            session: String::new(),
            fatal: Some(fatal),
            violations: Vec::new(),
            notes: Vec::new(),
            stats: Stats::default(),
            checked: false,
            rounds: 0,
            told: 0,
            uncertain: 0,
        }
    }
}

fn drive<W: Wire>(mut client: Client<W>, shared: &Shared) -> Report {
    shared.ready.fetch_add(1, Ordering::AcqRel);
    let began = Instant::now();
    let mut fatal = None;
    while !shared.stop.load(Ordering::Acquire) && !shared.aborted() {
        // Spawns at the pace that keeps every record of the run.
        let pace = SPAWN_BUDGET * began.elapsed().as_millis() as u64 / (shared.seconds * 1000).max(1);
        if client.spawned >= SPAWN_SLACK + pace {
            std::thread::sleep(Duration::from_millis(100));
            continue;
        }
        if let Err(err) = client.round(shared) {
            fatal = Some(err);
            break;
        }
        std::thread::sleep(Duration::from_millis(client.rng.u64(50..=250)));
    }
    if fatal.as_deref().is_some_and(|fatal| fatal != ABORTED) {
        shared.abort.store(true, Ordering::Release);
    }
    let checked = fatal.is_none() && !shared.aborted() && client.verify(shared);
    Report {
        label: client.label.clone(),
        session: client.wire.session().to_owned(),
        fatal,
        violations: std::mem::take(&mut client.violations),
        notes: std::mem::take(&mut client.notes),
        rounds: client.rounds,
        told: client.told.len(),
        uncertain: client.uncertain.len(),
        stats: std::mem::take(client.wire.stats()),
        checked,
    }
}

pub(super) fn run_client(index: usize, seed: u64, shared: &Shared) -> Report {
    let _abort = AbortOnPanic(&shared.abort);
    let opened = if index < HTTP_CLIENTS {
        let label = format!("h{index}");
        HttpWire::open(&shared.http, &label, shared).map(|wire| drive(Client::new(wire, &label, seed), shared))
    } else {
        let label = format!("t{index}");
        TcpWire::open(&shared.tcp, &label).map(|wire| drive(Client::new(wire, &label, seed), shared))
    };
    opened.unwrap_or_else(|err| {
        shared.abort.store(true, Ordering::Release);
        Report::failed(&format!("client {index}"), err)
    })
}
