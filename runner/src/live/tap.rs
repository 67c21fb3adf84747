//! What the live backend knows of a scenario before it runs: the tap on the fakes' listeners
//! that notices request points, and the bounds on every wait.

use std::collections::HashMap;
use std::sync::Mutex;

use fake_services::{FakeRequest, Gate, Tap};
use scenarios::Scenario;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::{CALL_SLACK_MS, DRAIN_MS_MAX, DRAIN_SLACK_MS, INIT_MS_MAX, RECONCILE_SLACK_MS, REPLY_MS_MAX};
use crate::phase_engine::Reached;
use crate::points::RequestPoints;
use crate::process::lock;

/// The listeners' tap: counts requests against the scenario's request points and hands each
/// point reached to the engine, holding the request's answer until the engine opens the gate;
/// and notes when each worker life last sent anything.
pub(super) struct PointTap {
    pub(super) points: RequestPoints,
    pub(super) reached: mpsc::UnboundedSender<Reached>,
    pub(super) last_arrival: Mutex<HashMap<String, Instant>>,
}

impl PointTap {
    /// When a request of worker life `origin` (`w1#2`) last arrived at any fake.
    pub(super) fn last_arrival(&self, origin: &str) -> Option<Instant> {
        lock(&self.last_arrival).get(origin).copied()
    }
}

impl Tap for PointTap {
    fn arrived(&self, service: &'static str, request: &FakeRequest) -> Option<Gate> {
        if let Some(origin) = &request.origin {
            lock(&self.last_arrival).insert(origin.clone(), Instant::now());
        }
        let events = self.points.reached(service, &request.method, &request.path);
        if events.is_empty() {
            return None;
        }
        let (gate, held) = oneshot::channel();
        // A run that is over has dropped the receiver: the gate's sender goes with the message,
        // which opens it.
        let _ = self.reached.send(Reached { events, gate: Some(gate) });
        Some(held)
    }
}

/// How long the backend waits for each kind of answer, from one scenario's terms.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// The `timeout_ms` of every drain the backend asks for.
    pub(super) drain_ms: u64,
    /// Waiting for a `reconcile_ok`: one pass, a lookup and a send per intent at most.
    pub(super) reconcile_ms: u64,
    /// Every pause the scenario makes, added to every wait (a stopped worker answers late).
    pub(super) pauses_ms: u64,
    /// One pass of the executor's: a lookup and a send per intent, side by side. A drain's
    /// deadline is checked between passes (docs/protocol.md, `drain`), so the answer may come
    /// this long after its `timeout_ms`.
    pub(super) pass_ms: u64,
}

impl Bounds {
    pub(super) fn of(scenario: &Scenario, limits: &vocabulary::protocol::Limits, settle_ms: u64) -> Bounds {
        // Long enough for a lease held by a dead worker to run out and for every attempt of
        // an intent to time out.
        let drain_ms = (limits.lease_ms
            + u64::from(limits.attempts_max) * limits.request_timeout_ms
            + settle_ms
            + DRAIN_SLACK_MS)
            .min(DRAIN_MS_MAX);
        let intents = scenario.intents.len() as u64 + 1;
        let reconcile_ms = intents * 2 * limits.request_timeout_ms + RECONCILE_SLACK_MS;
        let pass_ms = 2 * limits.request_timeout_ms;
        Bounds { drain_ms, reconcile_ms, pauses_ms: scenario.pauses_ms(), pass_ms }
    }

    pub(super) fn reply_ms(&self, kind: &str) -> u64 {
        match kind {
            "init" => INIT_MS_MAX,
            "drain" => self.drain_ms + self.pass_ms + CALL_SLACK_MS,
            "reconcile" => self.reconcile_ms,
            _ => REPLY_MS_MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answer to a drain may come one pass after its deadline (a lookup and a send), and
    /// the wait for it allows that pass on top of the slack.
    #[test]
    fn a_drain_is_awaited_one_pass_past_its_deadline() {
        let scenario: Scenario =
            serde_json::from_value(serde_json::json!({"name": "x", "intents": []})).unwrap();
        let limits = vocabulary::protocol::Limits {
            request_timeout_ms: 1_000,
            lease_ms: 3_000,
            ..vocabulary::protocol::Limits::default()
        };
        let bounds = Bounds::of(&scenario, &limits, 500);
        assert_eq!(bounds.drain_ms, 3_000 + 5 * 1_000 + 500 + DRAIN_SLACK_MS);
        assert_eq!(bounds.reply_ms("drain"), bounds.drain_ms + 2 * 1_000 + CALL_SLACK_MS);
        assert_eq!(bounds.reply_ms("propose"), REPLY_MS_MAX);
        assert_eq!(bounds.reply_ms("init"), INIT_MS_MAX);
    }
}
