//! Webhooks in the simulation: no socket, the payments fake's deliveries handed to the
//! executors in process, on virtual time.
//!
//! A worker that receives webhooks listens at a URL of its own (`http://<worker>.webhooks.sim/webhooks`),
//! which it registers with the payments fake as a real app would. [`pump`] does what the
//! fake's delivery task does live: it takes each delivery when due and hands it to the
//! receiver listening at its URL, or fails it as a refused connection when none is (a
//! crashed worker). A crash aborts the worker's deliveries in flight, which fail as a reset
//! connection does; the service's retry then finds the restarted worker.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_services::payments::{Outgoing, Payments};
use tokio::task::AbortHandle;

use super::executors::WebhookReceiver;

/// With nothing due, the pump looks again this often (a clock jump makes a retry due).
const IDLE_POLL_MS: u64 = 200;

/// The URL worker `worker` listens at.
pub(super) fn url_of(worker: &str) -> String {
    format!("http://{worker}.webhooks.sim/webhooks")
}

/// Who listens where, and the deliveries each is taking.
#[derive(Default)]
pub(super) struct Endpoints {
    by_url: Mutex<BTreeMap<String, Listening>>,
}

struct Listening {
    worker: String,
    receiver: Arc<dyn WebhookReceiver>,
    in_flight: Vec<AbortHandle>,
}

impl Endpoints {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Listening>> {
        self.by_url.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Worker `worker` listens at its URL from now on (a restart replaces its earlier life).
    pub(super) fn listen(&self, worker: &str, receiver: Arc<dyn WebhookReceiver>) {
        self.close(worker);
        let listening = Listening { worker: worker.to_string(), receiver, in_flight: Vec::new() };
        self.lock().insert(url_of(worker), listening);
    }

    /// Worker `worker` is gone: nobody listens at its URL, and what it was taking is cut off.
    pub(super) fn close(&self, worker: &str) {
        let mut by_url = self.lock();
        by_url.retain(|_, l| {
            if l.worker != worker {
                return true;
            }
            l.in_flight.iter().for_each(AbortHandle::abort);
            false
        });
    }

    /// Hands one delivery to whoever listens at its URL.
    fn dispatch(&self, payments: &Payments, outgoing: Outgoing) {
        let mut by_url = self.lock();
        let Some(listening) = by_url.get_mut(&outgoing.url) else {
            payments
                .delivery_attempted(outgoing.delivery, Err(format!("could not connect to {}", outgoing.url)));
            return;
        };
        listening.in_flight.retain(|h| !h.is_finished());
        let receiver = Arc::clone(&listening.receiver);
        let signature = outgoing
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(vocabulary::webhook::SIGNATURE_HEADER))
            .map(|(_, value)| value.clone());
        let body = outgoing.body.into_bytes();
        let taking = tokio::spawn(async move { receiver.receive(signature.as_deref(), &body).await });
        listening.in_flight.push(taking.abort_handle());
        let (payments, delivery, timeout_ms) = (payments.clone(), outgoing.delivery, outgoing.timeout_ms);
        tokio::spawn(async move {
            let answer = match tokio::time::timeout(Duration::from_millis(timeout_ms), taking).await {
                Ok(Ok(status)) => Ok(status),
                Ok(Err(_)) => Err("the connection was reset: the worker was killed".to_string()),
                Err(_) => Err(format!("no answer within {timeout_ms} ms")),
            };
            payments.delivery_attempted(delivery, answer);
        });
    }
}

/// Hands each delivery to its receiver when it is due, for as long as the run lasts (the
/// runtime's end stops it).
pub(super) async fn pump(payments: Payments, endpoints: Arc<Endpoints>) {
    loop {
        for outgoing in payments.take_due_deliveries() {
            endpoints.dispatch(&payments, outgoing);
        }
        let wait_ms = payments.next_delivery_in_ms().map_or(IDLE_POLL_MS, |ms| ms.clamp(1, IDLE_POLL_MS));
        tokio::time::sleep(Duration::from_millis(wait_ms)).await;
    }
}
