//! [`PoolSlot`]: a session's place in the [`Service`]'s session pools
//! (unauthenticated, then a `max_sessions` slot after its handshake), and
//! the count of sessions per caller (`max_sessions_per_caller`) it charges.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::service::Service;
use crate::error::HostError;

// The `runtime_error` (retryable) for a full pool.
pub(super) fn full(name: &'static str, max: usize) -> HostError {
    crate::metrics::metrics().bound_rejected(name);
    HostError::runtime(format!("{name} ({max}) reached; try again later"))
        .with_detail(serde_json::json!({ "limit": name, "value": max }))
}

impl Service {
    // Takes one place in `pool` (bounded by `max`, the limit named `name`)
    // and counts the session as open.
    pub(super) fn take(&self, pool: &AtomicUsize, name: &'static str, max: usize) -> Result<(), HostError> {
        if pool.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1)).is_err() {
            return Err(full(name, max));
        }
        self.open.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    // Counts one more session of `caller`: `runtime_error` (retryable) when
    // it holds `max_sessions_per_caller` already.
    fn take_caller(&self, caller: &str) -> Result<(), HostError> {
        let max = self.limits().sessions_per_caller();
        let mut callers = self.callers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = callers.entry(caller.to_owned()).or_default();
        if *count >= max {
            if *count == 0 {
                callers.remove(caller);
            }
            crate::metrics::metrics().bound_rejected("max_sessions_per_caller");
            return Err(HostError::runtime(format!(
                "max_sessions_per_caller ({max}) reached: this caller holds that many sessions; close one or try again later"
            ))
            .with_detail(serde_json::json!({ "limit": "max_sessions_per_caller", "value": max })));
        }
        *count += 1;
        Ok(())
    }

    fn release_caller(&self, caller: &str) {
        let mut callers = self.callers.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = callers.get_mut(caller) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                callers.remove(caller);
            }
        }
    }

    /// Sessions `caller` (a [`super::caller_key`]) holds now.
    pub fn caller_sessions(&self, caller: &str) -> usize {
        self.callers.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).get(caller).copied().unwrap_or(0)
    }
}

/// Whether `err` is the refusal of a caller at `max_sessions_per_caller`.
pub(crate) fn is_caller_limit(err: &HostError) -> bool {
    err.detail.as_ref().is_some_and(|detail| detail["limit"] == "max_sessions_per_caller")
}

/// A session's place in the service's session pools: unauthenticated until
/// [`PoolSlot::authenticate`] moves it to a `max_sessions` slot. Clones
/// share the place, which is given back when the last clone is dropped: a
/// transport that keeps an ended session around (HTTP, until its last lines
/// are delivered) holds a clone so it stays counted.
#[derive(Debug, Clone)]
pub struct PoolSlot(Arc<SlotState>);

#[derive(Debug)]
struct SlotState {
    // Whose pools these are.
    service: Arc<Service>,
    // Which pool holds the place (set once, by `authenticate`).
    authenticated: AtomicBool,
    // Whose the session is (shared with the transport's registry).
    owner: Arc<super::owner::Owner>,
    // The caller it counts against (`max_sessions_per_caller`).
    caller: Mutex<Option<String>>,
}

impl PoolSlot {
    pub(super) fn new(service: Arc<Service>, authenticated: bool) -> Self {
        Self(Arc::new(SlotState {
            service,
            authenticated: AtomicBool::new(authenticated),
            owner: Arc::default(),
            caller: Mutex::new(None),
        }))
    }

    /// Whose the session is.
    pub fn owner(&self) -> &Arc<super::owner::Owner> {
        &self.0.owner
    }

    /// Counts the session against `caller` (a [`super::caller_key`]; `None`:
    /// against nobody) from now on, instead of the caller it counted
    /// against so far: `runtime_error` (retryable, `detail.limit`
    /// `max_sessions_per_caller`) when `caller` holds that many sessions
    /// already, and the session still counts where it did.
    pub fn charge(&self, caller: Option<String>) -> Result<(), HostError> {
        let service = &self.0.service;
        let mut current = self.0.caller.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if *current == caller {
            return Ok(());
        }
        if let Some(caller) = &caller {
            service.take_caller(caller)?;
        }
        if let Some(old) = current.take() {
            service.release_caller(&old);
        }
        *current = caller;
        Ok(())
    }

    /// Whether the place is a `max_sessions` slot.
    pub fn is_authenticated(&self) -> bool {
        self.0.authenticated.load(Ordering::Acquire)
    }

    /// [`PoolSlot::authenticate`], counting the session against `caller`
    /// (when there is one) first: a full `max_sessions` is reported as
    /// such before the caller's own bound is looked at.
    pub fn authenticate_as(&self, caller: Option<String>) -> Result<(), HostError> {
        let service = &self.0.service;
        let max = service.limits().max_sessions;
        if !self.is_authenticated() && service.authenticated.load(Ordering::Acquire) >= max {
            return Err(full("max_sessions", max));
        }
        if caller.is_some() {
            self.charge(caller)?;
        }
        self.authenticate()
    }

    /// Moves an unauthenticated place to a `max_sessions` slot (after a
    /// successful handshake); `runtime_error` when `max_sessions` are taken,
    /// and the place stays unauthenticated.
    pub fn authenticate(&self) -> Result<(), HostError> {
        if self.is_authenticated() {
            return Ok(());
        }
        let service = &self.0.service;
        let max = service.limits().max_sessions;
        if service
            .authenticated
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .is_err()
        {
            return Err(full("max_sessions", max));
        }
        if self.0.authenticated.swap(true, Ordering::AcqRel) {
            // Moved meanwhile by another clone: give back the extra slot.
            service.authenticated.fetch_sub(1, Ordering::AcqRel);
        } else {
            service.unauthenticated.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(())
    }
}

impl Drop for SlotState {
    fn drop(&mut self) {
        let service = &self.service;
        if let Some(caller) = self.caller.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()).take() {
            service.release_caller(&caller);
        }
        let pool = if *self.authenticated.get_mut() { &service.authenticated } else { &service.unauthenticated };
        pool.fetch_sub(1, Ordering::AcqRel);
        if service.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            service.idle.notify_waiters();
        }
    }
}
