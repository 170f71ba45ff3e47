//! Fencing: the [`Fence`] every commit of a cluster node carries (the epoch
//! it holds for each session in the batch), built from what it owns, what a
//! committed fence changes in it, and how a commit's statement carries it
//! (its prefix, its parameters, and the refusal that names lost sessions).

use std::collections::HashMap;
use std::sync::Arc;

use super::ownership::{lock, Cluster};
use crate::store::change::Change;

/// What one commit must prove: for each session in the batch, the epoch this
/// node holds (0: opened here, its lease is written by this commit), and
/// whether the session ends with it.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Fence {
    /// This node.
    pub node: String,
    /// The sessions.
    pub ids: Vec<String>,
    /// Their epochs.
    pub epochs: Vec<i64>,
    /// Whether each ends in this batch (its lease goes with it).
    pub ends: Vec<bool>,
    /// The lease a new session starts with, in ms.
    pub lease_ms: i64,
}

impl Cluster {
    /// The fence for `batch`, after dropping the changes of every session
    /// this node does not own (lost or handed off: nothing more of it may
    /// be written). A session opened here is owned from its first change.
    pub(crate) fn fence(&self, batch: &mut Vec<Change>) -> Fence {
        let mut owned = lock(&self.owned);
        let mut index: HashMap<Arc<str>, usize> = HashMap::new();
        let mut fence = Fence { node: self.settings.node_id.clone(), lease_ms: self.lease_ms(), ..Fence::default() };
        batch.retain(|change| {
            let session = change.session();
            if let Some(&at) = index.get(session) {
                fence.ends[at] |= matches!(change, Change::SessionEnded { .. });
                return true;
            }
            let epoch = match (owned.get(session), change) {
                (Some(&epoch), _) => epoch,
                (None, Change::SessionOpened(_)) => {
                    owned.insert(session.clone(), 0);
                    0
                }
                (None, _) => return false,
            };
            index.insert(session.clone(), fence.ids.len());
            fence.ids.push(session.to_string());
            fence.epochs.push(epoch);
            fence.ends.push(matches!(change, Change::SessionEnded { .. }));
            true
        });
        fence
    }

    /// `fence` was committed: sessions opened here hold epoch 1, ended ones
    /// are no longer owned.
    pub(crate) fn committed(&self, fence: &Fence) {
        let mut owned = lock(&self.owned);
        for ((id, epoch), ends) in fence.ids.iter().zip(&fence.epochs).zip(&fence.ends) {
            if *ends {
                owned.remove(id.as_str());
            } else if *epoch == 0 {
                if let Some(held) = owned.get_mut(id.as_str()) {
                    *held = (*held).max(1);
                }
            }
        }
    }
}

/// The statement prefix that fences a batch: parameters `$1 … $5`.
pub(crate) const FENCE_CTE: &str = "fence AS (SELECT subagentd_fence($1, $2, $3, $4, $5) AS ok)";

/// How many parameters [`FENCE_CTE`] takes.
pub(crate) const FENCE_PARAMS: usize = 5;

/// Binds the fence's parameters (first, before the batch's own).
pub(crate) fn bind_fence<'q>(
    query: sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>,
    fence: &'q Fence,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    query.bind(fence.node.as_str()).bind(&fence.ids).bind(&fence.epochs).bind(&fence.ends).bind(fence.lease_ms)
}

/// The sessions a refused commit named (SQLSTATE SA409, `fenced: a,b`).
pub(crate) fn fenced_sessions(err: &sqlx::Error) -> Option<Vec<String>> {
    let db = err.as_database_error()?;
    if db.code().as_deref() != Some("SA409") {
        return None;
    }
    let list = db.message().strip_prefix("fenced: ")?;
    Some(list.split(',').filter(|id| !id.is_empty()).map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::change::SessionRow;
    use crate::store::cluster::cluster_settings::ClusterSettings;

    fn opened(id: &str) -> Change {
        Change::SessionOpened(SessionRow {
            id: id.into(),
            agent_id: "a".into(),
            capabilities: Vec::new(),
            principal: None,
            transport: "tcp".into(),
            handshaken: true,
        })
    }

    #[test]
    fn a_batch_keeps_only_owned_sessions_and_names_their_epochs() {
        let cluster = Cluster::new(ClusterSettings { node_id: "n1".into(), ..ClusterSettings::fresh() });
        cluster.owns("taken", 7);
        let mut batch = vec![
            opened("new"),
            Change::Touched { session: "taken".into() },
            Change::Touched { session: "lost".into() },
            Change::SessionEnded { session: "taken".into(), gate: None },
            Change::Touched { session: "new".into() },
        ];
        let fence = cluster.fence(&mut batch);
        assert_eq!(batch.len(), 4, "the change of a session not owned is dropped");
        assert_eq!(fence.node, "n1");
        assert_eq!(fence.ids, ["new", "taken"]);
        assert_eq!(fence.epochs, [0, 7]);
        assert_eq!(fence.ends, [false, true]);
        cluster.committed(&fence);
        assert_eq!(cluster.leased().get("new"), Some(&1), "a new session holds epoch 1 once committed");
        assert!(!cluster.leased().contains_key("taken"), "an ended session is no longer owned");
    }
}
