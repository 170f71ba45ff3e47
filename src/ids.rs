//! Subagent identifiers: `sub_` + 8 lowercase hex digits, unique within a host.
//!
//! An id is stored as the `u32` its hex digits spell, so it is `Copy`, hashes
//! in one step and costs no allocation; it is only spelled out on the wire.
//! Uniqueness across the whole host is kept by [`IdRegistry`], a set split
//! into shards so that sessions on different threads rarely meet on a lock.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashSet;
use std::fmt;
use std::sync::Mutex;

/// A subagent identifier (`sub_a1b2c3d4`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SubagentId(pub u32);

impl SubagentId {
    /// Parses the wire form. Anything other than `sub_` + 8 hex digits is `None`
    /// (a request naming it then gets `unknown_subagent`).
    pub fn parse(text: &str) -> Option<Self> {
        let hex = text.strip_prefix("sub_")?;
        if hex.len() != 8 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(hex, 16).ok().map(SubagentId)
    }
}

impl SubagentId {
    /// The wire form, spelled on the stack: every event and reply writes
    /// ids, and `write!("sub_{:08x}")` through the formatting machinery cost
    /// several times this.
    pub fn spelled(self) -> SpelledId {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = *b"sub_00000000";
        for (at, digit) in text[4..].iter_mut().enumerate() {
            *digit = HEX[(self.0 >> (28 - 4 * at) & 0xf) as usize];
        }
        SpelledId(text)
    }
}

/// A subagent id's wire form (`sub_a1b2c3d4`), held on the stack.
#[derive(Clone, Copy)]
pub struct SpelledId([u8; 12]);

impl fmt::Debug for SpelledId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl SpelledId {
    /// The text's bytes.
    pub fn as_bytes(&self) -> &[u8; 12] {
        &self.0
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // `sub_` and hex digits only: ASCII.
        std::str::from_utf8(&self.0).unwrap_or("sub_????????")
    }
}

impl fmt::Display for SubagentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.spelled().as_str())
    }
}

impl fmt::Debug for SubagentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for SubagentId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.spelled().as_str())
    }
}

impl<'de> Deserialize<'de> for SubagentId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        SubagentId::parse(&text)
            .ok_or_else(|| serde::de::Error::custom("a subagent id is `sub_` followed by 8 hex digits"))
    }
}

/// Where candidate ids come from. The host draws from `RandomIds`; tests
/// inject a fixed sequence to force a collision.
pub trait IdSource: Send + Sync + 'static {
    /// The next candidate; the registry draws again when it is taken.
    fn next_candidate(&self) -> u32;

    /// The next candidate for a session whose last id was `previous`. By
    /// default the same as [`IdSource::next_candidate`].
    fn next_after(&self, previous: u32) -> u32 {
        let _ = previous;
        self.next_candidate()
    }
}

/// Most a session's ids step up by from one spawn to the next.
const MAX_STEP: u32 = 1 << 16;

/// Random candidates: a session's first id is a random 32-bit value, and
/// each next one is a random step (1 to [`MAX_STEP`]) above its last.
///
/// Why rising: the store keys a subagent's rows by (session, id), and ids
/// that rise within a session land each new row at the end of its
/// session's keys, where the last one went, instead of on a random page
/// of the index (on SQLite, half the pages a commit wrote). Why only
/// within a session: a host-wide counter would tell one client how many
/// subagents the others spawned. A session's own ids tell it nothing of
/// the others: its start and its steps are drawn for it alone, and a
/// candidate another session holds (rare: 2^32 values) is only stepped
/// over.
#[derive(Debug, Default)]
pub(crate) struct RandomIds;

impl IdSource for RandomIds {
    fn next_candidate(&self) -> u32 {
        fastrand::u32(..)
    }

    fn next_after(&self, previous: u32) -> u32 {
        // Past `u32::MAX` it wraps round, and rises again from there.
        previous.wrapping_add(fastrand::u32(1..=MAX_STEP))
    }
}

/// Hashes a subagent id (already a random `u32`) with one multiply instead of
/// SipHash: ids are drawn by the host, not chosen by clients, so there is no
/// flooding to defend against.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        // A multiply mixes each bit upward only; folding the high half down
        // makes the low bits (hashbrown's bucket index) depend on every bit
        // of the id, which matters for the registry's shards, whose ids all
        // share their low bits. The top bits (the control byte) stay mixed.
        let product = self.0.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        product ^ (product >> 32)
    }

    fn write(&mut self, bytes: &[u8]) {
        for byte in bytes {
            self.0 = (self.0 << 8) | u64::from(*byte);
        }
    }

    fn write_u32(&mut self, value: u32) {
        self.0 = u64::from(value);
    }
}

/// The `BuildHasher` of maps and sets keyed by subagent id.
pub(crate) type IdHash = std::hash::BuildHasherDefault<IdHasher>;

const SHARDS: usize = 64;

/// The host-wide set of ids in use.
///
/// An id is taken at spawn and released when its session drops the record,
/// so ids never collide within a host, even across sessions.
pub struct IdRegistry {
    source: Box<dyn IdSource>,
    shards: Vec<Mutex<HashSet<u32, IdHash>>>,
}

impl fmt::Debug for IdRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdRegistry").finish_non_exhaustive()
    }
}

impl IdRegistry {
    /// A registry drawing candidates from `source`.
    pub fn new(source: Box<dyn IdSource>) -> Self {
        Self { source, shards: (0..SHARDS).map(|_| Mutex::new(HashSet::default())).collect() }
    }

    fn shard(&self, id: u32) -> std::sync::MutexGuard<'_, HashSet<u32, IdHash>> {
        // A poisoned shard only means another thread panicked mid-insert; the
        // set itself is still consistent, so keep using it.
        self.shards[id as usize % SHARDS].lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Draws a fresh id, drawing again while the candidate is already in use.
    /// Gives up (`None`) after 64 taken candidates in a row, which with random
    /// draws means the id space is all but full.
    pub fn allocate(&self) -> Option<SubagentId> {
        self.allocate_after(None)
    }

    /// Draws a fresh id for a session whose last id was `previous` (`None`
    /// for its first), as [`IdRegistry::allocate`] does: the source's
    /// [`IdSource::next_after`] the last candidate, again while the
    /// candidate is in use.
    pub fn allocate_after(&self, previous: Option<SubagentId>) -> Option<SubagentId> {
        let mut last = previous.map(|id| id.0);
        for _ in 0..64 {
            let candidate = match last {
                Some(previous) => self.source.next_after(previous),
                None => self.source.next_candidate(),
            };
            if self.shard(candidate).insert(candidate) {
                return Some(SubagentId(candidate));
            }
            log::debug!("subagent id collision on {}; drawing again", SubagentId(candidate));
            last = Some(candidate);
        }
        None
    }

    /// Takes a given id (a restored subagent's); `false` when it is in use.
    pub fn claim(&self, id: SubagentId) -> bool {
        self.shard(id.0).insert(id.0)
    }

    /// Returns an id to the pool.
    pub fn release(&self, id: SubagentId) {
        self.shard(id.0).remove(&id.0);
    }

    /// Whether an id is in use anywhere in the host.
    pub fn contains(&self, id: SubagentId) -> bool {
        self.shard(id.0).contains(&id.0)
    }
}

impl Default for IdRegistry {
    fn default() -> Self {
        Self::new(Box::new(RandomIds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Steps up by one, from 100.
    struct Stepping;

    impl IdSource for Stepping {
        fn next_candidate(&self) -> u32 {
            100
        }

        fn next_after(&self, previous: u32) -> u32 {
            previous.wrapping_add(1)
        }
    }

    // Only ever offers 7.
    struct Sevens;

    impl IdSource for Sevens {
        fn next_candidate(&self) -> u32 {
            7
        }
    }

    #[test]
    fn random_ids_rise_by_a_bounded_random_step_and_wrap_round() {
        let mut previous = fastrand::u32(..);
        let mut steps = HashSet::new();
        for _ in 0..1000 {
            let next = RandomIds.next_after(previous);
            let step = next.wrapping_sub(previous);
            assert!((1..=MAX_STEP).contains(&step), "step {step}");
            steps.insert(step);
            previous = next;
        }
        assert!(steps.len() > 900, "steps are drawn, not fixed: {} distinct", steps.len());
        assert!(RandomIds.next_after(u32::MAX) < MAX_STEP, "past u32::MAX it wraps round");
    }

    #[test]
    fn a_session_steps_over_an_id_another_holds() {
        let registry = IdRegistry::new(Box::new(Stepping));
        let first = registry.allocate_after(None).expect("first");
        assert_eq!(first, SubagentId(100));
        assert!(registry.claim(SubagentId(101)), "another session holds 101");
        assert_eq!(registry.allocate_after(Some(first)), Some(SubagentId(102)));
    }

    #[test]
    fn a_source_without_next_after_draws_as_before_and_gives_up_when_full() {
        let registry = IdRegistry::new(Box::new(Sevens));
        assert_eq!(registry.allocate_after(Some(SubagentId(3))), Some(SubagentId(7)));
        assert_eq!(registry.allocate_after(Some(SubagentId(7))), None, "64 taken candidates in a row");
    }
}
