//! The deliveries still to make and those made: one [`Delivery`] per event and endpoint, its
//! attempts, and when the next one is due on the service clock.
//!
//! Stripe's rule, compressed: an attempt that the endpoint answers 2xx within
//! [`DELIVERY_TIMEOUT_MS`] ends the delivery; anything else (another status, a refused
//! connection, no answer in time) is tried again after [`RETRY_AFTER_MS`] (Stripe's sandbox
//! tries three more times over a few hours; the fake over seconds of service time, so that a
//! jumped clock brings a retry at once), and after [`ATTEMPTS_MAX`] attempts the delivery is
//! given up. A delivery still to make is pending work of the fake: `twice check` waits for it.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::Endpoint;

/// How long the fake waits for an endpoint's answer before it counts the attempt failed.
pub const DELIVERY_TIMEOUT_MS: u64 = 10_000;
/// After the n-th failed attempt, the next comes this long later (service time).
pub const RETRY_AFTER_MS: [u64; 3] = [1_000, 2_000, 4_000];
/// The first attempt and one per retry.
pub const ATTEMPTS_MAX: u32 = RETRY_AFTER_MS.len() as u32 + 1;
/// At most this many attempts are remembered for the control API; older ones are let go.
const ATTEMPTS_KEPT_MAX: usize = 10_000;

/// Delivery numbers, unique in the process: an attempt that ends after a reset names no
/// delivery of the new state.
static NEXT_DELIVERY: AtomicU64 = AtomicU64::new(1);

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::payments) enum Standing {
    /// The next attempt is due at this service time.
    Due(u64),
    /// An attempt is on its way.
    Sending,
    /// Answered 2xx.
    Delivered,
    /// Every attempt failed.
    GaveUp,
    /// Its endpoint was deleted or disabled first.
    EndpointGone,
}

/// One event to send to one endpoint.
#[derive(Debug, Clone)]
pub(in crate::payments) struct Delivery {
    pub(in crate::payments) number: u64,
    /// The event's number in the log.
    pub(in crate::payments) event: usize,
    /// The endpoint's index.
    pub(in crate::payments) endpoint: usize,
    pub(in crate::payments) attempts: u32,
    pub(in crate::payments) standing: Standing,
}

/// One attempt, as the control API lists it.
#[derive(Debug, Clone)]
struct Attempt {
    delivery: u64,
    event: usize,
    endpoint: usize,
    attempt: u32,
    at_ms: u64,
    /// The endpoint's status, or why there was none.
    answer: Result<u16, String>,
}

/// The endpoints, the deliveries and the attempts made.
#[derive(Debug, Default)]
pub(in crate::payments) struct Webhooks {
    pub(in crate::payments) endpoints: Vec<Endpoint>,
    pub(in crate::payments) deliveries: Vec<Delivery>,
    attempts: Vec<Attempt>,
}

impl Webhooks {
    /// The index of the endpoint `id`, unless it was deleted.
    pub(in crate::payments) fn endpoint_index(&self, id: &str) -> Option<usize> {
        self.endpoints.iter().position(|e| e.id == id && !e.deleted)
    }

    pub(in crate::payments) fn live_endpoints(&self) -> usize {
        self.endpoints.iter().filter(|e| !e.deleted).count()
    }

    /// Queues the event numbered `event`, of type `kind`, made at `at_ms`, for every endpoint
    /// that wants it now.
    pub(in crate::payments) fn enqueue(&mut self, event: usize, kind: &str, at_ms: u64) {
        for (endpoint, _) in self.endpoints.iter().enumerate().filter(|(_, e)| e.wants(kind)) {
            self.deliveries.push(Delivery {
                number: NEXT_DELIVERY.fetch_add(1, Ordering::Relaxed),
                event,
                endpoint,
                attempts: 0,
                standing: Standing::Due(at_ms),
            });
        }
    }

    /// Ends what was still to be sent to the endpoint at `index`.
    pub(in crate::payments) fn end_deliveries_to(&mut self, index: usize) {
        for d in self.deliveries.iter_mut().filter(|d| d.endpoint == index) {
            if matches!(d.standing, Standing::Due(_)) {
                d.standing = Standing::EndpointGone;
            }
        }
    }

    /// The deliveries due by `now_ms`, now marked as being sent.
    pub(in crate::payments) fn take_due(&mut self, now_ms: u64) -> Vec<Delivery> {
        let mut due = Vec::new();
        for d in &mut self.deliveries {
            if let Standing::Due(at) = d.standing
                && at <= now_ms
            {
                d.standing = Standing::Sending;
                d.attempts += 1;
                due.push(d.clone());
            }
        }
        due
    }

    /// The earliest due time of a delivery waiting for its next attempt.
    pub(in crate::payments) fn next_due_ms(&self) -> Option<u64> {
        self.deliveries
            .iter()
            .filter_map(|d| match d.standing {
                Standing::Due(at) => Some(at),
                _ => None,
            })
            .min()
    }

    /// Notes how the attempt of delivery `number` went, at `now_ms`, and schedules the next.
    pub(in crate::payments) fn attempted(&mut self, number: u64, answer: Result<u16, String>, now_ms: u64) {
        let Some(d) = self.deliveries.iter_mut().find(|d| d.number == number) else { return };
        let delivered = matches!(answer, Ok(status) if (200..300).contains(&status));
        d.standing = match d.standing {
            // Deleted or disabled while the attempt was on its way: no retry.
            Standing::EndpointGone => Standing::EndpointGone,
            _ if delivered => Standing::Delivered,
            _ if d.attempts >= ATTEMPTS_MAX => Standing::GaveUp,
            _ => Standing::Due(
                now_ms + RETRY_AFTER_MS[(d.attempts as usize - 1).min(RETRY_AFTER_MS.len() - 1)],
            ),
        };
        if self.attempts.len() >= ATTEMPTS_KEPT_MAX {
            self.attempts.remove(0);
        }
        self.attempts.push(Attempt {
            delivery: number,
            event: d.event,
            endpoint: d.endpoint,
            attempt: d.attempts,
            at_ms: now_ms,
            answer,
        });
    }

    /// The deliveries not yet ended: being sent or due again.
    pub(in crate::payments) fn unfinished(&self) -> impl Iterator<Item = &Delivery> {
        self.deliveries.iter().filter(|d| matches!(d.standing, Standing::Due(_) | Standing::Sending))
    }

    /// How many deliveries of the event numbered `event` have not ended: the event's
    /// `pending_webhooks`.
    pub(in crate::payments) fn pending_for(&self, event: usize) -> usize {
        self.unfinished().filter(|d| d.event == event).count()
    }

    /// Every delivery and the attempts made, for `GET /__twice/webhooks`; `event_id` names an
    /// event by its number.
    pub(in crate::payments) fn report(&self, event_id: impl Fn(usize) -> String) -> Value {
        let endpoint = |i: usize| self.endpoints.get(i).map(|e| e.id.clone());
        let deliveries: Vec<Value> = self
            .deliveries
            .iter()
            .map(|d| {
                let (standing, due_ms) = match d.standing {
                    Standing::Due(at) => ("due", Some(at)),
                    Standing::Sending => ("sending", None),
                    Standing::Delivered => ("delivered", None),
                    Standing::GaveUp => ("gave_up", None),
                    Standing::EndpointGone => ("endpoint_gone", None),
                };
                json!({
                    "delivery": d.number,
                    "event": event_id(d.event),
                    "endpoint": endpoint(d.endpoint),
                    "attempts": d.attempts,
                    "standing": standing,
                    "due_ms": due_ms,
                })
            })
            .collect();
        let attempts: Vec<Value> = self
            .attempts
            .iter()
            .map(|a| {
                let (status, error) = match &a.answer {
                    Ok(status) => (Some(*status), None),
                    Err(why) => (None, Some(why.clone())),
                };
                json!({
                    "delivery": a.delivery,
                    "event": event_id(a.event),
                    "endpoint": endpoint(a.endpoint),
                    "attempt": a.attempt,
                    "at_ms": a.at_ms,
                    "status": status,
                    "error": error,
                })
            })
            .collect();
        json!({"deliveries": deliveries, "attempts": attempts})
    }
}
