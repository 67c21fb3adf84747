//! The deliveries still to make and those made: one [`Delivery`] per event and endpoint, its
//! attempts, and when the next one is due on the service clock.
//!
//! Stripe's rule, compressed: an attempt that the endpoint answers 2xx within
//! [`DELIVERY_TIMEOUT_MS`] ends the delivery; anything else (another status, a refused
//! connection, no answer in time) is tried again after [`RETRY_AFTER_MS`] (Stripe's sandbox
//! tries three more times over a few hours; the fake over seconds of service time, so that a
//! jumped clock brings a retry at once), and after [`ATTEMPTS_MAX`] attempts the delivery is
//! given up. A delivery still to make is pending work of the fake: `twice check` waits for it.
//!
//! The webhook faults of the request that made an event ([`WebhookPlan`]) shape its deliveries
//! here: a second delivery (`duplicate_webhook`), a late first attempt (`delay_webhook`), a
//! lost 2xx (`lose_webhook_ack`), attempts that fail unsent (`webhook_endpoint_down`), and a
//! replay under an old signature (`stale_webhook`). A replay, and a forged event (sent through
//! the control API, as an attacker would send it), is one attempt: nobody retries it.

use std::sync::Arc;

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use super::Endpoint;
use crate::fault_engine::WebhookPlan;

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
    /// A replay or a forgery, answered with something other than 2xx: refused, as it should be.
    Refused,
}

/// How a delivery is signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::payments) enum Signed {
    /// With the endpoint's secret, now.
    Genuine,
    /// With the endpoint's secret, `STALE_SIGNATURE_AGE_S` ago: a replay of a genuine event.
    Stale,
    /// With a secret that is not the endpoint's, carrying this body (an event the fake never
    /// made).
    Forged { body: Arc<str>, secret: Arc<str>, event_id: Arc<str> },
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
    pub(in crate::payments) signed: Signed,
    /// The endpoint's next 2xx is lost (`lose_webhook_ack`).
    lose_ack: bool,
    /// Attempts due before this service time fail unsent (`webhook_endpoint_down`).
    down_until_ms: u64,
}

impl Delivery {
    fn new(event: usize, endpoint: usize, due_ms: u64, signed: Signed) -> Delivery {
        Delivery {
            number: NEXT_DELIVERY.fetch_add(1, Ordering::Relaxed),
            event,
            endpoint,
            attempts: 0,
            standing: Standing::Due(due_ms),
            signed,
            lose_ack: false,
            down_until_ms: 0,
        }
    }

    /// A replay or a forgery: one attempt, never retried.
    fn one_shot(&self) -> bool {
        self.signed != Signed::Genuine
    }
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

/// A payment the customer makes once an app listens for it (a scenario's trigger): the
/// intent succeeds, or (`forged`) an attacker claims it did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::payments) struct Awaiting {
    pub(in crate::payments) payment_intent: String,
    pub(in crate::payments) forged: bool,
    /// When it happens: [`PAY_AFTER_LISTENER_MS`] after an endpoint that wants
    /// `payment_intent.succeeded` was registered; `None` until one is.
    pub(in crate::payments) due_ms: Option<u64>,
}

/// How long after an app registers its endpoint a waiting payment is made: long enough for
/// the app to have read the endpoint's secret from the create's answer.
pub const PAY_AFTER_LISTENER_MS: u64 = 250;

/// The endpoints, the deliveries and the attempts made.
#[derive(Debug, Default)]
pub(in crate::payments) struct Webhooks {
    pub(in crate::payments) endpoints: Vec<Endpoint>,
    pub(in crate::payments) deliveries: Vec<Delivery>,
    attempts: Vec<Attempt>,
    /// Payments waiting for an app to listen, in the order they were asked for.
    pub(in crate::payments) awaiting: Vec<Awaiting>,
}

impl Webhooks {
    /// The index of the endpoint `id`, unless it was deleted.
    pub(in crate::payments) fn endpoint_index(&self, id: &str) -> Option<usize> {
        self.endpoints.iter().position(|e| e.id == id && !e.deleted)
    }

    /// An endpoint now listens: the payments waiting for one that wants their event are due
    /// shortly.
    pub(in crate::payments) fn listening(&mut self, now_ms: u64) {
        if self.endpoints.iter().any(|e| e.wants("payment_intent.succeeded")) {
            for a in self.awaiting.iter_mut().filter(|a| a.due_ms.is_none()) {
                a.due_ms = Some(now_ms + PAY_AFTER_LISTENER_MS);
            }
        }
    }

    /// The waiting payments due by `now_ms`, taken off the list.
    pub(in crate::payments) fn take_due_payments(&mut self, now_ms: u64) -> Vec<Awaiting> {
        let (due, waiting) = std::mem::take(&mut self.awaiting)
            .into_iter()
            .partition(|a| a.due_ms.is_some_and(|at| at <= now_ms));
        self.awaiting = waiting;
        due
    }

    pub(in crate::payments) fn live_endpoints(&self) -> usize {
        self.endpoints.iter().filter(|e| !e.deleted).count()
    }

    /// Queues the event numbered `event`, of type `kind`, made at `at_ms`, for every endpoint
    /// that wants it now.
    /// `plan` is what the faults of the request that made it ask of its deliveries.
    pub(in crate::payments) fn enqueue(&mut self, event: usize, kind: &str, at_ms: u64, plan: WebhookPlan) {
        let first_ms = at_ms + plan.delay_ms.unwrap_or(0);
        for endpoint in self.wanting(kind) {
            let mut genuine = Delivery::new(event, endpoint, first_ms, Signed::Genuine);
            genuine.lose_ack = plan.lose_ack;
            genuine.down_until_ms = plan.down_for_ms.map_or(0, |down| at_ms + down);
            self.deliveries.push(genuine);
            if let Some(after) = plan.again_after_ms {
                self.deliveries.push(Delivery::new(event, endpoint, first_ms + after, Signed::Genuine));
            }
            if plan.stale_replay {
                // After the genuine one's first attempt, as a replay of a captured delivery is.
                self.deliveries.push(Delivery::new(event, endpoint, first_ms + 1, Signed::Stale));
            }
        }
    }

    /// The endpoints that want an event of type `kind` now.
    fn wanting(&self, kind: &str) -> Vec<usize> {
        self.endpoints.iter().enumerate().filter(|(_, e)| e.wants(kind)).map(|(i, _)| i).collect()
    }

    /// Queues a forged event of type `kind` (its body and id, and the wrong secret it is signed
    /// with) for every endpoint that wants that type; how many.
    pub(in crate::payments) fn forge(
        &mut self,
        kind: &str,
        body: &str,
        secret: &str,
        event_id: &str,
        at_ms: u64,
    ) -> usize {
        let wanting = self.wanting(kind);
        let (body, secret, event_id): (Arc<str>, Arc<str>, Arc<str>) =
            (body.into(), secret.into(), event_id.into());
        for &endpoint in &wanting {
            let signed =
                Signed::Forged { body: body.clone(), secret: secret.clone(), event_id: event_id.clone() };
            self.deliveries.push(Delivery::new(usize::MAX, endpoint, at_ms, signed));
        }
        wanting.len()
    }

    /// Ends what was still to be sent to the endpoint at `index`.
    pub(in crate::payments) fn end_deliveries_to(&mut self, index: usize) {
        // One on its way ends too: however it is answered, it is not tried again.
        for d in self.deliveries.iter_mut().filter(|d| d.endpoint == index) {
            if matches!(d.standing, Standing::Due(_) | Standing::Sending) {
                d.standing = Standing::EndpointGone;
            }
        }
    }

    /// The deliveries due by `now_ms`, now marked as being sent. An attempt due while its
    /// endpoint is down (`webhook_endpoint_down`) fails here, unsent.
    pub(in crate::payments) fn take_due(&mut self, now_ms: u64) -> Vec<Delivery> {
        let mut due = Vec::new();
        let mut down = Vec::new();
        for d in &mut self.deliveries {
            if let Standing::Due(at) = d.standing
                && at <= now_ms
            {
                d.standing = Standing::Sending;
                d.attempts += 1;
                if now_ms < d.down_until_ms {
                    down.push(d.number);
                } else {
                    due.push(d.clone());
                }
            }
        }
        for number in down {
            let why = "could not connect: the endpoint was down (webhook_endpoint_down)".to_string();
            self.attempted(number, Err(why), now_ms);
        }
        due
    }

    /// The earliest due time of a delivery waiting for its next attempt, or of a payment.
    pub(in crate::payments) fn next_due_ms(&self) -> Option<u64> {
        self.deliveries
            .iter()
            .filter_map(|d| match d.standing {
                Standing::Due(at) => Some(at),
                _ => None,
            })
            .chain(self.awaiting.iter().filter_map(|a| a.due_ms))
            .min()
    }

    /// Notes how the attempt of delivery `number` went, at `now_ms`, and schedules the next.
    pub(in crate::payments) fn attempted(&mut self, number: u64, answer: Result<u16, String>, now_ms: u64) {
        let Some(d) = self.deliveries.iter_mut().find(|d| d.number == number) else { return };
        let mut answer = answer;
        if d.lose_ack
            && let Ok(status) = answer
            && (200..300).contains(&status)
        {
            // The app acted and answered; the answer never arrives.
            d.lose_ack = false;
            answer = Err(format!("the endpoint's {status} was lost on the way back (lose_webhook_ack)"));
        }
        let delivered = matches!(answer, Ok(status) if (200..300).contains(&status));
        d.standing = match d.standing {
            // Deleted or disabled while the attempt was on its way: no retry.
            Standing::EndpointGone => Standing::EndpointGone,
            _ if delivered => Standing::Delivered,
            _ if d.one_shot() => Standing::Refused,
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
        let delivery = |number: u64| self.deliveries.iter().find(|d| d.number == number);
        let signed = |d: Option<&Delivery>| match d.map(|d| &d.signed) {
            Some(Signed::Stale) => "stale",
            Some(Signed::Forged { .. }) => "forged",
            _ => "genuine",
        };
        let id_of = |d: Option<&Delivery>, event: usize| match d.map(|d| &d.signed) {
            Some(Signed::Forged { event_id, .. }) => event_id.to_string(),
            _ => event_id(event),
        };
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
                    Standing::Refused => ("refused", None),
                };
                json!({
                    "delivery": d.number,
                    "event": id_of(Some(d), d.event),
                    "signed": signed(Some(d)),
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
                    "event": id_of(delivery(a.delivery), a.event),
                    "signed": signed(delivery(a.delivery)),
                    "endpoint": endpoint(a.endpoint),
                    "attempt": a.attempt,
                    "at_ms": a.at_ms,
                    "status": status,
                    "error": error,
                })
            })
            .collect();
        let payments: Vec<Value> = self
            .awaiting
            .iter()
            .map(|a| json!({"payment_intent": a.payment_intent, "forged": a.forged, "due_ms": a.due_ms}))
            .collect();
        json!({"deliveries": deliveries, "attempts": attempts, "awaiting_payments": payments})
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;

    fn webhooks() -> Webhooks {
        let endpoint = Endpoint {
            id: "we_1".into(),
            secret: "whsec_1".into(),
            url: "http://127.0.0.1:9/hooks".into(),
            enabled_events: vec!["*".into()],
            description: None,
            metadata: Map::new(),
            disabled: false,
            deleted: false,
            created_ms: 0,
        };
        Webhooks { endpoints: vec![endpoint], ..Webhooks::default() }
    }

    fn standings(hooks: &Webhooks) -> Vec<Standing> {
        hooks.deliveries.iter().map(|d| d.standing).collect()
    }

    #[test]
    fn a_failed_attempt_is_due_again_on_the_backoff_and_the_last_gives_up() {
        let mut hooks = webhooks();
        hooks.enqueue(0, "charge.refunded", 1_000, WebhookPlan::default());
        let mut now = 1_000;
        for (attempt, wait) in RETRY_AFTER_MS.iter().enumerate() {
            let due = hooks.take_due(now);
            assert_eq!(due.len(), 1, "attempt {}", attempt + 1);
            hooks.attempted(due[0].number, Ok(503), now);
            assert_eq!(standings(&hooks), [Standing::Due(now + wait)]);
            assert!(hooks.take_due(now + wait - 1).is_empty(), "not before its time");
            now += wait;
        }
        let last = hooks.take_due(now);
        hooks.attempted(last[0].number, Err("refused".into()), now);
        assert_eq!(standings(&hooks), [Standing::GaveUp]);
        assert_eq!(hooks.unfinished().count(), 0);
    }

    #[test]
    fn an_endpoint_gone_while_an_attempt_is_on_its_way_is_not_tried_again() {
        let mut hooks = webhooks();
        hooks.enqueue(0, "charge.refunded", 0, WebhookPlan::default());
        let due = hooks.take_due(0);
        hooks.end_deliveries_to(0);
        hooks.attempted(due[0].number, Ok(500), 10);
        assert_eq!(standings(&hooks), [Standing::EndpointGone]);
    }

    #[test]
    fn the_plan_shapes_the_deliveries_an_event_gets() {
        let mut hooks = webhooks();
        let plan = WebhookPlan {
            again_after_ms: Some(100),
            delay_ms: Some(50),
            lose_ack: true,
            down_for_ms: Some(60),
            stale_replay: true,
        };
        hooks.enqueue(0, "charge.refunded", 1_000, plan);
        let signed: Vec<&Signed> = hooks.deliveries.iter().map(|d| &d.signed).collect();
        assert_eq!(signed, [&Signed::Genuine, &Signed::Genuine, &Signed::Stale]);
        assert_eq!(standings(&hooks), [Standing::Due(1_050), Standing::Due(1_150), Standing::Due(1_051)]);
        // Down until 1 060: the first attempt fails unsent and is due again; the replay goes.
        let sent = hooks.take_due(1_051);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].signed, Signed::Stale);
        hooks.attempted(sent[0].number, Ok(400), 1_052);
        assert_eq!(standings(&hooks)[2], Standing::Refused, "a replay is never tried again");
        assert_eq!(standings(&hooks)[0], Standing::Due(1_051 + RETRY_AFTER_MS[0]));
        // Its first 2xx is lost; the next is heard.
        let first = hooks.take_due(2_051);
        hooks.attempted(first[0].number, Ok(200), 2_051);
        assert!(matches!(standings(&hooks)[0], Standing::Due(_)), "the 2xx was lost");
        let again = hooks.take_due(4_051);
        hooks.attempted(again[0].number, Ok(200), 4_051);
        assert_eq!(standings(&hooks)[0], Standing::Delivered);
    }
}
