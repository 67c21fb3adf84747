//! `propose_batch` answers each proposal as `propose` would have, one by one, in order, and
//! records them in one commit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::json;

use super::{Executor, Proposal, ProposeError, World};
use crate::log::{Durability, IntentLog};
use crate::model::Intent;
use crate::world::{Counter, Hooks, HttpTransport};
use vocabulary::State;
use vocabulary::clock::ManualClock;
use vocabulary::protocol::Config;
use vocabulary::protocol::Limits;
use vocabulary::protocol::Service;

/// At each `after_record`, how many intents another connection finds in the log file: what
/// a crash at that point would leave.
struct CountAtRecord {
    path: PathBuf,
    seen: Mutex<Vec<usize>>,
}

impl Hooks for CountAtRecord {
    fn at(&self, point: &'static str) {
        if point == "after_record" {
            let log = IntentLog::open(&self.path, Durability::Normal).unwrap();
            self.seen.lock().unwrap().push(log.count().unwrap());
        }
    }
}

fn executor(dir: &Path, hooks: Arc<dyn Hooks>) -> Executor {
    let config = Config {
        worker_id: "w1".into(),
        services: BTreeMap::from([(
            "payments".to_string(),
            Service { url: "http://127.0.0.1:9".into(), contract: Default::default() },
        )]),
        secrets: BTreeMap::from([("payments_api_key".to_string(), "sk_test_x".to_string())]),
        limits: Limits::default(),
    };
    let world = World {
        clock: Arc::new(ManualClock::new(1_000)),
        ids: Arc::new(Counter::new("k")),
        transport: Arc::new(HttpTransport),
        hooks,
    };
    Executor::open(config, dir, Durability::Normal, world).unwrap()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("twice-batch-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn refund(id: &str, amount: u64) -> Proposal {
    Proposal {
        id: id.into(),
        action: "payments.refund".into(),
        params: json!({"payment_intent": "pi_1", "amount": amount}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

/// Every case `propose` tells apart, in one batch: a refusal, a repeat of an id earlier in the
/// batch (same payload, then another), a replacement and a step of an intent earlier in the
/// batch, a step after an intent nobody recorded, and an id the log held before the batch.
fn proposals() -> Vec<Proposal> {
    let mut unknown = refund("bad", 1);
    unknown.action = "payments.teleport".into();
    let mut replacement = refund("b", 2);
    replacement.replaces = Some("a".into());
    let mut step = refund("c", 3);
    step.after = vec!["a".into()];
    let mut orphan = refund("d", 4);
    orphan.after = vec!["nobody".into()];
    let mut missing = refund("e", 5);
    missing.replaces = Some("nobody".into());
    let mut late_step = refund("f", 6);
    late_step.after = vec!["before".into(), "b".into()];
    vec![
        refund("a", 1),
        unknown,
        refund("a", 1),
        refund("a", 9),
        replacement,
        step,
        orphan,
        missing,
        refund("before", 7),
        refund("before", 8),
        late_step,
    ]
}

/// What a result says, comparable across executors.
fn outcome(result: &Result<Intent, ProposeError>) -> Result<Intent, String> {
    result.as_ref().cloned().map_err(|e| e.to_string())
}

#[test]
fn a_batch_answers_each_proposal_as_proposing_them_one_by_one_does() {
    let (one_dir, batch_dir) = (temp_dir("one"), temp_dir("batch"));
    let hooks = |dir: &Path| {
        Arc::new(CountAtRecord { path: dir.join(super::LOG_FILE), seen: Mutex::new(Vec::new()) })
    };
    let (one_hooks, batch_hooks) = (hooks(&one_dir), hooks(&batch_dir));
    let one = executor(&one_dir, one_hooks.clone());
    let batch = executor(&batch_dir, batch_hooks.clone());
    // An id recorded before the batch, which the batch proposes again.
    for ex in [&one, &batch] {
        ex.propose(refund("before", 7)).unwrap();
    }

    let one_by_one: Vec<_> = proposals().into_iter().map(|p| one.propose(p)).collect();
    let together = batch.propose_batch(proposals());

    let expected: Vec<_> = one_by_one.iter().map(outcome).collect();
    let got: Vec<_> = together.iter().map(outcome).collect();
    assert_eq!(got, expected);
    // The cases are the ones meant.
    let states: Vec<_> = together.iter().map(|r| r.as_ref().map(|i| i.state).map_err(|_| ())).collect();
    assert_eq!(
        states,
        [
            Ok(State::Recorded),
            Err(()),
            Ok(State::Recorded),
            Err(()),
            Ok(State::Blocked),
            Ok(State::Blocked),
            Err(()),
            Err(()),
            Ok(State::Recorded),
            Err(()),
            Ok(State::Blocked),
        ]
    );
    assert!(matches!(together[3], Err(ProposeError::Conflict(ref id)) if id == "a"));
    assert!(matches!(together[6], Err(ProposeError::UnknownAfter(..))));
    assert!(matches!(together[7], Err(ProposeError::UnknownPredecessor(..))));
    assert!(matches!(together[9], Err(ProposeError::Conflict(ref id)) if id == "before"));
    let a = together[0].as_ref().unwrap();
    assert_eq!(together[2].as_ref().unwrap(), a, "the same id twice is one intent");

    assert_eq!(one.status(None).unwrap(), batch.status(None).unwrap());
    assert_eq!(batch.status(None).unwrap().len(), 5, "before, a, b, c, f");
    // Every acknowledgement comes after the commit of the whole batch.
    assert_eq!(*batch_hooks.seen.lock().unwrap(), [1, 5, 5, 5, 5, 5, 5]);
    assert_eq!(*one_hooks.seen.lock().unwrap(), [1, 2, 2, 3, 4, 4, 5]);
    for dir in [one_dir, batch_dir] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn an_empty_batch_and_a_batch_of_refusals_record_nothing() {
    let dir = temp_dir("empty");
    let hooks = Arc::new(CountAtRecord { path: dir.join(super::LOG_FILE), seen: Mutex::new(Vec::new()) });
    let ex = executor(&dir, hooks.clone());
    assert!(ex.propose_batch(Vec::new()).is_empty());
    let mut bad = refund("x", 1);
    bad.params = json!({"payment_intent": "pi_1"});
    let results = ex.propose_batch(vec![bad.clone(), bad]);
    assert!(results.iter().all(Result::is_err));
    assert_eq!(ex.status(None).unwrap().len(), 0);
    assert!(hooks.seen.lock().unwrap().is_empty());
    let _ = std::fs::remove_dir_all(dir);
}

fn triggered(id: &str, payment_intent: &str) -> Proposal {
    Proposal {
        on_event: Some(vocabulary::OnEvent {
            kind: "payment_intent.succeeded".into(),
            payment_intent: payment_intent.into(),
        }),
        ..refund(id, 1)
    }
}

/// An intent an event starts is kept, not recorded, among the plain ones of its batch, each
/// answered in order; the same trigger again is the same, another payload under its id a
/// conflict, and one with `after` is refused.
#[test]
fn a_triggered_proposal_is_kept_not_recorded_and_answered_in_its_place() {
    let dir = temp_dir("triggered");
    let ex = executor(&dir, Arc::new(crate::world::NoHooks));
    let mut stepped = triggered("t-step", "pi_1");
    stepped.after = vec!["a".into()];
    let mut other = triggered("t1", "pi_1");
    other.params = json!({"payment_intent": "pi_1", "amount": 2});
    let results = ex.propose_batch(vec![
        refund("a", 1),
        triggered("t1", "pi_1"),
        refund("b", 2),
        triggered("t1", "pi_1"),
        other,
        stepped,
    ]);
    let shown: Vec<Result<String, String>> =
        results.iter().map(|r| r.as_ref().map(|i| i.id.clone()).map_err(|e| e.to_string())).collect();
    assert_eq!(shown[..4], [Ok("a".into()), Ok("t1".into()), Ok("b".into()), Ok("t1".into())]);
    assert!(matches!(results[4], Err(ProposeError::Conflict(_))), "{:?}", shown[4]);
    assert!(matches!(results[5], Err(ProposeError::Workflow(..))), "{:?}", shown[5]);
    let recorded: Vec<String> = ex.status(None).unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(recorded, ["a", "b"], "the trigger is kept, not recorded");
    assert_eq!(ex.log().triggers_for("payment_intent.succeeded", "pi_1").unwrap().len(), 1);
    assert!(ex.log().has_triggers().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

/// An event that started before its trigger arrived starts the intent as the trigger is
/// proposed.
#[test]
fn a_trigger_proposed_after_its_event_was_taken_starts_at_once() {
    let dir = temp_dir("taken-first");
    let ex = executor(&dir, Arc::new(crate::world::NoHooks));
    ex.log().receive_event("evt_1", "payment_intent.succeeded", "pi_9", 5).unwrap();
    ex.log().event_started("evt_1", 6).unwrap();
    assert!(ex.log().event_received("evt_1").unwrap());
    let intent = ex.propose(triggered("late", "pi_9")).unwrap();
    assert_eq!(intent.state, State::Recorded);
    let recorded: Vec<String> = ex.status(None).unwrap().into_iter().map(|i| i.id).collect();
    assert_eq!(recorded, ["late"]);
    // Proposed again, it is the same intent, recorded once.
    ex.propose(triggered("late", "pi_9")).unwrap();
    assert_eq!(ex.status(None).unwrap().len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A delivery signed under another secret, or replayed long after, starts nothing and is
/// answered 4xx; one that comes before the worker has an endpoint is answered 503.
#[tokio::test]
async fn a_forged_or_stale_delivery_is_refused_and_starts_nothing() {
    let dir = temp_dir("refused");
    let ex = executor(&dir, Arc::new(crate::world::NoHooks));
    ex.propose(triggered("t1", "pi_1")).unwrap();
    let body = br#"{"id":"evt_1","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1"}}}"#;
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let early =
        ex.receive_webhook(Some(&vocabulary::webhook::stripe_signature("whsec_a", now_s, body)), body).await;
    assert_eq!(early.status, 503, "{early:?}");
    let endpoint =
        crate::log::Endpoint { id: "we_1".into(), secret: "whsec_a".into(), url: "http://x/webhooks".into() };
    ex.log().keep_endpoint("w1", &endpoint).unwrap();
    for (signature, why) in [
        (Some(vocabulary::webhook::stripe_signature("whsec_guess", now_s, body)), "no signature matches"),
        (Some(vocabulary::webhook::stripe_signature("whsec_a", now_s - 600, body)), "signed 600 s ago"),
        (None, "no Stripe-Signature"),
    ] {
        let answer = ex.receive_webhook(signature.as_deref(), body).await;
        assert_eq!(answer.status, 400, "{answer:?}");
        assert!(answer.note.contains(why), "{answer:?}");
    }
    assert!(ex.status(None).unwrap().is_empty(), "nothing started");
    assert!(!ex.log().event_received("evt_1").unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}
