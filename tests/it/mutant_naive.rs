//! `Naive`: a small in-process executor for the sim driver, correct unless one bug is
//! switched on. The mutant tests (`mutants.rs`) switch on one [`Bug`] at a time and prove
//! that the catalog and the generator catch it.
//!
//! Without a bug it does what design §1 calls the cure, in as few lines as it can: every
//! intent is written to a JSON file in the state directory before `propose` returns; one
//! idempotency key per intent; a send whose answer is lost makes the intent `unknown`; an
//! unknown intent is resolved by a same-key resend where the contract makes that safe, or by
//! a lookup whose "not there" is believed only once the settle and read-lag bounds have
//! passed; a success from a service whose acks may lie is read back; a replacement waits
//! for its predecessor; leases with epochs keep two workers off one intent, and the epoch is
//! the fencing token where a service takes one. A put reads the object before its first send
//! and carries `If-None-Match: *` or `If-Match` of what it read; a transfer is signed once,
//! with a nonce no other intent of the store holds, before its first broadcast, and every
//! broadcast sends the same bytes; both are sent again without waiting for the settle bound,
//! since neither can land twice. It reuses the reference executor's public request builders,
//! answer classifiers and signing (`executor::services`, `executor::signing`), never its
//! engine.
//!
//! Two [`Style`]s of resolving an uncertain send are both correct and differ in when they
//! ask: [`Style::KeyRetry`] leaves the intent `unknown` and resolves it in a later pass,
//! leaning on the key while it is retained; [`Style::LookupFirst`] reads back at once. Some
//! bugs only show in one style (believing a stale read-back needs an early read-back), so
//! each mutant names its style.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use executor::config::{Acks, Contract, KeyPolicy, Reads};
use executor::model::{ActionError, Precondition};
use executor::services::{self, Lookup, WriteOutcome};
use executor::signing::SignedTransfer;
use executor::world::{Clock, HttpRequest, HttpResponse, SendError, TokioClock, Transport};
use executor::{Action, Config, Evidence, Limits, Service};
use harness::observe::Claim;
use harness::sim::{BoxFuture, Refusal, SimExecutor, SimFactory, StateChange, WorkerSetup};
use scenarios::IntentSpec;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Added to every bound before a negative answer is believed (the reference's margin).
const MARGIN_MS: u64 = executor::engine::SAFETY_MARGIN_MS;
/// The store's file name in the state directory.
const STORE_FILE: &str = "naive-intents.json";

/// How an uncertain send is resolved; both are correct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `unknown` at once; a later pass resends under the same key while the service
    /// honours and retains it, and otherwise looks the effect up.
    KeyRetry,
    /// Reads the effect back right after the uncertain answer, and in every later pass.
    LookupFirst,
}

/// One deliberate bug. Each is one wrong belief, described where it acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// Any error is resent at once without an idempotency key; the last answer is believed.
    NaiveRetry,
    /// A timeout or any other uncertain answer is taken as "it did not happen": `failed`.
    TimeoutAsNo,
    /// An uncertain send is retried at once, like a retrying HTTP client does, and every
    /// resend mints a new idempotency key.
    KeyPerAttempt,
    /// Intents live in memory only: a restart forgets them.
    MemoryOnly,
    /// No `unknown` state: the read-back right after an uncertain answer decides, and
    /// "not found" means `failed`.
    NoUnknownState,
    /// Unknown intents are never looked at again.
    NoReconciliation,
    /// A success is believed even where the contract says acks may lie: no read-back.
    TrustsAck,
    /// A "not found" read-back is believed at once, and the intent sent again as new.
    TrustsStaleRead,
    /// An idempotency key is believed to protect forever: a same-key resend ignores the
    /// retention window, and its answer is taken as the intent's answer.
    KeyOutlivesRetention,
    /// Keys are believed to be honoured whatever the contract says.
    KeysAssumedHonored,
    /// A replacement runs as soon as its predecessor is not in flight, even when `unknown`.
    ReplacementWhileUnknown,
    /// No leases and no fencing tokens: any worker acts on any intent, and a paused one
    /// writes what it believed before the pause.
    NoLease,
    /// A create is resent without a key after an uncertain answer, trusting the service to
    /// refuse a second object with the same external id (a 409 is taken as "ours").
    UniqueIdsAssumed,
    /// When any step fails or turns uncertain, the completed steps are executed again.
    RedoEverything,
    /// The nonce trap: after an uncertain broadcast, the transfer is signed anew with the
    /// node's next nonce and sent, as if the first had never reached the node.
    ReSignAfterTimeout,
    /// A put carries no `If-Match` or `If-None-Match`: it overwrites whatever is there.
    Unfenced,
}

/// The factory: one style, at most one bug.
#[derive(Debug, Clone, Copy)]
pub struct Naive {
    pub style: Style,
    pub bug: Option<Bug>,
}

impl Naive {
    pub fn correct(style: Style) -> Naive {
        Naive { style, bug: None }
    }

    pub fn with(style: Style, bug: Bug) -> Naive {
        Naive { style, bug: Some(bug) }
    }
}

impl SimFactory for Naive {
    fn name(&self) -> String {
        match self.bug {
            Some(bug) => format!("naive executor ({:?}, bug {bug:?})", self.style),
            None => format!("naive executor ({:?}, no bug)", self.style),
        }
    }

    fn start(&self, setup: WorkerSetup) -> Result<Box<dyn SimExecutor>, String> {
        let store = if self.bug == Some(Bug::MemoryOnly) {
            Store::Memory(Vec::new())
        } else {
            std::fs::create_dir_all(&setup.state_dir).map_err(|e| e.to_string())?;
            Store::File(setup.state_dir.join(STORE_FILE))
        };
        Ok(Box::new(Worker {
            style: self.style,
            bug: self.bug,
            owner: format!("{}#{}", setup.worker_id, setup.incarnation),
            worker_id: setup.worker_id.clone(),
            key_prefix: format!("{}.{}", setup.worker_id, setup.incarnation),
            config: Config {
                worker_id: setup.worker_id,
                services: setup.services,
                secrets: setup.secrets,
                limits: setup.limits,
            },
            clock: setup.clock,
            transport: setup.transport,
            store: Mutex::new(store),
            keys: AtomicU64::new(0),
            redone: Mutex::new(false),
        }))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum St {
    Recorded,
    Blocked,
    Submitted,
    Confirmed,
    Failed,
    Unknown,
    Escalated,
}

impl St {
    fn name(self) -> &'static str {
        match self {
            St::Recorded => "recorded",
            St::Blocked => "blocked",
            St::Submitted => "submitted",
            St::Confirmed => "confirmed",
            St::Failed => "failed",
            St::Unknown => "unknown",
            St::Escalated => "escalated",
        }
    }

    fn terminal(self) -> bool {
        matches!(self, St::Confirmed | St::Failed | St::Escalated)
    }
}

/// One intent as the store holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Rec {
    id: String,
    action: String,
    params: Value,
    replaces: Option<String>,
    state: St,
    key: String,
    previous_keys: Vec<String>,
    attempts: u32,
    /// An earlier send may have taken effect.
    maybe_executed: bool,
    /// When the current key was first sent (its retention runs from about then).
    key_first_sent_ms: Option<u64>,
    last_sent_ms: Option<u64>,
    external_id: Option<String>,
    last_error: Option<String>,
    reason: Option<String>,
    lease_owner: Option<String>,
    lease_epoch: u64,
    lease_until_ms: u64,
    /// Bumped by every write; writes are compare-and-set on it.
    version: u64,
    /// A put's condition, read before its first send.
    #[serde(default)]
    precondition: Option<Precondition>,
    /// A transfer's signed transaction, recorded before its first broadcast.
    #[serde(default)]
    tx_hash: Option<String>,
    #[serde(default)]
    raw_tx: Option<String>,
    #[serde(default)]
    nonce: Option<u64>,
    #[serde(default)]
    from: Option<String>,
}

impl Rec {
    fn action(&self) -> Option<Action> {
        Action::parse(&self.action, &self.params).ok()
    }

    /// The reference's intent type, for its request builders (they read `id` and `key`).
    fn as_intent(&self) -> executor::Intent {
        executor::Intent {
            id: self.id.clone(),
            action: self.action.clone(),
            params: self.params.to_string(),
            params_hash: String::new(),
            key: self.key.clone(),
            state: executor::State::Submitted,
            attempts: self.attempts,
            replaces: self.replaces.clone(),
            maybe_executed: self.maybe_executed,
            lease_owner: self.lease_owner.clone(),
            lease_epoch: self.lease_epoch,
            lease_until_ms: self.lease_until_ms,
            version: self.version,
            evidence: self.evidence(),
            created_ms: 0,
            updated_ms: 0,
            key_first_sent_ms: self.key_first_sent_ms,
            last_sent_ms: self.last_sent_ms,
        }
    }

    /// What the reference's builders read of a row beyond its id and key.
    fn evidence(&self) -> Evidence {
        Evidence {
            precondition: self.precondition.clone(),
            tx_hash: self.tx_hash.clone(),
            raw_tx: self.raw_tx.clone(),
            nonce: self.nonce,
            from: self.from.clone(),
            ..Evidence::default()
        }
    }

    fn record_signed(&mut self, signed: SignedTransfer) {
        self.tx_hash = Some(signed.hash);
        self.raw_tx = Some(signed.raw);
        self.nonce = Some(signed.nonce);
        self.from = Some(signed.from);
    }

    fn claim(&self) -> Claim {
        Claim {
            id: self.id.clone(),
            state: self.state.name().into(),
            attempts: u64::from(self.attempts),
            evidence: json!({
                "key": self.key,
                "previous_keys": self.previous_keys,
                "external_id": self.external_id,
                "last_error": self.last_error,
                "reason": self.reason,
                "tx_hash": self.tx_hash,
            }),
        }
    }
}

/// Where intents live: a JSON file (durable: written whole, then renamed into place), or
/// memory (the [`Bug::MemoryOnly`] mutant).
enum Store {
    File(PathBuf),
    Memory(Vec<Rec>),
}

impl Store {
    fn all(&self) -> Vec<Rec> {
        match self {
            Store::Memory(recs) => recs.clone(),
            Store::File(path) => match std::fs::read(path) {
                Ok(bytes) => serde_json::from_slice(&bytes).expect("the naive store is valid JSON"),
                Err(_) => Vec::new(),
            },
        }
    }

    fn save(&mut self, recs: Vec<Rec>) {
        match self {
            Store::Memory(held) => *held = recs,
            Store::File(path) => {
                let tmp = path.with_extension("tmp");
                std::fs::write(&tmp, serde_json::to_vec(&recs).expect("records serialize"))
                    .expect("the naive store is writable");
                std::fs::rename(&tmp, path).expect("the naive store is writable");
            }
        }
    }

    fn get(&self, id: &str) -> Option<Rec> {
        self.all().into_iter().find(|r| r.id == id)
    }

    /// Writes `rec` if the stored row still has `rec.version` (or, `blind`, whatever it
    /// has); the written row's version is one more. Returns the written row.
    fn write(&mut self, mut rec: Rec, blind: bool) -> Option<Rec> {
        let mut all = self.all();
        let at = all.iter().position(|r| r.id == rec.id);
        match at {
            Some(i) if blind || all[i].version == rec.version => {
                rec.version = all[i].version + 1;
                all[i] = rec.clone();
            }
            Some(_) => return None,
            None => {
                rec.version = 1;
                all.push(rec.clone());
            }
        }
        self.save(all);
        Some(rec)
    }
}

/// One worker (one incarnation).
struct Worker {
    style: Style,
    bug: Option<Bug>,
    /// `worker#incarnation`: who holds a lease.
    owner: String,
    worker_id: String,
    key_prefix: String,
    config: Config,
    clock: TokioClock,
    transport: Arc<dyn Transport>,
    /// Locked only between awaits: the runtime is single-threaded, so every read-modify-
    /// write of the store is atomic with respect to other workers.
    store: Mutex<Store>,
    keys: AtomicU64,
    /// [`Bug::RedoEverything`] redoes the completed steps once per incarnation.
    redone: Mutex<bool>,
}

/// What became of one intent's turn in a pass.
#[derive(Default)]
struct Turn {
    changes: Vec<StateChange>,
    sent: bool,
}

impl Turn {
    fn note(&mut self, before: St, after: &Rec) {
        if before != after.state {
            self.changes.push(StateChange {
                intent_id: after.id.clone(),
                state: after.state.name().into(),
                at_ms: None,
            });
        }
    }
}

impl Worker {
    fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    fn limits(&self) -> &Limits {
        &self.config.limits
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn has(&self, bug: Bug) -> bool {
        self.bug == Some(bug)
    }

    fn new_key(&self) -> String {
        format!("{}.{}", self.key_prefix, self.keys.fetch_add(1, Ordering::SeqCst) + 1)
    }

    fn service(&self, action: &Action) -> Option<&Service> {
        self.config.services.get(action.service())
    }

    fn propose_now(&self, spec: &IntentSpec) -> Result<(), Refusal> {
        let action = match Action::parse(&spec.action, &spec.params) {
            Ok(a) => a,
            Err(e @ ActionError::Unsupported(_)) => return Err(Refusal::Unsupported(e.to_string())),
            Err(e) => return Err(Refusal::Other(e.to_string())),
        };
        if self.service(&action).is_none() {
            return Err(Refusal::Unsupported(format!("service {} is not configured", action.service())));
        }
        let mut store = self.store();
        if let Some(existing) = store.get(&spec.id) {
            return if existing.action == spec.action && existing.params == action.params() {
                Ok(())
            } else {
                Err(Refusal::Other(format!("intent {} was recorded with another payload", spec.id)))
            };
        }
        let (state, reason) = match &spec.replaces {
            None => (St::Recorded, None),
            Some(old) if store.get(old).is_none() => {
                return Err(Refusal::Other(format!("{} replaces unknown intent {old}", spec.id)));
            }
            Some(old) => match self.lineage(&store, old) {
                Ancestry::Wait => (St::Blocked, None),
                other => other.verdict(),
            },
        };
        let rec = Rec {
            id: spec.id.clone(),
            action: spec.action.clone(),
            params: action.params(),
            replaces: spec.replaces.clone(),
            state,
            key: self.new_key(),
            previous_keys: vec![],
            attempts: 0,
            maybe_executed: false,
            key_first_sent_ms: None,
            last_sent_ms: None,
            external_id: None,
            last_error: None,
            reason,
            lease_owner: None,
            lease_epoch: 0,
            lease_until_ms: 0,
            version: 0,
            precondition: None,
            tx_hash: None,
            raw_tx: None,
            nonce: None,
            from: None,
        };
        store.write(rec, false).map(|_| ()).ok_or_else(|| Refusal::Other("store conflict".into()))
    }

    /// What the intents a replacement replaces, directly or not, allow it: every supported
    /// action is exclusive, so one effect anywhere in the lineage cancels it.
    fn lineage(&self, store: &Store, predecessor: &str) -> Ancestry {
        let all = store.all();
        let mut next = Some(predecessor.to_string());
        let mut seen = 0;
        while let Some(id) = next.take() {
            seen += 1;
            let Some(p) = all.iter().find(|r| r.id == id) else { return Ancestry::Escalate(id) };
            match p.state {
                St::Confirmed => return Ancestry::Cancel(id),
                St::Escalated => return Ancestry::Escalate(id),
                St::Failed => {}
                // The bug: an unknown predecessor is as good as a failed one.
                St::Unknown if self.has(Bug::ReplacementWhileUnknown) => {}
                _ => return Ancestry::Wait,
            }
            next = p.replaces.clone().filter(|_| seen <= all.len());
        }
        Ancestry::Run
    }

    /// Takes or renews the lease on `rec` in memory; false while another live worker holds it.
    fn lease(&self, rec: &mut Rec, now: u64) -> bool {
        if self.has(Bug::NoLease) {
            return true;
        }
        let mine = rec.lease_owner.as_deref() == Some(self.owner.as_str());
        let earlier_life = rec
            .lease_owner
            .as_deref()
            .and_then(|o| o.rsplit_once('#'))
            .is_some_and(|(worker, _)| worker == self.worker_id);
        if !(rec.lease_owner.is_none() || rec.lease_until_ms < now || mine || earlier_life) {
            return false;
        }
        if !mine {
            rec.lease_owner = Some(self.owner.clone());
            rec.lease_epoch += 1;
        }
        rec.lease_until_ms = now + self.limits().lease_ms;
        true
    }

    fn write(&self, rec: Rec) -> Option<Rec> {
        let blind = self.has(Bug::NoLease);
        self.store().write(rec, blind)
    }

    /// A negative answer is final once every request sent could no longer land and every
    /// read could no longer lag.
    fn settled(&self, rec: &Rec, contract: &Contract, now: u64) -> bool {
        rec.last_sent_ms.is_none_or(|t| {
            now >= t
                + contract.settle_ms_max
                + contract.read_lag_ms_max
                + self.limits().request_timeout_ms
                + MARGIN_MS
        })
    }

    /// Whether a resend under the current key is a replay of the first send, if that landed.
    fn key_safe(&self, rec: &Rec, contract: &Contract, now: u64) -> bool {
        let honored = contract.idempotency_keys == KeyPolicy::Honored || self.has(Bug::KeysAssumedHonored);
        let retained = self.has(Bug::KeyOutlivesRetention)
            || rec.key_first_sent_ms.is_some_and(|t| {
                now + self.limits().request_timeout_ms + MARGIN_MS < t + contract.key_retention_ms
            });
        honored && contract.acks == Acks::Reliable && retained
    }

    /// One pass over the unresolved intents: first the blocked replacements (one that its
    /// lineage releases is sent in the next pass, as the reference does), then sends and
    /// lookups, concurrently.
    async fn pass(&self) -> Turn {
        let (blocked, active): (Vec<Rec>, Vec<Rec>) = self
            .store()
            .all()
            .into_iter()
            .filter(|r| !r.state.terminal())
            .partition(|r| r.state == St::Blocked);
        let mut all = Turn::default();
        for rec in blocked {
            all.changes.extend(self.turn(&rec.id).await.changes);
        }
        let turns = futures_util::future::join_all(active.iter().map(|r| self.turn(&r.id))).await;
        for t in turns {
            all.sent |= t.sent;
            all.changes.extend(t.changes);
        }
        if self.has(Bug::RedoEverything) {
            self.redo_everything(&mut all);
        }
        all
    }

    /// [`Bug::RedoEverything`]: after a step failed or turned uncertain, every completed
    /// step goes back to the start with a new key, once.
    fn redo_everything(&self, turn: &mut Turn) {
        let troubled = turn.changes.iter().any(|c| c.state == "unknown" || c.state == "failed");
        let mut redone = self.redone.lock().unwrap_or_else(|p| p.into_inner());
        if !troubled || *redone {
            return;
        }
        *redone = true;
        let mut store = self.store();
        for mut rec in store.all().into_iter().filter(|r| r.state == St::Confirmed) {
            rec.state = St::Recorded;
            rec.key = self.new_key();
            rec.key_first_sent_ms = None;
            rec.maybe_executed = false;
            rec.reason = Some("the workflow is run again".into());
            if let Some(rec) = store.write(rec, true) {
                turn.note(St::Confirmed, &rec);
            }
        }
    }

    /// One intent's turn in a pass.
    async fn turn(&self, id: &str) -> Turn {
        let mut turn = Turn::default();
        let now = self.now();
        let Some(stored) = self.store().get(id) else { return turn };
        let mut rec = stored.clone();
        if rec.state.terminal() || !self.lease(&mut rec, now) {
            return turn;
        }
        let Some(action) = rec.action() else { return turn };
        match stored.state {
            St::Blocked => {
                let ancestry = match rec.replaces.as_deref() {
                    Some(old) => self.lineage(&self.store(), old),
                    None => Ancestry::Run,
                };
                if ancestry == Ancestry::Wait {
                    return turn;
                }
                (rec.state, rec.reason) = ancestry.verdict();
                if let Some(rec) = self.write(rec) {
                    turn.note(St::Blocked, &rec);
                }
            }
            St::Recorded => {
                let backoff =
                    rec.last_sent_ms.map(|t| t + self.limits().request_timeout_ms * u64::from(rec.attempts));
                if backoff.is_some_and(|t| now < t) {
                    return turn;
                }
                let rotate = self.has(Bug::KeyPerAttempt) && rec.attempts > 0;
                self.send(rec, &action, St::Recorded, rotate, &mut turn).await;
            }
            St::Submitted | St::Unknown => {
                if stored.state == St::Unknown && self.has(Bug::NoReconciliation) {
                    return turn;
                }
                self.resolve(rec, &action, stored.state, &mut turn).await;
            }
            _ => {}
        }
        turn
    }

    /// An intent that may have taken effect: resend under its key where that is safe,
    /// otherwise look.
    async fn resolve(&self, mut rec: Rec, action: &Action, from: St, turn: &mut Turn) {
        let Some(contract) = self.service(action).map(|s| s.contract.clone()) else { return };
        let now = self.now();
        if self.has(Bug::UniqueIdsAssumed) && matches!(action, Action::CreateWorkspace { .. }) {
            return self.send(rec, action, from, false, turn).await;
        }
        let paused_enough = rec
            .last_sent_ms
            .is_none_or(|t| now >= t + self.limits().request_timeout_ms * u64::from(rec.attempts.max(1)));
        let guarded = services::resend_is_guarded(action, &contract);
        if self.style == Style::KeyRetry
            && (self.key_safe(&rec, &contract, now) || guarded)
            && rec.attempts < self.limits().attempts_max
        {
            if !paused_enough {
                return;
            }
            if self.has(Bug::KeyOutlivesRetention) {
                // The key is believed to make this resend's answer the intent's answer.
                rec.maybe_executed = false;
            }
            let rotate = self.has(Bug::KeyPerAttempt);
            return self.send(rec, action, from, rotate, turn).await;
        }
        let found = self.lookup(&rec, action).await;
        self.decide(rec, action, from, found, &contract, turn).await;
    }

    async fn lookup(&self, rec: &Rec, action: &Action) -> Lookup {
        match self.service(action) {
            Some(service) => {
                services::lookup(action, &rec.as_intent(), &self.config, service, self.transport.as_ref())
                    .await
            }
            None => Lookup::Failed { error: "service not configured".into() },
        }
    }

    /// What a lookup means for an intent that may have taken effect.
    async fn decide(
        &self,
        mut rec: Rec,
        action: &Action,
        from: St,
        found: Lookup,
        contract: &Contract,
        turn: &mut Turn,
    ) {
        let now = self.now();
        match found {
            Lookup::Found { external_id, params_match } => {
                rec.external_id = Some(external_id);
                rec.state = if params_match { St::Confirmed } else { St::Escalated };
                rec.reason =
                    Some(if params_match { "found by lookup" } else { "found with other parameters" }.into());
            }
            Lookup::Absent if self.settled(&rec, contract, now) || self.has(Bug::TrustsStaleRead) => {
                if rec.attempts >= self.limits().attempts_max {
                    rec.state = St::Failed;
                    rec.reason = Some("no effect, and none can appear any more".into());
                } else {
                    // Nothing landed and nothing can: a new send is safe. Where acks may lie
                    // the old key may hold a hollow success, so a new key.
                    rec.maybe_executed = false;
                    let rotate = contract.acks == Acks::MayLie || self.has(Bug::TrustsStaleRead);
                    return self.send(rec, action, from, rotate, turn).await;
                }
            }
            Lookup::Superseded { what } if self.settled(&rec, contract, now) => {
                rec.state = St::Failed;
                rec.reason = Some(format!("it can no longer take effect: {what}"));
            }
            Lookup::Absent
                if services::resend_is_guarded(action, contract)
                    && rec.attempts < self.limits().attempts_max =>
            {
                // Neither a conditional put nor a signed transaction can land twice.
                if rec.last_sent_ms.is_some_and(|t| now < t + self.limits().request_timeout_ms) {
                    return;
                }
                return self.send(rec, action, from, false, turn).await;
            }
            Lookup::Absent | Lookup::Failed { .. } | Lookup::Superseded { .. } => {
                if from != St::Submitted {
                    return;
                }
                rec.state = St::Unknown;
                rec.maybe_executed = true;
                rec.reason = Some("its sender stopped before recording the answer".into());
            }
        }
        if let Some(rec) = self.write(rec) {
            turn.note(from, &rec);
        }
    }

    /// Marks the intent submitted, sends it, and records what the answer means.
    async fn send(&self, mut rec: Rec, action: &Action, from: St, rotate: bool, turn: &mut Turn) {
        let Some(service) = self.service(action).cloned() else { return };
        if services::needs_preparation(action, &rec.evidence(), &service.contract)
            && let Err(error) = self.prepare(&mut rec, action, &service).await
        {
            if from == St::Recorded {
                rec.attempts += 1;
                rec.last_sent_ms = Some(self.now());
                rec.last_error = Some(error);
                if rec.attempts >= self.limits().attempts_max {
                    rec.state = St::Failed;
                    rec.reason = Some("never sent: its first send could not be prepared".into());
                }
                if let Some(rec) = self.write(rec) {
                    turn.note(from, &rec);
                }
            }
            return;
        }
        // From here to the write nothing awaits: a nonce allocated above is claimed by the
        // write before another intent's turn can allocate.
        let now = self.now();
        if rotate {
            let old = std::mem::replace(&mut rec.key, self.new_key());
            rec.previous_keys.push(old);
            rec.key_first_sent_ms = None;
        }
        rec.state = St::Submitted;
        rec.attempts += 1;
        rec.key_first_sent_ms.get_or_insert(now);
        rec.last_sent_ms = Some(now);
        // Durable before a byte leaves.
        let Some(mut rec) = self.write(rec) else { return };
        turn.note(from, &rec);
        turn.sent = true;
        loop {
            if !self.has(Bug::NoLease) && self.now() >= rec.lease_until_ms {
                return;
            }
            let outcome = match self.request(&rec, action, &service) {
                Ok(request) => {
                    let answer = self.transport.send(request).await;
                    self.classify(action, &rec, answer)
                }
                Err(error) => WriteOutcome::NotExecuted { error },
            };
            let read_back_done = (service.contract.acks == Acks::MayLie && !self.has(Bug::TrustsAck))
                || matches!(action, Action::Transfer { .. });
            let read_back = match outcome {
                WriteOutcome::Done { .. } if read_back_done => Some(self.lookup(&rec, action).await),
                WriteOutcome::Conflict { .. } => Some(self.lookup(&rec, action).await),
                _ => None,
            };
            // Still ours? A worker that lost its lease while the request was out writes nothing.
            let now = self.now();
            if !self.has(Bug::NoLease) {
                let current = self.store().get(&rec.id);
                if current.is_none_or(|c| c.version != rec.version) || now > rec.lease_until_ms {
                    return;
                }
            }
            let strong = service.contract.reads == Reads::Strong;
            match self.outcome(rec, action, outcome, read_back, strong).await {
                Next::Write(new) => {
                    if let Some(new) = self.write(new) {
                        turn.note(St::Submitted, &new);
                    }
                    return;
                }
                Next::SendAgain(mut again, rotate) => {
                    if rotate {
                        let old = std::mem::replace(&mut again.key, self.new_key());
                        again.previous_keys.push(old);
                        again.key_first_sent_ms = None;
                    }
                    again.attempts += 1;
                    again.key_first_sent_ms.get_or_insert(now);
                    again.last_sent_ms = Some(now);
                    match self.write(again) {
                        Some(written) => rec = written,
                        None => return,
                    }
                }
                Next::Nothing => return,
            }
        }
    }

    /// The write request for `rec`, as the reference builds it, minus what a bug leaves out.
    fn request(&self, rec: &Rec, action: &Action, service: &Service) -> Result<HttpRequest, String> {
        let mut request =
            services::write_request(action, &rec.as_intent(), &self.config, service, rec.lease_epoch)?;
        let keyless = self.has(Bug::NaiveRetry) && rec.attempts > 1
            || self.has(Bug::UniqueIdsAssumed) && rec.maybe_executed;
        if keyless {
            request.headers.retain(|(name, _)| name != "idempotency-key");
        }
        if self.has(Bug::NoLease) {
            request.headers.retain(|(name, _)| name != "fencing-token");
        }
        if self.has(Bug::Unfenced) {
            request.headers.retain(|(name, _)| name != "if-match" && name != "if-none-match");
        }
        Ok(request)
    }

    /// Reads and records what a first send needs: a put's precondition, a transfer's
    /// signature with the lowest nonce at or above the node's pending one that no intent of
    /// the store holds.
    async fn prepare(&self, rec: &mut Rec, action: &Action, service: &Service) -> Result<(), String> {
        match action {
            Action::PutObject { .. } => {
                let found =
                    services::read_precondition(action, &self.config, service, self.transport.as_ref())
                        .await?;
                rec.precondition = Some(found);
                Ok(())
            }
            Action::Transfer { .. } => {
                let key = services::chain_key(&self.config)?;
                let facts =
                    services::chain_facts(key.address(), &self.config, service, self.transport.as_ref())
                        .await?;
                let taken: Vec<u64> = self
                    .store()
                    .all()
                    .iter()
                    .filter(|r| r.from.as_deref() == Some(key.address()))
                    // A transfer that failed without reaching the node leaves its nonce unused.
                    .filter(|r| r.state != St::Failed || r.maybe_executed)
                    .filter_map(|r| r.nonce)
                    .collect();
                let mut nonce = facts.pending_nonce;
                while taken.contains(&nonce) {
                    nonce += 1;
                }
                let signed = key.sign_transfer(&facts.transfer(action, nonce)?).map_err(|e| e.to_string())?;
                rec.record_signed(signed);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// [`Bug::ReSignAfterTimeout`]: a new transaction for the same transfer, with the nonce the
    /// node says is next.
    async fn resign(&self, rec: &mut Rec, action: &Action) -> Result<(), String> {
        let service = self.service(action).ok_or("no chain service")?;
        let key = services::chain_key(&self.config)?;
        let facts =
            services::chain_facts(key.address(), &self.config, service, self.transport.as_ref()).await?;
        let signed =
            key.sign_transfer(&facts.transfer(action, facts.pending_nonce)?).map_err(|e| e.to_string())?;
        rec.record_signed(signed);
        Ok(())
    }

    fn classify(&self, action: &Action, rec: &Rec, answer: Result<HttpResponse, SendError>) -> WriteOutcome {
        if self.has(Bug::UniqueIdsAssumed)
            && let Ok(response) = &answer
            && response.status == 409
            && response.json().and_then(|b| b.pointer("/error/code").cloned())
                == Some(json!("workspace_exists"))
        {
            return WriteOutcome::Done { external_id: String::new() };
        }
        services::classify_write(action, &rec.as_intent(), answer)
    }

    /// What an answer makes of the intent.
    async fn outcome(
        &self,
        mut rec: Rec,
        action: &Action,
        outcome: WriteOutcome,
        read_back: Option<Lookup>,
        strong_reads: bool,
    ) -> Next {
        let limits = self.limits().clone();
        let (state, reason) = match outcome {
            WriteOutcome::Done { external_id } => match read_back {
                None | Some(Lookup::Found { params_match: true, .. }) => {
                    rec.external_id = Some(external_id);
                    rec.last_error = None;
                    (St::Confirmed, "confirmed by the service".to_string())
                }
                Some(_) => {
                    rec.maybe_executed = true;
                    (St::Unknown, "a success the read-back does not show".to_string())
                }
            },
            WriteOutcome::Fenced { .. } => return Next::Nothing,
            WriteOutcome::Ambiguous { .. }
                if self.has(Bug::ReSignAfterTimeout)
                    && matches!(action, Action::Transfer { .. })
                    && rec.attempts < limits.attempts_max =>
            {
                // The bug: "the node never got it", so a fresh transaction with its next
                // nonce. The first one may well be mined already.
                rec.maybe_executed = true;
                match self.resign(&mut rec, action).await {
                    Ok(()) => return Next::SendAgain(rec, false),
                    Err(error) => (St::Unknown, format!("could not sign again: {error}")),
                }
            }
            other if self.has(Bug::NaiveRetry) => {
                // Whatever went wrong, try again at once; the last answer is the truth.
                if !matches!(other, WriteOutcome::Rejected { .. }) && rec.attempts < limits.attempts_max {
                    return Next::SendAgain(rec, false);
                }
                (St::Failed, format!("gave up: {other:?}"))
            }
            WriteOutcome::Rejected { error } => {
                rec.last_error = Some(error.clone());
                if rec.maybe_executed {
                    (St::Unknown, format!("rejected, but an earlier send may have landed: {error}"))
                } else {
                    (St::Failed, format!("rejected: {error}"))
                }
            }
            WriteOutcome::Conflict { error, definite } => {
                rec.last_error = Some(error.clone());
                match read_back {
                    Some(Lookup::Found { external_id, params_match: true }) => {
                        rec.external_id = Some(external_id);
                        (St::Confirmed, format!("an earlier send landed: {error}"))
                    }
                    Some(Lookup::Superseded { what }) if definite && strong_reads && !rec.maybe_executed => {
                        (St::Failed, format!("refused: {error}; {what}"))
                    }
                    _ => (St::Unknown, format!("refused, and the read-back cannot tell why yet: {error}")),
                }
            }
            WriteOutcome::NotExecuted { error } => {
                rec.last_error = Some(error.clone());
                if rec.maybe_executed {
                    (St::Unknown, format!("not executed, but an earlier send may have landed: {error}"))
                } else if rec.attempts >= limits.attempts_max {
                    (St::Failed, format!("never executed in {} attempts: {error}", rec.attempts))
                } else {
                    (St::Recorded, format!("not executed, will retry: {error}"))
                }
            }
            WriteOutcome::Ambiguous { error } => {
                rec.maybe_executed = true;
                rec.last_error = Some(error.clone());
                if self.has(Bug::TimeoutAsNo) {
                    (St::Failed, format!("taken as a no: {error}"))
                } else if self.has(Bug::KeyPerAttempt) && rec.attempts < limits.attempts_max {
                    // A retrying client: again at once, under a key of its own.
                    return Next::SendAgain(rec, true);
                } else if self.style == Style::LookupFirst {
                    return self.read_back_at_once(rec, action).await;
                } else {
                    (St::Unknown, format!("no definite answer: {error}"))
                }
            }
        };
        rec.state = state;
        rec.reason = Some(reason);
        Next::Write(rec)
    }

    /// [`Style::LookupFirst`] right after an uncertain answer.
    async fn read_back_at_once(&self, mut rec: Rec, action: &Action) -> Next {
        match self.lookup(&rec, action).await {
            Lookup::Found { external_id, params_match } => {
                rec.external_id = Some(external_id);
                rec.state = if params_match { St::Confirmed } else { St::Escalated };
                rec.reason = Some("found by the read-back".into());
            }
            _ if self.has(Bug::NoUnknownState) => {
                rec.state = St::Failed;
                rec.reason = Some("the read-back did not find it".into());
            }
            Lookup::Absent if self.has(Bug::TrustsStaleRead) => {
                if rec.attempts >= self.limits().attempts_max {
                    rec.state = St::Failed;
                    rec.reason = Some("the read-back did not find it".into());
                } else {
                    rec.maybe_executed = false;
                    return Next::SendAgain(rec, true);
                }
            }
            _ => {
                rec.state = St::Unknown;
                rec.reason = Some("no definite answer, and the read-back proves nothing yet".into());
            }
        }
        Next::Write(rec)
    }

    async fn drain_for(&self, timeout_ms: u64) -> Vec<StateChange> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        let mut changes = Vec::new();
        loop {
            let turn = self.pass().await;
            let progressed = turn.sent || !turn.changes.is_empty();
            changes.extend(turn.changes);
            let busy = self.store().all().iter().any(|r| matches!(r.state, St::Recorded | St::Submitted));
            if !busy || tokio::time::Instant::now() >= deadline {
                return changes;
            }
            if !progressed {
                tokio::time::sleep(Duration::from_millis(self.limits().pass_pause_ms.max(1))).await;
            }
        }
    }
}

/// What a replacement's lineage allows it.
#[derive(Debug, PartialEq, Eq)]
enum Ancestry {
    /// Every earlier intent failed: it may run.
    Run,
    /// One is still unresolved.
    Wait,
    /// This one took effect.
    Cancel(String),
    /// This one is escalated or missing: running could do it twice.
    Escalate(String),
}

impl Ancestry {
    fn verdict(self) -> (St, Option<String>) {
        match self {
            Ancestry::Run | Ancestry::Wait => (St::Recorded, None),
            Ancestry::Cancel(id) => {
                (St::Failed, Some(format!("cancelled: {id}, in its lineage, is confirmed")))
            }
            Ancestry::Escalate(id) => {
                (St::Escalated, Some(format!("{id}, in its lineage, is escalated or missing")))
            }
        }
    }
}

enum Next {
    Write(Rec),
    /// Send again at once (with a new key when true).
    SendAgain(Rec, bool),
    Nothing,
}

impl SimExecutor for Worker {
    fn propose<'a>(&'a mut self, intent: &'a IntentSpec) -> BoxFuture<'a, Result<(), Refusal>> {
        Box::pin(async move { self.propose_now(intent) })
    }

    fn drain(&mut self, timeout_ms: u64) -> BoxFuture<'_, Result<Vec<StateChange>, String>> {
        Box::pin(async move { Ok(self.drain_for(timeout_ms).await) })
    }

    fn reconcile(&mut self) -> BoxFuture<'_, Result<Vec<StateChange>, String>> {
        Box::pin(async move {
            if self.has(Bug::NoReconciliation) {
                return Ok(vec![]);
            }
            Ok(self.pass().await.changes)
        })
    }

    fn status(&mut self) -> BoxFuture<'_, Result<Vec<Claim>, String>> {
        Box::pin(async move { Ok(self.store().all().iter().map(Rec::claim).collect()) })
    }
}
