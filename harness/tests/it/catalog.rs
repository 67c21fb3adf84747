//! The whole catalog against the reference executor, in both drivers: the same scenario files
//! pass in process on virtual time and through the stdio protocol with real processes.

use harness::run::{self, Case, Driver, Outcome, Progress, ScenarioResult, Source};
use harness::sim::Reference;

struct Quiet;

impl Progress for Quiet {
    fn started(&self, _: usize) {}
    fn finished(&self, _: &ScenarioResult) {}
    fn done(&self) {}
}

fn catalog() -> Vec<Case> {
    scenarios::catalog()
        .unwrap()
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .collect()
}

fn failures(results: &[ScenarioResult]) -> Vec<String> {
    results
        .iter()
        .filter(|r| r.outcome != Outcome::Passed)
        .map(|r| {
            let broken: Vec<String> = r
                .verdicts
                .iter()
                .filter(|v| !v.held)
                .map(|v| format!("{}: {:?}", v.invariant, v.evidence))
                .collect();
            format!("{} ({:?}) {:?} {broken:?}", r.name, r.outcome, r.observed.executor_error)
        })
        .collect()
}

fn check(driver: Driver<'_>, what: &str) {
    let cases = catalog();
    assert!(cases.len() >= 30, "the catalog has {} scenarios", cases.len());
    let dir = std::env::temp_dir().join(format!("twice-catalog-{what}-{}", std::process::id()));
    let results = run::run_cases(&cases, 1, &driver, &dir, 2, &Quiet, "twice run");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(results.len(), cases.len());
    let failed = failures(&results);
    assert!(failed.is_empty(), "{what}: {} of {} failed:\n{}", failed.len(), cases.len(), failed.join("\n"));
}

#[test]
fn the_reference_executor_passes_the_catalog_in_sim() {
    check(Driver::Sim(&Reference), "sim");
}

#[test]
fn the_reference_executor_binary_passes_the_catalog_live() {
    check(Driver::Live(crate::live::reference()), "live");
}
