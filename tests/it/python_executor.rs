//! The conformance kit: the Python executor of `examples/executors/python`, built on the real
//! SDKs (stripe-python, boto3, web3.py, requests), run live against the whole catalog; each of
//! its classic bugs (`--bug NAME`) caught by its scenarios with the invariant it breaks; and an
//! executor that announces only some actions judged on those alone.
//!
//! The interpreter is the venv's, from `TWICE_PYTHON` (set by `cargo xtask test`). Every wait
//! is bounded by the live driver itself (each request to a worker, each phase). The three
//! tests take turns on the machine ([`MACHINE`]): each runs two cases at a time, as
//! `twice run --threads 2` does, and a live case's timing is what it rehearses.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use harness::check::{
    self, HONEST_TERMINAL_STATES, LINEAGE, NO_DUPLICATE_EFFECT, NO_STALE_WRITE, NOTHING_LOST,
};
use harness::live::ExecutorCommand;
use harness::run::{self, Case, Driver, Outcome, Progress, ScenarioResult, Source};

/// The run seed of every case here (`twice run`'s default).
const SEED: u64 = 1;
/// Cases run at the same time, as on the 2-core machine `twice run` is measured on.
const THREADS: usize = 2;

/// Live runs of these tests take turns: two at a time already fill two cores.
static MACHINE: Mutex<()> = Mutex::new(());

fn machine() -> MutexGuard<'static, ()> {
    // A test that failed while holding it leaves nothing half-done behind.
    MACHINE.lock().unwrap_or_else(|p| p.into_inner())
}

/// `$TWICE_PYTHON examples/executors/python/executor.py ARGS...`.
fn python_executor(args: &[&str]) -> ExecutorCommand {
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
fn work_dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("python-executor-{}", std::process::id()))
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

/// What went wrong in a result, for a failure message: the outcome, the executor error and
/// every broken invariant with its first line of evidence.
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
fn the_python_executor_passes_the_whole_catalog_live() {
    let _turn = machine();
    let dir = work_dir("catalog");
    let cases: Vec<Case> = scenarios::catalog()
        .expect("the catalog loads")
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .collect();
    let driver = Driver::Live(python_executor(&[]));
    let results = run::run_cases(&cases, SEED, &driver, &dir, THREADS, &Quiet, "twice run");
    clean(&dir);
    assert_eq!(results.len(), cases.len());
    let failed: Vec<String> = results.iter().filter(|r| r.outcome != Outcome::Passed).map(describe).collect();
    assert!(
        failed.is_empty(),
        "the Python executor failed {} of {} catalog scenarios:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
}

/// Each classic bug of the Python executor (`--bug NAME`, one `if bugs.BUG == ...` each), the
/// catalog scenario that catches it, and the invariant that scenario must report broken. The
/// same table is in `examples/executors/python/README.md`.
const VARIANTS: &[(&str, &str, &str)] = &[
    // The refund holds the whole payment, so the keyless resend is refused, and the refusal is
    // believed: failed beside the refund.
    ("naive-retry", "lost_refund_reply", HONEST_TERMINAL_STATES),
    ("naive-retry", "timeout_taken_as_no", NO_DUPLICATE_EFFECT),
    // The resend under the still-retained key goes out under a new one instead.
    ("key-per-attempt", "timeout_taken_as_no", NO_DUPLICATE_EFFECT),
    ("key-per-attempt", "workspace_created_twice", NO_DUPLICATE_EFFECT),
    ("memory-only", "crash_after_record", NOTHING_LOST),
    ("memory-only", "crash_while_refund_in_flight", NOTHING_LOST),
    ("timeout-as-failure", "timeout_taken_as_no", HONEST_TERMINAL_STATES),
    ("trust-200", "silent_noop_refund", HONEST_TERMINAL_STATES),
    ("trust-200", "fault_silent_noop", HONEST_TERMINAL_STATES),
    ("re-sign-after-timeout", "chain_nonce_trap", NO_DUPLICATE_EFFECT),
    // The expired key executes the refund again; the payment cannot take it, and the refusal
    // is believed: failed beside the first refund.
    ("resend-after-key-expiry", "key_expired_before_reconciliation", HONEST_TERMINAL_STATES),
    ("replacement-while-unknown", "amount_changed_while_unknown", LINEAGE),
    ("no-fencing", "stale_worker_overwrite", NO_STALE_WRITE),
    ("no-fencing", "files_stale_worker_overwrite", NO_STALE_WRITE),
];

#[test]
fn every_python_bug_is_caught_by_its_scenarios_naming_its_invariant() {
    let _turn = machine();
    let dir = work_dir("variants");
    let next = AtomicUsize::new(0);
    let problems = Mutex::new(Vec::new());
    // Two cases at a time, each with its own variant's command line.
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                while let Some((bug, scenario, invariant)) = VARIANTS.get(next.fetch_add(1, Ordering::SeqCst))
                {
                    let driver = Driver::Live(python_executor(&["--bug", bug]));
                    let result = run::run_case(&catalog_case(scenario), SEED, &driver, &dir, "twice run");
                    let caught = result.outcome == Outcome::Violated
                        && check::violations(&result.verdicts).any(|v| v.invariant == *invariant);
                    if !caught {
                        let problem = format!("--bug {bug}: expected {invariant}, got {}", describe(&result));
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

#[test]
fn an_executor_with_fewer_actions_is_judged_on_those_and_the_rest_are_unsupported() {
    let _turn = machine();
    let dir = work_dir("actions");
    let scenario = scenarios::parse_scenario(MIXED, "mixed_actions.toml").expect("the scenario is valid");
    let case = Case { scenario, source: Source::File { path: "mixed_actions.toml".into() } };
    let driver = Driver::Live(python_executor(&["--actions", "payments.refund,workspaces.create"]));
    let result = run::run_case(&case, SEED, &driver, &dir, "twice run");
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
