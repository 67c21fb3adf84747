//! `no-duplicate-effect`: at most one effect per intent, and at most one per lineage. Where
//! several intents act on one business key and the ledger cannot say whose each effect is, a
//! duplicate is what no reading avoids: more effects than the lineages that could own them.

use std::collections::BTreeSet;

use super::NO_DUPLICATE_EFFECT;
use super::attribution::{Facts, Found};
use results::Verdict;

/// Why the ledger invariants have nothing to judge.
pub(super) const NO_LEDGER_REASON: &str = "no intent's action has a ledger the checker reads";

impl Facts<'_> {
    /// `payment_intent pi_1`: the business key of group `g`.
    pub(super) fn group_key_text(&self, g: usize) -> String {
        let group = &self.groups[g];
        match group.intents.first().and_then(|i| self.intents[*i].attribution) {
            Some((action, key)) => format!("{} {key}", action.business_key),
            None => "a business key".to_string(),
        }
    }

    pub(super) fn no_duplicate_effect(&self) -> Verdict {
        if !self.any_attributable() {
            return Verdict::not_judged(NO_DUPLICATE_EFFECT, NO_LEDGER_REASON);
        }
        let mut lines = Vec::new();
        for (g, group) in self.groups.iter().enumerate() {
            if group.fixed {
                self.owned_duplicates(g, &mut lines);
                continue;
            }
            if group.excess == 0 {
                continue;
            }
            let placed: Vec<usize> =
                group.effects.iter().copied().filter(|e| self.effects[*e].lineage.is_some()).collect();
            lines.push(format!(
                "{} has {} effects with parameters that {} authorised, but at most {} can be theirs (one per lineage), \
                 whichever made which: {}",
                self.group_key_text(g),
                placed.len(),
                self.ids_text(&group.intents),
                placed.len() - group.excess,
                self.effects_text(&placed)
            ));
        }
        Verdict::from_evidence(NO_DUPLICATE_EFFECT, lines)
    }

    /// The duplicates of a business key whose every effect has one possible owner: an intent
    /// with several effects, a lineage with effects of several members.
    fn owned_duplicates(&self, g: usize, lines: &mut Vec<String>) {
        let lineages: BTreeSet<usize> =
            self.groups[g].intents.iter().map(|i| self.intents[*i].lineage).collect();
        for lineage in lineages {
            for intent in self.lineages[lineage].iter().map(|m| &self.intents[*m]) {
                if intent.effects.len() > 1 {
                    lines.push(format!(
                        "intent {} has {} effects, at most one allowed: {}",
                        intent.id(),
                        intent.effects.len(),
                        self.effects_text(&intent.effects)
                    ));
                }
            }
            let effects: Vec<&Found> = self.effects.iter().filter(|e| e.lineage == Some(lineage)).collect();
            let one_owner =
                effects.first().and_then(|e| e.owner).filter(|o| effects.iter().all(|e| e.owner == Some(*o)));
            if effects.len() > 1 && one_owner.is_none() {
                lines.push(format!(
                    "lineage {} has {} effects, at most one allowed: {}",
                    self.members_text(lineage),
                    effects.len(),
                    effects.iter().map(|e| self.owner_text(e)).collect::<Vec<_>>().join(", ")
                ));
            }
        }
    }
}
