//! Bring your own test, from Python: the kit of `clients/python` (a client of `twice serve` and
//! a pytest plugin) passes its own tests, and the example applications of `examples/apps`
//! tested with it come out as they should. The correct refund worker and the careful webhook
//! handler pass every scenario; their naive versions are strict expected failures in a plain
//! `pytest` run (the naive handler passes the webhook scenarios nothing can hurt it in), and
//! with `--runxfail` each naive case fails with twice's verdict naming the invariant it breaks
//! and the ledger's effects as evidence. (The DBOS example is in `examples/engines/dbos`, run by `cargo xtask
//! engines`.)
//!
//! pytest runs as a child process of the venv's interpreter (`TWICE_PYTHON`, set by `cargo
//! xtask test`, which installs the kit there) with `TWICE_BIN` pointing at the `twice` binary;
//! each run's outcomes are read per test from its JUnit XML. Every run is bounded.

use std::collections::BTreeMap;
use std::time::Duration;

use super::pytest::{FAILED, PASSED, Run, Suite, XFAILED};
use super::python_executor::machine;

/// The kit's tests and the example apps: the slowest run, the example apps, takes about 45 s.
const SUITE: Suite = Suite {
    name: "byo-python",
    wait: Duration::from_secs(240),
    imports: "twice.pytest_plugin, stripe",
    args: &[],
};

fn pytest(label: &str, args: &[&str]) -> Run {
    super::pytest::pytest(&SUITE, label, args)
}

/// What each example test must come to. `None`: the correct version, which passes.
/// `Some(invariant)`: a naive version, an expected failure in a plain run, and under
/// `--runxfail` a failure by `TwiceViolation` whose verdict names `invariant`.
const EXAMPLES: &[(&str, Option<&str>)] = &[
    ("test_refund_worker[lost_refund_reply-correct]", None),
    // The whole amount refunded: the naive retry is refused, and the worker says "failed".
    ("test_refund_worker[lost_refund_reply-naive]", Some("honest-terminal-states")),
    ("test_refund_worker[lost_partial_refund_reply-correct]", None),
    ("test_refund_worker[lost_partial_refund_reply-naive]", Some("no-duplicate-effect")),
    ("test_refund_worker[key_regenerated_per_attempt-correct]", None),
    ("test_refund_worker[key_regenerated_per_attempt-naive]", Some("no-duplicate-effect")),
    ("test_refund_worker[timeout_taken_as_no-correct]", None),
    ("test_refund_worker[timeout_taken_as_no-naive]", Some("no-duplicate-effect")),
    ("test_refund_worker[crash_while_refund_in_flight-correct]", None),
    ("test_refund_worker[crash_while_refund_in_flight-naive]", Some("no-duplicate-effect")),
    // The shop's webhook handler (examples/apps/webhook_handler): the naive handler acts on
    // every delivery, believes any signature and the event's data, and sends without a key.
    ("test_webhook_handler[fault_duplicate_webhook-careful]", None),
    ("test_webhook_handler[fault_duplicate_webhook-naive]", Some("no-duplicate-effect")),
    ("test_webhook_handler[fault_lose_webhook_ack-careful]", None),
    ("test_webhook_handler[fault_lose_webhook_ack-naive]", Some("no-duplicate-effect")),
    ("test_webhook_handler[fault_stale_webhook-careful]", None),
    ("test_webhook_handler[fault_stale_webhook-naive]", Some("no-duplicate-effect")),
    ("test_webhook_handler[webhook_forged_payment-careful]", None),
    ("test_webhook_handler[webhook_forged_payment-naive]", Some("no-unauthorised-effect")),
    // A late event, and one after the endpoint was down: nothing goes twice, both pass.
    ("test_webhook_handler[fault_delay_webhook-careful]", None),
    ("test_webhook_handler[fault_delay_webhook-naive]", None),
    ("test_webhook_handler[fault_webhook_endpoint_down-careful]", None),
    ("test_webhook_handler[fault_webhook_endpoint_down-naive]", None),
    // Two defences dropped together: each pair is caught.
    ("test_webhook_handler[fault_lose_webhook_ack-naive-no-dedupe+no-key]", Some("no-duplicate-effect")),
    (
        "test_webhook_handler[webhook_forged_payment-naive-no-signature-check+event-data]",
        Some("no-unauthorised-effect"),
    ),
    // The shop killed mid-handling (a real SIGKILL of its process) and started again: the
    // careful handler passes; one that answered 200 before the work never does it, and one
    // that remembered only in memory, without the order's key, does it twice.
    ("test_webhook_handler[webhook_crash_before_acting-careful]", None),
    ("test_webhook_handler[webhook_crash_while_sending-careful]", None),
    ("test_webhook_handler[webhook_crash_before_acting-naive-ack-first]", Some("expected-states")),
    (
        "test_webhook_handler[webhook_crash_while_sending-naive-memory-dedupe+no-key]",
        Some("no-duplicate-effect"),
    ),
];

/// The kit's tests that must be there (a sample: a run that lost them would pass vacuously).
const KIT_TESTS_SAMPLE: &[&str] = &[
    "test_check_raises_the_verdicts_summary_when_an_invariant_is_violated",
    "test_a_step_is_reached_held_and_let_go",
    "test_the_fixture_serves_one_test_and_stops_after_it",
    "test_a_serve_that_never_gets_ready_is_killed_after_its_bounds",
    "test_a_stray_print_goes_to_stderr_and_the_protocol_keeps_stdout",
];

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_kits_own_tests_pass() {
    let _turn = machine();
    let run = pytest("kit", &["clients/python/tests"]);
    assert_eq!(run.code, Some(0), "the kit's tests fail:\n{}", run.output_tail());
    assert!(run.cases.len() >= 15, "only {} kit tests ran:\n{}", run.cases.len(), run.output_tail());
    for (name, case) in &run.cases {
        assert_eq!(case.outcome, PASSED, "{name}:\n{}", case.text);
    }
    for name in KIT_TESTS_SAMPLE {
        assert!(run.cases.contains_key(*name), "no kit test {name}; ran {:?}", run.cases.keys());
    }
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_correct_apps_pass_and_the_naive_ones_are_expected_failures() {
    let _turn = machine();
    let run = pytest("examples", &["examples/apps"]);
    assert_eq!(run.code, Some(0), "the example apps' tests fail:\n{}", run.output_tail());
    let expected: BTreeMap<&str, &str> = EXAMPLES
        .iter()
        .map(|(name, naive)| (*name, if naive.is_some() { XFAILED } else { PASSED }))
        .collect();
    assert_eq!(run.outcomes(), expected, "{}", run.output_tail());
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_naive_apps_are_caught_with_the_invariant_and_the_ledgers_evidence() {
    let _turn = machine();
    // `--runxfail` runs the expected failures as plain tests: each must fail, and by twice's
    // verdict rather than anything else.
    let run = pytest("examples-naive", &["examples/apps", "--runxfail", "-k", "naive"]);
    assert_eq!(run.code, Some(1), "the naive apps must fail:\n{}", run.output_tail());
    let naive: BTreeMap<&str, &str> =
        EXAMPLES.iter().filter_map(|(name, naive)| naive.map(|invariant| (*name, invariant))).collect();
    // A naive version that nothing can hurt in its scenario passes there.
    let expected: BTreeMap<&str, &str> = EXAMPLES
        .iter()
        .filter(|(name, _)| name.contains("-naive"))
        .map(|(name, naive)| (*name, if naive.is_some() { FAILED } else { PASSED }))
        .collect();
    assert_eq!(run.outcomes(), expected, "{}", run.output_tail());
    for (name, invariant) in naive {
        let text = &run.cases[name].text;
        assert!(text.contains("TwiceViolation"), "{name} failed, but not by a verdict:\n{text}");
        assert!(
            text.contains(&format!("{invariant}: ")),
            "{name}'s verdict does not name {invariant}:\n{text}"
        );
        // The evidence is the ledger's: the effects by service, id and sequence number (a
        // refund's, or a welcome email's); a missing claim is its own evidence.
        if invariant != "expected-states" {
            assert!(
                (text.contains("payments re_") || text.contains("messages ")) && text.contains("(seq "),
                "{name}: no ledger evidence:\n{text}"
            );
        }
        if invariant == "no-duplicate-effect" {
            assert!(text.contains("has 2 effects, at most one allowed"), "{name}:\n{text}");
        }
    }
}
