//! Stripe's events for what the payments fake did: `payment_intent.succeeded` when an intent
//! succeeds (created confirmed, confirmed, or seeded: a seeded intent has succeeded), and
//! `refund.created` and `charge.refunded` for every refund made; `GET /v1/events` (newest
//! first, by `type`, a `type` ending in `*`, or `types[]`) and `GET /v1/events/{id}`.
//!
//! An event is kept as a small record and rendered when it is read, so that a refund, the
//! fake's busiest write, only pushes a record; its id comes from its number in the log, not from
//! the service's RNG, so that no other id and no fault draw moves because events are kept.

use rand::SeedableRng;
use rand::distr::{Alphanumeric, SampleString};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use super::PaymentsState;
use super::answer::{missing, stripe_error};
use super::event_log::{Happened, Record};
use super::list::{ListQuery, page};
use crate::core::Inner;
use crate::wire::FakeResponse;

/// The API version the events are written in (what stripe-python 16.1.0 and stripe-node 23.1.0
/// ask for).
pub(in crate::payments) const API_VERSION: &str = "2026-10-28.endive";
/// The filters of `GET /v1/events`.
pub(super) const EVENT_FILTERS: &[&str] = &["type", "types[]"];
/// Mixed into each event id's seed, so that ids are the fake's own and no other stream's.
const EVENT_ID_STREAM: u64 = 0x6576_745f_6964_7321;

/// The id of the event numbered `number` in the log: `evt_` and 24 letters and digits.
pub(super) fn event_id(number: usize) -> String {
    let mut rng = ChaCha8Rng::seed_from_u64(EVENT_ID_STREAM ^ number as u64);
    let mut id = String::with_capacity(28);
    id.push_str("evt_");
    Alphanumeric.append_string(&mut rng, &mut id, 24);
    id
}

/// The event numbered `number`, as Stripe's API and webhooks show it.
pub(super) fn render(state: &PaymentsState, number: usize, record: &Record) -> Value {
    let request = match &record.request {
        Some((id, key)) => json!({"id": id, "idempotency_key": key}),
        None => json!({"id": null, "idempotency_key": null}),
    };
    json!({
        "id": event_id(number),
        "object": "event",
        "api_version": API_VERSION,
        "created": record.created_ms / 1000,
        "data": {"object": object(state, &record.what, record.created_ms)},
        "livemode": false,
        "pending_webhooks": state.webhooks.pending_for(number),
        "request": request,
        "type": record.what.kind(),
    })
}

/// The object an event carries, as it stood when the event happened.
fn object(state: &PaymentsState, what: &Happened, at_ms: u64) -> Value {
    match what {
        Happened::IntentSucceeded { intent } => state
            .intents
            .get(intent)
            .and_then(|history| history.as_of(at_ms).or(Some(history.current())))
            .map_or(Value::Null, |intent| intent.to_json()),
        Happened::RefundCreated { refund } => state
            .refunds
            .get(*refund)
            .map_or(Value::Null, |r| serde_json::to_value(r.object()).unwrap_or_default()),
        Happened::ChargeRefunded { refund } => charge_after(state, *refund),
    }
}

/// The charge the refund at `index` drew on, with what had been refunded of it up to and
/// including that refund.
fn charge_after(state: &PaymentsState, index: usize) -> Value {
    let Some(refund) = state.refunds.get(index) else { return Value::Null };
    let amount_refunded: u64 = state.refunds[..=index]
        .iter()
        .filter(|r| r.payment_intent == refund.payment_intent)
        .map(|r| r.amount)
        .sum();
    let intent = state.intents.get(&*refund.payment_intent).map(|h| h.current());
    let amount = intent.map_or(amount_refunded, |i| i.amount_received);
    json!({
        "id": &*refund.charge,
        "object": "charge",
        "amount": amount,
        "amount_captured": amount,
        "amount_refunded": amount_refunded,
        "captured": true,
        "created": intent.map_or(0, |i| i.created_ms / 1000),
        "currency": &*refund.currency,
        "paid": true,
        "payment_intent": &*refund.payment_intent,
        "refunded": amount_refunded >= amount,
        "status": "succeeded",
    })
}

/// Whether an event of type `kind` passes the list's `type` (exact, or a prefix ending in `*`)
/// and `types[]` filters.
fn wanted(query: &ListQuery, kind: &str) -> bool {
    let type_matches = |pattern: &str| match pattern.strip_suffix('*') {
        Some(prefix) => kind.starts_with(prefix),
        None => kind == pattern,
    };
    query.filter("type").is_none_or(type_matches)
        && query.all("types[]").is_none_or(|types| types.iter().any(|t| t == kind))
}

/// `GET /v1/events`: the events the read may see, newest first.
pub(super) fn list_events(
    inner: &mut Inner<PaymentsState>,
    query: &ListQuery,
    visible_until_ms: u64,
) -> FakeResponse {
    let state = &inner.state;
    let visible: Vec<(String, usize, &Record)> = state
        .events
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, r)| r.created_ms <= visible_until_ms && wanted(query, r.what.kind()))
        .map(|(number, r)| (event_id(number), number, r))
        .collect();
    match page(&visible, |(id, _, _)| id.as_str(), query, "event") {
        Ok((events, has_more)) => {
            let data: Vec<Value> = events.iter().map(|(_, number, r)| render(state, *number, r)).collect();
            FakeResponse::json(
                200,
                &json!({"object": "list", "url": "/v1/events", "has_more": has_more, "data": data}),
            )
        }
        Err(e) => stripe_error(&e),
    }
}

/// `GET /v1/events/{id}`: the event, once the read may see it.
pub(super) fn retrieve_event(
    inner: &mut Inner<PaymentsState>,
    id: &str,
    visible_until_ms: u64,
) -> FakeResponse {
    let state = &inner.state;
    let found = state
        .events
        .iter()
        .enumerate()
        .find(|(number, r)| r.created_ms <= visible_until_ms && event_id(*number) == id);
    match found {
        Some((number, record)) => FakeResponse::json(200, &render(state, number, record)),
        None => stripe_error(&missing("event", id).param("id")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event's id depends on its number alone, and numbers give different ids.
    #[test]
    fn event_ids_are_stable_and_distinct() {
        assert_eq!(event_id(0), event_id(0));
        assert_ne!(event_id(0), event_id(1));
        assert!(event_id(7).starts_with("evt_") && event_id(7).len() == 28);
    }
}
