//! `SubagentActor`: one subagent. It runs at most one task at a time, keeps
//! its mailbox, answers awaits when the task ends, and stops its own task on
//! cancel and itself on terminate. The tree it sits in is the supervisor's:
//! a subtree is stopped by the supervisor's one stop routine.
//!
//! An actor lives while its subagent has work: once a task ends with nothing
//! left to do, it says so in its report, and the supervisor may put it to
//! sleep (`Sleep`), its record standing in for it. It counts the messages it
//! handles, so that the supervisor can tell none is still on the way.
//!
//! - `actor`: the actor's state and what it reports to the supervisor.
//! - `actor_messages`: each message it answers.
//! - `running`: starting a task inside the actor and recording how it ended.

pub(super) mod actor;
mod actor_messages;
mod running;

pub(crate) use actor::SubagentActor;
