//! Refunds: the refund a fake keeps and the object Stripe shows of it (a page of them too),
//! `POST /v1/refunds` checked and committed against the payment intent it draws on, and
//! `GET /v1/refunds/{id}`. A refund's effect is `refund.created`.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::PaymentsState;
use super::answer::{json_answer, missing, stripe_error};
use super::event_log::Happened;
use super::intents;
use super::json_text;
use super::params::{
    check_key, check_metadata, optional_string, optional_text, positive_integer, positive_integer_text,
    unknown_parameters,
};
use crate::core::{ApiError, Check, Commit, Inner, Mode, Stamp};
use crate::form;
use crate::wire::{FakeRequest, FakeResponse};
use vocabulary::Effect;

const REASONS: &[&str] = &["duplicate", "fraudulent", "requested_by_customer"];
const CREATE_PARAMS: &[&str] =
    &["amount", "charge", "currency", "expand", "instructions_email", "metadata", "payment_intent", "reason"];

/// A refund as the fake keeps it; [`Refund::object`] is what Stripe shows of it.
#[derive(Debug, Clone)]
pub(super) struct Refund {
    pub(super) id: String,
    pub(super) amount: u64,
    pub(super) charge: Arc<str>,
    pub(super) payment_intent: Arc<str>,
    pub(super) currency: Arc<str>,
    metadata: Map<String, Value>,
    reason: Option<String>,
    pub(super) created_ms: u64,
}

/// A refund as Stripe shows it, serialized straight from the refund (no JSON tree between).
/// Fields in name order, as a `serde_json::Value` object writes them: the bytes on the wire
/// stay what they were when this was built as one.
#[derive(Serialize)]
pub(super) struct RefundObject<'a> {
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
    pub(super) fn object(&self) -> RefundObject<'_> {
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

    /// The 200 that shows this refund: [`Refund::object`]'s JSON.
    pub(super) fn answer(&self) -> FakeResponse {
        match self.plain_json() {
            Some(body) => json_answer(200, body.into_bytes()),
            None => FakeResponse::json_of(200, &self.object()),
        }
    }

    /// [`Refund::object`]'s JSON written by hand, for a refund with no metadata whose strings
    /// need no escape (nearly every one): the same bytes, exactly as long as they are.
    fn plain_json(&self) -> Option<String> {
        const FIXED_BYTES: usize = r#"{"amount":,"balance_transaction":null,"charge":"","created":,"currency":"","id":"","metadata":{},"object":"refund","payment_intent":"","reason":,"receipt_number":null,"source_transfer_reversal":null,"status":"succeeded","transfer_reversal":null}"#.len();
        let strings: [&str; 4] = [&self.charge, &self.currency, &self.id, &self.payment_intent];
        if !self.metadata.is_empty()
            || !strings.iter().all(|s| json_text::plain(s))
            || !self.reason.as_deref().is_none_or(json_text::plain)
        {
            return None;
        }
        let created = self.created_ms / 1000;
        let bytes = FIXED_BYTES
            + strings.iter().map(|s| s.len()).sum::<usize>()
            + decimal_digits(self.amount)
            + decimal_digits(created)
            + self.reason.as_ref().map_or("null".len(), |r| r.len() + 2);
        let mut out = String::with_capacity(bytes);
        out.push_str(r#"{"amount":"#);
        json_text::push_u64(&mut out, self.amount);
        out.push_str(r#","balance_transaction":null,"charge":"#);
        json_text::push_plain(&mut out, &self.charge);
        out.push_str(r#","created":"#);
        json_text::push_u64(&mut out, created);
        out.push_str(r#","currency":"#);
        json_text::push_plain(&mut out, &self.currency);
        out.push_str(r#","id":"#);
        json_text::push_plain(&mut out, &self.id);
        out.push_str(r#","metadata":{},"object":"refund","payment_intent":"#);
        json_text::push_plain(&mut out, &self.payment_intent);
        out.push_str(r#","reason":"#);
        match &self.reason {
            Some(reason) => json_text::push_plain(&mut out, reason),
            None => out.push_str("null"),
        }
        out.push_str(
            r#","receipt_number":null,"source_transfer_reversal":null,"status":"succeeded","transfer_reversal":null}"#,
        );
        debug_assert_eq!(out.len(), bytes, "the refund's JSON is as long as reckoned");
        Some(out)
    }

    #[cfg(test)]
    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "object": "refund",
            "amount": self.amount,
            "balance_transaction": null,
            "charge": &*self.charge,
            "created": self.created_ms / 1000,
            "currency": &*self.currency,
            "metadata": self.metadata,
            "payment_intent": &*self.payment_intent,
            "reason": self.reason,
            "receipt_number": null,
            "source_transfer_reversal": null,
            "status": "succeeded",
            "transfer_reversal": null,
        })
    }
}

/// How many decimal digits `n` is written in.
fn decimal_digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |log| log as usize + 1)
}

/// A page of refunds, fields in name order as [`RefundObject`]'s.
#[derive(Serialize)]
pub(super) struct RefundList<'a> {
    pub(super) data: Vec<RefundObject<'a>>,
    pub(super) has_more: bool,
    pub(super) object: &'static str,
    pub(super) url: &'static str,
}

/// The refunds' side of the state: a refund kept, and what each intent has had refunded.
impl PaymentsState {
    fn add(&mut self, refund: Refund) {
        let strings = Shared {
            payment_intent: Arc::clone(&refund.payment_intent),
            charge: Arc::clone(&refund.charge),
            currency: Arc::clone(&refund.currency),
        };
        match self.refunded.get_mut(&*refund.payment_intent) {
            Some(drawn) => {
                drawn.refunded += refund.amount;
                drawn.strings = strings;
            }
            None => {
                let drawn = Drawn { refunded: refund.amount, strings };
                self.refunded.insert(refund.payment_intent.to_string(), drawn);
            }
        }
        self.by_id.insert(refund.id.clone(), self.refunds.len());
        self.refunds.push(refund);
    }
}

/// What the refunds of one payment intent have drawn on it.
#[derive(Debug)]
pub(super) struct Drawn {
    /// The amount refunded so far.
    refunded: u64,
    /// The strings of the intent its refunds repeat, shared by them all rather than copied
    /// into each.
    strings: Shared,
}

/// The strings a refund repeats of its payment intent.
#[derive(Debug, Clone)]
struct Shared {
    payment_intent: Arc<str>,
    charge: Arc<str>,
    currency: Arc<str>,
}

/// A refund create, validated as far as it can be without the service's state.
pub(super) struct Prepared {
    pub(super) fingerprint: String,
    /// That its payment intent (or charge) exists, and that the two agree.
    pub(super) check: Check<PaymentsState>,
    pub(super) commit: Commit<PaymentsState>,
}

/// What a create asks for, read and checked from its form.
#[derive(Debug, PartialEq)]
struct CreateArgs {
    /// The parameters as compact JSON, names in order: equal exactly when the parameters are.
    fingerprint: String,
    amount: Option<u64>,
    reason: Option<String>,
    metadata: Map<String, Value>,
    /// Shared by the check and the commit, which both look it up.
    payment_intent: Option<Arc<str>>,
    charge: Option<Arc<str>>,
}

/// Validates a create request; which intent it draws on, and what is left for the commit,
/// depend on state, read under the lock that also looks up its key.
pub(super) fn prepare_create(req: &FakeRequest) -> Result<Prepared, ApiError> {
    check_key(req)?;
    let CreateArgs { fingerprint, amount, reason, metadata, payment_intent: pi, charge } =
        match read_flat_create(&req.body) {
            Some(read) => read?,
            None => read_create(form::decode(&req.body).map_err(ApiError::invalid)?)?,
        };
    let (checked_pi, checked_charge) = (pi.clone(), charge.clone());
    let check: Check<PaymentsState> = Box::new(move |inner: &Inner<PaymentsState>| {
        drawn_on(&inner.state, checked_pi.as_deref(), checked_charge.as_deref()).map(|_| ())
    });
    let commit: Commit<PaymentsState> =
        Box::new(move |inner: &mut Inner<PaymentsState>, mode: Mode, stamp: &Stamp| {
            create_refund(inner, mode, stamp, (pi.as_deref(), charge.as_deref()), amount, reason, metadata)
        });
    Ok(Prepared { fingerprint, check, commit })
}

/// A create's parameters, checked in Stripe's order, from any form (nested names too).
fn read_create(params: Map<String, Value>) -> Result<CreateArgs, ApiError> {
    unknown_parameters(&params, CREATE_PARAMS)?;
    let amount = match params.get("amount") {
        None => None,
        Some(v) => Some(positive_integer(v, "amount")?),
    };
    let reason = match params.get("reason") {
        None => None,
        Some(Value::String(r)) if REASONS.contains(&r.as_str()) => Some(r.clone()),
        Some(_) => return Err(invalid_reason()),
    };
    let metadata = match params.get("metadata") {
        None => Map::new(),
        Some(Value::Object(m)) => check_metadata(m)?,
        Some(Value::String(s)) if s.is_empty() => Map::new(),
        Some(_) => return Err(invalid_metadata()),
    };
    let pi = optional_string(&params, "payment_intent")?.map(Arc::from);
    let charge = optional_string(&params, "charge")?.map(Arc::from);
    if let Some(currency) = optional_string(&params, "currency")? {
        check_currency(&currency)?;
    }
    // Written straight from the map (`Value`'s `Display` goes through a formatter).
    let fingerprint = serde_json::to_string(&params).unwrap_or_else(|_| Value::Object(params).to_string());
    Ok(CreateArgs { fingerprint, amount, reason, metadata, payment_intent: pi, charge })
}

/// Most pairs a form may have to be read by [`read_flat_create`]; its repeat check compares
/// every pair with every other.
const FLAT_PAIRS_MAX: usize = 16;

/// [`read_create`] of a form whose names are all plain (no brackets, so every value is text),
/// as nearly every create sends: the same answers, read from the pairs as they are rather
/// than from a JSON object built of them, whose names and values would each be copied, put in
/// a tree and let go again. `None` for any other form: [`read_create`] reads it.
fn read_flat_create(body: &[u8]) -> Option<Result<CreateArgs, ApiError>> {
    let mut pairs: Vec<(Cow<'_, str>, Cow<'_, str>)> = Vec::with_capacity(4);
    for (name, value) in form::pairs(body) {
        if pairs.len() == FLAT_PAIRS_MAX || name.contains('[') {
            return None;
        }
        pairs.push((name, value));
    }
    Some(read_flat_pairs(pairs))
}

fn read_flat_pairs(mut pairs: Vec<(Cow<'_, str>, Cow<'_, str>)>) -> Result<CreateArgs, ApiError> {
    // What `form::decode` refuses, in the order the pairs came.
    for (i, (name, _)) in pairs.iter().enumerate() {
        if name.is_empty() {
            return Err(ApiError::invalid(format!("Invalid parameter name: '{name}'")));
        }
        if pairs[..i].iter().any(|(earlier, _)| earlier == name) {
            return Err(ApiError::invalid(format!("Received a repeated parameter: '{name}'")));
        }
    }
    // Names in order, as the JSON object's keys are.
    pairs.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
    if let Some((name, _)) = pairs.iter().find(|(name, _)| !CREATE_PARAMS.contains(&name.as_ref())) {
        return Err(ApiError::invalid(format!("Received unknown parameter: {name}")).param(name.as_ref()));
    }
    let get = |wanted: &str| pairs.iter().find(|(name, _)| name == wanted).map(|(_, value)| value.as_ref());
    let amount = match get("amount") {
        None => None,
        Some(text) => Some(positive_integer_text(text, "amount")?),
    };
    let reason = match get("reason") {
        None => None,
        Some(r) if REASONS.contains(&r) => Some(r.to_string()),
        Some(_) => return Err(invalid_reason()),
    };
    match get("metadata") {
        None | Some("") => {}
        Some(_) => return Err(invalid_metadata()),
    }
    let pi = optional_text(get("payment_intent"), "payment_intent")?.map(Arc::from);
    let charge = optional_text(get("charge"), "charge")?.map(Arc::from);
    if let Some(currency) = optional_text(get("currency"), "currency")? {
        check_currency(currency)?;
    }
    // The JSON object of the pairs, as `read_create` writes it.
    let mut fingerprint = String::with_capacity(
        2 + pairs.iter().map(|(name, value)| name.len() + value.len() + 6).sum::<usize>(),
    );
    fingerprint.push('{');
    for (i, (name, value)) in pairs.iter().enumerate() {
        if i > 0 {
            fingerprint.push(',');
        }
        json_text::push_str(&mut fingerprint, name);
        fingerprint.push(':');
        json_text::push_str(&mut fingerprint, value);
    }
    fingerprint.push('}');
    Ok(CreateArgs { fingerprint, amount, reason, metadata: Map::new(), payment_intent: pi, charge })
}

fn invalid_reason() -> ApiError {
    ApiError::invalid("Invalid reason: must be one of duplicate, fraudulent, or requested_by_customer")
        .param("reason")
}

fn invalid_metadata() -> ApiError {
    ApiError::invalid("Invalid object").param("metadata")
}

fn check_currency(currency: &str) -> Result<(), ApiError> {
    if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(ApiError::invalid(format!("Invalid currency: {currency}")).param("currency"));
    }
    Ok(())
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
pub(super) fn refused_params(req: &FakeRequest) -> Option<Value> {
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

fn create_refund(
    inner: &mut Inner<PaymentsState>,
    mode: Mode,
    stamp: &Stamp,
    drawn: (Option<&str>, Option<&str>),
    amount: Option<u64>,
    reason: Option<String>,
    metadata: Map<String, Value>,
) -> FakeResponse {
    // What the refund takes of its intent, read before the refund's id is drawn (which needs
    // the state to change).
    let (remaining, shared) = match what_is_drawn(&inner.state, drawn) {
        Ok(found) => found,
        Err(refused) => return refused,
    };
    let amount = amount.unwrap_or(remaining);
    let refund = Refund {
        id: inner.new_id("re_", 24),
        amount,
        charge: shared.charge,
        payment_intent: shared.payment_intent,
        currency: shared.currency,
        metadata,
        reason,
        created_ms: stamp.now_ms,
    };
    let charge = &refund.charge;
    if mode == Mode::Pretend {
        return refund.answer();
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
    let response = refund.answer();
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
    let index = inner.state.refunds.len();
    inner.state.add(refund);
    let request = Some((stamp.request_id.clone(), stamp.key.clone()));
    inner.state.happened(
        Happened::RefundCreated { refund: index },
        stamp.now_ms,
        request.clone(),
        stamp.webhook,
    );
    inner.state.happened(Happened::ChargeRefunded { refund: index }, stamp.now_ms, request, stamp.webhook);
    response
}

/// What is left to refund of the intent a refund draws on (`drawn`: its `payment_intent` and
/// `charge` parameters), and the strings the refund repeats of it, or the refusal.
fn what_is_drawn(
    state: &PaymentsState,
    drawn: (Option<&str>, Option<&str>),
) -> Result<(u64, Shared), FakeResponse> {
    // Checked in this hold of the lock, or in an earlier one when a latency fault waits in
    // between: only a reset since then finds it gone.
    let intent_id = drawn_on(state, drawn.0, drawn.1).map_err(|e| stripe_error(&e))?;
    // Found by `drawn_on`; only a reset in between removes it.
    let Some(intent) = state.intents.get(intent_id).map(|h| h.current()) else {
        return Err(stripe_error(&missing("payment_intent", intent_id)));
    };
    // Only a charge that succeeded can be refunded, and at most what it received.
    let Some(charge) =
        intent.latest_charge.as_deref().filter(|_| intent.status == intents::Status::Succeeded)
    else {
        return Err(stripe_error(
            &ApiError::invalid(format!(
                "This PaymentIntent ({}) does not have a successful charge to refund.",
                intent.id
            ))
            .param("payment_intent"),
        ));
    };
    let before = state.refunded.get(intent_id);
    let remaining = intent.amount_received.saturating_sub(before.map_or(0, |d| d.refunded));
    // The intent's earlier refunds' strings when they are still its own (they always are: an
    // intent's charge and currency do not change once it has succeeded), else new ones.
    let shared = match before {
        Some(d) if *d.strings.charge == *charge && *d.strings.currency == *intent.currency => {
            d.strings.clone()
        }
        _ => Shared {
            // The intent's id is the key it was found by.
            payment_intent: Arc::from(intent_id),
            charge: Arc::from(charge),
            currency: Arc::from(intent.currency.as_str()),
        },
    };
    Ok((remaining, shared))
}

/// A refund effect's parameters, built field by field (the value `json!` would make of them,
/// without serializing each field into a value first).
fn refund_params(refund: &Refund) -> Value {
    let mut params = Map::new();
    params.insert("amount".into(), Value::from(refund.amount));
    params.insert("charge".into(), Value::String(refund.charge.to_string()));
    params.insert("currency".into(), Value::String(refund.currency.to_string()));
    params.insert("metadata".into(), Value::Object(refund.metadata.clone()));
    params.insert("payment_intent".into(), Value::String(refund.payment_intent.to_string()));
    params.insert("reason".into(), refund.reason.clone().map_or(Value::Null, Value::String));
    Value::Object(params)
}

pub(super) fn retrieve(inner: &mut Inner<PaymentsState>, id: &str, visible_until_ms: u64) -> FakeResponse {
    let found = inner.state.by_id.get(id).and_then(|i| inner.state.refunds.get(*i));
    match found.filter(|r| r.created_ms <= visible_until_ms) {
        Some(r) => r.answer(),
        None => stripe_error(&missing("refund", id).param("id")),
    }
}

#[cfg(test)]
mod tests;
