//! `refusal-respected`: once a service refused an intent's write with a status a person must
//! act on (400, 401, 403, 422: `vocabulary::needs_decision`), no later send of that intent by
//! the worker life that got the refusal takes effect. The journals show the refusal (with what
//! the refused request asked for, `JournalEntry::params`) and the later send, each with the
//! worker life whose connection carried it, the ledger its effect.
//!
//! Only the life that got the refusal is judged: another life (a restarted worker, a second
//! one) knows of it only if the first recorded it, and a worker killed while the refusal was
//! on its way back (a crash at that request) never read it; its successor, finding nothing,
//! rightly sends again. Requests without an origin (a transport that does not label them)
//! count as one life.
//!
//! Nor does a refusal count that the worker could not read: one whose request ended without
//! an answer (the connection closed or reset first), or one answered while the worker was
//! stopped from before its request timeout ran out until after, where the later send left
//! once the stop had begun. Such a worker saw a timeout, and a careful executor looks the
//! intent up and, finding nothing, sends it again under the same key: the verdict is not
//! judged, with that reason; a later send under another key is a hazard
//! ([`super::HAZARD_NEW_KEY_AFTER_UNREAD_REFUSAL`]), the habit that doubles a write whose
//! answer was lost.
//!
//! A refusal belongs to the intent whose business key and authorised parameters the refused
//! request carried, as an effect does; where several intents authorised the same parameters,
//! to the one whose claim lists the request's idempotency key, and otherwise to none (the
//! benefit of the doubt). An intent is proposed once, so a later send of the same intent is
//! never a new decision; a replacement is, and its effects are its own.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use vocabulary::{JournalEntry, needs_decision};

use super::REFUSAL_RESPECTED;
use super::attribution::{Facts, claim_lists_key, param_diff};
use results::Verdict;

/// A later send of a refused intent that took effect, from the life the refusal answered.
pub(super) struct SendAfterRefusal<'a> {
    pub(super) intent: usize,
    pub(super) service: &'a str,
    pub(super) refusal: &'a JournalEntry,
    pub(super) send: &'a JournalEntry,
    /// Index into `Facts::effects`.
    pub(super) effect: usize,
    /// Why the worker could not have read the refusal, if it could not.
    pub(super) unread: Option<String>,
}

impl SendAfterRefusal<'_> {
    /// Whether the later send repeated the refused request under its idempotency key.
    pub(super) fn under_the_same_key(&self) -> bool {
        self.send.idempotency_key.is_some() && self.send.idempotency_key == self.refusal.idempotency_key
    }
}

/// A worker stopped (SIGSTOP, or the sim's pause) from `from_ms` until `until_ms`.
struct Stop<'a> {
    worker: &'a str,
    from_ms: u64,
    until_ms: u64,
}

impl<'a> Facts<'a> {
    pub(super) fn refusal_respected(&self) -> Verdict {
        let (refused, sends) = self.sends_after_refusals();
        if refused.is_empty() {
            return Verdict::not_judged(
                REFUSAL_RESPECTED,
                "no service refused a write of an intent with 400, 401, 403 or 422",
            );
        }
        let mut lines = Vec::new();
        let mut unread = Vec::new();
        for s in &sends {
            let refusal = s.refusal;
            let said = format!(
                "{} was refused by {} with {} (request {}, at {} ms)",
                self.intents[s.intent].id(),
                s.service,
                refusal.status.unwrap_or_default(),
                refusal.request_id,
                refusal.at_ms.saturating_sub(self.start_ms)
            );
            let later = format!(
                "request {}, at {} ms{}",
                s.send.request_id,
                s.send.at_ms.saturating_sub(self.start_ms),
                s.send.origin.as_deref().map(|o| format!(", from {o}")).unwrap_or_default()
            );
            let effect = self.effects[s.effect].label_at(self.start_ms);
            match &s.unread {
                Some(why) => unread.push(format!(
                    "{said}, but {why}; the later send ({later}) that took effect ({effect}) is what a careful \
                     executor does after a timeout"
                )),
                None => lines.push(format!(
                    "{said}, and a later send of it ({later}) took effect: {effect}; the write happened although \
                     the service said a person must decide"
                )),
            }
        }
        if lines.is_empty() && !unread.is_empty() {
            return Verdict::not_judged(REFUSAL_RESPECTED, unread.join("; "));
        }
        Verdict::from_evidence(REFUSAL_RESPECTED, lines)
    }

    /// The intents a service refused with a status that needs a decision, and every later
    /// send of one of them, from the life the refusal answered, that took effect (each effect
    /// once, after its first refusal), with whether the refusal could be read.
    pub(super) fn sends_after_refusals(&self) -> (BTreeSet<usize>, Vec<SendAfterRefusal<'_>>) {
        let stops = self.stops();
        let mut refused = BTreeSet::new();
        let mut seen = BTreeSet::new();
        let mut sends = Vec::new();
        for (service, journal) in &self.observed.journals {
            let by_request: BTreeMap<&str, &JournalEntry> =
                journal.iter().map(|e| (e.request_id.as_str(), e)).collect();
            for refusal in journal.iter().filter(|e| e.status.is_some_and(needs_decision)) {
                let Some(owner) = self.refused_intent(service, refusal) else { continue };
                refused.insert(owner);
                for index in &self.intents[owner].effects {
                    let effect = &self.effects[*index];
                    let Some(send) = by_request.get(effect.effect.request_id.as_str()) else { continue };
                    // A send that left before the refusal and landed late is no disregard, and one
                    // from another worker life may not have known of it.
                    if effect.service != service.as_str()
                        || send.seq <= refusal.seq
                        || send.origin != refusal.origin
                        || !seen.insert(*index)
                    {
                        continue;
                    }
                    sends.push(SendAfterRefusal {
                        intent: owner,
                        service,
                        refusal,
                        send,
                        effect: *index,
                        unread: self.unread(refusal, send, &stops),
                    });
                }
            }
        }
        (refused, sends)
    }

    /// Why the worker that sent `refusal`'s request could not have read its answer before it
    /// sent `send`, if it could not (see the module documentation).
    fn unread(&self, refusal: &JournalEntry, send: &JournalEntry, stops: &[Stop]) -> Option<String> {
        if refusal.outcome != "answered" {
            return Some(format!(
                "its answer never reached the worker (the request ended {})",
                refusal.outcome
            ));
        }
        let worker = refusal.origin.as_deref()?.split('#').next()?;
        let timeout_ms = self.scenario.request_timeout_ms();
        let deadline_ms = refusal.at_ms.saturating_add(timeout_ms);
        let answered_ms = refusal.ended_ms.unwrap_or(refusal.at_ms);
        let stop = stops.iter().find(|s| {
            s.worker == worker
                && (refusal.at_ms..deadline_ms).contains(&s.from_ms)
                && s.until_ms >= deadline_ms
                && s.until_ms >= answered_ms
                && send.at_ms >= s.from_ms
        })?;
        Some(format!(
            "{worker} was stopped from {} ms to {} ms, past its request timeout of {timeout_ms} ms, with the answer the \
             service gave at {} ms not yet read",
            stop.from_ms.saturating_sub(self.start_ms),
            stop.until_ms.saturating_sub(self.start_ms),
            answered_ms.saturating_sub(self.start_ms)
        ))
    }

    /// The workers' stops, from the timeline: a `pause` moment (`for N ms`) until the next
    /// `resume` moment of its worker, or for its `N` ms where there is none.
    fn stops(&self) -> Vec<Stop<'_>> {
        let moments = &self.observed.timeline;
        let mut stops = Vec::new();
        for (i, pause) in moments.iter().enumerate().filter(|(_, m)| m.kind == "pause") {
            let for_ms = pause
                .detail
                .strip_prefix("for ")
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse::<u64>().ok());
            // A pause that did not take hold ("not running", "SIGSTOP failed") stopped nothing.
            let Some(for_ms) =
                for_ms.filter(|_| !pause.detail.contains("not running") && !pause.detail.contains("failed"))
            else {
                continue;
            };
            let resumed =
                moments[i + 1..].iter().find(|m| m.kind == "resume" && m.lane == pause.lane).map(|m| m.at_ms);
            stops.push(Stop {
                worker: &pause.lane,
                from_ms: pause.at_ms,
                until_ms: resumed.unwrap_or(pause.at_ms.saturating_add(for_ms)),
            });
        }
        stops
    }

    /// The intent a refused write was for: the one whose action is the service's, whose
    /// business key and authorised parameters the request asked for.
    fn refused_intent(&self, service: &str, refusal: &JournalEntry) -> Option<usize> {
        let asked = refusal.params.as_ref()?;
        let candidates: Vec<usize> = (0..self.intents.len())
            .filter(|i| {
                let intent = &self.intents[*i];
                intent.attribution.is_some_and(|(action, key)| {
                    action.service == service
                        && asked.get(action.business_key).and_then(Value::as_str) == Some(key)
                        && param_diff(&intent.spec.params, asked).is_empty()
                })
            })
            .collect();
        match candidates.as_slice() {
            [only] => Some(*only),
            _ => {
                let key = refusal.idempotency_key.as_deref()?;
                let listed: Vec<usize> =
                    candidates.into_iter().filter(|i| claim_lists_key(self.intents[*i].claim, key)).collect();
                match listed.as_slice() {
                    [only] => Some(*only),
                    _ => None,
                }
            }
        }
    }
}
