//! `twice run`, `twice replay` and `twice scenarios`: choosing cases, running them, writing
//! what came out.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::exit;
use crate::live::ExecutorCommand;
use crate::run::{self, Case, Driver, Outcome, Progress, RunResults, ScenarioResult, Shard, Source};
use crate::sim::Reference;

/// Generated cases in a sim run unless `--cases` says otherwise.
pub const SIM_CASES_DEFAULT: u64 = 1_000;
/// Generated cases in a live run (each costs real seconds) unless `--cases` says otherwise.
pub const LIVE_CASES_DEFAULT: u64 = 20;
/// Live scenarios run at once unless `--jobs` says otherwise. A live scenario spends its time
/// waiting (on leases, settle bounds, pauses, an interpreter's start), not computing, so this
/// is sized for waiting work rather than for cores: on two cores the timing-sensitive
/// scenarios keep their verdicts at this load (docs/benchmarks.md, `harness/jobs`).
pub const LIVE_JOBS_DEFAULT: usize = 8;
/// Candidate runs the shrinker may spend on one failure.
pub const SHRINK_RUNS_MAX: usize = 300;
/// How long a live run may spend shrinking its failures, all of them together, unless
/// `--shrink-budget` says otherwise: each candidate is a live run of seconds, and a failing CI
/// job should still end in a few minutes.
pub const LIVE_SHRINK_BUDGET_S: u64 = 60;
/// The seed when none is given: runs are reproducible by default.
pub const SEED_DEFAULT: u64 = 1;

/// Options of `twice run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Run a third-party executor through the stdio protocol (live driver), e.g.
    /// "python3 my_executor.py". Without it, the reference executor runs in the sim driver.
    #[arg(long, value_name = "CMD")]
    pub executor: Option<String>,
    /// Run the reference executor's binary in the live driver (real processes and sockets).
    #[arg(long, conflicts_with = "executor")]
    pub live: bool,
    /// Run only these scenarios: catalog names or TOML files (repeatable).
    #[arg(long = "scenario", value_name = "NAME|FILE")]
    pub scenarios: Vec<String>,
    /// Generated cases to run after the catalog (default: 1000 in sim, 20 live).
    #[arg(long)]
    pub cases: Option<u64>,
    /// Run only generated case INDEX (as a failure's replay command does).
    #[arg(long, value_name = "INDEX")]
    pub generated: Option<u64>,
    /// Seed for every random choice.
    #[arg(long, default_value_t = SEED_DEFAULT)]
    pub seed: u64,
    /// Run the K-th of N slices of the cases (1-based), for parallel CI jobs.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
    /// Where results go.
    #[arg(long, default_value = "twice-report", value_name = "DIR")]
    pub report_dir: PathBuf,
    /// Scenarios run at once. Sim cases compute, so the default is the machine's cores; live
    /// scenarios mostly wait (leases, settle bounds, pauses, process starts), each with its own
    /// fakes, ports, state directory and executor processes, so the default is 8.
    #[arg(long, alias = "threads", value_name = "N")]
    pub jobs: Option<usize>,
    /// Hazards (safeguards a contract offered that the executor did not use, where nothing in
    /// the run exploited them) fail the run as violations do.
    #[arg(long)]
    pub strict: bool,
    /// Live runs: how long shrinking the failing generated cases may take, all of them
    /// together (default 60s; e.g. 90, 90s, 2m; 0 turns shrinking off). No candidate starts
    /// after it; one already running finishes. Each failure keeps the smallest scenario found so
    /// far, and the report says how far it got. Sim shrinking has no time budget.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration_s)]
    pub shrink_budget: Option<u64>,
    /// Compare every scenario's behaviour with the baseline in DIR (see docs/reports.md):
    /// list what changed and exit 1 on a regression; violations the baseline records are
    /// known and do not fail the run.
    #[arg(long, value_name = "DIR")]
    pub baseline: Option<PathBuf>,
    /// Rewrite the baseline in --baseline DIR from this run instead of comparing.
    #[arg(long, requires = "baseline", conflicts_with = "shard")]
    pub update_baseline: bool,
}

/// Options of `twice check-executor`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The executor's command line, e.g. "python3 my_executor.py" (split into words like a
    /// shell would, but no shell runs).
    #[arg(value_name = "CMD")]
    pub executor: String,
    /// Run only these catalog scenarios (names, or TOML files; repeatable).
    #[arg(long = "scenario", value_name = "NAME|FILE")]
    pub scenarios: Vec<String>,
    /// Generated cases to run after the catalog.
    #[arg(long, default_value_t = 0)]
    pub cases: u64,
    /// Seed for every random choice.
    #[arg(long, default_value_t = SEED_DEFAULT)]
    pub seed: u64,
    /// Where results go: the usual report files plus conformance.md and conformance.json.
    #[arg(long, default_value = "twice-report", value_name = "DIR")]
    pub report_dir: PathBuf,
    /// Scenarios run at once (default 8: live scenarios mostly wait).
    #[arg(long, alias = "threads", value_name = "N")]
    pub jobs: Option<usize>,
    /// Hazards fail the run as violations do.
    #[arg(long)]
    pub strict: bool,
}

/// Options of `twice report merge`.
#[derive(Debug, clap::Args)]
pub struct MergeArgs {
    /// Report directories (or results.json files) of the shards of one run.
    #[arg(required = true, value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Where the merged report goes.
    #[arg(long, default_value = "twice-report", value_name = "DIR")]
    pub out: PathBuf,
}

/// Options of `twice replay`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// A scenario file, e.g. twice-report/failures/0001-generated-17.toml.
    pub file: PathBuf,
    #[arg(long, value_name = "CMD")]
    pub executor: Option<String>,
    #[arg(long, conflicts_with = "executor")]
    pub live: bool,
    #[arg(long, default_value_t = SEED_DEFAULT)]
    pub seed: u64,
    #[arg(long, default_value = "twice-report", value_name = "DIR")]
    pub report_dir: PathBuf,
}

/// A duration in whole seconds: `90`, `90s`, `2m` or `1500ms` (rounded up).
pub(crate) fn parse_duration_s(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number.parse().map_err(|_| format!("\"{text}\" is not a duration (e.g. 90, 90s, 2m)"))?;
    match unit.trim() {
        "" | "s" => Ok(n),
        "m" | "min" => n.checked_mul(60).ok_or_else(|| format!("\"{text}\" is too long")),
        "ms" => Ok(n.div_ceil(1000)),
        other => Err(format!("\"{other}\" is not a unit of time here; use s, m or ms (e.g. 90s, 2m)")),
    }
}

fn driver(executor: &Option<String>, live: bool) -> anyhow::Result<Driver<'static>> {
    static REFERENCE: Reference = Reference;
    Ok(match (executor, live) {
        (Some(cmd), _) => Driver::Live(ExecutorCommand::parse(cmd).map_err(anyhow::Error::msg)?),
        (None, true) => Driver::Live(ExecutorCommand::reference().map_err(anyhow::Error::msg)?),
        (None, false) => Driver::Sim(&REFERENCE),
    })
}

pub(crate) fn load(name_or_file: &str) -> anyhow::Result<Case> {
    let path = Path::new(name_or_file);
    if name_or_file.ends_with(".toml") || path.exists() {
        let scenario = scenarios::parse::parse_file(path).map_err(|e| anyhow::anyhow!("{e}"))?;
        return Ok(Case { scenario, source: Source::File { path: name_or_file.to_string() } });
    }
    let catalog = scenarios::catalog::catalog().map_err(|e| anyhow::anyhow!("{e}"))?;
    match catalog.iter().find(|s| s.name == name_or_file) {
        Some(s) => Ok(Case { scenario: s.clone(), source: Source::Catalog }),
        None => {
            let names: Vec<&str> = catalog.iter().map(|s| s.name.as_str()).collect();
            let hint = fake_services::rule::closest(name_or_file, &names)
                .map(|n| format!(" (did you mean \"{n}\"?)"))
                .unwrap_or_default();
            bail!("no catalog scenario \"{name_or_file}\"{hint}; `twice scenarios list` shows them")
        }
    }
}

/// Plain lines in CI and pipes, a bar on a terminal.
pub(crate) struct Reporter {
    bar: Option<indicatif::ProgressBar>,
    done: Mutex<(usize, usize)>,
    total: Mutex<usize>,
    /// While shrinking: its deadline, and when the reporter last said something.
    shrinking: Mutex<Option<(Option<Instant>, Instant)>>,
}

impl Reporter {
    pub(crate) fn new() -> Reporter {
        let terminal = std::io::stderr().is_terminal() && std::env::var_os("CI").is_none();
        let bar = terminal.then(|| {
            let bar = indicatif::ProgressBar::new(0);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} scenarios  {msg}  [{elapsed}]")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar
        });
        Reporter { bar, done: Mutex::new((0, 0)), total: Mutex::new(0), shrinking: Mutex::new(None) }
    }
}

impl Progress for Reporter {
    fn started(&self, total: usize) {
        *self.total.lock().unwrap_or_else(|p| p.into_inner()) = total;
        match &self.bar {
            Some(bar) => bar.set_length(total as u64),
            None => eprintln!("twice: running {total} scenarios"),
        }
    }

    fn finished(&self, result: &ScenarioResult) {
        let mut done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        done.0 += 1;
        if result.outcome != Outcome::Passed {
            done.1 += 1;
        }
        let total = *self.total.lock().unwrap_or_else(|p| p.into_inner());
        match &self.bar {
            Some(bar) => {
                bar.inc(1);
                bar.set_message(format!("{} failing", done.1));
                if result.outcome != Outcome::Passed {
                    bar.println(format!("  FAIL {} ({:?})", result.name, result.outcome));
                }
            }
            None => {
                if result.outcome != Outcome::Passed {
                    eprintln!("  FAIL {} ({:?})", result.name, result.outcome);
                }
                let step = (total / 10).max(1);
                if done.0.is_multiple_of(step) || done.0 == total {
                    eprintln!("twice: {}/{} scenarios, {} failing", done.0, total, done.1);
                }
            }
        }
    }

    fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// How often a run that is shrinking says so when nothing else happened.
const SHRINK_HEARTBEAT_S: u64 = 15;

impl run::ShrinkProgress for Reporter {
    fn started(&self, count: usize, deadline: Option<std::time::Instant>) {
        let budget = deadline
            .map(|d| format!(" (time left: {} s)", d.saturating_duration_since(Instant::now()).as_secs()))
            .unwrap_or_default();
        self.say(format!("twice: shrinking {count} failing generated case{}{budget}", plural(count)));
        *self.shrinking.lock().unwrap_or_else(|p| p.into_inner()) = Some((deadline, Instant::now()));
    }

    fn smaller(&self, name: &str, steps: usize, runs: usize) {
        let left = self.time_left();
        self.say(format!("  {name}: {steps} steps after {runs} runs{left}"));
    }

    fn finished(&self, name: &str, shrink: &run::Shrink) {
        let left = self.time_left();
        self.say(format!("  {name}: {}{left}", shrink.line()));
    }
}

impl Reporter {
    /// A line above the bar on a terminal, on stderr otherwise; counts as activity.
    fn say(&self, line: String) {
        match &self.bar {
            Some(bar) => bar.println(line),
            None => eprintln!("{line}"),
        }
        if let Some((_, last)) = self.shrinking.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            *last = Instant::now();
        }
    }

    fn time_left(&self) -> String {
        let deadline = self.shrinking.lock().unwrap_or_else(|p| p.into_inner()).and_then(|(d, _)| d);
        deadline
            .map(|d| format!(" ({} s left)", d.saturating_duration_since(Instant::now()).as_secs()))
            .unwrap_or_default()
    }

    /// Says "still shrinking" when nothing was said for a while, until `done` is set.
    fn heartbeat(&self, done: &std::sync::atomic::AtomicBool) {
        use std::sync::atomic::Ordering;
        while !done.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(250));
            let quiet = self
                .shrinking
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some_and(|(_, last)| last.elapsed().as_secs() >= SHRINK_HEARTBEAT_S);
            if quiet && !done.load(Ordering::SeqCst) {
                let left = self.time_left();
                self.say(format!("twice: still shrinking{left}"));
            }
        }
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

/// Scenarios at once: what was asked, or the driver's default (see [`LIVE_JOBS_DEFAULT`]).
pub(crate) fn jobs(requested: Option<usize>, live: bool) -> usize {
    let cores = || std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    requested.unwrap_or_else(|| if live { LIVE_JOBS_DEFAULT } else { cores() }).max(1)
}

/// `twice run`.
pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    let started = Instant::now();
    let driver = driver(&args.executor, args.live)?;
    let live = matches!(driver, Driver::Live(_));
    let mut cases: Vec<Case> = Vec::new();
    if let Some(index) = args.generated {
        let scenario = scenarios::generate::case(args.seed, index).map_err(anyhow::Error::msg)?;
        cases.push(Case { scenario, source: Source::Generated { index } });
    } else if !args.scenarios.is_empty() {
        for s in &args.scenarios {
            cases.push(load(s)?);
        }
    } else {
        let catalog = scenarios::catalog::catalog().map_err(|e| anyhow::anyhow!("{e}"))?;
        cases.extend(catalog.into_iter().map(|scenario| Case { scenario, source: Source::Catalog }));
        let count = args.cases.unwrap_or(if live { LIVE_CASES_DEFAULT } else { SIM_CASES_DEFAULT });
        for index in 0..count {
            let scenario = scenarios::generate::case(args.seed, index).map_err(anyhow::Error::msg)?;
            cases.push(Case { scenario, source: Source::Generated { index } });
        }
    }
    // Positions in the unsharded list, so that merged shards line up as one run.
    let mut positions: Vec<u64> = (0..cases.len() as u64).collect();
    if let Some(shard) = args.shard {
        positions.retain(|p| shard.takes(*p as usize));
        cases = cases.into_iter().enumerate().filter(|(i, _)| shard.takes(*i)).map(|(_, c)| c).collect();
    }
    let work_dir = std::env::temp_dir().join(format!("twice-run-{}", std::process::id()));
    std::fs::create_dir_all(&work_dir).with_context(|| format!("cannot create {}", work_dir.display()))?;
    let prefix = replay_prefix(&args.executor, args.live);
    let reporter = Reporter::new();
    let jobs = jobs(args.jobs, live);
    let mut results = run::run_cases(&cases, args.seed, &driver, &work_dir, jobs, &reporter, &prefix);
    for (result, position) in results.iter_mut().zip(&positions) {
        result.position = *position;
    }
    let budget_s = live.then(|| args.shrink_budget.unwrap_or(LIVE_SHRINK_BUDGET_S));
    shrink_failures(&cases, &mut results, &args, &driver, &work_dir, &prefix, jobs, budget_s, &reporter)?;
    let _ = std::fs::remove_dir_all(&work_dir);
    let mut run = run::results(args.seed, &driver, args.shard, results);
    run.strict = args.strict;
    let code = finish(&run, &args.report_dir, started)?;
    match &args.baseline {
        None => Ok(code),
        Some(dir) if args.update_baseline => {
            let written = reports::baseline::write(dir, &run)?;
            println!("baseline: wrote {written} traces to {}", dir.display());
            Ok(code)
        }
        Some(dir) => {
            let baseline = reports::baseline::read(dir)?;
            if baseline.meta.driver != run.driver || baseline.meta.executor != run.executor {
                eprintln!(
                    "twice: note: the baseline was recorded with {} ({}), this run is {} ({})",
                    baseline.meta.executor, baseline.meta.driver, run.executor, run.driver
                );
            }
            let comparison = reports::baseline::compare(&baseline, &run)?;
            print!("{}", comparison.render(&dir.display().to_string()));
            Ok(if comparison.regressions() > 0 { exit::VIOLATION } else { exit::OK })
        }
    }
}

pub(crate) fn replay_prefix(executor: &Option<String>, live: bool) -> String {
    match (executor, live) {
        // Quoted for a POSIX shell, so that a command line with its own quotes replays as is.
        (Some(cmd), _) => format!("twice run --executor '{}'", cmd.replace('\'', "'\\''")),
        (None, true) => "twice run --live".into(),
        (None, false) => "twice run".into(),
    }
}

/// Shrinks every failing generated case (live: within `budget_s` seconds for all of them) and
/// writes the smallest failing scenario found for each, with how far shrinking got.
#[allow(clippy::too_many_arguments)] // the run's facts, each needed; a struct would only rename them
fn shrink_failures(
    cases: &[Case],
    results: &mut [ScenarioResult],
    args: &RunArgs,
    driver: &Driver<'_>,
    work_dir: &Path,
    prefix: &str,
    jobs: usize,
    budget_s: Option<u64>,
    reporter: &Reporter,
) -> anyhow::Result<()> {
    if budget_s == Some(0) {
        return Ok(());
    }
    let limits = run::ShrinkLimits {
        runs_max: SHRINK_RUNS_MAX,
        deadline: budget_s.map(|s| Instant::now() + std::time::Duration::from_secs(s)),
    };
    let done = std::sync::atomic::AtomicBool::new(false);
    let shrunk = std::thread::scope(|scope| {
        scope.spawn(|| reporter.heartbeat(&done));
        let shrunk =
            run::shrink_failures(cases, results, args.seed, driver, work_dir, jobs, limits, reporter);
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        shrunk
    });
    let failures_dir = args.report_dir.join("failures");
    for (i, found) in shrunk {
        let (Some(case), Some(result)) = (cases.get(i), results.get_mut(i)) else { continue };
        let Source::Generated { index } = case.source else { continue };
        let (smallest, shrink) = found.map_err(anyhow::Error::msg)?;
        std::fs::create_dir_all(&failures_dir)
            .with_context(|| format!("cannot create {}", failures_dir.display()))?;
        // Named by position, not by a counter, so a shard writes the same file the unsharded
        // run would.
        let path = failures_dir.join(format!("{:04}-{}.toml", result.position, smallest.name));
        let header = format!(
            "A minimal scenario that made the executor break an invariant (shrunk from generated case {index},\nseed {}; {}). Replay it with:\n  {} --scenario {} --seed {}",
            args.seed,
            shrink.line(),
            prefix,
            path.display(),
            args.seed
        );
        let text = scenarios::write::to_toml(&smallest, &header).map_err(|e| anyhow::anyhow!("{e}"))?;
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        result.shrunk = Some(path.display().to_string());
        result.shrink = Some(shrink);
        result.replay = format!("{prefix} --scenario {} --seed {}", path.display(), args.seed);
    }
    Ok(())
}

fn finish(run: &RunResults, report_dir: &Path, started: Instant) -> anyhow::Result<i32> {
    reports::write_all(report_dir, run)?;
    print!("{}", run::summary(run));
    println!(
        "report: {} (results.json, summary.md, junit.xml, report.html; {:.1} s)",
        report_dir.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(if run.failed() { exit::VIOLATION } else { exit::OK })
}

/// `twice replay FILE`.
pub fn replay(args: ReplayArgs) -> anyhow::Result<i32> {
    let started = Instant::now();
    let driver = driver(&args.executor, args.live)?;
    let file = args.file.display().to_string();
    let case = load(&file)?;
    let work_dir = std::env::temp_dir().join(format!("twice-replay-{}", std::process::id()));
    let prefix = replay_prefix(&args.executor, args.live);
    let result = run::run_case(&case, args.seed, &driver, &work_dir, &prefix);
    let _ = std::fs::remove_dir_all(&work_dir);
    println!("timeline of {}:", result.name);
    for m in &result.observed.timeline {
        println!(
            "  {:>9} ms  {:<10} {:<11} {}",
            m.at_ms.saturating_sub(first_moment(&result)),
            m.lane,
            m.kind,
            m.detail
        );
    }
    let run = run::results(args.seed, &driver, None, vec![result]);
    finish(&run, &args.report_dir, started)
}

fn first_moment(result: &ScenarioResult) -> u64 {
    result.observed.timeline.first().map(|m| m.at_ms).unwrap_or(0)
}

/// `twice scenarios list`.
pub fn list() -> anyhow::Result<i32> {
    use std::io::Write;
    let catalog = scenarios::catalog::catalog().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = std::io::stdout().lock();
    for s in &catalog {
        let line = writeln!(
            out,
            "{:<40} {:<32} {}",
            s.name,
            s.failure_mode.as_deref().unwrap_or("-"),
            s.description.lines().next().unwrap_or("")
        );
        // A reader that stops early (`| head`) is not an error.
        match line {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(exit::OK),
            other => other?,
        }
    }
    Ok(exit::OK)
}

/// `twice report merge DIR...`: the shards' results joined, and every report file rendered
/// from them; shrunk failures are copied along.
pub fn merge(args: MergeArgs) -> anyhow::Result<i32> {
    let mut shards = Vec::new();
    for dir in &args.dirs {
        shards.push(reports::json::read(dir)?);
    }
    let run = reports::merge::merge(shards)?;
    for dir in &args.dirs {
        let failures = dir.join(reports::FAILURES_DIR);
        let Ok(entries) = std::fs::read_dir(&failures) else { continue };
        let target = args.out.join(reports::FAILURES_DIR);
        std::fs::create_dir_all(&target).with_context(|| format!("cannot create {}", target.display()))?;
        for entry in entries {
            let from = entry.with_context(|| format!("cannot read {}", failures.display()))?.path();
            if let Some(name) = from.file_name() {
                std::fs::copy(&from, target.join(name))
                    .with_context(|| format!("cannot copy {}", from.display()))?;
            }
        }
    }
    reports::write_all(&args.out, &run)?;
    print!("{}", run::summary(&run));
    println!("report: {} (merged from {} results)", args.out.display(), args.dirs.len());
    Ok(if run.failed() { exit::VIOLATION } else { exit::OK })
}

/// `twice check-executor CMD`: the protocol rules, then the catalog, then the conformance
/// table (see [`crate::conformance`]).
pub fn check_executor(args: CheckArgs) -> anyhow::Result<i32> {
    crate::conformance::check_executor(args)
}
