//! Refunds: the refund a fake keeps and the object Stripe shows of it (a page of them too),
//! `POST /v1/refunds` checked and committed against the payment intent it draws on, and
//! `GET /v1/refunds/{id}`. A refund's effect is `refund.created`.

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::PaymentsState;
use super::answer::{missing, stripe_error};
use super::intents;
use super::params::{check_key, check_metadata, optional_string, positive_integer, unknown_parameters};
use crate::core::{ApiError, Check, Commit, Inner, Mode, Stamp};
use crate::form;
use crate::record::Effect;
use crate::wire::{FakeRequest, FakeResponse};

const REASONS: &[&str] = &["duplicate", "fraudulent", "requested_by_customer"];
const CREATE_PARAMS: &[&str] =
    &["amount", "charge", "currency", "expand", "instructions_email", "metadata", "payment_intent", "reason"];

/// A refund as the fake keeps it; [`Refund::object`] is what Stripe shows of it.
#[derive(Debug, Clone)]
pub(super) struct Refund {
    pub(super) id: String,
    amount: u64,
    pub(super) charge: String,
    pub(super) payment_intent: String,
    currency: String,
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
pub(super) struct RefundList<'a> {
    pub(super) data: Vec<RefundObject<'a>>,
    pub(super) has_more: bool,
    pub(super) object: &'static str,
    pub(super) url: &'static str,
}

/// The refunds' side of the state: a refund kept, and what each intent has had refunded.
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

/// A refund create, validated as far as it can be without the service's state.
pub(super) struct Prepared {
    pub(super) fingerprint: String,
    /// That its payment intent (or charge) exists, and that the two agree.
    pub(super) check: Check<PaymentsState>,
    pub(super) commit: Commit<PaymentsState>,
}

/// Validates a create request; which intent it draws on, and what is left for the commit,
/// depend on state, read under the lock that also looks up its key.
pub(super) fn prepare_create(req: &FakeRequest) -> Result<Prepared, ApiError> {
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

pub(super) fn retrieve(inner: &mut Inner<PaymentsState>, id: &str, visible_until_ms: u64) -> FakeResponse {
    let found = inner.state.by_id.get(id).and_then(|i| inner.state.refunds.get(*i));
    match found.filter(|r| r.created_ms <= visible_until_ms) {
        Some(r) => FakeResponse::json_of(200, &r.object()),
        None => stripe_error(&missing("refund", id).param("id")),
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
