//! The external-command adapter: runs a configured program (no shell) for
//! each task.
//!
//! The program gets `{"subagent_id", "config", "task", "memory"}` as one JSON
//! document on stdin (then end of file), prints its result as a JSON object
//! on stdout (the whole output, or its last non-empty line), and may write
//! progress lines on stderr, each of which becomes a `progress` event. A
//! non-zero exit, a death by signal, or an output that is not a JSON object
//! fails the task with a clear error. The whole run is one step.
//!
//! When the host has MCP servers, the program may call the tools its
//! subagent's `tool_scope` allows through a socket named in its
//! environment (`SUBAGENTD_TOOLS`; see `command_tools`).
//!
//! The program runs in its own process group. A cancel sends the group
//! SIGTERM and lets it wind up within the host's grace period; when the task
//! is dropped (terminate, timeout, grace expired) the group gets SIGKILL, so
//! grandchildren die with it.
//!
//! When the host dies (even by SIGKILL, even between the program's start and
//! the checkpoint of its process group), the kernel SIGKILLs the program
//! (`PR_SET_PDEATHSIG`, set before it is executed). Its own children are not
//! covered by that: a restarted host kills the group it finds checkpointed.

use rustix::process::{kill_process_group, Pid, Signal};

use crate::child_process::die_with_host;
use serde_json::{json, Value};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};

use super::command_tools::{CommandTools, Endpoint};
use super::openai::ToolPolicy;
use crate::protocol::wire::{JsonObject, RawObject};
use crate::runtime::task::{AgentAdapter, TaskContext, TaskError, TaskFuture};
use crate::store::Checkpoint;
use crate::tools::ToolHost;

/// Largest stdout kept; a program printing more fails its task.
const MAX_STDOUT_BYTES: usize = 16 << 20;
/// Longest stderr line turned into one progress event (longer ones are split).
const MAX_PROGRESS_LINE: u64 = 4096;
/// Progress events per task; later stderr lines are read and dropped.
const MAX_PROGRESS_EVENTS: usize = 1000;

/// What program to run, and with which arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandConfig {
    /// The program: a path, or a name looked up in `PATH`. Run directly, never
    /// through a shell.
    pub program: String,
    /// Its arguments, passed as they are.
    pub args: Vec<String>,
    /// Whether a task that was running when the host stopped runs again from
    /// the start after a restart (`on_restart = "rerun"`); else it fails
    /// with `host_restarted`.
    pub rerun_on_restart: bool,
}

/// Runs each task as a child process.
#[derive(Debug, Clone)]
pub struct CommandAdapter {
    config: Arc<CommandConfig>,
    tools: Option<CommandTools>,
}

impl CommandAdapter {
    /// An adapter running `config.program`; fails when it is empty.
    pub fn new(config: CommandConfig) -> Result<Self, String> {
        if config.program.trim().is_empty() {
            return Err("the command adapter needs a program".to_owned());
        }
        Ok(Self { config: Arc::new(config), tools: None })
    }

    /// The same adapter, whose programs may call the tools of `host`'s MCP
    /// servers that their subagent's scope allows under `policy`.
    pub fn with_tools(mut self, host: Arc<ToolHost>, policy: ToolPolicy) -> Self {
        self.tools = Some(CommandTools { host, policy });
        self
    }

    /// The config in use.
    pub fn config(&self) -> &CommandConfig {
        &self.config
    }
}

impl AgentAdapter for CommandAdapter {
    fn name(&self) -> &str {
        "command"
    }

    fn resumes(&self) -> bool {
        self.config.rerun_on_restart
    }

    /// Takes down the program the previous host left running, whether the
    /// task then fails `host_restarted` or runs again.
    fn after_restart(&self, checkpoint: Option<&Checkpoint>) {
        if let Some(checkpoint) = checkpoint {
            kill_left_behind(&checkpoint.state);
        }
    }

    fn run(&self, ctx: TaskContext) -> TaskFuture {
        let config = self.config.clone();
        let tools = self.tools.clone();
        Box::pin(async move { run_program(&config, tools.as_ref(), &ctx).await.map(RawObject::from) })
    }
}

/// Signals a process group; SIGKILL on drop unless disarmed.
#[derive(Debug)]
struct ProcessGroup {
    pgid: u32,
    // Cleared once the group has been killed for good.
    armed: bool,
}

impl ProcessGroup {
    /// Sends `signal` to every process of the group: one `kill(2)` system
    /// call through rustix's safe API (no helper program, so it never blocks
    /// the actor's thread and needs nothing on `PATH`).
    fn signal(&self, signal: Signal) {
        let Some(pgid) = i32::try_from(self.pgid).ok().and_then(Pid::from_raw) else {
            log::warn!("process group id {} is not a valid pid", self.pgid);
            return;
        };
        match kill_process_group(pgid, signal) {
            // ESRCH: every process of the group is already gone.
            Ok(()) | Err(rustix::io::Errno::SRCH) => {}
            Err(err) => log::warn!("could not signal process group {}: {err}", self.pgid),
        }
    }

    /// SIGKILLs the group now and disarms the guard.
    fn kill(&mut self) {
        if std::mem::take(&mut self.armed) {
            self.signal(Signal::KILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How the program ended, as read from its pipes and exit status.
struct Finished {
    status: std::io::Result<ExitStatus>,
    stdout: Vec<u8>,
    stdout_overflow: bool,
    last_stderr: Option<String>,
}

/// The start time of process `pid` (field 22 of `/proc/PID/stat`, in clock
/// ticks since boot): with the pid it names one process, never a later one
/// that reused the pid.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: count from its end.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// Kills the process group a task's program ran in before the host stopped
/// (its pid and start time were checkpointed when it started), if that
/// process still runs: a dead host's child would otherwise run on beside a
/// rerun, or after its task was reported `host_restarted`.
fn kill_left_behind(state: &Value) {
    let (Some(pgid), Some(started)) = (state["pgid"].as_u64(), state["started"].as_u64()) else { return };
    let Ok(pgid) = u32::try_from(pgid) else { return };
    if start_time(pgid) == Some(started) {
        log::info!("killing process group {pgid}, left running by the previous host");
        ProcessGroup { pgid, armed: true }.kill();
    }
}

async fn run_program(
    config: &CommandConfig,
    tools: Option<&CommandTools>,
    ctx: &TaskContext,
) -> Result<JsonObject, TaskError> {
    ctx.step()?;
    let input = json!({
        "subagent_id": ctx.subagent_id,
        "config": &*ctx.config,
        "task": &*ctx.task,
        "memory": ctx.memory.entries(),
    });
    let input = serde_json::to_vec(&input).map_err(|err| TaskError(format!("cannot encode the task: {err}")))?;
    ctx.memory.push(json!({ "role": "user", "content": ctx.task.instruction }));
    let endpoint = match tools {
        Some(tools) => Endpoint::open(tools, ctx).await?,
        None => None,
    };

    let program = &config.program;
    let mut command = tokio::process::Command::new(program);
    command
        .args(&config.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(endpoint) = &endpoint {
        command.env(super::command_tools::ENV_VAR, endpoint.path());
    }
    die_with_host(&mut command);
    let mut child = command.spawn().map_err(|err| TaskError(format!("cannot start `{program}`: {err}")))?;
    let pgid = child.id().ok_or_else(|| TaskError(format!("`{program}` exited before it could be watched")))?;
    // The worst moment for a crash: the program runs, nothing records it.
    #[cfg(feature = "fault-injection")]
    if std::env::var_os("SUBAGENTD_FAULT").is_some_and(|fault| fault == "command_spawned") {
        // As a kill -9 would: no destructor runs, no kill on drop.
        std::process::abort();
    }
    if ctx.is_durable() {
        // So that a restarted host can take down what this one leaves behind.
        ctx.checkpoint(0, json!({ "pgid": pgid, "started": start_time(pgid) }));
    }
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());

    let run = async move {
        let write = async move {
            if let Some(mut stdin) = stdin {
                // A program that does not read its input may close the pipe.
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            }
        };
        let (_, (stdout, stdout_overflow), last_stderr) =
            tokio::join!(write, read_stdout(stdout), forward_stderr(stderr, ctx));
        Finished { status: child.wait().await, stdout, stdout_overflow, last_stderr }
    };
    // The program's tool calls are served for as long as it runs.
    let run = async move {
        let Some(endpoint) = &endpoint else { return run.await };
        tokio::pin!(run);
        tokio::select! {
            finished = &mut run => finished,
            // The endpoint serves until dropped; were it to end, the
            // program still runs to its end.
            () = endpoint.serve(ctx) => run.await,
        }
    };
    // Declared after `run` so it drops first: the group is killed while its
    // leader is still unreaped, so the group id cannot have been reused.
    let mut group = ProcessGroup { pgid, armed: true };
    tokio::pin!(run);
    let finished = tokio::select! {
        finished = &mut run => finished,
        _ = ctx.cancel.cancelled() => {
            group.signal(Signal::TERM);
            run.await
        }
    };
    // The leader is gone; take down anything it left behind.
    group.kill();
    let result = judge(program, finished)?;
    let summary = result.get("summary").cloned().unwrap_or_else(|| Value::Object(result.clone()));
    ctx.memory.push(json!({ "role": "assistant", "content": summary }));
    Ok(result)
}

/// Turns how the program ended into the task's outcome.
fn judge(program: &str, finished: Finished) -> Result<JsonObject, TaskError> {
    let status = finished.status.map_err(|err| TaskError(format!("waiting for `{program}` failed: {err}")))?;
    let said = finished.last_stderr.map(|line| format!(" (last stderr line: {line})")).unwrap_or_default();
    if !status.success() {
        use std::os::unix::process::ExitStatusExt;
        let how = match (status.code(), status.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => format!("was killed by signal {signal}"),
            _ => "failed".to_owned(),
        };
        return Err(TaskError(format!("`{program}` {how}{said}")));
    }
    if finished.stdout_overflow {
        return Err(TaskError(format!("`{program}` printed more than {MAX_STDOUT_BYTES} bytes on stdout")));
    }
    parse_result(&finished.stdout)
        .ok_or_else(|| TaskError(format!("`{program}` did not print a JSON object on stdout{said}")))
}

/// The whole output as a JSON object, else its last non-empty line.
fn parse_result(stdout: &[u8]) -> Option<JsonObject> {
    let as_object = |bytes: &[u8]| match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(object)) => Some(object),
        _ => None,
    };
    as_object(stdout).or_else(|| {
        let last = stdout.split(|byte| *byte == b'\n').rev().find(|line| !line.trim_ascii().is_empty())?;
        as_object(last)
    })
}

/// Reads stdout to the end, keeping at most [`MAX_STDOUT_BYTES`] (the rest is
/// drained so the program never blocks on a full pipe).
async fn read_stdout(stdout: Option<impl AsyncRead + Unpin>) -> (Vec<u8>, bool) {
    let mut kept = Vec::new();
    let mut overflow = false;
    let Some(mut stdout) = stdout else { return (kept, overflow) };
    let mut chunk = vec![0u8; 64 * 1024];
    loop {
        match stdout.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(read) => {
                if kept.len() + read > MAX_STDOUT_BYTES {
                    overflow = true;
                } else {
                    kept.extend_from_slice(&chunk[..read]);
                }
            }
        }
    }
    (kept, overflow)
}

/// Turns each stderr line into a progress event (bounded in length and
/// number); returns the last non-empty line.
async fn forward_stderr(stderr: Option<impl AsyncRead + Unpin>, ctx: &TaskContext) -> Option<String> {
    let mut reader = BufReader::new(stderr?);
    let mut line = Vec::new();
    let mut last = None;
    let mut sent = 0;
    loop {
        line.clear();
        match (&mut reader).take(MAX_PROGRESS_LINE).read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        if text.is_empty() {
            continue;
        }
        if sent < MAX_PROGRESS_EVENTS {
            ctx.progress(text.clone());
            sent += 1;
            if sent == MAX_PROGRESS_EVENTS {
                ctx.progress("(further stderr lines are not reported)");
            }
        }
        last = Some(text);
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_is_the_whole_output_or_its_last_line() {
        assert_eq!(parse_result(br#"{"a": 1}"#).unwrap()["a"], 1);
        assert_eq!(parse_result(b"log line\n{\"b\": 2}\n\n").unwrap()["b"], 2);
        assert!(parse_result(b"[1, 2]").is_none());
        assert!(parse_result(b"").is_none());
        assert!(parse_result(b"\xff\xfe").is_none());
    }
}
