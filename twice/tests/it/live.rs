//! The live driver: the reference executor binary and misbehaving executors as real
//! subprocesses, the fakes on loopback.
//!
//! The binaries come from `cargo build --workspace --bins` (`cargo xtask test` runs it and sets
//! `TWICE_BIN_DIR`).

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use results::Observed;
use runner::live::{self, ExecutorCommand};
use scenarios::Scenario;

/// The longest one live run may take in these tests before the test fails instead of hanging.
const RUN_WAIT: Duration = Duration::from_secs(180);

fn scenario(text: &str) -> Scenario {
    toml::from_str(text).expect("a valid scenario")
}

/// A fresh directory for one test, under cargo's per-target temp dir.
pub fn fresh_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("live-it").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// The reference executor: in `TWICE_BIN_DIR`, or in `target/debug` next to this test's
/// `deps` directory.
pub fn reference() -> ExecutorCommand {
    const HOW: &str = "run cargo xtask test (or cargo build --workspace --bins first)";
    let dir = match std::env::var_os("TWICE_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let exe = std::env::current_exe().expect("the test binary's path");
            // target/debug/deps/it-HASH → target/debug
            exe.parent().and_then(Path::parent).expect("target/debug").to_path_buf()
        }
    };
    ExecutorCommand::reference_in(&dir).unwrap_or_else(|e| panic!("{e}; {HOW}"))
}

/// Runs a scenario on its own thread, failing the test if the run does not return.
fn run(text: &str, executor: ExecutorCommand, dir: &Path) -> Observed {
    let s = scenario(text);
    let dir = dir.to_path_buf();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(live::run_blocking(&s, 11, &executor, &dir));
    });
    let observed = rx
        .recv_timeout(RUN_WAIT)
        .unwrap_or_else(|_| panic!("the live run did not return within {RUN_WAIT:?}"))
        .expect("the scenario sets up");
    for m in &observed.timeline {
        println!("{:>15} {:<10} {:<10} {}", m.at_ms, m.lane, m.kind, m.detail);
    }
    for (service, journal) in &observed.journals {
        for e in journal {
            let faults: Vec<&str> = e.faults.iter().map(|f| f.fault.as_str()).collect();
            println!(
                "{:>15} {service:<10} {} {} {} {:?} {faults:?}",
                e.at_ms, e.method, e.path, e.outcome, e.status
            );
        }
    }
    println!("claims: {}", serde_json::to_string(&observed.claims).unwrap());
    println!("executor_error: {:?}", observed.executor_error);
    observed
}

/// The reference executor did everything right: one effect per intent, every claim confirmed.
fn assert_clean(observed: &Observed, service: &str, intents: &[&str]) {
    assert_eq!(observed.executor_error, None);
    assert_eq!(observed.acknowledged, intents);
    assert_eq!(
        observed.ledgers[service].len(),
        intents.len(),
        "one effect per intent: {:?}",
        observed.ledgers
    );
    let claims: Vec<(&str, &str)> =
        observed.claims.iter().map(|c| (c.id.as_str(), c.state.as_str())).collect();
    let want: Vec<(&str, &str)> = intents.iter().map(|i| (*i, "confirmed")).collect();
    assert_eq!(claims, want);
    for id in intents {
        let detail = format!("{id} -> confirmed");
        assert!(
            observed.timeline.iter().any(|m| m.kind == "state" && m.detail == detail),
            "the executor's events reach the timeline: {detail}"
        );
    }
}

fn has_moment(observed: &Observed, lane: &str, kind: &str) -> bool {
    observed.timeline.iter().any(|m| m.lane == lane && m.kind == kind)
}

const LOST_REPLY: &str = r#"
name = "lost-reply"
[services.payments]
settle_ms_max = 500
key_retention_ms = 60000
[[intents]]
id = "refund"
action = "payments.refund"
params = { payment_intent = "pi_1", amount = 1000 }
[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 1
fault = "drop_after_commit"
"#;

#[test]
fn a_lost_reply_leaves_one_refund_and_a_confirmed_claim() {
    let observed = run(LOST_REPLY, reference(), &fresh_dir("lost-reply"));
    assert_clean(&observed, "payments", &["refund"]);
    let faults: Vec<&str> = observed.journals["payments"]
        .iter()
        .flat_map(|e| e.faults.iter().map(|f| f.fault.as_str()))
        .collect();
    assert_eq!(faults, ["drop_after_commit"], "the scenario's fault fired, and only it");
}

const CRASH_AT_REQUEST: &str = r#"
name = "crash-at-request"
[services.payments]
settle_ms_max = 500
key_retention_ms = 60000
[[intents]]
id = "refund"
action = "payments.refund"
params = { payment_intent = "pi_1", amount = 1000 }
[[events]]
at = { service = "payments", method = "POST", path = "/v1/refunds", nth = 1 }
do = "crash"
"#;

#[test]
fn a_crash_at_a_request_point_is_a_sigkill_and_a_restart_on_the_same_state() {
    let observed = run(CRASH_AT_REQUEST, reference(), &fresh_dir("crash-at-request"));
    assert_clean(&observed, "payments", &["refund"]);
    assert!(has_moment(&observed, "w1", "crash"));
    let starts: Vec<&str> = observed
        .timeline
        .iter()
        .filter(|m| m.lane == "w1" && m.kind == "start")
        .map(|m| m.detail.as_str())
        .collect();
    assert_eq!(starts, ["incarnation 1", "incarnation 2"]);
    // The first request committed and its reply never arrived: the point held it, and the
    // hold is not in the journal.
    let first = &observed.journals["payments"].iter().find(|e| e.method == "POST").expect("a POST").faults;
    assert!(first.is_empty(), "{first:?}");
}

const ERROR_AFTER_COMMIT: &str = r#"
name = "error-after-commit"
[services.workspaces]
settle_ms_max = 500
[[intents]]
id = "ws"
action = "workspaces.create"
params = { external_id = "ext-1", name = "Acme" }
[[faults]]
service = "workspaces"
method = "POST"
path = "/v1/workspaces"
nth = 1
fault = "error_after_commit"
"#;

#[test]
fn an_error_after_commit_on_workspaces_leaves_one_workspace() {
    let observed = run(ERROR_AFTER_COMMIT, reference(), &fresh_dir("error-after-commit"));
    assert_clean(&observed, "workspaces", &["ws"]);
}

const PAUSE_PAST_LEASE: &str = r#"
name = "pause-past-lease"
[limits]
request_timeout_ms = 1000
lease_ms = 2000
[services.workspaces]
settle_ms_max = 500
fencing = true
[[intents]]
id = "ws"
action = "workspaces.create"
params = { external_id = "ext-1", name = "Acme" }
[[events]]
at = { service = "workspaces", method = "POST", nth = 1 }
do = "pause"
for_ms = 3500
[[events]]
at = { service = "workspaces", method = "POST", nth = 1 }
do = "start_worker"
worker = "w2"
"#;

#[test]
fn a_pause_past_the_lease_with_a_second_worker_leaves_one_workspace() {
    let observed = run(PAUSE_PAST_LEASE, reference(), &fresh_dir("pause-past-lease"));
    assert_clean(&observed, "workspaces", &["ws"]);
    assert!(has_moment(&observed, "w1", "pause"));
    assert!(has_moment(&observed, "w1", "resume"));
    assert!(has_moment(&observed, "w2", "start"));
    let taken_over = observed.timeline.iter().any(|m| m.lane == "w2" && m.detail == "ws -> confirmed");
    assert!(taken_over, "the second worker resolves the intent once the lease has run out");
}

// ---------------------------------------------------------------------------------------------
// Misbehaving executors

/// A scenario with two intents, for executors that break somewhere in it.
const TWO_REFUNDS: &str = r#"
name = "two-refunds"
[limits]
request_timeout_ms = 500
lease_ms = 1000
[services.payments]
settle_ms_max = 200
[[intents]]
id = "r1"
action = "payments.refund"
params = { payment_intent = "pi_1", amount = 100 }
[[intents]]
id = "r2"
action = "payments.refund"
params = { payment_intent = "pi_2", amount = 100 }
"#;

/// The start of every script: answers requests by type with `answer(msg, type, **fields)`.
const PRELUDE: &str = r#"
import json, sys, time
def answer(msg, kind, **fields):
    fields.update({"type": kind, "in_reply_to": msg["msg_id"]})
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()
"#;

/// Writes a python3 script into `dir` and returns the command that runs it.
fn script(dir: &Path, body: &str) -> ExecutorCommand {
    let path = dir.join("executor.py");
    std::fs::write(&path, format!("{PRELUDE}\n{body}")).expect("write the script");
    ExecutorCommand::parse(&format!("python3 -u '{}'", path.display())).expect("a command line")
}

fn error_of(observed: &Observed) -> &str {
    observed.executor_error.as_deref().expect("an executor error")
}

#[test]
fn garbage_on_stdout_is_a_protocol_violation() {
    let dir = fresh_dir("garbage");
    // The classic mistake: logging to stdout.
    let executor = script(
        &dir,
        r#"
for line in sys.stdin:
    msg = json.loads(line)
    if msg["type"] == "init":
        answer(msg, "init_ok", executor={"name": "chatty"}, actions=["payments.refund"])
    else:
        print("INFO recording", msg["intent"]["id"], flush=True)
"#,
    );
    let observed = run(TWO_REFUNDS, executor, &dir);
    assert!(observed.acknowledged.is_empty());
    let error = error_of(&observed);
    assert!(error.contains("worker w1 broke the protocol during propose"), "{error}");
    assert!(error.contains("not JSON") && error.contains("INFO recording r1"), "{error}");
}

#[test]
fn an_executor_that_never_answers_init_is_reported() {
    let dir = fresh_dir("silent-init");
    let executor =
        script(&dir, "sys.stderr.write('thinking very hard\\n'); sys.stderr.flush(); time.sleep(600)\n");
    let observed = run(TWO_REFUNDS, executor, &dir);
    let error = error_of(&observed);
    assert!(error.contains("worker w1 did not answer init within"), "{error}");
    assert!(error.contains("thinking very hard"), "stderr is quoted: {error}");
}

#[test]
fn an_executor_that_hangs_mid_run_is_reported() {
    let dir = fresh_dir("hang");
    let executor = script(
        &dir,
        r#"
for line in sys.stdin:
    msg = json.loads(line)
    if msg["type"] == "init":
        answer(msg, "init_ok", executor={"name": "hangs"}, actions=["payments.refund"])
    elif msg["type"] == "propose":
        answer(msg, "propose_ok")
    else:
        time.sleep(600)
"#,
    );
    let observed = run(TWO_REFUNDS, executor, &dir);
    assert_eq!(observed.acknowledged, ["r1", "r2"]);
    let error = error_of(&observed);
    assert!(error.contains("worker w1 did not answer drain within"), "{error}");
}

#[test]
fn an_executor_that_exits_mid_run_is_reported_with_its_status_and_stderr() {
    let dir = fresh_dir("exit-3");
    let executor = script(
        &dir,
        r#"
proposals = 0
for line in sys.stdin:
    msg = json.loads(line)
    if msg["type"] == "init":
        answer(msg, "init_ok", executor={"name": "exits"}, actions=["payments.refund"])
    elif msg["type"] == "propose":
        proposals += 1
        if proposals == 2:
            sys.stderr.write("fatal: out of cheese\n")
            sys.exit(3)
        answer(msg, "propose_ok")
"#,
    );
    let observed = run(TWO_REFUNDS, executor, &dir);
    assert_eq!(observed.acknowledged, ["r1"]);
    let error = error_of(&observed);
    assert!(error.contains("worker w1 exited with status 3 during propose"), "{error}");
    assert!(error.contains("fatal: out of cheese"), "{error}");
}

#[test]
fn an_executor_that_cannot_start_is_reported() {
    let dir = fresh_dir("no-such-program");
    let executor = ExecutorCommand::parse("/nonexistent/twice-no-such-executor --flag").unwrap();
    let observed = run(TWO_REFUNDS, executor, &dir);
    let error = error_of(&observed);
    assert!(
        error.contains("worker w1 did not start: cannot run `/nonexistent/twice-no-such-executor --flag`"),
        "{error}"
    );
}

#[test]
fn a_second_worker_that_dies_in_the_background_is_reported() {
    let dir = fresh_dir("background-exit");
    let executor = script(
        &dir,
        r#"
worker = None
for line in sys.stdin:
    msg = json.loads(line)
    if msg["type"] == "init":
        worker = msg["worker_id"]
        answer(msg, "init_ok", executor={"name": "fragile"}, actions=["payments.refund"])
    elif worker == "w2":
        sys.stderr.write("w2: cannot open the state\n")
        sys.exit(4)
    elif msg["type"] == "status":
        answer(msg, "status_ok", intents=[])
    else:
        answer(msg, msg["type"] + "_ok")
"#,
    );
    let text = format!(
        "{TWO_REFUNDS}\n[[events]]\nat = {{ after_phase = \"act\" }}\ndo = \"start_worker\"\nworker = \"w2\"\n"
    );
    let observed = run(&text, executor, &dir);
    assert_eq!(observed.acknowledged, ["r1", "r2"]);
    let error = error_of(&observed);
    assert!(error.contains("worker w2 exited with status 4 during drain"), "{error}");
    assert!(error.contains("w2: cannot open the state"), "{error}");
}

/// The catalog scenarios whose live timing is tightest: lost and late replies, pauses past the
/// lease with a takeover, crashes at request points, a replacement behind an unknown intent.
const TIMING_SENSITIVE: [&str; 12] = [
    "lost_refund_reply",
    "fault_commit_after_timeout",
    "unknown_state_required",
    "stale_worker_overwrite",
    "stale_worker_after_lookup",
    "files_stale_worker_overwrite",
    "files_stale_worker_after_read",
    "second_worker_same_state",
    "crash_while_refund_in_flight",
    "crash_during_reconciliation",
    "chain_nonce_trap",
    "amount_changed_while_unknown",
];
/// Live runs compared with the live baseline recorded by the first one.
const BASELINE_RERUNS: usize = 5;

/// A live baseline holds live: five more live runs of the reference executor on the timing-
/// sensitive scenarios, each compared with the baseline the first recorded, report no change at
/// all (a live comparison leaves attempt counts out; verdicts, final states and effects are
/// what must not move).
#[test]
fn a_live_baseline_reports_no_regression_over_five_reruns() {
    use reports::baseline;
    use runner::run::{self, Driver, Quiet, RunContext};

    let dir = fresh_dir("live-baseline");
    let cases = catalog_cases(&TIMING_SENSITIVE);
    let driver = Driver::Live(reference());
    let jobs = runner::pipeline::LIVE_JOBS_DEFAULT;
    let live_run = |n: usize| {
        let results = run::run_cases(
            &cases,
            &RunContext::new(1, &driver, &dir.join(format!("run-{n}")), "twice run --live"),
            jobs,
            &Quiet,
        );
        run::results(1, &driver, None, results)
    };
    let first = live_run(0);
    assert_eq!(first.totals.passed, cases.len(), "{}", run::summary(&first));
    let saved_dir = dir.join("baseline");
    baseline::write(&saved_dir, &first).expect("the baseline is written");
    let saved = baseline::read(&saved_dir).expect("the baseline reads back");
    for n in 1..=BASELINE_RERUNS {
        let again = live_run(n);
        let comparison = baseline::compare(&saved, &again).expect("comparable runs");
        assert_eq!(
            (comparison.regressions(), comparison.changed.len()),
            (0, 0),
            "rerun {n}:\n{}",
            comparison.render("the live baseline")
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The catalog scenarios that use each event, for comparing what the two backends say.
const EVENTFUL: [&str; 7] = [
    "crash_while_refund_in_flight",
    "crash_during_reconciliation",
    "second_worker_same_state",
    "stale_worker_overwrite",
    "clock_jump_inside_terms",
    "reconciliation_required",
    "chain_stale_nonce",
];

/// Sim and live are two backends of one engine: on scenarios that crash, pause, start a second
/// worker, jump a clock, heal and ask for a pass, the reference executor gets the same verdict
/// from each (invariant by invariant, status and all) and the same hazards.
#[test]
fn sim_and_live_give_the_same_verdicts_on_scenarios_with_every_event() {
    use runner::run::{self, Driver, Quiet, RunContext};

    let dir = fresh_dir("sim-and-live");
    let cases = catalog_cases(&EVENTFUL);
    let verdicts = |driver: Driver<'_>| -> Vec<(String, Vec<String>, Vec<String>)> {
        let jobs = runner::pipeline::LIVE_JOBS_DEFAULT;
        run::run_cases(&cases, &RunContext::new(1, &driver, &dir, "twice run"), jobs, &Quiet)
            .into_iter()
            .map(|r| {
                let verdicts = r.verdicts.iter().map(|v| format!("{} {:?}", v.invariant, v.status)).collect();
                let hazards = r.hazards.iter().map(|h| h.kind.clone()).collect();
                (r.name, verdicts, hazards)
            })
            .collect()
    };
    let sim = verdicts(Driver::Sim(&runner::sim::Reference));
    let live = verdicts(Driver::Live(reference()));
    assert_eq!(sim, live);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Catalog scenarios by name, as cases.
fn catalog_cases(names: &[&str]) -> Vec<runner::run::Case> {
    names
        .iter()
        .map(|name| runner::run::Case {
            scenario: scenarios::catalog::find(name).expect("in the catalog").expect("valid"),
            source: results::Source::Catalog,
        })
        .collect()
}
