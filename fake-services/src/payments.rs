//! Payments: a Stripe-style refunds API.
//!
//! `POST /v1/refunds` (form-encoded), `GET /v1/refunds/{id}`, `GET /v1/refunds` filtered by
//! `payment_intent` or `charge`, with Stripe's error envelope, `Request-Id`, 401 without a
//! key and Stripe's idempotency rules (see `docs/faults.md` and the wire reference). Payment
//! intents to refund are seeded through the control API.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::clock::ServiceClock;
use crate::contract::Contract;
use crate::core::{ApiError, Commit, Inner, Mode, Outcome, ServiceCore, Shape, Stamp};
use crate::form;
use crate::record::Effect;
use crate::wire::{Disposition, FakeRequest, FakeResponse};

/// The service's name in rules, ledgers and URLs files.
pub const NAME: &str = "payments";

/// A payment intent that refunds can draw on.
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

impl Refund {
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

/// The payments fake's objects.
#[derive(Debug, Default)]
pub struct PaymentsState {
    intents: BTreeMap<String, PaymentIntent>,
    /// Charge id to payment intent id.
    charges: BTreeMap<String, String>,
    /// In creation order.
    refunds: Vec<Refund>,
    /// Refund id to its index in `refunds`.
    by_id: BTreeMap<String, usize>,
    /// Amount refunded so far per payment intent, kept as refunds are made so that a create
    /// does not scan every refund while holding the service's lock.
    refunded: BTreeMap<String, u64>,
}

impl PaymentsState {
    fn refunded(&self, payment_intent: &str) -> u64 {
        self.refunded.get(payment_intent).copied().unwrap_or(0)
    }

    fn add(&mut self, refund: Refund) {
        *self.refunded.entry(refund.payment_intent.clone()).or_insert(0) += refund.amount;
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
        Payments { core: Arc::new(ServiceCore::new(NAME, clock, seed, Contract::payments_default(), shape)) }
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
        seed_intent(&mut self.core.lock(), id, amount, currency)
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
            let response = self.core.control(&req, seed_from_json);
            return Disposition::Respond(response);
        }
        let is_write = req.method == "POST";
        let ctx = self.core.begin(&req, Self::fields, is_write);
        let _abandoned = self.core.watch(&ctx);
        if let Some(done) = self.core.intercept(&ctx) {
            return done;
        }
        let outcome = match authorize(&req) {
            Err(e) => Outcome::of(self.core.error(&e)),
            Ok(()) => match route(&req) {
                Route::Create => match self.prepare_create(&req) {
                    Ok((fingerprint, commit)) => self.core.write(&ctx, fingerprint, commit).await,
                    Err(e) => Outcome::of(self.core.error(&e)),
                },
                Route::Retrieve(id) => self.core.read(&ctx, |inner, until| retrieve(inner, &id, until)).await,
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
        self.core.conclude(&ctx, outcome).await
    }

    /// Validates a create request; what is left for the commit depends on state.
    fn prepare_create(&self, req: &FakeRequest) -> Result<(String, Commit<PaymentsState>), ApiError> {
        if let Some(key) = req.header_str("idempotency-key") {
            if key.len() > KEY_CHARS_MAX {
                return Err(ApiError::invalid(format!(
                    "Idempotency-Key must be at most {KEY_CHARS_MAX} characters long."
                )));
            }
        } else if req.headers.contains_key("idempotency-key") {
            return Err(ApiError::invalid("Idempotency-Key must be printable ASCII."));
        }
        let params = form::decode(&req.body).map_err(ApiError::invalid)?;
        for name in params.keys() {
            if !CREATE_PARAMS.contains(&name.as_str()) {
                return Err(
                    ApiError::invalid(format!("Received unknown parameter: {name}")).param(name.clone())
                );
            }
        }
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
        let intent = {
            let inner = self.core.lock();
            let state = &inner.state;
            let by_pi = match &pi {
                Some(id) => {
                    Some(state.intents.get(id).cloned().ok_or_else(|| missing("payment_intent", id))?)
                }
                None => None,
            };
            let by_charge = match &charge {
                Some(ch) => {
                    let pi_id = state.charges.get(ch).ok_or_else(|| missing("charge", ch))?;
                    state.intents.get(pi_id).cloned()
                }
                None => None,
            };
            match (by_pi, by_charge) {
                (None, None) => {
                    return Err(ApiError::invalid(
                        "One of the following parameters is required: charge, payment_intent.",
                    ));
                }
                (Some(a), Some(b)) if a.id != b.id => {
                    return Err(ApiError::invalid(format!(
                        "The charge {} does not belong to the payment intent {}.",
                        b.charge, a.id
                    ))
                    .param("charge"));
                }
                (Some(a), _) => a,
                (None, Some(b)) => b,
            }
        };
        let fingerprint = Value::Object(params).to_string();
        let commit: Commit<PaymentsState> =
            Box::new(move |inner: &mut Inner<PaymentsState>, mode: Mode, stamp: &Stamp| {
                create_refund(inner, mode, stamp, &intent, amount, reason, metadata)
            });
        Ok((fingerprint, commit))
    }
}

enum Route {
    Create,
    Retrieve(String),
    List,
    Unknown,
}

fn route(req: &FakeRequest) -> Route {
    let path = req.path.trim_end_matches('/');
    match (req.method.as_str(), path) {
        ("POST", "/v1/refunds") => Route::Create,
        ("GET", "/v1/refunds") => Route::List,
        ("GET", p) => match p.strip_prefix("/v1/refunds/") {
            Some(id) if !id.is_empty() && !id.contains('/') => Route::Retrieve(id.to_string()),
            _ => Route::Unknown,
        },
        _ => Route::Unknown,
    }
}

fn authorize(req: &FakeRequest) -> Result<(), ApiError> {
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
        Some(t) if !t.is_empty() => Ok(()),
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
    intent: &PaymentIntent,
    amount: Option<u64>,
    reason: Option<String>,
    metadata: Map<String, Value>,
) -> FakeResponse {
    let remaining = intent.amount.saturating_sub(inner.state.refunded(&intent.id));
    let amount = amount.unwrap_or(remaining);
    let refund = Refund {
        id: inner.new_id("re_", 24),
        amount,
        charge: intent.charge.clone(),
        payment_intent: intent.id.clone(),
        currency: intent.currency.clone(),
        metadata,
        reason,
        created_ms: stamp.now_ms,
    };
    if mode == Mode::Pretend {
        return FakeResponse::json(200, &refund.to_json());
    }
    if remaining == 0 {
        return stripe_error(
            &ApiError::invalid(format!("Charge {} has already been refunded.", intent.charge))
                .code("charge_already_refunded"),
        );
    }
    if amount > remaining {
        return stripe_error(
            &ApiError::invalid(format!(
                "Refund amount ({amount}) is greater than unrefunded amount on charge ({remaining})"
            ))
            .param("amount"),
        );
    }
    let body = refund.to_json();
    inner.ledger.record(Effect {
        seq: 0,
        at_ms: stamp.now_ms,
        kind: "refund.created".into(),
        object_id: refund.id.clone(),
        params: json!({
            "payment_intent": refund.payment_intent,
            "charge": refund.charge,
            "amount": refund.amount,
            "currency": refund.currency,
            "reason": refund.reason,
            "metadata": refund.metadata,
        }),
        idempotency_key: stamp.key.clone(),
        fencing_token: None,
        request_id: stamp.request_id.clone(),
    });
    inner.state.add(refund);
    FakeResponse::json(200, &body)
}

fn retrieve(inner: &mut Inner<PaymentsState>, id: &str, visible_until_ms: u64) -> FakeResponse {
    let found = inner.state.by_id.get(id).and_then(|i| inner.state.refunds.get(*i));
    match found.filter(|r| r.created_ms <= visible_until_ms) {
        Some(r) => FakeResponse::json(200, &r.to_json()),
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
    let data: Vec<Value> = page.iter().map(|r| r.to_json()).collect();
    FakeResponse::json(
        200,
        &json!({"object": "list", "url": "/v1/refunds", "has_more": has_more, "data": data}),
    )
}

fn seed_intent(
    inner: &mut Inner<PaymentsState>,
    id: Option<&str>,
    amount: u64,
    currency: &str,
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
    inner.state.charges.insert(charge, id.clone());
    inner.state.intents.insert(id, intent.clone());
    Ok(intent)
}

fn seed_from_json(inner: &mut Inner<PaymentsState>, body: &[u8]) -> Result<Value, String> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Seed {
        payment_intents: Vec<SeedIntent>,
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
        format!("expected {{\"payment_intents\": [{{\"id\": \"pi_1\", \"amount\": 5000}}]}}: {e}")
    })?;
    let mut seeded = Vec::new();
    for s in seed.payment_intents {
        let pi = seed_intent(inner, s.id.as_deref(), s.amount, &s.currency)?;
        seeded.push(json!({"id": pi.id, "charge": pi.charge, "amount": pi.amount, "currency": pi.currency}));
    }
    Ok(json!({"payment_intents": seeded}))
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
