//! The Markdown summary, the JUnit XML, baselines and merges, on results built by hand.

use std::collections::BTreeMap;

use reports::baseline::{self, Baseline, BaselineMeta};
use results::*;

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
            after: vec![],
        }],
        effects: BTreeMap::from([("payments".to_string(), 1)]),
        faults_applied: vec![],
        events: vec![],
        replay: format!("twice run --generated {position} --seed 1"),
        hazards: vec![],
        shrunk: None,
        shrink: None,
        verdict_set: None,
        summary: None,
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
        strict: false,
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

/// Scenario names from a results file become trace files inside the baseline directory:
/// `../`, `/`, NUL, control characters, a leading dot, Windows' reserved names and characters
/// and a 10,000-character name each give a bounded file of their own, read back under the
/// name it had.
#[test]
fn hostile_scenario_names_stay_inside_the_baseline_directory() {
    let long = "n".repeat(10_000);
    let names = [
        "../escaped",
        "../../../tmp/twice-escaped",
        "a/b",
        "a_b",
        "nul\0byte",
        "bell\x07\ttab",
        ".hidden",
        "CON",
        "aux.json",
        "what?<>:\"|*",
        long.as_str(),
        &long[..9_999],
    ];
    let parent = std::env::temp_dir().join(format!("twice-baseline-names-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&parent);
    let dir = parent.join("baseline");
    let results = names.iter().enumerate().map(|(i, name)| result(i as u64, name, &[], 1)).collect();
    assert_eq!(baseline::write(&dir, &run(results)).unwrap(), names.len());
    let files: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert_eq!(files.len(), names.len() + 1, "one trace per name and the meta file: {files:?}");
    for file in &files {
        assert!(file.len() <= 200 && !file.starts_with('.'), "{file}");
    }
    let parent_entries: Vec<_> = std::fs::read_dir(&parent).unwrap().collect();
    assert_eq!(parent_entries.len(), 1, "nothing beside the baseline directory");
    let saved = baseline::read(&dir).unwrap();
    for name in names {
        assert!(saved.traces.contains_key(name), "{name:?} read back");
    }
    std::fs::remove_dir_all(&parent).unwrap();
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
    let strict = RunResults { strict: true, ..b.clone() };
    assert!(err(vec![a.clone(), strict, c.clone()]).contains("strict"));
}

fn hazard(kind: &str, service: &str, detail: &str, exploited_by: &str) -> Hazard {
    Hazard {
        kind: kind.into(),
        service: service.into(),
        intent: Some("refund-1".into()),
        detail: detail.into(),
        exploited_by: exploited_by.into(),
        command: format!("twice run --executor ./exec --scenario {exploited_by}"),
    }
}

/// A failing scenario with a not-judged verdict and a shrink record, a passing one with a
/// not-judged verdict, and hazards of two kinds over two scenarios.
fn mixed(strict: bool) -> RunResults {
    let mut broken = result(1, "broken", &[("nothing-lost", "refund-1 vanished")], 1);
    broken.verdicts.push(Verdict::not_judged("no-stale-write", "no second writer in this run"));
    broken.shrunk = Some("twice-report/failures/0001-broken.toml".into());
    broken.shrink = Some(Shrink { steps_before: 9, steps_after: 3, runs: 41, stopped: SHRINK_BUDGET.into() });
    broken.hazards =
        vec![hazard("no-fencing-token", "payments", "POST /v1/refunds without a token", "zombie")];
    let mut fine = result(0, "fine", &[], 1);
    fine.verdicts.push(Verdict::not_judged("no-stale-write", "no takeover happened"));
    fine.hazards = vec![
        hazard("no-fencing-token", "payments", "second refund without a token", "zombie"),
        hazard("no-precondition", "files", &format!("PUT /f/a {SCRIPT}|x"), "lost_update"),
    ];
    RunResults { strict, ..run(vec![fine, broken]) }
}

#[test]
fn the_summary_shows_hazards_not_judged_verdicts_and_shrinking() {
    let md = reports::summary::render(&mixed(false));
    let expect = [
        "# twice: 1 of 2 scenarios failed",
        "| passed | violated | executor errors | hazards | total |",
        "| 1 | 1 | 0 | 3 | 2 |",
        "2 verdicts not judged (the run gave the checker nothing to judge them on), in 2 scenarios: `report.html` gives each reason.",
        "| `broken` | `nothing-lost` | `refund-1 vanished` |",
        "- `broken`: `twice-report/failures/0001-broken.toml`; shrunk from 9 to 3 steps in 41 runs; stopped: time budget",
        "- `no-fencing-token` in 2 scenarios, e.g. on `payments`: `second refund without a token`",
        "  - `zombie` would exploit it: `twice run --executor ./exec --scenario zombie`",
        // Executor text stays in a code span; outside a table, pipes need no escaping.
        &format!("- `no-precondition` in 1 scenario, e.g. on `files`: `PUT /f/a {SCRIPT}|x`"),
        "  - `lost_update` would exploit it: `twice run --executor ./exec --scenario lost_update`",
    ];
    for line in expect {
        assert!(md.lines().any(|l| l == line), "no line {line:?} in:\n{md}");
    }
    // The failure table is for harm: verdicts not judged are counted above it, not listed in it.
    assert!(!md.contains("not judged: `no second writer in this run`"), "{md}");
    assert!(md.contains("; they do not fail the run (`--strict` would make them)."), "{md}");
    assert!(!md.contains("With `--strict`"), "{md}");
    // Hazards come after the failures, kinds in order.
    let at = |s: &str| md.find(s).unwrap_or_else(|| panic!("{s} missing:\n{md}"));
    assert!(at("## Failures") < at("## Hazards"));
    assert!(at("`no-fencing-token` in") < at("`no-precondition` in"));

    // Every stop reason has its words; one this version does not know is shown as data.
    for (stopped, words) in [
        (SHRINK_MINIMAL, "stopped: minimal"),
        (SHRINK_RUNS, "stopped: run limit"),
        (SHRINK_BUDGET, "stopped: time budget"),
        ("<b>later</b>", "`shrunk from 9 to 3 steps in 41 runs; stopped: <b>later</b>`"),
    ] {
        let mut run = mixed(false);
        if let Some(shrink) = run.results[1].shrink.as_mut() {
            shrink.stopped = stopped.into();
        }
        let md = reports::summary::render(&run);
        assert!(md.contains(words), "{stopped}: {md}");
    }
}

#[test]
fn the_summary_headline_says_what_hazards_do_to_the_run() {
    // (strict, hazards, headline, says that strict fails the run)
    let cases = [
        (false, 0, "# twice: the scenario passed", false),
        (false, 2, "# twice: the scenario passed, with 2 hazards", false),
        (true, 0, "# twice: the scenario passed", true),
        (true, 1, "# twice: the scenario passed, but 1 hazard fails the run (`--strict`)", true),
        (true, 2, "# twice: the scenario passed, but 2 hazards fail the run (`--strict`)", true),
    ];
    for (strict, count, headline, says_strict) in cases {
        let mut fine = result(0, "fine", &[], 1);
        fine.hazards = (0..count)
            .map(|i| hazard("no-precondition", "files", &format!("PUT {i}"), "lost_update"))
            .collect();
        let run = RunResults { strict, ..run(vec![fine]) };
        assert_eq!(run.failed(), strict && count > 0);
        let md = reports::summary::render(&run);
        assert_eq!(md.lines().next(), Some(headline), "{md}");
        assert_eq!(
            md.contains("With `--strict`, hazards fail the run as violations do."),
            says_strict,
            "{md}"
        );
        assert_eq!(md.contains("## Hazards"), count > 0, "{md}");
        if count > 0 && strict {
            assert!(md.contains("they fail this run because of `--strict`"), "{md}");
        }
        if count == 0 {
            // A clean pass stays a headline, the facts and the totals.
            assert!(!md.contains("##") && md.lines().count() <= 10, "{md}");
        }
    }
}

#[test]
fn junit_skips_what_was_not_judged_and_never_fails_a_hazard() {
    for strict in [false, true] {
        let run = mixed(strict);
        let xml = reports::junit::render(&run).unwrap();
        assert_eq!(xml, reports::junit::render(&run.clone()).unwrap(), "same results, same bytes");
        assert!(!xml.contains(SCRIPT), "{xml}");
        let report = quick_junit::Report::deserialize_from_str(&xml).unwrap();
        // Ten verdicts: one violated, two not judged, whatever `--strict` says.
        assert_eq!((report.tests, report.failures, report.errors), (10, 1, 0), "{xml}");
        let fine = &report.test_suites[0];
        assert_eq!((fine.name.as_str(), fine.skipped, fine.failures, fine.errors), ("fine", 1, 0, 0));
        let skipped: Vec<_> = report
            .test_suites
            .iter()
            .flat_map(|s| &s.test_cases)
            .filter_map(|c| match &c.status {
                quick_junit::TestCaseStatus::Skipped { message, ty, .. } => Some((
                    c.name.as_str(),
                    message.as_ref().map(|m| m.as_str()),
                    ty.as_ref().map(|t| t.as_str()),
                )),
                _ => None,
            })
            .collect();
        assert_eq!(
            skipped,
            [
                ("no-stale-write", Some("not judged: no takeover happened"), Some("not-judged")),
                ("no-stale-write", Some("not judged: no second writer in this run"), Some("not-judged")),
            ]
        );
        let properties: Vec<(&str, &str)> =
            fine.properties.iter().map(|p| (p.name.as_str(), p.value.as_str())).collect();
        assert_eq!(
            properties,
            [
                ("hazard", "no-fencing-token: second refund without a token"),
                ("hazard", &*format!("no-precondition: PUT /f/a {SCRIPT}|x")),
            ]
        );
        let out = fine.system_out.as_ref().map(|o| o.as_str()).unwrap_or_default();
        assert!(
            out.contains("- no-fencing-token on payments (intent refund-1): second refund without a token")
        );
        assert!(out.contains("  would be exploited by: lost_update\n  run it: twice run --executor ./exec --scenario lost_update"));
        assert_eq!(out.contains("--strict makes hazards fail the run"), strict, "{out}");

        // The failure names the shrinking too.
        let broken = &report.test_suites[1];
        let failure = broken.test_cases.iter().find_map(|c| match &c.status {
            quick_junit::TestCaseStatus::NonSuccess { description, .. } => description.as_ref(),
            _ => None,
        });
        let failure = failure.map(|d| d.as_str()).unwrap_or_default();
        assert!(failure.contains("shrunk from 9 to 3 steps in 41 runs; stopped: time budget"), "{failure}");
    }
}

/// Whoever reads `results.json` finds a case's verdicts in its row's `verdicts`, passed or
/// not, each verdict with the same fields; the deprecated table names the same list.
#[test]
fn every_row_of_results_json_carries_its_verdicts_whatever_its_outcome() {
    let text = reports::json::render(&mixed(false)).unwrap();
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    let rows = file["results"].as_array().unwrap();
    let row = |outcome: &str| rows.iter().find(|r| r["outcome"] == outcome).unwrap();
    let (passed, violated) = (row("passed"), row("violated"));
    let shape = |row: &serde_json::Value| -> Vec<(String, Vec<String>)> {
        let verdicts = row["verdicts"].as_array().unwrap_or_else(|| panic!("no verdicts in {row}"));
        verdicts
            .iter()
            .map(|v| {
                assert!(v["status"].is_string() && v["held"].is_boolean() && v["evidence"].is_array(), "{v}");
                let keys = v.as_object().unwrap().keys().filter(|k| *k != "reason").cloned().collect();
                (v["invariant"].as_str().unwrap().to_string(), keys)
            })
            .collect()
    };
    assert_eq!(shape(passed), shape(violated));
    assert!(!shape(passed).is_empty());
    let set = passed["verdict_set"].as_u64().unwrap() as usize;
    assert_eq!(file["verdict_sets"][set], passed["verdicts"], "the deprecated alias names the same list");
    assert!(violated.get("verdict_set").is_none(), "{violated}");
}

#[test]
fn results_json_keeps_the_new_fields_and_reads_old_verdicts() {
    let dir = std::env::temp_dir().join(format!("twice-results-json-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("results.json");

    let run = mixed(true);
    let text = reports::json::render(&run).unwrap();
    for field in [
        "\"strict\":true",
        "\"status\":\"not-judged\"",
        "\"reason\":\"no second writer in this run\"",
        "\"status\":\"violated\"",
        "\"hazards\":[{\"kind\":\"no-fencing-token\"",
        "\"shrink\":{\"steps_before\":9,\"steps_after\":3,\"runs\":41,\"stopped\":\"budget\"}",
        "\"totals\":{\"scenarios\":2,\"passed\":1,\"violated\":1,\"executor_errors\":0,\"hazards\":3}",
    ] {
        assert!(text.contains(field), "{field} missing: {text}");
    }
    std::fs::write(&path, &text).unwrap();
    assert_eq!(reports::json::read(&path).unwrap(), run);

    // A file written before verdicts had a status (nor a reason, hazards, shrink or strict).
    let mut old: serde_json::Value = serde_json::from_str(&text).unwrap();
    old.as_object_mut().unwrap().remove("strict");
    let strip = |verdicts: &mut Vec<serde_json::Value>| {
        verdicts.retain(|v| v["status"] != "not-judged");
        for v in verdicts {
            v.as_object_mut().unwrap().remove("status");
        }
    };
    // Then a passed case's verdicts were only in the run's table of verdict lists.
    for set in old["verdict_sets"].as_array_mut().unwrap() {
        strip(set.as_array_mut().unwrap());
    }
    for r in old["results"].as_array_mut().unwrap() {
        let r = r.as_object_mut().unwrap();
        r.remove("hazards");
        r.remove("shrink");
        if r.contains_key("verdict_set") {
            r.remove("verdicts");
        } else {
            strip(r.get_mut("verdicts").unwrap().as_array_mut().unwrap());
        }
    }
    std::fs::write(&path, old.to_string()).unwrap();
    let read = reports::json::read(&path).unwrap();
    let statuses: Vec<Vec<(&str, Status)>> = read
        .results
        .iter()
        .map(|r| r.verdicts.iter().map(|v| (v.invariant.as_str(), v.status)).collect())
        .collect();
    let all = |violated: Option<&'static str>| -> Vec<(&str, Status)> {
        ["no-duplicate-effect", "honest-terminal-states", "nothing-lost", "expected-states"]
            .into_iter()
            .map(|i| (i, if Some(i) == violated { Status::Violated } else { Status::Held }))
            .collect()
    };
    assert_eq!(statuses, vec![all(None), all(Some("nothing-lost"))]);
    assert!(!read.strict && read.results.iter().all(|r| r.hazards.is_empty() && r.shrink.is_none()));
    let _ = std::fs::remove_dir_all(&dir);
}
