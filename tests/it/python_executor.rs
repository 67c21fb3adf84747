//! The conformance kit: the Python executor of `examples/executors/python`, built on the real
//! SDKs (stripe-python, boto3, web3.py, resend, requests), run live against the whole catalog; its
//! single-worker variant (no leases, no fencing tokens) passing the catalog and generated cases
//! with only hazards to show for what it skips; each of its classic bugs (`--bug NAME`) caught
//! by its scenarios with the invariant it breaks (or, for a safeguard skipped where nothing
//! exploits it, listed as a hazard that `--strict` fails); and an executor that announces only
//! some actions judged on those alone.
//!
//! The interpreter is the venv's, from `TWICE_PYTHON` (set by `cargo xtask test`). Every wait
//! is bounded by the live driver itself (each request to a worker, each phase). The tests take
//! turns on the machine ([`machine`]): each runs [`JOBS`] cases at a time, as `twice run` does
//! live by default, and a live case's timing is what it rehearses.

use std::path::{Path, PathBuf};

use checker::{
    self, EXPECTED_STATES, HAZARD_KEY_PAST_RETENTION, HAZARD_NO_FENCING_TOKEN, HAZARD_NO_PRECONDITION,
    HONEST_TERMINAL_STATES, LINEAGE, NO_DUPLICATE_EFFECT, NO_STALE_WRITE, NO_UNAUTHORISED_EFFECT,
    NOTHING_LOST, REFUSAL_RESPECTED, WORKFLOW,
};
use results::{Outcome, ScenarioResult, Source};
use runner::live::ExecutorCommand;
use runner::run::{self, Case, Driver, RunContext};

pub(super) use crate::examples::machine;
use crate::examples::{BugRow, JOBS, Quiet, SEED, bug_table, catalog_cases, clean, describe};

/// Generated cases the single-worker variant must pass, after the catalog.
const SINGLE_WORKER_CASES: u64 = 40;

/// `$TWICE_PYTHON examples/executors/python/executor.py ARGS...`.
pub(super) fn python_executor(args: &[&str]) -> ExecutorCommand {
    let python = std::env::var_os("TWICE_PYTHON").unwrap_or_else(|| {
        panic!(
            "TWICE_PYTHON is not set: the Python executor runs on the SDKs pinned in \
             tests/requirements.txt and needs the interpreter of their venv. Run the tests with \
             `cargo xtask test`, which builds target/twice-venv and sets TWICE_PYTHON, or set \
             TWICE_PYTHON=target/twice-venv/bin/python yourself."
        )
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/executors/python/executor.py");
    assert!(script.is_file(), "no Python executor at {}", script.display());
    let mut words = vec![script.display().to_string()];
    words.extend(args.iter().map(|a| a.to_string()));
    ExecutorCommand { program: PathBuf::from(python), args: words }
}

/// A fresh directory for one test's runs, private to this process.
pub(super) fn work_dir(test: &str) -> PathBuf {
    crate::examples::work_dir("python-executor", test)
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_python_executor_passes_the_whole_catalog_live() {
    crate::examples::passes_the_whole_catalog("Python", "python-executor", python_executor(&[]));
}

/// The other honest ending of a write refused for a person's decision: `failed`, never sent
/// again, steps after it cancelled. The catalog accepts it wherever it accepts `escalated`.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_python_executor_that_ends_refusals_failed_passes_the_whole_catalog_live() {
    crate::examples::passes_the_whole_catalog(
        "Python (--refusals failed)",
        "python-executor-refusals-failed",
        python_executor(&["--refusals", "failed"]),
    );
}

/// An executor without `files.put` refuses the puts as unsupported, and the harness proposes
/// no step after one: every scenario passes, judged on what the executor supports.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_python_executor_without_files_put_passes_the_whole_catalog_live() {
    crate::examples::passes_the_whole_catalog(
        "Python (without files.put)",
        "python-executor-without-files",
        python_executor(&["--actions", "payments.refund,workspaces.create,chain.transfer,messages.send"]),
    );
}

/// The live sample of docs/accuracy.md's grid: the executor picking its own timing inside the
/// announced limits (`--timing short`: a request timeout of at most 200 ms, a 25 ms margin,
/// half the lease, a 1 ms pause; `--timing long`: a 500 ms margin and a 200 ms pause) passes
/// the whole catalog, and each of its bugs is still caught by its scenarios.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn at_short_and_long_timings_the_python_executor_passes_the_catalog_and_its_bugs_are_caught() {
    for timing in ["short", "long"] {
        crate::examples::passes_the_whole_catalog(
            &format!("Python (--timing {timing})"),
            &format!("python-executor-timing-{timing}"),
            python_executor(&["--timing", timing]),
        );
        bug_table(&format!("python-executor-timing-{timing}"), VARIANTS, HAZARD_VARIANTS, |bug| {
            python_executor(&["--bug", bug, "--timing", timing])
        });
    }
}

/// An executor that only ever runs as one process needs no leases and no fencing tokens. Where
/// a scenario starts a second worker and nothing exploits what it skips, the verdict must say
/// so: no violation, a hazard (with the scenario that would exploit it); its row versions in
/// the shared log keep a woken worker's stale decisions from being written, which is why it
/// passes the whole catalog. A generated takeover can still stop the first worker between
/// recording a send and making it, and then both workers send: a failure there is real (the
/// ledger holds the effect twice), and it is the only kind of failure this executor may have.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_single_worker_variant_fails_only_where_a_second_worker_did_harm() {
    let _turn = machine();
    let dir = work_dir("single-worker");
    let mut cases = catalog_cases();
    for index in 0..SINGLE_WORKER_CASES {
        let scenario = scenarios::generate::case(SEED, index).expect("the generator works");
        cases.push(Case { scenario, source: Source::Generated { index } });
    }
    let driver = Driver::Live(python_executor(&["--single-worker"]));
    let results = run::run_cases(&cases, &RunContext::new(SEED, &driver, &dir, "twice run"), JOBS, &Quiet);
    clean(&dir);
    let mut problems = Vec::new();
    for (case, result) in cases.iter().zip(&results).filter(|(_, r)| r.outcome != Outcome::Passed) {
        let takeover = case
            .scenario
            .events
            .iter()
            .any(|e| matches!(e.action, scenarios::EventAction::StartWorker { .. }));
        let doubled = checker::violations(&result.verdicts)
            .any(|v| v.invariant == NO_DUPLICATE_EFFECT || v.invariant == NO_STALE_WRITE);
        let generated = matches!(case.source, Source::Generated { .. });
        if !(generated && takeover && doubled && result.outcome == Outcome::Violated) {
            problems.push(describe(result));
        }
    }
    assert!(
        problems.is_empty(),
        "the single-worker variant failed where no second worker did harm:\n{}",
        problems.join("\n")
    );
    let with = |kind: &str| -> Vec<&str> {
        results.iter().filter(|r| r.hazards.iter().any(|h| h.kind == kind)).map(|r| r.name.as_str()).collect()
    };
    let unfenced = with(HAZARD_NO_FENCING_TOKEN);
    for scenario in ["stale_worker_overwrite", "stale_worker_after_lookup", "fault_reject"] {
        assert!(
            unfenced.contains(&scenario),
            "{scenario} lists no {HAZARD_NO_FENCING_TOKEN} hazard: {unfenced:?}"
        );
    }
    let hazard = results
        .iter()
        .flat_map(|r| &r.hazards)
        .find(|h| h.kind == HAZARD_NO_FENCING_TOKEN)
        .expect("a hazard");
    assert_eq!(hazard.exploited_by, "stale_worker_overwrite");
    assert!(hazard.command.ends_with("--scenario stale_worker_overwrite"), "{hazard:?}");
    let preconditions = with(HAZARD_NO_PRECONDITION);
    assert!(preconditions.is_empty(), "it keeps its preconditions: {preconditions:?}");
}

/// Each classic bug of the Python executor (`--bug NAME`, one `if bugs.BUG == ...` each), the
/// catalog scenario that catches it, and the invariant that scenario must report broken. The
/// same table is in `examples/executors/python/README.md`.
const VARIANTS: &[BugRow] = &[
    // The refund holds the whole payment, so the keyless resend is refused, and the refusal is
    // believed: failed beside the refund.
    ("naive-retry", "lost_refund_reply", HONEST_TERMINAL_STATES),
    ("naive-retry", "timeout_taken_as_no", NO_DUPLICATE_EFFECT),
    // The resend under the still-retained key goes out under a new one instead.
    ("key-per-attempt", "timeout_taken_as_no", NO_DUPLICATE_EFFECT),
    ("key-per-attempt", "workspace_created_twice", NO_DUPLICATE_EFFECT),
    // One of two partial refunds of a payment goes twice, beside its honest sibling (of
    // another amount, or of the same).
    ("key-per-attempt", "partial_refund_reply_lost", NO_DUPLICATE_EFFECT),
    ("key-per-attempt", "equal_partial_refunds_reply_lost", NO_DUPLICATE_EFFECT),
    ("memory-only", "crash_after_record", NOTHING_LOST),
    ("memory-only", "crash_while_refund_in_flight", NOTHING_LOST),
    ("timeout-as-failure", "timeout_taken_as_no", HONEST_TERMINAL_STATES),
    ("trust-200", "silent_noop_refund", HONEST_TERMINAL_STATES),
    ("trust-200", "fault_silent_noop", HONEST_TERMINAL_STATES),
    // The email API accepts the message and drops it: the 200 is believed, and the inbox (and
    // the ledger) hold nothing.
    ("trust-202", "messages_accepted_not_delivered", HONEST_TERMINAL_STATES),
    ("re-sign-after-timeout", "chain_nonce_trap", NO_DUPLICATE_EFFECT),
    ("replacement-while-unknown", "amount_changed_while_unknown", LINEAGE),
    // No leases, no row versions, a token that never changes: the woken worker's create (or
    // put with `If-Match: *`) lands on top of its successor's.
    ("constant-fencing-token", "stale_worker_overwrite", NO_STALE_WRITE),
    ("constant-fencing-token", "files_stale_worker_after_read", NO_STALE_WRITE),
    // After a restart the whole workflow runs again: the draft, which had taken effect, is
    // written a second time.
    ("redo-workflow", "draft_saved_after_lost_reply", NO_DUPLICATE_EFFECT),
    // The approval's ETag is read from a lagging HEAD of the draft: yesterday's.
    ("re-resolve", "step_resolved_once", WORKFLOW),
    // The 403 lasts one request: the retry goes through, a refund nobody decided on.
    ("retry-403", "refund_permission_denied", REFUSAL_RESPECTED),
    // The workspace's 422, answered while the worker is stopped, is not held against it; the
    // refund's 403, read once it runs, is.
    ("retry-403", "refusal_answered_while_paused", REFUSAL_RESPECTED),
    // Every delivery is new work, done in the handler: the second one, at once or after the
    // lost 200, starts the email again under a new key and sends it.
    ("webhook-no-dedupe", "fault_duplicate_webhook", NO_DUPLICATE_EFFECT),
    ("webhook-no-dedupe", "fault_lose_webhook_ack", NO_DUPLICATE_EFFECT),
    // Answered 200 with the event in memory only, then killed as it reads the payment: the
    // service never sends the event again, and the email never goes.
    ("webhook-ack-first", "webhook_crash_before_acting", EXPECTED_STATES),
    // No signature check, and the body's "succeeded" believed: the forgery starts order 2's
    // welcome, which nobody paid for.
    ("webhook-trusts-body", "webhook_forged_payment", NO_UNAUTHORISED_EFFECT),
];

/// Bugs whose skipped safeguard no catalog scenario can exploit against this executor, because
/// something else it does right stands in for it: with its leases checked right before every
/// send and its row versions, `no-fencing` leaves no gap a stopped worker can use; with its
/// read-back before it believes a refusal of a resend, `resend-after-key-expiry` leaves no
/// false claim where the resend is refused. Each scenario here must pass, list the hazard, and
/// fail under `--strict`.
const HAZARD_VARIANTS: &[BugRow] = &[
    ("no-fencing", "stale_worker_overwrite", HAZARD_NO_FENCING_TOKEN),
    ("no-fencing", "stale_worker_after_lookup", HAZARD_NO_FENCING_TOKEN),
    ("no-fencing", "files_stale_worker_overwrite", HAZARD_NO_PRECONDITION),
    ("no-fencing", "files_stale_worker_after_read", HAZARD_NO_PRECONDITION),
    // The expired key executes the refund again, and the payment, which cannot take it,
    // refuses it (400 amount_too_large). A refusal that needs a decision is never believed
    // where an earlier send may have landed: the read-back finds the first refund.
    ("resend-after-key-expiry", "key_expired_before_reconciliation", HAZARD_KEY_PAST_RETENTION),
];

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn every_python_bug_is_caught_by_its_scenarios_naming_its_invariant() {
    bug_table("python-executor", VARIANTS, HAZARD_VARIANTS, |bug| python_executor(&["--bug", bug]));
}

/// The catalog's eight webhook scenarios (docs/webhooks.md), live: every intent a genuine
/// event starts is carried out once, the one only a forged event asks for is never started,
/// and the payments journal shows the design of `webhooks.py`: the endpoint is registered by
/// the worker's first life under a key of its own (a restarted life moves it, never makes
/// another), each genuine event's payment is read from the API, and nothing is read for a
/// forgery, which is refused at its signature.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_python_executor_receives_webhooks_in_the_catalogs_webhook_scenarios() {
    let driver = Driver::Live(python_executor(&[]));
    crate::example_webhooks::receives_webhooks("python-executor", &driver, journal_problems);
}

/// What the payments journal of a passed webhook scenario shows against `webhooks.py`'s design.
fn journal_problems(case: &Case, result: &ScenarioResult) -> Vec<String> {
    let name = &case.scenario.name;
    let mut problems = Vec::new();
    let payments = result.observed.journals.get("payments").map(Vec::as_slice).unwrap_or_default();
    let reads_of = |payment_intent: &str| {
        let path = format!("/v1/payment_intents/{payment_intent}");
        payments.iter().filter(|e| e.method == "GET" && e.path == path).count()
    };
    for spec in &case.scenario.intents {
        let Some(trigger) = &spec.on_event else { continue };
        let reads = reads_of(&trigger.payment_intent);
        if (reads == 0) != trigger.forged {
            problems.push(format!("{name}: {} read {} {reads} times", spec.id, trigger.payment_intent));
        }
    }
    for entry in payments.iter().filter(|e| e.method == "POST" && e.path.starts_with("/v1/webhook_endpoints"))
    {
        let origin = entry.origin.as_deref().unwrap_or("");
        let create = entry.path == "/v1/webhook_endpoints";
        let own_key = entry.idempotency_key.as_deref().is_some_and(|k| k.starts_with("twice-endpoint-w1-"));
        if create && !(origin == "w1#1" && own_key) {
            problems.push(format!("{name}: an endpoint made by {origin} under {:?}", entry.idempotency_key));
        }
        if !create && origin == "w1#1" {
            problems.push(format!("{name}: the first life moved an endpoint: {}", entry.path));
        }
    }
    problems
}

/// A registration is a write like any other (`webhooks.py`'s `register`, `confirm_endpoint`
/// and `recover_missed_events`): [`crate::example_webhooks::recovers_from_registration_troubles`].
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_python_executor_recovers_from_each_trouble_of_its_webhook_registration() {
    let driver = Driver::Live(python_executor(&[]));
    crate::example_webhooks::recovers_from_registration_troubles("python-executor", &driver);
}

/// A refund whose reply is lost, a workspace, an object and a transfer: the first two are
/// what the executor announces below, the others are not.
const MIXED: &str = r#"
name = "mixed_actions"
description = "Four actions; the executor under test supports two of them."

[services.payments]
key_retention_ms = 2000
settle_ms_max = 500

[services.workspaces]
key_retention_ms = 2000
settle_ms_max = 500

[services.files]
settle_ms_max = 500

[services.chain]
settle_ms_max = 500

[[intents]]
id = "refund-1"
action = "payments.refund"
params = { payment_intent = "pi_mixed", amount = 700 }

[[intents]]
id = "ws-1"
action = "workspaces.create"
params = { external_id = "mixed-co", name = "Mixed Co" }

[[intents]]
id = "put-1"
action = "files.put"
params = { bucket = "reports", key = "mixed/summary.txt", body = "revenue 10" }

[[intents]]
id = "transfer-1"
action = "chain.transfer"
params = { to = "0x00000000000000000000000000000000000000c1", value = "1000000000000000000" }

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 1
fault = "drop_after_commit"

[expect]
refund-1 = "confirmed"
ws-1 = "confirmed"
"#;

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn an_executor_with_fewer_actions_is_judged_on_those_and_the_rest_are_unsupported() {
    let _turn = machine();
    let dir = work_dir("actions");
    let scenario = scenarios::parse_scenario(MIXED, "mixed_actions.toml").expect("the scenario is valid");
    let case = Case { scenario, source: Source::File { path: "mixed_actions.toml".into() } };
    let driver = Driver::Live(python_executor(&["--actions", "payments.refund,workspaces.create"]));
    let result = run::run_case(&case, &RunContext::new(SEED, &driver, &dir, "twice run"));
    clean(&dir);
    assert_eq!(result.outcome, Outcome::Passed, "{}", describe(&result));
    let intent = |id: &str| {
        result.intents.iter().find(|i| i.id == id).unwrap_or_else(|| panic!("no intent {id} in the result"))
    };
    for id in ["refund-1", "ws-1"] {
        let i = intent(id);
        assert!(!i.unsupported, "{id} is supported: {i:?}");
        assert_eq!(i.state.as_deref(), Some("confirmed"), "{id}: {i:?}");
        assert_eq!(i.effects.len(), 1, "{id}: {i:?}");
    }
    for id in ["put-1", "transfer-1"] {
        let i = intent(id);
        assert!(i.unsupported, "{id} is reported unsupported: {i:?}");
        // Refused at propose (code 10), so never recorded, never claimed, never executed.
        assert_eq!(i.state, None, "{id}: {i:?}");
        assert!(i.effects.is_empty(), "{id}: {i:?}");
    }
    let unsupported = &result.observed.unsupported;
    assert!(
        unsupported.contains(&"files.put".to_string()) && unsupported.contains(&"chain.transfer".to_string()),
        "{unsupported:?}"
    );
}

/// `twice run` as a user runs it, with `args`, in `dir`: the exit code, and stderr.
fn twice_run(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(crate::process::bin("twice"))
        .arg("run")
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("twice runs");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A live run's failing generated case shrinks within `--shrink-budget`: the progress says
/// which failure, how many steps and how much time is left, and results.json (and the
/// summary) says how far shrinking got and why it stopped; `--shrink-budget 0` does not shrink.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn live_shrinking_stops_at_its_budget_and_says_how_far_it_got() {
    let _turn = machine();
    let dir = work_dir("shrink-budget");
    // Seed 1, case 0: seven steps, among them commits held past the client's timeout, which
    // this bug takes for a "no"; shrinking it takes candidate runs of seconds each (timeouts
    // and settle waits), far more than the budget allows.
    let executor = python_executor(&["--bug", "timeout-as-failure"]).to_string();
    let (code, stderr) = twice_run(
        &dir,
        &["--executor", &executor, "--generated", "0", "--shrink-budget", "3s", "--report-dir", "budget"],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("shrinking 1 failing generated case"), "{stderr}");
    assert!(stderr.contains("generated-0:") && stderr.contains("stopped: time budget"), "{stderr}");
    let results = reports::json::read(&dir.join("budget")).expect("results.json reads back");
    let failed = &results.results[0];
    let shrink = failed.shrink.as_ref().unwrap_or_else(|| panic!("no shrink report: {}", describe(failed)));
    assert_eq!(shrink.stopped, results::SHRINK_BUDGET, "{shrink:?}");
    assert!(shrink.steps_after <= shrink.steps_before, "{shrink:?}");
    let minimal = failed.shrunk.as_deref().expect("the smallest failing scenario found so far is written");
    assert!(dir.join(minimal).is_file(), "{minimal}");
    let summary = std::fs::read_to_string(dir.join("budget").join("summary.md")).expect("summary.md");
    assert!(summary.contains("stopped: time budget"), "{summary}");

    let (code, stderr) = twice_run(
        &dir,
        &["--executor", &executor, "--generated", "0", "--shrink-budget", "0", "--report-dir", "off"],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(!stderr.contains("shrinking"), "{stderr}");
    let results = reports::json::read(&dir.join("off")).expect("results.json reads back");
    assert_eq!((&results.results[0].shrink, &results.results[0].shrunk), (&None, &None));
    clean(&dir);
}

/// Hazards never change the exit code, except with `--strict`.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn hazards_fail_a_run_only_when_it_is_strict() {
    let _turn = machine();
    let dir = work_dir("strict");
    let executor = python_executor(&["--single-worker"]).to_string();
    let run = |strict: bool| {
        let mut args = vec!["--executor", executor.as_str(), "--scenario", "fault_reject", "--report-dir"];
        args.extend(if strict { ["strict", "--strict"].as_slice() } else { ["lenient"].as_slice() });
        twice_run(&dir, &args)
    };
    let (code, stderr) = run(false);
    assert_eq!(code, Some(0), "{stderr}");
    let (code, stderr) = run(true);
    assert_eq!(code, Some(1), "{stderr}");
    let results = reports::json::read(&dir.join("strict")).expect("results.json reads back");
    assert!(
        results.strict && results.totals.hazards > 0 && results.totals.violated == 0,
        "{:?}",
        results.totals
    );
    clean(&dir);
}

/// Steps that build on steps, through the protocol: the tests the reference executor passes
/// (`executor_workflow.rs`), on the Python executor, and its two workflow bugs, each shown
/// doing the harm it stands for in the ledger. (Catalog scenarios that catch them belong with
/// the harness's workflow support.)
mod workflows {
    use crate::executor_workflow::{self as flow, Under};

    const PYTHON: Under<'static> = Under::Python { bug: None };

    #[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_takes_the_id_of_the_workspace_its_create_made() {
        flow::a_put_takes_the_id_of_the_workspace_its_create_made(PYTHON).await;
    }

    #[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chain_of_three_steps_each_reads_the_step_before() {
        flow::a_chain_of_three_steps_each_reads_the_step_before(PYTHON).await;
    }

    #[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_after_a_failed_intent_is_cancelled_and_never_sent() {
        flow::a_step_after_a_failed_intent_is_cancelled_and_never_sent(PYTHON).await;
    }

    #[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_after_an_escalated_intent_is_escalated_and_never_sent() {
        flow::a_step_after_an_escalated_intent_is_escalated_and_never_sent(PYTHON).await;
    }

    #[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_steps_are_refused_with_code_12_naming_the_problem() {
        flow::malformed_steps_are_refused_with_code_12_naming_the_problem(PYTHON).await;
    }

    #[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_proposed_again_with_other_after_is_another_payload() {
        flow::a_step_proposed_again_with_other_after_is_another_payload(PYTHON).await;
    }

    /// The value recorded before the first send is the one every send carries; with
    /// `--bug re-resolve` the resend reads the predecessor's ETag again, after it changed.
    #[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resend_carries_the_recorded_value_and_re_resolve_does_not() {
        let correct = flow::a_resend_after_the_predecessor_changed(PYTHON).await;
        assert_eq!(correct.sent, correct.recorded, "{correct:?}");
        let buggy =
            flow::a_resend_after_the_predecessor_changed(Under::Python { bug: Some("re-resolve") }).await;
        assert_eq!(buggy.sent, buggy.changed_to, "the bug used another result: {buggy:?}");
        assert_ne!(buggy.sent, buggy.recorded, "{buggy:?}");
    }

    /// A restart before a workflow's last step leaves its completed steps alone; with
    /// `--bug redo-workflow` the completed put is executed again.
    #[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restart_leaves_completed_steps_alone_and_redo_workflow_does_not() {
        let correct = flow::a_restart_before_the_last_step(PYTHON).await;
        assert_eq!((correct.first_step_effects, correct.last_step_effects), (1, 1), "{correct:?}");
        let buggy = flow::a_restart_before_the_last_step(Under::Python { bug: Some("redo-workflow") }).await;
        assert_eq!(buggy.first_step_effects, 2, "the completed step executed again: {buggy:?}");
        assert_eq!(buggy.last_step_effects, 1, "{buggy:?}");
    }
}

/// The Python example keeps its own copy of the action table's workflow columns (which
/// parameter is the business key, which take references, which result fields exist): the
/// copy must say what `vocabulary::ACTIONS` says, or a step the reference executor accepts is
/// refused there.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_python_action_tables_are_the_vocabularys() {
    let command = python_executor(&[]);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/executors/python");
    let script = "import json, actions; print(json.dumps({'result_fields': \
                  {a: list(f) for a, f in actions.RESULT_FIELDS.items()}, 'business_key': actions.BUSINESS_KEY, \
                  'takes_reference': {a: list(p) for a, p in actions.TAKES_REFERENCE.items()}}))";
    let out = std::process::Command::new(&command.program)
        .args(["-c", script])
        .current_dir(&dir)
        .output()
        .expect("the venv's python runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tables: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    crate::examples::the_action_tables_are_the_vocabularys(&tables);
}

/// Workers started together on a new state directory all open the log: see
/// [`crate::examples::opens_a_new_log_while_another_holds_its_lock`].
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_intent_log_opens_while_another_worker_holds_its_lock() {
    let command = python_executor(&[]);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/executors/python");
    crate::examples::opens_a_new_log_while_another_holds_its_lock(
        "python-executor",
        &command.program,
        "python/wal_busy.py",
        &example,
    );
}
