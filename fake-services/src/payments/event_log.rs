//! The payments fake's event log as it is kept: what happened, when, and by which request, one
//! small record per event (rendered as Stripe's event objects in `events.rs`). A leaf: the
//! writes that make events (`refunds.rs`, `intents.rs`, `seed.rs`) need only this. Each event is
//! queued for the webhook endpoints that want it as it is noted (`webhooks.rs`).

use super::PaymentsState;
use crate::fault_engine::WebhookPlan;

/// What an event says happened.
#[derive(Debug, Clone)]
pub(super) enum Happened {
    /// The intent succeeded; its version at the event's time is the event's object.
    IntentSucceeded { intent: String },
    /// The refund at this index of the state's refunds was made.
    RefundCreated { refund: usize },
    /// The charge the refund at this index drew on, as it stood after that refund.
    ChargeRefunded { refund: usize },
}

impl Happened {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Happened::IntentSucceeded { .. } => "payment_intent.succeeded",
            Happened::RefundCreated { .. } => "refund.created",
            Happened::ChargeRefunded { .. } => "charge.refunded",
        }
    }
}

/// One event of the log.
#[derive(Debug, Clone)]
pub(super) struct Record {
    pub(super) what: Happened,
    pub(super) created_ms: u64,
    /// The request that caused it (its `Request-Id` and idempotency key); none for a seed.
    pub(super) request: Option<(String, Option<String>)>,
}

impl PaymentsState {
    /// Notes that `what` happened at `at_ms`, by the request `request`.
    /// `webhook` is what the request's webhook faults ask of the event's deliveries.
    pub(super) fn happened(
        &mut self,
        what: Happened,
        at_ms: u64,
        request: Option<(String, Option<String>)>,
        webhook: WebhookPlan,
    ) {
        let kind = what.kind();
        self.webhooks.enqueue(self.events.len(), kind, at_ms, webhook);
        self.events.push(Record { what, created_ms: at_ms, request });
    }
}
