//! Behaviour of the services' own APIs that SDKs rely on, in process.

use fake_services::{Disposition, FakeRequest, Fakes};
use serde_json::Value;

use crate::client::manual_fakes;

async fn get(fakes: &Fakes, target: &str) -> Value {
    let req = FakeRequest::new("GET", target).header("Authorization", "Bearer sk_test_x");
    match fakes.payments.handle(req).await {
        Disposition::Respond(r) => r.body_json().unwrap(),
        other => panic!("{other:?}"),
    }
}

fn ids(page: &Value) -> Vec<String> {
    page["data"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn refund_lists_page_both_ways_newest_first() {
    let (fakes, clock) = manual_fakes(9);
    let mut created = Vec::new();
    for _ in 0..5 {
        let req = FakeRequest::new("POST", "/v1/refunds")
            .header("Authorization", "Bearer sk_test_x")
            .body("payment_intent=pi_1&amount=10");
        let Disposition::Respond(r) = fakes.payments.handle(req).await else { panic!() };
        created.push(r.body_json().unwrap()["id"].as_str().unwrap().to_string());
        clock.advance_ms(1_000);
    }
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();
    let all = get(&fakes, "/v1/refunds?payment_intent=pi_1").await;
    assert_eq!((ids(&all), all["has_more"].as_bool()), (newest_first.clone(), Some(false)));

    let first = get(&fakes, "/v1/refunds?payment_intent=pi_1&limit=2").await;
    assert_eq!((ids(&first), first["has_more"].as_bool()), (newest_first[..2].to_vec(), Some(true)));
    let second = get(&fakes, &format!("/v1/refunds?limit=2&starting_after={}", newest_first[1])).await;
    assert_eq!((ids(&second), second["has_more"].as_bool()), (newest_first[2..4].to_vec(), Some(true)));
    let last = get(&fakes, &format!("/v1/refunds?limit=2&starting_after={}", newest_first[3])).await;
    assert_eq!((ids(&last), last["has_more"].as_bool()), (newest_first[4..].to_vec(), Some(false)));

    let back = get(&fakes, &format!("/v1/refunds?limit=2&ending_before={}", newest_first[4])).await;
    assert_eq!((ids(&back), back["has_more"].as_bool()), (newest_first[2..4].to_vec(), Some(true)));
    let front = get(&fakes, &format!("/v1/refunds?limit=2&ending_before={}", newest_first[2])).await;
    assert_eq!((ids(&front), front["has_more"].as_bool()), (newest_first[..2].to_vec(), Some(false)));
}

async fn refund(fakes: &Fakes, key: &str, form: &str) -> (u16, Value) {
    let req = FakeRequest::new("POST", "/v1/refunds")
        .header("Authorization", "Bearer sk_test_x")
        .header("Idempotency-Key", key)
        .body(form.to_string());
    match fakes.payments.handle(req).await {
        Disposition::Respond(r) => (r.status, r.body_json().unwrap()),
        other => panic!("{other:?}"),
    }
}

/// A refund that names a payment intent (or charge) the service does not have is refused
/// before its idempotency key is looked at, so the key keeps nothing: once the intent exists,
/// the same key and parameters create the refund. A charge of another intent is refused too.
#[tokio::test]
async fn a_refund_of_a_missing_intent_leaves_its_key_unused() {
    let (fakes, _clock) = manual_fakes(9);
    let (status, body) = refund(&fakes, "k-1", "payment_intent=pi_later&amount=10").await;
    assert_eq!((status, body["error"]["code"].as_str()), (404, Some("resource_missing")), "{body}");
    fakes.payments.seed_payment_intent(Some("pi_later"), 500, "usd").unwrap();
    let (status, body) = refund(&fakes, "k-1", "payment_intent=pi_later&amount=10").await;
    assert_eq!((status, body["payment_intent"].as_str()), (200, Some("pi_later")), "{body}");

    let charge = body["charge"].as_str().unwrap().to_string();
    let (status, body) = refund(&fakes, "k-2", &format!("payment_intent=pi_1&charge={charge}")).await;
    assert_eq!((status, body["error"]["param"].as_str()), (400, Some("charge")), "{body}");
    let (status, body) = refund(&fakes, "k-3", &format!("charge={charge}&amount=5")).await;
    assert_eq!((status, body["payment_intent"].as_str()), (200, Some("pi_later")), "{body}");
    assert_eq!(fake_services::Fake::Payments(fakes.payments.clone()).ledger().len(), 2);
}
