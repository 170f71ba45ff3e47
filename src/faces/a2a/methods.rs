//! `POST /a2a`: the request checked (token, content type, `A2A-Version`,
//! envelope) and each v1.0 method served.

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

use super::face::A2aFace;
use super::model::{agent_message, is_terminal, read_message};
use super::rpc::{bool_field, failure, history_length, read_call, string_field, success, Call, RpcError};
use super::tasks::{Asker, Found};
use super::{stream, tck};
use crate::event::Event;
use crate::transport::http::request_info::bearer;

/// What a method answers: a JSON-RPC result, or a stream of them.
enum Answer {
    Result(Value),
    /// A stream of one event.
    Once(Value),
    /// The task, its events since the request came, whether the stream
    /// ends when the task waits for its person, whether this request
    /// started it.
    Stream(Found, broadcast::Receiver<Arc<Event>>, bool, bool),
}

pub(super) async fn rpc(req: HttpRequest, body: web::Bytes, face: web::Data<A2aFace>) -> HttpResponse {
    let face = face.into_inner();
    let auth = face.sessions.service.auth();
    let token = bearer(&req).map(str::to_owned);
    if !auth.check(token.as_deref()) {
        crate::metrics::metrics().auth_failed("a2a");
        return HttpResponse::build(StatusCode::UNAUTHORIZED)
            .insert_header((header::WWW_AUTHENTICATE, "Bearer"))
            .json(failure(&Value::Null, &RpcError::invalid_request("a valid bearer token is required")));
    }
    let json_body = req.headers().get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok()).is_none_or(|value| {
        let media = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        media == "application/json" || media == "application/a2a+json"
    });
    if !json_body {
        return reply(&failure(&Value::Null, &RpcError::content_type("the body must be application/json")));
    }
    let call = match read_call(&body) {
        Ok(call) => call,
        Err((id, err)) => return reply(&failure(&id, &err)),
    };
    if let Err(err) = check_version(&req, face.config.strict_version) {
        return reply(&failure(&call.id, &err));
    }
    let asker = Asker { principal: auth.principal(token.as_deref()), peer: req.peer_addr().map(|addr| addr.ip()) };
    let id = call.id.clone();
    let (mut response, session) = match serve(&face, call, &asker).await {
        Ok(Answer::Result(result)) => {
            let session = session_of_result(&result);
            (reply(&success(&id, result)), session)
        }
        Ok(Answer::Once(result)) => (stream::once(&success(&id, result)), None),
        Ok(Answer::Stream(found, events, until_input, fresh)) => {
            let session = found.context.tree().session_id().to_owned();
            (stream::respond(face, found, events, id, until_input, fresh), Some(session))
        }
        Err(err) => (reply(&failure(&id, &err)), None),
    };
    // The task's session, as `/send` names it: a router learns where the
    // context is served (`deploy/haproxy.cfg` keys a task id's requests on it).
    if let Some(value) = session.and_then(|session| header::HeaderValue::from_str(&session).ok()) {
        response.headers_mut().insert(header::HeaderName::from_static("x-session-id"), value);
    }
    response
}

// The session a result's task belongs to: the head of its id.
fn session_of_result(result: &Value) -> Option<String> {
    let id = result["task"]["id"].as_str().or_else(|| result["id"].as_str())?;
    let (session, _) = id.split_once('-')?;
    (session.len() == 32).then(|| session.to_owned())
}

// Every JSON-RPC answer is HTTP 200 (errors included), as the binding says.
fn reply(body: &Value) -> HttpResponse {
    HttpResponse::Ok().content_type("application/json").body(body.to_string())
}

// `A2A-Version` (header, or query parameter): 1.x is served; another is
// `VersionNotSupported`. Without one the spec reads 0.3: refused when
// `[a2a] strict_version`, else served as 1.0.
fn check_version(req: &HttpRequest, strict: bool) -> Result<(), RpcError> {
    let from_query = || {
        req.query_string()
            .split('&')
            .find_map(|pair| pair.split_once('=').filter(|(key, _)| key.eq_ignore_ascii_case("A2A-Version")))
            .map(|(_, value)| value.to_owned())
    };
    let asked = req
        .headers()
        .get("A2A-Version")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or_else(from_query)
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty());
    match asked {
        Some(version) if version == "1" || version.starts_with("1.") => Ok(()),
        Some(version) => Err(RpcError::version(&version)),
        None if strict => Err(RpcError::version("0.3")),
        None => Ok(()),
    }
}

async fn serve(face: &Arc<A2aFace>, call: Call, asker: &Asker) -> Result<Answer, RpcError> {
    let params = &call.params;
    match call.method.as_str() {
        "SendMessage" => send(face, params, asker, false).await,
        "SendStreamingMessage" => send(face, params, asker, true).await,
        "GetTask" => {
            let found = face.find(&required_id(params)?, asker).await?;
            let history = history_length(params)?;
            Ok(Answer::Result(face.snapshot(&found).await?.to_json(history, true)))
        }
        "CancelTask" => {
            let found = face.find(&required_id(params)?, asker).await?;
            Ok(Answer::Result(face.cancel(&found).await?.to_json(None, true)))
        }
        "SubscribeToTask" => {
            let found = face.find(&required_id(params)?, asker).await?;
            let state = face.snapshot(&found).await?.state;
            if is_terminal(state) {
                return Err(RpcError::unsupported(format!(
                    "task {} is {state}: nothing more will happen",
                    found.task_id
                )));
            }
            let events = found.context.events();
            Ok(Answer::Stream(found, events, false, false))
        }
        "ListTasks" => super::listing::list(face, params, asker).await.map(Answer::Result),
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig" => Err(RpcError::push_not_supported()),
        "GetExtendedAgentCard" => Err(RpcError::unsupported("this agent has no extended card")),
        other => Err(RpcError::method_not_found(other)),
    }
}

fn required_id(params: &Map<String, Value>) -> Result<String, RpcError> {
    string_field(params, "id", "id")?
        .filter(|id| !id.is_empty())
        .ok_or_else(|| RpcError::invalid_params("`id` is required"))
}

// `SendMessage` / `SendStreamingMessage`: a new task, or a message to one.
async fn send(
    face: &Arc<A2aFace>,
    params: &Map<String, Value>,
    asker: &Asker,
    streaming: bool,
) -> Result<Answer, RpcError> {
    let message = read_message(params, &face.config.input_modes)?;
    let configuration = match params.get("configuration") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(configuration)) => configuration.clone(),
        Some(_) => return Err(RpcError::invalid_params("`configuration` must be an object")),
    };
    let immediately = bool_field(&configuration, "returnImmediately", "return_immediately")?.unwrap_or(false);
    let history = history_length(&configuration)?;
    let (found, events) = match &message.task_id {
        Some(id) => {
            let found = face.find(id, asker).await?;
            if message.context_id.as_ref().is_some_and(|context| *context != found.context_id) {
                return Err(RpcError::invalid_params(format!("task {id} is not of context the message names")));
            }
            let events = found.context.events();
            face.follow_up(&found, &message).await?;
            (found, events)
        }
        None => face.start(&message, asker).await?,
    };
    if face.config.tck_mode && message.task_id.is_none() && message.message_id.starts_with(tck::MESSAGE_RESPONSE) {
        // The kit's agent answers this one with a message, not a task.
        let done = face.settle(&found, Duration::from_secs(30)).await?;
        let text = done.status_text.unwrap_or_default();
        let mut reply = agent_message(&found.task_id, &found.context_id, "reply", &text, None);
        reply.as_object_mut().map(|reply| reply.remove("taskId"));
        let result = json!({ "message": reply });
        return Ok(if streaming { Answer::Once(result) } else { Answer::Result(result) });
    }
    if streaming {
        return Ok(Answer::Stream(found, events, true, message.task_id.is_none()));
    }
    let snapshot = if immediately {
        face.snapshot(&found).await?
    } else {
        let limit = Duration::from_secs(face.config.agent.timeout_seconds.saturating_add(60));
        face.settle(&found, limit).await?
    };
    Ok(Answer::Result(json!({ "task": snapshot.to_json(history, true) })))
}
