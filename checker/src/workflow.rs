//! `workflow`: the steps of a workflow (intents with `after`) run on what their predecessors
//! really produced, as the ledgers show it.
//!
//! - A step takes effect only after every predecessor took effect: an effect of a step whose
//!   predecessor has none, or that comes before the predecessor's first effect in the same
//!   ledger, ran on a result that did not exist. (Across services the order of two effects
//!   cannot be told from the ledgers: each service keeps its own clock, which a scenario may
//!   jump.)
//! - A parameter that takes its value from a predecessor's result (`{from, field, format}`)
//!   carries, in the step's effect, exactly that field of the predecessor's first effect, read
//!   from the predecessor's ledger and rendered with the format. Another value means the step
//!   used another result: a re-resolved reference, a redone predecessor, a guess.
//!
//! The other workflow rules are other invariants' evidence, so that one harm gives one
//! verdict: a completed step executed again is a second effect of one intent
//! ([`super::NO_DUPLICATE_EFFECT`]); a recoverable stop that undid or disowned what completed
//! is a claim the ledger contradicts ([`super::HONEST_TERMINAL_STATES`]).

use vocabulary::ParamRef;

use super::WORKFLOW;
use super::attribution::{Facts, Found, Intent};
use results::Verdict;

impl Facts<'_> {
    pub(super) fn workflow(&self) -> Verdict {
        let mut lines = Vec::new();
        let mut steps = 0;
        for step in &self.intents {
            if step.spec.after.is_empty() {
                continue;
            }
            steps += 1;
            for effect in step.effects.iter().map(|e| &self.effects[*e]) {
                for predecessor_id in &step.spec.after {
                    // An exempt predecessor (unsupported) has nothing the checker may read.
                    let Some(predecessor) =
                        self.by_id.get(predecessor_id.as_str()).map(|p| &self.intents[*p])
                    else {
                        continue;
                    };
                    if predecessor.attribution.is_none() {
                        continue;
                    }
                    if let Some(line) = self.ran_too_early(step, effect, predecessor) {
                        lines.push(line);
                    }
                }
                for (param, reference) in step.spec.references() {
                    if let Some(line) = self.other_result(step, effect, &param, &reference) {
                        lines.push(line);
                    }
                }
            }
        }
        if steps == 0 {
            return Verdict::not_judged(WORKFLOW, "no intent comes after another");
        }
        Verdict::from_evidence(WORKFLOW, lines)
    }

    /// The predecessor's first effect, if it has one.
    fn first_effect<'f>(&'f self, intent: &Intent) -> Option<&'f Found<'f>> {
        intent.effects.first().map(|e| &self.effects[*e])
    }

    /// Why `effect` of `step` came too early for `predecessor`, if it did.
    fn ran_too_early(&self, step: &Intent, effect: &Found, predecessor: &Intent) -> Option<String> {
        let (s, p) = (step.id(), predecessor.id());
        match self.first_effect(predecessor) {
            None => Some(format!(
                "{s} took effect ({}) although {p}, which it comes after, never took effect",
                effect.label_at(self.start_ms)
            )),
            // Within one ledger, order is the ledger's; across services it cannot be told,
            // since each service keeps its own clock (a clock jump moves one only).
            Some(first) if first.service == effect.service && effect.effect.seq < first.effect.seq => {
                Some(format!(
                    "{s} took effect ({}) before {p}, which it comes after, took effect ({})",
                    effect.label_at(self.start_ms),
                    first.label_at(self.start_ms)
                ))
            }
            Some(_) => None,
        }
    }

    /// Why `effect` of `step` does not carry what `reference` reads, if it does not.
    fn other_result(
        &self,
        step: &Intent,
        effect: &Found,
        param: &str,
        reference: &ParamRef,
    ) -> Option<String> {
        let predecessor = self.by_id.get(reference.from.as_str()).map(|p| &self.intents[*p])?;
        let (action, _) = predecessor.attribution?;
        let field = action.result_field(&reference.field)?;
        // No effect of the predecessor: `ran_too_early` says so already.
        let produced = self.first_effect(predecessor)?;
        let value = field.value_in(produced.effect)?;
        let want = reference.render(&value);
        let got = effect.effect.params.get(param);
        if got.and_then(|v| v.as_str()) == Some(want.as_str()) {
            return None;
        }
        let got = got.map_or_else(|| "nothing".to_string(), |v| v.to_string());
        Some(format!(
            "{} took effect ({}) with {param} {got}, but {} produced {} {} ({}), so {param} should be {:?}",
            step.id(),
            effect.label_at(self.start_ms),
            predecessor.id(),
            reference.field,
            serde_json::Value::from(value),
            produced.label_at(self.start_ms),
            want
        ))
    }
}
