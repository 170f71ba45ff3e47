//! The data directory's lock: one `subagentd` per data directory. The lock
//! is an `flock` on `DIR/lock`, which also holds the owner's pid, so a
//! second process is refused with a message naming the first; the kernel
//! drops the lock when its owner dies, so a crash never leaves it stale.

use rustix::fs::{flock, FlockOperation};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;

/// Holds a data directory for this process until dropped.
#[derive(Debug)]
pub struct DataDirLock {
    // Kept open: closing it releases the lock.
    _file: File,
}

impl DataDirLock {
    /// Creates `dir` if needed and takes its lock; an error names the pid
    /// of the process that holds it.
    pub fn acquire(dir: &Path) -> Result<Self, String> {
        std::fs::create_dir_all(dir)
            .map_err(|err| format!("cannot create the data directory {}: {err}", dir.display()))?;
        let path = dir.join("lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|err| format!("cannot open {}: {err}", path.display()))?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() { "another process".to_owned() } else { format!("pid {holder}") };
            return Err(format!(
                "the data directory {} is in use by another subagentd ({who}); stop it, or give this one its own --data-dir",
                dir.display()
            ));
        }
        file.set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| writeln!(file, "{}", std::process::id()))
            .map_err(|err| format!("cannot write {}: {err}", path.display()))?;
        Ok(Self { _file: file })
    }
}
