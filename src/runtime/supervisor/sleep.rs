//! Putting idle subagents' actors to sleep.
//!
//! A finished subagent is mostly kept only to be awaited and listed, and
//! its record answers both. Its actor (a tokio task, a mailbox, a context:
//! more than a kilobyte) would sit idle until the session closes, and the
//! close would then have to stop it. So an actor whose task ended with
//! nothing left to do says so in its report (`Idle`), and the supervisor
//! marks the record dormant and stops it (by letting go of its only
//! address, or with `Sleep`); the next task or message
//! starts a new actor from the record, as for a subagent never used. (A
//! cancelled task's actor does not offer: see `settle`.)
//!
//! No message may be lost on the way. Every message the supervisor sends an
//! actor goes through its `ActorLink`, which counts it, and the actor counts
//! those it has handled. The supervisor puts an actor to sleep only when the
//! two counts agree, that is when nothing it sent is still on the way; from
//! then on the record is dormant, so nothing more is sent to that actor.
//! An await forwarded to it while its offer was on the way keeps that offer
//! from being taken; the actor offers again once it has answered it
//! (`OfferSleep`), so that it does not stay awake for good.

use super::record::Slot;
use super::root::Supervisor;
use crate::ids::SubagentId;
use crate::protocol::wire::SubagentStatus;
use crate::runtime::messages::{Idle, OfferSleep};
use std::sync::Arc;

impl Supervisor {
    /// An offer to sleep made again (`OfferSleep`), taken as the first one
    /// would have been, if it comes from the actor the record has now.
    pub(super) fn offer_sleep(&mut self, offer: OfferSleep) {
        let same_actor = self
            .index
            .get(&offer.id)
            .is_some_and(|entry| matches!(&entry.slot, Slot::Live { gone, .. } if gone.same(&offer.gone)));
        if same_actor {
            self.put_to_sleep(offer.id, offer.idle);
        }
    }

    /// Puts `id`'s actor to sleep, as it offered in `idle`, when nothing sent
    /// to it is on the way and nothing else needs it: it is not being
    /// stopped, has no task queued or holding a running slot, and the
    /// session is not closing.
    pub(super) fn put_to_sleep(&mut self, id: SubagentId, idle: Idle) {
        if self.closing {
            return;
        }
        let Some(entry) = self.index.get_mut(&id) else { return };
        let Slot::Live { addr, .. } = &entry.slot else { return };
        let quiet = addr.sent() == idle.handled;
        if !quiet || entry.stopping || entry.caps.queued || entry.caps.holds_slot || entry.status().is_busy() {
            return;
        }
        let Slot::Live { addr, gone } = std::mem::replace(&mut entry.slot, Slot::Dormant) else { return };
        // The operator's view shows the task a subagent failed (or stopped)
        // at; a completed one shows its result, and keeping every completed
        // task's definition too would cost a tenth of its record.
        entry.last_task = idle.last_task.filter(|_| entry.status() != SubagentStatus::Completed);
        // The record's link holds the actor's only address: letting go of
        // it wakes the actor, and actix stops an actor that no address
        // reaches and that has nothing to do, so no `Sleep` message is
        // needed (the mark tells the actor it fell asleep). Were the link
        // shared still, a message puts it to sleep, as letting go would not.
        match Arc::try_unwrap(addr) {
            Ok(link) => {
                gone.mark_asleep();
                drop(link);
            }
            Err(addr) => addr.sleep(),
        }
        self.dozing.push(id, gone);
    }
}
