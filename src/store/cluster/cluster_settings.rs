//! [`ClusterSettings`]: who this node is and how long its leases last.

use std::time::Duration;

/// A node of a cluster (`--node-id`, `[cluster]`).
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// This node's id (`--node-id`; a fresh one per start by default).
    pub node_id: String,
    /// How long the node's lease (so its ownership of every session it
    /// holds) lasts unless renewed.
    pub lease: Duration,
    /// The addresses this node serves, for the `nodes` table.
    pub http_addr: Option<String>,
    /// The NDJSON TCP address.
    pub tcp_addr: Option<String>,
}

impl ClusterSettings {
    /// A node with a fresh id and the default lease (5 s).
    pub fn fresh() -> Self {
        Self {
            node_id: format!("node-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
            lease: Duration::from_millis(5000),
            http_addr: None,
            tcp_addr: None,
        }
    }

    /// The lease in milliseconds, as the cluster's statements take it.
    pub(crate) fn lease_ms(&self) -> i64 {
        i64::try_from(self.lease.as_millis()).unwrap_or(i64::MAX)
    }
}
