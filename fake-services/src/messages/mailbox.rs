//! The messages fake's state: the emails the API accepted, the deliveries still to make, and
//! the inboxes they land in; and the reads of both (`GET /emails/{id}`, the test mailbox).

use std::collections::BTreeMap;

use rand::RngExt;
use serde_json::{Value, json};

use super::address::address_of;
use super::answer::{invalid, resend};
use super::{DELIVERED, TO_FIELD};
use crate::core::{ApiError, Inner, Mode, Stamp};
use crate::files::http::iso_date;
use crate::wire::{FakeRequest, FakeResponse};
use vocabulary::Effect;
use vocabulary::PROVIDER_REDELIVERY;

/// Most messages a mailbox read answers at once.
const PAGE_MAX: usize = 100;

/// A send, checked, with what the faults of its request ask of its deliveries.
#[derive(Debug, Clone)]
pub(crate) struct Outgoing {
    /// As the caller wrote it (`Name <address>` or the address).
    pub from: String,
    pub to: Vec<String>,
    pub cc: Vec<String>,
    pub bcc: Vec<String>,
    pub reply_to: Vec<String>,
    pub subject: String,
    pub text: Option<String>,
    pub html: Option<String>,
    pub headers: BTreeMap<String, String>,
    /// Resend's tags, in the order given.
    pub tags: Vec<Tag>,
    /// When the request arrived: a late delivery is counted from here, so that it lands
    /// within the settle bound of the request whenever its commit comes.
    pub arrived_ms: u64,
    pub deliver_after_ms: Option<u64>,
    pub redeliver_after_ms: Option<u64>,
}

/// One of Resend's tags: the caller's own mark on an email.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tag {
    pub name: String,
    pub value: String,
}

impl Outgoing {
    /// The tags as Resend writes them: `[{"name", "value"}]`.
    fn tags_json(&self) -> Value {
        Value::Array(self.tags.iter().map(|t| json!({"name": t.name, "value": t.value})).collect())
    }
}

#[derive(Debug, Clone)]
struct Email {
    id: String,
    sent: Outgoing,
    created_ms: u64,
    /// When its (first) deliveries are due; `None` for an email accepted and dropped.
    delivers_at_ms: Option<u64>,
    key: Option<String>,
    request_id: String,
}

impl Email {
    fn to_json(&self, visible_until_ms: u64) -> Value {
        let list = |a: &[String]| if a.is_empty() { Value::Null } else { json!(a) };
        // A dropped email is reported delivered: the receiving side took it and lost it, and
        // the provider cannot tell. Only the inbox shows the truth.
        let last_event = match self.delivers_at_ms {
            Some(at) if at > visible_until_ms => "sent",
            _ => "delivered",
        };
        let mut email = json!({
            "object": "email",
            "id": self.id,
            "to": self.sent.to,
            "from": self.sent.from,
            "created_at": iso_date(self.created_ms),
            "subject": self.sent.subject,
            "html": self.sent.html,
            "text": self.sent.text,
            "bcc": list(&self.sent.bcc),
            "cc": list(&self.sent.cc),
            "reply_to": list(&self.sent.reply_to),
            "last_event": last_event,
            "scheduled_at": null,
        });
        // Resend shows an email's tags only when it has some.
        if !self.sent.tags.is_empty() {
            email["tags"] = self.sent.tags_json();
        }
        email
    }

    /// Everyone who receives it, once each: `to`, then `cc`, then `bcc`.
    fn recipients(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for address in
            self.sent.to.iter().chain(&self.sent.cc).chain(&self.sent.bcc).filter_map(|a| address_of(a))
        {
            if !out.contains(&address) {
                out.push(address);
            }
        }
        out
    }
}

/// A delivery still to make.
#[derive(Debug, Clone)]
struct Delivery {
    email: usize,
    recipient: String,
    /// The provider's own second delivery.
    again: bool,
}

/// One message in an inbox.
#[derive(Debug, Clone)]
struct Received {
    id: String,
    email: usize,
    received_ms: u64,
}

/// The messages fake's objects.
#[derive(Debug, Default)]
pub struct MessagesState {
    /// Every email accepted, in order.
    emails: Vec<Email>,
    /// Email id to its index in `emails`.
    by_id: BTreeMap<String, usize>,
    /// Deliveries to make, by (due time, order of scheduling).
    pending: BTreeMap<(u64, u64), Delivery>,
    scheduled: u64,
    /// Address to what landed there, oldest first.
    inboxes: BTreeMap<String, Vec<Received>>,
}

/// A delivery still to make, as [`MessagesState::due`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// Service time when it lands in the inbox.
    pub due_ms: u64,
    /// The email's id (Resend's).
    pub email_id: String,
    /// The inbox it lands in.
    pub recipient: String,
    /// The id of the send's request.
    pub request_id: String,
    /// The provider's own second delivery (`redeliver`).
    pub again: bool,
}

impl MessagesState {
    /// Deliveries accepted and not yet made.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Deliveries accepted and not yet made, in the order they fall due. Read only: they are
    /// made by `deliver_due`.
    pub fn due(&self) -> Vec<Due> {
        self.pending
            .iter()
            .map(|((due_ms, _), delivery)| {
                let email = self.emails.get(delivery.email);
                Due {
                    due_ms: *due_ms,
                    email_id: email.map(|e| e.id.clone()).unwrap_or_default(),
                    recipient: delivery.recipient.clone(),
                    request_id: email.map(|e| e.request_id.clone()).unwrap_or_default(),
                    again: delivery.again,
                }
            })
            .collect()
    }

    fn schedule(&mut self, due_ms: u64, delivery: Delivery) {
        self.scheduled += 1;
        self.pending.insert((due_ms, self.scheduled), delivery);
    }
}

/// A fresh email id: a UUID (version 4) from the service's seeded stream, as Resend's are.
fn email_id(inner: &mut Inner<MessagesState>) -> String {
    let mut bytes: [u8; 16] = inner.rng.random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &hex[..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..])
}

/// The commit of a send: the email is accepted, and unless the commit only pretends
/// (`silent_noop`) its deliveries are scheduled; those due now land before the answer.
pub(crate) fn accept(
    inner: &mut Inner<MessagesState>,
    mode: Mode,
    stamp: &Stamp,
    sent: Outgoing,
) -> FakeResponse {
    deliver_due(inner, stamp.now_ms);
    let id = email_id(inner);
    let first_ms = stamp.now_ms.max(sent.arrived_ms + sent.deliver_after_ms.unwrap_or(0));
    let again_ms = sent.redeliver_after_ms.map(|after| first_ms.max(sent.arrived_ms + after));
    let email = Email {
        id: id.clone(),
        sent,
        created_ms: stamp.now_ms,
        delivers_at_ms: (mode == Mode::Apply).then_some(first_ms),
        key: stamp.key.clone(),
        request_id: stamp.request_id.clone(),
    };
    let index = inner.state.emails.len();
    if mode == Mode::Apply {
        for recipient in email.recipients() {
            inner
                .state
                .schedule(first_ms, Delivery { email: index, recipient: recipient.clone(), again: false });
            if let Some(at) = again_ms {
                inner.state.schedule(at, Delivery { email: index, recipient, again: true });
            }
        }
    }
    inner.state.by_id.insert(id.clone(), index);
    inner.state.emails.push(email);
    deliver_due(inner, stamp.now_ms);
    FakeResponse::json(200, &json!({"id": id}))
}

/// Makes every delivery due by `now_ms`, in the order they were due, each stamped with its
/// due time: a message in its inbox, and its effect in the ledger.
pub(crate) fn deliver_due(inner: &mut Inner<MessagesState>, now_ms: u64) {
    while let Some(entry) = inner.state.pending.first_entry() {
        let (due_ms, _) = *entry.key();
        if due_ms > now_ms {
            break;
        }
        let delivery = entry.remove();
        let id = inner.new_id("msg_", 20);
        let Some(email) = inner.state.emails.get(delivery.email) else { continue };
        let mut params = json!({
            "to": delivery.recipient,
            "from": address_of(&email.sent.from).unwrap_or_default(),
            "subject": email.sent.subject,
            "body": email.sent.text.clone().or_else(|| email.sent.html.clone()).unwrap_or_default(),
        });
        // The caller's own marks, only when it made some: a careful sender's read-back key
        // (the reference executor's `X-Twice-Intent` header), where the checker can read it.
        if !email.sent.headers.is_empty() {
            params["headers"] = json!(email.sent.headers);
        }
        if !email.sent.tags.is_empty() {
            params["tags"] = email.sent.tags_json();
        }
        if delivery.again {
            params[PROVIDER_REDELIVERY] = json!(true);
        }
        let effect = Effect {
            seq: 0,
            at_ms: due_ms,
            kind: DELIVERED.into(),
            object_id: email.id.clone(),
            params,
            idempotency_key: email.key.clone(),
            fencing_token: None,
            request_id: email.request_id.clone(),
        };
        inner.ledger.record(effect);
        inner.state.inboxes.entry(delivery.recipient).or_default().push(Received {
            id,
            email: delivery.email,
            received_ms: due_ms,
        });
    }
}

/// Resend's email ids are UUIDs; anything else is refused before it is looked for.
pub(crate) fn check_email_id(id: &str) -> Result<(), ApiError> {
    let groups: Vec<&str> = id.split('-').collect();
    let shape = [8, 4, 4, 4, 12];
    let uuid = groups.len() == 5
        && groups.iter().zip(shape).all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
    if uuid { Ok(()) } else { Err(resend(422, "invalid_parameter", "The `id` must be a valid UUID.")) }
}

/// `GET /emails/{id}`, as of `visible_until_ms`.
pub(crate) fn retrieve(inner: &mut Inner<MessagesState>, id: &str, visible_until_ms: u64) -> FakeResponse {
    let found = inner.state.by_id.get(id).and_then(|i| inner.state.emails.get(*i));
    match found.filter(|e| e.created_ms <= visible_until_ms) {
        Some(email) => FakeResponse::json(200, &email.to_json(visible_until_ms)),
        None => super::answer::error_body(&resend(404, "not_found", "Email not found")),
    }
}

/// A mailbox read: whose inbox, how many, after which message.
#[derive(Debug, Clone)]
pub(crate) struct ListQuery {
    address: String,
    limit: usize,
    after: Option<String>,
}

pub(crate) fn parse_list(req: &FakeRequest, address: &str) -> Result<ListQuery, ApiError> {
    let Some(address) = address_of(address).filter(|a| a == &address.trim().to_ascii_lowercase()) else {
        return Err(invalid(format!(
            "`{address}` is not an email address: a mailbox is read by its address."
        )));
    };
    let mut query = ListQuery { address, limit: PAGE_MAX, after: None };
    for (name, value) in req.query_pairs() {
        match name.as_str() {
            "limit" => {
                query.limit = value.parse().ok().filter(|n| (1..=PAGE_MAX).contains(n)).ok_or_else(|| {
                    invalid(format!("Invalid `limit`: an integer from 1 to {PAGE_MAX}, got {value:?}."))
                })?;
            }
            "after" => query.after = Some(value),
            other => return Err(invalid(format!("Unknown query parameter `{other}`."))),
        }
    }
    Ok(query)
}

/// The messages in `query.address`'s inbox as of `visible_until_ms`, oldest first.
pub(crate) fn list(
    inner: &mut Inner<MessagesState>,
    query: &ListQuery,
    visible_until_ms: u64,
) -> FakeResponse {
    let state = &inner.state;
    let visible: Vec<&Received> = state
        .inboxes
        .get(&query.address)
        .map(|inbox| inbox.iter().filter(|m| m.received_ms <= visible_until_ms).collect())
        .unwrap_or_default();
    let start = match &query.after {
        None => 0,
        Some(after) => match visible.iter().position(|m| &m.id == after) {
            Some(i) => i + 1,
            None => {
                return super::answer::error_body(&invalid(format!(
                    "`after` names no message of this mailbox: {after}"
                )));
            }
        },
    };
    let page: Vec<Value> = visible[start..]
        .iter()
        .take(query.limit)
        .filter_map(|m| state.emails.get(m.email).map(|email| message_json(m, email, &query.address)))
        .collect();
    let has_more = visible.len() > start + page.len();
    FakeResponse::json(
        200,
        &json!({"object": "list", "mailbox": query.address, "has_more": has_more, "data": page}),
    )
}

fn message_json(received: &Received, email: &Email, address: &str) -> Value {
    json!({
        "object": "message",
        "id": received.id,
        "email_id": email.id,
        "message_id": format!("<{}@twice.invalid>", email.id),
        "from": email.sent.from,
        TO_FIELD: address,
        "subject": email.sent.subject,
        "text": email.sent.text,
        "html": email.sent.html,
        "headers": email.sent.headers,
        "tags": email.sent.tags_json(),
        // A message the provider delivered twice shows twice, with the same `message_id`,
        // as it does in a real inbox; only the ledger marks the second as the provider's.
        "received_at": iso_date(received.received_ms),
    })
}
