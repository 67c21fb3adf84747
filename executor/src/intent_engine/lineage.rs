//! Lineage: a replacement (`replaces`) waits while anything in the chain of intents it
//! replaces is unresolved, is cancelled once one of them took effect, runs once none of them
//! took effect or can (each failed, or was escalated with `could_duplicate` false: the
//! replacement is the new decision a refusal asked for), and is escalated when one of them
//! needs a person and may have taken effect. What a blocked intent becomes, from its lineage
//! and from the intents it comes after, is decided in `workflow`.

use super::{Executor, Pending};
use crate::log::LogError;
use vocabulary::State;

/// What a lineage established, from the newest predecessor back to its root.
pub(super) enum Lineage {
    /// This intent took effect: a replacement is cancelled.
    Executed(String),
    /// No intent in it took effect, and none can: a replacement may run.
    NothingExecuted,
    /// Some intent is not resolved yet: a replacement waits.
    Unresolved,
    /// This intent needs a person: so does a replacement.
    Escalated(String),
}

pub(super) fn cancelled(old: &str, by: &str) -> String {
    if old == by {
        format!("cancelled: the intent it replaces ({old}) is confirmed")
    } else {
        format!("cancelled: {by}, in the lineage of the intent it replaces ({old}), is confirmed")
    }
}

impl Executor {
    /// What the chain of intents ending at `id` (following `replaces`) established. Every
    /// supported action is exclusive (one refund per payment intent, one workspace per
    /// external id), so a replacement may run only when nothing in its lineage took effect
    /// and nothing can any more: not just its direct predecessor, which may itself be a
    /// replacement cancelled because an older intent was confirmed. `pending`: the intents
    /// proposed earlier in the same batch, not yet recorded.
    pub(super) fn lineage(&self, id: &str, pending: &Pending) -> Result<Lineage, LogError> {
        let mut current = id.to_string();
        let mut escalated: Option<String> = None;
        // Bounded by the log's size: a chain cannot be longer than the intents recorded.
        let bound = self.log().count()? + pending.len();
        for _ in 0..=bound {
            let Some(intent) = self.row(&current, pending)? else {
                return Ok(Lineage::Escalated(format!("{current} (missing from the log)")));
            };
            match intent.state {
                State::Confirmed => return Ok(Lineage::Executed(intent.id)),
                // Escalated with nothing sent that can have taken effect (a refusal that needs
                // a decision): as good as failed.
                State::Escalated if intent.evidence.could_duplicate == Some(false) => {}
                State::Escalated => {
                    escalated.get_or_insert(intent.id.clone());
                }
                State::Failed => {}
                _ => return Ok(Lineage::Unresolved),
            }
            match intent.replaces {
                Some(older) => current = older,
                None => break,
            }
        }
        Ok(match escalated {
            Some(by) => Lineage::Escalated(by),
            None => Lineage::NothingExecuted,
        })
    }
}
