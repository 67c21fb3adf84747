//! `POST /emails`: the API key, the body checked as Resend checks it, and the commit that
//! accepts the message and schedules its deliveries.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::address::address_of;
use super::answer::{invalid, missing, resend};
use super::mailbox::{self, Outgoing, Tag};
use crate::core::{ApiError, Commit, Inner, Mode, Stamp};
use crate::fault_engine::Plan;
use crate::wire::{FakeRequest, FakeResponse};

/// Resend's limit on an `Idempotency-Key`.
const KEY_CHARS_MAX: usize = 256;
/// Resend's limit on the recipients of one email (`to`); the fake holds `cc`, `bcc` and
/// `reply_to` to it too.
const RECIPIENTS_MAX: usize = 50;

/// The fields of Resend's send that this fake reads; the others are refused by name rather
/// than ignored, since ignoring a schedule or an attachment would answer for an email the
/// caller did not ask for.
const FIELDS: &[&str] =
    &["from", "to", "subject", "cc", "bcc", "reply_to", "html", "text", "headers", "tags"];
const NOT_OFFERED: &[&str] = &["attachments", "scheduled_at", "template", "react", "topic_id"];

/// Resend's API keys: `Authorization: Bearer re_...`. No header is 401 `missing_api_key`;
/// anything else that is not such a key is 403 `invalid_api_key`.
pub(crate) fn authorize(req: &FakeRequest) -> Result<(), ApiError> {
    let Some(value) = req.headers.get("authorization") else {
        return Err(resend(401, "missing_api_key", "Missing API key in the authorization header."));
    };
    let key = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")).map(str::trim);
    match key {
        Some(k) if k.len() > "re_".len() && k.starts_with("re_") => Ok(()),
        _ => Err(resend(403, "invalid_api_key", "API key is invalid")),
    }
}

/// Checks a send and returns its fingerprint (for the idempotency key) and its commit, which
/// takes `plan`'s delivery faults with it: a late commit delivers as late as the fault says,
/// counted from `arrived_ms`.
pub(crate) fn prepare(
    req: &FakeRequest,
    plan: &Plan,
    arrived_ms: u64,
) -> Result<(String, Commit<super::MessagesState>), ApiError> {
    if req.headers.contains_key("idempotency-key") {
        match req.header_str("idempotency-key") {
            Some(key) if (1..=KEY_CHARS_MAX).contains(&key.chars().count()) => {}
            _ => {
                return Err(resend(400, "invalid_idempotency_key", "The key must be between 1-256 chars."));
            }
        }
    }
    let body: Value = serde_json::from_slice(&req.body)
        .map_err(|e| resend(400, "validation_error", format!("The request body is not valid JSON: {e}")))?;
    let Value::Object(body) = body else {
        return Err(invalid("The request body must be a JSON object."));
    };
    if let Some(name) = body.keys().find(|k| NOT_OFFERED.contains(&k.as_str())) {
        return Err(invalid(format!("The `{name}` field is not offered by this fake (docs/messages.md).")));
    }
    if let Some(name) = body.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(invalid(format!("Unknown field `{name}`.")));
    }
    let from = match body.get("from") {
        None | Some(Value::Null) => return Err(missing("from")),
        Some(Value::String(s)) if address_of(s).is_some() => s.clone(),
        Some(_) => return Err(bad_address("from")),
    };
    let to = addresses(&body, "to")?;
    if to.is_empty() {
        return Err(missing("to"));
    }
    if to.len() > RECIPIENTS_MAX {
        return Err(invalid(format!("Too many recipients in `to`: at most {RECIPIENTS_MAX}.")));
    }
    let subject = match body.get("subject") {
        None | Some(Value::Null) => return Err(missing("subject")),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(invalid("Invalid `subject` field: it must be a string.")),
    };
    let text = optional_text(&body, "text")?;
    let html = optional_text(&body, "html")?;
    if text.is_none() && html.is_none() {
        return Err(invalid("Missing `html` or `text` field."));
    }
    let headers = match body.get("headers") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(map)) => string_map(map)
            .ok_or_else(|| invalid("Invalid `headers` field: it must be an object of strings."))?,
        Some(_) => return Err(invalid("Invalid `headers` field: it must be an object of strings.")),
    };
    let tags = tags(body.get("tags"))?;
    // Every recipient is a delivery and an effect: the copies are bounded like `to`, so that
    // one request cannot make an unbounded number of them.
    let (cc, bcc, reply_to) =
        (addresses(&body, "cc")?, addresses(&body, "bcc")?, addresses(&body, "reply_to")?);
    for (field, list) in [("cc", &cc), ("bcc", &bcc), ("reply_to", &reply_to)] {
        if list.len() > RECIPIENTS_MAX {
            return Err(invalid(format!("Too many addresses in `{field}`: at most {RECIPIENTS_MAX}.")));
        }
    }
    let outgoing = Outgoing {
        from,
        to,
        cc,
        bcc,
        reply_to,
        subject,
        text,
        html,
        headers,
        tags,
        arrived_ms,
        deliver_after_ms: plan.deliver_after_ms,
        redeliver_after_ms: plan.redeliver_after_ms,
    };
    let fingerprint = Value::Object(body).to_string();
    let commit: Commit<super::MessagesState> =
        Box::new(move |inner: &mut Inner<super::MessagesState>, mode: Mode, stamp: &Stamp| -> FakeResponse {
            mailbox::accept(inner, mode, stamp, outgoing)
        });
    Ok((fingerprint, commit))
}

fn bad_address(field: &str) -> ApiError {
    invalid(format!(
        "Invalid `{field}` field. The email address needs to follow the `email@example.com` or `Name <email@example.com>` format."
    ))
}

/// A field of one address or a list of them, each in a form Resend takes.
fn addresses(body: &Map<String, Value>, field: &str) -> Result<Vec<String>, ApiError> {
    let items: Vec<&Value> = match body.get(field) {
        None | Some(Value::Null) => return Ok(vec![]),
        Some(Value::Array(items)) => items.iter().collect(),
        Some(one) => vec![one],
    };
    items
        .into_iter()
        .map(|item| {
            item.as_str()
                .filter(|s| address_of(s).is_some())
                .map(str::to_string)
                .ok_or_else(|| bad_address(field))
        })
        .collect()
}

fn optional_text(body: &Map<String, Value>, field: &str) -> Result<Option<String>, ApiError> {
    match body.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(invalid(format!("Invalid `{field}` field: it must be a string."))),
    }
}

fn string_map(map: &Map<String, Value>) -> Option<BTreeMap<String, String>> {
    map.iter().map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string()))).collect()
}

/// Resend's tags: `[{name, value}]`, each of ASCII letters, digits, `_` and `-`, at most 256
/// characters; kept in the order given, as the caller's own marks on the email (Resend shows
/// them on the email and in its events; the fake in the mailbox and the ledger too).
fn tags(tags: Option<&Value>) -> Result<Vec<Tag>, ApiError> {
    let word = |v: Option<&Value>| {
        v.and_then(Value::as_str)
            .filter(|s| {
                (1..=256).contains(&s.len())
                    && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            })
            .map(str::to_string)
    };
    let refused = || {
        invalid(
            "Invalid `tags` field: each tag is {name, value} of ASCII letters, numbers, underscores or dashes.",
        )
    };
    match tags {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match (word(item.get("name")), word(item.get("value"))) {
                (Some(name), Some(value)) => Ok(Tag { name, value }),
                _ => Err(refused()),
            })
            .collect(),
        Some(_) => Err(refused()),
    }
}
