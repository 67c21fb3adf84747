//! `messages.send` (Resend's email API): the send, under the intent's idempotency key and with
//! the intent's id in a header that travels with the email; what its answer means (a 200 says
//! only that the message was accepted: it is never a confirmation); and the read-back, which
//! is the recipient's inbox, read through the messages service's test mailbox
//! (`GET /mailboxes/{address}/messages`, `docs/messages.md`).

use serde_json::{Value, json};

use super::{WriteOutcome, base, describe};
use crate::model::{Action, Intent};
use crate::world::{HttpRequest, HttpResponse};
use vocabulary::protocol::Config;
use vocabulary::protocol::Service;

/// The email header that carries the intent's id into the recipient's inbox, so that a
/// read-back tells this intent's message from any other sent to the same address (a
/// replacement's, another intent's). The idempotency key cannot: it changes when the key is
/// rotated, and the inbox never shows it.
pub const INTENT_HEADER: &str = "X-Twice-Intent";

/// Who the executor's messages come from.
pub const SENDER: &str = "twice executor <executor@twice.invalid>";

/// The test key used when `init.secrets` has no `messages_api_key`.
const API_KEY_DEFAULT: &str = "re_test_twice";

/// Messages read per page of a mailbox.
const PAGE: &str = "100";

/// The API key sends are authorised with.
fn api_key(config: &Config) -> &str {
    config.secrets.get(vocabulary::MESSAGES_API_KEY_SECRET).map(String::as_str).unwrap_or(API_KEY_DEFAULT)
}

/// `POST /emails`: the intent's message, with its key and its id.
pub(super) fn send_request(
    action: &Action,
    intent: &Intent,
    config: &Config,
    service: &Service,
) -> HttpRequest {
    let (to, subject, body) = match action {
        Action::SendMessage { to, subject, body } => (to.as_str(), subject.as_str(), body.as_str()),
        _ => ("", "", ""),
    };
    let email = json!({
        "from": SENDER,
        // One address as a string, as a rule's `where = { to = ... }` reads it.
        "to": to,
        "subject": subject,
        "text": body,
        "headers": {INTENT_HEADER: intent.id},
    });
    HttpRequest {
        method: "POST",
        url: format!("{}/emails", base(service)),
        headers: vec![
            ("authorization".into(), format!("Bearer {}", api_key(config))),
            ("content-type".into(), "application/json".into()),
            ("idempotency-key".into(), intent.key.clone()),
        ],
        body: email.to_string().into_bytes(),
        timeout_ms: config.limits.request_timeout_ms,
    }
}

/// A 2xx to a send: the message was accepted, and has this id. Whether it arrived only the
/// inbox can say ([`super::read_back_success`] is always true for a message).
pub(super) fn classify_accepted(response: &HttpResponse) -> WriteOutcome {
    match response.json().as_ref().and_then(|b| b.get("id")).and_then(Value::as_str) {
        Some(id) if !id.is_empty() => WriteOutcome::Done { external_id: id.to_string() },
        _ => WriteOutcome::Ambiguous { error: format!("an unreadable success: {}", describe(response)) },
    }
}

/// One page of the recipient's inbox, oldest first, after message `cursor`.
pub(super) fn mailbox_request(
    action: &Action,
    config: &Config,
    service: &Service,
    cursor: Option<&str>,
) -> HttpRequest {
    let to = match action {
        Action::SendMessage { to, .. } => to.as_str(),
        _ => "",
    };
    let mut query = form_urlencoded::Serializer::new(String::new());
    query.append_pair("limit", PAGE);
    if let Some(after) = cursor {
        query.append_pair("after", after);
    }
    HttpRequest {
        method: "GET",
        // The address is of the action table's plain form: it goes into the path as it is.
        url: format!("{}/mailboxes/{to}/messages?{}", base(service), query.finish()),
        headers: vec![],
        body: vec![],
        timeout_ms: config.limits.request_timeout_ms,
    }
}

/// Whether an inbox message is this intent's: it carries the intent's id in its header.
/// Header names are compared without regard to case, as mail does.
pub(super) fn ours(item: &Value, intent: &Intent) -> bool {
    item.get("headers").and_then(Value::as_object).is_some_and(|headers| {
        headers.iter().any(|(name, value)| {
            name.eq_ignore_ascii_case(INTENT_HEADER) && value.as_str() == Some(&intent.id)
        })
    })
}

/// Whether an inbox message carries exactly the intent's subject and body.
pub(super) fn matches(action: &Action, item: &Value) -> bool {
    match action {
        Action::SendMessage { subject, body, .. } => {
            item.get("subject").and_then(Value::as_str) == Some(subject)
                && item.get("text").and_then(Value::as_str) == Some(body)
        }
        _ => false,
    }
}

/// The field of an inbox message that holds the provider's id of the email (the inbox
/// message's own `id` is the mailbox's cursor).
pub(super) const EMAIL_ID_FIELD: &str = "email_id";
