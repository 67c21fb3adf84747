//! Mutants: deliberately broken executors, one or more per failure mode of the catalog that
//! an executor bug maps to, to prove that the harness catches each one; the modes without a
//! mutant are listed with the reason ([`MODES_WITHOUT_A_MUTANT`]).
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
//!   `shrink_case` brings it down to a scenario that still fails with the named invariant,
//!   from which no fault and no event can be removed without losing that failure.
//!
//! `docs/failure-modes.md` is the same table for people; a test keeps the two in step.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use results::{Outcome, ScenarioResult, Source};
use runner::run::{self, Case, Driver, RunContext};
use runner::sim::{Reference, SimFactory};
use scenarios::Scenario;

use crate::mutant_naive::{Choices, Naive, Style};
use crate::mutant_table::{MUTANTS, Mutant};

/// The run seed of every catalog case here.
const CATALOG_SEED: u64 = 1;
/// The seed of the generated search.
const GENERATOR_SEED: u64 = 20;
/// Generated cases searched, at most, per mutant. At seed 20 the last found is `trust-the-202`
/// (case 2,210; its median over 20 seeds is 361, docs/benchmarks.md, twice-tests/search).
const GENERATED_CASES: u64 = 3_000;
/// Candidate runs a shrink may spend: what `twice run` spends.
const SHRINK_RUNS_MAX: usize = runner::pipeline::SHRINK_RUNS_MAX;
/// Generated cases each correct executor must pass, per seed of [`CORRECT_SEEDS`]: past the
/// first case of the largest size ([`scenarios::generate::size_for`]).
const CORRECT_CASES: u64 = 1_000;
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
    run::run_case(&case, &RunContext::new(CATALOG_SEED, driver, dir, ""))
}

fn violated(result: &ScenarioResult) -> Vec<&str> {
    checker::violations(&result.verdicts).map(|v| v.invariant.as_str()).collect()
}

/// Why `result` does not show `invariant` violated, if it does not.
fn missing(result: &ScenarioResult, invariant: &str) -> Option<String> {
    if violated(result).contains(&invariant) {
        return None;
    }
    let details: Vec<String> = checker::violations(&result.verdicts)
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
        let limits = runner::shrink::ShrinkLimits { runs_max: SHRINK_RUNS_MAX, deadline: None };
        let shrunk = match runner::shrink::shrink_case(
            &RunContext::new(GENERATOR_SEED, &driver, &dir, ""),
            index,
            limits,
            &runner::shrink::QuietShrink,
        ) {
            Ok((s, _)) => s,
            Err(e) => return vec![format!("case {index} does not shrink: {e}")],
        };
        let replay = |scenario: &Scenario| {
            let case = Case { scenario: scenario.clone(), source: Source::Generated { index } };
            run::run_case(&case, &RunContext::new(GENERATOR_SEED, &driver, &dir, ""))
        };
        problems.extend(missing(&replay(&shrunk), invariant).map(|p| format!("shrunk case {index}: {p}")));
        // Minimal: without any one of its faults or events, it no longer fails that way.
        let removable =
            (0..shrunk.faults.len()).map(|i| (true, i)).chain((0..shrunk.events.len()).map(|i| (false, i)));
        for (fault, i) in removable {
            let mut smaller = shrunk.clone();
            let what = if fault {
                format!("fault {:?}", smaller.faults.remove(i).rule.id)
            } else {
                format!("event {:?}", smaller.events.remove(i).action)
            };
            if missing(&replay(&smaller), invariant).is_none() {
                problems.push(format!(
                    "shrunk case {index} still breaks {invariant} without its {what}:\n{}",
                    scenarios::to_toml(&shrunk, "").unwrap_or_default()
                ));
            }
        }
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
        .chain(checker::INVARIANTS.iter().map(|i| i.to_string()))
        .chain([checker::EXPECTED_STATES.to_string()])
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

/// Failure modes of the catalog that no mutant stands for, each with the reason, which
/// `docs/failure-modes.md` states word for word in its table of exempt modes: plain faults
/// where no executor bug of their own does harm the invariants can name, and faults whose
/// scenarios catch the mutants of other modes anyway (the second table of the doc says which).
const MODES_WITHOUT_A_MUTANT: &[(&str, &str)] = &[
    (
        "refuse",
        "nothing took effect, so neither a resend nor giving up can harm; `fault_refuse` \
         catches `no-reconciliation` (`liveness`)",
    ),
    (
        "reject",
        "a refusal that says \"not now\" executed nothing: retrying it or giving up harms \
         nobody; retrying one that needs a decision is `retry-a-403`'s bug, and a refusal taken \
         for a failure is `refusal-releases-replacement`'s",
    ),
    (
        "latency",
        "slowness inside the timeout changes no answer: a bug can only give up early, an \
         honest failure",
    ),
    (
        "drop_after_commit",
        "a lost reply after the commit is `lost_reply`'s fault: `fault_drop_after_commit` and \
         `files_put_drop_after_commit` catch `timeout-as-no`, `unfenced-put` and `unconditional-resend`",
    ),
    (
        "timeout_after_commit",
        "a timeout after the commit is `timeout_as_failure`'s fault: `fault_timeout_after_commit` \
         catches `timeout-as-no` and `unique-ids-assumed`",
    ),
    (
        "provider_redelivery",
        "the provider's own second delivery of a message: no executor makes it or can prevent \
         it, and the checker blames nobody for it (`fault_redeliver` passes)",
    ),
    (
        "webhook_dedupe_in_memory",
        "an executor acts through its durable intent log, so events remembered in memory only are harmless to \
         it: the restarted worker's log holds the intent once; the webhook example app's memory-dedupe switch, \
         with no-key, fails its scenario through twice serve",
    ),
    (
        "webhook_endpoint_down",
        "nothing can go twice: the event arrives once, late, and every handler that acts once the endpoint \
         is back passes; it holds that one does",
    ),
    (
        "webhook_out_of_order",
        "an event that arrives after a newer one harms only work that depends on the order of events, and a \
         welcome email per order does not; it holds that each order is still welcomed once",
    ),
    (
        "webhook_replayed",
        "a replay carries an event id already taken, so a handler that dedupes does nothing with it even \
         without the age check; the webhook example app's naive handler (no dedupe, no signature check) fails \
         it through twice serve",
    ),
    (
        "stale_nonce",
        "a nonce the lagging node reports reuses the executor's own earlier one, which the \
         node refuses (nonce too low): the transfer fails honestly, an unmet expectation only",
    ),
];

/// The doc's rows of exempt modes: the mode's cell, then the reason's.
fn doc_exemption(mode: &str) -> Option<String> {
    doc_rows().into_iter().find(|r| r.len() == 2 && r[0] == format!("`{mode}`")).map(|r| r[1].clone())
}

#[test]
fn every_failure_mode_of_the_catalog_is_accounted_for() {
    let catalog = scenarios::catalog().expect("the catalog loads");
    let in_catalog: BTreeSet<&str> = catalog.iter().filter_map(|s| s.failure_mode.as_deref()).collect();
    let with_mutant: BTreeSet<&str> = MUTANTS.iter().flat_map(|m| m.failure_modes.iter().copied()).collect();
    let without: BTreeSet<&str> = MODES_WITHOUT_A_MUTANT.iter().map(|(mode, _)| *mode).collect();
    let accounted: BTreeSet<&str> = with_mutant.union(&without).copied().collect();
    assert!(with_mutant.is_disjoint(&without), "modes both with and without a mutant");
    assert_eq!(in_catalog, accounted, "the catalog's failure modes against the mutants' and the exempt ones");
    for m in MUTANTS {
        for (scenario, _) in m.catalog {
            let mode = catalog_scenario(scenario).failure_mode.unwrap_or_default();
            assert!(m.failure_modes.contains(&mode.as_str()), "{}: {scenario} rehearses {mode}", m.name);
        }
    }
    // The doc gives every exempt mode its reason, the same words.
    for (mode, reason) in MODES_WITHOUT_A_MUTANT {
        match doc_exemption(mode) {
            Some(stated) => {
                assert_eq!(&stated, reason, "docs/failure-modes.md: the reason `{mode}` has no mutant")
            }
            None => panic!("docs/failure-modes.md does not say why `{mode}` has no mutant"),
        }
    }
}

/// An executor that does not announce `workflows` is given no step: the steps are reported
/// as unsupported and exempt from the checks, and the rest of the scenario is judged.
#[test]
fn steps_are_unsupported_by_an_executor_without_workflows() {
    let factory = Naive { workflows: false, ..Naive::correct(Style::KeyRetry) };
    let driver = Driver::Sim(&factory);
    let dir = work_dir("no-workflows", "naive");
    let result = run_catalog("draft_saved_after_lost_reply", &driver, &dir);
    clean("no-workflows");
    assert_eq!(result.observed.unsupported_steps, vec!["save-approved".to_string()]);
    let step = result.intents.iter().find(|i| i.id == "save-approved").expect("the step is listed");
    assert!(step.unsupported && step.effects.is_empty(), "{step:?}");
    assert!(result.observed.unacknowledged["save-approved"].contains("workflows"));
    let workflow =
        result.verdicts.iter().find(|v| v.invariant == checker::WORKFLOW).expect("a workflow verdict");
    assert_eq!(workflow.status, results::Status::NotJudged, "{workflow:?}");
    // Exempt from every check, its expected state included: what it never received is not
    // held against it, and the draft it comes after is judged as usual.
    assert_eq!(result.outcome, Outcome::Passed, "{:?}", result.verdicts);
    assert!(result.intents.iter().any(|i| i.id == "draft" && i.effects.len() == 1));
}

/// An executor that does not support `files.put` refuses the welcome document, and the refund
/// that comes after it is never proposed: it and the email after it are reported unsupported,
/// exempt from every check, and the workspace before them is judged as usual.
#[test]
fn a_step_after_an_unsupported_intent_is_never_proposed() {
    let factory = Naive::correct(Style::KeyRetry)
        .choosing(Choices { actions: Some(crate::accuracy::WITHOUT_FILES), ..Choices::default() });
    let driver = Driver::Sim(&factory);
    let dir = work_dir("partial-actions", "naive");
    let result = run_catalog("onboarding_fault_at_every_step", &driver, &dir);
    clean("partial-actions");
    assert_eq!(result.observed.unsupported, vec!["files.put".to_string()]);
    assert_eq!(
        result.observed.unsupported_steps,
        vec!["refund-setup-fee".to_string(), "welcome-email".to_string()]
    );
    assert!(
        result.observed.unacknowledged["refund-setup-fee"].contains("comes after welcome-document"),
        "{:?}",
        result.observed.unacknowledged
    );
    let proposed: Vec<&str> =
        result.observed.timeline.iter().filter(|m| m.kind == "proposed").map(|m| m.detail.as_str()).collect();
    assert_eq!(proposed, vec!["create-workspace"], "only the workspace is proposed");
    for id in ["welcome-document", "refund-setup-fee", "welcome-email"] {
        let intent = result.intents.iter().find(|i| i.id == id).expect("listed");
        assert!(intent.unsupported && intent.effects.is_empty(), "{intent:?}");
    }
    assert!(result.intents.iter().any(|i| i.id == "create-workspace" && i.effects.len() == 1));
    assert_eq!(result.outcome, Outcome::Passed, "{:?}", result.verdicts);
}

/// A safeguard skipped where nothing exploits it is a hazard; one faked is judged by what it
/// let happen. On `stale_worker_overwrite`, the one-worker executor (a lock on its state, no
/// leases, no fencing token) passes with a `no-fencing-token` hazard, its successor never
/// having acted; the executor that sends a constant token and takes no leases lists no
/// hazard, since a token is there, and fails on `no-stale-write`.
#[test]
fn a_skipped_safeguard_is_a_hazard_and_a_faked_one_a_violation() {
    let single =
        Naive::correct(Style::KeyRetry).choosing(Choices { single_worker: true, ..Choices::default() });
    let constant = Naive::with(Style::KeyRetry, crate::mutant_naive::Bug::ConstantFencingToken);
    let dir = work_dir("safeguards", "naive");
    let skipped = run_catalog("stale_worker_overwrite", &Driver::Sim(&single), &dir);
    let faked = run_catalog("stale_worker_overwrite", &Driver::Sim(&constant), &dir);
    clean("safeguards");
    assert_eq!(skipped.outcome, Outcome::Passed, "{:?}", violated(&skipped));
    assert!(
        skipped.hazards.iter().any(|h| h.kind == checker::HAZARD_NO_FENCING_TOKEN),
        "{:?}",
        skipped.hazards
    );
    assert_eq!(faked.outcome, Outcome::Violated);
    assert!(violated(&faked).contains(&checker::NO_STALE_WRITE), "{:?}", violated(&faked));
    assert!(!faked.hazards.iter().any(|h| h.kind == checker::HAZARD_NO_FENCING_TOKEN), "{:?}", faked.hazards);
}
