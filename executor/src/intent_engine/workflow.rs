//! Workflows: a step (an intent with `after`) waits while an intent it comes after is
//! unresolved, is cancelled when one of them failed, escalated when one of them is escalated,
//! and otherwise resolves its parameter references ONCE, from the results its predecessors
//! recorded, before its first send. What a blocked intent waits for is decided here for both
//! reasons it may wait: its lineage (`replaces`, in `lineage`) and its predecessors (`after`).

use std::collections::BTreeMap;

use serde_json::Value;
use vocabulary::workflow;

use super::lineage::{Lineage, cancelled};
use super::{Executor, Pending};
use crate::log::LogError;
use crate::model::Intent;
use vocabulary::State;

/// What the intents a step comes after established.
enum After {
    /// Every one is confirmed: the step may run.
    Confirmed,
    /// One is not resolved yet: the step waits.
    Unresolved,
    /// This one failed: the step is cancelled.
    Failed(String),
    /// This one needs a person: so does the step.
    Escalated(String),
}

/// What a blocked (or just proposed) intent becomes once nothing it waits for is unresolved.
pub(super) struct Release {
    pub(super) state: State,
    /// Why, for `evidence.reason`; `None` for a plain `recorded` at propose time.
    pub(super) reason: Option<String>,
    /// For an escalation: whether continuing could write twice.
    pub(super) could_duplicate: Option<bool>,
}

impl Release {
    /// Applies the release to a row.
    pub(super) fn apply(self, mut row: Intent) -> Intent {
        row.state = self.state;
        row.evidence.reason = self.reason;
        if self.could_duplicate.is_some() {
            row.evidence.could_duplicate = self.could_duplicate;
        }
        row
    }
}

/// Why a step's references could not be resolved though every predecessor is confirmed.
pub(super) struct Unresolvable(pub(super) String);

/// The reason a step is cancelled with when an intent it comes after failed.
pub fn cancelled_after(id: &str) -> String {
    format!("cancelled: the intent it comes after ({id}) failed")
}

/// The reason a step is escalated with when an intent it comes after is escalated.
pub fn waits_for_escalated(id: &str) -> String {
    format!("waits for {id}, which is escalated")
}

/// The value of result field `field` in what `intent` recorded when it was confirmed: the id
/// the service gave the effect (a refund, a workspace, a message, and the ETag of a put) is
/// `external_id`; a transfer's hash is `tx_hash`. `None` when it recorded none.
pub fn result_value(intent: &Intent, field: &str) -> Option<String> {
    let evidence = &intent.evidence;
    match (intent.action.as_str(), field) {
        ("chain.transfer", "tx_hash") => evidence.tx_hash.clone(),
        (_, "id") | ("files.put", "etag") => evidence.external_id.clone(),
        _ => None,
    }
    .filter(|v| !v.is_empty())
}

impl Executor {
    /// A blocked intent once nothing it waits for is unresolved, or `None` while something is.
    pub(super) fn unblock(&self, intent: &Intent, leased: Intent) -> Result<Option<Intent>, LogError> {
        Ok(self.release(intent.replaces.as_deref(), &intent.after, &Pending::new())?.map(|r| r.apply(leased)))
    }

    /// What an intent that replaces `replaces` (if any) and comes after `after` becomes, or
    /// `None` while something it waits for is unresolved. A failed or escalated predecessor
    /// decides at once, whatever else is still open: nothing could change that outcome.
    /// `pending`: the intents proposed earlier in the same batch, not yet recorded.
    pub(super) fn release(
        &self,
        replaces: Option<&str>,
        after: &[String],
        pending: &Pending,
    ) -> Result<Option<Release>, LogError> {
        let after_state = self.after(after, pending)?;
        match &after_state {
            After::Failed(id) => {
                return Ok(Some(Release {
                    state: State::Failed,
                    reason: Some(cancelled_after(id)),
                    could_duplicate: None,
                }));
            }
            After::Escalated(id) => {
                // Nothing of the step was ever sent: continuing cannot write twice.
                return Ok(Some(Release {
                    state: State::Escalated,
                    reason: Some(waits_for_escalated(id)),
                    could_duplicate: Some(false),
                }));
            }
            After::Confirmed | After::Unresolved => {}
        }
        let lineage_reason = match replaces {
            None => None,
            Some(old) => match self.lineage(old, pending)? {
                Lineage::Executed(by) => {
                    return Ok(Some(Release {
                        state: State::Failed,
                        reason: Some(cancelled(old, &by)),
                        could_duplicate: None,
                    }));
                }
                Lineage::Escalated(by) => {
                    return Ok(Some(Release {
                        state: State::Escalated,
                        reason: Some(format!(
                            "{by}, in the lineage of {old}, is escalated; executing this one could do it twice"
                        )),
                        // This one was never sent: going on with it is for the person who
                        // decides on `by`, and cannot repeat anything of its own.
                        could_duplicate: Some(false),
                    }));
                }
                Lineage::Unresolved => return Ok(None),
                Lineage::NothingExecuted => {
                    Some(format!("unblocked: nothing in the lineage of {old} took effect"))
                }
            },
        };
        if matches!(after_state, After::Unresolved) {
            return Ok(None);
        }
        let reason = lineage_reason
            .or_else(|| (!after.is_empty()).then(|| format!("unblocked: {} confirmed", after.join(", "))));
        Ok(Some(Release { state: State::Recorded, reason, could_duplicate: None }))
    }

    /// What the intents `after` established, looking at each once.
    fn after(&self, after: &[String], pending: &Pending) -> Result<After, LogError> {
        let mut unresolved = false;
        for id in after {
            let Some(before) = self.row(id, pending)? else {
                // Checked at propose; a row gone since can only be a damaged log.
                return Ok(After::Escalated(format!("{id} (missing from the log)")));
            };
            match before.state {
                State::Confirmed => {}
                State::Failed => return Ok(After::Failed(id.clone())),
                State::Escalated => return Ok(After::Escalated(id.clone())),
                _ => unresolved = true,
            }
        }
        Ok(if unresolved { After::Unresolved } else { After::Confirmed })
    }

    /// Whether some blocked step could be decided now: a drain goes on for it, since the pass
    /// that confirmed its last predecessor could not release it in the same pass.
    pub(super) fn a_step_can_be_released(&self) -> Result<bool, LogError> {
        let blocked = self.log().in_state(State::Blocked)?;
        for step in blocked.iter().filter(|i| !i.after.is_empty()) {
            if self.release(step.replaces.as_deref(), &step.after, &Pending::new())?.is_some() {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The value of each reference of `payload` (the step's authorised parameters), read from
    /// the results its predecessors recorded. Called once per step, before its first send;
    /// every predecessor is confirmed by then. A result that is missing is never guessed.
    pub(super) fn resolve(
        &self,
        payload: &Value,
    ) -> Result<Result<BTreeMap<String, String>, Unresolvable>, LogError> {
        let references = match workflow::references(payload) {
            Ok(r) => r,
            Err(problem) => return Ok(Err(Unresolvable(problem))),
        };
        let log = self.log();
        let mut values = BTreeMap::new();
        for (name, reference) in references {
            let Some(from) = log.get(&reference.from)? else {
                return Ok(Err(Unresolvable(format!(
                    "parameter \"{name}\" reads from {}, which is missing from the log",
                    reference.from
                ))));
            };
            if from.state != State::Confirmed {
                return Ok(Err(Unresolvable(format!(
                    "parameter \"{name}\" reads from {}, which is {}, not confirmed",
                    from.id, from.state
                ))));
            }
            let Some(value) = result_value(&from, &reference.field) else {
                return Ok(Err(Unresolvable(format!(
                    "{} is confirmed but recorded no \"{}\" for parameter \"{name}\"; not guessing it",
                    from.id, reference.field
                ))));
            };
            values.insert(name, reference.render(&value));
        }
        Ok(Ok(values))
    }
}
