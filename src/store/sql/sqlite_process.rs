//! [`sqlite_before_start`]: SQLite's process-wide settings, which it takes
//! only before it starts (the first connection a process opens starts it).

use rusqlite::ffi;
use std::os::raw::c_int;

/// Turns off SQLite's memory statistics, which nothing here reads: with them
/// on, every allocation SQLite makes takes a process-wide mutex to count
/// itself, a lock and an unlock per `malloc` and `free` on the store
/// writer's commit path.
///
/// Called once SQLite has started (the first connection a process opens
/// starts it), it changes nothing and returns `false`.
///
/// # Safety
///
/// SQLite's `sqlite3_config` is not thread-safe: no other thread may use
/// SQLite while this runs. Call it before the process starts any thread
/// that may open SQLite (`subagentd` does, first thing in `main`).
#[allow(unsafe_code)]
pub unsafe fn sqlite_before_start() -> bool {
    // SAFETY: no other thread uses SQLite meanwhile (the caller's promise);
    // `SQLITE_CONFIG_MEMSTATUS` takes one int. Once SQLite has started, it
    // returns `SQLITE_MISUSE` and writes nothing.
    let rc = unsafe { ffi::sqlite3_config(ffi::SQLITE_CONFIG_MEMSTATUS, 0 as c_int) };
    if rc != ffi::SQLITE_OK {
        log::debug!("store: SQLite's memory statistics stay on (SQLite had started: code {rc})");
    }
    rc == ffi::SQLITE_OK
}

#[cfg(test)]
mod tests {
    use super::sqlite_before_start;

    #[test]
    #[allow(unsafe_code)]
    fn once_sqlite_has_started_it_changes_nothing() {
        let connection = rusqlite::Connection::open_in_memory().expect("SQLite opens");
        // SAFETY: SQLite has started (the connection above), so the call
        // only reads that it has, as other tests' threads use SQLite.
        let applied = unsafe { sqlite_before_start() };
        assert!(!applied, "SQLite refuses process-wide settings once started");
        let one: i64 = connection.query_row("SELECT 1", [], |row| row.get(0)).expect("still answers");
        assert_eq!(one, 1);
    }
}
