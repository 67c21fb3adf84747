//! Reports of real runs: regression snapshots (insta and `--baseline`), and merged shards.

use std::path::{Path, PathBuf};
use std::process::Output;

use reports::baseline;
use results::{Outcome, RunResults, ScenarioResult, Source};
use runner::run::{self, Case, Driver, Progress, RunContext};
use runner::sim::{Reference, SimExecutor, SimFactory, WorkerSetup};

/// The committed baseline of the reference executor: the catalog and generated cases
/// `0..BASELINE_CASES` of seed 1, in sim (written by `twice run --cases 100 --baseline
/// reports/baseline/reference --update-baseline`).
const BASELINE_CASES: u64 = 100;

fn baseline_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../reports/baseline/reference")
}

fn work_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("twice-reports-{what}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

struct Quiet;
impl Progress for Quiet {
    fn started(&self, _: usize) {}
    fn finished(&self, _: &ScenarioResult) {}
    fn done(&self) {}
}

fn catalog_cases() -> Vec<Case> {
    scenarios::catalog::catalog()
        .unwrap()
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .collect()
}

fn run_sim(cases: &[Case], factory: &dyn SimFactory, what: &str) -> RunResults {
    let driver = Driver::Sim(factory);
    let dir = work_dir(what);
    let results = run::run_cases(cases, &RunContext::new(1, &driver, &dir, "twice run"), 2, &Quiet);
    let _ = std::fs::remove_dir_all(&dir);
    run::results(1, &driver, None, results)
}

/// The reference executor allowed a single send per intent: a behaviour change, as a careless
/// edit of the executor's limits would make (an intent whose first send never reached the
/// service, refused, now ends failed instead of confirmed on a second attempt).
struct Impatient;

impl SimFactory for Impatient {
    fn name(&self) -> String {
        Reference.name()
    }

    fn start(&self, mut setup: WorkerSetup) -> Result<Box<dyn SimExecutor>, String> {
        setup.limits.attempts_max = 1;
        Reference.start(setup)
    }
}

#[test]
fn the_catalog_traces_of_the_reference_executor_match_their_snapshot() {
    let run = run_sim(&catalog_cases(), &Reference, "snapshot");
    insta::assert_snapshot!("reference_catalog_traces", baseline::traces_text(&run));
}

#[test]
fn the_reference_executor_matches_its_committed_baseline() {
    let mut cases = catalog_cases();
    for index in 0..BASELINE_CASES {
        let scenario = scenarios::generate::case(1, index).unwrap();
        cases.push(Case { scenario, source: Source::Generated { index } });
    }
    let run = run_sim(&cases, &Reference, "baseline");
    let saved = baseline::read(&baseline_dir()).unwrap();
    let comparison = baseline::compare(&saved, &run).unwrap();
    assert_eq!(
        comparison.changed,
        vec![],
        "the reference executor's behaviour changed; if that is intended, run\n  twice run --cases {BASELINE_CASES} --baseline reports/baseline/reference --update-baseline\nand `cargo insta review`:\n{}",
        comparison.render("reports/baseline/reference")
    );
    assert_eq!(comparison.unchanged, cases.len());
    assert_eq!(comparison.not_run, 0);
}

#[test]
fn a_behaviour_change_shows_as_a_snapshot_diff_and_a_baseline_regression() {
    let cases = catalog_cases();
    let changed = run_sim(&cases, &Impatient, "impatient");

    // As a regression against the committed baseline, with the attempts that changed.
    let saved = baseline::read(&baseline_dir()).unwrap();
    let comparison = baseline::compare(&saved, &changed).unwrap();
    let text = comparison.render("reports/baseline/reference");
    println!("{text}");
    assert!(comparison.regressions() > 0, "{text}");
    assert!(text.contains("REGRESSION") && text.contains("attempts"), "{text}");

    // As an insta snapshot diff: the committed snapshot, checked against the changed traces in
    // a scratch copy (so the failed assertion's pending `.snap.new` lands there, not in the tree).
    let scratch = work_dir("insta");
    let name = "reference_catalog_traces";
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/it/snapshots")
            .join(format!("it__reports__{name}.snap")),
        scratch.join(format!("{name}.snap")),
    )
    .unwrap();
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path(&scratch);
    settings.set_prepend_module_to_snapshot(false);
    let traces = baseline::traces_text(&changed);
    let failed =
        settings.bind(|| std::panic::catch_unwind(|| insta::assert_snapshot!(name, traces.clone())).is_err());
    assert!(failed, "the changed behaviour must fail the snapshot");
    // And the reference itself passes the same check, so the failure is the change's doing.
    let same = baseline::traces_text(&run_sim(&cases, &Reference, "reference-again"));
    settings.bind(|| insta::assert_snapshot!(name, same));
}

fn twice_in(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_twice"))
        .args(args)
        .current_dir(dir)
        .env("CI", "true")
        .output()
        .unwrap()
}

#[test]
fn baseline_on_the_command_line_passes_unchanged_and_fails_a_regression() {
    let dir = work_dir("cli-baseline");
    let scenario = "lost_refund_reply";
    let saved = dir.join("saved");
    let out = twice_in(&dir, &["run", "--scenario", scenario, "--baseline", "saved", "--update-baseline"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let trace_path = saved.join(format!("{scenario}.json"));
    assert!(trace_path.exists() && saved.join(baseline::BASELINE_FILE).exists());

    let out = twice_in(&dir, &["run", "--scenario", scenario, "--baseline", "saved"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("1 unchanged, 0 changed (0 regressions)"), "{stdout}");

    // The baseline as it would be had the executor needed two attempts.
    let text = std::fs::read_to_string(&trace_path).unwrap();
    let edited = text.replace("\"attempts\": 1,", "\"attempts\": 2,");
    assert_ne!(text, edited);
    std::fs::write(&trace_path, edited).unwrap();
    let out = twice_in(&dir, &["run", "--scenario", scenario, "--baseline", "saved"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(stdout.contains("REGRESSION") && stdout.contains("refund-4812: attempts 2 -> 1"), "{stdout}");

    // Another seed runs other generated scenarios: that is a harness error, not a verdict.
    let out = twice_in(&dir, &["run", "--scenario", scenario, "--seed", "9", "--baseline", "saved"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--seed 1"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn merged_shards_give_the_same_report_as_the_unsharded_run() {
    let root = work_dir("merge");
    let run_in = |sub: &str, extra: &[&str]| {
        let dir = root.join(sub);
        std::fs::create_dir_all(&dir).unwrap();
        let mut args = vec!["run", "--cases", "25", "--report-dir", "out"];
        args.extend_from_slice(extra);
        let out = twice_in(&dir, &args);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    };
    run_in("whole", &[]);
    run_in("one", &["--shard", "1/2"]);
    run_in("two", &["--shard", "2/2"]);
    std::fs::create_dir_all(root.join("merged")).unwrap();
    let out =
        twice_in(&root.join("merged"), &["report", "merge", "../two/out", "../one/out", "--out", "out"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    for file in [reports::RESULTS_FILE, reports::SUMMARY_FILE, reports::JUNIT_FILE, reports::HTML_FILE] {
        let whole = std::fs::read(root.join("whole/out").join(file)).unwrap();
        let merged = std::fs::read(root.join("merged/out").join(file)).unwrap();
        assert!(whole == merged, "{file} differs between the unsharded run and the merged shards");
    }
    let shard = reports::json::read(&root.join("one/out")).unwrap();
    let whole = reports::json::read(&root.join("whole/out")).unwrap();
    assert!(shard.results.len() < whole.results.len() && shard.shard.is_some());

    // A missing shard, or one given twice, is refused with the reason.
    let out = twice_in(&root.join("merged"), &["report", "merge", "../one/out", "--out", "bad"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("shard 2/2 missing"));
    let out =
        twice_in(&root.join("merged"), &["report", "merge", "../one/out", "../one/out", "--out", "bad"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("given twice"));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn every_report_file_is_written_and_results_read_back() {
    let run = run_sim(&catalog_cases()[..3], &Reference, "files");
    let dir = work_dir("files-out");
    let written = reports::write_all(&dir, &run).unwrap();
    assert_eq!(written.len(), 4);
    for path in &written {
        assert!(std::fs::metadata(path).unwrap().len() > 0, "{}", path.display());
    }
    let back = reports::json::read(&dir).unwrap();
    assert_eq!(back, run);
    // Passed, so compact: the intents are in the summary.
    assert!(
        back.results.iter().all(
            |r| r.outcome == Outcome::Passed && r.summary.as_ref().is_some_and(|s| !s.intents.is_empty())
        )
    );
    // Another schema version is refused by name.
    let text = std::fs::read_to_string(dir.join(reports::RESULTS_FILE)).unwrap();
    std::fs::write(dir.join(reports::RESULTS_FILE), text.replace("twice.results/2", "twice.results/9"))
        .unwrap();
    let err = reports::json::read(&dir).unwrap_err().to_string();
    assert!(err.contains("twice.results/9") && err.contains("twice.results/2"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
