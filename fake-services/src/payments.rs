//! Payments: Stripe-style PaymentIntents and refunds.
//!
//! `POST /v1/refunds` (form-encoded), `GET /v1/refunds/{id}`, `GET /v1/refunds` filtered by
//! `payment_intent` or `charge`; PaymentIntents created, retrieved, confirmed and canceled
//! (`intents.rs`) and listed (`GET /v1/payment_intents`); the events of what it did
//! (`GET /v1/events`, `events.rs`); with Stripe's error envelope, `Request-Id`, 401 without a key and Stripe's
//! idempotency rules (see `docs/faults.md` and the wire reference). Payment intents to refund
//! are created through the API or seeded through the control API (a seeded intent has
//! succeeded).
//!
//! The module is split by concept: this file holds the fake itself ([`Payments`]: construction,
//! the state it holds, which route a request is, and its dispatch through the shared
//! pipeline); `refunds.rs` a refund (its object, create and retrieve); `list.rs` the lists of
//! refunds and of PaymentIntents and their pages; `intents.rs` PaymentIntents; `keys.rs` the API key a request carries
//! and what a restricted key may do; `seed.rs` the objects seeded through the control API;
//! and below them `params.rs`, Stripe's checks of parameters and keys, `answer.rs`,
//! Stripe's error envelope, and `json_text.rs`, JSON written by hand for the refund answer.

mod answer;
mod event_log;
mod events;
mod intents;
mod json_text;
mod keys;
mod list;
mod params;
mod refunds;
mod seed;
mod webhooks;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;
use tokio::sync::Notify;

use crate::clock::ServiceClock;
use crate::core::{ApiError, Commit, Inner, Outcome, ServiceCore, Shape};
use crate::record::IdMap;
use crate::wire::{Disposition, FakeRequest, FakeResponse};
use vocabulary::contract::Contract;

// Named by `Payments`' own methods, so they stay where callers have always found them.
pub use keys::Permission;
pub use seed::PaymentIntent;
pub(crate) use webhooks::driver;
pub use webhooks::{
    ATTEMPTS_MAX, DELIVERY_TIMEOUT_MS, ENDPOINTS_MAX, Outgoing, PAY_AFTER_LISTENER_MS, RETRY_AFTER_MS,
    sign as sign_webhook,
};

use answer::stripe_error;
use events::{EVENT_FILTERS, list_events, retrieve_event};
use keys::{authorize, seed_restricted_key, seed_secret_key};
use list::{INTENT_FILTERS, REFUND_FILTERS, list_intents, list_refunds, parse_list};
use refunds::{Prepared, Refund, prepare_create, refused_params, retrieve};
use seed::{seed_from_json, seed_intent};

/// The service's name in rules, ledgers and URLs files.
pub const NAME: &str = "payments";

/// The control route that reports webhook endpoints, deliveries and attempts.
pub const WEBHOOKS_CONTROL_PATH: &str = "/__twice/webhooks";
/// The control route that sends a forged webhook event.
pub const FORGE_CONTROL_PATH: &str = "/__twice/webhooks/forge";

/// The payments fake's objects.
#[derive(Debug, Default)]
pub struct PaymentsState {
    /// Every PaymentIntent, created or seeded, with its versions.
    intents: BTreeMap<String, intents::History>,
    /// The event log, oldest first (`events.rs`).
    events: Vec<event_log::Record>,
    /// Webhook endpoints and the deliveries of events to them (`webhooks.rs`).
    webhooks: webhooks::Webhooks,
    /// Charge id to payment intent id, for every intent that has been charged.
    charges: BTreeMap<String, String>,
    /// In creation order.
    refunds: Vec<Refund>,
    /// Refund id to its index in `refunds` (only ever looked up by id).
    by_id: IdMap<usize>,
    /// Amount refunded so far per payment intent (and the strings its refunds share), kept as
    /// refunds are made so that a create does not scan every refund while holding the
    /// service's lock.
    refunded: BTreeMap<String, refunds::Drawn>,
    /// Restricted keys (`rk_...`) and the permissions each was given; any other key may do
    /// everything, as a secret key may.
    restricted_keys: BTreeMap<String, BTreeSet<Permission>>,
    /// Secret keys (`sk_...`) seeded as the account's own: with `strict_keys`, only these and
    /// the restricted keys are accepted.
    secret_keys: BTreeSet<String>,
    /// Whether a key that was not seeded is refused (401), as the real service refuses a
    /// key it never issued; off, any non-empty key is accepted.
    strict_keys: bool,
}

/// The payments fake. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Payments {
    core: Arc<ServiceCore<PaymentsState>>,
    /// Wakes the delivery task when something may have become due: a write, a control call.
    wake: Arc<Notify>,
}

impl Payments {
    pub fn new(clock: ServiceClock, seed: u64) -> Self {
        let shape =
            Shape { error: stripe_error, stamp: |r, id| r.headers.push(("Request-Id".into(), id.into())) };
        let core = ServiceCore::new(NAME, clock, seed, Contract::payments_default(), shape);
        Payments { core: Arc::new(core.reading_refusals(refused_params)), wake: Arc::new(Notify::new()) }
    }

    /// Rules, contract, clock, ledger and journal.
    pub fn core(&self) -> &Arc<ServiceCore<PaymentsState>> {
        &self.core
    }

    /// Creates a payment intent (and its charge) with `amount` refundable.
    pub fn seed_payment_intent(
        &self,
        id: Option<&str>,
        amount: u64,
        currency: &str,
    ) -> Result<PaymentIntent, String> {
        let now_ms = self.core.clock.now_ms();
        seed_intent(&mut self.core.lock(), id, amount, currency, now_ms)
    }

    /// Makes `key` a restricted key (`rk_...`) with only `permissions`: a request it makes
    /// that needs another is 403, in Stripe's words, before anything is executed.
    pub fn seed_restricted_key(&self, key: &str, permissions: &[Permission]) -> Result<(), String> {
        seed_restricted_key(&mut self.core.lock(), key, permissions)
    }

    /// Makes `key` (`sk_...`) one of the account's secret keys: with strict keys on, one that
    /// is accepted.
    pub fn seed_secret_key(&self, key: &str) -> Result<(), String> {
        seed_secret_key(&mut self.core.lock(), key)
    }

    /// Strict keys: only the seeded secret and restricted keys are accepted, and any other
    /// key is Stripe's 401 for a key it never issued. Off (the default), any non-empty key is.
    pub fn set_strict_keys(&self, strict: bool) {
        self.core.lock().state.strict_keys = strict;
    }

    /// What wakes the delivery task.
    pub(crate) fn wake(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    /// The deliveries due now, marked as being sent, each signed with the wall clock's time
    /// (what the SDKs check a signature's age against); the payments due now are made first.
    /// The delivery task sends them over sockets; the simulation hands them to its executors
    /// in process. Each must be followed by [`Payments::delivery_attempted`].
    pub fn take_due_deliveries(&self) -> Vec<webhooks::Outgoing> {
        let now_ms = self.core.clock.now_ms();
        let wall_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut inner = self.core.lock();
        for due in inner.state.webhooks.take_due_payments(now_ms) {
            let made = if due.forged {
                webhooks::forge_payment(&mut inner.state, &due.payment_intent, now_ms).map(|_| ())
            } else {
                pay(&mut inner, &due.payment_intent, now_ms)
            };
            if let Err(why) = made {
                tracing::warn!(target: "twice::payments", payment_intent = %due.payment_intent, "{why}");
            }
        }
        webhooks::take_due(&mut inner.state, now_ms, wall_s)
    }

    /// Seeds `id` unpaid (`requires_confirmation`, a test card on it) with `amount` to pay.
    pub fn seed_unpaid_intent(&self, id: &str, amount: u64, currency: &str) -> Result<(), String> {
        let now_ms = self.core.clock.now_ms();
        seed::seed_unpaid_intent(&mut self.core.lock(), id, amount, currency, now_ms)
    }

    /// The customer pays `payment_intent` (seeded unpaid) as soon as an app listens for
    /// `payment_intent.succeeded` (an endpoint that wants it is registered), or, `forged`, an
    /// attacker sends a forged `payment_intent.succeeded` for it then. The payment is matched
    /// against the rules as `POST /v1/payment_intents/{id}/confirm`, so that a webhook fault
    /// armed on that path shapes its event's deliveries.
    pub fn pay_once_listened(&self, payment_intent: &str, forged: bool) {
        let now_ms = self.core.clock.now_ms();
        let mut inner = self.core.lock();
        inner.state.webhooks.awaiting.push(webhooks::Awaiting {
            payment_intent: payment_intent.to_string(),
            forged,
            due_ms: None,
        });
        inner.state.webhooks.listening(now_ms);
        drop(inner);
        self.wake.notify_one();
    }

    /// The payments still waiting for an app to listen, by payment intent (forged ones too).
    pub fn awaiting_listener(&self) -> Vec<String> {
        let inner = self.core.lock();
        inner
            .state
            .webhooks
            .awaiting
            .iter()
            .filter(|a| a.due_ms.is_none())
            .map(|a| a.payment_intent.clone())
            .collect()
    }

    /// The payments an app now listens for, due shortly: (payment intent, forged, due time).
    pub fn due_payments(&self) -> Vec<(String, bool, u64)> {
        let inner = self.core.lock();
        let awaiting = &inner.state.webhooks.awaiting;
        awaiting.iter().filter_map(|a| Some((a.payment_intent.clone(), a.forged, a.due_ms?))).collect()
    }

    /// Notes how an attempt of delivery `number` went: the endpoint's status, or why there is
    /// none.
    pub fn delivery_attempted(&self, number: u64, answer: Result<u16, String>) {
        let now_ms = self.core.clock.now_ms();
        self.core.lock().state.webhooks.attempted(number, answer, now_ms);
        self.wake.notify_one();
    }

    /// How long until the next delivery is due (0: due now), if one is waiting.
    pub fn next_delivery_in_ms(&self) -> Option<u64> {
        let now_ms = self.core.clock.now_ms();
        self.core.lock().state.webhooks.next_due_ms().map(|due| due.saturating_sub(now_ms))
    }

    /// The deliveries not yet ended (being sent, or due again), as [`crate::fake::Fake::pending`]
    /// names them: (event id, event type, endpoint URL, attempts made, due time).
    pub fn pending_deliveries(&self) -> Vec<(String, &'static str, String, u32, Option<u64>)> {
        let inner = self.core.lock();
        let state = &inner.state;
        state
            .webhooks
            .unfinished()
            .map(|d| {
                let kind = state.events.get(d.event).map_or("forged", |r| r.what.kind());
                let url =
                    state.webhooks.endpoints.get(d.endpoint).map_or_else(String::new, |e| e.url.clone());
                let due = match d.standing {
                    webhooks::Standing::Due(at) => Some(at),
                    _ => None,
                };
                let id = match &d.signed {
                    webhooks::Signed::Forged { event_id, .. } => event_id.to_string(),
                    _ => events::event_id(d.event),
                };
                (id, kind, url, d.attempts, due)
            })
            .collect()
    }

    /// Fields a rule can match: form fields (nested ones as `metadata[k]`) and query parameters.
    pub fn fields(req: &FakeRequest) -> BTreeMap<String, String> {
        let mut fields: BTreeMap<String, String> = req.query_pairs().into_iter().collect();
        if req.method == "POST" {
            fields.extend(form_urlencoded::parse(&req.body).into_owned());
        }
        fields
    }

    pub async fn handle(&self, req: FakeRequest) -> Disposition {
        if req.path.starts_with("/__twice") {
            return Disposition::Respond(self.control(&req));
        }
        let is_write = req.method == "POST" || req.method == "DELETE";
        let ctx = self.core.begin(&req, Self::fields, is_write);
        let _abandoned = self.core.watch(&ctx);
        if let Some(done) = self.core.intercept(&ctx, &req) {
            return done;
        }
        let ctx_ref = &ctx;
        let write = |prepared: Result<(String, Commit<PaymentsState>), ApiError>| async move {
            match prepared {
                Ok((fingerprint, commit)) => self.core.write(ctx_ref, fingerprint, commit).await,
                Err(e) => Outcome::of(self.core.error(&e)),
            }
        };
        let exists = |id: &str| self.core.lock().state.intents.contains_key(id);
        let route = route(&req);
        let allowed = authorize(&req)
            .and_then(|key| keys::accepted(&self.core, key))
            .and_then(|key| self.permitted(key, &route));
        let outcome = match allowed {
            Err(e) => Outcome::of(self.core.error(&e)),
            Ok(()) => match route {
                Route::Create => match prepare_create(&req) {
                    Ok(Prepared { fingerprint, check, commit }) => {
                        self.core.write_checked(ctx_ref, fingerprint, Some(check), commit).await
                    }
                    Err(e) => Outcome::of(self.core.error(&e)),
                },
                Route::Retrieve(id) => self.core.read(&ctx, |inner, until| retrieve(inner, &id, until)).await,
                Route::CreateIntent => write(intents::prepare_create(&req)).await,
                Route::RetrieveIntent(id) => match intents::check_retrieve(&req) {
                    Ok(()) => self.core.read(&ctx, |inner, until| intents::retrieve(inner, &id, until)).await,
                    Err(e) => Outcome::of(self.core.error(&e)),
                },
                Route::ConfirmIntent(id) => {
                    let exists = exists(&id);
                    write(intents::prepare_confirm(&req, id, exists)).await
                }
                Route::CancelIntent(id) => {
                    let exists = exists(&id);
                    write(intents::prepare_cancel(&req, id, exists)).await
                }
                Route::List => match parse_list(&req, REFUND_FILTERS) {
                    Ok(query) => {
                        self.core.read(&ctx, |inner, until| list_refunds(inner, &query, until)).await
                    }
                    Err(e) => Outcome::of(self.core.error(&e)),
                },
                Route::ListIntents => match parse_list(&req, INTENT_FILTERS) {
                    Ok(query) => {
                        self.core.read(&ctx, |inner, until| list_intents(inner, &query, until)).await
                    }
                    Err(e) => Outcome::of(self.core.error(&e)),
                },
                Route::ListEvents => match parse_list(&req, EVENT_FILTERS) {
                    Ok(query) => self.core.read(&ctx, |inner, until| list_events(inner, &query, until)).await,
                    Err(e) => Outcome::of(self.core.error(&e)),
                },
                Route::RetrieveEvent(id) => {
                    self.core.read(&ctx, |inner, until| retrieve_event(inner, &id, until)).await
                }
                Route::CreateEndpoint => write(webhooks::prepare_create(&req)).await,
                Route::UpdateEndpoint(id) => write(webhooks::prepare_update(&req, id)).await,
                Route::DeleteEndpoint(id) => write(webhooks::prepare_delete(&req, id)).await,
                Route::RetrieveEndpoint(id) => {
                    self.core.read(&ctx, |inner, until| webhooks::retrieve_endpoint(inner, &id, until)).await
                }
                Route::ListEndpoints => match parse_list(&req, &[]) {
                    Ok(query) => {
                        self.core
                            .read(&ctx, |inner, until| webhooks::list_endpoints(inner, &query, until))
                            .await
                    }
                    Err(e) => Outcome::of(self.core.error(&e)),
                },
                Route::Unknown => Outcome::of(self.core.error(&ApiError::new(
                    404,
                    "invalid_request_error",
                    format!("Unrecognized request URL ({}: {}).", req.method, req.path),
                ))),
            },
        };
        let done = self.core.conclude(&ctx, &req, outcome).await;
        if is_write {
            self.wake.notify_one();
        }
        done
    }

    /// The control API: the shared routes, and the payments fake's own (its webhooks report,
    /// a forged event).
    fn control(&self, req: &FakeRequest) -> FakeResponse {
        // Whatever a control call changed (a seed, a jumped clock) may make a delivery due.
        self.wake.notify_one();
        let path = req.path.trim_end_matches('/');
        if req.method == "GET" && path == WEBHOOKS_CONTROL_PATH {
            return self.webhooks_report();
        }
        if req.method == "POST" && path == FORGE_CONTROL_PATH {
            return self.forge(&req.body);
        }
        let now_ms = self.core.clock.now_ms();
        self.core.control(req, |inner, body| seed_from_json(inner, body, now_ms))
    }

    /// `POST /__twice/webhooks/forge` with `{"type", "payment_intent"}`: an attacker's event,
    /// sent to every endpoint that wants its type ([`webhooks::forge`]).
    fn forge(&self, body: &[u8]) -> FakeResponse {
        let bad = |message: String| FakeResponse::json(400, &json!({"error": {"message": message}}));
        let forgery: webhooks::Forgery = match serde_json::from_slice(body) {
            Ok(forgery) => forgery,
            Err(e) => {
                return bad(format!(
                    "a forgery is {{\"type\": \"payment_intent.succeeded\", \"payment_intent\": \"pi_...\"}}: {e}"
                ));
            }
        };
        let now_ms = self.core.clock.now_ms();
        let answer = webhooks::forge(&mut self.core.lock().state, &forgery, now_ms);
        self.wake.notify_one();
        match answer {
            Ok(forged) => FakeResponse::json(200, &forged),
            Err(message) => bad(message),
        }
    }

    /// `GET /__twice/webhooks`: each endpoint's id and secret, every delivery and every attempt.
    fn webhooks_report(&self) -> FakeResponse {
        let inner = self.core.lock();
        let mut report = inner.state.webhooks.report(events::event_id);
        if let Some(map) = report.as_object_mut() {
            map.insert("secrets".into(), json!(webhooks::secrets(&inner.state)));
        }
        FakeResponse::json(200, &report)
    }

    /// Whether `key` may make a request of `route`: a restricted key needs the permission
    /// the route's resource asks for. Judged before the request is read any further, as
    /// Stripe does.
    fn permitted(&self, key: &str, route: &Route) -> Result<(), ApiError> {
        let needed = match route {
            Route::Create => Permission::RefundWrite,
            Route::Retrieve(_) | Route::List => Permission::RefundRead,
            Route::CreateIntent | Route::ConfirmIntent(_) | Route::CancelIntent(_) => {
                Permission::PaymentIntentWrite
            }
            Route::RetrieveIntent(_) | Route::ListIntents => Permission::PaymentIntentRead,
            Route::ListEvents | Route::RetrieveEvent(_) => Permission::EventRead,
            Route::CreateEndpoint | Route::UpdateEndpoint(_) | Route::DeleteEndpoint(_) => {
                Permission::WebhookWrite
            }
            Route::RetrieveEndpoint(_) | Route::ListEndpoints => Permission::WebhookRead,
            Route::Unknown => return Ok(()),
        };
        keys::permitted(&self.core, key, needed)
    }
}

/// The customer pays `id` now: the rules are matched as for `POST /v1/payment_intents/{id}/confirm`
/// (their counters move, and a webhook fault among them shapes the event's deliveries; a
/// fault on the request itself has no request to act on), then the intent succeeds.
fn pay(inner: &mut Inner<PaymentsState>, id: &str, now_ms: u64) -> Result<(), String> {
    let path = format!("/v1/payment_intents/{id}/confirm");
    let fields = BTreeMap::from([("payment_intent".to_string(), id.to_string())]);
    let view = vocabulary::rule::RequestView { method: "POST", path: &path, fields: &fields };
    let inner_ref = &mut *inner;
    let plan = inner_ref.engine.plan(&view, &mut inner_ref.rng);
    intents::customer_pays(inner, id, now_ms, plan.webhook)
}

/// Which of the fake's operations a request asks for.
enum Route {
    Create,
    Retrieve(String),
    List,
    CreateIntent,
    RetrieveIntent(String),
    ListIntents,
    ListEvents,
    RetrieveEvent(String),
    ConfirmIntent(String),
    CancelIntent(String),
    CreateEndpoint,
    ListEndpoints,
    RetrieveEndpoint(String),
    UpdateEndpoint(String),
    DeleteEndpoint(String),
    Unknown,
}

fn route(req: &FakeRequest) -> Route {
    let path = req.path.trim_end_matches('/');
    // `/v1/payment_intents/{id}` and what follows it, split once.
    let intent = path.strip_prefix("/v1/payment_intents/").and_then(|rest| {
        let (id, action) = rest.split_once('/').unwrap_or((rest, ""));
        (!id.is_empty() && !action.contains('/')).then(|| (id.to_string(), action))
    });
    let endpoint = path
        .strip_prefix("/v1/webhook_endpoints/")
        .filter(|id| !id.is_empty() && !id.contains('/'))
        .map(str::to_string);
    match (req.method.as_str(), path) {
        ("POST", "/v1/webhook_endpoints") => Route::CreateEndpoint,
        ("GET", "/v1/webhook_endpoints") => Route::ListEndpoints,
        (method, p) if p.starts_with("/v1/webhook_endpoints/") => match (method, endpoint) {
            ("GET", Some(id)) => Route::RetrieveEndpoint(id),
            ("POST", Some(id)) => Route::UpdateEndpoint(id),
            ("DELETE", Some(id)) => Route::DeleteEndpoint(id),
            _ => Route::Unknown,
        },
        ("POST", "/v1/refunds") => Route::Create,
        ("GET", "/v1/refunds") => Route::List,
        ("POST", "/v1/payment_intents") => Route::CreateIntent,
        ("GET", "/v1/payment_intents") => Route::ListIntents,
        ("GET", "/v1/events") => Route::ListEvents,
        ("GET", p) if p.starts_with("/v1/events/") => match &p["/v1/events/".len()..] {
            id if !id.is_empty() && !id.contains('/') => Route::RetrieveEvent(id.to_string()),
            _ => Route::Unknown,
        },
        ("GET", p) if p.starts_with("/v1/payment_intents/") => match intent {
            Some((id, "")) => Route::RetrieveIntent(id),
            _ => Route::Unknown,
        },
        ("POST", p) if p.starts_with("/v1/payment_intents/") => match intent {
            Some((id, "confirm")) => Route::ConfirmIntent(id),
            Some((id, "cancel")) => Route::CancelIntent(id),
            _ => Route::Unknown,
        },
        ("GET", p) => match p.strip_prefix("/v1/refunds/") {
            Some(id) if !id.is_empty() && !id.contains('/') => Route::Retrieve(id.to_string()),
            _ => Route::Unknown,
        },
        _ => Route::Unknown,
    }
}
