//! How each action talks to its service: the write, what its answer means, and the lookup
//! that reconciliation uses to ask the service what really happened.

use serde_json::{Value, json};

use crate::config::{Config, Service};
use crate::model::{Action, Intent};
use crate::world::{HttpRequest, HttpResponse, SendError};

/// The metadata key under which a refund carries the intent's id, so that a lookup can tell
/// this intent's refund from any other refund of the same payment intent.
pub const INTENT_METADATA_KEY: &str = "twice_intent";

/// What one write attempt established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The service says the effect exists, with this id.
    Done { external_id: String },
    /// A definite refusal: this attempt did not execute.
    Rejected { error: String },
    /// This attempt certainly did not execute and may be sent again (never sent, or 429).
    NotExecuted { error: String },
    /// This attempt may or may not have executed.
    Ambiguous { error: String },
    /// The service refused a fencing token: a newer worker owns the intent.
    Fenced { error: String },
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The effect exists. `params_match` is false if it differs from the authorised payload.
    Found { external_id: String, params_match: bool },
    /// The service does not show it (which is final only once settle and read-lag bounds passed).
    Absent,
    /// The lookup itself failed.
    Failed { error: String },
}

/// Most pages a lookup follows.
const LOOKUP_PAGES_MAX: usize = 10;

fn base(service: &Service) -> &str {
    service.url.trim_end_matches('/')
}

/// The write request for one attempt.
pub fn write_request(
    action: &Action,
    intent: &Intent,
    config: &Config,
    service: &Service,
    fencing_token: u64,
) -> HttpRequest {
    let timeout_ms = config.limits.request_timeout_ms;
    match action {
        Action::Refund { payment_intent, amount } => {
            let body = form_urlencoded::Serializer::new(String::new())
                .append_pair("payment_intent", payment_intent)
                .append_pair("amount", &amount.to_string())
                .append_pair(&format!("metadata[{INTENT_METADATA_KEY}]"), &intent.id)
                .finish();
            HttpRequest {
                method: "POST",
                url: format!("{}/v1/refunds", base(service)),
                headers: vec![
                    ("authorization".into(), format!("Bearer {}", api_key(config))),
                    ("content-type".into(), "application/x-www-form-urlencoded".into()),
                    ("idempotency-key".into(), intent.key.clone()),
                ],
                body: body.into_bytes(),
                timeout_ms,
            }
        }
        Action::CreateWorkspace { external_id, name } => {
            let mut headers = vec![
                ("content-type".into(), "application/json".into()),
                ("idempotency-key".into(), intent.key.clone()),
            ];
            if service.contract.fencing {
                headers.push(("fencing-token".into(), fencing_token.to_string()));
            }
            HttpRequest {
                method: "POST",
                url: format!("{}/v1/workspaces", base(service)),
                headers,
                body: json!({"external_id": external_id, "name": name}).to_string().into_bytes(),
                timeout_ms,
            }
        }
    }
}

fn api_key(config: &Config) -> &str {
    config.secrets.get("payments_api_key").map(String::as_str).unwrap_or("sk_test_twice")
}

fn error_code(response: &HttpResponse) -> String {
    response
        .json()
        .and_then(|b| b.pointer("/error/code").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

fn describe(response: &HttpResponse) -> String {
    let message = response
        .json()
        .and_then(|b| b.pointer("/error/message").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(&response.body).chars().take(200).collect());
    format!("HTTP {}: {message}", response.status)
}

/// What an attempt's answer means. A timeout is never a "no".
pub fn classify_write(action: &Action, answer: Result<HttpResponse, SendError>) -> WriteOutcome {
    let response = match answer {
        Err(SendError::NotSent(e)) => return WriteOutcome::NotExecuted { error: e },
        Err(SendError::Ambiguous(e)) => return WriteOutcome::Ambiguous { error: e },
        Ok(r) => r,
    };
    let error = describe(&response);
    match response.status {
        200..=299 => {
            match response.json().and_then(|b| b.get("id").and_then(Value::as_str).map(str::to_string)) {
                Some(external_id) if matches_action(action, &response.json().unwrap_or(Value::Null)) => {
                    WriteOutcome::Done { external_id }
                }
                Some(_) => WriteOutcome::Ambiguous {
                    error: "a success whose parameters differ from the intent's".into(),
                },
                None => WriteOutcome::Ambiguous { error: format!("an unreadable success: {error}") },
            }
        }
        409 => match error_code(&response).as_str() {
            "stale_fencing_token" => WriteOutcome::Fenced { error },
            // In flight under this key, or a create whose business id exists (perhaps ours):
            // only a lookup can tell.
            _ => WriteOutcome::Ambiguous { error },
        },
        // Stripe saves no result for a 429: the request did not execute.
        429 => WriteOutcome::NotExecuted { error },
        408 => WriteOutcome::Ambiguous { error },
        400 if error_code(&response).is_empty() && error.contains("idempotency") => {
            WriteOutcome::Ambiguous { error }
        }
        400..=499 => WriteOutcome::Rejected { error },
        _ => WriteOutcome::Ambiguous { error },
    }
}

/// Whether a service's object carries exactly the intent's parameters.
fn matches_action(action: &Action, object: &Value) -> bool {
    match action {
        Action::Refund { payment_intent, amount } => {
            object.get("payment_intent").and_then(Value::as_str) == Some(payment_intent)
                && object.get("amount").and_then(Value::as_u64) == Some(*amount)
        }
        Action::CreateWorkspace { external_id, name } => {
            object.get("external_id").and_then(Value::as_str) == Some(external_id)
                && object.get("name").and_then(Value::as_str) == Some(name)
        }
    }
}

/// The first lookup request; `cursor` continues a paged one.
pub fn lookup_request(
    action: &Action,
    config: &Config,
    service: &Service,
    cursor: Option<&str>,
) -> HttpRequest {
    let timeout_ms = config.limits.request_timeout_ms;
    let (url, headers) = match action {
        Action::Refund { payment_intent, .. } => {
            let mut query = form_urlencoded::Serializer::new(String::new());
            query.append_pair("payment_intent", payment_intent).append_pair("limit", "100");
            if let Some(c) = cursor {
                query.append_pair("starting_after", c);
            }
            (
                format!("{}/v1/refunds?{}", base(service), query.finish()),
                vec![("authorization".to_string(), format!("Bearer {}", api_key(config)))],
            )
        }
        Action::CreateWorkspace { external_id, .. } => {
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("external_id", external_id)
                .finish();
            (format!("{}/v1/workspaces?{query}", base(service)), vec![])
        }
    };
    HttpRequest { method: "GET", url, headers, body: vec![], timeout_ms }
}

/// One page of a lookup: found, absent, failed, or "look at the next page after this id".
pub fn classify_lookup_page(
    action: &Action,
    intent: &Intent,
    answer: Result<HttpResponse, SendError>,
) -> Result<Lookup, String> {
    let response = match answer {
        Err(e) => return Ok(Lookup::Failed { error: e.to_string() }),
        Ok(r) => r,
    };
    if response.status != 200 {
        return Ok(Lookup::Failed { error: describe(&response) });
    }
    let Some(page) = response.json() else {
        return Ok(Lookup::Failed { error: "an unreadable list".into() });
    };
    let data = page.get("data").and_then(Value::as_array).cloned().unwrap_or_default();
    let ours = data.iter().find(|item| match action {
        Action::Refund { .. } => {
            item.pointer(&format!("/metadata/{INTENT_METADATA_KEY}")).and_then(Value::as_str)
                == Some(intent.id.as_str())
        }
        // External ids are unique per intent: a workspace with ours is ours.
        Action::CreateWorkspace { external_id, .. } => {
            item.get("external_id").and_then(Value::as_str) == Some(external_id.as_str())
        }
    });
    if let Some(item) = ours {
        let external_id = item.get("id").and_then(Value::as_str).unwrap_or_default().to_string();
        return Ok(Lookup::Found { external_id, params_match: matches_action(action, item) });
    }
    let more = page.get("has_more").and_then(Value::as_bool).unwrap_or(false);
    match (more, data.last().and_then(|l| l.get("id")).and_then(Value::as_str)) {
        (true, Some(last)) => Err(last.to_string()),
        _ => Ok(Lookup::Absent),
    }
}

/// Runs a lookup, following pages up to a bound.
pub async fn lookup(
    action: &Action,
    intent: &Intent,
    config: &Config,
    service: &Service,
    transport: &dyn crate::world::Transport,
) -> Lookup {
    let mut cursor: Option<String> = None;
    for _ in 0..LOOKUP_PAGES_MAX {
        let request = lookup_request(action, config, service, cursor.as_deref());
        match classify_lookup_page(action, intent, transport.send(request).await) {
            Ok(found) => return found,
            Err(next) => cursor = Some(next),
        }
    }
    Lookup::Failed { error: format!("more than {LOOKUP_PAGES_MAX} pages to search") }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: u16, body: Value) -> Result<HttpResponse, SendError> {
        Ok(HttpResponse { status, headers: vec![], body: body.to_string().into_bytes() })
    }

    #[test]
    fn a_timeout_is_never_a_no() {
        let refund = Action::Refund { payment_intent: "pi_1".into(), amount: 100 };
        let err =
            |code: &str| json!({"error": {"type": "invalid_request_error", "code": code, "message": "m"}});
        let cases: Vec<(Result<HttpResponse, SendError>, &str)> = vec![
            (answer(200, json!({"id": "re_1", "payment_intent": "pi_1", "amount": 100})), "done"),
            (answer(200, json!({"id": "re_1", "payment_intent": "pi_1", "amount": 99})), "ambiguous"),
            (answer(200, json!("not an object")), "ambiguous"),
            (Ok(HttpResponse { status: 200, headers: vec![], body: b"<html>".to_vec() }), "ambiguous"),
            (answer(500, err("")), "ambiguous"),
            (answer(503, json!({})), "ambiguous"),
            (answer(409, err("idempotency_key_in_use")), "ambiguous"),
            (answer(409, err("workspace_exists")), "ambiguous"),
            (answer(409, err("stale_fencing_token")), "fenced"),
            (answer(429, err("")), "not_executed"),
            (answer(402, err("card_declined")), "rejected"),
            (answer(404, err("resource_missing")), "rejected"),
            (Err(SendError::NotSent("refused".into())), "not_executed"),
            (Err(SendError::Ambiguous("timeout".into())), "ambiguous"),
        ];
        for (answer, want) in cases {
            let got = match classify_write(&refund, answer.clone()) {
                WriteOutcome::Done { .. } => "done",
                WriteOutcome::Rejected { .. } => "rejected",
                WriteOutcome::NotExecuted { .. } => "not_executed",
                WriteOutcome::Ambiguous { .. } => "ambiguous",
                WriteOutcome::Fenced { .. } => "fenced",
            };
            assert_eq!(got, want, "{answer:?}");
        }
    }
}
