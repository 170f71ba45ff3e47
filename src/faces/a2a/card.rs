//! `GET /.well-known/agent-card.json` (and the legacy `agent.json`): the
//! agent card A2A clients start from.

use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::face::A2aFace;
use crate::transport::http::host_check::{request_host, HostCheck};

/// How long a client may cache the card.
const CARD_MAX_AGE_SECONDS: u32 = 300;

/// The card, its interface URL taken from `[a2a] public_url` or, when that
/// is empty, from the request's `Host` when `[http] allowed_hosts` names it
/// (or it is a loopback name), else the listener's address; the scheme
/// from `X-Forwarded-Proto`.
pub(super) fn card(face: &A2aFace, req: &HttpRequest) -> Value {
    let config = &face.config;
    let base = if config.public_url.is_empty() {
        // Only a host the listener is known by: never one a client made up.
        let host = request_host(req);
        let named = req.app_data::<web::Data<HostCheck>>().is_some_and(|check| check.names(&host));
        let host = match named {
            true => host,
            false => req.app_config().local_addr().to_string(),
        };
        format!("{}://{host}", req.connection_info().scheme())
    } else {
        config.public_url.trim_end_matches('/').to_owned()
    };
    let modes = json!(["text/plain", "application/json"]);
    let skills: Vec<Value> = if config.skills.is_empty() {
        vec![json!({
            "id": "subagent-tree",
            "name": "Subagent tree",
            "description": "Runs the task as a tree of subagents and returns its result.",
            "tags": ["subagents", "orchestration"],
        })]
    } else {
        config
            .skills
            .iter()
            .map(|skill| {
                let mut value = json!({
                    "id": skill.id,
                    "name": skill.name,
                    "description": skill.description,
                    "tags": skill.tags,
                });
                if !skill.examples.is_empty() {
                    value["examples"] = json!(skill.examples);
                }
                value
            })
            .collect()
    };
    let mut card = json!({
        "name": config.name,
        "description": config.description,
        "supportedInterfaces": [{
            "url": format!("{base}/a2a"),
            "protocolBinding": "JSONRPC",
            "protocolVersion": "1.0",
        }],
        "version": config.version,
        "capabilities": { "streaming": true, "pushNotifications": false, "extendedAgentCard": false },
        "defaultInputModes": if config.input_modes.is_empty() { modes.clone() } else { json!(config.input_modes) },
        "defaultOutputModes": modes,
        "skills": skills,
    });
    if face.sessions.service.auth().is_enabled() {
        card["securitySchemes"] =
            json!({ "bearer": { "httpAuthSecurityScheme": { "scheme": "Bearer", "description": "An [auth] token" } } });
        card["securityRequirements"] = json!([{ "schemes": { "bearer": { "list": [] } } }]);
    }
    card
}

pub(super) async fn get_card(req: HttpRequest, face: web::Data<A2aFace>) -> HttpResponse {
    let body = card(&face, &req).to_string();
    // A validator of the card's bytes: a client revalidates cheaply.
    let tag = {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(body.as_bytes());
        format!("\"{}\"", digest.iter().take(8).map(|byte| format!("{byte:02x}")).collect::<String>())
    };
    let matches = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.split(',').any(|candidate| candidate.trim() == tag));
    let mut response = if matches { HttpResponse::NotModified() } else { HttpResponse::Ok() };
    response
        .insert_header((header::CACHE_CONTROL, format!("public, max-age={CARD_MAX_AGE_SECONDS}")))
        .insert_header((header::ETAG, tag))
        // The card is made from the config, read at start.
        .insert_header((header::LAST_MODIFIED, httpdate::fmt_http_date(face.started)));
    if matches {
        return response.finish();
    }
    response.content_type("application/json").body(body)
}
