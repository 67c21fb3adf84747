//! The phase engine: what a run of one scenario does, written once for every driver.
//!
//! A run goes through the same phases whatever runs the executor: **start** `w1`; **act**
//! (propose every intent to `w1`); **drain** (`w1` works until nothing is left or its bound
//! passes); **webhooks** (only where intents wait for an event and the executor receives
//! webhooks: the fakes' deliveries reach it, crashed workers come back at once, `w1` drains
//! what they started, until no webhook is owed); **heal** (every fault disarmed, then the world left to settle: nothing in flight at
//! any fake, at most the announced settle bound); **reconcile** (paused workers resumed, then
//! up to [`RECONCILE_ROUNDS_MAX`] rounds, each restarting crashed workers on the same state
//! directory and asking every worker for a reconcile pass and a drain, until `w1`'s `status`
//! shows nothing unresolved and, while the executor still sends requests, every intent a
//! genuine event starts that it accepted); **finish** (no more background work, the world settled again,
//! crashed workers restarted, `w1`'s `status` taken as its claims, what the fakes still have
//! pending and then their ledgers and journals read, with the time of the read); then every
//! worker is shut down.
//!
//! A scenario's events (a crash, a pause, a second worker, a clock jump, a heal, a reconcile
//! pass) fire at points: after a phase, after an intent was proposed, or when a request reaches
//! a fake ([`crate::points`]). What an event means is written here, once; how a worker is
//! crashed, paused or started is the [`Backend`]'s: an aborted task on virtual time in sim
//! ([`crate::sim`]), a SIGKILL to a real process group live ([`crate::live`]). Whatever the
//! backend, the engine applies the events of a request point while it waits for an answer or
//! for time to pass, so sim and live say the same thing about the same scenario by
//! construction, and a third backend (a container, a remote worker) is one more
//! implementation of [`Backend`].
//!
//! An executor that misbehaves (breaks the protocol, hangs, exits, answers a request with an
//! error) ends the run early with [`Observed::executor_error`]: the first reason stands, and
//! what the fakes saw is still collected to explain it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use fake_services::Fakes;
use scenarios::model::FIRST_WORKER;
use scenarios::{EventAction, PhaseName, Point, Scenario};
use vocabulary::Clock;
use vocabulary::{WEBHOOKS_FEATURE, WORKFLOWS_FEATURE};

mod backend;

pub use backend::{Backend, CallError, Life, Reached, Reply, Request, Roster, StateChange, Step, Wait};

use crate::setup::{self, RECONCILE_ROUNDS_MAX};
pub use crate::world::{Timeline, World};
use results::{Claim, Moment, Observed};
use vocabulary::protocol::Limits;

/// Why a driver could not run a scenario (a harness problem, not a verdict).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start the {0} runtime: {1}")]
    Runtime(&'static str, std::io::Error),
    #[error("cannot create the work directory {0}: {1}")]
    WorkDir(String, std::io::Error),
    #[error(transparent)]
    Setup(setup::SetupError),
}

/// Empties `dir` (a case's own directory), or makes it.
pub fn fresh_dir(dir: &Path) -> Result<(), RunError> {
    let _ = std::fs::remove_dir_all(dir);
    // After an interrupt, a new case would make again what the interrupt removes.
    crate::interrupt::make_dir(dir).map_err(|e| RunError::WorkDir(dir.display().to_string(), e))
}

/// The webhooks phase lets time pass in steps of this long.
pub const WEBHOOK_STEP_MS: u64 = 250;
/// The webhooks phase ends after this long at the latest: past every retry of a delivery
/// (1 s, 2 s and 4 s after the first, each attempt bounded by 10 s) and any fault's delay.
pub const WEBHOOKS_MS_MAX: u64 = 60_000;

/// Background work: a reconcile pass this often, once the first drain is done.
pub const BACKGROUND_ROUND_MS: u64 = 100;

/// One run of one scenario over a backend.
struct Engine<'a, B: Backend> {
    scenario: &'a Scenario,
    fakes: Fakes,
    /// The run's base clock: what the timeline is stamped with (a clock jump moves one
    /// service's time, never the run's).
    clock: Arc<dyn Clock>,
    backend: B,
    timeline: Timeline,
    observed: Observed,
    fired: Vec<bool>,
    settle_ms: u64,
    /// The limits the workers were told.
    limits: Limits,
    /// The payment intents whose trigger the executor accepted.
    armed: BTreeSet<String>,
}

/// Runs a scenario's phases over `backend` and returns what was observed.
pub async fn run<B: Backend>(world: World<'_>, backend: B) -> Observed {
    let World { scenario, fakes, clock, timeline, settle_ms, limits, contracts: _ } = world;
    let mut engine = Engine {
        scenario,
        fakes,
        clock,
        backend,
        timeline,
        observed: Observed::default(),
        fired: vec![false; scenario.events.len()],
        settle_ms,
        limits,
        armed: BTreeSet::new(),
    };
    match engine.start(FIRST_WORKER).await {
        Err(e) => engine.fail(e),
        Ok(()) => {
            engine.act().await;
            if !engine.broken() {
                engine.drain().await;
            }
            if !engine.broken() {
                engine.take_webhooks().await;
            }
            if !engine.broken() {
                engine.reconcile().await;
            }
            if !engine.broken() {
                engine.finish().await;
            }
        }
    }
    engine.backend.end_background();
    if let Some(why) = engine.backend.failure() {
        engine.observed.executor_error.get_or_insert(why);
    }
    let graceful = !engine.broken();
    engine.backend.shut_down(graceful).await;
    if engine.observed.ledgers.is_empty() {
        // The run ended early: what the fakes saw still explains the executor's error.
        engine.collect();
    }
    let mut observed = engine.observed;
    observed.timeline = engine.timeline.take_sorted();
    observed
}

impl<B: Backend> Engine<'_, B> {
    fn moment(&self, lane: &str, kind: &str, detail: String) {
        let at_ms = self.clock.now_ms();
        self.timeline.push(Moment { at_ms, lane: lane.into(), kind: kind.into(), detail });
    }

    /// Records why the run could not be checked; the first reason stands, and a reason the
    /// backend noticed by itself came first.
    fn fail(&mut self, why: String) {
        if let Some(first) = self.backend.failure() {
            self.observed.executor_error.get_or_insert(first);
        }
        self.observed.executor_error.get_or_insert(why);
    }

    fn broken(&self) -> bool {
        self.observed.executor_error.is_some() || self.backend.failure().is_some()
    }

    fn record_changes(&self, worker: &str, changes: Vec<StateChange>) {
        for c in changes {
            let at_ms = c.at_ms.unwrap_or_else(|| self.clock.now_ms());
            let detail = format!("{} -> {}", c.intent_id, c.state);
            self.timeline.push(Moment { at_ms, lane: worker.into(), kind: "state".into(), detail });
        }
    }

    async fn start(&mut self, name: &str) -> Result<(), String> {
        let before = self.backend.roster().get(name).map_or(0, |w| w.incarnation());
        let incarnation = self.backend.start_worker(name).await?;
        // A worker's lives only grow: the checker tells a stale write from a fresh one by the
        // life that sent it, so a restart that reused a number would hide one. Checked in every
        // build: a verdict read from a run where it failed would be wrong.
        assert!(
            incarnation > before
                && self.backend.roster().get(name).map(|w| w.incarnation()) == Some(incarnation),
            "worker {name}: life {incarnation} started after life {before}"
        );
        self.moment(name, "start", format!("incarnation {incarnation}"));
        Ok(())
    }

    /// Sends a request and waits for its answer, applying the events of the request points
    /// reached meanwhile.
    async fn call(&mut self, worker: &str, request: Request<'_>) -> Result<Reply, CallError> {
        let mut call = self.backend.send(worker, request).await?;
        loop {
            match self.backend.answer(&mut call).await {
                Step::Reached(reached) => self.on_reached(reached).await,
                Step::Done(answer) => return answer,
                Step::Broken(why) => return Err(CallError::Broken(why)),
            }
        }
    }

    /// Lets time pass, applying the events of the request points reached meanwhile.
    async fn wait(&mut self, wait: Wait) {
        let mut waiting = self.backend.wait(wait);
        loop {
            match self.backend.waited(&mut waiting).await {
                Step::Reached(reached) => self.on_reached(reached).await,
                Step::Done(()) => return,
                Step::Broken(why) => return self.fail(why),
            }
        }
    }

    /// Applies the events of a point some request reached. Where the request's answer is
    /// held at a gate, what must happen before it goes (signals, a heal, a clock jump, asking
    /// for a pass) happens first, then the gate opens, then new workers start (a start can
    /// take seconds, which no answer should wait for).
    async fn on_reached(&mut self, reached: Reached) {
        let Reached { events, gate } = reached;
        let Some(gate) = gate else {
            for i in events {
                self.fire(i).await;
            }
            return;
        };
        let mut later = Vec::new();
        for i in events {
            match self.scenario.events.get(i).map(|e| &e.action) {
                Some(EventAction::StartWorker { .. }) => later.push(i),
                _ => self.fire(i).await,
            }
        }
        let _ = gate.send(());
        for i in later {
            self.fire(i).await;
        }
    }

    async fn fire_point(&mut self, matches: impl Fn(&Point) -> bool) {
        for i in self.scenario.events_at(matches) {
            self.fire(i).await;
        }
    }

    /// Applies event `i`, once.
    async fn fire(&mut self, i: usize) {
        if self.fired.get(i).copied().unwrap_or(true) {
            return;
        }
        self.fired[i] = true;
        let Some(event) = self.scenario.events.get(i).cloned() else { return };
        match event.action {
            EventAction::Crash { worker } => {
                let detail = self.backend.crash(&worker).await;
                self.moment(&worker, "crash", detail);
            }
            EventAction::Pause { worker, for_ms } => {
                let detail = self.backend.pause(&worker, for_ms).await;
                self.moment(&worker, "pause", detail);
            }
            EventAction::StartWorker { worker } => {
                // A worker that is up is not started twice.
                if self.backend.roster().running(&worker) {
                    self.moment(&worker, "start", "already running".into());
                    return;
                }
                match self.start(&worker).await {
                    Ok(()) => self.backend.work_in_background(&worker).await,
                    Err(e) => self.fail(e),
                }
            }
            EventAction::ClockJump { .. } | EventAction::Heal => {
                if let Some(moment) = World::apply(&self.fakes, &event.action, self.clock.now_ms()) {
                    self.timeline.push(moment);
                }
            }
            EventAction::Reconcile { worker } => {
                self.backend.ask_reconcile(&worker).await;
                self.moment(&worker, "reconcile", "asked for a pass".into());
            }
        }
    }

    async fn act(&mut self) {
        let scenario = self.scenario;
        // The intents the executor did not accept, each with whether it was for an action (or
        // a feature) it does not support. A step after one of them is never proposed: the
        // protocol promises that every `after` id was proposed, and accepted, before it.
        let mut not_accepted: BTreeMap<&str, bool> = BTreeMap::new();
        for intent in &scenario.intents {
            let missing = if intent.is_step() && !self.backend.supports_workflows() {
                Some(WORKFLOWS_FEATURE)
            } else if intent.is_triggered() && !self.backend.supports_webhooks() {
                Some(WEBHOOKS_FEATURE)
            } else {
                None
            };
            if let Some(feature) = missing {
                // Reported as unsupported, as an action the executor does not know would be:
                // what it never received is not held against it.
                self.observed.unsupported_steps.push(intent.id.clone());
                let why = format!("not proposed: the executor does not announce \"{feature}\"");
                self.observed.unacknowledged.insert(intent.id.clone(), why);
                not_accepted.insert(&intent.id, true);
                continue;
            }
            let before = intent.after.iter().find_map(|id| not_accepted.get_key_value(id.as_str()));
            if let Some((&before, &unsupported)) = before {
                // Unsupported all the way down: exempt, as its predecessor is. A predecessor
                // refused for another reason leaves the step unacknowledged, and judged.
                let why = if unsupported {
                    self.observed.unsupported_steps.push(intent.id.clone());
                    format!("not proposed: it comes after {before}, which the executor does not support")
                } else {
                    format!("not proposed: it comes after {before}, which the executor did not accept")
                };
                self.moment(FIRST_WORKER, "not proposed", format!("{}: {why}", intent.id));
                self.observed.unacknowledged.insert(intent.id.clone(), why);
                not_accepted.insert(&intent.id, unsupported);
                continue;
            }
            match self.call(FIRST_WORKER, Request::Propose(intent)).await {
                Ok(Reply::Accepted) => {
                    if let Some(trigger) = &intent.on_event {
                        self.armed.insert(trigger.payment_intent.clone());
                    }
                    // An intent only a forged event would start is kept, never recorded, by
                    // an executor that refuses the forgery: its status need not hold it.
                    if !intent.on_event.as_ref().is_some_and(|t| t.forged) {
                        self.observed.acknowledged.push(intent.id.clone());
                    }
                    // A workflow's step says what it waits for, so the timeline shows the
                    // dependencies where the steps begin.
                    let detail = if intent.is_step() {
                        format!("{} after {}", intent.id, intent.after.join(", "))
                    } else {
                        intent.id.clone()
                    };
                    self.moment(FIRST_WORKER, "proposed", detail);
                    let id = &intent.id;
                    self.fire_point(
                        |p| matches!(p, Point::AfterPropose { after_propose } if after_propose == id),
                    )
                    .await;
                }
                Ok(Reply::Refused { unsupported, why }) => {
                    if unsupported && !self.observed.unsupported.contains(&intent.action) {
                        self.observed.unsupported.push(intent.action.clone());
                    }
                    self.observed.unacknowledged.insert(intent.id.clone(), why);
                    not_accepted.insert(&intent.id, unsupported);
                }
                Ok(other) => return self.unexpected(FIRST_WORKER, "propose", &other),
                Err(CallError::Gone) => {
                    // It may have been recorded before the worker went: a step after it is
                    // still proposed, and the executor judges whether it knows its predecessor.
                    self.observed.unacknowledged.insert(intent.id.clone(), "the worker was down".into());
                }
                Err(CallError::Broken(why)) => return self.fail(why),
            }
        }
        self.fire_point(|p| matches!(p, Point::Phase { after_phase: PhaseName::Act })).await;
    }

    /// A reply of the wrong kind: a backend bug, reported as the run's error.
    fn unexpected(&mut self, worker: &str, kind: &str, reply: &Reply) {
        self.fail(format!("worker {worker} answered {kind} with {reply:?}"));
    }

    /// One drain or reconcile pass on `worker`; false when the run broke.
    async fn pass(&mut self, worker: &str, request: Request<'_>) -> bool {
        match self.call(worker, request).await {
            Ok(Reply::Changes(changes)) => {
                self.record_changes(worker, changes);
                true
            }
            Err(CallError::Gone) => true,
            Ok(Reply::Failed(why)) | Err(CallError::Broken(why)) => {
                self.fail(why);
                false
            }
            Ok(other) => {
                self.unexpected(worker, request.kind(), &other);
                false
            }
        }
    }

    async fn drain(&mut self) {
        if self.pass(FIRST_WORKER, Request::Drain).await {
            self.fire_point(|p| matches!(p, Point::Phase { after_phase: PhaseName::Drain })).await;
        }
    }

    /// The webhooks phase, for a scenario whose intents events start and an executor that
    /// receives them: until the fakes owe no webhook (no payment due, no delivery with
    /// attempts left) or [`WEBHOOKS_MS_MAX`] passes, time passes in steps of
    /// [`WEBHOOK_STEP_MS`], crashed workers come back at once (the service's retries must find
    /// someone), and `w1` drains what the deliveries started. Faults are still armed: a
    /// webhook fault shapes the deliveries of the payment it matched.
    async fn take_webhooks(&mut self) {
        if !self.scenario.needs_webhooks() || !self.backend.supports_webhooks() {
            return;
        }
        let mut waited_ms = 0;
        loop {
            if !self.restart_crashed().await || !self.pass(FIRST_WORKER, Request::Drain).await {
                return;
            }
            if !self.owes_webhooks() || waited_ms >= WEBHOOKS_MS_MAX {
                break;
            }
            self.wait(Wait::For { ms: WEBHOOK_STEP_MS }).await;
            if self.broken() {
                return;
            }
            waited_ms += WEBHOOK_STEP_MS;
        }
    }

    /// Whether a fake still owes a webhook, or waits for a listener the executor owes it: a
    /// payment whose trigger the executor accepted (its endpoint may come at its next pass).
    fn owes_webhooks(&self) -> bool {
        World::owes_webhooks(&self.fakes)
            || self.fakes.payments.awaiting_listener().iter().any(|pi| self.armed.contains(pi))
    }

    async fn reconcile(&mut self) {
        if let Some(moment) = World::apply(&self.fakes, &EventAction::Heal, self.clock.now_ms()) {
            self.timeline.push(moment);
        }
        // Past every request in flight, every late commit and every read lag (the heal ended
        // the faults that made them).
        self.wait(Wait::Settled { bound_ms: self.settle_ms }).await;
        if self.broken() {
            return;
        }
        self.backend.resume_paused().await;
        let round_pause_ms = self.limits.request_timeout_ms + self.settle_ms + setup::ROUND_MARGIN_MS;
        let names = self.backend.roster().names();
        for round in 1..=RECONCILE_ROUNDS_MAX {
            self.observed.reconcile_rounds = round;
            // Crashed workers come back first; a crash point may also fire during a round.
            if !self.restart_crashed().await {
                return;
            }
            let requests_before = World::requests_seen(&self.fakes);
            for name in &names {
                if !self.pass(name, Request::Reconcile).await || !self.pass(name, Request::Drain).await {
                    return;
                }
            }
            let mut pause_ms = round_pause_ms;
            match self.call(FIRST_WORKER, Request::Status).await {
                Ok(Reply::Claims(claims)) if claims.iter().all(|c| !unresolved(&c.state)) => {
                    // An accepted intent a genuine event starts that status does not hold yet
                    // is owed another round while the executor is still at work on it (its
                    // requests reach the fakes: a registration that only succeeds once the
                    // faults are healed), after a short pause: nothing of its own is in flight.
                    let at_work = World::requests_seen(&self.fakes) > requests_before;
                    if self.triggers_shown(&claims) || !at_work {
                        break;
                    }
                    pause_ms = self.limits.request_timeout_ms + setup::ROUND_MARGIN_MS;
                }
                Err(CallError::Broken(why)) => return self.fail(why),
                Ok(_) | Err(CallError::Gone) => {}
            }
            self.wait(Wait::For { ms: pause_ms }).await;
            if self.broken() {
                return;
            }
        }
    }

    /// Whether `claims` hold every intent a genuine event starts that the executor accepted.
    /// One not there yet waits for the executor to act on its event, which a later round may
    /// bring: a worker whose registration only succeeds once the faults are healed reads the
    /// events it missed then. Status need not list such an intent before, so without this the
    /// rounds would end with the executor's work still owed to it (an executor that lost the
    /// event sends nothing more, and the rounds end).
    fn triggers_shown(&self, claims: &[Claim]) -> bool {
        self.scenario
            .intents
            .iter()
            .filter(|i| i.on_event.as_ref().is_some_and(|t| !t.forged))
            .filter(|i| self.observed.acknowledged.contains(&i.id))
            .all(|i| claims.iter().any(|c| c.id == i.id))
    }

    /// Starts every crashed worker again on its state directory; false if one would not.
    async fn restart_crashed(&mut self) -> bool {
        for name in self.backend.roster().crashed() {
            if let Err(e) = self.start(&name).await {
                self.fail(e);
                return false;
            }
        }
        true
    }

    async fn finish(&mut self) {
        // The engine has the last word: no more background rounds.
        self.backend.end_background();
        // Late commits land within the settle bound: only then is a ledger final.
        self.wait(Wait::Settled { bound_ms: self.settle_ms }).await;
        if self.broken() || !self.restart_crashed().await {
            return;
        }
        match self.call(FIRST_WORKER, Request::Status).await {
            Ok(Reply::Claims(claims)) => self.observed.claims = claims,
            Ok(Reply::Failed(why)) | Err(CallError::Broken(why)) => return self.fail(why),
            Ok(other) => return self.unexpected(FIRST_WORKER, "status", &other),
            Err(CallError::Gone) => return self.fail(format!("worker {FIRST_WORKER} is gone at the end")),
        }
        self.collect();
    }

    /// Ledgers and journals of the announced services, and of any other service an effect
    /// reached (every effect is judged, whoever was told of its service), with when they were
    /// read and what could still change them then (read first: nothing it leaves out lands
    /// unseen).
    fn collect(&mut self) {
        self.observed.pending = World::pending(&self.fakes);
        // A payment waiting for a listener changes no ledger by itself: the intent its event
        // would start is judged missing (nothing-lost, expected-states) where it was owed.
        self.observed.pending.retain(|p| p.what != fake_services::PendingKind::AwaitingListener.name());
        self.observed.ledgers_read_at_ms = Some(self.clock.now_ms());
        World::read_ledgers(&self.fakes, self.scenario, &mut self.observed);
    }
}

/// A state from which the executor still owes a final word.
fn unresolved(state: &str) -> bool {
    vocabulary::State::parse(state).is_some_and(vocabulary::State::is_unresolved)
}
