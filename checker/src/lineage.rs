//! `lineage`: a replacement never takes effect while its predecessor is unresolved (per the
//! timeline's state moments), nor after its predecessor took effect.

use super::attribution::{Facts, StateMoment};
use super::{LINEAGE, is_terminal};
use results::Verdict;

impl<'a> Facts<'a> {
    /// The last state `id` reached at or before `at_ms`, per the timeline; `None` when it has
    /// no state moments at all, `Some(None)` when it has none that early. Among moments at the
    /// same time, the later one in the timeline wins.
    pub(super) fn state_at(&self, id: &str, at_ms: u64) -> Option<Option<&StateMoment<'a>>> {
        let moments = self.states().get(id)?;
        Some(moments.iter().filter(|m| m.at_ms <= at_ms).max_by_key(|m| m.at_ms))
    }

    /// Why an effect of a replacement at `at_ms` came before its predecessor `p` was resolved,
    /// if it did: the state `p` was in then, or that it had none yet.
    pub(super) fn replaced_early(&self, p: &str, at_ms: u64) -> Option<String> {
        match self.state_at(p, at_ms)? {
            Some(moment) if !is_terminal(moment.state) => Some(format!(
                "while its predecessor {p} was unresolved ({} since {} ms on {})",
                moment.state,
                moment.at_ms.saturating_sub(self.start_ms),
                moment.lane
            )),
            Some(_) => None,
            None => Some(format!("before its predecessor {p} reached any state")),
        }
    }

    /// Replacements that took effect before their predecessor was resolved, where the
    /// predecessor never took effect: what such an executor risks, for the hazards.
    pub(super) fn early_replacements(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for replacement in &self.intents {
            let Some(predecessor) = replacement.spec.replaces.as_deref().and_then(|p| self.by_id.get(p))
            else {
                continue;
            };
            let predecessor = &self.intents[*predecessor];
            if !predecessor.effects.is_empty() {
                continue;
            }
            for effect in replacement.effects.iter().map(|e| &self.effects[*e]) {
                if let Some(why) = self.replaced_early(predecessor.id(), effect.effect.at_ms) {
                    let detail = format!(
                        "{} took effect ({}) {why}; {} never took effect, so nothing was done twice",
                        replacement.id(),
                        effect.label_at(self.start_ms),
                        predecessor.id()
                    );
                    out.push((replacement.id().to_string(), detail));
                }
            }
        }
        out
    }

    pub(super) fn lineage(&self) -> Verdict {
        let mut lines = Vec::new();
        let mut untimed = Vec::new();
        let mut replacements = 0;
        for replacement in &self.intents {
            let Some(predecessor) = replacement.spec.replaces.as_deref().and_then(|p| self.by_id.get(p))
            else {
                continue;
            };
            replacements += 1;
            let predecessor = &self.intents[*predecessor];
            let (r, p) = (replacement.id(), predecessor.id());
            for effect in replacement.effects.iter().map(|e| &self.effects[*e]) {
                if !predecessor.effects.is_empty() {
                    lines.push(format!(
                        "{r} took effect ({}) although its predecessor {p} took effect too ({})",
                        effect.label(),
                        self.effects_text(&predecessor.effects)
                    ));
                }
                // Released early with a predecessor that never took effect: no harm came of it,
                // so it is a hazard (see `early_replacements`), not a violation.
                if predecessor.effects.is_empty() && self.replaced_early(p, effect.effect.at_ms).is_some() {
                    continue;
                }
                match self.state_at(p, effect.effect.at_ms) {
                    Some(Some(moment)) if !is_terminal(moment.state) => lines.push(format!(
                        "{r} took effect ({}) while its predecessor {p} was unresolved ({} since {} ms on {})",
                        effect.label_at(self.start_ms),
                        moment.state,
                        moment.at_ms.saturating_sub(self.start_ms),
                        moment.lane
                    )),
                    Some(None) => lines.push(format!(
                        "{r} took effect ({}) before its predecessor {p} reached any state",
                        effect.label_at(self.start_ms)
                    )),
                    // A predecessor without any state moment cannot be judged on timing.
                    None if predecessor.effects.is_empty() => untimed.push(format!(
                        "the executor sent no state events for {p}, so whether {r} took effect ({}) after {p} \
                         was resolved cannot be told",
                        effect.label_at(self.start_ms)
                    )),
                    _ => {}
                }
            }
        }
        if replacements == 0 {
            return Verdict::not_judged(LINEAGE, "no intent replaces another");
        }
        if lines.is_empty() && !untimed.is_empty() {
            return Verdict::not_judged(LINEAGE, untimed.join("; "));
        }
        Verdict::from_evidence(LINEAGE, lines)
    }
}
