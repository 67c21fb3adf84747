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

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;

use std::collections::BTreeSet;

use crate::config::{Acks, Config, KeyPolicy, Reads, Service};
use crate::log::{Change, Durability, IntentLog, LogError, Recorded};
use crate::model::{Action, ActionError, Evidence, Intent, State, canonical_json, payload_hash};
use crate::services::{self, ChainFacts, Lookup, WriteOutcome};
use crate::signing::{ChainKey, SignedTransfer};
use crate::world::{Clock, Hooks, HttpTransport, IdSource, NoHooks, SystemClock, Transport, UuidV7};

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
    /// The system clock, UUID v7 keys, real sockets and no hooks.
    pub fn real() -> World {
        World {
            clock: Arc::new(SystemClock),
            ids: Arc::new(UuidV7),
            transport: Arc::new(HttpTransport),
            hooks: Arc::new(NoHooks),
        }
    }
}

/// A new intent, as an agent proposes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposal {
    pub id: String,
    pub action: String,
    pub params: Value,
    pub replaces: Option<String>,
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
    #[error("intent id {0} was already recorded with another action or payload")]
    Conflict(String),
    #[error("intent {0}: {1}")]
    Payload(String, String),
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
}

/// A planned write: the row as it should become, and what it was.
struct Planned {
    new: Intent,
    expect_version: u64,
    from: State,
    note: String,
}

/// An intent about to be sent.
struct Send {
    intent: Intent,
    action: Action,
}

/// A send decided in a pass, before its commit: the row as it will be sent, and as it was
/// (leased) before it was marked submitted, for when its first send cannot be prepared.
struct Sending {
    planned: Planned,
    action: Action,
    before: Intent,
}

/// The chain account's nonces as one pass allocates them: the lowest nonce at or above the
/// node's pending nonce that no intent of the log (or of this pass) has signed with. The
/// node's count may lag (a stale read) or miss what the log signed and has not broadcast;
/// the log's claims may miss what another signer sent: either alone could reuse a nonce.
struct NonceBook {
    key: ChainKey,
    facts: ChainFacts,
    taken: BTreeSet<u64>,
}

impl NonceBook {
    fn allocate(&mut self) -> u64 {
        let mut nonce = self.facts.pending_nonce;
        // Bounded: `taken` is finite, so some nonce at most `taken.len()` above is free.
        while self.taken.contains(&nonce) {
            nonce += 1;
        }
        self.taken.insert(nonce);
        nonce
    }
}

/// What a lineage established, from the newest predecessor back to its root.
enum Lineage {
    /// This intent took effect: a replacement is cancelled.
    Executed(String),
    /// Every intent in it failed: a replacement may run.
    NothingExecuted,
    /// Some intent is not resolved yet: a replacement waits.
    Unresolved,
    /// This intent needs a person: so does a replacement.
    Escalated(String),
}

/// The service of a row's action (empty for an unreadable one, which is never sent).
fn action_service(intent: &Intent) -> &'static str {
    intent.action().map(|a| a.service()).unwrap_or_default()
}

fn cancelled(old: &str, by: &str) -> String {
    if old == by {
        format!("cancelled: the intent it replaces ({old}) is confirmed")
    } else {
        format!("cancelled: {by}, in the lineage of the intent it replaces ({old}), is confirmed")
    }
}

/// What a lookup led to.
enum Decision {
    Write(Planned),
    /// The row as it will be sent, and as it was leased before (boxed: the variants differ
    /// in size by a whole row).
    Send(Planned, Box<Intent>),
    Stay,
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
        // A fresh incarnation per process: leases of an earlier life of this worker are
        // recognised as dead (same worker id, other incarnation) and taken over at once.
        let owner = format!("{}#{}", config.worker_id, world.ids.next_id());
        Ok(Executor { config, owner, log: Mutex::new(log), world })
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

    /// Records an intent durably. When this returns `Ok`, the intent survives SIGKILL.
    pub fn propose(&self, proposal: Proposal) -> Result<Intent, ProposeError> {
        let action = Action::parse(&proposal.action, &proposal.params)?;
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
        let params =
            canonical_json(&action.params()).map_err(|e| ProposeError::Payload(proposal.id.clone(), e))?;
        let now = self.now();
        let mut state = State::Recorded;
        let mut reason = None;
        if let Some(old) = &proposal.replaces {
            if self.log().get(old)?.is_none() {
                return Err(ProposeError::UnknownPredecessor(proposal.id.clone(), old.clone()));
            }
            match self.lineage(old)? {
                Lineage::Executed(by) => {
                    state = State::Failed;
                    reason = Some(cancelled(old, &by));
                }
                Lineage::NothingExecuted => {}
                Lineage::Unresolved | Lineage::Escalated(_) => state = State::Blocked,
            }
        }
        let key = self.world.ids.next_id();
        let intent = Intent {
            id: proposal.id.clone(),
            action: proposal.action.clone(),
            params_hash: payload_hash(&params),
            params,
            key: key.clone(),
            state,
            attempts: 0,
            replaces: proposal.replaces.clone(),
            evidence: Evidence { key: Some(key), reason, ..Evidence::default() },
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
        match self.log().record(&intent)? {
            Recorded::New(i) | Recorded::Existing(i) => {
                self.world.hooks.at("after_record");
                Ok(i)
            }
            Recorded::Conflict(_) => Err(ProposeError::Conflict(proposal.id)),
        }
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

    /// Takes or renews the lease on `intent` in memory, or `None` if another live worker
    /// holds it.
    fn lease(&self, intent: &Intent, now: u64) -> Option<Intent> {
        let mine = intent.lease_owner.as_deref() == Some(self.owner.as_str());
        let my_earlier_life = intent
            .lease_owner
            .as_deref()
            .and_then(|o| o.rsplit_once('#'))
            .is_some_and(|(worker, _)| worker == self.config.worker_id);
        let free = intent.lease_owner.is_none() || intent.lease_until_ms < now || mine || my_earlier_life;
        if !free {
            return None;
        }
        let mut leased = intent.clone();
        if !mine {
            leased.lease_owner = Some(self.owner.clone());
            leased.lease_epoch += 1;
        }
        leased.lease_until_ms = now + self.config.limits.lease_ms;
        leased.updated_ms = now;
        Some(leased)
    }

    /// One pass over the unresolved intents.
    pub async fn pass(&self) -> Result<PassReport, LogError> {
        let now = self.now();
        let active = self.log().active()?;
        let mut report = PassReport::default();
        let mut writes: Vec<Planned> = Vec::new();
        let mut sends: Vec<Sending> = Vec::new();
        let mut resolves: Vec<(Intent, Action)> = Vec::new();

        // Phase 1: decide in memory.
        for intent in active.into_iter().take(self.config.limits.batch_max) {
            let Some(leased) = self.lease(&intent, now) else { continue };
            let from = intent.state;
            let planned =
                |new: Intent, note: String| Planned { new, expect_version: intent.version, from, note };
            let action = match intent.action() {
                Ok(a) => a,
                Err(problem) => {
                    let mut new = leased;
                    new.state = State::Escalated;
                    new.evidence.reason = Some(format!("not executed: {problem}"));
                    writes.push(planned(new, problem));
                    continue;
                }
            };
            match from {
                State::Blocked => {
                    if let Some(new) = self.unblock(&intent, leased)? {
                        let note = new.evidence.reason.clone().unwrap_or_default();
                        writes.push(planned(new, note));
                    }
                }
                State::Recorded => {
                    // A send that certainly did not execute (never sent, 429) is retried after
                    // a pause that grows with each attempt, not on the very next pass.
                    let retry_at = intent
                        .last_sent_ms
                        .map(|t| t + self.config.limits.request_timeout_ms * u64::from(intent.attempts));
                    if retry_at.is_some_and(|t| now < t) {
                        continue;
                    }
                    let new = self.submitted(leased.clone(), now, false);
                    sends.push(Sending { planned: planned(new, "sent".into()), action, before: leased });
                }
                State::Submitted | State::Unknown => resolves.push((intent, action)),
                _ => {}
            }
        }

        // Phase 2: look up what really happened to the uncertain ones.
        report.looked_up = resolves.len();
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
            match self.decide(&intent, &action, found, now) {
                Decision::Write(p) => writes.push(p),
                Decision::Send(planned, before) => sends.push(Sending { planned, action, before: *before }),
                Decision::Stay => {}
            }
        }
        let sends = self.prepare(sends, &mut writes).await?;

        // Phase 3: one commit for every decision and every intent about to leave.
        let mut changes: Vec<&Planned> = writes.iter().collect();
        changes.extend(sends.iter().map(|s| &s.planned));
        let applied = self.commit(&changes, &mut report)?;
        let sends: Vec<Send> = sends
            .into_iter()
            .zip(applied[writes.len()..].iter())
            .filter(|(_, ok)| **ok)
            .map(|(s, _)| Send { intent: s.planned.new, action: s.action })
            .collect();

        // Phase 4: send.
        report.sent = sends.len();
        let outcomes = futures_util::future::join_all(sends.iter().map(|s| self.attempt(s))).await;

        // Phase 5: one commit for every outcome.
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
        self.commit(&changes, &mut report)?;
        Ok(report)
    }

    /// Reads and records what each first send needs before it may leave (see
    /// `services::needs_preparation`). A send that cannot be prepared is not sent: a recorded
    /// intent counts the try and waits as after a refused connection, giving up (`failed`,
    /// since nothing was ever sent) after `attempts_max` tries.
    async fn prepare(
        &self,
        sends: Vec<Sending>,
        writes: &mut Vec<Planned>,
    ) -> Result<Vec<Sending>, LogError> {
        let transport = self.world.transport.as_ref();
        let mut book: Option<Result<NonceBook, String>> = None;
        let mut ready = Vec::with_capacity(sends.len());
        for mut sending in sends {
            let Some(service) = self.config.services.get(sending.action.service()) else {
                ready.push(sending);
                continue;
            };
            if !services::needs_preparation(&sending.action, &sending.planned.new.evidence, &service.contract)
            {
                ready.push(sending);
                continue;
            }
            let prepared = match &sending.action {
                Action::PutObject { .. } => {
                    services::read_precondition(&sending.action, &self.config, service, transport)
                        .await
                        .map(|p| sending.planned.new.evidence.precondition = Some(p))
                }
                Action::Transfer { .. } => self
                    .sign(&sending.action, service, &mut book)
                    .await?
                    .map(|signed| sending.planned.new.evidence.record_signed(&signed)),
                Action::Refund { .. } | Action::CreateWorkspace { .. } => Ok(()),
            };
            match prepared {
                Ok(()) => ready.push(sending),
                Err(error) => writes.extend(self.not_prepared(&sending, error)),
            }
        }
        Ok(ready)
    }

    /// Signs a transfer with the next free nonce. The chain facts are read once per pass.
    async fn sign(
        &self,
        action: &Action,
        service: &Service,
        book: &mut Option<Result<NonceBook, String>>,
    ) -> Result<Result<SignedTransfer, String>, LogError> {
        if book.is_none() {
            let opened = match services::chain_key(&self.config) {
                Err(e) => Err(e),
                Ok(key) => {
                    match services::chain_facts(
                        key.address(),
                        &self.config,
                        service,
                        self.world.transport.as_ref(),
                    )
                    .await
                    {
                        Err(e) => Err(e),
                        Ok(facts) => {
                            let taken = self.log().claimed_nonces(key.address())?;
                            Ok(NonceBook { key, facts, taken })
                        }
                    }
                }
            };
            *book = Some(opened);
        }
        let Some(Ok(book)) = book.as_mut() else {
            let error = match book {
                Some(Err(e)) => e.clone(),
                _ => "no chain facts".to_string(),
            };
            return Ok(Err(error));
        };
        let nonce = book.allocate();
        let signed = book
            .facts
            .transfer(action, nonce)
            .and_then(|t| book.key.sign_transfer(&t).map_err(|e| e.to_string()));
        Ok(signed)
    }

    /// The row of a send whose first send could not be prepared, or `None` to leave it.
    fn not_prepared(&self, sending: &Sending, error: String) -> Option<Planned> {
        // Only a first send is prepared; anything else was prepared when it was first sent.
        if sending.planned.from != State::Recorded {
            return None;
        }
        let now = sending.planned.new.updated_ms;
        let mut new = sending.before.clone();
        new.attempts += 1;
        // Nothing was sent; the time drives the pause before the next try, as after a
        // connection that could not be made.
        new.last_sent_ms = Some(now);
        new.updated_ms = now;
        new.evidence.last_error = Some(error.clone());
        let (state, note) = if new.attempts >= self.config.limits.attempts_max {
            (
                State::Failed,
                format!(
                    "never sent: what its first send needs could not be read in {} tries: {error}",
                    new.attempts
                ),
            )
        } else {
            (State::Recorded, format!("not sent yet: {error}"))
        };
        new.state = state;
        new.evidence.reason = Some(note.clone());
        Some(Planned {
            new,
            expect_version: sending.planned.expect_version,
            from: sending.planned.from,
            note,
        })
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

    /// A blocked intent whose predecessor is now resolved, or `None` while it is not.
    fn unblock(&self, intent: &Intent, mut leased: Intent) -> Result<Option<Intent>, LogError> {
        let old = intent.replaces.clone().unwrap_or_default();
        let (state, reason) = match self.lineage(&old)? {
            Lineage::Executed(by) => (State::Failed, cancelled(&old, &by)),
            Lineage::NothingExecuted => {
                (State::Recorded, format!("unblocked: nothing in the lineage of {old} took effect"))
            }
            Lineage::Escalated(by) => (
                State::Escalated,
                format!("{by}, in the lineage of {old}, is escalated; executing this one could do it twice"),
            ),
            Lineage::Unresolved => return Ok(None),
        };
        leased.state = state;
        leased.evidence.reason = Some(reason);
        Ok(Some(leased))
    }

    /// What the chain of intents ending at `id` (following `replaces`) established. Every
    /// supported action is exclusive (one refund per payment intent, one workspace per
    /// external id), so a replacement may run only when nothing in its lineage took effect
    /// and nothing can any more: not just its direct predecessor, which may itself be a
    /// replacement cancelled because an older intent was confirmed.
    fn lineage(&self, id: &str) -> Result<Lineage, LogError> {
        let log = self.log();
        let mut current = id.to_string();
        let mut escalated: Option<String> = None;
        // Bounded by the log's size: a chain cannot be longer than the intents recorded.
        for _ in 0..=log.count()? {
            let Some(intent) = log.get(&current)? else {
                return Ok(Lineage::Escalated(format!("{current} (missing from the log)")));
            };
            match intent.state {
                State::Confirmed => return Ok(Lineage::Executed(intent.id)),
                State::Escalated => {
                    escalated.get_or_insert(intent.id.clone());
                }
                State::Failed => {}
                _ => return Ok(Lineage::Unresolved),
            }
            match intent.replaces {
                Some(older) => current = older,
                None => break,
            }
        }
        Ok(match escalated {
            Some(by) => Lineage::Escalated(by),
            None => Lineage::NothingExecuted,
        })
    }

    /// The row as it is written just before a send: submitted, counted, key and times kept.
    fn submitted(&self, mut intent: Intent, now: u64, rotate_key: bool) -> Intent {
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

    /// After a lookup: what the intent becomes.
    fn decide(&self, intent: &Intent, action: &Action, found: Lookup, now: u64) -> Decision {
        let limits = &self.config.limits;
        let Some(service) = self.config.services.get(action.service()) else {
            return Decision::Stay;
        };
        let contract = &service.contract;
        let Some(leased) = self.lease(intent, now) else { return Decision::Stay };
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
        let settled = settled_at.is_none_or(|t| now >= t);
        let deadline = intent.evidence.first_sent_ms.map(|t| {
            t + limits
                .escalate_after_ms
                .max(settled_at.unwrap_or(0).saturating_sub(intent.last_sent_ms.unwrap_or(0)) * 2)
        });
        let overdue = deadline.is_some_and(|d| now >= d);
        match found {
            Lookup::Found { external_id, params_match: true } => {
                let mut new = leased;
                new.evidence.external_id = Some(external_id);
                new.evidence.last_error = None;
                write(new, State::Confirmed, "confirmed by lookup".into())
            }
            Lookup::Found { external_id, params_match: false } => {
                let mut new = leased;
                new.evidence.external_id = Some(external_id);
                write(
                    new,
                    State::Escalated,
                    "an effect exists with parameters other than the authorised ones".into(),
                )
            }
            Lookup::Absent if settled => {
                if intent.attempts >= limits.attempts_max {
                    let mut new = leased;
                    new.maybe_executed = false;
                    return write(
                        new,
                        State::Failed,
                        format!("no effect after {} attempts, and none can appear any more", intent.attempts),
                    );
                }
                // Nothing landed and nothing can land: a new attempt is safe. Where acks may
                // lie, with a fresh key: the service may have saved a silent no-op's success
                // under the old one, which a resend would only replay. Elsewhere the same key,
                // so that a late request of a stale worker still carrying it is a replay.
                let mut new = leased;
                new.maybe_executed = false;
                let rotate = contract.acks == Acks::MayLie && intent.last_sent_ms.is_some();
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
                let key_safe = contract.idempotency_keys == KeyPolicy::Honored
                    && contract.acks == Acks::Reliable
                    && intent.key_first_sent_ms.is_some_and(|t| {
                        now + limits.request_timeout_ms + SAFETY_MARGIN_MS < t + contract.key_retention_ms
                    });
                // A conditional put or a signed transaction can land at most once however
                // often it is sent, so it need not wait for the settle bound either.
                let guarded = services::resend_is_guarded(action, contract);
                let paused_enough = intent
                    .last_sent_ms
                    .is_none_or(|t| now >= t + limits.request_timeout_ms * u64::from(intent.attempts.max(1)));
                if (key_safe || guarded) && paused_enough && intent.attempts < limits.attempts_max {
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

    /// One send, and for a service whose acks may lie, the read-back of a success.
    async fn attempt(&self, send: &Send) -> (WriteOutcome, Option<Lookup>) {
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
            WriteOutcome::Done { .. } | WriteOutcome::Conflict { .. } => Some(
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
    fn after_send(
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
        let limits = &self.config.limits;
        let (state, note) = match outcome {
            WriteOutcome::Done { external_id } => match read_back {
                None | Some(Lookup::Found { params_match: true, .. }) => {
                    new.evidence.external_id = Some(external_id);
                    new.evidence.last_error = None;
                    (State::Confirmed, "confirmed by the service".to_string())
                }
                Some(other) => {
                    new.maybe_executed = true;
                    new.evidence.last_error =
                        Some(format!("success not confirmed by a read-back: {other:?}"));
                    (State::Unknown, "a success the read-back did not show".into())
                }
            },
            WriteOutcome::Rejected { error } => {
                new.evidence.last_error = Some(error.clone());
                if sent.maybe_executed {
                    (State::Unknown, format!("rejected, but an earlier attempt may have landed: {error}"))
                } else {
                    (State::Failed, format!("rejected: {error}"))
                }
            }
            WriteOutcome::NotExecuted { error } => {
                new.evidence.last_error = Some(error.clone());
                if sent.maybe_executed {
                    (State::Unknown, format!("not executed, but an earlier attempt may have landed: {error}"))
                } else if sent.attempts >= limits.attempts_max {
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
                new.evidence.last_error = Some(error.clone());
                // Reads that may lag cannot prove whose version (or transaction) is there.
                let strong = self
                    .config
                    .services
                    .get(action_service(&sent))
                    .is_some_and(|s| s.contract.reads == Reads::Strong);
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
            // A newer worker holds the intent; its decision stands.
            WriteOutcome::Fenced { .. } => return None,
        };
        new.state = state;
        new.evidence.reason = Some(note.clone());
        Some(Planned { new, expect_version, from, note })
    }

    /// Passes until nothing is recorded or submitted, within `timeout_ms` (tokio time).
    pub async fn drain(&self, timeout_ms: u64) -> Result<Vec<Transition>, DrainError> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        let mut transitions = Vec::new();
        loop {
            let report = self.pass().await?;
            let progressed = report.sent > 0 || !report.transitions.is_empty();
            transitions.extend(report.transitions);
            let busy = self
                .log()
                .active()?
                .iter()
                .filter(|i| matches!(i.state, State::Recorded | State::Submitted))
                .count();
            if busy == 0 {
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
}
