//! The points of the pipeline, one method of [`ServiceCore`] each: arrival (`begin`,
//! `intercept`), key and commit for a write (`write`, `write_checked`), the view of a read
//! (`read`), and what reaches the caller (`conclude`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use super::error::ApiError;
use super::pending::{self, LateCommit};
use super::service::ServiceCore;
use super::state::{Check, Commit, Ctx, Inner, Mode, Outcome, Stamp};
use crate::fault_engine::{AfterCommit, CommitMode, Plan};
use crate::record::KeyLookup;
use crate::wire::{Disposition, FakeRequest, FakeResponse};
use vocabulary::JournalEntry;
use vocabulary::contract::KeyPolicy;
use vocabulary::rule::RequestView;

impl<S: Default + Send + 'static> ServiceCore<S> {
    /// Point 1: plans the faults and opens the journal entry.
    /// `fields` reads the request's fields for rules that match on them; it is called only
    /// when an armed rule does, since decoding a body costs more than the rest of a plan.
    pub fn begin(
        &self,
        req: &FakeRequest,
        fields: impl FnOnce(&FakeRequest) -> BTreeMap<String, String>,
        is_write: bool,
    ) -> Ctx {
        let key = req.header_str("idempotency-key").map(str::to_string);
        let now_ms = self.clock.now_ms();
        // The journal entry's copies are made before taking the lock, which every request of
        // the service waits for.
        let mut entry = JournalEntry {
            seq: 0,
            at_ms: now_ms,
            method: req.method.clone(),
            path: req.path.clone(),
            idempotency_key: key.clone(),
            request_id: String::new(),
            origin: req.origin.clone(),
            faults: Vec::new(),
            outcome: crate::record::pending_outcome(),
            status: None,
            replayed: false,
            ended_ms: None,
            params: None,
        };
        let mut inner = self.lock();
        let inner = &mut *inner;
        if inner.journal.is_full() {
            // Refused before any rule counts it: the journal keeps every request it answered,
            // so that what the checker reads of it (refusals, senders) stays whole.
            inner.journal.refuse();
            let request_id = inner.new_id("req_", 14);
            return Ctx {
                seq: 0,
                plan: Plan::default(),
                request_id,
                key,
                is_write,
                ended: AtomicBool::new(true),
                journal_full: true,
            };
        }
        let fields = if inner.engine.matches_fields() { fields(req) } else { BTreeMap::new() };
        let view = RequestView { method: &req.method, path: &req.path, fields: &fields };
        let plan = inner.engine.plan(&view, &mut inner.rng);
        let request_id = inner.new_id("req_", 14);
        // One line per fault fired (docs/logs.md, `twice::fault` at info); nothing is
        // formatted unless a subscriber wants it.
        for (applied, point) in plan.applied.iter().zip(&plan.points) {
            tracing::info!(
                target: "twice::fault",
                service = self.name,
                rule = %applied.rule,
                fault = %applied.fault,
                point = *point,
                request_id = %request_id,
                method = %req.method,
                path = %req.path,
                origin = req.origin.as_deref().unwrap_or("-"),
                "fault fired"
            );
        }
        entry.request_id.clone_from(&request_id);
        entry.faults.clone_from(&plan.applied);
        let seq = inner.journal.begin(entry);
        Ctx { seq, plan, request_id, key, is_write, ended: AtomicBool::new(false), journal_full: false }
    }

    /// Point 1, continued: what `refuse` and `reject` make of the request, if they fired.
    /// `req` is the request `ctx` began with, read only if it is refused (see
    /// [`ServiceCore::reading_refusals`]).
    pub fn intercept(&self, ctx: &Ctx, req: &FakeRequest) -> Option<Disposition> {
        if ctx.journal_full {
            let capacity = self.lock().journal.capacity();
            let mut response = self.bound_reached(format!(
                "twice: the {} fake's journal holds {capacity} requests, its bound; this request was refused unseen. Reset the fake (POST /__twice/reset) to go on.",
                self.name
            ));
            self.stamp(&mut response, &ctx.request_id);
            return Some(Disposition::Respond(response));
        }
        if ctx.plan.refuse {
            self.end(ctx, req, "reset", None, false);
            return Some(Disposition::Reset);
        }
        let (status, body) = ctx.plan.reject.clone()?;
        let mut response = match body {
            Some(body) => FakeResponse::json(status, &body),
            None => self.error(&ApiError::rejected(status)),
        };
        self.stamp(&mut response, &ctx.request_id);
        self.end(ctx, req, "answered", Some(status), false);
        Some(Disposition::Respond(response))
    }

    /// Points 2 to 4 for a write: keys, latency, commit.
    pub async fn write(self: &Arc<Self>, ctx: &Ctx, fingerprint: String, commit: Commit<S>) -> Outcome {
        self.write_checked(ctx, fingerprint, None, commit).await
    }

    /// [`ServiceCore::write`], with `check` run first under the lock that looks up the key
    /// (one hold for the check, the key and, with nothing to wait for between them, the
    /// commit).
    pub async fn write_checked(
        self: &Arc<Self>,
        ctx: &Ctx,
        fingerprint: String,
        check: Option<Check<S>>,
        commit: Commit<S>,
    ) -> Outcome {
        let plan = &ctx.plan;
        let now_ms = self.clock.now_ms();
        let error_after = match plan.after_commit {
            AfterCommit::Error { status } => Some(status),
            _ => None,
        };
        // Nothing to wait for between the key and the commit: both happen under one hold of
        // the lock, as they would under two with nothing in between.
        let at_once = plan.before_ms == 0 && matches!(plan.commit, CommitMode::Now | CommitMode::Noop);
        let (key, settle_ms_max, late_request) = {
            let mut inner = self.lock();
            let inner = &mut *inner;
            if let Some(Err(refused)) = check.map(|check| check(inner)) {
                return Outcome::of(self.error(&refused));
            }
            let key = match self.admit_key(inner, ctx, fingerprint, now_ms) {
                Admission::Holds(key) => key,
                Admission::Answered(outcome) => return outcome,
            };
            if at_once {
                let stamp = Stamp {
                    now_ms,
                    request_id: ctx.request_id.clone(),
                    key: key.map(str::to_string),
                    webhook: plan.webhook,
                };
                let mode = if plan.commit == CommitMode::Noop { Mode::Pretend } else { Mode::Apply };
                let response = self.commit_locked(inner, commit, mode, &stamp, error_after);
                self.end_answered_locked(inner, ctx, response.status);
                return Outcome::of(response);
            }
            (key, inner.contract.settle_ms_max, late_request(inner, ctx))
        };
        let mut reservation = Reservation { core: self, key };
        sleep_ms(plan.before_ms).await;
        let stamp = Stamp {
            now_ms,
            request_id: ctx.request_id.clone(),
            key: key.map(str::to_string),
            webhook: plan.webhook,
        };
        let response = match plan.commit {
            CommitMode::Now | CommitMode::Noop => {
                let mode = if plan.commit == CommitMode::Noop { Mode::Pretend } else { Mode::Apply };
                reservation.key = None;
                self.commit(commit, mode, stamp, error_after)
            }
            CommitMode::Late { delay_ms } => {
                let delay_ms = delay_ms.unwrap_or(settle_ms_max);
                reservation.key = None;
                self.commit_late(ctx, commit, stamp, delay_ms, late_request, error_after).await
            }
        };
        Outcome::of(response)
    }

    /// Point 2 under the lock: a write refused at the ledger's bound (before the key is
    /// looked up: the key keeps nothing, and a retry after a reset is a new request), keys
    /// forgotten as the plan says, and the request's key looked up where keys are honoured.
    fn admit_key<'c>(
        &self,
        inner: &mut Inner<S>,
        ctx: &'c Ctx,
        fingerprint: String,
        now_ms: u64,
    ) -> Admission<'c> {
        let plan = &ctx.plan;
        if inner.ledger.effects().len() >= inner.bounds.ledger_effects_max {
            let max = inner.bounds.ledger_effects_max;
            return Admission::Answered(Outcome::of(self.bound_reached(format!(
                "twice: the {} fake's ledger holds {max} effects, its bound; this write was refused before it committed. Reset the fake (POST /__twice/reset) to go on.",
                self.name
            ))));
        }
        if let Some(older) = plan.forget_keys_older_than_ms {
            inner.keys.forget(now_ms, older);
        }
        let honored = inner.contract.idempotency_keys == KeyPolicy::Honored && !plan.ignore_keys;
        let key = ctx.key.as_deref().filter(|_| honored);
        let Some(k) = key else { return Admission::Holds(None) };
        let retention_ms = inner.contract.key_retention_ms;
        let answer = match inner.keys.lookup(k, fingerprint, now_ms, retention_ms, inner.bounds.keys_max) {
            KeyLookup::New => return Admission::Holds(key),
            KeyLookup::Full => {
                let max = inner.bounds.keys_max;
                self.bound_reached(format!(
                    "twice: the {} fake holds {max} idempotency keys within their retention, its bound; this write was refused before it committed. Reset the fake (POST /__twice/reset) to go on.",
                    self.name
                ))
            }
            KeyLookup::Replay(response) => {
                let response = response.with_header("Idempotent-Replayed", "true");
                return Admission::Answered(Outcome { response, replayed: true });
            }
            KeyLookup::Mismatch => self.error(&ApiError::new(
                400,
                "idempotency_error",
                format!(
                    "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '{k}' if you meant to execute a different request."
                ),
            )),
            KeyLookup::InFlight => self.error(
                &ApiError::new(
                    409,
                    "invalid_request_error",
                    "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): please try again later.",
                )
                .code("idempotency_key_in_use"),
            ),
        };
        Admission::Answered(Outcome::of(answer))
    }

    /// Point 4 for a late commit: on a task of its own, `delay_ms` from now (the caller
    /// timing out and closing the connection must not cancel it), named in `pending` by
    /// `late_request` until it is done; its answer, once it is.
    async fn commit_late(
        self: &Arc<Self>,
        ctx: &Ctx,
        commit: Commit<S>,
        stamp: Stamp,
        delay_ms: u64,
        late_request: Option<String>,
        error_after: Option<u16>,
    ) -> FakeResponse {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let core = Arc::clone(self);
        let number = pending::lock(&self.late_commits).add(LateCommit {
            request: late_request.unwrap_or_else(|| "a write".into()),
            request_id: ctx.request_id.clone(),
            due_ms: self.clock.now_ms().saturating_add(delay_ms),
        });
        tokio::spawn(async move {
            sleep_ms(delay_ms).await;
            let stamp = Stamp { now_ms: core.clock.now_ms(), ..stamp };
            let response = core.commit(commit, Mode::Apply, stamp, error_after);
            pending::lock(&core.late_commits).done(number);
            let _ = tx.send(response);
        });
        match rx.await {
            Ok(response) => response,
            Err(_) => self.error(&ApiError::internal(500)),
        }
    }

    fn commit(&self, commit: Commit<S>, mode: Mode, stamp: Stamp, error_after: Option<u16>) -> FakeResponse {
        self.commit_locked(&mut self.lock(), commit, mode, &stamp, error_after)
    }

    /// Point 4 under the lock: the commit, `error_after_commit`, and the answer the key keeps.
    fn commit_locked(
        &self,
        inner: &mut Inner<S>,
        commit: Commit<S>,
        mode: Mode,
        stamp: &Stamp,
        error_after: Option<u16>,
    ) -> FakeResponse {
        let mut response = commit(inner, mode, stamp);
        if let Some(status) = error_after {
            response = self.error(&ApiError::internal(status));
        }
        if let Some(k) = &stamp.key {
            inner.keys.complete(k, response.clone());
        }
        response
    }

    /// Points 3 and 4 for a read: latency, then `read` with the newest service time whose
    /// writes it may see (earlier than now under `stale_read`).
    pub async fn read(&self, ctx: &Ctx, read: impl FnOnce(&mut Inner<S>, u64) -> FakeResponse) -> Outcome {
        sleep_ms(ctx.plan.before_ms).await;
        let now_ms = self.clock.now_ms();
        let visible_until_ms = now_ms.saturating_sub(ctx.plan.stale_lag_ms.unwrap_or(0));
        let mut inner = self.lock();
        Outcome::of(read(&mut inner, visible_until_ms))
    }

    /// Point 5: what reaches the caller, and the end of the journal entry. `req` is the
    /// request `ctx` began with, as for [`ServiceCore::intercept`].
    pub async fn conclude(&self, ctx: &Ctx, req: &FakeRequest, outcome: Outcome) -> Disposition {
        let Outcome { mut response, replayed } = outcome;
        if let (AfterCommit::Error { status }, false) = (ctx.plan.after_commit, ctx.is_write) {
            response = self.error(&ApiError::internal(status));
        }
        if ctx.is_write
            && let Some(k) = &ctx.key
        {
            response = response.with_header("Idempotency-Key", k);
        }
        self.stamp(&mut response, &ctx.request_id);
        sleep_ms(ctx.plan.after_ms).await;
        match ctx.plan.after_commit {
            AfterCommit::Drop => {
                self.end(ctx, req, "closed", Some(response.status), replayed);
                Disposition::Close
            }
            AfterCommit::Hold { hold_ms } => {
                // Journal first: a caller that gives up cancels this future mid-sleep.
                self.end(ctx, req, "held", Some(response.status), replayed);
                sleep_ms(hold_ms).await;
                Disposition::Close
            }
            AfterCommit::Respond | AfterCommit::Error { .. } => {
                self.end(ctx, req, "answered", Some(response.status), replayed);
                Disposition::Respond(response)
            }
        }
    }
}

/// What looking up a write's key leads to: the write goes on, holding the key (`None` where
/// keys are not honoured), or it is answered now (a replay, a mismatch, a key in flight, a
/// bound reached).
enum Admission<'c> {
    Holds(Option<&'c str>),
    Answered(Outcome),
}

/// The request a late commit is named by in `pending` (`METHOD path`), which only the journal
/// still holds once the caller has gone; read under the lock already held. `None` for a commit
/// that is not late.
fn late_request<S>(inner: &Inner<S>, ctx: &Ctx) -> Option<String> {
    match ctx.plan.commit {
        CommitMode::Late { .. } => inner
            .journal
            .entries()
            .rev()
            .find(|e| e.seq == ctx.seq)
            .map(|e| format!("{} {}", e.method, e.path)),
        CommitMode::Now | CommitMode::Noop => None,
    }
}

/// Releases a key reservation if the request is cancelled before its commit.
struct Reservation<'a, S: Default + Send + 'static> {
    core: &'a ServiceCore<S>,
    key: Option<&'a str>,
}

impl<S: Default + Send + 'static> Drop for Reservation<'_, S> {
    fn drop(&mut self) {
        if let Some(key) = &self.key {
            self.core.lock().keys.release(key);
        }
    }
}

async fn sleep_ms(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ServiceClock;
    use crate::core::{Bounds, Shape};
    use vocabulary::ManualClock;
    use vocabulary::contract::Contract;

    fn core() -> ServiceCore<()> {
        let clock = ServiceClock::new(Arc::new(ManualClock::new(0)));
        let shape = Shape {
            error: |e| FakeResponse::json(e.status, &serde_json::json!({"message": e.message})),
            stamp: |_, _| {},
        };
        ServiceCore::new("payments", clock, 1, Contract::payments_default(), shape)
    }

    /// Once its journal is full, a service refuses each new request at arrival (503, and no
    /// entry), so the journal stays at its bound; a bound lowered below what it holds lets no
    /// entry go and refuses from then on.
    #[test]
    fn a_full_journal_refuses_at_arrival_and_stays_at_its_bound() {
        let core = core();
        core.set_bounds(Bounds { journal_entries_max: 3, ..Bounds::default() });
        let req = FakeRequest::new("GET", "/v1/refunds");
        // Whether the request was refused at arrival, for a full journal.
        let arrive = || {
            let ctx = core.begin(&req, |_| BTreeMap::new(), false);
            match core.intercept(&ctx, &req) {
                Some(Disposition::Respond(response)) => response.status == 503 && ctx.journal_full,
                None => false,
                other => panic!("an unfaulted request was {other:?}"),
            }
        };
        let refused: Vec<bool> = (0..6).map(|_| arrive()).collect();
        assert_eq!(refused, [false, false, false, true, true, true]);
        assert_eq!(core.lock().journal.entries().count(), 3, "at its bound, never past it");
        core.set_bounds(Bounds { journal_entries_max: 1, ..Bounds::default() });
        assert!(arrive(), "refused under the lowered bound");
        let inner = core.lock();
        assert_eq!((inner.journal.entries().count(), inner.journal.refused()), (3, 4), "none let go");
    }
}
