//! Clocks that stop while a person is asked: a task's `timeout_seconds`
//! and a subtree's `max_wall_seconds` do not run while the task (or a
//! descendant it waits on) waits for an approval or an answer.
//!
//! A [`PauseClock`] counts how long it has been held: a deadline set on it
//! is its base instant plus that. [`run_until`] runs a future against such
//! a deadline, sleeping again when the clock was held meanwhile.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

#[derive(Debug, Default)]
struct Held {
    // Holds taken and not yet released (several descendants may wait at once).
    holds: u32,
    // When the first of the current holds was taken.
    since: Option<Instant>,
    // Time held before `since`.
    total: Duration,
}

/// A clock that can be held (stopped) and released; see the module docs.
#[derive(Debug, Default)]
pub(crate) struct PauseClock {
    held: Mutex<Held>,
    // Set (under the lock) once the clock has ever been held: until then,
    // which is almost always, reading it takes no lock.
    ever_held: AtomicBool,
    released: Notify,
}

impl PauseClock {
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    // Stops the clock until a matching `release` (see `ClockHold`).
    fn take(&self) {
        let mut held = self.lock();
        self.ever_held.store(true, Ordering::Release);
        held.holds += 1;
        if held.holds == 1 {
            held.since = Some(Instant::now());
        }
    }

    fn release(&self) {
        let mut held = self.lock();
        held.holds = held.holds.saturating_sub(1);
        if held.holds == 0 {
            if let Some(since) = held.since.take() {
                held.total += since.elapsed();
            }
            drop(held);
            self.released.notify_waiters();
        }
    }

    /// How long the clock has been held in all (the current hold included),
    /// and whether it is held now.
    pub(crate) fn held_for(&self) -> (Duration, bool) {
        if !self.ever_held.load(Ordering::Acquire) {
            return (Duration::ZERO, false);
        }
        let held = self.lock();
        let current = held.since.map_or(Duration::ZERO, |since| since.elapsed());
        (held.total + current, held.holds > 0)
    }

    /// `base` moved on by the time the clock has been held.
    pub(crate) fn deadline(&self, base: Instant) -> Instant {
        base + self.held_for().0
    }
}

/// A hold on a clock (a task's own, or a wall-clock budget's): the clock
/// runs again when it is dropped.
#[derive(Debug)]
pub(crate) enum ClockHold {
    /// A task's own clock.
    Task(Arc<TaskClocks>),
    /// A wall-clock budget's.
    Wall(Arc<PauseClock>),
}

impl Drop for ClockHold {
    fn drop(&mut self) {
        match self {
            Self::Task(clocks) => clocks.own.release(),
            Self::Wall(clock) => clock.release(),
        }
    }
}

/// The clocks a person-wait of one task stops: its own, its wall-clock
/// budget's, and those of the tasks above it that delegated to it (they
/// wait on it). A task's are made on first use (see `TaskShared::clocks`).
#[derive(Debug, Default)]
pub(crate) struct TaskClocks {
    /// The task's own (`timeout_seconds`).
    pub own: PauseClock,
    /// Its subtree's `max_wall_seconds`, when it has one.
    pub wall: Option<Arc<PauseClock>>,
    /// The delegating task's, for a task delegated by its parent's task.
    pub parent: Option<Arc<TaskClocks>>,
}

impl TaskClocks {
    /// Stops every clock of this task and of the tasks above it (each
    /// wall-clock budget once) until the hold is dropped.
    pub(crate) fn hold_all(self: &Arc<Self>) -> Vec<ClockHold> {
        let mut holds: Vec<ClockHold> = Vec::new();
        let mut walls: Vec<&Arc<PauseClock>> = Vec::new();
        let mut clocks = Some(self);
        while let Some(at) = clocks {
            at.own.take();
            holds.push(ClockHold::Task(at.clone()));
            if let Some(wall) = at.wall.as_ref().filter(|wall| !walls.iter().any(|seen| Arc::ptr_eq(seen, wall))) {
                wall.take();
                holds.push(ClockHold::Wall(wall.clone()));
                walls.push(wall);
            }
            clocks = at.parent.as_ref();
        }
        holds
    }
}

/// A delegating task's deadline, which caps its child's, and its clocks,
/// which a person-wait of the child stops too.
#[derive(Debug, Clone)]
pub(crate) struct DeadlineCap {
    /// The delegating task's deadline when it delegated.
    pub at: Instant,
    /// Its clocks.
    pub clocks: Arc<TaskClocks>,
}

/// The clock a task's deadline runs on: its own (made only once a person
/// is asked, or a child's deadline capped), or its wall-clock budget's
/// when that binds first.
#[derive(Debug)]
pub(crate) enum DeadlineClock {
    /// The task's own, in what it shares with its actor.
    Own(std::rc::Rc<crate::runtime::task::shared::TaskShared>),
    /// The wall-clock budget's.
    Wall(Arc<PauseClock>),
}

impl DeadlineClock {
    /// The clock, if it exists yet (a clock never made was never held).
    fn clock(&self) -> Option<&PauseClock> {
        match self {
            Self::Own(shared) => shared.clocks.get().map(|clocks| &clocks.own),
            Self::Wall(clock) => Some(clock),
        }
    }

    fn held_for(&self) -> (Duration, bool) {
        self.clock().map_or((Duration::ZERO, false), PauseClock::held_for)
    }
}

/// Runs `work` until it ends, or until `base` (moved on by the time
/// `clock` was held) passes while the clock runs: then `Err(())`.
pub(crate) async fn run_until<F: Future>(base: Instant, clock: DeadlineClock, work: F) -> Result<F::Output, ()> {
    tokio::pin!(work);
    // The work is polled once before any timer is made: a task that ends on
    // its first poll (most scripted ones) never makes one, nor registers it.
    // Work that is ready wins over a deadline that has passed, here and
    // below, as with `tokio::time::timeout`.
    if let std::task::Poll::Ready(output) = futures_util::poll!(work.as_mut()) {
        return Ok(output);
    }
    loop {
        let (held_for, held) = clock.held_for();
        if let Some(held_clock) = clock.clock().filter(|_| held) {
            // Boxed: the rare branch's state stays out of every task's future.
            match Box::pin(until_released(held_clock, work.as_mut())).await {
                Some(output) => return Ok(output),
                None => continue,
            }
        }
        // The usual path: one lock above, and a timer, as a plain timeout.
        tokio::select! {
            biased;
            output = &mut work => return Ok(output),
            _ = tokio::time::sleep_until(base + held_for) => {
                // Held meanwhile: the deadline has moved on.
                let (now_held_for, now_held) = clock.held_for();
                if !now_held && now_held_for == held_for {
                    return Err(());
                }
            }
        }
    }
}

/// Polls `work` until it ends (`Some`) or `clock` is released (`None`).
async fn until_released<F: Future>(clock: &PauseClock, work: std::pin::Pin<&mut F>) -> Option<F::Output> {
    let released = clock.released.notified();
    tokio::pin!(released);
    // Registered, then checked again: a release in between wakes it.
    released.as_mut().enable();
    if !clock.held_for().1 {
        return None;
    }
    tokio::select! {
        output = work => Some(output),
        _ = &mut released => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_held_clock_moves_the_deadline_on_by_the_time_held() {
        let shared = std::rc::Rc::new(crate::runtime::task::shared::TaskShared::default());
        let base = Instant::now() + Duration::from_secs(1);
        let work = {
            let shared = shared.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(500)).await;
                // Made on first use, as a task asking a person makes them.
                let hold = shared.clocks().hold_all();
                tokio::time::sleep(Duration::from_secs(5)).await;
                drop(hold);
                tokio::time::sleep(Duration::from_millis(400)).await;
                "done"
            }
        };
        // 0.9 s of running time against a 1 s deadline: it ends in time.
        assert_eq!(run_until(base, DeadlineClock::Own(shared.clone()), work).await, Ok("done"));
        assert_eq!(shared.clocks().own.held_for(), (Duration::from_secs(5), false));
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_clock_times_out_at_its_deadline() {
        let base = Instant::now() + Duration::from_secs(1);
        let started = Instant::now();
        let work = tokio::time::sleep(Duration::from_secs(10));
        let clock = DeadlineClock::Wall(Arc::default());
        assert_eq!(run_until(base, clock, work).await, Err(()));
        assert_eq!(started.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn overlapping_holds_count_once_and_reach_the_delegating_task_and_the_wall() {
        let wall: Arc<PauseClock> = Arc::default();
        let parent = Arc::new(TaskClocks { wall: Some(wall.clone()), ..TaskClocks::default() });
        let child =
            Arc::new(TaskClocks { wall: Some(wall.clone()), parent: Some(parent.clone()), ..TaskClocks::default() });
        let first = child.hold_all();
        assert_eq!(first.len(), 3, "the child's, the parent's and the shared wall once");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let second = child.hold_all();
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(first);
        tokio::time::sleep(Duration::from_secs(1)).await;
        drop(second);
        tokio::time::sleep(Duration::from_secs(1)).await;
        for clock in [&child.own, &parent.own, &*wall] {
            assert_eq!(clock.held_for(), (Duration::from_secs(3), false));
        }
    }
}
