//! The run pipeline behind `twice run`, `twice replay` and `twice check-executor`: which
//! executor, which cases, running them, shrinking the generated cases that failed, writing
//! the smallest failing scenarios and the report. The command line is a thin shell over it
//! (arguments in, progress and exit code out); a library user calls it the same way:
//!
//! ```no_run
//! use runner::pipeline::{self, Executor, RunPlan, Selection};
//!
//! let plan = RunPlan::new(Executor::ReferenceSim, Selection::Default { generated: Some(100) });
//! let ran = pipeline::execute(&plan, &runner::run::Quiet, &runner::shrink::QuietShrink)?;
//! pipeline::report(&ran.results, &plan.report_dir)?;
//! assert!(!ran.results.failed());
//! # Ok::<(), anyhow::Error>(())
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::process::ExecutorCommand;
use crate::run::{self, Case, CaseSpec, Driver, Progress, RunContext};
use crate::shrink::{self, ShrinkLimits, ShrinkProgress};
use crate::sim::Reference;
use crate::workdir::WorkDir;
use results::{RunResults, ScenarioResult, Shard, Source};

/// Generated cases in a sim run unless `--cases` says otherwise.
pub const SIM_CASES_DEFAULT: u64 = 1_000;
/// Generated cases in a live run (each costs real seconds) unless `--cases` says otherwise.
pub const LIVE_CASES_DEFAULT: u64 = 20;
/// Live scenarios run at once unless `--jobs` says otherwise. A live scenario spends its time
/// waiting (on leases, settle bounds, pauses, an interpreter's start), not computing, so this
/// is sized for waiting work rather than for cores: on two cores the timing-sensitive
/// scenarios keep their verdicts at this load (docs/benchmarks.md, `twice/jobs`).
pub const LIVE_JOBS_DEFAULT: usize = 8;
/// Candidate runs the shrinker may spend on one failure.
pub const SHRINK_RUNS_MAX: usize = 300;
/// How long a live run may spend shrinking its failures, all of them together, unless
/// `--shrink-budget` says otherwise: each candidate is a live run of seconds, and a failing CI
/// job should still end in a few minutes.
pub const LIVE_SHRINK_BUDGET_S: u64 = 60;
/// The seed when none is given: runs are reproducible by default.
pub const SEED_DEFAULT: u64 = 1;
/// Where reports go unless told otherwise.
pub const REPORT_DIR_DEFAULT: &str = "twice-report";

/// Which executor a run judges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Executor {
    /// The reference executor in process, on virtual time (the sim driver).
    ReferenceSim,
    /// The reference executor's binary, `twice-executor`, as real processes (the live driver).
    ReferenceLive,
    /// Any executor's command line, e.g. `python3 my_executor.py` (the live driver).
    Command(String),
}

impl Executor {
    /// The driver that runs it.
    pub fn driver(&self) -> anyhow::Result<Driver<'static>> {
        static REFERENCE: Reference = Reference;
        Ok(match self {
            Executor::Command(cmd) => Driver::Live(ExecutorCommand::parse(cmd).map_err(anyhow::Error::msg)?),
            Executor::ReferenceLive => {
                Driver::Live(ExecutorCommand::reference().map_err(anyhow::Error::msg)?)
            }
            Executor::ReferenceSim => Driver::Sim(&REFERENCE),
        })
    }

    pub fn is_live(&self) -> bool {
        !matches!(self, Executor::ReferenceSim)
    }

    /// The start of a command line that runs it again (`twice run --executor '...'`).
    pub fn replay_prefix(&self) -> String {
        match self {
            // Quoted for a POSIX shell, so that a command line with its own quotes replays as is.
            Executor::Command(cmd) => format!("twice run --executor '{}'", cmd.replace('\'', "'\\''")),
            Executor::ReferenceLive => "twice run --live".into(),
            Executor::ReferenceSim => "twice run".into(),
        }
    }
}

/// Which scenarios a run takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// The whole catalog, then this many generated cases (`None`: the driver's default,
    /// [`SIM_CASES_DEFAULT`] or [`LIVE_CASES_DEFAULT`]).
    Default { generated: Option<u64> },
    /// Catalog names or scenario files, then this many generated cases.
    Named { scenarios: Vec<String>, generated: u64 },
    /// Only generated case `index`, as a failure's replay command runs it.
    Generated { index: u64 },
}

/// The cases of a selection, in run order; a name that is not in the catalog is an error
/// with the closest name, before anything runs.
pub fn select(selection: &Selection, seed: u64, live: bool) -> anyhow::Result<Vec<Case>> {
    select_specs(selection, seed, live)?
        .iter()
        .map(|spec| spec.make().map(std::borrow::Cow::into_owned).map_err(anyhow::Error::msg))
        .collect()
}

/// As [`select`], with generated cases left to be made when they run.
pub fn select_specs(selection: &Selection, seed: u64, live: bool) -> anyhow::Result<Vec<CaseSpec>> {
    let generated =
        |from: u64, count: u64| (from..from + count).map(move |index| CaseSpec::Generated { seed, index });
    let mut cases = Vec::new();
    match selection {
        Selection::Generated { index } => cases.extend(generated(*index, 1)),
        Selection::Named { scenarios, generated: count } => {
            for s in scenarios {
                let case = load(s)?;
                cases.push(CaseSpec::Ready(Box::new(case)));
            }
            cases.extend(generated(0, *count));
        }
        Selection::Default { generated: count } => {
            let catalog = scenarios::catalog::catalog().map_err(|e| anyhow::anyhow!("{e}"))?;
            cases.extend(
                catalog
                    .into_iter()
                    .map(|scenario| CaseSpec::Ready(Box::new(Case { scenario, source: Source::Catalog }))),
            );
            let count = count.unwrap_or(if live { LIVE_CASES_DEFAULT } else { SIM_CASES_DEFAULT });
            cases.extend(generated(0, count));
        }
    }
    Ok(cases)
}

/// A catalog scenario by name, or a scenario file (a name ending in `.toml`, or a path that
/// exists).
pub fn load(name_or_file: &str) -> anyhow::Result<Case> {
    if name_or_file.ends_with(".toml") || Path::new(name_or_file).exists() {
        return load_file(name_or_file);
    }
    load_catalog(name_or_file)
}

/// A scenario file, whatever its name.
pub fn load_file(file: &str) -> anyhow::Result<Case> {
    let scenario = scenarios::parse::parse_file(Path::new(file)).map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(Case { scenario, source: Source::File { path: file.to_string() } })
}

/// A catalog scenario by name, never a file (those that need webhooks too: `twice serve`
/// loads them).
pub fn load_catalog(name: &str) -> anyhow::Result<Case> {
    let catalog = scenarios::catalog::catalog().map_err(|e| anyhow::anyhow!("{e}"))?;
    match catalog.iter().find(|s| s.name == name) {
        Some(s) => Ok(Case { scenario: s.clone(), source: Source::Catalog }),
        None => {
            let names: Vec<&str> = catalog.iter().map(|s| s.name.as_str()).collect();
            let hint = vocabulary::rule::closest(name, &names)
                .map(|n| format!(" (did you mean \"{n}\"?)"))
                .unwrap_or_default();
            bail!("no catalog scenario \"{name}\"{hint}; `twice scenarios list` shows them")
        }
    }
}

/// Scenarios at once: what was asked, or the driver's default (see [`LIVE_JOBS_DEFAULT`]; in
/// sim, where cases compute, the machine's cores).
pub fn jobs(requested: Option<usize>, live: bool) -> usize {
    let cores = || std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    requested.unwrap_or_else(|| if live { LIVE_JOBS_DEFAULT } else { cores() }).max(1)
}

/// A run to make.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub executor: Executor,
    pub selection: Selection,
    /// Seed for every random choice.
    pub seed: u64,
    /// Only the K-th of N slices of the cases.
    pub shard: Option<Shard>,
    /// Scenarios at once (`None`: [`jobs`]' default).
    pub jobs: Option<usize>,
    /// Hazards fail the run as violations do.
    pub strict: bool,
    /// Live: how long shrinking may take, in seconds, for all failures together (`None`:
    /// [`LIVE_SHRINK_BUDGET_S`]; 0 turns shrinking off). Sim shrinking has no time budget.
    pub shrink_budget_s: Option<u64>,
    /// Whether failing generated cases are shrunk at all.
    pub shrink: bool,
    /// Where the report and the shrunk failures go.
    pub report_dir: PathBuf,
}

impl RunPlan {
    /// A plan with every default: seed [`SEED_DEFAULT`], no shard, default jobs, not strict,
    /// shrinking on, reports in [`REPORT_DIR_DEFAULT`].
    pub fn new(executor: Executor, selection: Selection) -> RunPlan {
        RunPlan {
            executor,
            selection,
            seed: SEED_DEFAULT,
            shard: None,
            jobs: None,
            strict: false,
            shrink_budget_s: None,
            shrink: true,
            report_dir: PathBuf::from(REPORT_DIR_DEFAULT),
        }
    }
}

/// What a run did: its cases (after sharding; generated ones as their index), and their
/// results with the run's facts.
pub struct Ran {
    pub cases: Vec<CaseSpec>,
    pub results: RunResults,
}

/// Runs a plan: selects its cases (and its shard of them), runs them, shrinks the generated
/// cases that failed and writes each smallest failing scenario under `report_dir/failures`.
/// The report itself is the caller's to write ([`report`]). `Err` is a harness problem: a
/// scenario that does not exist, an executor that cannot be found, a directory that cannot be
/// written.
pub fn execute(
    plan: &RunPlan,
    progress: &dyn Progress,
    shrinking: &dyn ShrinkProgress,
) -> anyhow::Result<Ran> {
    let driver = plan.executor.driver()?;
    let live = plan.executor.is_live();
    let mut cases = select_specs(&plan.selection, plan.seed, live)?;
    // Positions in the unsharded list, so that merged shards line up as one run.
    let mut positions: Vec<u64> = (0..cases.len() as u64).collect();
    if let Some(shard) = plan.shard {
        positions.retain(|p| shard.takes(*p as usize));
        cases = cases.into_iter().enumerate().filter(|(i, _)| shard.takes(*i)).map(|(_, c)| c).collect();
    }
    let work = WorkDir::create("twice-run-")?;
    let work_dir = work.path().to_path_buf();
    let prefix = plan.executor.replay_prefix();
    let jobs = jobs(plan.jobs, live);
    let run = RunContext::new(plan.seed, &driver, &work_dir, &prefix);
    let mut results = run::run_specs(&cases, &run, jobs, progress);
    for (result, position) in results.iter_mut().zip(&positions) {
        result.position = *position;
    }
    if plan.shrink {
        let budget_s = live.then(|| plan.shrink_budget_s.unwrap_or(LIVE_SHRINK_BUDGET_S));
        let context = ShrinkContext { plan, run, jobs };
        shrink_failures(&context, &mut results, budget_s, shrinking)?;
    }
    drop(work);
    let mut results = run::results(plan.seed, &driver, plan.shard, results);
    results.strict = plan.strict;
    Ok(Ran { cases, results })
}

/// Writes the report files (`results.json`, `summary.md`, `junit.xml`, `report.html`) into
/// `dir`; returns their paths.
pub fn report(results: &RunResults, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    // An interrupted run's results are of executors killed by the interrupt: no report.
    crate::interrupt::hold_if_interrupted();
    Ok(reports::write_all(dir, results)?)
}

/// What shrinking needs of the run.
struct ShrinkContext<'a> {
    plan: &'a RunPlan,
    run: RunContext<'a>,
    jobs: usize,
}

/// Shrinks every failing generated case (live: within `budget_s` seconds for all of them) and
/// writes the smallest failing scenario found for each, with how far shrinking got.
fn shrink_failures(
    context: &ShrinkContext<'_>,
    results: &mut [ScenarioResult],
    budget_s: Option<u64>,
    progress: &dyn ShrinkProgress,
) -> anyhow::Result<()> {
    if budget_s == Some(0) {
        return Ok(());
    }
    let ShrinkContext { plan, run, jobs } = context;
    let prefix = run.replay_prefix;
    let limits = ShrinkLimits {
        runs_max: SHRINK_RUNS_MAX,
        deadline: budget_s.map(|s| Instant::now() + Duration::from_secs(s)),
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let shrunk = std::thread::scope(|scope| {
        scope.spawn(|| progress.heartbeat(&done));
        let shrunk = shrink::shrink_failures(results, run, *jobs, limits, progress);
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        shrunk
    });
    let failures_dir = plan.report_dir.join(reports::FAILURES_DIR);
    for (i, found) in shrunk {
        let Some(result) = results.get_mut(i) else { continue };
        let Source::Generated { index } = result.source else { continue };
        let (smallest, shrink) = found.map_err(anyhow::Error::msg)?;
        std::fs::create_dir_all(&failures_dir)
            .with_context(|| format!("cannot create {}", failures_dir.display()))?;
        // Named by position, not by a counter, so a shard writes the same file the unsharded
        // run would.
        // The name made safe all the same: a shrunk case keeps its name, and names reach
        // here from outside (a scenario file, a generator).
        let name = results::names::file_name_part(&smallest.name);
        let path = failures_dir.join(format!("{:04}-{name}.toml", result.position));
        let header = format!(
            "A minimal scenario that made the executor break an invariant (shrunk from generated case {index},\nseed {}; {}). Replay it with:\n  {} --scenario {} --seed {}",
            plan.seed,
            shrink.line(),
            prefix,
            path.display(),
            plan.seed
        );
        let text = scenarios::write::to_toml(&smallest, &header).map_err(|e| anyhow::anyhow!("{e}"))?;
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        result.shrunk = Some(path.display().to_string());
        result.shrink = Some(shrink);
        result.replay = format!("{prefix} --scenario {} --seed {}", path.display(), plan.seed);
    }
    Ok(())
}

/// Runs one case (a scenario file, or a catalog name) and returns its result, for `twice
/// replay`.
pub fn replay(
    executor: &Executor,
    name_or_file: &str,
    seed: u64,
) -> anyhow::Result<(RunResults, ScenarioResult)> {
    let driver = executor.driver()?;
    let case = load(name_or_file)?;
    let work = WorkDir::create("twice-replay-")?;
    let started = std::time::Instant::now();
    let prefix = executor.replay_prefix();
    let result = run::run_case(&case, &RunContext::new(seed, &driver, work.path(), &prefix));
    run::log_finished(&result, started.elapsed());
    drop(work);
    let results = run::results(seed, &driver, None, vec![result.clone()]);
    Ok((results, result))
}
