//! The catalog's webhook scenarios through `twice run`: the reference executor receives the
//! payments fake's deliveries (handed to it in process in the sim, over loopback HTTP to the
//! `twice-executor` process live), passes every one, and the fakes' journals show how each
//! delivery fault was met: a second delivery, a delivery after a lost 2xx and a replayed one
//! are answered without acting again (the payment is read once), a forgery is refused before
//! anything is read, and a worker killed while it takes an event takes the retry once it is
//! back.

use std::path::Path;

use results::Observed;
use runner::live;
use runner::sim::{self, Reference};
use scenarios::Scenario;

use crate::live::{fresh_dir, reference};

/// One webhook scenario and what its journals must show.
struct Case {
    name: &'static str,
    /// Emails sent: one per genuine trigger.
    emails: usize,
    /// `GET /v1/payment_intents/{id}` requests, by payment intent: the reads of a payment the
    /// executor made before acting on its event (one per delivery it acted on or was killed
    /// acting on; none for a delivery it refused or had taken already).
    reads: &'static [(&'static str, usize)],
    /// Whether a worker was killed and came back.
    crash: bool,
}

const CASES: &[Case] = &[
    Case { name: "fault_duplicate_webhook", emails: 1, reads: &[("pi_order_1", 1)], crash: false },
    Case { name: "fault_lose_webhook_ack", emails: 1, reads: &[("pi_order_1", 1)], crash: false },
    Case {
        name: "fault_delay_webhook",
        emails: 2,
        reads: &[("pi_order_1", 1), ("pi_order_2", 1)],
        crash: false,
    },
    Case { name: "fault_webhook_endpoint_down", emails: 1, reads: &[("pi_order_1", 1)], crash: false },
    Case { name: "fault_stale_webhook", emails: 1, reads: &[("pi_order_1", 1)], crash: false },
    Case {
        name: "webhook_forged_payment",
        emails: 1,
        reads: &[("pi_order_1", 1), ("pi_order_2", 0)],
        crash: false,
    },
    Case { name: "webhook_crash_before_acting", emails: 1, reads: &[("pi_order_1", 2)], crash: true },
    Case { name: "webhook_crash_while_sending", emails: 1, reads: &[("pi_order_1", 1)], crash: true },
];

fn catalog_scenario(name: &str) -> Scenario {
    scenarios::catalog()
        .expect("the catalog loads")
        .into_iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no catalog scenario {name}"))
}

fn reads_of(observed: &Observed, payment_intent: &str) -> usize {
    let path = format!("/v1/payment_intents/{payment_intent}");
    observed
        .journals
        .get("payments")
        .map_or(0, |j| j.iter().filter(|e| e.method == "GET" && e.path == path).count())
}

fn check(case: &Case, observed: &Observed, driver: &str) {
    let scenario = catalog_scenario(case.name);
    let who = format!("{} ({driver})", case.name);
    assert_eq!(observed.executor_error, None, "{who}");
    let verdicts = checker::check(&scenario, observed);
    let violated: Vec<String> =
        checker::violations(&verdicts).map(|v| format!("{}: {:?}", v.invariant, v.evidence)).collect();
    assert!(violated.is_empty(), "{who}: {violated:#?}");
    assert!(observed.pending.is_empty(), "{who}: judged on a settled world: {:?}", observed.pending);
    assert_eq!(
        observed.ledgers.get("messages").map_or(0, Vec::len),
        case.emails,
        "{who}: one email per genuine trigger"
    );
    for (payment_intent, reads) in case.reads {
        assert_eq!(reads_of(observed, payment_intent), *reads, "{who}: reads of {payment_intent}");
    }
    let crashed = observed.timeline.iter().any(|m| m.kind == "crash");
    assert_eq!(crashed, case.crash, "{who}: a crash on the timeline");
    let registered = observed.journals["payments"]
        .iter()
        .filter(|e| e.method == "POST" && e.path == "/v1/webhook_endpoints")
        .count();
    assert_eq!(registered, 1, "{who}: one endpoint, kept across a restart");
}

#[test]
fn the_reference_executor_passes_every_webhook_scenario_in_the_sim() {
    let dir = std::env::temp_dir().join(format!("twice-webhooks-sim-{}", std::process::id()));
    for case in CASES {
        let observed =
            sim::run_blocking(&catalog_scenario(case.name), 1, &Reference, &dir).expect("it sets up");
        check(case, &observed, "sim");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The deliveries' signatures carry the wall clock's time, which no byte of a run's record
/// holds: the same seed still gives the same bytes.
#[test]
fn a_webhook_scenario_in_the_sim_gives_the_same_bytes_for_the_same_seed() {
    let dir = std::env::temp_dir().join(format!("twice-webhooks-bytes-{}", std::process::id()));
    let scenario = catalog_scenario("webhook_crash_before_acting");
    let run = || {
        serde_json::to_string(&sim::run_blocking(&scenario, 5, &Reference, &dir).expect("it sets up"))
            .unwrap()
    };
    assert_eq!(run(), run());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_reference_executor_process_passes_every_webhook_scenario_live() {
    let executor = reference();
    for case in CASES {
        let dir = fresh_dir(&format!("webhooks-{}", case.name));
        let observed = live::run_blocking(&catalog_scenario(case.name), 1, &executor, Path::new(&dir))
            .expect("it sets up");
        check(case, &observed, "live");
        if case.crash {
            // The restarted process listens on another port: its endpoint moved there.
            let moved = observed.journals["payments"]
                .iter()
                .any(|e| e.method == "POST" && e.path.starts_with("/v1/webhook_endpoints/we_"));
            assert!(moved, "{}: the endpoint moved to the new life's port", case.name);
        }
    }
}

/// The reference executor as one written before webhooks: it does not announce them.
struct WithoutWebhooks;

impl runner::sim::SimFactory for WithoutWebhooks {
    fn name(&self) -> String {
        "reference executor without webhooks".into()
    }

    fn supports_workflows(&self) -> bool {
        true
    }

    fn start(&self, setup: runner::sim::WorkerSetup) -> Result<Box<dyn runner::sim::SimExecutor>, String> {
        runner::sim::SimFactory::start(&Reference, setup)
    }
}

/// An executor that does not announce `webhooks` is proposed no intent an event starts: each
/// is reported unsupported, not held against it, and the payment left waiting for a listener
/// is the scenario's setup, not an unsettled world.
#[test]
fn an_executor_without_webhooks_has_the_triggered_intents_reported_unsupported() {
    let dir = std::env::temp_dir().join(format!("twice-webhooks-none-{}", std::process::id()));
    let scenario = catalog_scenario("webhook_forged_payment");
    let observed = sim::run_blocking(&scenario, 1, &WithoutWebhooks, &dir).expect("it sets up");
    assert_eq!(observed.unsupported_steps, ["welcome-order-1", "welcome-order-2"]);
    assert!(observed.acknowledged.is_empty() && observed.claims.is_empty());
    assert!(observed.pending.is_empty(), "{:?}", observed.pending);
    let verdicts = checker::check(&scenario, &observed);
    assert_eq!(checker::violations(&verdicts).count(), 0, "{verdicts:#?}");
    let registered = observed.journals.get("payments").map_or(0, |j| j.len());
    assert_eq!(registered, 0, "nobody registered an endpoint or read a payment");
    let _ = std::fs::remove_dir_all(&dir);
}

/// One welcome email that order 1's payment starts, with keys the payments service ignores
/// (and its other `payments` terms), and `rest` (a fault or an event): each robustness case
/// below is this and its one trouble.
fn welcome_once(name: &str, payments: &str, rest: &str) -> Scenario {
    let text = format!(
        r#"
name = "{name}"
[services.payments]
idempotency_keys = "ignored"
settle_ms_max = 500
{payments}
[services.messages]
settle_ms_max = 500
read_lag_ms_max = 300
[[intents]]
id = "welcome"
action = "messages.send"
params = {{ to = "ada@example.com", subject = "Welcome", body = "Order 1 is paid." }}
on_event = {{ type = "payment_intent.succeeded", payment_intent = "pi_order_1" }}
[expect]
welcome = "confirmed"
{rest}
"#
    );
    scenarios::parse_scenario(&text, "test").expect("a valid scenario")
}

/// The troubles, each with its payments terms and whether the worker must read a missed event
/// from the API: a registration whose answer is lost (the endpoint it made, whose secret never
/// arrived, is the only one when the customer pays); the worker killed while its registration
/// is on its way (the next life finds the registration it kept before sending); a
/// registration answered 200 that did nothing, where acks may lie (read back, and made again
/// once the endpoint still does not show past the read lag); every read of the payment refused
/// while faults last (the event was kept before the 200, and the passes read the payment again
/// once reads come back).
const TROUBLES: &[(&str, &str, &str, bool)] = &[
    (
        "registration-lost",
        "",
        r#"[[faults]]
service = "payments"
method = "POST"
path = "/v1/webhook_endpoints"
nth = 1
fault = { kind = "timeout_after_commit", hold_ms = 3000 }"#,
        true,
    ),
    (
        "registration-crash",
        "",
        r#"[[events]]
at = { service = "payments", method = "POST", path = "/v1/webhook_endpoints", nth = 1 }
do = "crash""#,
        true,
    ),
    (
        "registration-did-nothing",
        r#"acks = "may_lie""#,
        r#"[[faults]]
service = "payments"
method = "POST"
path = "/v1/webhook_endpoints"
nth = 1
fault = "silent_noop""#,
        true,
    ),
    (
        "reads-refused",
        "",
        r#"[[faults]]
service = "payments"
method = "GET"
path = "/v1/payment_intents/pi_order_1"
fault = "refuse""#,
        false,
    ),
];

#[test]
fn the_reference_executor_recovers_from_each_trouble_of_its_registration_and_its_reads() {
    let dir = std::env::temp_dir().join(format!("twice-webhooks-robust-{}", std::process::id()));
    for (name, payments, trouble, reads_events) in TROUBLES {
        let scenario = welcome_once(name, payments, trouble);
        let observed = sim::run_blocking(&scenario, 1, &Reference, &dir).expect("it sets up");
        let verdicts = checker::check(&scenario, &observed);
        let violated: Vec<String> =
            checker::violations(&verdicts).map(|v| format!("{}: {:?}", v.invariant, v.evidence)).collect();
        assert!(violated.is_empty(), "{}: {violated:#?}", scenario.name);
        assert_eq!(observed.ledgers["messages"].len(), 1, "{}: one email", scenario.name);
        let listed =
            observed.journals["payments"].iter().any(|e| e.method == "GET" && e.path == "/v1/events");
        assert_eq!(listed, *reads_events, "{}: the missed event read from the API", scenario.name);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
