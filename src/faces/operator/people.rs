//! The operator's side of a person in the loop: `GET /admin/approvals`
//! lists every approval and question waiting for a person, across
//! sessions (oldest first, with its age and time left), and `POST
//! /admin/approvals/{id}` answers one, as the session's client would with
//! `SUBAGENT_APPROVAL_REQ` or `SUBAGENT_INPUT_REQ`.
//!
//! The answer's body is `{"decision": "approve" | "deny", "note": …}` for
//! an approval, `{"answer": …}` for a question. Like cancel and terminate
//! it needs the header `X-Subagentd-Confirm: yes`, and the admin token
//! rules of every admin route. Answers: `{"ok": true, "decision",
//! "accepted"}`; 404 `unknown_approval`; 409 `invalid_state` (another
//! decision was given, or the wrong kind of answer); 400 `invalid_message`
//! (an answer that is not one of the question's choices: it stays open).

use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use serde::Deserialize;
use serde_json::json;

use super::access::{refusal, refuse, AdminApi, CONFIRM_HEADER};
use crate::error::ErrorCode;
use crate::ops::{Caller, Operation, Outcome};
use crate::protocol::encode::now_ts;
use crate::Given;

/// `GET /admin/approvals`.
pub(super) async fn pending(req: HttpRequest, api: web::Data<AdminApi>) -> HttpResponse {
    if let Some(refused) = refusal(&req, &api, false) {
        return refused;
    }
    let now = now_ts();
    let pending: Vec<serde_json::Value> = api
        .service
        .host()
        .desk()
        .pending(None)
        .iter()
        .map(|request| {
            let mut row = serde_json::to_value(&**request).unwrap_or_default();
            row["age_seconds"] = json!((now - request.requested_at).max(0.0));
            row["left_seconds"] = json!((request.expires_at - now).max(0.0));
            row
        })
        .collect();
    HttpResponse::Ok().insert_header((header::CACHE_CONTROL, "no-store")).json(json!({ "pending": pending }))
}

/// An answer's body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AnswerBody {
    #[serde(default)]
    decision: Option<String>,
    #[serde(default)]
    note: String,
    #[serde(default)]
    answer: Option<String>,
}

/// `POST /admin/approvals/{id}`.
pub(super) async fn answer(
    req: HttpRequest,
    path: web::Path<String>,
    body: web::Bytes,
    api: web::Data<AdminApi>,
) -> HttpResponse {
    if let Some(refused) = refusal(&req, &api, false) {
        return refused;
    }
    let confirmed = req.headers().get(CONFIRM_HEADER).and_then(|value| value.to_str().ok());
    if !confirmed.is_some_and(|value| value.eq_ignore_ascii_case("yes")) {
        return refuse(StatusCode::BAD_REQUEST, &format!("an answer needs the header {CONFIRM_HEADER}: yes"));
    }
    let body: AnswerBody = match serde_json::from_slice(&body) {
        Ok(body) => body,
        Err(err) => return refuse(StatusCode::BAD_REQUEST, &format!("the body is not an answer: {err}")),
    };
    let given = match (body.decision.as_deref(), body.answer) {
        (Some("approve"), None) => Given::Approve { note: body.note },
        (Some("deny"), None) => Given::Deny { note: body.note },
        (None, Some(text)) => Given::Answer { text },
        _ => {
            return refuse(
                StatusCode::BAD_REQUEST,
                "send {\"decision\": \"approve\" | \"deny\", \"note\"} or {\"answer\": TEXT}",
            )
        }
    };
    let id = path.into_inner();
    log::info!("admin: {} {id}, answered by {}", given.decision(), crate::transport::http::request_info::peer(&req));
    let operator = Caller::Operator { desk: api.service.host().desk(), tree: None };
    match (Operation::Decide { id, given }).run(operator).await {
        Ok(Outcome::Decided { id, outcome }) => HttpResponse::Ok().json(json!({
            "ok": true, "id": id, "decision": outcome.decision, "accepted": outcome.accepted,
        })),
        Ok(other) => HttpResponse::InternalServerError()
            .json(json!({ "ok": false, "error": format!("the desk answered {other:?}"), "code": "runtime_error" })),
        Err(err) => {
            let status = match err.code {
                ErrorCode::UnknownApproval => StatusCode::NOT_FOUND,
                ErrorCode::InvalidMessage => StatusCode::BAD_REQUEST,
                _ => StatusCode::CONFLICT,
            };
            HttpResponse::build(status).json(json!({ "ok": false, "error": err.message, "code": err.code.as_str() }))
        }
    }
}
