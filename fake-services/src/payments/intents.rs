//! PaymentIntents: `POST /v1/payment_intents` (create, optionally confirmed at once),
//! `GET /v1/payment_intents/{id}` (the list, `GET /v1/payment_intents`, is in `list.rs`), `POST /v1/payment_intents/{id}/confirm` and
//! `POST /v1/payment_intents/{id}/cancel`, with Stripe's object, its state machine and its
//! errors.
//!
//! Apart from refunds because an intent has a life of its own: each change of state is a
//! new version of the intent (so that a stale read sees the intent as it was) and, when money
//! or a promise moves, a ledger effect: `payment_intent.created`, `payment_intent.succeeded`
//! (the charge), `payment_intent.canceled`. An intent changes state at most three times, so
//! its versions are bounded by the state machine itself.
//!
//! Every write goes through the shared pipeline like a refund does: the request is checked
//! outside the lock (parameters, the intent's existence), and the commit decides under the
//! lock what the intent's state allows, so two racing confirms cannot both charge.

use serde_json::{Map, Value, json};

use super::PaymentsState;
use super::answer::{missing, stripe_error};
use super::event_log::Happened;
use super::params::{check_key, check_metadata, optional_string, positive_integer, unknown_parameters};
use crate::core::{ApiError, Commit, Inner, Mode, Stamp};
use crate::form;
use crate::wire::{FakeRequest, FakeResponse};
use vocabulary::Effect;

mod seeded;

pub(super) use seeded::{customer_pays, seeded, seeded_unpaid};

/// Where a PaymentIntent is in Stripe's state machine. Only the states this fake reaches:
/// it has no 3-D Secure (`requires_action`), no manual capture (`requires_capture`) and no
/// asynchronous methods (`processing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    RequiresPaymentMethod,
    RequiresConfirmation,
    Succeeded,
    Canceled,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::RequiresPaymentMethod => "requires_payment_method",
            Status::RequiresConfirmation => "requires_confirmation",
            Status::Succeeded => "succeeded",
            Status::Canceled => "canceled",
        }
    }
}

/// One version of a PaymentIntent.
#[derive(Debug, Clone)]
pub(super) struct Intent {
    pub(super) id: String,
    pub(super) amount: u64,
    pub(super) currency: String,
    pub(super) status: Status,
    pub(super) amount_received: u64,
    pub(super) latest_charge: Option<String>,
    pub(super) payment_method: Option<String>,
    pub(super) metadata: Map<String, Value>,
    pub(super) description: Option<String>,
    pub(super) client_secret: String,
    pub(super) created_ms: u64,
    pub(super) canceled_ms: Option<u64>,
    pub(super) cancellation_reason: Option<String>,
}

impl Intent {
    pub(super) fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "payment_intent",
            "amount": self.amount,
            "amount_capturable": 0,
            "amount_details": {"tip": {}},
            "amount_received": self.amount_received,
            "application": null,
            "application_fee_amount": null,
            "automatic_payment_methods": null,
            "canceled_at": self.canceled_ms.map(|ms| ms / 1000),
            "cancellation_reason": self.cancellation_reason,
            "capture_method": "automatic",
            "client_secret": self.client_secret,
            "confirmation_method": "automatic",
            "created": self.created_ms / 1000,
            "currency": self.currency,
            "customer": null,
            "description": self.description,
            "last_payment_error": null,
            "latest_charge": self.latest_charge,
            "livemode": false,
            "metadata": self.metadata,
            "next_action": null,
            "on_behalf_of": null,
            "payment_method": self.payment_method,
            "payment_method_options": {},
            "payment_method_types": ["card"],
            "processing": null,
            "receipt_email": null,
            "review": null,
            "setup_future_usage": null,
            "shipping": null,
            "source": null,
            "statement_descriptor": null,
            "statement_descriptor_suffix": null,
            "status": self.status.as_str(),
            "transfer_data": null,
            "transfer_group": null,
        })
    }
}

/// An intent's versions over service time, oldest first; never empty.
#[derive(Debug, Clone)]
pub(super) struct History {
    /// How many intents the service held before this one was made: its place in creation
    /// order, which breaks ties of `created` in the list.
    number: usize,
    versions: Vec<(u64, Intent)>,
}

impl History {
    pub(super) fn new(number: usize, at_ms: u64, intent: Intent) -> Self {
        History { number, versions: vec![(at_ms, intent)] }
    }

    pub(super) fn number(&self) -> usize {
        self.number
    }

    pub(super) fn current(&self) -> &Intent {
        // `new` makes the first version and versions are only ever pushed.
        &self.versions[self.versions.len() - 1].1
    }

    /// The intent as a read that sees only commits up to `until_ms` finds it.
    pub(super) fn as_of(&self, until_ms: u64) -> Option<&Intent> {
        self.versions.iter().rev().find(|(at_ms, _)| *at_ms <= until_ms).map(|(_, intent)| intent)
    }

    fn push(&mut self, at_ms: u64, intent: Intent) {
        self.versions.push((at_ms, intent));
    }
}

/// The currency whose minimum charge the fake enforces, and that minimum in cents: Stripe
/// refuses a USD PaymentIntent under $0.50 with `amount_too_small`. Other currencies have
/// minimums of their own, which the fake does not model.
const USD_AMOUNT_MIN: u64 = 50;

const CREATE_PARAMS: &[&str] = &[
    "amount",
    "capture_method",
    "confirm",
    "currency",
    "description",
    "expand",
    "metadata",
    "payment_method",
    "payment_method_types",
    "receipt_email",
    "return_url",
];
const CONFIRM_PARAMS: &[&str] = &["expand", "payment_method", "receipt_email", "return_url"];
const CANCEL_PARAMS: &[&str] = &["cancellation_reason", "expand"];
const RETRIEVE_PARAMS: &[&str] = &["client_secret"];
const CANCELLATION_REASONS: &[&str] = &["abandoned", "duplicate", "fraudulent", "requested_by_customer"];

/// What a create asks for, checked.
struct Create {
    amount: u64,
    currency: String,
    confirm: bool,
    payment_method: Option<String>,
    metadata: Map<String, Value>,
    description: Option<String>,
}

/// Checks a create; the commit makes the intent (and charges it when `confirm=true`).
pub(super) fn prepare_create(req: &FakeRequest) -> Result<(String, Commit<PaymentsState>), ApiError> {
    check_key(req)?;
    let params = form::decode(&req.body).map_err(ApiError::invalid)?;
    unknown_parameters(&params, CREATE_PARAMS)?;
    let amount = match params.get("amount") {
        None => return Err(required("amount")),
        Some(v) => positive_integer(v, "amount")?,
    };
    let currency = match optional_string(&params, "currency")? {
        None => return Err(required("currency")),
        Some(c) if c.len() == 3 && c.bytes().all(|b| b.is_ascii_alphabetic()) => c.to_ascii_lowercase(),
        Some(c) => return Err(ApiError::invalid(format!("Invalid currency: {c}")).param("currency")),
    };
    if currency == "usd" && amount < USD_AMOUNT_MIN {
        return Err(ApiError::invalid("Amount must be at least $0.50 usd")
            .code("amount_too_small")
            .param("amount"));
    }
    let confirm = match params.get("confirm") {
        None => false,
        Some(Value::String(v)) if v == "true" => true,
        Some(Value::String(v)) if v == "false" => false,
        Some(v) => {
            let text = v.as_str().unwrap_or_default();
            return Err(ApiError::invalid(format!("Invalid boolean: {text}")).param("confirm"));
        }
    };
    if let Some(method) = optional_string(&params, "capture_method")?
        && method != "automatic"
        && method != "automatic_async"
    {
        // Stripe takes `manual` too; an intent captured later is a state this fake does not
        // have, and serving it as automatic would move money the caller meant to hold.
        return Err(ApiError::invalid(format!(
            "Invalid capture_method: the payments fake implements only automatic capture, not {method}"
        ))
        .param("capture_method"));
    }
    let payment_method = payment_method(&params)?;
    if confirm && payment_method.is_none() {
        return Err(missing_payment_method());
    }
    let metadata = metadata(&params)?;
    let description = optional_string(&params, "description")?;
    let fingerprint = format!("{} {}", req.path, Value::Object(params));
    let create = Create { amount, currency, confirm, payment_method, metadata, description };
    let commit: Commit<PaymentsState> = Box::new(move |inner: &mut Inner<PaymentsState>, mode, stamp| {
        create_intent(inner, mode, stamp, create)
    });
    Ok((fingerprint, commit))
}

/// Checks a confirm; whether the intent's state allows it is decided at the commit.
pub(super) fn prepare_confirm(
    req: &FakeRequest,
    id: String,
    exists: bool,
) -> Result<(String, Commit<PaymentsState>), ApiError> {
    check_key(req)?;
    let params = form::decode(&req.body).map_err(ApiError::invalid)?;
    unknown_parameters(&params, CONFIRM_PARAMS)?;
    let payment_method = payment_method(&params)?;
    if !exists {
        return Err(missing("payment_intent", &id).param("intent"));
    }
    let fingerprint = format!("{} {}", req.path, Value::Object(params));
    let commit: Commit<PaymentsState> = Box::new(move |inner: &mut Inner<PaymentsState>, mode, stamp| {
        confirm_intent(inner, mode, stamp, &id, payment_method)
    });
    Ok((fingerprint, commit))
}

/// Checks a cancel; whether the intent's state allows it is decided at the commit.
pub(super) fn prepare_cancel(
    req: &FakeRequest,
    id: String,
    exists: bool,
) -> Result<(String, Commit<PaymentsState>), ApiError> {
    check_key(req)?;
    let params = form::decode(&req.body).map_err(ApiError::invalid)?;
    unknown_parameters(&params, CANCEL_PARAMS)?;
    let reason = match params.get("cancellation_reason") {
        None => None,
        Some(Value::String(r)) if CANCELLATION_REASONS.contains(&r.as_str()) => Some(r.clone()),
        Some(_) => {
            return Err(ApiError::invalid(
                "Invalid cancellation_reason: must be one of abandoned, duplicate, fraudulent, or requested_by_customer",
            )
            .param("cancellation_reason"));
        }
    };
    if !exists {
        return Err(missing("payment_intent", &id).param("intent"));
    }
    let fingerprint = format!("{} {}", req.path, Value::Object(params));
    let commit: Commit<PaymentsState> = Box::new(move |inner: &mut Inner<PaymentsState>, mode, stamp| {
        cancel_intent(inner, mode, stamp, &id, reason)
    });
    Ok((fingerprint, commit))
}

/// Checks a retrieve's query: `client_secret` and `expand[]` are what Stripe takes.
pub(super) fn check_retrieve(req: &FakeRequest) -> Result<(), ApiError> {
    for (name, _) in req.query_pairs() {
        if !(name.starts_with("expand") || RETRIEVE_PARAMS.contains(&name.as_str())) {
            return Err(ApiError::invalid(format!("Received unknown parameter: {name}")).param(name));
        }
    }
    Ok(())
}

/// The intent as the read may see it.
pub(super) fn retrieve(inner: &mut Inner<PaymentsState>, id: &str, visible_until_ms: u64) -> FakeResponse {
    match inner.state.intents.get(id).and_then(|h| h.as_of(visible_until_ms)) {
        Some(intent) => FakeResponse::json(200, &intent.to_json()),
        None => stripe_error(&missing("payment_intent", id).param("intent")),
    }
}

fn required(name: &str) -> ApiError {
    ApiError::invalid(format!("Missing required param: {name}.")).code("parameter_missing").param(name)
}

/// `payment_method`, if given: Stripe's test methods (`pm_card_visa`, ...) all start with
/// `pm_`; anything else is a PaymentMethod that does not exist.
fn payment_method(params: &Map<String, Value>) -> Result<Option<String>, ApiError> {
    match optional_string(params, "payment_method")? {
        Some(pm) if !pm.starts_with("pm_") => {
            Err(ApiError::invalid(format!("No such PaymentMethod: '{pm}'"))
                .code("resource_missing")
                .param("payment_method"))
        }
        other => Ok(other),
    }
}

fn metadata(params: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    match params.get("metadata") {
        None => Ok(Map::new()),
        Some(Value::Object(m)) => check_metadata(m),
        Some(Value::String(s)) if s.is_empty() => Ok(Map::new()),
        Some(_) => Err(ApiError::invalid("Invalid object").param("metadata")),
    }
}

fn missing_payment_method() -> ApiError {
    ApiError::invalid(
        "You cannot confirm this PaymentIntent because it's missing a payment method. You can either update the PaymentIntent with a payment method and then confirm it again, or confirm it again directly with a payment method.",
    )
    .code("payment_intent_unexpected_state")
}

/// Stripe's answer to a transition the intent's state does not allow: the error, with the
/// intent as it is, which Stripe puts in the error too.
fn unexpected_state(error: ApiError, intent: &Intent) -> FakeResponse {
    let mut response = stripe_error(&error);
    if let Some(mut body) = response.body_json() {
        if let Some(inner) = body.get_mut("error").and_then(Value::as_object_mut) {
            inner.insert("payment_intent".into(), intent.to_json());
        }
        response.body = bytes::Bytes::from(body.to_string());
    }
    response
}

/// Moves an intent to `succeeded`: the charge is made and the whole amount received.
fn succeed(inner: &mut Inner<PaymentsState>, intent: &mut Intent, payment_method: String) {
    intent.status = Status::Succeeded;
    intent.payment_method = Some(payment_method);
    intent.amount_received = intent.amount;
    intent.latest_charge = Some(inner.new_id("ch_", 24));
}

fn record(inner: &mut Inner<PaymentsState>, stamp: &Stamp, kind: &str, intent: &Intent, params: Value) {
    inner.ledger.record(Effect {
        seq: 0,
        at_ms: stamp.now_ms,
        kind: kind.into(),
        object_id: intent.id.clone(),
        params,
        idempotency_key: stamp.key.clone(),
        fencing_token: None,
        request_id: stamp.request_id.clone(),
    });
}

fn record_succeeded(inner: &mut Inner<PaymentsState>, stamp: &Stamp, intent: &Intent) {
    let params = json!({
        "amount": intent.amount,
        "amount_received": intent.amount_received,
        "currency": intent.currency,
        "charge": intent.latest_charge,
        "payment_method": intent.payment_method,
        "metadata": intent.metadata,
    });
    record(inner, stamp, "payment_intent.succeeded", intent, params);
    let request = Some((stamp.request_id.clone(), stamp.key.clone()));
    inner.state.happened(
        Happened::IntentSucceeded { intent: intent.id.clone() },
        stamp.now_ms,
        request,
        stamp.webhook,
    );
}

fn create_intent(
    inner: &mut Inner<PaymentsState>,
    mode: Mode,
    stamp: &Stamp,
    create: Create,
) -> FakeResponse {
    let id = inner.new_id("pi_", 24);
    let client_secret = format!("{id}_secret_{}", inner.new_id("", 25));
    let status = if create.payment_method.is_some() {
        Status::RequiresConfirmation
    } else {
        Status::RequiresPaymentMethod
    };
    let mut intent = Intent {
        id,
        amount: create.amount,
        currency: create.currency,
        status,
        amount_received: 0,
        latest_charge: None,
        payment_method: create.payment_method.clone(),
        metadata: create.metadata,
        description: create.description,
        client_secret,
        created_ms: stamp.now_ms,
        canceled_ms: None,
        cancellation_reason: None,
    };
    if create.confirm
        && let Some(pm) = create.payment_method
    {
        succeed(inner, &mut intent, pm);
    }
    if mode == Mode::Pretend {
        return FakeResponse::json(200, &intent.to_json());
    }
    let params = json!({
        "amount": intent.amount,
        "currency": intent.currency,
        "confirm": create.confirm,
        "payment_method": intent.payment_method,
        "status": intent.status.as_str(),
        "metadata": intent.metadata,
    });
    record(inner, stamp, "payment_intent.created", &intent, params);
    if intent.status == Status::Succeeded {
        record_succeeded(inner, stamp, &intent);
        if let Some(charge) = &intent.latest_charge {
            inner.state.charges.insert(charge.clone(), intent.id.clone());
        }
    }
    let body = intent.to_json();
    let number = inner.state.intents.len();
    inner.state.intents.insert(intent.id.clone(), History::new(number, stamp.now_ms, intent));
    FakeResponse::json(200, &body)
}

/// The intent's current version. It was there when the request was checked; only a reset in
/// between removes it, and then the answer is Stripe's `resource_missing`.
fn current_version(inner: &Inner<PaymentsState>, id: &str) -> Result<Intent, FakeResponse> {
    inner
        .state
        .intents
        .get(id)
        .map(History::current)
        .cloned()
        .ok_or_else(|| stripe_error(&missing("payment_intent", id).param("intent")))
}

/// Keeps `intent` as the newest version (stale reads still see the older ones) and answers it.
fn push_version(inner: &mut Inner<PaymentsState>, stamp: &Stamp, id: &str, intent: Intent) -> FakeResponse {
    let body = intent.to_json();
    if let Some(history) = inner.state.intents.get_mut(id) {
        history.push(stamp.now_ms, intent);
    }
    FakeResponse::json(200, &body)
}

fn confirm_intent(
    inner: &mut Inner<PaymentsState>,
    mode: Mode,
    stamp: &Stamp,
    id: &str,
    payment_method: Option<String>,
) -> FakeResponse {
    let current = match current_version(inner, id) {
        Ok(current) => current,
        Err(missing) => return missing,
    };
    match current.status {
        Status::Succeeded => {
            return unexpected_state(
                ApiError::invalid(
                    "You cannot confirm this PaymentIntent because it has already succeeded after being previously confirmed.",
                )
                .code("payment_intent_unexpected_state"),
                &current,
            );
        }
        Status::Canceled => {
            return unexpected_state(
                ApiError::invalid(
                    "You cannot confirm this PaymentIntent because it has a status of canceled. Only a PaymentIntent with one of the following statuses may be confirmed: requires_confirmation, requires_action, requires_payment_method.",
                )
                .code("payment_intent_unexpected_state"),
                &current,
            );
        }
        Status::RequiresPaymentMethod | Status::RequiresConfirmation => {}
    }
    let Some(pm) = payment_method.or_else(|| current.payment_method.clone()) else {
        return unexpected_state(missing_payment_method(), &current);
    };
    let mut intent = current;
    succeed(inner, &mut intent, pm);
    if mode == Mode::Pretend {
        return FakeResponse::json(200, &intent.to_json());
    }
    record_succeeded(inner, stamp, &intent);
    if let Some(charge) = &intent.latest_charge {
        inner.state.charges.insert(charge.clone(), intent.id.clone());
    }
    push_version(inner, stamp, id, intent)
}

fn cancel_intent(
    inner: &mut Inner<PaymentsState>,
    mode: Mode,
    stamp: &Stamp,
    id: &str,
    reason: Option<String>,
) -> FakeResponse {
    let current = match current_version(inner, id) {
        Ok(current) => current,
        Err(missing) => return missing,
    };
    if matches!(current.status, Status::Succeeded | Status::Canceled) {
        let error = ApiError::invalid(format!(
            "You cannot cancel this PaymentIntent because it has a status of {}. Only a PaymentIntent with one of the following statuses may be canceled: requires_payment_method, requires_capture, requires_confirmation, requires_action, processing.",
            current.status.as_str()
        ))
        .code("payment_intent_unexpected_state");
        return unexpected_state(error, &current);
    }
    let mut intent = current;
    intent.status = Status::Canceled;
    intent.canceled_ms = Some(stamp.now_ms);
    intent.cancellation_reason = reason;
    if mode == Mode::Pretend {
        return FakeResponse::json(200, &intent.to_json());
    }
    let params = json!({
        "amount": intent.amount,
        "currency": intent.currency,
        "cancellation_reason": intent.cancellation_reason,
        "metadata": intent.metadata,
    });
    record(inner, stamp, "payment_intent.canceled", &intent, params);
    push_version(inner, stamp, id, intent)
}
