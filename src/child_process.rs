//! Programs the host starts (a command adapter's, a stdio MCP server) die
//! with it: [`die_with_host`], the crate's one `unsafe` (a pre-exec hook).

use rustix::process::{getpid, getppid, set_parent_process_death_signal, Signal};

/// Makes the kernel SIGKILL the program when its host dies, whatever the
/// host had time to do (kill on drop, checkpoint).
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that spawned the program exits,
/// not the process: here an actix arbiter's thread, which lives as long as
/// the host. It covers the program itself (kept across its `exec`, unless
/// that is of a set-user-ID binary), not its children: those are reached
/// through the process group, killed on drop and, after a crash, by the
/// restarted host (the command adapter's `kill_left_behind`).
#[allow(unsafe_code)]
pub(crate) fn die_with_host(command: &mut tokio::process::Command) {
    let host = getpid();
    // SAFETY: the closure runs in the forked child before `exec`, where only
    // async-signal-safe calls are allowed. It makes two system calls through
    // rustix (`prctl`, `getppid`: no allocation, no lock) and may build an
    // `io::Error` from an errno (no allocation either). It touches no state
    // shared with the parent: `host` is a copied integer.
    unsafe {
        command.pre_exec(move || {
            set_parent_process_death_signal(Some(Signal::KILL))?;
            // The host may have died between the fork and the `prctl`: then
            // the signal will never come (the child was reparented already),
            // so give up; the error makes the child exit before `exec`.
            if getppid() != Some(host) {
                return Err(rustix::io::Errno::SRCH.into());
            }
            Ok(())
        });
    }
}
