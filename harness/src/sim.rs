//! The sim driver: Rust executors in process, on virtual time, deterministic from one seed.
//!
//! Everything runs on one tokio current-thread runtime with a paused clock (the caller builds
//! it; see [`run_blocking`]): the fakes' delays, the executor's timeouts and leases, and the
//! harness's waits are all virtual, so a scenario that spans minutes of service time runs in
//! milliseconds, and the same seed gives the same bytes. The executor reaches the fakes
//! through [`SimTransport`], which hands each request to the fake as its own task (so the
//! fake finishes a commit even when the caller is gone) and implements the observation
//! points: a crash point keeps the reply from ever arriving, a pause point holds it until the
//! worker is resumed. A paused worker sends nothing, and notices neither its timers nor
//! replies until it is resumed; then it takes a reply that came meanwhile even past its
//! timeout, as a stopped process finds the data waiting on its socket (see
//! [`SimTransport`]). Every request carries its worker life (`w1#2`) as its origin.
//!
//! Workers are tasks. A crash aborts the task, which drops the executor mid-flight exactly
//! where it was; the worker restarts on the same state directory when the reconcile phase
//! begins.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use executor::world::{HttpRequest, HttpResponse, SendError, SendFuture, Transport};
use fake_services::clock::Clock as _;
use fake_services::{Disposition, Fake, FakeRequest, Fakes};
use scenarios::{EventAction, IntentSpec, PhaseName, Point, Scenario};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use crate::observe::{Claim, Moment, Observed};
use crate::points::RequestPoints;
use crate::setup::{self, EPOCH_MS, RECONCILE_ROUNDS_MAX};

/// A boxed future, so that executors can be trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The longest a worker may take to drain, in virtual time.
pub const DRAIN_MS_MAX: u64 = 60_000;
/// Bound on any one call into a worker, in virtual time, beyond its own drain bound.
const CALL_MS_MAX: u64 = DRAIN_MS_MAX + 10_000;
/// A worker started by an event works in the background until the run finishes: a drain,
/// then a reconcile pass every this often (virtual time), as a worker process would that
/// keeps taking over what it can while the others are stopped (even while the driver waits,
/// in the reconcile phase, on a worker that is paused).
pub const BACKGROUND_ROUND_MS: u64 = 100;

/// Why a proposal was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The executor does not support the action: the intent is reported `unsupported`.
    Unsupported(String),
    /// Any other refusal: the executor is broken.
    Other(String),
}

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

/// An executor under test, in process.
pub trait SimExecutor: Send {
    /// Records the intent durably, or refuses it.
    fn propose<'a>(&'a mut self, intent: &'a IntentSpec) -> BoxFuture<'a, Result<(), Refusal>>;
    /// Works until nothing is recorded or submitted, or `timeout_ms` passes.
    fn drain(&mut self, timeout_ms: u64) -> BoxFuture<'_, Result<Vec<StateChange>, String>>;
    /// One reconciliation pass.
    fn reconcile(&mut self) -> BoxFuture<'_, Result<Vec<StateChange>, String>>;
    /// Every intent it knows, with its state.
    fn status(&mut self) -> BoxFuture<'_, Result<Vec<Claim>, String>>;
}

/// What a worker is started with: the same facts as the protocol's `init`.
pub struct WorkerSetup {
    pub worker_id: String,
    /// Starts at 1; a restart after a crash is the next incarnation.
    pub incarnation: u32,
    pub state_dir: PathBuf,
    pub services: BTreeMap<String, executor::Service>,
    /// As the protocol's `init.secrets`: `payments_api_key`, `chain_private_key`.
    pub secrets: BTreeMap<String, String>,
    pub limits: executor::Limits,
    /// Virtual time, shared by every worker of the run.
    pub clock: executor::world::TokioClock,
    pub transport: Arc<dyn Transport>,
}

/// Makes executors for the sim driver.
pub trait SimFactory: Send + Sync {
    /// A name for reports.
    fn name(&self) -> String;
    fn start(&self, setup: WorkerSetup) -> Result<Box<dyn SimExecutor>, String>;
}

/// The reference executor, in process.
#[derive(Debug, Default, Clone, Copy)]
pub struct Reference;

struct ReferenceSim(executor::Executor);

impl SimFactory for Reference {
    fn name(&self) -> String {
        "reference executor (sim)".into()
    }

    fn start(&self, setup: WorkerSetup) -> Result<Box<dyn SimExecutor>, String> {
        let config = executor::Config {
            worker_id: setup.worker_id.clone(),
            services: setup.services,
            secrets: setup.secrets,
            limits: setup.limits,
        };
        let world = executor::World {
            clock: Arc::new(setup.clock),
            ids: Arc::new(executor::world::Counter::new(&format!(
                "{}.{}",
                setup.worker_id, setup.incarnation
            ))),
            transport: setup.transport,
            hooks: Arc::new(executor::world::NoHooks),
        };
        // NORMAL durability: a sim crash is a dropped process, never a power cut.
        let executor =
            executor::Executor::open(config, &setup.state_dir, executor::Durability::Normal, world)
                .map_err(|e| e.to_string())?;
        Ok(Box::new(ReferenceSim(executor)))
    }
}

fn changes(transitions: Vec<executor::Transition>) -> Vec<StateChange> {
    transitions
        .into_iter()
        .map(|t| StateChange { intent_id: t.intent_id, state: t.to.to_string(), at_ms: Some(t.at_ms) })
        .collect()
}

impl SimExecutor for ReferenceSim {
    fn propose<'a>(&'a mut self, intent: &'a IntentSpec) -> BoxFuture<'a, Result<(), Refusal>> {
        Box::pin(async move {
            let proposal = executor::Proposal {
                id: intent.id.clone(),
                action: intent.action.clone(),
                params: intent.params.clone(),
                replaces: intent.replaces.clone(),
            };
            match self.0.propose(proposal) {
                Ok(_) => Ok(()),
                Err(e @ executor::ProposeError::Action(executor::model::ActionError::Unsupported(_)))
                | Err(e @ executor::ProposeError::NotConfigured { .. })
                | Err(e @ executor::ProposeError::MissingSecret { .. }) => {
                    Err(Refusal::Unsupported(e.to_string()))
                }
                Err(e) => Err(Refusal::Other(e.to_string())),
            }
        })
    }

    fn drain(&mut self, timeout_ms: u64) -> BoxFuture<'_, Result<Vec<StateChange>, String>> {
        Box::pin(async move {
            match self.0.drain(timeout_ms).await {
                Ok(t) => Ok(changes(t)),
                // Intents held by another worker's lease may keep a drain busy; that is not a
                // fault of the executor, and the reconcile phase goes on.
                Err(executor::DrainError::Timeout { transitions, .. }) => Ok(changes(transitions)),
                Err(e) => Err(e.to_string()),
            }
        })
    }

    fn reconcile(&mut self) -> BoxFuture<'_, Result<Vec<StateChange>, String>> {
        Box::pin(
            async move { self.0.pass().await.map(|r| changes(r.transitions)).map_err(|e| e.to_string()) },
        )
    }

    fn status(&mut self) -> BoxFuture<'_, Result<Vec<Claim>, String>> {
        Box::pin(async move {
            let intents = self.0.status(None).map_err(|e| e.to_string())?;
            Ok(intents
                .iter()
                .map(|i| Claim {
                    id: i.id.clone(),
                    state: i.state.to_string(),
                    attempts: u64::from(i.attempts),
                    evidence: serde_json::to_value(&i.evidence).unwrap_or_default(),
                })
                .collect())
        })
    }
}

/// The host a service has in sim URLs: `http://payments.sim`.
fn sim_url(service: &str) -> String {
    format!("http://{service}.sim")
}

/// What a request that reached a point must do before its reply may go back.
#[derive(Debug, Default)]
struct Trip {
    events: Vec<usize>,
    /// A crash of the requesting worker: the reply never arrives.
    crash_self: bool,
    /// A pause of the requesting worker: the reply waits for the resume.
    pause_self: bool,
}

/// The request points of a run, and which events crash or pause which worker.
struct Points {
    points: RequestPoints,
    /// Per event index: `(kind, worker)` for crash and pause events.
    targets: BTreeMap<usize, (&'static str, String)>,
}

impl Points {
    fn new(scenario: &Scenario) -> Points {
        let mut targets = BTreeMap::new();
        for (i, event) in scenario.events.iter().enumerate() {
            match &event.action {
                EventAction::Crash { worker } => {
                    targets.insert(i, ("crash", worker.clone()));
                }
                EventAction::Pause { worker, .. } => {
                    targets.insert(i, ("pause", worker.clone()));
                }
                _ => {}
            }
        }
        Points { points: RequestPoints::new(scenario), targets }
    }

    fn on_request(&self, worker: &str, service: &str, method: &str, path: &str) -> Trip {
        let mut trip = Trip::default();
        for i in self.points.reached(service, method, path) {
            match self.targets.get(&i) {
                Some(("crash", w)) if w == worker => trip.crash_self = true,
                Some(("pause", w)) if w == worker => trip.pause_self = true,
                _ => {}
            }
            trip.events.push(i);
        }
        trip
    }
}

/// One worker's way to the fakes.
pub struct SimTransport {
    worker: String,
    /// `worker#incarnation`: the origin every request of this life carries.
    origin: String,
    fakes: BTreeMap<String, Fake>,
    points: Arc<Points>,
    trips: mpsc::UnboundedSender<Vec<usize>>,
    /// While the worker is paused: since when.
    paused: watch::Sender<Option<Instant>>,
}

impl SimTransport {
    /// Waits until the worker runs. A pause takes hold after the instant it began: what the
    /// worker set out to send at that very instant (a batch of concurrent requests, the
    /// first of which reached the point) still leaves, as it would have left a real process
    /// before the SIGSTOP landed.
    async fn wait_while_paused(&self) {
        let now = Instant::now();
        let mut rx = self.paused.subscribe();
        // A closed channel means the run is over; go on rather than hang.
        let _ = rx.wait_for(|paused| paused.is_none_or(|since| since == now)).await;
    }
}

impl Transport for SimTransport {
    fn send(&self, request: HttpRequest) -> SendFuture<'_> {
        Box::pin(async move {
            self.wait_while_paused().await;
            let rest = request.url.strip_prefix("http://").unwrap_or(&request.url);
            let (host, target) =
                rest.split_once('/').map(|(h, t)| (h, format!("/{t}"))).unwrap_or((rest, "/".into()));
            let service = host.strip_suffix(".sim").unwrap_or(host);
            let Some(fake) = self.fakes.get(service).cloned() else {
                return Err(SendError::NotSent(format!("no service at {host}")));
            };
            let mut fake_request =
                FakeRequest::new(request.method, &target).body(request.body.clone()).origin(&self.origin);
            for (name, value) in &request.headers {
                fake_request = fake_request.header(name, value);
            }
            let trip = self.points.on_request(&self.worker, service, request.method, &fake_request.path);
            // The fake works on its own task, like a server: it finishes even if the caller
            // is dropped (crashed) or gives up (timed out).
            let handled = tokio::spawn(async move { fake.handle(fake_request).await });
            if trip.pause_self {
                self.paused.send_replace(Some(Instant::now()));
            }
            if !trip.events.is_empty() {
                let _ = self.trips.send(trip.events);
            }
            if trip.crash_self {
                // The worker is about to be killed: its reply never arrives.
                std::future::pending::<()>().await;
            }
            self.exchange(handled, request.timeout_ms).await
        })
    }
}

impl SimTransport {
    /// Waits for the fake's answer as a process would that may be stopped meanwhile: a stopped
    /// process notices neither its timer nor the reply until it runs again, and then takes the
    /// reply if one has come (even past its timeout, as a socket read that finds data waiting
    /// returns it), else the timeout. The live driver's gates give the same order on real
    /// sockets: the reply is written only once the stop has taken hold.
    async fn exchange(
        &self,
        handled: tokio::task::JoinHandle<Disposition>,
        timeout_ms: u64,
    ) -> Result<HttpResponse, SendError> {
        let mut handled = handled;
        let mut paused = self.paused.subscribe();
        let deadline = tokio::time::sleep(Duration::from_millis(timeout_ms));
        tokio::pin!(deadline);
        let mut reply: Option<Result<HttpResponse, SendError>> = None;
        let mut expired = false;
        loop {
            if paused.borrow_and_update().is_none() {
                if let Some(reply) = reply.take() {
                    return reply;
                }
                if expired {
                    return Err(SendError::Ambiguous(format!("no answer within {timeout_ms} ms")));
                }
            }
            // Biased: the reply before the timer, so that a tie goes to the reply.
            tokio::select! {
                biased;
                done = &mut handled, if reply.is_none() => reply = Some(match done {
                    Ok(Disposition::Respond(r)) => {
                        Ok(HttpResponse { status: r.status, headers: r.headers, body: r.body.to_vec() })
                    }
                    Ok(Disposition::Reset) => Err(SendError::Ambiguous("connection reset by peer".into())),
                    Ok(Disposition::Close) => {
                        Err(SendError::Ambiguous("connection closed before an answer".into()))
                    }
                    Err(e) => Err(SendError::Ambiguous(format!("the fake failed: {e}"))),
                }),
                () = &mut deadline, if !expired => expired = true,
                // The sender lives in this transport, so the channel cannot close under us.
                _ = paused.changed() => {}
            }
        }
    }
}

enum Cmd {
    Propose(IntentSpec, oneshot::Sender<Result<(), Refusal>>),
    Drain(u64, oneshot::Sender<Result<Vec<StateChange>, String>>),
    Reconcile(oneshot::Sender<Result<Vec<StateChange>, String>>),
    Status(oneshot::Sender<Result<Vec<Claim>, String>>),
}

async fn worker_loop(mut executor: Box<dyn SimExecutor>, mut commands: mpsc::Receiver<Cmd>) {
    while let Some(cmd) = commands.recv().await {
        match cmd {
            Cmd::Propose(intent, reply) => {
                let _ = reply.send(executor.propose(&intent).await);
            }
            Cmd::Drain(ms, reply) => {
                let _ = reply.send(executor.drain(ms).await);
            }
            Cmd::Reconcile(reply) => {
                let _ = reply.send(executor.reconcile().await);
            }
            Cmd::Status(reply) => {
                let _ = reply.send(executor.status().await);
            }
        }
    }
}

struct Worker {
    commands: mpsc::Sender<Cmd>,
    task: tokio::task::JoinHandle<()>,
    paused: watch::Sender<Option<Instant>>,
    incarnation: u32,
    crashed: bool,
}

/// Queue depth of a worker's commands: the driver waits on each call, so a handful is plenty.
const COMMANDS_MAX: usize = 16;

/// Why a call into a worker returned nothing.
enum CallError {
    /// The worker is gone: crashed by an event.
    Gone,
    /// It did not answer within the bound: the executor hangs.
    Hung,
}

struct Run<'a> {
    scenario: &'a Scenario,
    factory: &'a dyn SimFactory,
    fakes: Fakes,
    points: Arc<Points>,
    trips_tx: mpsc::UnboundedSender<Vec<usize>>,
    trips_rx: mpsc::UnboundedReceiver<Vec<usize>>,
    /// While true, workers started by events work in the background (until the finish).
    background: Arc<AtomicBool>,
    /// State changes of background work, by worker, for the timeline.
    changes_tx: mpsc::UnboundedSender<(String, Vec<StateChange>)>,
    changes_rx: mpsc::UnboundedReceiver<(String, Vec<StateChange>)>,
    workers: BTreeMap<String, Worker>,
    services: BTreeMap<String, executor::Service>,
    /// The run's base clock, shared with the fakes (each adds its own jumps on top): what the
    /// timeline is stamped with.
    base: fake_services::TokioClock,
    /// The workers' clock: the same virtual time, without any service's jumps.
    clock: executor::world::TokioClock,
    state_dir: PathBuf,
    observed: Observed,
    fired: Vec<bool>,
}

impl Run<'_> {
    fn now_ms(&self) -> u64 {
        // The base clock, not a service's: a clock jump moves one service's time, never the
        // run's.
        self.base.now_ms()
    }

    /// Records why the run could not be checked; the first reason stands.
    fn fail(&mut self, why: String) {
        self.observed.executor_error.get_or_insert(why);
    }

    fn broken(&self) -> bool {
        self.observed.executor_error.is_some()
    }

    fn moment(&mut self, lane: &str, kind: &str, detail: String) {
        let at_ms = self.now_ms();
        self.observed.timeline.push(Moment { at_ms, lane: lane.into(), kind: kind.into(), detail });
    }

    /// Starts a worker, or restarts it on the same state directory: an earlier life is
    /// ended first, so that no detached task of it goes on working.
    fn start_worker(&mut self, name: &str) -> Result<(), String> {
        let incarnation = self.workers.get(name).map_or(1, |w| w.incarnation + 1);
        if let Some(old) = self.workers.remove(name) {
            old.task.abort();
        }
        let (paused, _) = watch::channel(None);
        let transport = SimTransport {
            worker: name.to_string(),
            origin: format!("{name}#{incarnation}"),
            fakes: self.fakes.all().into_iter().map(|f| (f.name().to_string(), f)).collect(),
            points: Arc::clone(&self.points),
            trips: self.trips_tx.clone(),
            paused: paused.clone(),
        };
        let setup = WorkerSetup {
            worker_id: name.to_string(),
            incarnation,
            state_dir: self.state_dir.clone(),
            services: self.services.clone(),
            secrets: setup::secrets(),
            limits: setup::limits_for(self.scenario),
            clock: self.clock.clone(),
            transport: Arc::new(transport),
        };
        let executor = self.factory.start(setup)?;
        let (commands, rx) = mpsc::channel(COMMANDS_MAX);
        let task = tokio::spawn(worker_loop(executor, rx));
        self.workers.insert(name.to_string(), Worker { commands, task, paused, incarnation, crashed: false });
        self.moment(name, "start", format!("incarnation {incarnation}"));
        Ok(())
    }

    /// Sends a command and waits for its answer, firing request-point events meanwhile.
    async fn call<T>(
        &mut self,
        worker: &str,
        make: impl FnOnce(oneshot::Sender<T>) -> Cmd,
    ) -> Result<T, CallError> {
        let Some(w) = self.workers.get(worker).filter(|w| !w.crashed) else { return Err(CallError::Gone) };
        let (tx, mut rx) = oneshot::channel();
        if w.commands.send(make(tx)).await.is_err() {
            return Err(CallError::Gone);
        }
        let deadline = tokio::time::sleep(Duration::from_millis(CALL_MS_MAX));
        tokio::pin!(deadline);
        loop {
            // Biased, in this order: tokio's default picks a ready branch at random, which
            // would make the moment an event fires, and so the whole run, vary between runs.
            tokio::select! {
                biased;
                Some(events) = self.trips_rx.recv() => self.fire_all(events).await,
                answer = &mut rx => return answer.map_err(|_| CallError::Gone),
                _ = &mut deadline => return Err(CallError::Hung),
            }
        }
    }

    async fn fire_all(&mut self, events: Vec<usize>) {
        for i in events {
            self.fire(i).await;
        }
    }

    async fn fire_point(&mut self, matches: impl Fn(&Point) -> bool) {
        self.fire_all(self.scenario.events_at(matches)).await;
    }

    async fn fire(&mut self, i: usize) {
        if self.fired.get(i).copied().unwrap_or(true) {
            return;
        }
        self.fired[i] = true;
        let Some(event) = self.scenario.events.get(i).cloned() else { return };
        match event.action {
            EventAction::Crash { worker } => {
                if let Some(w) = self.workers.get_mut(&worker) {
                    w.task.abort();
                    w.crashed = true;
                }
                self.moment(&worker, "crash", "killed mid-flight".into());
            }
            EventAction::Pause { worker, for_ms } => {
                if let Some(w) = self.workers.get(&worker) {
                    let paused = w.paused.clone();
                    // `send_replace`, not `send`: the pause holds even while nothing of the
                    // worker waits on the channel.
                    paused.send_replace(Some(Instant::now()));
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(for_ms)).await;
                        paused.send_replace(None);
                    });
                }
                self.moment(&worker, "pause", format!("for {for_ms} ms"));
            }
            EventAction::StartWorker { worker } => {
                // As in the live driver: a worker that is up is not started twice.
                if self.workers.get(&worker).is_some_and(|w| !w.crashed) {
                    self.moment(&worker, "start", "already running".into());
                    return;
                }
                match self.start_worker(&worker) {
                    Ok(()) => self.work_in_background(&worker),
                    Err(e) => self.fail(format!("worker {worker} did not start: {e}")),
                }
            }
            EventAction::ClockJump { service, by_ms } => {
                if let Some(fake) = self.fakes.get(&service) {
                    fake.clock().jump_ms(by_ms);
                }
                self.moment(&service, "clock_jump", format!("+{by_ms} ms"));
            }
            EventAction::Heal => {
                setup::heal(&self.fakes);
                self.moment("harness", "heal", "every fault disarmed".into());
            }
            EventAction::Reconcile { worker } => {
                if let Some(w) = self.workers.get(&worker) {
                    let (tx, _) = oneshot::channel();
                    let _ = w.commands.try_send(Cmd::Reconcile(tx));
                }
                self.moment(&worker, "reconcile", "asked for a pass".into());
            }
        }
    }

    /// The new worker takes over what it can: a drain, then a reconcile pass every
    /// [`BACKGROUND_ROUND_MS`] until the run finishes, queued behind nothing the driver
    /// waits on. It stops with the worker (a crash closes its command queue).
    fn work_in_background(&self, worker: &str) {
        let Some(w) = self.workers.get(worker) else { return };
        let commands = w.commands.clone();
        let background = Arc::clone(&self.background);
        let changes = self.changes_tx.clone();
        let name = worker.to_string();
        tokio::spawn(async move {
            let mut first = true;
            while background.load(Ordering::SeqCst) {
                let (tx, rx) = oneshot::channel();
                let command = if first { Cmd::Drain(DRAIN_MS_MAX, tx) } else { Cmd::Reconcile(tx) };
                first = false;
                if commands.send(command).await.is_err() {
                    break;
                }
                match rx.await {
                    Ok(Ok(done)) => {
                        let _ = changes.send((name.clone(), done));
                    }
                    // The executor's own error surfaces in the driver's next call to it.
                    Ok(Err(_)) | Err(_) => break,
                }
                tokio::time::sleep(Duration::from_millis(BACKGROUND_ROUND_MS)).await;
            }
        });
    }

    /// The state changes background work reported so far, into the timeline.
    fn background_changes(&mut self) {
        while let Ok((worker, changes)) = self.changes_rx.try_recv() {
            self.record_changes(&worker, changes);
        }
    }

    fn record_changes(&mut self, worker: &str, changes: Vec<StateChange>) {
        for c in changes {
            let at_ms = c.at_ms.unwrap_or_else(|| self.now_ms());
            let detail = format!("{} -> {}", c.intent_id, c.state);
            self.observed.timeline.push(Moment { at_ms, lane: worker.into(), kind: "state".into(), detail });
        }
    }

    fn hung(&mut self, worker: &str, what: &str) {
        self.fail(format!("worker {worker} did not finish {what} within {CALL_MS_MAX} ms"));
    }

    async fn act(&mut self) {
        for intent in self.scenario.intents.clone() {
            let result = self.call(setup_first(), |tx| Cmd::Propose(intent.clone(), tx)).await;
            match result {
                Ok(Ok(())) => {
                    self.observed.acknowledged.push(intent.id.clone());
                    self.moment(setup_first(), "proposed", intent.id.clone());
                    let id = intent.id.clone();
                    self.fire_point(
                        |p| matches!(p, Point::AfterPropose { after_propose } if *after_propose == id),
                    )
                    .await;
                }
                Ok(Err(Refusal::Unsupported(why))) => {
                    if !self.observed.unsupported.contains(&intent.action) {
                        self.observed.unsupported.push(intent.action.clone());
                    }
                    self.observed.unacknowledged.insert(intent.id.clone(), why);
                }
                Ok(Err(Refusal::Other(why))) => {
                    self.observed.unacknowledged.insert(intent.id.clone(), why);
                }
                Err(CallError::Gone) => {
                    self.observed.unacknowledged.insert(intent.id.clone(), "the worker was down".into());
                }
                Err(CallError::Hung) => return self.hung(setup_first(), "propose"),
            }
        }
        self.fire_point(|p| matches!(p, Point::Phase { after_phase: PhaseName::Act })).await;
    }

    async fn drain(&mut self) {
        match self.call(setup_first(), |tx| Cmd::Drain(DRAIN_MS_MAX, tx)).await {
            Ok(Ok(changes)) => self.record_changes(setup_first(), changes),
            Ok(Err(e)) => self.fail(format!("drain failed: {e}")),
            Err(CallError::Gone) => {}
            Err(CallError::Hung) => self.hung(setup_first(), "drain"),
        }
        self.fire_point(|p| matches!(p, Point::Phase { after_phase: PhaseName::Drain })).await;
    }

    async fn reconcile(&mut self, settle_ms: u64) {
        setup::heal(&self.fakes);
        self.moment("harness", "heal", "every fault disarmed".into());
        // Past every announced read lag and settle bound.
        tokio::time::sleep(Duration::from_millis(settle_ms)).await;
        for w in self.workers.values() {
            w.paused.send_replace(None);
        }
        let round_pause_ms =
            self.scenario.request_timeout_ms() + settle_ms + executor::engine::SAFETY_MARGIN_MS;
        let names: Vec<String> = self.workers.keys().cloned().collect();
        for round in 1..=RECONCILE_ROUNDS_MAX {
            self.observed.reconcile_rounds = round;
            // Crashed workers come back first; a crash point may also fire during a round.
            if !self.restart_crashed() {
                return;
            }
            for name in &names {
                for kind in ["reconcile", "drain"] {
                    let answer = if kind == "reconcile" {
                        self.call(name, Cmd::Reconcile).await
                    } else {
                        self.call(name, |tx| Cmd::Drain(DRAIN_MS_MAX, tx)).await
                    };
                    match answer {
                        Ok(Ok(changes)) => self.record_changes(name, changes),
                        Ok(Err(e)) => {
                            self.fail(format!("{kind} on {name} failed: {e}"));
                            return;
                        }
                        Err(CallError::Gone) => {}
                        Err(CallError::Hung) => return self.hung(name, kind),
                    }
                }
            }
            match self.call(setup_first(), Cmd::Status).await {
                Ok(Ok(claims)) if claims.iter().all(|c| !unresolved(&c.state)) => break,
                Ok(_) => {}
                Err(CallError::Hung) => return self.hung(setup_first(), "status"),
                Err(CallError::Gone) => {}
            }
            tokio::time::sleep(Duration::from_millis(round_pause_ms)).await;
        }
    }

    /// Restarts every crashed worker on its state directory; false if one would not start.
    fn restart_crashed(&mut self) -> bool {
        let crashed: Vec<String> =
            self.workers.iter().filter(|(_, w)| w.crashed).map(|(n, _)| n.clone()).collect();
        for name in crashed {
            if let Err(e) = self.start_worker(&name) {
                self.fail(format!("worker {name} did not restart: {e}"));
                return false;
            }
        }
        true
    }

    async fn finish(&mut self, settle_ms: u64) {
        // The driver has the last word: no more background rounds.
        self.background.store(false, Ordering::SeqCst);
        // Late commits land within the settle bound: only then is a ledger final.
        tokio::time::sleep(Duration::from_millis(settle_ms)).await;
        if !self.restart_crashed() {
            return;
        }
        match self.call(setup_first(), Cmd::Status).await {
            Ok(Ok(claims)) => self.observed.claims = claims,
            Ok(Err(e)) => self.fail(format!("status failed: {e}")),
            Err(CallError::Gone) => self.fail("worker w1 is gone at the end".into()),
            Err(CallError::Hung) => self.hung(setup_first(), "status"),
        }
    }

    /// Ledgers and journals of the announced services: at the end of a run, and also when it
    /// ended early, where what the fakes saw still explains the executor's error.
    fn collect(&mut self) {
        for fake in self.fakes.all().into_iter().filter(|f| setup::announced(self.scenario, f.name())) {
            self.observed.ledgers.insert(fake.name().to_string(), fake.ledger());
            self.observed.journals.insert(fake.name().to_string(), fake.journal());
        }
    }

    fn stop_workers(&mut self) {
        for w in self.workers.values() {
            w.task.abort();
        }
    }
}

fn setup_first() -> &'static str {
    scenarios::model::FIRST_WORKER
}

fn unresolved(state: &str) -> bool {
    matches!(state, "recorded" | "blocked" | "submitted" | "unknown")
}

/// Runs one scenario in the sim driver. Must be called on a current-thread runtime whose
/// clock is paused (see [`run_blocking`]); `work_dir` receives the state directory.
pub async fn run(
    scenario: &Scenario,
    seed: u64,
    factory: &dyn SimFactory,
    work_dir: &Path,
) -> Result<Observed, setup::SetupError> {
    let base = fake_services::TokioClock::starting_at(EPOCH_MS);
    let fakes = Fakes::new(Arc::new(base.clone()), seed);
    setup::prepare(scenario, &fakes)?;
    let contracts = setup::contracts(scenario, &fakes);
    let services = contracts
        .iter()
        .map(|(name, c)| {
            (name.clone(), executor::Service { url: sim_url(name), contract: setup::announce(c) })
        })
        .collect();
    let settle_ms = setup::settle_ms(scenario, &contracts);
    let (trips_tx, trips_rx) = mpsc::unbounded_channel();
    let (changes_tx, changes_rx) = mpsc::unbounded_channel();
    let state_dir = work_dir.join("state");
    let mut run = Run {
        scenario,
        factory,
        fakes,
        points: Arc::new(Points::new(scenario)),
        trips_tx,
        trips_rx,
        background: Arc::new(AtomicBool::new(true)),
        changes_tx,
        changes_rx,
        workers: BTreeMap::new(),
        services,
        base,
        clock: executor::world::TokioClock::starting_at(EPOCH_MS),
        state_dir,
        observed: Observed::default(),
        fired: vec![false; scenario.events.len()],
    };
    match run.start_worker(setup_first()) {
        Err(e) => run.fail(format!("worker w1 did not start: {e}")),
        Ok(()) => {
            run.act().await;
            if !run.broken() {
                run.drain().await;
            }
            if !run.broken() {
                run.reconcile(settle_ms).await;
            }
            if !run.broken() {
                run.finish(settle_ms).await;
            }
        }
    }
    run.background.store(false, Ordering::SeqCst);
    run.background_changes();
    run.collect();
    run.stop_workers();
    run.observed.timeline.sort_by_key(|m| m.at_ms);
    Ok(run.observed)
}

/// Runs one scenario on a fresh paused current-thread runtime, in a fresh state directory
/// (see [`case_dir`]) that is removed afterwards.
pub fn run_blocking(
    scenario: &Scenario,
    seed: u64,
    factory: &dyn SimFactory,
    work_dir: &Path,
) -> Result<Observed, RunError> {
    run_blocking_timed(scenario, seed, factory, work_dir).map(|(observed, _)| observed)
}

/// As [`run_blocking`], with the virtual time the run took (what it would have taken on a
/// wall clock, had every wait been real).
pub fn run_blocking_timed(
    scenario: &Scenario,
    seed: u64,
    factory: &dyn SimFactory,
    work_dir: &Path,
) -> Result<(Observed, Duration), RunError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .map_err(RunError::Runtime)?;
    let dir = case_dir(work_dir, scenario, seed);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| RunError::WorkDir(dir.display().to_string(), e))?;
    let observed = runtime.block_on(async {
        let started = tokio::time::Instant::now();
        let observed = run(scenario, seed, factory, &dir).await;
        observed.map(|o| (o, started.elapsed()))
    });
    // Every task (and with it every executor and its open log) goes before the directory.
    drop(runtime);
    let _ = std::fs::remove_dir_all(&dir);
    observed.map_err(RunError::Setup)
}

/// The directory a case runs in.
///
/// On a machine with a writable tmpfs at `/dev/shm` it goes there, whatever `work_dir` says:
/// a simulated crash is a dropped task in a process that goes on, so the OS page cache is
/// never lost and a disk could only add what SQLite's file creation, locking and syncing
/// cost on it (about two thirds of a sim run's wall time on an ext4 disk). Elsewhere it goes
/// under `work_dir`. Either way the name is unique in the process, so that concurrent runs
/// of the same scenario and seed (the threads of a run, parallel tests) never share one.
pub fn case_dir(work_dir: &Path, scenario: &Scenario, seed: u64) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    match tmpfs() {
        Some(root) => root.join(format!("twice-sim-{}-{n}", std::process::id())),
        None => work_dir.join(format!("{}-{seed}-{n}", scenario.name)),
    }
}

/// `/dev/shm`, if this process can make directories in it.
fn tmpfs() -> Option<&'static Path> {
    static TMPFS: OnceLock<Option<PathBuf>> = OnceLock::new();
    TMPFS
        .get_or_init(|| {
            let root = Path::new("/dev/shm");
            let probe = root.join(format!("twice-sim-{}-probe", std::process::id()));
            let usable = root.is_dir() && std::fs::create_dir(&probe).is_ok();
            let _ = std::fs::remove_dir(&probe);
            usable.then(|| root.to_path_buf())
        })
        .as_deref()
}

/// Why the sim driver could not run a scenario (a harness problem, not a verdict).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start the simulation runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot create the work directory {0}: {1}")]
    WorkDir(String, std::io::Error),
    #[error(transparent)]
    Setup(setup::SetupError),
}
