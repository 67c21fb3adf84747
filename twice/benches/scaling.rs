//! How the sim's cost grows: with the number of intents in one scenario, and with the number
//! of scenarios in one run.
//!
//! What is measured:
//!
//! - **intents per scenario**: one scenario of n refunds ([`INTENTS`]: 1, 10, 100, 1,000), each
//!   on its own payment intent, where every POST has a [`LOST_REPLY_PROBABILITY`] chance of
//!   committing and then holding its reply past the executor's timeout (a seeded rule), so a
//!   share of the intents goes through `unknown` and reconciliation at every size. The case
//!   runs through [`run::run_case`] (sim, reference executor in process, a real SQLite log,
//!   then checked) on one thread; per size the median wall time of one run over [`ROUNDS`]
//!   rounds after one warm-up (a round runs the case as many times as it takes to cover
//!   [`INTENTS_PER_ROUND`] intents, so that small cases are not timed one millisecond at a
//!   time), the time per intent, the simulated time, and the peak resident memory of a
//!   process that runs that one case.
//! - **scenarios per run**: [`RUN_SIZES`] generated cases (seed [`SEED`]) through
//!   [`run::run_cases`] on [`THREADS`] threads, as `twice run --cases N` does; the median wall
//!   time, cases per second, and the peak resident memory of a process that runs them all and
//!   keeps their results as `twice run` does, to write the report: through [`run::run_specs`],
//!   each generated case made when it runs and each passed result compacted as it comes (the
//!   timed rounds run cases generated beforehand, so that they time the runs alone).
//!
//! Memory is each measurement's own child process (this benchmark started again with
//! `--child ...`), whose high-water mark of resident memory (`VmHWM` in `/proc/self/status`)
//! is read at its end; an idle child (the same binary, nothing run) gives the floor.
//!
//! The complexity is the exponent b in time ~ size^b, from the sizes' log-log slope.
//!
//! Output: readable lines, then `BENCH {json}` records for `cargo xtask bench`. Run it alone
//! with `cargo bench -p twice --bench scaling`.

// Only the timing, record and scratch-directory helpers are used here.
#[allow(dead_code)]
mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{Quiet, Result, SEED, THREADS, WorkDir, summary};
use results::{Outcome, Source};
use runner::run::{self, Case, Driver, RunContext};
use runner::sim::{self, Reference};
use scenarios::{IntentSpec, LimitOverrides, Scenario, ServiceFault};
use serde_json::{Value, json};
use vocabulary::ContractPatch;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

const BENCH: &str = "twice/scaling";
/// Intents in one scenario.
const INTENTS: [usize; 4] = [1, 10, 100, 1_000];
/// Generated cases in one run.
const RUN_SIZES: [u64; 3] = [100, 1_000, 10_000];
/// Measured runs per size.
const ROUNDS: usize = 5;
/// Intents a measured round of the intents-per-scenario figures covers, at least: smaller
/// scenarios are run again within the round.
const INTENTS_PER_ROUND: usize = 1_000;
/// Rounds for the largest run size, which takes seconds each.
const ROUNDS_LARGEST: usize = 3;
/// The unit of an exponent: none.
const EXPONENT: &str = "";
/// The share of refund POSTs that commit and lose their reply.
const LOST_REPLY_PROBABILITY: f64 = 0.1;
/// The payments contract's settle bound in these scenarios.
const SETTLE_MS_MAX: u64 = 1_000;
/// The executor's request timeout in these scenarios, as in generated ones.
const REQUEST_TIMEOUT_MS: u64 = scenarios::generate::REQUEST_TIMEOUT_MS;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        return child(&args[i + 1..]);
    }
    let work = WorkDir::create("scaling")?;
    let mut records = Vec::new();
    let idle_kb = child_peak_kb(&["idle"])?;
    println!("{BENCH}: an idle child process peaks at {:.1} MB resident", idle_kb as f64 / 1024.0);
    intents_figures(&work.path, idle_kb, &mut records)?;
    run_size_figures(&work.path, idle_kb, &mut records)?;
    println!();
    for r in &records {
        println!("BENCH {r}");
    }
    Ok(())
}

/// A run in a child process, to measure its memory alone: `idle`, `intents N` or `cases N`.
/// Prints `VmHWM` in kB as its last line.
fn child(args: &[String]) -> Result<()> {
    let work = WorkDir::create(&format!("scaling-child-{}", args.join("-")))?;
    let number = || -> Result<u64> { Ok(args.get(1).ok_or("a size is missing")?.parse::<u64>()?) };
    match args.first().map(String::as_str) {
        Some("idle") => {}
        Some("intents") => {
            let result = run_one(&scaled(usize::try_from(number()?)?), &work.path);
            if result.outcome != Outcome::Passed {
                return Err(format!("{} did not pass: {:?}", result.name, result.outcome).into());
            }
        }
        Some("cases") => {
            // As `twice run` holds them: generated cases made when they run, results compacted
            // as they come.
            let cases: Vec<run::CaseSpec> =
                (0..number()?).map(|index| run::CaseSpec::Generated { seed: SEED, index }).collect();
            let results = run::run_specs(
                &cases,
                &RunContext::new(SEED, &Driver::Sim(&Reference), &work.path, ""),
                THREADS,
                &Quiet,
            );
            let run = run::results(SEED, &Driver::Sim(&Reference), None, results);
            if run.failed() {
                return Err("a generated case did not pass".into());
            }
            // Held until here, as `twice run` holds them to write the report.
            std::hint::black_box(&run);
        }
        _ => return Err(format!("unknown child run {args:?}").into()),
    }
    println!("{}", peak_resident_kb()?);
    Ok(())
}

/// `VmHWM` of this process, in kB.
fn peak_resident_kb() -> Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    let line =
        status.lines().find_map(|l| l.strip_prefix("VmHWM:")).ok_or("no VmHWM in /proc/self/status")?;
    Ok(line.trim().trim_end_matches("kB").trim().parse()?)
}

/// Starts this benchmark again as a child doing `args`; its peak resident memory in kB.
fn child_peak_kb(args: &[&str]) -> Result<u64> {
    let output = Command::new(std::env::current_exe()?)
        .arg("--child")
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()?;
    if !output.status.success() {
        return Err(format!("the child run {args:?} failed ({})", output.status).into());
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let last = text.lines().last().ok_or_else(|| format!("the child run {args:?} printed nothing"))?;
    Ok(last.trim().parse()?)
}

/// `n` refunds on `n` payment intents; every refund POST may lose its reply after committing.
fn scaled(n: usize) -> Scenario {
    let intents = (1..=n)
        .map(|i| IntentSpec {
            id: format!("r{i}"),
            action: "payments.refund".into(),
            params: json!({"payment_intent": format!("pi_{i}"), "amount": 100}),
            replaces: None,
            after: Vec::new(),
            on_event: None,
        })
        .collect();
    let mut rule = FaultRule::always(FaultSpec::TimeoutAfterCommit { hold_ms: REQUEST_TIMEOUT_MS * 3 });
    rule.id = Some("lost-replies".into());
    rule.method = Some("POST".into());
    rule.probability = Some(LOST_REPLY_PROBABILITY);
    Scenario {
        name: format!("scaling-{n}-intents"),
        description: format!("{n} refunds; a tenth of the sends lose their reply after committing"),
        limits: LimitOverrides { request_timeout_ms: Some(REQUEST_TIMEOUT_MS), lease_ms: None },
        // Generated scenarios' middle settle bound: a lost reply is resolved within seconds.
        services: [(
            "payments".to_string(),
            ContractPatch { settle_ms_max: Some(SETTLE_MS_MAX), ..Default::default() },
        )]
        .into(),
        intents,
        faults: vec![ServiceFault { service: "payments".into(), rule }],
        ..Scenario::default()
    }
}

fn run_one(scenario: &Scenario, work: &Path) -> results::ScenarioResult {
    let case = Case { scenario: scenario.clone(), source: Source::Catalog };
    run::run_case(&case, &RunContext::new(SEED, &Driver::Sim(&Reference), work, ""))
}

fn generated(count: u64) -> Result<Vec<Case>> {
    (0..count)
        .map(|index| {
            Ok(Case {
                scenario: scenarios::generate::case(SEED, index)?,
                source: Source::Generated { index },
            })
        })
        .collect()
}

/// The exponent b in cost ~ size^b between two sizes.
fn exponent(size_a: f64, cost_a: f64, size_b: f64, cost_b: f64) -> f64 {
    (cost_b / cost_a).ln() / (size_b / size_a).ln()
}

/// The record of the exponent b in memory above idle ~ size^b between two (size, MB) points,
/// named after `axis` (its name, and its unit in the formula); none when a memory is not above
/// idle, which has no logarithm.
fn memory_exponent(
    axis: (&str, &str),
    (size_a, mb_a): (f64, f64),
    (size_b, mb_b): (f64, f64),
) -> Option<Value> {
    (mb_a > 0.0 && mb_b > 0.0).then(|| {
        let b = exponent(size_a, mb_a, size_b, mb_b);
        common::record(
            BENCH,
            &format!("memory exponent over {}, {size_a} to {size_b}", axis.0),
            b,
            EXPONENT,
            None,
            &format!("b in memory above idle ~ {}^b: {}.", axis.1, complexity(b)),
        )
    })
}

/// What the exponents say, in words.
fn complexity(b: f64) -> &'static str {
    match b {
        b if b < 0.85 => "sublinear over this range (fixed costs still dominate)",
        b if b <= 1.15 => "linear",
        b if b <= 1.5 => "somewhat superlinear",
        _ => "superlinear",
    }
}

fn intents_figures(work: &Path, idle_kb: u64, records: &mut Vec<Value>) -> Result<()> {
    println!("\n{BENCH}: one scenario of n refunds, sim, reference executor, one thread, {ROUNDS} rounds");
    let mut medians_s = BTreeMap::new();
    for n in INTENTS {
        let scenario = scaled(n);
        let warm = run_one(&scenario, work);
        if warm.outcome != Outcome::Passed {
            return Err(format!("{}: the warm-up did not pass: {:?}", scenario.name, warm.outcome).into());
        }
        let lost = warm.faults_applied.len();
        // A small scenario takes a millisecond or two: each round runs it enough times to make
        // [`INTENTS_PER_ROUND`] intents, so that a round is long enough to average out the
        // machine's moment-to-moment drift.
        let repeats = INTENTS_PER_ROUND.div_ceil(n).max(1);
        let mut walls_s = Vec::new();
        for _ in 0..ROUNDS {
            let started = Instant::now();
            for _ in 0..repeats {
                let result = run_one(&scenario, work);
                if result.outcome != Outcome::Passed {
                    return Err(format!("{} did not pass: {:?}", scenario.name, result.outcome).into());
                }
            }
            walls_s.push(started.elapsed().as_secs_f64() / repeats as f64);
        }
        let seed = run::case_seed(SEED, &Source::Catalog, &scenario.name);
        let (_, simulated) = sim::run_blocking_timed(&scenario, seed, &Reference, work)?;
        let (wall_s, spread) = summary(&walls_s);
        let peak_kb = child_peak_kb(&["intents", &n.to_string()])?;
        let above_mb = peak_kb.saturating_sub(idle_kb) as f64 / 1024.0;
        println!(
            "  {n:>5} intents: {:>9.2} ms ({:.0} µs per intent), {lost} lost replies, simulated {:.1} s, peak \
             {:.1} MB ({above_mb:.1} MB above idle)",
            wall_s * 1e3,
            wall_s * 1e6 / n as f64,
            simulated.as_secs_f64(),
            peak_kb as f64 / 1024.0
        );
        records.push(common::record(
            BENCH,
            &format!("one scenario of {n} intents, wall time"),
            wall_s * 1e3,
            "ms",
            Some(spread),
            &format!(
                "{:.0} µs per intent; {lost} of its sends lost their reply after committing; simulated time \
                 {:.1} s. Median of {ROUNDS} rounds after a warm-up, each round running the case {repeats} \
                 time(s) in a row; every run passed.",
                wall_s * 1e6 / n as f64,
                simulated.as_secs_f64()
            ),
        ));
        records.push(common::record(
            BENCH,
            &format!("one scenario of {n} intents, peak memory above an idle process"),
            above_mb,
            "MB",
            None,
            &format!(
                "A child process that runs this one case peaks at {:.1} MB resident.",
                peak_kb as f64 / 1024.0
            ),
        ));
        medians_s.insert(n, (wall_s, above_mb));
    }
    let (n_lo, n_hi) = (INTENTS[1] as f64, INTENTS[INTENTS.len() - 1] as f64);
    let (t_lo, m_lo) = medians_s[&INTENTS[1]];
    let (t_hi, m_hi) = medians_s[&INTENTS[INTENTS.len() - 1]];
    let b = exponent(n_lo, t_lo, n_hi, t_hi);
    let steps: Vec<String> = INTENTS
        .windows(2)
        .map(|w| {
            let (a, c) = (medians_s[&w[0]].0, medians_s[&w[1]].0);
            format!("{} to {}: {:.2}", w[0], w[1], exponent(w[0] as f64, a, w[1] as f64, c))
        })
        .collect();
    records.push(common::record(
        BENCH,
        &format!("time exponent over intents per scenario, {} to {}", INTENTS[1], INTENTS[INTENTS.len() - 1]),
        b,
        EXPONENT,
        None,
        &format!(
            "b in time ~ intents^b, from the log-log slope: {}. Step by step: {}.",
            complexity(b),
            steps.join(", ")
        ),
    ));
    records.extend(memory_exponent(("intents per scenario", "intents"), (n_lo, m_lo), (n_hi, m_hi)));
    Ok(())
}

fn run_size_figures(work: &Path, idle_kb: u64, records: &mut Vec<Value>) -> Result<()> {
    println!("\n{BENCH}: runs of N generated cases (seed {SEED}), sim, {THREADS} threads");
    let driver = Driver::Sim(&Reference);
    let mut medians_s = BTreeMap::new();
    for (i, size) in RUN_SIZES.into_iter().enumerate() {
        let cases = generated(size)?;
        let rounds = if i + 1 == RUN_SIZES.len() { ROUNDS_LARGEST } else { ROUNDS };
        let mut walls_s = Vec::new();
        for _ in 0..rounds {
            let started = Instant::now();
            let results = run::run_cases(&cases, &RunContext::new(SEED, &driver, work, ""), THREADS, &Quiet);
            walls_s.push(started.elapsed().as_secs_f64());
            let failed = common::failures(&results);
            if !failed.is_empty() {
                return Err(format!("{size} cases: not passed: {}", failed.join(", ")).into());
            }
        }
        let (wall_s, spread) = summary(&walls_s);
        let peak_kb = child_peak_kb(&["cases", &size.to_string()])?;
        let above_mb = peak_kb.saturating_sub(idle_kb) as f64 / 1024.0;
        println!(
            "  {size:>6} cases: {:>8.2} s, {:.0} cases/s, peak {:.1} MB ({above_mb:.1} MB above idle)",
            wall_s,
            size as f64 / wall_s,
            peak_kb as f64 / 1024.0
        );
        records.push(common::record(
            BENCH,
            &format!("run of {size} generated cases, {THREADS} threads"),
            size as f64 / wall_s,
            "cases/s",
            Some(spread),
            &format!(
                "{wall_s:.2} s, median of {rounds} rounds; every case passed. The cases are generated before the \
                 clock starts."
            ),
        ));
        records.push(common::record(
            BENCH,
            &format!("run of {size} generated cases, peak memory above an idle process"),
            above_mb,
            "MB",
            None,
            &format!(
                "A child process that runs the {size} cases and keeps their results, as `twice run` does for its \
                 report, peaks at {:.1} MB resident: {:.1} kB per case above idle.",
                peak_kb as f64 / 1024.0,
                above_mb * 1024.0 / size as f64
            ),
        ));
        medians_s.insert(size, (wall_s, above_mb));
    }
    let (lo, hi) = (RUN_SIZES[0], RUN_SIZES[RUN_SIZES.len() - 1]);
    let b = exponent(lo as f64, medians_s[&lo].0, hi as f64, medians_s[&hi].0);
    records.push(common::record(
        BENCH,
        &format!("time exponent over cases per run, {lo} to {hi}"),
        b,
        EXPONENT,
        None,
        &format!("b in time ~ cases^b: {}.", complexity(b)),
    ));
    records.extend(memory_exponent(
        ("cases per run", "cases"),
        (lo as f64, medians_s[&lo].1),
        (hi as f64, medians_s[&hi].1),
    ));
    Ok(())
}
