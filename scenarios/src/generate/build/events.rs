//! The process events of a case: crashes, pauses, takeovers, clock jumps, heals and
//! reconciles, aimed at the services the intents use (and a crash at a paid order's read
//! where a genuine event starts an intent).

use super::{Case, HOUR_MS};
use crate::generate::draw::{EventDraw, LEASE_MS, PAUSE, Step, late_write, surface};
use crate::model::{Event, EventAction, PhaseName, Point, ServiceFault};
use vocabulary::KeyPolicy;

impl Case<'_> {
    /// The process events of a case, one per draw among the kinds the swarm leaves on, aimed
    /// at the services the intents use; one takeover by a second worker at most.
    pub(super) fn events(
        &self,
        event_draws: &[EventDraw],
        events_on: &[usize],
        faults: &[ServiceFault],
    ) -> Vec<Event> {
        let mut events = Vec::new();
        let mut second_worker = false;
        for d in event_draws {
            let service = self.aim(d.service);
            let surface = surface(service);
            let (method, _) = if d.at_read { surface.reads[d.nth as usize % 2] } else { surface.write };
            // A chain's calls are all POSTs to one path: the n-th of them, up to the receipt
            // reads after the broadcast (so also right after signing).
            let nth = if service == "chain" { d.nth * 2 } else { d.nth };
            let request =
                Point::Request { service: service.to_string(), method: Some(method.into()), path: None, nth };
            match events_on[d.kind % events_on.len()] {
                // At a read, where a genuine event starts an intent: killed as it reads the
                // payment the event is about.
                0 if d.at_read && self.paid_order(d.intent).is_some() => {
                    let pi = self.paid_order(d.intent).unwrap_or_default();
                    let at = Point::Request {
                        service: "payments".into(),
                        method: Some("GET".into()),
                        path: Some(format!("/v1/payment_intents/{pi}")),
                        nth: 1,
                    };
                    events.push(Event { at, action: EventAction::Crash { worker: w1() } });
                }
                0 => events.push(Event { at: request, action: EventAction::Crash { worker: w1() } }),
                1 => {
                    let intent = &self.intents[d.intent % self.intents.len()];
                    events.push(Event {
                        at: Point::AfterPropose { after_propose: intent.id.clone() },
                        action: EventAction::Crash { worker: w1() },
                    });
                }
                2 if !second_worker => {
                    second_worker = true;
                    events.push(Event {
                        at: request.clone(),
                        action: EventAction::Pause { worker: w1(), for_ms: LEASE_MS * 2 },
                    });
                    events.push(Event {
                        at: request,
                        action: EventAction::StartWorker { worker: "w2".into() },
                    });
                }
                PAUSE => events.push(self.pause(d, request, faults)),
                4 => events.push(self.clock_jump(d, service, request)),
                5 => events.push(Event { at: request, action: EventAction::Heal }),
                // A crash once a phase is over: with the work of `act` (or `drain`) in flight.
                6 => {
                    let phase = if d.param == 0 { PhaseName::Drain } else { PhaseName::Act };
                    events.push(Event {
                        at: Point::Phase { after_phase: phase },
                        action: EventAction::Crash { worker: w1() },
                    });
                }
                _ => events.push(Event { at: request, action: EventAction::Reconcile { worker: w1() } }),
            }
        }
        events
    }

    /// A pause shorter than the lease, and no one to take over. At a read, or where the case
    /// lines up a stopped read-back (see [`aimed_steps`]), where a write commits late it stops
    /// the worker at that write's read-back, past the settle bound.
    fn pause(&self, d: &EventDraw, request: Point, faults: &[ServiceFault]) -> Event {
        let for_ms = LEASE_MS / 3 * (d.param + 1);
        let lined_up = self.steps.values().any(|(step, _)| *step == Step::LateCommit);
        let read_back = (d.at_read || lined_up).then(|| late_write(faults, self.contracts)).flatten();
        match read_back {
            Some((service, read, outlast_ms)) => Event {
                at: Point::Request {
                    service: service.to_string(),
                    method: Some(read.into()),
                    path: None,
                    nth: 1,
                },
                action: EventAction::Pause { worker: w1(), for_ms: outlast_ms },
            },
            None => Event { at: request, action: EventAction::Pause { worker: w1(), for_ms } },
        }
    }

    /// A clock jump within the terms: never as far as a key's retention where the service
    /// keeps keys; where it keeps none, as far as an hour, which moves no term at all but puts
    /// the service's stamps far from the executor's clock.
    fn clock_jump(&self, d: &EventDraw, service: &'static str, request: Point) -> Event {
        let contract = &self.contracts[service];
        let by_ms = match (contract.idempotency_keys, d.param) {
            (KeyPolicy::Honored, p) => (250 * (p + 1)).min(contract.key_retention_ms / 2),
            (_, 0) => 250,
            (_, _) => HOUR_MS,
        };
        Event {
            at: request,
            action: EventAction::ClockJump { service: service.to_string(), by_ms: by_ms.max(1) },
        }
    }
}

/// The worker every case starts with.
fn w1() -> String {
    "w1".to_string()
}
