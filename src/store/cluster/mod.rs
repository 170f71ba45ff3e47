//! Several hosts: which node owns each session (PostgreSQL stores only).
//!
//! A session's tree lives in one process; what spreads over nodes is whole
//! sessions. PostgreSQL holds who owns each (`leases`: node, epoch, whether
//! it was released) and which nodes are up and until when (`nodes`, with
//! each node's lease); nothing else plays broker.
//!
//! - **Fencing.** Every batch the writer commits names the epoch this node
//!   holds for each session in it, and passes `subagentd_fence` in the same
//!   statement. A node that lost a session (it was paused or cut off past
//!   its lease, and another node took over) can never write to it again: its
//!   batch is refused, the lost sessions' changes are dropped, and the node
//!   stops serving them ([`SessionOwner::give_up`]) without telling their
//!   clients anything (the new owner does).
//! - **Leases per node.** A session is owned as long as its node's lease
//!   runs. A node renews that one row every third of `lease` (also its
//!   heartbeat), whatever its number of sessions. When some of them may
//!   have been taken behind its back (its lease had lapsed, a renewal
//!   failed, its presence lock was lost, and every tenth renewal anyway) it
//!   reads which it still holds and stops serving the others.
//! - **Takeover.** A node asked for a session it does not own takes it when
//!   it was released or its owner's lease lapsed, or at once when the owner
//!   is dead: every node holds an advisory lock on a connection of its own,
//!   which PostgreSQL frees the moment that process dies. Otherwise it asks
//!   the owner to hand the session off (`NOTIFY subagentd, 'handoff …'`); the owner stops serving
//!   it, commits what it recorded, releases the lease and says so
//!   (`'released …'`). A node that is shut down releases all of its leases.
//!
//! - `cluster_settings`: [`ClusterSettings`], this node and its lease.
//! - `ownership`: what this node owns, and the [`SessionOwner`] it tells.
//! - `fence`: the [`Fence`] each commit carries, and its statement parts.
//! - `takeover`: taking a session, handing one off or back.
//! - `queries`: the statements.
//! - `node`: the node's own tasks (presence lock, renewal, notifications).

mod cluster_settings;
pub(super) mod fence;
mod node;
mod ownership;
mod queries;
mod takeover;

pub use cluster_settings::ClusterSettings;
pub use fence::Fence;
pub use ownership::SessionOwner;
pub use takeover::{Acquire, Acquired};

pub(super) use fence::{bind_fence, fenced_sessions, FENCE_CTE, FENCE_PARAMS};
pub(super) use node::{start, Release};
pub(super) use ownership::Cluster;
