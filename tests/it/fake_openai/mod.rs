//! A fake OpenAI-compatible chat-completions server on loopback, for the
//! openai adapter's tests: no network, no keys.
//!
//! It runs on its own thread and runtime, records every request (body and
//! `Authorization` header), answers each with what the test's model function
//! says, and reports when a connection it was told to hang on is closed by
//! the client.

#![allow(dead_code)]

mod limits;

pub use limits::{Counts, ProviderLimits};

use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// A CA certificate file, removed on drop.
pub struct CaFile(pub std::path::PathBuf);

impl Drop for CaFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What the fake answers one request with.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with this JSON body.
    Json(Value),
    /// This status, an optional `Retry-After` (seconds), and this JSON body.
    Status { code: u16, retry_after: Option<u64>, body: Value },
    /// This status with this exact `Retry-After` text (e.g. an HTTP date).
    RetryAfter { code: u16, header: String, body: Value },
    /// 429 with OpenAI's `retry-after-ms` (and `Retry-After` in whole seconds).
    RateLimitedMs(u64),
    /// 200 with a body that is not JSON.
    Garbage,
    /// Never answers; reports when the client closes the connection.
    Hang,
    /// A streamed reply (`text/event-stream`): each chunk as `data: …`,
    /// `gap` apart, then `data: [DONE]`; or, with `then_hang`, nothing more
    /// (it reports when the client closes the connection).
    Stream { chunks: Vec<Value>, gap: Duration, then_hang: bool },
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The JSON body.
    pub body: Value,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// When the whole request had arrived.
    pub at: Instant,
}

type Model = dyn Fn(&Value, usize) -> Reply + Send + Sync;

struct State {
    model: Box<Model>,
    seen: Mutex<Vec<Seen>>,
    closed: mpsc::UnboundedSender<()>,
    // A provider's limits, when the fake enforces some.
    limited: Option<limits::Limited>,
}

/// A running fake server.
pub struct FakeServer {
    /// `http://127.0.0.1:PORT/v1` (`https://localhost:PORT/v1` over TLS).
    pub base_url: String,
    state: Arc<State>,
    closed: mpsc::UnboundedReceiver<()>,
}

impl FakeServer {
    /// Starts a server whose replies come from `model(body, call_index)`.
    pub fn start(model: impl Fn(&Value, usize) -> Reply + Send + Sync + 'static) -> Self {
        Self::listen(Box::new(model), None, None)
    }

    /// [`FakeServer::start`] behaving as a provider with these limits;
    /// the counts say what it let through and refused.
    pub fn start_limited(
        limits: ProviderLimits,
        model: impl Fn(&Value, usize) -> Reply + Send + Sync + 'static,
    ) -> (Self, Arc<Counts>) {
        let counts = Arc::new(Counts::default());
        let limited = limits::Limited { limits, counts: counts.clone() };
        (Self::listen(Box::new(model), None, Some(limited)), counts)
    }

    /// [`FakeServer::start`] over TLS: `https://localhost:PORT/v1`, with a
    /// self-signed certificate made now, whose PEM is the returned file
    /// (removed on drop).
    pub fn start_tls(model: impl Fn(&Value, usize) -> Reply + Send + Sync + 'static) -> (Self, CaFile) {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("certificate");
        let unique = CALL_IDS.fetch_add(1, Ordering::Relaxed);
        let ca = CaFile(std::env::temp_dir().join(format!("subagentd-ca-{}-{unique}.pem", std::process::id())));
        std::fs::write(&ca.0, certified.cert.pem()).expect("write the CA file");
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        let key = tokio_rustls::rustls::pki_types::PrivateKeyDer::Pkcs8(certified.key_pair.serialize_der().into());
        let config = tokio_rustls::rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .expect("server config");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        (Self::listen(Box::new(model), Some(acceptor), None), ca)
    }

    // Serves on a loopback port from a thread and runtime of its own, over
    // TLS when an acceptor is given.
    fn listen(model: Box<Model>, tls: Option<tokio_rustls::TlsAcceptor>, limited: Option<limits::Limited>) -> Self {
        // The certificate names `localhost`.
        let (scheme, host) = if tls.is_some() { ("https", "localhost") } else { ("http", "127.0.0.1") };
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let (closed_tx, closed_rx) = mpsc::unbounded_channel();
        let state = Arc::new(State { model, seen: Mutex::new(Vec::new()), closed: closed_tx, limited });
        let serving = state.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                while let Ok((socket, _)) = listener.accept().await {
                    let (tls, serving) = (tls.clone(), serving.clone());
                    tokio::spawn(async move {
                        match tls {
                            // A client that refuses the certificate ends here.
                            Some(acceptor) => {
                                if let Ok(socket) = acceptor.accept(socket).await {
                                    serve(socket, serving).await;
                                }
                            }
                            None => serve(socket, serving).await,
                        }
                    });
                }
            });
        });
        Self { base_url: format!("{scheme}://{host}:{port}/v1"), state, closed: closed_rx }
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// Waits (up to `within`) until at least `count` requests arrived.
    pub async fn wait_for_requests(&self, count: usize, within: Duration) -> bool {
        crate::common::poll_until(within, || std::future::ready((self.requests().len() >= count).then_some(())))
            .await
            .is_ok()
    }

    /// Waits (up to `within`) until the client closed a hanging connection.
    pub async fn hang_closed(&mut self, within: Duration) -> bool {
        matches!(tokio::time::timeout(within, self.closed.recv()).await, Ok(Some(())))
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut socket: S, state: Arc<State>) {
    let mut buffer = Vec::new();
    loop {
        let Some((body, authorization)) = read_request(&mut socket, &mut buffer).await else { return };
        let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let index = {
            let mut seen = state.seen.lock().unwrap();
            seen.push(Seen { body: body.clone(), authorization, at: Instant::now() });
            seen.len() - 1
        };
        let admitted = match &state.limited {
            Some(limited) => match limited.admit() {
                Some(in_flight) => Some((limited, in_flight)),
                None => {
                    if socket.write_all(limited.refusal().as_bytes()).await.is_err() {
                        return;
                    }
                    continue;
                }
            },
            None => None,
        };
        let (code, retry_after, text) = match (state.model)(&body, index) {
            Reply::Json(value) => (200, None, value.to_string()),
            Reply::Status { code, retry_after, body } => (code, retry_after.map(|s| s.to_string()), body.to_string()),
            Reply::RetryAfter { code, header, body } => (code, Some(header), body.to_string()),
            Reply::Garbage => (200, None, "<html>not json</html>".to_owned()),
            Reply::RateLimitedMs(ms) => {
                let body = r#"{"error":{"message":"slow down"}}"#;
                let head = format!(
                    "HTTP/1.1 429 X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                     retry-after-ms: {ms}\r\nretry-after: {}\r\n\r\n{body}",
                    body.len(),
                    ms.div_ceil(1000)
                );
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                continue;
            }
            Reply::Hang => {
                let mut sink = [0u8; 1024];
                while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
                let _ = state.closed.send(());
                return;
            }
            Reply::Stream { chunks, gap, then_hang } => {
                // Chunked, as the hosted APIs send it.
                let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let framed = |data: String| format!("{:x}\r\n{data}\r\n", data.len());
                for chunk in chunks {
                    if !gap.is_zero() {
                        tokio::time::sleep(gap).await;
                    }
                    if socket.write_all(framed(format!("data: {chunk}\n\n")).as_bytes()).await.is_err() {
                        let _ = state.closed.send(());
                        return;
                    }
                }
                if then_hang {
                    let mut sink = [0u8; 1024];
                    while matches!(socket.read(&mut sink).await, Ok(n) if n > 0) {}
                    let _ = state.closed.send(());
                } else {
                    let done = framed("data: [DONE]\n\n".to_owned()) + "0\r\n\r\n";
                    let _ = socket.write_all(done.as_bytes()).await;
                }
                return;
            }
        };
        // An admitted call takes its time, then leaves the in-flight count
        // as its reply goes out.
        if let Some((limited, in_flight)) = admitted {
            tokio::time::sleep(limited.limits.call_time).await;
            let used = serde_json::from_str::<Value>(&text).ok().and_then(|v| v["usage"]["total_tokens"].as_u64());
            limited.answered(used.unwrap_or(0));
            drop(in_flight);
        }
        let mut head =
            format!("HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n", text.len());
        if let Some(value) = retry_after {
            head.push_str(&format!("retry-after: {value}\r\n"));
        }
        head.push_str("\r\n");
        if socket.write_all(head.as_bytes()).await.is_err() || socket.write_all(text.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads one request; returns its body and `Authorization` header.
async fn read_request<S: AsyncRead + Unpin>(socket: &mut S, buffer: &mut Vec<u8>) -> Option<(Vec<u8>, Option<String>)> {
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            break at + 4;
        }
        let mut chunk = [0u8; 8192];
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let header = |name: &str| {
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
        })
    };
    let length: usize = header("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let authorization = header("authorization");
    while buffer.len() < head_end + length {
        let mut chunk = [0u8; 8192];
        let read = socket.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
    let body = buffer[head_end..head_end + length].to_vec();
    buffer.drain(..head_end + length);
    Some((body, authorization))
}

static CALL_IDS: AtomicUsize = AtomicUsize::new(0);

/// A final answer (no tool calls) with 10 + 5 tokens of usage.
pub fn answer(text: &str) -> Reply {
    Reply::Json(json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }))
}

/// A streamed answer: `pieces` of text `gap` apart, then the usage chunk.
pub fn stream_answer(pieces: &[&str], gap: Duration, prompt: u64, completion: u64) -> Reply {
    let mut chunks: Vec<Value> = pieces
        .iter()
        .map(|piece| json!({ "object": "chat.completion.chunk", "choices": [{ "index": 0, "delta": { "content": piece } }] }))
        .collect();
    chunks.push(json!({ "object": "chat.completion.chunk", "choices": [],
                        "usage": { "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion } }));
    Reply::Stream { chunks, gap, then_hang: false }
}

/// `reply` with its `usage` set to these token counts.
pub fn with_usage(reply: Reply, prompt: u64, completion: u64) -> Reply {
    match reply {
        Reply::Json(mut body) => {
            body["usage"] =
                json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
            Reply::Json(body)
        }
        other => other,
    }
}

/// A reply calling these tools (name, arguments), with optional text.
pub fn call_tools(text: Option<&str>, calls: &[(&str, Value)]) -> Reply {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(name, arguments)| {
            let id = CALL_IDS.fetch_add(1, Ordering::Relaxed);
            json!({"id": format!("call_{id}"), "type": "function", "function": {"name": name, "arguments": arguments.to_string()}})
        })
        .collect();
    Reply::Json(json!({
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": text, "tool_calls": calls}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }))
}

/// The request's messages.
pub fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// The system prompt (first message) of a request.
pub fn system_prompt(body: &Value) -> String {
    body["messages"][0]["content"].as_str().unwrap_or_default().to_owned()
}

/// The parsed contents of the request's tool messages, oldest first.
pub fn tool_outputs(body: &Value) -> Vec<Value> {
    messages(body)
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| serde_json::from_str(m["content"].as_str().unwrap_or("null")).unwrap_or(Value::Null))
        .collect()
}

/// The names of the tools a request offers.
pub fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| tools.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}
