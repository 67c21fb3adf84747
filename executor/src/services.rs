//! How each action talks to its service: what its first send must read and record before it
//! leaves (a precondition, a signed transaction), the write, what its answer means, and the
//! lookup that reconciliation uses to ask the service what really happened.
//!
//! | action | write | guard | lookup |
//! |---|---|---|---|
//! | `payments.refund` | `POST /v1/refunds` | idempotency key | refunds of the payment intent, by `metadata[twice_intent]` |
//! | `workspaces.create` | `POST /v1/workspaces` | idempotency key, fencing token | the workspace with the external id |
//! | `files.put` | `PUT /{bucket}/{key}` | `If-None-Match: *` or `If-Match` of the version read before the first send | `HEAD`: the ETag is the quoted MD5 of the body |
//! | `chain.transfer` | `eth_sendRawTransaction` of bytes signed once | the nonce | the receipt of the hash, the account's nonce |
//! | `messages.send` | `POST /emails` | idempotency key, rotated when "not in the inbox" is final | the recipient's inbox, by the intent id in the `X-Twice-Intent` header |
//!
//! The dispatch per action, the outcomes and the JSON API conventions that payments and
//! workspaces share (Stripe's error envelope, list pages) are here; what is one service's
//! own is in `payments`, `files` (S3), `chain` (Ethereum JSON-RPC) and `messages` (Resend,
//! and the inbox its effect lands in). `workspaces.create` needs nothing beyond the shared
//! conventions.

mod chain;
mod files;
mod messages;
mod payments;
#[cfg(test)]
mod tests;

use serde_json::{Value, json};

use crate::model::{Action, Evidence, Intent, Precondition};
use crate::world::{HttpRequest, HttpResponse, SendError, Transport};
use vocabulary::Acks;
use vocabulary::Contract;
use vocabulary::protocol::Config;
use vocabulary::protocol::Service;

pub use chain::{ChainFacts, chain_facts, chain_key, rpc_request};
pub use files::{quoted_md5, read_precondition};
pub use messages::{INTENT_HEADER, SENDER};
pub use payments::{
    INTENT_METADATA_KEY, list_events, move_endpoint, read_endpoint, read_payment_intent, register_endpoint,
};

use chain::{classify_broadcast, lookup_transfer};
use files::{classify_put, lookup_object, object_url};
use payments::api_key;

/// What one write attempt established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The service says the effect exists, with this id.
    Done { external_id: String },
    /// A definite refusal: this attempt did not execute.
    Rejected { error: String },
    /// A definite refusal that a person must act on (401, 403: a credential or a permission;
    /// 400, 422: the input): this attempt did not execute, and sending it again would get the
    /// same answer. `error` is the service's own code and message.
    NeedsDecision { status: u16, error: String },
    /// This attempt certainly did not execute and may be sent again (never sent, or 429).
    NotExecuted { error: String },
    /// This attempt may or may not have executed.
    Ambiguous { error: String },
    /// The service refused a fencing token: a newer worker owns the intent.
    Fenced { error: String },
    /// This attempt did not execute because the object or the account is no longer as the
    /// intent was prepared against: an earlier attempt of ours may be what moved it, so only
    /// a read-back can tell. `definite`: the state certainly moved on (S3's 412, a nonce
    /// already used); otherwise the service lost a race (409 `ConditionalRequestConflict`, a
    /// replacement underpriced).
    Conflict { error: String, definite: bool },
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The effect exists. `params_match` is false if it differs from the authorised payload.
    Found { external_id: String, params_match: bool },
    /// The service does not show it (which is final only once settle and read-lag bounds passed).
    Absent,
    /// The effect is not there and can no longer appear: the object holds a version that is
    /// neither ours nor the one the precondition names, or another transaction used the
    /// transfer's nonce. Final, like `Absent`, once the settle and read-lag bounds passed.
    Superseded { what: String },
    /// The lookup itself failed.
    Failed { error: String },
}

/// Most pages a lookup follows.
const LOOKUP_PAGES_MAX: usize = 10;

fn base(service: &Service) -> &str {
    service.url.trim_end_matches('/')
}

/// The write request for one attempt. `Err` when the intent lacks what its first send must
/// have recorded (a `files.put` precondition, a `chain.transfer`'s signed bytes): nothing may
/// be sent then.
pub fn write_request(
    action: &Action,
    intent: &Intent,
    config: &Config,
    service: &Service,
    fencing_token: u64,
) -> Result<HttpRequest, String> {
    let timeout_ms = config.limits.request_timeout_ms;
    Ok(match action {
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
                // The intent's id as the workspace's metadata, as a refund carries it: whose
                // write a workspace is, for a checker and a person.
                body: json!({
                    "external_id": external_id,
                    "name": name,
                    "metadata": {INTENT_METADATA_KEY: intent.id},
                })
                .to_string()
                .into_bytes(),
                timeout_ms,
            }
        }
        Action::PutObject { bucket, key, body } => {
            let mut headers = vec![("content-type".to_string(), "application/octet-stream".to_string())];
            // The intent's id as the object's user metadata, where a header can carry it: what
            // tells a checker, and a person, whose write an object version is.
            if intent.id.bytes().all(|b| b.is_ascii_graphic()) {
                headers.push((files::INTENT_METADATA_HEADER.into(), intent.id.clone()));
            }
            if service.contract.conditional_writes {
                match &intent.evidence.precondition {
                    Some(Precondition::IfNoneMatch) => headers.push(("if-none-match".into(), "*".into())),
                    Some(Precondition::IfMatch(etag)) => headers.push(("if-match".into(), etag.clone())),
                    None => return Err("no precondition was recorded before the first send".into()),
                }
            }
            HttpRequest {
                method: "PUT",
                url: object_url(service, bucket, key),
                headers,
                body: body.as_bytes().to_vec(),
                timeout_ms,
            }
        }
        Action::Transfer { .. } => {
            let raw = intent
                .evidence
                .raw_tx
                .as_deref()
                .ok_or("no signed transaction was recorded before the first broadcast")?;
            rpc_request(service, "eth_sendRawTransaction", json!([raw]), timeout_ms)
        }
        Action::SendMessage { .. } => messages::send_request(action, intent, config, service),
    })
}

/// Stripe's error `type` (`invalid_request_error`, `idempotency_error`, ...).
fn error_type(response: &HttpResponse) -> String {
    response
        .json()
        .and_then(|b| b.pointer("/error/type").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

/// The error's code: Stripe's `error.code`, or Resend's `name`.
fn error_code(response: &HttpResponse) -> String {
    response
        .json()
        .and_then(|b| {
            let code = b.pointer("/error/code").or_else(|| b.get("statusCode").and_then(|_| b.get("name")));
            code.and_then(Value::as_str).map(str::to_string)
        })
        .unwrap_or_default()
}

/// A JSON API's refusal in its own words: its `code` (or, without one, its `type`) and its
/// `message`, as in `amount_too_large: Refund amount (8000) is greater than ...`.
fn own_words(response: &HttpResponse) -> String {
    let body = response.json();
    // Stripe nests its error under `error`; Resend's is the body itself, marked by `statusCode`.
    let resend = body.as_ref().is_some_and(|b| b.get("statusCode").is_some());
    let field = |name: &str| {
        let pointer = if resend {
            format!("/{}", if name == "code" { "name" } else { name })
        } else {
            format!("/error/{name}")
        };
        body.as_ref()
            .and_then(|b| b.pointer(&pointer).and_then(Value::as_str).map(str::to_string))
            .filter(|v| !v.is_empty())
    };
    let message = field("message").unwrap_or_else(|| excerpt(&response.body));
    match field("code").or_else(|| field("type")) {
        Some(code) => format!("{code}: {message}"),
        None => message,
    }
}

/// The status and the error's message: Stripe's `error.message`, Resend's `message`, or the
/// start of the body.
fn describe(response: &HttpResponse) -> String {
    let message = response
        .json()
        .and_then(|b| {
            let message =
                b.pointer("/error/message").or_else(|| b.get("statusCode").and_then(|_| b.get("message")));
            message.and_then(Value::as_str).map(str::to_string)
        })
        .unwrap_or_else(|| String::from_utf8_lossy(&response.body).chars().take(200).collect());
    format!("HTTP {}: {message}", response.status)
}

/// What an attempt's answer means. A timeout is never a "no".
pub fn classify_write(
    action: &Action,
    intent: &Intent,
    answer: Result<HttpResponse, SendError>,
) -> WriteOutcome {
    let response = match answer {
        Err(SendError::NotSent(e)) => return WriteOutcome::NotExecuted { error: e },
        Err(SendError::Ambiguous(e)) => return WriteOutcome::Ambiguous { error: e },
        Ok(r) => r,
    };
    match action {
        Action::PutObject { body, .. } => return classify_put(body, &response),
        Action::Transfer { .. } => return classify_broadcast(intent, &response),
        // An accepted message carries only its id; every other answer means what it means
        // for any JSON API below.
        Action::SendMessage { .. } if (200..=299).contains(&response.status) => {
            return messages::classify_accepted(&response);
        }
        Action::Refund { .. } | Action::CreateWorkspace { .. } | Action::SendMessage { .. } => {}
    }
    if (200..=299).contains(&response.status) {
        // Parsed once: this is every confirmed send's path.
        let object = response.json().unwrap_or(Value::Null);
        return match object.get("id").and_then(Value::as_str) {
            Some(external_id) if matches_action(action, &object) => {
                WriteOutcome::Done { external_id: external_id.to_string() }
            }
            Some(_) => WriteOutcome::Ambiguous {
                error: "a success whose parameters differ from the intent's".into(),
            },
            None => {
                WriteOutcome::Ambiguous { error: format!("an unreadable success: {}", describe(&response)) }
            }
        };
    }
    let error = describe(&response);
    match response.status {
        409 => match error_code(&response).as_str() {
            "stale_fencing_token" => WriteOutcome::Fenced { error },
            // In flight under this key, or a create whose business id exists (perhaps ours):
            // only a lookup can tell.
            _ => WriteOutcome::Ambiguous { error },
        },
        // Stripe saves no result for a 429: the request did not execute.
        429 => WriteOutcome::NotExecuted { error },
        408 => WriteOutcome::Ambiguous { error },
        // The same key with other parameters: which request the key holds, ours or one
        // before it, only a lookup can tell.
        400 if error_type(&response) == "idempotency_error"
            || (error_code(&response).is_empty() && error.contains("idempotency")) =>
        {
            WriteOutcome::Ambiguous { error }
        }
        status if vocabulary::needs_decision(status) => {
            WriteOutcome::NeedsDecision { status, error: own_words(&response) }
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
        // An inbox message: its subject and plain-text body.
        Action::SendMessage { .. } => messages::matches(action, object),
        // Their answers carry no object: an ETag or a hash stands for it.
        Action::PutObject { .. } | Action::Transfer { .. } => false,
    }
}

/// The first lookup request; `cursor` continues a paged one.
pub fn lookup_request(
    action: &Action,
    intent: &Intent,
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
        Action::PutObject { bucket, key, .. } => {
            return HttpRequest {
                method: "HEAD",
                url: object_url(service, bucket, key),
                headers: vec![],
                body: vec![],
                timeout_ms,
            };
        }
        // The receipt of the recorded hash: the first of a transfer's lookup requests (see
        // `lookup_transfer` for the others).
        Action::Transfer { .. } => {
            let hash = intent.evidence.tx_hash.as_deref().unwrap_or_default();
            return rpc_request(service, "eth_getTransactionReceipt", json!([hash]), timeout_ms);
        }
        Action::SendMessage { .. } => return messages::mailbox_request(action, config, service, cursor),
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
        Action::SendMessage { .. } => messages::ours(item, intent),
        // Not listed in pages (see `lookup_object` and `lookup_transfer`).
        Action::PutObject { .. } | Action::Transfer { .. } => false,
    });
    if let Some(item) = ours {
        let id_field = match action {
            Action::SendMessage { .. } => messages::EMAIL_ID_FIELD,
            _ => "id",
        };
        let external_id = item.get(id_field).and_then(Value::as_str).unwrap_or_default().to_string();
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
    transport: &dyn Transport,
) -> Lookup {
    match action {
        Action::PutObject { .. } => return lookup_object(action, intent, config, service, transport).await,
        Action::Transfer { .. } => return lookup_transfer(action, intent, config, service, transport).await,
        Action::Refund { .. } | Action::CreateWorkspace { .. } | Action::SendMessage { .. } => {}
    }
    let mut cursor: Option<String> = None;
    for _ in 0..LOOKUP_PAGES_MAX {
        let request = lookup_request(action, intent, config, service, cursor.as_deref());
        match classify_lookup_page(action, intent, transport.send(request).await) {
            Ok(found) => return found,
            Err(next) => cursor = Some(next),
        }
    }
    Lookup::Failed { error: format!("more than {LOOKUP_PAGES_MAX} pages to search") }
}

/// Whether a resend of this action can take effect at most once whatever became of its
/// earlier sends, without an idempotency key: a conditional put (once one send landed, the
/// condition no longer holds) and a signed transaction (its nonce is used once). Such an
/// intent is sent again, when a lookup did not find it, without waiting for the settle bound.
pub fn resend_is_guarded(action: &Action, contract: &Contract) -> bool {
    match action {
        Action::PutObject { .. } => contract.conditional_writes,
        Action::Transfer { .. } => true,
        Action::Refund { .. } | Action::CreateWorkspace { .. } | Action::SendMessage { .. } => false,
    }
}

/// Whether a success may be hollow: where the contract says acks may lie, and for a message
/// whatever it says, since the answer is the provider accepting it and the effect is its
/// delivery to the inbox. Such a success is read back, a key is never trusted to replay what
/// happened, and once "not there" is final the intent is sent again under a new key (the old
/// one may hold the hollow answer, which a resend would only replay).
pub fn success_may_be_hollow(action: &Action, contract: &Contract) -> bool {
    contract.acks == Acks::MayLie || matches!(action, Action::SendMessage { .. })
}

/// Whether a success must be read back before `confirmed`: where it may be hollow
/// ([`success_may_be_hollow`]), and for a transfer, which a node accepts into its pool before
/// it is mined.
pub fn read_back_success(action: &Action, contract: &Contract) -> bool {
    success_may_be_hollow(action, contract) || matches!(action, Action::Transfer { .. })
}

/// Whether the intent still needs its first send's reads and records (a precondition, a
/// signature) before anything may be sent.
pub fn needs_preparation(action: &Action, evidence: &Evidence, contract: &Contract) -> bool {
    match action {
        Action::PutObject { .. } => contract.conditional_writes && evidence.precondition.is_none(),
        Action::Transfer { .. } => evidence.raw_tx.is_none(),
        Action::Refund { .. } | Action::CreateWorkspace { .. } | Action::SendMessage { .. } => false,
    }
}

fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(body).chars().take(200).collect()
}
