//! How fast `twice run` goes: generated cases per second in the sim driver against the
//! reference executor, how much faster than real time that is, how long a live run of the
//! whole catalog takes against the reference executor's binary, and how much faster the same
//! catalog runs in sim.
//!
//! What is measured:
//!
//! - **sim, cases per second**: [`GENERATED`] generated cases (seed [`SEED`], the default of
//!   `twice run`) through [`run::run_cases`], the function `twice run` uses, on [`THREADS`]
//!   threads and on one: each case runs on its own paused current-thread runtime with the
//!   fakes and the reference executor in process (a real SQLite log per case, in SQLite's
//!   in-process `memdb`), then is checked. The cases are generated before the clock starts (generating them is timed
//!   apart). [`SIM_ROUNDS`] rounds, interleaved (two threads, one thread, repeat), after an
//!   unmeasured warm-up; every round must pass every case and give byte-identical results.
//! - **sim, end to end**: what `twice run` does with its defaults, in process: load the
//!   catalog, generate the cases, run catalog and cases, and write `results.json`.
//! - **simulated time**: the virtual time each generated case spans (from the start of its
//!   run to the last status, including every settle wait and reconcile round), measured once
//!   with [`sim::run_blocking_timed`] (it is deterministic: the same in every round), summed
//!   over the cases; the speedup is that sum over each round's wall time.
//! - **live**: the whole catalog through [`run::run_cases`] with the live driver against
//!   `target/release/twice-executor` (real subprocesses, loopback HTTP, SIGKILL/SIGSTOP), on
//!   [`THREADS`] threads as `twice run --live --cases 0` does, [`LIVE_ROUNDS`] rounds; the
//!   total wall time, and each scenario's (the time between its thread's previous case and
//!   it, taken from the progress callback, which runs on the case's thread).
//!
//! - **sim against live, same catalog**: right after the live rounds, the same catalog in sim
//!   against the reference executor in process, [`SIM_ROUNDS`] rounds of [`CATALOG_PASSES`]
//!   passes on [`THREADS`] threads; cases per second in both, their ratio (its spread from
//!   the least to the most favourable pairing of rounds), and the catalog's simulated time
//!   over the wall time of one pass.
//!
//! `cargo xtask bench` builds `twice-executor` (release) before it runs this; run alone, build
//! it first: `cargo build --release -p twice --bin twice-executor`.
//!
//! - **reports**: [`REPORT_CASES`] generated cases run in sim (as above, one round), then the
//!   four report files (`results.json`, `summary.md`, `junit.xml`, `report.html`) rendered and
//!   written from their results by `reports::write_all`, [`REPORT_ROUNDS`] times; the median
//!   render time over the sim time, each file's own render time, and the files' sizes.
//!
//! Output: readable lines, then one `BENCH {json}` line per figure, which `cargo xtask bench`
//! collects into `docs/benchmarks.md` (the record format is described in `xtask/src/main.rs`).
//! Run it alone with `cargo bench -p twice --bench run`, or only one part of it with
//! `cargo bench -p twice --bench run -- sim` (or `-- live`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Live, Quiet, Result, SEED, THREADS, WorkDir, catalog, live_figures, load_average, summary};
use results::Source;
use runner::live::ExecutorCommand;
use runner::run::{self, Case, Driver, Progress, RunContext};
use runner::sim::{self, Reference};
use serde_json::Value;

/// The name of this benchmark in `BENCH` records.
const BENCH: &str = "twice/run";
/// Generated cases per sim round: `twice run`'s default.
const GENERATED: u64 = 1_000;
/// Generated cases in the unmeasured warm-up.
const WARMUP: u64 = 200;
const SIM_ROUNDS: usize = 5;
const LIVE_ROUNDS: usize = 3;
/// Passes over the catalog in each sim round of the sim-against-live figures.
const CATALOG_PASSES: usize = 20;
/// `results.json` of a passing default run stays under this: every row carries its verdicts
/// whatever its outcome (about 1.1 kB of a passed case's 1.6 kB), so a reader needs no table.
const RESULTS_JSON_BYTES_MAX: u64 = 2_000_000;
/// `report.html` of a passing default run stays under this.
const REPORT_HTML_BYTES_MAX: u64 = 1_000_000;
/// Generated cases whose results the report benchmark renders.
const REPORT_CASES: u64 = 10_000;
const REPORT_ROUNDS: usize = 5;
/// Rendering may take at most this share of the sim time of the same cases.
const TARGET_REPORT_SHARE: f64 = 0.10;
/// The bars: at least 2,500 generated cases per second in sim on two cores and 1,500 on one,
/// and a 1,000x speedup over real time.
const TARGET_CASES_PER_S: f64 = 2_500.0;
const TARGET_CASES_PER_S_ONE_THREAD: f64 = 1_500.0;
const TARGET_SPEEDUP: f64 = 1_000.0;

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; `sim` or `live` after `--` runs only that part.
    let parts: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wants = |part: &str| parts.is_empty() || parts.iter().any(|p| p == part);
    let work = WorkDir::create("run")?;
    let mut records = Vec::new();
    if wants("sim") {
        sim_figures(&work.path, &mut records)?;
    }
    if wants("live") {
        let live_walls_s = reference_live_figures(&work.path, &mut records)?;
        // The same scenarios in sim, for the speedup: needs the live rounds just measured.
        catalog_speedup_figures(&work.path, &live_walls_s, &mut records)?;
    }
    if wants("reports") {
        report_figures(&work.path, &mut records)?;
    }
    println!();
    for r in &records {
        println!("BENCH {r}");
    }
    Ok(())
}

fn generated(count: u64) -> Result<Vec<Case>> {
    (0..count)
        .map(|index| {
            let scenario = scenarios::generate::case(SEED, index)?;
            Ok(Case { scenario, source: Source::Generated { index } })
        })
        .collect()
}

/// Runs `cases`; returns the wall time and the results as `results.json` would hold them.
fn timed_run(
    cases: &[Case],
    driver: &Driver<'_>,
    work: &Path,
    threads: usize,
    progress: &dyn Progress,
) -> (Duration, results::RunResults) {
    let started = Instant::now();
    let results = run::run_cases(cases, &RunContext::new(SEED, driver, work, "twice run"), threads, progress);
    let wall = started.elapsed();
    (wall, run::results(SEED, driver, None, results))
}

/// Names of the cases that did not pass, with their outcome.
fn failures(results: &results::RunResults) -> Vec<String> {
    common::failures(&results.results)
}

fn sim_figures(work: &Path, records: &mut Vec<Value>) -> Result<()> {
    let load_before = load_average();
    let driver = Driver::Sim(&Reference);
    let generating = Instant::now();
    let cases = generated(GENERATED)?;
    let generate_us = generating.elapsed().as_secs_f64() * 1e6 / GENERATED as f64;
    println!(
        "{BENCH}: sim, {GENERATED} generated cases (seed {SEED}) against the reference executor, \
         {THREADS} threads and 1, {SIM_ROUNDS} interleaved rounds; generating them took {generate_us:.0} µs \
         per case"
    );

    // Warm-up: every code path once, the allocator and the page cache primed.
    let (_, warm) = timed_run(&generated(WARMUP)?, &driver, work, THREADS, &Quiet);
    if !failures(&warm).is_empty() {
        return Err(format!("the warm-up failed: {}", failures(&warm).join(", ")).into());
    }

    let mut walls: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    let mut first: Option<String> = None;
    for round in 1..=SIM_ROUNDS {
        for threads in [THREADS, 1] {
            let (wall, results) = timed_run(&cases, &driver, work, threads, &Quiet);
            let failed = failures(&results);
            if !failed.is_empty() {
                return Err(format!(
                    "round {round}: {} cases did not pass: {}",
                    failed.len(),
                    failed.join(", ")
                )
                .into());
            }
            let json = serde_json::to_string(&results)?;
            match &first {
                None => first = Some(json),
                Some(f) if *f != json => {
                    return Err(format!(
                        "round {round}, {threads} threads: the results differ from the first round's: \
                         the sim is not deterministic"
                    )
                    .into());
                }
                Some(_) => {}
            }
            let rate = GENERATED as f64 / wall.as_secs_f64();
            println!(
                "  round {round}/{SIM_ROUNDS}  {threads} thread(s)  {:>7.0} ms  {rate:>6.0} cases/s",
                wall.as_secs_f64() * 1e3
            );
            walls.entry(threads).or_default().push(wall.as_secs_f64());
        }
    }

    // Simulated time: deterministic, so measured once, with the observations checked against
    // the rounds'.
    let reference: results::RunResults = serde_json::from_str(first.as_deref().unwrap_or("{}"))?;
    let mut virtual_s = Vec::with_capacity(cases.len());
    for (case, result) in cases.iter().zip(&reference.results) {
        let seed = run::case_seed(SEED, &case.source, &case.scenario.name);
        let (observed, elapsed) = sim::run_blocking_timed(&case.scenario, seed, &Reference, work)?;
        // A passed result keeps only its observation's digest (`ScenarioResult::compact`).
        let same = match &result.summary {
            Some(summary) => results::observed_digest(&observed) == summary.observed_digest,
            None => observed == result.observed,
        };
        if !same {
            return Err(format!(
                "{}: a timed run observed something else than the rounds",
                case.scenario.name
            )
            .into());
        }
        virtual_s.push(elapsed.as_secs_f64());
    }
    let virtual_total: f64 = virtual_s.iter().sum();
    let (virtual_median, _) = summary(&virtual_s);
    let virtual_max = virtual_s.iter().copied().fold(0.0, f64::max);

    let rates = |threads: usize| -> Vec<f64> {
        walls[&threads].iter().map(|w| GENERATED as f64 / w).collect::<Vec<f64>>()
    };
    let setup = format!(
        "{GENERATED} generated cases (seed {SEED}, as `twice run` makes them) through run::run_cases, \
         each on its own paused current-thread tokio runtime with the fakes and the reference executor in \
         process (a real SQLite log per case, in SQLite's in-process memdb, on connections kept warm from one case \
         to the next), then checked; generating the cases \
         ({generate_us:.0} µs each) is not timed. Median of {SIM_ROUNDS} rounds after a warm-up of \
         {WARMUP}; every round passed every case and gave byte-identical results, on either thread count."
    );
    let load = format!("1-minute load average {load_before} before these rounds, {} after.", load_average());
    let (rate2, spread2) = summary(&rates(THREADS));
    let met = if rate2 >= TARGET_CASES_PER_S { "met" } else { "NOT met" };
    println!(
        "sim, {THREADS} threads: median {rate2:.0} cases/s, spread {spread2:.1} % (target {TARGET_CASES_PER_S}: {met})"
    );
    records.push(common::record(
        BENCH,
        &format!("sim, generated cases, {THREADS} threads"),
        rate2,
        "cases/s",
        Some(spread2),
        &format!(
            "{setup} Target: at least {TARGET_CASES_PER_S:.0} cases/s on this {THREADS}-core machine; \
             {met}. {load}"
        ),
    ));
    let (rate1, spread1) = summary(&rates(1));
    let met1 = if rate1 >= TARGET_CASES_PER_S_ONE_THREAD { "met" } else { "NOT met" };
    println!(
        "sim, 1 thread: median {rate1:.0} cases/s, spread {spread1:.1} % (target {TARGET_CASES_PER_S_ONE_THREAD}: {met1})"
    );
    records.push(common::record(
        BENCH,
        "sim, generated cases, 1 thread",
        rate1,
        "cases/s",
        Some(spread1),
        &format!(
            "As above on one thread, in the same rounds: {THREADS} threads go {:.2}x as fast. Target: at least \
             {TARGET_CASES_PER_S_ONE_THREAD:.0} cases/s on one thread; {met1}.",
            rate2 / rate1
        ),
    ));

    // End to end, as `twice run` with its defaults: catalog, generation, run, the four report
    // files (and their sizes: deterministic, so the last round's stand for all).
    let mut ends = Vec::new();
    let mut sizes_bytes = (0, 0, 0);
    let mut scenarios = 0;
    for round in 1..=SIM_ROUNDS {
        let started = Instant::now();
        let mut all = catalog()?;
        let count = all.len();
        all.extend(generated(GENERATED)?);
        let (_, results) = timed_run(&all, &driver, work, THREADS, &Quiet);
        let path = run::write_results(&work.join("report"), &results)?;
        let wall = started.elapsed().as_secs_f64();
        let failed = failures(&results);
        if !failed.is_empty() {
            return Err(
                format!("end to end: {} cases did not pass: {}", failed.len(), failed.join(", ")).into()
            );
        }
        let bytes = std::fs::metadata(&path)?.len();
        let dir = work.join("report");
        sizes_bytes = (
            bytes,
            std::fs::metadata(dir.join(reports::HTML_FILE))?.len(),
            std::fs::metadata(dir.join(reports::JUNIT_FILE))?.len(),
        );
        scenarios = results.results.len();
        println!(
            "  round {round}/{SIM_ROUNDS}  end to end, {count} catalog + {GENERATED} generated: {:.0} ms \
             ({:.1} MB of results.json)",
            wall * 1e3,
            bytes as f64 / 1e6
        );
        ends.push(wall * 1e3);
    }
    let (end, end_spread) = summary(&ends);
    records.push(common::record(
        BENCH,
        &format!("sim, catalog + {GENERATED} generated cases end to end, {THREADS} threads"),
        end,
        "ms",
        Some(end_spread),
        &format!(
            "What `twice run` does with its defaults, in process (no process start): load the catalog, generate \
             {GENERATED} cases, run and check all of them on {THREADS} threads, write the four report files. \
             Median of {SIM_ROUNDS} rounds."
        ),
    ));
    let (results_bytes, html_bytes, junit_bytes) = sizes_bytes;
    for (name, bytes, target) in [
        ("results.json", results_bytes, Some(RESULTS_JSON_BYTES_MAX)),
        ("report.html", html_bytes, Some(REPORT_HTML_BYTES_MAX)),
        ("junit.xml", junit_bytes, None),
    ] {
        let kb = bytes as f64 / 1e3;
        let verdict = match target {
            Some(max) if bytes < max => format!(" Target: under {:.0} MB; met.", max as f64 / 1e6),
            Some(max) => format!(" Target: under {:.0} MB; NOT met.", max as f64 / 1e6),
            None => String::new(),
        };
        println!("{name} of the default passing run: {kb:.0} kB");
        records.push(common::record(
            BENCH,
            &format!("{name} of a passing default run"),
            kb,
            "kB",
            None,
            &format!(
                "The file as the end-to-end rounds above write it: {scenarios} scenarios, every one passed (a \
                 passed case keeps its verdicts and a summary; a failed one keeps everything). Deterministic.{verdict}"
            ),
        ));
    }

    records.push(common::record(
        BENCH,
        &format!("simulated time of the {GENERATED} generated cases"),
        virtual_total,
        "s",
        None,
        &format!(
            "Virtual time from the start of each case's run to its final status (settle waits and reconcile \
             rounds included), summed: per case median {:.1} s, max {:.1} s. Deterministic, so measured once.",
            virtual_median, virtual_max
        ),
    ));
    let speedups: Vec<f64> = walls[&THREADS].iter().map(|w| virtual_total / w).collect();
    let (speedup, speedup_spread) = summary(&speedups);
    let met = if speedup >= TARGET_SPEEDUP { "met" } else { "NOT met" };
    println!(
        "simulated {virtual_total:.0} s over wall time ({THREADS} threads): median {speedup:.0}x \
         (target {TARGET_SPEEDUP}x: {met})"
    );
    records.push(common::record(
        BENCH,
        &format!("simulated over wall time, {THREADS} threads"),
        speedup,
        "x",
        Some(speedup_spread),
        &format!(
            "The simulated time of the {GENERATED} cases over each round's wall time on {THREADS} threads, \
             median of {SIM_ROUNDS} rounds. Target: at least {TARGET_SPEEDUP:.0}x; {met}."
        ),
    ));
    Ok(())
}

fn reference_live_figures(work: &Path, records: &mut Vec<Value>) -> Result<Vec<f64>> {
    let release = bench_release_dir()?;
    let command = ExecutorCommand::reference_in(&release).map_err(|e| {
        format!(
            "{e}; build it first with `cargo build --release -p twice --bin twice-executor` \
             (`cargo xtask bench` does)"
        )
    })?;
    let live = Live {
        bench: BENCH,
        who: "",
        setup: "the release twice-executor binary (a real subprocess per worker, loopback HTTP fakes, real \
                SIGKILL and SIGSTOP, state on disk under the temp dir), as `twice run --live --cases 0`",
        rounds: LIVE_ROUNDS,
    };
    live_figures(&live, command, work, records)
}

fn report_figures(work: &Path, records: &mut Vec<Value>) -> Result<()> {
    println!(
        "\n{BENCH}: reports, {REPORT_CASES} generated cases (seed {SEED}) run in sim on {THREADS} threads, then \
         rendered {REPORT_ROUNDS} times"
    );
    let cases = generated(REPORT_CASES)?;
    let driver = Driver::Sim(&Reference);
    let started = Instant::now();
    let results = run::run_cases(&cases, &RunContext::new(SEED, &driver, work, "twice run"), THREADS, &Quiet);
    let sim_s = started.elapsed().as_secs_f64();
    let run = run::results(SEED, &driver, None, results);
    if run.failed() {
        return Err(format!("the reference executor failed: {:?}", failures(&run)).into());
    }
    println!("  sim: {sim_s:.2} s");
    let out = work.join("report");
    let mut totals = Vec::new();
    let mut per_file: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for round in 0..REPORT_ROUNDS {
        let started = Instant::now();
        reports::write_all(&out, &run)?;
        let took = started.elapsed().as_secs_f64();
        totals.push(took);
        // Each renderer alone, without the write, to show where the time goes.
        let timed = |f: &dyn Fn() -> Result<usize>| -> Result<f64> {
            let started = Instant::now();
            f()?;
            Ok(started.elapsed().as_secs_f64())
        };
        per_file.entry("results.json").or_default().push(timed(&|| Ok(reports::json::render(&run)?.len()))?);
        per_file.entry("summary.md").or_default().push(timed(&|| Ok(reports::summary::render(&run).len()))?);
        per_file.entry("junit.xml").or_default().push(timed(&|| Ok(reports::junit::render(&run)?.len()))?);
        per_file.entry("report.html").or_default().push(timed(&|| Ok(reports::html::render(&run).len()))?);
        println!("  round {}: all four files rendered and written in {:.3} s", round + 1, took);
    }
    let (median_s, spread) = summary(&totals);
    let share = median_s / sim_s;
    let sizes: Vec<String> =
        [reports::RESULTS_FILE, reports::SUMMARY_FILE, reports::JUNIT_FILE, reports::HTML_FILE]
            .iter()
            .map(|f| {
                let bytes = std::fs::metadata(out.join(f)).map(|m| m.len()).unwrap_or(0);
                format!("{f} {:.1} MB", bytes as f64 / 1e6)
            })
            .collect();
    let verdict = if share < TARGET_REPORT_SHARE { "met" } else { "NOT met" };
    records.push(common::record(
        BENCH,
        &format!("sim run of {REPORT_CASES} generated cases"),
        sim_s,
        "s",
        None,
        "One round, 2 threads, the cases generated beforehand.",
    ));
    records.push(common::record(
        BENCH,
        &format!("render and write all four report files for {REPORT_CASES} results"),
        median_s,
        "s",
        Some(spread),
        &format!("Median of {REPORT_ROUNDS} rounds; sizes: {}.", sizes.join(", ")),
    ));
    records.push(common::record(
        BENCH,
        "report time over sim time",
        share,
        "x",
        None,
        &format!("Target under {TARGET_REPORT_SHARE}: {verdict}."),
    ));
    for (file, samples) in &per_file {
        let (median, spread) = summary(samples);
        records.push(common::record(BENCH, &format!("render {file} alone"), median, "s", Some(spread), ""));
    }
    Ok(())
}

/// The catalog in sim, against the same reference executor the live rounds ran as a binary:
/// cases per second in both, their ratio, and the simulated time over the wall time.
fn catalog_speedup_figures(work: &Path, live_walls_s: &[f64], records: &mut Vec<Value>) -> Result<()> {
    let cases = catalog()?;
    let count = cases.len();
    let driver = Driver::Sim(&Reference);
    println!("\n{BENCH}: sim, the same {count} catalog scenarios on {THREADS} threads, {SIM_ROUNDS} rounds");
    let (_, warm) = timed_run(&cases, &driver, work, THREADS, &Quiet);
    if !failures(&warm).is_empty() {
        return Err(format!("the catalog warm-up failed in sim: {}", failures(&warm).join(", ")).into());
    }
    // One pass over the catalog takes some 30 ms, too short to time alone on a shared machine:
    // a round is [`CATALOG_PASSES`] passes, and its time per pass is what is compared.
    let mut sim_walls_s = Vec::new();
    for round in 1..=SIM_ROUNDS {
        let mut round_s = 0.0;
        for _ in 0..CATALOG_PASSES {
            let (wall, results) = timed_run(&cases, &driver, work, THREADS, &Quiet);
            let failed = failures(&results);
            if !failed.is_empty() {
                return Err(format!("sim catalog round {round}: not passed: {}", failed.join(", ")).into());
            }
            round_s += wall.as_secs_f64();
        }
        let pass_s = round_s / CATALOG_PASSES as f64;
        println!("  round {round}/{SIM_ROUNDS}  {:.1} ms per pass over the catalog", pass_s * 1e3);
        sim_walls_s.push(pass_s);
    }
    // Simulated time per scenario: deterministic, so measured once.
    let mut virtual_s = Vec::with_capacity(count);
    for case in &cases {
        let seed = run::case_seed(SEED, &case.source, &case.scenario.name);
        let (_, elapsed) = sim::run_blocking_timed(&case.scenario, seed, &Reference, work)?;
        virtual_s.push(elapsed.as_secs_f64());
    }
    let virtual_total_s: f64 = virtual_s.iter().sum();

    let rate = |walls: &[f64]| walls.iter().map(|w| count as f64 / w).collect::<Vec<f64>>();
    let (sim_rate, sim_spread) = summary(&rate(&sim_walls_s));
    let (live_rate, live_spread) = summary(&rate(live_walls_s));
    // The ratio's spread: from the least favourable pairing of rounds to the most.
    let ratio = sim_rate / live_rate;
    let (sim_min, sim_max) = min_max(&rate(&sim_walls_s));
    let (live_min, live_max) = min_max(&rate(live_walls_s));
    let ratio_spread = (sim_max / live_min - sim_min / live_max) / ratio * 100.0;
    let speedups: Vec<f64> = sim_walls_s.iter().map(|w| virtual_total_s / w).collect();
    let (speedup, speedup_spread) = summary(&speedups);
    let live_median_s = summary(live_walls_s).0;
    println!(
        "catalog: sim {sim_rate:.0} cases/s, live {live_rate:.2} cases/s: {ratio:.0}x; simulated \
         {virtual_total_s:.1} s over sim wall time: {speedup:.0}x"
    );
    records.push(common::record(
        BENCH,
        &format!("sim, whole catalog ({count} scenarios), {THREADS} threads"),
        sim_rate,
        "cases/s",
        Some(sim_spread),
        &format!(
            "The catalog through run::run_cases with the sim driver and the reference executor in process, \
             {THREADS} threads, median of {SIM_ROUNDS} rounds after a warm-up, each round {CATALOG_PASSES} \
             passes over the catalog; every pass passed every scenario."
        ),
    ));
    records.push(common::record(
        BENCH,
        &format!("live, whole catalog ({count} scenarios), {THREADS} threads, as a rate"),
        live_rate,
        "cases/s",
        Some(live_spread),
        &format!(
            "The live rounds above ({} rounds, median {live_median_s:.1} s) as cases per second.",
            live_walls_s.len()
        ),
    ));
    records.push(common::record(
        BENCH,
        "sim over live, same catalog, same executor",
        ratio,
        "x",
        Some(ratio_spread),
        "Cases per second in sim over cases per second live, for the same scenarios, seeds and reference \
         executor (in process in sim, the release binary live), on the same threads in the same run; the \
         spread runs from the slowest sim round against the fastest live round to the other way round.",
    ));
    records.push(common::record(
        BENCH,
        &format!("simulated time of the catalog ({count} scenarios)"),
        virtual_total_s,
        "s",
        None,
        &format!(
            "Virtual time from the start of each scenario's run to its final status, summed (measured once: \
             deterministic). Live, the same scenarios take about as long in real time: their per-scenario wall \
             times add up to the figure `live, per scenario` notes above. Per scenario: median {:.1} s, max \
             {:.1} s.",
            summary(&virtual_s).0,
            virtual_s.iter().copied().fold(0.0, f64::max)
        ),
    ));
    let met = if speedup >= TARGET_SPEEDUP { "met" } else { "NOT met" };
    records.push(common::record(
        BENCH,
        &format!("simulated over wall time, catalog, {THREADS} threads"),
        speedup,
        "x",
        Some(speedup_spread),
        &format!(
            "The catalog's simulated time over each sim round's wall time, median of {SIM_ROUNDS} rounds. \
             Target: at least {TARGET_SPEEDUP:.0}x; {met}."
        ),
    ));
    Ok(())
}

/// The smallest and the largest sample.
fn min_max(samples: &[f64]) -> (f64, f64) {
    samples.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &s| (lo.min(s), hi.max(s)))
}

/// `target/release`: this benchmark runs as `target/release/deps/run-HASH`.
fn bench_release_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let deps = exe.parent().ok_or("the benchmark has no directory")?;
    Ok(deps.parent().unwrap_or(deps).to_path_buf())
}
