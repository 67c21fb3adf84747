//! The sim driver with the reference executor.

use harness::sim::{self, Reference};
use scenarios::Scenario;

fn scenario(text: &str) -> Scenario {
    scenarios::parse_scenario(text, "test").expect("a valid scenario")
}

fn work_dir() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("twice-sim-test-{}", std::process::id()))
}

const LOST_REPLY: &str = r#"
name = "lost-reply"
[services.payments]
settle_ms_max = 500
key_retention_ms = 2000
[[intents]]
id = "refund"
action = "payments.refund"
params = { payment_intent = "pi_1", amount = 1000 }
[[faults]]
service = "payments"
method = "POST"
nth = 1
fault = "drop_after_commit"
[[events]]
at = { service = "payments", method = "POST", nth = 1 }
do = "crash"
"#;

#[test]
fn a_lost_reply_and_a_crash_leave_one_refund_and_an_honest_state() {
    let s = scenario(LOST_REPLY);
    let observed = sim::run_blocking(&s, 7, &Reference, &work_dir()).unwrap();
    println!("{}", serde_json::to_string_pretty(&observed.claims).unwrap());
    for m in &observed.timeline {
        println!("{:>8} {:<10} {:<10} {}", m.at_ms - harness::setup::EPOCH_MS, m.lane, m.kind, m.detail);
    }
    assert_eq!(observed.executor_error, None);
    assert_eq!(observed.ledgers["payments"].len(), 1);
    assert_eq!(observed.claims[0].state, "confirmed");
}

#[test]
fn the_same_seed_gives_the_same_bytes() {
    let s = scenario(LOST_REPLY);
    let a = serde_json::to_string(&sim::run_blocking(&s, 3, &Reference, &work_dir()).unwrap()).unwrap();
    let b = serde_json::to_string(&sim::run_blocking(&s, 3, &Reference, &work_dir()).unwrap()).unwrap();
    assert_eq!(a, b);
}

#[test]
fn the_reference_executor_passes_generated_cases() {
    let mut failures = Vec::new();
    let cases = 300;
    for index in 0..cases {
        let s = scenarios::generate::case(42, index).unwrap();
        let observed = sim::run_blocking(&s, index, &Reference, &work_dir()).unwrap();
        let verdicts = harness::check::check(&s, &observed);
        let broken: Vec<_> = verdicts.iter().filter(|v| !v.held).collect();
        if !broken.is_empty() {
            failures.push(format!("case {index}: {:?}\n{}", broken, toml::to_string(&s).unwrap_or_default()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} failed:\n{}",
        failures.len(),
        failures.iter().take(3).cloned().collect::<Vec<_>>().join("\n\n")
    );
}
