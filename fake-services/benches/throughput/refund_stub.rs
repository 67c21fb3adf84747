//! A stateful refund stub on `wiremock`, written as a user of wiremock would write one: a
//! `Respond` impl holding its state behind a mutex.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use rand::SeedableRng;
use rand::distr::{Alphanumeric, SampleString};
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

use crate::{INTENT, INTENT_AMOUNT, Result, SEED};

/// The wiremock release the workspace manifest asks for, named in the notes.
pub const WIREMOCK_VERSION: &str = "0.6";

/// A payment intent refunds draw on.
struct Intent {
    charge: String,
    amount: u64,
    currency: String,
}

/// A refund as the stub keeps it: every field it answers that is not constant.
struct Refund {
    id: String,
    amount: u64,
    charge: String,
    payment_intent: String,
    currency: String,
    created: u64,
}

impl Refund {
    fn to_json(&self) -> serde_json::Value {
        json!({
            "id": self.id,
            "object": "refund",
            "amount": self.amount,
            "balance_transaction": null,
            "charge": self.charge,
            "created": self.created,
            "currency": self.currency,
            "metadata": {},
            "payment_intent": self.payment_intent,
            "reason": null,
            "receipt_number": null,
            "source_transfer_reversal": null,
            "status": "succeeded",
            "transfer_reversal": null,
        })
    }
}

/// An answer kept for its idempotency key, with the form body it answered.
struct Saved {
    body_sent: Vec<u8>,
    status: u16,
    answer: String,
}

/// What the stub remembers: the same objects the payments fake keeps for refund creates.
struct StubState {
    rng: ChaCha8Rng,
    intents: HashMap<String, Intent>,
    /// In creation order.
    refunds: Vec<Refund>,
    /// Refund id to its index in `refunds`.
    by_id: HashMap<String, usize>,
    /// Amount refunded so far per payment intent.
    refunded: HashMap<String, u64>,
    keys: HashMap<String, Saved>,
}

impl StubState {
    fn new() -> StubState {
        let intent = Intent {
            charge: format!("ch_{}", INTENT.trim_start_matches("pi_")),
            amount: INTENT_AMOUNT,
            currency: "usd".into(),
        };
        StubState {
            rng: ChaCha8Rng::seed_from_u64(SEED),
            intents: HashMap::from([(INTENT.to_string(), intent)]),
            refunds: Vec::new(),
            by_id: HashMap::new(),
            refunded: HashMap::new(),
            keys: HashMap::new(),
        }
    }

    fn new_id(&mut self, prefix: &str, len: usize) -> String {
        format!("{prefix}{}", Alphanumeric.sample_string(&mut self.rng, len))
    }

    fn create(&mut self, request: &Request) -> ResponseTemplate {
        let request_id = self.new_id("req_", 14);
        let token = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        if token.is_none_or(str::is_empty) {
            let (status, body) = error(401, "Invalid API Key provided.", None, None);
            return answer(status, body, &request_id, None);
        }
        let key = request.headers.get("idempotency-key").and_then(|v| v.to_str().ok()).map(str::to_string);
        if let Some(saved) = key.as_ref().and_then(|k| self.keys.get(k)) {
            if saved.body_sent != request.body {
                let (status, body) = error(
                    400,
                    "Keys for idempotent requests can only be used with the same parameters they were first used with.",
                    None,
                    None,
                );
                return answer(status, body, &request_id, key.as_deref());
            }
            return answer(saved.status, saved.answer.clone(), &request_id, key.as_deref())
                .insert_header("Idempotent-Replayed", "true");
        }
        let (status, body) = self.commit(request);
        if let Some(k) = &key {
            let saved = Saved { body_sent: request.body.clone(), status, answer: body.clone() };
            self.keys.insert(k.clone(), saved);
        }
        answer(status, body, &request_id, key.as_deref())
    }

    /// The refund itself: the status and the JSON body.
    fn commit(&mut self, request: &Request) -> (u16, String) {
        let params: HashMap<String, String> = form_urlencoded::parse(&request.body).into_owned().collect();
        let Some(pi) = params.get("payment_intent") else {
            return error(
                400,
                "One of the following parameters is required: charge, payment_intent.",
                None,
                None,
            );
        };
        let Some(intent) = self.intents.get(pi) else {
            return error(
                404,
                &format!("No such payment_intent: '{pi}'"),
                Some("resource_missing"),
                Some("payment_intent"),
            );
        };
        let (charge, currency) = (intent.charge.clone(), intent.currency.clone());
        let remaining = intent.amount.saturating_sub(self.refunded.get(pi).copied().unwrap_or(0));
        let amount = match params.get("amount").map(|a| a.parse::<u64>()) {
            None => remaining,
            Some(Ok(n)) if n >= 1 => n,
            Some(_) => return error(400, "Invalid integer: amount", None, Some("amount")),
        };
        if amount > remaining {
            let message =
                format!("Refund amount ({amount}) is greater than unrefunded amount on charge ({remaining})");
            return error(400, &message, None, Some("amount"));
        }
        let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let refund = Refund {
            id: self.new_id("re_", 24),
            amount,
            charge,
            payment_intent: pi.clone(),
            currency,
            created,
        };
        let body = refund.to_json().to_string();
        *self.refunded.entry(pi.clone()).or_insert(0) += amount;
        self.by_id.insert(refund.id.clone(), self.refunds.len());
        self.refunds.push(refund);
        (200, body)
    }
}

/// Stripe's error envelope.
fn error(status: u16, message: &str, code: Option<&str>, param: Option<&str>) -> (u16, String) {
    let mut error = json!({"type": "invalid_request_error", "message": message});
    if let Some(code) = code {
        error["code"] = json!(code);
    }
    if let Some(param) = param {
        error["param"] = json!(param);
    }
    (status, json!({ "error": error }).to_string())
}

fn answer(status: u16, body: String, request_id: &str, key: Option<&str>) -> ResponseTemplate {
    let template = ResponseTemplate::new(status).set_body_raw(body, "application/json");
    let template = template.insert_header("Request-Id", request_id);
    match key {
        Some(k) => template.insert_header("Idempotency-Key", k),
        None => template,
    }
}

/// The mock's responder.
struct Refunds {
    state: Arc<Mutex<StubState>>,
}

impl Respond for Refunds {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        match self.state.lock() {
            Ok(mut state) => state.create(request),
            // A responder that panicked while holding the lock: answer 500, which the bench
            // reports.
            Err(_) => ResponseTemplate::new(500),
        }
    }
}

/// A `MockServer` with the refund mock mounted, and the state its responder keeps.
pub struct Stub {
    pub server: MockServer,
    state: Arc<Mutex<StubState>>,
    recording: bool,
}

impl Stub {
    /// `MockServer::start()` when `recording`, else a server built without request recording.
    pub async fn start(recording: bool) -> Result<Stub> {
        let server = if recording {
            MockServer::start().await
        } else {
            MockServer::builder().disable_request_recording().start().await
        };
        let stub = Stub { server, state: Arc::new(Mutex::new(StubState::new())), recording };
        stub.reset().await?;
        Ok(stub)
    }

    /// Forgets every mock and recorded request, starts the state afresh (one payment
    /// intent, nothing else) and mounts the refund mock again.
    pub async fn reset(&self) -> Result<()> {
        self.server.reset().await;
        *self.state.lock().map_err(|_| "the stub's state is poisoned")? = StubState::new();
        Mock::given(method("POST"))
            .and(path("/v1/refunds"))
            .respond_with(Refunds { state: Arc::clone(&self.state) })
            .mount(&self.server)
            .await;
        Ok(())
    }

    /// Checks that the stub holds one refund per answered request, of 1 cent each, and one
    /// recorded request each when recording is on.
    pub async fn check(&self, answered: u64) -> Result<()> {
        {
            let state = self.state.lock().map_err(|_| "the stub's state is poisoned")?;
            let refunds = state.refunds.len() as u64;
            let indexed = state.by_id.len() as u64;
            let cents: u64 =
                state.refunds.iter().filter(|r| r.payment_intent == INTENT).map(|r| r.amount).sum();
            let refunded = state.refunded.get(INTENT).copied().unwrap_or(0);
            if refunds != answered || indexed != answered || cents != answered || refunded != answered {
                return Err(format!(
                    "{answered} refunds answered but {refunds} in the stub ({indexed} by id, {cents} cents, {refunded} refunded)"
                )
                .into());
            }
            if state.refunds.iter().enumerate().any(|(i, r)| state.by_id.get(&r.id) != Some(&i)) {
                return Err("two refunds share an id".into());
            }
        }
        let recorded = self.server.received_requests().await.map(|r| r.len() as u64);
        match (self.recording, recorded) {
            (true, Some(n)) if n == answered => Ok(()),
            (false, None) => Ok(()),
            (_, recorded) => Err(format!("{answered} answered but recorded requests {recorded:?}").into()),
        }
    }
}
