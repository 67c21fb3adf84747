//! Intents an event starts (`docs/protocol.md` §3.2, "Intents an event starts").
//!
//! A proposal with `on_event` is kept as a trigger, not recorded: nothing is sent for it until
//! a genuine event of that type about that object arrives. The worker then registers an
//! endpoint of its own with the payments API (once a trigger is kept and it listens; a
//! restarted worker moves its endpoint to its new URL rather than making another, which would
//! leave the deliveries owed to the old one unanswered).
//!
//! A delivery is taken one at a time, and answered 2xx only once it is durable: the
//! signature is checked against the endpoint's secret and the wall clock (a forged or
//! replayed delivery gets a 400 and is not kept); an event received before is answered 200
//! at once (the service delivers at least once); a new one is kept as received, then 200. A
//! crash before that leaves no 2xx, and the service's retry finds the worker again.
//!
//! What the event asks for is done by the passes, which the worker's own retries drive (a
//! handler that did it would depend on the service's few retries for its own reads): each
//! received event's payment is read from the API (the event's copy may be stale, or a lie),
//! and once it shows `succeeded` the event's triggers are proposed as intents, whose ids the
//! log holds once, so an event received twice, by two workers or again after a crash, still
//! starts each once; then the event is noted as started. A read that fails, or that does not
//! show the payment yet (reads may lag), is tried again at the next pass.
//!
//! A registration that went wrong (no answer, an error) may have made an endpoint whose
//! secret never arrived: the service sends that endpoint's events where this worker cannot
//! verify them. The worker registers again and, until every trigger it keeps has started,
//! reads the service's own `payment_intent.succeeded` events from the API at each pass
//! (`GET /v1/events`), keeping those it never received. Where the payments service's acks may
//! lie, a registration's 200 is read back before it is trusted, and made again when the
//! endpoint still does not show once no read can lag.

use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::{Executor, Pending, Proposal, ProposeError};
use crate::log::{Armed, Endpoint, Trigger};
use crate::model::Intent;
use crate::services;
use crate::world::HttpRequest;
use vocabulary::OnEvent;

/// The event types an endpoint asks for: those a trigger can name.
pub const EVENT_TYPES: &[&str] = &["payment_intent.succeeded"];

/// How a delivery was answered: its status, and a sentence why (the answer's body).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookAnswer {
    pub status: u16,
    pub note: String,
}

impl Executor {
    /// Keeps a proposal that an event starts, after the checks any proposal gets; an event of
    /// it taken before starts it at once.
    pub(super) fn arm(&self, proposal: Proposal, on_event: OnEvent) -> Result<Intent, ProposeError> {
        if !proposal.after.is_empty() || proposal.replaces.is_some() {
            let why = "an intent an event starts comes after nothing and replaces nothing".to_string();
            return Err(ProposeError::Workflow(proposal.id, why));
        }
        let intent = self.check_proposal(Proposal { on_event: None, ..proposal }, &Pending::new())?;
        let trigger = Trigger {
            intent_id: intent.id.clone(),
            event_type: on_event.kind,
            object_id: on_event.payment_intent,
            proposal: json!({"action": intent.action, "params": intent.params}).to_string(),
        };
        if self.log().arm(&trigger)? == Armed::Conflict {
            return Err(ProposeError::Conflict(intent.id));
        }
        self.armed.store(true, Ordering::SeqCst);
        if self.log().event_started_for(&trigger.event_type, &trigger.object_id)? {
            return self.fire(&trigger);
        }
        Ok(intent)
    }

    /// Proposes the intent `trigger` keeps (once: the log holds its id at most once).
    fn fire(&self, trigger: &Trigger) -> Result<Intent, ProposeError> {
        let id = trigger.intent_id.clone();
        let corrupt = |problem: String| ProposeError::Payload(id.clone(), problem);
        let kept: Value = serde_json::from_str(&trigger.proposal).map_err(|e| corrupt(e.to_string()))?;
        let action = kept.get("action").and_then(Value::as_str).ok_or_else(|| corrupt("no action".into()))?;
        let params = kept.get("params").and_then(Value::as_str).ok_or_else(|| corrupt("no params".into()))?;
        let params: Value = serde_json::from_str(params).map_err(|e| corrupt(e.to_string()))?;
        self.propose(Proposal {
            id: id.clone(),
            action: action.to_string(),
            params,
            replaces: None,
            after: Vec::new(),
            on_event: None,
        })
    }

    /// Listens for webhooks at `url` (where deliveries reach [`Executor::receive_webhook`]):
    /// the endpoint is registered at the next pass, once a trigger is kept.
    pub fn listen_at(&self, url: String) {
        *self.webhook_url.lock().unwrap_or_else(|p| p.into_inner()) = Some(url);
        // A restarted worker finds the triggers its earlier life kept.
        if self.log().has_triggers().unwrap_or(false) {
            self.armed.store(true, Ordering::SeqCst);
        }
    }

    /// Registers this worker's endpoint, or moves it to this life's URL, if a trigger is kept
    /// and the worker listens; once per life. A failure is tried again at the next pass.
    pub(super) async fn ensure_endpoint(&self) {
        let Some(service) =
            self.config.services.get("payments").filter(|_| self.armed.load(Ordering::SeqCst))
        else {
            return;
        };
        if !self.endpoint_ready.load(Ordering::SeqCst) {
            let url = self.webhook_url.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let Some(url) = url else { return };
            match self.register(service, &url).await {
                Ok(()) => self.endpoint_ready.store(true, Ordering::SeqCst),
                // An endpoint may have been made whose secret never reached us: the events
                // sent to it are read from the API once a new one is registered.
                Err(_) => self.missed_events.store(true, Ordering::SeqCst),
            }
        }
        let since = *self.unconfirmed_since_ms.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(since) = since.filter(|_| self.endpoint_ready.load(Ordering::SeqCst)) {
            self.confirm_endpoint(service, since).await;
        }
        if self.endpoint_ready.load(Ordering::SeqCst) && self.missed_events.load(Ordering::SeqCst) {
            self.recover_missed_events(service).await;
        }
    }

    /// Reads back a registration answered where acks may lie: the endpoint shows at its URL
    /// (confirmed), or it still does not once no read can lag and no request can land any
    /// more since the answer came (the 200 did nothing: registered again at the next pass,
    /// the events of the meantime read from the API), or neither yet (read again next pass).
    async fn confirm_endpoint(&self, service: &vocabulary::protocol::Service, since_ms: u64) {
        let worker = self.config.worker_id.clone();
        let Ok(Some(endpoint)) = self.log().endpoint(&worker) else { return };
        let read = services::read_endpoint(service, &self.config, &endpoint.id);
        let looked_at = self.now();
        let Ok(answer) = self.world.transport.send(read).await else { return };
        let shown = answer.json().and_then(|e| e.get("url").and_then(Value::as_str).map(str::to_string));
        if answer.status == 200 && shown.as_deref() == Some(endpoint.url.as_str()) {
            *self.unconfirmed_since_ms.lock().unwrap_or_else(|p| p.into_inner()) = None;
            return;
        }
        let contract = &service.contract;
        let settled_at = since_ms
            + contract.settle_ms_max
            + contract.read_lag_ms_max
            + self.config.limits.request_timeout_ms
            + super::SAFETY_MARGIN_MS;
        if !(answer.status == 200 || answer.status == 404) || looked_at < settled_at {
            return;
        }
        // The 200 did nothing. A create is made again (its events may have gone nowhere); a
        // move is sent again.
        if answer.status == 404 {
            let _ = self.log().keep_endpoint(&worker, &Endpoint::in_flight(&endpoint.url));
        } else {
            let _ =
                self.log().keep_endpoint(&worker, &Endpoint { url: shown.unwrap_or_default(), ..endpoint });
        }
        *self.unconfirmed_since_ms.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.endpoint_ready.store(false, Ordering::SeqCst);
        self.missed_events.store(true, Ordering::SeqCst);
    }

    /// Keeps as received the events the service made that never reached this worker: each
    /// `payment_intent.succeeded` the API lists (its own record, so genuine) about a trigger
    /// kept. Until every trigger kept has started, at every pass; a failure is tried again at
    /// the next.
    async fn recover_missed_events(&self, service: &vocabulary::protocol::Service) {
        let Ok(list) = self.call(services::list_events(service, &self.config, EVENT_TYPES[0])).await else {
            return;
        };
        let events = list.get("data").and_then(Value::as_array).cloned().unwrap_or_default();
        for event in events {
            let text = |pointer: &str| event.pointer(pointer).and_then(Value::as_str).map(str::to_string);
            let (Some(id), Some(kind), Some(object)) = (text("/id"), text("/type"), text("/data/object/id"))
            else {
                continue;
            };
            if !self.log().triggers_for(&kind, &object).unwrap_or_default().is_empty() {
                let _ = self.log().receive_event(&id, &kind, &object, self.now());
            }
        }
        if self.log().all_triggers_started().unwrap_or(false) {
            self.missed_events.store(false, Ordering::SeqCst);
        }
    }

    async fn register(&self, service: &vocabulary::protocol::Service, url: &str) -> Result<(), String> {
        let worker = self.config.worker_id.clone();
        let kept = self.log().endpoint(&worker).map_err(|e| e.to_string())?;
        let endpoint = match kept {
            Some(e) if e.is_registered() && e.url == url => return Ok(()),
            Some(e) if e.is_registered() => {
                self.call(services::move_endpoint(service, &self.config, &e.id, url)).await?;
                Endpoint { url: url.to_string(), ..e }
            }
            kept => {
                // A registration of an earlier life whose answer never came (it was killed
                // sending it): what it made, its events are read from the API instead.
                if kept.is_some() {
                    self.missed_events.store(true, Ordering::SeqCst);
                }
                // Kept before it leaves, as an intent is `submitted`: a crash that follows
                // leaves the next life knowing a registration may have been made.
                self.log().keep_endpoint(&worker, &Endpoint::in_flight(url)).map_err(|e| e.to_string())?;
                let made =
                    self.call(services::register_endpoint(service, &self.config, url, EVENT_TYPES)).await?;
                let field = |name: &str| made.get(name).and_then(Value::as_str).map(str::to_string);
                let (Some(id), Some(secret)) = (field("id"), field("secret")) else {
                    return Err(format!("the endpoint's answer has no id and secret: {made}"));
                };
                Endpoint { id, secret, url: url.to_string() }
            }
        };
        self.log().keep_endpoint(&worker, &endpoint).map_err(|e| e.to_string())?;
        if service.contract.acks == vocabulary::Acks::MayLie {
            *self.unconfirmed_since_ms.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.now());
        }
        Ok(())
    }

    /// Sends `request`; its JSON answer when the status is 2xx.
    async fn call(&self, request: HttpRequest) -> Result<Value, String> {
        let what = format!("{} {}", request.method, request.url);
        let response = self.world.transport.send(request).await.map_err(|e| format!("{what}: {e}"))?;
        if !(200..300).contains(&response.status) {
            return Err(format!("{what}: HTTP {}", response.status));
        }
        response.json().ok_or_else(|| format!("{what}: an answer that is not JSON"))
    }

    /// Takes one webhook delivery: `signature` is its `Stripe-Signature` header.
    pub async fn receive_webhook(&self, signature: Option<&str>, body: &[u8]) -> WebhookAnswer {
        let _turn = self.webhook_turn.lock().await;
        match self.take_webhook(signature, body).await {
            Ok(note) => WebhookAnswer { status: 200, note },
            Err((status, note)) => WebhookAnswer { status, note },
        }
    }

    async fn take_webhook(&self, signature: Option<&str>, body: &[u8]) -> Result<String, (u16, String)> {
        let log_error = |e: crate::log::LogError| (500, e.to_string());
        let endpoint = self
            .log()
            .endpoint(&self.config.worker_id)
            .map_err(log_error)?
            .filter(Endpoint::is_registered)
            .ok_or((503, "no endpoint registered yet".to_string()))?;
        // The wall clock, as the SDKs check it: the service signs with its wall clock too.
        let now_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        vocabulary::webhook::verify_stripe_signature(signature, body, &endpoint.secret, now_s)
            .map_err(|e| (400, format!("refused: {e}")))?;
        let event: Value = serde_json::from_slice(body).map_err(|e| (400, format!("not an event: {e}")))?;
        let text = |pointer: &str| event.pointer(pointer).and_then(Value::as_str).map(str::to_string);
        let (Some(id), Some(kind), Some(object)) = (text("/id"), text("/type"), text("/data/object/id"))
        else {
            return Err((400, "an event needs an id, a type and data.object.id".into()));
        };
        if !EVENT_TYPES.contains(&kind.as_str()) {
            return Ok(format!("{kind}: not an event this executor acts on"));
        }
        if self.log().receive_event(&id, &kind, &object, self.now()).map_err(log_error)? {
            Ok(format!("{id} received"))
        } else {
            Ok(format!("{id} was received already"))
        }
    }

    /// Starts what the events received ask for, where the service shows it: each event's
    /// payment is read now, and once it shows `succeeded` its triggers are proposed and the
    /// event noted as started. What cannot be read, or does not show yet, waits for the next
    /// pass.
    pub(super) async fn start_received(&self) {
        let armed = self.armed.load(Ordering::SeqCst);
        let Some(service) = self.config.services.get("payments").filter(|_| armed) else { return };
        let waiting = self.log().events_waiting().unwrap_or_default();
        for (id, kind, object) in waiting {
            let read = self.call(services::read_payment_intent(service, &self.config, &object)).await;
            let status = read.ok().and_then(|p| p.get("status").and_then(Value::as_str).map(str::to_string));
            if status.as_deref() != Some("succeeded") {
                continue;
            }
            let Ok(triggers) = self.log().triggers_for(&kind, &object) else { return };
            if triggers.iter().all(|t| self.fire(t).is_ok()) {
                let _ = self.log().event_started(&id, self.now());
            }
        }
    }
}
