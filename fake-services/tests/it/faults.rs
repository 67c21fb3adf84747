//! Every fault on both services, over real loopback HTTP: what the caller sees and what the
//! ledger holds. One table, one runner.

use std::time::Duration;

use serde_json::{Value, json};

use crate::client::{self, Req, Running, Seen};

const P: &str = "payments";
const W: &str = "workspaces";
/// A caller that waits this long is a patient one: faults that answer, answer well within it.
const PATIENT_MS: u64 = 10_000;
/// A caller with a short timeout, for faults that hold the reply.
const HASTY_MS: u64 = 300;

/// What a step expects to see.
#[derive(Debug, Clone)]
enum Expect {
    Status(u16),
    /// This status, and the body mentions this text.
    Error(u16, &'static str),
    /// 200 with `Idempotent-Replayed: true`, or this other status replayed.
    Replayed(u16),
    /// An answer whose JSON array at this pointer has this many items.
    Count(&'static str, usize),
    Reset,
    Closed,
    Timeout,
}

#[derive(Debug, Clone)]
enum Step {
    Send(Req, u64, Expect),
    /// `first` starts; `second` starts `after_ms` later; both are checked.
    Overlap {
        first: Req,
        after_ms: u64,
        second: Req,
        first_sees: Expect,
        second_sees: Expect,
    },
    /// Polls until the ledger holds this many effects (bounded).
    Ledger(usize),
    JumpMs(u64),
}

struct Case {
    name: &'static str,
    service: &'static str,
    contract: Value,
    rules: Value,
    steps: Vec<Step>,
    ledger: usize,
}

fn case(name: &'static str, service: &'static str, rules: Value, steps: Vec<Step>, ledger: usize) -> Case {
    Case { name, service, contract: json!({}), rules, steps, ledger }
}

fn send(req: Req, expect: Expect) -> Step {
    Step::Send(req, PATIENT_MS, expect)
}

fn send_hasty(req: Req, expect: Expect) -> Step {
    Step::Send(req, HASTY_MS, expect)
}

fn refund() -> Req {
    Req::refund("payment_intent=pi_1&amount=100")
}

fn refund_keyed(key: &str) -> Req {
    refund().key(key)
}

fn ws() -> Req {
    Req::workspace("org-1")
}

fn list_refunds() -> Req {
    Req::new("GET", "/v1/refunds?payment_intent=pi_1").authorized()
}

fn list_ws() -> Req {
    Req::new("GET", "/v1/workspaces?external_id=org-1")
}

fn cases() -> Vec<Case> {
    use Expect::*;
    let mut cases = vec![
        // Payments.
        case("refuse resets before reading", P, json!([{"fault": "refuse"}]), vec![send(refund(), Reset)], 0),
        case(
            "reject answers its status without executing",
            P,
            json!([{"fault": {"kind": "reject", "status": 429}, "nth": 1}]),
            vec![send(refund(), Error(429, "api_error")), send(refund(), Status(200))],
            1,
        ),
        case(
            "reject answers the given body",
            P,
            json!([{"fault": {"kind": "reject", "status": 402, "body": {"error": {"type": "card_error", "code": "card_declined", "message": "declined"}}}}]),
            vec![send(refund(), Error(402, "card_declined"))],
            0,
        ),
        case(
            "error_after_commit commits and answers 500",
            P,
            json!([{"fault": "error_after_commit", "method": "POST"}]),
            vec![send(refund(), Error(500, "api_error"))],
            1,
        ),
        case(
            "error_after_commit's 500 is what the key replays",
            P,
            json!([{"fault": "error_after_commit", "nth": 1}]),
            vec![send(refund_keyed("k"), Error(500, "api_error")), send(refund_keyed("k"), Replayed(500))],
            1,
        ),
        case(
            "drop_after_commit closes without a byte; the key replays the success",
            P,
            json!([{"fault": "drop_after_commit", "nth": 1}]),
            vec![send(refund_keyed("k"), Closed), send(refund_keyed("k"), Replayed(200))],
            1,
        ),
        case(
            "drop_after_commit without a key: the retry refunds twice",
            P,
            json!([{"fault": "drop_after_commit", "nth": 1}]),
            vec![send(refund(), Closed), send(refund(), Status(200))],
            2,
        ),
        case(
            "timeout_after_commit holds the reply past the caller's timeout",
            P,
            json!([{"fault": {"kind": "timeout_after_commit", "hold_ms": 60000}}]),
            vec![send_hasty(refund(), Timeout), Step::Ledger(1)],
            1,
        ),
        case(
            "commit_after_timeout commits after the caller has gone",
            P,
            json!([{"fault": {"kind": "commit_after_timeout", "delay_ms": 3000}, "method": "POST"}]),
            vec![send_hasty(refund(), Timeout), send(list_refunds(), Count("/data", 0)), Step::Ledger(1)],
            1,
        ),
        case(
            "commit_after_timeout keeps the key in flight: 409 until it commits, then a replay",
            P,
            json!([{"fault": {"kind": "commit_after_timeout", "delay_ms": 3000}, "nth": 1}]),
            vec![
                send_hasty(refund_keyed("k"), Timeout),
                send(refund_keyed("k"), Error(409, "idempotency_key_in_use")),
                Step::Ledger(1),
                send(refund_keyed("k"), Replayed(200)),
            ],
            1,
        ),
        case(
            "silent_noop answers success and commits nothing",
            P,
            json!([{"fault": "silent_noop"}]),
            vec![send(refund(), Status(200)), send(list_refunds(), Count("/data", 0))],
            0,
        ),
        case(
            "stale_read hides writes younger than the lag",
            P,
            json!([{"fault": {"kind": "stale_read", "lag_ms": 60000}, "method": "GET"}]),
            vec![send(refund(), Status(200)), send(list_refunds(), Count("/data", 0))],
            1,
        ),
        case(
            "stale_read for a number of reads",
            P,
            json!([{"fault": {"kind": "stale_read", "lag_ms": 60000}, "method": "GET", "times": 2}]),
            vec![
                send(refund(), Status(200)),
                send(list_refunds(), Count("/data", 0)),
                send(list_refunds(), Count("/data", 0)),
                send(list_refunds(), Count("/data", 1)),
            ],
            1,
        ),
        case(
            "forget_keys: the retry after the service forgot executes again",
            P,
            json!([{"fault": "forget_keys", "nth": 2}]),
            vec![send(refund_keyed("k"), Status(200)), send(refund_keyed("k"), Status(200))],
            2,
        ),
        case(
            "ignore_keys: the same key executes twice",
            P,
            json!([{"fault": "ignore_keys"}]),
            vec![send(refund_keyed("k"), Status(200)), send(refund_keyed("k"), Status(200))],
            2,
        ),
        case(
            "latency before the commit keeps the key in flight",
            P,
            json!([{"fault": {"kind": "latency", "before_ms": 2000}, "nth": 1}]),
            vec![Step::Overlap {
                first: refund_keyed("k"),
                after_ms: 300,
                second: refund_keyed("k"),
                first_sees: Status(200),
                second_sees: Error(409, "idempotency_key_in_use"),
            }],
            1,
        ),
        case(
            "latency after the commit still answers",
            P,
            json!([{"fault": {"kind": "latency", "after_ms": 200}}]),
            vec![send(refund(), Status(200))],
            1,
        ),
        case(
            "a probability of 0 never fires",
            P,
            json!([{"fault": "refuse", "probability": 0.0}]),
            vec![send(refund(), Status(200))],
            1,
        ),
        case(
            "rules match on form fields",
            P,
            json!([{"fault": "refuse", "where": {"amount": "200"}}]),
            vec![send(refund(), Status(200)), send(Req::refund("payment_intent=pi_1&amount=200"), Reset)],
            1,
        ),
        case(
            "the same key with other parameters is an idempotency_error",
            P,
            json!([]),
            vec![
                send(refund_keyed("k"), Status(200)),
                send(Req::refund("payment_intent=pi_1&amount=200").key("k"), Error(400, "idempotency_error")),
            ],
            1,
        ),
        case(
            "keys are pruned after the retention window of service time",
            P,
            json!([]),
            vec![
                send(refund_keyed("k"), Status(200)),
                Step::JumpMs(25 * 3600 * 1000),
                send(refund_keyed("k"), Status(200)),
            ],
            2,
        ),
        // Workspaces.
        case("workspaces: refuse", W, json!([{"fault": "refuse"}]), vec![send(ws(), Reset)], 0),
        case(
            "workspaces: reject",
            W,
            json!([{"fault": {"kind": "reject", "status": 503}}]),
            vec![send(ws(), Error(503, "error"))],
            0,
        ),
        case(
            "workspaces: error_after_commit",
            W,
            json!([{"fault": "error_after_commit", "nth": 1}]),
            vec![send(ws().key("k"), Error(500, "api_error")), send(ws().key("k"), Replayed(500))],
            1,
        ),
        case(
            "workspaces: drop_after_commit, then the retry hits the unique external id",
            W,
            json!([{"fault": "drop_after_commit", "nth": 1}]),
            vec![send(ws(), Closed), send(ws(), Error(409, "workspace_exists"))],
            1,
        ),
        case(
            "workspaces: timeout_after_commit",
            W,
            json!([{"fault": {"kind": "timeout_after_commit", "hold_ms": 60000}}]),
            vec![send_hasty(ws(), Timeout), Step::Ledger(1)],
            1,
        ),
        case(
            "workspaces: commit_after_timeout",
            W,
            json!([{"fault": {"kind": "commit_after_timeout", "delay_ms": 3000}, "method": "POST"}]),
            vec![
                send_hasty(ws(), Timeout),
                send(list_ws(), Count("/data", 0)),
                Step::Ledger(1),
                send(list_ws(), Count("/data", 1)),
            ],
            1,
        ),
        case(
            "workspaces: silent_noop",
            W,
            json!([{"fault": "silent_noop"}]),
            vec![send(ws(), Status(200)), send(list_ws(), Count("/data", 0))],
            0,
        ),
        case(
            "workspaces: stale_read",
            W,
            json!([{"fault": {"kind": "stale_read", "lag_ms": 60000}, "method": "GET", "times": 1}]),
            vec![
                send(ws(), Status(200)),
                send(list_ws(), Count("/data", 0)),
                send(list_ws(), Count("/data", 1)),
            ],
            1,
        ),
        case(
            "workspaces: latency before the commit keeps the key in flight",
            W,
            json!([{"fault": {"kind": "latency", "before_ms": 2000}, "nth": 1}]),
            vec![Step::Overlap {
                first: ws().key("k"),
                after_ms: 300,
                second: ws().key("k"),
                first_sees: Status(200),
                second_sees: Error(409, "idempotency_key_in_use"),
            }],
            1,
        ),
        case(
            "workspaces: rules match on JSON fields",
            W,
            json!([{"fault": "drop_after_commit", "where": {"external_id": "org-2"}}]),
            vec![send(ws(), Status(200)), send(Req::workspace("org-2"), Closed)],
            2,
        ),
    ];
    // Workspaces cases whose contract differs from the default.
    let loose = json!({"unique_business_key": false});
    let with = |mut c: Case, contract: &Value| {
        c.contract = contract.clone();
        c
    };
    cases.extend([
        with(
            case(
                "workspaces: forget_keys",
                W,
                json!([{"fault": "forget_keys", "nth": 2}]),
                vec![send(ws().key("k"), Status(200)), send(ws().key("k"), Status(200))],
                2,
            ),
            &loose,
        ),
        with(
            case(
                "workspaces: ignore_keys",
                W,
                json!([{"fault": "ignore_keys"}]),
                vec![send(ws().key("k"), Status(200)), send(ws().key("k"), Status(200))],
                2,
            ),
            &loose,
        ),
        with(
            case(
                "workspaces: a contract that ignores keys creates twice",
                W,
                json!([]),
                vec![send(ws().key("k"), Status(200)), send(ws().key("k"), Status(200))],
                2,
            ),
            &json!({"unique_business_key": false, "idempotency_keys": "ignored"}),
        ),
        with(
            case(
                "workspaces: a stale fencing token is refused",
                W,
                json!([]),
                vec![
                    send(ws().header("Fencing-Token", "2"), Status(200)),
                    send(ws().header("Fencing-Token", "1"), Error(409, "stale_fencing_token")),
                    send(ws().header("Fencing-Token", "2"), Status(200)),
                ],
                2,
            ),
            &loose,
        ),
        with(
            case(
                "workspaces: without fencing, tokens are ignored",
                W,
                json!([]),
                vec![
                    send(ws().header("Fencing-Token", "2"), Status(200)),
                    send(ws().header("Fencing-Token", "1"), Status(200)),
                ],
                2,
            ),
            &json!({"unique_business_key": false, "fencing": false}),
        ),
    ]);
    cases
}

fn check(seen: &Seen, expect: &Expect) -> Result<(), String> {
    let ok = match expect {
        Expect::Status(s) => seen.status() == Some(*s),
        Expect::Error(s, text) => {
            let Seen::Answer { body, .. } = seen else {
                return Err(format!("expected {expect:?}, saw {seen:?}"));
            };
            seen.status() == Some(*s) && body.contains(text) && seen.json().get("error").is_some()
        }
        Expect::Replayed(s) => {
            seen.status() == Some(*s) && seen.header("idempotent-replayed") == Some("true")
        }
        Expect::Count(pointer, n) => {
            seen.status() == Some(200)
                && seen.json().pointer(pointer).and_then(Value::as_array).map(Vec::len) == Some(*n)
        }
        Expect::Reset => *seen == Seen::Reset,
        Expect::Closed => *seen == Seen::Closed,
        Expect::Timeout => *seen == Seen::Timeout,
    };
    if ok { Ok(()) } else { Err(format!("expected {expect:?}, saw {seen:?}")) }
}

async fn run(case: Case) -> Result<(), String> {
    let running = Running::start(7).await;
    let addr = running.addr(case.service);
    let fake = running.fake(case.service);
    // Contract and rules go through the control API, as a `twice serve` user would send them.
    let control =
        |method, path: &str, body: &Value| Req::new(method, path.to_string()).body(body.to_string());
    let patched =
        client::send(addr, &control("PATCH", "/__twice/contract", &case.contract), PATIENT_MS).await;
    check(&patched, &Expect::Status(200))?;
    let armed = client::send(addr, &control("POST", "/__twice/rules", &case.rules), PATIENT_MS).await;
    check(&armed, &Expect::Status(201))?;
    for (i, step) in case.steps.iter().enumerate() {
        let at = |e: String| format!("step {}: {e}", i + 1);
        match step {
            Step::Send(req, timeout_ms, expect) => {
                check(&client::send(addr, req, *timeout_ms).await, expect).map_err(at)?
            }
            Step::Overlap { first, after_ms, second, first_sees, second_sees } => {
                let first = first.clone();
                let first = tokio::spawn(async move { client::send(addr, &first, PATIENT_MS).await });
                tokio::time::sleep(Duration::from_millis(*after_ms)).await;
                let second = client::send(addr, second, PATIENT_MS).await;
                check(&first.await.expect("the first request's task"), first_sees).map_err(at)?;
                check(&second, second_sees).map_err(at)?;
            }
            Step::Ledger(n) => {
                let deadline = tokio::time::Instant::now() + Duration::from_millis(PATIENT_MS);
                while fake.ledger().len() < *n && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if fake.ledger().len() != *n {
                    return Err(at(format!("ledger holds {}, expected {n}", fake.ledger().len())));
                }
            }
            Step::JumpMs(ms) => fake.clock().jump_ms(*ms),
        }
    }
    let effects = fake.ledger().len();
    if effects != case.ledger {
        return Err(format!("ledger holds {effects} effects, expected {}", case.ledger));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fault_on_every_service() {
    let mut tasks = tokio::task::JoinSet::new();
    for case in cases() {
        tasks.spawn(async move {
            let name = case.name;
            (name, run(case).await)
        });
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    while let Some(done) = tasks.join_next().await {
        let (name, result) = done.expect("a case's task");
        ran += 1;
        if let Err(e) = result {
            failures.push(format!("{name}: {e}"));
        }
    }
    assert!(ran >= 30, "only {ran} cases ran");
    assert!(failures.is_empty(), "{} of {ran} cases failed:\n{}", failures.len(), failures.join("\n"));
}

/// Every fault kind appears in the table above for both services, so none is untested.
#[test]
fn the_table_covers_every_fault_on_both_services() {
    for service in [P, W] {
        for kind in fake_services::rule::FAULT_KINDS {
            let covered = cases().iter().any(|c| c.service == service && c.rules.to_string().contains(kind));
            assert!(covered, "no case injects {kind} on {service}");
        }
    }
}
