//! The Markdown summary, the JUnit XML, baselines and merges, on results built by hand.

use std::collections::BTreeMap;

use reports::baseline::{self, Baseline, BaselineMeta};
use reports::model::*;

const SCRIPT: &str = "<script>alert(1)</script>";

fn verdicts(violated: &[(&str, &str)]) -> Vec<Verdict> {
    ["no-duplicate-effect", "honest-terminal-states", "nothing-lost", "expected-states"]
        .iter()
        .map(|inv| {
            let evidence: Vec<String> =
                violated.iter().filter(|(i, _)| i == inv).map(|(_, e)| e.to_string()).collect();
            Verdict::from_evidence(inv, evidence)
        })
        .collect()
}

fn result(position: u64, name: &str, violated: &[(&str, &str)], attempts: u64) -> ScenarioResult {
    let verdicts = verdicts(violated);
    let outcome = if verdicts.iter().all(|v| v.held) { Outcome::Passed } else { Outcome::Violated };
    ScenarioResult {
        name: name.into(),
        position,
        source: Source::Generated { index: position },
        seed: 7 + position,
        outcome,
        verdicts,
        claims: vec![],
        intents: vec![IntentResult {
            id: "refund-1".into(),
            action: "payments.refund".into(),
            state: Some("confirmed".into()),
            attempts: Some(attempts),
            effects: vec![],
            unsupported: false,
        }],
        effects: BTreeMap::from([("payments".to_string(), 1)]),
        faults_applied: vec![],
        events: vec![],
        replay: format!("twice run --generated {position} --seed 1"),
        shrunk: None,
        observed: Observed::default(),
    }
}

fn run(results: Vec<ScenarioResult>) -> RunResults {
    RunResults {
        schema: RESULTS_SCHEMA.into(),
        tool_version: "0.1.0".into(),
        seed: 1,
        driver: "sim".into(),
        executor: "test executor".into(),
        shard: None,
        totals: Totals::of(&results),
        results,
    }
}

#[test]
fn what_an_executor_sent_is_escaped_in_junit_and_inert_in_markdown() {
    let run = run(vec![
        result(0, "fine", &[], 1),
        result(1, "broken", &[("no-duplicate-effect", &format!("evidence {SCRIPT} & \"quotes\""))], 2),
    ]);
    let xml = reports::junit::render(&run).unwrap();
    assert!(!xml.contains(SCRIPT), "{xml}");
    assert!(xml.contains("&lt;script&gt;alert(1)&lt;/script&gt;"), "{xml}");
    assert!(xml.contains("tests=\"8\"") && xml.contains("failures=\"1\""), "{xml}");
    assert!(xml.contains("replay: twice run --generated 1 --seed 1"), "the failure says how to replay it");

    let md = reports::summary::render(&run);
    let row = md.lines().find(|l| l.contains("alert(1)")).unwrap();
    assert_eq!(row, format!("| `broken` | `no-duplicate-effect` | `evidence {SCRIPT} & \"quotes\"` |"));
    assert!(md.contains("# twice: 1 of 2 scenarios failed"), "{md}");
    assert!(md.contains("twice run --generated 1 --seed 1"), "{md}");
}

#[test]
fn the_summary_stays_short_with_many_failures() {
    let many: Vec<ScenarioResult> = (0..200)
        .map(|i| result(i, &format!("case-{i}"), &[("nothing-lost", "gone\nsecond line")], 1))
        .collect();
    let md = reports::summary::render(&run(many));
    let rows = md.lines().filter(|l| l.starts_with("| `case-")).count();
    assert_eq!(rows, reports::summary::FAILURE_ROWS_MAX);
    assert!(md.contains("150 more violations"), "{md}");
    assert!(md.contains("`gone…`"), "multi-line evidence is cut to its first line: {md}");
    assert!(md.len() < 20_000, "{} bytes", md.len());
}

#[test]
fn a_baseline_flags_changes_and_knows_its_old_violations() {
    let dup = [("no-duplicate-effect", "two refunds")];
    let before = run(vec![
        result(0, "same", &[], 1),
        result(1, "known-bug", &dup, 1),
        result(2, "gets-fixed", &dup, 1),
        result(3, "extra-attempt", &[], 1),
        result(4, "breaks", &[], 1),
        result(5, "not-run", &[], 1),
    ]);
    let dir = std::env::temp_dir().join(format!("twice-baseline-unit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(baseline::write(&dir, &before).unwrap(), 6);
    let saved = baseline::read(&dir).unwrap();
    assert_eq!(saved.traces.len(), 6);

    let after = run(vec![
        result(0, "same", &[], 1),
        result(1, "known-bug", &dup, 1),
        result(2, "gets-fixed", &[], 1),
        result(3, "extra-attempt", &[], 2),
        result(4, "breaks", &dup, 1),
        result(6, "new-and-fine", &[], 1),
        result(7, "new-and-broken", &dup, 1),
    ]);
    let c = baseline::compare(&saved, &after).unwrap();
    let text = c.render("dir");
    let changed: Vec<(&str, bool)> = c.changed.iter().map(|s| (s.scenario.as_str(), s.regression)).collect();
    assert_eq!(
        changed,
        vec![("gets-fixed", false), ("extra-attempt", true), ("breaks", true), ("new-and-broken", true)],
        "{text}"
    );
    assert_eq!((c.unchanged, c.new_passed, c.not_run, c.regressions()), (2, 1, 1, 3), "{text}");
    assert!(text.contains("refund-1: attempts 1 -> 2"), "{text}");
    assert!(text.contains("new violation: no-duplicate-effect"), "{text}");

    // Rewriting drops the traces of scenarios the run no longer has.
    baseline::write(&dir, &after).unwrap();
    let saved = baseline::read(&dir).unwrap();
    assert!(!saved.traces.contains_key("not-run") && saved.traces.contains_key("new-and-broken"));
    // A sharded run cannot be a baseline, and another seed cannot be compared.
    let mut shard = after.clone();
    shard.shard = Some(Shard { index: 1, count: 2 });
    assert!(baseline::write(&dir, &shard).unwrap_err().to_string().contains("merge the shards"));
    let other =
        Baseline { meta: BaselineMeta { seed: 2, ..saved.meta.clone() }, traces: saved.traces.clone() };
    assert!(baseline::compare(&other, &after).unwrap_err().to_string().contains("--seed 2"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn merging_refuses_mixed_runs_and_incomplete_shards() {
    let shard = |index, results| RunResults { shard: Some(Shard { index, count: 3 }), ..run(results) };
    let a = shard(1, vec![result(0, "a", &[], 1)]);
    let b = shard(2, vec![result(1, "b", &[], 1)]);
    let c = shard(3, vec![result(2, "c", &[], 1)]);
    let merged = reports::merge::merge(vec![c.clone(), a.clone(), b.clone()]).unwrap();
    assert_eq!(merged.results.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!((merged.shard, merged.totals.scenarios), (None, 3));

    let err = |shards: Vec<RunResults>| reports::merge::merge(shards).unwrap_err().to_string();
    assert!(err(vec![a.clone(), b.clone()]).contains("shard 3/3 missing"));
    assert!(err(vec![a.clone(), a.clone(), b.clone(), c.clone()]).contains("given twice"));
    let other_seed = RunResults { seed: 9, ..b.clone() };
    assert!(err(vec![a.clone(), other_seed, c.clone()]).contains("seed"));
    assert!(err(vec![]).contains("at least one"));
}
