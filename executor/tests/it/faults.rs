//! The reference executor against every fault of design §4, on every service, over loopback
//! HTTP: one table, one runner. Each case proposes two intents under its faults, drains,
//! optionally keeps passing while the faults are still armed, heals, reconciles, and then
//! judges the executor's final claims against the fake's ledger.

use std::time::Duration;

use executor::Proposal;
use vocabulary::Acks;
use vocabulary::ContractPatch;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;
use vocabulary::KeyPolicy;
use vocabulary::Reads;
use vocabulary::State;
use vocabulary::protocol::Limits;

use crate::rig::{self, CHAIN, FILES, MESSAGES, PAYMENTS, Rig, SEEDED_KEY, WORKSPACES, judge, limits};

/// Reconciliation rounds after the heal, and the pause between them: about 7.5 s at most,
/// several times the longest bound any case has to wait out.
const ROUNDS: usize = 25;
const ROUND_PAUSE_MS: u64 = 300;
/// Cases run at the same time, at most.
const CASES_AT_ONCE: usize = 32;

struct Case {
    name: String,
    service: &'static str,
    /// On top of the rig's base contract (settle 800 ms).
    contract: ContractPatch,
    rules: Vec<FaultRule>,
    /// How long to keep passing after the drain with the faults still armed.
    faulty_ms: u64,
    /// The faults stay armed through reconciliation: they never heal.
    unhealed: bool,
    limits: Limits,
    expect: State,
    /// For an escalated intent: what `evidence.could_duplicate` must say.
    could_duplicate: Option<bool>,
}

impl Case {
    fn new(service: &'static str, name: &str, rules: Vec<FaultRule>, expect: State) -> Case {
        Case {
            name: format!("{service}: {name}"),
            service,
            contract: ContractPatch::default(),
            rules,
            faulty_ms: 0,
            unhealed: false,
            limits: limits(),
            expect,
            could_duplicate: None,
        }
    }

    /// An escalation whose `evidence.could_duplicate` must be `value`.
    fn could_duplicate(mut self, value: bool) -> Case {
        self.could_duplicate = Some(value);
        self
    }

    fn contract(mut self, contract: ContractPatch) -> Case {
        self.contract = contract;
        self
    }

    fn faulty_ms(mut self, ms: u64) -> Case {
        self.faulty_ms = ms;
        self
    }

    fn unhealed(mut self) -> Case {
        self.unhealed = true;
        self
    }

    fn limits(mut self, limits: Limits) -> Case {
        self.limits = limits;
        self
    }

    fn intents(&self) -> Vec<Proposal> {
        match self.service {
            PAYMENTS => {
                vec![rig::refund("refund-a", 1_000), rig::refund("refund-b", 1_500)]
            }
            // A new object (If-None-Match: *) and an overwrite (If-Match).
            FILES => vec![
                rig::put("put-new", "exports/q3.csv", "region,revenue\nemea,1200\n"),
                rig::put("put-over", SEEDED_KEY, "version 2"),
            ],
            CHAIN => vec![
                rig::transfer("pay-a", "0x00000000000000000000000000000000000000a1", 10u128.pow(17)),
                rig::transfer("pay-b", "0x00000000000000000000000000000000000000b2", 2 * 10u128.pow(17)),
            ],
            MESSAGES => {
                vec![rig::message("msg-a", "ada@example.com"), rig::message("msg-b", "grace@example.com")]
            }
            _ => vec![rig::workspace("ws-a", "org-a"), rig::workspace("ws-b", "org-b")],
        }
    }
}

fn path(service: &str) -> &'static str {
    if service == PAYMENTS { "/v1/refunds" } else { "/v1/workspaces" }
}

/// Writes (creates) of `service`.
fn post(service: &str, fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).method("POST").path(path(service))
}

/// Reads (lookups) of `service`.
fn get(service: &str, fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).method("GET").path(path(service))
}

/// Only the first intent's requests (its writes; lookups carry no intent).
fn first_intent(service: &str, rule: FaultRule) -> FaultRule {
    if service == PAYMENTS {
        rule.field("metadata[twice_intent]", "refund-a")
    } else {
        rule.field("external_id", "org-a")
    }
}

/// Every request to `service`'s API.
fn any(fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).path("/v1/*")
}

fn cases_for(s: &'static str) -> Vec<Case> {
    use FaultSpec::*;
    use State::*;
    // Where a fault must bite, a workspace create must not be saved by the unique external id.
    let unique_off = if s == WORKSPACES { Some(false) } else { None };
    // Eventual reads, with a short settle bound so that the read lag is what must be waited out.
    let eventual = |lag_max: u64| ContractPatch {
        reads: Some(Reads::Eventual),
        read_lag_ms_max: Some(lag_max),
        settle_ms_max: Some(300),
        unique_business_key: unique_off,
        ..ContractPatch::default()
    };
    // A refusal that is the intent's answer (402 card declined, 404), and one a person must
    // act on (403, 400, 422).
    let definite = if s == PAYMENTS { 402 } else { 404 };
    let decision = if s == PAYMENTS { 403 } else { 422 };
    vec![
        Case::new(s, "refuse, lookups refused too until the heal", vec![any(Refuse)], Confirmed)
            .faulty_ms(800),
        Case::new(
            s,
            &format!("reject {definite} is definite"),
            vec![post(s, Reject { status: definite, body: None })],
            Failed,
        ),
        Case::new(
            s,
            &format!("reject {decision} needs a decision: escalated, never retried"),
            vec![post(s, Reject { status: decision, body: None })],
            Escalated,
        )
        .could_duplicate(false),
        Case::new(
            s,
            "reject 503 is not definite",
            vec![post(s, Reject { status: 503, body: None })],
            Confirmed,
        ),
        Case::new(
            s,
            "reject 429 twice: not executed, retried in the drain",
            vec![post(s, Reject { status: 429, body: None }).times(2)],
            Confirmed,
        ),
        Case::new(
            s,
            "error_after_commit, lookups failing too until the heal",
            vec![any(ErrorAfterCommit { status: 500 })],
            Confirmed,
        )
        .faulty_ms(1_000),
        Case::new(s, "drop_after_commit", vec![post(s, DropAfterCommit)], Confirmed).faulty_ms(600),
        // The first intent's reply is lost, lookups lag, and the same-key retry is declined:
        // a definite "no" to a retry does not undo the first attempt.
        Case::new(
            s,
            &format!("reject {definite} of a retry after a lost reply"),
            vec![
                first_intent(s, post(s, DropAfterCommit).times(1)),
                first_intent(s, post(s, Reject { status: definite, body: None }).nth(2)),
                get(s, StaleRead { lag_ms: 1_500 }),
            ],
            Confirmed,
        )
        .contract(ContractPatch { unique_business_key: None, ..eventual(1_500) })
        .faulty_ms(1_900),
        // The same, refused with a status a person must act on: the refusal is of the
        // resend, and the lookups find the first send's effect once reads catch up.
        Case::new(
            s,
            &format!("reject {decision} of a retry after a lost reply"),
            vec![
                first_intent(s, post(s, DropAfterCommit).times(1)),
                first_intent(s, post(s, Reject { status: decision, body: None }).nth(2)),
                get(s, StaleRead { lag_ms: 1_500 }),
            ],
            Confirmed,
        )
        .contract(ContractPatch { unique_business_key: None, ..eventual(1_500) })
        .faulty_ms(1_900),
        Case::new(s, "timeout_after_commit", vec![post(s, TimeoutAfterCommit { hold_ms: 3_000 })], Confirmed),
        Case::new(
            s,
            "commit_after_timeout within the settle bound",
            vec![post(s, CommitAfterTimeout { delay_ms: Some(700) })],
            Confirmed,
        )
        .faulty_ms(1_500),
        // Without keys, only the settle bound says when "not there" becomes an answer.
        Case::new(
            s,
            "commit_after_timeout near the settle bound, keys ignored",
            vec![post(s, CommitAfterTimeout { delay_ms: Some(850) })],
            Confirmed,
        )
        .contract(ContractPatch {
            idempotency_keys: Some(KeyPolicy::Ignored),
            settle_ms_max: Some(1_000),
            unique_business_key: unique_off,
            ..ContractPatch::default()
        })
        .faulty_ms(1_500),
        Case::new(s, "silent_noop where acks may lie", vec![post(s, SilentNoop)], Confirmed)
            .contract(ContractPatch { acks: Some(Acks::MayLie), ..ContractPatch::default() }),
        // Reads lag longer than the settle bound and the request timeout together: only the
        // announced read lag says when "not there" becomes an answer.
        Case::new(
            s,
            "stale_read while the reply was lost, keys honoured",
            vec![post(s, DropAfterCommit), get(s, StaleRead { lag_ms: 1_500 })],
            Confirmed,
        )
        .contract(ContractPatch { unique_business_key: None, ..eventual(1_500) })
        .faulty_ms(1_900),
        Case::new(
            s,
            "stale_read while the reply was lost, keys ignored",
            vec![post(s, DropAfterCommit), get(s, StaleRead { lag_ms: 1_500 })],
            Confirmed,
        )
        .contract(ContractPatch { idempotency_keys: Some(KeyPolicy::Ignored), ..eventual(1_500) })
        .faulty_ms(1_900),
        Case::new(
            s,
            "forget_keys past a short retention, while reads lag",
            vec![
                post(s, DropAfterCommit),
                post(s, ForgetKeys { older_than_ms: Some(300) }),
                get(s, StaleRead { lag_ms: 900 }),
            ],
            Confirmed,
        )
        .contract(ContractPatch { key_retention_ms: Some(300), ..eventual(1_000) })
        .faulty_ms(1_500),
        Case::new(
            s,
            "ignore_keys with the reply lost and lookups failing until the heal",
            vec![post(s, IgnoreKeys), post(s, DropAfterCommit), get(s, Reject { status: 503, body: None })],
            Confirmed,
        )
        .contract(ContractPatch {
            idempotency_keys: Some(KeyPolicy::Ignored),
            unique_business_key: unique_off,
            ..ContractPatch::default()
        })
        .faulty_ms(1_500),
        Case::new(
            s,
            "latency within the request timeout",
            vec![any(Latency { before_ms: 150, after_ms: 100 })],
            Confirmed,
        ),
        Case::new(
            s,
            "latency past the request timeout, within the settle bound",
            vec![post(s, Latency { before_ms: 700, after_ms: 0 })],
            Confirmed,
        ),
        Case::new(
            s,
            "drop_after_commit with lookups refused for good",
            vec![post(s, DropAfterCommit), get(s, Refuse)],
            Escalated,
        )
        .unhealed()
        .limits(Limits { escalate_after_ms: 2_000, ..limits() }),
    ]
}

/// Writes of `files` (PUT), and its reads (HEAD) from the `from`-th on: the reads before
/// the first sends (one per intent) record the preconditions, and a fault there would only
/// keep the intents from being sent.
fn put(fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).method("PUT").path("/reports/*")
}

fn head_from(from: u64, fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).method("HEAD").path("/reports/*").nth(from).times(10_000)
}

/// The chain's broadcasts, and one method of its reads.
fn broadcast(fault: FaultSpec) -> FaultRule {
    call("eth_sendRawTransaction", fault)
}

fn call(method: &str, fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).method("POST").field("rpc_method", method)
}

/// The main faults on the services without idempotency keys, whose writes are guarded by a
/// precondition (files) or a signed nonce (chain) instead.
fn guarded_cases(s: &'static str) -> Vec<Case> {
    use FaultSpec::*;
    use State::*;
    let write = |fault: FaultSpec| if s == FILES { put(fault) } else { broadcast(fault) };
    // A lookup read: files HEADs after the two that prepare; the chain's receipts.
    let lookup = |fault: FaultSpec| {
        if s == FILES { head_from(3, fault) } else { call("eth_getTransactionReceipt", fault) }
    };
    let eventual = |lag_max: u64| ContractPatch {
        reads: Some(Reads::Eventual),
        read_lag_ms_max: Some(lag_max),
        settle_ms_max: Some(300),
        ..ContractPatch::default()
    };
    vec![
        Case::new(s, "refuse the writes until the heal", vec![write(Refuse)], Confirmed).faulty_ms(800),
        Case::new(
            s,
            "reject 403 needs a decision",
            vec![write(Reject { status: 403, body: None })],
            Escalated,
        )
        .could_duplicate(false),
        Case::new(
            s,
            "reject 503 is not definite",
            vec![write(Reject { status: 503, body: None })],
            Confirmed,
        ),
        Case::new(
            s,
            "reject 429 twice: not executed, retried in the drain",
            vec![write(Reject { status: 429, body: None }).times(2)],
            Confirmed,
        ),
        Case::new(s, "error_after_commit", vec![write(ErrorAfterCommit { status: 500 })], Confirmed)
            .faulty_ms(600),
        Case::new(s, "drop_after_commit", vec![write(DropAfterCommit)], Confirmed).faulty_ms(600),
        Case::new(s, "timeout_after_commit", vec![write(TimeoutAfterCommit { hold_ms: 3_000 })], Confirmed),
        Case::new(
            s,
            "commit_after_timeout within the settle bound",
            vec![write(CommitAfterTimeout { delay_ms: Some(700) })],
            Confirmed,
        )
        .faulty_ms(1_500),
        Case::new(s, "silent_noop where acks may lie", vec![write(SilentNoop)], Confirmed)
            .contract(ContractPatch { acks: Some(Acks::MayLie), ..ContractPatch::default() })
            .faulty_ms(600),
        // The guarded resend goes out before the lag has passed: its refusal (412, nonce too
        // low) is read back while reads still lag, and proves nothing until they catch up.
        Case::new(
            s,
            "stale_read while the reply was lost",
            vec![write(DropAfterCommit), lookup(StaleRead { lag_ms: 1_500 })],
            Confirmed,
        )
        .contract(eventual(1_500))
        .faulty_ms(1_900),
        Case::new(
            s,
            "forget_keys is harmless where keys are ignored",
            vec![write(ForgetKeys { older_than_ms: None })],
            Confirmed,
        ),
        Case::new(
            s,
            "ignore_keys with the reply lost",
            vec![write(IgnoreKeys), write(DropAfterCommit)],
            Confirmed,
        )
        .faulty_ms(600),
        Case::new(
            s,
            "latency past the request timeout, within the settle bound",
            vec![write(Latency { before_ms: 700, after_ms: 0 })],
            Confirmed,
        ),
        Case::new(
            s,
            "drop_after_commit with lookups refused for good",
            vec![write(DropAfterCommit), lookup(Refuse)],
            Escalated,
        )
        .unhealed()
        .limits(Limits { escalate_after_ms: 2_000, ..limits() }),
    ]
}

/// Sends of `messages` (`POST /emails`), and reads of its recipients' inboxes.
fn email(fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).method("POST").path("/emails")
}

fn inbox(fault: FaultSpec) -> FaultRule {
    FaultRule::always(fault).method("GET").path("/mailboxes/*")
}

/// Every fault on messages, whose effect is the delivery to the inbox: a 200 is never a
/// confirmation, and the two delivery faults (late, twice) are its own.
fn messages_cases() -> Vec<Case> {
    use FaultSpec::*;
    use State::*;
    let s = MESSAGES;
    // The inbox lags 300 ms at most here, so that a case waits out its bounds in seconds.
    let lagging = |lag_max: u64| ContractPatch { read_lag_ms_max: Some(lag_max), ..ContractPatch::default() };
    let first = |rule: FaultRule| rule.field("to", "ada@example.com");
    vec![
        Case::new(
            s,
            "refuse, inbox reads refused too until the heal",
            vec![FaultRule::always(Refuse)],
            Confirmed,
        )
        .contract(lagging(300))
        .faulty_ms(800),
        Case::new(s, "reject 451 is definite", vec![email(Reject { status: 451, body: None })], Failed)
            .contract(lagging(300)),
        Case::new(
            s,
            "reject 503 is not definite",
            vec![email(Reject { status: 503, body: None })],
            Confirmed,
        )
        .contract(lagging(300)),
        Case::new(
            s,
            "reject 429 twice: not executed, retried in the drain",
            vec![email(Reject { status: 429, body: None }).times(2)],
            Confirmed,
        )
        .contract(lagging(300)),
        Case::new(
            s,
            "error_after_commit, inbox reads failing too until the heal",
            vec![FaultRule::always(ErrorAfterCommit { status: 500 })],
            Confirmed,
        )
        .contract(lagging(300))
        .faulty_ms(1_000),
        Case::new(s, "drop_after_commit", vec![email(DropAfterCommit)], Confirmed)
            .contract(lagging(300))
            .faulty_ms(600),
        Case::new(s, "timeout_after_commit", vec![email(TimeoutAfterCommit { hold_ms: 3_000 })], Confirmed)
            .contract(lagging(300)),
        Case::new(
            s,
            "commit_after_timeout within the settle bound",
            vec![email(CommitAfterTimeout { delay_ms: Some(700) })],
            Confirmed,
        )
        .contract(lagging(300))
        .faulty_ms(1_500),
        // Accepted and dropped: only the inbox tells, and the resend needs a new key.
        Case::new(s, "silent_noop: accepted, never delivered", vec![email(SilentNoop)], Confirmed)
            .contract(lagging(300))
            .faulty_ms(600),
        Case::new(
            s,
            "stale_read of the inbox while the reply was lost",
            vec![email(DropAfterCommit), inbox(StaleRead { lag_ms: 1_500 })],
            Confirmed,
        )
        .contract(lagging(1_500))
        .faulty_ms(1_900),
        Case::new(
            s,
            "forget_keys past a short retention, while the inbox lags",
            vec![
                email(DropAfterCommit),
                email(ForgetKeys { older_than_ms: Some(300) }),
                inbox(StaleRead { lag_ms: 300 }),
            ],
            Confirmed,
        )
        .contract(ContractPatch { key_retention_ms: Some(300), ..lagging(300) })
        .faulty_ms(1_500),
        Case::new(
            s,
            "ignore_keys with the reply lost and inbox reads failing until the heal",
            vec![email(IgnoreKeys), email(DropAfterCommit), inbox(Reject { status: 503, body: None })],
            Confirmed,
        )
        .contract(ContractPatch { idempotency_keys: Some(KeyPolicy::Ignored), ..lagging(300) })
        .faulty_ms(1_500),
        Case::new(
            s,
            "latency within the request timeout",
            vec![FaultRule::always(Latency { before_ms: 150, after_ms: 100 })],
            Confirmed,
        )
        .contract(lagging(300)),
        Case::new(
            s,
            "latency past the request timeout, within the settle bound",
            vec![email(Latency { before_ms: 700, after_ms: 0 })],
            Confirmed,
        )
        .contract(lagging(300)),
        // The 200 comes at once, the message 700 ms later: an empty inbox before the settle
        // bound proves nothing, and a resend then would deliver it twice.
        Case::new(
            s,
            "deliver_late within the settle bound",
            vec![email(DeliverLate { delay_ms: 700 })],
            Confirmed,
        )
        .contract(lagging(300))
        .faulty_ms(1_500),
        // The provider's second copy is its own: the executor confirms once and sends nothing
        // more (the ledger's second effect belongs to nobody).
        Case::new(
            s,
            "redeliver: the provider delivers twice",
            vec![first(email(Redeliver { after_ms: 300 }))],
            Confirmed,
        )
        .contract(lagging(300))
        .faulty_ms(600),
        Case::new(
            s,
            "drop_after_commit with inbox reads refused for good",
            vec![email(DropAfterCommit), inbox(Refuse)],
            Escalated,
        )
        .contract(lagging(300))
        .unhealed()
        .limits(Limits { escalate_after_ms: 2_000, ..limits() }),
    ]
}

fn cases() -> Vec<Case> {
    let mut cases = cases_for(PAYMENTS);
    cases.extend(cases_for(WORKSPACES));
    cases.extend(guarded_cases(FILES));
    cases.extend(guarded_cases(CHAIN));
    cases.extend(messages_cases());
    cases
}

/// Faults armed on `service` that never fired: a case must test what its name says.
fn idle_faults(rig: &Rig, service: &str) -> Option<String> {
    let idle: Vec<&'static str> =
        rig.fake(service).rules().iter().filter(|r| r.fired == 0).map(|r| r.rule.fault.kind()).collect();
    (!idle.is_empty()).then(|| format!("faults that never fired: {idle:?}"))
}

async fn run(case: Case, seed: u64) -> Result<(), String> {
    let patches = [(case.service, case.contract.clone())];
    let rules: Vec<(&str, FaultRule)> = case.rules.iter().map(|r| (case.service, r.clone())).collect();
    let rig = Rig::start(&case.name, seed, &patches, &rules, case.limits.clone()).await?;
    let proposals = case.intents();
    for proposal in proposals.clone() {
        rig.executor.propose(proposal).map_err(|e| format!("propose: {e}"))?;
    }
    // Act.
    rig.drain().await?;
    if case.faulty_ms > 0 {
        rig.passes_for(case.faulty_ms, 100).await?;
    }
    // Heal, reconcile, check.
    let mut problems = Vec::new();
    if !case.unhealed {
        problems.extend(idle_faults(&rig, case.service));
        rig.heal();
    }
    let intents = rig.reconcile(ROUNDS, ROUND_PAUSE_MS).await?;
    if case.unhealed {
        problems.extend(idle_faults(&rig, case.service));
    }
    if intents.len() != proposals.len() {
        problems.push(format!("{} intents in the log, {} proposed", intents.len(), proposals.len()));
    }
    let mut attributed = 0;
    for intent in &intents {
        let effects = rig.effects_of(intent);
        attributed += effects.len();
        if let Err(e) = judge(intent, &effects) {
            problems.push(e);
        }
        if intent.state != case.expect {
            problems.push(format!("{} ended {}, expected {}", intent.id, intent.state, case.expect));
        }
        if let Some(want) = case.could_duplicate
            && intent.state == State::Escalated
            && intent.evidence.could_duplicate != Some(want)
        {
            problems.push(format!(
                "{} escalated with could_duplicate {:?}, expected {want}",
                intent.id, intent.evidence.could_duplicate
            ));
        }
    }
    // A delivery the provider made again by itself is nobody's (and nothing to attribute).
    let ledger: Vec<_> = rig.fake(case.service).ledger().into_iter().filter(|e| !e.by_provider()).collect();
    if ledger.len() != attributed {
        problems.push(format!("{} effects in the ledger, {attributed} of them attributed", ledger.len()));
    }
    if problems.is_empty() { Ok(()) } else { Err(format!("{}{}", problems.join("; "), rig.describe())) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_executor_survives_every_fault_on_every_service() {
    // Each case waits its bounds out on the wall clock; a case whose requests queue behind
    // too many others' would see its commits land later than their settle bound says.
    let running = std::sync::Arc::new(tokio::sync::Semaphore::new(CASES_AT_ONCE));
    let mut tasks = tokio::task::JoinSet::new();
    for (i, case) in cases().into_iter().enumerate() {
        let running = std::sync::Arc::clone(&running);
        tasks.spawn(async move {
            let name = case.name.clone();
            let Ok(_turn) = running.acquire_owned().await else {
                return (name, Err("the runner's semaphore closed".to_string()));
            };
            // Bounded: a case that hangs is a failure, not a stuck test.
            let result = tokio::time::timeout(Duration::from_secs(40), run(case, 7 + i as u64))
                .await
                .unwrap_or_else(|_| Err("did not finish within 40 s".into()));
            (name, result)
        });
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    while let Some(done) = tasks.join_next().await {
        let (name, result) = done.expect("a case's task");
        ran += 1;
        if let Err(e) = result {
            failures.push(format!("{name}: {e}"));
        }
    }
    failures.sort();
    assert!(ran >= 30, "only {ran} cases ran");
    assert!(failures.is_empty(), "{} of {ran} cases failed:\n{}", failures.len(), failures.join("\n\n"));
}

/// Every fault kind appears in the table for every service it can act on, so none goes
/// untested.
#[test]
fn the_table_covers_every_fault_on_every_service() {
    let cases = cases();
    // The webhook faults act on the webhooks a service sends to an app, which the reference
    // executor's calls never make: the catalog rehearses them against apps that receive them.
    let delivery = |kind: &str| matches!(kind, "deliver_late" | "redeliver");
    let webhook = |kind: &str| vocabulary::rule::WEBHOOK_FAULT_KINDS.contains(&kind);
    for service in [PAYMENTS, WORKSPACES, FILES, CHAIN, MESSAGES] {
        let delivers = vocabulary::rule::DELIVERY_SERVICES.contains(&service);
        for kind in vocabulary::rule::FAULT_KINDS.iter().filter(|k| !webhook(k) && (delivers || !delivery(k)))
        {
            let covered =
                cases.iter().any(|c| c.service == service && c.rules.iter().any(|r| r.fault.kind() == *kind));
            assert!(covered, "no case injects {kind} on {service}");
        }
    }
    let expected: Vec<State> = cases.iter().map(|c| c.expect).collect();
    for state in [State::Confirmed, State::Failed, State::Escalated] {
        assert!(expected.contains(&state), "no case expects {state}");
    }
}
