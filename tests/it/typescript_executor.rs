//! The TypeScript executor of `examples/executors/typescript`, built on the official Node SDKs
//! (stripe, @aws-sdk/client-s3, viem, resend, fetch), run live against the whole catalog; and
//! each of its classic bugs (`--bug NAME`) caught by its scenarios with the invariant it breaks
//! (or, for a safeguard skipped where nothing exploits it, listed as a hazard that `--strict`
//! fails).
//!
//! The compiled executor is `TWICE_NODE_EXECUTOR` (set by `cargo xtask test`, which runs `npm
//! ci` and `npm run build` in the example first). These tests take turns on the machine with the
//! Python executor's ([`crate::examples::machine`]): each runs `JOBS` cases at a time, as
//! `twice run` does live.

use std::path::PathBuf;

use checker::{
    EXPECTED_STATES, HAZARD_NO_FENCING_TOKEN, HAZARD_NO_PRECONDITION, HONEST_TERMINAL_STATES, LINEAGE,
    NO_DUPLICATE_EFFECT, NO_UNAUTHORISED_EFFECT, NOTHING_LOST, REFUSAL_RESPECTED,
};
use runner::live::ExecutorCommand;

use crate::examples::{BugRow, bug_table};

/// `$TWICE_NODE_EXECUTOR`: the compiled executor, `dist/executor.js` of the example. Unset is a
/// failure, never a skip (under CI or not): a suite that skips what it cannot run says nothing.
pub(super) fn node_executor_script() -> PathBuf {
    let script = std::env::var_os("TWICE_NODE_EXECUTOR").unwrap_or_else(|| {
        panic!(
            "TWICE_NODE_EXECUTOR is not set: the TypeScript executor runs on the Node SDKs pinned in \
             examples/executors/typescript/package-lock.json and must be compiled first. Run the tests \
             with `cargo xtask test`, which runs `npm ci` and `npm run build` there and sets \
             TWICE_NODE_EXECUTOR, or do that yourself and set TWICE_NODE_EXECUTOR to the absolute path \
             of examples/executors/typescript/dist/executor.js."
        )
    });
    let script = PathBuf::from(script);
    assert!(script.is_file(), "TWICE_NODE_EXECUTOR={} is no file", script.display());
    script
}

/// `node $TWICE_NODE_EXECUTOR ARGS...`.
fn node_executor(args: &[&str]) -> ExecutorCommand {
    let mut words = vec![node_executor_script().display().to_string()];
    words.extend(args.iter().map(|a| a.to_string()));
    ExecutorCommand { program: PathBuf::from("node"), args: words }
}

#[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
#[test]
fn the_typescript_executor_passes_the_whole_catalog_live() {
    crate::examples::passes_the_whole_catalog("TypeScript", "typescript-executor", node_executor(&[]));
}

/// The case a careful executor must not be blamed for: the workspace's 422 comes while the
/// worker is stopped past its request timeout. This executor's client reports the timeout (its
/// runs have shown it every time so far), looks the workspace up, finds nothing, and sends the
/// create again under the same key, which lands:
/// `refusal-respected` is not judged, with the stop as the reason, and nothing is a hazard.
/// An executor that reads the answer after the stop instead escalates the create, and the
/// verdict holds: the scenario passes either way.
#[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
#[test]
fn a_refusal_answered_while_it_is_stopped_is_not_held_against_the_typescript_executor() {
    let _turn = crate::examples::machine();
    let dir = crate::examples::work_dir("typescript-executor", "unread-refusal");
    let driver = runner::Driver::Live(node_executor(&[]));
    let result = runner::run::run_case(
        &crate::examples::catalog_case("refusal_answered_while_paused"),
        &runner::run::RunContext::new(crate::examples::SEED, &driver, &dir, "twice run"),
    );
    crate::examples::clean(&dir);
    let described = crate::examples::describe(&result);
    assert_eq!(result.outcome, results::Outcome::Passed, "{described}");
    assert!(result.hazards.is_empty(), "{described}");
    let verdict = result.verdicts.iter().find(|v| v.invariant == REFUSAL_RESPECTED).expect("a verdict");
    let workspace =
        result.intent_briefs().into_iter().find(|i| i.id == "ws-umbrella").expect("the workspace");
    match verdict.status {
        results::Status::NotJudged => {
            let reason = verdict.reason.as_deref().unwrap_or_default();
            assert!(reason.contains("w1 was stopped from") && reason.contains("not yet read"), "{reason}");
            assert_eq!(
                (workspace.state.as_deref(), workspace.effects),
                (Some("confirmed"), 1),
                "{described}"
            );
        }
        _ => assert_eq!(workspace.state.as_deref(), Some("escalated"), "read after the stop: {described}"),
    }
}

/// The catalog's webhook scenarios, live: each passes, every intent an event starts is carried
/// out once, and the one only a forged event asks for is never started.
#[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
#[test]
fn the_typescript_executor_receives_webhooks() {
    let driver = runner::Driver::Live(node_executor(&[]));
    crate::example_webhooks::receives_webhooks("typescript-executor", &driver, |_, _| Vec::new());
}

/// Each classic bug of the TypeScript executor (`--bug NAME`, one `if (bugs.BUG === ...)`
/// each), the catalog scenario that catches it, and the invariant that scenario must report
/// broken. The same table is in `examples/executors/typescript/README.md`.
const VARIANTS: &[BugRow] = &[
    // The resend under the still-retained key goes out under a new one instead.
    ("key-per-attempt", "timeout_taken_as_no", NO_DUPLICATE_EFFECT),
    ("key-per-attempt", "workspace_created_twice", NO_DUPLICATE_EFFECT),
    ("key-per-attempt", "fault_timeout_after_commit", NO_DUPLICATE_EFFECT),
    ("key-per-attempt", "partial_refund_reply_lost", NO_DUPLICATE_EFFECT),
    ("key-per-attempt", "equal_partial_refunds_reply_lost", NO_DUPLICATE_EFFECT),
    ("memory-only", "crash_after_record", NOTHING_LOST),
    ("memory-only", "crash_while_refund_in_flight", NOTHING_LOST),
    ("memory-only", "crash_during_reconciliation", NOTHING_LOST),
    ("timeout-as-failure", "timeout_taken_as_no", HONEST_TERMINAL_STATES),
    ("timeout-as-failure", "fault_timeout_after_commit", HONEST_TERMINAL_STATES),
    ("trust-200", "silent_noop_refund", HONEST_TERMINAL_STATES),
    ("trust-200", "fault_silent_noop", HONEST_TERMINAL_STATES),
    // The email API accepts the message and drops it: the 200 is believed, and the inbox (and
    // the ledger) hold nothing.
    ("trust-202", "messages_accepted_not_delivered", HONEST_TERMINAL_STATES),
    ("re-sign-after-timeout", "chain_nonce_trap", NO_DUPLICATE_EFFECT),
    ("re-sign-after-timeout", "chain_error_after_commit", NO_DUPLICATE_EFFECT),
    ("replacement-while-unknown", "amount_changed_while_unknown", LINEAGE),
    // No leases, no row versions, `If-Match: *`: the woken worker's put lands on top of its
    // successor's, a second effect for one intent. (Whether the checker also names it a stale
    // write depends on when the woken worker's HEAD times out, so the table names the
    // duplicate. In stale_worker_overwrite the woken worker reads a timeout rather than the 429
    // waiting on its socket, looks up, and finds its successor's workspace: see the README.)
    ("constant-fencing-token", "files_stale_worker_after_read", NO_DUPLICATE_EFFECT),
    // The 403 lasts one request: the retry goes through, a refund nobody decided on.
    ("retry-403", "refund_permission_denied", REFUSAL_RESPECTED),
    // Every delivery is new work, done at once: the second delivery (at once, or after the
    // lost 200) starts the email again under a new key.
    ("webhook-no-dedupe", "fault_duplicate_webhook", NO_DUPLICATE_EFFECT),
    ("webhook-no-dedupe", "fault_lose_webhook_ack", NO_DUPLICATE_EFFECT),
    // The 200 goes before the event is kept: killed as it reads the payment, the worker
    // forgets the event, the service never sends it again, and the email never goes.
    ("webhook-ack-first", "webhook_crash_before_acting", EXPECTED_STATES),
    // No signature check, the body's status believed: the forgery says order 2 was paid, and
    // order 2's welcome goes out.
    ("webhook-trusts-body", "webhook_forged_payment", NO_UNAUTHORISED_EFFECT),
];

/// A bug whose skipped safeguard no catalog scenario can exploit against this executor: with
/// its leases checked right before every send and its row versions, `no-fencing` leaves no gap
/// a stopped worker can use. Each scenario here must pass, list the hazard, and fail under
/// `--strict`.
const HAZARD_VARIANTS: &[BugRow] = &[
    ("no-fencing", "stale_worker_overwrite", HAZARD_NO_FENCING_TOKEN),
    ("no-fencing", "stale_worker_after_lookup", HAZARD_NO_FENCING_TOKEN),
    ("no-fencing", "files_stale_worker_overwrite", HAZARD_NO_PRECONDITION),
    ("no-fencing", "files_stale_worker_after_read", HAZARD_NO_PRECONDITION),
];

#[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
#[test]
fn every_typescript_bug_is_caught_by_its_scenarios_naming_its_invariant() {
    bug_table("typescript-executor", VARIANTS, HAZARD_VARIANTS, |bug| node_executor(&["--bug", bug]));
}

/// The example keeps its own copy of the action table's workflow columns (which parameter is
/// the business key, which take references, which result fields exist): the copy must say what
/// `vocabulary::ACTIONS` says, or a step the reference executor accepts is refused there.
#[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
#[test]
fn the_typescript_action_tables_are_the_vocabularys() {
    let script = node_executor_script();
    let actions = script.with_file_name("actions.js");
    let program = format!(
        "const a = require({:?}); console.log(JSON.stringify({{result_fields: a.RESULT_FIELDS, \
         business_key: a.BUSINESS_KEY, takes_reference: a.TAKES_REFERENCE}}))",
        actions.display().to_string()
    );
    let out = std::process::Command::new("node").args(["-e", &program]).output().expect("node runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let tables: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    crate::examples::the_action_tables_are_the_vocabularys(&tables);
}

/// Workers started together on a new state directory all open the log: see
/// [`crate::examples::opens_a_new_log_while_another_holds_its_lock`].
#[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
#[test]
fn the_intent_log_opens_while_another_worker_holds_its_lock() {
    let module = node_executor_script().with_file_name("intentLog.js");
    crate::examples::opens_a_new_log_while_another_holds_its_lock(
        "typescript-executor",
        std::path::Path::new("node"),
        "node/wal_busy.mjs",
        &module,
    );
}

/// Steps that build on steps, through the protocol: the tests the reference executor and the
/// Python example pass (`executor_workflow.rs`), on the TypeScript executor.
mod workflows {
    use crate::executor_workflow::{self as flow, Under};

    #[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_takes_the_id_of_the_workspace_its_create_made() {
        flow::a_put_takes_the_id_of_the_workspace_its_create_made(Under::Node).await;
    }

    #[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chain_of_three_steps_each_reads_the_step_before() {
        flow::a_chain_of_three_steps_each_reads_the_step_before(Under::Node).await;
    }

    #[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_after_a_failed_intent_is_cancelled_and_never_sent() {
        flow::a_step_after_a_failed_intent_is_cancelled_and_never_sent(Under::Node).await;
    }

    #[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_after_an_escalated_intent_is_escalated_and_never_sent() {
        flow::a_step_after_an_escalated_intent_is_escalated_and_never_sent(Under::Node).await;
    }

    #[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_steps_are_refused_with_code_12_naming_the_problem() {
        flow::malformed_steps_are_refused_with_code_12_naming_the_problem(Under::Node).await;
    }

    #[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_proposed_again_with_other_after_is_another_payload() {
        flow::a_step_proposed_again_with_other_after_is_another_payload(Under::Node).await;
    }

    /// The value recorded before the first send is the one every send carries.
    #[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resend_carries_the_recorded_value() {
        let report = flow::a_resend_after_the_predecessor_changed(Under::Node).await;
        assert_eq!(report.sent, report.recorded, "{report:?}");
    }

    /// A restart before a workflow's last step leaves its completed steps alone.
    #[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restart_leaves_completed_steps_alone() {
        let report = flow::a_restart_before_the_last_step(Under::Node).await;
        assert_eq!((report.first_step_effects, report.last_step_effects), (1, 1), "{report:?}");
    }
}

/// A registration is a write like any other (`webhooks.ts`'s `register`, `confirm` and
/// `recoverMissedEvents`): [`crate::example_webhooks::recovers_from_registration_troubles`].
#[ignore = "needs Node and the TypeScript example that cargo xtask test builds"]
#[test]
fn the_typescript_executor_recovers_from_each_trouble_of_its_webhook_registration() {
    let driver = runner::Driver::Live(node_executor(&[]));
    crate::example_webhooks::recovers_from_registration_troubles("typescript-executor", &driver);
}
