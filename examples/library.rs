//! The library example of docs/library.md: one session, one subagent, one task, its
//! result. CI runs it (`cargo run --release --example library`).

use std::sync::Arc;
use subagent_host::event::NullSink;
use subagent_host::wire::*;
use subagent_host::{Host, HostConfig};

#[actix_rt::main]
async fn main() {
    let host = Host::new(HostConfig::default());
    let session = host.open_tree(Arc::new(NullSink));
    let agent = SubagentConfig::new("researcher", "any-model");
    let spawned = session.spawn(SpawnRequest { agent, parent_agent_id: None, root_agent_id: None }).await.unwrap();
    session.delegate(spawned.subagent_id, TaskDefinition::new("t", "Research X")).await.unwrap();
    let done = session.await_result(spawned.subagent_id).await.unwrap();
    assert_eq!(done.status, SubagentStatus::Completed);
    println!("{:?} {}", done.status, serde_json::to_string(&done.result).unwrap());
}
