//! Messages: an email API (Resend's) and the recipients' inboxes, read through a test mailbox.
//!
//! `POST /emails` with JSON `{from, to, subject, html | text, cc, bcc, reply_to, headers,
//! tags}` and `Authorization: Bearer re_...` answers `{"id": "<uuid>"}`; `GET /emails/{id}`
//! answers the email with its `last_event`. Errors are Resend's `{"statusCode", "message",
//! "name"}`; `Idempotency-Key` follows Resend's rules (1 to 256 characters, kept 24 hours; the
//! same key with another payload is 409 `invalid_idempotent_request`, one still in flight 409
//! `concurrent_idempotent_requests`). `docs/messages.md` lists the facts and their sources.
//!
//! The answer is not the effect. An accepted message is *delivered* into each recipient's
//! inbox, and that delivery is what enters the ledger (`message.delivered`, one effect per
//! recipient): at once, late (`deliver_late`), twice (`redeliver`, the second effect with
//! `params.provider_redelivery = true`) or never (`silent_noop`: the API answers 200 and even
//! reports the email `delivered`, as a provider does when the receiving server took it and
//! lost it). Deliveries due by now happen lazily, whenever the fake is asked anything and
//! whenever its ledger is read ([`Messages::deliver_due`]), stamped with the time they were
//! due, as the chain mines its blocks.
//!
//! The inboxes are twice's own test mailbox, modelled on the read APIs of test-mailbox
//! services (Mailpit, MailSlurp, Mailtrap): `GET /mailboxes/{address}/messages` lists what
//! landed in `address`'s inbox, oldest first, each message with the provider's email id, its
//! subject, its bodies and its headers. It is read through the shared pipeline, so a
//! `stale_read` makes it lag behind deliveries. It needs no API key. (Resend's own `/inboxes`
//! API is another thing, inboxes for receiving on one's own domain; the path keeps clear of it.)

mod address;
mod answer;
mod mailbox;
mod send;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

pub use self::mailbox::MessagesState;
use crate::clock::ServiceClock;
use crate::core::{Outcome, ServiceCore, Shape};
use crate::files::http::percent_decode;
use crate::wire::{Disposition, FakeRequest};
use answer::{error_body, not_found, wrong_method};
use vocabulary::contract::Contract;

/// The service's name in rules, ledgers and URLs files.
pub const NAME: &str = "messages";

/// The effect a delivery makes.
pub const DELIVERED: &str = "message.delivered";

/// The rule field that holds a mailbox's address on a read of it (beside the send's own
/// `to`), so that `where = { to = "ada@example.com" }` aims at one recipient's sends and reads.
pub const TO_FIELD: &str = "to";

/// The messages fake. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Messages {
    core: Arc<ServiceCore<MessagesState>>,
}

/// What a request asks for.
enum Route {
    Send,
    Retrieve(String),
    Mailbox(String),
    WrongMethod,
    Unknown,
}

fn route(req: &FakeRequest) -> Route {
    let path = req.path.trim_end_matches('/');
    let method = req.method.as_str();
    if path == "/emails" {
        return if method == "POST" { Route::Send } else { Route::WrongMethod };
    }
    if let Some(id) = path.strip_prefix("/emails/").filter(|id| !id.is_empty() && !id.contains('/')) {
        return if method == "GET" { Route::Retrieve(id.to_string()) } else { Route::WrongMethod };
    }
    let mailbox = path
        .strip_prefix("/mailboxes/")
        .and_then(|rest| rest.strip_suffix("/messages"))
        .filter(|address| !address.is_empty() && !address.contains('/'));
    if let Some(address) = mailbox {
        return if method == "GET" {
            Route::Mailbox(percent_decode(address).unwrap_or_else(|| address.to_string()))
        } else {
            Route::WrongMethod
        };
    }
    Route::Unknown
}

impl Messages {
    pub fn new(clock: ServiceClock, seed: u64) -> Self {
        let shape = Shape { error: error_body, stamp: |_, _| {} };
        Messages { core: Arc::new(ServiceCore::new(NAME, clock, seed, Contract::messages_default(), shape)) }
    }

    /// Rules, contract, clock, ledger and journal.
    pub fn core(&self) -> &Arc<ServiceCore<MessagesState>> {
        &self.core
    }

    /// Delivers every message due by now into its inboxes, recording each delivery in the
    /// ledger. Deliveries happen lazily, when a request arrives and when the ledger is read,
    /// so this is what makes the ledger current.
    pub fn deliver_due(&self) {
        let now_ms = self.core.clock.now_ms();
        mailbox::deliver_due(&mut self.core.lock(), now_ms);
    }

    /// Deliveries accepted and not yet made (late ones, and the provider's second ones).
    pub fn pending_deliveries(&self) -> usize {
        self.core.lock().state.pending()
    }

    /// Fields a rule can match: the send's top-level JSON fields (`to` as the address when it
    /// is one, or the addresses joined by `,`), the query, and on a mailbox read its address
    /// as `to`.
    pub fn fields(req: &FakeRequest) -> BTreeMap<String, String> {
        let mut fields: BTreeMap<String, String> = req.query_pairs().into_iter().collect();
        if let Route::Mailbox(address) = route(req) {
            fields.insert(TO_FIELD.into(), address.to_ascii_lowercase());
        }
        if let Ok(Value::Object(body)) = serde_json::from_slice::<Value>(&req.body) {
            for (k, v) in body {
                let text = match v {
                    Value::String(s) => Some(s),
                    Value::Number(n) => Some(n.to_string()),
                    Value::Bool(b) => Some(b.to_string()),
                    Value::Array(items) if items.iter().all(Value::is_string) => {
                        Some(items.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","))
                    }
                    _ => None,
                };
                if let Some(text) = text {
                    fields.insert(k, text);
                }
            }
        }
        fields
    }

    pub async fn handle(&self, req: FakeRequest) -> Disposition {
        self.deliver_due();
        if req.path.starts_with("/__twice") {
            let response = self.core.control(&req, |_, _| Err("messages has nothing to seed".into()));
            return Disposition::Respond(response);
        }
        let route = route(&req);
        let ctx = self.core.begin(&req, Self::fields, matches!(route, Route::Send));
        let _abandoned = self.core.watch(&ctx);
        if let Some(done) = self.core.intercept(&ctx, &req) {
            return done;
        }
        let arrived_ms = self.core.clock.now_ms();
        let clock = self.core.clock.clone();
        let outcome = match route {
            Route::Send => {
                match send::authorize(&req).and_then(|()| send::prepare(&req, &ctx.plan, arrived_ms)) {
                    Ok((fingerprint, commit)) => self.core.write(&ctx, fingerprint, commit).await,
                    Err(e) => Outcome::of(self.core.error(&e)),
                }
            }
            Route::Retrieve(id) => match send::authorize(&req).and_then(|()| mailbox::check_email_id(&id)) {
                Ok(()) => {
                    self.core
                        .read(&ctx, move |inner, until| {
                            mailbox::deliver_due(inner, clock.now_ms());
                            mailbox::retrieve(inner, &id, until)
                        })
                        .await
                }
                Err(e) => Outcome::of(self.core.error(&e)),
            },
            Route::Mailbox(address) => match mailbox::parse_list(&req, &address) {
                Ok(query) => {
                    self.core
                        .read(&ctx, move |inner, until| {
                            mailbox::deliver_due(inner, clock.now_ms());
                            mailbox::list(inner, &query, until)
                        })
                        .await
                }
                Err(e) => Outcome::of(self.core.error(&e)),
            },
            Route::WrongMethod => Outcome::of(self.core.error(&wrong_method())),
            Route::Unknown => Outcome::of(self.core.error(&not_found())),
        };
        self.core.conclude(&ctx, &req, outcome).await
    }
}
