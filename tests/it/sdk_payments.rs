//! The payments fake against the real stripe-python SDK and a naive requests + tenacity
//! retry, over loopback HTTP: what the client saw, and what the ledger says happened.

use serde_json::{Value, json};
use vocabulary::Effect;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

use crate::python::{Run, run_payments};

/// Service time the fake's clock jumps to let an idempotency key expire: 25 hours, past
/// Stripe's (and the default contract's) 24 hours of key retention.
const DAY_AND_AN_HOUR_MS: u64 = 25 * 3600 * 1000;

fn first_post_refund(fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).method("POST").path("/v1/refunds").nth(1)
}

fn refunds(run: &Run) -> Vec<&Effect> {
    run.ledger.iter().filter(|e| e.kind == "refund.created").collect()
}

/// Step `i` of a `stripe_refunds.py` run.
fn step(run: &Run, i: usize) -> &Value {
    let step = &run.seen["steps"][i];
    assert!(step.is_object(), "no step {i} in {}", run.seen);
    step
}

/// One `POST /v1/refunds` as the journal saw it: outcome, status, replayed, faults fired.
type PostRow = (String, Option<u16>, bool, Vec<String>);

/// Expected rows, written with string literals.
fn rows(expected: Vec<(&str, Option<u16>, bool, Vec<&str>)>) -> Vec<PostRow> {
    expected
        .into_iter()
        .map(|(o, s, r, f)| (o.to_string(), s, r, f.into_iter().map(str::to_string).collect()))
        .collect()
}

fn post_rows(run: &Run) -> Vec<PostRow> {
    run.requests("POST", "/v1/refunds")
        .into_iter()
        .map(|e| {
            (e.outcome.clone(), e.status, e.replayed, e.faults.iter().map(|a| a.fault.clone()).collect())
        })
        .collect()
}

/// The one idempotency key every `POST /v1/refunds` carried.
fn the_only_key(run: &Run) -> String {
    let keys: Vec<Option<String>> =
        run.requests("POST", "/v1/refunds").into_iter().map(|e| e.idempotency_key.clone()).collect();
    let first = keys.first().cloned().flatten().unwrap_or_else(|| panic!("no keyed POST: {keys:?}"));
    assert!(keys.iter().all(|k| k.as_deref() == Some(first.as_str())), "keys differ: {keys:?}");
    first
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_survives_a_lost_reply_with_one_refund() {
    let run = run_payments(
        "stripe_refunds.py",
        &["create amount=1000"],
        vec![first_post_refund(FaultSpec::DropAfterCommit)],
    )
    .await;

    // The caller got a refund: the retry was answered with the stored first result.
    let seen = step(&run, 0);
    assert_eq!(
        (&seen["ok"], &seen["class"], &seen["status"]),
        (&Value::from(true), &"Refund".into(), &200.into())
    );
    assert_eq!(seen["headers"]["idempotent-replayed"], "true", "{seen}");

    // Two requests with the same key; the second was a replay.
    let key = the_only_key(&run);
    assert_eq!(seen["headers"]["idempotency-key"], key.as_str());
    assert_eq!(
        post_rows(&run),
        rows(vec![
            ("closed", Some(200), false, vec!["drop_after_commit"]),
            ("answered", Some(200), true, vec![])
        ])
    );

    // And exactly one refund happened: the one the caller holds.
    let refunds = refunds(&run);
    assert_eq!(refunds.len(), 1, "{:#?}", run.ledger);
    assert_eq!(seen["object"]["id"], refunds[0].object_id.as_str());
    assert_eq!(
        (&refunds[0].params["payment_intent"], &refunds[0].params["amount"]),
        (&"pi_1".into(), &1000.into())
    );
    assert_eq!(refunds[0].idempotency_key.as_deref(), Some(key.as_str()));
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenacity_around_requests_refunds_twice_after_a_lost_reply() {
    let run = run_payments(
        "tenacity_refund.py",
        &["pi_1", "1000"],
        vec![first_post_refund(FaultSpec::DropAfterCommit)],
    )
    .await;

    // The caller saw one failed attempt, then success, and believes it refunded once.
    let seen = &run.seen;
    assert_eq!(
        (&seen["ok"], &seen["attempts"], &seen["status"]),
        (&true.into(), &2.into(), &200.into()),
        "{seen}"
    );
    let error = seen["errors"][0].as_str().unwrap_or_default();
    assert!(error.starts_with("ConnectionError"), "{seen}");
    assert!(seen["headers"].get("idempotent-replayed").is_none(), "{seen}");

    // Two keyless requests, both executed.
    assert!(run.requests("POST", "/v1/refunds").iter().all(|e| e.idempotency_key.is_none()));
    assert_eq!(
        post_rows(&run),
        rows(vec![
            ("closed", Some(200), false, vec!["drop_after_commit"]),
            ("answered", Some(200), false, vec![])
        ])
    );

    // The classic bug, reproduced: two refunds of 1000 for one intent to refund.
    let refunds = refunds(&run);
    assert_eq!(refunds.len(), 2, "{:#?}", run.ledger);
    assert_ne!(refunds[0].object_id, refunds[1].object_id);
    for refund in &refunds {
        assert_eq!(
            (&refund.params["payment_intent"], &refund.params["amount"]),
            (&"pi_1".into(), &1000.into())
        );
        assert_eq!(refund.idempotency_key, None);
    }
    assert_eq!(seen["object"]["id"], refunds[1].object_id.as_str(), "the caller holds the second refund");
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_gets_the_stored_500_replayed_and_one_refund_happens() {
    let run = run_payments(
        "stripe_refunds.py",
        &["create amount=1000"],
        vec![first_post_refund(FaultSpec::ErrorAfterCommit { status: 500 })],
    )
    .await;

    // Stripe replays the first result, 500 included, so the SDK's retries end in APIError,
    // and the last reply it read says it was a replay.
    let seen = step(&run, 0);
    assert_eq!((&seen["ok"], &seen["status"]), (&false.into(), &500.into()), "{seen}");
    assert_eq!((&seen["error"]["class"], &seen["error"]["type"]), (&"APIError".into(), &"api_error".into()));
    assert_eq!(seen["headers"]["idempotent-replayed"], "true", "{seen}");

    // The first attempt and stripe-python's two retries, all with one key; the retries replayed.
    let key = the_only_key(&run);
    assert_eq!(seen["headers"]["idempotency-key"], key.as_str());
    assert_eq!(
        post_rows(&run),
        rows(vec![
            ("answered", Some(500), false, vec!["error_after_commit"]),
            ("answered", Some(500), true, vec![]),
            ("answered", Some(500), true, vec![]),
        ])
    );

    // The commit before the error did happen, once.
    let refunds = refunds(&run);
    assert_eq!(refunds.len(), 1, "{:#?}", run.ledger);
    assert_eq!(refunds[0].params["amount"], 1000);
    assert_eq!(refunds[0].idempotency_key.as_deref(), Some(key.as_str()));
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_reusing_a_key_with_other_parameters_gets_an_idempotency_error() {
    let run = run_payments(
        "stripe_refunds.py",
        &["create amount=1000 key=k1", "create amount=2000 key=k1"],
        vec![],
    )
    .await;

    let first = step(&run, 0);
    assert_eq!((&first["ok"], &first["object"]["amount"]), (&true.into(), &1000.into()), "{first}");
    let second = step(&run, 1);
    assert_eq!((&second["ok"], &second["status"]), (&false.into(), &400.into()), "{second}");
    assert_eq!(
        (&second["error"]["class"], &second["error"]["type"]),
        (&"IdempotencyError".into(), &"idempotency_error".into())
    );
    assert!(second["headers"].get("idempotent-replayed").is_none(), "{second}");

    // A 400 is not retried: two requests, the second refused.
    assert_eq!(the_only_key(&run), "k1");
    assert_eq!(
        post_rows(&run),
        rows(vec![("answered", Some(200), false, vec![]), ("answered", Some(400), false, vec![])])
    );

    let refunds = refunds(&run);
    assert_eq!(refunds.len(), 1, "{:#?}", run.ledger);
    assert_eq!(refunds[0].params["amount"], 1000);
    assert_eq!(refunds[0].object_id, first["object"]["id"].as_str().unwrap_or_default());
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_reusing_a_key_after_25_hours_refunds_again() {
    let run = run_payments(
        "stripe_refunds.py",
        &[
            "create amount=1000 key=k-day",
            "create amount=1000 key=k-day",
            &format!("jump by_ms={DAY_AND_AN_HOUR_MS}"),
            "create amount=1000 key=k-day",
        ],
        vec![],
    )
    .await;

    // Within retention the key replays; once it is 25 hours old it is a new request.
    let (first, replay, jump, later) = (step(&run, 0), step(&run, 1), step(&run, 2), step(&run, 3));
    for seen in [first, replay, jump, later] {
        assert_eq!((&seen["ok"], &seen["status"]), (&true.into(), &200.into()), "{}", run.seen);
    }
    assert_eq!(replay["object"]["id"], first["object"]["id"]);
    assert_eq!(replay["headers"]["idempotent-replayed"], "true");
    assert_eq!(jump["object"]["jumped_ms"], DAY_AND_AN_HOUR_MS);
    assert_ne!(later["object"]["id"], first["object"]["id"]);
    assert!(later["headers"].get("idempotent-replayed").is_none(), "{later}");
    assert_eq!(run.fakes.payments.core().clock.jumped_ms(), DAY_AND_AN_HOUR_MS);
    assert_eq!(
        post_rows(&run),
        rows(vec![
            ("answered", Some(200), false, vec![]),
            ("answered", Some(200), true, vec![]),
            ("answered", Some(200), false, vec![]),
        ])
    );

    let refunds = refunds(&run);
    assert_eq!(refunds.len(), 2, "{:#?}", run.ledger);
    let ids: Vec<&str> = refunds.iter().map(|r| r.object_id.as_str()).collect();
    assert_eq!(ids, [first["object"]["id"].as_str().unwrap(), later["object"]["id"].as_str().unwrap()]);
    assert!(refunds.iter().all(|r| r.idempotency_key.as_deref() == Some("k-day")));
    assert!(refunds[1].at_ms - refunds[0].at_ms >= DAY_AND_AN_HOUR_MS, "{:#?}", run.ledger);
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_lists_and_retrieves_the_refund_it_created() {
    let run = run_payments(
        "stripe_refunds.py",
        &["create amount=1000", "list payment_intent=pi_1", "retrieve"],
        vec![],
    )
    .await;

    let (created, listed, retrieved) = (step(&run, 0), step(&run, 1), step(&run, 2));
    for seen in [created, listed, retrieved] {
        assert_eq!((&seen["ok"], &seen["status"]), (&true.into(), &200.into()), "{}", run.seen);
    }
    let id = created["object"]["id"].as_str().unwrap();
    assert!(id.starts_with("re_"), "{created}");

    assert_eq!(listed["class"], "ListObject");
    assert_eq!((&listed["object"]["object"], &listed["object"]["has_more"]), (&"list".into(), &false.into()));
    let data = listed["object"]["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{listed}");
    assert_eq!(data[0], created["object"], "the listed refund is the created one, field for field");

    assert_eq!(retrieved["class"], "Refund");
    assert_eq!(retrieved["object"], created["object"]);

    // The SDK's GETs reached the fake as the wire reference has them.
    let list = run.requests("GET", "/v1/refunds");
    let get = run.requests("GET", &format!("/v1/refunds/{id}"));
    assert_eq!((list.len(), list[0].status), (1, Some(200)));
    assert_eq!((get.len(), get[0].status), (1, Some(200)));
    assert!(list.iter().chain(&get).all(|e| e.idempotency_key.is_none()), "no key on GETs");

    let refunds = refunds(&run);
    assert_eq!(refunds.len(), 1, "{:#?}", run.ledger);
    assert_eq!(refunds[0].object_id, id);
}

/// stripe-python's `auto_paging_iter` walks `GET /v1/payment_intents` page by page, forward
/// and (with `ending_before`) back, and yields every intent once: forward newest first, as
/// Stripe lists, back oldest first.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_auto_paging_iter_lists_every_payment_intent() {
    let run = run_payments(
        "stripe_refunds.py",
        &[
            "pi_create amount=1000",
            "pi_create amount=2000",
            "pi_create amount=3000",
            "pi_list limit=2",
            "pi_list limit=2 ending_before=pi_1",
        ],
        vec![],
    )
    .await;
    let made: Vec<&str> = (0..3).map(|i| step(&run, i)["object"]["id"].as_str().unwrap()).collect();
    let forward = step(&run, 3);
    assert_eq!((&forward["ok"], &forward["class"]), (&true.into(), &"ListObject".into()), "{forward}");
    assert_eq!(forward["ids"], json!([made[2], made[1], made[0], "pi_1"]), "{forward}");
    assert_eq!(forward["object"]["url"], "/v1/payment_intents");
    assert_eq!(step(&run, 4)["ids"], json!(made), "back from pi_1, oldest first");
    // Four intents two at a time, and the three after pi_1 back: two pages each.
    let lists = run.requests("GET", "/v1/payment_intents");
    assert_eq!(lists.len(), 4, "{:#?}", run.journal);
    assert!(lists.iter().all(|e| e.status == Some(200)), "{:#?}", run.journal);
}

/// stripe-python lists the fake's events page by page and retrieves one: a refund is a
/// `refund.created` and a `charge.refunded` carrying the charge after it, and the seeded intent
/// a `payment_intent.succeeded`.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test]
async fn stripe_python_lists_and_retrieves_the_fakes_events() {
    let run = run_payments(
        "stripe_refunds.py",
        &["create amount=1000", "create amount=500", "events limit=2", "events type=charge.refunded"],
        vec![],
    )
    .await;
    let all = step(&run, 2);
    assert_eq!((&all["ok"], &all["class"]), (&true.into(), &"Event".into()), "{all}");
    assert_eq!(
        all["types"],
        json!([
            "charge.refunded",
            "refund.created",
            "charge.refunded",
            "refund.created",
            "payment_intent.succeeded"
        ]),
        "{all}"
    );
    assert_eq!(all["object"]["type"], "charge.refunded");
    assert_eq!(all["object"]["data"]["object"]["amount_refunded"], 1_500, "{all}");
    assert_eq!(step(&run, 3)["types"], json!(["charge.refunded", "charge.refunded"]));
    // Five events two at a time is three pages; one more list and a retrieve per step.
    assert_eq!(run.requests("GET", "/v1/events").len(), 3 + 1 + 1 + 1, "{:#?}", run.journal);
}

fn effects<'a>(run: &'a Run, kind: &str) -> Vec<&'a Effect> {
    run.ledger.iter().filter(|e| e.kind == kind).collect()
}

/// The error a failed step holds: `(class, status, code)`.
fn error_of(step: &Value) -> (String, u64, String) {
    assert_eq!(step["ok"], false, "{step}");
    (
        step["error"]["class"].as_str().unwrap_or_default().to_string(),
        step["status"].as_u64().unwrap_or_default(),
        step["error"]["code"].as_str().unwrap_or_default().to_string(),
    )
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_creates_retrieves_confirms_cancels_and_refunds_payment_intents() {
    let run = run_payments(
        "stripe_refunds.py",
        &[
            "pi_create amount=2000",
            "pi_retrieve",
            "pi_confirm payment_method=pm_card_visa",
            "create payment_intent=last amount=500",
            "create payment_intent=last",
            "create payment_intent=last amount=1",
            "pi_create amount=900 payment_method=pm_card_visa",
            "pi_cancel cancellation_reason=abandoned",
            "pi_confirm",
            "pi_retrieve id=pi_nope",
            "pi_create amount=10",
            "pi_retrieve id=pi_1",
        ],
        vec![],
    )
    .await;

    let created = step(&run, 0);
    assert_eq!((&created["ok"], &created["class"]), (&true.into(), &"PaymentIntent".into()), "{created}");
    let a = created["object"]["id"].as_str().unwrap().to_string();
    assert!(a.starts_with("pi_"), "{created}");
    assert_eq!(
        (&created["object"]["status"], &created["object"]["amount_received"]),
        (&"requires_payment_method".into(), &0.into())
    );
    assert_eq!(step(&run, 1)["object"], created["object"], "retrieve sees what create answered");

    let confirmed = step(&run, 2);
    assert_eq!(
        (&confirmed["object"]["status"], &confirmed["object"]["amount_received"]),
        (&"succeeded".into(), &2000.into()),
        "{confirmed}"
    );
    let charge = confirmed["object"]["latest_charge"].as_str().unwrap();

    // Refunds against the intent the SDK made: up to what it received, then Stripe's code.
    let (first, rest) = (step(&run, 3), step(&run, 4));
    assert_eq!((&first["object"]["amount"], &first["object"]["charge"]), (&500.into(), &charge.into()));
    assert_eq!(rest["object"]["amount"], 1500, "{rest}");
    assert_eq!(
        error_of(step(&run, 5)),
        ("InvalidRequestError".into(), 400, "charge_already_refunded".into())
    );

    let b = step(&run, 6)["object"]["id"].as_str().unwrap().to_string();
    assert_eq!(step(&run, 6)["object"]["status"], "requires_confirmation");
    let canceled = step(&run, 7);
    assert_eq!(
        (&canceled["object"]["status"], &canceled["object"]["cancellation_reason"]),
        (&"canceled".into(), &"abandoned".into()),
        "{canceled}"
    );

    // Bad input and a transition the state forbids come back in Stripe's shape, which the
    // SDK turns into its own error classes.
    assert_eq!(
        error_of(step(&run, 8)),
        ("InvalidRequestError".into(), 400, "payment_intent_unexpected_state".into())
    );
    let missing = step(&run, 9);
    assert_eq!(error_of(missing), ("InvalidRequestError".into(), 404, "resource_missing".into()));
    assert_eq!(missing["error"]["param"], "intent", "{missing}");
    assert_eq!(error_of(step(&run, 10)), ("InvalidRequestError".into(), 400, "amount_too_small".into()));
    let seeded = step(&run, 11);
    assert_eq!(
        (&seeded["object"]["status"], &seeded["object"]["amount_received"]),
        (&"succeeded".into(), &5000.into()),
        "{seeded}"
    );

    let kinds: Vec<(&str, &str)> = run
        .ledger
        .iter()
        .map(|e| (e.kind.as_str(), e.object_id.as_str()))
        .filter(|(k, _)| !k.starts_with("refund"))
        .collect();
    assert_eq!(
        kinds,
        [
            ("payment_intent.created", a.as_str()),
            ("payment_intent.succeeded", a.as_str()),
            ("payment_intent.created", b.as_str()),
            ("payment_intent.canceled", b.as_str()),
        ]
    );
    let refunds = refunds(&run);
    assert_eq!(refunds.len(), 2, "{:#?}", run.ledger);
    assert!(refunds.iter().all(|r| r.params["payment_intent"] == a.as_str() && r.params["charge"] == charge));
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_survives_a_lost_reply_on_a_confirmed_create_with_one_intent() {
    let run = run_payments(
        "stripe_refunds.py",
        &["pi_create amount=3000 confirm=true payment_method=pm_card_visa", "create payment_intent=last"],
        vec![FaultRule::always(FaultSpec::DropAfterCommit).method("POST").path("/v1/payment_intents").nth(1)],
    )
    .await;

    // The SDK retried with its own key and got the stored first result.
    let seen = step(&run, 0);
    assert_eq!((&seen["ok"], &seen["object"]["status"]), (&true.into(), &"succeeded".into()), "{seen}");
    assert_eq!(seen["headers"]["idempotent-replayed"], "true", "{seen}");
    let posts = run.requests("POST", "/v1/payment_intents");
    assert_eq!(posts.len(), 2, "{posts:#?}");
    let key = posts[0].idempotency_key.clone().expect("stripe-python sends a key on every POST");
    assert_eq!(posts[1].idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!((posts[0].outcome.as_str(), posts[1].replayed), ("closed", true));

    // One intent, charged once, and the refund drew on it.
    let id = seen["object"]["id"].as_str().unwrap();
    let created = effects(&run, "payment_intent.created");
    let succeeded = effects(&run, "payment_intent.succeeded");
    assert_eq!((created.len(), succeeded.len()), (1, 1), "{:#?}", run.ledger);
    assert_eq!((created[0].object_id.as_str(), succeeded[0].object_id.as_str()), (id, id));
    assert_eq!(created[0].idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!(step(&run, 1)["object"]["amount"], 3000, "{}", run.seen);
}

/// What stripe-python makes of the refusals that need a decision: a restricted key without
/// the refund permission is a `PermissionError` (403) and a refund larger than the payment an
/// `InvalidRequestError` (400 `amount_too_large`); neither is retried by the SDK, nothing is
/// refunded, and the journal keeps what each asked for.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_sees_a_missing_permission_and_an_amount_too_large_as_stripe_says_them() {
    let key = "rk_test_51Readonly0000000000ab12";
    let run = run_payments(
        "stripe_refunds.py",
        &[
            "create amount=8000",
            &format!("seed_key key={key} permissions=rak_refund_read"),
            &format!("use_key key={key}"),
            "create amount=1000",
            "list",
        ],
        vec![],
    )
    .await;
    let too_large = &step(&run, 0)["error"];
    assert_eq!(
        (&too_large["class"], &too_large["code"], &too_large["param"]),
        (&"InvalidRequestError".into(), &"amount_too_large".into(), &"amount".into()),
        "{}",
        run.seen
    );
    let denied = step(&run, 3);
    assert_eq!(denied["status"], 403, "{denied}");
    assert_eq!(
        (&denied["error"]["class"], &denied["error"]["type"]),
        (&"PermissionError".into(), &"invalid_request_error".into())
    );
    let message = denied["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("'rak_refund_write' permission would allow this request to continue"),
        "{message}"
    );
    assert_eq!(step(&run, 4)["ok"], true, "the key may read refunds: {}", run.seen);
    assert!(refunds(&run).is_empty());
    let refused: Vec<(Option<u16>, Option<Value>)> =
        run.requests("POST", "/v1/refunds").into_iter().map(|e| (e.status, e.params.clone())).collect();
    assert_eq!(
        refused,
        vec![
            (Some(400), Some(serde_json::json!({"payment_intent": "pi_1", "amount": 8000}))),
            (Some(403), Some(serde_json::json!({"payment_intent": "pi_1", "amount": 1000}))),
        ],
        "one request each: the SDK retries neither"
    );
}

/// stripe-python's own way to tag a write, `metadata=`, reaches the refund, its listing and
/// the ledger's effect: a careful caller finds its refund by the tag, and the checker can too.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_tags_a_refund_with_metadata_and_the_tag_lands_in_the_ledger() {
    let run = run_payments(
        "stripe_refunds.py",
        &["create amount=1000 metadata=twice_intent:refund-1,order:A-42", "list payment_intent=pi_1"],
        vec![],
    )
    .await;
    let tagged = json!({"twice_intent": "refund-1", "order": "A-42"});
    let (created, listed) = (step(&run, 0), step(&run, 1));
    assert_eq!(created["object"]["metadata"], tagged, "{created}");
    assert_eq!(listed["object"]["data"][0]["metadata"], tagged, "{listed}");
    assert_eq!(run.requests("POST", "/v1/refunds").len(), 1, "{:#?}", run.journal);
    let refunds = refunds(&run);
    assert_eq!(refunds.len(), 1, "{:#?}", run.ledger);
    assert_eq!(refunds[0].params["metadata"], tagged, "{:?}", refunds[0].params);
}

/// stripe-python's `Webhook.construct_event` verifies the fake's deliveries unchanged, and
/// refuses the same delivery signed under a guessed secret, with its body altered, or signed
/// ten minutes ago; the SDK registers, lists, retrieves and deletes the endpoint.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_python_verifies_the_fakes_webhooks_and_refuses_forged_ones() {
    let run = run_payments("stripe_webhooks.py", &[], vec![]).await;
    let seen = &run.seen;
    assert_eq!(seen["endpoint"]["secret_prefix"], "whsec_", "{seen}");
    let deliveries = seen["deliveries"].as_array().unwrap();
    let types: Vec<&str> = deliveries.iter().map(|d| d["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["charge.refunded", "refund.created"], "{seen}");
    for d in deliveries {
        assert_eq!(d["verified"], true, "{d}");
        assert!(d["forged"].as_str().unwrap().contains("No signatures found matching"), "{d}");
        assert!(d["altered"].as_str().unwrap().contains("No signatures found matching"), "{d}");
        assert!(d["stale"].as_str().unwrap().contains("Timestamp outside the tolerance zone"), "{d}");
    }
    assert_eq!(deliveries[0]["amount_refunded"], 700, "the charge as it stood after the refund");
    assert_eq!(seen["listed"], json!([seen["endpoint"]["id"]]));
    assert_eq!((&seen["retrieved_secret"], &seen["deleted"]), (&Value::Null, &true.into()), "{seen}");
    // Each event the endpoint received is one of the fake's events.
    for d in deliveries {
        let req =
            fake_services::FakeRequest::new("GET", &format!("/v1/events/{}", d["id"].as_str().unwrap()))
                .header("Authorization", "Bearer sk_test_x");
        match run.fakes.payments.handle(req).await {
            fake_services::Disposition::Respond(r) => assert_eq!(r.status, 200, "{d}"),
            other => panic!("{other:?}"),
        }
    }
}
