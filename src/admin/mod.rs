//! The operator's side of the host, behind `/ui` and `/admin/*` (see
//! `crate::faces::operator`): [`Admin`] keeps the protocol sessions open
//! now, each with its tree, and the [`hub`] through which their events
//! reach the operator's streams.
//!
//! A session is listed from its first successful handshake (or its restore
//! from the store) until it ends; [`Listed`] is its place in the list.
//!
//! - `live_session`: [`LiveSession`], one open session.
//! - `session_list`: [`Admin`] and [`Listed`], the list of open sessions.
//! - [`hub`]: the fan-out of events to the operator's streams.

pub(crate) mod hub;
mod live_session;
mod session_list;

pub(crate) use hub::{Hub, Next, Notice, Tap, Watch};
pub(crate) use live_session::LiveSession;
pub(crate) use session_list::{Admin, Listed};
