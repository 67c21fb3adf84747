//! Reconciliation: what a lookup of an uncertain intent (sent by a worker that died, or
//! `unknown`) leads to: confirmed, failed once a negative answer is final (every request sent
//! could no longer land and every read could no longer lag), sent again where the key or a
//! guard makes a resend safe, `unknown`, or escalated past its deadline. An intent whose
//! resend the service refused with a status a person must act on (`evidence.decision`) is
//! never sent again: it is confirmed if an earlier send is found, and escalated once none can
//! have landed.

use super::planned::Planned;
use super::{Executor, SAFETY_MARGIN_MS};
use crate::config::{Contract, KeyPolicy};
use crate::model::{Action, Intent, State};
use crate::services::{self, Lookup};

/// What a lookup led to.
pub(super) enum Decision {
    Write(Planned),
    /// The row as it will be sent, and as it was leased before (boxed: the variants differ
    /// in size by a whole row).
    Send(Planned, Box<Intent>),
    Stay,
}

impl Executor {
    /// After a lookup: what the intent becomes.
    /// Whether a send under a key first sent at `key_first_sent_ms`, leaving at `at_ms`, still
    /// reaches a service that keeps that key (allowing for the request's own time and a
    /// margin): only then does the service replay the first answer instead of acting again.
    pub(super) fn key_kept_through_a_send(
        &self,
        contract: &Contract,
        key_first_sent_ms: Option<u64>,
        at_ms: u64,
    ) -> bool {
        contract.idempotency_keys == KeyPolicy::Honored
            && key_first_sent_ms.is_some_and(|t| {
                at_ms + self.config.limits.request_timeout_ms + SAFETY_MARGIN_MS
                    < t + contract.key_retention_ms
            })
    }

    /// What `found`, a lookup sent at `looked_at_ms`, means for `intent` at `now`.
    pub(super) fn decide(
        &self,
        intent: &Intent,
        action: &Action,
        found: Lookup,
        looked_at_ms: u64,
        now: u64,
    ) -> Decision {
        let limits = &self.config.limits;
        let Some(service) = self.config.services.get(action.service()) else {
            return Decision::Stay;
        };
        let contract = &service.contract;
        let Some(mut leased) = self.lease(intent, now) else { return Decision::Stay };
        // A worker that died after marking it submitted may have sent it: until a lookup
        // proves otherwise, a resend's definite refusal does not make that send unsent.
        if intent.state == State::Submitted {
            leased.maybe_executed = true;
        }
        let write = |mut new: Intent, state: State, note: String| {
            new.state = state;
            new.evidence.reason = Some(note.clone());
            Decision::Write(Planned { new, expect_version: intent.version, from: intent.state, note })
        };
        let send = |new: Intent, before: Intent, note: &str| {
            Decision::Send(
                Planned { new, expect_version: intent.version, from: intent.state, note: note.to_string() },
                Box::new(before),
            )
        };
        // A negative answer is final once every request sent could no longer land and every
        // read could no longer lag.
        let settled_at = intent.last_sent_ms.map(|t| {
            t + contract.settle_ms_max
                + contract.read_lag_ms_max
                + limits.request_timeout_ms
                + SAFETY_MARGIN_MS
        });
        // Judged at the moment the lookup was sent, not when its answer is read: a worker
        // paused in between would otherwise take an old "not there" for a settled one.
        let settled = settled_at.is_none_or(|t| looked_at_ms >= t);
        let deadline = intent.evidence.first_sent_ms.map(|t| {
            t + limits
                .escalate_after_ms
                .max(settled_at.unwrap_or(0).saturating_sub(intent.last_sent_ms.unwrap_or(0)) * 2)
        });
        let overdue = deadline.is_some_and(|d| now >= d);
        // The service refused a resend with a status a person must act on: the intent is
        // looked up until an earlier send is found or proven absent, and never sent again.
        let refusal =
            intent.evidence.decision.as_ref().map(|d| format!("refused with {}: {}", d.status, d.error));
        match found {
            Lookup::Found { external_id, params_match: true } => {
                let mut new = leased;
                new.evidence.external_id = Some(external_id);
                new.evidence.last_error = None;
                // What was refused was a resend: the intent took effect before it.
                new.evidence.decision = None;
                write(new, State::Confirmed, "confirmed by lookup".into())
            }
            Lookup::Found { external_id, params_match: false } => {
                let mut new = leased;
                new.evidence.external_id = Some(external_id);
                new.evidence.could_duplicate = Some(true);
                write(
                    new,
                    State::Escalated,
                    "an effect exists with parameters other than the authorised ones".into(),
                )
            }
            Lookup::Absent if settled && refusal.is_some() => {
                let mut new = leased;
                new.maybe_executed = false;
                new.evidence.could_duplicate = Some(false);
                let refused = refusal.unwrap_or_default();
                write(
                    new,
                    State::Escalated,
                    format!(
                        "{refused}; no send of it took effect, and none can any more: a person must decide"
                    ),
                )
            }
            Lookup::Absent if settled => {
                if intent.attempts >= limits.attempts_max && !intent.evidence.holds_a_nonce() {
                    let mut new = leased;
                    new.maybe_executed = false;
                    return write(
                        new,
                        State::Failed,
                        format!("no effect after {} attempts, and none can appear any more", intent.attempts),
                    );
                }
                // Nothing landed and nothing can land: a new attempt is safe. Where a success
                // may be hollow (acks may lie, or a message the inbox never showed), with a
                // fresh key: the service may have saved a silent no-op's success under the old
                // one, which a resend would only replay. Elsewhere the same key, so that a
                // late request of a stale worker still carrying it is a replay.
                let mut new = leased;
                new.maybe_executed = false;
                let rotate =
                    services::success_may_be_hollow(action, contract) && intent.last_sent_ms.is_some();
                let before = new.clone();
                let new = self.submitted(new, now, rotate);
                send(new, before, "absent for good: sent again")
            }
            Lookup::Superseded { what } if settled => {
                let mut new = leased;
                new.maybe_executed = false;
                write(new, State::Failed, format!("it can no longer take effect: {what}"))
            }
            Lookup::Superseded { .. } if intent.state == State::Submitted => {
                let mut new = leased;
                new.maybe_executed = true;
                write(
                    new,
                    State::Unknown,
                    "the worker that sent it stopped before recording the answer".into(),
                )
            }
            Lookup::Superseded { .. } => Decision::Stay,
            Lookup::Absent => {
                let key_safe = !services::success_may_be_hollow(action, contract)
                    && self.key_kept_through_a_send(contract, intent.key_first_sent_ms, now);
                // A conditional put or a signed transaction can land at most once however
                // often it is sent, so it need not wait for the settle bound either.
                let guarded = services::resend_is_guarded(action, contract);
                let paused_enough = intent
                    .last_sent_ms
                    .is_none_or(|t| now >= t + limits.request_timeout_ms * u64::from(intent.attempts.max(1)));
                let attempts_left = intent.attempts < limits.attempts_max || intent.evidence.holds_a_nonce();
                if (key_safe || guarded) && paused_enough && attempts_left && refusal.is_none() {
                    let before = leased.clone();
                    let new = self.submitted(leased, now, false);
                    let note = match action {
                        Action::PutObject { .. } => "sent again under its precondition",
                        Action::Transfer { .. } => "broadcast again: the same signed bytes",
                        _ => "sent again with the same key",
                    };
                    send(new, before, note)
                } else if intent.state == State::Submitted {
                    // A send whose worker died: nothing is known yet.
                    let mut new = leased;
                    new.maybe_executed = true;
                    write(
                        new,
                        State::Unknown,
                        "the worker that sent it stopped before recording the answer".into(),
                    )
                } else {
                    Decision::Stay
                }
            }
            Lookup::Failed { error } => {
                if overdue {
                    let mut new = leased;
                    new.evidence.last_error = Some(error.clone());
                    new.evidence.could_duplicate = Some(true);
                    write(
                        new,
                        State::Escalated,
                        format!("unresolved past its deadline; the lookup failed: {error}"),
                    )
                } else if intent.state == State::Submitted {
                    let mut new = leased;
                    new.maybe_executed = true;
                    new.evidence.last_error = Some(error);
                    write(
                        new,
                        State::Unknown,
                        "the worker that sent it stopped before recording the answer".into(),
                    )
                } else {
                    Decision::Stay
                }
            }
        }
    }
}
