//! [`WalSync`]: makes SQLite's commits durable on a thread of its own, so
//! that the writer commits batch *k* + 1 while batch *k* reaches the disk.
//!
//! With `synchronous = FULL`, SQLite syncs the WAL inside every commit, and
//! the store writer waited out each sync (0.2–0.6 ms here) before it could
//! start the next batch. Instead the commits connection runs with
//! `synchronous = NORMAL`, which writes a commit's pages to the WAL and
//! does not sync them, and this thread syncs the WAL file: everything
//! written to it before a sync starts is on disk when the sync returns.
//! What a commit releases (its sessions' lines, its flush waiters) runs
//! only then. So a line still reaches its client only once the changes
//! before it are on disk, as with `FULL`; the syncs merely overlap the
//! next batch's statements, and one sync covers every commit made while the
//! previous one ran.
//!
//! `NORMAL` keeps the database consistent across a power cut (SQLite
//! ignores WAL frames that did not all reach the disk); what it gives up,
//! a commit lost after it returned, this thread takes back, because nothing
//! of an unsynced commit has been released.
//!
//! A failed sync is final: the kernel may have dropped the pages it could
//! not write, so a later sync that succeeds proves nothing about them.
//! What waits for it is never released, and every later commit fails, so
//! the store reports itself failing until the host is restarted (which
//! reads back what the WAL really holds).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::signalled::Signalled;

/// What a commit releases once it is on disk.
pub(crate) type Durable = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    // Released after the next sync, in commit order.
    waiting: Vec<Durable>,
    stopping: bool,
    failed: Option<String>,
}

/// The WAL sync thread of one SQLite store.
pub(super) struct WalSync {
    shared: Arc<Signalled<State>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for WalSync {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WalSync").finish_non_exhaustive()
    }
}

impl WalSync {
    /// Starts syncing the WAL of the database at `path`, which must be in
    /// WAL mode with its WAL file open (the commits connection holds it).
    pub(super) fn start(path: &Path) -> Result<Self, String> {
        let wal = wal_path(path);
        let file = File::open(&wal).map_err(|err| format!("cannot open the SQLite WAL {}: {err}", wal.display()))?;
        // The WAL's own name must survive a power cut too: SQLite syncs its
        // directory when it creates the file, and so does this, once.
        if let Some(dir) = wal.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|dir| dir.sync_all())
                .map_err(|err| format!("cannot sync the directory {}: {err}", dir.display()))?;
        }
        let shared = Arc::new(Signalled::<State>::default());
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("sqlite-wal-sync".into())
            .spawn(move || run(&file, &theirs))
            .map_err(|err| format!("cannot start the SQLite WAL sync thread: {err}"))?;
        Ok(Self { shared, thread: Some(thread) })
    }

    /// Runs `durable` once everything committed so far is on disk.
    pub(super) fn after_sync(&self, durable: Durable) {
        let mut state = self.shared.lock();
        if state.failed.is_some() {
            // Never: what it releases is not known to be on disk.
            return;
        }
        state.waiting.push(durable);
        self.shared.notify();
    }

    /// Why the WAL could not be synced, once a sync has failed.
    pub(super) fn failure(&self) -> Option<String> {
        self.shared.lock().failed.clone()
    }
}

impl Drop for WalSync {
    fn drop(&mut self) {
        // The thread syncs and releases what is waiting before it stops.
        self.shared.lock().stopping = true;
        self.shared.notify();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// SQLite's name for the WAL of the database at `path`.
fn wal_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

// The thread: sync, then release what waited for that sync, until stopped.
fn run(wal: &File, shared: &Signalled<State>) {
    loop {
        let waiting = {
            let mut state = shared.wait_while(shared.lock(), |state| state.waiting.is_empty() && !state.stopping);
            if state.waiting.is_empty() {
                return;
            }
            std::mem::take(&mut state.waiting)
        };
        // Taken before the sync: each was committed before it started.
        match wal.sync_data() {
            Ok(()) => waiting.into_iter().for_each(|durable| durable()),
            Err(err) => {
                log::error!(
                    "store: syncing the SQLite WAL failed ({err}); nothing more is acknowledged until a restart"
                );
                shared.lock().failed = Some(format!("the SQLite WAL could not be synced: {err}"));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    // A directory of its own for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("subagentd-wal-sync-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir
    }

    #[test]
    fn a_release_runs_after_a_sync_in_commit_order() {
        let dir = scratch("order");
        let db = dir.join("state.sqlite3");
        std::fs::write(wal_path(&db), b"").expect("wal");
        let sync = WalSync::start(&db).expect("start");
        let (tx, rx) = mpsc::channel();
        for n in 0..50 {
            let tx = tx.clone();
            sync.after_sync(Box::new(move || tx.send(n).expect("send")));
        }
        drop(sync);
        let order: Vec<i32> = rx.try_iter().collect();
        assert_eq!(order, (0..50).collect::<Vec<_>>(), "all released, in order, by the time it stops");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_missing_wal_is_a_clear_error() {
        let dir = scratch("missing");
        let err = WalSync::start(&dir.join("absent.sqlite3")).expect_err("no WAL");
        assert!(err.contains("cannot open the SQLite WAL"), "{err}");
        std::fs::remove_dir_all(dir).ok();
    }
}
