//! What runs a task: the [`AgentAdapter`] trait, the context a task gets, and
//! the router that picks an adapter by the subagent's `model`.
//!
//! - [`scripted`]: the built-in deterministic adapter (no network, no keys).
//! - [`router`]: model globs → adapters, tried in order, with a default.
//! - [`openai`]: OpenAI-compatible chat completions, a tool-calling loop.
//! - [`command`]: an external program per task, JSON on stdin and stdout.
//! - [`build_route`], [`build_route_with_policy`]: the adapter a config-file
//!   route names.

pub mod command;
pub mod openai;
pub mod route_spec;
pub mod router;
pub mod scripted;

use actix::Addr;
use serde_json::Value;
use std::cell::Cell;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::HostError;
use crate::event::{EventDetail, EventKind};
use crate::ids::SubagentId;
use crate::protocol::wire::*;
use crate::runtime::memory::{InboxMessage, Mailbox, Memory};
use crate::runtime::messages::{self as msg, Report};
use crate::runtime::supervisor::Supervisor;

pub use router::AdapterRouter;
pub use scripted::ScriptedAdapter;

/// Why a task failed (the text becomes the await's `error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskError(pub String);

impl TaskError {
    /// An error with this text.
    pub fn new(text: impl Into<String>) -> Self {
        Self(text.into())
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<HostError> for TaskError {
    fn from(err: HostError) -> Self {
        Self(err.to_string())
    }
}

/// The boxed future an adapter returns. It runs on the session's arbiter
/// thread, so it need not be `Send`.
pub type TaskFuture = Pin<Box<dyn Future<Output = Result<JsonObject, TaskError>>>>;

/// Runs one task of one subagent.
///
/// The future is dropped when the task is terminated, times out, or ignores
/// a cancel past the grace period: adapters must release what they hold on
/// drop (kill child processes, abort requests). A panic inside it fails only
/// this task.
pub trait AgentAdapter: Send + Sync + 'static {
    /// A short name for logs (`scripted`, `openai`, `command`).
    fn name(&self) -> &str;

    /// Runs the task described by `ctx`.
    fn run(&self, ctx: TaskContext) -> TaskFuture;
}

/// Everything a running task may use: its config and task, memory, mailbox,
/// cancellation signal, step counter, progress events, and a handle to spawn,
/// delegate to and await its own children.
pub struct TaskContext {
    /// The subagent running the task.
    pub subagent_id: SubagentId,
    /// Its parent subagent, when it is nested.
    pub parent_id: Option<SubagentId>,
    /// Its configuration.
    pub config: Arc<SubagentConfig>,
    /// The task.
    pub task: Arc<TaskDefinition>,
    /// Its memory (shared with its parent for the `shared` scope).
    pub memory: Memory,
    /// Its mailbox.
    pub mailbox: Arc<Mailbox>,
    /// Fires on cancel (graceful: wind up within the grace period) and terminate.
    pub cancel: CancellationToken,
    /// When the task's time is up (its own timeout, capped by its parent's).
    pub deadline: Instant,
    // Shared with the subagent actor: set while the task waits (WAITING).
    pub(crate) waiting: Rc<Cell<bool>>,
    pub(crate) steps: Cell<u32>,
    pub(crate) supervisor: Arc<Addr<Supervisor>>,
}

impl fmt::Debug for TaskContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskContext")
            .field("subagent_id", &self.subagent_id)
            .field("task", &self.task.name)
            .field("steps", &self.steps.get())
            .finish_non_exhaustive()
    }
}

impl TaskContext {
    /// Counts one step toward `max_steps`; fails once the budget is spent.
    pub fn step(&self) -> Result<u32, TaskError> {
        let taken = self.steps.get() + 1;
        if taken > self.config.max_steps {
            return Err(TaskError(format!(
                "max_steps exceeded: the task needed more than {} steps",
                self.config.max_steps
            )));
        }
        self.steps.set(taken);
        Ok(taken)
    }

    /// Steps taken so far.
    pub fn steps_taken(&self) -> u32 {
        self.steps.get()
    }

    /// Emits a `progress` event.
    pub fn progress(&self, text: impl Into<String>) {
        self.supervisor.do_send(Report {
            id: self.subagent_id,
            kind: EventKind::Progress,
            // The supervisor keeps its mirrored status for progress reports.
            status: SubagentStatus::Running,
            result: None,
            error: None,
            detail: EventDetail::Progress(text.into()),
        });
    }

    /// Marks the task `WAITING` (on a child or the mailbox) or `RUNNING` again.
    pub fn set_waiting(&self, waiting: bool) {
        // The task runs on its actor's thread: the flag is the actor's view at
        // once, and this report goes out before the task's end is reported.
        if self.waiting.replace(waiting) == waiting {
            return;
        }
        self.supervisor.do_send(Report {
            id: self.subagent_id,
            kind: EventKind::StatusChanged,
            status: if waiting { SubagentStatus::Waiting } else { SubagentStatus::Running },
            result: None,
            error: None,
            detail: EventDetail::None,
        });
    }

    /// Waits for the next mailbox message, `WAITING` meanwhile; `None` when
    /// `timeout` passes first.
    pub async fn next_message(&self, timeout: Option<std::time::Duration>) -> Option<InboxMessage> {
        if let Some(message) = self.mailbox.try_recv() {
            return Some(message);
        }
        self.set_waiting(true);
        let received = match timeout {
            Some(limit) => tokio::time::timeout(limit, self.mailbox.recv()).await.ok(),
            None => Some(self.mailbox.recv().await),
        };
        self.set_waiting(false);
        received
    }

    /// Spawns a child of this subagent; with a task, delegates it at once.
    pub async fn spawn_child(
        &self,
        agent: SubagentConfig,
        task: Option<TaskDefinition>,
    ) -> Result<SubagentId, HostError> {
        let request = SpawnRequest { agent, parent_agent_id: Some(self.subagent_id.to_string()), root_agent_id: None };
        let spawned = self.supervisor.send(msg::Spawn(request)).await??;
        if let Some(task) = task {
            let reply = self.delegate(spawned.subagent_id, task).await?;
            if !reply.accepted {
                return Err(HostError::new(
                    crate::error::ErrorCode::InvalidState,
                    format!("child {} did not accept its task ({:?})", spawned.subagent_id, reply.status),
                ));
            }
        }
        Ok(spawned.subagent_id)
    }

    /// Delegates a task to a subagent of the session; its deadline is capped
    /// by this task's.
    pub async fn delegate(&self, id: SubagentId, task: TaskDefinition) -> Result<DelegateResponse, HostError> {
        self.supervisor.send(msg::Delegate { id, task, deadline_cap: Some(self.deadline) }).await?
    }

    /// Waits for a subagent's task to end (`WAITING` meanwhile).
    pub async fn await_subagent(&self, id: SubagentId) -> Result<AwaitResponse, HostError> {
        self.set_waiting(true);
        let reply = self.supervisor.send(msg::Await(id)).await;
        self.set_waiting(false);
        reply?
    }

    /// This subagent's children, oldest first.
    pub async fn children(&self) -> Result<Vec<SubagentId>, HostError> {
        self.supervisor.send(msg::ChildrenOf(self.subagent_id)).await?
    }

    /// Sends a message from this subagent to another of the session.
    pub async fn send_message(&self, to: SubagentId, kind: &str, content: Value) -> Result<(), HostError> {
        let payload = SubagentMessagePayload { kind: kind.to_owned(), content };
        self.supervisor.send(msg::SendMessage { from: self.subagent_id.to_string(), to, payload }).await??;
        Ok(())
    }

    /// Every subagent of the session.
    pub async fn list(&self) -> Result<ListResponse, HostError> {
        Ok(self.supervisor.send(msg::List).await?)
    }
}

/// Builds the adapter a config-file route names (`scripted`, `openai`,
/// `command`), checking that it has the keys it needs and none it ignores;
/// an openai adapter gets the default [`openai::ToolPolicy`].
pub fn build_route(spec: &route_spec::RouteSpec) -> Result<Arc<dyn AgentAdapter>, String> {
    build_route_with_policy(spec, &openai::ToolPolicy::default())
}

/// [`build_route`] with the host's tool policy (the config's `[policy]`
/// table), which decides what the openai adapter's `restricted` scope allows.
pub fn build_route_with_policy(
    spec: &route_spec::RouteSpec,
    policy: &openai::ToolPolicy,
) -> Result<Arc<dyn AgentAdapter>, String> {
    let fail = |text: String| format!("route `{}`: {text}", spec.model);
    let adapter = spec.adapter.as_str();
    let set = [
        ("base_url", spec.base_url.is_some()),
        ("api_key_env", spec.api_key_env.is_some()),
        ("upstream_model", spec.upstream_model.is_some()),
        ("program", spec.program.is_some()),
        ("args", !spec.args.is_empty()),
    ];
    let accepted: &[&str] = match adapter {
        "scripted" => &[],
        "openai" => &["base_url", "api_key_env", "upstream_model"],
        "command" => &["program", "args"],
        other => return Err(fail(format!("unknown adapter `{other}` (expected scripted, openai or command)"))),
    };
    if let Some((key, _)) = set.iter().find(|(key, present)| *present && !accepted.contains(key)) {
        return Err(fail(format!("adapter {adapter} does not take `{key}`")));
    }
    match adapter {
        "openai" => {
            let base_url = spec.base_url.clone().ok_or_else(|| fail("adapter openai needs base_url".into()))?;
            if spec.api_key_env.as_deref().is_some_and(|var| var.trim().is_empty()) {
                return Err(fail("api_key_env is empty".into()));
            }
            let mut config = openai::OpenAiConfig::new(base_url);
            config.api_key_env = spec.api_key_env.clone();
            config.upstream_model = spec.upstream_model.clone();
            config.policy = policy.clone();
            Ok(Arc::new(openai::OpenAiAdapter::new(config).map_err(fail)?))
        }
        "command" => {
            let program = spec.program.clone().ok_or_else(|| fail("adapter command needs program".into()))?;
            let config = command::CommandConfig { program, args: spec.args.clone() };
            Ok(Arc::new(command::CommandAdapter::new(config).map_err(fail)?))
        }
        _ => Ok(Arc::new(ScriptedAdapter)),
    }
}
