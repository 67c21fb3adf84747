//! The TypeScript executor of `examples/executors/typescript`, built on the official Node SDKs
//! (stripe, @aws-sdk/client-s3, viem, resend, fetch), run live against the whole catalog; and
//! each of its classic bugs (`--bug NAME`) caught by its scenarios with the invariant it breaks
//! (or, for a safeguard skipped where nothing exploits it, listed as a hazard that `--strict`
//! fails).
//!
//! The compiled executor is `TWICE_NODE_EXECUTOR` (set by `cargo xtask test`, which runs `npm
//! ci` and `npm run build` in the example first). These tests take turns on the machine with the
//! Python executor's ([`machine`]): each runs [`JOBS`] cases at a time, as `twice run` does live.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use harness::check::{
    self, HAZARD_NO_FENCING_TOKEN, HAZARD_NO_PRECONDITION, HONEST_TERMINAL_STATES, LINEAGE,
    NO_DUPLICATE_EFFECT, NOTHING_LOST, REFUSAL_RESPECTED,
};
use harness::live::ExecutorCommand;
use harness::run::{self, Case, Driver, Outcome, Progress, ScenarioResult, Source};

use crate::python_executor::machine;

/// The run seed of every case here (`twice run`'s default).
const SEED: u64 = 1;
/// Cases run at the same time, as `twice run` runs live scenarios by default.
const JOBS: usize = harness::pipeline::LIVE_JOBS_DEFAULT;

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

/// A fresh directory for one test's runs, private to this process.
fn work_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("typescript-executor-{}", std::process::id()))
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the work directory can be created");
    dir
}

fn clean(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    if let Some(parent) = dir.parent() {
        // Gone once the last test of this process is done with it.
        let _ = std::fs::remove_dir(parent);
    }
}

fn catalog_case(name: &str) -> Case {
    match scenarios::catalog::find(name) {
        Some(Ok(scenario)) => Case { scenario, source: Source::Catalog },
        Some(Err(e)) => panic!("catalog scenario {name} does not load: {e}"),
        None => panic!("no catalog scenario {name}"),
    }
}

/// What went wrong in a result: the outcome, the executor error and every broken invariant
/// with its first line of evidence.
fn describe(result: &ScenarioResult) -> String {
    let broken: Vec<String> = check::violations(&result.verdicts)
        .map(|v| format!("{}: {}", v.invariant, v.evidence.first().map(String::as_str).unwrap_or("")))
        .collect();
    let error = result.observed.executor_error.as_deref().unwrap_or("");
    format!("{} ({:?}) {error} [{}]", result.name, result.outcome, broken.join("; "))
}

struct Quiet;

impl Progress for Quiet {
    fn started(&self, _: usize) {}
    fn finished(&self, _: &ScenarioResult) {}
    fn done(&self) {}
}

#[test]
fn the_typescript_executor_passes_the_whole_catalog_live() {
    let _turn = machine();
    let dir = work_dir("catalog");
    let cases: Vec<Case> = scenarios::catalog()
        .expect("the catalog loads")
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .collect();
    let driver = Driver::Live(node_executor(&[]));
    let results = run::run_cases(&cases, SEED, &driver, &dir, JOBS, &Quiet, "twice run");
    clean(&dir);
    assert_eq!(results.len(), cases.len());
    let failed: Vec<String> = results.iter().filter(|r| r.outcome != Outcome::Passed).map(describe).collect();
    assert!(
        failed.is_empty(),
        "the TypeScript executor failed {} of {} catalog scenarios:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
    // It uses every safeguard the contracts offer, so it has no hazards either.
    let hazards: Vec<String> = results
        .iter()
        .flat_map(|r| r.hazards.iter().map(move |h| format!("{}: {}", r.name, h.detail)))
        .collect();
    assert!(hazards.is_empty(), "hazards of the full executor:\n{}", hazards.join("\n"));
}

/// Each classic bug of the TypeScript executor (`--bug NAME`, one `if (bugs.BUG === ...)`
/// each), the catalog scenario that catches it, and the invariant that scenario must report
/// broken. The same table is in `examples/executors/typescript/README.md`.
const VARIANTS: &[(&str, &str, &str)] = &[
    // The resend under the still-retained key goes out under a new one instead.
    ("key-per-attempt", "timeout_taken_as_no", NO_DUPLICATE_EFFECT),
    ("key-per-attempt", "workspace_created_twice", NO_DUPLICATE_EFFECT),
    ("key-per-attempt", "fault_timeout_after_commit", NO_DUPLICATE_EFFECT),
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
];

/// A bug whose skipped safeguard no catalog scenario can exploit against this executor: with
/// its leases checked right before every send and its row versions, `no-fencing` leaves no gap
/// a stopped worker can use. Each scenario here must pass, list the hazard, and fail under
/// `--strict`.
const HAZARD_VARIANTS: &[(&str, &str, &str)] = &[
    ("no-fencing", "stale_worker_overwrite", HAZARD_NO_FENCING_TOKEN),
    ("no-fencing", "stale_worker_after_lookup", HAZARD_NO_FENCING_TOKEN),
    ("no-fencing", "files_stale_worker_overwrite", HAZARD_NO_PRECONDITION),
    ("no-fencing", "files_stale_worker_after_read", HAZARD_NO_PRECONDITION),
];

#[test]
fn every_typescript_bug_is_caught_by_its_scenarios_naming_its_invariant() {
    let _turn = machine();
    let dir = work_dir("variants");
    let next = AtomicUsize::new(0);
    let problems = Mutex::new(Vec::new());
    let all: Vec<(&str, &str, &str, bool)> = VARIANTS
        .iter()
        .map(|(b, s, i)| (*b, *s, *i, false))
        .chain(HAZARD_VARIANTS.iter().map(|(b, s, h)| (*b, *s, *h, true)))
        .collect();
    // Several cases at a time, each with its own variant's command line.
    std::thread::scope(|scope| {
        for _ in 0..JOBS {
            scope.spawn(|| {
                while let Some((bug, scenario, expected, hazard)) =
                    all.get(next.fetch_add(1, Ordering::SeqCst))
                {
                    let driver = Driver::Live(node_executor(&["--bug", bug]));
                    let result = run::run_case(&catalog_case(scenario), SEED, &driver, &dir, "twice run");
                    let caught = if *hazard {
                        let strict = run::results(SEED, &driver, None, vec![result.clone()]);
                        let strict = run::RunResults { strict: true, ..strict };
                        result.outcome == Outcome::Passed
                            && result.hazards.iter().any(|h| h.kind == *expected)
                            && strict.failed()
                    } else {
                        result.outcome == Outcome::Violated
                            && check::violations(&result.verdicts).any(|v| v.invariant == *expected)
                    };
                    if !caught {
                        let hazards: Vec<&str> = result.hazards.iter().map(|h| h.kind.as_str()).collect();
                        let problem = format!(
                            "--bug {bug} in {scenario}: expected {expected}, got {} (hazards {hazards:?})",
                            describe(&result)
                        );
                        problems.lock().unwrap_or_else(|p| p.into_inner()).push(problem);
                    }
                }
            });
        }
    });
    clean(&dir);
    let problems = problems.into_inner().unwrap_or_else(|p| p.into_inner());
    assert!(
        problems.is_empty(),
        "bugs the catalog does not catch as the table says:\n{}",
        problems.join("\n")
    );
}

/// The example keeps its own copy of the action table's workflow columns (which parameter is
/// the business key, which take references, which result fields exist): the copy must say what
/// `vocabulary::ACTIONS` says, or a step the reference executor accepts is refused there.
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
    let mut want_fields = serde_json::Map::new();
    let mut want_keys = serde_json::Map::new();
    let mut want_refs = serde_json::Map::new();
    for spec in vocabulary::ACTIONS {
        want_fields.insert(spec.name.into(), spec.result_fields.iter().map(|f| f.name).collect());
        want_keys.insert(spec.name.into(), spec.business_key.into());
        let takes: Vec<&str> =
            spec.params.iter().map(|p| p.name).filter(|p| spec.param_takes_reference(p)).collect();
        want_refs.insert(spec.name.into(), takes.into());
    }
    assert_eq!(tables["result_fields"], serde_json::Value::Object(want_fields));
    assert_eq!(tables["business_key"], serde_json::Value::Object(want_keys));
    assert_eq!(tables["takes_reference"], serde_json::Value::Object(want_refs));
}

/// Steps that build on steps, through the protocol: the tests the reference executor and the
/// Python example pass (`executor_workflow.rs`), on the TypeScript executor.
mod workflows {
    use crate::executor_workflow::{self as flow, Under};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_takes_the_id_of_the_workspace_its_create_made() {
        flow::a_put_takes_the_id_of_the_workspace_its_create_made(Under::Node).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chain_of_three_steps_each_reads_the_step_before() {
        flow::a_chain_of_three_steps_each_reads_the_step_before(Under::Node).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_after_a_failed_intent_is_cancelled_and_never_sent() {
        flow::a_step_after_a_failed_intent_is_cancelled_and_never_sent(Under::Node).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_after_an_escalated_intent_is_escalated_and_never_sent() {
        flow::a_step_after_an_escalated_intent_is_escalated_and_never_sent(Under::Node).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_steps_are_refused_with_code_12_naming_the_problem() {
        flow::malformed_steps_are_refused_with_code_12_naming_the_problem(Under::Node).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_proposed_again_with_other_after_is_another_payload() {
        flow::a_step_proposed_again_with_other_after_is_another_payload(Under::Node).await;
    }

    /// The value recorded before the first send is the one every send carries.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resend_carries_the_recorded_value() {
        let report = flow::a_resend_after_the_predecessor_changed(Under::Node).await;
        assert_eq!(report.sent, report.recorded, "{report:?}");
    }

    /// A restart before a workflow's last step leaves its completed steps alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restart_leaves_completed_steps_alone() {
        let report = flow::a_restart_before_the_last_step(Under::Node).await;
        assert_eq!((report.first_step_effects, report.last_step_effects), (1, 1), "{report:?}");
    }
}
