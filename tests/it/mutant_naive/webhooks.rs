//! The naive worker's webhooks: an intent an event starts is kept as a trigger (in a JSON
//! file of its own beside the store), and the worker registers an endpoint once a trigger is
//! kept (moving it to its new URL after a restart). A delivery is taken one at a time: the
//! signature checked, an event received before answered without acting, a new one kept in the
//! file, then 200. The passes do the work: each kept event's payment is read from the service,
//! and once it shows `succeeded` the event's triggers start (once: the store holds an intent
//! id once). A registration is a write like any other: kept before it leaves, read back where
//! acks may lie, and after one whose fate is unknown the service's own events are read from
//! the API until every trigger has started.
//!
//! The same design as the reference executor's, in the naive worker's own way (a file written
//! whole, no SQL). Three bugs act here, each one wrong belief of a webhook handler:
//! [`Bug::WebhookNoDedupe`], [`Bug::WebhookAckFirst`] and [`Bug::WebhookTrustsBody`].

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use executor::services;
use runner::sim::{BoxFuture, Refusal, WebhookReceiver};
use scenarios::IntentSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use vocabulary::protocol::Service;

use super::store::St;
use super::{Bug, Worker};

/// The file the triggers, the events received and the endpoints are kept in.
pub(super) const HOOKS_FILE: &str = "naive-webhooks.json";

/// The one event type a trigger names.
const SUCCEEDED: &str = "payment_intent.succeeded";

/// An event kept: its id, its payment intent, and whether its triggers have started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Received {
    id: String,
    payment_intent: String,
    started: bool,
}

/// A worker's endpoint: without id and secret while its registration is on its way (or its
/// answer never came).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Endpoint {
    id: Option<String>,
    secret: Option<String>,
    url: String,
}

/// What receiving webhooks keeps.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Hooks {
    triggers: Vec<IntentSpec>,
    received: Vec<Received>,
    /// Each worker's endpoint, by worker id.
    endpoints: BTreeMap<String, Endpoint>,
}

impl Hooks {
    fn all_started(&self) -> bool {
        self.triggers.iter().all(|t| {
            let pi = t.on_event.as_ref().map(|e| e.payment_intent.as_str());
            self.received.iter().any(|r| r.started && Some(r.payment_intent.as_str()) == pi)
        })
    }
}

/// Where [`Hooks`] live: a file written whole, or memory ([`Bug::MemoryOnly`]).
pub(super) enum HookStore {
    File(PathBuf),
    Memory(Hooks),
}

impl HookStore {
    fn read(&self) -> Hooks {
        match self {
            HookStore::Memory(hooks) => hooks.clone(),
            HookStore::File(path) => std::fs::read(path)
                .ok()
                .map(|bytes| serde_json::from_slice(&bytes).expect("the naive hooks are valid JSON"))
                .unwrap_or_default(),
        }
    }

    fn change(&mut self, change: impl FnOnce(&mut Hooks)) {
        let mut hooks = self.read();
        change(&mut hooks);
        match self {
            HookStore::Memory(held) => *held = hooks,
            HookStore::File(path) => super::store::write_whole(path, &hooks),
        }
    }
}

/// What this life knows of its endpoint beyond the file.
#[derive(Debug, Default)]
pub(super) struct Listening {
    /// Registered (or moved) at this life's URL.
    ready: bool,
    /// A registration's fate was unknown: events may have gone where nobody can verify them.
    missed_events: bool,
    /// Where acks may lie: when the registration's 200 came, until it is read back.
    unconfirmed_since_ms: Option<u64>,
    /// [`Bug::WebhookAckFirst`]: events answered and not yet kept.
    unkept: Vec<Received>,
}

impl Worker {
    fn hooks(&self) -> std::sync::MutexGuard<'_, HookStore> {
        self.hooks.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn listening(&self) -> std::sync::MutexGuard<'_, Listening> {
        self.listening.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps an intent an event starts; an event of it started before starts it at once.
    pub(super) fn arm(&self, spec: &IntentSpec) -> Result<(), Refusal> {
        let Some(trigger) = &spec.on_event else { return Err(Refusal::Other("no event".into())) };
        executor::Action::parse(&spec.action, &spec.params).map_err(|e| Refusal::Other(e.to_string()))?;
        let hooks = self.hooks().read();
        if let Some(kept) = hooks.triggers.iter().find(|t| t.id == spec.id) {
            return if kept == spec {
                Ok(())
            } else {
                Err(Refusal::Other(format!("{} kept with another payload", spec.id)))
            };
        }
        self.hooks().change(|h| h.triggers.push(spec.clone()));
        if hooks.received.iter().any(|r| r.started && r.payment_intent == trigger.payment_intent) {
            self.start(spec);
        }
        Ok(())
    }

    /// Starts the intent a trigger keeps: recorded once (a second start finds it), unless
    /// the bug starts it anew.
    fn start(&self, trigger: &IntentSpec) {
        let plain = IntentSpec { on_event: None, ..trigger.clone() };
        // Read first: the store's guard must be gone before the write below takes it again.
        let existing = self.store().get(&plain.id);
        if self.has(Bug::WebhookNoDedupe)
            && let Some(mut rec) = existing
        {
            // The bug: every delivery is new work; the job for it starts again, a new key.
            rec.state = St::Recorded;
            rec.key = self.new_key();
            rec.attempts = 0;
            rec.maybe_executed = false;
            rec.key_first_sent_ms = None;
            let _ = self.store().write(rec, true);
            return;
        }
        let _ = self.propose_now(&plain);
    }

    /// At the start of each pass: the endpoint registered (or moved here), read back where acks
    /// may lie, the events missed meanwhile read from the API, and the events received started
    /// where the service shows them paid.
    pub(super) async fn webhooks_pass(&self) {
        let Some(url) = self.webhook_url.clone() else { return };
        let Some(service) = self.config.services.get("payments") else { return };
        if self.hooks().read().triggers.is_empty() {
            return;
        }
        if !self.listening().ready {
            let registered = self.register(service, &url).await;
            let mut listening = self.listening();
            match registered {
                Ok(()) => listening.ready = true,
                Err(()) => listening.missed_events = true,
            }
        }
        let (ready, unconfirmed, missed) = {
            let l = self.listening();
            (l.ready, l.unconfirmed_since_ms, l.missed_events)
        };
        if let Some(since_ms) = unconfirmed.filter(|_| ready) {
            self.confirm_endpoint(service, since_ms).await;
        }
        if ready && missed {
            self.recover_missed_events(service).await;
        }
        self.start_received(service).await;
    }

    /// Registers this worker's endpoint at `url`, or moves the one it has there.
    async fn register(&self, service: &Service, url: &str) -> Result<(), ()> {
        let kept = self.hooks().read().endpoints.get(&self.worker_id).cloned();
        let endpoint = match kept {
            Some(Endpoint { id: Some(id), secret: Some(secret), url: at }) => {
                if at != url {
                    self.call(services::move_endpoint(service, &self.config, &id, url)).await?;
                }
                Endpoint { id: Some(id), secret: Some(secret), url: url.to_string() }
            }
            kept => {
                // An earlier life's registration whose answer never came: what it made, its
                // events are read from the API instead.
                if kept.is_some() {
                    self.listening().missed_events = true;
                }
                // Kept before it leaves: a crash that follows leaves the next life knowing.
                let in_flight = Endpoint { url: url.to_string(), ..Endpoint::default() };
                self.keep_endpoint(in_flight);
                let request = services::register_endpoint(
                    service,
                    &self.config,
                    url,
                    executor::intent_engine::EVENT_TYPES,
                );
                let made = self.call(request).await?;
                let field = |name: &str| made.get(name).and_then(Value::as_str).map(str::to_string);
                let (Some(id), Some(secret)) = (field("id"), field("secret")) else { return Err(()) };
                Endpoint { id: Some(id), secret: Some(secret), url: url.to_string() }
            }
        };
        self.keep_endpoint(endpoint);
        if service.contract.acks == vocabulary::Acks::MayLie {
            self.listening().unconfirmed_since_ms = Some(self.now());
        }
        Ok(())
    }

    fn keep_endpoint(&self, endpoint: Endpoint) {
        let worker = self.worker_id.clone();
        self.hooks().change(|h| {
            h.endpoints.insert(worker, endpoint);
        });
    }

    /// Reads back a registration answered where acks may lie: once it shows at this life's
    /// URL it is trusted; while it does not, once no read can lag and nothing sent can still
    /// land since the answer, the 200 did nothing, and it is made again.
    async fn confirm_endpoint(&self, service: &Service, since_ms: u64) {
        let kept = self.hooks().read().endpoints.get(&self.worker_id).cloned();
        let Some(Endpoint { id: Some(id), secret, url }) = kept else { return };
        let looked_at = self.now();
        let Ok(answer) = self.transport.send(services::read_endpoint(service, &self.config, &id)).await
        else {
            return;
        };
        let shown = answer.json().and_then(|e| e.get("url").and_then(Value::as_str).map(str::to_string));
        if answer.status == 200 && shown.as_deref() == Some(url.as_str()) {
            self.listening().unconfirmed_since_ms = None;
            return;
        }
        let c = &service.contract;
        let settled_at = since_ms
            + c.settle_ms_max
            + c.read_lag_ms_max
            + self.limits().request_timeout_ms
            + self.margin_ms();
        if !(answer.status == 200 || answer.status == 404) || looked_at < settled_at {
            return;
        }
        // The 200 did nothing: a create is made again, a move sent again.
        let again = if answer.status == 404 {
            Endpoint { url, ..Endpoint::default() }
        } else {
            Endpoint { id: Some(id), secret, url: shown.unwrap_or_default() }
        };
        self.keep_endpoint(again);
        let mut listening = self.listening();
        listening.unconfirmed_since_ms = None;
        listening.ready = false;
        listening.missed_events = true;
    }

    /// Keeps the `payment_intent.succeeded` events the API lists (the service's own record,
    /// so genuine) about a trigger kept that never reached this worker.
    async fn recover_missed_events(&self, service: &Service) {
        let Ok(list) = self.call(services::list_events(service, &self.config, SUCCEEDED)).await else {
            return;
        };
        for event in list.get("data").and_then(Value::as_array).into_iter().flatten() {
            let text = |pointer: &str| event.pointer(pointer).and_then(Value::as_str).map(str::to_string);
            if let (Some(id), Some(SUCCEEDED), Some(pi)) =
                (text("/id"), text("/type").as_deref(), text("/data/object/id"))
            {
                self.keep_event(&id, &pi);
            }
        }
        if self.hooks().read().all_started() {
            self.listening().missed_events = false;
        }
    }

    /// Keeps event `id` about `pi` if a trigger waits for it and it is not kept yet (with
    /// [`Bug::WebhookNoDedupe`], every time). Whether it was new.
    fn keep_event(&self, id: &str, pi: &str) -> bool {
        let dedupe = !self.has(Bug::WebhookNoDedupe);
        let mut new = false;
        self.hooks().change(|h| {
            let wanted =
                h.triggers.iter().any(|t| t.on_event.as_ref().is_some_and(|e| e.payment_intent == pi));
            if wanted && !(dedupe && h.received.iter().any(|r| r.id == id)) {
                h.received.push(Received {
                    id: id.to_string(),
                    payment_intent: pi.to_string(),
                    started: false,
                });
                new = true;
            }
        });
        new
    }

    /// Starts the triggers of each event received whose payment the service shows succeeded
    /// now (with [`Bug::WebhookTrustsBody`], of each event at all: its body said so); what
    /// cannot be read yet waits for the next pass.
    async fn start_received(&self, service: &Service) {
        let unkept = std::mem::take(&mut self.listening().unkept);
        let kept = self.hooks().read().received.into_iter().enumerate();
        let waiting: Vec<(Option<usize>, Received)> = kept
            .filter(|(_, r)| !r.started)
            .map(|(n, r)| (Some(n), r))
            .chain(unkept.into_iter().map(|r| (None, r)))
            .collect();
        for (n, event) in waiting {
            if !self.has(Bug::WebhookTrustsBody) {
                let read = services::read_payment_intent(service, &self.config, &event.payment_intent);
                let status = self.call(read).await.ok();
                let status = status.as_ref().and_then(|p| p.get("status").and_then(Value::as_str));
                if status != Some("succeeded") {
                    if n.is_none() {
                        self.listening().unkept.push(event);
                    }
                    continue;
                }
            }
            let hooks = self.hooks().read();
            let pi = &event.payment_intent;
            for trigger in
                hooks.triggers.iter().filter(|t| t.on_event.as_ref().is_some_and(|e| &e.payment_intent == pi))
            {
                self.start(trigger);
            }
            self.hooks().change(|h| match n.and_then(|n| h.received.get_mut(n)) {
                Some(kept) => kept.started = true,
                None => h.received.push(Received { started: true, ..event }),
            });
        }
    }

    /// Sends `request`: its JSON answer when 2xx.
    async fn call(&self, request: executor::world::HttpRequest) -> Result<Value, ()> {
        match self.transport.send(request).await {
            Ok(answer) if (200..300).contains(&answer.status) => answer.json().ok_or(()),
            _ => Err(()),
        }
    }

    /// Takes one delivery: its status.
    async fn take(&self, signature: Option<&str>, body: &[u8]) -> u16 {
        let _turn = self.webhook_turn.lock().await;
        let kept = self.hooks().read().endpoints.get(&self.worker_id).cloned();
        let Some(secret) = kept.and_then(|e| e.secret.filter(|_| e.id.is_some())) else { return 503 };
        let now_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // The bug: the body is believed as it comes.
        if !self.has(Bug::WebhookTrustsBody)
            && vocabulary::webhook::verify_stripe_signature(signature, body, &secret, now_s).is_err()
        {
            return 400;
        }
        let Ok(event) = serde_json::from_slice::<Value>(body) else { return 400 };
        let text = |p: &str| event.pointer(p).and_then(Value::as_str).map(str::to_string);
        let (Some(id), Some(kind), Some(pi)) = (text("/id"), text("/type"), text("/data/object/id")) else {
            return 400;
        };
        if kind != SUCCEEDED {
            return 200;
        }
        if self.has(Bug::WebhookAckFirst) {
            // The bug: answered now, kept for the work that follows, in memory.
            let event = Received { id, payment_intent: pi, started: false };
            self.listening().unkept.push(event);
            return 200;
        }
        if self.keep_event(&id, &pi) && self.has(Bug::WebhookNoDedupe) {
            // Acting on every delivery, it acts at once, in the handler.
            self.pass().await;
        }
        200
    }
}

/// The worker as its endpoint's receiver.
pub(super) struct Receiver(pub(super) Arc<Worker>);

impl WebhookReceiver for Receiver {
    fn receive<'a>(&'a self, signature: Option<&'a str>, body: &'a [u8]) -> BoxFuture<'a, u16> {
        Box::pin(self.0.take(signature, body))
    }
}
