//! The shared core of one fake, [`ServiceCore`]: its construction, its one lock, its reset and
//! bounds, and its error rendering. The points a request goes through are in `pipeline.rs`.

use std::sync::{Mutex, MutexGuard};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::bounds::Bounds;
use super::error::{ApiError, Shape, retry_after};
use super::pending::{self, LateCommits, Pending, PendingKind};
use super::state::Inner;
use crate::clock::ServiceClock;
use crate::fault_engine::FaultEngine;
use crate::record::{Journal, KeyStore, Ledger};
use crate::wire::{FakeRequest, FakeResponse};
use vocabulary::contract::Contract;

/// The shared core of one fake.
pub struct ServiceCore<S> {
    pub name: &'static str,
    pub clock: ServiceClock,
    pub(super) shape: Shape,
    pub(super) default_contract: Contract,
    pub(super) seed: u64,
    pub(super) inner: Mutex<Inner<S>>,
    /// Late commits (`commit_after_timeout`) waiting to happen, whether or not their callers
    /// are still there.
    pub(super) late_commits: Mutex<LateCommits>,
    /// What a refused write asked for, for its journal entry (see [`ServiceCore::reading_refusals`]).
    pub(super) refusals: Option<RefusalReader>,
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
            late_commits: Mutex::new(LateCommits::default()),
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

    /// The service's state. The lock is never held across an await.
    pub fn lock(&self) -> MutexGuard<'_, Inner<S>> {
        // A panic while holding the lock is a bug in a fake; the state it left is still the
        // best record of what happened, so keep serving it rather than failing every request.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether nothing is in flight: no request is being worked on and no late commit waits.
    /// What a settled fake's ledger holds can only grow by new requests.
    pub fn settled(&self) -> bool {
        pending::lock(&self.late_commits).is_empty() && self.lock().journal.pending() == 0
    }

    /// What [`ServiceCore::settled`] waits for, named: each request still being worked on
    /// (oldest first), then each late commit (in the order they were scheduled).
    pub fn pending(&self) -> Vec<Pending> {
        let mut out = Vec::new();
        {
            let inner = self.lock();
            let count = inner.journal.pending();
            if count > 0 {
                // Pending entries are the newest as a rule: look from the end, and stop once
                // every one is found.
                let mut found: Vec<Pending> = inner
                    .journal
                    .entries()
                    .rev()
                    .filter(|e| e.outcome == crate::record::PENDING)
                    .take(count)
                    .map(|e| Pending {
                        service: self.name,
                        kind: PendingKind::Request,
                        request: Some(format!("{} {}", e.method, e.path)),
                        request_id: Some(e.request_id.clone()),
                        due_ms: None,
                        detail: "still being worked on".into(),
                    })
                    .collect();
                found.reverse();
                out.extend(found);
            }
        }
        for late in pending::lock(&self.late_commits).iter() {
            out.push(Pending {
                service: self.name,
                kind: PendingKind::LateCommit,
                request: Some(late.request.clone()),
                request_id: Some(late.request_id.clone()),
                due_ms: Some(late.due_ms),
                detail: "commits late (commit_after_timeout), its caller answered or gone".into(),
            });
        }
        out
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
    pub(super) fn bound_reached(&self, message: String) -> FakeResponse {
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
        self.stamp(&mut response, &request_id);
        response
    }

    /// The headers every answer carries: the service's own ([`Shape::stamp`]), and
    /// `Retry-After` on a 429. Every answer of a service's API (its errors, its successes, a
    /// replay, the body a fault gives) passes through here, so no 429 can leave without it.
    pub(super) fn stamp(&self, response: &mut FakeResponse, request_id: &str) {
        (self.shape.stamp)(response, request_id);
        retry_after(response);
    }
}
