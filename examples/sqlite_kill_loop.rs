//! The SQLite SIGKILL loop for longer than CI runs it: 1,000 kills (by
//! default) of the real `subagentd` on one SQLite store, each right after a
//! `POST /send` of one or two spawns was answered 200 (at once, or up to
//! 6 ms later, while the spawns are served and committed), each followed by
//! a restart with random group commit settings and a list; every spawn
//! answered 200 must then be listed exactly once, and be answered once over
//! its session's life. It prints the figures (kills, spawns answered 200,
//! missing, duplicated, answered other than once, wall time) and exits
//! nonzero on any miss. See `durable_sqlite_kill_loop_every_spawn_answered_200_exists_once`
//! in `tests/it/durable.rs`, which CI runs with fewer kills.
//!
//! Run: `cargo run --release --example sqlite_kill_loop -- [--kills N] [--seed S]`
//!
//! It runs `cargo test --release --test it durable::durable_sqlite_kill_loop_every_spawn_answered_200_exists_once
//! -- --exact --nocapture` with `SUBAGENTD_KILL_LOOP_KILLS` (and, when
//! `--seed` is given, `DURABLE_SEED`) set; the test prints the seed it used,
//! so a failing run replays with `--seed`. Output goes straight through,
//! and the exit status is the test's. Depends on std only.

use std::process::{Command, ExitCode};

/// The test the loop runs.
const TEST: &str = "durable::durable_sqlite_kill_loop_every_spawn_answered_200_exists_once";

/// What the command line asks for.
struct Args {
    /// SIGKILLs (default 1,000).
    kills: u64,
    /// The kill points' seed (default: the test draws one).
    seed: Option<u64>,
}

/// Parses `--kills N` and `--seed S`.
fn parse_args() -> Result<Args, String> {
    let mut args = Args { kills: 1_000, seed: None };
    let mut given = std::env::args().skip(1);
    while let Some(flag) = given.next() {
        let value = given.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--kills" => {
                args.kills = value.parse().map_err(|_| format!("--kills {value}: not a count"))?;
                if args.kills == 0 {
                    return Err("--kills 0: must be above 0".into());
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
            eprintln!(
                "sqlite_kill_loop: {err}\nusage: cargo run --release --example sqlite_kill_loop -- [--kills N] [--seed S]"
            );
            return ExitCode::from(2);
        }
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut test = Command::new(cargo);
    test.args(["test", "--release", "--test", "it", TEST, "--", "--exact", "--nocapture"])
        .env("SUBAGENTD_KILL_LOOP_KILLS", args.kills.to_string())
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    match args.seed {
        Some(seed) => {
            test.env("DURABLE_SEED", seed.to_string());
        }
        None => {
            test.env_remove("DURABLE_SEED");
        }
    }
    eprintln!("sqlite_kill_loop: {} kills: {test:?}", args.kills);
    match test.status() {
        Ok(status) if status.success() => ExitCode::SUCCESS,
        Ok(status) => ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1).max(1)),
        Err(err) => {
            eprintln!("sqlite_kill_loop: cannot run cargo: {err}");
            ExitCode::FAILURE
        }
    }
}
