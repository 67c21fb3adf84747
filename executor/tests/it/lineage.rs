//! Lineage (design §5, invariant 5): a replacement never executes while the intent it
//! replaces is unresolved, and never executes at all once that intent turns out confirmed.
//! Judged by the payments ledger: never two refunds for `pi_1`.

use executor::Proposal;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;
use vocabulary::State;

use crate::rig::{PAYMENTS, Rig, judge, limits, refund};

fn replacing(mut proposal: Proposal, original: &str) -> Proposal {
    proposal.replaces = Some(original.to_string());
    proposal
}

fn refunds_post(fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).method("POST").path("/v1/refunds")
}

/// Checks every intent against the ledger, and that the ledger holds exactly `refunds`
/// refunds in all.
fn judge_all(rig: &Rig, refunds: usize) {
    let intents = rig.status().expect("status");
    for intent in &intents {
        judge(intent, &rig.effects_of(intent)).unwrap_or_else(|e| panic!("{e}{}", rig.describe()));
    }
    let ledger = rig.fake(PAYMENTS).ledger();
    assert_eq!(ledger.len(), refunds, "refunds for pi_1:{}", rig.describe());
}

/// No request the fake saw carried the intent's idempotency key: it never left.
fn never_sent(rig: &Rig, id: &str) {
    let intent = rig.intent(id);
    assert_eq!(intent.attempts, 0, "{id} was sent:{}", rig.describe());
    assert_eq!(intent.evidence.first_sent_ms, None, "{id} was sent:{}", rig.describe());
    let keyed = rig
        .fake(PAYMENTS)
        .journal()
        .into_iter()
        .filter(|e| e.idempotency_key.as_deref() == Some(intent.key.as_str()))
        .count();
    assert_eq!(keyed, 0, "{id}'s key reached the service:{}", rig.describe());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_waits_for_an_unknown_original_and_is_cancelled_when_it_landed() {
    // The original's refund lands but its reply is lost, and every lookup is refused until
    // the heal: the original stays unknown, for longer than its settle bounds.
    let rules = [
        (PAYMENTS, refunds_post(FaultSpec::DropAfterCommit)),
        (PAYMENTS, FaultRule::always(FaultSpec::Refuse).method("GET").path("/v1/refunds")),
    ];
    let rig = Rig::start("lineage-unknown", 11, &[], &rules, limits()).await.expect("the rig starts");
    rig.executor.propose(refund("original", 1_000)).expect("propose the original");
    rig.drain().await.expect("drain");
    assert_eq!(rig.intent("original").state, State::Unknown, "{}", rig.describe());

    // A changed amount, proposed while the original is unknown.
    let proposed =
        rig.executor.propose(replacing(refund("replacement", 2_000), "original")).expect("propose");
    assert_eq!(proposed.state, State::Blocked);

    // Passes with the faults still armed: the replacement stays blocked and never sends.
    for _ in 0..8 {
        rig.pass().await.expect("pass");
        rig.drain().await.expect("drain");
        let replacement = rig.intent("replacement");
        assert_eq!(replacement.state, State::Blocked, "{}", rig.describe());
        assert!(rig.intent("original").state.is_unresolved(), "{}", rig.describe());
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    never_sent(&rig, "replacement");
    assert_eq!(rig.fake(PAYMENTS).ledger().len(), 1, "{}", rig.describe());

    // Heal and reconcile: the original is found, so the replacement is cancelled.
    rig.heal();
    let intents = rig.reconcile(20, 300).await.expect("reconcile");
    let state = |id: &str| intents.iter().find(|i| i.id == id).map(|i| i.state);
    assert_eq!(state("original"), Some(State::Confirmed), "{}", rig.describe());
    assert_eq!(state("replacement"), Some(State::Failed), "{}", rig.describe());
    let reason = rig.intent("replacement").evidence.reason.unwrap_or_default();
    assert!(reason.contains("cancelled"), "reason: {reason}");
    never_sent(&rig, "replacement");
    judge_all(&rig, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_runs_once_its_original_definitely_failed() {
    // Only the original is declined, definitely.
    let declined = refunds_post(FaultSpec::Reject { status: 402, body: None })
        .field("metadata[twice_intent]", "original");
    let rig = Rig::start("lineage-failed", 12, &[], &[(PAYMENTS, declined)], limits())
        .await
        .expect("the rig starts");
    rig.executor.propose(refund("original", 1_000)).expect("propose the original");
    let proposed =
        rig.executor.propose(replacing(refund("replacement", 2_000), "original")).expect("propose");
    assert_eq!(proposed.state, State::Blocked, "the original is not resolved yet");

    rig.drain().await.expect("drain");
    let intents = rig.reconcile(20, 300).await.expect("reconcile");
    let state = |id: &str| intents.iter().find(|i| i.id == id).map(|i| i.state);
    assert_eq!(state("original"), Some(State::Failed), "{}", rig.describe());
    assert_eq!(state("replacement"), Some(State::Confirmed), "{}", rig.describe());
    judge_all(&rig, 1);

    // The replacement left `blocked` only for `recorded`, and only after the original failed.
    let history = rig.executor.log().history("replacement").expect("history");
    let states: Vec<State> = history.iter().map(|h| h.to).collect();
    assert_eq!(&states[..2], &[State::Blocked, State::Recorded], "{}", rig.describe());
    let original_failed_at = rig
        .executor
        .log()
        .history("original")
        .expect("history")
        .iter()
        .find(|h| h.to == State::Failed)
        .map(|h| h.at_ms)
        .expect("the original failed");
    assert!(history[1].at_ms >= original_failed_at, "{}", rig.describe());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_of_a_confirmed_intent_is_cancelled_at_once() {
    let rig = Rig::start("lineage-confirmed", 13, &[], &[], limits()).await.expect("the rig starts");
    rig.executor.propose(refund("original", 1_000)).expect("propose the original");
    rig.drain().await.expect("drain");
    assert_eq!(rig.intent("original").state, State::Confirmed, "{}", rig.describe());

    let proposed =
        rig.executor.propose(replacing(refund("replacement", 2_000), "original")).expect("propose");
    assert_eq!(proposed.state, State::Failed);
    assert!(proposed.evidence.reason.as_deref().unwrap_or_default().contains("cancelled"));
    rig.reconcile(3, 100).await.expect("reconcile");
    never_sent(&rig, "replacement");
    judge_all(&rig, 1);
}
