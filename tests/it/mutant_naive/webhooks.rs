//! The naive worker's webhooks: an intent an event starts is kept as a trigger (in a JSON
//! file of its own beside the store), the worker registers an endpoint once a trigger is kept
//! (moving it to its new URL after a restart), and a delivery is taken one at a time: the
//! signature checked, an event taken before answered without acting, the payment read from
//! the service, the triggers started (once: the store holds an intent id once), the event
//! noted, then 200. Three bugs act here, each one wrong belief of a webhook handler:
//! [`Bug::WebhookNoDedupe`], [`Bug::WebhookAckFirst`] and [`Bug::WebhookTrustsBody`].

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{SystemTime, UNIX_EPOCH};

use runner::sim::{BoxFuture, Refusal, WebhookReceiver};
use scenarios::IntentSpec;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::store::St;
use super::{Bug, Worker};

/// The file the triggers, the events taken and the endpoint are kept in.
pub(super) const HOOKS_FILE: &str = "naive-webhooks.json";

/// What receiving webhooks keeps.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Hooks {
    triggers: Vec<IntentSpec>,
    /// Events taken: (event id, payment intent).
    taken: Vec<(String, String)>,
    /// The worker's endpoint: (id, secret, URL).
    endpoint: Option<(String, String, String)>,
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

impl Worker {
    fn hooks(&self) -> std::sync::MutexGuard<'_, HookStore> {
        self.hooks.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Keeps an intent an event starts; an event of it taken before starts it at once.
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
        if hooks.taken.iter().any(|(_, pi)| *pi == trigger.payment_intent) {
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

    /// Registers the endpoint (or moves it here), once a trigger is kept; once per life.
    pub(super) async fn ensure_endpoint(&self) {
        let Some(url) = self.webhook_url.clone() else { return };
        let hooks = self.hooks().read();
        if self.endpoint_ready.load(Ordering::SeqCst) || hooks.triggers.is_empty() {
            return;
        }
        let Some(service) = self.config.services.get("payments") else { return };
        let request = match &hooks.endpoint {
            Some((_, _, at)) if *at == url => {
                self.endpoint_ready.store(true, Ordering::SeqCst);
                return;
            }
            Some((id, _, _)) => executor::services::move_endpoint(service, &self.config, id, &url),
            None => executor::services::register_endpoint(
                service,
                &self.config,
                &url,
                executor::intent_engine::EVENT_TYPES,
            ),
        };
        let Ok(answer) = self.transport.send(request).await else { return };
        let Some(body) = answer.json().filter(|_| answer.status == 200) else { return };
        let endpoint = match hooks.endpoint {
            Some((id, secret, _)) => (id, secret, url),
            None => {
                let field = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_string);
                let (Some(id), Some(secret)) = (field("id"), field("secret")) else { return };
                (id, secret, url)
            }
        };
        self.hooks().change(|h| h.endpoint = Some(endpoint));
        self.endpoint_ready.store(true, Ordering::SeqCst);
    }

    /// Takes one delivery: its status.
    async fn take(self: Arc<Self>, signature: Option<String>, body: Vec<u8>) -> u16 {
        if self.has(Bug::WebhookAckFirst) {
            // The bug: the 200 goes first, and the work after it, on its own.
            let worker = Arc::clone(&self);
            tokio::spawn(async move { worker.take_now(signature.as_deref(), &body).await });
            return 200;
        }
        self.take_now(signature.as_deref(), &body).await
    }

    async fn take_now(&self, signature: Option<&str>, body: &[u8]) -> u16 {
        let _turn = self.webhook_turn.lock().await;
        let hooks = self.hooks().read();
        let Some((_, secret, _)) = &hooks.endpoint else { return 503 };
        let now_s = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        // The bug: the body is believed as it comes.
        if !self.has(Bug::WebhookTrustsBody)
            && vocabulary::webhook::verify_stripe_signature(signature, body, secret, now_s).is_err()
        {
            return 400;
        }
        let Ok(event) = serde_json::from_slice::<Value>(body) else { return 400 };
        let text = |p: &str| event.pointer(p).and_then(Value::as_str).map(str::to_string);
        let (Some(id), Some(kind), Some(pi)) = (text("/id"), text("/type"), text("/data/object/id")) else {
            return 400;
        };
        if kind != "payment_intent.succeeded" {
            return 200;
        }
        if !self.has(Bug::WebhookNoDedupe) && hooks.taken.iter().any(|(e, _)| *e == id) {
            return 200;
        }
        let status = if self.has(Bug::WebhookTrustsBody) {
            // The bug, again: the event's copy of the payment is its state.
            text("/data/object/status")
        } else {
            let Some(service) = self.config.services.get("payments") else { return 503 };
            let read = executor::services::read_payment_intent(service, &self.config, &pi);
            match self.transport.send(read).await {
                Ok(answer) if answer.status == 200 => {
                    answer.json().and_then(|p| p.get("status").and_then(Value::as_str).map(str::to_string))
                }
                _ => return 503,
            }
        };
        if status.as_deref() != Some("succeeded") {
            // Not yet, as far as this read shows: reads may lag; come back.
            return 503;
        }
        for trigger in
            hooks.triggers.iter().filter(|t| t.on_event.as_ref().is_some_and(|e| e.payment_intent == pi))
        {
            self.start(trigger);
        }
        if self.has(Bug::WebhookNoDedupe) {
            // Acting on every delivery, it acts at once, in the handler.
            self.pass().await;
        }
        self.hooks().change(|h| h.taken.push((id, pi)));
        200
    }
}

/// The worker as its endpoint's receiver.
pub(super) struct Receiver(pub(super) Arc<Worker>);

impl WebhookReceiver for Receiver {
    fn receive<'a>(&'a self, signature: Option<&'a str>, body: &'a [u8]) -> BoxFuture<'a, u16> {
        let worker = Arc::clone(&self.0);
        Box::pin(worker.take(signature.map(str::to_string), body.to_vec()))
    }
}
