//! A PostgreSQL server of the chaos test's own: `initdb` on a free port in
//! a temp dir, run as the `postgres` user, restarted with `pg_ctl restart
//! -m immediate` as a fault; never the machine's server.

use super::PATIENCE;
use crate::cluster::free_port;
use crate::common::poll_until_blocking;
use crate::test_database::pg_execute;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The `bin` directory of the newest PostgreSQL under /usr/lib/postgresql.
fn postgres_bin() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!("the chaos test starts its own PostgreSQL: no /usr/lib/postgresql/<version>/bin/initdb (apt-get install -y postgresql)")
    })
}

/// Runs `command`; its output when it fails.
pub(super) fn run(command: &mut Command) -> Result<(), String> {
    let output = command.stdin(Stdio::null()).output().map_err(|err| format!("{command:?}: {err}"))?;
    match output.status.success() {
        true => Ok(()),
        false => Err(format!(
            "{command:?}: {}\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )),
    }
}

/// A PostgreSQL server in a scratch directory owned by `postgres`, on a free
/// port; stopped (immediate) and removed when dropped.
pub(super) struct Postgres {
    bin: PathBuf,
    dir: PathBuf,
    pub(super) data: PathBuf,
    options: String,
    /// The URL of the nodes' database.
    pub(super) url: String,
    /// Every postmaster this server has had (one per restart).
    pub(super) pids: Vec<u32>,
}

impl Postgres {
    pub(super) fn start(seed: u64) -> Self {
        let bin = postgres_bin();
        let dir = std::env::temp_dir().join(format!("subagentd-chaos-pg-{:016x}", fastrand::u64(..)));
        std::fs::create_dir_all(&dir).expect("the PostgreSQL scratch dir");
        let data = dir.join("data");
        let port = free_port();
        let options = format!("-p {port} -k /tmp -c listen_addresses=127.0.0.1");
        let mut pg = Self { bin, dir, data, options, url: String::new(), pids: Vec::new() };
        run(Command::new("chown").arg("postgres:postgres").arg(&pg.dir))
            .unwrap_or_else(|err| panic!("seed {seed}: the scratch dir for PostgreSQL: {err}"));
        let data_dir = pg.data.display().to_string();
        let initdb = ["-D", &data_dir, "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-locale", "--no-sync"];
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(pg.bin.join("initdb")).args(initdb).current_dir(&pg.dir);
        run(&mut command).unwrap_or_else(|err| panic!("seed {seed}: initdb: {err}"));
        if let Err(err) = pg.ctl("start", None) {
            panic!("seed {seed}: pg_ctl start: {err}\n{}", pg.log_tail());
        }
        let admin = format!("postgres://postgres@127.0.0.1:{port}/postgres");
        pg_execute(&admin, "CREATE DATABASE chaos").unwrap_or_else(|err| panic!("seed {seed}: CREATE DATABASE: {err}"));
        pg.url = format!("postgres://postgres@127.0.0.1:{port}/chaos");
        pg
    }

    /// Runs `program` of the PostgreSQL install as the `postgres` user (as
    /// initdb, which refuses root).
    fn as_postgres(&self, program: &str, args: &[&str]) -> Result<(), String> {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(self.bin.join(program)).args(args).current_dir(&self.dir);
        // The postmaster outlives pg_ctl: no pipe of ours may stay open in it.
        command.stdout(Stdio::null()).stderr(Stdio::null());
        let status = command.stdin(Stdio::null()).status().map_err(|err| format!("{command:?}: {err}"))?;
        match status.success() {
            true => Ok(()),
            false => Err(format!("{command:?}: {status}")),
        }
    }

    fn ctl(&mut self, action: &str, mode: Option<&str>) -> Result<(), String> {
        let data = self.data.display().to_string();
        let log = self.dir.join("postgres.log").display().to_string();
        let mut args = vec!["-D", data.as_str(), "-l", log.as_str(), "-w", "-t", "60", "-o", self.options.as_str()];
        if let Some(mode) = mode {
            args.extend(["-m", mode]);
        }
        args.push(action);
        self.as_postgres("pg_ctl", &args)?;
        if action != "stop" {
            let pid = std::fs::read_to_string(self.data.join("postmaster.pid")).ok();
            self.pids.extend(pid.and_then(|text| text.lines().next()?.trim().parse::<u32>().ok()));
        }
        Ok(())
    }

    /// `pg_ctl restart -m immediate` (a crash and its recovery), then waits
    /// until the nodes' database answers again.
    pub(super) fn restart(&mut self) -> Result<(), String> {
        self.ctl("restart", Some("immediate")).map_err(|err| format!("{err}\n{}", self.log_tail()))?;
        poll_until_blocking(PATIENCE, || pg_execute(&self.url, "SELECT 1"))
            .map_err(|err| format!("PostgreSQL never came back: {err}"))
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Err(err) = self.ctl("stop", Some("immediate")) {
            eprintln!("chaos: stopping the test's PostgreSQL failed: {err}");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
