//! The bounds of docs/faults.md's "Limits", each over real HTTP: what a client gets at the
//! bound, in the service's own error shape, and that the fake goes on serving.

use fake_services::Bounds;
use serde_json::Value;

use super::client::{self, Req, Running, Seen};

const WAIT_MS: u64 = 30_000;

/// The error's words, wherever the service's shape puts them: Stripe's `error.message`,
/// JSON-RPC's `error.message`, Resend's `message`, S3's `<Message>`.
fn words(seen: &Seen) -> String {
    let json = seen.json();
    if let Some(m) = json.pointer("/error/message").or_else(|| json.get("message")).and_then(Value::as_str) {
        return m.to_string();
    }
    match seen {
        Seen::Answer { body, .. } => body.clone(),
        other => format!("{other:?}"),
    }
}

/// Each service's shape for one error: the status, and where the words are.
fn assert_shaped(service: &str, seen: &Seen, status: u16, says: &str, s3_code: &str) {
    assert_eq!(seen.status(), Some(status), "{service}: {seen:?}");
    let json = seen.json();
    match service {
        "payments" | "workspaces" => assert!(json.pointer("/error/type").is_some(), "{service}: {seen:?}"),
        "chain" => assert_eq!(json["jsonrpc"], "2.0", "{service}: {seen:?}"),
        "messages" => assert_eq!(json["statusCode"], status, "{service}: {seen:?}"),
        "files" => {
            assert_eq!(seen.header("content-type"), Some("application/xml"), "{seen:?}");
            assert!(words(seen).contains(&format!("<Code>{s3_code}</Code>")), "files: {seen:?}");
        }
        _ => unreachable!(),
    }
    assert!(words(seen).contains(says), "{service}: \"{says}\" in {seen:?}");
}

const SERVICES: [&str; 5] = ["payments", "workspaces", "files", "chain", "messages"];

/// A path every service answers (with anything): what matters is what comes before it.
fn probe(service: &str) -> &'static str {
    match service {
        "payments" => "/v1/refunds",
        "workspaces" => "/v1/workspaces",
        "files" => "/bucket",
        "chain" => "/",
        _ => "/emails",
    }
}

async fn still_serving(running: &Running, service: &str) {
    let seen = client::send(running.addr(service), &Req::new("GET", "/__twice/health"), WAIT_MS).await;
    assert_eq!(seen.status(), Some(200), "{service} still serves: {seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_over_the_bound_is_414_in_the_services_shape() {
    let running = Running::start(1).await;
    let long = "a".repeat(fake_services::server::URL_BYTES_MAX);
    for service in SERVICES {
        let req = Req::new("GET", format!("{}?q={long}", probe(service)));
        let seen = client::send(running.addr(service), &req, WAIT_MS).await;
        assert_shaped(service, &seen, 414, "at most 16384 are read", "InvalidURI");
        // At the bound itself the request reaches the fake.
        let at = Req::new(
            "GET",
            format!("{}?q={}", probe(service), &long[..long.len() - probe(service).len() - 3]),
        );
        let seen = client::send(running.addr(service), &at, WAIT_MS).await;
        assert_ne!(seen.status(), Some(414), "{service}: {seen:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_over_the_bounds_are_431_in_the_services_shape() {
    let running = Running::start(1).await;
    let one = "v".repeat(fake_services::server::HEADER_BYTES_MAX);
    let part = "v".repeat(15 * 1024);
    for service in SERVICES {
        let req = Req::new("GET", probe(service)).header("X-Big", &one);
        let seen = client::send(running.addr(service), &req, WAIT_MS).await;
        assert_shaped(
            service,
            &seen,
            431,
            "The header x-big is 16389 bytes long",
            "RequestHeaderSectionTooLarge",
        );

        let mut req = Req::new("GET", probe(service));
        for i in 0..5 {
            req = req.header(&format!("X-Part-{i}"), &part);
        }
        let seen = client::send(running.addr(service), &req, WAIT_MS).await;
        assert_shaped(service, &seen, 431, "header section is", "RequestHeaderSectionTooLarge");
    }
}

/// Past hyper's own bounds (a section over 128 KiB, more than 100 headers) hyper answers 431
/// with no body, or the connection ends while the client still writes; either way nothing is
/// read into memory past the bound and the fake goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_hypers_bounds_the_request_is_refused_and_the_fake_serves_on() {
    let running = Running::start(1).await;
    let part = "v".repeat(15 * 1024);
    let mut huge = Req::new("GET", "/v1/refunds");
    for i in 0..10 {
        huge = huge.header(&format!("X-Part-{i}"), &part);
    }
    let mut many = Req::new("GET", "/v1/refunds");
    for i in 0..=fake_services::server::HEADERS_MAX {
        many = many.header(&format!("X-H-{i}"), "1");
    }
    for req in [huge, many] {
        let seen = client::send(running.addr("payments"), &req, WAIT_MS).await;
        assert!(
            matches!(seen, Seen::Reset | Seen::Closed) || seen.status() == Some(431),
            "{} headers: {seen:?}",
            req.headers.len()
        );
        still_serving(&running, "payments").await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_over_the_bound_are_413_in_the_services_shape() {
    let running = Running::start(1).await;
    for service in SERVICES {
        let max = running.fake(service).body_bytes_max();
        let req = Req::new("POST", probe(service)).body(vec![b' '; max + 1]);
        let seen = client::send(running.addr(service), &req, WAIT_MS).await;
        // The fake reads the rest of the body before it answers, so the client, still
        // sending, reads the 413 and not a reset.
        assert_shaped(service, &seen, 413, "larger than", "EntityTooLarge");
        still_serving(&running, service).await;
    }
}

/// A body well over the bound (8 MiB past it), sent whole before the client reads: the answer
/// is still the 413, never a reset, because the fake reads the rest before it closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_still_sending_reads_the_413_not_a_reset() {
    let running = Running::start(1).await;
    for service in ["payments", "files"] {
        let max = running.fake(service).body_bytes_max();
        for _ in 0..3 {
            let req = Req::new("POST", probe(service)).body(vec![b' '; max + 8 * 1024 * 1024]);
            let seen = client::send(running.addr(service), &req, WAIT_MS).await;
            assert_shaped(service, &seen, 413, "larger than", "EntityTooLarge");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_holds_at_most_ten_thousand_rules() {
    let running = Running::start(1).await;
    let rule = r#"{"fault":"refuse","path":"/nowhere"}"#;
    let rules = format!("[{}]", vec![rule; fake_services::fault_engine::RULES_MAX + 1].join(","));
    let seen =
        client::send(running.addr("payments"), &Req::new("POST", "/__twice/rules").body(rules), WAIT_MS)
            .await;
    assert_eq!(seen.status(), Some(400), "{seen:?}");
    assert!(words(&seen).contains("already holds 10000 rules; clear some first"), "{seen:?}");
    assert_eq!(running.fake("payments").rules().len(), fake_services::fault_engine::RULES_MAX);
}

/// A full journal refuses every request unseen (503 in the service's shape), counts it, and
/// lets none of its entries go; the control API still answers, and a reset starts over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_journal_refuses_requests_and_keeps_every_entry() {
    let running = Running::start(1).await;
    for service in SERVICES {
        let fake = running.fake(service);
        fake.set_bounds(Bounds { journal_entries_max: 2, ..Bounds::default() });
        for _ in 0..2 {
            let seen = client::send(running.addr(service), &Req::new("GET", probe(service)), WAIT_MS).await;
            assert_ne!(seen.status(), Some(503), "{service}: {seen:?}");
        }
        let seen = client::send(running.addr(service), &Req::new("GET", probe(service)), WAIT_MS).await;
        assert_shaped(service, &seen, 503, "journal holds 2 requests, its bound", "SlowDown");
        let journal =
            client::send(running.addr(service), &Req::new("GET", "/__twice/journal"), WAIT_MS).await.json();
        assert_eq!(journal["entries"].as_array().map(Vec::len), Some(2), "{journal}");
        assert_eq!((journal["capacity"].as_u64(), journal["refused"].as_u64()), (Some(2), Some(1)));
        let reset = client::send(running.addr(service), &Req::new("POST", "/__twice/reset"), WAIT_MS).await;
        assert_eq!(reset.status(), Some(200));
        let seen = client::send(running.addr(service), &Req::new("GET", probe(service)), WAIT_MS).await;
        assert_ne!(seen.status(), Some(503), "{service} after a reset: {seen:?}");
    }
}

/// A full ledger refuses writes before they commit: every effect that happened is still there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ledger_refuses_writes_before_they_commit() {
    let running = Running::start(1).await;
    let payments = running.fake("payments");
    payments.set_bounds(Bounds { ledger_effects_max: 2, ..Bounds::default() });
    for i in 0..2 {
        let seen = client::send(
            running.addr("payments"),
            &Req::refund("payment_intent=pi_1&amount=10").key(&format!("k{i}")),
            WAIT_MS,
        )
        .await;
        assert_eq!(seen.status(), Some(200), "{seen:?}");
    }
    let seen = client::send(
        running.addr("payments"),
        &Req::refund("payment_intent=pi_1&amount=10").key("k2"),
        WAIT_MS,
    )
    .await;
    assert_shaped("payments", &seen, 503, "ledger holds 2 effects, its bound", "");
    assert_eq!(payments.ledger().len(), 2);
    // The refused key kept nothing: the same request after a raise of the bound is new.
    payments.set_bounds(Bounds::default());
    let seen = client::send(
        running.addr("payments"),
        &Req::refund("payment_intent=pi_1&amount=10").key("k2"),
        WAIT_MS,
    )
    .await;
    assert_eq!((seen.status(), seen.header("idempotent-replayed")), (Some(200), None), "{seen:?}");

    let files = running.fake("files");
    files.set_bounds(Bounds { ledger_effects_max: 0, ..Bounds::default() });
    running.fakes.files.seed_bucket("bkt").unwrap();
    let put = client::send(running.addr("files"), &Req::new("PUT", "/bkt/k").body("x"), WAIT_MS).await;
    assert_shaped("files", &put, 503, "ledger holds 0 effects", "SlowDown");
    assert!(files.ledger().is_empty());
}

/// Idempotency keys within retention are never forgotten to make room: a new key past the
/// bound is refused, and a retry with a held key is still answered from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_key_store_refuses_new_keys_and_keeps_held_ones() {
    let running = Running::start(1).await;
    running.fake("payments").set_bounds(Bounds { keys_max: 2, ..Bounds::default() });
    let refund = |key: &str| Req::refund("payment_intent=pi_1&amount=10").key(key);
    for key in ["a", "b"] {
        assert_eq!(client::send(running.addr("payments"), &refund(key), WAIT_MS).await.status(), Some(200));
    }
    let seen = client::send(running.addr("payments"), &refund("c"), WAIT_MS).await;
    assert_shaped("payments", &seen, 503, "holds 2 idempotency keys within their retention", "");
    let retry = client::send(running.addr("payments"), &refund("a"), WAIT_MS).await;
    assert_eq!((retry.status(), retry.header("idempotent-replayed")), (Some(200), Some("true")));
    assert_eq!(running.fake("payments").ledger().len(), 2);

    running.fake("messages").set_bounds(Bounds { keys_max: 0, ..Bounds::default() });
    let seen = client::send(running.addr("messages"), &Req::email("a@example.com").key("m1"), WAIT_MS).await;
    assert_shaped("messages", &seen, 503, "idempotency keys", "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_past_the_bound_are_refused() {
    let running = Running::start(1).await;
    running.fake("files").set_bounds(Bounds { seeded_objects_max: 3, ..Bounds::default() });
    let seed = |body: &str| Req::new("POST", "/__twice/seed").body(body.to_string());
    let first = r#"{"buckets": ["bkt"], "objects": [{"bucket": "bkt", "key": "k1", "body": "x"}]}"#;
    assert_eq!(client::send(running.addr("files"), &seed(first), WAIT_MS).await.status(), Some(201));
    let second = r#"{"objects": [{"bucket": "bkt", "key": "k2", "body": "x"}, {"bucket": "bkt", "key": "k3", "body": "x"}]}"#;
    let seen = client::send(running.addr("files"), &seed(second), WAIT_MS).await;
    assert_eq!(seen.status(), Some(400), "{seen:?}");
    assert!(
        words(&seen).contains("this seed has 2 objects and files already holds 2 seeded ones; at most 3"),
        "{seen:?}"
    );
    let get = client::send(running.addr("files"), &Req::new("GET", "/bkt/k2"), WAIT_MS).await;
    assert_eq!(get.status(), Some(404), "nothing of a refused seed: {get:?}");
}

/// The defaults are the figures docs/faults.md gives.
#[test]
fn the_default_bounds_are_the_documented_ones() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/faults.md")).unwrap();
    let limits = &docs[docs.find("## Limits").expect("a Limits section")..];
    let bounds = Bounds::default();
    for (figure, value) in [
        ("100 000 requests", bounds.journal_entries_max == 100_000),
        ("1 000 000 effects", bounds.ledger_effects_max == 1_000_000),
        ("1 000 000 idempotency keys", bounds.keys_max == 1_000_000),
        ("100 000 seeded objects", bounds.seeded_objects_max == 100_000),
        ("10 000 rules", fake_services::fault_engine::RULES_MAX == 10_000),
        ("16 KiB", fake_services::server::URL_BYTES_MAX == 16 * 1024),
        ("64 KiB", fake_services::server::HEADER_SECTION_BYTES_MAX == 64 * 1024),
    ] {
        assert!(limits.contains(figure) && value, "{figure}");
    }
}
