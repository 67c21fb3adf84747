//! How long the whole catalog takes live against the Python executor of
//! `examples/executors/python` (the conformance kit's example, on the real SDKs): in total and
//! per scenario. Target: under 60 s on this 2-core machine, as for the reference executor.
//!
//! What is measured, as in `run.rs`'s live part: the whole catalog through
//! [`run::run_cases`] with the live driver (a Python process per worker, loopback HTTP fakes,
//! real SIGKILL and SIGSTOP, state on disk under the temp dir), on [`THREADS`] threads as
//! `twice run --executor "... executor.py" --cases 0` does, [`ROUNDS`] rounds; the total wall
//! time, and each scenario's (the time between its thread's previous case and it, taken from
//! the progress callback, which runs on the case's thread).
//!
//! The interpreter is `TWICE_PYTHON` (which `cargo xtask bench` sets, as `cargo xtask test`
//! does), or else `target/twice-venv/bin/python` under the workspace root; the venv holds the
//! SDKs pinned in `tests/requirements.txt`.
//!
//! Output: a readable line per round and per scenario, then one `BENCH {json}` line per figure
//! (the record format is described in `xtask/src/main.rs`). Run it alone with
//! `cargo bench -p harness --bench python`.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use harness::live::ExecutorCommand;
use harness::run::{self, Case, Driver, Outcome, Progress, ScenarioResult, Source};
use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The name of this benchmark in `BENCH` records.
const BENCH: &str = "harness/python";
/// The seed of every round: `twice run`'s default.
const SEED: u64 = 1;
/// Threads, as `twice run` uses on this machine (its default is the number of cores).
const THREADS: usize = 2;
const ROUNDS: usize = 3;
/// Target from the issue.
const TARGET_LIVE_S: f64 = 60.0;
/// The venv's interpreter, relative to the workspace root, when `TWICE_PYTHON` is unset.
const DEFAULT_PYTHON: &str = "target/twice-venv/bin/python";
/// The executor, relative to the workspace root.
const EXECUTOR: &str = "examples/executors/python/executor.py";

fn main() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or("the harness crate has no parent")?;
    let python = match std::env::var_os("TWICE_PYTHON") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => root.join(DEFAULT_PYTHON),
    };
    if !python.is_file() {
        return Err(format!(
            "no Python interpreter at {}: set TWICE_PYTHON, or run `cargo xtask test` once to build the venv",
            python.display()
        )
        .into());
    }
    let command = ExecutorCommand { program: python, args: vec![root.join(EXECUTOR).display().to_string()] };
    let work = WorkDir::create()?;
    let mut records = Vec::new();
    live_figures(command, &work.path, &mut records)?;
    println!();
    for r in &records {
        println!("BENCH {r}");
    }
    Ok(())
}

fn catalog() -> Result<Vec<Case>> {
    Ok(scenarios::catalog::catalog()?
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .collect())
}

/// Names of the cases that did not pass, with their outcome.
fn failures(results: &[ScenarioResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.outcome != Outcome::Passed)
        .map(|r| format!("{} ({:?})", r.name, r.outcome))
        .collect()
}

fn live_figures(command: ExecutorCommand, work: &Path, records: &mut Vec<Value>) -> Result<()> {
    let load_before = load_average();
    let driver = Driver::Live(command);
    let cases = catalog()?;
    println!(
        "{BENCH}: live, the whole catalog ({} scenarios) against {} on {THREADS} threads, {ROUNDS} rounds",
        cases.len(),
        driver.describe()
    );
    let mut walls = Vec::new();
    let mut per_scenario: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut failed_rounds = Vec::new();
    for round in 1..=ROUNDS {
        let timing = Timing::default();
        let started = Instant::now();
        let results = run::run_cases(&cases, SEED, &driver, work, THREADS, &timing, "twice run");
        let wall = started.elapsed();
        let failed = failures(&results);
        let passed = results.len() - failed.len();
        println!(
            "  round {round}/{ROUNDS}  {:.1} s, {passed} of {} passed{}",
            wall.as_secs_f64(),
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
    records.push(record(
        &format!("live, whole catalog ({} scenarios), Python executor, {THREADS} threads", cases.len()),
        total,
        "s",
        Some(total_spread),
        &format!(
            "Wall time of run::run_cases over the catalog with the live driver against \
             examples/executors/python/executor.py on the venv's interpreter (a Python process per worker, \
             stripe-python, requests, boto3 and web3.py against the loopback HTTP fakes, real SIGKILL and \
             SIGSTOP, SQLite state on disk under the temp dir), as `twice run --executor \"python \
             executor.py\" --cases 0` on {THREADS} threads; median of {ROUNDS} rounds. {passing} Target: \
             under {TARGET_LIVE_S:.0} s; {met}. {load}"
        ),
    ));
    // Each scenario's median over the rounds, slowest first.
    let mut medians: Vec<(String, f64)> =
        per_scenario.iter().map(|(name, took)| (name.clone(), summary(took).0)).collect();
    medians.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("per scenario (median of {ROUNDS} rounds, slowest first):");
    for (name, took) in &medians {
        println!("  {took:>6.2} s  {name}");
    }
    let values: Vec<f64> = medians.iter().map(|(_, t)| *t).collect();
    let (median, _) = summary(&values);
    let max = medians.first().map_or(0.0, |s| s.1);
    let sum: f64 = values.iter().sum();
    records.push(record(
        "live, per scenario, median (Python executor)",
        median,
        "s",
        None,
        &format!(
            "Wall time of one catalog scenario (its own median over {ROUNDS} rounds), median over the {} \
             scenarios; together they take {sum:.1} s, spread over {THREADS} threads.",
            medians.len()
        ),
    ));
    records.push(record(
        "live, per scenario, max (Python executor)",
        max,
        "s",
        None,
        &format!(
            "The slowest scenarios (medians over {ROUNDS} rounds): {}.",
            medians.iter().take(3).map(|(n, t)| format!("{n} {t:.1} s")).collect::<Vec<_>>().join(", ")
        ),
    ));
    println!("live, per scenario: median {median:.2} s, max {max:.2} s");
    Ok(())
}

/// Per case, the time since its thread's previous case ended (or since the run started).
#[derive(Default)]
struct Timing {
    started: Mutex<Option<Instant>>,
    last: Mutex<HashMap<ThreadId, Instant>>,
    took: Mutex<Vec<(String, Duration)>>,
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

/// A fresh directory under the system's temp dir, removed at the end.
struct WorkDir {
    path: PathBuf,
}

impl WorkDir {
    fn create() -> Result<WorkDir> {
        let path = std::env::temp_dir().join(format!("twice-bench-python-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)?;
        Ok(WorkDir { path })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// The 1-minute load average, as /proc/loadavg says.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

fn record(name: &str, value: f64, unit: &str, spread_pct: Option<f64>, notes: &str) -> Value {
    let round = |v: f64, places: i32| (v * 10f64.powi(places)).round() / 10f64.powi(places);
    let mut r = json!({
        "bench": BENCH,
        "name": name,
        "value": round(value, 2),
        "unit": unit,
        "notes": notes,
    });
    if let Some(spread) = spread_pct {
        r["spread_pct"] = json!(round(spread, 1));
    }
    r
}

/// The median and the spread, (max - min) / median in percent.
fn summary(samples: &[f64]) -> (f64, f64) {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        return (0.0, 0.0);
    }
    let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
    let spread = if median > 0.0 { (sorted[n - 1] - sorted[0]) / median * 100.0 } else { 0.0 };
    (median, spread)
}
