//! Stripe PaymentIntents on the payments fake over loopback HTTP: the object and its state
//! machine, refunds against created intents, Stripe's errors for bad input and for
//! transitions the state does not allow, faults on the new writes, and the ledger.

use std::net::SocketAddr;

use serde_json::{Value, json};
use vocabulary::Effect;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

use crate::client::{self, Req, Running, Seen};

const WAIT_MS: u64 = 10_000;

fn form(path: &str, body: &str) -> Req {
    Req::new("POST", path)
        .authorized()
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body.as_bytes().to_vec())
}

fn create(body: &str) -> Req {
    form("/v1/payment_intents", body)
}

fn confirm(id: &str, body: &str) -> Req {
    form(&format!("/v1/payment_intents/{id}/confirm"), body)
}

fn cancel(id: &str, body: &str) -> Req {
    form(&format!("/v1/payment_intents/{id}/cancel"), body)
}

fn retrieve(id: &str) -> Req {
    Req::new("GET", format!("/v1/payment_intents/{id}")).authorized()
}

async fn send(addr: SocketAddr, req: Req) -> Seen {
    client::send(addr, &req, WAIT_MS).await
}

/// Sends and expects a 200; returns the JSON object.
async fn ok(addr: SocketAddr, req: Req) -> Value {
    let seen = send(addr, req.clone()).await;
    assert_eq!(seen.status(), Some(200), "{} {}: {seen:?}", req.method, req.target);
    assert!(seen.header("request-id").is_some(), "{seen:?}");
    seen.json()
}

/// Sends and expects Stripe's error envelope with this status and code.
async fn refused(addr: SocketAddr, req: Req, status: u16, code: Option<&str>) -> Value {
    let seen = send(addr, req.clone()).await;
    let error = seen.json()["error"].clone();
    assert_eq!(seen.status(), Some(status), "{} {}: {seen:?}", req.method, req.target);
    assert_eq!(error["type"], "invalid_request_error", "{seen:?}");
    assert_eq!(error["code"].as_str(), code, "{seen:?}");
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{seen:?}");
    assert_eq!(seen.header("stripe-should-retry"), Some("false"), "{seen:?}");
    error
}

fn kinds(effects: &[Effect]) -> Vec<(&str, &str)> {
    effects.iter().map(|e| (e.kind.as_str(), e.object_id.as_str())).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intent_is_created_confirmed_and_refunded_with_stripes_object_and_effects() {
    let running = Running::start(21).await;
    let addr = running.addr("payments");
    let fake = running.fake("payments");

    let created =
        ok(addr, create("amount=2000&currency=usd&metadata[order]=4812&description=Order%204812")).await;
    let id = created["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("pi_"), "{created}");
    assert_eq!(
        (&created["object"], &created["status"], &created["amount"], &created["amount_received"]),
        (&json!("payment_intent"), &json!("requires_payment_method"), &json!(2000), &json!(0))
    );
    assert_eq!((&created["currency"], &created["latest_charge"]), (&json!("usd"), &Value::Null));
    assert_eq!(created["metadata"], json!({"order": "4812"}));
    assert_eq!(created["description"], "Order 4812");
    assert!(created["client_secret"].as_str().unwrap().starts_with(&format!("{id}_secret_")));
    assert!(created["created"].as_u64().unwrap() > 1_700_000_000, "{created}");

    // Nothing to charge yet: Stripe's state error, and the intent is unchanged.
    let error = refused(addr, confirm(&id, ""), 400, Some("payment_intent_unexpected_state")).await;
    assert_eq!(error["payment_intent"]["status"], "requires_payment_method", "{error}");
    // Nor can it be refunded.
    let no_charge = send(addr, Req::refund(&format!("payment_intent={id}"))).await;
    assert_eq!(no_charge.status(), Some(400), "{no_charge:?}");
    assert!(
        no_charge.json()["error"]["message"].as_str().unwrap().contains("does not have a successful charge")
    );

    let confirmed = ok(addr, confirm(&id, "payment_method=pm_card_visa")).await;
    assert_eq!(
        (&confirmed["status"], &confirmed["amount_received"], &confirmed["payment_method"]),
        (&json!("succeeded"), &json!(2000), &json!("pm_card_visa"))
    );
    let charge = confirmed["latest_charge"].as_str().unwrap().to_string();
    assert!(charge.starts_with("ch_"), "{confirmed}");
    assert_eq!(
        ok(addr, retrieve(&id)).await,
        confirmed,
        "a retrieve sees the confirmed intent, field for field"
    );

    // Once succeeded, it can be neither confirmed nor canceled again.
    refused(addr, confirm(&id, ""), 400, Some("payment_intent_unexpected_state")).await;
    let error = refused(addr, cancel(&id, ""), 400, Some("payment_intent_unexpected_state")).await;
    assert!(error["message"].as_str().unwrap().contains("status of succeeded"), "{error}");

    // Refunds draw on what the intent received, by intent or by its charge.
    let first = ok(addr, Req::refund(&format!("payment_intent={id}&amount=1500"))).await;
    assert_eq!((&first["charge"], &first["payment_intent"]), (&json!(charge), &json!(id)));
    let rest = ok(addr, Req::refund(&format!("charge={charge}"))).await;
    assert_eq!(rest["amount"], 500, "the default is what remains");
    let over = refused(
        addr,
        Req::refund(&format!("payment_intent={id}&amount=1")),
        400,
        Some("charge_already_refunded"),
    )
    .await;
    assert!(over["message"].as_str().unwrap().contains(&charge), "{over}");

    let ledger = fake.ledger();
    assert_eq!(
        kinds(&ledger)[..2],
        [("payment_intent.created", id.as_str()), ("payment_intent.succeeded", id.as_str())],
        "{ledger:#?}"
    );
    assert_eq!(ledger[0].params["status"], "requires_payment_method");
    assert_eq!(ledger[0].params["metadata"], json!({"order": "4812"}));
    assert_eq!(
        (&ledger[1].params["amount_received"], &ledger[1].params["charge"]),
        (&json!(2000), &json!(charge))
    );
    let refunds: Vec<&Effect> = ledger.iter().filter(|e| e.kind == "refund.created").collect();
    assert_eq!(refunds.len(), 2, "{ledger:#?}");
    assert_eq!(ledger.len(), 4, "failed confirms, cancels and refunds are not effects: {ledger:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_intent_refuses_confirms_and_refunds() {
    let running = Running::start(22).await;
    let addr = running.addr("payments");
    let created = ok(addr, create("amount=900&currency=eur&payment_method=pm_card_visa")).await;
    assert_eq!(created["status"], "requires_confirmation", "{created}");
    let id = created["id"].as_str().unwrap();

    let canceled = ok(addr, cancel(id, "cancellation_reason=requested_by_customer")).await;
    assert_eq!(
        (&canceled["status"], &canceled["cancellation_reason"], &canceled["amount_received"]),
        (&json!("canceled"), &json!("requested_by_customer"), &json!(0))
    );
    assert!(canceled["canceled_at"].is_u64(), "{canceled}");

    let error = refused(addr, confirm(id, ""), 400, Some("payment_intent_unexpected_state")).await;
    assert!(error["message"].as_str().unwrap().contains("status of canceled"), "{error}");
    assert_eq!(error["payment_intent"]["id"], id, "Stripe puts the intent in the error");
    refused(addr, cancel(id, ""), 400, Some("payment_intent_unexpected_state")).await;
    let refund = send(addr, Req::refund(&format!("payment_intent={id}"))).await;
    assert_eq!(refund.status(), Some(400), "{refund:?}");

    let ledger = running.fake("payments").ledger();
    assert_eq!(kinds(&ledger), [("payment_intent.created", id), ("payment_intent.canceled", id)]);
    assert_eq!(ledger[1].params["cancellation_reason"], "requested_by_customer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_intents_are_succeeded_and_retrievable() {
    let running = Running::start(23).await;
    let addr = running.addr("payments");
    let seeded = ok(addr, retrieve("pi_1")).await;
    assert_eq!(
        (&seeded["status"], &seeded["amount"], &seeded["amount_received"], &seeded["latest_charge"]),
        (&json!("succeeded"), &json!(5000), &json!(5000), &json!("ch_1"))
    );
    refused(addr, confirm("pi_1", ""), 400, Some("payment_intent_unexpected_state")).await;
    assert!(running.fake("payments").ledger().is_empty(), "seeds are not effects");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_stripes_errors_and_never_a_5xx() {
    let running = Running::start(24).await;
    let addr = running.addr("payments");
    let pending = ok(addr, create("amount=700&currency=usd")).await;
    let pending = pending["id"].as_str().unwrap();
    let cases: Vec<(Req, u16, Option<&str>, &str)> = vec![
        (create("currency=usd"), 400, Some("parameter_missing"), "Missing required param: amount."),
        (create("amount=100"), 400, Some("parameter_missing"), "Missing required param: currency."),
        (create("amount=49&currency=usd"), 400, Some("amount_too_small"), "at least $0.50 usd"),
        (create("amount=abc&currency=usd"), 400, None, "Invalid integer: abc"),
        (create("amount=100&currency=dollars"), 400, None, "Invalid currency"),
        (create("amount=100&currency=usd&confirm=yes"), 400, None, "Invalid boolean: yes"),
        (create("amount=100&currency=usd&color=red"), 400, None, "Received unknown parameter: color"),
        (
            create("amount=100&currency=usd&payment_method=card_x"),
            400,
            Some("resource_missing"),
            "No such PaymentMethod",
        ),
        (
            create("amount=100&currency=usd&confirm=true"),
            400,
            Some("payment_intent_unexpected_state"),
            "missing a payment method",
        ),
        (create("amount=100&currency=usd&capture_method=manual"), 400, None, "automatic capture"),
        (create("amount=100&currency=usd&metadata=x"), 400, None, "Invalid object"),
        (create("amount=100&currency=usd").key(&"k".repeat(300)), 400, None, "at most 255 characters"),
        (retrieve("pi_nope"), 404, Some("resource_missing"), "No such payment_intent: 'pi_nope'"),
        (
            Req::new("GET", format!("/v1/payment_intents/{pending}?bogus=1")).authorized(),
            400,
            None,
            "unknown parameter: bogus",
        ),
        (confirm("pi_nope", ""), 404, Some("resource_missing"), "No such payment_intent: 'pi_nope'"),
        (cancel("pi_nope", ""), 404, Some("resource_missing"), "No such payment_intent"),
        (cancel(pending, "cancellation_reason=bored"), 400, None, "Invalid cancellation_reason"),
        (confirm(pending, "payment_method=visa"), 400, Some("resource_missing"), "No such PaymentMethod"),
        (confirm(pending, "amount=5"), 400, None, "Received unknown parameter: amount"),
        (
            Req::new("GET", format!("/v1/payment_intents/{pending}/confirm")).authorized(),
            404,
            None,
            "Unrecognized request URL",
        ),
        (form(&format!("/v1/payment_intents/{pending}/capture"), ""), 404, None, "Unrecognized request URL"),
        (
            Req::new("POST", "/v1/payment_intents").body("amount=100&currency=usd"),
            401,
            None,
            "did not provide an API key",
        ),
    ];
    let mut failures = Vec::new();
    for (req, status, code, says) in cases {
        let seen = send(addr, req.clone()).await;
        let error = &seen.json()["error"];
        let fine = seen.status() == Some(status)
            && error["type"] == "invalid_request_error"
            && error["code"].as_str() == code
            && error["message"].as_str().is_some_and(|m| m.contains(says))
            && seen.header("request-id").is_some();
        if !fine {
            failures.push(format!(
                "{} {}: expected {status} {code:?} \"{says}\", saw {seen:?}",
                req.method, req.target
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let ledger = running.fake("payments").ledger();
    assert_eq!(kinds(&ledger), [("payment_intent.created", pending)], "nothing refused took effect");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_confirmed_create_after_a_lost_reply_makes_one_intent() {
    let running = Running::start(25).await;
    let addr = running.addr("payments");
    let fake = running.fake("payments");
    fake.add_rule(
        FaultRule::always(FaultSpec::DropAfterCommit).method("POST").path("/v1/payment_intents").nth(1),
    )
    .unwrap();
    let req = create("amount=3000&currency=usd&confirm=true&payment_method=pm_card_visa").key("order-77");
    assert_eq!(send(addr, req.clone()).await, Seen::Closed);
    let replay = send(addr, req.clone()).await;
    assert_eq!(replay.header("idempotent-replayed"), Some("true"), "{replay:?}");
    assert_eq!(replay.json()["status"], "succeeded");
    // Other parameters under the same key are Stripe's idempotency_error.
    let other = send(addr, create("amount=3001&currency=usd").key("order-77")).await;
    assert_eq!((other.status(), &other.json()["error"]["type"]), (Some(400), &json!("idempotency_error")));

    let ledger = fake.ledger();
    let id = replay.json()["id"].as_str().unwrap().to_string();
    assert_eq!(
        kinds(&ledger),
        [("payment_intent.created", id.as_str()), ("payment_intent.succeeded", id.as_str())]
    );
    assert!(ledger.iter().all(|e| e.idempotency_key.as_deref() == Some("order-77")), "{ledger:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_act_on_confirm_and_cancel_like_on_any_write() {
    let running = Running::start(26).await;
    let addr = running.addr("payments");
    let fake = running.fake("payments");
    let a = ok(addr, create("amount=1000&currency=usd&payment_method=pm_card_visa")).await;
    let a = a["id"].as_str().unwrap().to_string();
    let b = ok(addr, create("amount=1000&currency=usd")).await;
    let b = b["id"].as_str().unwrap().to_string();

    // silent_noop: the confirm answers succeeded and charges nothing.
    fake.add_rule(
        FaultRule::always(FaultSpec::SilentNoop).path(&format!("/v1/payment_intents/{a}/confirm")).nth(1),
    )
    .unwrap();
    let lie = ok(addr, confirm(&a, "")).await;
    assert_eq!(lie["status"], "succeeded");
    assert_eq!(ok(addr, retrieve(&a)).await["status"], "requires_confirmation");

    // error_after_commit: charged, then a 500 that the key replays.
    fake.add_rule(
        FaultRule::always(FaultSpec::ErrorAfterCommit { status: 500 }).path("/v1/payment_intents/*").nth(1),
    )
    .unwrap();
    let failed = send(addr, confirm(&a, "").key("c-1")).await;
    assert_eq!(failed.status(), Some(500), "{failed:?}");
    let replayed = send(addr, confirm(&a, "").key("c-1")).await;
    assert_eq!((replayed.status(), replayed.header("idempotent-replayed")), (Some(500), Some("true")));
    assert_eq!(ok(addr, retrieve(&a)).await["status"], "succeeded", "the charge behind the 500 happened");

    // stale_read: a retrieve sees the intent as it was before the cancel, two minutes later.
    fake.clock().jump_ms(120_000);
    ok(addr, cancel(&b, "")).await;
    fake.add_rule(FaultRule::always(FaultSpec::StaleRead { lag_ms: 60_000 }).method("GET").nth(1)).unwrap();
    assert_eq!(ok(addr, retrieve(&b)).await["status"], "requires_payment_method");
    assert_eq!(ok(addr, retrieve(&b)).await["status"], "canceled");

    let ledger = fake.ledger();
    assert_eq!(
        kinds(&ledger),
        [
            ("payment_intent.created", a.as_str()),
            ("payment_intent.created", b.as_str()),
            ("payment_intent.succeeded", a.as_str()),
            ("payment_intent.canceled", b.as_str()),
        ]
    );
}
