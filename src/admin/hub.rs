//! Every session's events, for the operator's live view (`GET
//! /admin/stream`). A session's event sink holds a [`Tap`]; a stream holds
//! a [`Watch`]. While no stream is attached, a tap costs one atomic load
//! per event and nothing is built; while streams are attached, only the
//! sessions some stream watches are published.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use tokio::sync::broadcast;

/// Notices a slow stream may fall behind by before it is told to resync.
const BACKLOG: usize = 4096;

/// Streams attached at once, at most (each is an operator's page or a
/// `curl`; past this the next one is refused).
pub(crate) const MAX_WATCHES: usize = 32;

/// One thing a stream sends: an SSE event named `kind` with `data` (JSON).
#[derive(Debug)]
pub struct Notice {
    /// The session it is about.
    pub session: Arc<str>,
    /// The SSE event name: `subagent` (a `SUBAGENT_EVENT`) or `session`
    /// (opened or closed).
    pub kind: &'static str,
    /// The event's JSON.
    pub data: String,
}

/// The fan-out point; see the module docs.
#[derive(Debug)]
pub struct Hub {
    // Streams attached, filtered or not: while 0 nothing is published.
    watches: AtomicUsize,
    // Streams watching every session.
    watching_all: AtomicUsize,
    // Sessions a filtered stream watches, with how many streams watch each.
    watched: RwLock<HashMap<Arc<str>, usize>>,
    tx: broadcast::Sender<Arc<Notice>>,
}

impl Default for Hub {
    fn default() -> Self {
        Self {
            watches: AtomicUsize::new(0),
            watching_all: AtomicUsize::new(0),
            watched: RwLock::default(),
            tx: broadcast::channel(BACKLOG).0,
        }
    }
}

impl Hub {
    fn watched(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Arc<str>, usize>> {
        self.watched.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether any stream is attached.
    pub fn is_watched(&self) -> bool {
        self.watches.load(Ordering::Relaxed) > 0
    }

    /// Whether some stream wants `session`'s events.
    fn wants(&self, session: &str) -> bool {
        if !self.is_watched() {
            return false;
        }
        self.watching_all.load(Ordering::Relaxed) > 0
            || self.watched.read().unwrap_or_else(|poisoned| poisoned.into_inner()).contains_key(session)
    }

    /// Attaches a stream: every session's notices (`session` `None`) or one
    /// session's (plus every session's `session` notices). `None` when
    /// [`MAX_WATCHES`] streams are attached.
    pub fn watch(self: &Arc<Self>, session: Option<Arc<str>>) -> Option<Watch> {
        if self
            .watches
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < MAX_WATCHES).then_some(n + 1))
            .is_err()
        {
            return None;
        }
        // Subscribed before the counts change, so nothing published for it is missed.
        let rx = self.tx.subscribe();
        match &session {
            None => {
                self.watching_all.fetch_add(1, Ordering::AcqRel);
            }
            Some(id) => *self.watched().entry(id.clone()).or_insert(0) += 1,
        }
        Some(Watch { hub: self.clone(), session, rx })
    }

    /// Sends `notice` to the attached streams (a session's opening or end:
    /// every stream wants those).
    pub fn publish_session(&self, notice: Notice) {
        if self.is_watched() {
            let _ = self.tx.send(Arc::new(notice));
        }
    }
}

/// A session's tap on the hub: its events go out while a stream watches it.
#[derive(Debug, Clone)]
pub struct Tap {
    hub: Arc<Hub>,
    session: Arc<str>,
    // `{"session":<id>,"event":`, what every notice of it starts with.
    prefix: Arc<str>,
}

impl Tap {
    /// A tap for `session`'s events.
    pub fn new(hub: Arc<Hub>, session: &str) -> Self {
        let prefix = format!("{{\"session\":{},\"event\":", serde_json::Value::from(session));
        Self { hub, session: session.into(), prefix: prefix.into() }
    }

    /// Whether a stream watches this session now: a sink that has no line
    /// of its own (a face's session) builds one only then.
    pub fn is_wanted(&self) -> bool {
        self.hub.wants(&self.session)
    }

    /// Publishes one `SUBAGENT_EVENT` line (as the client gets it), when a
    /// stream watches this session.
    pub fn event(&self, line: &str) {
        if !self.hub.wants(&self.session) {
            return;
        }
        let mut data = String::with_capacity(self.prefix.len() + line.len() + 1);
        data.push_str(&self.prefix);
        data.push_str(line);
        data.push('}');
        let _ = self.hub.tx.send(Arc::new(Notice { session: self.session.clone(), kind: "subagent", data }));
    }
}

/// One attached stream; detaches when dropped.
#[derive(Debug)]
pub struct Watch {
    hub: Arc<Hub>,
    session: Option<Arc<str>>,
    rx: broadcast::Receiver<Arc<Notice>>,
}

/// What a stream gets next.
#[derive(Debug)]
pub enum Next {
    /// A notice for it.
    Notice(Arc<Notice>),
    /// It fell this many notices behind and missed them: the page reloads
    /// its state.
    Missed(u64),
    /// The hub is gone (the host stops).
    Closed,
}

impl Watch {
    fn wants(&self, notice: &Notice) -> bool {
        match &self.session {
            None => true,
            Some(id) => notice.kind == "session" || notice.session == *id,
        }
    }

    /// The next notice this stream wants.
    pub async fn next(&mut self) -> Next {
        loop {
            match self.rx.recv().await {
                Ok(notice) if self.wants(&notice) => return Next::Notice(notice),
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(missed)) => return Next::Missed(missed),
                Err(broadcast::error::RecvError::Closed) => return Next::Closed,
            }
        }
    }

    /// The next notice this stream wants, if one is already queued (a
    /// stream sends what is queued in one write).
    pub fn try_next(&mut self) -> Option<Next> {
        loop {
            match self.rx.try_recv() {
                Ok(notice) if self.wants(&notice) => return Some(Next::Notice(notice)),
                Ok(_) => {}
                Err(broadcast::error::TryRecvError::Empty) => return None,
                Err(broadcast::error::TryRecvError::Lagged(missed)) => return Some(Next::Missed(missed)),
                Err(broadcast::error::TryRecvError::Closed) => return Some(Next::Closed),
            }
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        match &self.session {
            None => {
                self.hub.watching_all.fetch_sub(1, Ordering::AcqRel);
            }
            Some(id) => {
                let mut watched = self.hub.watched();
                if let Some(count) = watched.get_mut(id) {
                    *count -= 1;
                    if *count == 0 {
                        watched.remove(id);
                    }
                }
            }
        }
        self.hub.watches.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notice(next: Next) -> Arc<Notice> {
        match next {
            Next::Notice(notice) => notice,
            other => panic!("expected a notice, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_tap_publishes_only_what_a_stream_watches() {
        let hub = Arc::new(Hub::default());
        let a = Tap::new(hub.clone(), "a");
        let b = Tap::new(hub.clone(), "b");
        a.event("{\"n\":0}");
        assert_eq!(hub.tx.len(), 0, "nothing is built while no stream is attached");
        let mut only_b = hub.watch(Some("b".into())).unwrap();
        a.event("{\"n\":1}");
        assert_eq!(hub.tx.len(), 0, "session a is not watched");
        b.event("{\"n\":2}");
        let got = notice(only_b.next().await);
        assert_eq!(got.kind, "subagent");
        let data: serde_json::Value = serde_json::from_str(&got.data).unwrap();
        assert_eq!(data, serde_json::json!({ "session": "b", "event": { "n": 2 } }));
        let mut all = hub.watch(None).unwrap();
        a.event("{\"n\":3}");
        assert_eq!(&*notice(all.next().await).session, "a");
        drop(all);
        drop(only_b);
        assert!(!hub.is_watched());
        assert!(hub.watched().is_empty(), "a detached stream leaves no entry behind");
    }

    #[tokio::test]
    async fn a_filtered_stream_gets_every_session_notice_and_a_slow_one_is_told_it_missed() {
        let hub = Arc::new(Hub::default());
        let mut watch = hub.watch(Some("x".into())).unwrap();
        hub.publish_session(Notice { session: "y".into(), kind: "session", data: "{}".into() });
        assert_eq!(&*notice(watch.next().await).session, "y");
        let tap = Tap::new(hub.clone(), "x");
        for _ in 0..BACKLOG + 10 {
            tap.event("{}");
        }
        assert!(matches!(watch.next().await, Next::Missed(10)));
    }

    #[test]
    fn streams_are_bounded() {
        let hub = Arc::new(Hub::default());
        let watches: Vec<_> = (0..MAX_WATCHES).map(|_| hub.watch(None).unwrap()).collect();
        assert!(hub.watch(None).is_none());
        drop(watches);
        assert!(hub.watch(None).is_some());
    }
}
