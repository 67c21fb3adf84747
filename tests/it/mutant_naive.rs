//! `Naive`: a small in-process executor for the sim driver, correct unless one bug is
//! switched on. The mutant tests (`mutants.rs`) switch on one [`Bug`] at a time and prove
//! that the catalog and the generator catch it.
//!
//! Without a bug it does what design §1 calls the cure, in as few lines as it can: every
//! intent is written to a JSON file in the state directory before `propose` returns; one
//! idempotency key per intent; a send whose answer is lost makes the intent `unknown`; an
//! unknown intent is resolved by a same-key resend where the contract makes that safe, or by
//! a lookup whose "not there" is believed only once the settle and read-lag bounds have
//! passed; a success from a service whose acks may lie, and every accepted message, is read
//! back (a message in the recipient's inbox); a refusal that needs a person's decision (401,
//! 403, 400, 422) is never sent again: escalated, or looked up first where an earlier send may
//! have landed; a replacement waits
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

// Paths spelt out: `tests/benches/search.rs` loads this file with `#[path]`, which makes it a
// `mod.rs`-style file whose submodules would otherwise be looked for next to it.
#[path = "mutant_naive/resolve.rs"]
mod resolve;
#[path = "mutant_naive/send.rs"]
mod send;
#[path = "mutant_naive/store.rs"]
mod store;
#[path = "mutant_naive/webhooks.rs"]
mod webhooks;
#[path = "mutant_naive/worker.rs"]
mod worker;

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use executor::world::{TokioClock, Transport};
use results::Claim;
use runner::sim::{BoxFuture, Refusal, SimExecutor, SimFactory, StateChange, WebhookReceiver, WorkerSetup};
use scenarios::IntentSpec;
use vocabulary::protocol::Config;

use store::{Rec, Store};
use webhooks::HookStore;

/// Added to every bound before a negative answer is believed (the reference's margin).
const MARGIN_MS: u64 = executor::intent_engine::SAFETY_MARGIN_MS;
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
    /// An email the API accepted is taken as delivered: its 200 confirms the message, and the
    /// recipient's inbox is never read.
    TrustThe202,
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
    /// A fencing token is sent, but it is a constant: no leases are taken, so there is no
    /// epoch to send, and `1` satisfies a service that asks for one. The safeguard is there
    /// in form only: a paused worker's token is as new as its successor's.
    ConstantFencingToken,
    /// A create is resent without a key after an uncertain answer, trusting the service to
    /// refuse a second object with the same external id (a 409 is taken as "ours").
    UniqueIdsAssumed,
    /// When any step fails or turns uncertain, the completed steps are executed again.
    RedoEverything,
    /// A step's parameter is resolved again at every send, from what the service shows now
    /// (an object's ETag by a HEAD), instead of once from its predecessor's recorded result.
    ReResolve,
    /// The nonce trap: after an uncertain broadcast, the transfer is signed anew with the
    /// node's next nonce and sent, as if the first had never reached the node.
    ReSignAfterTimeout,
    /// A put carries no `If-Match` or `If-None-Match`: it overwrites whatever is there.
    Unfenced,
    /// A lookup always comes back: the reconciler takes an uncertain intent off its queue by
    /// recording the likeliest verdict ("not there": `failed`) before it asks, and puts the
    /// lookup's answer in its place when that arrives. A crash in between leaves the guess.
    VerdictBeforeLookup,
    /// The precondition guards the first write: a resend repeats a write already decided,
    /// so it goes without `If-Match` or `If-None-Match` (the 412 a conditional resend can
    /// get for its own earlier write is taken as noise to avoid).
    UnconditionalResend,
    /// A signed transaction means nothing until the node has it: the signature is kept in
    /// memory and recorded with the broadcast's answer, so a crash in between leaves an
    /// intent that was sent but has no signed bytes, and it is signed anew.
    SignatureInMemory,
    /// One timestamp is enough: the settle bound is measured from when the intent was
    /// first sent, though a later attempt can still commit a settle time after it was sent.
    SettleFromFirstSend,
    /// A refused intent has failed: the replacement's gate reads the answer the original got,
    /// not its state, and lets the replacement run after a refusal the executor itself
    /// retries (a 429 says "not now", not "no").
    RefusalReleasesReplacement,
    /// A lease is checked, then taken: the worker that saw no live lease writes its own
    /// without comparing the row's version, as if nobody could have taken it in between.
    /// Two workers that looked at the same moment both own the intent.
    LeaseWithoutCas,
    /// The service's clock is the executor's: an effect a lookup finds is the intent's only
    /// if the service's `created` stamp falls before the latest moment one of its sends
    /// could have landed, read on the executor's own clock; one stamped later is taken for
    /// someone else's.
    ServiceClockTrusted,
    /// An answer is as fresh as the moment it is read: a lookup's "not there" is judged
    /// final against the clock when its answer is taken in, not when it was asked, so a
    /// worker paused in between believes an answer older than the settle bound.
    SettledWhenRead,
    /// A refusal that needs a person's decision (401, 403, 400, 422) is taken for a bad
    /// moment, like a 429: retried within the attempts. Once the permission is granted or the
    /// input accepted, the retry goes through, and nobody decided anything.
    RetryA403,
    /// A message the inbox shows was never delivered is sent again under the key it was sent
    /// with, as if a key could only ever replay a delivery: the service replays the hollow
    /// 200 it saved under that key, and nothing is sent.
    OldKeyResend,
    /// More than it was asked: where a service refuses a write until a person decides, the
    /// executor decides itself and writes the nearest thing it can (what is left of the
    /// payment, half the transfer, the workspace under another name, the object under another
    /// key), and after a refund it emails the customer a receipt nobody asked for. Each is an
    /// effect no intent authorised.
    Overreach,
    /// Every delivery of an event is new work: its intent is started again (a new key)
    /// whether or not the event was taken before.
    WebhookNoDedupe,
    /// The 2xx goes first, and the work after it: a crash in between leaves an event the
    /// service believes delivered and nobody acted on.
    WebhookAckFirst,
    /// A delivery is believed as it comes: no signature check, and the event's copy of the
    /// payment taken for its state.
    WebhookTrustsBody,
}

/// The waits a careful executor chooses for itself, within the limits the harness announces.
/// Every verdict must hold whatever it chooses: the accuracy grid (`accuracy.rs`) runs the
/// catalog over several settings of each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// Each request's timeout: at most the announced `request_timeout_ms` (`None`: that one).
    pub request_timeout_ms: Option<u64>,
    /// Added to the settle and read-lag bounds (and to a key's retention) before a "not
    /// there" is believed or a key trusted.
    pub margin_ms: u64,
    /// The wait between attempts, per attempt made (`None`: the request timeout).
    pub backoff_ms: Option<u64>,
    /// How long a worker owns an intent: at most the announced `lease_ms` (`None`: that one).
    pub lease_ms: Option<u64>,
    /// The pause between passes while draining (`None`: the announced one).
    pub pass_pause_ms: Option<u64>,
}

impl Timing {
    /// The announced limits with this executor's own waits in place: its request timeout and
    /// lease never longer than the harness announced, its pause as it likes. (Margin and
    /// backoff are not limits: the worker reads them from its choices.)
    pub fn apply(&self, limits: &mut vocabulary::protocol::Limits) {
        limits.request_timeout_ms =
            self.request_timeout_ms.map_or(limits.request_timeout_ms, |t| t.min(limits.request_timeout_ms));
        limits.lease_ms = self.lease_ms.map_or(limits.lease_ms, |t| t.min(limits.lease_ms));
        limits.pass_pause_ms = self.pass_pause_ms.unwrap_or(limits.pass_pause_ms);
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            request_timeout_ms: None,
            margin_ms: MARGIN_MS,
            backoff_ms: None,
            lease_ms: None,
            pass_pause_ms: None,
        }
    }
}

/// Choices a correct executor may make otherwise than the reference, each honest
/// (docs/protocol.md §7, "What each terminal state promises").
#[derive(Debug, Clone, Copy, Default)]
pub struct Choices {
    /// A write refused for a person's decision, certainly without effect, ends `failed` (no
    /// effect, none can appear, never sent again) instead of `escalated`.
    pub refusals_fail: bool,
    /// One worker at a time: a lock on the state directory, no leases and no fencing tokens
    /// (row versions still keep two lives' writes apart). A second worker started on the same
    /// state stands by, doing nothing, until the lock is free: its holder crashed.
    pub single_worker: bool,
    /// The actions it supports; the others are refused as unsupported (`None`: all).
    pub actions: Option<&'static [&'static str]>,
    pub timing: Timing,
}

/// The factory: one style, at most one bug, and its honest choices.
#[derive(Debug, Clone, Copy)]
pub struct Naive {
    pub style: Style,
    pub bug: Option<Bug>,
    /// Whether it announces workflow steps (an executor written before them does not).
    pub workflows: bool,
    /// Whether it announces webhooks (intents an event starts).
    pub webhooks: bool,
    pub choices: Choices,
}

impl Naive {
    pub fn correct(style: Style) -> Naive {
        Naive { style, bug: None, workflows: true, webhooks: true, choices: Choices::default() }
    }

    pub fn with(style: Style, bug: Bug) -> Naive {
        Naive { style, bug: Some(bug), workflows: true, webhooks: true, choices: Choices::default() }
    }

    /// The same executor with other choices.
    // The search benchmark, which includes this file, makes none.
    #[allow(dead_code)]
    pub fn choosing(self, choices: Choices) -> Naive {
        Naive { choices, ..self }
    }
}

/// The state directories whose lock a [`Choices::single_worker`] worker holds, with the
/// holder: the sim's stand-in for an exclusive `flock` that a process's death releases.
static STATE_LOCKS: std::sync::LazyLock<Mutex<std::collections::HashMap<std::path::PathBuf, String>>> =
    std::sync::LazyLock::new(Default::default);

impl SimFactory for Naive {
    fn name(&self) -> String {
        match self.bug {
            Some(bug) => format!("naive executor ({:?}, bug {bug:?})", self.style),
            None => format!("naive executor ({:?}, no bug)", self.style),
        }
    }

    fn supports_workflows(&self) -> bool {
        self.workflows
    }

    fn supports_webhooks(&self) -> bool {
        self.webhooks
    }

    fn start(&self, setup: WorkerSetup) -> Result<Box<dyn SimExecutor>, String> {
        let (store, hooks) = if self.bug == Some(Bug::MemoryOnly) {
            (Store::Memory(Vec::new()), HookStore::Memory(Default::default()))
        } else {
            std::fs::create_dir_all(&setup.state_dir).map_err(|e| e.to_string())?;
            (
                Store::File(setup.state_dir.join(STORE_FILE)),
                HookStore::File(setup.state_dir.join(webhooks::HOOKS_FILE)),
            )
        };
        let mut limits = setup.limits;
        self.choices.timing.apply(&mut limits);
        Ok(Box::new(Handle(Arc::new(Worker {
            style: self.style,
            bug: self.bug,
            choices: self.choices,
            state_dir: setup.state_dir.clone(),
            owner: format!("{}#{}", setup.worker_id, setup.incarnation),
            worker_id: setup.worker_id.clone(),
            key_prefix: format!("{}.{}", setup.worker_id, setup.incarnation),
            config: Config {
                worker_id: setup.worker_id,
                services: setup.services,
                secrets: setup.secrets,
                limits,
            },
            clock: setup.clock,
            transport: setup.transport,
            store: Mutex::new(store),
            keys: AtomicU64::new(0),
            redone: Mutex::new(false),
            webhook_url: setup.webhook_url,
            hooks: Mutex::new(hooks),
            listening: Mutex::new(Default::default()),
            webhook_turn: tokio::sync::Mutex::new(()),
        }))))
    }
}

/// One worker (one incarnation).
struct Worker {
    style: Style,
    bug: Option<Bug>,
    choices: Choices,
    /// Where its store lives; with [`Choices::single_worker`], what its lock is on.
    state_dir: std::path::PathBuf,
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
    /// Where it listens for webhooks, if the scenario has intents an event starts.
    webhook_url: Option<String>,
    hooks: Mutex<HookStore>,
    /// What this life knows of its endpoint beyond the file.
    listening: Mutex<webhooks::Listening>,
    /// Deliveries are taken one at a time.
    webhook_turn: tokio::sync::Mutex<()>,
}

/// A worker as the sim runs it: shared with its endpoint, which takes deliveries beside it.
struct Handle(Arc<Worker>);

impl Worker {
    /// Whether this worker may act: always, but with [`Choices::single_worker`] only while it
    /// holds (or can take) the lock on its state directory.
    fn active(&self) -> bool {
        if !self.choices.single_worker {
            return true;
        }
        let mut locks = STATE_LOCKS.lock().unwrap_or_else(|p| p.into_inner());
        let holder = locks.entry(self.state_dir.clone()).or_insert_with(|| self.owner.clone());
        *holder == self.owner
    }
}

/// A crashed worker's task is dropped, as a killed process's lock is released.
impl Drop for Worker {
    fn drop(&mut self) {
        if self.choices.single_worker {
            let mut locks = STATE_LOCKS.lock().unwrap_or_else(|p| p.into_inner());
            if locks.get(&self.state_dir) == Some(&self.owner) {
                locks.remove(&self.state_dir);
            }
        }
    }
}

impl SimExecutor for Handle {
    fn propose<'a>(&'a mut self, intent: &'a IntentSpec) -> BoxFuture<'a, Result<(), Refusal>> {
        Box::pin(async move { self.0.propose_now(intent) })
    }

    fn drain(&mut self, timeout_ms: u64) -> BoxFuture<'_, Result<Vec<StateChange>, String>> {
        Box::pin(async move { Ok(self.0.drain_for(timeout_ms).await) })
    }

    fn reconcile(&mut self) -> BoxFuture<'_, Result<Vec<StateChange>, String>> {
        Box::pin(async move {
            if self.0.has(Bug::NoReconciliation) || !self.0.active() {
                return Ok(vec![]);
            }
            Ok(self.0.pass().await.changes)
        })
    }

    fn status(&mut self) -> BoxFuture<'_, Result<Vec<Claim>, String>> {
        Box::pin(async move { Ok(self.0.store().all().iter().map(Rec::claim).collect()) })
    }

    fn webhooks(&self) -> Option<Arc<dyn WebhookReceiver>> {
        Some(Arc::new(webhooks::Receiver(Arc::clone(&self.0))))
    }
}
