//! Refusals that need a decision (400, 401, 403, 422), over real loopback HTTP: a `reject`
//! answers in each service's own words, each service refuses what the real one would
//! (Stripe's `amount_too_large` and restricted keys, S3's bucket policy, a workspace name the
//! product cannot show), and the journal keeps what each refused write asked for.

use serde_json::{Value, json};

use crate::chain::{TO, VALUE, funding, send_raw, transfer};
use crate::client::{self, Req, Running, Seen};

const PATIENT_MS: u64 = 10_000;

/// The write each case sends to its service.
fn write_to(service: &str) -> Req {
    match service {
        "payments" => Req::refund("payment_intent=pi_1&amount=700"),
        "workspaces" => Req::workspace("ext_1"),
        "files" => Req::new("PUT", "/reports/q3.csv").body("revenue 1200"),
        _ => send_raw(&transfer(0, VALUE).raw),
    }
}

/// What the journal must say the refused write asked for.
fn asked(service: &str) -> Value {
    match service {
        "payments" => json!({"payment_intent": "pi_1", "amount": 700}),
        "workspaces" => json!({"external_id": "ext_1", "name": "Acme"}),
        "files" => json!({"bucket": "reports", "key": "q3.csv", "body": "revenue 1200"}),
        _ => json!({"to": TO, "value": VALUE.to_string()}),
    }
}

/// The refusal's words as a client reads them: Stripe's `error.message`, S3's `<Code>`, or
/// the JSON-RPC error's message.
fn words(service: &str, seen: &Seen) -> String {
    let Seen::Answer { body, .. } = seen else { return String::new() };
    match service {
        "files" => body.split("<Code>").nth(1).and_then(|r| r.split("</Code>").next()).unwrap_or("").into(),
        "chain" => seen.json().pointer("/error/message").and_then(Value::as_str).unwrap_or("").into(),
        _ => seen.json().pointer("/error/message").and_then(Value::as_str).unwrap_or("").into(),
    }
}

async fn last_journal_entry(running: &Running, service: &str) -> vocabulary::JournalEntry {
    running.fake(service).journal().into_iter().last().expect("the request is journaled")
}

#[tokio::test]
async fn a_reject_that_needs_a_decision_answers_in_each_services_words() {
    let cases: &[(&str, u16, &str)] = &[
        ("payments", 400, "it is not valid for this endpoint"),
        ("payments", 401, "Invalid API Key provided."),
        ("payments", 403, "does not have the required permissions"),
        ("payments", 422, "its parameters cannot be processed"),
        ("workspaces", 403, "does not have the required permissions"),
        ("workspaces", 422, "its parameters cannot be processed"),
        ("files", 400, "InvalidArgument"),
        ("files", 401, "Unauthorized"),
        ("files", 403, "AccessDenied"),
        ("files", 422, "UnprocessableEntity"),
        ("chain", 400, "invalid request"),
        ("chain", 401, "missing token"),
        ("chain", 403, "invalid host specified"),
        ("chain", 422, "the request cannot be processed"),
    ];
    for (service, status, said) in cases {
        let running = Running::start(11).await;
        running.fakes.files.seed_bucket("reports").expect("a bucket");
        let funded = client::send(running.addr("chain"), &funding(), PATIENT_MS).await;
        assert_eq!(funded.status(), Some(201));
        let rule = json!({"method": if *service == "files" { "PUT" } else { "POST" }, "fault": {"kind": "reject", "status": status}});
        running.fake(service).add_rule(serde_json::from_value(rule).expect("a rule")).expect("armed");
        let seen = client::send(running.addr(service), &write_to(service), PATIENT_MS).await;
        let what = format!("{service} {status}: {seen:?}");
        assert_eq!(seen.status(), Some(*status), "{what}");
        assert!(words(service, &seen).contains(said), "{what}");
        match *service {
            "payments" | "workspaces" => {
                assert_eq!(
                    seen.json().pointer("/error/type"),
                    Some(&json!("invalid_request_error")),
                    "{what}"
                )
            }
            "chain" => {
                // The request's id is echoed, as geth echoes it.
                assert_eq!(seen.json().pointer("/id"), Some(&json!(1)), "{what}");
                assert_eq!(seen.json().pointer("/error/code"), Some(&json!(-32600)), "{what}");
            }
            _ => assert_eq!(seen.header("content-type"), Some("application/xml"), "{what}"),
        }
        let entry = last_journal_entry(&running, service).await;
        assert_eq!((entry.status, entry.params), (Some(*status), Some(asked(service))), "{what}");
        assert!(running.fake(service).ledger().is_empty(), "{what}: nothing executed");
    }
}

#[tokio::test]
async fn a_refusal_that_says_not_now_and_an_answer_that_went_through_keep_no_params() {
    let running = Running::start(12).await;
    let rule = json!({"method": "POST", "nth": 1, "fault": {"kind": "reject", "status": 429}});
    running.fake("payments").add_rule(serde_json::from_value(rule).expect("a rule")).expect("armed");
    for want in [429, 200] {
        let seen = client::send(running.addr("payments"), &write_to("payments"), PATIENT_MS).await;
        assert_eq!(seen.status(), Some(want), "{seen:?}");
        let entry = last_journal_entry(&running, "payments").await;
        assert_eq!(entry.params, None, "a {want} is no refusal that needs a decision");
    }
}

#[tokio::test]
async fn stripe_refuses_a_refund_larger_than_what_is_left_and_one_of_a_refunded_charge() {
    let running = Running::start(13).await;
    let addr = running.addr("payments");
    let too_large = client::send(addr, &Req::refund("payment_intent=pi_1&amount=8000"), PATIENT_MS).await;
    assert_eq!(too_large.status(), Some(400), "{too_large:?}");
    let error = too_large.json()["error"].clone();
    assert_eq!((error["code"].as_str(), error["param"].as_str()), (Some("amount_too_large"), Some("amount")));
    assert!(error["message"].as_str().unwrap_or("").contains("greater than unrefunded amount"), "{error}");
    assert_eq!(
        last_journal_entry(&running, "payments").await.params,
        Some(json!({"payment_intent": "pi_1", "amount": 8000}))
    );
    let all = client::send(addr, &Req::refund("payment_intent=pi_1&amount=5000"), PATIENT_MS).await;
    assert_eq!(all.status(), Some(200), "{all:?}");
    let again = client::send(addr, &Req::refund("payment_intent=pi_1&amount=100"), PATIENT_MS).await;
    assert_eq!(again.status(), Some(400), "{again:?}");
    assert_eq!(again.json().pointer("/error/code"), Some(&json!("charge_already_refunded")));
    assert_eq!(running.fake("payments").ledger().len(), 1);
}

#[tokio::test]
async fn a_restricted_key_without_the_refund_permission_is_refused_with_403() {
    let running = Running::start(14).await;
    let addr = running.addr("payments");
    let key = "rk_test_51readonly000000009f3c";
    let seed = Req::new("POST", "/__twice/seed")
        .body(json!({"restricted_keys": [{"key": key, "permissions": ["rak_refund_read"]}]}).to_string());
    assert_eq!(client::send(addr, &seed, PATIENT_MS).await.status(), Some(201));
    let with_key = |req: Req| {
        let mut req = req;
        req.headers.retain(|(n, _)| !n.eq_ignore_ascii_case("authorization"));
        req.header("Authorization", &format!("Bearer {key}"))
    };
    let refused =
        client::send(addr, &with_key(Req::refund("payment_intent=pi_1&amount=700")), PATIENT_MS).await;
    assert_eq!(refused.status(), Some(403), "{refused:?}");
    let error = refused.json()["error"].clone();
    assert_eq!(error["type"], json!("invalid_request_error"));
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("'rak_refund_write' permission"), "{message}");
    assert!(
        message.contains("'rk_test_") && message.contains("9f3c'") && !message.contains(key),
        "redacted: {message}"
    );
    assert_eq!(refused.header("stripe-should-retry"), Some("false"));
    assert!(running.fake("payments").ledger().is_empty());
    // Reading is what the key may do; a secret key may do everything.
    let list =
        client::send(addr, &with_key(Req::new("GET", "/v1/refunds?payment_intent=pi_1")), PATIENT_MS).await;
    assert_eq!(list.status(), Some(200), "{list:?}");
    let secret = client::send(addr, &Req::refund("payment_intent=pi_1&amount=700"), PATIENT_MS).await;
    assert_eq!(secret.status(), Some(200), "{secret:?}");
    // A permission Stripe does not have is refused at seeding, naming the known ones.
    let wrong = Req::new("POST", "/__twice/seed")
        .body(json!({"restricted_keys": [{"key": key, "permissions": ["rak_refunds_write"]}]}).to_string());
    let wrong = client::send(addr, &wrong, PATIENT_MS).await;
    assert_eq!(wrong.status(), Some(400), "{wrong:?}");
    assert!(
        wrong
            .json()
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("")
            .contains("rak_refund_write")
    );
}

/// Strict keys: only the seeded secret and restricted keys are accepted; any other is
/// Stripe's 401 for a key it never issued (the key redacted), judged before anything else,
/// so nothing is written. Off again after a reset, as every seed is.
#[tokio::test]
async fn under_strict_keys_a_key_never_seeded_is_401_and_a_seeded_one_works() {
    let running = Running::start(16).await;
    let addr = running.addr("payments");
    let ours = "sk_test_ours00001234";
    let reader = "rk_test_reader0005678";
    let seed = Req::new("POST", "/__twice/seed").body(
        json!({
            "secret_keys": [ours],
            "restricted_keys": [{"key": reader, "permissions": ["rak_refund_read"]}],
            "strict_keys": true
        })
        .to_string(),
    );
    let seeded = client::send(addr, &seed, PATIENT_MS).await;
    assert_eq!(seeded.status(), Some(201), "{seeded:?}");
    assert_eq!(seeded.json()["strict_keys"], json!(true), "{seeded:?}");
    let with_key = |req: Req, key: &str| {
        let mut req = req;
        req.headers.retain(|(n, _)| !n.eq_ignore_ascii_case("authorization"));
        req.header("Authorization", &format!("Bearer {key}"))
    };
    // `Req::refund` carries `sk_test_x`, which was never seeded.
    let refused = client::send(addr, &Req::refund("payment_intent=pi_1&amount=700"), PATIENT_MS).await;
    assert_eq!(refused.status(), Some(401), "{refused:?}");
    assert_eq!(refused.json()["error"]["type"], json!("invalid_request_error"));
    assert_eq!(words("payments", &refused), "Invalid API Key provided: sk_test_x");
    let made_up = "sk_test_madeup0000abcd";
    let refused = client::send(
        addr,
        &with_key(Req::new("GET", "/v1/refunds?payment_intent=pi_1"), made_up),
        PATIENT_MS,
    )
    .await;
    assert_eq!(refused.status(), Some(401), "{refused:?}");
    assert_eq!(words("payments", &refused), "Invalid API Key provided: sk_test_**********abcd");
    assert!(running.fake("payments").ledger().is_empty());
    let done =
        client::send(addr, &with_key(Req::refund("payment_intent=pi_1&amount=700"), ours), PATIENT_MS).await;
    assert_eq!(done.status(), Some(200), "{done:?}");
    assert_eq!(running.fake("payments").ledger().len(), 1);
    // A seeded restricted key is accepted, and still only for what it was given.
    let read =
        client::send(addr, &with_key(Req::new("GET", "/v1/refunds?payment_intent=pi_1"), reader), PATIENT_MS)
            .await;
    assert_eq!(read.status(), Some(200), "{read:?}");
    let write =
        client::send(addr, &with_key(Req::refund("payment_intent=pi_1&amount=100"), reader), PATIENT_MS)
            .await;
    assert_eq!(write.status(), Some(403), "{write:?}");
    // A secret key must look like one.
    let wrong =
        Req::new("POST", "/__twice/seed").body(json!({"secret_keys": ["pk_test_12345678"]}).to_string());
    let wrong = client::send(addr, &wrong, PATIENT_MS).await;
    assert_eq!(wrong.status(), Some(400), "{wrong:?}");
    assert!(words("payments", &wrong).contains("a secret key is \"sk_\""), "{wrong:?}");
    // A reset forgets the seeds, strict keys with them.
    let reset = client::send(addr, &Req::new("POST", "/__twice/reset"), PATIENT_MS).await;
    assert!(matches!(reset.status(), Some(200 | 204)), "{reset:?}");
    let any = client::send(
        addr,
        &Req::new("GET", "/v1/refunds?payment_intent=pi_1").header("Authorization", "Bearer sk_test_x"),
        PATIENT_MS,
    )
    .await;
    assert_ne!(any.status(), Some(401), "{any:?}");
}

#[tokio::test]
async fn a_bucket_whose_policy_denies_writes_is_403_access_denied_and_still_read() {
    let running = Running::start(15).await;
    let addr = running.addr("files");
    let seed = Req::new("POST", "/__twice/seed").body(
        json!({"objects": [{"bucket": "audit", "key": "2025.log", "body": "sealed"}], "read_only_buckets": ["audit"]})
            .to_string(),
    );
    assert_eq!(client::send(addr, &seed, PATIENT_MS).await.status(), Some(201));
    for req in [
        Req::new("PUT", "/audit/2025.log").body("rewritten"),
        Req::new("DELETE", "/audit/2025.log"),
        Req::new("POST", "/audit/2026.log?uploads"),
    ] {
        let seen = client::send(addr, &req, PATIENT_MS).await;
        assert_eq!(seen.status(), Some(403), "{} {}: {seen:?}", req.method, req.target);
        assert_eq!(words("files", &seen), "AccessDenied");
    }
    assert_eq!(
        last_journal_entry(&running, "files").await.params,
        None,
        "a multipart create is no action's write"
    );
    let read = client::send(addr, &Req::new("GET", "/audit/2025.log"), PATIENT_MS).await;
    assert!(matches!(&read, Seen::Answer { status: 200, body, .. } if body == "sealed"), "{read:?}");
    assert!(running.fake("files").ledger().is_empty());
}

#[tokio::test]
async fn a_workspace_name_people_could_not_be_shown_is_422_name_invalid() {
    let running = Running::start(16).await;
    let addr = running.addr("workspaces");
    let create = |external_id: &str, name: &str| {
        Req::new("POST", "/v1/workspaces")
            .header("Content-Type", "application/json")
            .body(json!({"external_id": external_id, "name": name}).to_string())
    };
    for name in ["Globex Corporation!!", " Leading space", "Tab\there", &"x".repeat(65)] {
        let seen = client::send(addr, &create("bad", name), PATIENT_MS).await;
        assert_eq!(seen.status(), Some(422), "{name:?}: {seen:?}");
        let error = seen.json()["error"].clone();
        assert_eq!((error["code"].as_str(), error["param"].as_str()), (Some("name_invalid"), Some("name")));
        assert_eq!(
            last_journal_entry(&running, "workspaces").await.params,
            Some(json!({"external_id": "bad", "name": name}))
        );
    }
    for (i, name) in
        ["Globex Corporation", "Ærø Fiskeri (Nord) & Co.", &"x".repeat(64)].into_iter().enumerate()
    {
        let seen = client::send(addr, &create(&format!("good-{i}"), name), PATIENT_MS).await;
        assert_eq!(seen.status(), Some(200), "{name:?}: {seen:?}");
    }
    assert_eq!(running.fake("workspaces").ledger().len(), 3);
}
