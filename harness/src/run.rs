//! A run: which scenarios, which driver, how many generated cases; the results, the summary
//! and the files they go to.
//!
//! Every scenario gets its own seed derived from the run's seed and the scenario's identity
//! (its name, or a generated case's index), never from its position in the run, so a shard
//! computes exactly what the unsharded run computes for the same scenarios.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use scenarios::Scenario;

use crate::check;
use crate::live::{self, ExecutorCommand};
use crate::observe::Observed;
use crate::sim::{self, SimFactory};

pub use reports::model::{
    FaultApplied, INTENT_MOMENTS, IntentResult, Outcome, RESULTS_SCHEMA, RunResults, ScenarioResult, Shard,
    Source, Totals,
};

/// How scenarios are executed.
pub enum Driver<'a> {
    /// In process, on virtual time.
    Sim(&'a dyn SimFactory),
    /// A real executor program over the stdio protocol.
    Live(ExecutorCommand),
}

impl Driver<'_> {
    pub fn describe(&self) -> String {
        match self {
            Driver::Sim(f) => f.name(),
            Driver::Live(c) => c.to_string(),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Driver::Sim(_) => "sim",
            Driver::Live(_) => "live",
        }
    }
}

/// One scenario to run.
#[derive(Debug, Clone)]
pub struct Case {
    pub scenario: Scenario,
    pub source: Source,
}

/// A stable 64-bit hash (FNV-1a) for deriving seeds.
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3))
}

/// The seed of one case: the run's seed mixed with the case's identity.
pub fn case_seed(run_seed: u64, source: &Source, name: &str) -> u64 {
    match source {
        Source::Generated { index } => run_seed ^ fnv(&index.to_le_bytes()).rotate_left(17),
        _ => run_seed ^ fnv(name.as_bytes()),
    }
}

/// Reports progress as cases finish.
pub trait Progress: Sync {
    fn started(&self, total: usize);
    fn finished(&self, result: &ScenarioResult);
    fn done(&self);
}

/// Runs cases on up to `threads` threads; results come back in case order.
pub fn run_cases(
    cases: &[Case],
    run_seed: u64,
    driver: &Driver<'_>,
    work_dir: &Path,
    threads: usize,
    progress: &dyn Progress,
    replay_prefix: &str,
) -> Vec<ScenarioResult> {
    progress.started(cases.len());
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<ScenarioResult>>> = Mutex::new(vec![None; cases.len()]);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(case) = cases.get(i) else { break };
                    let mut result = run_case(case, run_seed, driver, work_dir, replay_prefix);
                    result.position = i as u64;
                    progress.finished(&result);
                    results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(result);
                }
            });
        }
    });
    progress.done();
    results.into_inner().unwrap_or_else(|p| p.into_inner()).into_iter().flatten().collect()
}

/// Runs one case and checks it.
pub fn run_case(
    case: &Case,
    run_seed: u64,
    driver: &Driver<'_>,
    work_dir: &Path,
    replay_prefix: &str,
) -> ScenarioResult {
    let seed = case_seed(run_seed, &case.source, &case.scenario.name);
    let observed = observe(&case.scenario, seed, driver, work_dir);
    let verdicts = check::check(&case.scenario, &observed);
    let outcome = if observed.executor_error.is_some() {
        Outcome::ExecutorError
    } else if verdicts.iter().all(|v| v.held) {
        Outcome::Passed
    } else {
        Outcome::Violated
    };
    let replay = match &case.source {
        Source::Catalog => format!("{replay_prefix} --scenario {} --seed {run_seed}", case.scenario.name),
        Source::File { path } => format!("{replay_prefix} --scenario {path} --seed {run_seed}"),
        Source::Generated { index } => format!("{replay_prefix} --generated {index} --seed {run_seed}"),
    };
    ScenarioResult {
        name: case.scenario.name.clone(),
        position: 0,
        source: case.source.clone(),
        seed,
        outcome,
        verdicts,
        claims: observed.claims.clone(),
        intents: intent_results(&case.scenario, &observed),
        effects: observed.ledgers.iter().map(|(s, l)| (s.clone(), l.len())).collect(),
        faults_applied: faults_applied(&observed),
        events: observed
            .timeline
            .iter()
            .filter(|m| !INTENT_MOMENTS.contains(&m.kind.as_str()))
            .cloned()
            .collect(),
        replay,
        shrunk: None,
        observed,
    }
}

/// Each intent of the scenario: the executor's final word on it and the effects the checker
/// attributes to it.
fn intent_results(scenario: &Scenario, observed: &Observed) -> Vec<IntentResult> {
    let mut effects = check::attribute(scenario, observed);
    let claims: BTreeMap<&str, _> = observed.claims.iter().map(|c| (c.id.as_str(), c)).collect();
    let mut seen = std::collections::BTreeSet::new();
    scenario
        .intents
        .iter()
        .filter(|i| seen.insert(i.id.as_str()))
        .map(|i| {
            let claim = claims.get(i.id.as_str());
            IntentResult {
                id: i.id.clone(),
                action: i.action.clone(),
                state: claim.map(|c| c.state.clone()),
                attempts: claim.map(|c| c.attempts),
                effects: effects.remove(&i.id).unwrap_or_default(),
                unsupported: observed.unsupported.contains(&i.action),
            }
        })
        .collect()
}

/// Every fault that fired, from the fakes' journals.
fn faults_applied(observed: &Observed) -> Vec<FaultApplied> {
    let mut out = Vec::new();
    for (service, journal) in &observed.journals {
        for entry in journal {
            for applied in &entry.faults {
                out.push(FaultApplied {
                    service: service.clone(),
                    request_seq: entry.seq,
                    at_ms: entry.at_ms,
                    method: entry.method.clone(),
                    path: entry.path.clone(),
                    rule: applied.rule.clone(),
                    fault: applied.fault.clone(),
                });
            }
        }
    }
    out
}

/// Runs a scenario in a driver; a harness failure becomes an executor-free error in the
/// observation, so one broken case never stops a run.
pub fn observe(scenario: &Scenario, seed: u64, driver: &Driver<'_>, work_dir: &Path) -> Observed {
    let observed = match driver {
        Driver::Sim(factory) => {
            sim::run_blocking(scenario, seed, *factory, work_dir).map_err(|e| e.to_string())
        }
        Driver::Live(command) => {
            live::run_blocking(scenario, seed, command, work_dir).map_err(|e| e.to_string())
        }
    };
    observed.unwrap_or_else(|e| Observed {
        executor_error: Some(format!("the harness could not run it: {e}")),
        ..Observed::default()
    })
}

/// Puts results together with the run's facts.
pub fn results(
    seed: u64,
    driver: &Driver<'_>,
    shard: Option<Shard>,
    results: Vec<ScenarioResult>,
) -> RunResults {
    let totals = Totals::of(&results);
    RunResults {
        schema: RESULTS_SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        seed,
        driver: driver.kind().into(),
        executor: driver.describe(),
        shard,
        totals,
        results,
    }
}

/// A readable summary for a terminal or a pull-request comment.
pub fn summary(run: &RunResults) -> String {
    let t = &run.totals;
    let mut out = format!(
        "twice: {} scenarios against {} (seed {}): {} passed, {} violated, {} executor errors\n",
        t.scenarios, run.executor, run.seed, t.passed, t.violated, t.executor_errors
    );
    for r in run.results.iter().filter(|r| r.outcome != Outcome::Passed) {
        out.push_str(&format!("\n  {} ({:?})\n", r.name, r.outcome));
        for v in r.verdicts.iter().filter(|v| !v.held) {
            let first = v.evidence.first().map(String::as_str).unwrap_or("");
            out.push_str(&format!("    {}: {first}\n", v.invariant));
        }
        if let Some(path) = &r.shrunk {
            out.push_str(&format!("    minimal scenario: {path}\n"));
        }
        out.push_str(&format!("    replay: {}\n", r.replay));
    }
    out
}

/// Writes the report files (`results.json`, `summary.md`, `junit.xml`, `report.html`) into
/// `dir`; returns the path of `results.json`.
pub fn write_results(dir: &Path, run: &RunResults) -> std::io::Result<PathBuf> {
    reports::write_all(dir, run).map_err(std::io::Error::other)?;
    Ok(dir.join(reports::RESULTS_FILE))
}

/// Shrinks generated case `index` of a run with `seed`, which failed: the smallest scenario
/// found that still fails the same way (breaks at least one of the invariants the original
/// broke, or, for an executor error, errs again), within `runs_max` candidate runs.
pub fn shrink_case(
    seed: u64,
    index: u64,
    driver: &Driver<'_>,
    work_dir: &Path,
    runs_max: usize,
) -> Result<Scenario, String> {
    let tree = scenarios::generate::case_tree(seed, index)?;
    let source = Source::Generated { index };
    let original =
        run_case(&Case { scenario: tree.current(), source: source.clone() }, seed, driver, work_dir, "");
    let broken = |r: &ScenarioResult| -> Vec<String> {
        r.verdicts.iter().filter(|v| !v.held).map(|v| v.invariant.clone()).collect()
    };
    let wanted = broken(&original);
    let failing = |s: &Scenario| {
        let probe = Case { scenario: s.clone(), source: source.clone() };
        let result = run_case(&probe, seed, driver, work_dir, "");
        match (original.outcome, result.outcome) {
            (_, Outcome::Passed) | (Outcome::Passed, _) => false,
            (Outcome::ExecutorError, got) => got == Outcome::ExecutorError,
            _ => broken(&result).iter().any(|i| wanted.contains(i)),
        }
    };
    Ok(scenarios::generate::shrink(tree, runs_max, failing))
}

/// Runs generated cases `0..cases` in order until one fails; returns its index and result.
pub fn first_failure(
    seed: u64,
    cases: u64,
    driver: &Driver<'_>,
    work_dir: &Path,
) -> Option<(u64, ScenarioResult)> {
    (0..cases).find_map(|index| {
        let scenario = scenarios::generate::case(seed, index).ok()?;
        let case = Case { scenario, source: Source::Generated { index } };
        let result = run_case(&case, seed, driver, work_dir, "");
        (result.outcome != Outcome::Passed).then_some((index, result))
    })
}
