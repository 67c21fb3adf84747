//! The reference executor against refusals that need a person's decision (401, 403, 400,
//! 422), over loopback HTTP: never sent again, escalated with the service's own words, and
//! saying whether going on could write twice, which a refusal of a resend after a lost reply
//! cannot rule out until a lookup proves the first send absent.

use std::time::Duration;

use executor::model::Decision;
use vocabulary::ContractPatch;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;
use vocabulary::Reads;
use vocabulary::State;
use vocabulary::protocol::Limits;

use crate::rig::{self, PAYMENTS, Rig, judge, limits};

/// How long a step may take before the test gives up on it.
const STEP_MS: u64 = 10_000;

fn refunds(method: &str, fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).method(method).path("/v1/refunds")
}

/// Passes until `done` holds for the intent `id`, within [`STEP_MS`].
async fn pass_until(rig: &Rig, id: &str, what: &str, done: impl Fn(&executor::Intent) -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(STEP_MS);
    loop {
        if done(&rig.intent(id)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{id}: not {what} within {STEP_MS} ms{}",
            rig.describe()
        );
        rig.pass().await.expect("a pass");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Write requests `fake` saw for refunds.
fn refund_posts(rig: &Rig) -> usize {
    rig.fake(PAYMENTS).journal().iter().filter(|e| e.method == "POST" && e.path == "/v1/refunds").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_the_first_send_is_escalated_and_never_sent_again() {
    let rules = [(PAYMENTS, refunds("POST", FaultSpec::Reject { status: 403, body: None }).times(1))];
    let rig = Rig::start("decision-first-send", 3, &[], &rules, limits()).await.expect("the rig starts");
    rig.executor.propose(rig::refund("refund-a", 1_000)).expect("recorded");
    rig.drain().await.expect("drain");
    // Healed, and reconciled: the permission is there now, and still nothing is sent.
    rig.heal();
    let intents = rig.reconcile(5, 100).await.expect("reconcile");
    let intent = &intents[0];
    assert_eq!(intent.state, State::Escalated, "{}", rig.describe());
    assert_eq!(intent.evidence.could_duplicate, Some(false));
    let decision = intent.evidence.decision.clone().expect("the refusal is kept");
    assert_eq!(decision.status, 403);
    assert!(decision.error.contains("does not have the required permissions"), "{decision:?}");
    assert_eq!(refund_posts(&rig), 1, "sent once, never again{}", rig.describe());
    assert!(rig.effects_of(intent).is_empty());
    judge(intent, &rig.effects_of(intent)).expect("honest");
}

/// The first send commits and its reply is lost; lookups lag, so the same-key resend goes
/// out, and is refused with 403. From then on every lookup fails: the first send's refund is
/// never seen, so past its deadline the intent is escalated, keeping the refusal, and saying
/// that going on could refund twice (it would: the refund exists).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_a_resend_that_lookups_never_settle_says_it_could_duplicate() {
    let eventual = ContractPatch {
        reads: Some(Reads::Eventual),
        read_lag_ms_max: Some(1_500),
        settle_ms_max: Some(300),
        ..ContractPatch::default()
    };
    let rules = [
        (PAYMENTS, refunds("POST", FaultSpec::DropAfterCommit).times(1)),
        (PAYMENTS, refunds("POST", FaultSpec::Reject { status: 403, body: None }).nth(2)),
        (PAYMENTS, refunds("GET", FaultSpec::StaleRead { lag_ms: 1_500 })),
    ];
    let limits = Limits { escalate_after_ms: 2_000, ..limits() };
    let rig = Rig::start("decision-resend", 5, &[(PAYMENTS, eventual)], &rules, limits)
        .await
        .expect("the rig starts");
    rig.executor.propose(rig::refund("refund-a", 1_000)).expect("recorded");
    rig.drain().await.expect("drain");
    pass_until(&rig, "refund-a", "refused", |i| i.evidence.decision.is_some()).await;
    let refused = rig.intent("refund-a");
    assert_eq!(refused.state, State::Unknown, "an earlier send may have landed{}", rig.describe());
    // Lookups fail from now on, for good.
    rig.heal();
    rig.fake(PAYMENTS).add_rule(refunds("GET", FaultSpec::Refuse)).expect("armed");
    pass_until(&rig, "refund-a", "escalated", |i| i.state == State::Escalated).await;
    let intent = rig.intent("refund-a");
    assert_eq!(intent.evidence.could_duplicate, Some(true), "{}", rig.describe());
    let decision = intent.evidence.decision.clone().expect("the refusal is kept");
    assert_eq!(decision, Decision { status: 403, error: decision.error.clone() });
    assert!(intent.evidence.last_error.as_deref().is_some_and(|e| !e.contains("403")), "a lookup's error");
    assert_eq!(
        refund_posts(&rig),
        2,
        "the first send and the refused resend, nothing after{}",
        rig.describe()
    );
    let effects = rig.effects_of(&intent);
    assert_eq!(effects.len(), 1, "the first send's refund");
    judge(&intent, &effects).expect("honest");
}
