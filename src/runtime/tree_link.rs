//! How a session's subagent actors and their tasks hold their supervisor.
//!
//! The supervisor owns its subagents' actors (its records hold their
//! addresses), and they and their tasks send it their reports and requests.
//! Were each to hold an `Addr<Supervisor>`, the files that define them
//! would import each other in a circle (supervisor → records → actor →
//! supervisor; actor → adapter → task context → supervisor). So they hold a
//! [`TreeLink`], which names no actor type: the supervisor's file gives it
//! its address back (`Deref` to `Addr<Supervisor>`, in
//! `supervisor/root.rs`), and only that file makes one.

use std::any::Any;
use std::sync::Arc;

/// A session's supervisor, as the actors and tasks under it hold it: its
/// address, kept as a type this file does not name. Cloned with one count.
#[derive(Clone)]
pub(crate) struct TreeLink(Arc<dyn Any + Send + Sync>);

impl TreeLink {
    /// A link to the actor at `address` (made by the supervisor, of itself).
    pub(crate) fn new<A: Any + Send + Sync>(address: A) -> Self {
        Self(Arc::new(address))
    }

    /// The address it holds, when that is an `A`.
    #[inline]
    pub(crate) fn get<A: Any>(&self) -> Option<&A> {
        self.0.downcast_ref()
    }

    /// Where it points: names a tree (in logs) without its type.
    pub(crate) fn as_ptr(&self) -> *const () {
        Arc::as_ptr(&self.0) as *const ()
    }
}
