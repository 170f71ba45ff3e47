//! The scenarios [`super::cluster_behind_haproxy`] runs in order on one
//! cluster: fencing, the busiest node killed, failover over HTTP and TCP, a
//! node added, HAProxy restarted, and a node shut down.

use super::clients::{steps, HttpSession, TcpSession};
use super::nodes::{Cluster, LEASE_MS};
use crate::common::eventually_blocking;
use crate::e2e_support::*;
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A paused owner loses its session after its lease, and its writes once it
/// wakes are refused.
pub(super) fn fencing(cluster: &mut Cluster, front: &str) {
    let mut session = HttpSession::open(front);
    let sleeper = session.spawn("sleeper");
    session.delegate(&sleeper, json!([{ "sleep_ms": 3000 }, { "return": { "by": "the paused node" } }]));
    let paused = session.node.clone();
    cluster.server(&paused).signal("STOP");
    let stopped = Instant::now();
    // A client whose stream went quiet reconnects; HAProxy first takes the
    // paused node out.
    cluster.haproxy.wait_status(&paused, "DOWN");
    session.drop_stream();
    let cancel = session.request(json!({ "type": "SUBAGENT_CANCEL_REQ", "subagent_id": sleeper }));
    assert_ne!(session.node, paused, "another node serves the session");
    let taken = stopped.elapsed();
    assert_eq!(cancel["event"], "cancelled", "{cancel}");
    let answer = session.await_result(&sleeper);
    assert_eq!(answer["status"], "CANCELLED", "{answer}");
    let new_owner = session.node.clone();
    eprintln!("cluster: a paused owner's session served by {new_owner} after {taken:?} (lease {LEASE_MS} ms)");
    assert!(taken >= Duration::from_millis(LEASE_MS / 2), "a live (paused) owner is waited for until its lease lapses");

    // The paused node wakes: its task's sleep is over, it completes, and the
    // store refuses the write.
    cluster.server(&paused).signal("CONT");
    cluster.server(&paused).wait_stderr("the paused node's refused write", |line| {
        line.contains(&session.id) && line.contains("no longer this node's")
    });
    // Reload the session from the store: its owner dies, a third node takes it.
    cluster.kill9(&new_owner);
    let answer = session.await_result(&sleeper);
    assert_eq!(answer["status"], "CANCELLED", "the stale node's completion never reached the store: {answer}");
    assert!(answer["result"].get("by").is_none(), "{answer}");
    let index = cluster.index_of(&new_owner);
    cluster.start_node(index);
    cluster.haproxy.wait_status(&paused, "UP");
}

/// The sessions `node` serves now, by its operator's list.
fn served_by(cluster: &Cluster, node: &str) -> Vec<String> {
    let slot = &cluster.slots[cluster.index_of(node)];
    let (_, body) = http(&format!("127.0.0.1:{}", slot.http), "GET", "/admin/sessions", &[], "");
    let rows = body["sessions"].as_array().cloned().unwrap_or_default();
    rows.iter().filter_map(|row| row["session_id"].as_str().map(str::to_owned)).collect()
}

/// Whether a running node serves session `id` and its operator's list
/// counts one COMPLETED subagent in it (the session's runner).
fn completed_where_served(cluster: &Cluster, id: &str) -> bool {
    cluster.running().iter().any(|node| {
        let slot = &cluster.slots[cluster.index_of(node)];
        let (_, body) = http(&format!("127.0.0.1:{}", slot.http), "GET", "/admin/sessions", &[], "");
        let rows = body["sessions"].as_array().cloned().unwrap_or_default();
        rows.iter().any(|row| row["session_id"] == id && row["subagents"]["COMPLETED"] == 1)
    })
}

/// Twelve sessions with a stream attached and a task running each; the
/// busiest node is SIGKILLed. Half its clients retry `/send` and reconnect
/// `/stream` at once, and each is answered within the lease and 2 s of the
/// kill; the other half do not come back, and their sessions are adopted by
/// the survivors within the same bound, their tasks finishing before their
/// clients return.
pub(super) fn busiest_node_killed(cluster: &mut Cluster, front: &str) {
    let mut sessions: Vec<HttpSession> = (0..12).map(|_| HttpSession::open(front)).collect();
    let mut runners = Vec::new();
    for session in &mut sessions {
        let id = session.spawn("runner");
        session.delegate(&id, steps(10, 300, json!({ "ran": true })));
        runners.push(id);
    }
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for session in &sessions {
        *per_node.entry(session.node.clone()).or_default() += 1;
    }
    let busiest = per_node.iter().max_by_key(|(_, n)| **n).map(|(node, _)| node.clone()).expect("a node");
    let victims: Vec<usize> = (0..sessions.len()).filter(|&i| sessions[i].node == busiest).collect();
    let (racing, waiting) = victims.split_at(victims.len() / 2);
    let waiting_ids: Vec<String> = waiting.iter().map(|&i| sessions[i].id.clone()).collect();
    cluster.kill9(&busiest);
    let killed = Instant::now();
    let bound = Duration::from_millis(LEASE_MS + 2000);

    let (took, adopted) = std::thread::scope(|scope| {
        // Half the clients come back at once, all together.
        let mut handles = Vec::new();
        for (index, (session, runner)) in sessions.iter_mut().zip(&runners).enumerate() {
            if !racing.contains(&index) {
                continue;
            }
            handles.push(scope.spawn(move || {
                session.drop_stream();
                let listed = session.list();
                let took = killed.elapsed();
                assert_eq!(listed["runner"].len(), 1, "{listed:?}");
                let answer = session.await_result(runner);
                assert_eq!(
                    (&answer["status"], &answer["result"]["ran"]),
                    (&json!("COMPLETED"), &json!(true)),
                    "{answer}"
                );
                took
            }));
        }
        // The others' sessions are adopted with no client asking.
        let what = format!("a dead node's sessions are adopted within {bound:?}");
        let holders = eventually_blocking(&what, bound.saturating_sub(killed.elapsed()), || {
            let mut holders: HashMap<String, usize> = HashMap::new();
            let mut adopted = 0;
            for node in cluster.running() {
                let served = served_by(cluster, &node);
                let held = waiting_ids.iter().filter(|id| served.contains(id)).count();
                adopted += held;
                *holders.entry(node).or_default() += held;
            }
            (adopted == waiting_ids.len()).then_some(holders.clone()).ok_or(format!("{holders:?}"))
        });
        let adopted = (killed.elapsed(), holders);
        let took: Vec<Duration> = handles.into_iter().map(|handle| handle.join().expect("a client")).collect();
        (took, adopted)
    });
    let worst = took.iter().max().copied().unwrap_or_default();
    eprintln!(
        "cluster: SIGKILL of {busiest} ({} sessions): {} clients back at once, all served within {worst:?}; \
         {} left alone adopted in {:?} by {:?}",
        victims.len(),
        racing.len(),
        waiting.len(),
        adopted.0,
        adopted.1
    );
    assert!(worst < bound, "every client answered within {bound:?} of the kill: {took:?}");
    // The adopted sessions' tasks finish before their clients come back:
    // the operator's list of the node serving each counts its runner done.
    eventually_blocking("the adopted sessions' tasks complete", PATIENCE, || {
        let done = waiting_ids.iter().filter(|id| completed_where_served(cluster, id)).count();
        (done == waiting_ids.len()).then_some(()).ok_or(format!("{done} of {} completed", waiting_ids.len()))
    });
    let back = now_seconds();
    for &index in waiting {
        let runner = runners[index].clone();
        let session = &mut sessions[index];
        session.drop_stream();
        let answer = session.await_result(&runner);
        assert_eq!((&answer["status"], &answer["result"]["ran"]), (&json!("COMPLETED"), &json!(true)), "{answer}");
        let completed = session.events_of(&runner, "completed");
        let done_at = completed.iter().filter_map(|event| event["ts"].as_f64()).fold(f64::MAX, f64::min);
        assert!(done_at < back, "{runner} finished before its client came back: {completed:?}");
    }
    let index = cluster.index_of(&busiest);
    cluster.start_node(index);
}

fn now_seconds() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_secs_f64()
}

/// The owner of a running session is SIGKILLed.
pub(super) fn failover(cluster: &mut Cluster, front: &str) {
    let mut session = HttpSession::open(front);
    let done = session.spawn("done");
    session.delegate(&done, json!([{ "return": { "done": 1 } }]));
    let before = session.await_result(&done);
    assert_eq!(before["status"], "COMPLETED");
    let long = session.spawn("long");
    session.delegate(&long, steps(8, 250, json!({ "long": "finished" })));
    let parent = session.spawn("parent");
    let child = json!({ "agent": { "name": "child", "model": "scripted" },
        "task": { "name": "c", "instruction": "c", "metadata": { "script": [{ "sleep_ms": 1500 }, { "return": { "child": 1 } }] } } });
    session.delegate(&parent, json!([{ "spawn": child }, { "await_children": {} }, { "return": { "parent": "ok" } }]));
    session.until("two progress steps of `long`", |m| {
        m["event"] == "progress" && m["subagent_id"] == long.as_str() && m["content"]["message"] == "s2"
    });
    let owner = session.node.clone();
    let id = session.id.clone();
    cluster.kill9(&owner);
    let killed = Instant::now();
    // The SDK's client posts while its stream reconnects: both reach the
    // new owner together, and neither is refused.
    let (racing_front, racing_id) = (front.to_owned(), id.clone());
    let racing = std::thread::spawn(move || {
        let line = json!({ "type": "SUBAGENT_LIST_REQ", "id": "during-failover" }).to_string();
        http_with_headers(&racing_front, "POST", "/send", &[("X-Session-Id", racing_id.as_str())], &line)
    });
    let reply = session.until("the list posted during the failover", |m| m["req_id"] == "during-failover");
    let takeover = killed.elapsed();
    let (status, headers, body) = racing.join().expect("the racing request");
    assert_eq!(status, 200, "a request racing the stream's reconnect is served: {body}");
    session.node = headers.get("x-subagentd-node").cloned().unwrap_or_default();
    assert_eq!(reply["subagents"].as_array().map(Vec::len), Some(4), "{reply}");
    let listed = session.list();
    assert_ne!(session.node, owner);
    assert_eq!(session.id, id);
    eprintln!("cluster: takeover after SIGKILL of {owner}: first reply from {} in {takeover:?}", session.node);
    assert!(takeover < Duration::from_millis(LEASE_MS + 3000), "served within the lease and a small bound");
    assert!(session.reconnects >= 1, "the stream was resumed with Last-Event-ID");

    // Every finished result is there; nothing was spawned twice.
    let again = session.await_result(&done);
    assert_eq!((&again["status"], &again["result"]), (&before["status"], &before["result"]));
    for name in ["done", "long", "parent", "child"] {
        assert_eq!(listed.get(name).map(Vec::len), Some(1), "{name} listed once: {listed:?}");
    }
    // The running tasks resume and finish.
    let answer = session.await_result(&long);
    assert_eq!(answer["result"]["long"], "finished", "{answer}");
    let answer = session.await_result(&parent);
    assert_eq!(answer["result"]["parent"], "ok", "{answer}");
    assert_eq!(answer["result"]["children"].as_object().map(|c| c.len()), Some(1), "one child: {answer}");
    let resumed = session.events_of(&long, "resumed");
    assert!(resumed.iter().any(|e| e["content"]["attempt"].as_u64() >= Some(2)), "`long` resumed: {resumed:?}");
    let all: Vec<String> = (0..8).map(|n| format!("s{n}")).collect();
    assert_eq!(session.progress_of(&long), all, "every step seen once, in order, across the failover");

    let index = cluster.index_of(&owner);
    cluster.start_node(index);
}

/// The node of a TCP session is SIGKILLed: the client reconnects through
/// HAProxy and resumes.
pub(super) fn tcp_failover(cluster: &mut Cluster) {
    let tcp_front = cluster.haproxy.tcp.clone();
    let counts = |cluster: &Cluster| -> HashMap<String, u64> {
        cluster
            .running()
            .into_iter()
            .map(|n| (n.clone(), cluster.health(&n)["sessions"].as_u64().unwrap_or(0)))
            .collect()
    };
    let before = counts(cluster);
    let mut session = TcpSession::connect(&tcp_front, None).expect("handshake through HAProxy");
    let after = counts(cluster);
    let owner = after.iter().find(|(node, n)| **n > before[*node]).map(|(node, _)| node.clone()).expect("its node");
    let spawned = session
        .request("s", json!({ "type": "SUBAGENT_SPAWN_REQ", "agent": { "name": "steady", "model": "scripted" } }));
    let steady = spawned["subagent_id"].as_str().expect("id").to_owned();
    let task =
        json!({ "name": "t", "instruction": "i", "metadata": { "script": steps(4, 300, json!({ "tcp": "done" })) } });
    session.request("d", json!({ "type": "SUBAGENT_DELEGATE_REQ", "subagent_id": steady, "task": task }));
    // Killed while the task runs, a step done and the next under way.
    session.until("the second progress step of `steady`", |m| {
        m["event"] == "progress" && m["subagent_id"] == steady.as_str() && m["content"]["message"] == "s1"
    });
    let id = session.id.clone();
    cluster.kill9(&owner);
    let killed = Instant::now();
    drop(session);
    let mut session = TcpSession::resume(&tcp_front, &id);
    eprintln!("cluster: TCP session resumed through HAProxy {:?} after SIGKILL of {owner}", killed.elapsed());
    assert_eq!(session.id, id);
    let answer = session.request("a", json!({ "type": "SUBAGENT_AWAIT_REQ", "subagent_id": steady }));
    assert_eq!((&answer["status"], &answer["result"]["tcp"]), (&json!("COMPLETED"), &json!("done")), "{answer}");
    let index = cluster.index_of(&owner);
    cluster.start_node(index);
}

/// A fourth node joins while sessions are open.
pub(super) fn add_a_node(cluster: &mut Cluster, front: &str, sessions: &mut Vec<HttpSession>) {
    cluster.start_node(3);
    for (index, session) in sessions.iter_mut().enumerate() {
        let listed = session.list();
        let kept = &listed[&format!("kept{index}")];
        assert_eq!(kept[0]["status"], "COMPLETED", "{kept:?}");
    }
    let mut reached = Vec::new();
    for _ in 0..8 {
        let mut session = HttpSession::open(front);
        let id = session.spawn("fresh");
        session.delegate(&id, json!([{ "return": { "fresh": true } }]));
        assert_eq!(session.await_result(&id)["status"], "COMPLETED");
        reached.push(session.node.clone());
        sessions.push(session);
    }
    assert!(reached.iter().any(|node| node == "n4"), "new sessions reach the new node: {reached:?}");
}

/// HAProxy restarts with an empty stick table: sessions whose hash names
/// another node are handed off to it by their live owner.
pub(super) fn haproxy_restart(cluster: &mut Cluster, sessions: &mut [HttpSession]) {
    let before: Vec<String> = sessions.iter().map(|s| s.node.clone()).collect();
    for session in sessions.iter_mut() {
        session.drop_stream();
    }
    cluster.haproxy.restart();
    for node in cluster.running() {
        cluster.haproxy.wait_status(&node, "UP");
    }
    let mut moved = 0;
    for (index, session) in sessions.iter_mut().enumerate() {
        let listed = session.list();
        assert_eq!(listed.values().map(Vec::len).sum::<usize>(), 1, "{listed:?}");
        let (name, rows) = listed.iter().next().expect("one subagent");
        assert_eq!(rows[0]["status"], "COMPLETED", "{name}: {rows:?}");
        if session.node != before[index] {
            moved += 1;
        }
    }
    eprintln!("cluster: after HAProxy's restart {moved} of {} sessions were handed off", sessions.len());
    assert!(moved > 0, "some sessions hash to another node than their own");
}

/// SIGTERM: the node hands its sessions off at once.
pub(super) fn shutdown_hands_off(cluster: &mut Cluster, front: &str) {
    let mut session = HttpSession::open(front);
    let steady = session.spawn("steady");
    session.delegate(&steady, steps(6, 200, json!({ "steady": "done" })));
    session.until("a progress step", |m| m["event"] == "progress");
    let owner = session.node.clone();
    let index = cluster.index_of(&owner);
    let stopped = Instant::now();
    let status = cluster.slots[index].server.as_mut().expect("runs").terminate();
    assert!(status.success(), "SIGTERM exits 0");
    cluster.slots[index].server = None;
    let listed = session.list();
    let taken = stopped.elapsed();
    eprintln!("cluster: SIGTERM of {owner}: served by {} after {taken:?}", session.node);
    assert_ne!(session.node, owner);
    assert!(taken < Duration::from_millis(LEASE_MS), "handed off, not left to lapse: {taken:?}");
    assert_eq!(listed["steady"].len(), 1);
    let answer = session.await_result(&steady);
    assert_eq!(answer["result"]["steady"], "done", "{answer}");
}
