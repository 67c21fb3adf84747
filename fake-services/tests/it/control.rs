//! The control API under `/__twice/`, and determinism: the same seed and the same requests
//! give the same bytes.

use fake_services::{Disposition, FakeRequest, Fakes};
use serde_json::{Value, json};
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

use crate::client::manual_fakes;

async fn call(fakes: &Fakes, service: &str, method: &str, path: &str, body: Value) -> (u16, Value) {
    let fake = fakes.get(service).unwrap();
    let req =
        FakeRequest::new(method, path).body(if body.is_null() { String::new() } else { body.to_string() });
    match fake.handle(req).await {
        Disposition::Respond(r) => (r.status, r.body_json().unwrap_or(Value::Null)),
        other => panic!("control answered {other:?}"),
    }
}

#[tokio::test]
async fn rules_can_be_added_listed_removed_and_cleared() {
    let (fakes, _) = manual_fakes(1);
    let (status, added) = call(
        &fakes,
        "payments",
        "POST",
        "/__twice/rules",
        json!([
            {"id": "lost", "fault": "drop_after_commit", "nth": 1},
            {"fault": {"kind": "latency", "before_ms": 5}},
        ]),
    )
    .await;
    assert_eq!((status, added), (201, json!({"ids": ["lost", "rule-2"]})));
    let (_, listed) = call(&fakes, "payments", "GET", "/__twice/rules", Value::Null).await;
    assert_eq!(listed["rules"][0]["fault"]["kind"], "drop_after_commit");
    assert_eq!(listed["rules"][0]["matched"], 0);
    assert_eq!(call(&fakes, "payments", "DELETE", "/__twice/rules/lost", Value::Null).await.0, 200);
    assert_eq!(call(&fakes, "payments", "DELETE", "/__twice/rules/lost", Value::Null).await.0, 404);
    assert_eq!(call(&fakes, "payments", "DELETE", "/__twice/rules", Value::Null).await.0, 200);
    assert_eq!(call(&fakes, "payments", "GET", "/__twice/rules", Value::Null).await.1, json!({"rules": []}));
    let (status, refused) =
        call(&fakes, "payments", "POST", "/__twice/rules", json!({"fault": "silent_nop"})).await;
    assert_eq!(status, 400);
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("did you mean \"silent_noop\""),
        "{refused}"
    );
}

#[tokio::test]
async fn clock_contract_seed_and_reset() {
    let (fakes, _) = manual_fakes(1);
    let (_, before) = call(&fakes, "workspaces", "GET", "/__twice/clock", Value::Null).await;
    let (status, after) =
        call(&fakes, "workspaces", "POST", "/__twice/clock/jump", json!({"by_ms": 90_000_000})).await;
    assert_eq!(status, 200);
    assert_eq!(after["now_ms"].as_u64().unwrap() - before["now_ms"].as_u64().unwrap(), 90_000_000);
    assert_eq!(call(&fakes, "workspaces", "POST", "/__twice/clock/jump", json!({"by_ms": -1})).await.0, 400);

    let (status, contract) = call(
        &fakes,
        "workspaces",
        "PATCH",
        "/__twice/contract",
        json!({"reads": "eventual", "read_lag_ms_max": 500}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!((contract["reads"].as_str(), contract["fencing"].as_bool()), (Some("eventual"), Some(true)));
    assert_eq!(
        call(&fakes, "workspaces", "PATCH", "/__twice/contract", json!({"reads": "sometimes"})).await.0,
        400
    );

    let (status, seeded) = call(
        &fakes,
        "payments",
        "POST",
        "/__twice/seed",
        json!({"payment_intents": [{"id": "pi_2", "amount": 700}]}),
    )
    .await;
    assert_eq!((status, seeded["payment_intents"][0]["charge"].as_str()), (201, Some("ch_2")));
    assert_eq!(
        call(
            &fakes,
            "payments",
            "POST",
            "/__twice/seed",
            json!({"payment_intents": [{"id": "pi_2", "amount": 1}]})
        )
        .await
        .0,
        400
    );
    assert_eq!(call(&fakes, "workspaces", "POST", "/__twice/seed", json!({})).await.0, 400);

    assert_eq!(call(&fakes, "workspaces", "POST", "/__twice/reset", Value::Null).await.0, 200);
    let (_, contract) = call(&fakes, "workspaces", "GET", "/__twice/contract", Value::Null).await;
    assert_eq!(contract["reads"], "strong", "reset restores the default contract");
    let (_, clock) = call(&fakes, "workspaces", "GET", "/__twice/clock", Value::Null).await;
    assert_eq!(clock["jumped_ms"], 90_000_000, "time never moves back");
}

/// Runs a fixed workload with faults on fresh fakes and returns everything observable.
async fn workload(seed: u64) -> String {
    let (fakes, clock) = manual_fakes(seed);
    let payments = fakes.get("payments").unwrap();
    let mut rule = FaultRule::always(FaultSpec::DropAfterCommit).method("POST");
    rule.probability = Some(0.5);
    payments.add_rule(rule).unwrap();
    let mut out = Vec::new();
    for i in 0..40 {
        let req = FakeRequest::new("POST", "/v1/refunds")
            .header("Authorization", "Bearer sk_test_x")
            .header("Idempotency-Key", &format!("k{}", i % 7))
            .body(format!("payment_intent=pi_1&amount={}", 1 + i % 3));
        out.push(format!("{:?}", payments.handle(req).await));
        clock.advance_ms(1_000);
    }
    let ledger = serde_json::to_string(&payments.ledger()).unwrap();
    let journal = serde_json::to_string(&payments.journal()).unwrap();
    format!("{}\n{ledger}\n{journal}", out.join("\n"))
}

#[tokio::test]
async fn the_same_seed_gives_the_same_bytes() {
    let first = workload(42).await;
    assert_eq!(first, workload(42).await);
    assert_ne!(first, workload(43).await, "the seed reaches ids and fault draws");
    assert!(first.contains("Close") && first.contains("Respond"), "the workload exercises the fault");
}

/// Found by `cargo xtask fuzz-http`: a clock jumped past year 9999 made every GET of an object
/// panic (`Last-Modified` cannot be written), and jumps adding up past `u64::MAX` wrapped
/// service time back. Time now stops at the end of year 9999, and everything still answers.
#[tokio::test]
async fn a_clock_jumped_past_year_9999_stops_there_and_objects_still_answer() {
    use crate::client::{Req, Running, send};
    let running = Running::start(5).await;
    let files = running.addr("files");
    let put = send(files, &Req::new("PUT", "/reports/q3.csv").body("x"), 5_000).await;
    assert_eq!(put.status(), Some(404), "no bucket yet: {put:?}");
    let seed = Req::new("POST", "/__twice/seed").body(json!({"buckets": ["reports"]}).to_string());
    assert_eq!(send(files, &seed, 5_000).await.status(), Some(201));
    assert_eq!(send(files, &Req::new("PUT", "/reports/q3.csv").body("x"), 5_000).await.status(), Some(200));
    let mut last_now_ms = 0;
    for _ in 0..3 {
        let jump = Req::new("POST", "/__twice/clock/jump").body(json!({"by_ms": u64::MAX - 5}).to_string());
        let seen = send(files, &jump, 5_000).await;
        assert_eq!(seen.status(), Some(200), "{seen:?}");
        let now_ms = seen.json()["now_ms"].as_u64().expect("now_ms");
        assert!(now_ms >= last_now_ms, "time moved back: {now_ms} < {last_now_ms}");
        assert_eq!(now_ms, fake_services::clock::SERVICE_TIME_MS_MAX);
        last_now_ms = now_ms;
    }
    assert_eq!(send(files, &Req::new("PUT", "/reports/late.csv").body("y"), 5_000).await.status(), Some(200));
    for key in ["q3.csv", "late.csv"] {
        let get = send(files, &Req::new("GET", format!("/reports/{key}")), 5_000).await;
        assert_eq!(get.status(), Some(200), "{get:?}");
        assert!(get.header("last-modified").is_some(), "{get:?}");
    }
    let late = send(files, &Req::new("GET", "/reports/late.csv"), 5_000).await;
    assert_eq!(late.header("last-modified"), Some("Fri, 31 Dec 9999 23:59:59 GMT"), "{late:?}");
}

/// A control path asked with a method it does not take answers 405 with `Allow` (the methods
/// it does take), and a path it does not have stays 404; found by `cargo xtask fuzz-api`
/// (schemathesis's `unsupported_method` check), when every such request answered 404.
#[tokio::test]
async fn a_control_path_with_another_method_is_405_with_allow() {
    use crate::client::{Req, Running, send};
    let running = Running::start(5).await;
    for service in ["payments", "workspaces", "files", "chain", "messages"] {
        let addr = running.addr(service);
        for (method, path, allow) in [
            ("TRACE", "/__twice", "GET"),
            ("PUT", "/__twice/rules", "GET, POST, DELETE"),
            ("GET", "/__twice/rules/rule-1", "DELETE"),
            ("DELETE", "/__twice/contract", "GET, PATCH, POST"),
            ("GET", "/__twice/clock/jump", "POST"),
            ("PATCH", "/__twice/journal", "GET"),
        ] {
            let seen = send(addr, &Req::new(method, path), 5_000).await;
            assert_eq!(seen.status(), Some(405), "{service} {method} {path}: {seen:?}");
            assert_eq!(seen.header("allow"), Some(allow), "{service} {method} {path}: {seen:?}");
            assert!(seen.json()["error"]["message"].as_str().unwrap().contains("not allowed"), "{seen:?}");
        }
        let seen = send(addr, &Req::new("GET", "/__twice/nothing"), 5_000).await;
        assert_eq!(seen.status(), Some(404), "{service}: {seen:?}");
        assert_eq!(seen.header("allow"), None, "{service}: {seen:?}");
    }
}

/// The bodies of a clock jump, a contract patch and a seed are JSON objects: an array (which
/// serde would read as the struct's fields in order, `[5]` as `{"by_ms": 5}`, `[]` as an
/// empty seed) is refused with 400 and changes nothing; found by `cargo xtask fuzz-api`
/// (schemathesis's `negative_data_rejection` check: `POST /__twice/seed` with `[]` was 201).
#[tokio::test]
async fn control_bodies_that_are_not_objects_are_refused() {
    use crate::client::{Req, Running, send};
    let running = Running::start(5).await;
    let payments = running.addr("payments");
    for (method, path, body) in [
        ("POST", "/__twice/clock/jump", "[5]"),
        ("POST", "/__twice/clock/jump", " 5"),
        ("PATCH", "/__twice/contract", "[]"),
        ("POST", "/__twice/contract", "[\"ignored\"]"),
        ("POST", "/__twice/seed", "[]"),
        ("POST", "/__twice/seed", "[[{\"id\": \"pi_1\", \"amount\": 5000}]]"),
        ("POST", "/__twice/seed", "null"),
    ] {
        let seen = send(payments, &Req::new(method, path).body(body), 5_000).await;
        assert_eq!(seen.status(), Some(400), "{method} {path} {body}: {seen:?}");
        assert_eq!(seen.json()["error"]["message"], "expected a JSON object", "{seen:?}");
    }
    let clock = send(payments, &Req::new("GET", "/__twice/clock"), 5_000).await.json();
    assert_eq!(clock["jumped_ms"], 0, "no jump: {clock}");
    // Objects still go through, surrounded by white space or not.
    let jump =
        send(payments, &Req::new("POST", "/__twice/clock/jump").body("\n {\"by_ms\": 5}"), 5_000).await;
    assert_eq!(jump.status(), Some(200), "{jump:?}");
    let seed = Req::new("POST", "/__twice/seed")
        .body(r#"{"payment_intents": [{"id": "pi_object", "amount": 5000}]}"#);
    let seeded = send(payments, &seed, 5_000).await;
    assert_eq!(seeded.status(), Some(201), "{seeded:?}");
}

/// A rule's id is a path segment of `DELETE /__twice/rules/{id}`: one that could not arrive
/// there as it is (empty, with a `/`, a space, `?`, `#`, `%`, braces, quotes or beyond ASCII:
/// anything outside RFC 3986's `pchar` unencoded) is refused when
/// the rule is armed, and every id that is armed can be disarmed alone. Found by `cargo xtask
/// fuzz-api`: `{"id": "", ...}` was armed as `""`, which no DELETE could name.
#[tokio::test]
async fn a_rule_id_is_one_that_delete_can_name() {
    use crate::client::{Req, Running, send};
    let running = Running::start(5).await;
    let payments = running.addr("payments");
    let arm = |id: &str| {
        Req::new("POST", "/__twice/rules")
            .body(json!({"id": id, "fault": "refuse", "path": "/nobody"}).to_string())
    };
    for id in [
        "",
        "a/b",
        "a b",
        "tab\there",
        "why?",
        "a#b",
        "100%",
        "caf\u{e9}",
        "{x}",
        "a\"b",
        "<a>",
        "a|b",
        "[a]",
    ] {
        let seen = send(payments, &arm(id), 5_000).await;
        assert_eq!(seen.status(), Some(400), "{id:?}: {seen:?}");
        assert!(
            seen.json()["error"]["message"].as_str().unwrap().contains("DELETE /__twice/rules/{id}"),
            "{seen:?}"
        );
    }
    let rules = send(payments, &Req::new("GET", "/__twice/rules"), 5_000).await.json();
    assert_eq!(rules["rules"], json!([]), "nothing armed");
    for id in ["rule.ok-1_x~", "a!$&'()*+,;=:@b"] {
        let seen = send(payments, &arm(id), 5_000).await;
        assert_eq!(seen.status(), Some(201), "{id:?}: {seen:?}");
        assert_eq!(seen.json()["ids"], json!([id]));
        let removed = send(payments, &Req::new("DELETE", format!("/__twice/rules/{id}")), 5_000).await;
        assert_eq!(removed.status(), Some(200), "{id:?}: {removed:?}");
        assert_eq!(removed.json()["removed"], id);
    }
}
