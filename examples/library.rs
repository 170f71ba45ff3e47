//! The library example of docs/library.md: one session, one subagent, one task, its
//! result. CI runs it (`cargo run --release --example library`).
//!
//! Every request is an `Operation` run on the tree as its client: the
//! operations table is the one way into a tree, as it is for every face.

use std::sync::Arc;
use subagent_host::ops::{Caller, Operation, Outcome};
use subagent_host::wire::*;
use subagent_host::NullSink;
use subagent_host::{Host, HostConfig};

#[actix_rt::main]
async fn main() {
    let host = Host::new(HostConfig::default());
    let session = host.open_tree(Arc::new(NullSink));
    let client = || Caller::Client { tree: &session, frame: None };
    let agent = SubagentConfig::new("researcher", "any-model");
    let request = SpawnRequest { agent, parent_agent_id: None, root_agent_id: None };
    let Outcome::Spawned(spawned) = Operation::Spawn { request, task: None }.run(client()).await.unwrap() else {
        unreachable!("a spawn answers Spawned")
    };
    let target = spawned.subagent_id;
    Operation::Delegate { target, task: TaskDefinition::new("t", "Research X") }.run(client()).await.unwrap();
    let Outcome::Awaited(done) = Operation::Await { target }.run(client()).await.unwrap() else {
        unreachable!("an await answers Awaited")
    };
    assert_eq!(done.status, SubagentStatus::Completed);
    println!("{:?} {}", done.status, serde_json::to_string(&done.result).unwrap());
}
