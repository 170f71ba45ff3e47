//! The session's wait-for graph: which task waits for which subagents (an
//! `await`, or a `merge` waiting for its sources), so that a wait that could
//! never end is refused before it starts instead of running into its
//! timeout. A wait for the waiter itself or one of its ancestors is refused
//! outright (an ancestor's task is the one that handed the waiter its work);
//! any other wait is refused when it would close a cycle of waits.

use std::collections::{HashMap, VecDeque};

use crate::ids::{IdHash, SubagentId};

/// A registered wait's number, given back when the wait ends.
pub(crate) type WaitToken = u64;

/// The waits in progress.
#[derive(Debug, Default)]
pub(super) struct WaitGraph {
    waits: HashMap<WaitToken, (SubagentId, Vec<SubagentId>)>,
    next: WaitToken,
}

impl WaitGraph {
    /// The cycle that `waiter` waiting for `targets` would close (the ids
    /// around it, the waiter first), if any. `parent_of` walks the tree.
    pub(super) fn cycle(
        &self,
        waiter: SubagentId,
        targets: &[SubagentId],
        parent_of: impl Fn(SubagentId) -> Option<SubagentId>,
    ) -> Option<Vec<SubagentId>> {
        for &target in targets {
            let mut chain = vec![waiter];
            let mut at = Some(waiter);
            while let Some(id) = at {
                if id == target {
                    return Some(chain);
                }
                at = parent_of(id);
                chain.extend(at);
            }
            if let Some(path) = self.path(target, waiter) {
                let mut around = vec![waiter];
                around.extend(path);
                around.pop(); // the path ends at the waiter, already first
                return Some(around);
            }
        }
        None
    }

    /// Records a wait that passed [`WaitGraph::cycle`].
    pub(super) fn add(&mut self, waiter: SubagentId, targets: Vec<SubagentId>) -> WaitToken {
        self.next += 1;
        self.waits.insert(self.next, (waiter, targets));
        self.next
    }

    /// Forgets a wait that ended (however it ended).
    pub(super) fn remove(&mut self, token: WaitToken) {
        self.waits.remove(&token);
    }

    /// How many waits are in progress.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.waits.len()
    }

    // The shortest chain of waits from `from` to `to` (`from` first, `to`
    // last), breadth first over who waits for whom.
    fn path(&self, from: SubagentId, to: SubagentId) -> Option<Vec<SubagentId>> {
        let mut edges: HashMap<SubagentId, Vec<SubagentId>, IdHash> = HashMap::default();
        for (waiter, targets) in self.waits.values() {
            edges.entry(*waiter).or_default().extend(targets.iter().copied());
        }
        let mut came_from: HashMap<SubagentId, SubagentId, IdHash> = HashMap::default();
        let mut queue = VecDeque::from([from]);
        while let Some(at) = queue.pop_front() {
            if at == to {
                let mut path = vec![to];
                let mut step = to;
                while step != from {
                    step = came_from[&step];
                    path.push(step);
                }
                path.reverse();
                return Some(path);
            }
            for &next in edges.get(&at).into_iter().flatten() {
                if next != from && !came_from.contains_key(&next) {
                    came_from.insert(next, at);
                    queue.push_back(next);
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<SubagentId> {
        (1..=n as u32).map(SubagentId).collect()
    }

    #[test]
    fn self_and_ancestors_are_refused_and_descendants_are_not() {
        let [root, child, grandchild]: [SubagentId; 3] = ids(3).try_into().unwrap();
        let parent_of = |id: SubagentId| {
            if id == grandchild {
                Some(child)
            } else if id == child {
                Some(root)
            } else {
                None
            }
        };
        let graph = WaitGraph::default();
        assert_eq!(graph.cycle(child, &[child], parent_of), Some(vec![child]));
        assert_eq!(graph.cycle(grandchild, &[child], parent_of), Some(vec![grandchild, child]));
        assert_eq!(graph.cycle(grandchild, &[root], parent_of), Some(vec![grandchild, child, root]));
        assert_eq!(graph.cycle(root, &[grandchild], parent_of), None);
    }

    #[test]
    fn a_wait_closing_a_cycle_of_siblings_is_refused_with_the_cycle() {
        let [a, b, c]: [SubagentId; 3] = ids(3).try_into().unwrap();
        let no_parent = |_| None;
        let mut graph = WaitGraph::default();
        let ab = graph.add(a, vec![b]);
        assert_eq!(graph.cycle(b, &[a], no_parent), Some(vec![b, a]), "a 2-cycle");
        assert_eq!(graph.cycle(b, &[c], no_parent), None);
        graph.add(b, vec![c]);
        assert_eq!(graph.cycle(c, &[a], no_parent), Some(vec![c, a, b]), "a 3-cycle, in wait order");
        graph.remove(ab);
        assert_eq!(graph.cycle(c, &[a], no_parent), None, "an ended wait closes nothing");
        assert_eq!(graph.len(), 1);
    }
}
