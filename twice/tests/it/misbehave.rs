//! Misbehaving executors against the real `twice` binary: `twice run --executor` and
//! `twice check-executor` on a script (`data/misbehave/executor.py`) that breaks the protocol
//! one way at a time. Each run must end within a bound, name the problem in its verdict, exit
//! as documented, and leave nothing behind: no process of the run (every process the run
//! starts inherits a marker variable from the `twice` process, which the test looks for in
//! the process table) and nothing in the `TMPDIR` it was given.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::live::{fresh_dir, reference};

/// A generous bound on one run of a misbehaving executor: the harness's own bounds are 10 s
/// or less per wait.
const RUN_WAIT: Duration = Duration::from_secs(120);
/// How long processes of an ended run may take to be gone from the process table (a killed
/// process is reaped by whoever is its parent).
const GONE_WAIT: Duration = Duration::from_secs(10);

/// One refund, short bounds: a misbehaviour shows at once or at a harness bound.
const SCENARIO: &str = r#"
name = "misbehave"
[limits]
request_timeout_ms = 500
lease_ms = 1000
[services.payments]
settle_ms_max = 200
[payment_intents]
pi_1 = 1000
[[intents]]
id = "r1"
action = "payments.refund"
params = { payment_intent = "pi_1", amount = 100 }
[expect]
r1 = "confirmed"
"#;

fn python() -> String {
    std::env::var("TWICE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// The command line of the misbehaving script in `mode`; modes that wrap the reference
/// executor get its path.
fn executor(mode: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/data/misbehave/executor.py");
    let mut line = format!("'{}' -u '{}' {mode}", python(), script.display());
    if matches!(mode, "forks" | "noterm") {
        line.push_str(&format!(" '{}'", reference().program.display()));
    }
    line
}

/// What one run of `twice` left.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    /// The most memory the `twice` process held while it ran (VmHWM), in kB.
    peak_rss_kb: u64,
    report: PathBuf,
}

impl Ran {
    /// The one scenario's executor error in results.json.
    fn executor_error(&self) -> String {
        let text = std::fs::read_to_string(self.report.join("results.json")).expect("results.json");
        let results: Value = serde_json::from_str(&text).expect("results.json is JSON");
        let scenario = &results["results"][0];
        assert_eq!(scenario["outcome"], "executor-error", "{scenario}");
        scenario["observed"]["executor_error"].as_str().expect("an executor error").to_string()
    }
}

fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Every process whose environment holds `marker` (`NAME=VALUE`).
fn processes_with(marker: &str) -> Vec<String> {
    super::processes_with(marker)
}

/// Runs `twice ARGS` with a fresh `TMPDIR` and a marker variable, waits (bounded), then
/// checks that no process of the run is left and the `TMPDIR` is empty.
fn twice(name: &str, args: &[&str]) -> Ran {
    let dir = fresh_dir(&format!("misbehave-{name}"));
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let report = dir.join("report");
    let scenario = dir.join("misbehave.toml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let marker_value = format!("{name}-{}", std::process::id());
    let marker = format!("TWICE_TEST_MARKER={marker_value}");
    let (stdout_path, stderr_path) = (dir.join("stdout.txt"), dir.join("stderr.txt"));
    let started = Instant::now();
    let mut child: Child = crate::twice()
        .args(args.iter().map(|a| a.replace("{scenario}", &scenario.to_string_lossy())))
        .arg("--report-dir")
        .arg(&report)
        .env("TMPDIR", &tmp)
        .env("TWICE_TEST_MARKER", &marker_value)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout_path).unwrap())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .expect("run twice");
    let mut peak = 0;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        peak = peak.max(peak_rss_kb(child.id()).unwrap_or(0));
        if started.elapsed() > RUN_WAIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("twice {args:?} did not finish within {RUN_WAIT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    let ran = Ran {
        code,
        stdout: std::fs::read_to_string(&stdout_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&stderr_path).unwrap_or_default(),
        peak_rss_kb: peak,
        report,
    };
    println!(
        "exit {code:?} after {took:?}, peak RSS {peak} kB\n--- stdout\n{}\n--- stderr\n{}",
        ran.stdout, ran.stderr
    );
    let deadline = Instant::now() + GONE_WAIT;
    let mut left = processes_with(&marker);
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        left = processes_with(&marker);
    }
    for process in &left {
        // Leave nothing behind for the next test either.
        if let Some(pid) = process.split(':').next() {
            let _ = std::process::Command::new("kill").args(["-KILL", pid]).status();
        }
    }
    assert!(left.is_empty(), "processes of the run are left: {left:?}");
    let in_tmp: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.path()).collect();
    assert!(in_tmp.is_empty(), "the run left {in_tmp:?} in its TMPDIR");
    ran
}

/// `twice run --executor SCRIPT MODE --scenario misbehave.toml`.
fn run(mode: &str) -> Ran {
    twice(&format!("run-{mode}"), &["run", "--executor", &executor(mode), "--scenario", "{scenario}"])
}

/// `twice check-executor SCRIPT MODE --scenario misbehave.toml`.
fn check(mode: &str) -> Ran {
    twice(
        &format!("check-{mode}"),
        &["check-executor", &executor(mode), "--scenario", "{scenario}", "--threads", "1"],
    )
}

/// A run whose executor misbehaved: exit 1, an executor error in results.json saying `why`.
fn assert_executor_error(ran: &Ran, why: &[&str]) -> String {
    assert_eq!(ran.code, Some(1), "an executor error fails the run, it does not crash the harness");
    let error = ran.executor_error();
    for part in why {
        assert!(error.contains(part), "{part:?} in {error}");
    }
    error
}

/// A check-executor run whose executor breaks `rule`: exit 1, the rule failed with `why`.
fn assert_rule_failed(ran: &Ran, rule: &str, why: &str) {
    assert_eq!(ran.code, Some(1), "a failed rule exits 1");
    let line = ran.stdout.lines().skip_while(|l| !l.contains(&format!("FAIL {rule}"))).nth(1);
    let came = line.unwrap_or_default();
    assert!(came.contains(why), "{rule}: {why:?} in {came:?}\n{}", ran.stdout);
}

#[test]
fn an_executor_that_never_answers_is_an_executor_error() {
    let ran = run("silent");
    assert_executor_error(&ran, &["worker w1 did not answer init within 30000 ms"]);
}

#[test]
fn an_executor_that_answers_garbage_is_an_executor_error() {
    let ran = run("garbage");
    assert_executor_error(&ran, &["broke the protocol during init", "not JSON", "this is not json at all"]);
    let ran = check("garbage");
    assert_rule_failed(&ran, "init-answered", "not JSON");
}

#[test]
fn an_executor_that_writes_half_a_line_and_goes_silent_is_an_executor_error() {
    let ran = run("partial");
    assert_executor_error(&ran, &["worker w1 did not answer init within 30000 ms"]);
}

#[test]
fn a_line_over_the_limit_is_refused_without_reading_it_whole() {
    let ran = run("long");
    assert_executor_error(&ran, &["a stdout line longer than 1048576 bytes"]);
    // 64 MiB came; the harness read at most the limit of it.
    assert!(ran.peak_rss_kb < 60 * 1024, "peak RSS {} kB", ran.peak_rss_kb);
    let ran = check("long");
    assert_rule_failed(&ran, "init-answered", "longer than 1048576 bytes");
}

#[test]
fn an_executor_that_exits_in_the_middle_of_a_reply_is_an_executor_error() {
    let ran = run("exit_mid_reply");
    assert_executor_error(&ran, &["worker w1 exited with status 3 during init", "fatal: gone mid-reply"]);
    let ran = check("exit_mid_reply");
    assert_rule_failed(&ran, "init-answered", "fatal: gone mid-reply");
}

#[test]
fn an_executor_that_stops_reading_its_stdin_is_an_executor_error() {
    let ran = run("deaf");
    assert_executor_error(&ran, &["worker w1 did not answer propose within"]);
}

#[test]
fn a_flood_on_stderr_is_drained_and_only_its_tail_is_kept() {
    let ran = run("flood");
    let error =
        assert_executor_error(&ran, &["worker w1 exited with status 4 during init", "last words: flooded"]);
    assert!(error.len() < 8 * 1024, "a bounded tail: {} bytes", error.len());
    // 200 MB went through; the harness kept a tail of it.
    assert!(ran.peak_rss_kb < 60 * 1024, "peak RSS {} kB", ran.peak_rss_kb);
    let ran = check("flood");
    assert_rule_failed(&ran, "init-answered", "last words: flooded");
}

#[test]
fn children_and_daemons_an_executor_leaves_are_killed_with_it() {
    let ran = run("forks");
    assert_eq!(ran.code, Some(0), "the reference executor behind the wrapper passes");
    let ran = check("forks");
    assert_eq!(ran.code, Some(0), "every rule passes");
}

#[test]
fn an_executor_that_ignores_sigterm_and_lingers_after_shutdown_is_killed() {
    let ran = run("noterm");
    assert_eq!(ran.code, Some(0), "lingering after shutdown_ok is killed, not a verdict");
    let ran = check("noterm");
    assert_rule_failed(&ran, "shutdown-clean", "still running");
}
