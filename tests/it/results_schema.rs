//! `schemas/results.schema.json` against real runs: the `results.json` of a `twice run` (the
//! binary, as a child process) and of a run with failures (a mutant executor in the sim
//! driver) validate with an independent validator (the `jsonschema` crate), and a file with a
//! wrong value or a missing field does not.

use std::path::PathBuf;
use std::process::Command;

use results::{Outcome, ScenarioResult, Source};
use runner::run::{self, Case, Driver, Progress, RunContext};
use serde_json::{Value, json};

use crate::mutant_naive::{Bug, Naive, Style};
use crate::process::bin;

struct Quiet;
impl Progress for Quiet {
    fn started(&self, _: usize) {}
    fn finished(&self, _: &ScenarioResult) {}
    fn done(&self) {}
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("results-schema").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn validator() -> jsonschema::Validator {
    jsonschema::draft202012::new(&reports::schema::results_schema())
        .expect("the results schema is a valid 2020-12 schema")
}

fn assert_valid(validator: &jsonschema::Validator, results: &Value, what: &str) {
    let problems: Vec<String> =
        validator.iter_errors(results).take(40).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(problems.is_empty(), "{what}: results.json does not validate:\n{}", problems.join("\n"));
}

fn read_results(dir: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(dir.join(reports::RESULTS_FILE)).expect("results.json reads");
    serde_json::from_str(&text).expect("results.json is JSON")
}

#[test]
fn results_of_a_twice_run_validate() {
    let dir = fresh_dir("cli");
    let output = Command::new(bin("twice"))
        .args(["run", "--cases", "5", "--seed", "7", "--report-dir"])
        .arg(&dir)
        .output()
        .expect("twice runs");
    assert!(
        output.status.success(),
        "twice run failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let results = read_results(&dir);
    assert_eq!(results["schema"], json!(results::RESULTS_SCHEMA));
    let rows = results["results"].as_array().expect("results");
    assert!(
        rows.iter()
            .all(|r| r["outcome"] == json!("passed")
                && r["verdicts"].as_array().is_some_and(|v| !v.is_empty())),
        "every case passed and carries its verdicts"
    );
    assert!(
        results["verdict_sets"].as_array().is_some_and(|s| !s.is_empty()),
        "the deprecated table of verdict lists is still written"
    );
    assert_valid(&validator(), &results, "twice run --cases 5");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The catalog and a few generated cases run by the naive executor that resends without a key: the
/// failed cases keep everything (claims, intents, ledgers, journals, timeline, faults).
#[test]
fn results_with_failures_validate_and_a_broken_file_does_not() {
    let cases: Vec<Case> = scenarios::catalog::catalog()
        .expect("the catalog loads")
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .chain((0..3).map(|index| Case {
            scenario: scenarios::generate::case(20, index).expect("the case generates"),
            source: Source::Generated { index },
        }))
        .collect();
    let factory = Naive::with(Style::LookupFirst, Bug::NaiveRetry);
    let driver = Driver::Sim(&factory);
    let work = fresh_dir("sim-work");
    let results = run::run_cases(&cases, &RunContext::new(20, &driver, &work, "twice run"), 2, &Quiet);
    let _ = std::fs::remove_dir_all(&work);
    let run = run::results(20, &driver, None, results);
    assert!(
        run.results.iter().any(|r| r.outcome == Outcome::Violated),
        "the naive retry must break something"
    );
    let dir = fresh_dir("sim-report");
    reports::write_all(&dir, &run).expect("the report writes");
    let results = read_results(&dir);
    let failed = results["results"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["outcome"] == json!("violated")))
        .expect("a violated case in the file")
        .clone();
    assert!(failed["observed"]["ledgers"].is_object() && failed["claims"].is_array(), "{failed}");
    let passed = results["results"]
        .as_array()
        .and_then(|all| all.iter().find(|r| r["outcome"] == json!("passed")))
        .expect("a passed case in the file");
    assert_eq!(verdicts_shape(passed), verdicts_shape(&failed), "passed and violated carry verdicts alike");
    let validator = validator();
    assert_valid(&validator, &results, "a run with failures");

    type Change = fn(&mut Value);
    let breakages: &[(&str, Change)] = &[
        ("another schema version", |v| v["schema"] = json!("twice.results/3")),
        ("an unknown outcome", |v| v["results"][0]["outcome"] = json!("failed")),
        ("a missing replay", |v| {
            v["results"][0].as_object_mut().map(|r| r.remove("replay"));
        }),
        ("a seed as a string", |v| v["seed"] = json!("20")),
        ("an unknown source kind", |v| v["results"][0]["source"] = json!({"kind": "corpus"})),
        ("a verdict without invariant", |v| {
            v["results"][0]["verdicts"][0].as_object_mut().map(|r| r.remove("invariant"));
        }),
        ("a case without verdicts", |v| {
            v["results"][0].as_object_mut().map(|r| r.remove("verdicts"));
        }),
        ("totals without passed", |v| {
            v["totals"].as_object_mut().map(|t| t.remove("passed"));
        }),
    ];
    for (what, change) in breakages {
        let mut broken = results.clone();
        change(&mut broken);
        assert!(!validator.is_valid(&broken), "the schema accepts {what}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A row's verdicts as a reader meets them: each invariant's name and the fields its verdict
/// has, a `reason` aside (only a verdict not judged has one).
fn verdicts_shape(row: &Value) -> Vec<(String, Vec<String>)> {
    let verdicts = row["verdicts"].as_array().unwrap_or_else(|| panic!("{}: no verdicts", row["name"]));
    assert!(!verdicts.is_empty(), "{}: no verdicts", row["name"]);
    verdicts
        .iter()
        .map(|v| {
            assert!(v["status"].is_string() && v["held"].is_boolean() && v["evidence"].is_array(), "{v}");
            let fields =
                v.as_object().expect("a verdict is an object").keys().filter(|k| *k != "reason").cloned();
            (v["invariant"].as_str().expect("an invariant").to_string(), fields.collect())
        })
        .collect()
}
