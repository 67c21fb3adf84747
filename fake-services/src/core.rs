//! The processing pipeline every fake shares.
//!
//! A request goes through fixed points, and faults act at those points:
//!
//! 1. arrival: the engine plans the faults; `refuse` resets, `reject` answers and stops;
//! 2. key: an idempotency key is looked up (`forget_keys`, `ignore_keys`), replayed,
//!    refused as a mismatch or as in flight, or reserved;
//! 3. before commit: `latency.before_ms`;
//! 4. commit: now, late (`commit_after_timeout`, in a task of its own so that it happens
//!    even when the caller has gone), or never (`silent_noop`); reads see a lagged view
//!    (`stale_read`); `error_after_commit` replaces the result, which is what the key saves;
//! 5. after commit: `latency.after_ms`, then the answer is sent, dropped
//!    (`drop_after_commit`) or held and dropped (`timeout_after_commit`).
//!
//! Each service supplies what differs: how fields are read for matching, how its errors look,
//! what a commit does. All state of one service sits behind one mutex that is never held
//! across an await, so a cancelled request can never leave a half-made commit.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rand::SeedableRng;
use rand::distr::{Alphanumeric, SampleString};
use rand_chacha::ChaCha8Rng;
use serde::Deserialize;

use crate::clock::ServiceClock;
use crate::contract::{Contract, ContractPatch, KeyPolicy};
use crate::engine::{AfterCommit, CommitMode, FaultEngine, Plan};
use crate::record::{Journal, JournalEntry, KeyLookup, KeyStore, Ledger};
use crate::rule::{FaultRule, RequestView};
use crate::wire::{Disposition, FakeRequest, FakeResponse};

/// An error as a service reports it; each service renders it in its own wire shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    /// The error family (Stripe's `type`).
    pub kind: &'static str,
    pub code: Option<&'static str>,
    pub message: String,
    pub param: Option<String>,
    /// The pipeline's own words for a bare status (a fault's `reject` or 500), which a
    /// service whose errors read otherwise (S3's codes, geth's messages) replaces with its own
    /// words for that status.
    pub standard: bool,
}

impl ApiError {
    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> Self {
        ApiError { status, kind, code: None, message: message.into(), param: None, standard: false }
    }

    /// What a `reject` fault answers without a body: for a refusal that needs a decision
    /// (400, 401, 403, 422) the words a JSON API in Stripe's style uses for it, otherwise a
    /// generic rejection. Marked [`ApiError::standard`], so that S3 and geth say it their way.
    pub fn rejected(status: u16) -> Self {
        let (kind, message) = match status {
            400 => ("invalid_request_error", "The request was rejected: it is not valid for this endpoint."),
            401 => ("invalid_request_error", "Invalid API Key provided."),
            403 => (
                "invalid_request_error",
                "The provided key does not have the required permissions for this endpoint. Having the write permission on this resource would allow this request to continue.",
            ),
            422 => (
                "invalid_request_error",
                "The request was understood, but its parameters cannot be processed.",
            ),
            _ => ("api_error", "The request was rejected."),
        };
        ApiError { standard: true, ..ApiError::new(status, kind, message) }
    }

    pub fn code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }

    pub fn param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    /// A 400 for a request the service cannot read.
    pub fn invalid(message: impl Into<String>) -> Self {
        ApiError::new(400, "invalid_request_error", message)
    }

    /// The generic error a service answers when it fails inside.
    pub fn internal(status: u16) -> Self {
        let error =
            ApiError::new(status, "api_error", "An unknown error occurred while processing the request.");
        ApiError { standard: true, ..error }
    }
}

/// What differs between services at the shared points.
pub struct Shape {
    /// The service's error body.
    pub error: fn(&ApiError) -> FakeResponse,
    /// Headers every answer carries, such as a request id.
    pub stamp: fn(&mut FakeResponse, &str),
}

/// What one service holds at most (docs/faults.md, "Limits"). Reaching a bound refuses what
/// would go past it, in the service's own error shape; nothing already held is let go, since
/// a ledger effect or journal entry dropped could hide harm from the checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Requests journaled; past it, every request to the service is refused with 503 (and
    /// counted as `refused` in the journal) until a reset.
    pub journal_entries_max: usize,
    /// Effects made by requests; past it, every write is refused with 503 before it commits.
    /// Effects the service makes by itself later (a delivery, a mined block) for writes it
    /// accepted still enter the ledger.
    pub ledger_effects_max: usize,
    /// Idempotency keys held; a new key past it, once keys past retention are forgotten, is
    /// refused with 503 (a key still held is never forgotten early: a retry would then
    /// make a second effect).
    pub keys_max: usize,
    /// Objects seeded over the control API (every item of a seed's lists); past it, a seed is
    /// refused with 400.
    pub seeded_objects_max: usize,
}

/// Effects a service's ledger holds before it refuses writes.
pub const LEDGER_EFFECTS_MAX: usize = 1_000_000;
/// Idempotency keys a service holds before it refuses a new one.
pub const KEYS_MAX: usize = 1_000_000;
/// Objects seeded over the control API before a seed is refused.
pub const SEEDED_OBJECTS_MAX: usize = 100_000;

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            journal_entries_max: crate::record::JOURNAL_ENTRIES_MAX,
            ledger_effects_max: LEDGER_EFFECTS_MAX,
            keys_max: KEYS_MAX,
            seeded_objects_max: SEEDED_OBJECTS_MAX,
        }
    }
}

/// All mutable state of one service.
pub struct Inner<S> {
    pub state: S,
    pub contract: Contract,
    pub engine: FaultEngine,
    pub ledger: Ledger,
    pub journal: Journal,
    pub keys: KeyStore,
    pub rng: ChaCha8Rng,
    pub bounds: Bounds,
    /// Objects seeded over the control API since the last reset.
    pub seeded_objects: usize,
}

impl<S> Inner<S> {
    /// A fresh id such as `re_3kT9...`, drawn from the service's seeded RNG.
    pub fn new_id(&mut self, prefix: &str, len: usize) -> String {
        // One allocation, the same draws as `sample_string`.
        let mut id = String::with_capacity(prefix.len() + len);
        id.push_str(prefix);
        Alphanumeric.append_string(&mut self.rng, &mut id, len);
        id
    }
}

/// One request in progress.
#[derive(Debug)]
pub struct Ctx {
    pub seq: u64,
    pub plan: Plan,
    pub request_id: String,
    pub key: Option<String>,
    pub is_write: bool,
    /// Whether the journal entry has ended, so that the [`Abandon`] guard need not look.
    ended: AtomicBool,
    /// The journal was full: the request has no entry and is refused at once.
    journal_full: bool,
}

impl Clone for Ctx {
    fn clone(&self) -> Self {
        Ctx {
            seq: self.seq,
            plan: self.plan.clone(),
            request_id: self.request_id.clone(),
            key: self.key.clone(),
            is_write: self.is_write,
            ended: AtomicBool::new(self.ended.load(Ordering::Relaxed)),
            journal_full: self.journal_full,
        }
    }
}

/// What the processing produced, before the after-commit point.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub response: FakeResponse,
    pub replayed: bool,
}

impl Outcome {
    pub fn of(response: FakeResponse) -> Self {
        Outcome { response, replayed: false }
    }
}

/// Whether a commit takes effect (`Apply`) or only pretends to (`Pretend`, for
/// `silent_noop`: the answer looks the same, the ledger does not move).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Apply,
    Pretend,
}

/// What a commit needs to know of its request.
#[derive(Debug, Clone)]
pub struct Stamp {
    pub now_ms: u64,
    pub request_id: String,
    pub key: Option<String>,
}

/// A service's commit step.
pub type Commit<S> = Box<dyn FnOnce(&mut Inner<S>, Mode, &Stamp) -> FakeResponse + Send>;

/// What a write needs of the service's state before anything else of it happens (a refund's
/// payment intent must exist): checked under the lock, before the key is looked up, in the
/// same hold. A refusal is answered as it is, and the key keeps nothing.
pub type Check<S> = Box<dyn FnOnce(&Inner<S>) -> Result<(), ApiError> + Send>;

/// The shared core of one fake.
pub struct ServiceCore<S> {
    pub name: &'static str,
    pub clock: ServiceClock,
    shape: Shape,
    default_contract: Contract,
    seed: u64,
    inner: Mutex<Inner<S>>,
    /// Late commits (`commit_after_timeout`) waiting to happen, whether or not their callers
    /// are still there.
    late_commits: std::sync::atomic::AtomicUsize,
    /// What a refused write asked for, for its journal entry (see [`ServiceCore::reading_refusals`]).
    refusals: Option<RefusalReader>,
}

/// Reads what a write request asks for, in the parameter names of the effect it would make
/// (`JournalEntry::params`); `None` for a request that is not one of the service's actions.
pub type RefusalReader = fn(&FakeRequest) -> Option<serde_json::Value>;

/// A stable 64-bit hash of a name (FNV-1a), to give each service its own RNG stream.
fn stream_of(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

impl<S: Default + Send + 'static> ServiceCore<S> {
    pub fn new(name: &'static str, clock: ServiceClock, seed: u64, contract: Contract, shape: Shape) -> Self {
        let inner = Inner {
            state: S::default(),
            contract: contract.clone(),
            engine: FaultEngine::default(),
            ledger: Ledger::default(),
            journal: Journal::default(),
            keys: KeyStore::default(),
            rng: ChaCha8Rng::seed_from_u64(seed ^ stream_of(name)),
            bounds: Bounds::default(),
            seeded_objects: 0,
        };
        ServiceCore {
            name,
            clock,
            shape,
            default_contract: contract,
            seed,
            inner: Mutex::new(inner),
            late_commits: std::sync::atomic::AtomicUsize::new(0),
            refusals: None,
        }
    }

    /// Records, in the journal entry of every write refused with a status that needs a
    /// decision (`vocabulary::needs_decision`), what `read` finds the request asked for: how
    /// a checker tells which intent the service refused, since a refusal leaves no effect. The
    /// request is read only when it is refused (the service hands it to
    /// [`ServiceCore::intercept`] and [`ServiceCore::conclude`]), so writes that go through pay
    /// nothing for it.
    pub fn reading_refusals(mut self, read: RefusalReader) -> Self {
        self.refusals = Some(read);
        self
    }

    /// Arms a rule after checking that its fault can act on this service; returns its id.
    pub fn add_rule(&self, rule: FaultRule) -> Result<String, String> {
        add_rule(self.name, &mut self.lock().engine, rule)
    }

    /// The service's state. The lock is never held across an await.
    pub fn lock(&self) -> MutexGuard<'_, Inner<S>> {
        // A panic while holding the lock is a bug in a fake; the state it left is still the
        // best record of what happened, so keep serving it rather than failing every request.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether nothing is in flight: no request is being worked on and no late commit waits.
    /// What a settled fake's ledger holds can only grow by new requests.
    pub fn settled(&self) -> bool {
        self.late_commits.load(std::sync::atomic::Ordering::SeqCst) == 0 && self.lock().journal.pending() == 0
    }

    /// Forgets everything but the clock: state, rules, ledger, journal, keys, contract.
    /// The bounds survive it.
    pub fn reset(&self) {
        let mut inner = self.lock();
        let bounds = inner.bounds;
        *inner = Inner {
            state: S::default(),
            contract: self.default_contract.clone(),
            engine: FaultEngine::default(),
            ledger: Ledger::default(),
            journal: Journal::with_capacity(bounds.journal_entries_max),
            keys: KeyStore::default(),
            rng: ChaCha8Rng::seed_from_u64(self.seed ^ stream_of(self.name)),
            bounds,
            seeded_objects: 0,
        };
    }

    /// Sets what the service holds at most; takes effect for the next request (a journal
    /// already fuller than its new bound keeps its entries and refuses new requests).
    pub fn set_bounds(&self, bounds: Bounds) {
        let mut inner = self.lock();
        inner.bounds = bounds;
        inner.journal.set_capacity(bounds.journal_entries_max);
    }

    /// The 503 of a bound reached, in the service's shape.
    fn bound_reached(&self, message: String) -> FakeResponse {
        tracing::warn!(target: "twice::request", service = self.name, "{message}");
        self.error(&ApiError::new(503, "api_error", message))
    }

    pub fn error(&self, error: &ApiError) -> FakeResponse {
        (self.shape.error)(error)
    }

    /// An error for a request that never reached the pipeline, with the headers every answer
    /// carries.
    pub fn stamped_error(&self, error: &ApiError) -> FakeResponse {
        let mut response = self.error(error);
        let request_id = self.lock().new_id("req_", 14);
        (self.shape.stamp)(&mut response, &request_id);
        response
    }

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
            (self.shape.stamp)(&mut response, &ctx.request_id);
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
        (self.shape.stamp)(&mut response, &ctx.request_id);
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
        let (key, settle_ms_max) = {
            let mut inner = self.lock();
            let inner = &mut *inner;
            if let Some(Err(refused)) = check.map(|check| check(inner)) {
                return Outcome::of(self.error(&refused));
            }
            // Refused before the key is looked up: the key keeps nothing, and a retry after a
            // reset is a new request.
            if inner.ledger.effects().len() >= inner.bounds.ledger_effects_max {
                let max = inner.bounds.ledger_effects_max;
                return Outcome::of(self.bound_reached(format!(
                    "twice: the {} fake's ledger holds {max} effects, its bound; this write was refused before it committed. Reset the fake (POST /__twice/reset) to go on.",
                    self.name
                )));
            }
            if let Some(older) = plan.forget_keys_older_than_ms {
                inner.keys.forget(now_ms, older);
            }
            let honored = inner.contract.idempotency_keys == KeyPolicy::Honored && !plan.ignore_keys;
            let key = ctx.key.as_deref().filter(|_| honored);
            if let Some(k) = key {
                let retention_ms = inner.contract.key_retention_ms;
                match inner.keys.lookup(k, fingerprint, now_ms, retention_ms, inner.bounds.keys_max) {
                    KeyLookup::New => {}
                    KeyLookup::Full => {
                        let max = inner.bounds.keys_max;
                        return Outcome::of(self.bound_reached(format!(
                            "twice: the {} fake holds {max} idempotency keys within their retention, its bound; this write was refused before it committed. Reset the fake (POST /__twice/reset) to go on.",
                            self.name
                        )));
                    }
                    KeyLookup::Replay(response) => {
                        let response = response.with_header("Idempotent-Replayed", "true");
                        return Outcome { response, replayed: true };
                    }
                    KeyLookup::Mismatch => {
                        return Outcome::of(self.error(
                            &ApiError::new(
                                400,
                                "idempotency_error",
                                format!(
                                    "Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '{k}' if you meant to execute a different request."
                                ),
                            ),
                        ));
                    }
                    KeyLookup::InFlight => {
                        return Outcome::of(self.error(
                            &ApiError::new(
                                409,
                                "invalid_request_error",
                                "There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): please try again later.",
                            )
                            .code("idempotency_key_in_use"),
                        ));
                    }
                }
            }
            if at_once {
                let stamp =
                    Stamp { now_ms, request_id: ctx.request_id.clone(), key: key.map(str::to_string) };
                let mode = if plan.commit == CommitMode::Noop { Mode::Pretend } else { Mode::Apply };
                let response = self.commit_locked(inner, commit, mode, &stamp, error_after);
                self.end_answered_locked(inner, ctx, response.status);
                return Outcome::of(response);
            }
            (key, inner.contract.settle_ms_max)
        };
        let mut reservation = Reservation { core: self, key };
        sleep_ms(plan.before_ms).await;
        let stamp = Stamp { now_ms, request_id: ctx.request_id.clone(), key: key.map(str::to_string) };
        let response = match plan.commit {
            CommitMode::Now | CommitMode::Noop => {
                let mode = if plan.commit == CommitMode::Noop { Mode::Pretend } else { Mode::Apply };
                reservation.key = None;
                self.commit(commit, mode, stamp, error_after)
            }
            CommitMode::Late { delay_ms } => {
                let delay_ms = delay_ms.unwrap_or(settle_ms_max);
                let (tx, rx) = tokio::sync::oneshot::channel();
                let core = Arc::clone(self);
                // The late commit runs on its own task: the caller timing out and closing the
                // connection must not cancel it.
                reservation.key = None;
                self.late_commits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    sleep_ms(delay_ms).await;
                    let stamp = Stamp { now_ms: core.clock.now_ms(), ..stamp };
                    let response = core.commit(commit, Mode::Apply, stamp, error_after);
                    core.late_commits.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    let _ = tx.send(response);
                });
                match rx.await {
                    Ok(response) => response,
                    Err(_) => self.error(&ApiError::internal(500)),
                }
            }
        };
        Outcome::of(response)
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
        (self.shape.stamp)(&mut response, &ctx.request_id);
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

    /// Ends the journal entry of a write answered straight from its commit, in the same hold
    /// of the lock, when nothing can come between the commit and the answer: no wait after
    /// it, an answer rather than a dropped or held connection, and no refused parameters to
    /// read. [`ServiceCore::conclude`] then leaves the entry as it is. Nothing awaits in
    /// between, so a caller that goes away cannot leave the entry saying "answered" wrongly.
    fn end_answered_locked(&self, inner: &mut Inner<S>, ctx: &Ctx, status: u16) {
        let plan = &ctx.plan;
        let answered = matches!(plan.after_commit, AfterCommit::Respond | AfterCommit::Error { .. });
        let reads_refusal = self.refusals.is_some() && vocabulary::needs_decision(status);
        if plan.after_ms > 0 || !answered || reads_refusal {
            return;
        }
        let ended = inner.journal.end(ctx.seq, self.clock.now_ms(), "answered", Some(status), false, None);
        log_request(self.name, ended);
        ctx.ended.store(true, Ordering::Relaxed);
    }

    fn end(&self, ctx: &Ctx, req: &FakeRequest, outcome: &'static str, status: Option<u16>, replayed: bool) {
        if ctx.ended.load(Ordering::Relaxed) {
            return;
        }
        let now_ms = self.clock.now_ms();
        // Read outside the lock: decoding a body (a signed transaction) takes a while. Only
        // writes are read: a refused read asked for no effect.
        let params = match (status, self.refusals) {
            (Some(status), Some(read)) if ctx.is_write && vocabulary::needs_decision(status) => read(req),
            _ => None,
        };
        log_request(self.name, self.lock().journal.end(ctx.seq, now_ms, outcome, status, replayed, params));
        ctx.ended.store(true, Ordering::Relaxed);
    }

    /// The control API under `/__twice/`; `seed` handles the service's own `POST /__twice/seed`.
    pub fn control(
        &self,
        req: &FakeRequest,
        seed: impl FnOnce(&mut Inner<S>, &[u8]) -> Result<serde_json::Value, String>,
    ) -> FakeResponse {
        let response = self.answer_control(req, seed);
        tracing::debug!(
            target: "twice::request",
            service = self.name, method = %req.method, path = %req.path, status = response.status,
            "control request"
        );
        response
    }

    fn answer_control(
        &self,
        req: &FakeRequest,
        seed: impl FnOnce(&mut Inner<S>, &[u8]) -> Result<serde_json::Value, String>,
    ) -> FakeResponse {
        use serde_json::json;
        let route = req.path.trim_start_matches("/__twice").trim_end_matches('/');
        let method = req.method.as_str();
        let bad = |message: String| FakeResponse::json(400, &json!({"error": {"message": message}}));
        let Some((control, id)) = control_route(method, route) else {
            // A path the API has, asked with another method: 405 and the methods it takes
            // (RFC 9110 §15.5.6), not "no such route".
            let allowed = control_methods(route);
            if !allowed.is_empty() {
                let allow = allowed.join(", ");
                return FakeResponse::json(
                    405,
                    &json!({"error": {"message": format!("{method} {} is not allowed; it takes {allow}", req.path)}}),
                )
                .with_header("allow", &allow);
            }
            return FakeResponse::json(
                404,
                &json!({"error": {"message": format!("no control route {method} {}; see docs/faults.md", req.path)}}),
            );
        };
        // serde reads a struct from a JSON array too (`[5]` as `{"by_ms": 5}`, `[]` as an
        // empty seed or patch): these bodies are objects, and anything else is refused.
        if matches!(control, Control::JumpClock | Control::PatchContract | Control::Seed)
            && let Err(e) = object_body(&req.body)
        {
            return bad(e);
        }
        match control {
            Control::Health => FakeResponse::json(200, &json!({"service": self.name, "ok": true})),
            Control::Rules => FakeResponse::json(200, &json!({"rules": self.lock().engine.rules()})),
            Control::AddRules => {
                let rules: Vec<FaultRule> = match parse_one_or_many(&req.body) {
                    Ok(rules) => rules,
                    Err(e) => return bad(format!("invalid rule: {e}")),
                };
                let mut inner = self.lock();
                let mut ids = Vec::new();
                for rule in rules {
                    match add_rule(self.name, &mut inner.engine, rule) {
                        Ok(id) => ids.push(id),
                        Err(e) => {
                            return bad(format!("invalid rule: {e} (rules before it were armed: {ids:?})"));
                        }
                    }
                }
                FakeResponse::json(201, &json!({"ids": ids}))
            }
            Control::ClearRules => {
                self.lock().engine.clear();
                FakeResponse::json(200, &json!({"cleared": true}))
            }
            Control::RemoveRule => {
                if self.lock().engine.remove(id) {
                    FakeResponse::json(200, &json!({"removed": id}))
                } else {
                    FakeResponse::json(404, &json!({"error": {"message": format!("no rule \"{id}\"")}}))
                }
            }
            Control::Clock => FakeResponse::json(
                200,
                &json!({"now_ms": self.clock.now_ms(), "jumped_ms": self.clock.jumped_ms()}),
            ),
            Control::JumpClock => {
                #[derive(Deserialize)]
                #[serde(deny_unknown_fields)]
                struct Jump {
                    by_ms: u64,
                }
                match serde_json::from_slice::<Jump>(&req.body) {
                    Ok(jump) => {
                        self.clock.jump_ms(jump.by_ms);
                        FakeResponse::json(
                            200,
                            &json!({"now_ms": self.clock.now_ms(), "jumped_ms": self.clock.jumped_ms()}),
                        )
                    }
                    Err(e) => bad(format!("expected {{\"by_ms\": N}}: {e}")),
                }
            }
            Control::Contract => FakeResponse::json(200, &json!(self.lock().contract)),
            Control::PatchContract => match serde_json::from_slice::<ContractPatch>(&req.body) {
                Ok(patch) => {
                    let mut inner = self.lock();
                    inner.contract.apply(patch);
                    FakeResponse::json(200, &json!(inner.contract))
                }
                Err(e) => bad(format!("invalid contract: {e}")),
            },
            Control::Reset => {
                self.reset();
                FakeResponse::json(200, &json!({"reset": true}))
            }
            Control::Seed => {
                let count = seed_items(&req.body);
                let mut inner = self.lock();
                let max = inner.bounds.seeded_objects_max;
                if inner.seeded_objects.saturating_add(count) > max {
                    return bad(format!(
                        "this seed has {count} objects and {} already holds {} seeded ones; at most {max} are held: reset first",
                        self.name, inner.seeded_objects
                    ));
                }
                match seed(&mut inner, &req.body) {
                    Ok(seeded) => {
                        inner.seeded_objects += count;
                        FakeResponse::json(201, &seeded)
                    }
                    Err(e) => bad(e),
                }
            }
            Control::Ledger => {
                let inner = self.lock();
                FakeResponse::json(200, &json!({"service": self.name, "effects": inner.ledger.effects()}))
            }
            Control::Journal => {
                let inner = self.lock();
                let entries: Vec<_> = inner.journal.entries().collect();
                FakeResponse::json(
                    200,
                    &json!({
                        "service": self.name,
                        "entries": entries,
                        "capacity": inner.journal.capacity(),
                        "refused": inner.journal.refused(),
                    }),
                )
            }
        }
    }
}

/// How many objects a seed body asks for: the items of its top-level lists (a body that is not
/// a JSON object counts none; the seed itself refuses it).
fn seed_items(body: &[u8]) -> usize {
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Object(fields)) => {
            fields.values().filter_map(serde_json::Value::as_array).map(Vec::len).sum()
        }
        _ => 0,
    }
}

/// What a control request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Health,
    Rules,
    AddRules,
    ClearRules,
    RemoveRule,
    Clock,
    JumpClock,
    Contract,
    PatchContract,
    Reset,
    Seed,
    Ledger,
    Journal,
}

/// Every route of a fake's control API: method, path (`{id}` is a rule's id) and what it asks
/// for. The router reads this table and nothing else, so `docs/openapi/fakes.json`, which a
/// test compares with it, lists exactly what is served.
pub const CONTROL_ROUTES: &[(&str, &str, Control)] = &[
    ("GET", "/__twice", Control::Health),
    ("GET", "/__twice/health", Control::Health),
    ("GET", "/__twice/rules", Control::Rules),
    ("POST", "/__twice/rules", Control::AddRules),
    ("DELETE", "/__twice/rules", Control::ClearRules),
    ("DELETE", "/__twice/rules/{id}", Control::RemoveRule),
    ("GET", "/__twice/clock", Control::Clock),
    ("POST", "/__twice/clock/jump", Control::JumpClock),
    ("GET", "/__twice/contract", Control::Contract),
    ("PATCH", "/__twice/contract", Control::PatchContract),
    ("POST", "/__twice/contract", Control::PatchContract),
    ("POST", "/__twice/reset", Control::Reset),
    ("POST", "/__twice/seed", Control::Seed),
    ("GET", "/__twice/ledger", Control::Ledger),
    ("GET", "/__twice/journal", Control::Journal),
];

/// The control route `method` and `path` (under `/__twice`, without it) ask for, with the
/// rule id where the path has one.
pub fn control_route<'p>(method: &str, path: &'p str) -> Option<(Control, &'p str)> {
    CONTROL_ROUTES.iter().find_map(|(m, pattern, control)| {
        if *m == method { Some((*control, route_id(pattern, path)?)) } else { None }
    })
}

/// The methods the control API takes on `path` (under `/__twice`, without it), in the order
/// of [`CONTROL_ROUTES`]; empty for a path it does not have.
pub fn control_methods(path: &str) -> Vec<&'static str> {
    CONTROL_ROUTES
        .iter()
        .filter(|(_, pattern, _)| route_id(pattern, path).is_some())
        .map(|(m, _, _)| *m)
        .collect()
}

/// Whether `path` is `pattern` (a [`CONTROL_ROUTES`] path) with `/__twice` taken off: the
/// rule id where the pattern has one, `""` where it has none.
fn route_id<'p>(pattern: &str, path: &'p str) -> Option<&'p str> {
    let pattern = pattern.trim_start_matches("/__twice");
    match pattern.split_once("{id}") {
        None => (pattern == path).then_some(""),
        Some((before, after)) => {
            let id = path.strip_prefix(before)?.strip_suffix(after)?;
            (!id.is_empty() && !id.contains('/')).then_some(id)
        }
    }
}

/// A body that must be a JSON object: its first byte past white space is `{` (serde says
/// what is wrong with the rest).
fn object_body(body: &[u8]) -> Result<(), String> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        _ => Err("expected a JSON object".to_string()),
    }
}

/// Arms `rule` on `service`'s engine, refusing a fault that cannot act there (a late delivery
/// on a service that delivers nothing): armed, it would never fire, and a test relying on it
/// would pass for the wrong reason.
fn add_rule(service: &str, engine: &mut FaultEngine, rule: FaultRule) -> Result<String, String> {
    rule.fault.check_service(service)?;
    engine.add(rule)
}

fn parse_one_or_many(body: &[u8]) -> Result<Vec<FaultRule>, String> {
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    match value {
        serde_json::Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| serde_json::from_value(v).map_err(|e| format!("rule {i}: {e}")))
            .collect(),
        one => serde_json::from_value(one).map(|r| vec![r]).map_err(|e| e.to_string()),
    }
}

/// Closes a request's journal entry as `abandoned` if the request's future is dropped before
/// it ended (hyper drops it when the caller disconnects mid-request).
pub struct Abandon<'a, S: Default + Send + 'static> {
    core: &'a ServiceCore<S>,
    ctx: &'a Ctx,
}

impl<S: Default + Send + 'static> Drop for Abandon<'_, S> {
    fn drop(&mut self) {
        // A request that ended normally (nearly all) costs neither the clock nor the lock.
        if self.ctx.ended.load(Ordering::Relaxed) {
            return;
        }
        let now_ms = self.core.clock.now_ms();
        log_request(self.core.name, self.core.lock().journal.abandon(self.ctx.seq, now_ms));
    }
}

/// The `twice::request` line (debug) of a request whose journal entry just ended: the one spot
/// every request to a fake passes, over loopback HTTP and in the sim's in-process transport
/// alike. Its duration is on the service's clock (virtual in sim). Control requests have no
/// journal entry and their own line ([`ServiceCore::control`]).
fn log_request(service: &'static str, entry: Option<&JournalEntry>) {
    let Some(e) = entry else { return };
    // The macro tests its level before it reads a field, so a run without debug logs pays
    // for this call and one comparison.
    let duration_ms = e.ended_ms.unwrap_or(e.at_ms).saturating_sub(e.at_ms);
    let origin = e.origin.as_deref().unwrap_or("-");
    match e.status {
        Some(status) => tracing::debug!(
            target: "twice::request",
            service, method = %e.method, path = %e.path, status, outcome = %e.outcome,
            request_id = %e.request_id, duration_ms, origin, faults = e.faults.len(),
            "request"
        ),
        // Reset before an answer, or abandoned by its caller: no status was sent.
        None => tracing::debug!(
            target: "twice::request",
            service, method = %e.method, path = %e.path, outcome = %e.outcome,
            request_id = %e.request_id, duration_ms, origin, faults = e.faults.len(),
            "request"
        ),
    }
}

impl<S: Default + Send + 'static> ServiceCore<S> {
    /// A guard that marks the request abandoned unless it ends normally first.
    pub fn watch<'a>(&'a self, ctx: &'a Ctx) -> Abandon<'a, S> {
        Abandon { core: self, ctx }
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
