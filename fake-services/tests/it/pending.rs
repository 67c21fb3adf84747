//! `Fake::pending`: what a fake still has to do that can change its ledger, named (a request
//! being worked on, a late commit whose caller has gone, a delivery still due, a transaction
//! in the pool or queued behind a missing nonce), and empty exactly when `Fake::settled` is
//! true. Real loopback HTTP where a caller goes away; a manual clock where time decides.

use std::time::Duration;

use fake_services::{Fake, Pending, PendingKind};
use serde_json::json;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

use crate::chain::{self, KEY};
use crate::client::{self, Req, Running, Seen};

/// The longest anything polled here may take to show up: generous, never a claim on speed.
const POLL_MS_MAX: u64 = 20_000;

/// `fake.pending()`, checked against `fake.settled()`: the two never disagree.
fn pending(fake: &Fake) -> Vec<Pending> {
    let pending = fake.pending();
    assert_eq!(fake.settled(), pending.is_empty(), "settled() and pending() disagree: {pending:?}");
    pending
}

/// Polls `fake.pending()` until `done` says so, at most [`POLL_MS_MAX`].
async fn pending_until(fake: &Fake, what: &str, done: impl Fn(&[Pending]) -> bool) -> Vec<Pending> {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(POLL_MS_MAX);
    loop {
        let now = pending(fake);
        if done(&now) {
            return now;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: not within {POLL_MS_MAX} ms: {now:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_commit_whose_caller_has_gone_is_named_until_it_lands() {
    let running = Running::start(3).await;
    let fake = running.fake("payments");
    assert!(pending(&fake).is_empty(), "a fresh fake has nothing pending");
    let delay_ms = 1_500;
    fake.add_rule(FaultRule::always(FaultSpec::CommitAfterTimeout { delay_ms: Some(delay_ms) })).unwrap();
    let refund = Req::refund("payment_intent=pi_1&amount=100").authorized();
    let seen = client::send_hasty(running.addr("payments"), &refund, &fake, 100).await;
    assert!(matches!(seen, Seen::Timeout), "the caller gave up first: {seen:?}");

    let named = pending_until(&fake, "the journal entry ends as abandoned", |p| {
        p.iter().all(|p| p.kind != PendingKind::Request)
    })
    .await;
    let journal = fake.journal();
    let entry = journal.last().expect("the refund's journal entry");
    if named.is_empty() {
        // The commit landed already: only a machine slower than the delay gets here, and the
        // ledger must then show it.
        assert_eq!(fake.ledger().len(), 1);
        return;
    }
    assert_eq!(named.len(), 1, "{named:?}");
    let late = &named[0];
    assert_eq!((late.service, late.kind), ("payments", PendingKind::LateCommit));
    assert_eq!(late.request.as_deref(), Some("POST /v1/refunds"));
    assert_eq!(late.request_id.as_deref(), Some(entry.request_id.as_str()));
    let due_ms = late.due_ms.expect("a late commit has a due time");
    assert!(
        (entry.at_ms..=entry.at_ms + delay_ms + POLL_MS_MAX).contains(&due_ms),
        "due {due_ms}, arrived {}",
        entry.at_ms
    );
    assert!(fake.ledger().is_empty() || fake.ledger().len() == 1);

    pending_until(&fake, "the late commit lands", <[Pending]>::is_empty).await;
    let ledger = fake.ledger();
    assert_eq!(ledger.len(), 1, "{ledger:?}");
    assert_eq!(ledger[0].request_id, entry.request_id, "the effect is the named request's");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_still_being_worked_on_is_named_with_its_method_and_path() {
    let running = Running::start(4).await;
    let fake = running.fake("workspaces");
    fake.add_rule(FaultRule::always(FaultSpec::Latency { before_ms: 1_000, after_ms: 0 })).unwrap();
    let addr = running.addr("workspaces");
    let create = Req::workspace("ext-1").authorized();
    let exchange = tokio::spawn(async move { client::send(addr, &create, POLL_MS_MAX).await });
    let named = pending_until(&fake, "the request reaches the fake", |p| !p.is_empty()).await;
    let journal = fake.journal();
    assert_eq!(named.len(), 1, "{named:?}");
    assert_eq!(
        (named[0].service, named[0].kind, named[0].due_ms),
        ("workspaces", PendingKind::Request, None)
    );
    assert_eq!(named[0].request.as_deref(), Some("POST /v1/workspaces"));
    assert_eq!(named[0].request_id.as_deref(), Some(journal[0].request_id.as_str()));
    let seen = exchange.await.expect("the exchange's task");
    assert_eq!(seen.status(), Some(200), "{seen:?}");
    pending_until(&fake, "the answer ends the entry", <[Pending]>::is_empty).await;
}

#[test]
fn a_late_delivery_is_named_with_its_due_time_until_it_lands() {
    let (fakes, clock) = client::manual_fakes(5);
    let fake = fakes.get("messages").unwrap();
    fake.add_rule(FaultRule::always(FaultSpec::DeliverLate { delay_ms: 800 })).unwrap();
    let t0 = fake.clock().now_ms();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    let send = fake_services::FakeRequest::new("POST", "/emails")
        .header("Authorization", "Bearer re_test_x")
        .header("Content-Type", "application/json")
        .body(
            json!({"from": "billing@acme.example", "to": "ada@example.com", "subject": "Hi", "text": "x"})
                .to_string(),
        );
    let answered = runtime.block_on(fake.handle(send));
    let fake_services::Disposition::Respond(answer) = answered else { panic!("no answer: {answered:?}") };
    assert_eq!(answer.status, 200);
    let email_id = answer.body_json().unwrap()["id"].as_str().unwrap().to_string();
    let request_id = fake.journal()[0].request_id.clone();

    let named = pending(&fake);
    assert_eq!(named.len(), 1, "{named:?}");
    let delivery = &named[0];
    assert_eq!((delivery.service, delivery.kind), ("messages", PendingKind::Delivery));
    assert_eq!(
        (delivery.due_ms, delivery.request_id.as_deref()),
        (Some(t0 + 800), Some(request_id.as_str()))
    );
    assert!(
        delivery.detail.contains(&email_id) && delivery.detail.contains("ada@example.com"),
        "{delivery:?}"
    );

    clock.advance_ms(799);
    assert_eq!(pending(&fake).len(), 1, "not due yet");
    clock.advance_ms(1);
    assert!(pending(&fake).is_empty());
    assert_eq!(fake.ledger().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pooled_transaction_waits_for_a_block_and_a_queued_one_for_its_sender() {
    let (fakes, clock) = client::manual_fakes(6);
    fakes.chain.seed_account(&chain::sender(), chain::FUNDS).unwrap();
    fakes.chain.set_block_time_ms(2_000);
    let fake = Fake::Chain(fakes.chain.clone());
    let t0 = fake.clock().now_ms();
    let server = fake_services::Server::start(fake.clone(), "127.0.0.1:0".parse().unwrap()).await.unwrap();
    // Nonce 1 first: queued behind nonce 0, which nothing sent yet.
    let later = chain::transfer_from(KEY, 1, chain::VALUE);
    assert_eq!(
        client::send(server.addr(), &chain::send_raw(&later.raw), POLL_MS_MAX).await.status(),
        Some(200)
    );
    let named = pending(&fake);
    assert_eq!(named.len(), 1, "{named:?}");
    assert_eq!((named[0].kind, named[0].due_ms), (PendingKind::QueuedTx, None));
    assert!(!named[0].kind.ends_by_itself(), "it waits for its sender");
    assert!(named[0].detail.contains(&later.hash) && named[0].detail.contains("nonce 1"), "{:?}", named[0]);

    let first = chain::transfer_from(KEY, 0, chain::VALUE);
    assert_eq!(
        client::send(server.addr(), &chain::send_raw(&first.raw), POLL_MS_MAX).await.status(),
        Some(200)
    );
    let named = pending(&fake);
    let kinds: Vec<(PendingKind, Option<u64>)> = named.iter().map(|p| (p.kind, p.due_ms)).collect();
    assert_eq!(
        kinds,
        [(PendingKind::PooledTx, Some(t0 + 2_000)), (PendingKind::PooledTx, Some(t0 + 2_000))],
        "both executable now, in one block: {named:?}"
    );
    assert!(named.iter().all(|p| p.kind.ends_by_itself()));
    clock.advance_ms(2_000);
    assert!(pending(&fake).is_empty());
    assert_eq!(fake.ledger().len(), 2);
    server.stop().await;
}
