//! Reconciliation: what a lookup of an uncertain intent (sent by a worker that died, or
//! `unknown`) leads to: confirmed, failed once a negative answer is final (every request sent
//! could no longer land and every read could no longer lag), sent again where the key or a
//! guard makes a resend safe, `unknown`, or escalated past its deadline. An intent whose
//! resend the service refused with a status a person must act on (`evidence.decision`) is
//! never sent again: it is confirmed if an earlier send is found, and escalated once none can
//! have landed.

use super::planned::Planned;
use super::{Executor, SAFETY_MARGIN_MS};
use crate::model::{Action, Intent};
use crate::services::{self, Lookup};
use vocabulary::Contract;
use vocabulary::KeyPolicy;
use vocabulary::State;

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
        let standing = self.standing(intent, contract, looked_at_ms, now);
        match found {
            Lookup::Found { external_id, params_match } => {
                found_by_lookup(intent, leased, external_id, params_match)
            }
            Lookup::Absent if standing.settled => {
                self.absent_for_good(intent, action, contract, leased, standing.refusal, now)
            }
            Lookup::Superseded { what } if standing.settled => {
                let mut new = leased;
                new.maybe_executed = false;
                write(intent, new, State::Failed, format!("it can no longer take effect: {what}"))
            }
            Lookup::Superseded { .. } => stopped_before_the_answer(intent, leased),
            Lookup::Absent => self.absent_for_now(intent, action, contract, leased, &standing, now),
            Lookup::Failed { error } if standing.overdue => {
                let mut new = leased;
                new.evidence.last_error = Some(error.clone());
                new.evidence.could_duplicate = Some(true);
                write(
                    intent,
                    new,
                    State::Escalated,
                    format!("unresolved past its deadline; the lookup failed: {error}"),
                )
            }
            Lookup::Failed { error } => {
                leased.evidence.last_error = Some(error);
                stopped_before_the_answer(intent, leased)
            }
        }
    }

    /// What a lookup's answer is judged against for `intent`: whether a "not there" is final,
    /// whether the intent is past its deadline, and a refusal that forbids sending it again.
    fn standing(&self, intent: &Intent, contract: &Contract, looked_at_ms: u64, now: u64) -> Standing {
        let limits = &self.config.limits;
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
        Standing { settled, overdue, refusal }
    }

    /// Absent, and nothing can land any more: escalated where a resend was refused for a
    /// person to decide, failed once its attempts are spent, otherwise sent again.
    fn absent_for_good(
        &self,
        intent: &Intent,
        action: &Action,
        contract: &Contract,
        mut leased: Intent,
        refusal: Option<String>,
        now: u64,
    ) -> Decision {
        let limits = &self.config.limits;
        leased.maybe_executed = false;
        if let Some(refused) = refusal {
            let mut new = leased;
            new.evidence.could_duplicate = Some(false);
            return write(
                intent,
                new,
                State::Escalated,
                format!("{refused}; no send of it took effect, and none can any more: a person must decide"),
            );
        }
        if intent.attempts >= limits.attempts_max && !intent.evidence.holds_a_nonce() {
            return write(
                intent,
                leased,
                State::Failed,
                format!("no effect after {} attempts, and none can appear any more", intent.attempts),
            );
        }
        // Nothing landed and nothing can land: a new attempt is safe. Where a success may be
        // hollow (acks may lie, or a message the inbox never showed), with a fresh key: the
        // service may have saved a silent no-op's success under the old one, which a resend
        // would only replay. Elsewhere the same key, so that a late request of a stale worker
        // still carrying it is a replay.
        let rotate = services::success_may_be_hollow(action, contract) && intent.last_sent_ms.is_some();
        let before = leased.clone();
        let new = self.submitted(leased, now, rotate);
        send(intent, new, before, "absent for good: sent again")
    }

    /// Absent for now (a send may still land, or a read still lag): sent again where its key
    /// or a guard makes that safe, after a pause and within its attempts; otherwise left as
    /// it is, or `unknown` where the worker that sent it died.
    fn absent_for_now(
        &self,
        intent: &Intent,
        action: &Action,
        contract: &Contract,
        leased: Intent,
        standing: &Standing,
        now: u64,
    ) -> Decision {
        let limits = &self.config.limits;
        let key_safe = !services::success_may_be_hollow(action, contract)
            && self.key_kept_through_a_send(contract, intent.key_first_sent_ms, now);
        // A conditional put or a signed transaction can land at most once however often it is
        // sent, so it need not wait for the settle bound either.
        let guarded = services::resend_is_guarded(action, contract);
        let paused_enough = intent
            .last_sent_ms
            .is_none_or(|t| now >= t + limits.request_timeout_ms * u64::from(intent.attempts.max(1)));
        let attempts_left = intent.attempts < limits.attempts_max || intent.evidence.holds_a_nonce();
        if (key_safe || guarded) && paused_enough && attempts_left && standing.refusal.is_none() {
            let before = leased.clone();
            let new = self.submitted(leased, now, false);
            let note = match action {
                Action::PutObject { .. } => "sent again under its precondition",
                Action::Transfer { .. } => "broadcast again: the same signed bytes",
                _ => "sent again with the same key",
            };
            send(intent, new, before, note)
        } else {
            stopped_before_the_answer(intent, leased)
        }
    }
}

/// What a lookup's answer is judged against (see [`Executor::standing`]).
struct Standing {
    /// A negative answer is final: every request sent could no longer land, and every read
    /// could no longer lag, when the lookup was sent.
    settled: bool,
    /// Past the deadline after which an unresolved intent is escalated.
    overdue: bool,
    /// The refusal of a resend that needs a person's decision, said as the reason says it.
    refusal: Option<String>,
}

/// The row `new` (leased from `intent`) in `state`, with `note` as its reason.
fn write(intent: &Intent, mut new: Intent, state: State, note: String) -> Decision {
    new.state = state;
    new.evidence.reason = Some(note.clone());
    Decision::Write(Planned { new, expect_version: intent.version, from: intent.state, note })
}

/// `new`, as it will be sent, and `before`, as it was leased.
fn send(intent: &Intent, new: Intent, before: Intent, note: &str) -> Decision {
    Decision::Send(
        Planned { new, expect_version: intent.version, from: intent.state, note: note.to_string() },
        Box::new(before),
    )
}

/// Found: confirmed where its parameters are the authorised ones (a refused resend came after
/// it took effect), escalated where they are not.
fn found_by_lookup(intent: &Intent, leased: Intent, external_id: String, params_match: bool) -> Decision {
    let mut new = leased;
    new.evidence.external_id = Some(external_id);
    if !params_match {
        new.evidence.could_duplicate = Some(true);
        return write(
            intent,
            new,
            State::Escalated,
            "an effect exists with parameters other than the authorised ones".into(),
        );
    }
    new.evidence.last_error = None;
    // What was refused was a resend: the intent took effect before it.
    new.evidence.decision = None;
    write(intent, new, State::Confirmed, "confirmed by lookup".into())
}

/// Nothing settled yet: `unknown` where the worker that marked it submitted died before
/// recording the answer, otherwise left as it is.
fn stopped_before_the_answer(intent: &Intent, leased: Intent) -> Decision {
    if intent.state != State::Submitted {
        return Decision::Stay;
    }
    let mut new = leased;
    new.maybe_executed = true;
    write(intent, new, State::Unknown, "the worker that sent it stopped before recording the answer".into())
}
