//! `no-duplicate-effect`: at most one effect per intent, and at most one per lineage.

use super::NO_DUPLICATE_EFFECT;
use super::Verdict;
use super::attribution::{Facts, Found};

/// Why the ledger invariants have nothing to judge.
pub(super) const NO_LEDGER_REASON: &str = "no intent's action has a ledger the checker reads";

impl Facts<'_> {
    pub(super) fn no_duplicate_effect(&self) -> Verdict {
        if !self.any_attributable() {
            return Verdict::not_judged(NO_DUPLICATE_EFFECT, NO_LEDGER_REASON);
        }
        let mut lines = Vec::new();
        for (lineage, members) in self.lineages.iter().enumerate() {
            for intent in members.iter().map(|m| &self.intents[*m]) {
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
        Verdict::from_evidence(NO_DUPLICATE_EFFECT, lines)
    }
}
