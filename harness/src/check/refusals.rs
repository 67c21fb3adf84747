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
//! A refusal belongs to the intent whose business key and authorised parameters the refused
//! request carried, as an effect does; where several members of a lineage authorised the same
//! parameters, to the one whose claim lists the request's idempotency key, and otherwise to
//! none (the benefit of the doubt). An intent is proposed once, so a later send of the same
//! intent is never a new decision; a replacement is, and its effects are its own.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use vocabulary::{JournalEntry, needs_decision};

use super::attribution::{Facts, claim_lists_key, param_diff};
use super::{REFUSAL_RESPECTED, Verdict};

impl Facts<'_> {
    pub(super) fn refusal_respected(&self) -> Verdict {
        let mut refused_intents = BTreeSet::new();
        let mut reported = BTreeSet::new();
        let mut lines = Vec::new();
        for (service, journal) in &self.observed.journals {
            let by_request: BTreeMap<&str, &JournalEntry> =
                journal.iter().map(|e| (e.request_id.as_str(), e)).collect();
            for refusal in journal.iter().filter(|e| e.status.is_some_and(needs_decision)) {
                let Some(owner) = self.refused_intent(service, refusal) else { continue };
                refused_intents.insert(owner);
                let intent = &self.intents[owner];
                for index in &intent.effects {
                    let effect = &self.effects[*index];
                    let Some(send) = by_request.get(effect.effect.request_id.as_str()) else { continue };
                    // A send that left before the refusal and landed late is no disregard, and one
                    // from another worker life may not have known of it.
                    let same_life = send.origin == refusal.origin;
                    if effect.service != service.as_str()
                        || send.seq <= refusal.seq
                        || !same_life
                        || !reported.insert(*index)
                    {
                        continue;
                    }
                    lines.push(format!(
                        "{} was refused by {service} with {} (request {}, at {} ms), and a later send of it \
                         (request {}, at {} ms{}) took effect: {}; the write happened although the service said \
                         a person must decide",
                        intent.id(),
                        refusal.status.unwrap_or_default(),
                        refusal.request_id,
                        refusal.at_ms.saturating_sub(self.start_ms),
                        send.request_id,
                        send.at_ms.saturating_sub(self.start_ms),
                        send.origin.as_deref().map(|o| format!(", from {o}")).unwrap_or_default(),
                        effect.label_at(self.start_ms)
                    ));
                }
            }
        }
        if refused_intents.is_empty() {
            return Verdict::not_judged(
                REFUSAL_RESPECTED,
                "no service refused a write of an intent with 400, 401, 403 or 422",
            );
        }
        Verdict::from_evidence(REFUSAL_RESPECTED, lines)
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
