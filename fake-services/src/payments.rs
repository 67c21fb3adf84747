//! Payments: Stripe-style PaymentIntents and refunds.
//!
//! `POST /v1/refunds` (form-encoded), `GET /v1/refunds/{id}`, `GET /v1/refunds` filtered by
//! `payment_intent` or `charge`; PaymentIntents created, retrieved, confirmed and canceled
//! (`intents.rs`); with Stripe's error envelope, `Request-Id`, 401 without a key and Stripe's
//! idempotency rules (see `docs/faults.md` and the wire reference). Payment intents to refund
//! are created through the API or seeded through the control API (a seeded intent has
//! succeeded).

mod intents;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::clock::ServiceClock;
use crate::contract::Contract;
use crate::core::{ApiError, Check, Commit, Inner, Mode, Outcome, ServiceCore, Shape, Stamp};
use crate::form;
use crate::record::{Effect, IdMap};
use crate::wire::{Disposition, FakeRequest, FakeResponse};

/// The service's name in rules, ledgers and URLs files.
pub const NAME: &str = "payments";

/// A seeded payment intent that refunds can draw on: it has succeeded, and its whole amount
/// was received on `charge`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentIntent {
    pub id: String,
    pub charge: String,
    pub amount: u64,
    pub currency: String,
}

#[derive(Debug, Clone)]
struct Refund {
    id: String,
    amount: u64,
    charge: String,
    payment_intent: String,
    currency: String,
    metadata: Map<String, Value>,
    reason: Option<String>,
    created_ms: u64,
}

/// A refund as Stripe shows it, serialized straight from the refund (no JSON tree between).
/// Fields in name order, as a `serde_json::Value` object writes them: the bytes on the wire
/// stay what they were when this was built as one.
#[derive(Serialize)]
struct RefundObject<'a> {
    amount: u64,
    balance_transaction: Option<()>,
    charge: &'a str,
    created: u64,
    currency: &'a str,
    id: &'a str,
    metadata: &'a Map<String, Value>,
    object: &'static str,
    payment_intent: &'a str,
    reason: Option<&'a str>,
    receipt_number: Option<()>,
    source_transfer_reversal: Option<()>,
    status: &'static str,
    transfer_reversal: Option<()>,
}

impl Refund {
    fn object(&self) -> RefundObject<'_> {
        RefundObject {
            amount: self.amount,
            balance_transaction: None,
            charge: &self.charge,
            created: self.created_ms / 1000,
            currency: &self.currency,
            id: &self.id,
            metadata: &self.metadata,
            object: "refund",
            payment_intent: &self.payment_intent,
            reason: self.reason.as_deref(),
            receipt_number: None,
            source_transfer_reversal: None,
            status: "succeeded",
            transfer_reversal: None,
        }
    }

    #[cfg(test)]
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "refund",
            "amount": self.amount,
            "balance_transaction": null,
            "charge": self.charge,
            "created": self.created_ms / 1000,
            "currency": self.currency,
            "metadata": self.metadata,
            "payment_intent": self.payment_intent,
            "reason": self.reason,
            "receipt_number": null,
            "source_transfer_reversal": null,
            "status": "succeeded",
            "transfer_reversal": null,
        })
    }
}

/// A page of refunds, fields in name order as [`RefundObject`]'s.
#[derive(Serialize)]
struct RefundList<'a> {
    data: Vec<RefundObject<'a>>,
    has_more: bool,
    object: &'static str,
    url: &'static str,
}

/// The payments fake's objects.
#[derive(Debug, Default)]
pub struct PaymentsState {
    /// Every PaymentIntent, created or seeded, with its versions.
    intents: BTreeMap<String, intents::History>,
    /// Charge id to payment intent id, for every intent that has been charged.
    charges: BTreeMap<String, String>,
    /// In creation order.
    refunds: Vec<Refund>,
    /// Refund id to its index in `refunds` (only ever looked up by id).
    by_id: IdMap<usize>,
    /// Amount refunded so far per payment intent, kept as refunds are made so that a create
    /// does not scan every refund while holding the service's lock.
    refunded: BTreeMap<String, u64>,
    /// Restricted keys (`rk_...`) and the permissions each was given; any other key may do
    /// everything, as a secret key may.
    restricted_keys: BTreeMap<String, BTreeSet<Permission>>,
}

/// A restricted key's permission on one resource, by Stripe's name for it. A write
/// permission includes the read one, as Stripe's "Write" does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Permission {
    RefundRead,
    RefundWrite,
    PaymentIntentRead,
    PaymentIntentWrite,
}

impl Permission {
    const ALL: [Permission; 4] = [
        Permission::RefundRead,
        Permission::RefundWrite,
        Permission::PaymentIntentRead,
        Permission::PaymentIntentWrite,
    ];

    /// Stripe's name, as its 403 says which permission is missing.
    pub fn name(self) -> &'static str {
        match self {
            Permission::RefundRead => "rak_refund_read",
            Permission::RefundWrite => "rak_refund_write",
            Permission::PaymentIntentRead => "rak_payment_intent_read",
            Permission::PaymentIntentWrite => "rak_payment_intent_write",
        }
    }

    pub fn parse(name: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The write permission that includes this one.
    fn write(self) -> Permission {
        match self {
            Permission::RefundRead | Permission::RefundWrite => Permission::RefundWrite,
            Permission::PaymentIntentRead | Permission::PaymentIntentWrite => Permission::PaymentIntentWrite,
        }
    }
}

impl PaymentsState {
    fn refunded(&self, payment_intent: &str) -> u64 {
        self.refunded.get(payment_intent).copied().unwrap_or(0)
    }

    fn add(&mut self, refund: Refund) {
        match self.refunded.get_mut(&refund.payment_intent) {
            Some(refunded) => *refunded += refund.amount,
            None => {
                self.refunded.insert(refund.payment_intent.clone(), refund.amount);
            }
        }
        self.by_id.insert(refund.id.clone(), self.refunds.len());
        self.refunds.push(refund);
    }
}

/// The payments fake. Cheap to clone; clones share state.
#[derive(Clone)]
pub struct Payments {
    core: Arc<ServiceCore<PaymentsState>>,
}

const REASONS: &[&str] = &["duplicate", "fraudulent", "requested_by_customer"];
const CREATE_PARAMS: &[&str] =
    &["amount", "charge", "currency", "expand", "instructions_email", "metadata", "payment_intent", "reason"];
const LIST_PARAMS: &[&str] =
    &["charge", "ending_before", "expand", "limit", "payment_intent", "starting_after"];
const KEY_CHARS_MAX: usize = 255;

impl Payments {
    pub fn new(clock: ServiceClock, seed: u64) -> Self {
        let shape =
            Shape { error: stripe_error, stamp: |r, id| r.headers.push(("Request-Id".into(), id.into())) };
        let core = ServiceCore::new(NAME, clock, seed, Contract::payments_default(), shape);
        Payments { core: Arc::new(core.reading_refusals(refused_params)) }
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
            let now_ms = self.core.clock.now_ms();
            let response = self.core.control(&req, |inner, body| seed_from_json(inner, body, now_ms));
            return Disposition::Respond(response);
        }
        let is_write = req.method == "POST";
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
        let allowed = authorize(&req).and_then(|key| self.permitted(key, &route));
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
                Route::List => match parse_list(&req) {
                    Ok(query) => self.core.read(&ctx, |inner, until| list(inner, &query, until)).await,
                    Err(e) => Outcome::of(self.core.error(&e)),
                },
                Route::Unknown => Outcome::of(self.core.error(&ApiError::new(
                    404,
                    "invalid_request_error",
                    format!("Unrecognized request URL ({}: {}).", req.method, req.path),
                ))),
            },
        };
        self.core.conclude(&ctx, &req, outcome).await
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
            Route::RetrieveIntent(_) => Permission::PaymentIntentRead,
            Route::Unknown => return Ok(()),
        };
        // Only an `rk_` key can be restricted (seeding refuses any other): a secret key needs
        // no look at the state, nor the lock every request of the service waits for.
        if !key.starts_with("rk_") {
            return Ok(());
        }
        let inner = self.core.lock();
        let Some(granted) = inner.state.restricted_keys.get(key) else { return Ok(()) };
        if granted.contains(&needed) || granted.contains(&needed.write()) {
            return Ok(());
        }
        Err(ApiError::new(
            403,
            "invalid_request_error",
            format!(
                "The provided key '{}' does not have the required permissions for this endpoint on account '{ACCOUNT}'. Having the '{}' permission would allow this request to continue.",
                redacted(key),
                needed.name()
            ),
        ))
    }
}

/// A refund create, validated as far as it can be without the service's state.
struct Prepared {
    fingerprint: String,
    /// That its payment intent (or charge) exists, and that the two agree.
    check: Check<PaymentsState>,
    commit: Commit<PaymentsState>,
}

/// Validates a create request; which intent it draws on, and what is left for the commit,
/// depend on state, read under the lock that also looks up its key.
fn prepare_create(req: &FakeRequest) -> Result<Prepared, ApiError> {
    check_key(req)?;
    let params = form::decode(&req.body).map_err(ApiError::invalid)?;
    unknown_parameters(&params, CREATE_PARAMS)?;
    let amount = match params.get("amount") {
        None => None,
        Some(v) => Some(positive_integer(v, "amount")?),
    };
    let reason = match params.get("reason") {
        None => None,
        Some(Value::String(r)) if REASONS.contains(&r.as_str()) => Some(r.clone()),
        Some(_) => {
            return Err(ApiError::invalid(
                "Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer",
            )
            .param("reason"));
        }
    };
    let metadata = match params.get("metadata") {
        None => Map::new(),
        Some(Value::Object(m)) => check_metadata(m)?,
        Some(Value::String(s)) if s.is_empty() => Map::new(),
        Some(_) => return Err(ApiError::invalid("Invalid object").param("metadata")),
    };
    let pi = optional_string(&params, "payment_intent")?;
    let charge = optional_string(&params, "charge")?;
    if let Some(currency) = optional_string(&params, "currency")?
        && (currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_alphabetic()))
    {
        return Err(ApiError::invalid(format!("Invalid currency: {currency}")).param("currency"));
    }
    // The parameters as compact JSON, names in order: equal exactly when the parameters
    // are. Written straight from the map (`Value`'s `Display` goes through a formatter).
    let fingerprint = serde_json::to_string(&params).unwrap_or_else(|_| Value::Object(params).to_string());
    let (checked_pi, checked_charge) = (pi.clone(), charge.clone());
    let check: Check<PaymentsState> = Box::new(move |inner: &Inner<PaymentsState>| {
        drawn_on(&inner.state, checked_pi.as_deref(), checked_charge.as_deref()).map(|_| ())
    });
    let commit: Commit<PaymentsState> =
        Box::new(move |inner: &mut Inner<PaymentsState>, mode: Mode, stamp: &Stamp| {
            // Checked in this hold of the lock, or in an earlier one when a latency fault waits
            // in between: only a reset since then finds it gone.
            match drawn_on(&inner.state, pi.as_deref(), charge.as_deref()).map(str::to_string) {
                Ok(intent) => create_refund(inner, mode, stamp, &intent, amount, reason, metadata),
                Err(e) => stripe_error(&e),
            }
        });
    Ok(Prepared { fingerprint, check, commit })
}

/// The payment intent a refund draws on: the one named, or the one the named charge belongs
/// to; both named must agree.
fn drawn_on<'a>(
    state: &'a PaymentsState,
    pi: Option<&'a str>,
    charge: Option<&str>,
) -> Result<&'a str, ApiError> {
    let by_pi = match pi {
        Some(id) if state.intents.contains_key(id) => Some(id),
        Some(id) => return Err(missing("payment_intent", id)),
        None => None,
    };
    let by_charge = match charge {
        Some(ch) => Some(state.charges.get(ch).map(String::as_str).ok_or_else(|| missing("charge", ch))?),
        None => None,
    };
    match (by_pi, by_charge, charge) {
        (Some(a), Some(b), Some(ch)) if a != b => {
            Err(ApiError::invalid(format!("The charge {ch} does not belong to the payment intent {a}."))
                .param("charge"))
        }
        (Some(a), _, _) => Ok(a),
        (None, Some(b), _) => Ok(b),
        (None, None, _) => {
            Err(ApiError::invalid("One of the following parameters is required: charge, payment_intent."))
        }
    }
}

/// What a refused refund asked for: its `payment_intent` and `amount`, as its effect names
/// them. Other writes are no action's.
fn refused_params(req: &FakeRequest) -> Option<Value> {
    if req.path.trim_end_matches('/') != "/v1/refunds" {
        return None;
    }
    let mut params = Map::new();
    for (name, value) in form_urlencoded::parse(&req.body) {
        match name.as_ref() {
            "payment_intent" => params.insert(name.into_owned(), json!(value)),
            "amount" => {
                params.insert(name.into_owned(), value.parse::<u64>().map_or(json!(value), |n| json!(n)))
            }
            _ => None,
        };
    }
    (!params.is_empty()).then_some(Value::Object(params))
}

enum Route {
    Create,
    Retrieve(String),
    List,
    CreateIntent,
    RetrieveIntent(String),
    ConfirmIntent(String),
    CancelIntent(String),
    Unknown,
}

fn route(req: &FakeRequest) -> Route {
    let path = req.path.trim_end_matches('/');
    // `/v1/payment_intents/{id}` and what follows it, split once.
    let intent = path.strip_prefix("/v1/payment_intents/").and_then(|rest| {
        let (id, action) = rest.split_once('/').unwrap_or((rest, ""));
        (!id.is_empty() && !action.contains('/')).then(|| (id.to_string(), action))
    });
    match (req.method.as_str(), path) {
        ("POST", "/v1/refunds") => Route::Create,
        ("GET", "/v1/refunds") => Route::List,
        ("POST", "/v1/payment_intents") => Route::CreateIntent,
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

/// Stripe's limits on an `Idempotency-Key`: at most 255 characters of printable ASCII.
fn check_key(req: &FakeRequest) -> Result<(), ApiError> {
    if let Some(key) = req.header_str("idempotency-key") {
        if key.len() > KEY_CHARS_MAX {
            return Err(ApiError::invalid(format!(
                "Idempotency-Key must be at most {KEY_CHARS_MAX} characters long."
            )));
        }
    } else if req.headers.contains_key("idempotency-key") {
        return Err(ApiError::invalid("Idempotency-Key must be printable ASCII."));
    }
    Ok(())
}

/// The first parameter that is not one of `known`, as Stripe reports it.
fn unknown_parameters(params: &Map<String, Value>, known: &[&str]) -> Result<(), ApiError> {
    match params.keys().find(|name| !known.contains(&name.as_str())) {
        Some(name) => {
            Err(ApiError::invalid(format!("Received unknown parameter: {name}")).param(name.clone()))
        }
        None => Ok(()),
    }
}

/// The account every key belongs to, as Stripe names it in a permission error.
const ACCOUNT: &str = "acct_twice";

/// A key as Stripe shows it in an error: its prefix and its last four characters.
fn redacted(key: &str) -> String {
    let prefix_len = key.match_indices('_').nth(1).map_or(3.min(key.len()), |(at, _)| at + 1);
    let tail_len = 4.min(key.len().saturating_sub(prefix_len));
    let (prefix, tail) = (&key[..prefix_len], &key[key.len() - tail_len..]);
    format!("{prefix}{}{tail}", "*".repeat(key.len() - prefix_len - tail_len))
}

fn seed_restricted_key(
    inner: &mut Inner<PaymentsState>,
    key: &str,
    permissions: &[Permission],
) -> Result<(), String> {
    let printable = key.bytes().all(|b| b.is_ascii_graphic());
    if !key.starts_with("rk_") || key.len() < 8 || key.len() > KEY_CHARS_MAX || !printable {
        return Err(format!(
            "a restricted key is \"rk_\" and at least 5 more printable characters, not \"{key}\""
        ));
    }
    inner.state.restricted_keys.insert(key.to_string(), permissions.iter().copied().collect());
    Ok(())
}

/// The API key of a request, or Stripe's 401 without one.
fn authorize(req: &FakeRequest) -> Result<&str, ApiError> {
    let no_key = || {
        ApiError::new(
            401,
            "invalid_request_error",
            "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
        )
    };
    let Some(value) = req.header_str("authorization") else { return Err(no_key()) };
    let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("Basic ")).map(str::trim);
    match token {
        Some(t) if !t.is_empty() => Ok(t),
        _ => Err(ApiError::new(401, "invalid_request_error", "Invalid API Key provided.")),
    }
}

fn missing(what: &str, id: &str) -> ApiError {
    ApiError::new(404, "invalid_request_error", format!("No such {what}: '{id}'"))
        .code("resource_missing")
        .param(what)
}

fn optional_string(params: &Map<String, Value>, name: &str) -> Result<Option<String>, ApiError> {
    match params.get(name) {
        None => Ok(None),
        Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
        Some(_) => {
            Err(ApiError::invalid(format!("Invalid string: {name} must be a non-empty string")).param(name))
        }
    }
}

fn positive_integer(value: &Value, name: &str) -> Result<u64, ApiError> {
    let text = value.as_str().unwrap_or_default();
    match text.parse::<u64>() {
        Ok(0) => Err(ApiError::invalid("This value must be greater than or equal to 1.").param(name)),
        Ok(n) if n <= 99_999_999 => Ok(n),
        Ok(_) => Err(ApiError::invalid("This value must be less than or equal to 99999999.").param(name)),
        Err(_) => Err(ApiError::invalid(format!("Invalid integer: {text}")).param(name)),
    }
}

fn check_metadata(metadata: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    if metadata.len() > 50 {
        return Err(ApiError::invalid("Metadata can have up to 50 keys.").param("metadata"));
    }
    for (k, v) in metadata {
        let Value::String(v) = v else {
            return Err(ApiError::invalid(format!("Invalid value for metadata[{k}]: must be a string"))
                .param("metadata"));
        };
        if k.len() > 40 || v.len() > 500 {
            return Err(ApiError::invalid(
                "Metadata keys can be up to 40 characters long and values up to 500 characters long.",
            )
            .param(format!("metadata[{k}]")));
        }
    }
    Ok(metadata.clone())
}

fn create_refund(
    inner: &mut Inner<PaymentsState>,
    mode: Mode,
    stamp: &Stamp,
    intent_id: &str,
    amount: Option<u64>,
    reason: Option<String>,
    metadata: Map<String, Value>,
) -> FakeResponse {
    // The intent was there when the request was checked; only a reset in between removes it.
    let Some(intent) = inner.state.intents.get(intent_id).map(|h| h.current()) else {
        return stripe_error(&missing("payment_intent", intent_id));
    };
    // Only a charge that succeeded can be refunded, and at most what it received.
    let Some(charge) = intent.latest_charge.clone().filter(|_| intent.status == intents::Status::Succeeded)
    else {
        return stripe_error(
            &ApiError::invalid(format!(
                "This PaymentIntent ({}) does not have a successful charge to refund.",
                intent.id
            ))
            .param("payment_intent"),
        );
    };
    let remaining = intent.amount_received.saturating_sub(inner.state.refunded(&intent.id));
    let (payment_intent, currency) = (intent.id.clone(), intent.currency.clone());
    let amount = amount.unwrap_or(remaining);
    let refund = Refund {
        id: inner.new_id("re_", 24),
        amount,
        charge,
        payment_intent,
        currency,
        metadata,
        reason,
        created_ms: stamp.now_ms,
    };
    let charge = &refund.charge;
    if mode == Mode::Pretend {
        return FakeResponse::json_of(200, &refund.object());
    }
    if remaining == 0 {
        return stripe_error(
            &ApiError::invalid(format!("Charge {charge} has already been refunded."))
                .code("charge_already_refunded"),
        );
    }
    if amount > remaining {
        return stripe_error(
            &ApiError::invalid(format!(
                "Refund amount ({amount}) is greater than unrefunded amount on charge ({remaining})"
            ))
            .code("amount_too_large")
            .param("amount"),
        );
    }
    let response = FakeResponse::json_of(200, &refund.object());
    inner.ledger.record(Effect {
        seq: 0,
        at_ms: stamp.now_ms,
        kind: "refund.created".into(),
        object_id: refund.id.clone(),
        params: refund_params(&refund),
        idempotency_key: stamp.key.clone(),
        fencing_token: None,
        request_id: stamp.request_id.clone(),
    });
    inner.state.add(refund);
    response
}

/// A refund effect's parameters, built field by field (the value `json!` would make of them,
/// without serializing each field into a value first).
fn refund_params(refund: &Refund) -> Value {
    let mut params = Map::new();
    params.insert("amount".into(), Value::from(refund.amount));
    params.insert("charge".into(), Value::String(refund.charge.clone()));
    params.insert("currency".into(), Value::String(refund.currency.clone()));
    params.insert("metadata".into(), Value::Object(refund.metadata.clone()));
    params.insert("payment_intent".into(), Value::String(refund.payment_intent.clone()));
    params.insert("reason".into(), refund.reason.clone().map_or(Value::Null, Value::String));
    Value::Object(params)
}

fn retrieve(inner: &mut Inner<PaymentsState>, id: &str, visible_until_ms: u64) -> FakeResponse {
    let found = inner.state.by_id.get(id).and_then(|i| inner.state.refunds.get(*i));
    match found.filter(|r| r.created_ms <= visible_until_ms) {
        Some(r) => FakeResponse::json_of(200, &r.object()),
        None => stripe_error(&missing("refund", id).param("id")),
    }
}

#[derive(Debug, Default)]
struct ListQuery {
    payment_intent: Option<String>,
    charge: Option<String>,
    limit: usize,
    starting_after: Option<String>,
    ending_before: Option<String>,
}

fn parse_list(req: &FakeRequest) -> Result<ListQuery, ApiError> {
    let mut query = ListQuery { limit: 10, ..ListQuery::default() };
    for (name, value) in req.query_pairs() {
        match name.as_str() {
            "payment_intent" => query.payment_intent = Some(value),
            "charge" => query.charge = Some(value),
            "starting_after" => query.starting_after = Some(value),
            "ending_before" => query.ending_before = Some(value),
            "limit" => {
                query.limit = match value.parse::<usize>() {
                    Ok(n) if (1..=100).contains(&n) => n,
                    _ => {
                        return Err(ApiError::invalid(format!(
                            "Invalid limit: must be an integer between 1 and 100, got {value}"
                        ))
                        .param("limit"));
                    }
                }
            }
            n if n.starts_with("expand") => {}
            _ if LIST_PARAMS.contains(&name.as_str()) => {}
            _ => return Err(ApiError::invalid(format!("Received unknown parameter: {name}")).param(name)),
        }
    }
    if query.starting_after.is_some() && query.ending_before.is_some() {
        return Err(ApiError::invalid(
            "You may only specify one of these parameters: ending_before, starting_after.",
        ));
    }
    Ok(query)
}

fn list(inner: &mut Inner<PaymentsState>, query: &ListQuery, visible_until_ms: u64) -> FakeResponse {
    // Newest first, as Stripe lists.
    let matching: Vec<&Refund> = inner
        .state
        .refunds
        .iter()
        .rev()
        .filter(|r| r.created_ms <= visible_until_ms)
        .filter(|r| query.payment_intent.as_ref().is_none_or(|p| &r.payment_intent == p))
        .filter(|r| query.charge.as_ref().is_none_or(|c| &r.charge == c))
        .collect();
    // The page is the `limit` items next to the cursor; `has_more` says whether the list goes
    // on beyond the page in the direction of travel.
    let (page, has_more): (Vec<&Refund>, bool) = if let Some(after) = &query.starting_after {
        match matching.iter().position(|r| &r.id == after) {
            Some(i) => {
                let rest = &matching[i + 1..];
                (rest.iter().take(query.limit).copied().collect(), rest.len() > query.limit)
            }
            None => return stripe_error(&missing("refund", after).param("starting_after")),
        }
    } else if let Some(before) = &query.ending_before {
        match matching.iter().position(|r| &r.id == before) {
            Some(i) => (matching[i.saturating_sub(query.limit)..i].to_vec(), i > query.limit),
            None => return stripe_error(&missing("refund", before).param("ending_before")),
        }
    } else {
        (matching.iter().take(query.limit).copied().collect(), matching.len() > query.limit)
    };
    let data = page.iter().map(|r| r.object()).collect();
    FakeResponse::json_of(200, &RefundList { data, has_more, object: "list", url: "/v1/refunds" })
}

fn seed_intent(
    inner: &mut Inner<PaymentsState>,
    id: Option<&str>,
    amount: u64,
    currency: &str,
    now_ms: u64,
) -> Result<PaymentIntent, String> {
    if amount == 0 {
        return Err("a payment intent needs an amount of at least 1".into());
    }
    let id = match id {
        Some(id) if id.is_empty() || id.contains('/') => {
            return Err(format!("invalid payment intent id \"{id}\""));
        }
        Some(id) => id.to_string(),
        None => inner.new_id("pi_", 24),
    };
    if inner.state.intents.contains_key(&id) {
        return Err(format!("payment intent \"{id}\" already exists"));
    }
    let charge = format!("ch_{}", id.strip_prefix("pi_").unwrap_or(&id));
    let intent =
        PaymentIntent { id: id.clone(), charge: charge.clone(), amount, currency: currency.to_string() };
    inner.state.charges.insert(charge.clone(), id.clone());
    inner.state.intents.insert(id.clone(), intents::seeded(id, charge, amount, currency, now_ms));
    Ok(intent)
}

fn seed_from_json(inner: &mut Inner<PaymentsState>, body: &[u8], now_ms: u64) -> Result<Value, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Seed {
        #[serde(default)]
        payment_intents: Vec<SeedIntent>,
        #[serde(default)]
        restricted_keys: Vec<SeedKey>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SeedKey {
        key: String,
        permissions: Vec<String>,
    }
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct SeedIntent {
        id: Option<String>,
        amount: u64,
        #[serde(default = "usd")]
        currency: String,
    }
    fn usd() -> String {
        "usd".into()
    }
    let seed: Seed = serde_json::from_slice(body).map_err(|e| {
        format!(
            "expected {{\"payment_intents\": [{{\"id\": \"pi_1\", \"amount\": 5000}}], \"restricted_keys\": [{{\"key\": \"rk_test_x\", \"permissions\": [\"rak_refund_read\"]}}]}}: {e}"
        )
    })?;
    let mut seeded = Vec::new();
    for s in seed.payment_intents {
        let pi = seed_intent(inner, s.id.as_deref(), s.amount, &s.currency, now_ms)?;
        seeded.push(json!({"id": pi.id, "charge": pi.charge, "amount": pi.amount, "currency": pi.currency}));
    }
    let mut keys = Vec::new();
    for k in seed.restricted_keys {
        let permissions = k
            .permissions
            .iter()
            .map(|name| {
                Permission::parse(name).ok_or_else(|| {
                    let known: Vec<&str> = Permission::ALL.iter().map(|p| p.name()).collect();
                    format!("unknown permission \"{name}\"; known: {}", known.join(", "))
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        seed_restricted_key(inner, &k.key, &permissions)?;
        keys.push(json!({"key": k.key, "permissions": k.permissions}));
    }
    Ok(json!({"payment_intents": seeded, "restricted_keys": keys}))
}

/// Stripe's error envelope, with `Stripe-Should-Retry` where Stripe would send it.
pub fn stripe_error(error: &ApiError) -> FakeResponse {
    let mut body = Map::new();
    body.insert("type".into(), json!(error.kind));
    body.insert("message".into(), json!(error.message));
    if let Some(code) = error.code {
        body.insert("code".into(), json!(code));
    }
    if let Some(param) = &error.param {
        body.insert("param".into(), json!(param));
    }
    let response = FakeResponse::json(error.status, &json!({"error": body}));
    match (error.code, error.status) {
        (Some("idempotency_key_in_use"), _) => response.with_header("Stripe-Should-Retry", "true"),
        (_, 400..=499) => response.with_header("Stripe-Should-Retry", "false"),
        _ => response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refund(reason: Option<&str>, metadata: Map<String, Value>) -> Refund {
        Refund {
            id: "re_1".into(),
            amount: 250,
            charge: "ch_\"x\"".into(),
            payment_intent: "pi_é".into(),
            currency: "usd".into(),
            metadata,
            reason: reason.map(str::to_string),
            created_ms: 1_700_000_123_456,
        }
    }

    /// The typed answers write the bytes a `Value` tree of the same fields writes.
    #[test]
    fn typed_refunds_serialize_as_the_json_tree_did() {
        let mut metadata = Map::new();
        metadata.insert("z".into(), json!("last"));
        metadata.insert("a b".into(), json!("first\n"));
        let refunds = [refund(None, Map::new()), refund(Some("duplicate"), metadata)];
        for r in &refunds {
            assert_eq!(serde_json::to_string(&r.object()).unwrap(), r.to_json().to_string());
        }
        let list = RefundList {
            data: refunds.iter().map(Refund::object).collect(),
            has_more: true,
            object: "list",
            url: "/v1/refunds",
        };
        let tree = json!({"object": "list", "url": "/v1/refunds", "has_more": true,
            "data": refunds.iter().map(Refund::to_json).collect::<Vec<_>>()});
        assert_eq!(serde_json::to_string(&list).unwrap(), tree.to_string());
        for r in &refunds {
            let tree = json!({
                "payment_intent": r.payment_intent,
                "charge": r.charge,
                "amount": r.amount,
                "currency": r.currency,
                "reason": r.reason,
                "metadata": r.metadata,
            });
            assert_eq!(refund_params(r), tree);
        }
    }
}
