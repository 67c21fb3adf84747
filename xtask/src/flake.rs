//! `cargo xtask flake N [ARGS...]`: the suite `cargo xtask test` runs, built once and then run
//! N times in a row; every test that failed at least once is reported with its output.
//!
//! Each run's output (cargo's stderr and the test binaries' stdout, interleaved as written)
//! goes to `target/flake/RUN.log`; the summary is a table test -> failures/N. It runs
//! `cargo test --no-fail-fast`, whose libtest output [`parse`] reads: the `Running` lines say
//! which binary a test is in, `test NAME ... FAILED` that it failed, and the
//! `---- NAME stdout ----` sections what it printed. (cargo-nextest is not used: CI machines
//! may not have it, and one parser keeps the report the same everywhere.)

use std::collections::BTreeMap;
use std::fs;
use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, Result, bail};

use crate::test::{prepare, selects_package, with_prepared_tests};
use crate::{cargo, exit_code, output_of, root, target_dir};

/// How much of one failure's output the summary prints.
const OUTPUT_SHOWN_BYTES: usize = 4 * 1024;

/// One failure of one test in one run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    /// `BINARY NAME`, e.g. `it executor_crash::crash_randomly_without_loss_or_duplicate`.
    pub(crate) test: String,
    /// Its `---- NAME stdout ----` section, empty if there was none.
    pub(crate) output: String,
}

/// What one run's log says.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct RunOutcome {
    pub(crate) failures: Vec<Failure>,
    /// Tests that passed (to tell a run that ran nothing from a clean one).
    pub(crate) passed: usize,
}

/// The binary a cargo `Running` or `Doc-tests` line names: `unittests src/lib.rs
/// (target/debug/deps/harness-0123abcd)` is `harness`, `tests/it/main.rs (.../it-89ab)` is
/// `it`, `Doc-tests executor` is `doc executor`.
fn binary_of(line: &str) -> Option<String> {
    let line = line.trim();
    if let Some(krate) = line.strip_prefix("Doc-tests ") {
        return Some(format!("doc {}", krate.trim()));
    }
    let rest = line.strip_prefix("Running ")?;
    let path = rest.rsplit_once('(').map(|(_, p)| p.trim_end_matches(')')).unwrap_or(rest);
    let file = path.rsplit('/').next().unwrap_or(path);
    // The hash cargo appends: `-` and hex digits.
    let name = match file.rsplit_once('-') {
        Some((name, hash)) if !hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit()) => name,
        _ => file,
    };
    Some(name.to_string())
}

/// Reads a `cargo test` log: which tests failed, with their output, and how many passed.
pub(crate) fn parse(log: &str) -> RunOutcome {
    let mut outcome = RunOutcome::default();
    let mut binary = String::from("?");
    // NAME -> output, for the binary being read.
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut failed: Vec<String> = Vec::new();
    let mut in_section: Option<String> = None;
    let flush = |binary: &str,
                 failed: &mut Vec<String>,
                 sections: &mut BTreeMap<String, String>,
                 out: &mut RunOutcome| {
        for name in failed.drain(..) {
            let output = sections.remove(&name).unwrap_or_default();
            out.failures
                .push(Failure { test: format!("{binary} {name}"), output: output.trim_end().to_string() });
        }
        sections.clear();
    };
    for line in log.lines() {
        if let Some(next) = binary_of(line) {
            flush(&binary, &mut failed, &mut sections, &mut outcome);
            in_section = None;
            binary = next;
            continue;
        }
        if let Some(name) = line.strip_prefix("---- ").and_then(|l| l.strip_suffix(" stdout ----")) {
            in_section = Some(name.to_string());
            sections.entry(name.to_string()).or_default();
            continue;
        }
        let trimmed = line.trim_end();
        // The end of the captured output: the next section, the list of failures, or the result.
        if trimmed == "failures:" || trimmed.starts_with("test result: ") {
            in_section = None;
        }
        if let Some(rest) = trimmed.strip_prefix("test ") {
            if let Some(name) = rest.strip_suffix(" ... FAILED") {
                if !failed.iter().any(|f| f == name) {
                    failed.push(name.to_string());
                }
                continue;
            }
            if rest.ends_with(" ... ok") && in_section.is_none() {
                outcome.passed += 1;
                continue;
            }
        }
        if let Some(name) = &in_section {
            let text = sections.entry(name.clone()).or_default();
            text.push_str(line);
            text.push('\n');
        }
    }
    flush(&binary, &mut failed, &mut sections, &mut outcome);
    outcome
}

/// Per test, the runs it failed in (1-based), in the order tests first failed.
pub(crate) fn tally(runs: &[RunOutcome]) -> Vec<(String, Vec<usize>)> {
    let mut table: Vec<(String, Vec<usize>)> = Vec::new();
    for (i, run) in runs.iter().enumerate() {
        for failure in &run.failures {
            match table.iter_mut().find(|(t, _)| *t == failure.test) {
                Some((_, seen)) => seen.push(i + 1),
                None => table.push((failure.test.clone(), vec![i + 1])),
            }
        }
    }
    table
}

/// The summary table, as Markdown: test, failures/N, the runs.
pub(crate) fn table(table: &[(String, Vec<usize>)], runs: usize) -> String {
    let mut out = String::from("| test | failures | runs |\n|---|---|---|\n");
    for (test, seen) in table {
        let list: Vec<String> = seen.iter().map(usize::to_string).collect();
        out.push_str(&format!("| `{test}` | {}/{runs} | {} |\n", seen.len(), list.join(", ")));
    }
    out
}

/// What `cargo xtask flake` was asked: run N times (logging to `logs`), or only summarise.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Request {
    /// Runs to make; 0 with `--summary`.
    pub(crate) runs: usize,
    /// Where the logs go; `None` is `target/flake`, cleared first.
    pub(crate) logs: Option<String>,
    /// The `cargo test` arguments.
    pub(crate) args: Vec<String>,
}

const USAGE: &str =
    "usage: cargo xtask flake N [--logs DIR] [CARGO TEST ARGS...] | cargo xtask flake --summary DIR";

pub(crate) fn request(args: &[String]) -> Result<Request> {
    match args.first().map(String::as_str) {
        Some("--summary") => match args.get(1..) {
            Some([dir]) => Ok(Request { runs: 0, logs: Some(dir.clone()), args: Vec::new() }),
            _ => bail!("{USAGE}"),
        },
        Some(runs) => {
            let runs: usize =
                runs.parse().with_context(|| format!("N must be a count of runs, got `{runs}`\n{USAGE}"))?;
            if runs == 0 {
                bail!("N must be at least 1");
            }
            let mut rest = &args[1..];
            let mut logs = None;
            if rest.first().map(String::as_str) == Some("--logs") {
                let Some(dir) = rest.get(1) else { bail!("--logs needs a directory\n{USAGE}") };
                logs = Some(dir.clone());
                rest = &rest[2..];
            }
            Ok(Request { runs, logs, args: rest.to_vec() })
        }
        None => bail!("{USAGE}"),
    }
}

/// The numbers of the `K.log` files in `dir`, sorted.
fn logged_runs(dir: &Path) -> Vec<usize> {
    let mut runs: Vec<usize> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
        .collect();
    runs.sort_unstable();
    runs
}

/// The header line a run's log starts with, and what it says (the commit).
const HEADER: &str = "xtask flake: commit ";

/// The line a run's log ends with: cargo test's exit code.
const TRAILER: &str = "xtask flake: exit ";

/// The exit code a log's trailer gives; `None` for a run cut short.
fn trailer_exit(log: &str) -> Option<i32> {
    log.lines().rev().find_map(|l| l.strip_prefix(TRAILER)?.split_whitespace().next()?.parse().ok())
}

fn header_commit(log: &str) -> Option<&str> {
    log.lines().next()?.strip_prefix(HEADER)?.split_whitespace().next()
}

pub(crate) fn flake(args: &[String]) -> Result<i32> {
    let request = request(args)?;
    let root = root();
    let target = target_dir(&root);
    let (logs, appending) = match &request.logs {
        Some(dir) => (root.join(dir), true),
        None => (target.join("flake"), false),
    };
    if request.runs > 0 {
        run_many(&root, &logs, appending, &request)?;
    }
    summarise(&root, &logs)
}

/// Builds once, then runs the suite `request.runs` times, each into the next `K.log` of `logs`.
fn run_many(root: &Path, logs: &Path, appending: bool, request: &Request) -> Result<()> {
    let args = &with_prepared_tests(&request.args);
    let vars = prepare(root, false)?;
    // The same command line as `cargo xtask test` (the prepared tests included), plus
    // --no-fail-fast (every binary runs).
    let command = |extra: &[&str]| {
        let mut command = cargo();
        command.arg("test").envs(vars.iter().map(|(k, v)| (k, v)));
        if !selects_package(args) {
            command.arg("--workspace");
        }
        command.args(extra);
        let (cargo_args, test_args) = match args.iter().position(|a| a == "--") {
            Some(i) => (&args[..i], &args[i..]),
            None => (&args[..], &args[args.len()..]),
        };
        command.args(cargo_args).args(test_args).current_dir(root);
        command
    };
    println!("xtask: building the tests once (cargo test --no-run)");
    let status = command(&["--no-run"]).status().context("could not start cargo test --no-run")?;
    if !status.success() {
        bail!("cargo test --no-run failed ({})", exit_code(status));
    }
    if !appending && logs.exists() {
        // A fresh series: the logs of an earlier one would be counted with it.
        fs::remove_dir_all(logs).with_context(|| format!("cannot clear {}", logs.display()))?;
    }
    fs::create_dir_all(logs).with_context(|| format!("cannot create {}", logs.display()))?;
    let first = logged_runs(logs).last().map_or(1, |last| last + 1);
    let commit = output_of("git", &["-C", &root.display().to_string(), "rev-parse", "--short=12", "HEAD"])
        .unwrap_or_else(|| "unknown".into());
    let dirty = output_of(
        "git",
        &["-C", &root.display().to_string(), "status", "--porcelain", "--untracked-files=no"],
    )
    .is_some();
    for run in first..first + request.runs {
        let path = logs.join(format!("{run}.log"));
        let started_at = output_of("date", &["-u", "+%Y-%m-%dT%H:%M:%SZ"]).unwrap_or_default();
        fs::write(
            &path,
            format!(
                "{HEADER}{commit}{} started {started_at} args {args:?}\n",
                if dirty { "+changes" } else { "" }
            ),
        )
        .with_context(|| format!("cannot create {}", path.display()))?;
        let file = fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let err = file.try_clone().context("cannot share the log file")?;
        let started = std::time::Instant::now();
        let status = command(&["--no-fail-fast"])
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .status()
            .context("could not start cargo test")?;
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        writeln!(file, "{TRAILER}{} after {:.0} s", exit_code(status), started.elapsed().as_secs_f64())
            .with_context(|| format!("cannot write {}", path.display()))?;
        let outcome = parse(&fs::read_to_string(&path).unwrap_or_default());
        println!(
            "xtask: run {run} ({} of {}): {} passed, {} failed, exit {} ({:.0} s; {})",
            run - first + 1,
            request.runs,
            outcome.passed,
            outcome.failures.len(),
            exit_code(status),
            started.elapsed().as_secs_f64(),
            rel(root, &path)
        );
    }
    Ok(())
}

/// Reads every `K.log` in `logs` and prints the table; 1 if any test failed in any run.
fn summarise(root: &Path, logs: &Path) -> Result<i32> {
    let numbers = logged_runs(logs);
    if numbers.is_empty() {
        bail!("no run logs (N.log) in {}", logs.display());
    }
    let mut outcomes = Vec::new();
    let mut broken_runs = Vec::new();
    let mut commits: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for number in &numbers {
        let path = logs.join(format!("{number}.log"));
        let log = fs::read_to_string(&path).with_context(|| format!("cannot read {}", path.display()))?;
        commits.entry(header_commit(&log).unwrap_or("unknown").to_string()).or_default().push(*number);
        let outcome = parse(&log);
        // A run that failed without naming a test (a build error, a crashed test binary), or
        // one cut short before its trailer.
        if outcome.failures.is_empty() && trailer_exit(&log) != Some(0) {
            broken_runs.push(*number);
        }
        outcomes.push(outcome);
    }
    let runs = numbers.len();
    let mut tallied = tally(&outcomes);
    // The tally counts positions; the logs are named by their numbers.
    for (_, seen) in &mut tallied {
        for position in seen.iter_mut() {
            *position = numbers[*position - 1];
        }
    }
    let passed: Vec<usize> = outcomes.iter().map(|o| o.passed).collect();
    println!("\nxtask: flake summary ({runs} runs; logs in {})", rel(root, logs));
    for (commit, runs) in &commits {
        let list: Vec<String> = runs.iter().map(usize::to_string).collect();
        println!("  commit {commit}: runs {}", list.join(", "));
    }
    println!(
        "  tests passed per run: min {}, max {}\n",
        passed.iter().min().unwrap_or(&0),
        passed.iter().max().unwrap_or(&0)
    );
    if tallied.is_empty() {
        println!("no test failed in any run");
    } else {
        print!("{}", table(&tallied, runs));
        for (test, seen) in &tallied {
            let Some(first) = seen.first() else { continue };
            let Some(position) = numbers.iter().position(|n| n == first) else { continue };
            let output = outcomes[position]
                .failures
                .iter()
                .find(|f| &f.test == test)
                .map(|f| f.output.as_str())
                .unwrap_or_default();
            println!("\n---- {test} (run {first}) ----\n{}", shown(output));
        }
    }
    for run in &broken_runs {
        println!(
            "\nxtask: run {run}: cargo test failed or was cut short, and no failing test was named (a build error, a crash?): see {}",
            rel(root, &logs.join(format!("{run}.log")))
        );
    }
    Ok(i32::from(!tallied.is_empty() || !broken_runs.is_empty()))
}

/// `path` relative to `root`, for messages.
fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

/// The first [`OUTPUT_SHOWN_BYTES`] of a failure's output.
fn shown(output: &str) -> String {
    if output.is_empty() {
        return "(no output captured)".into();
    }
    if output.len() <= OUTPUT_SHOWN_BYTES {
        return output.to_string();
    }
    let mut cut = OUTPUT_SHOWN_BYTES;
    while !output.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}\n[... {} more bytes in the log]", &output[..cut], output.len() - cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
   Compiling xtask v0.1.0
    Finished `test` profile [unoptimized + debuginfo] target(s) in 0.1s
     Running unittests src/lib.rs (target/debug/deps/harness-0123abcdef)

running 3 tests
test check::tests::a ... ok
test run::tests::slow ... FAILED
test run::tests::b ... ok

failures:

---- run::tests::slow stdout ----
thread 'run::tests::slow' panicked at runner/src/run.rs:10:5:
test ... ok inside the output is output
---- not a section header

failures:
    run::tests::slow

test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s

     Running tests/it/main.rs (target/debug/deps/it-89abcdef01)

running 2 tests
test executor_crash::random ... FAILED
test soak::soak ... ignored, a long soak
test sdk_files::put ... FAILED

failures:

---- executor_crash::random stdout ----
LOST: w1.i3

---- sdk_files::put stdout ----
boto3 said no

failures:
    executor_crash::random
    sdk_files::put

test result: FAILED. 0 passed; 2 failed; 1 ignored; 0 measured; 0 filtered out; finished in 1.00s

   Doc-tests executor

running 1 test
test executor/src/lib.rs - (line 5) ... ok

test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s
";

    #[test]
    fn failures_are_named_by_binary_with_their_output() {
        let run = parse(LOG);
        let names: Vec<&str> = run.failures.iter().map(|f| f.test.as_str()).collect();
        assert_eq!(names, ["harness run::tests::slow", "it executor_crash::random", "it sdk_files::put"]);
        assert_eq!(
            run.failures[0].output,
            "thread 'run::tests::slow' panicked at runner/src/run.rs:10:5:\n\
             test ... ok inside the output is output\n---- not a section header"
        );
        assert_eq!(run.failures[1].output, "LOST: w1.i3");
        assert_eq!(run.failures[2].output, "boto3 said no");
        assert_eq!(run.passed, 3);
    }

    #[test]
    fn a_failure_without_a_section_has_no_output() {
        let log =
            "     Running tests/x.rs (target/debug/deps/x-0a)\ntest t ... FAILED\ntest result: FAILED.\n";
        let run = parse(log);
        assert_eq!(run.failures, [Failure { test: "x t".into(), output: String::new() }]);
    }

    #[test]
    fn binaries_are_named_without_their_hash() {
        assert_eq!(
            binary_of("     Running unittests src/main.rs (target/debug/deps/xtask-f00d)").as_deref(),
            Some("xtask")
        );
        assert_eq!(
            binary_of("     Running benches/search.rs (target/debug/deps/search-12)").as_deref(),
            Some("search")
        );
        assert_eq!(binary_of("   Doc-tests fake_services").as_deref(), Some("doc fake_services"));
        assert_eq!(binary_of("test x ... ok"), None);
    }

    #[test]
    fn the_tally_counts_runs_per_test() {
        let fail = |t: &str| Failure { test: t.into(), output: String::new() };
        let runs = vec![
            RunOutcome { failures: vec![fail("it a")], passed: 1 },
            RunOutcome { failures: vec![], passed: 2 },
            RunOutcome { failures: vec![fail("it b"), fail("it a")], passed: 0 },
        ];
        let tallied = tally(&runs);
        assert_eq!(tallied, [("it a".to_string(), vec![1, 3]), ("it b".to_string(), vec![3])]);
        assert_eq!(
            table(&tallied, 3),
            "| test | failures | runs |\n|---|---|---|\n| `it a` | 2/3 | 1, 3 |\n| `it b` | 1/3 | 3 |\n"
        );
    }

    #[test]
    fn requests_are_read() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            request(&args(&["3", "--logs", "/tmp/f", "-p", "scenarios"])).unwrap(),
            Request { runs: 3, logs: Some("/tmp/f".into()), args: args(&["-p", "scenarios"]) }
        );
        assert_eq!(request(&args(&["2"])).unwrap(), Request { runs: 2, logs: None, args: vec![] });
        assert_eq!(
            request(&args(&["--summary", "d"])).unwrap(),
            Request { runs: 0, logs: Some("d".into()), args: vec![] }
        );
        for bad in [&[][..], &["0"], &["x"], &["1", "--logs"], &["--summary"]] {
            assert!(request(&args(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_log_says_its_commit_and_exit() {
        let log = format!(
            "{HEADER}0123abcd+changes started 2026-12-02T01:00:00Z args []\nrunning 1 test\n{TRAILER}101 after 12 s\n"
        );
        assert_eq!(header_commit(&log), Some("0123abcd+changes"));
        assert_eq!(trailer_exit(&log), Some(101));
        assert_eq!(trailer_exit("running 1 test\n"), None);
    }

    #[test]
    fn logs_are_numbered_and_a_series_continues() {
        let dir = std::env::temp_dir().join(format!("twice-flake-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        for name in ["1.log", "10.log", "2.log", "notes.txt", "x.log"] {
            fs::write(dir.join(name), "").unwrap();
        }
        assert_eq!(logged_runs(&dir), [1, 2, 10]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
