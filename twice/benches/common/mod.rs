//! What the harness benchmarks share: timing each case and the whole live catalog against one
//! executor command, besides what every benchmark shares (`bench_support`, re-exported).
//!
//! Each benchmark binary includes this module and uses part of it, hence the `dead_code`
//! allowance on the parts one of them leaves alone.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use results::{Outcome, ScenarioResult, Source};
use runner::live::ExecutorCommand;
use runner::run::{self, Case, Driver, Progress, RunContext};
use serde_json::Value;

pub use bench_support::{WorkDir, load_average, record, summary};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The seed of every round: `twice run`'s default.
pub const SEED: u64 = 1;
/// Threads, as `twice run` uses on this machine (its default is the number of cores).
pub const THREADS: usize = 2;
/// The whole live catalog must take less than this (design §8).
pub const TARGET_LIVE_S: f64 = 60.0;

/// The catalog, as `twice run` takes it.
pub fn catalog() -> Result<Vec<Case>> {
    Ok(scenarios::catalog::catalog()?
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .collect())
}

/// Names of the cases that did not pass, with their outcome.
pub fn failures(results: &[ScenarioResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.outcome != Outcome::Passed)
        .map(|r| format!("{} ({:?})", r.name, r.outcome))
        .collect()
}

/// Progress that says nothing.
#[allow(dead_code)]
pub struct Quiet;

impl Progress for Quiet {
    fn started(&self, _: usize) {}
    fn finished(&self, _: &ScenarioResult) {}
    fn done(&self) {}
}

/// Per case, the time since its thread's previous case ended (or since the run started).
#[derive(Default)]
pub struct Timing {
    started: Mutex<Option<Instant>>,
    last: Mutex<HashMap<ThreadId, Instant>>,
    pub took: Mutex<Vec<(String, Duration)>>,
}

impl Progress for Timing {
    fn started(&self, _: usize) {
        *self.started.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    fn finished(&self, result: &ScenarioResult) {
        // Called on the thread that ran the case, right after it.
        let now = Instant::now();
        let started = self.started.lock().unwrap_or_else(|p| p.into_inner()).unwrap_or(now);
        let previous = self
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(std::thread::current().id(), now)
            .unwrap_or(started);
        self.took.lock().unwrap_or_else(|p| p.into_inner()).push((result.name.clone(), now - previous));
    }

    fn done(&self) {}
}

/// What one live-catalog measurement is about.
pub struct Live<'a> {
    /// The benchmark's name in its records.
    pub bench: &'a str,
    /// Appended to the figures' names (", Python executor"), or empty for the reference.
    pub who: &'a str,
    /// How the run was set up, for the notes: what runs, as which `twice run` command.
    pub setup: &'a str,
    pub rounds: usize,
}

/// The whole catalog, live, against `command`, `live.rounds` times: the total wall time, and
/// each scenario's (the time between its thread's previous case and it, taken from the
/// progress callback, which runs on the case's thread). Returns each round's wall time in
/// seconds.
pub fn live_figures(
    live: &Live,
    command: ExecutorCommand,
    work: &Path,
    records: &mut Vec<Value>,
) -> Result<Vec<f64>> {
    let (bench, rounds) = (live.bench, live.rounds);
    let load_before = load_average();
    let driver = Driver::Live(command);
    let cases = catalog()?;
    println!(
        "\n{bench}: live, the whole catalog ({} scenarios) against {} on {THREADS} threads, {rounds} rounds",
        cases.len(),
        driver.describe()
    );
    let mut walls = Vec::new();
    let mut per_scenario: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut failed_rounds = Vec::new();
    for round in 1..=rounds {
        let timing = Timing::default();
        let started = Instant::now();
        let results =
            run::run_cases(&cases, &RunContext::new(SEED, &driver, work, "twice run"), THREADS, &timing);
        let wall = started.elapsed();
        let failed = failures(&results);
        println!(
            "  round {round}/{rounds}  {:.1} s, {} of {} passed{}",
            wall.as_secs_f64(),
            results.len() - failed.len(),
            results.len(),
            if failed.is_empty() { String::new() } else { format!(": not {}", failed.join(", ")) }
        );
        if !failed.is_empty() {
            failed_rounds.push(format!("round {round}: {}", failed.join(", ")));
        }
        walls.push(wall.as_secs_f64());
        for (name, took) in timing.took.into_inner().unwrap_or_else(|p| p.into_inner()) {
            per_scenario.entry(name).or_default().push(took.as_secs_f64());
        }
    }
    let passing = if failed_rounds.is_empty() {
        "Every round passed every scenario.".to_string()
    } else {
        format!("Not every scenario passed: {}.", failed_rounds.join("; "))
    };
    let load = format!("1-minute load average {load_before} before these rounds, {} after.", load_average());
    let (total, total_spread) = summary(&walls);
    let met = if total < TARGET_LIVE_S { "met" } else { "NOT met" };
    println!(
        "live, whole catalog: median {total:.1} s, spread {total_spread:.1} % (target under {TARGET_LIVE_S} s: {met})"
    );
    let who = live.who;
    records.push(record(
        bench,
        &format!("live, whole catalog ({} scenarios){who}, {THREADS} threads", cases.len()),
        total,
        "s",
        Some(total_spread),
        &format!(
            "Wall time of run::run_cases over the catalog with the live driver against {} on {THREADS} \
             threads; median of {rounds} rounds. {passing} Target: under {TARGET_LIVE_S:.0} s; {met}. {load}",
            live.setup
        ),
    ));
    // Each scenario's median over the rounds, slowest first.
    let mut medians: Vec<(String, f64)> =
        per_scenario.iter().map(|(name, took)| (name.clone(), summary(took).0)).collect();
    medians.sort_by(|a, b| b.1.total_cmp(&a.1));
    let values: Vec<f64> = medians.iter().map(|(_, t)| *t).collect();
    let (median, _) = summary(&values);
    let max = medians.first().map_or(0.0, |s| s.1);
    let sum: f64 = values.iter().sum();
    let suffix = who.trim_start_matches(", ");
    let suffix = if suffix.is_empty() { String::new() } else { format!(" ({suffix})") };
    records.push(record(
        bench,
        &format!("live, per scenario, median{suffix}"),
        median,
        "s",
        None,
        &format!(
            "Wall time of one catalog scenario (its own median over {rounds} rounds), median over the {} \
             scenarios; together they take {sum:.1} s, spread over {THREADS} threads.",
            medians.len()
        ),
    ));
    records.push(record(
        bench,
        &format!("live, per scenario, max{suffix}"),
        max,
        "s",
        None,
        &format!(
            "The slowest scenarios (medians over {rounds} rounds): {}.",
            medians.iter().take(3).map(|(n, t)| format!("{n} {t:.1} s")).collect::<Vec<_>>().join(", ")
        ),
    ));
    println!("live, per scenario: median {median:.2} s, max {max:.2} s");
    Ok(walls)
}
