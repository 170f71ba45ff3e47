//! The chaos test for longer than CI runs it: three `subagentd` nodes behind
//! HAProxy on a PostgreSQL server the test starts itself, twenty client
//! sessions (HTTP + SSE and TCP) building trees, and a seeded schedule of
//! `kill -9`, SIGSTOP/SIGCONT, node restarts and PostgreSQL restarts; then
//! every invariant is checked (results told unchanged, no subagent twice,
//! every accepted task ended, every session answers, no program left) and a
//! summary line printed: faults injected by kind, sessions checked, the worst
//! recovery time. See `tests/it/chaos.rs`; figures go to BENCHMARKS.md.
//!
//! Run: `cargo run --release --example chaos -- --minutes 10 [--seed S]`
//!
//! It runs `cargo test --release --test it chaos -- --nocapture
//! --test-threads 1` with `SUBAGENTD_CHAOS_SECONDS` (the minutes, in
//! seconds) and, when `--seed` is given, `SUBAGENTD_CHAOS_SEED` set; the test
//! prints the seed it used, so a failing run replays with `--seed`. Output
//! goes straight through, and the exit status is the test's. Depends on std
//! only.

use std::process::{Command, ExitCode};

/// What the command line asks for.
struct Args {
    /// How long faults are injected (default 10; fractions allowed).
    minutes: f64,
    /// The schedule's seed (default: the test draws one).
    seed: Option<u64>,
}

/// Parses `--minutes N` and `--seed S`.
fn parse_args() -> Result<Args, String> {
    let mut args = Args { minutes: 10.0, seed: None };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--minutes" => {
                args.minutes = value.parse().map_err(|_| format!("--minutes {value}: not a number"))?;
                if !(args.minutes > 0.0 && args.minutes.is_finite()) {
                    return Err(format!("--minutes {value}: must be above 0"));
                }
            }
            "--seed" => args.seed = Some(value.parse().map_err(|_| format!("--seed {value}: not an integer"))?),
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(err) => {
            eprintln!("chaos: {err}\nusage: cargo run --release --example chaos -- [--minutes N] [--seed S]");
            return ExitCode::from(2);
        }
    };
    let seconds = (args.minutes * 60.0).round().max(1.0) as u64;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut test = Command::new(cargo);
    test.args(["test", "--release", "--test", "it", "chaos", "--", "--nocapture", "--test-threads", "1"])
        .env("SUBAGENTD_CHAOS_SECONDS", seconds.to_string())
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match args.seed {
        Some(seed) => {
            test.env("SUBAGENTD_CHAOS_SEED", seed.to_string());
        }
        None => {
            test.env_remove("SUBAGENTD_CHAOS_SEED");
        }
    }
    eprintln!("chaos: {seconds} s of faults: {test:?}");
    match test.status() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1).max(1)),
        Err(err) => {
            eprintln!("chaos: cannot run cargo: {err}");
            ExitCode::FAILURE
        }
    }
}
