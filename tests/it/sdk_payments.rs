//! The payments fake against the real stripe-python SDK and a naive requests + tenacity
//! retry, over loopback HTTP: what the client saw, and what the ledger says happened.

use fake_services::{Effect, FaultRule, FaultSpec};
use serde_json::Value;

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
