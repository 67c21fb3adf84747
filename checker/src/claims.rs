//! Claims against ledgers: `honest-terminal-states` (a terminal claim the ledger bears out,
//! and an escalation that says going on cannot write twice only where nothing took effect)
//! and `unknown-is-not-a-lie` (an escalation with evidence, no confirmation without an
//! effect, no failure with one). Judged in each world of `readings.rs`, like every invariant.

use serde_json::Value;
use vocabulary::State;

use super::attribution::Facts;
use super::{ESCALATION_EVIDENCE, HONEST_TERMINAL_STATES, UNKNOWN_IS_NOT_A_LIE};
use results::Verdict;

impl Facts<'_> {
    pub(super) fn honest_terminal_states(&self) -> Verdict {
        let judged = self.intents.iter().any(|i| i.attribution.is_some() && i.claim.is_some());
        if !judged {
            return Verdict::not_judged(
                HONEST_TERMINAL_STATES,
                "no intent of an action whose ledger the checker reads has a final claim",
            );
        }
        let mut lines = Vec::new();
        for intent in &self.intents {
            let Some((action, key)) = intent.attribution else { continue };
            let id = intent.id();
            let owned = &intent.effects;
            if intent.claims(State::Confirmed) {
                match owned.as_slice() {
                    [] => lines.push(format!(
                        "{id} claims confirmed, but {} has no effect for it ({} {key})",
                        action.service, action.business_key
                    )),
                    [one] if !self.effects[*one].authorised => lines.push(format!(
                        "{id} claims confirmed, but its effect {} does not carry the authorised parameters: {}",
                        self.effects[*one].label(),
                        self.effects[*one].mismatch.join(", ")
                    )),
                    [_] => {}
                    more => lines.push(format!(
                        "{id} claims confirmed, but {} has {} effects for it: {}",
                        action.service,
                        more.len(),
                        self.effects_text(more)
                    )),
                }
            } else if intent.claims(State::Failed) && !owned.is_empty() {
                lines.push(format!(
                    "{id} claims failed, but the ledger has {} for it",
                    self.effects_text(owned)
                ));
            } else if intent.claims(State::Escalated)
                && !owned.is_empty()
                && intent.claim.and_then(|c| c.evidence.get("could_duplicate")) == Some(&Value::Bool(false))
            {
                // A person who trusts that claim and goes on (proposes it again, fixed)
                // writes twice. Without `could_duplicate` an escalation says nothing of it.
                lines.push(format!(
                    "{id} claims escalated with could_duplicate false (going on cannot write twice), but the ledger \
                     has {} for it",
                    self.effects_text(owned)
                ));
            }
        }
        Verdict::from_evidence(HONEST_TERMINAL_STATES, lines)
    }

    pub(super) fn unknown_is_not_a_lie(&self) -> Verdict {
        let judged = self.intents.iter().any(|i| {
            i.claims(State::Escalated)
                || i.attribution.is_some() && (i.claims(State::Confirmed) || i.claims(State::Failed))
        });
        if !judged {
            return Verdict::not_judged(
                UNKNOWN_IS_NOT_A_LIE,
                "no intent claims escalated, nor confirmed or failed where a ledger can contradict it",
            );
        }
        let mut lines = Vec::new();
        for intent in &self.intents {
            let Some(claim) = intent.claim else { continue };
            let id = intent.id();
            if intent.claims(State::Escalated) && !has_escalation_evidence(&claim.evidence) {
                lines.push(format!(
                    "{id} is escalated without evidence (no non-empty {})",
                    ESCALATION_EVIDENCE.join(", ")
                ));
            }
            let Some((action, key)) = intent.attribution else { continue };
            if intent.claims(State::Confirmed) && intent.effects.is_empty() {
                lines.push(format!(
                    "{id} claims confirmed, contrary to the ledger: {} holds nothing for it ({} {key})",
                    action.service, action.business_key
                ));
            } else if intent.claims(State::Failed) && !intent.effects.is_empty() {
                lines.push(format!(
                    "{id} claims failed, contrary to the ledger: {} took effect",
                    self.effects_text(&intent.effects)
                ));
            }
        }
        Verdict::from_evidence(UNKNOWN_IS_NOT_A_LIE, lines)
    }
}

fn has_escalation_evidence(evidence: &Value) -> bool {
    ESCALATION_EVIDENCE
        .iter()
        .any(|field| evidence.get(field).and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty()))
}
