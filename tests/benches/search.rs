//! Search power: how many generated cases it takes to catch each mutant of the failure-mode
//! table, for twice's generator and for a protocol-unaware baseline that injects faults the
//! way a TCP fault proxy (toxiproxy and the like) does.
//!
//! What is measured, for every mutant of `tests/it/mutant_table.rs` (the executor of
//! `tests/it/mutant_naive.rs` with one bug switched on) and every seed `1..=`[`SEEDS`]:
//!
//! - **twice**: generated cases `generate::case(seed, i)` for `i` in `0..`[`CASES`], run in
//!   the sim driver in order (as `run::first_failure` does); the number of cases up to and
//!   including the first one whose outcome is `Violated`. An executor error does not count
//!   as found: the search goes on, and the errors are counted for the notes.
//! - **baseline**: the same cases with the same run seed derivation (`run::case_seed` of the
//!   seed and `Source::Generated { index }`), so each (seed, index) draws differently, with
//!   what a proxy can do in place of what the generator does: the intents unchanged (same
//!   actions, parameters and replacements) and the limits announced unchanged; every
//!   service keeps its default contract (a proxy cannot make a service ignore keys, forget
//!   them early, lie in its acks or serve stale reads); no generated fault rules and no
//!   process events (no crashes, pauses, second workers or reconcile triggers, no clock
//!   control). Instead every service the intents use gets three rules that match every
//!   request (any method, any path), each fired with its own probability drawn from the
//!   service's seeded RNG: *held past the timeout* (the proxy holds the request past the
//!   client's timeout, then forwards it, so it commits late: `commit_after_timeout`,
//!   [`LATE_BY_MS`] past the request timeout, inside the settle bound) with half of the
//!   setting's probability, and a *reset* at a moment the proxy cannot relate to the
//!   request, before the service read it (`refuse`) or after it committed
//!   (`drop_after_commit`), a quarter each. Each setting of [`SETTINGS`] is a search of its
//!   own, so the table shows the baseline at each and at its best per mutant.
//!
//! Fairness, enforced before the search: the correct executors (the reference, and the
//! mutants' executor without a bug in both styles) run [`FAIR_CASES_PER_SEED`] baseline cases
//! of every seed at every setting and must pass every one (no violation, no executor error);
//! otherwise the baseline would raise false alarms and the comparison would mean nothing.
//! The rules must also fire: the share of requests they hit is reported per setting.
//!
//! The mutants whose bug no generated case is expected to reach within the bound (`generated:
//! None` in the table, with the reason beside it) are listed but not run. The catalog catches
//! them.
//!
//! Jobs (one mutant, one seed, one side) run on [`THREADS`] threads, each case on its own
//! paused runtime as `twice run` does. Everything is deterministic from the seeds: the
//! counts are the same in every run, only the wall time varies.
//!
//! Output: readable lines, then one `BENCH {json}` line per figure and one for the table,
//! which `cargo xtask bench` collects into `docs/benchmarks.md` (the record format is
//! described in `xtask/src/main.rs`). Run it alone with
//! `cargo bench -p twice-tests --bench search`; `SEARCH_ONLY=naive-retry,no-lease` searches
//! only the mutants named (the figures then cover those alone).

#[path = "../it/mutant_naive.rs"]
mod mutant_naive;
#[path = "../it/mutant_table.rs"]
mod mutant_table;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use results::{Outcome, ScenarioResult, Source};
use runner::run::{self, Case, Driver, RunContext};
use runner::sim::{Reference, SimFactory};
use scenarios::generate::REQUEST_TIMEOUT_MS;
use scenarios::{Scenario, ServiceFault};
use serde_json::{Value, json};
use vocabulary::Contract;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

use mutant_naive::{Naive, Style};
use mutant_table::{MUTANTS, Mutant};

use bench_support::{WorkDir, load_average};

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Result<T, E = BoxError> = std::result::Result<T, E>;

/// The name of this benchmark in `BENCH` records.
const BENCH: &str = "twice-tests/search";
/// Seeds `1..=SEEDS`, each a search of its own per mutant and side.
const SEEDS: u64 = 20;
/// The bound: generated cases searched, at most, per mutant, seed and side.
const CASES: u64 = 1_000;
/// The baseline's settings: the probability that a request meets a fault rule, before the
/// split into held (half), reset before (a quarter) and reset after (a quarter).
const SETTINGS: [f64; 3] = [0.05, 0.2, 0.5];
/// How far past the request timeout a held request commits.
const LATE_BY_MS: u64 = 500;
/// Baseline cases per seed, from index 0, that every correct executor must pass at every
/// setting.
const FAIR_CASES_PER_SEED: u64 = 25;
/// Why a mutant fails with no fault at all, where it does: the notes say so beside its row.
const WITHOUT_A_FAULT: &[(&str, &str)] = &[
    ("no-lease", "it writes a workspace without the fencing token the service offers"),
    (
        "redo-everything",
        "a refund the service refuses, beyond what is left to refund, makes it redo the completed ones",
    ),
];
/// The whole benchmark should take less than this on this 2-core machine.
const TARGET_WALL_S: f64 = 300.0;
/// Threads, as `twice run` uses on this 2-core machine.
const THREADS: usize = 2;

/// Which search a job runs.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Side {
    /// twice's generated cases.
    Twice,
    /// The proxy baseline at setting `SETTINGS[i]`.
    Proxy(usize),
}

impl Side {
    fn all() -> Vec<Side> {
        std::iter::once(Side::Twice).chain((0..SETTINGS.len()).map(Side::Proxy)).collect()
    }

    fn describe(self) -> String {
        match self {
            Side::Twice => "twice".into(),
            Side::Proxy(i) => format!("baseline p = {}", SETTINGS[i]),
        }
    }
}

/// What one search found.
#[derive(Debug, Clone, Default)]
struct Found {
    /// Cases run up to and including the first violation; `None` when none within [`CASES`].
    cases: Option<u64>,
    /// The invariants that first violation broke.
    invariants: Vec<String>,
    /// No fault fired in that case (for the baseline: the workload alone made the mutant fail).
    no_fault: bool,
    /// Cases that ended in an executor error on the way (not counted as found).
    executor_errors: u64,
    /// Cases run in all.
    ran: u64,
    /// Requests the services saw, and those a baseline rule hit.
    requests: u64,
    hit: u64,
}

/// One side's totals over every mutant and seed.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    /// Searches that found a violation within the bound.
    finds: u64,
    /// Of those, the ones whose violation named the table's invariant for generated failures.
    named: u64,
    executor_errors: u64,
    ran: u64,
    requests: u64,
    hit: u64,
}

/// One mutant's medians, for the figures: twice's and the baseline's at each setting.
struct Medians {
    name: &'static str,
    twice: Option<u64>,
    baseline: Vec<Option<u64>>,
}

fn main() -> Result<()> {
    let started = Instant::now();
    let load_before = load_average();
    let work = WorkDir::create("search")?;
    println!(
        "{BENCH}: {} mutants, seeds 1..={SEEDS}, at most {CASES} cases per search; twice and the proxy \
         baseline at p = {SETTINGS:?}; {THREADS} threads",
        MUTANTS.len()
    );

    let (fairness, fair_cases) = fairness_check(&work.path)?;

    // `SEARCH_ONLY=name,name` searches those mutants alone, to try a change to the generator
    // quickly; `cargo xtask bench` never sets it.
    let only: Option<Vec<String>> =
        std::env::var("SEARCH_ONLY").ok().map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let searched: Vec<&Mutant> = MUTANTS
        .iter()
        .filter(|m| m.generated.is_some())
        .filter(|m| only.as_ref().is_none_or(|o| o.iter().any(|n| n == m.name)))
        .collect();
    let mut jobs = Vec::new();
    // Seed by seed, so the early lines already cover every mutant and side.
    for seed in 1..=SEEDS {
        for (m, _) in searched.iter().enumerate() {
            for side in Side::all() {
                jobs.push((m, seed, side));
            }
        }
    }
    println!("\nsearch: {} jobs (mutant, seed, side)", jobs.len());
    let search_started = Instant::now();
    let results = parallel(&jobs, |&(m, seed, side)| {
        let factory = searched[m].factory();
        search(&factory, seed, side, &work.path)
    })?;
    println!("search: done in {:.1} s", search_started.elapsed().as_secs_f64());

    // Per mutant and side, the searches of every seed.
    let per = |m: usize, side: Side| -> Vec<&Found> {
        jobs.iter().zip(&results).filter(|((jm, _, js), _)| *jm == m && *js == side).map(|(_, f)| f).collect()
    };
    let sides = Side::all();
    let mut rows = Vec::new();
    let mut medians: Vec<Medians> = Vec::new();
    let mut tally = vec![Tally::default(); sides.len()];
    let mut workload_alone = Vec::new();
    println!(
        "\nmutant | {} | finds with no fault fired",
        sides.iter().map(|s| s.describe()).collect::<Vec<_>>().join(" | ")
    );
    for mutant in MUTANTS {
        let modes = mutant.failure_modes.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ");
        let (Some(m), Some(invariant)) =
            (searched.iter().position(|s| s.name == mutant.name), mutant.generated)
        else {
            let cell =
                format!("not found within {} (not run: no generated case reaches it)", thousands(CASES));
            let mut row = vec![format!("`{}`", mutant.name), modes];
            row.extend(sides.iter().map(|_| cell.clone()));
            row.push(String::new());
            println!("{} | {}", mutant.name, row[2..].join(" | "));
            rows.push(row);
            continue;
        };
        let mut cells = Vec::new();
        let mut side_medians = Vec::new();
        let mut no_fault = Vec::new();
        for (s, side) in sides.iter().enumerate() {
            let found = per(m, *side);
            let finds: Vec<&&Found> = found.iter().filter(|f| f.cases.is_some()).collect();
            let quiet = finds.iter().filter(|f| f.no_fault).count();
            let t = &mut tally[s];
            t.finds += finds.len() as u64;
            t.named += finds.iter().filter(|f| f.invariants.iter().any(|i| i == invariant)).count() as u64;
            for f in &found {
                t.executor_errors += f.executor_errors;
                t.ran += f.ran;
                t.requests += f.requests;
                t.hit += f.hit;
            }
            let median = lower_median(&found);
            cells.push(cell(median, &found));
            side_medians.push(median);
            no_fault.push(format!("{quiet}/{}", finds.len()));
        }
        let mut row = vec![format!("`{}`", mutant.name), modes];
        row.extend(cells);
        row.push(no_fault.join(" · "));
        println!("{} | {}", mutant.name, row[2..].join(" | "));
        rows.push(row);
        medians.push(Medians {
            name: mutant.name,
            twice: side_medians[0],
            baseline: side_medians[1..].to_vec(),
        });
        // Exposed by the workload alone: a baseline find with no fault fired (the baseline has
        // default contracts and no events, so nothing else was injected).
        let quiet = sides[1..].iter().flat_map(|side| per(m, *side)).any(|f| f.cases.is_some() && f.no_fault);
        if quiet {
            let why = WITHOUT_A_FAULT.iter().find(|(name, _)| *name == mutant.name).map(|(_, why)| *why);
            workload_alone.push(match why {
                Some(why) => format!("`{}` ({why})", mutant.name),
                None => format!("`{}`", mutant.name),
            });
        }
    }

    let wall_s = started.elapsed().as_secs_f64();
    println!("\nwall time: {wall_s:.1} s");

    let mut records = Vec::new();
    let mut columns = vec!["mutant".to_string(), "failure modes".into(), "twice".into()];
    columns.extend(SETTINGS.iter().map(|p| format!("baseline, p = {p}")));
    columns.push("finds with no fault fired (twice · baselines)".into());
    let setting_list = SETTINGS.map(|p| p.to_string()).join(", ");
    let not_run: Vec<String> =
        MUTANTS.iter().filter(|m| m.generated.is_none()).map(|m| format!("`{}`", m.name)).collect();
    let per_side = |what: &dyn Fn(&Tally) -> String| {
        sides
            .iter()
            .zip(&tally)
            .map(|(side, t)| format!("{} for {}", what(t), side.describe()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let alone = match workload_alone.len() {
        0 => "No baseline find came without a fault.".to_string(),
        n => format!(
            "{} {} with no fault fired in some of the baseline's finds, which has default contracts and no \
             events: the workload alone exposes {}, so {} the workload as much as the injection.",
            workload_alone.join(" and "),
            if n == 1 { "fails" } else { "fail" },
            if n == 1 { "it" } else { "them" },
            if n == 1 { "its row measures" } else { "their rows measure" },
        ),
    };
    records.push(json!({
        "bench": BENCH,
        "table": "Generated cases to the first violation, per mutant",
        "columns": columns,
        "rows": rows,
        "notes": format!(
            "Each cell: the median over seeds 1 to {SEEDS} of the number of cases run up to and including \
             the first one that violated an invariant (the lower median, the {}th of the {SEEDS} sorted \
             values, a seed without a violation counting as beyond the bound), and in how many seeds a \
             violation came within the bound of {} cases. \"twice\" runs generate::case(seed, i) for i from \
             0 in the sim driver. The baseline runs the same intents with the same limits and run seeds, \
             with what a TCP fault proxy can do in place of the generated contracts, faults and process \
             events: default contracts, and on every service the intents use, rules on every request, each \
             drawn from the service's seeded RNG: hold the request past the {REQUEST_TIMEOUT_MS} ms request \
             timeout and then forward it (it commits {LATE_BY_MS} ms after the timeout) with probability \
             p/2, reset the connection before the service reads the request with p/4, or after it committed \
             with p/4. The last column counts the finds (per side, in the order of the columns) whose \
             violating case had no fault fired; for twice that still leaves what the generator chose \
             besides faults, contract terms (keys ignored) and process events (a crash). {alone} The first \
             violation named the invariant the table gives for generated failures in {}. An executor error \
             does not count as a violation: {}. Not run, as no generated case is expected to reach their \
             bug within the bound (`generated` is None in the mutant table, which says why): {}; the \
             catalog catches them (tests/it/mutants.rs). {fairness}",
            SEEDS.div_ceil(2),
            thousands(CASES),
            per_side(&|t| format!("{} of {} finds", t.named, t.finds)),
            per_side(&|t| format!("{} on the way", t.executor_errors)),
            not_run.join(" and "),
        ),
    }));

    let searched_n = searched.len();
    let listed = MUTANTS.len();
    let found = |m: Option<u64>| m.is_some();
    let twice_found = medians.iter().filter(|m| found(m.twice)).count();
    records.push(record(
        "mutants found, twice",
        twice_found as f64,
        "mutants",
        &format!("{twice_found} of {listed}"),
        &format!(
            "Mutants whose median over the {SEEDS} seeds is finite (a violation within {} cases in at least \
             half the seeds), of the {listed} of the table ({searched_n} reachable by generated cases). {} \
             cases run.",
            thousands(CASES),
            thousands(tally[0].ran),
        ),
    ));
    for (i, p) in SETTINGS.iter().enumerate() {
        let names: Vec<&str> = medians.iter().filter(|m| found(m.baseline[i])).map(|m| m.name).collect();
        let n = names.len();
        records.push(record(
            &format!("mutants found, baseline p = {p}"),
            n as f64,
            "mutants",
            &format!("{n} of {listed}"),
            &format!(
                "As above for the proxy baseline at p = {p}: {}. {} cases run; its rules hit {:.1} % of \
                 the requests the services saw in them.",
                if names.is_empty() { "none".to_string() } else { names.join(", ") },
                thousands(tally[i + 1].ran),
                tally[i + 1].hit as f64 / tally[i + 1].requests.max(1) as f64 * 100.0,
            ),
        ));
    }
    let best = |b: &[Option<u64>]| b.iter().flatten().min().copied();
    let best_n = medians.iter().filter(|m| best(&m.baseline).is_some()).count();
    records.push(record(
        "mutants found, baseline at its best setting per mutant",
        best_n as f64,
        "mutants",
        &format!("{best_n} of {listed}"),
        &format!(
            "Mutants that the baseline finds at one setting at least ({setting_list}), each taken at the \
             setting where its median is lowest: the baseline tuned per mutant after the fact, more than a \
             user of a proxy could do."
        ),
    ));
    // The target: wherever both find a mutant, twice needs at most the cases the baseline needs
    // at its best setting for that mutant.
    let both_best: Vec<(&str, u64, u64)> =
        medians.iter().filter_map(|m| Some((m.name, m.twice?, best(&m.baseline)?))).collect();
    let behind: Vec<String> = both_best
        .iter()
        .filter(|(_, t, b)| t > b)
        .map(|(n, t, b)| format!("{n} ({t} against {b})"))
        .collect();
    let at_most = both_best.len() - behind.len();
    records.push(record(
        "mutants where twice needs at most the baseline's best",
        at_most as f64,
        "mutants",
        &format!("{at_most} of {}", both_best.len()),
        &format!(
            "Of the {} mutants both sides find, those where twice's median cases to the first violation is at most the baseline's at its best setting for that mutant. Target: all of them; {}.",
            both_best.len(),
            if behind.is_empty() { "met".to_string() } else { format!("NOT met: {}", behind.join(", ")) }
        ),
    ));
    // The baseline at each setting, then at its best per mutant, against twice.
    let mut baselines: Vec<(String, Vec<Option<u64>>)> = SETTINGS
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("baseline p = {p}"), medians.iter().map(|m| m.baseline[i]).collect()))
        .collect();
    baselines
        .push(("baseline at its best setting".into(), medians.iter().map(|m| best(&m.baseline)).collect()));
    for (label, baseline) in &baselines {
        let both: Vec<(&str, f64)> = medians
            .iter()
            .zip(baseline)
            .filter_map(|(m, b)| Some((m.name, (*b)? as f64 / m.twice? as f64)))
            .collect();
        let ratios: Vec<f64> = both.iter().map(|(_, r)| *r).collect();
        let name = format!("{label} over twice, cases to the first violation");
        let detail = both.iter().map(|(n, r)| format!("{n} {r:.2}")).collect::<Vec<_>>().join(", ");
        let notes = format!(
            "Median over the {} mutants both sides find of (the baseline's median cases / twice's median \
             cases): {detail}. Above 1, twice needs fewer cases.",
            both.len()
        );
        records.push(match median_f64(&ratios) {
            Some(ratio) => record(&name, ratio, "x", "", &notes),
            None => record(
                &name,
                0.0,
                "x",
                "no mutant found by both",
                "No mutant is found by both sides within the bound, so there is no ratio to take.",
            ),
        });
    }
    records.push(record(
        "wall time of the whole benchmark",
        wall_s,
        "s",
        "",
        &format!(
            "The fairness check and every search ({} jobs of one mutant, one seed, one side, stopping at \
             the first violation or the bound; {} cases in all), on {THREADS} threads, one run; the counts \
             above are deterministic, only this varies. Target: under {TARGET_WALL_S:.0} s; {}. 1-minute \
             load average {load_before} before, {} after.",
            jobs.len(),
            thousands(tally.iter().map(|t| t.ran).sum::<u64>() + fair_cases),
            if wall_s < TARGET_WALL_S { "met" } else { "NOT met" },
            load_average(),
        ),
    ));
    println!();
    for r in &records {
        println!("BENCH {r}");
    }
    Ok(())
}

/// Runs a search: cases `0..CASES` of `seed`, on `side`, until the first violation.
fn search(factory: &dyn SimFactory, seed: u64, side: Side, dir: &Path) -> Result<Found> {
    let driver = Driver::Sim(factory);
    let mut found = Found::default();
    for index in 0..CASES {
        let result = run_one(seed, index, side, &driver, dir)?;
        found.ran += 1;
        let (requests, hit) = requests_hit(&result);
        found.requests += requests;
        found.hit += hit;
        match result.outcome {
            Outcome::Passed => {}
            Outcome::ExecutorError => found.executor_errors += 1,
            Outcome::Violated => {
                found.cases = Some(index + 1);
                found.no_fault = result.faults_applied.is_empty();
                found.invariants =
                    checker::violations(&result.verdicts).map(|v| v.invariant.clone()).collect();
                break;
            }
        }
    }
    Ok(found)
}

/// Case `index` of `seed` on `side`, run and checked as `twice run` does.
fn run_one(seed: u64, index: u64, side: Side, driver: &Driver<'_>, dir: &Path) -> Result<ScenarioResult> {
    let generated = scenarios::generate::case(seed, index)?;
    let scenario = match side {
        Side::Twice => generated,
        Side::Proxy(i) => proxied(&generated, SETTINGS[i])?,
    };
    // `Source::Generated` gives the case the run seed a generated case gets.
    let case = Case { scenario, source: Source::Generated { index } };
    Ok(run::run_case(&case, &RunContext::new(seed, driver, dir, "")))
}

/// The baseline's version of a generated case: its intents and limits, default contracts,
/// no generated faults or events, and the proxy's rules on every service the intents use.
fn proxied(generated: &Scenario, p: f64) -> Result<Scenario> {
    let mut scenario = generated.clone();
    scenario.description = format!("proxy baseline, p = {p}");
    scenario.services.clear();
    scenario.faults.clear();
    scenario.events.clear();
    let used: BTreeSet<&str> =
        generated.intents.iter().filter_map(|i| i.action.split_once('.').map(|(s, _)| s)).collect();
    for service in used {
        let contract: Contract = scenarios::model::default_contract(service)
            .ok_or_else(|| format!("no default contract for service {service}"))?;
        let held = FaultSpec::CommitAfterTimeout {
            delay_ms: Some(contract.settle_ms_max.min(REQUEST_TIMEOUT_MS + LATE_BY_MS)),
        };
        for (id, fault, share) in [
            ("proxy-held", held, 0.5),
            ("proxy-reset-before", FaultSpec::Refuse, 0.25),
            ("proxy-reset-after", FaultSpec::DropAfterCommit, 0.25),
        ] {
            // The baseline must stay inside the contract as twice's faults do, or a correct
            // executor could not pass it.
            contract.admits(&fault).map_err(|e| format!("the baseline's {id} on {service}: {e}"))?;
            let mut rule = FaultRule::always(fault);
            rule.id = Some(format!("{id}-{service}"));
            rule.probability = Some(p * share);
            scenario.faults.push(ServiceFault { service: service.to_string(), rule });
        }
    }
    Ok(scenario)
}

/// The requests the services saw in a case, and how many of them a rule hit.
fn requests_hit(result: &ScenarioResult) -> (u64, u64) {
    let entries = result.observed.journals.values().flatten();
    let (mut requests, mut hit) = (0, 0);
    for entry in entries {
        requests += 1;
        hit += u64::from(!entry.faults.is_empty());
    }
    (requests, hit)
}

/// The correct executors must pass baseline cases at every setting; returns the sentence for
/// the notes, or the false alarms as an error.
fn fairness_check(dir: &Path) -> Result<(String, u64)> {
    let executors: Vec<(&str, Box<dyn SimFactory>)> = vec![
        ("reference", Box::new(Reference)),
        ("naive key-retry", Box::new(Naive::correct(Style::KeyRetry))),
        ("naive lookup-first", Box::new(Naive::correct(Style::LookupFirst))),
    ];
    let mut jobs = Vec::new();
    for e in 0..executors.len() {
        for s in 0..SETTINGS.len() {
            for seed in 1..=SEEDS {
                jobs.push((e, s, seed));
            }
        }
    }
    let per_executor = SETTINGS.len() as u64 * SEEDS * FAIR_CASES_PER_SEED;
    println!(
        "\nfairness: {} correct executors, {per_executor} baseline cases each \
         ({FAIR_CASES_PER_SEED} per seed and setting)",
        executors.len()
    );
    let started = Instant::now();
    let outcomes = parallel(&jobs, |&(e, s, seed)| {
        let driver = Driver::Sim(executors[e].1.as_ref());
        let mut out = (Vec::new(), 0u64, 0u64);
        for index in 0..FAIR_CASES_PER_SEED {
            let result = run_one(seed, index, Side::Proxy(s), &driver, dir)?;
            let (requests, hit) = requests_hit(&result);
            out.1 += requests;
            out.2 += hit;
            if result.outcome != Outcome::Passed {
                let broken: Vec<&str> =
                    checker::violations(&result.verdicts).map(|v| v.invariant.as_str()).collect();
                out.0.push(format!(
                    "{} at p = {}: case {index} of seed {seed} {:?} {broken:?} {}",
                    executors[e].0,
                    SETTINGS[s],
                    result.outcome,
                    result.observed.executor_error.as_deref().unwrap_or("")
                ));
            }
        }
        Ok(out)
    })?;
    let alarms: Vec<&String> = outcomes.iter().flat_map(|o| &o.0).collect();
    if !alarms.is_empty() {
        return Err(format!(
            "the baseline raises false alarms against correct executors:\n{}",
            alarms.iter().map(|a| a.as_str()).collect::<Vec<_>>().join("\n")
        )
        .into());
    }
    let mut rates = Vec::new();
    for (s, p) in SETTINGS.iter().enumerate() {
        let (requests, hit) = jobs
            .iter()
            .zip(&outcomes)
            .filter(|((_, js, _), _)| *js == s)
            .fold((0, 0), |(r, h), (_, o)| (r + o.1, h + o.2));
        if hit == 0 {
            return Err(format!("the baseline's rules never fired at p = {p}").into());
        }
        rates.push(format!("{:.1} % at p = {p}", hit as f64 / requests as f64 * 100.0));
    }
    println!(
        "fairness: every case passed in {:.1} s; requests hit: {}",
        started.elapsed().as_secs_f64(),
        rates.join(", ")
    );
    let sentence = format!(
        "Fairness, checked before the search: the reference executor and the mutants' executor without a \
         bug in both styles each passed all {} baseline cases they ran ({FAIR_CASES_PER_SEED} per seed and \
         setting, {} in all) with no violation and no executor error; the share of requests a baseline \
         rule hit there was {} (of all requests, those of the reconcile phase included, before which the \
         harness disarms every rule, as it does for twice's faults).",
        thousands(per_executor),
        thousands(per_executor * executors.len() as u64),
        rates.join(", ")
    );
    Ok((sentence, per_executor * executors.len() as u64))
}

/// Runs `each` over `jobs` on [`THREADS`] threads; results in job order, or the first error.
fn parallel<J: Sync, T: Send>(jobs: &[J], each: impl Fn(&J) -> Result<T> + Sync) -> Result<Vec<T>> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<T>>>> = Mutex::new((0..jobs.len()).map(|_| None).collect());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(job) = jobs.get(i) else { break };
                    let result = each(job);
                    results.lock().unwrap_or_else(|p| p.into_inner())[i] = Some(result);
                    let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                    // A line per tenth, so a long run shows it is moving.
                    if n.is_multiple_of(jobs.len().div_ceil(10).max(1)) || n == jobs.len() {
                        println!("  {n}/{} jobs, {:.1} s", jobs.len(), started.elapsed().as_secs_f64());
                    }
                }
            });
        }
    });
    results
        .into_inner()
        .unwrap_or_else(|p| p.into_inner())
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("a job did not run".into())))
        .collect()
}

/// The lower median of the seeds' cases to the first violation, a seed without one counting
/// as beyond the bound: finite when at least half the seeds found one.
fn lower_median(found: &[&Found]) -> Option<u64> {
    let mut cases: Vec<u64> = found.iter().map(|f| f.cases.unwrap_or(u64::MAX)).collect();
    cases.sort_unstable();
    let median = *cases.get(cases.len().saturating_sub(1) / 2)?;
    (median != u64::MAX).then_some(median)
}

/// A table cell: the median and in how many seeds a violation came.
fn cell(median: Option<u64>, found: &[&Found]) -> String {
    let k = found.iter().filter(|f| f.cases.is_some()).count();
    match median {
        Some(m) => format!("{} ({k}/{} seeds)", thousands(m), found.len()),
        None => format!("not found within {} ({k}/{} seeds)", thousands(CASES), found.len()),
    }
}

fn median_f64(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// 1000 as "1,000".
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// One figure record (the format is described in `xtask/src/main.rs`); `display`, when not
/// empty, is shown in place of the number.
fn record(name: &str, value: f64, unit: &str, display: &str, notes: &str) -> Value {
    let mut r = bench_support::record(BENCH, name, value, unit, None, notes);
    if !display.is_empty() {
        r["display"] = json!(display);
    }
    r
}
