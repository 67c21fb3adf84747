//! The executor: propose intents, then drive them through passes until each is resolved.
//!
//! A pass reads the unresolved intents and works in phases, so that many intents share one
//! commit:
//!
//! 1. decide, in memory, what each intent needs: a send (recorded), a lookup (submitted by a
//!    worker that died, or unknown), a lineage decision (blocked), or an escalation (a
//!    payload that no longer matches its hash);
//! 2. run the lookups, and decide from each whether the effect is confirmed, certainly
//!    absent (so a new attempt is safe), or not yet knowable; then read what a first send
//!    must record before it leaves: a put's precondition (what the object is now), a
//!    transfer's signed bytes (with a nonce no other intent of the log holds);
//! 3. commit every decision and mark every intent about to be sent `submitted` (with its
//!    lease and key) in one transaction: nothing leaves the process before this commit;
//! 4. send, concurrently;
//! 5. commit every outcome in one transaction.
//!
//! Every write is conditional on the row's version, and a worker writes only while its lease
//! has not expired on its own clock, so a paused or partitioned worker cannot overwrite the
//! decision of the worker that took its intents over.
//!
//! Where each part lives: `pass` (the phases above, and `drain`), `planned` (the writes and
//! sends a pass plans, the shapes the others decide in), `lease` (leases and fencing),
//! `lineage` (replacements), `reconcile` (phase 2's decisions), `prepare` (what a first send
//! records before it leaves) and `send` (an attempt and what its answer means).

mod lease;
mod lineage;
mod pass;
mod planned;
mod prepare;
mod reconcile;
mod send;
mod webhooks;
mod workflow;

#[cfg(test)]
mod batch_tests;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;

use crate::log::{Durability, IntentLog, LogError, Recorded};
use crate::model::{
    Action, ActionError, Evidence, Intent, canonical_json, payload_hash, payload_text, with_placeholders,
};
use crate::services;
use crate::world::{Clock, Hooks, IdSource, NoHooks, PooledHttpTransport, SystemClock, Transport, UuidV7};
use vocabulary::State;
use vocabulary::protocol::Config;

pub use webhooks::{EVENT_TYPES, WebhookAnswer};
pub use workflow::{cancelled_after, result_value, waits_for_escalated};

/// Added to every bound the executor waits out before trusting a negative answer, for the
/// distance between its clock and the service's.
pub const SAFETY_MARGIN_MS: u64 = 100;

/// The file name of the log inside the state directory.
pub const LOG_FILE: &str = "intents.sqlite";

/// What the executor is given of the world.
#[derive(Clone)]
pub struct World {
    pub clock: Arc<dyn Clock>,
    pub ids: Arc<dyn IdSource>,
    pub transport: Arc<dyn Transport>,
    pub hooks: Arc<dyn Hooks>,
}

impl World {
    /// The system clock, UUID v7 keys, real sockets (keep-alive connections, reused) and no
    /// hooks.
    pub fn real() -> World {
        World {
            clock: Arc::new(SystemClock),
            ids: Arc::new(UuidV7),
            transport: Arc::new(PooledHttpTransport::new()),
            hooks: Arc::new(NoHooks),
        }
    }
}

/// The intents of a batch checked so far and not yet committed, by id.
pub(super) type Pending = BTreeMap<String, Intent>;

/// A new intent, as an agent proposes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub id: String,
    pub action: String,
    pub params: Value,
    pub replaces: Option<String>,
    /// The intents this one comes after (a step of a workflow), each already proposed; its
    /// parameters may reference their results (`vocabulary::workflow`).
    pub after: Vec<String>,
    /// The webhook event that starts it (`vocabulary::webhook`): it is kept, not recorded,
    /// until a genuine event of that type about that object arrives.
    pub on_event: Option<vocabulary::OnEvent>,
}

/// Why a proposal was refused.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    #[error(transparent)]
    Action(#[from] ActionError),
    #[error("action {action} needs service \"{service}\", which init did not configure")]
    NotConfigured { action: String, service: String },
    #[error("action {action} needs the secret \"{secret}\": {problem}")]
    MissingSecret { action: String, secret: String, problem: String },
    #[error("intent {0} replaces {1}, which this executor has never recorded")]
    UnknownPredecessor(String, String),
    #[error("intent {0} comes after {1}, which this executor has never recorded")]
    UnknownAfter(String, String),
    /// `after` or a parameter reference is not what a step may say.
    #[error("intent {0}: {1}")]
    Workflow(String, String),
    #[error("intent id {0} was already recorded with another action or payload")]
    Conflict(String),
    #[error("intent {0}: {1}")]
    Payload(String, String),
    /// The commit of the batch this proposal came in failed: nothing of it was recorded.
    #[error("intent {0} was not recorded: {1}")]
    Unrecorded(String, String),
    #[error(transparent)]
    Log(#[from] LogError),
}

/// Why the executor could not start.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("cannot create the state directory {path}: {source}")]
    StateDir { path: String, source: std::io::Error },
    #[error(transparent)]
    Log(#[from] LogError),
}

/// Why a drain ended without draining.
#[derive(Debug, thiserror::Error)]
pub enum DrainError {
    #[error("{busy} intents still recorded or submitted after {timeout_ms} ms")]
    Timeout { busy: usize, timeout_ms: u64, transitions: Vec<Transition> },
    #[error(transparent)]
    Log(#[from] LogError),
}

/// One state change this worker made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub intent_id: String,
    pub from: State,
    pub to: State,
    pub note: String,
    /// The executor's clock when the change was decided.
    pub at_ms: u64,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    pub transitions: Vec<Transition>,
    pub sent: usize,
    pub looked_up: usize,
}

/// The reference executor.
pub struct Executor {
    config: Config,
    owner: String,
    log: Mutex<IntentLog>,
    world: World,
    /// Payloads already checked, by hash (see [`Executor::checked_payload`]).
    payloads: Mutex<BTreeMap<String, CheckedPayload>>,
    /// Where this life listens for webhooks, if it does (`webhooks`).
    webhook_url: Mutex<Option<String>>,
    /// Whether a trigger is kept: only then is an endpoint registered.
    armed: AtomicBool,
    /// Whether this life's endpoint is registered at its URL.
    endpoint_ready: AtomicBool,
    /// Whether a registration went wrong in this life: an endpoint may have been made that it
    /// has no secret for, and the events sent to it are read from the API instead.
    missed_events: AtomicBool,
    /// Where the payments service's acks may lie: when this life's registration was answered,
    /// until the endpoint shows when read back.
    unconfirmed_since_ms: Mutex<Option<u64>>,
    /// Deliveries are taken one at a time: a second delivery of an event that arrives while
    /// the first is being taken finds it taken, rather than reading the payment again.
    webhook_turn: tokio::sync::Mutex<()>,
}

/// Checked payloads an executor keeps at most: a long-lived worker sees ever new intents, and
/// a forgotten payload is only checked again.
const CHECKED_PAYLOADS_MAX: usize = 4_096;

/// Keeps `checked` under `hash`, forgetting every other first when [`CHECKED_PAYLOADS_MAX`]
/// are kept.
fn keep(payloads: &mut BTreeMap<String, CheckedPayload>, hash: String, checked: CheckedPayload) {
    if payloads.len() >= CHECKED_PAYLOADS_MAX && !payloads.contains_key(&hash) {
        payloads.clear();
    }
    payloads.insert(hash, checked);
}

/// A payload that hashed to the hash it is kept under, and what its `params` parsed to.
struct CheckedPayload {
    params: String,
    after: Vec<String>,
    value: Arc<Value>,
}

impl Executor {
    /// Opens the log in `state_dir` (creating both if needed) for worker `config.worker_id`.
    pub fn open(
        config: Config,
        state_dir: &Path,
        durability: Durability,
        world: World,
    ) -> Result<Executor, OpenError> {
        std::fs::create_dir_all(state_dir)
            .map_err(|source| OpenError::StateDir { path: state_dir.display().to_string(), source })?;
        let log = IntentLog::open(&state_dir.join(LOG_FILE), durability)?;
        Ok(Executor::with_log(config, log, world))
    }

    /// As [`Executor::open`], on the log named `name` in this process's memory
    /// ([`IntentLog::open_in_memory`]): the simulation's storage, shared by every worker of
    /// a run that opens the same name, for as long as one connection to it stays open.
    pub fn open_in_memory(config: Config, name: &str, world: World) -> Result<Executor, OpenError> {
        let log = IntentLog::open_in_memory(name)?;
        Ok(Executor::with_log(config, log, world))
    }

    fn with_log(config: Config, log: IntentLog, world: World) -> Executor {
        // A fresh incarnation per process: leases of an earlier life of this worker are
        // recognised as dead (same worker id, other incarnation) and taken over at once.
        let owner = format!("{}#{}", config.worker_id, world.ids.next_id());
        Executor {
            config,
            owner,
            log: Mutex::new(log),
            world,
            payloads: Mutex::new(BTreeMap::new()),
            webhook_url: Mutex::new(None),
            armed: AtomicBool::new(false),
            endpoint_ready: AtomicBool::new(false),
            missed_events: AtomicBool::new(false),
            unconfirmed_since_ms: Mutex::new(None),
            webhook_turn: tokio::sync::Mutex::new(()),
        }
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    /// `worker_id#incarnation`: who holds a lease.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The log, for inspection.
    pub fn log(&self) -> MutexGuard<'_, IntentLog> {
        // A panic while holding the log is a bug; the SQLite file is still consistent (every
        // change is a transaction), so keep using it.
        self.log.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn now(&self) -> u64 {
        self.world.clock.now_ms()
    }

    /// Records an intent durably. When this returns `Ok`, the intent survives SIGKILL. A batch
    /// of one ([`Executor::propose_batch`]).
    pub fn propose(&self, proposal: Proposal) -> Result<Intent, ProposeError> {
        let id = proposal.id.clone();
        self.propose_batch(vec![proposal])
            .pop()
            .unwrap_or_else(|| Err(ProposeError::Unrecorded(id, "no result for the proposal".into())))
    }

    /// Records several intents durably in one commit, with the answer `propose` would give for
    /// each had they been proposed one by one, in this order: each is checked on its own (a
    /// refused one does not stop the others), an id proposed twice is recorded once (the second
    /// gets the same intent back, or `Conflict` for another payload), and `after` or `replaces`
    /// may name an intent proposed earlier in the same batch. Returns one result per proposal,
    /// in order; when one is `Ok`, that intent survives SIGKILL.
    pub fn propose_batch(&self, proposals: Vec<Proposal>) -> Vec<Result<Intent, ProposeError>> {
        if proposals.iter().all(|p| p.on_event.is_none()) {
            return self.record_batch(proposals);
        }
        // Those an event starts are kept one by one; the others still share one commit.
        let mut armed = Vec::new();
        let mut plain = Vec::new();
        let mut order = Vec::with_capacity(proposals.len());
        for mut proposal in proposals {
            order.push(proposal.on_event.is_some());
            match proposal.on_event.take() {
                Some(on_event) => armed.push(self.arm(proposal, on_event)),
                None => plain.push(proposal),
            }
        }
        let mut armed = armed.into_iter();
        let mut plain = self.record_batch(plain).into_iter();
        order
            .into_iter()
            .map(|triggered| if triggered { armed.next() } else { plain.next() })
            .map(|r| r.unwrap_or_else(|| Err(ProposeError::Unrecorded(String::new(), "no result".into()))))
            .collect()
    }

    /// [`Executor::propose_batch`] of proposals no event starts: one commit.
    fn record_batch(&self, proposals: Vec<Proposal>) -> Vec<Result<Intent, ProposeError>> {
        // What the batch proposed so far, found by the checks of the proposals after it (the
        // log, when it holds the id, comes first: what is recorded stays).
        let mut pending = Pending::new();
        let mut prepared: Vec<Intent> = Vec::new();
        // Per proposal: its place in `prepared`, or why it was refused before recording.
        let mut slots: Vec<Result<usize, ProposeError>> = Vec::with_capacity(proposals.len());
        for proposal in proposals {
            match self.check_proposal(proposal, &pending) {
                Ok(intent) => {
                    // The first of two equal ids is the one recorded (the second finds it).
                    pending.entry(intent.id.clone()).or_insert_with(|| intent.clone());
                    slots.push(Ok(prepared.len()));
                    prepared.push(intent);
                }
                Err(e) => slots.push(Err(e)),
            }
        }
        let recorded = if prepared.is_empty() { Ok(Vec::new()) } else { self.log().record_many(&prepared) };
        let mut recorded = match recorded {
            Ok(r) => r.into_iter().map(Some).collect::<Vec<_>>(),
            Err(e) => {
                // Nothing of the batch was committed: the first intent gets the log's error,
                // each other one says so.
                let problem = e.to_string();
                let mut first = Some(e);
                return slots
                    .into_iter()
                    .map(|slot| {
                        let i = slot?;
                        Err(match first.take() {
                            Some(e) => ProposeError::Log(e),
                            None => ProposeError::Unrecorded(prepared[i].id.clone(), problem.clone()),
                        })
                    })
                    .collect();
            }
        };
        let results: Vec<Result<Intent, ProposeError>> = slots
            .into_iter()
            .map(|slot| {
                let i = slot?;
                match recorded.get_mut(i).and_then(Option::take) {
                    Some(Recorded::New(intent) | Recorded::Existing(intent)) => Ok(intent),
                    Some(Recorded::Conflict(_)) => Err(ProposeError::Conflict(prepared[i].id.clone())),
                    None => {
                        Err(ProposeError::Unrecorded(prepared[i].id.clone(), "no result from the log".into()))
                    }
                }
            })
            .collect();
        // After the commit, once per intent it made (or found) durable.
        for _ in results.iter().filter(|r| r.is_ok()) {
            self.world.hooks.at("after_record");
        }
        results
    }

    /// Checks a proposal and makes the intent that records it, against the log and the
    /// intents proposed before it in the same batch.
    fn check_proposal(&self, proposal: Proposal, pending: &Pending) -> Result<Intent, ProposeError> {
        let workflow = |problem: String| ProposeError::Workflow(proposal.id.clone(), problem);
        let references = vocabulary::workflow::references(&proposal.params).map_err(workflow)?;
        // Everything but the references is checked now; the references are checked below and
        // replaced by their values only when the step is first sent.
        let checked = if references.is_empty() {
            proposal.params.clone()
        } else {
            with_placeholders(&proposal.action, &proposal.params).map_err(workflow)?
        };
        let action = Action::parse(&proposal.action, &checked)?;
        if !self.config.services.contains_key(action.service()) {
            return Err(ProposeError::NotConfigured {
                action: proposal.action,
                service: action.service().to_string(),
            });
        }
        if let Some(secret) = action.secret() {
            // Refused now rather than recorded and never sendable.
            services::chain_key(&self.config).map_err(|problem| ProposeError::MissingSecret {
                action: proposal.action.clone(),
                secret: secret.to_string(),
                problem,
            })?;
        }
        self.check_after(&proposal, action.spec(), &references, pending)?;
        // The authorised form: the checked parameters in canonical form, each reference put
        // back in its own canonical form.
        let mut authorised = action.params();
        if let Value::Object(map) = &mut authorised {
            for (name, reference) in &references {
                map.insert(name.clone(), reference.to_value());
            }
        }
        let params =
            canonical_json(&authorised).map_err(|e| ProposeError::Payload(proposal.id.clone(), e))?;
        let now = self.now();
        let mut state = State::Recorded;
        let mut reason = None;
        let mut could_duplicate = None;
        if let Some(old) = &proposal.replaces
            && self.row(old, pending)?.is_none()
        {
            return Err(ProposeError::UnknownPredecessor(proposal.id.clone(), old.clone()));
        }
        if proposal.replaces.is_some() || !proposal.after.is_empty() {
            match self.release(proposal.replaces.as_deref(), &proposal.after, pending)? {
                None => state = State::Blocked,
                // Recorded as it is, without an "unblocked" note: it never was blocked.
                Some(r) if r.state == State::Recorded => {}
                // An escalated predecessor escalates its successor at the next pass, with an
                // event for the timeline.
                Some(r) if r.state == State::Escalated => state = State::Blocked,
                Some(r) => {
                    state = r.state;
                    reason = r.reason;
                    could_duplicate = r.could_duplicate;
                }
            }
        }
        let key = self.world.ids.next_id();
        let intent = Intent {
            id: proposal.id.clone(),
            action: proposal.action.clone(),
            params_hash: payload_hash(&payload_text(&params, &proposal.after)),
            params,
            key: key.clone(),
            state,
            attempts: 0,
            replaces: proposal.replaces.clone(),
            after: proposal.after.clone(),
            evidence: Evidence { key: Some(key), reason, could_duplicate, ..Evidence::default() },
            maybe_executed: false,
            lease_owner: None,
            lease_epoch: 0,
            lease_until_ms: 0,
            version: 0,
            created_ms: now,
            updated_ms: now,
            key_first_sent_ms: None,
            last_sent_ms: None,
        };
        // The payload was hashed just now: the pass that reads the row back need not hash it
        // again (a stored row that differs from it is still checked in full).
        self.remember_payload(&intent);
        Ok(intent)
    }

    /// Checks a step's `after` and references against the log: every intent it comes after
    /// is recorded (once), and every reference reads a result field of one of them from a
    /// parameter that may take one (`vocabulary::workflow::check_reference`).
    fn check_after(
        &self,
        proposal: &Proposal,
        spec: &vocabulary::ActionSpec,
        references: &[(String, vocabulary::workflow::ParamRef)],
        pending: &Pending,
    ) -> Result<(), ProposeError> {
        let workflow = |problem: String| ProposeError::Workflow(proposal.id.clone(), problem);
        for (i, id) in proposal.after.iter().enumerate() {
            if proposal.after[..i].contains(id) {
                return Err(workflow(format!("\"after\" lists {id} twice")));
            }
            if self.row(id, pending)?.is_none() {
                return Err(ProposeError::UnknownAfter(proposal.id.clone(), id.clone()));
            }
        }
        for (name, reference) in references {
            let from = self.row(&reference.from, pending)?;
            let from_action = from.as_ref().and_then(|row| vocabulary::action(&row.action));
            let listed = proposal.after.contains(&reference.from);
            vocabulary::workflow::check_reference(spec, name, reference, from_action, listed)
                .map_err(workflow)?;
        }
        Ok(())
    }

    /// Keeps the payload of `intent`, whose hash was computed from its `params` and `after`
    /// by this executor, as checked (see [`Executor::checked_payload`]).
    fn remember_payload(&self, intent: &Intent) {
        let Ok(value) = serde_json::from_str::<Value>(&intent.params) else { return };
        let checked = CheckedPayload {
            params: intent.params.clone(),
            after: intent.after.clone(),
            value: Arc::new(value),
        };
        let mut payloads = self.payloads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        keep(&mut payloads, intent.params_hash.clone(), checked);
    }

    /// [`Intent::payload`], without hashing and parsing again a payload this executor checked
    /// before: a pass checks every unresolved row's payload, and a row that waits is checked
    /// at every pass. The answer is the same: the same `params` and `after` that hashed to the
    /// row's hash then hash to it now, and `params` parses to the same value.
    /// Shared, not cloned: a pass only reads it.
    pub(super) fn checked_payload(&self, intent: &Intent) -> Result<Arc<Value>, String> {
        let mut payloads = self.payloads.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(checked) = payloads.get(&intent.params_hash)
            && checked.params == intent.params
            && checked.after == intent.after
        {
            return Ok(Arc::clone(&checked.value));
        }
        let value = Arc::new(intent.payload()?);
        let checked = CheckedPayload {
            params: intent.params.clone(),
            after: intent.after.clone(),
            value: Arc::clone(&value),
        };
        keep(&mut payloads, intent.params_hash.clone(), checked);
        Ok(value)
    }

    /// The intent `id` as the log holds it or, when the log does not hold it yet, as an
    /// earlier proposal of the same batch is about to record it.
    pub(super) fn row(&self, id: &str, pending: &Pending) -> Result<Option<Intent>, LogError> {
        Ok(match self.log().get(id)? {
            Some(row) => Some(row),
            None => pending.get(id).cloned(),
        })
    }

    /// Intents by id (all when `ids` is `None`), in the order they were recorded.
    pub fn status(&self, ids: Option<&[String]>) -> Result<Vec<Intent>, LogError> {
        let all = self.log().all()?;
        Ok(match ids {
            None => all,
            Some(ids) => all.into_iter().filter(|i| ids.contains(&i.id)).collect(),
        })
    }

    /// Intents that need a person, with their evidence.
    pub fn escalations(&self) -> Result<Vec<Intent>, LogError> {
        self.log().in_state(State::Escalated)
    }
}

#[cfg(test)]
mod payload_memo_tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::{CHECKED_PAYLOADS_MAX, CheckedPayload, keep};

    fn checked(n: usize) -> CheckedPayload {
        CheckedPayload {
            params: format!("{{\"n\":{n}}}"),
            after: Vec::new(),
            value: Arc::new(serde_json::json!({"n": n})),
        }
    }

    #[test]
    fn the_kept_payloads_stay_within_their_bound() {
        let mut payloads = BTreeMap::new();
        for n in 0..CHECKED_PAYLOADS_MAX + 10 {
            keep(&mut payloads, format!("h{n}"), checked(n));
            assert!(payloads.len() <= CHECKED_PAYLOADS_MAX);
        }
        // The newest is kept; one kept again is replaced, not counted twice.
        let last = format!("h{}", CHECKED_PAYLOADS_MAX + 9);
        assert!(payloads.contains_key(&last));
        let before = payloads.len();
        keep(&mut payloads, last, checked(0));
        assert_eq!(payloads.len(), before);
    }
}
