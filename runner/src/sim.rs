//! The sim backend of the [`crate::phase_engine`]: Rust executors in process, on virtual time,
//! deterministic from one seed.
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

mod executors;
mod transport;
mod webhooks;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fake_services::{Fake, Fakes};
use scenarios::{IntentSpec, Scenario};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use vocabulary::Clock as _;

pub use crate::phase_engine::RunError;
use crate::phase_engine::{
    self, Backend, CallError, Life, Reached, Reply, Request, Roster, Step, Timeline, Wait, World,
};
pub use crate::phase_engine::{BACKGROUND_ROUND_MS, StateChange};
use crate::setup::{self, EPOCH_MS};
pub use executors::{BoxFuture, Reference, Refusal, SimExecutor, SimFactory, WebhookReceiver, WorkerSetup};
use results::{Moment, Observed};
pub use transport::SimTransport;
use transport::{Points, sim_url};

/// The longest a worker may take to drain, in virtual time.
pub const DRAIN_MS_MAX: u64 = 60_000;
/// Bound on any one call into a worker, in virtual time, beyond its own drain bound.
const CALL_MS_MAX: u64 = DRAIN_MS_MAX + 10_000;

/// A request for a worker task, and where its answer goes.
struct Job {
    command: Command,
    reply: oneshot::Sender<Reply>,
}

enum Command {
    Propose(IntentSpec),
    Drain(u64),
    Reconcile,
    Status,
}

/// One worker: its executor answers jobs one at a time, as a process answers its stdin.
async fn worker_loop(name: String, mut executor: Box<dyn SimExecutor>, mut jobs: mpsc::Receiver<Job>) {
    let passed = |kind: &str, done: Result<Vec<StateChange>, String>| match done {
        Ok(changes) => Reply::Changes(changes),
        Err(e) => Reply::Failed(format!("worker {name} failed {kind}: {e}")),
    };
    while let Some(Job { command, reply }) = jobs.recv().await {
        let answer = match command {
            Command::Propose(intent) => match executor.propose(&intent).await {
                Ok(()) => Reply::Accepted,
                Err(Refusal::Unsupported(why)) => Reply::Refused { unsupported: true, why },
                Err(Refusal::Other(why)) => Reply::Refused { unsupported: false, why },
            },
            Command::Drain(ms) => passed("drain", executor.drain(ms).await),
            Command::Reconcile => passed("reconcile", executor.reconcile().await),
            Command::Status => match executor.status().await {
                Ok(claims) => Reply::Claims(claims),
                Err(e) => Reply::Failed(format!("worker {name} failed status: {e}")),
            },
        };
        let _ = reply.send(answer);
    }
}

/// One worker of a sim run: a task and its job queue.
pub struct SimWorker {
    jobs: mpsc::Sender<Job>,
    task: tokio::task::JoinHandle<()>,
    paused: watch::Sender<Option<Instant>>,
    incarnation: u32,
    crashed: bool,
}

/// Queue depth of a worker's jobs: the engine waits on each call, so a handful is plenty.
const JOBS_MAX: usize = 16;

/// A request in flight to a worker task.
pub struct SimCall {
    worker: String,
    kind: &'static str,
    answer: oneshot::Receiver<Reply>,
    deadline: Pin<Box<tokio::time::Sleep>>,
}

/// The sim backend of the [`phase_engine`]: workers are tasks on one current-thread runtime with a
/// paused clock.
pub struct SimBackend<'a> {
    scenario: &'a Scenario,
    factory: &'a dyn SimFactory,
    fakes: BTreeMap<String, Fake>,
    points: Arc<Points>,
    trips_tx: mpsc::UnboundedSender<Vec<usize>>,
    trips_rx: mpsc::UnboundedReceiver<Vec<usize>>,
    /// While true, workers started by events work in the background (until the finish).
    background: Arc<AtomicBool>,
    /// State changes of background work, by worker: onto the timeline when the run ends.
    changes_tx: mpsc::UnboundedSender<(String, Vec<StateChange>)>,
    changes_rx: mpsc::UnboundedReceiver<(String, Vec<StateChange>)>,
    workers: Roster<SimWorker>,
    services: BTreeMap<String, vocabulary::protocol::Service>,
    /// The run's base clock, for stamping background changes that carry no time.
    base: vocabulary::TokioClock,
    /// The workers' clock: the same virtual time, without any service's jumps.
    clock: executor::world::TokioClock,
    state_dir: PathBuf,
    /// The name of the run's intent log in memory, and a connection to it that keeps it
    /// (and everything workers committed to it) alive across their crashes until the run
    /// ends.
    log_name: String,
    _log: executor::log::MemoryLog,
    timeline: Timeline,
    /// Where workers listen for webhooks (`None`: the scenario needs none, or the executor
    /// takes none).
    endpoints: Option<Arc<webhooks::Endpoints>>,
}

impl Backend for SimBackend<'_> {
    type Worker = SimWorker;
    type Call = SimCall;
    type Waiting = Pin<Box<tokio::time::Sleep>>;

    fn roster(&self) -> &Roster<SimWorker> {
        &self.workers
    }

    fn supports_workflows(&self) -> bool {
        self.factory.supports_workflows()
    }

    fn supports_webhooks(&self) -> bool {
        self.factory.supports_webhooks()
    }

    fn failure(&self) -> Option<String> {
        // Every misbehaviour of an in-process executor shows in the answer to a call.
        None
    }

    /// Starts a worker, or restarts it on the same state directory: an earlier life is
    /// ended first, so that no detached task of it goes on working.
    async fn start_worker(&mut self, name: &str) -> Result<u32, String> {
        let incarnation = self.workers.next_incarnation(name);
        if let Some(old) = self.workers.remove(name) {
            old.task.abort();
        }
        let (paused, _) = watch::channel(None);
        let transport = SimTransport {
            worker: name.to_string(),
            origin: format!("{name}#{incarnation}"),
            fakes: self.fakes.clone(),
            points: Arc::clone(&self.points),
            trips: self.trips_tx.clone(),
            paused: paused.clone(),
        };
        let setup = WorkerSetup {
            worker_id: name.to_string(),
            incarnation,
            state_dir: self.state_dir.clone(),
            log_name: self.log_name.clone(),
            services: self.services.clone(),
            secrets: vocabulary::protocol::secrets(),
            limits: setup::limits_for(self.scenario),
            webhook_url: self.endpoints.as_ref().map(|_| webhooks::url_of(name)),
            clock: self.clock.clone(),
            transport: Arc::new(transport),
        };
        let executor = self.factory.start(setup).map_err(|e| format!("worker {name} did not start: {e}"))?;
        if let (Some(endpoints), Some(receiver)) = (&self.endpoints, executor.webhooks()) {
            endpoints.listen(name, receiver);
        }
        let (jobs, rx) = mpsc::channel(JOBS_MAX);
        let task = tokio::spawn(worker_loop(name.to_string(), executor, rx));
        self.workers.insert(name.to_string(), SimWorker { jobs, task, paused, incarnation, crashed: false });
        Ok(incarnation)
    }

    async fn send(&mut self, worker: &str, request: Request<'_>) -> Result<SimCall, CallError> {
        let Some(w) = self.workers.get(worker).filter(|w| !w.crashed) else { return Err(CallError::Gone) };
        let command = match request {
            Request::Propose(intent) => Command::Propose(intent.clone()),
            Request::Drain => Command::Drain(DRAIN_MS_MAX),
            Request::Reconcile => Command::Reconcile,
            Request::Status => Command::Status,
        };
        let (reply, answer) = oneshot::channel();
        if w.jobs.send(Job { command, reply }).await.is_err() {
            return Err(CallError::Gone);
        }
        let deadline = Box::pin(tokio::time::sleep(Duration::from_millis(CALL_MS_MAX)));
        Ok(SimCall { worker: worker.to_string(), kind: request.kind(), answer, deadline })
    }

    async fn answer(&mut self, call: &mut SimCall) -> Step<Result<Reply, CallError>> {
        // Biased, in this order: tokio's default picks a ready branch at random, which would
        // make the moment an event fires, and so the whole run, vary between runs.
        tokio::select! {
            biased;
            Some(events) = self.trips_rx.recv() => Step::Reached(Reached { events, gate: None }),
            answer = &mut call.answer => Step::Done(answer.map_err(|_| CallError::Gone)),
            _ = &mut call.deadline => Step::Broken(format!(
                "worker {} did not finish {} within {CALL_MS_MAX} ms",
                call.worker, call.kind
            )),
        }
    }

    /// Virtual time passes; request points reached meanwhile are applied at the next call (a
    /// settle wait takes the whole bound: on virtual time it costs nothing).
    fn wait(&mut self, wait: Wait) -> Self::Waiting {
        let ms = match wait {
            Wait::For { ms } => ms,
            Wait::Settled { bound_ms } => bound_ms,
        };
        Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
    }

    async fn waited(&mut self, waiting: &mut Self::Waiting) -> Step<()> {
        waiting.await;
        Step::Done(())
    }

    async fn crash(&mut self, worker: &str) -> String {
        if let Some(w) = self.workers.get_mut(worker) {
            w.task.abort();
            w.crashed = true;
        }
        if let Some(endpoints) = &self.endpoints {
            endpoints.close(worker);
        }
        "killed mid-flight".into()
    }

    async fn pause(&mut self, worker: &str, for_ms: u64) -> String {
        if let Some(w) = self.workers.get(worker) {
            let paused = w.paused.clone();
            // `send_replace`, not `send`: the pause holds even while nothing of the worker
            // waits on the channel.
            paused.send_replace(Some(Instant::now()));
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(for_ms)).await;
                paused.send_replace(None);
            });
        }
        format!("for {for_ms} ms")
    }

    async fn resume_paused(&mut self) {
        for w in self.workers.values() {
            w.paused.send_replace(None);
        }
    }

    /// A drain, then a reconcile pass every [`BACKGROUND_ROUND_MS`] until the run finishes,
    /// queued behind nothing the engine waits on. It stops with the worker (a crash closes
    /// its job queue).
    async fn work_in_background(&mut self, worker: &str) {
        let Some(w) = self.workers.get(worker) else { return };
        let jobs = w.jobs.clone();
        let background = Arc::clone(&self.background);
        let changes = self.changes_tx.clone();
        let name = worker.to_string();
        tokio::spawn(async move {
            let mut first = true;
            while background.load(Ordering::SeqCst) {
                let (reply, answer) = oneshot::channel();
                let command = if first { Command::Drain(DRAIN_MS_MAX) } else { Command::Reconcile };
                first = false;
                if jobs.send(Job { command, reply }).await.is_err() {
                    break;
                }
                match answer.await {
                    Ok(Reply::Changes(done)) => {
                        let _ = changes.send((name.clone(), done));
                    }
                    // The executor's own error surfaces in the engine's next call to it.
                    _ => break,
                }
                tokio::time::sleep(Duration::from_millis(BACKGROUND_ROUND_MS)).await;
            }
        });
    }

    async fn ask_reconcile(&mut self, worker: &str) {
        if let Some(w) = self.workers.get(worker) {
            let (reply, _) = oneshot::channel();
            let _ = w.jobs.try_send(Job { command: Command::Reconcile, reply });
        }
    }

    fn end_background(&mut self) {
        self.background.store(false, Ordering::SeqCst);
    }

    /// The state changes background work reported go onto the timeline; every task goes.
    async fn shut_down(&mut self, _graceful: bool) {
        while let Ok((worker, changes)) = self.changes_rx.try_recv() {
            for c in changes {
                let at_ms = c.at_ms.unwrap_or_else(|| self.base.now_ms());
                let detail = format!("{} -> {}", c.intent_id, c.state);
                self.timeline.push(Moment { at_ms, lane: worker.clone(), kind: "state".into(), detail });
            }
        }
        for w in self.workers.values() {
            w.task.abort();
        }
    }
}

/// Runs one scenario in the sim driver. Must be called on a current-thread runtime whose
/// clock is paused (see [`run_blocking`]); `work_dir` receives the state directory.
pub async fn run(
    scenario: &Scenario,
    seed: u64,
    factory: &dyn SimFactory,
    work_dir: &Path,
) -> Result<Observed, setup::SetupError> {
    let base = vocabulary::TokioClock::starting_at(EPOCH_MS);
    let fakes = Fakes::new(Arc::new(base.clone()), seed);
    let world = World::prepare(scenario, fakes, Arc::new(base.clone()))?;
    let services = world.services(|name| Some(sim_url(name)));
    let (trips_tx, trips_rx) = mpsc::unbounded_channel();
    let (changes_tx, changes_rx) = mpsc::unbounded_channel();
    // An empty log no other run holds, kept open (and so alive) for the whole run.
    let log =
        executor::log::IntentLog::fresh_in_memory().map_err(|e| setup::SetupError::Storage(e.to_string()))?;
    let log_name = log.name().to_string();
    let endpoints = (scenario.needs_webhooks() && factory.supports_webhooks()).then(|| {
        let endpoints = Arc::new(webhooks::Endpoints::default());
        tokio::spawn(webhooks::pump(world.fakes.payments.clone(), Arc::clone(&endpoints)));
        endpoints
    });
    let backend = SimBackend {
        scenario,
        factory,
        fakes: world.fakes.all().into_iter().map(|f| (f.name().to_string(), f)).collect(),
        points: Arc::new(Points::new(scenario)),
        trips_tx,
        trips_rx,
        background: Arc::new(AtomicBool::new(true)),
        changes_tx,
        changes_rx,
        workers: Roster::default(),
        services,
        base: base.clone(),
        clock: executor::world::TokioClock::starting_at(EPOCH_MS),
        state_dir: work_dir.join("state"),
        log_name,
        _log: log,
        timeline: world.timeline.clone(),
        endpoints,
    };
    Ok(phase_engine::run(world, backend).await)
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
        .map_err(|e| RunError::Runtime("simulation", e))?;
    let dir = case_dir(work_dir, scenario, seed);
    // Made by whichever executor keeps files there (the reference keeps its log in memory);
    // emptied first in case a process that had this id before left it behind.
    let _ = std::fs::remove_dir_all(&dir);
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
        None => work_dir.join(format!("{}-{seed}-{n}", results::names::file_name_part(&scenario.name))),
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

impl Life for SimWorker {
    fn incarnation(&self) -> u32 {
        self.incarnation
    }

    fn crashed(&self) -> bool {
        self.crashed
    }
}
