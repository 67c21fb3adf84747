//! The live backend of the [`crate::phase_engine`]: any executor as real subprocesses, the fakes on
//! real loopback HTTP, real SIGKILL / SIGSTOP / SIGCONT, real time.
//!
//! The engine runs the phases; this backend runs workers as processes of an
//! [`ExecutorCommand`] through the stdio client of [`crate::process`]. Requests to one worker
//! go one at a time, as the protocol promises: a request for a busy worker (a second worker's
//! background work, a `reconcile` event) waits in the backend's queue.
//!
//! Timeline moments are stamped with the run's base clock (wall time, before any service's
//! clock jump) when they happen; an executor's `event` lines become `state` moments
//! `ID -> STATE` in the worker's lane.
//!
//! # Workers
//!
//! A worker is one process, speaking `twice/1` on its stdin and stdout (see
//! `docs/protocol.md`), in a process group of its own that every signal goes to, so an
//! executor started through a wrapper (`sh -c`, `uv run`, ...) is crashed or paused whole.
//!
//! Each life of a worker (`w1#1`, then `w1#2` after a restart) gets listeners of its own on
//! every fake, labelled with that life: the fakes' journals then say which life sent each
//! request, which is how the checker tells a stale worker's write from its successor's
//! without taking any executor's word for it.
//!
//! # Observation points
//!
//! A request point ("when payments has received the first refund request and before it
//! answers") is watched by the listeners' [`fake_services::Tap`]: the request that reaches it
//! is processed by the fake as usual, but its answer (whatever it is: a reply, a reset, a
//! closed connection) is held at a gate while the engine applies the point's events, and only
//! then let go. A crash is a SIGKILL before the answer is written, so the caller never sees
//! it; a pause is a SIGSTOP that has taken hold before the answer is written, so the stopped
//! worker finds it on its socket when it is resumed (even past its own timeout, as in sim).
//! The stop comes once the worker has sent nothing for [`PAUSE_QUIET_MS`]: the rest of a batch
//! it was sending together with the request at the point leaves first (as in sim, where a
//! pause takes hold after the instant it began);
//! a heal or a clock jump is done before the caller sees the answer. Starting a worker and
//! asking one for a pass come after the gate opens, since a worker's start takes seconds.
//!
//! # Misbehaving executors
//!
//! Every wait is bounded (the `*_MS_MAX` constants, and per scenario the drain and reconcile
//! bounds derived from its limits and settle bound). An executor that breaks the protocol
//! (the framing rules of [`crate::process::frame`]; a reply must carry a numeric
//! `in_reply_to` naming a request in flight), hangs or exits gets
//! [`Observed::executor_error`] with the reason and the tail of its stderr, and the run ends.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_services::{Fakes, Server};
use scenarios::Scenario;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use vocabulary::Clock;
use vocabulary::Contract;
use vocabulary::TokioClock;

pub use crate::phase_engine::BACKGROUND_ROUND_MS;
pub use crate::phase_engine::RunError;
use crate::phase_engine::{
    self, Backend, CallError, Reached, Reply, Request, Roster, Step, Timeline, Wait, World,
};
use crate::points::RequestPoints;
pub use crate::process::command::{CommandLineError, ExecutorCommand, LocateError, REFERENCE_BINARY};
use crate::process::lock;
pub use crate::process::{EXIT_MS_MAX, LINE_BYTES_MAX, STDERR_FLUSH_MS_MAX, STDERR_TAIL_BYTES, WRITE_MS_MAX};
use crate::setup;
use results::Observed;

/// A worker has this long to answer `init`: it may start or reach an engine's server first (a
/// Temporal dev server or a `restate-server` took over 10 s on a loaded 2-core machine).
pub const INIT_MS_MAX: u64 = 30_000;
/// And this long to answer `propose`, `status` or `shutdown` (beyond requests queued ahead).
pub const REPLY_MS_MAX: u64 = 10_000;
/// Added to the wait for a `reconcile_ok`: a worker's first reconcile after a restart may load
/// what it loads lazily (a Python executor's web3 took over 12 s on a loaded 2-core machine).
/// Only an executor that never answers waits this long.
const RECONCILE_SLACK_MS: u64 = 30_000;
/// The longest drain the backend asks for, whatever the scenario's bounds.
pub const DRAIN_MS_MAX: u64 = 60_000;
/// Added to the drain the executor is asked for: passes in flight when its deadline comes.
const DRAIN_SLACK_MS: u64 = 2_000;
/// Added to a drain's `timeout_ms` for the answer to come back.
const CALL_SLACK_MS: u64 = 5_000;
/// How often the backend looks at the pauses and the workers while it waits.
pub const POLL_MS: u64 = 5;
/// How long every fake must have had nothing in flight before the backend takes the world as
/// settled (rather than waiting out the whole announced settle bound).
pub const SETTLED_MS: u64 = 20;
/// A pause takes hold once the worker has sent nothing for this long: what it set out to send
/// together with the request at the point (the rest of a batch, on threads of its own) leaves
/// first, as in sim, where a pause takes hold after the instant it began. Without it a stop
/// could land between an executor's last check and its send, where no executor can defend a
/// service that offers no guard, and the verdict would not be the executor's fault.
pub const PAUSE_QUIET_MS: u64 = 50;
/// The longest the backend waits for that quiet before it stops the worker anyway.
pub const PAUSE_QUIET_MS_MAX: u64 = 500;
/// A worker has this long to exit after `shutdown` before it is killed.
pub const SHUTDOWN_MS_MAX: u64 = 5_000;
/// Stopping the fakes' servers.
const SERVER_STOP_MS_MAX: u64 = 5_000;
/// At most this many moments on a timeline: an executor flooding stdout with events cannot
/// grow the harness without bound (later events are dropped).
pub const TIMELINE_MOMENTS_MAX: usize = 100_000;
/// The payments API key every worker is given.
pub const PAYMENTS_API_KEY: &str = vocabulary::protocol::PAYMENTS_API_KEY;

mod messages;
mod tap;
pub mod timing;
mod upkeep;
mod worker;

use messages::{announces_webhooks, announces_workflows, claims, intent_message, reply_kind};
use tap::{Bounds, PointTap};
pub use worker::LiveWorker;
use worker::{Answer, Lane, Link};

/// A request in flight to a worker process.
pub struct LiveCall {
    worker: String,
    kind: &'static str,
    reply: oneshot::Receiver<Value>,
    /// The life that was asked: an answer lost with a later crash is `Gone`, not broken.
    incarnation: Option<u32>,
    bound_ms: u64,
    deadline: Instant,
}

/// A wait in progress.
pub struct LiveWaiting {
    deadline: Instant,
    /// Ends early once every fake has had nothing in flight for [`SETTLED_MS`].
    settled: bool,
    quiet_since: Option<Instant>,
}

/// The live backend of the [`crate::phase_engine`]: workers are processes of an
/// [`ExecutorCommand`], the fakes listen on loopback.
pub struct LiveBackend<'a> {
    scenario: &'a Scenario,
    command: &'a ExecutorCommand,
    fakes: Fakes,
    clock: Arc<dyn Clock>,
    /// The contract each announced service offers; every worker life is told them.
    contracts: BTreeMap<String, Contract>,
    /// Every listener of every worker life, stopped when the run ends (a dead life's
    /// listeners stay up: a request of it may still be in flight at a fake).
    servers: Vec<Server>,
    tap: Arc<PointTap>,
    reached: mpsc::UnboundedReceiver<Reached>,
    limits: vocabulary::protocol::Limits,
    state_dir: PathBuf,
    bounds: Bounds,
    workers: Roster<LiveWorker>,
    /// Until the finish, workers started by events work in the background.
    background: bool,
    timeline: Timeline,
    /// The first way the executor broke.
    failure: Option<String>,
    /// Whether the latest `init_ok` announced `workflows` (every worker runs the same
    /// command).
    workflows: bool,
    /// Whether it announced `webhooks`.
    webhooks: bool,
    /// Where the scenario's time goes, when the run records it (`--timeline`).
    timing: timing::Recorder,
}

impl Backend for LiveBackend<'_> {
    type Worker = LiveWorker;
    type Call = LiveCall;
    type Waiting = LiveWaiting;

    fn roster(&self) -> &Roster<LiveWorker> {
        &self.workers
    }

    fn supports_workflows(&self) -> bool {
        self.workflows
    }

    fn supports_webhooks(&self) -> bool {
        self.webhooks
    }

    fn failure(&self) -> Option<String> {
        self.failure.clone()
    }

    /// Starts (or restarts) a worker and waits for its `init_ok`.
    async fn start_worker(&mut self, name: &str) -> Result<u32, String> {
        let incarnation = self.workers.next_incarnation(name);
        if let Some(mut old) = self.workers.remove(name) {
            // A restart: the earlier life must be gone before the next opens the state.
            let since = self.timing.now();
            old.process.kill().await;
            self.timing.spent("restart_kill", since);
        }
        let lane = Lane {
            worker: name.to_string(),
            clock: Arc::clone(&self.clock),
            timeline: self.timeline.clone(),
            link: Arc::new(Mutex::new(Link::default())),
        };
        let since = self.timing.now();
        let services = self.listen(&format!("{name}#{incarnation}")).await?;
        self.timing.spent("listen", since);
        let spawned = self.timing.now();
        let worker = LiveWorker::spawn(self.command, lane, incarnation)
            .map_err(|e| format!("worker {name} did not start: {e}"))?;
        self.workers.insert(name.to_string(), worker);
        let init = json!({
            "protocol": vocabulary::protocol::PROTOCOL,
            "worker_id": name,
            "state_dir": self.state_dir,
            "services": services,
            "secrets": vocabulary::protocol::secrets(),
            "limits": self.limits,
        });
        let rx = match self.enqueue(name, "init", init).await {
            Ok((rx, _)) => rx,
            Err(_) => return Err(self.describe_loss(name, "during init").await),
        };
        // No polling here: points fire from the engine's waits, never from inside an event.
        let init = tokio::time::timeout(Duration::from_millis(INIT_MS_MAX), rx).await;
        self.timing.process_started(&format!("{name}#{incarnation}"), spawned);
        match init {
            Ok(Ok(reply)) => match Answer::of(reply) {
                Answer::Ok(init_ok) => {
                    self.workflows = announces_workflows(&init_ok);
                    self.webhooks = announces_webhooks(&init_ok);
                    Ok(incarnation)
                }
                Answer::Error { code, text } => {
                    Err(format!("worker {name} refused init: code {code}: {text}"))
                }
            },
            Ok(Err(_)) => Err(self.describe_loss(name, "during init").await),
            Err(_) => Err(self.describe_hang(name, "init", INIT_MS_MAX).await),
        }
    }

    async fn send(&mut self, worker: &str, request: Request<'_>) -> Result<LiveCall, CallError> {
        let fields = match request {
            Request::Propose(intent) => json!({"intent": intent_message(intent)}),
            Request::Drain => json!({"timeout_ms": self.bounds.drain_ms}),
            Request::Reconcile | Request::Status => json!({}),
        };
        let kind = request.kind();
        let (reply, ahead_ms) = self.enqueue(worker, kind, fields).await?;
        let incarnation = self.workers.get(worker).map(|w| w.incarnation);
        let bound_ms = ahead_ms + self.bounds.pauses_ms;
        let deadline = Instant::now() + Duration::from_millis(bound_ms);
        Ok(LiveCall { worker: worker.to_string(), kind, reply, incarnation, bound_ms, deadline })
    }

    /// Waits for the answer, resuming pauses and polling the workers meanwhile.
    async fn answer(&mut self, call: &mut LiveCall) -> Step<Result<Reply, CallError>> {
        let since = self.timing.now();
        let step = self.answer_untimed(call).await;
        self.timing.spent(reply_kind(call.kind), since);
        step
    }

    fn wait(&mut self, wait: Wait) -> LiveWaiting {
        let (ms, settled) = match wait {
            Wait::For { ms } => (ms, false),
            Wait::Settled { bound_ms } => (bound_ms, true),
        };
        LiveWaiting { deadline: Instant::now() + Duration::from_millis(ms), settled, quiet_since: None }
    }

    /// Waits in real time, polling; a settle wait ends once every fake has had nothing in
    /// flight for [`SETTLED_MS`] (a wall-clock run need not wait out a bound nothing uses).
    async fn waited(&mut self, waiting: &mut LiveWaiting) -> Step<()> {
        let since = self.timing.now();
        let step = self.waited_untimed(waiting).await;
        self.timing.spent(if waiting.settled { "settle" } else { "round_pause" }, since);
        step
    }

    async fn crash(&mut self, worker: &str) -> String {
        let Some(w) = self.workers.get_mut(worker).filter(|w| !w.crashed) else {
            return "not running".into();
        };
        let since = self.timing.now();
        w.crashed = true;
        w.resume_at = None;
        w.queue.clear();
        let detail = match w.process.signal("KILL").await {
            Ok(()) => "SIGKILL".into(),
            Err(e) => format!("SIGKILL to the group failed ({e}); killed directly"),
        };
        w.process.start_kill();
        self.timing.spent("crash", since);
        detail
    }

    async fn pause(&mut self, worker: &str, for_ms: u64) -> String {
        let Some(incarnation) = self.workers.get(worker).filter(|w| !w.crashed).map(|w| w.incarnation) else {
            return format!("for {for_ms} ms (not running)");
        };
        let since = self.timing.now();
        self.quiet(&format!("{worker}#{incarnation}")).await;
        self.timing.spent("pause_quiet", since);
        let Some(w) = self.workers.get_mut(worker).filter(|w| !w.crashed) else {
            return format!("for {for_ms} ms (not running)");
        };
        match w.process.signal("STOP").await {
            Ok(()) => {
                let since = self.timing.now();
                w.process.stopped().await;
                self.timing.spent("pause_stop", since);
                let until = Instant::now() + Duration::from_millis(for_ms);
                w.resume_at = Some(w.resume_at.map_or(until, |at| at.max(until)));
                format!("for {for_ms} ms")
            }
            Err(e) => format!("for {for_ms} ms: SIGSTOP failed: {e}"),
        }
    }

    async fn resume_paused(&mut self) {
        let paused: Vec<String> =
            self.workers.iter().filter(|(_, w)| w.resume_at.is_some()).map(|(n, _)| n.clone()).collect();
        for name in paused {
            self.resume(&name).await;
        }
    }

    /// A drain now, then a `reconcile` whenever the worker is idle and
    /// [`BACKGROUND_ROUND_MS`] has passed (see [`Self::poll`]).
    async fn work_in_background(&mut self, worker: &str) {
        let drain = json!({"timeout_ms": self.bounds.drain_ms});
        self.send_and_forget(worker, "drain", drain).await;
        if let Some(w) = self.workers.get_mut(worker) {
            w.background = Some(Instant::now() + Duration::from_millis(BACKGROUND_ROUND_MS));
        }
    }

    async fn ask_reconcile(&mut self, worker: &str) {
        self.send_and_forget(worker, "reconcile", json!({})).await;
    }

    fn end_background(&mut self) {
        self.background = false;
    }

    /// `shutdown` and a bounded wait for each worker of a healthy run, SIGKILL otherwise or
    /// after the bound; either way what the worker leaves running (children in its group,
    /// daemons that left it) is killed too. Then the held answers go (their gates open as the
    /// channel closes) and the listeners stop.
    async fn shut_down(&mut self, graceful: bool) {
        let names: Vec<String> = self.workers.keys().cloned().collect();
        for name in names {
            let Some(w) = self.workers.get_mut(&name) else { continue };
            if w.resume_at.take().is_some() {
                let _ = w.process.signal("CONT").await;
            }
            let idle = lock(&w.link).pending.is_empty() && w.queue.is_empty();
            if graceful && idle && !w.crashed && w.process.alive() {
                let msg_id = w.next_msg_id;
                w.next_msg_id += 1;
                let line = format!("{}\n", json!({"type": "shutdown", "msg_id": msg_id}));
                // Exited or not within the bound, the kill below follows: after an exit it
                // ends only what the worker left behind.
                let since = self.timing.now();
                if w.process.write(&line).await.is_ok() {
                    let _ = w.process.exit_within(SHUTDOWN_MS_MAX).await;
                }
                self.timing.spent("shutdown_exit", since);
            }
            let since = self.timing.now();
            w.process.kill().await;
            self.timing.spent("shutdown_kill", since);
        }
        self.reached.close();
        while let Ok(reached) = self.reached.try_recv() {
            if let Some(gate) = reached.gate {
                let _ = gate.send(());
            }
        }
        let since = self.timing.now();
        for server in std::mem::take(&mut self.servers) {
            let _ = tokio::time::timeout(Duration::from_millis(SERVER_STOP_MS_MAX), server.stop()).await;
        }
        self.timing.spent("server_stop", since);
    }
}

impl LiveBackend<'_> {
    /// [`Backend::waited`], without its timing.
    async fn waited_untimed(&mut self, waiting: &mut LiveWaiting) -> Step<()> {
        loop {
            if let Some(why) = self.failure.clone() {
                return Step::Broken(why);
            }
            let now = Instant::now();
            if now >= waiting.deadline {
                return Step::Done(());
            }
            if waiting.settled {
                match (self.settled(), waiting.quiet_since) {
                    (false, _) => waiting.quiet_since = None,
                    (true, None) => waiting.quiet_since = Some(now),
                    (true, Some(since)) if now - since >= Duration::from_millis(SETTLED_MS) => {
                        return Step::Done(());
                    }
                    (true, Some(_)) => {}
                }
            }
            let left = waiting.deadline.saturating_duration_since(now);
            tokio::select! {
                biased;
                Some(reached) = self.reached.recv() => return Step::Reached(reached),
                () = tokio::time::sleep(left.min(Duration::from_millis(POLL_MS))) => {}
            }
            self.poll().await;
        }
    }

    /// [`Backend::answer`], without its timing.
    async fn answer_untimed(&mut self, call: &mut LiveCall) -> Step<Result<Reply, CallError>> {
        loop {
            tokio::select! {
                biased;
                Some(reached) = self.reached.recv() => return Step::Reached(reached),
                reply = &mut call.reply => {
                    let name = &call.worker;
                    return Step::Done(match reply {
                        Ok(reply) => self.reply(call, reply),
                        // Crashed by an event (and perhaps started again since).
                        Err(_) if self.workers.get(name).is_none_or(|w| w.crashed || Some(w.incarnation) != call.incarnation) => {
                            Err(CallError::Gone)
                        }
                        Err(_) => {
                            let why = self.describe_loss(name, &format!("during {}", call.kind)).await;
                            Err(CallError::Broken(self.fail(why)))
                        }
                    });
                }
                () = tokio::time::sleep(Duration::from_millis(POLL_MS)) => {
                    self.poll().await;
                    if let Some(why) = self.failure.clone() {
                        return Step::Broken(why);
                    }
                    if Instant::now() >= call.deadline {
                        let why = self.describe_hang(&call.worker, call.kind, call.bound_ms).await;
                        return Step::Broken(self.fail(why));
                    }
                }
            }
        }
    }
}

fn rejected(scenario: &Scenario, problem: String) -> setup::SetupError {
    setup::SetupError::Rejected { scenario: scenario.name.clone(), problem }
}

/// Runs one scenario in the live driver, on real time: the fakes on loopback, the executor as
/// subprocesses of `executor` sharing `work_dir/state`. Needs a tokio runtime with I/O and
/// time enabled (see [`run_blocking`]). An executor that misbehaves ends the run early with
/// [`Observed::executor_error`]; an `Err` is a scenario or harness problem.
pub async fn run(
    scenario: &Scenario,
    seed: u64,
    executor: &ExecutorCommand,
    work_dir: &Path,
) -> Result<Observed, setup::SetupError> {
    run_recorded(scenario, seed, executor, work_dir, timing::Recorder::default()).await
}

/// [`run`], recording where its time goes in `timing`.
async fn run_recorded(
    scenario: &Scenario,
    seed: u64,
    executor: &ExecutorCommand,
    work_dir: &Path,
    timing: timing::Recorder,
) -> Result<Observed, setup::SetupError> {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::from_wall_clock());
    let fakes = Fakes::new(Arc::clone(&clock), seed);
    let world = World::prepare(scenario, fakes, Arc::clone(&clock))?;
    let state_dir = work_dir.join("state");
    crate::interrupt::make_dir(&state_dir)
        .map_err(|e| rejected(scenario, format!("cannot create {}: {e}", state_dir.display())))?;
    let (reached_tx, reached) = mpsc::unbounded_channel();
    let tap = Arc::new(PointTap {
        points: RequestPoints::new(scenario),
        reached: reached_tx,
        last_arrival: Mutex::new(HashMap::new()),
    });
    let backend = LiveBackend {
        scenario,
        command: executor,
        fakes: world.fakes.clone(),
        clock,
        contracts: world.contracts.clone(),
        servers: Vec::new(),
        tap,
        reached,
        bounds: Bounds::of(scenario, &world.limits, world.settle_ms),
        limits: world.limits.clone(),
        state_dir,
        workers: Roster::default(),
        background: true,
        timeline: world.timeline.clone(),
        failure: None,
        workflows: false,
        webhooks: false,
        timing,
    };
    Ok(phase_engine::run(world, backend).await)
}

/// The directory of one run: a child of `work_dir`, whatever the scenario's name holds (it
/// comes from a file: `../`, NUL, 10,000 bytes).
fn run_dir(work_dir: &Path, name: &str, seed: u64, n: u64) -> PathBuf {
    work_dir.join(format!("{}-{seed}-{n}", results::names::file_name_part(name)))
}

/// Runs one scenario on a fresh current-thread runtime, in a fresh directory of its own under
/// `work_dir` that is removed afterwards.
pub fn run_blocking(
    scenario: &Scenario,
    seed: u64,
    executor: &ExecutorCommand,
    work_dir: &Path,
) -> Result<Observed, RunError> {
    let timing = timing::Recorder::start(&scenario.name, seed);
    let since = timing.now();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RunError::Runtime("live driver's", e))?;
    // A number of its own per run, as in sim: the same scenario may run twice at once (two
    // executors, or a shrink beside the run), and must never share a state directory.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = run_dir(work_dir, &scenario.name, seed, n);
    phase_engine::fresh_dir(&dir)?;
    timing.spent("setup", since);
    let run = run_recorded(scenario, seed, executor, &dir, timing.clone());
    let observed = runtime.block_on(run).map_err(RunError::Setup);
    let since = timing.now();
    drop(runtime);
    let _ = std::fs::remove_dir_all(&dir);
    timing.spent("cleanup", since);
    timing.finish();
    observed
}

#[cfg(test)]
mod tests;
