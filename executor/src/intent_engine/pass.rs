//! The pass and its batch loop: one pass decides every unresolved intent in memory, looks up
//! the uncertain ones, commits every decision and every "submitted" in one transaction, sends
//! concurrently and commits every outcome in one more (the phases of the parent module's
//! overview); `drain` runs passes until nothing is recorded or submitted.

use std::time::Duration;

use serde_json::Value;

use super::planned::{Planned, Sending};
use super::reconcile::Decision;
use super::send::Send;
use super::workflow::Unresolvable;
use super::{DrainError, Executor, PassReport, Transition};
use crate::log::{Change, LogError};
use crate::model::{Action, Intent};
use crate::services::{self, Lookup, WriteOutcome};
use vocabulary::State;

impl Executor {
    /// Whether `sending`, if it resends under a key whose first send may have landed, still
    /// leaves while the service keeps that key; true for every other send.
    fn key_still_kept(&self, sending: &Sending, at: u64) -> bool {
        let new = &sending.planned.new;
        let reused = sending.before.key == new.key && sending.before.key_first_sent_ms.is_some();
        if !(new.maybe_executed && reused) {
            return true;
        }
        let Some(service) = self.config.services.get(sending.action.service()) else { return true };
        let contract = &service.contract;
        if services::resend_is_guarded(&sending.action, contract) {
            return true;
        }
        self.key_kept_through_a_send(contract, new.key_first_sent_ms, at)
    }

    /// One pass over the unresolved intents.
    pub async fn pass(&self) -> Result<PassReport, LogError> {
        // A worker that listens for webhooks has its endpoint before it waits for one, and
        // starts what the events it received ask for before it looks at its intents.
        self.ensure_endpoint().await;
        self.start_received().await;
        let now = self.now();
        let active = self.log().active()?;
        let mut report = PassReport::default();
        let mut decided = Decided::default();

        // Phase 1: decide in memory.
        for intent in active.into_iter().take(self.config.limits.batch_max) {
            self.decide_in_memory(intent, now, &mut decided)?;
        }

        // Phase 2: look up what really happened to the uncertain ones.
        report.looked_up = decided.resolves.len();
        self.look_up(&mut decided).await;
        let Decided { mut writes, sends, .. } = decided;
        let mut sends = self.prepare(sends, &mut writes).await?;
        self.stamp_leaving(&mut sends);

        // Phase 3: one commit for every decision and every intent about to leave.
        let sends = self.commit_decisions(&writes, sends, &mut report)?;

        // Phase 4: send.
        report.sent = sends.len();
        let outcomes = futures_util::future::join_all(sends.iter().map(|s| self.attempt(s))).await;

        // Phase 5: one commit for every outcome.
        self.record_outcomes(sends, outcomes, &mut report)?;
        Ok(report)
    }

    /// Phase 1 for one active intent: what it becomes without asking any service. A blocked
    /// step may be released, a recorded intent sent (see [`Self::first_send`]), an uncertain
    /// one looked up; one whose payload or action cannot be read is escalated.
    fn decide_in_memory(&self, intent: Intent, now: u64, decided: &mut Decided) -> Result<(), LogError> {
        let Some(leased) = self.lease(&intent, now) else { return Ok(()) };
        let payload = match self.checked_payload(&intent) {
            Ok(p) => p,
            Err(problem) => {
                decided.writes.push(escalate(&intent, leased, problem));
                return Ok(());
            }
        };
        let from = intent.state;
        match from {
            State::Blocked => {
                if let Some(new) = self.unblock(&intent, leased)? {
                    let note = new.evidence.reason.clone().unwrap_or_default();
                    decided.writes.push(planned(&intent, new, note));
                }
            }
            State::Recorded => self.first_send(&intent, leased, &payload, now, decided)?,
            State::Submitted | State::Unknown => match intent.action_from(&payload) {
                Ok(action) => decided.resolves.push((intent, action)),
                Err(problem) => decided.writes.push(escalate(&intent, leased, problem)),
            },
            _ => {}
        }
        Ok(())
    }

    /// Phase 1 for a recorded intent: once its pause after a send that certainly did not
    /// execute is over, a send, with a step's references resolved first; escalated or failed
    /// where those values cannot be had or do not fit its action.
    fn first_send(
        &self,
        intent: &Intent,
        mut leased: Intent,
        payload: &Value,
        now: u64,
        decided: &mut Decided,
    ) -> Result<(), LogError> {
        // A send that certainly did not execute (never sent, 429) is retried after a pause
        // that grows with each attempt, not on the very next pass.
        let retry_at = intent
            .last_sent_ms
            .map(|t| t + self.config.limits.request_timeout_ms * u64::from(intent.attempts));
        if retry_at.is_some_and(|t| now < t) {
            return Ok(());
        }
        // A step's references are resolved here, once, before its first send, and recorded
        // with the row that marks it submitted (or, if its first send cannot be prepared, with
        // the row that says so): no later send resolves them again.
        let resolved_now = leased.evidence.resolved.is_empty()
            && !vocabulary::workflow::references(payload).unwrap_or_default().is_empty();
        if resolved_now {
            match self.resolve(payload)? {
                Ok(values) => leased.evidence.resolved = values,
                Err(Unresolvable(problem)) => {
                    let mut new = leased;
                    new.evidence.could_duplicate = Some(false);
                    decided.writes.push(escalate(intent, new, problem));
                    return Ok(());
                }
            }
        }
        // `leased` is `intent` with its lease taken: the payload checked above is its.
        let action = match leased.action_from(payload) {
            Ok(a) => a,
            // Values resolved from the predecessors that the action cannot take: nothing was
            // sent, and nothing will be.
            Err(problem) if resolved_now => {
                let mut new = leased;
                let note = format!(
                    "never sent: the values resolved from the intents it comes after do not fit: {problem}"
                );
                new.state = State::Failed;
                new.evidence.reason = Some(note.clone());
                decided.writes.push(planned(intent, new, note));
                return Ok(());
            }
            Err(problem) => {
                decided.writes.push(escalate(intent, leased, problem));
                return Ok(());
            }
        };
        let new = self.submitted(leased.clone(), now, false);
        decided.sends.push(Sending {
            planned: planned(intent, new, "sent".into()),
            action,
            before: leased,
            resolved_now,
        });
        Ok(())
    }

    /// Phase 2: the uncertain intents looked up, all at once, and what each answer leads to
    /// (see [`Self::decide`]) added to the writes and sends.
    async fn look_up(&self, decided: &mut Decided) {
        let resolves = std::mem::take(&mut decided.resolves);
        let looked_at_ms = self.now();
        let lookups = futures_util::future::join_all(resolves.iter().map(|(intent, action)| async move {
            match self.config.services.get(action.service()) {
                Some(service) => {
                    services::lookup(action, intent, &self.config, service, self.world.transport.as_ref())
                        .await
                }
                None => Lookup::Failed { error: format!("service {} is not configured", action.service()) },
            }
        }))
        .await;
        let now = self.now();
        for ((intent, action), found) in resolves.into_iter().zip(lookups) {
            match self.decide(&intent, &action, found, looked_at_ms, now) {
                Decision::Write(p) => decided.writes.push(p),
                Decision::Send(planned, before) => {
                    decided.sends.push(Sending { planned, action, before: *before, resolved_now: false })
                }
                Decision::Stay => {}
            }
        }
    }

    /// The times of the sends about to leave, taken now, once the lookups, precondition reads
    /// and signing before them are done; a resend that is safe only while the service keeps
    /// its key, and no longer is, stays as it was.
    fn stamp_leaving(&self, sends: &mut Vec<Sending>) {
        // Stamped at the start of the pass, a send that waited behind a slow read would look
        // older than it is, and its "not found" would be believed before the request could
        // have landed.
        let sent_at = self.now();
        // A resend that is safe only while the service keeps its key was judged before the
        // others' preparation, which can take a while: judged again at the moment it leaves.
        // One that no longer is stays as it was, for the next pass to decide anew.
        sends.retain(|sending| self.key_still_kept(sending, sent_at));
        for sending in sends {
            Self::stamp_sent(&mut sending.planned.new, &sending.before, sent_at);
        }
    }

    /// Phase 3: one commit for every decision and every intent about to leave; the sends
    /// whose rows it wrote, which alone may leave.
    fn commit_decisions(
        &self,
        writes: &[Planned],
        sends: Vec<Sending>,
        report: &mut PassReport,
    ) -> Result<Vec<Send>, LogError> {
        let mut changes: Vec<&Planned> = writes.iter().collect();
        changes.extend(sends.iter().map(|s| &s.planned));
        let applied = self.commit(&changes, report)?;
        let sends: Vec<Sending> = sends
            .into_iter()
            .zip(applied[writes.len()..].iter())
            .filter(|(_, ok)| **ok)
            .map(|(s, _)| s)
            .collect();
        if sends.iter().any(|s| s.resolved_now) {
            // The values a step resolved are durable, and nothing of it has left yet.
            self.world.hooks.at("after_resolve");
        }
        Ok(sends.into_iter().map(|s| Send { intent: s.planned.new, action: s.action }).collect())
    }

    /// Phase 5: one commit for every outcome, of the sends whose lease held while they were
    /// out.
    fn record_outcomes(
        &self,
        sends: Vec<Send>,
        outcomes: Vec<(WriteOutcome, Option<Lookup>)>,
        report: &mut PassReport,
    ) -> Result<(), LogError> {
        let now = self.now();
        let mut outcome_writes = Vec::new();
        for (send, (outcome, read_back)) in sends.into_iter().zip(outcomes) {
            if now > send.intent.lease_until_ms {
                // The lease ran out while the request was out: another worker may own the
                // intent now, and this worker's view is stale. Write nothing.
                continue;
            }
            if let Some(p) = self.after_send(send.intent, outcome, read_back, now) {
                outcome_writes.push(p);
            }
        }
        let changes: Vec<&Planned> = outcome_writes.iter().collect();
        self.commit(&changes, report)?;
        Ok(())
    }

    /// Passes until nothing is recorded or submitted, within `timeout_ms` (tokio time).
    pub async fn drain(&self, timeout_ms: u64) -> Result<Vec<Transition>, DrainError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        let mut transitions = Vec::new();
        loop {
            let report = self.pass().await?;
            let progressed = report.sent > 0 || !report.transitions.is_empty();
            transitions.extend(report.transitions);
            let busy = self.log().busy()?;
            // A step whose last predecessor this pass confirmed is released by the next pass
            // (a pass decides from the log as it found it): the drain goes on for it.
            if busy == 0 && !(progressed && self.a_step_can_be_released()?) {
                return Ok(transitions);
            }
            if busy == 0 && tokio::time::Instant::now() >= deadline {
                // Out of time with only released steps left: nothing recorded or submitted
                // holds the drain, and the next one goes on with them.
                return Ok(transitions);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(DrainError::Timeout { busy, timeout_ms, transitions });
            }
            // Straight on while passes make progress; pause only when one changed nothing
            // (waiting for a lease, a backoff or a settle bound to pass).
            if !progressed {
                tokio::time::sleep(Duration::from_millis(self.config.limits.pass_pause_ms)).await;
            }
        }
    }

    fn commit(&self, planned: &[&Planned], report: &mut PassReport) -> Result<Vec<bool>, LogError> {
        if planned.is_empty() {
            return Ok(vec![]);
        }
        let changes: Vec<Change<'_>> = planned
            .iter()
            .map(|p| Change {
                new: &p.new,
                expect_version: p.expect_version,
                from_state: p.from,
                note: Some(&p.note),
            })
            .collect();
        let applied = self.log().update(&changes)?;
        for (p, ok) in planned.iter().zip(&applied) {
            if *ok && p.from != p.new.state {
                report.transitions.push(Transition {
                    intent_id: p.new.id.clone(),
                    from: p.from,
                    to: p.new.state,
                    note: p.note.clone(),
                    at_ms: p.new.updated_ms,
                });
            }
        }
        Ok(applied)
    }
}

/// What phase 1 of a pass decided in memory: the rows to write, the sends to make, and the
/// uncertain intents to look up (with their actions).
#[derive(Default)]
struct Decided {
    writes: Vec<Planned>,
    sends: Vec<Sending>,
    resolves: Vec<(Intent, Action)>,
}

/// The row `new` (leased from `intent`) planned with `note`, over the version and state
/// `intent` was read with.
fn planned(intent: &Intent, new: Intent, note: String) -> Planned {
    Planned { new, expect_version: intent.version, from: intent.state, note }
}

/// `new` escalated, not executed, for `problem`: where nothing says otherwise, it could be a
/// duplicate if an earlier send of it may have gone out.
fn escalate(intent: &Intent, mut new: Intent, problem: String) -> Planned {
    new.state = State::Escalated;
    new.evidence.reason = Some(format!("not executed: {problem}"));
    // Not executed now; an earlier send of it may have been, if it went out.
    if new.evidence.could_duplicate.is_none() {
        new.evidence.could_duplicate =
            Some(intent.maybe_executed || matches!(intent.state, State::Submitted | State::Unknown));
    }
    planned(intent, new, problem)
}
