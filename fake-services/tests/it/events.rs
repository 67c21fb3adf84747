//! The payments fake's events (`GET /v1/events`, `GET /v1/events/{id}`): what it did, one
//! event per thing, newest first, each carrying its object as it stood then, and refusing bad
//! parameters in Stripe's words.

use fake_services::{Disposition, FakeRequest, Fakes};
use serde_json::Value;

use crate::client::manual_fakes;

async fn call(fakes: &Fakes, method: &str, target: &str, body: &str) -> (u16, Value) {
    let req =
        FakeRequest::new(method, target).header("Authorization", "Bearer sk_test_x").body(body.to_string());
    match fakes.payments.handle(req).await {
        Disposition::Respond(r) => (r.status, r.body_json().unwrap()),
        other => panic!("{other:?}"),
    }
}

fn types(page: &Value) -> Vec<String> {
    page["data"].as_array().unwrap().iter().map(|e| e["type"].as_str().unwrap().to_string()).collect()
}

#[tokio::test]
async fn each_intent_that_succeeded_and_each_refund_is_an_event_newest_first() {
    // pi_1 seeded (succeeded), then an intent created confirmed, then two refunds of pi_1.
    let (fakes, clock) = manual_fakes(3);
    clock.advance_ms(1_000);
    let (status, intent) = call(
        &fakes,
        "POST",
        "/v1/payment_intents",
        "amount=900&currency=usd&payment_method=pm_card_visa&confirm=true",
    )
    .await;
    assert_eq!(status, 200, "{intent}");
    let mut refunds = Vec::new();
    for amount in [1_000, 1_500] {
        clock.advance_ms(1_000);
        let (status, refund) =
            call(&fakes, "POST", "/v1/refunds", &format!("payment_intent=pi_1&amount={amount}")).await;
        assert_eq!(status, 200, "{refund}");
        refunds.push(refund);
    }

    let (_, all) = call(&fakes, "GET", "/v1/events", "").await;
    assert_eq!(
        (&all["object"], &all["url"], &all["has_more"]),
        (&"list".into(), &"/v1/events".into(), &false.into())
    );
    assert_eq!(
        types(&all),
        [
            "charge.refunded",
            "refund.created",
            "charge.refunded",
            "refund.created",
            "payment_intent.succeeded",
            "payment_intent.succeeded"
        ]
    );
    let data = all["data"].as_array().unwrap();
    // Each carries its object as it stood then: the charge after the first refund had 1000 of
    // 5000 refunded, after the second 2500; the refund is the one the API answered.
    assert_eq!(data[2]["data"]["object"]["amount_refunded"], 1_000);
    assert_eq!(data[0]["data"]["object"]["amount_refunded"], 2_500);
    assert_eq!(data[0]["data"]["object"]["refunded"], false);
    assert_eq!(data[3]["data"]["object"], refunds[0]);
    assert_eq!(data[4]["data"]["object"]["id"], intent["id"]);
    assert_eq!(data[4]["data"]["object"]["status"], "succeeded");
    assert_eq!(data[5]["data"]["object"]["id"], "pi_1");
    for event in data {
        let id = event["id"].as_str().unwrap();
        assert!(id.starts_with("evt_") && id.len() == 28, "{id}");
        assert_eq!(event["object"], "event");
        // The same event, read alone.
        assert_eq!(&call(&fakes, "GET", &format!("/v1/events/{id}"), "").await.1, event);
    }
    // The refund's event names the request that made it.
    assert!(data[1]["request"]["id"].as_str().unwrap().starts_with("req_"), "{}", data[1]["request"]);

    // By type, by a type's prefix, by a list of types, and a page at a time.
    let (_, refunded) = call(&fakes, "GET", "/v1/events?type=charge.refunded", "").await;
    assert_eq!(types(&refunded), ["charge.refunded", "charge.refunded"]);
    let (_, intents) = call(&fakes, "GET", "/v1/events?type=payment_intent.*", "").await;
    assert_eq!(types(&intents).len(), 2);
    let (_, some) =
        call(&fakes, "GET", "/v1/events?types[0]=refund.created&types[1]=payment_intent.succeeded", "").await;
    assert_eq!(
        types(&some),
        ["refund.created", "refund.created", "payment_intent.succeeded", "payment_intent.succeeded"]
    );
    let first_id = data[0]["id"].as_str().unwrap();
    let (_, next) = call(&fakes, "GET", &format!("/v1/events?limit=2&starting_after={first_id}"), "").await;
    assert_eq!(
        (types(&next), &next["has_more"]),
        (vec!["refund.created".into(), "charge.refunded".into()], &true.into())
    );
}

#[tokio::test]
async fn events_are_the_same_for_the_same_seed_and_start_again_after_a_reset() {
    let ids = |page: &Value| -> Vec<Value> {
        page["data"].as_array().unwrap().iter().map(|e| e["id"].clone()).collect()
    };
    let (one, _) = manual_fakes(5);
    let (two, _) = manual_fakes(5);
    for fakes in [&one, &two] {
        call(fakes, "POST", "/v1/refunds", "payment_intent=pi_1&amount=10").await;
    }
    let first = call(&one, "GET", "/v1/events", "").await.1;
    assert_eq!(first, call(&two, "GET", "/v1/events", "").await.1);
    assert_eq!(ids(&first).len(), 3);
}

#[tokio::test]
async fn bad_event_requests_are_stripe_errors_on_their_param() {
    let (fakes, _clock) = manual_fakes(3);
    let cases = [
        ("/v1/events?limit=0", 400, "limit"),
        ("/v1/events?kind=x", 400, "kind"),
        ("/v1/events?starting_after=evt_nope", 404, "starting_after"),
        ("/v1/events/evt_nope", 404, "id"),
    ];
    for (target, status, param) in cases {
        let (got, body) = call(&fakes, "GET", target, "").await;
        assert_eq!((got, &body["error"]["param"]), (status, &Value::from(param)), "{target}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{target}");
    }
    // A restricted key needs the event read permission, as Stripe's 403 says.
    fakes
        .payments
        .seed_restricted_key("rk_test_refunds", &[fake_services::payments::Permission::RefundWrite])
        .unwrap();
    let req = FakeRequest::new("GET", "/v1/events").header("Authorization", "Bearer rk_test_refunds");
    let Disposition::Respond(r) = fakes.payments.handle(req).await else { panic!() };
    assert_eq!(r.status, 403);
    assert!(String::from_utf8_lossy(&r.body).contains("rak_event_read"));
}
