//! Mutants: deliberately broken executors, one per failure mode of the catalog, to prove
//! that the harness catches each one.
//!
//! Every mutant is the small executor of `mutant_naive.rs` with exactly one `Bug` switched
//! on; without a bug it passes the whole catalog and the generated cases (so does the
//! reference executor), which makes every violation below the bug's doing. The mutants and
//! what must catch them are the table of `mutant_table.rs` (which the search benchmark
//! shares). For each mutant:
//!
//! - the catalog scenarios that rehearse its failure mode report a violation of the
//!   invariant the table names (a mutant may break more than one; the named one must be
//!   among them);
//! - the generator, from a fixed seed, finds a failing case within [`GENERATED_CASES`], and
//!   `shrink_case` brings it down to at most [`SHRUNK_STEPS_MAX`] steps that still fail with
//!   the named invariant (for the bugs in `files.put` and `chain.transfer`, which the
//!   generator does not propose, the catalog alone).
//!
//! `docs/failure-modes.md` is the same table for people; a test keeps the two in step.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use harness::check;
use harness::run::{self, Case, Driver, Outcome, ScenarioResult, Source};
use harness::sim::{Reference, SimFactory};
use scenarios::Scenario;

use crate::mutant_naive::{Naive, Style};
use crate::mutant_table::{MUTANTS, Mutant};

/// The run seed of every catalog case here.
const CATALOG_SEED: u64 = 1;
/// The seed of the generated search: it reaches every mutant within a few hundred cases
/// (`trusts-stale-read` is the rare one, see [`MUTANTS`]).
const GENERATOR_SEED: u64 = 20;
/// Generated cases searched, at most, per mutant.
const GENERATED_CASES: u64 = 2_000;
/// Candidate runs a shrink may spend: what `twice run` spends.
const SHRINK_RUNS_MAX: usize = harness::pipeline::SHRINK_RUNS_MAX;
/// Steps (intents + faults + events) a shrunk failure may keep: a takeover alone is two
/// events (the pause and the second worker).
const SHRUNK_STEPS_MAX: usize = 5;
/// Generated cases each correct executor must pass, per seed of [`CORRECT_SEEDS`]. Seed 1
/// case 372 is a chain of replacements whose first intent took effect.
const CORRECT_CASES: u64 = 400;
const CORRECT_SEEDS: [u64; 2] = [1, GENERATOR_SEED];

/// The directory of one test's runs, private to this process.
fn test_dir(test: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("mutants-{}", std::process::id())).join(test)
}

/// A fresh directory for one test and one executor (the sim driver makes and removes one
/// per run inside it); [`clean`] removes it with the test's.
fn work_dir(test: &str, who: &str) -> PathBuf {
    let dir = test_dir(test).join(who);
    std::fs::create_dir_all(&dir).expect("the work directory can be created");
    dir
}

fn clean(test: &str) {
    let _ = std::fs::remove_dir_all(test_dir(test));
    // The process's directory goes once its last test is done with it.
    let _ = std::fs::remove_dir(test_dir(test).parent().expect("a parent"));
}

fn catalog_scenario(name: &str) -> Scenario {
    match scenarios::catalog::find(name) {
        Some(Ok(s)) => s,
        Some(Err(e)) => panic!("catalog scenario {name} does not load: {e}"),
        None => panic!("no catalog scenario {name}"),
    }
}

fn run_catalog(name: &str, driver: &Driver<'_>, dir: &Path) -> ScenarioResult {
    let case = Case { scenario: catalog_scenario(name), source: Source::Catalog };
    run::run_case(&case, CATALOG_SEED, driver, dir, "")
}

fn violated(result: &ScenarioResult) -> Vec<&str> {
    check::violations(&result.verdicts).map(|v| v.invariant.as_str()).collect()
}

/// Why `result` does not show `invariant` violated, if it does not.
fn missing(result: &ScenarioResult, invariant: &str) -> Option<String> {
    if violated(result).contains(&invariant) {
        return None;
    }
    let details: Vec<String> = check::violations(&result.verdicts)
        .map(|v| format!("{}: {}", v.invariant, v.evidence.join(" / ")))
        .collect();
    Some(format!(
        "{} ({:?}): expected {invariant}, got [{}]",
        result.name,
        result.outcome,
        details.join("; ")
    ))
}

/// Runs `each` on its own thread per mutant; collects the problems they report.
fn per_mutant(each: impl Fn(&Mutant) -> Vec<String> + Sync) -> Vec<String> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = MUTANTS.iter().map(|m| (m, scope.spawn(|| each(m)))).collect();
        handles
            .into_iter()
            .flat_map(|(m, h)| match h.join() {
                Ok(problems) => problems.into_iter().map(|p| format!("{}: {p}", m.name)).collect(),
                Err(_) => vec![format!("{}: the thread panicked", m.name)],
            })
            .collect()
    })
}

#[test]
fn every_mutant_is_caught_by_the_catalog_naming_its_invariant() {
    let problems = per_mutant(|m| {
        let factory = m.factory();
        let driver = Driver::Sim(&factory);
        let dir = work_dir("catalog", m.name);
        m.catalog
            .iter()
            .chain(m.also)
            .filter_map(|(s, inv)| missing(&run_catalog(s, &driver, &dir), inv))
            .collect()
    });
    clean("catalog");
    assert!(
        problems.is_empty(),
        "mutants the catalog does not catch as the table says:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_generator_finds_and_shrinks_every_mutant() {
    let problems = per_mutant(|m| {
        let Some(invariant) = m.generated else { return vec![] };
        let factory = m.factory();
        let driver = Driver::Sim(&factory);
        let dir = work_dir("generated", m.name);
        let Some((index, found)) = run::first_failure(GENERATOR_SEED, GENERATED_CASES, &driver, &dir) else {
            return vec![format!(
                "no failing case among {GENERATED_CASES} generated with seed {GENERATOR_SEED}"
            )];
        };
        let mut problems: Vec<String> = missing(&found, invariant).into_iter().collect();
        let limits = harness::shrink::ShrinkLimits { runs_max: SHRINK_RUNS_MAX, deadline: None };
        let shrunk = match harness::shrink::shrink_case(
            GENERATOR_SEED,
            index,
            &driver,
            &dir,
            limits,
            &harness::shrink::QuietShrink,
        ) {
            Ok((s, _)) => s,
            Err(e) => return vec![format!("case {index} does not shrink: {e}")],
        };
        let steps = scenarios::generate::steps(&shrunk);
        if steps > SHRUNK_STEPS_MAX {
            problems.push(format!(
                "case {index} shrank to {steps} steps, more than {SHRUNK_STEPS_MAX}:\n{}",
                scenarios::to_toml(&shrunk, "").unwrap_or_default()
            ));
        }
        let replay = Case { scenario: shrunk, source: Source::Generated { index } };
        let result = run::run_case(&replay, GENERATOR_SEED, &driver, &dir, "");
        problems.extend(missing(&result, invariant).map(|p| format!("shrunk case {index}: {p}")));
        problems
    });
    clean("generated");
    assert!(
        problems.is_empty(),
        "mutants the generator does not catch as the table says:\n{}",
        problems.join("\n")
    );
}

/// The executors every violation above is measured against: the reference, and the mutants'
/// executor without a bug in either style.
#[test]
fn the_correct_executors_pass_the_catalog_and_generated_cases() {
    let executors: Vec<(&str, Box<dyn SimFactory>)> = vec![
        ("reference", Box::new(Reference)),
        ("naive-key-retry", Box::new(Naive::correct(Style::KeyRetry))),
        ("naive-lookup-first", Box::new(Naive::correct(Style::LookupFirst))),
    ];
    let problems: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = executors
            .iter()
            .map(|(name, factory)| {
                scope.spawn(move || {
                    let driver = Driver::Sim(factory.as_ref());
                    let dir = work_dir("correct", name);
                    let catalog = scenarios::catalog().expect("the catalog loads");
                    let mut failed: Vec<String> = catalog
                        .iter()
                        .map(|s| run_catalog(&s.name, &driver, &dir))
                        .filter(|r| r.outcome != Outcome::Passed)
                        .map(|r| format!("{name}: catalog {} {:?}: {:?}", r.name, r.outcome, violated(&r)))
                        .collect();
                    for seed in CORRECT_SEEDS {
                        if let Some((index, r)) = run::first_failure(seed, CORRECT_CASES, &driver, &dir) {
                            failed.push(format!(
                                "{name}: generated case {index} of seed {seed} {:?}: {:?}",
                                r.outcome,
                                violated(&r)
                            ));
                        }
                    }
                    failed
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|_| vec!["a thread panicked".into()]))
            .collect()
    });
    clean("correct");
    assert!(problems.is_empty(), "a correct executor failed:\n{}", problems.join("\n"));
}

const DOC: &str = include_str!("../../docs/failure-modes.md");

/// The doc's table rows (lines starting with `|`), split into trimmed cells.
fn doc_rows() -> Vec<Vec<String>> {
    DOC.lines()
        .filter(|l| l.trim_start().starts_with('|'))
        .map(|l| l.trim().trim_matches('|').split('|').map(|c| c.trim().to_string()).collect())
        .collect()
}

#[test]
fn the_failure_modes_doc_matches_the_mutant_table() {
    let rows = doc_rows();
    let mut problems = Vec::new();
    let named = |row: &Vec<String>, word: &str| row.iter().any(|c| c.contains(&format!("`{word}`")));
    for m in MUTANTS {
        // Its row in the main table: the failure modes, the scenarios and invariants, the mutant.
        let Some(row) = rows.iter().find(|r| r.last().is_some_and(|c| c.contains(&format!("`{}`", m.name))))
        else {
            problems.push(format!("no row names mutant `{}` in its last column", m.name));
            continue;
        };
        for word in m.failure_modes.iter().chain(m.catalog.iter().flat_map(|(s, i)| [s, i])) {
            if !named(row, word) {
                problems.push(format!("the row of `{}` does not name `{word}`", m.name));
            }
        }
        // Every other catch in the second table: scenario, mutant, invariant on one row.
        for (scenario, invariant) in m.also {
            let listed = rows.iter().any(|r| named(r, scenario) && named(r, m.name) && named(r, invariant));
            if !listed {
                problems.push(format!("no row lists `{scenario}` catching `{}` with `{invariant}`", m.name));
            }
        }
    }
    // Every catalog scenario and failure mode is in the doc, so none is left unexplained.
    let catalog = scenarios::catalog().expect("the catalog loads");
    for s in &catalog {
        if !DOC.contains(&format!("`{}`", s.name)) {
            problems.push(format!("catalog scenario `{}` is not in the doc", s.name));
        }
        if let Some(mode) = &s.failure_mode
            && !DOC.contains(&format!("`{mode}`"))
        {
            problems.push(format!("failure mode `{mode}` (of {}) is not in the doc", s.name));
        }
    }
    // And the doc names nothing that does not exist.
    let known: BTreeSet<String> = catalog
        .iter()
        .flat_map(|s| [Some(s.name.clone()), s.failure_mode.clone()])
        .flatten()
        .chain(MUTANTS.iter().map(|m| m.name.to_string()))
        .chain(check::INVARIANTS.iter().map(|i| i.to_string()))
        .collect();
    for row in &rows {
        for cell in row {
            for word in cell.split('`').skip(1).step_by(2) {
                if !known.contains(word) {
                    problems.push(format!(
                        "the doc's tables name `{word}`, which is no scenario, mode, mutant or invariant"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "docs/failure-modes.md is out of step:\n{}", problems.join("\n"));
}

/// Failure modes of the catalog that no mutant stands for: plain faults a correct executor
/// must survive, and correct paths (the second table of the doc says which mutants they
/// catch anyway).
const MODES_WITHOUT_A_MUTANT: &[&str] = &[
    "clock_skew",
    "crash_in_reconcile",
    "concurrent_workers",
    "replacement_after_failure",
    "refuse",
    "reject",
    "latency",
    "error_after_commit",
    "drop_after_commit",
    "timeout_after_commit",
    "commit_after_timeout",
    "stale_nonce",
    "crash_after_signing",
];

#[test]
fn every_failure_mode_of_the_catalog_is_accounted_for() {
    let catalog = scenarios::catalog().expect("the catalog loads");
    let in_catalog: BTreeSet<&str> = catalog.iter().filter_map(|s| s.failure_mode.as_deref()).collect();
    let with_mutant: BTreeSet<&str> = MUTANTS.iter().flat_map(|m| m.failure_modes.iter().copied()).collect();
    let without: BTreeSet<&str> = MODES_WITHOUT_A_MUTANT.iter().copied().collect();
    let accounted: BTreeSet<&str> = with_mutant.union(&without).copied().collect();
    assert!(with_mutant.is_disjoint(&without), "modes both with and without a mutant");
    assert_eq!(in_catalog, accounted, "the catalog's failure modes against the mutants' and the exempt ones");
    for m in MUTANTS {
        for (scenario, _) in m.catalog {
            let mode = catalog_scenario(scenario).failure_mode.unwrap_or_default();
            assert!(m.failure_modes.contains(&mode.as_str()), "{}: {scenario} rehearses {mode}", m.name);
        }
    }
}
