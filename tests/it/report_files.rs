//! The report files of a run with real failures (a mutant executor in the sim driver): all four
//! are written, say the same thing, and merged shards give the unsharded run's report.

use std::path::PathBuf;

use results::{Outcome, RunResults, ScenarioResult, Source};
use runner::run::{self, Case, Driver, Progress, RunContext};

use crate::mutant_naive::{Bug, Naive, Style};

struct Quiet;
impl Progress for Quiet {
    fn started(&self, _: usize) {}
    fn finished(&self, _: &ScenarioResult) {}
    fn done(&self) {}
}

fn work_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("twice-report-files-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The catalog and 40 generated cases, run by the naive executor that resends without a key.
fn cases() -> Vec<Case> {
    let mut cases: Vec<Case> = scenarios::catalog::catalog()
        .unwrap()
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .collect();
    for index in 0..40 {
        cases.push(Case {
            scenario: scenarios::generate::case(20, index).unwrap(),
            source: Source::Generated { index },
        });
    }
    cases
}

fn run(cases: &[Case], positions: &[u64], shard: Option<results::Shard>) -> RunResults {
    let factory = Naive::with(Style::LookupFirst, Bug::NaiveRetry);
    let driver = Driver::Sim(&factory);
    let dir = work_dir("sim");
    let mut results = run::run_cases(cases, &RunContext::new(20, &driver, &dir, "twice run"), 2, &Quiet);
    for (r, p) in results.iter_mut().zip(positions) {
        r.position = *p;
    }
    let _ = std::fs::remove_dir_all(&dir);
    run::results(20, &driver, shard, results)
}

#[test]
fn a_run_with_failures_writes_all_four_files_and_merged_shards_match_it() {
    let cases = cases();
    let all: Vec<u64> = (0..cases.len() as u64).collect();
    let whole = run(&cases, &all, None);
    assert!(whole.failed(), "the naive retry must break something");
    let failures: Vec<&ScenarioResult> =
        whole.results.iter().filter(|r| r.outcome != Outcome::Passed).collect();

    let dir = work_dir("whole");
    let written = reports::write_all(&dir, &whole).unwrap();
    assert_eq!(written.len(), 4);
    let summary = std::fs::read_to_string(dir.join(reports::SUMMARY_FILE)).unwrap();
    let junit = std::fs::read_to_string(dir.join(reports::JUNIT_FILE)).unwrap();
    let html = std::fs::read_to_string(dir.join(reports::HTML_FILE)).unwrap();
    let lost = failures.iter().find(|r| r.name == "lost_refund_reply").expect("a lost reply catches it");
    // The failure table keeps the first rows only (the catalog's order), so it is checked
    // on the first failure, which it always shows.
    let first = failures.first().expect("a failure");
    let first_invariant = first.violations().next().map(|v| v.invariant.clone()).unwrap_or_default();
    assert!(summary.contains(&format!("| `{}` | `{first_invariant}` |", first.name)), "{summary}");
    assert!(summary.contains(&lost.replay), "{summary}");
    let violations: usize = whole.results.iter().map(|r| r.violations().count()).sum();
    assert!(
        junit.contains(&format!("failures=\"{violations}\"")),
        "one JUnit failure per violated invariant"
    );
    assert!(
        junit.contains("<testcase name=\"no-duplicate-effect\" classname=\"twice.timeout_taken_as_no\">")
    );
    for r in &failures {
        assert!(html.contains(&r.name), "{} is in the HTML", r.name);
    }

    // The same cases in two shards, merged: the same four files, byte for byte.
    let mut shards = Vec::new();
    for index in 1..=2 {
        let shard = results::Shard { index, count: 2 };
        let positions: Vec<u64> = all.iter().copied().filter(|p| shard.takes(*p as usize)).collect();
        let slice: Vec<Case> = positions.iter().map(|p| cases[*p as usize].clone()).collect();
        shards.push(run(&slice, &positions, Some(shard)));
    }
    shards.reverse();
    let merged = reports::merge::merge(shards).unwrap();
    let merged_dir = work_dir("merged");
    reports::write_all(&merged_dir, &merged).unwrap();
    for file in [reports::RESULTS_FILE, reports::SUMMARY_FILE, reports::JUNIT_FILE, reports::HTML_FILE] {
        let a = std::fs::read(dir.join(file)).unwrap();
        let b = std::fs::read(merged_dir.join(file)).unwrap();
        assert!(a == b, "{file}: merged shards differ from the unsharded run");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&merged_dir);
}

/// What `results.json` may spend on one passed case, its verdicts (about 1.1 kB: every row
/// carries them) and its share of the run's deprecated table of verdict lists included; its
/// whole record would be ~8 kB. A default run, about 1,100 passed cases, writes 1.8 MB.
const PASSED_CASE_BYTES_MAX: usize = 2_500;

#[test]
fn passed_cases_are_kept_compact_failed_ones_whole_and_results_json_round_trips() {
    let cases = cases();
    let all: Vec<u64> = (0..cases.len() as u64).collect();
    let whole = run(&cases, &all, None);
    let passed: Vec<&ScenarioResult> =
        whole.results.iter().filter(|r| r.outcome == Outcome::Passed).collect();
    let failed: Vec<&ScenarioResult> =
        whole.results.iter().filter(|r| r.outcome != Outcome::Passed).collect();
    assert!(!passed.is_empty() && !failed.is_empty());

    // A passed case: verdicts, a summary in counts, and nothing of the observation's bulk.
    for r in &passed {
        let summary = r.summary.as_ref().unwrap_or_else(|| panic!("{} has no summary", r.name));
        assert!(!r.verdicts.is_empty(), "{}", r.name);
        assert!(
            r.claims.is_empty() && r.intents.is_empty() && r.events.is_empty() && r.faults_applied.is_empty()
        );
        let o = &r.observed;
        assert!(
            o.timeline.is_empty() && o.journals.is_empty() && o.ledgers.is_empty() && o.claims.is_empty()
        );
        assert_eq!(summary.observed_digest.len(), 16);
    }
    // A failed case: everything, and exactly what running it alone gives.
    let factory = Naive::with(Style::LookupFirst, Bug::NaiveRetry);
    let driver = Driver::Sim(&factory);
    let dir = work_dir("alone");
    for r in failed.iter().take(3) {
        assert!(r.summary.is_none(), "{}", r.name);
        assert!(!r.observed.timeline.is_empty() && !r.observed.journals.is_empty() && !r.intents.is_empty());
        let mut alone =
            run::run_case(&cases[r.position as usize], &RunContext::new(20, &driver, &dir, "twice run"));
        alone.position = r.position;
        assert_eq!(&alone, *r, "{}", r.name);
    }
    // A passed case's summary is its full result's, compacted.
    let p = passed[0];
    let mut alone =
        run::run_case(&cases[p.position as usize], &RunContext::new(20, &driver, &dir, "twice run"));
    let _ = std::fs::remove_dir_all(&dir);
    alone.position = p.position;
    let trace_before = reports::baseline::Trace::of(&alone);
    alone.compact();
    assert_eq!(&alone, p);
    assert_eq!(reports::baseline::Trace::of(p), trace_before, "baselines see the same trace");

    // Written, read back and rendered again: the same four files.
    let first = work_dir("round-trip-1");
    reports::write_all(&first, &whole).unwrap();
    let read = reports::json::read(&first).unwrap();
    assert_eq!(read, whole);
    let second = work_dir("round-trip-2");
    reports::write_all(&second, &read).unwrap();
    for file in [reports::RESULTS_FILE, reports::SUMMARY_FILE, reports::JUNIT_FILE, reports::HTML_FILE] {
        let a = std::fs::read(first.join(file)).unwrap();
        let b = std::fs::read(second.join(file)).unwrap();
        assert!(a == b, "{file}: rendering what was read back differs");
    }
    let _ = std::fs::remove_dir_all(&second);

    // Bytes per passed case: the file without the failed cases, over the passed ones.
    let only_passed = run::results(20, &driver, None, passed.iter().map(|r| (*r).clone()).collect());
    let bytes = reports::json::render(&only_passed).unwrap().len();
    assert!(
        bytes / passed.len() < PASSED_CASE_BYTES_MAX,
        "{bytes} bytes for {} passed cases: over {PASSED_CASE_BYTES_MAX} each",
        passed.len()
    );
    let html = reports::html::render(&only_passed);
    assert!(!html.contains("table class=\"timeline\""), "a passed case gets a row, no timeline");
    let _ = std::fs::remove_dir_all(&first);
}
