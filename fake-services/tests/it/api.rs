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

/// `GET /v1/payment_intents` pages as the refund list does: newest first by `created`, intents
/// made in one millisecond (a batch seeded at once) the last made first; forward with
/// `starting_after` and back with `ending_before`, `has_more` in the direction of travel. The
/// fake has no customers, so a customer's list is empty.
#[tokio::test]
async fn payment_intent_lists_page_both_ways_newest_first() {
    let (fakes, clock) = manual_fakes(9);
    for id in ["pi_2", "pi_3"] {
        fakes.payments.seed_payment_intent(Some(id), 700, "usd").unwrap();
    }
    let mut created = Vec::new();
    for _ in 0..2 {
        clock.advance_ms(1_000);
        let req = FakeRequest::new("POST", "/v1/payment_intents")
            .header("Authorization", "Bearer sk_test_x")
            .body("amount=1000&currency=usd");
        let Disposition::Respond(r) = fakes.payments.handle(req).await else { panic!() };
        created.push(r.body_json().unwrap()["id"].as_str().unwrap().to_string());
    }
    let newest_first: Vec<String> =
        created.iter().rev().cloned().chain(["pi_3", "pi_2", "pi_1"].map(String::from)).collect();

    let all = get(&fakes, "/v1/payment_intents").await;
    assert_eq!((ids(&all), all["has_more"].as_bool()), (newest_first.clone(), Some(false)));
    assert_eq!((&all["object"], &all["url"]), (&"list".into(), &"/v1/payment_intents".into()));
    assert_eq!(all["data"][4]["object"], "payment_intent");

    // Forward, as an SDK's auto-pagination walks it: each page after the last id of the one
    // before, until `has_more` is false.
    let mut pages = Vec::new();
    let mut target = "/v1/payment_intents?limit=2".to_string();
    loop {
        let page = get(&fakes, &target).await;
        pages.push((ids(&page), page["has_more"].as_bool()));
        match (page["has_more"].as_bool(), ids(&page).last()) {
            (Some(true), Some(last)) => target = format!("/v1/payment_intents?limit=2&starting_after={last}"),
            _ => break,
        }
    }
    let expected = vec![
        (newest_first[..2].to_vec(), Some(true)),
        (newest_first[2..4].to_vec(), Some(true)),
        (newest_first[4..].to_vec(), Some(false)),
    ];
    assert_eq!(pages, expected);

    let back = get(&fakes, "/v1/payment_intents?limit=2&ending_before=pi_1").await;
    assert_eq!((ids(&back), back["has_more"].as_bool()), (newest_first[2..4].to_vec(), Some(true)));
    let front = get(&fakes, "/v1/payment_intents?limit=2&ending_before=pi_3").await;
    assert_eq!((ids(&front), front["has_more"].as_bool()), (newest_first[..2].to_vec(), Some(false)));

    let customers = get(&fakes, "/v1/payment_intents?customer=cus_1&expand[]=data.latest_charge").await;
    assert_eq!((ids(&customers), customers["has_more"].as_bool()), (vec![], Some(false)));
}

/// Bad parameters of the intent list are Stripe's `invalid_request_error` on the parameter
/// at fault, never a panic or a 5xx.
#[tokio::test]
async fn payment_intent_lists_refuse_bad_parameters_on_their_param() {
    let (fakes, _clock) = manual_fakes(9);
    let cases = [
        ("limit=0", 400, "limit"),
        ("limit=101", 400, "limit"),
        ("limit=-1", 400, "limit"),
        ("limit=", 400, "limit"),
        ("payment_intent=pi_1", 400, "payment_intent"),
        ("created=1700000000", 400, "created"),
        ("created[lt]=1700000000", 400, "created[lt]"),
        ("starting_after=pi_nope", 404, "starting_after"),
        ("ending_before=pi_nope", 404, "ending_before"),
    ];
    for (query, status, param) in cases {
        let req = FakeRequest::new("GET", &format!("/v1/payment_intents?{query}"))
            .header("Authorization", "Bearer sk_test_x");
        let Disposition::Respond(r) = fakes.payments.handle(req).await else { panic!("{query}") };
        let body = r.body_json().unwrap();
        let error = &body["error"];
        assert_eq!(
            (r.status, error["type"].as_str(), error["param"].as_str()),
            (status, Some("invalid_request_error"), Some(param)),
            "{query}: {body}"
        );
    }
}
