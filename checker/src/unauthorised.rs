//! `no-unauthorised-effect`: every effect in every ledger is one the scenario's intents
//! authorised, with the action and exactly the parameters an intent (or a step, or a
//! replacement) gave it. Anything else is harm nobody asked for: a receipt nobody requested, a
//! second workspace under another external id, a refund of another amount, an object nobody
//! wrote, a transfer to nobody's address. Reads are not effects, and neither are the
//! scenario's own seeds (they never enter a ledger), nor a provider's own second delivery of a
//! message. An effect carrying the business key of an intent whose action the executor does
//! not support is nobody's to judge. An intent that a webhook triggers is authorised by its
//! event only: when the scenario's event is a forgery, its effects are nobody's to make.

use super::NO_UNAUTHORISED_EFFECT;
use super::attribution::{Facts, Found, param_diff};
use results::Verdict;

impl Facts<'_> {
    pub(super) fn no_unauthorised_effect(&self) -> Verdict {
        if self.observed.ledgers.is_empty() {
            return Verdict::not_judged(NO_UNAUTHORISED_EFFECT, "no ledger was read");
        }
        let mut lines: Vec<String> = self.effects.iter().filter_map(|e| self.unauthorised(e)).collect();
        for other in &self.others {
            lines.push(format!(
                "{} {} (seq {}, {}) is no action's effect: no intent of the scenario authorised it",
                other.service, other.effect.object_id, other.effect.seq, other.effect.kind
            ));
        }
        Verdict::from_evidence(NO_UNAUTHORISED_EFFECT, lines)
    }

    /// Why `effect` is one nobody authorised, if it is.
    fn unauthorised(&self, effect: &Found) -> Option<String> {
        if effect.authorised {
            return self.forged_only(effect);
        }
        let Some(group) = effect.group else {
            return Some(format!(
                "{} for {} was made for no intent of the scenario",
                effect.label(),
                effect.key_text()
            ));
        };
        if let Some(meant) = effect.candidates.first() {
            let intent = &self.intents[*meant];
            return Some(format!(
                "{} for {} carries parameters {} ({}) did not authorise: {}",
                effect.label(),
                effect.key_text(),
                intent.id(),
                Self::claim_text(intent),
                effect.mismatch.join(", ")
            ));
        }
        let differences: Vec<String> = self.groups[group]
            .intents
            .iter()
            .map(|i| &self.intents[*i])
            .map(|i| format!("{}: {}", i.id(), param_diff(&i.spec.params, &effect.effect.params).join(", ")))
            .collect();
        Some(format!(
            "{} for {} carries parameters none of {} authorised ({})",
            effect.label(),
            effect.key_text(),
            self.ids_text(&self.groups[group].intents),
            differences.join("; ")
        ))
    }

    /// Why an effect whose parameters an intent authorised is still nobody's to make: that
    /// intent waits for a webhook the service never sent (the scenario's trigger is forged,
    /// an attacker's event), so nothing authorised it.
    fn forged_only(&self, effect: &Found) -> Option<String> {
        let intent = &self.intents[*effect.candidates.first()?];
        let trigger = intent.spec.on_event.as_ref().filter(|t| t.forged)?;
        Some(format!(
            "{} for {} was made for {}, which only a forged {} of {} asked for: the customer never paid, \
             and the event was signed without the endpoint's secret",
            effect.label(),
            effect.key_text(),
            intent.id(),
            trigger.kind,
            trigger.payment_intent
        ))
    }
}
