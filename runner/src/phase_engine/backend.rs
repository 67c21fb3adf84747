//! What the phase engine asks of a backend ([`Backend`]): start, crash, pause and resume a
//! worker, send it a request and wait for the answer ([`Request`], [`Reply`], [`Step`]), and
//! the workers it keeps ([`Roster`], each a [`Life`]). The sim and live backends implement it.

use std::collections::BTreeMap;

use results::Claim;
use scenarios::IntentSpec;
use tokio::sync::oneshot;

/// A state change an executor reports, for the timeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    pub intent_id: String,
    pub state: String,
    /// When the executor made the change, on the run's clock; `None` stamps it when the call
    /// that made it returns (late, for a long drain: the checker's lineage test reads these
    /// times, so an executor that knows them should say).
    pub at_ms: Option<u64>,
}

/// What the engine asks of a worker: the protocol's requests after `init`.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// Record the intent durably.
    Propose(&'a IntentSpec),
    /// Work until nothing is recorded or submitted, within the backend's drain bound.
    Drain,
    /// One reconciliation pass.
    Reconcile,
    /// Every intent the worker knows, with its state.
    Status,
}

impl Request<'_> {
    /// The protocol's name for the request.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Propose(_) => "propose",
            Request::Drain => "drain",
            Request::Reconcile => "reconcile",
            Request::Status => "status",
        }
    }
}

/// A worker's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `propose`: the intent is recorded.
    Accepted,
    /// `propose`: refused. An unsupported action is reported as such, not as a failure.
    Refused { unsupported: bool, why: String },
    /// `drain` or `reconcile` ended (a drain that ran out of time too: another worker's lease
    /// may hold an intent, which is no fault of this one). The state changes the backend has
    /// not already put on the timeline.
    Changes(Vec<StateChange>),
    /// `status`: the worker's claims.
    Claims(Vec<Claim>),
    /// The worker answered with an error; the sentence says which worker and what.
    Failed(String),
}

/// Why a call returned no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The worker is gone: crashed by an event (and perhaps started again since).
    Gone,
    /// The executor misbehaved (hung, exited, broke the protocol); the sentence says how.
    Broken(String),
}

/// A request that reached a request point: the events due there, and, where the backend holds
/// the request's answer until they are applied, the gate that lets it go.
#[derive(Debug)]
pub struct Reached {
    /// Indexes into the scenario's events.
    pub events: Vec<usize>,
    pub gate: Option<oneshot::Sender<()>>,
}

/// One step of a wait: a request point was reached (the engine applies its events and waits
/// on), the wait is over, or the executor broke.
#[derive(Debug)]
pub enum Step<T> {
    Reached(Reached),
    Done(T),
    Broken(String),
}

/// How long the engine waits when no answer is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// This long.
    For { ms: u64 },
    /// Until nothing is in flight at any fake, at most `bound_ms` (the announced settle bound):
    /// only then is a ledger final. A backend on virtual time may wait out the whole bound.
    Settled { bound_ms: u64 },
}

/// How the engine's workers run: in process on virtual time, as real processes, or anywhere
/// else. A backend starts, calls, crashes, pauses and resumes workers, and waits; the engine
/// decides when. Calls are split in two ([`Backend::send`], then [`Backend::answer`] until it
/// is done) so that the engine can apply the events of request points reached meanwhile.
// Not `dyn`: the engine is generic over its backend, and each backend's futures are checked
// for `Send` where the concrete run is spawned.
#[allow(async_fn_in_trait)]
pub trait Backend {
    /// One worker, as the backend runs it.
    type Worker: Life;
    /// A request in flight.
    type Call;
    /// A wait in progress.
    type Waiting;

    /// Every worker started so far, by name.
    fn roster(&self) -> &Roster<Self::Worker>;

    /// The first reason the executor broke that the backend noticed by itself (a worker in
    /// the background that died or broke the protocol), if any.
    fn failure(&self) -> Option<String>;

    /// Starts worker `name`, or starts it again on the same state directory after a crash
    /// (an earlier life is ended first); returns its incarnation (1, 2, ...). The error is a
    /// sentence naming the worker.
    async fn start_worker(&mut self, name: &str) -> Result<u32, String>;

    /// Whether the executor understands workflow steps (`after` and parameter references):
    /// it announced `workflows` in its `init_ok`. Steps are not proposed to one that does not.
    fn supports_workflows(&self) -> bool {
        true
    }

    /// Whether the executor receives webhooks: it announced `webhooks` in its `init_ok`.
    /// Intents an event starts are not proposed to one that does not.
    fn supports_webhooks(&self) -> bool {
        false
    }

    /// Hands a request to a worker (requests to one worker are answered in order).
    async fn send(&mut self, worker: &str, request: Request<'_>) -> Result<Self::Call, CallError>;
    /// Waits for the answer, until a request point is reached or the executor breaks.
    async fn answer(&mut self, call: &mut Self::Call) -> Step<Result<Reply, CallError>>;

    /// Begins a wait.
    fn wait(&mut self, wait: Wait) -> Self::Waiting;
    /// Goes on waiting, until a request point is reached or the executor breaks.
    async fn waited(&mut self, waiting: &mut Self::Waiting) -> Step<()>;

    /// Crashes a worker mid-flight; returns what was done, for the timeline.
    async fn crash(&mut self, worker: &str) -> String;
    /// Pauses a worker for `for_ms`; returns what was done, for the timeline.
    async fn pause(&mut self, worker: &str, for_ms: u64) -> String;
    /// Resumes every paused worker now.
    async fn resume_paused(&mut self);
    /// A worker started by an event takes over what it can, in the background, until
    /// [`Backend::end_background`]: a drain, then a reconcile pass every
    /// [`BACKGROUND_ROUND_MS`], as a worker process would that keeps working while the
    /// others are stopped.
    async fn work_in_background(&mut self, worker: &str);
    /// Asks a worker for a reconcile pass without waiting for it.
    async fn ask_reconcile(&mut self, worker: &str);
    /// No more background work: the engine has the last word.
    fn end_background(&mut self);
    /// Ends every worker: gracefully where the run is healthy, killed otherwise.
    async fn shut_down(&mut self, graceful: bool);
}

/// What the engine knows of a worker, whatever runs it.
pub trait Life {
    /// 1 for its first life; a restart after a crash is the next.
    fn incarnation(&self) -> u32;
    /// A crash took it down and nothing has started it again.
    fn crashed(&self) -> bool;
}

/// A backend's workers, by name.
#[derive(Debug)]
pub struct Roster<W>(BTreeMap<String, W>);

impl<W> Default for Roster<W> {
    fn default() -> Self {
        Roster(BTreeMap::new())
    }
}

impl<W> std::ops::Deref for Roster<W> {
    type Target = BTreeMap<String, W>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl<W> std::ops::DerefMut for Roster<W> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl<W: Life> Roster<W> {
    /// Whether `name` was started and is not crashed.
    pub fn running(&self, name: &str) -> bool {
        self.0.get(name).is_some_and(|w| !w.crashed())
    }

    /// `name` if it was started and is not crashed.
    pub fn up(&mut self, name: &str) -> Option<&mut W> {
        self.0.get_mut(name).filter(|w| !w.crashed())
    }

    /// Every started worker.
    pub fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }

    /// The workers a crash took down and nothing has started again.
    pub fn crashed(&self) -> Vec<String> {
        self.0.iter().filter(|(_, w)| w.crashed()).map(|(n, _)| n.clone()).collect()
    }

    /// The incarnation `name`'s next start is.
    pub fn next_incarnation(&self, name: &str) -> u32 {
        self.0.get(name).map_or(1, |w| w.incarnation() + 1)
    }
}
