//! The HTTP side of the openai adapter: one `POST {base_url}/chat/completions`
//! attempt, and the parsing of its reply (the retries around it are
//! `retry`'s).
//!
//! A 429, a 5xx or a transport error is worth another try, with the
//! server's `Retry-After` (or OpenAI's `retry-after-ms`); any other 4xx
//! fails at once with the upstream's error text. The API key is scrubbed
//! from every error text this module produces, and never logged.

use awc::http::header;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::openai_config::RetryPolicy;
use super::stream::StreamedReply;
use crate::adapter::provider::Gate;
use crate::runtime::task::TaskError;

/// A route's own TLS client config (`ca_file`); `None`: the defaults.
#[cfg(feature = "tls")]
pub(crate) type Tls = Option<std::sync::Arc<rustls::ClientConfig>>;
/// Without the `tls` feature there is none.
#[cfg(not(feature = "tls"))]
pub(crate) type Tls = Option<std::convert::Infallible>;

/// Largest reply body accepted from the model server.
const MAX_BODY_BYTES: usize = 16 << 20;
/// Longest piece of an upstream error body quoted in a task error.
const MAX_ERROR_TEXT: usize = 500;

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolCall {
    /// The call's id, echoed in the tool message that answers it.
    pub id: String,
    /// Which tool.
    pub name: String,
    /// Its arguments: a JSON object encoded as a string, as the API sends them.
    pub arguments: String,
}

/// Token counts of one call (zero where the server does not report them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    // Of the prompt tokens, those the server served from its cache
    // (`prompt_tokens_details.cached_tokens`), which a price may discount.
    // Defaulted: checkpoints written before it was kept still load.
    #[serde(default)]
    pub cached_tokens: u64,
}

impl Usage {
    /// Adds another call's counts.
    pub(crate) fn add(&mut self, other: Usage) {
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self.completion_tokens.saturating_add(other.completion_tokens);
        self.total_tokens = self.total_tokens.saturating_add(other.total_tokens);
        self.cached_tokens = self.cached_tokens.saturating_add(other.cached_tokens);
    }

    /// Reads a reply's (or a stream's last chunk's) `usage` object.
    pub(crate) fn read(usage: &Value) -> Usage {
        let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
        Usage {
            prompt_tokens: count("/prompt_tokens"),
            completion_tokens: count("/completion_tokens"),
            total_tokens: count("/total_tokens"),
            cached_tokens: count("/prompt_tokens_details/cached_tokens"),
        }
    }

    /// As the result's `usage` object.
    pub(crate) fn to_json(self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        })
    }
}

/// What one chat-completions call answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Completion {
    /// The assistant's text (may be absent when it only calls tools).
    pub content: Option<String>,
    /// The tools it wants called, in order.
    pub tool_calls: Vec<ToolCall>,
    /// Token counts.
    pub usage: Usage,
    /// What the server says about the reply, for the call's trace span.
    pub about: ReplyInfo,
}

/// What a reply says about itself beyond its message: only the call's
/// `chat` span reads it (the OpenTelemetry GenAI `gen_ai.response.*`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ReplyInfo {
    /// The model that answered (`model`), often a dated version of the
    /// requested one.
    pub model: Option<String>,
    /// The reply's id (`id`).
    pub id: Option<String>,
    /// Each choice's `finish_reason`, in order.
    pub finish_reasons: Vec<String>,
}

impl ReplyInfo {
    /// Reads `model` and `id` of a reply or a streamed chunk (a chunk
    /// repeats them; the first one seen is kept).
    pub(crate) fn read(&mut self, value: &Value) {
        let text = |key: &str| value.get(key).and_then(Value::as_str).filter(|text| !text.is_empty());
        if self.model.is_none() {
            self.model = text("model").map(str::to_owned);
        }
        if self.id.is_none() {
            self.id = text("id").map(str::to_owned);
        }
    }
}

impl Completion {
    /// The assistant message to append to the conversation.
    pub(crate) fn assistant_message(&self) -> Value {
        let mut message = json!({ "role": "assistant", "content": self.content });
        if !self.tool_calls.is_empty() {
            let calls: Vec<Value> = self
                .tool_calls
                .iter()
                .map(|call| {
                    json!({
                        "id": call.id,
                        "type": "function",
                        "function": { "name": call.name, "arguments": call.arguments },
                    })
                })
                .collect();
            message["tool_calls"] = Value::Array(calls);
        }
        message
    }
}

/// A client for one model server, used by one task.
pub(crate) struct ChatClient {
    // Not Send: lives on the session's arbiter with the task.
    http: awc::Client,
    pub(super) url: String,
    // The config route that chose this server (its `model` glob), for errors.
    pub(super) route: String,
    // Only ever put in the Authorization header, and scrubbed from errors.
    api_key: Option<String>,
    pub(super) retry: RetryPolicy,
    // The provider gate every attempt passes, and the session it waits for.
    pub(super) gate: Option<(Arc<Gate>, Arc<str>)>,
    // One HTTP call's time limit (`request_timeout_ms`).
    pub(super) request_timeout: Option<Duration>,
}

impl ChatClient {
    /// A client posting to `{base_url}/chat/completions`, over `tls` when
    /// the route has a CA of its own.
    /// `route` names the config route that chose it, for errors and logs.
    pub(crate) fn new(base_url: &str, route: &str, api_key: Option<String>, retry: RetryPolicy, tls: Tls) -> Self {
        // awc's rustls connector needs a process-wide crypto provider, else it
        // panics; installing one that is already there is a harmless error.
        #[cfg(feature = "tls")]
        let _ = rustls::crypto::ring::default_provider().install_default();
        // The task's own deadline bounds every call; awc's 5 s default would
        // cut off slow local models.
        let connector = awc::Connector::new();
        #[cfg(feature = "tls")]
        let connector = match tls {
            Some(config) => connector.rustls_0_23(config),
            None => connector,
        };
        #[cfg(not(feature = "tls"))]
        let () = tls.map_or((), |never: std::convert::Infallible| match never {});
        let http = awc::Client::builder().disable_timeout().connector(connector).finish();
        let url = format!("{}/chat/completions", base_url.trim_end_matches('/'));
        Self { http, url, route: route.to_owned(), api_key, retry, gate: None, request_timeout: None }
    }

    /// Bounds each HTTP call to `limit`: one past it is retried like a
    /// transport error.
    pub(crate) fn timed(mut self, limit: Duration) -> Self {
        self.request_timeout = Some(limit);
        self
    }

    /// Sends every attempt through `gate`, waiting there as `session`.
    pub(crate) fn gated(mut self, gate: Option<Arc<Gate>>, session: Arc<str>) -> Self {
        self.gate = gate.map(|gate| (gate, session));
        self
    }

    /// One call, no retry: its reply, why it may be retried, or why not.
    pub(super) async fn attempt(
        &self,
        payload: actix_web::web::Bytes,
        on_text: Option<&mut dyn FnMut(&str)>,
    ) -> Result<Attempt, TaskError> {
        let mut request = self.http.post(&self.url).insert_header((header::CONTENT_TYPE, "application/json"));
        if let Some(key) = &self.api_key {
            request = request.insert_header((header::AUTHORIZATION, format!("Bearer {key}")));
        }
        let mut response = match request.send_body(payload).await {
            Ok(response) => response,
            Err(awc::error::SendRequestError::Url(err)) => {
                return Err(TaskError(self.scrub(format!("bad model server url {}: {err}", self.url))));
            }
            Err(err) => {
                let reason = self.scrub(format!("request failed: {err}"));
                return Ok(Attempt::Retry { reason, retry_after: None, rate_limited: false });
            }
        };
        let status = response.status();
        // OpenAI's `retry-after-ms` (finer) wins over `Retry-After`.
        let header_text = |name| response.headers().get(name).and_then(|value| value.to_str().ok());
        let retry_after = header_text(header::HeaderName::from_static("retry-after-ms"))
            .and_then(|text| text.trim().parse::<u64>().ok())
            .map(Duration::from_millis)
            .or_else(|| header_text(header::RETRY_AFTER).and_then(|text| parse_retry_after(text, SystemTime::now())));
        let streamed = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|kind| kind.starts_with("text/event-stream"));
        if let (true, true, Some(on_text)) = (status.is_success(), streamed, on_text) {
            return self.read_stream(&mut response, on_text).await;
        }
        let body = match response.body().limit(MAX_BODY_BYTES).await {
            Ok(body) => body,
            Err(err) if status.is_success() => {
                return Ok(Attempt::Retry {
                    reason: self.scrub(format!("reading the reply failed: {err}")),
                    retry_after,
                    rate_limited: false,
                });
            }
            Err(_) => Default::default(),
        };
        if status.is_success() {
            let value: Value = serde_json::from_slice(&body)
                .map_err(|err| TaskError(format!("model server sent a reply that is not JSON: {err}")))?;
            return parse_completion(&value).map(Attempt::Done);
        }
        let text = self.scrub(format!("{status}: {}", error_text(&body)));
        if status.as_u16() == 429 || status.is_server_error() {
            Ok(Attempt::Retry { reason: text, retry_after, rate_limited: status.as_u16() == 429 })
        } else {
            Err(TaskError(format!("model server refused the request: {text}")))
        }
    }

    // Reads a streamed reply to its end, handing its text on as it comes.
    async fn read_stream<S>(
        &self,
        response: &mut awc::ClientResponse<S>,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Attempt, TaskError>
    where
        awc::ClientResponse<S>:
            futures_util::Stream<Item = Result<actix_web::web::Bytes, awc::error::PayloadError>> + Unpin,
    {
        use futures_util::StreamExt;
        let mut reply = StreamedReply::default();
        let mut read = 0usize;
        while let Some(chunk) = response.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(err) => {
                    let reason = self.scrub(format!("reading the stream failed: {err}"));
                    return Ok(Attempt::Retry { reason, retry_after: None, rate_limited: false });
                }
            };
            read = read.saturating_add(chunk.len());
            if read > MAX_BODY_BYTES {
                return Err(TaskError(format!("model server's stream is over {MAX_BODY_BYTES} bytes")));
            }
            reply.feed(&chunk, on_text)?;
        }
        reply.finish().map(Attempt::Done)
    }

    /// Removes the API key from a text that may quote it.
    fn scrub(&self, text: String) -> String {
        match &self.api_key {
            Some(key) if !key.is_empty() => text.replace(key.as_str(), "[redacted]"),
            _ => text,
        }
    }
}

impl std::fmt::Debug for ChatClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatClient")
            .field("url", &self.url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .finish_non_exhaustive()
    }
}

/// How one attempt went, when it did not fail for good.
pub(super) enum Attempt {
    /// The reply.
    Done(Completion),
    /// Worth another try: why, the server's `Retry-After`, and whether it
    /// was a 429.
    Retry { reason: String, retry_after: Option<Duration>, rate_limited: bool },
}

/// A `Retry-After` value: whole seconds (`120`) or an HTTP date
/// (`Wed, 21 Oct 2015 07:28:00 GMT`, or the obsolete RFC 850 and asctime
/// forms), as a wait from `now`. A date already past means no wait; a value
/// that is neither is ignored (`None`, so the computed backoff applies).
fn parse_retry_after(text: &str, now: SystemTime) -> Option<Duration> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(text).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// The upstream's error message: `error.message` of a JSON body, else the
/// body's text, shortened.
fn error_text(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let text = parsed
        .as_ref()
        .and_then(|value| value.pointer("/error/message").or_else(|| value.get("error")))
        .map(|value| match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        })
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    let text = text.trim();
    if text.is_empty() {
        return "(no error text)".to_owned();
    }
    match text.char_indices().nth(MAX_ERROR_TEXT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

/// Reads `choices[0].message` and `usage` of a chat-completions reply.
pub(crate) fn parse_completion(value: &Value) -> Result<Completion, TaskError> {
    let message = value
        .pointer("/choices/0/message")
        .ok_or_else(|| TaskError::new("model server reply has no `choices[0].message`"))?;
    let content = match message.get("content") {
        Some(Value::String(text)) => Some(text.clone()),
        // Some servers send content parts; keep their text.
        Some(Value::Array(parts)) => {
            let text: String = parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect();
            Some(text)
        }
        _ => None,
    };
    let mut tool_calls = Vec::new();
    if let Some(Value::Array(calls)) = message.get("tool_calls") {
        for (index, call) in calls.iter().enumerate() {
            let Some(name) = call.pointer("/function/name").and_then(Value::as_str) else {
                return Err(TaskError(format!("model server reply: tool call {index} has no function name")));
            };
            let arguments = match call.pointer("/function/arguments") {
                Some(Value::String(text)) => text.clone(),
                None | Some(Value::Null) => "{}".to_owned(),
                // Lenient: some servers send the object itself.
                Some(other) => other.to_string(),
            };
            let id = call
                .get("id")
                .and_then(Value::as_str)
                .filter(|id| !id.is_empty())
                .map(str::to_owned)
                .unwrap_or_else(|| format!("call_{index}"));
            tool_calls.push(ToolCall { id, name: name.to_owned(), arguments });
        }
    }
    let usage = value.get("usage").map(Usage::read).unwrap_or_default();
    let mut about = ReplyInfo::default();
    about.read(value);
    if let Some(Value::Array(choices)) = value.get("choices") {
        let reasons = choices.iter().filter_map(|choice| choice.get("finish_reason").and_then(Value::as_str));
        about.finish_reasons = reasons.map(str::to_owned).collect();
    }
    Ok(Completion { content, tool_calls, usage, about })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_as_seconds_or_as_an_http_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480); // Wed, 21 Oct 2015 07:28:00 GMT
        assert_eq!(parse_retry_after(" 120 ", now), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:07 GMT", now), Some(Duration::from_secs(7)));
        assert_eq!(parse_retry_after("Wednesday, 21-Oct-15 07:28:30 GMT", now), Some(Duration::from_secs(30)));
        assert_eq!(parse_retry_after("Wed Oct 21 07:29:00 2015", now), Some(Duration::from_secs(60)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now), Some(Duration::ZERO), "past");
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("", now), None);
    }

    #[test]
    fn odd_replies_are_errors_or_tolerated_never_panics() {
        assert!(parse_completion(&json!({})).is_err());
        assert!(parse_completion(&json!({"choices": []})).is_err());
        assert!(parse_completion(&json!({"choices": [{"message": {"tool_calls": [{}]}}]})).is_err());
        let odd = json!({"choices": [{"message": {"content": null, "tool_calls": [
            {"function": {"name": "list_subagents", "arguments": {"a": 1}}}
        ]}}], "usage": {"prompt_tokens": "x"}});
        let completion = parse_completion(&odd).unwrap();
        assert_eq!(completion.tool_calls[0].id, "call_0");
        assert_eq!(completion.tool_calls[0].arguments, r#"{"a":1}"#);
        assert_eq!(completion.usage, Usage::default());
        assert_eq!(completion.about, ReplyInfo::default(), "no model, id or finish reason said");
        let said = json!({"id": "r", "model": "m-1", "choices": [{"finish_reason": "stop", "message": {}}]});
        let about = parse_completion(&said).unwrap().about;
        assert_eq!((about.model.as_deref(), about.id.as_deref()), (Some("m-1"), Some("r")));
        assert_eq!(about.finish_reasons, ["stop"]);
    }

    #[test]
    fn error_text_prefers_the_json_message_and_is_bounded() {
        assert_eq!(error_text(br#"{"error": {"message": "bad model"}}"#), "bad model");
        assert_eq!(error_text(b""), "(no error text)");
        assert!(error_text("é".repeat(2000).as_bytes()).chars().count() <= MAX_ERROR_TEXT + 1);
    }
}
