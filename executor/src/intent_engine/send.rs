//! Sending one attempt and reading its outcome: the row as it is written just before a send
//! (submitted, counted, its key kept or rotated), the send itself (refused once the lease has
//! run out: the fencing on this side of the wire), the read-back of a success where acks may
//! lie, and the row an outcome leads to. A timeout is never a "no".

use super::Executor;
use super::planned::Planned;
use crate::model::{Action, Decision, Intent};
use crate::services::{self, Lookup, WriteOutcome};
use vocabulary::Reads;
use vocabulary::State;

/// An intent about to be sent.
pub(super) struct Send {
    pub(super) intent: Intent,
    pub(super) action: Action,
}

/// The service of a row's action (empty for an unreadable one, which is never sent).
fn action_service(intent: &Intent) -> &'static str {
    intent.action().map(|a| a.service()).unwrap_or_default()
}

impl Executor {
    /// The row as it is written just before a send: submitted, counted, key and times kept.
    pub(super) fn submitted(&self, mut intent: Intent, now: u64, rotate_key: bool) -> Intent {
        if rotate_key {
            let old = std::mem::replace(&mut intent.key, self.world.ids.next_id());
            intent.evidence.previous_keys.push(old);
            intent.key_first_sent_ms = None;
        }
        intent.state = State::Submitted;
        intent.attempts += 1;
        intent.key_first_sent_ms.get_or_insert(now);
        intent.last_sent_ms = Some(now);
        intent.evidence.key = Some(intent.key.clone());
        intent.evidence.first_sent_ms.get_or_insert(now);
        intent.evidence.last_sent_ms = Some(now);
        intent.updated_ms = now;
        intent
    }

    /// Moves the times of a send about to leave to `at`: its last send, and its first (and its
    /// key's first) where this send is the first. Never earlier than [`Self::submitted`] set.
    pub(super) fn stamp_sent(new: &mut Intent, before: &Intent, at: u64) {
        let at = at.max(new.last_sent_ms.unwrap_or(0));
        new.last_sent_ms = Some(at);
        new.evidence.last_sent_ms = Some(at);
        new.updated_ms = new.updated_ms.max(at);
        if before.key_first_sent_ms.is_none() || before.key != new.key {
            new.key_first_sent_ms = Some(at);
        }
        if before.evidence.first_sent_ms.is_none() {
            new.evidence.first_sent_ms = Some(at);
        }
    }

    /// One send, and for a service whose acks may lie, the read-back of a success.
    pub(super) async fn attempt(&self, send: &Send) -> (WriteOutcome, Option<Lookup>) {
        let Some(service) = self.config.services.get(send.action.service()) else {
            return (WriteOutcome::NotExecuted { error: "service not configured".into() }, None);
        };
        let request = match services::write_request(
            &send.action,
            &send.intent,
            &self.config,
            service,
            send.intent.lease_epoch,
        ) {
            Ok(r) => r,
            Err(error) => return (WriteOutcome::NotExecuted { error }, None),
        };
        self.world.hooks.at("before_send");
        if self.now() >= send.intent.lease_until_ms {
            // Paused or slow past the lease between the commit and the send: another worker
            // may own the intent now, so this one must not send.
            return (WriteOutcome::Fenced { error: "the lease ran out before the send".into() }, None);
        }
        let answer = self.world.transport.send(request).await;
        self.world.hooks.at("after_reply");
        let outcome = services::classify_write(&send.action, &send.intent, answer);
        let read_back = match &outcome {
            WriteOutcome::Done { .. } if !services::read_back_success(&send.action, &service.contract) => {
                None
            }
            // A refusal of a resend says nothing of an earlier send that may have landed: the
            // read-back tells whether one did, before a person is asked to decide.
            WriteOutcome::NeedsDecision { .. } if !send.intent.maybe_executed => None,
            WriteOutcome::Done { .. }
            | WriteOutcome::Conflict { .. }
            | WriteOutcome::NeedsDecision { .. } => Some(
                services::lookup(
                    &send.action,
                    &send.intent,
                    &self.config,
                    service,
                    self.world.transport.as_ref(),
                )
                .await,
            ),
            _ => None,
        };
        (outcome, read_back)
    }

    /// The row after a send's outcome, or `None` when nothing must be written.
    pub(super) fn after_send(
        &self,
        sent: Intent,
        outcome: WriteOutcome,
        read_back: Option<Lookup>,
        now: u64,
    ) -> Option<Planned> {
        let mut new = sent.clone();
        new.updated_ms = now;
        let from = sent.state;
        let expect_version = sent.version + 1;
        let (state, note) = match outcome {
            WriteOutcome::Done { external_id } => after_success(&mut new, external_id, read_back),
            WriteOutcome::Rejected { error } => {
                new.evidence.last_error = Some(error.clone());
                if sent.maybe_executed {
                    (State::Unknown, format!("rejected, but an earlier attempt may have landed: {error}"))
                } else {
                    (State::Failed, format!("rejected: {error}"))
                }
            }
            WriteOutcome::NeedsDecision { status, error } => {
                after_refusal_for_a_person(&mut new, &sent, Decision { status, error }, read_back)
            }
            WriteOutcome::NotExecuted { error } => {
                new.evidence.last_error = Some(error.clone());
                if sent.maybe_executed {
                    (State::Unknown, format!("not executed, but an earlier attempt may have landed: {error}"))
                } else if sent.attempts >= self.config.limits.attempts_max && !sent.evidence.holds_a_nonce() {
                    (State::Failed, format!("never executed in {} attempts: {error}", sent.attempts))
                } else {
                    (State::Recorded, format!("not executed, will retry: {error}"))
                }
            }
            WriteOutcome::Ambiguous { error } => {
                new.maybe_executed = true;
                new.evidence.last_error = Some(error.clone());
                (State::Unknown, format!("no definite answer: {error}"))
            }
            WriteOutcome::Conflict { error, definite } => {
                self.after_conflict(&mut new, &sent, error, definite, read_back)
            }
            // A newer worker holds the intent; its decision stands.
            WriteOutcome::Fenced { .. } => return None,
        };
        new.state = state;
        new.evidence.reason = Some(note.clone());
        Some(Planned { new, expect_version, from, note })
    }

    /// After a conflict (a precondition or a nonce another write took): confirmed where the
    /// read-back finds an earlier send of it, failed where reads are strong and the conflict
    /// definite with nothing of it sent before, otherwise `unknown` until a lookup can tell.
    fn after_conflict(
        &self,
        new: &mut Intent,
        sent: &Intent,
        error: String,
        definite: bool,
        read_back: Option<Lookup>,
    ) -> (State, String) {
        new.evidence.last_error = Some(error.clone());
        // Reads that may lag cannot prove whose version (or transaction) is there.
        let strong =
            self.config.services.get(action_service(sent)).is_some_and(|s| s.contract.reads == Reads::Strong);
        match read_back {
            Some(Lookup::Found { external_id, params_match: true }) => {
                new.evidence.external_id = Some(external_id);
                new.evidence.last_error = None;
                (
                    State::Confirmed,
                    format!("confirmed by a read-back: an earlier send of it landed ({error})"),
                )
            }
            Some(Lookup::Superseded { what }) if definite && strong && !sent.maybe_executed => {
                (State::Failed, format!("refused: {error}; {what}"))
            }
            _ => (State::Unknown, format!("refused, and the read-back cannot tell why yet: {error}")),
        }
    }
}

/// After a success: confirmed, unless the read-back a service whose acks may lie needs did
/// not show the effect, which leaves it `unknown`.
fn after_success(new: &mut Intent, external_id: String, read_back: Option<Lookup>) -> (State, String) {
    match read_back {
        None => {
            new.evidence.external_id = Some(external_id);
            new.evidence.last_error = None;
            (State::Confirmed, "confirmed by the service".to_string())
        }
        // The id of what the read-back found: the effect itself (for a message, the email in
        // the inbox), which is the answer's id wherever both are known.
        Some(Lookup::Found { external_id: found, params_match: true }) => {
            new.evidence.external_id = Some(if found.is_empty() { external_id } else { found });
            new.evidence.last_error = None;
            (State::Confirmed, "confirmed by the service".to_string())
        }
        Some(other) => {
            new.maybe_executed = true;
            new.evidence.last_error = Some(format!("success not confirmed by a read-back: {other:?}"));
            (State::Unknown, "a success the read-back did not show".into())
        }
    }
}

/// After a refusal a person must decide on (the first such refusal is kept as the intent's
/// decision): escalated where no send of it can have taken effect, confirmed where the
/// read-back finds an earlier send, and otherwise looked up before anyone is asked.
fn after_refusal_for_a_person(
    new: &mut Intent,
    sent: &Intent,
    refusal: Decision,
    read_back: Option<Lookup>,
) -> (State, String) {
    new.evidence.last_error = Some(format!("HTTP {}: {}", refusal.status, refusal.error));
    let decision = new.evidence.decision.get_or_insert(refusal).clone();
    let refused = format!("refused with {}: {}", decision.status, decision.error);
    match read_back {
        // No send of it can have taken effect: the refusal is the intent's answer.
        _ if !sent.maybe_executed => {
            new.evidence.could_duplicate = Some(false);
            (State::Escalated, format!("{refused}; a person must decide, and nothing was done"))
        }
        Some(Lookup::Found { external_id, params_match: true }) => {
            new.evidence.external_id = Some(external_id);
            new.evidence.last_error = None;
            new.evidence.decision = None;
            (State::Confirmed, format!("confirmed by a read-back: an earlier send of it landed ({refused})"))
        }
        Some(Lookup::Found { external_id, params_match: false }) => {
            new.evidence.external_id = Some(external_id);
            new.evidence.could_duplicate = Some(true);
            (
                State::Escalated,
                format!("{refused}; an effect exists with parameters other than the authorised ones"),
            )
        }
        // An earlier send may still land or not be visible yet: the intent is looked up until
        // that is settled, and never sent again.
        Some(_) | None => (
            State::Unknown,
            format!("{refused}; an earlier send may have landed, so it is looked up before a person decides"),
        ),
    }
}
