//! What `twice serve` holds between requests: the fakes, the scenario whose world they are
//! set up for, and that scenario's steps (its process events, which the test performs on its
//! own application) with how far each has got.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use fake_services::Fakes;
use fake_services::server::{Gate, Tap};
use fake_services::wire::FakeRequest;
use results::{Moment, Observed, Pending, Route};
use scenarios::{EventAction, Point};
use serde::Serialize;
use tokio::sync::{Notify, oneshot};

use runner::points::RequestPoints;
use runner::run::Case;
use runner::setup;

/// What a request held at a step's point is called among the things pending
/// (`results::Pending::what`).
pub const HELD_AT_STEP: &str = "held-at-step";

/// The longest a test may make serve wait for a step (`GET /__twice/steps/N?wait_ms=`):
/// a long poll, asked again if it ends before the step is reached.
pub const STEP_WAIT_MS_MAX: u64 = 60_000;

/// Who performs a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum By {
    /// Serve itself: a heal or a clock jump happens to the fakes, which serve holds.
    Serve,
    /// The test: a crash, pause, second worker or reconcile happens to the application,
    /// which only the test can reach.
    Test,
}

/// How far a step has got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Progress {
    /// Its point has not been reached yet (or, for a point serve cannot see, the test has not
    /// said it is done).
    Pending,
    /// Its request point was reached: the request is held, unanswered, until the test says
    /// the step is done (at most `fake_services::server::GATE_HOLD_MS_MAX`).
    Reached,
    /// Performed: by serve, or by the test, which said so.
    Done,
}

/// One of the scenario's events, as a step for the test.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub index: usize,
    /// `crash`, `pause`, `start_worker`, `clock_jump`, `heal`, `reconcile`.
    #[serde(rename = "do")]
    pub action: &'static str,
    /// The event as the scenario writes it (worker, `for_ms`, service, `by_ms`).
    pub event: serde_json::Value,
    /// Its point, as the scenario writes it.
    pub at: serde_json::Value,
    pub by: By,
    /// Whether serve sees the point: a request point. After a proposal or a phase, only the
    /// test knows when it is.
    pub serve_sees_the_point: bool,
    pub progress: Progress,
    /// Service time (ms since the Unix epoch) when the point was reached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reached_at_ms: Option<u64>,
    /// The request that reached the point: `METHOD path` at `service`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// What the test does with it, in words.
    pub how: String,
}

/// The scenario serve has set up, and its steps.
pub struct Current {
    pub case: Case,
    pub steps: Vec<Step>,
    points: RequestPoints,
    /// Gates holding requests that reached a point, each with the test's steps it waits for.
    gates: Vec<Held>,
    /// Service time when the scenario was set up: the first moment of the run.
    pub set_at_ms: u64,
    /// What serve did, for the report's timeline.
    pub moments: Vec<Moment>,
}

/// A request held at a step's point until the test says the step is done.
struct Held {
    /// The test's steps it waits for.
    waits: Vec<usize>,
    gate: oneshot::Sender<()>,
    service: &'static str,
    /// `METHOD path`.
    request: String,
}

/// A request serve holds at a step's point because the test has not said the step is done:
/// the world cannot settle until it does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldAtStep {
    pub service: &'static str,
    /// `METHOD path`.
    pub request: String,
    /// The steps it waits for, each by its number and action, and how to let it go.
    pub detail: String,
}

impl HeldAtStep {
    /// One line for the verdict: the request, the step by its number and action, and how to
    /// release it.
    pub fn line(&self) -> String {
        format!("{} at {} is held unanswered at {}", self.request, self.service, self.detail)
    }
}

/// Serve's state, shared by the control endpoint and the tap on every fake.
pub struct World {
    pub fakes: Fakes,
    /// The base clock under every service's own: what the timeline is stamped with.
    base: Arc<dyn vocabulary::Clock>,
    pub seed: u64,
    /// Base URL per service, and `control` for serve's own endpoint.
    pub urls: Mutex<BTreeMap<String, String>>,
    current: Mutex<Option<Current>>,
    /// Woken whenever a step moves on.
    moved: Notify,
    /// `--strict-keys`: every world serve sets up has the payments fake accept only the
    /// seeded keys.
    strict_keys: bool,
    /// Where a scenario given as text is kept, for the replay line of its verdicts.
    pub(crate) kept: super::kept::KeptScenarios,
}

impl World {
    /// Serve's state over `fakes`, with the world every reset leaves (see [`World::reset`])
    /// set up at once.
    pub fn new(fakes: Fakes, base: Arc<dyn vocabulary::Clock>, seed: u64, strict_keys: bool) -> World {
        let world = World {
            fakes,
            base,
            seed,
            urls: Mutex::new(BTreeMap::new()),
            current: Mutex::new(None),
            moved: Notify::new(),
            strict_keys,
            kept: super::kept::KeptScenarios::default(),
        };
        world.plain();
        world
    }

    /// What every world of serve has, with or without a scenario: the dev accounts funded on
    /// the chain, and with `--strict-keys` the payments fake accepting only seeded keys.
    fn plain(&self) {
        super::accounts::fund(&self.fakes.chain);
        if self.strict_keys
            && let Err(e) = runner::setup::strict_keys(&self.fakes)
        {
            tracing::error!(target: "twice::serve", error = %e, "strict keys not set up");
        }
    }

    /// Whether `--strict-keys` is on.
    pub fn strict_keys(&self) -> bool {
        self.strict_keys
    }

    pub fn lock(&self) -> MutexGuard<'_, Option<Current>> {
        self.current.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn urls(&self) -> BTreeMap<String, String> {
        self.urls.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn now_ms(&self) -> u64 {
        self.base.now_ms()
    }

    /// Adds a moment to the timeline of the scenario set up, stamped now (a tool call of
    /// `twice mcp`); with no scenario set up there is no timeline, and nothing is kept.
    pub fn note(&self, lane: &str, kind: &str, detail: String) {
        let at_ms = self.now_ms();
        if let Some(current) = self.lock().as_mut() {
            current.moments.push(Moment { at_ms, lane: lane.into(), kind: kind.into(), detail });
        }
    }

    /// The request timeout the scenario set up announces, or the default one: the bound of
    /// each exchange an MCP tool makes.
    pub fn request_timeout_ms(&self) -> u64 {
        match self.lock().as_ref() {
            Some(current) => runner::setup::limits_for(&current.case.scenario).request_timeout_ms,
            None => runner::setup::limits().request_timeout_ms,
        }
    }

    /// Resets every fake and forgets the scenario; every held request is let go. The dev
    /// accounts are funded again (and strict keys set up again, with `--strict-keys`).
    pub fn reset(&self) {
        let old = self.lock().take();
        drop(old);
        for fake in self.fakes.all() {
            fake.reset();
        }
        self.plain();
        self.moved.notify_waiters();
    }

    /// Resets every fake, then sets up `case`'s world on them: contracts, seeds and faults.
    pub fn set(&self, case: Case) -> Result<(), setup::SetupError> {
        self.reset();
        // The world's contracts and limits are read again when asked (`GET /__twice/scenario`):
        // the fakes hold them, and a test may patch a contract after this.
        runner::world::World::prepare(&case.scenario, self.fakes.clone(), Arc::clone(&self.base))?;
        let steps = case.scenario.events.iter().enumerate().map(|(i, e)| step(i, e)).collect();
        let now = self.now_ms();
        let moments = vec![Moment {
            at_ms: now,
            lane: "serve".into(),
            kind: "scenario".into(),
            detail: format!("{} set up", case.scenario.name),
        }];
        tracing::info!(target: "twice::serve", scenario = %case.scenario.name, steps = steps_len(&case), "scenario set up");
        let points = RequestPoints::new(&case.scenario);
        *self.lock() = Some(Current { case, steps, points, gates: Vec::new(), set_at_ms: now, moments });
        Ok(())
    }

    /// The test performed step `index` (or serve's own step at a point it cannot see is due
    /// now): marks it done, applies it where it is serve's, and lets go of any request held
    /// only for steps that are all done now.
    pub fn done(&self, index: usize) -> Result<Step, String> {
        let mut guard = self.lock();
        let current = guard.as_mut().ok_or("no scenario is set up: POST /__twice/scenario first")?;
        let count = current.steps.len();
        let step = current.steps.get_mut(index).ok_or_else(|| {
            format!("no step {index}: the scenario has {count} steps (0 to {})", count.max(1) - 1)
        })?;
        if step.progress != Progress::Done {
            step.progress = Progress::Done;
            tracing::info!(target: "twice::serve", step = index, action = step.action, "step done");
            if step.by == By::Serve {
                let event = current.case.scenario.events[index].action.clone();
                apply(&self.fakes, &event, &mut current.moments, self.base.now_ms());
            } else {
                let detail = format!("step {index} ({}) done", step.action);
                current.moments.push(Moment {
                    at_ms: self.base.now_ms(),
                    lane: "test".into(),
                    kind: step.action.into(),
                    detail,
                });
            }
        }
        let answer = current.steps[index].clone();
        let steps = &current.steps;
        let (open, held): (Vec<_>, Vec<_>) = std::mem::take(&mut current.gates)
            .into_iter()
            .partition(|held| held.waits.iter().all(|i| steps[*i].progress == Progress::Done));
        current.gates = held;
        for held in open {
            let _ = held.gate.send(());
        }
        drop(guard);
        self.moved.notify_waiters();
        Ok(answer)
    }

    /// Step `index` once it is no longer pending, or as it is after `wait_ms`.
    pub async fn wait(&self, index: usize, wait_ms: u64) -> Result<Step, String> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms.min(STEP_WAIT_MS_MAX));
        loop {
            let moved = self.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            {
                let guard = self.lock();
                let current = guard.as_ref().ok_or("no scenario is set up: POST /__twice/scenario first")?;
                let count = current.steps.len();
                let step = current.steps.get(index).ok_or_else(|| {
                    format!("no step {index}: the scenario has {count} steps (0 to {})", count.max(1) - 1)
                })?;
                if step.progress != Progress::Pending {
                    return Ok(step.clone());
                }
            }
            if tokio::time::timeout_at(deadline, moved).await.is_err() {
                let guard = self.lock();
                let current = guard.as_ref().ok_or("the scenario was reset while waiting")?;
                return current.steps.get(index).cloned().ok_or_else(|| format!("no step {index}"));
            }
        }
    }

    /// The requests held at a step's point for a step of the test's not done yet, oldest
    /// first. A gate whose request the server already let go (after the longest hold) is none.
    pub fn held_at_steps(current: &Current) -> Vec<HeldAtStep> {
        current
            .gates
            .iter()
            .filter(|held| !held.gate.is_closed())
            .map(|held| {
                let steps: Vec<String> = held
                    .waits
                    .iter()
                    .filter_map(|i| current.steps.get(*i))
                    .filter(|step| step.progress != Progress::Done)
                    .map(|step| {
                        format!(
                            "step {} ({}), which the test never said it performed: perform it, then \
                             POST /__twice/steps/{}/done lets the request go on",
                            step.index, step.action, step.index
                        )
                    })
                    .collect();
                HeldAtStep {
                    service: held.service,
                    request: held.request.clone(),
                    detail: steps.join("; and at "),
                }
            })
            .collect()
    }

    /// What the run observed, for the checker: `claims` as the application made them, what
    /// could still change a ledger (each fake's pending work, and the requests held at steps),
    /// when the ledgers were read, and the ledgers and journals of every service the scenario
    /// announces. What is pending is read before the ledgers, so that nothing it leaves out
    /// lands after them unseen.
    pub(crate) fn observed(&self, current: &Current, parsed: crate::claims::Parsed) -> Observed {
        let mut pending = runner::world::World::pending(&self.fakes);
        pending.extend(Self::held_at_steps(current).into_iter().map(|held| Pending {
            service: held.service.to_string(),
            what: HELD_AT_STEP.into(),
            request: Some(held.request),
            request_id: None,
            due_ms: None,
            detail: held.detail,
        }));
        let mut observed = Observed {
            acknowledged: parsed.acknowledged,
            unacknowledged: parsed.unacknowledged,
            claims: parsed.claims,
            timeline: current.moments.clone(),
            route: Route::Serve,
            pending,
            ledgers_read_at_ms: Some(self.now_ms()),
            ..Observed::default()
        };
        runner::world::World::read_ledgers(&self.fakes, &current.case.scenario, &mut observed);
        observed
    }
}

/// The tap on every fake: counts requests against the scenario's request points; at a point
/// it applies serve's own steps and holds the request for the test's.
pub struct StepTap(pub Arc<World>);

impl Tap for StepTap {
    fn arrived(&self, service: &'static str, request: &FakeRequest) -> Option<Gate> {
        let world = &self.0;
        let mut guard = world.lock();
        let current = guard.as_mut()?;
        let due = current.points.reached(service, &request.method, &request.path);
        if due.is_empty() {
            return None;
        }
        let now = world.now_ms();
        let mut waits = Vec::new();
        for index in due {
            let step = &mut current.steps[index];
            step.reached_at_ms = Some(now);
            step.request = Some(format!("{} {} at {service}", request.method, request.path));
            tracing::info!(
                target: "twice::serve",
                step = index,
                action = step.action,
                service,
                method = %request.method,
                path = %request.path,
                "step's point reached"
            );
            if step.by == By::Serve {
                step.progress = Progress::Done;
                let event = current.case.scenario.events[index].action.clone();
                apply(&world.fakes, &event, &mut current.moments, now);
            } else {
                step.progress = Progress::Reached;
                waits.push(index);
            }
        }
        let gate = if waits.is_empty() {
            None
        } else {
            let (open, held) = oneshot::channel();
            current.gates.push(Held {
                waits,
                gate: open,
                service,
                request: format!("{} {}", request.method, request.path),
            });
            Some(held)
        };
        drop(guard);
        world.moved.notify_waiters();
        gate
    }
}

fn steps_len(case: &Case) -> usize {
    case.scenario.events.len()
}

/// Applies one of serve's own events to the fakes (a heal, a clock jump), as a run's engine
/// does; the test's own events do nothing here.
fn apply(fakes: &Fakes, event: &EventAction, moments: &mut Vec<Moment>, now: u64) {
    moments.extend(runner::world::World::apply(fakes, event, now));
}

/// The step for event `index`.
fn step(index: usize, event: &scenarios::Event) -> Step {
    let by = match event.action {
        EventAction::Heal | EventAction::ClockJump { .. } => By::Serve,
        _ => By::Test,
    };
    let serve_sees_the_point = matches!(event.at, Point::Request { .. });
    let what = match &event.action {
        EventAction::Crash { worker } => {
            format!("kill worker {worker} (SIGKILL), then start it again on the same state")
        }
        EventAction::Pause { worker, for_ms } => {
            format!("stop worker {worker} for {for_ms} ms (SIGSTOP, then SIGCONT)")
        }
        EventAction::StartWorker { worker } => format!("start a second worker {worker} on the same state"),
        EventAction::Reconcile { worker } => format!("have worker {worker} run a reconciliation pass"),
        EventAction::Heal => "serve disarms every fault".to_string(),
        EventAction::ClockJump { service, by_ms } => {
            format!("serve moves {service}'s clock {by_ms} ms forward")
        }
    };
    let how = match (by, serve_sees_the_point) {
        (By::Serve, true) => format!("{what} when the point is reached; nothing for the test to do"),
        (By::Serve, false) => {
            format!("{what} when the test says the point is reached: POST /__twice/steps/{index}/done")
        }
        (By::Test, true) => format!(
            "wait for the point (GET /__twice/steps/{index}?wait_ms=N answers once it is reached; the request \
             that reached it is held unanswered meanwhile), {what}, then POST /__twice/steps/{index}/done to \
             let the request go on"
        ),
        (By::Test, false) => {
            format!("at the point, {what}, then POST /__twice/steps/{index}/done")
        }
    };
    let mut value = serde_json::to_value(event).unwrap_or_default();
    let at = value.as_object_mut().and_then(|m| m.remove("at")).unwrap_or_default();
    Step {
        index,
        action: event.action.name(),
        event: value,
        at,
        by,
        serve_sees_the_point,
        progress: Progress::Pending,
        reached_at_ms: None,
        request: None,
        how,
    }
}
