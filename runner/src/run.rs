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

use crate::live::{self, ExecutorCommand};
use crate::sim::{self, SimFactory};
use results::Observed;
use results::{
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

/// What every case of one run shares: the run's seed (each case's own seed is mixed from it,
/// [`case_seed`]), the driver, the directory the cases' own directories go under, and the
/// start of the replay command each result carries (`twice run --executor ...`; empty where
/// nobody replays, as for shrinking's candidates).
#[derive(Clone, Copy)]
pub struct RunContext<'a> {
    pub seed: u64,
    pub driver: &'a Driver<'a>,
    pub work_dir: &'a Path,
    pub replay_prefix: &'a str,
}

impl<'a> RunContext<'a> {
    pub fn new(
        seed: u64,
        driver: &'a Driver<'a>,
        work_dir: &'a Path,
        replay_prefix: &'a str,
    ) -> RunContext<'a> {
        RunContext { seed, driver, work_dir, replay_prefix }
    }

    /// The same run, with no replay command (shrinking's candidates and probes).
    pub fn unreplayed(self) -> RunContext<'a> {
        RunContext { replay_prefix: "", ..self }
    }
}

/// Reports progress as cases finish.
pub trait Progress: Sync {
    fn started(&self, total: usize);
    fn finished(&self, result: &ScenarioResult);
    fn done(&self);
    /// A line about what a command is doing before its cases start (`checking 9 protocol
    /// rules ...`); said where plain progress lines may go, and nowhere by default.
    fn note(&self, _line: &str) {}
}

/// A [`Progress`] that says nothing.
pub struct Quiet;

impl Progress for Quiet {
    fn started(&self, _: usize) {}
    fn finished(&self, _: &ScenarioResult) {}
    fn done(&self) {}
}

/// What starting a worker's process is guessed to cost, in ms, in [`expected_live_ms`]: an
/// interpreter loading its SDKs takes a few hundred ms on two busy cores.
const LIFE_START_MS: u64 = 500;
/// What each intent is guessed to add, in ms, in [`expected_live_ms`].
const PER_INTENT_MS: u64 = 100;

/// What a live case is expected to take, in ms: the waits its structure implies. Only an
/// ordering key, so that the longest cases start first and a run does not end on a long case
/// beside idle cores; a guess that is wrong costs time, never a verdict.
///
/// - a process start per worker life: the first worker, each started worker, each restart
///   after a crash;
/// - the pauses, whole;
/// - one pause between reconcile rounds (the request timeout, the settle bound and the margin,
///   as the engine waits) for each workflow step, which waits for the step before it, and one
///   more where a first round cannot settle everything: a crash (the worker comes back at the
///   reconcile phase) or a fault whose truth shows only later (a success that may be hollow, a
///   refused connection);
/// - the settle waits at the heal and at the end, and a little per intent.
///
/// The terms were chosen on the timelines of catalog + 20 runs against the Python example
/// (`twice run --timeline`): ordered by this key, a simulated schedule of their measured
/// durations ends within 0.4 s of the best ordering, 1.6 s sooner than the catalog's order.
pub fn expected_live_ms(scenario: &Scenario) -> u64 {
    use scenarios::model::EventAction;
    use vocabulary::FaultSpec;
    let contracts: BTreeMap<String, vocabulary::Contract> = crate::setup::used_services(scenario)
        .into_iter()
        .filter_map(|service| scenario.contract(&service).map(|c| (service, c)))
        .collect();
    let settle_ms = crate::setup::settle_ms(scenario, &contracts);
    let round_pause_ms = scenario.request_timeout_ms() + settle_ms + crate::setup::ROUND_MARGIN_MS;
    let count =
        |of: fn(&EventAction) -> bool| scenario.events.iter().filter(|e| of(&e.action)).count() as u64;
    let crashes = count(|a| matches!(a, EventAction::Crash { .. }));
    let started = count(|a| matches!(a, EventAction::StartWorker { .. }));
    let undecided =
        scenario.faults.iter().any(|f| matches!(f.rule.fault, FaultSpec::SilentNoop | FaultSpec::Refuse));
    let steps = scenario.intents.iter().filter(|i| i.is_step()).count() as u64;
    let rounds = steps + u64::from(crashes > 0 || undecided);
    LIFE_START_MS * (1 + crashes + started)
        + scenario.pauses_ms()
        + rounds * round_pause_ms
        + 2 * settle_ms
        + PER_INTENT_MS * scenario.intents.len() as u64
}

/// A case of a run as the run holds it until the case runs: a catalog or file scenario ready,
/// a generated one only its index, generated when it runs (the generator is deterministic per
/// seed and index), so that a run of many cases never holds all their scenarios at once.
#[derive(Debug, Clone)]
pub enum CaseSpec {
    /// Boxed: a run holds many of the small variant.
    Ready(Box<Case>),
    Generated {
        seed: u64,
        index: u64,
    },
}

impl CaseSpec {
    /// The scenario, made if it is generated.
    pub fn make(&self) -> Result<std::borrow::Cow<'_, Case>, String> {
        match self {
            CaseSpec::Ready(case) => Ok(std::borrow::Cow::Borrowed(case)),
            CaseSpec::Generated { seed, index } => {
                let scenario = scenarios::generate::case(*seed, *index)?;
                Ok(std::borrow::Cow::Owned(Case { scenario, source: Source::Generated { index: *index } }))
            }
        }
    }

    pub fn source(&self) -> Source {
        match self {
            CaseSpec::Ready(case) => case.source.clone(),
            CaseSpec::Generated { index, .. } => Source::Generated { index: *index },
        }
    }
}

/// Runs cases on up to `threads` threads; results come back in case order, each passed one
/// compacted ([`ScenarioResult::compact`]) as soon as it is checked. Live, the cases that are
/// expected to take longest start first ([`expected_live_ms`]), so that the run does not end
/// waiting for one long case started last.
pub fn run_cases(
    cases: &[Case],
    run: &RunContext<'_>,
    threads: usize,
    progress: &dyn Progress,
) -> Vec<ScenarioResult> {
    let case_at = |i: usize| -> Result<std::borrow::Cow<'_, Case>, (Source, String)> {
        cases.get(i).map(std::borrow::Cow::Borrowed).ok_or_else(|| (Source::Catalog, format!("no case {i}")))
    };
    run_each(cases.len(), &case_at, run, threads, progress)
}

/// As [`run_cases`], for cases made when they run ([`CaseSpec`]).
pub fn run_specs(
    specs: &[CaseSpec],
    run: &RunContext<'_>,
    threads: usize,
    progress: &dyn Progress,
) -> Vec<ScenarioResult> {
    let case_at = |i: usize| -> Result<std::borrow::Cow<'_, Case>, (Source, String)> {
        let spec = specs.get(i).ok_or_else(|| (Source::Catalog, format!("no case {i}")))?;
        spec.make().map_err(|e| (spec.source(), e))
    };
    run_each(specs.len(), &case_at, run, threads, progress)
}

/// The case at a position, or why it could not be made (with its source, for the replay).
type CaseAt<'c> = dyn Fn(usize) -> Result<std::borrow::Cow<'c, Case>, (Source, String)> + Sync + 'c;

fn run_each<'c>(
    count: usize,
    case_at: &CaseAt<'c>,
    run: &RunContext<'_>,
    threads: usize,
    progress: &dyn Progress,
) -> Vec<ScenarioResult> {
    progress.started(count);
    let mut order: Vec<usize> = (0..count).collect();
    if matches!(run.driver, Driver::Live(_)) {
        // Stable: equal estimates keep the list's order. Live runs are small: making each
        // scenario once more for its estimate costs nothing next to running it.
        order.sort_by_cached_key(|i| {
            std::cmp::Reverse(case_at(*i).map(|c| expected_live_ms(&c.scenario)).unwrap_or(0))
        });
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<ScenarioResult>>> = Mutex::new(vec![None; count]);
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                while let Some(&i) = order.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let started = std::time::Instant::now();
                    let mut result = match case_at(i) {
                        Ok(case) => run_case(&case, run),
                        Err((source, e)) => unmade(i, source, &e, run),
                    };
                    result.position = i as u64;
                    log_finished(&result, started.elapsed());
                    progress.finished(&result);
                    // Here, not at the end: a passed case's observation is dropped at once.
                    result.compact();
                    results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(result);
                }
            });
        }
    });
    progress.done();
    results.into_inner().unwrap_or_else(|p| p.into_inner()).into_iter().flatten().collect()
}

/// The `twice::scenario` line (info) of a case a run or a replay ran: one per case, none per
/// shrinking candidate. `duration` is wall time, making the case included.
pub fn log_finished(result: &ScenarioResult, duration: std::time::Duration) {
    // The count below reads every verdict: only for a line that is written.
    if !tracing::enabled!(target: "twice::scenario", tracing::Level::INFO) {
        return;
    }
    let duration_ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
    let (name, outcome, seed) = (result.name.as_str(), result.outcome.as_str(), result.seed);
    let violated = result.verdicts.iter().filter(|v| v.status == results::Status::Violated).count();
    let hazards = result.hazards.len();
    match &result.source {
        Source::Catalog => tracing::info!(
            target: "twice::scenario",
            name, source = "catalog", outcome, duration_ms, seed, violated, hazards,
            "scenario"
        ),
        Source::File { path } => tracing::info!(
            target: "twice::scenario",
            name, source = "file", file = path.as_str(), outcome, duration_ms, seed, violated, hazards,
            "scenario"
        ),
        Source::Generated { index } => tracing::info!(
            target: "twice::scenario",
            name, source = "generated", case = index, outcome, duration_ms, seed, violated, hazards,
            "scenario"
        ),
    }
}

/// The result of a case that could not even be made (a generator failure): an error, so that
/// one broken case never stops a run.
fn unmade(i: usize, source: Source, why: &str, run: &RunContext<'_>) -> ScenarioResult {
    let name = match source {
        Source::Generated { index } => format!("generated-{index}"),
        _ => format!("case-{i}"),
    };
    let case = Case { scenario: Scenario { name, ..Scenario::default() }, source };
    let observed = Observed {
        executor_error: Some(format!("the harness could not make the case: {why}")),
        ..Observed::default()
    };
    let seed = case_seed(run.seed, &case.source, &case.scenario.name);
    judge(&case, run.seed, seed, observed, run.replay_prefix)
}

/// Runs one case and checks it.
pub fn run_case(case: &Case, run: &RunContext<'_>) -> ScenarioResult {
    let seed = case_seed(run.seed, &case.source, &case.scenario.name);
    let observed = observe(&case.scenario, seed, run.driver, run.work_dir);
    judge(case, run.seed, seed, observed, run.replay_prefix)
}

/// Checks what was observed of a case and puts its result together: the verdicts, hazards,
/// attribution and replay command of [`run_case`], for an observation made by a driver or
/// (`twice serve`) assembled from an application's claims and the fakes' ledgers.
pub fn judge(
    case: &Case,
    run_seed: u64,
    seed: u64,
    observed: Observed,
    replay_prefix: &str,
) -> ScenarioResult {
    let checker::Judgement { verdicts, mut hazards, attribution } =
        checker::judgement(&case.scenario, &observed);
    let outcome = if observed.executor_error.is_some() {
        Outcome::ExecutorError
    } else if checker::all_held(&verdicts) {
        Outcome::Passed
    } else {
        Outcome::Violated
    };
    for hazard in &mut hazards {
        hazard.command = format!("{replay_prefix} --scenario {}", hazard.exploited_by);
    }
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
        intents: intent_results(&case.scenario, &observed, attribution),
        effects: observed.ledgers.iter().map(|(s, l)| (s.clone(), l.len())).collect(),
        faults_applied: faults_applied(&observed),
        events: observed
            .timeline
            .iter()
            .filter(|m| !INTENT_MOMENTS.contains(&m.kind.as_str()))
            .cloned()
            .collect(),
        replay,
        hazards,
        shrunk: None,
        shrink: None,
        verdict_set: None,
        summary: None,
        observed,
    }
}

/// Each intent of the scenario: the executor's final word on it and the effects the checker
/// attributes to it.
fn intent_results(
    scenario: &Scenario,
    observed: &Observed,
    mut effects: BTreeMap<String, Vec<results::EffectRef>>,
) -> Vec<IntentResult> {
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
                unsupported: observed.unsupported.contains(&i.action)
                    || observed.unsupported_steps.contains(&i.id),
                after: i.after.clone(),
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
    results_of(seed, driver.kind(), driver.describe(), shard, results)
}

/// As [`results`], for a driver named `driver` (`sim`, `live`, `serve`) and an executor
/// described as `executor`.
pub fn results_of(
    seed: u64,
    driver: &str,
    executor: String,
    shard: Option<Shard>,
    results: Vec<ScenarioResult>,
) -> RunResults {
    let totals = Totals::of(&results);
    RunResults {
        schema: RESULTS_SCHEMA.into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        seed,
        driver: driver.into(),
        executor,
        shard,
        strict: false,
        totals,
        results,
    }
}

/// A readable summary for a terminal: the totals, every failure with the invariant, its first
/// line of evidence, how far shrinking got and the command that replays it, then the hazards
/// by kind with the scenario that would exploit each.
pub fn summary(run: &RunResults) -> String {
    let t = &run.totals;
    let mut out = format!(
        "twice: {} scenario{} against {} (seed {}): {} passed, {} violated, {} executor errors, {} hazards{}\n",
        t.scenarios,
        if t.scenarios == 1 { "" } else { "s" },
        run.executor,
        run.seed,
        t.passed,
        t.violated,
        t.executor_errors,
        t.hazards,
        if run.strict && t.hazards > 0 { " (--strict: hazards fail the run)" } else { "" }
    );
    for r in run.results.iter().filter(|r| r.outcome != Outcome::Passed) {
        out.push_str(&format!("\n  {} ({:?})\n", r.name, r.outcome));
        for v in r.violations() {
            let first = v.evidence.first().map(String::as_str).unwrap_or("");
            out.push_str(&format!("    {}: {first}\n", v.invariant));
        }
        if let Some(path) = &r.shrunk {
            let how = r.shrink.as_ref().map(|s| format!(" ({})", s.line())).unwrap_or_default();
            out.push_str(&format!("    minimal scenario: {path}{how}\n"));
        }
        out.push_str(&format!("    replay: {}\n", r.replay));
    }
    // Judged while something could still change a ledger: said of every such result, passed
    // or not, with what was pending.
    for r in run.results.iter().filter(|r| r.observed.judged_unsettled()) {
        let lines = r.observed.unsettled_lines();
        if let Some((headline, pending)) = lines.split_first() {
            out.push_str(&format!("\n  {}: {headline}\n", r.name));
            for line in pending {
                out.push_str(&format!("    {line}\n"));
            }
        }
    }
    let mut kinds: Vec<(&str, usize, &results::Hazard)> = Vec::new();
    for r in &run.results {
        let mut here = std::collections::BTreeSet::new();
        for h in &r.hazards {
            let first_here = here.insert(h.kind.as_str());
            match kinds.iter_mut().find(|(kind, _, _)| *kind == h.kind) {
                Some((_, count, _)) => *count += usize::from(first_here),
                None => kinds.push((h.kind.as_str(), 1, h)),
            }
        }
    }
    if !kinds.is_empty() {
        out.push_str("\n  hazards (a safeguard offered and not used; nothing in the run exploited it):\n");
        for (kind, count, example) in kinds {
            out.push_str(&format!(
                "    {kind} in {count} scenario{}, e.g. {}\n      exploited by {}: {}\n",
                if count == 1 { "" } else { "s" },
                example.detail,
                example.exploited_by,
                example.command
            ));
        }
    }
    out
}

/// Writes the report files (`results.json`, `summary.md`, `junit.xml`, `report.html`) into
/// `dir`; returns the path of `results.json`.
pub fn write_results(dir: &Path, run: &RunResults) -> std::io::Result<PathBuf> {
    reports::write_all(dir, run).map_err(std::io::Error::other)?;
    Ok(dir.join(reports::RESULTS_FILE))
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
        let result = run_case(&case, &RunContext::new(seed, driver, work_dir, ""));
        (result.outcome != Outcome::Passed).then_some((index, result))
    })
}

#[cfg(test)]
mod tests {
    use super::{LIFE_START_MS, expected_live_ms};

    fn catalog(name: &str) -> scenarios::Scenario {
        let all = scenarios::catalog::catalog().expect("the embedded catalog parses");
        all.into_iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no catalog scenario {name}"))
    }

    #[test]
    fn the_waits_a_scenario_implies_put_it_before_a_plain_one() {
        let plain = expected_live_ms(&catalog("lost_refund_reply"));
        // A pause and a second worker; four workflow steps; a crash in reconcile; a hollow
        // success that a first round cannot settle.
        for longer in [
            "files_stale_worker_overwrite",
            "onboarding_fault_at_every_step",
            "crash_during_reconciliation",
            "silent_noop_refund",
        ] {
            assert!(expected_live_ms(&catalog(longer)) > plain, "{longer} is not expected to take longer");
        }
        // The same fault and service: the crash adds a restart and a reconcile round.
        let crashed = expected_live_ms(&catalog("crash_during_reconciliation"));
        assert!(crashed > plain + LIFE_START_MS, "{crashed} ms against {plain} ms");
    }
}
