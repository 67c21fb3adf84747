//! Claims against ledgers: `honest-terminal-states` (a terminal claim the ledger bears out,
//! and an escalation that says going on cannot write twice only where nothing took effect)
//! and `unknown-is-not-a-lie` (an escalation with evidence, no confirmation without an
//! effect, no failure with one).
//!
//! Where several intents act on one business key and the ledger can be read more than one way
//! (`readings.rs`), a claim is judged against every reading: what all of them contradict is a
//! violation, what some of them do is not judged, with why.

use serde_json::Value;
use vocabulary::State;

use super::Verdict;
use super::attribution::{Facts, Intent};
use super::{ESCALATION_EVIDENCE, HONEST_TERMINAL_STATES, UNKNOWN_IS_NOT_A_LIE};

/// What one business key's claims come to for one invariant, over its readings.
enum Judged {
    Held,
    Violated(Vec<String>),
    /// It depends on the reading; the reason says which effects are in doubt.
    Undecided(String),
}

impl Facts<'_> {
    pub(super) fn honest_terminal_states(&self) -> Verdict {
        let judged = self.intents.iter().any(|i| i.attribution.is_some() && i.claim.is_some());
        if !judged {
            return Verdict::not_judged(
                HONEST_TERMINAL_STATES,
                "no intent of an action whose ledger the checker reads has a final claim",
            );
        }
        self.over_groups(HONEST_TERMINAL_STATES, Vec::new())
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
            if intent.claims(State::Escalated)
                && !intent.claim.is_some_and(|c| has_escalation_evidence(&c.evidence))
            {
                lines.push(format!(
                    "{} is escalated without evidence (no non-empty {})",
                    intent.id(),
                    ESCALATION_EVIDENCE.join(", ")
                ));
            }
        }
        self.over_groups(UNKNOWN_IS_NOT_A_LIE, lines)
    }

    /// `invariant`'s verdict from every business key's claims, after `lines` found elsewhere.
    fn over_groups(&self, invariant: &'static str, mut lines: Vec<String>) -> Verdict {
        let mut undecided = Vec::new();
        for g in 0..self.groups.len() {
            match self.judge_group(g, invariant) {
                Judged::Held => {}
                Judged::Violated(more) => lines.extend(more),
                Judged::Undecided(why) => undecided.push(why),
            }
        }
        if lines.is_empty() && !undecided.is_empty() {
            return Verdict::not_judged(invariant, undecided.join("; "));
        }
        Verdict::from_evidence(invariant, lines)
    }

    fn judge_group(&self, g: usize, invariant: &str) -> Judged {
        let group = &self.groups[g];
        let per_reading: Vec<Vec<String>> = (0..group.readings.len())
            .map(|r| {
                self.reading_claim_lines(g, r)
                    .into_iter()
                    .filter(|(which, _)| *which == invariant)
                    .map(|(_, line)| line)
                    .collect()
            })
            .collect();
        let Some(first) = per_reading.first() else { return Judged::Held };
        if per_reading.iter().all(Vec::is_empty) {
            return Judged::Held;
        }
        if group.too_many {
            return Judged::Undecided(format!(
                "the effects for {} can be attributed in more ways than the checker weighs",
                self.group_key_text(g)
            ));
        }
        if per_reading.iter().any(Vec::is_empty) {
            return Judged::Undecided(self.in_doubt(g));
        }
        if per_reading.iter().all(|lines| lines == first) {
            return Judged::Violated(first.clone());
        }
        let claims: Vec<String> = group
            .intents
            .iter()
            .map(|i| &self.intents[*i])
            .map(|i| format!("{} {}", i.id(), Self::claim_text(i)))
            .collect();
        Judged::Violated(vec![format!(
            "{}: {}; whichever of them made {}, the ledger contradicts one of these claims",
            self.group_key_text(g),
            claims.join(", "),
            self.effects_text(&group.effects)
        )])
    }

    /// Why a business key's claims depend on the reading: its effects that more than one
    /// intent may own.
    fn in_doubt(&self, g: usize) -> String {
        let group = &self.groups[g];
        let doubtful: Vec<usize> =
            group.effects.iter().copied().filter(|e| self.effects[*e].candidates.len() > 1).collect();
        format!(
            "whether the claims of {} hold depends on which of them made {}: {} parameters more than one of them \
             authorised and no tag naming its intent (such as metadata {})",
            self.ids_text(&group.intents),
            self.effects_text(&doubtful),
            if doubtful.len() == 1 { "it carries" } else { "each carries" },
            vocabulary::INTENT_TAG
        )
    }

    /// `payment_intent pi_1`: the business key of group `g`.
    pub(super) fn group_key_text(&self, g: usize) -> String {
        let group = &self.groups[g];
        match group.intents.first().and_then(|i| self.intents[*i].attribution) {
            Some((action, key)) => format!("{} {key}", action.business_key),
            None => "a business key".to_string(),
        }
    }

    /// The claim lines of group `g`'s intents in reading `r`: `(invariant, line)`.
    pub(super) fn reading_claim_lines(&self, g: usize, r: usize) -> Vec<(&'static str, String)> {
        let mut lines = Vec::new();
        for intent in &self.groups[g].intents {
            let owned = self.owned_in(g, r, *intent);
            self.claim_lines(&self.intents[*intent], &owned, &mut lines);
        }
        lines
    }

    /// What `intent`'s claim says against `owned`, the effects it owns in one reading.
    fn claim_lines(&self, intent: &Intent, owned: &[usize], lines: &mut Vec<(&'static str, String)>) {
        let Some((action, key)) = intent.attribution else { return };
        let id = intent.id();
        if intent.claims(State::Confirmed) {
            match owned {
                [] => {
                    lines.push((
                        HONEST_TERMINAL_STATES,
                        format!(
                            "{id} claims confirmed, but {} has no effect for it ({} {key})",
                            action.service, action.business_key
                        ),
                    ));
                    lines.push((
                        UNKNOWN_IS_NOT_A_LIE,
                        format!(
                            "{id} claims confirmed, contrary to the ledger: {} holds nothing for it ({} {key})",
                            action.service, action.business_key
                        ),
                    ));
                }
                [one] if !self.effects[*one].authorised => lines.push((
                    HONEST_TERMINAL_STATES,
                    format!(
                        "{id} claims confirmed, but its effect {} does not carry the authorised parameters: {}",
                        self.effects[*one].label(),
                        self.effects[*one].mismatch.join(", ")
                    ),
                )),
                [_] => {}
                more => lines.push((
                    HONEST_TERMINAL_STATES,
                    format!(
                        "{id} claims confirmed, but {} has {} effects for it: {}",
                        action.service,
                        more.len(),
                        self.effects_text(more)
                    ),
                )),
            }
        } else if intent.claims(State::Failed) && !owned.is_empty() {
            let effects = self.effects_text(owned);
            lines.push((
                HONEST_TERMINAL_STATES,
                format!("{id} claims failed, but the ledger has {effects} for it"),
            ));
            lines.push((
                UNKNOWN_IS_NOT_A_LIE,
                format!("{id} claims failed, contrary to the ledger: {effects} took effect"),
            ));
        } else if intent.claims(State::Escalated)
            && !owned.is_empty()
            && intent.claim.and_then(|c| c.evidence.get("could_duplicate")) == Some(&Value::Bool(false))
        {
            // A person who trusts that claim and goes on (proposes it again, fixed) writes
            // twice. Without `could_duplicate` an escalation says nothing of it.
            lines.push((
                HONEST_TERMINAL_STATES,
                format!(
                    "{id} claims escalated with could_duplicate false (going on cannot write twice), but the ledger has \
                     {} for it",
                    self.effects_text(owned)
                ),
            ));
        }
    }
}

fn has_escalation_evidence(evidence: &Value) -> bool {
    ESCALATION_EVIDENCE
        .iter()
        .any(|field| evidence.get(field).and_then(Value::as_str).is_some_and(|s| !s.trim().is_empty()))
}
