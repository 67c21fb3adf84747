//! Claims against ledgers: `honest-terminal-states` (a terminal claim the ledger bears out,
//! an escalation that says going on cannot write twice only where nothing took effect, and no
//! effect nobody authorised) and `unknown-is-not-a-lie` (an escalation with evidence,
//! no confirmation without an effect, no failure with one).

use serde_json::Value;
use vocabulary::State;

use super::Verdict;
use super::attribution::{Facts, param_diff};
use super::{ESCALATION_EVIDENCE, HONEST_TERMINAL_STATES, UNKNOWN_IS_NOT_A_LIE};

impl Facts<'_> {
    pub(super) fn honest_terminal_states(&self) -> Verdict {
        let judged = self.intents.iter().any(|i| i.attribution.is_some() && i.claim.is_some())
            || !self.effects.is_empty();
        if !judged {
            return Verdict::not_judged(
                HONEST_TERMINAL_STATES,
                "no intent of an action whose ledger the checker reads has a final claim, and no such effect exists",
            );
        }
        let mut lines = Vec::new();
        for intent in &self.intents {
            let Some((action, key)) = intent.attribution else { continue };
            let id = intent.id();
            if intent.claims(State::Confirmed) {
                match intent.effects.len() {
                    0 => lines.push(format!(
                        "{id} claims confirmed, but {} has no effect for it ({} {key})",
                        action.service, action.business_key
                    )),
                    1 => {} // wrong parameters are reported per effect below
                    n => lines.push(format!(
                        "{id} claims confirmed, but {} has {n} effects for it: {}",
                        action.service,
                        self.effects_text(&intent.effects)
                    )),
                }
            } else if intent.claims(State::Failed) && !intent.effects.is_empty() {
                lines.push(format!(
                    "{id} claims failed, but the ledger has {} for it",
                    self.effects_text(&intent.effects)
                ));
            } else if intent.claims(State::Escalated)
                && !intent.effects.is_empty()
                && intent.claim.and_then(|c| c.evidence.get("could_duplicate")) == Some(&Value::Bool(false))
            {
                // A person who trusts that claim and goes on (proposes it again, fixed)
                // writes twice. Without `could_duplicate` an escalation says nothing of it.
                lines.push(format!(
                    "{id} claims escalated with could_duplicate false (going on cannot write twice), but the ledger has {} for it",
                    self.effects_text(&intent.effects)
                ));
            }
        }
        for effect in &self.effects {
            match (effect.lineage, effect.owner) {
                (None, _) => lines.push(format!(
                    "{} for {} was made for no intent of the scenario",
                    effect.label(),
                    effect.key_text()
                )),
                (Some(_), Some(owner)) if !effect.mismatch.is_empty() => {
                    let intent = &self.intents[owner];
                    lines.push(format!(
                        "{} of {} ({}) does not carry the authorised parameters: {}",
                        effect.label(),
                        intent.id(),
                        Self::claim_text(intent),
                        effect.mismatch.join(", ")
                    ));
                }
                (Some(lineage), None) => {
                    let differences: Vec<String> = self.lineages[lineage]
                        .iter()
                        .map(|m| &self.intents[*m])
                        .filter(|i| {
                            i.attribution
                                .is_some_and(|(r, k)| r.name == effect.action.name && Some(k) == effect.key)
                        })
                        .map(|i| {
                            format!(
                                "{}: {}",
                                i.id(),
                                param_diff(&i.spec.params, &effect.effect.params).join(", ")
                            )
                        })
                        .collect();
                    lines.push(format!(
                        "{} for {} carries parameters no member of lineage {} authorised ({})",
                        effect.label(),
                        effect.key_text(),
                        self.members_text(lineage),
                        differences.join("; ")
                    ));
                }
                _ => {}
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
                    "{id} claims confirmed, contrary to the ledger: {} holds nothing for {} {key}",
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
