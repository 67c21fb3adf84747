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
