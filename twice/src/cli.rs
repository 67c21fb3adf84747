//! The command line: arguments in, progress and exit codes out. Every command is a thin
//! shell over the library: [`runner::pipeline`] runs, [`conformance`] checks an
//! executor, [`reports`] writes and merges reports.

pub mod logs;
mod progress;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;

pub use progress::Reporter;

use conformance::{self, CheckPlan};
use results::{RunResults, ScenarioResult, Shard};
use runner::exit;
use runner::pipeline::{self, Executor, RunPlan, SEED_DEFAULT, Selection};
use runner::run;

/// What every command that runs scenarios takes.
#[derive(Debug, clap::Args)]
pub struct RunOptions {
    /// Seed for every random choice.
    #[arg(long, default_value_t = SEED_DEFAULT)]
    pub seed: u64,
    /// Where results go (check-executor adds conformance.md and conformance.json).
    #[arg(long, default_value = pipeline::REPORT_DIR_DEFAULT, value_name = "DIR")]
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
}

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
    /// Run the K-th of N slices of the cases (1-based), for parallel CI jobs.
    #[arg(long, value_name = "K/N")]
    pub shard: Option<Shard>,
    #[command(flatten)]
    pub options: RunOptions,
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
    /// Live runs: write where the run's time went to FILE (one JSON document): per scenario
    /// its start and end, each executor process's spawn to init reply, and the harness's time
    /// in each kind of wait (replies, settle, round pauses, pause quiet, shutdown, ...); per
    /// run the CPU of twice itself and of the executors, and the slowest scenarios. Results
    /// and reports are the same with or without it.
    #[arg(long, value_name = "FILE")]
    pub timeline: Option<PathBuf>,
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
    #[command(flatten)]
    pub options: RunOptions,
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
    #[arg(long, default_value = pipeline::REPORT_DIR_DEFAULT, value_name = "DIR")]
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

fn executor(command: &Option<String>, live: bool) -> Executor {
    match (command, live) {
        (Some(cmd), _) => Executor::Command(cmd.clone()),
        (None, true) => Executor::ReferenceLive,
        (None, false) => Executor::ReferenceSim,
    }
}

/// `twice run`.
pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    let started = Instant::now();
    let selection = match (args.generated, args.scenarios.is_empty()) {
        (Some(index), _) => Selection::Generated { index },
        (None, false) => Selection::Named { scenarios: args.scenarios.clone(), generated: 0 },
        (None, true) => Selection::Default { generated: args.cases },
    };
    let RunOptions { seed, report_dir, jobs, strict } = args.options;
    let plan = RunPlan {
        executor: executor(&args.executor, args.live),
        selection,
        seed,
        shard: args.shard,
        jobs,
        strict,
        shrink_budget_s: args.shrink_budget,
        shrink: true,
        report_dir,
    };
    let reporter = Reporter::new();
    if args.timeline.is_some() {
        runner::live::timing::enable();
    }
    let ran = pipeline::execute(&plan, &reporter, &reporter)?;
    if let Some(file) = &args.timeline {
        write_timeline(file)?;
    }
    let run = ran.results;
    let code = finish(&run, &plan.report_dir, started)?;
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
                tracing::warn!(
                    target: "twice",
                    "the baseline was recorded with {} ({}), this run is {} ({})",
                    baseline.meta.executor,
                    baseline.meta.driver,
                    run.executor,
                    run.driver
                );
            }
            let comparison = reports::baseline::compare(&baseline, &run)?;
            print!("{}", comparison.render(&dir.display().to_string()));
            Ok(if comparison.regressions() > 0 { exit::VIOLATION } else { exit::OK })
        }
    }
}

/// Writes what `--timeline FILE` recorded.
fn write_timeline(file: &Path) -> anyhow::Result<()> {
    let Some(timing) = runner::live::timing::take() else { return Ok(()) };
    let text = serde_json::to_string_pretty(&timing).context("cannot write the timeline as JSON")?;
    std::fs::write(file, text + "\n").with_context(|| format!("cannot write {}", file.display()))?;
    Ok(())
}

/// Writes the report, prints the summary; the exit code says whether the run failed.
fn finish(run: &RunResults, report_dir: &Path, started: Instant) -> anyhow::Result<i32> {
    pipeline::report(run, report_dir)?;
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
    let file = args.file.display().to_string();
    let (run, result) = pipeline::replay(&executor(&args.executor, args.live), &file, args.seed)?;
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
    finish(&run, &args.report_dir, started)
}

fn first_moment(result: &ScenarioResult) -> u64 {
    result.observed.timeline.first().map(|m| m.at_ms).unwrap_or(0)
}

/// `twice scenarios list`: every catalog scenario, those that run through `twice serve` only
/// (webhooks trigger their intents) included.
pub fn list(args: ListArgs) -> anyhow::Result<i32> {
    use std::io::Write;
    let catalog = scenarios::catalog::catalog().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut out = std::io::stdout().lock();
    if args.format == ListFormat::Json {
        // A struct, not `json!`: the fields keep their order (the schema first, each scenario's
        // as its type declares them).
        #[derive(serde::Serialize)]
        struct Listing<'a> {
            schema: &'a str,
            scenarios: &'a [scenarios::Scenario],
        }
        let listing = Listing { schema: CATALOG_SCHEMA, scenarios: &catalog };
        let written = serde_json::to_writer_pretty(&mut out, &listing).map_err(std::io::Error::from);
        match written.and_then(|()| writeln!(out)) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(exit::OK),
            other => other?,
        }
        return Ok(exit::OK);
    }
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

/// The shape `twice scenarios list --format json` writes: `scenarios` holds each catalog
/// scenario whole, as its TOML file reads.
pub const CATALOG_SCHEMA: &str = "twice.catalog/1";

/// How `twice scenarios list` writes the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ListFormat {
    /// A line per scenario: name, failure mode, the description's first line.
    Text,
    /// `{"schema": "twice.catalog/1", "scenarios": [...]}`, every scenario whole.
    Json,
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// `text` for people, `json` for programs.
    #[arg(long, value_enum, default_value_t = ListFormat::Text)]
    pub format: ListFormat,
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
/// table (see [`conformance`]).
pub fn check_executor(args: CheckArgs) -> anyhow::Result<i32> {
    let selection = if args.scenarios.is_empty() {
        Selection::Default { generated: Some(args.cases) }
    } else {
        Selection::Named { scenarios: args.scenarios, generated: args.cases }
    };
    let RunOptions { seed, report_dir, jobs, strict } = args.options;
    let plan = CheckPlan { executor: args.executor, selection, seed, report_dir, jobs, strict };
    conformance::check_executor(&plan, &Reporter::new())
}
