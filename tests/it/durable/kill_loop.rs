//! The SIGKILL loop: `/send`s of spawns answered 200, each followed by a
//! SIGKILL at once or a few milliseconds later and a restart; every spawn
//! answered 200 must then be listed exactly once, and answered once. Its
//! test is [`super::durable_sqlite_kill_loop_every_spawn_answered_200_exists_once`].

use super::http::{drain_stream, send_lines, SseLog};
use super::{random_store_config, seed, text, Backing, Node};
use crate::e2e_support::{http_with_headers, SseStream};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Kills in CI's run of [`super::durable_sqlite_kill_loop_every_spawn_answered_200_exists_once`];
/// `SUBAGENTD_KILL_LOOP_KILLS` asks for more (`examples/sqlite_kill_loop`
/// runs 1,000).
pub(super) const KILL_LOOP_KILLS: usize = 150;

/// Kills per session: each restart restores the whole session, so the
/// loop starts a new one now and then to keep a restart's load small.
const KILLS_PER_SESSION: usize = 50;

/// What a kill loop counted.
#[derive(Debug, Default)]
pub(super) struct KillLoopCount {
    pub(super) kills: usize,
    // Spawn requests whose `/send` was answered 200.
    acknowledged: usize,
    // Acknowledged spawns a list after a restart did not name (each
    // counted once).
    pub(super) missing: usize,
    // Acknowledged spawns listed more than once.
    pub(super) duplicated: usize,
    // Spawn requests answered other than once over their session's life.
    pub(super) replies_not_once: usize,
}

/// One session of the kill loop: `kills` rounds of a `/send` of one or two
/// spawns answered 200, a SIGKILL at once or a few milliseconds later
/// (while the spawns are served and their changes committed), a restart
/// with random group commit settings, and a list: every spawn acknowledged
/// so far must be listed exactly once. Counts into `count` rather than
/// stopping at the first miss, so a run reports how many.
fn kill_loop_session(node: &mut Node, rng: &mut fastrand::Rng, kills: usize, tag: usize, count: &mut KillLoopCount) {
    let (status, _, body) = http_with_headers(node.http(), "POST", "/session", &[], "");
    assert_eq!(status, 200, "{body}");
    let session = text(&body["session_id"]);
    let mut log = SseLog::default();
    let mut stream = SseStream::open(node.http(), &session);
    let hs = json!({ "type": "handshake/req", "id": "h", "agent_id": "web", "agent_caps": ["multi_agent"] });
    send_lines(node.http(), &session, &[hs]);
    assert_eq!(log.reply(&mut stream, "h")["ok"], true);
    let mut acknowledged: Vec<String> = Vec::new();
    let mut missed: BTreeSet<String> = BTreeSet::new();
    for round in 0..kills {
        let names: Vec<String> = (0..rng.usize(1..=2)).map(|n| format!("k{tag}.{round}.{n}")).collect();
        let spawns: Vec<Value> = names
            .iter()
            .map(|name| json!({ "type": "SUBAGENT_SPAWN_REQ", "id": name, "agent": { "name": name, "model": "m" } }))
            .collect();
        // Asserts the 200: from here on the spawns are acknowledged.
        send_lines(node.http(), &session, &spawns);
        acknowledged.extend(names);
        count.acknowledged += spawns.len();
        if rng.u8(0..4) != 0 {
            std::thread::sleep(Duration::from_micros(rng.u64(0..=6_000)));
        }
        node.kill9();
        count.kills += 1;
        drain_stream(&mut log, &mut stream);
        node.restart_with(&random_store_config(rng));
        let last = log.events.last().map_or(0, |(id, _)| *id);
        stream = SseStream::open_after(node.http(), &session, Some(last));
        assert_eq!(stream.status, 200, "session {session} after kill {}", count.kills);
        let list_id = format!("l{tag}.{round}");
        send_lines(node.http(), &session, &[json!({ "type": "SUBAGENT_LIST_REQ", "id": list_id })]);
        let list = log.reply(&mut stream, &list_id);
        let mut listed: HashMap<String, usize> = HashMap::new();
        for row in list["subagents"].as_array().unwrap_or_else(|| panic!("a list: {list}")) {
            *listed.entry(text(&row["name"])).or_default() += 1;
        }
        for name in &acknowledged {
            match listed.get(name).copied().unwrap_or(0) {
                0 if missed.insert(name.clone()) => {
                    count.missing += 1;
                    eprintln!("kill loop: after kill {}: {name} (answered 200) is not listed: {list}", count.kills);
                }
                0 | 1 => {}
                n => {
                    count.duplicated += 1;
                    eprintln!("kill loop: after kill {}: {name} is listed {n} times: {list}", count.kills);
                }
            }
        }
        if count.kills.is_multiple_of(100) {
            eprintln!(
                "kill loop: {} kills, {} spawns answered 200, {} missing, {} duplicated",
                count.kills, count.acknowledged, count.missing, count.duplicated
            );
        }
    }
    // Every spawn is answered once over the session's life (the SSE stream
    // replays across restarts): read on to the last spawn's reply.
    for name in acknowledged.iter().rev().take(2) {
        if !missed.contains(name) {
            log.reply(&mut stream, name);
        }
    }
    for name in &acknowledged {
        let replies = log.replies(name).len();
        if replies != 1 && !missed.contains(name) {
            count.replies_not_once += 1;
            eprintln!("kill loop: {name} was answered {replies} times: {:?}", log.replies(name));
        }
    }
}

/// `kills` SIGKILLs of the host on one SQLite store (see [`kill_loop_session`]).
pub(super) fn sqlite_kill_loop(kills: usize) -> KillLoopCount {
    let seed = seed();
    eprintln!("kill loop (sqlite, {kills} kills): seed {seed} (replay with DURABLE_SEED={seed})");
    let mut rng = fastrand::Rng::with_seed(seed);
    let started = Instant::now();
    // (A session holds at most two spawns a kill: within `CONFIG`'s room.)
    let mut node = Node::start(Backing::sqlite(), &random_store_config(&mut rng));
    let mut count = KillLoopCount::default();
    let mut tag = 0;
    while count.kills < kills {
        let these = KILLS_PER_SESSION.min(kills - count.kills);
        kill_loop_session(&mut node, &mut rng, these, tag, &mut count);
        tag += 1;
    }
    eprintln!(
        "kill loop (sqlite, seed {seed}): {} kills, {} spawns answered 200, {} missing, {} duplicated, \
         {} answered other than once, in {:.1} s",
        count.kills,
        count.acknowledged,
        count.missing,
        count.duplicated,
        count.replies_not_once,
        started.elapsed().as_secs_f64()
    );
    count
}
