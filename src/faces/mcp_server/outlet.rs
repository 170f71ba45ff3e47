//! An outlet: the messages one stream carries to the client, numbered and
//! kept (a bounded number) so that a client that lost its connection gets
//! them again (`Last-Event-ID`). Over stdio one outlet carries everything;
//! over HTTP each streamed request has one, and the session one for
//! messages that belong to no request (`GET /mcp`).

use serde_json::Value;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

use crate::session::lock;

/// Messages kept per outlet for a reconnecting client.
const KEPT: usize = 1024;
/// Messages an outlet holds before a client that reads none is cut off
/// (the session's other outlets are not held up by it).
const HELD: usize = 4096;

/// One stream's messages.
#[derive(Debug)]
pub(super) struct Outlet {
    /// The stream's number in its session (the first part of event ids).
    pub(super) stream: u64,
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    // (number, message), oldest first; numbers start at 1.
    messages: VecDeque<(u64, Arc<str>)>,
    last: u64,
    // No more messages will come (the request was answered).
    finished: bool,
    // Messages were dropped unread: a reader from before them cannot go on.
    lost_before: u64,
}

/// What a reader gets next.
#[derive(Debug)]
pub(super) enum Next {
    /// Messages after the reader's last, with their numbers.
    Messages(Vec<(u64, Arc<str>)>),
    /// Nothing more will come.
    Finished,
    /// What comes next was dropped (the reader is too far behind).
    Lost,
}

impl Outlet {
    /// A new, empty outlet for stream `stream`.
    pub(super) fn new(stream: u64) -> Arc<Self> {
        Arc::new(Self { stream, state: Mutex::default(), changed: Notify::new() })
    }

    /// Adds a message; ignored once the outlet is finished.
    pub(super) fn push(&self, message: &Value) {
        let mut state = lock(&self.state);
        if state.finished {
            return;
        }
        state.last += 1;
        let number = state.last;
        state.messages.push_back((number, message.to_string().into()));
        if state.messages.len() > HELD {
            if let Some((dropped, _)) = state.messages.pop_front() {
                state.lost_before = dropped + 1;
            }
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// Adds the last message: nothing more comes after it.
    pub(super) fn finish_with(&self, message: &Value) {
        self.push(message);
        self.finish();
    }

    /// Nothing more comes.
    pub(super) fn finish(&self) {
        lock(&self.state).finished = true;
        self.changed.notify_waiters();
    }

    /// Whether it has finished.
    pub(super) fn is_finished(&self) -> bool {
        lock(&self.state).finished
    }

    /// Forgets what a reader has seen, up to `number`, past the last
    /// [`KEPT`] (a reconnect asks for no more than those).
    pub(super) fn delivered(&self, number: u64) {
        let mut state = lock(&self.state);
        while state.messages.len() > KEPT && state.messages.front().is_some_and(|(n, _)| *n <= number) {
            state.messages.pop_front();
        }
    }

    /// The messages after `after`, waiting for one when there are none.
    pub(super) async fn next(&self, after: u64) -> Next {
        loop {
            let changed = self.changed.notified();
            {
                let state = lock(&self.state);
                if after + 1 < state.lost_before {
                    return Next::Lost;
                }
                let ready: Vec<_> = state.messages.iter().filter(|(n, _)| *n > after).cloned().collect();
                if !ready.is_empty() {
                    return Next::Messages(ready);
                }
                if state.finished {
                    return Next::Finished;
                }
            }
            changed.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[actix_rt::test]
    async fn a_reader_gets_what_came_after_its_last_and_then_the_end() {
        let outlet = Outlet::new(3);
        outlet.push(&json!(1));
        outlet.push(&json!(2));
        let Next::Messages(all) = outlet.next(0).await else { panic!("messages") };
        assert_eq!(all.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [1, 2]);
        let Next::Messages(rest) = outlet.next(1).await else { panic!("messages") };
        assert_eq!(&*rest[0].1, "2");
        outlet.finish_with(&json!(3));
        outlet.push(&json!("ignored"));
        let Next::Messages(last) = outlet.next(2).await else { panic!("messages") };
        assert_eq!(last.len(), 1);
        assert!(matches!(outlet.next(3).await, Next::Finished));
    }

    #[actix_rt::test]
    async fn a_reader_too_far_behind_is_told() {
        let outlet = Outlet::new(0);
        for n in 0..(HELD + 2) {
            outlet.push(&json!(n));
        }
        assert!(matches!(outlet.next(0).await, Next::Lost));
        assert!(matches!(outlet.next(HELD as u64).await, Next::Messages(_)));
    }
}
