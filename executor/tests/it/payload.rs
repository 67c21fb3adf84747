//! The payload is immutable (design §5, invariant 2): a stored payload that no longer matches
//! its hash is escalated, never executed; proposing is idempotent per id and refuses what it
//! cannot check.

use executor::model::ActionError;
use executor::{Proposal, ProposeError};
use serde_json::json;
use vocabulary::State;

use crate::rig::{PAYMENTS, Rig, judge, limits, refund, workspace};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_payload_is_escalated_and_never_sent() {
    let rig = Rig::start("payload-corrupt", 21, &[], &[], limits()).await.expect("the rig starts");
    let corrupted = rig.executor.propose(refund("corrupted", 1_000)).expect("propose");
    rig.executor.propose(refund("intact", 1_500)).expect("propose");
    // A plausible payload, for more money, written behind the executor's back.
    rig.executor
        .log()
        .corrupt_payload_for_tests("corrupted", r#"{"amount":4999,"payment_intent":"pi_1"}"#)
        .expect("corrupt the row");

    rig.drain().await.expect("drain");
    let intents = rig.reconcile(5, 100).await.expect("reconcile");
    let state = |id: &str| intents.iter().find(|i| i.id == id).map(|i| i.state);
    assert_eq!(state("corrupted"), Some(State::Escalated), "{}", rig.describe());
    assert_eq!(state("intact"), Some(State::Confirmed), "{}", rig.describe());

    let escalated = rig.intent("corrupted");
    let reason = escalated.evidence.reason.clone().unwrap_or_default();
    assert!(reason.contains("hash"), "reason: {reason}");
    assert_eq!(escalated.attempts, 0);
    assert_eq!(rig.executor.escalations().expect("escalations").len(), 1);

    // Nothing of the corrupted intent reached the service; the intact one did, once.
    let ledger = rig.fake(PAYMENTS).ledger();
    assert_eq!(ledger.len(), 1, "{}", rig.describe());
    assert!(rig.effects_of(&escalated).is_empty(), "{}", rig.describe());
    assert!(ledger.iter().all(|e| e.params["amount"] != 4999), "{}", rig.describe());
    let keyed = rig
        .fake(PAYMENTS)
        .journal()
        .iter()
        .filter(|e| e.idempotency_key.as_deref() == Some(corrupted.key.as_str()))
        .count();
    assert_eq!(keyed, 0, "the corrupted intent's key reached the service");
    for intent in &intents {
        judge(intent, &rig.effects_of(intent)).unwrap_or_else(|e| panic!("{e}{}", rig.describe()));
    }

    // Further passes leave it alone.
    rig.pass().await.expect("pass");
    assert_eq!(rig.intent("corrupted").state, State::Escalated);
    assert_eq!(rig.fake(PAYMENTS).ledger().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proposing_is_idempotent_per_id_and_refuses_what_it_cannot_check() {
    let rig = Rig::start("payload-propose", 22, &[], &[], limits()).await.expect("the rig starts");
    let first = rig.executor.propose(refund("r1", 1_000)).expect("propose");
    assert_eq!(first.state, State::Recorded);

    // The same id and the same parameters, written in another order: the existing intent.
    let again = rig
        .executor
        .propose(Proposal { params: json!({"amount": 1_000, "payment_intent": "pi_1"}), ..refund("r1", 1) })
        .expect("propose again");
    assert_eq!((&again.id, &again.key, again.created_ms), (&first.id, &first.key, first.created_ms));
    assert_eq!(again.params_hash, first.params_hash);
    assert_eq!(rig.status().expect("status").len(), 1);

    // The same id with other parameters, or another action: a conflict.
    let conflicts = [refund("r1", 2_000), workspace("r1", "org-1")];
    for proposal in conflicts {
        match rig.executor.propose(proposal.clone()) {
            Err(ProposeError::Conflict(id)) => assert_eq!(id, "r1"),
            other => panic!("{proposal:?}: expected a conflict, got {other:?}"),
        }
    }

    // An action the executor does not have.
    let unsupported = Proposal {
        id: "m1".into(),
        action: "mail.send".into(),
        params: json!({"to": "ops@example.com", "text": "c"}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    };
    match rig.executor.propose(unsupported) {
        Err(ProposeError::Action(ActionError::Unsupported(action))) => assert_eq!(action, "mail.send"),
        other => panic!("expected Unsupported, got {other:?}"),
    }

    // Parameters it cannot check.
    let malformed = [
        json!({"payment_intent": "pi_1", "amount": 0}),
        json!({"payment_intent": "pi_1", "amount": "1000"}),
        json!({"payment_intent": "pi_1", "amount": 10.5}),
        json!({"payment_intent": "pi_1", "amount": -5}),
        json!({"amount": 1000}),
        json!({"payment_intent": "", "amount": 1000}),
        json!({"payment_intent": "pi_1", "amount": 1000, "currency": "usd"}),
        json!(["pi_1", 1000]),
        json!(null),
    ];
    for params in malformed {
        let proposal = Proposal { params: params.clone(), ..refund("m1", 1) };
        match rig.executor.propose(proposal) {
            Err(ProposeError::Action(ActionError::Malformed { action, .. })) => {
                assert_eq!(action, "payments.refund")
            }
            other => panic!("{params}: expected Malformed, got {other:?}"),
        }
    }
    let nameless = Proposal { params: json!({"external_id": "org-1"}), ..workspace("m2", "org-1") };
    assert!(matches!(
        rig.executor.propose(nameless),
        Err(ProposeError::Action(ActionError::Malformed { .. }))
    ));

    // A replacement of an intent never recorded.
    let orphan = Proposal { replaces: Some("nobody".into()), ..refund("o1", 100) };
    assert!(matches!(rig.executor.propose(orphan), Err(ProposeError::UnknownPredecessor(..))));

    // Nothing refused was recorded, and nothing was sent.
    let ids: Vec<String> = rig.status().expect("status").into_iter().map(|i| i.id).collect();
    assert_eq!(ids, vec!["r1".to_string()]);
    assert!(rig.fake(PAYMENTS).ledger().is_empty());
}
