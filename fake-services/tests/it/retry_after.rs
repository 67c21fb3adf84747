//! Every 429 a fake sends carries `Retry-After`, whichever service, fault or body made it, and
//! whether the request was a write or a read: one table over the five services, over loopback
//! HTTP. A 503 carries one only where the real service sends one (S3's `SlowDown` and
//! Stripe's 503s do not).

use serde_json::{Value, json};

use crate::chain::{VALUE, call, send_raw, transfer};
use crate::client::{self, Req, Running, Seen};

const WAIT_MS: u64 = 10_000;

/// What the fakes say in `Retry-After`: `fake_services::core::RETRY_AFTER_S`.
const RETRY_AFTER: &str = "1";

/// One service's requests and the word its own 429 body carries.
struct Service {
    name: &'static str,
    write: fn() -> Req,
    read: fn() -> Req,
    /// Text the service's own 429 body holds (its shape's name for a rate limit).
    says: &'static str,
}

fn services() -> Vec<Service> {
    vec![
        Service {
            name: "payments",
            write: || Req::refund("payment_intent=pi_1&amount=100"),
            read: || Req::new("GET", "/v1/payment_intents?limit=3").authorized(),
            says: "\"api_error\"",
        },
        Service {
            name: "workspaces",
            write: || Req::workspace("org-1"),
            read: || Req::new("GET", "/v1/workspaces?external_id=org-1"),
            says: "rate limited. Retry after 1 s",
        },
        Service {
            name: "files",
            write: || Req::new("PUT", "/reports/q4.csv").body(b"v1".to_vec()),
            read: || Req::new("GET", "/reports/q4.csv"),
            says: "<Code>SlowDown</Code>",
        },
        Service {
            name: "chain",
            write: || send_raw(&transfer(0, VALUE).raw),
            read: || call("eth_chainId", json!([])),
            says: "-32005",
        },
        Service {
            name: "messages",
            write: || Req::email("ada@example.com"),
            read: || Req::mailbox("ada@example.com"),
            says: "rate_limit_exceeded",
        },
    ]
}

/// The ways a fault makes a 429, and the text its body holds (`None`: the service's own).
fn faults() -> Vec<(&'static str, Value, Option<&'static str>)> {
    vec![
        ("reject", json!({"kind": "reject", "status": 429}), None),
        (
            "reject with a body",
            json!({"kind": "reject", "status": 429, "body": {"message": "slow down"}}),
            Some("slow down"),
        ),
        ("error_after_commit", json!({"kind": "error_after_commit", "status": 429}), None),
    ]
}

/// Arms `fault` alone on `service`'s fake, sends `req`, and disarms it again.
async fn under(running: &Running, service: &str, fault: &Value, req: &Req) -> Seen {
    let fake = running.fake(service);
    fake.clear_rules();
    let rule = serde_json::from_value(json!({"fault": fault, "nth": 1})).expect("a valid rule");
    fake.add_rule(rule).expect("the rule is armed");
    let seen = client::send(running.addr(service), req, WAIT_MS).await;
    fake.clear_rules();
    seen
}

/// What is wrong with `seen` for a 429 that should say `says`, if anything.
fn wrong(seen: &Seen, says: &str) -> Option<String> {
    let Seen::Answer { status: 429, body, .. } = seen else { return Some("no 429".into()) };
    if seen.header("retry-after") != Some(RETRY_AFTER) {
        return Some(format!("Retry-After {:?}", seen.header("retry-after")));
    }
    (!body.contains(says)).then(|| format!("the body does not say {says:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_429_a_fake_sends_carries_retry_after() {
    let running = Running::start(3).await;
    let seed = Req::new("POST", "/__twice/seed").body(json!({"buckets": ["reports"]}).to_string());
    assert_eq!(client::send(running.addr("files"), &seed, WAIT_MS).await.status(), Some(201));
    let mut failures = Vec::new();
    let mut covered = Vec::new();
    for service in services() {
        covered.push(service.name);
        for (fault_name, fault, body_says) in faults() {
            for (kind, req) in [("write", (service.write)()), ("read", (service.read)())] {
                let seen = under(&running, service.name, &fault, &req).await;
                if let Some(what) = wrong(&seen, body_says.unwrap_or(service.says)) {
                    failures.push(format!("{} {kind}, {fault_name}: {what}: {seen:?}", service.name));
                }
            }
        }
    }
    let mut all: Vec<&str> = running.fakes.all().iter().map(|f| f.name()).collect();
    covered.sort();
    all.sort();
    assert_eq!(covered, all, "the table covers every service");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A 429 saved under an idempotency key (`error_after_commit`) is replayed with its
/// `Retry-After`: the replay passes through the same stamp as the first answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_429_carries_retry_after_too() {
    let running = Running::start(3).await;
    let fault = json!({"kind": "error_after_commit", "status": 429});
    let keyed = Req::refund("payment_intent=pi_1&amount=100").key("k-429");
    let first = under(&running, "payments", &fault, &keyed).await;
    assert_eq!(wrong(&first, "api_error"), None, "{first:?}");
    let replay = client::send(running.addr("payments"), &keyed, WAIT_MS).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"), "{replay:?}");
    assert_eq!(wrong(&replay, "api_error"), None, "{replay:?}");
}

/// A 503 is left as each service sends it: S3's `SlowDown` and Stripe's 503 carry no
/// `Retry-After`, so the fakes add none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_503_carries_no_retry_after_where_the_service_sends_none() {
    let running = Running::start(3).await;
    let fault = json!({"kind": "reject", "status": 503});
    for (service, req) in
        [("files", Req::new("GET", "/reports/q3.csv")), ("payments", Req::refund("payment_intent=pi_1"))]
    {
        let seen = under(&running, service, &fault, &req).await;
        assert_eq!((seen.status(), seen.header("retry-after")), (Some(503), None), "{service}: {seen:?}");
    }
}

/// The workspaces fake's 429 says, in its own error shape, that the request was rate limited
/// and when to come back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspaces_429_says_rate_limited_and_when_to_retry() {
    let running = Running::start(3).await;
    let seen =
        under(&running, "workspaces", &json!({"kind": "reject", "status": 429}), &Req::workspace("o")).await;
    let error = &seen.json()["error"];
    assert_eq!(
        (&error["type"], &error["code"]),
        (&json!("invalid_request_error"), &json!("rate_limit")),
        "{seen:?}"
    );
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("rate limited") && message.contains("Retry after 1 s"), "{message}");
}
