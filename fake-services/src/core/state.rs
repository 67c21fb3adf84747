//! What the pipeline works on: all mutable state of one service ([`Inner`], behind the
//! service's one lock), one request in progress ([`Ctx`]) and what it produced ([`Outcome`]),
//! and the shapes of the step a service plugs into the pipeline for a write ([`Commit`],
//! [`Check`], with the [`Mode`] and [`Stamp`] they are given).

use std::sync::atomic::{AtomicBool, Ordering};

use rand::distr::{Alphanumeric, SampleString};
use rand_chacha::ChaCha8Rng;

use super::bounds::Bounds;
use super::error::ApiError;
use crate::fault_engine::{FaultEngine, Plan};
use crate::record::{Journal, KeyStore, Ledger};
use crate::wire::FakeResponse;
use vocabulary::contract::Contract;

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
    /// Whether the journal entry has ended, so that the [`Abandon`](super::Abandon) guard need
    /// not look.
    pub(super) ended: AtomicBool,
    /// The journal was full: the request has no entry and is refused at once.
    pub(super) journal_full: bool,
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
    /// What the request's webhook faults ask of the events it makes (payments only).
    pub webhook: crate::fault_engine::WebhookPlan,
}

/// A service's commit step.
pub type Commit<S> = Box<dyn FnOnce(&mut Inner<S>, Mode, &Stamp) -> FakeResponse + Send>;

/// What a write needs of the service's state before anything else of it happens (a refund's
/// payment intent must exist): checked under the lock, before the key is looked up, in the
/// same hold. A refusal is answered as it is, and the key keeps nothing.
pub type Check<S> = Box<dyn FnOnce(&Inner<S>) -> Result<(), ApiError> + Send>;
