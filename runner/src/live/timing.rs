//! Where a live run's time goes (`twice run --timeline FILE`): per scenario, when it ran, how
//! long each executor process took from spawn to its `init` reply, and how long the harness
//! spent in each kind of wait; per run, the harness's own CPU and its children's, and the
//! slowest scenarios.
//!
//! Opt-in and outside every result: nothing here is read by the checker or written to
//! results.json or a report, so a run with `--timeline` says exactly what a run without it
//! says. Off (the default), a scenario carries no record and each wait costs one `is_some`.
//! Sim never records: its waits are virtual time, and its backend is another.
//!
//! Waits overlap nothing within a scenario (the engine does one thing at a time), so a
//! scenario's waits add up to at most its wall time; what is left is the harness's own work
//! (checking, fakes' bookkeeping, request points). Scenarios run side by side (`--jobs`), so
//! the scenarios' times add up to more than the run's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

use crate::process::lock;

/// The JSON document's `schema`.
pub const TIMELINE_SCHEMA: &str = "twice-timeline/1";
/// How many of the slowest scenarios the run's summary names.
pub const SLOWEST_MAX: usize = 10;

/// The recorder of the run, while one records.
static SINK: Mutex<Option<Sink>> = Mutex::new(None);

struct Sink {
    started: Instant,
    /// `RUSAGE_SELF` and `RUSAGE_CHILDREN` then: the run's CPU is what is added since.
    cpu_at_start: (Cpu, Cpu),
    scenarios: Vec<ScenarioTiming>,
}

/// Starts recording every live scenario run from now on (a run's first step).
pub fn enable() {
    let cpu_at_start = (rusage(libc::RUSAGE_SELF), rusage(libc::RUSAGE_CHILDREN));
    *lock(&SINK) = Some(Sink { started: Instant::now(), cpu_at_start, scenarios: Vec::new() });
}

/// One kind of wait: how long in all, how many times.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WaitTotal {
    pub ms: f64,
    pub count: u64,
}

/// One executor process's start: spawn to the `init` reply.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessStart {
    /// The worker life, `w1#2`.
    pub worker: String,
    /// From the run's start.
    pub spawned_at_ms: f64,
    /// Spawn to `init_ok` (or to the failure that ended the wait).
    pub init_ms: f64,
}

/// One live scenario run (a shrink candidate is one too).
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioTiming {
    pub name: String,
    pub seed: u64,
    /// From the run's start.
    pub start_ms: f64,
    pub end_ms: f64,
    pub wall_ms: f64,
    pub processes: Vec<ProcessStart>,
    /// By kind: see [`WAIT_KINDS`].
    pub waits: BTreeMap<&'static str, WaitTotal>,
    /// Times the backend looked at its workers while it waited (every [`super::POLL_MS`]).
    pub polls: u64,
    /// Wall time not spent in any wait above: the harness's own work.
    pub other_ms: f64,
}

/// What each wait kind in a record means.
pub const WAIT_KINDS: &[(&str, &str)] = &[
    ("setup", "runtime, state directory, fakes and the world, before the first worker"),
    ("listen", "starting the fakes' listeners for a worker life"),
    ("init", "spawn to init reply (also in processes)"),
    ("restart_kill", "ending a crashed life before its restart"),
    ("reply.propose", "waiting for propose replies"),
    ("reply.drain", "waiting for drain replies (the executor's passes: sends, leases, backoffs)"),
    ("reply.reconcile", "waiting for reconcile replies"),
    ("reply.status", "waiting for status replies"),
    ("settle", "the world settling after a heal and before the finish (ends early when quiet)"),
    ("round_pause", "between reconcile rounds while status shows unresolved intents"),
    ("pause_quiet", "the worker's quiet before a SIGSTOP"),
    ("pause_stop", "a SIGSTOP taking hold"),
    ("crash", "SIGKILL of a crash event"),
    ("shutdown_exit", "workers exiting after shutdown"),
    ("shutdown_kill", "killing what is left of each worker"),
    ("server_stop", "stopping the listeners"),
    ("cleanup", "dropping the runtime and removing the scenario's directory"),
];

/// A scenario's record while it runs: shared by the backend and the caller that runs it;
/// `None` when the run does not record.
#[derive(Clone, Default)]
pub struct Recorder(Option<Arc<Mutex<ScenarioTiming>>>);

impl Recorder {
    /// A record for one scenario run, if the run records.
    pub fn start(name: &str, seed: u64) -> Recorder {
        let Some(started) = lock(&SINK).as_ref().map(|s| s.started) else { return Recorder(None) };
        let start_ms = ms(started.elapsed());
        Recorder(Some(Arc::new(Mutex::new(ScenarioTiming {
            name: name.to_string(),
            seed,
            start_ms,
            end_ms: start_ms,
            wall_ms: 0.0,
            processes: Vec::new(),
            waits: BTreeMap::new(),
            polls: 0,
            other_ms: 0.0,
        }))))
    }

    /// When a wait begins: `None` (no clock read) when nothing records.
    pub fn now(&self) -> Option<Instant> {
        self.0.as_ref().map(|_| Instant::now())
    }

    /// Adds the time since `since` to wait kind `kind`.
    pub fn spent(&self, kind: &'static str, since: Option<Instant>) {
        if let (Some(record), Some(since)) = (&self.0, since) {
            let elapsed_ms = ms(since.elapsed());
            let mut record = lock(record);
            let total = record.waits.entry(kind).or_default();
            total.ms += elapsed_ms;
            total.count += 1;
        }
    }

    pub fn polled(&self) {
        if let Some(record) = &self.0 {
            lock(record).polls += 1;
        }
    }

    /// A process start: spawned at `since`, answered (or failed) now.
    pub fn process_started(&self, worker: &str, since: Option<Instant>) {
        let (Some(record), Some(since)) = (&self.0, since) else { return };
        let Some(started) = lock(&SINK).as_ref().map(|s| s.started) else { return };
        let init_ms = ms(since.elapsed());
        let spawned_at_ms = ms(since.saturating_duration_since(started));
        lock(record).processes.push(ProcessStart { worker: worker.to_string(), spawned_at_ms, init_ms });
        self.spent("init", Some(since));
    }

    /// The scenario is over: its record joins the run's.
    pub fn finish(self) {
        let Some(record) = self.0 else { return };
        let mut record = lock(&record).clone();
        let mut sink = lock(&SINK);
        let Some(sink) = sink.as_mut() else { return };
        record.end_ms = ms(sink.started.elapsed());
        record.wall_ms = record.end_ms - record.start_ms;
        for total in record.waits.values_mut() {
            total.ms = round_ms(total.ms);
        }
        let waited: f64 = record.waits.values().map(|w| w.ms).sum();
        record.wall_ms = round_ms(record.wall_ms);
        record.other_ms = round_ms((record.wall_ms - waited).max(0.0));
        sink.scenarios.push(record);
    }
}

fn ms(duration: std::time::Duration) -> f64 {
    round_ms(duration.as_secs_f64() * 1_000.0)
}

/// To the microsecond: sums of rounded figures carry no float noise into the document.
fn round_ms(ms: f64) -> f64 {
    (ms * 1_000.0).round() / 1_000.0
}

/// CPU seconds, as getrusage(2) reports them.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Cpu {
    pub user_s: f64,
    pub sys_s: f64,
}

/// `RUSAGE_SELF` or `RUSAGE_CHILDREN` (children that have ended and been waited for).
fn rusage(who: libc::c_int) -> Cpu {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one rusage into the buffer it is given, which is large enough.
    let usage = unsafe {
        if libc::getrusage(who, usage.as_mut_ptr()) != 0 {
            return Cpu::default();
        }
        usage.assume_init()
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Cpu { user_s: seconds(usage.ru_utime), sys_s: seconds(usage.ru_stime) }
}

impl Cpu {
    /// What was added since `earlier`, to the millisecond.
    fn since(self, earlier: Cpu) -> Cpu {
        let round = |s: f64| (s * 1000.0).round() / 1000.0;
        Cpu { user_s: round(self.user_s - earlier.user_s), sys_s: round(self.sys_s - earlier.sys_s) }
    }
}

/// The whole run's document.
#[derive(Debug, Serialize)]
pub struct RunTiming {
    pub schema: &'static str,
    pub wall_ms: f64,
    /// The harness itself (every thread), during the run.
    pub cpu_harness: Cpu,
    /// The executor processes (and what they started) that ended during the run.
    pub cpu_children: Cpu,
    pub scenarios_run: usize,
    pub processes_started: usize,
    /// Every scenario's waits added up, by kind (more than the run's wall time: scenarios run
    /// side by side).
    pub waits: BTreeMap<&'static str, WaitTotal>,
    pub waits_explained: BTreeMap<&'static str, &'static str>,
    pub process_init_ms: Spread,
    /// The slowest scenarios, slowest first.
    pub slowest: Vec<Slow>,
    pub scenarios: Vec<ScenarioTiming>,
}

/// One of the slowest scenarios.
#[derive(Debug, Serialize)]
pub struct Slow {
    pub name: String,
    pub wall_ms: f64,
}

/// Median, 90th percentile and maximum.
#[derive(Debug, Default, Serialize)]
pub struct Spread {
    pub median: f64,
    pub p90: f64,
    pub max: f64,
}

fn spread(mut values: Vec<f64>) -> Spread {
    if values.is_empty() {
        return Spread::default();
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    Spread { median: at(0.5), p90: at(0.9), max: at(1.0) }
}

/// Stops recording and returns the run's document (`None` when nothing recorded).
pub fn take() -> Option<RunTiming> {
    let sink = lock(&SINK).take()?;
    let mut scenarios = sink.scenarios;
    scenarios.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    let mut waits: BTreeMap<&'static str, WaitTotal> = BTreeMap::new();
    for s in &scenarios {
        for (kind, w) in &s.waits {
            let total = waits.entry(kind).or_default();
            total.ms += w.ms;
            total.count += w.count;
        }
    }
    for total in waits.values_mut() {
        total.ms = total.ms.round();
    }
    let inits: Vec<f64> = scenarios.iter().flat_map(|s| s.processes.iter().map(|p| p.init_ms)).collect();
    let mut slowest: Vec<Slow> =
        scenarios.iter().map(|s| Slow { name: s.name.clone(), wall_ms: s.wall_ms }).collect();
    slowest.sort_by(|a, b| b.wall_ms.total_cmp(&a.wall_ms));
    slowest.truncate(SLOWEST_MAX);
    Some(RunTiming {
        schema: TIMELINE_SCHEMA,
        wall_ms: ms(sink.started.elapsed()),
        cpu_harness: rusage(libc::RUSAGE_SELF).since(sink.cpu_at_start.0),
        cpu_children: rusage(libc::RUSAGE_CHILDREN).since(sink.cpu_at_start.1),
        scenarios_run: scenarios.len(),
        processes_started: inits.len(),
        waits,
        waits_explained: WAIT_KINDS.iter().copied().collect(),
        process_init_ms: spread(inits),
        slowest,
        scenarios,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spread_reads_its_quantiles() {
        let s = spread((1..=10).map(f64::from).collect());
        assert_eq!((s.median, s.p90, s.max), (6.0, 9.0, 10.0));
        assert_eq!(spread(Vec::new()).max, 0.0);
    }

    #[test]
    fn nothing_records_unless_enabled() {
        let recorder = Recorder(None);
        assert!(recorder.now().is_none());
        recorder.spent("settle", Some(Instant::now()));
        recorder.finish();
    }
}
