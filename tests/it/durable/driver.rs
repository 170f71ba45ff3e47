//! The client of the durable tests: a TCP session that runs a workload,
//! keeps a model of everything it was told, and after each restart checks
//! the restored session against it ([`Driver::check_restored`]).

use super::workload::{Kind, Message, Phase, Worker};
use super::{text, trace, Conn, Next, TERMINAL};
use crate::e2e_support::PATIENCE;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// What the client knows of one subagent (a worker or a child).
#[derive(Debug, Default)]
pub(super) struct Sub {
    pub(super) name: Option<String>,
    // The parent subagent of a child.
    pub(super) parent: Option<String>,
    // The terminal status an event or an await told.
    pub(super) told_status: Option<String>,
    // The last terminal await answer: status, result, error.
    pub(super) told_answer: Option<Value>,
    // `resumed` attempts, in order.
    pub(super) attempts: Vec<u32>,
    // Progress messages with the epoch (restarts so far) they came in.
    pub(super) progress: Vec<(u32, String)>,
}

/// What a request id was for.
#[derive(Debug, Clone)]
enum Pending {
    Handshake,
    Spawn(usize),
    Delegate(usize),
    Await(String),
    Message(usize, usize),
    List,
    // A worker's second task, which takes what its mailbox still holds.
    Drain(usize),
    DrainAwait(usize),
}

/// A client session and its model of what it was told.
pub(super) struct Driver {
    conn: Conn,
    agent_id: String,
    pub(super) session_id: String,
    next_req: u64,
    pending: HashMap<String, Pending>,
    pub(super) workers: Vec<Worker>,
    pub(super) subs: BTreeMap<String, Sub>,
    // Restarts so far.
    epoch: u32,
    // Since the last restart: `resumed` attempts and `delegated` events.
    pub(super) resumed_now: BTreeMap<String, u32>,
    pub(super) delegated_now: BTreeSet<String>,
    // Answers kept for whoever asked.
    handshake: Option<Value>,
    lists: HashMap<String, Vec<Value>>,
    // `resumed` events over the client's whole life.
    pub(super) resumes_seen: usize,
    // When set (a graceful stop): lines reporting a task's end are kept
    // here instead of being taken as told.
    pub(super) held_at_stop: Option<Vec<Value>>,
    // The ids of the events read: events produced while no client was
    // attached are replayed at least once across crashes, and a copy (same
    // message, same id) is not a step run again.
    events_seen: BTreeSet<String>,
}

/// Whether `line` tells the client a task ended: an event, or an await's answer.
fn reports_an_end(line: &Value) -> bool {
    let event = line["type"] == "SUBAGENT_EVENT"
        && line.get("req_id").is_none()
        && ["completed", "failed", "timeout", "cancelled", "terminated"]
            .contains(&line["event"].as_str().unwrap_or(""));
    let answer = line["type"] == "SUBAGENT_AWAIT_RESP" && TERMINAL.contains(&line["status"].as_str().unwrap_or(""));
    event || answer
}

impl Driver {
    /// Connects and handshakes a new session.
    pub(super) fn connect(addr: &str, agent_id: &str) -> Self {
        let mut driver = Self {
            conn: Conn::connect(addr),
            agent_id: agent_id.to_owned(),
            session_id: String::new(),
            next_req: 0,
            pending: HashMap::new(),
            workers: Vec::new(),
            subs: BTreeMap::new(),
            epoch: 0,
            resumed_now: BTreeMap::new(),
            delegated_now: BTreeSet::new(),
            handshake: None,
            lists: HashMap::new(),
            resumes_seen: 0,
            events_seen: BTreeSet::new(),
            held_at_stop: None,
        };
        let hs = driver.handshake(None);
        assert_eq!(hs["ok"], true, "{hs}");
        driver.session_id = text(&hs["session_id"]);
        assert!(!driver.session_id.is_empty());
        driver
    }

    fn handshake(&mut self, resume: Option<&str>) -> Value {
        let mut req = json!({ "type": "handshake/req", "agent_id": self.agent_id, "agent_caps": ["multi_agent"] });
        if let Some(resume) = resume {
            req["resume_session_id"] = json!(resume);
        }
        self.handshake = None;
        self.request(Pending::Handshake, req);
        self.until("the handshake is answered", PATIENCE, |d| d.handshake.is_some());
        self.handshake.take().unwrap()
    }

    /// After a restart: a new connection that sends the resuming handshake
    /// (its answer is not waited for). Requests not answered before the kill
    /// are forgotten (their effect is checked against the restored state).
    pub(super) fn start_resume(&mut self, addr: &str) {
        self.pending.clear();
        self.epoch += 1;
        self.resumed_now.clear();
        self.delegated_now.clear();
        self.conn = Conn::connect(addr);
        self.handshake = None;
        let req = json!({ "type": "handshake/req", "agent_id": self.agent_id, "agent_caps": ["multi_agent"], "resume_session_id": self.session_id });
        self.request(Pending::Handshake, req);
    }

    /// After a restart: a new connection resuming the session.
    pub(super) fn reconnect(&mut self, addr: &str) {
        self.start_resume(addr);
        self.until("the resuming handshake is answered", PATIENCE, |d| d.handshake.is_some());
        let session = self.session_id.clone();
        let hs = self.handshake.take().unwrap();
        assert_eq!(hs["ok"], true, "resuming {session} after restart {}: {hs}", self.epoch);
        assert_eq!(hs["session_id"], session.as_str(), "the resumed session keeps its id: {hs}");
    }

    fn request(&mut self, purpose: Pending, mut body: Value) -> String {
        self.next_req += 1;
        let id = format!("r{}", self.next_req);
        body["id"] = json!(id);
        self.pending.insert(id.clone(), purpose);
        // A failed write leaves the request unanswered, as a kill does.
        self.conn.send(&body);
        id
    }

    pub(super) fn add_worker(&mut self, name: &str, kind: Kind) -> usize {
        self.workers.push(Worker::new(name.to_owned(), kind));
        let w = self.workers.len() - 1;
        self.spawn(w);
        w
    }

    fn spawn(&mut self, w: usize) {
        self.workers[w].spawn = Phase::Sent;
        let agent = json!({ "name": self.workers[w].name, "model": "m" });
        self.request(Pending::Spawn(w), json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": agent }));
    }

    fn delegate(&mut self, w: usize) {
        let worker = &mut self.workers[w];
        worker.delegate = Phase::Sent;
        let id = worker.id.clone().expect("a spawned worker");
        let task = json!({ "name": worker.name, "instruction": "work", "metadata": { "script": worker.script() } });
        self.request(Pending::Delegate(w), json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": id, "task": task }));
    }

    fn await_sub(&mut self, id: &str) -> String {
        self.request(Pending::Await(id.to_owned()), json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": id }))
    }

    /// Sends the messages a mailbox worker may get now and has not been sent.
    fn send_messages(&mut self, w: usize) {
        let Kind::Mailbox { messages, .. } = self.workers[w].kind else { return };
        let allowed = self.workers[w].messages_allowed.min(messages);
        while self.workers[w].messages.len() < allowed {
            let n = self.workers[w].messages.len();
            let content = format!("{}-m{n}", self.workers[w].name);
            self.workers[w].messages.push(Message { content: content.clone(), acked: false });
            let req = json!({
                "type": "SUBAGENT_MESSAGE_REQ",
                "from_subagent_id": self.agent_id,
                "to_subagent_id": self.workers[w].id,
                "message": { "type": "note", "content": content },
            });
            self.request(Pending::Message(w, n), req);
        }
    }

    fn list(&mut self) -> Vec<Value> {
        let req = self.request(Pending::List, json!({ "type": "SUBAGENT_LIST_REQ" }));
        self.until("the list is answered", PATIENCE, |d| d.lists.contains_key(&req));
        self.lists.remove(&req).unwrap()
    }

    fn worker_of(&self, id: &str) -> Option<usize> {
        self.workers.iter().position(|w| w.id.as_deref() == Some(id))
    }

    fn sub(&mut self, id: &str) -> &mut Sub {
        self.subs.entry(id.to_owned()).or_default()
    }

    // --- reading -----------------------------------------------------------

    fn on_line(&mut self, line: Value) {
        trace(&format!("tcp (epoch {}): {line}", self.epoch));
        if let Some(held) = self.held_at_stop.as_mut() {
            if reports_an_end(&line) {
                held.push(line);
                return;
            }
        }
        if line["type"] == "SUBAGENT_EVENT" && line.get("req_id").is_none() {
            if !self.events_seen.insert(text(&line["id"])) {
                return;
            }
            return self.on_event(&line);
        }
        let req_id = text(&line["req_id"]);
        let Some(purpose) = self.pending.remove(&req_id) else {
            panic!("a line for no request of this connection: {line}");
        };
        if line["type"] == "error" {
            panic!("request {req_id} ({purpose:?}) failed: {line}");
        }
        match purpose {
            Pending::Handshake => self.handshake = Some(line),
            Pending::List => {
                let rows = line["subagents"].as_array().expect("subagents").clone();
                self.lists.insert(req_id, rows);
            }
            Pending::Spawn(w) => {
                assert_eq!(line["status"], "READY", "{line}");
                let id = text(&line["subagent_id"]);
                let name = self.workers[w].name.clone();
                self.sub(&id).name = Some(name);
                let worker = &mut self.workers[w];
                worker.id = Some(id);
                worker.spawn = Phase::Answered;
                // A client goes on at once: delegate, then messages and an await.
                self.delegate(w);
            }
            Pending::Delegate(w) => {
                let name = &self.workers[w].name;
                assert_eq!(
                    (&line["accepted"], &line["status"]),
                    (&json!(true), &json!("RUNNING")),
                    "delegate to {name}: {line}"
                );
                self.workers[w].delegate = Phase::Answered;
                self.send_messages(w);
                let id = self.workers[w].id.clone().unwrap();
                self.await_sub(&id);
            }
            Pending::Drain(w) => {
                assert_eq!(line["accepted"], true, "the drain of {}: {line}", self.workers[w].name);
                let id = self.workers[w].id.clone().unwrap();
                self.request(Pending::DrainAwait(w), json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": id }));
            }
            Pending::DrainAwait(w) => {
                assert_eq!(line["status"], "COMPLETED", "the drain of {}: {line}", self.workers[w].name);
                let taken = line["result"]["messages"].as_array().cloned().unwrap_or_default();
                let left: Vec<String> = taken.iter().map(|m| text(&m["content"])).collect();
                eprintln!(
                    "{}: delivered after its task stopped waiting, left in its mailbox: {left:?}",
                    self.workers[w].name
                );
                self.workers[w].drained = Some(left);
            }
            Pending::Message(w, n) => {
                assert_eq!(line["delivered"], true, "{line}");
                self.workers[w].messages[n].acked = true;
            }
            Pending::Await(id) => {
                // Only delegated subagents are awaited: an await waits for
                // the task to end.
                let status = text(&line["status"]);
                if !TERMINAL.contains(&status.as_str()) {
                    panic!("{id}: an await answered before the task ended: {line}\n{}", self.describe());
                }
                let answer = json!({ "status": line["status"], "result": line["result"], "error": line["error"] });
                let sub = self.sub(&id);
                if let Some(told) = &sub.told_status {
                    assert_eq!(&status, told, "{id}: an await answers another end than the client was told: {line}");
                }
                if let Some(told) = &sub.told_answer {
                    assert_eq!(&answer, told, "{id}: an await answers otherwise than before: {line}");
                }
                sub.told_status = Some(status);
                sub.told_answer = Some(answer);
            }
        }
    }

    fn on_event(&mut self, event: &Value) {
        let id = text(&event["subagent_id"]);
        let content = &event["content"];
        let kind = text(&event["event"]);
        let epoch = self.epoch;
        let sub = self.subs.entry(id.clone()).or_default();
        if content["depth"].as_u64().is_some_and(|depth| depth > 0) {
            sub.parent = content["parent_agent_id"].as_str().map(str::to_owned);
        }
        match kind.as_str() {
            "resumed" => {
                let attempt = content["attempt"].as_u64().expect("attempt") as u32;
                assert!(attempt >= 2, "{id}: a resumed task's attempt is at least 2: {event}");
                if let Some(status) = &sub.told_status {
                    panic!("{id} resumed after the client was told its task ended {status}: {event}");
                }
                if let Some(last) = sub.attempts.last() {
                    assert!(attempt > *last, "{id}: attempt {attempt} after attempt {last}: {event}");
                }
                sub.attempts.push(attempt);
                self.resumed_now.insert(id, attempt);
                self.resumes_seen += 1;
            }
            "delegated" => {
                self.delegated_now.insert(id);
            }
            "progress" => {
                // A step is checkpointed before its progress line is even
                // queued: one the client saw never runs again.
                let message = text(&content["message"]);
                if let Some((seen, _)) = sub.progress.iter().find(|(_, m)| *m == message) {
                    panic!("{id}: step `{message}` ran again after a restart (first seen in epoch {seen}): {event}");
                }
                sub.progress.push((epoch, message));
            }
            "completed" | "failed" | "timeout" | "cancelled" | "terminated" => {
                sub.told_status = Some(text(&content["status"]));
            }
            _ => {}
        }
    }

    /// Reads lines until `done` holds; fails past `limit`.
    pub(super) fn until(&mut self, what: &str, limit: Duration, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        while !done(self) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "timed out waiting until {what}\n{}", self.describe());
            match self.conn.next(left.min(Duration::from_millis(200))) {
                Next::Line(line) => self.on_line(line),
                Next::Idle => {}
                Next::Closed => panic!("the connection closed while waiting until {what}"),
            }
        }
    }

    /// Reads lines for `span` (a delay before a kill).
    pub(super) fn pump_for(&mut self, span: Duration) {
        let deadline = Instant::now() + span;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            match self.conn.next(left) {
                Next::Line(line) => self.on_line(line),
                Next::Idle => return,
                Next::Closed => panic!("the connection closed while the host ran"),
            }
        }
    }

    /// After a kill: reads what the host sent before it died, to the end.
    pub(super) fn drain_dead(&mut self) {
        loop {
            match self.conn.next(PATIENCE) {
                Next::Line(line) => self.on_line(line),
                Next::Closed => return,
                Next::Idle => panic!("the connection of a dead host never closed"),
            }
        }
    }

    pub(super) fn describe(&self) -> String {
        let workers: Vec<String> = self
            .workers
            .iter()
            .map(|w| format!("  {} {:?} id={:?} spawn={:?} delegate={:?}", w.name, w.kind, w.id, w.spawn, w.delegate))
            .collect();
        let subs: Vec<String> = self
            .subs
            .iter()
            .map(|(id, s)| format!("  {id} {:?} told={:?} attempts={:?}", s.name, s.told_status, s.attempts))
            .collect();
        format!(
            "epoch {}; pending {:?}\nworkers:\n{}\nsubagents:\n{}",
            self.epoch,
            self.pending,
            workers.join("\n"),
            subs.join("\n")
        )
    }

    // --- the invariants ----------------------------------------------------

    /// Right after a resume: checks what the restored session lists against
    /// what the client was told, waits for every task that was running to
    /// resume, and checks that awaits answer what they answered before.
    /// Returns the list.
    pub(super) fn check_restored(&mut self) -> Vec<Value> {
        // A list is a snapshot taken while its request is in flight: what
        // was told before it was asked must be in it, as told; what events
        // tell meanwhile (a restored task that ends at once, a child its
        // resumed parent spawns) may come before the reply and not be in it.
        let told_before: HashMap<String, Option<String>> =
            self.subs.iter().map(|(id, sub)| (id.clone(), sub.told_status.clone())).collect();
        let list = self.list();
        let epoch = self.epoch;
        let mut by_name: HashMap<String, Vec<&Value>> = HashMap::new();
        let mut by_id: HashMap<String, &Value> = HashMap::new();
        for row in &list {
            by_name.entry(text(&row["name"])).or_default().push(row);
            by_id.insert(text(&row["subagent_id"]), row);
        }
        // Every spawn request and every spawn step names its subagent uniquely.
        for (name, rows) in &by_name {
            assert_eq!(rows.len(), 1, "after restart {epoch}: `{name}` was spawned {} times: {rows:#?}", rows.len());
        }
        // Everything an answer or an event named before the list was asked
        // is still there, as told.
        for (id, sub) in &self.subs {
            let Some(told_before) = told_before.get(id) else {
                continue;
            };
            let row = by_id.get(id).unwrap_or_else(|| panic!("after restart {epoch}: {id} ({:?}) is gone", sub.name));
            if let Some(told) = told_before {
                assert_eq!(
                    &text(&row["status"]),
                    told,
                    "after restart {epoch}: {id} ({:?}) was told {told}: {row}",
                    sub.name
                );
            }
        }
        for w in 0..self.workers.len() {
            let name = self.workers[w].name.clone();
            let Some(row) = by_name.get(&name).map(|rows| rows[0]) else {
                // Never spawned: only a spawn nobody answered may be missing.
                assert_ne!(self.workers[w].spawn, Phase::Answered, "after restart {epoch}: {name} is gone");
                self.workers[w].spawn = Phase::NotSent;
                self.workers[w].delegate = Phase::NotSent;
                continue;
            };
            let id = text(&row["subagent_id"]);
            assert_eq!(row["depth"], 0, "{row}");
            if let Some(known) = &self.workers[w].id {
                assert_eq!(known, &id, "after restart {epoch}: {name} has another id: {row}");
            }
            if self.workers[w].spawn == Phase::Sent {
                // Its spawn took effect, unanswered.
                self.workers[w].spawn = Phase::Effective;
                self.workers[w].id = Some(id.clone());
                self.sub(&id).name = Some(name.clone());
            }
            let status = text(&row["status"]);
            match self.workers[w].delegate {
                Phase::Answered | Phase::Effective => {
                    assert_ne!(status, "READY", "after restart {epoch}: the delegate to {name} was answered: {row}")
                }
                Phase::Sent if status == "READY" => self.workers[w].delegate = Phase::NotSent,
                Phase::Sent => self.workers[w].delegate = Phase::Effective,
                Phase::NotSent => {
                    assert_eq!(status, "READY", "after restart {epoch}: {name} was never delegated: {row}")
                }
            }
        }
        // Children: under a nested worker, one per spawn step.
        for row in list.iter().filter(|row| row["depth"] != 0) {
            let id = text(&row["subagent_id"]);
            let name = text(&row["name"]);
            let parent = text(&row["parent_agent_id"]);
            let w = self.worker_of(&parent).unwrap_or_else(|| panic!("child {id} of an unknown parent: {row}"));
            assert!(self.workers[w].child_names().contains(&name), "after restart {epoch}: unexpected child: {row}");
            let sub = self.sub(&id);
            sub.name = Some(name);
            sub.parent = Some(parent);
        }
        // Every task that was running resumes; a child may instead have been
        // delegated just now by its resumed parent (its spawn step re-run).
        let running: Vec<(String, bool)> = list
            .iter()
            .filter(|row| row["status"] == "RUNNING" || row["status"] == "WAITING")
            .map(|row| (text(&row["subagent_id"]), row["depth"] != 0))
            .collect();
        self.until("every task that was running resumed", PATIENCE, |d| {
            running.iter().all(|(id, child)| d.resumed_now.contains_key(id) || (*child && d.delegated_now.contains(id)))
        });
        // Awaits answer again what they answered before the kill.
        let told: Vec<String> =
            self.subs.iter().filter(|(_, sub)| sub.told_answer.is_some()).map(|(id, _)| id.clone()).collect();
        let asked: Vec<String> = told.iter().map(|id| self.await_sub(id)).collect();
        self.until("the awaits of ended tasks are answered", PATIENCE, |d| {
            asked.iter().all(|req| !d.pending.contains_key(req))
        });
        list
    }

    /// After a restart: what a client does about requests it got no answer
    /// to: spawns that did not happen and delegates that did not take effect
    /// are sent again, messages never (a message is sent once), and every
    /// running task is awaited again.
    pub(super) fn carry_on(&mut self) {
        for w in 0..self.workers.len() {
            match (self.workers[w].spawn, self.workers[w].delegate) {
                (Phase::NotSent, _) => self.spawn(w),
                (_, Phase::NotSent) => self.delegate(w),
                (_, _) => {
                    self.send_messages(w);
                    let id = self.workers[w].id.clone().unwrap();
                    if self.subs.get(&id).is_none_or(|sub| sub.told_answer.is_none()) {
                        self.await_sub(&id);
                    }
                }
            }
        }
    }

    /// Waits until every worker's task has ended and been awaited, then
    /// checks each result against its script, and the children.
    pub(super) fn finish(&mut self, limit: Duration) {
        self.until("every worker's task ended", limit, |d| {
            d.workers
                .iter()
                .all(|w| w.id.as_ref().is_some_and(|id| d.subs.get(id).is_some_and(|sub| sub.told_answer.is_some())))
        });
        let list = self.list();
        let children: Vec<String> =
            list.iter().filter(|row| row["depth"] != 0).map(|row| text(&row["subagent_id"])).collect();
        let asked: Vec<String> = children.iter().map(|id| self.await_sub(id)).collect();
        self.until("the children are awaited", PATIENCE, |d| asked.iter().all(|req| !d.pending.contains_key(req)));
        self.drain_mailboxes();
        for w in 0..self.workers.len() {
            self.check_result(w, &list);
        }
    }

    /// A mailbox worker's waits time out (2 s each in the crash loop): a
    /// message delivered after its task stopped waiting is not in its
    /// result, and stays in its mailbox, stored, for its next task. That is
    /// no loss, and a loaded machine makes it happen: the client sends its
    /// messages once it has read the delegate's answer, or after a restart
    /// once the resumed session is checked, and a busy host or client can
    /// spend the task's 2 s before that (seen under CPU starvation: a
    /// result with `m0` only, `m1` acknowledged and left in the stored
    /// mailbox). So for a worker whose result lacks a message that was
    /// acknowledged, a second task takes what its mailbox still holds; a
    /// delivered message must be in one of the two.
    fn drain_mailboxes(&mut self) {
        let mut draining = Vec::new();
        for w in 0..self.workers.len() {
            let worker = &self.workers[w];
            let Kind::Mailbox { messages, .. } = worker.kind else { continue };
            let id = worker.id.clone().expect("spawned");
            let result = &self.subs[&id].told_answer.as_ref().expect("awaited")["result"]["messages"];
            let got: Vec<String> = result.as_array().into_iter().flatten().map(|m| text(&m["content"])).collect();
            if worker.messages.iter().all(|m| !m.acked || got.contains(&m.content)) {
                continue;
            }
            let script: Vec<Value> = (0..messages)
                .map(|_| json!({ "wait_message": { "timeout_ms": 0 } }))
                .chain([json!({ "return": { "drained": true } })])
                .collect();
            let task = json!({ "name": "drain", "instruction": "drain", "metadata": { "script": script } });
            self.request(
                Pending::Drain(w),
                json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": id, "task": task }),
            );
            draining.push(w);
        }
        self.until("the mailboxes are drained", PATIENCE, |d| draining.iter().all(|w| d.workers[*w].drained.is_some()));
    }

    fn check_result(&self, w: usize, list: &[Value]) {
        let worker = &self.workers[w];
        let id = worker.id.as_deref().unwrap();
        let answer = self.subs[id].told_answer.as_ref().unwrap();
        let name = &worker.name;
        assert_eq!(answer["status"], "COMPLETED", "{name} ({id}): {answer}");
        let result = &answer["result"];
        match worker.kind {
            Kind::Steps { steps, .. } => {
                assert_eq!(result, &json!({ "worker": name, "steps": steps }), "{name} ({id})");
            }
            Kind::Nested { .. } => {
                assert_eq!(result["worker"], name.as_str(), "{name} ({id}): {result}");
                let listed: BTreeMap<String, String> = list
                    .iter()
                    .filter(|row| row["parent_agent_id"] == id)
                    .map(|row| (text(&row["subagent_id"]), text(&row["name"])))
                    .collect();
                let names: BTreeSet<String> = listed.values().cloned().collect();
                let expected: BTreeSet<String> = worker.child_names().into_iter().collect();
                assert_eq!(names, expected, "{name} ({id}): one child per spawn step: {listed:?}");
                let reported = result["children"].as_object().unwrap_or_else(|| panic!("{name}: children: {result}"));
                let reported_ids: BTreeSet<&String> = reported.keys().collect();
                assert_eq!(reported_ids, listed.keys().collect(), "{name} ({id}): the children it awaited: {result}");
                for (child, child_name) in &listed {
                    let awaited = &reported[child];
                    assert_eq!(awaited["status"], "COMPLETED", "{name}: child {child}: {awaited}");
                    assert_eq!(awaited["result"], json!({ "child": child_name }), "{name}: child {child}: {awaited}");
                    let told = self.subs[child].told_answer.as_ref().expect("awaited child");
                    assert_eq!(told["result"], json!({ "child": child_name }), "{name}: child {child}: {told}");
                }
            }
            Kind::Mailbox { .. } => {
                assert_eq!(result["worker"], name.as_str(), "{name} ({id}): {result}");
                let got: Vec<String> = result["messages"]
                    .as_array()
                    .map(|messages| messages.iter().map(|m| text(&m["content"])).collect())
                    .unwrap_or_default();
                // With what a second task found left in its mailbox (see
                // `drain_mailboxes`): each message taken once, none lost.
                let left = worker.drained.clone().unwrap_or_default();
                let taken: Vec<&str> = got.iter().chain(&left).map(String::as_str).collect();
                let sent: BTreeSet<&str> = worker.messages.iter().map(|m| m.content.as_str()).collect();
                let unique: BTreeSet<&str> = taken.iter().copied().collect();
                assert_eq!(
                    unique.len(),
                    taken.len(),
                    "{name} ({id}): a message was taken twice: {result}, left {left:?}"
                );
                assert!(unique.is_subset(&sent), "{name} ({id}): got messages never sent: {result}, left {left:?}");
                for message in worker.messages.iter().filter(|m| m.acked) {
                    assert!(
                        unique.contains(message.content.as_str()),
                        "{name} ({id}): delivered {message:?} is lost: {result}, left in its mailbox {left:?}"
                    );
                }
            }
        }
    }

    /// The progress messages of subagent `id`, with their epochs.
    pub(super) fn progress_of(&self, id: &str) -> Vec<(u32, String)> {
        self.subs.get(id).map(|sub| sub.progress.clone()).unwrap_or_default()
    }

    pub(super) fn id_of(&self, w: usize) -> String {
        self.workers[w].id.clone().expect("spawned")
    }
}
