//! [`FairQueue`]: waiters in one lane per session, served round-robin over
//! the lanes and first come, first served within one, so a session's
//! fan-out of a hundred never starves another session's single task.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Items in per-session lanes, taken round-robin over sessions.
#[derive(Debug)]
pub(super) struct FairQueue<T> {
    // The sessions with an item, in serving order: the front is served next.
    ring: VecDeque<Arc<str>>,
    // Each session's items, oldest first; never empty while listed.
    lanes: HashMap<Arc<str>, VecDeque<T>>,
    // Items in all lanes.
    len: usize,
}

impl<T> Default for FairQueue<T> {
    fn default() -> Self {
        Self { ring: VecDeque::new(), lanes: HashMap::new(), len: 0 }
    }
}

impl<T> FairQueue<T> {
    /// Items waiting.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing waits.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `item` last in `session`'s lane.
    pub(super) fn push(&mut self, session: &Arc<str>, item: T) {
        match self.lanes.get_mut(session) {
            Some(lane) => lane.push_back(item),
            None => {
                self.lanes.insert(session.clone(), VecDeque::from([item]));
                self.ring.push_back(session.clone());
            }
        }
        self.len += 1;
    }

    /// The item served next.
    pub(super) fn front(&self) -> Option<&T> {
        self.ring.front().and_then(|session| self.lanes.get(session)).and_then(VecDeque::front)
    }

    /// Takes the item served next; its session goes to the back of the ring.
    pub(super) fn pop(&mut self) -> Option<T> {
        let session = self.ring.pop_front()?;
        let lane = self.lanes.get_mut(&session)?;
        let item = lane.pop_front();
        if lane.is_empty() {
            self.lanes.remove(&session);
        } else {
            self.ring.push_back(session);
        }
        if item.is_some() {
            self.len -= 1;
        }
        item
    }

    /// Takes the first item of `session`'s lane that `is` picks, wherever it is.
    pub(super) fn remove(&mut self, session: &Arc<str>, is: impl Fn(&T) -> bool) -> Option<T> {
        let lane = self.lanes.get_mut(session)?;
        let at = lane.iter().position(is)?;
        let item = lane.remove(at);
        if lane.is_empty() {
            self.lanes.remove(session);
            self.ring.retain(|listed| listed != session);
        }
        if item.is_some() {
            self.len -= 1;
        }
        item
    }

    /// How many items are served before the one of `session`'s lane that
    /// `is` picks (0: it is next); `None` when it is not queued.
    pub(super) fn ahead_of(&self, session: &Arc<str>, is: impl Fn(&T) -> bool) -> Option<usize> {
        let lane = self.lanes.get(session)?;
        let index = lane.iter().position(is)?;
        let mut ahead = index;
        let mut before_it = true;
        for listed in &self.ring {
            if listed == session {
                before_it = false;
                continue;
            }
            let others = self.lanes.get(listed).map_or(0, VecDeque::len);
            // Each round serves one of each lane: `index` rounds pass before
            // its turn, and in its round the lanes ahead of it in the ring
            // go first.
            ahead += others.min(index) + usize::from(before_it && others > index);
        }
        Some(ahead)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_served_round_robin_and_each_in_order() {
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let mut queue = FairQueue::default();
        for n in 0..4 {
            queue.push(&a, format!("a{n}"));
        }
        queue.push(&b, "b0".to_owned());
        queue.push(&b, "b1".to_owned());
        assert_eq!(queue.ahead_of(&b, |item| item == "b0"), Some(1));
        assert_eq!(queue.ahead_of(&b, |item| item == "b1"), Some(3));
        assert_eq!(queue.ahead_of(&a, |item| item == "a3"), Some(5));
        let served: Vec<String> = std::iter::from_fn(|| queue.pop()).collect();
        assert_eq!(served, ["a0", "b0", "a1", "b1", "a2", "a3"]);
        assert!(queue.is_empty());
    }

    #[test]
    fn a_removed_item_leaves_its_lane_and_the_ring_consistent() {
        let (a, b): (Arc<str>, Arc<str>) = ("a".into(), "b".into());
        let mut queue = FairQueue::default();
        queue.push(&a, 1);
        queue.push(&b, 2);
        queue.push(&a, 3);
        assert_eq!(queue.remove(&b, |n| *n == 2), Some(2));
        assert_eq!(queue.remove(&b, |n| *n == 2), None);
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.front(), Some(&1));
        assert_eq!(std::iter::from_fn(|| queue.pop()).collect::<Vec<_>>(), [1, 3]);
    }
}
