//! How long live runs take against the Python executor of `examples/executors/python` (the
//! conformance kit's example, on the real SDKs), as a team running its own executor meets them:
//!
//! - the whole catalog and 20 generated cases at `twice run`'s default of
//!   [`LIVE_JOBS_DEFAULT`] scenarios at a time, as `twice run --executor "python executor.py"`
//!   runs them: the wall time, in [`ROUNDS`] rounds (target: at most 30 s on two cores); and the
//!   whole catalog alone, in total and per scenario, on 2 jobs as before;
//! - the same at 2, 8 and 16 jobs, each time beside the `constant-fencing-token` variant on
//!   the stale-worker scenarios it must fail: whether the timing-sensitive verdicts hold under
//!   that load (every scenario of the correct executor passes, every stale write is caught);
//! - a run whose executor has a bug that generated cases expose (`--bug memory-only`, the
//!   catalog and [`BUGGY_CASES`] generated cases), failures shrunk within `twice run`'s default
//!   live budget of [`LIVE_SHRINK_BUDGET_S`] s: the wall time from start to the last shrink
//!   (target: at most 120 s), how many failures, and how each shrink stopped.
//!
//! The interpreter is `TWICE_PYTHON` (which `cargo xtask bench` sets, as `cargo xtask test`
//! does), or else `target/twice-venv/bin/python` under the workspace root; the venv holds the
//! SDKs pinned in `tests/requirements.txt`.
//!
//! Output: a readable line per round, then one `BENCH {json}` line per figure (the record
//! format is described in `xtask/src/main.rs`). Run it alone with
//! `cargo bench -p twice --bench python`.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{
    Live, Quiet, Result, SEED, WorkDir, catalog, failures, live_figures, load_average, record, summary,
};
use results::{Outcome, Source};
use runner::live::ExecutorCommand;
use runner::live::timing::{self, RunTiming};
use runner::pipeline::{LIVE_JOBS_DEFAULT, LIVE_SHRINK_BUDGET_S, SHRINK_RUNS_MAX};
use runner::run::{self, Case, Driver, RunContext};
use serde_json::Value;

/// The name of this benchmark in `BENCH` records.
const BENCH: &str = "twice/python";
const ROUNDS: usize = 3;
/// Generated cases after the catalog, as `twice run` runs live by default.
const GENERATED: u64 = 20;
/// Target for the catalog and the generated cases at the default jobs.
const TARGET_DEFAULT_RUN_S: f64 = 30.0;
/// Jobs of the load sweep.
const SWEEP_JOBS: [usize; 3] = [2, 8, 16];
/// The stale-worker scenarios the `constant-fencing-token` variant must fail, and how often
/// each runs beside the catalog in a sweep step.
const STALE: [&str; 2] = ["stale_worker_overwrite", "files_stale_worker_after_read"];
const STALE_REPEATS: usize = 3;
/// Generated cases of the buggy run (seed 1): about a dozen of them expose `memory-only`.
const BUGGY_CASES: u64 = 30;
/// Target for the buggy run, shrinking included.
const TARGET_BUGGY_RUN_S: f64 = 120.0;
/// The venv's interpreter, relative to the workspace root, when `TWICE_PYTHON` is unset.
const DEFAULT_PYTHON: &str = "target/twice-venv/bin/python";
/// The executor, relative to the workspace root.
const EXECUTOR: &str = "examples/executors/python/executor.py";

fn main() -> Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().ok_or("the twice crate has no parent")?;
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
    let executor = |args: &[&str]| {
        let mut words = vec![root.join(EXECUTOR).display().to_string()];
        words.extend(args.iter().map(|a| a.to_string()));
        ExecutorCommand { program: python.clone(), args: words }
    };
    let work = WorkDir::create("python")?;
    let mut records = Vec::new();
    default_run(&executor(&[]), &work.path, &mut records)?;
    sweep(&executor(&[]), &executor(&["--bug", "constant-fencing-token"]), &work.path, &mut records)?;
    buggy_run(&executor(&["--bug", "memory-only"]), &work.path, &mut records)?;
    let live = Live {
        bench: BENCH,
        who: ", Python executor",
        setup: "examples/executors/python/executor.py on the venv's interpreter (a Python process per \
                worker, stripe-python, requests, boto3 and web3.py against the loopback HTTP fakes, real \
                SIGKILL and SIGSTOP, SQLite state on disk under the temp dir), as `twice run --executor \
                \"python executor.py\" --cases 0 --jobs 2`",
        rounds: ROUNDS,
    };
    live_figures(&live, executor(&[]), &work.path, &mut records)?;
    println!();
    for r in &records {
        println!("BENCH {r}");
    }
    Ok(())
}

/// The catalog and [`GENERATED`] generated cases, as `twice run` takes them.
fn catalog_and_generated(count: u64) -> Result<Vec<Case>> {
    let mut cases = catalog()?;
    for index in 0..count {
        cases.push(Case {
            scenario: scenarios::generate::case(SEED, index)?,
            source: Source::Generated { index },
        });
    }
    Ok(cases)
}

/// `twice run --executor "python executor.py"`, at the default jobs, [`ROUNDS`] times.
fn default_run(command: &ExecutorCommand, work: &Path, records: &mut Vec<Value>) -> Result<()> {
    let cases = catalog_and_generated(GENERATED)?;
    let driver = Driver::Live(command.clone());
    let load_before = load_average();
    println!(
        "\n{BENCH}: live, the catalog and {GENERATED} generated cases ({} scenarios) at {LIVE_JOBS_DEFAULT} jobs, {ROUNDS} rounds",
        cases.len()
    );
    let mut walls = Vec::new();
    let mut timing = None;
    for round in 1..=ROUNDS {
        // The last round records where its time goes, as `twice run --timeline` does.
        if round == ROUNDS {
            timing::enable();
        }
        let started = Instant::now();
        let results = run::run_cases(
            &cases,
            &RunContext::new(SEED, &driver, work, "twice run"),
            LIVE_JOBS_DEFAULT,
            &Quiet,
        );
        let wall = started.elapsed().as_secs_f64();
        let failed = failures(&results);
        println!(
            "  round {round}/{ROUNDS}  {wall:.1} s, {} of {} passed",
            results.len() - failed.len(),
            results.len()
        );
        if !failed.is_empty() {
            return Err(format!(
                "the correct executor failed {}: no figure from a broken run",
                failed.join(", ")
            )
            .into());
        }
        walls.push(wall);
        if round == ROUNDS {
            timing = timing::take();
        }
    }
    let (median, spread) = summary(&walls);
    let met = if median <= TARGET_DEFAULT_RUN_S { "met" } else { "NOT met" };
    records.push(record(
        BENCH,
        &format!("live, catalog + {GENERATED} generated ({} scenarios), Python executor, {LIVE_JOBS_DEFAULT} jobs", cases.len()),
        median,
        "s",
        Some(spread),
        &format!(
            "Wall time of run::run_cases over the catalog and generated cases 0..{GENERATED} of seed {SEED} with the \
             live driver against the Python executor, {LIVE_JOBS_DEFAULT} scenarios at a time, as `twice run --executor \
             \"python executor.py\"` runs them by default; median of {ROUNDS} rounds, every round passed every \
             scenario. Target: at most {TARGET_DEFAULT_RUN_S:.0} s on this 2-core machine; {met}. 1-minute load \
             average {load_before} before, {} after.",
            load_average()
        ),
    ));
    if let Some(timing) = timing {
        phase_records(&timing, cases.len(), records);
    }
    Ok(())
}

/// Where the last round's time went (`twice run --timeline`): CPU of twice and of the
/// executors, process starts, and every scenario's waits added up by kind.
fn phase_records(timing: &RunTiming, scenarios: usize, records: &mut Vec<Value>) {
    let what = format!("catalog + {GENERATED} generated ({scenarios} scenarios), {LIVE_JOBS_DEFAULT} jobs");
    let round = "The last round of the run above, recorded as `twice run --timeline FILE` records it";
    let wall_s = timing.wall_ms / 1000.0;
    println!(
        "  last round: twice {:.1} s CPU, executors {:.1} s CPU, {} processes (init median {:.0} ms)",
        timing.cpu_harness.user_s + timing.cpu_harness.sys_s,
        timing.cpu_children.user_s + timing.cpu_children.sys_s,
        timing.processes_started,
        timing.process_init_ms.median
    );
    for (name, cpu) in [("twice itself", timing.cpu_harness), ("the executor processes", timing.cpu_children)]
    {
        records.push(record(
            BENCH,
            &format!("live phases, {what}: CPU of {name}"),
            cpu.user_s + cpu.sys_s,
            "s",
            None,
            &format!(
                "{round}: user {:.1} s + sys {:.1} s (getrusage {}) over {wall_s:.1} s of wall time on two cores.",
                cpu.user_s,
                cpu.sys_s,
                if name == "twice itself" { "RUSAGE_SELF" } else { "RUSAGE_CHILDREN" },
            ),
        ));
    }
    let init = &timing.process_init_ms;
    records.push(record(
        BENCH,
        &format!("live phases, {what}: executor process start, median"),
        init.median,
        "ms",
        None,
        &format!(
            "{round}: spawn to init reply of each of the {} Python worker processes (90th percentile {:.0} ms, \
             slowest {:.0} ms); a worker imports an SDK when its first intent needs it, so this is the \
             interpreter and the protocol loop.",
            timing.processes_started, init.p90, init.max
        ),
    ));
    for (kind, total) in &timing.waits {
        let meaning = timing.waits_explained.get(kind).copied().unwrap_or("");
        records.push(record(
            BENCH,
            &format!("live phases, {what}: waits, {kind}"),
            total.ms / 1000.0,
            "s",
            None,
            &format!(
                "{round}: the {} waits of this kind ({meaning}) added up over every scenario; scenarios run \
                 {LIVE_JOBS_DEFAULT} at a time, so the kinds add up to more than the round's {wall_s:.1} s.",
                total.count
            ),
        ));
    }
}

/// The catalog and the generated cases of the correct executor at each of [`SWEEP_JOBS`],
/// with the `constant-fencing-token` variant on the stale-worker scenarios beside it: the wall
/// time, and how many verdicts stayed what they must be.
fn sweep(
    correct: &ExecutorCommand,
    stale: &ExecutorCommand,
    work: &Path,
    records: &mut Vec<Value>,
) -> Result<()> {
    let cases = catalog_and_generated(GENERATED)?;
    let stale_cases: Vec<Case> = STALE
        .iter()
        .flat_map(|name| std::iter::repeat_n(*name, STALE_REPEATS))
        .map(|name| -> Result<Case> {
            let scenario = scenarios::catalog::find(name).ok_or(format!("no catalog scenario {name}"))??;
            Ok(Case { scenario, source: Source::Catalog })
        })
        .collect::<Result<_>>()?;
    println!(
        "\n{BENCH}: verdicts under load, {} scenarios beside {} stale-worker runs",
        cases.len(),
        stale_cases.len()
    );
    for jobs in SWEEP_JOBS {
        let started = Instant::now();
        let (results, stale_results) = std::thread::scope(|scope| {
            let beside = scope.spawn(|| {
                let driver = Driver::Live(stale.clone());
                run::run_cases(
                    &stale_cases,
                    &RunContext::new(SEED, &driver, &work.join("stale"), ""),
                    jobs.min(stale_cases.len()),
                    &Quiet,
                )
            });
            let driver = Driver::Live(correct.clone());
            let results = run::run_cases(
                &cases,
                &RunContext::new(SEED, &driver, &work.join("sweep"), "twice run"),
                jobs,
                &Quiet,
            );
            (results, beside.join())
        });
        let wall = started.elapsed().as_secs_f64();
        let stale_results = stale_results.map_err(|_| "the stale-worker runs panicked")?;
        let kept = results.iter().filter(|r| r.outcome == Outcome::Passed).count();
        let caught = stale_results
            .iter()
            .filter(|r| checker::violations(&r.verdicts).any(|v| v.invariant == checker::NO_STALE_WRITE))
            .count();
        println!(
            "  {jobs:>2} jobs  {wall:.1} s, {kept} of {} passed, {caught} of {} stale writes caught",
            results.len(),
            stale_results.len()
        );
        records.push(record(
            BENCH,
            &format!("live, catalog + {GENERATED} generated at {jobs} jobs, beside stale-worker runs"),
            wall,
            "s",
            None,
            &format!(
                "One round: the correct executor on the {} scenarios, {jobs} at a time, while the \
                 constant-fencing-token variant runs {} stale-worker scenarios ({}) {} at a time beside it. \
                 Verdicts kept: {kept} of {} scenarios passed for the correct executor (all must), {caught} of {} \
                 stale writes caught (all must).",
                cases.len(),
                stale_results.len(),
                STALE.join(", "),
                jobs.min(stale_cases.len()),
                results.len(),
                stale_results.len()
            ),
        ));
        if kept != results.len() || caught != stale_results.len() {
            return Err(format!(
                "verdicts changed under load at {jobs} jobs: not passed {}; stale writes caught {caught} of {}",
                failures(&results).join(", "),
                stale_results.len()
            )
            .into());
        }
    }
    Ok(())
}

/// A buggy executor's run as `twice run` makes it: the catalog and [`BUGGY_CASES`] generated
/// cases at the default jobs, then every failing generated case shrunk side by side within the
/// default live budget.
fn buggy_run(command: &ExecutorCommand, work: &Path, records: &mut Vec<Value>) -> Result<()> {
    let cases = catalog_and_generated(BUGGY_CASES)?;
    let driver = Driver::Live(command.clone());
    println!(
        "\n{BENCH}: a buggy executor (--bug memory-only), {} scenarios, shrinking within {LIVE_SHRINK_BUDGET_S} s",
        cases.len()
    );
    let started = Instant::now();
    let results =
        run::run_cases(&cases, &RunContext::new(SEED, &driver, work, "twice run"), LIVE_JOBS_DEFAULT, &Quiet);
    let ran = started.elapsed().as_secs_f64();
    let limits = runner::shrink::ShrinkLimits {
        runs_max: SHRINK_RUNS_MAX,
        deadline: Some(Instant::now() + Duration::from_secs(LIVE_SHRINK_BUDGET_S)),
    };
    let shrunk = runner::shrink::shrink_failures(
        &results,
        &RunContext::new(SEED, &driver, work, ""),
        LIVE_JOBS_DEFAULT,
        limits,
        &runner::shrink::QuietShrink,
    );
    let wall = started.elapsed().as_secs_f64();
    let mut stops: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    let mut smaller = 0;
    for (_, found) in &shrunk {
        let (_, shrink) = found.as_ref().map_err(|e| format!("a failure did not shrink: {e}"))?;
        *stops.entry(shrink.stopped.clone()).or_default() += 1;
        smaller += usize::from(shrink.steps_after < shrink.steps_before);
    }
    let failed_generated = shrunk.len();
    if failed_generated == 0 {
        return Err("the buggy executor failed no generated case: nothing to shrink, no figure".into());
    }
    let stops_text: Vec<String> = stops.iter().map(|(why, n)| format!("{n} {why}")).collect();
    println!(
        "  {wall:.1} s ({ran:.1} s running, {:.1} s shrinking): {failed_generated} failing generated cases, {smaller} shrunk smaller; stopped: {}",
        wall - ran,
        stops_text.join(", ")
    );
    let met = if wall <= TARGET_BUGGY_RUN_S { "met" } else { "NOT met" };
    records.push(record(
        BENCH,
        &format!("live, a buggy executor: catalog + {BUGGY_CASES} generated, shrinking included"),
        wall,
        "s",
        None,
        &format!(
            "One run of the Python executor with --bug memory-only on the catalog and generated cases \
             0..{BUGGY_CASES} of seed {SEED}, {LIVE_JOBS_DEFAULT} at a time ({ran:.1} s), then its \
             {failed_generated} failing generated cases shrunk side by side within the default live budget of \
             {LIVE_SHRINK_BUDGET_S} s ({:.1} s): {smaller} shrunk smaller; stopped: {}. Target: at most \
             {TARGET_BUGGY_RUN_S:.0} s, each failure shrunk or marked as stopped by the budget; {met}.",
            wall - ran,
            stops_text.join(", ")
        ),
    ));
    Ok(())
}
