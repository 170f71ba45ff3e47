//! `subagentd mcp`: one MCP session over stdin and stdout, one JSON-RPC
//! message per line. Only protocol goes to stdout (logs go to stderr).
//! Requests are served concurrently (a long `run_subagent` does not hold
//! up a `tasks/get`). EOF on stdin ends the session as `serve --stdio`
//! does: requests already read are answered (for up to
//! [`EOF_DRAIN`](crate::transport::stdio::EOF_DRAIN)), then calls still
//! running are cancelled (their subtrees stop) and the process exits;
//! with a durable store, a session whose MCP tasks still run is kept
//! stored instead, for the next process on that store to answer them.

use serde_json::Value;
use std::io::Write;
use std::sync::Arc;
use tokio::sync::mpsc;

use super::face::McpFace;
use super::incoming::{self as jsonrpc, Incoming, RpcError};
use super::outlet::{Next, Outlet};
use super::session::{Asker, McpSession};
use crate::protocol::codec::Frame;

/// The environment variable that holds the bearer token (with `[auth]` tokens).
pub(crate) const TOKEN_ENV: &str = "SUBAGENTD_TOKEN";

/// Lines read ahead of the session.
const READ_AHEAD: usize = 64;

/// Serves one MCP session on stdin/stdout until stdin ends.
pub(crate) async fn serve(face: Arc<McpFace>) -> std::io::Result<()> {
    let auth = face.sessions.service.auth();
    // Stdio has no header to carry a token: with `[auth]` tokens, the
    // client's MCP config puts one in the environment.
    let token = std::env::var(TOKEN_ENV).ok().filter(|token| !token.is_empty());
    let refused = !auth.check(token.as_deref());
    let asker = Asker { principal: auth.principal(token.as_deref()), peer: None };
    let limit = face.sessions.service.limits().max_line_bytes;
    let (lines, mut incoming) = mpsc::channel(READ_AHEAD);
    std::thread::Builder::new()
        .name("mcp-stdin".into())
        .spawn(move || crate::transport::stdio::read_stdin_frames(limit, |frame| lines.blocking_send(frame).is_ok()))?;
    let out = Outlet::new(0);
    let writer = {
        let out = out.clone();
        std::thread::Builder::new().name("mcp-stdout".into()).spawn(move || write_stdout(&out))?
    };
    let mut session: Option<Arc<McpSession>> = None;
    while let Some(frame) = incoming.recv().await {
        let line = match frame {
            Frame::Line(line) | Frame::Journaled { line, .. } => line,
            Frame::TooLong { limit } => {
                out.push(&jsonrpc::failure(
                    &Value::Null,
                    &RpcError::invalid_request(format!(
                        "a message longer than {limit} bytes (max_line_bytes) was skipped"
                    )),
                ));
                continue;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let message = match serde_json::from_slice::<Value>(&line) {
            Ok(value) => jsonrpc::read(value),
            Err(err) => Err((Value::Null, RpcError::parse(format!("not JSON: {err}")))),
        };
        let message = match message {
            Ok(message) => message,
            Err((id, err)) => {
                out.push(&jsonrpc::failure(&id, &err));
                continue;
            }
        };
        match (&session, message) {
            (None, Incoming::Request { id, method, .. }) if method == "initialize" && refused => {
                let message = format!("a valid token is required: set {TOKEN_ENV} to one of [auth] tokens");
                out.push(&jsonrpc::failure(&id, &RpcError::invalid_request(message)));
            }
            (_, Incoming::Request { id, method, params }) if method == "initialize" && session.is_none() => {
                match face.initialize(&asker, &params, out.clone()).await {
                    Ok((opened, result)) => {
                        out.push(&jsonrpc::success(&id, result));
                        session = Some(opened);
                    }
                    Err(err) => out.push(&jsonrpc::failure(&id, &err)),
                }
            }
            (None, Incoming::Request { id, method, .. }) => {
                let answer = if method == "ping" {
                    jsonrpc::success(&id, serde_json::json!({}))
                } else {
                    jsonrpc::failure(&id, &RpcError::invalid_request("initialize first"))
                };
                out.push(&answer);
            }
            (Some(live), Incoming::Request { id, method, params }) => {
                // In flight from now: end of input waits for its answer.
                let cancel = live.begin(&id);
                let (face, live, asker, out) = (face.clone(), live.clone(), asker.clone(), out.clone());
                actix_rt::spawn(async move {
                    if let Some(answer) = face.answer(&live, &asker, &id, &method, params, &out, cancel).await {
                        out.push(&answer);
                    }
                });
            }
            (Some(live), message) => face.take(live, message),
            (None, _) => {}
        }
    }
    // The client went: what it asked is answered, for a while; then its
    // calls stop (their subtrees with them).
    if let Some(live) = session {
        wait_answered(&live, crate::transport::stdio::EOF_DRAIN).await;
        live.closed.cancel();
        wait_answered(&live, crate::transport::stdio::EOF_DRAIN).await;
        // MCP tasks still running outlive the process with a durable store:
        // the session stays stored (the host freezes the store as it stops),
        // and the next `subagentd mcp` on it resumes them and answers them.
        if face.sessions.service.store().is_durable() && face.has_running_tasks(&live).await {
            log::info!("mcp session {}: MCP tasks still running, kept stored", live.id);
        } else {
            face.end_session(&live);
            live.context.ended.cancelled().await;
        }
    }
    out.finish();
    let _ = tokio::task::spawn_blocking(move || writer.join()).await;
    Ok(())
}

// Waits (up to `patience`) until the session's requests are answered.
async fn wait_answered(session: &McpSession, patience: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + patience;
    while session.inflight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

fn write_stdout(out: &Outlet) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut stdout = stdout.lock();
    let mut after = 0;
    let runtime = tokio::runtime::Builder::new_current_thread().build()?;
    loop {
        match runtime.block_on(out.next(after)) {
            Next::Messages(messages) => {
                for (number, message) in messages {
                    stdout.write_all(message.as_bytes())?;
                    stdout.write_all(b"\n")?;
                    after = number;
                }
                stdout.flush()?;
                out.delivered(after);
            }
            Next::Finished => return Ok(()),
            // Never on stdio: the writer keeps up or the pipe is gone.
            Next::Lost => return Ok(()),
        }
    }
}
