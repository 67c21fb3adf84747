//! Drawing a case: its size, the contracts' terms, the swarm (what a case may use at all),
//! the raw draws of intents, faults and events, and the aimed steps that line up sequences
//! independent draws almost never would. Nothing here makes a scenario: [`super::build`]
//! turns these draws into one.

use std::collections::BTreeMap;

use proptest::prelude::*;
use vocabulary::{Acks, Contract, FaultSpec, Guard, KeyPolicy};

use crate::model::{IntentSpec, ServiceFault};

/// Request timeout announced to executors in generated scenarios.
pub const REQUEST_TIMEOUT_MS: u64 = 1_000;
/// Lease announced to executors in generated scenarios.
pub const LEASE_MS: u64 = 3_000;
/// Cases of one size before the next size: the first 200 cases are the smallest.
pub const CASES_PER_SIZE: u64 = 200;
/// Sizes above the first; from case `CASES_PER_SIZE * SIZE_STEPS` on, cases keep the largest.
const SIZE_STEPS: u64 = 4;

/// How large generated case `index` may be. The first [`CASES_PER_SIZE`] cases have one or
/// two intents and faults; every [`CASES_PER_SIZE`] cases one more of each may come, up to
/// six intents. Over the first 1,000 cases a case has two and a half intents on average.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub intents_max: usize,
    pub faults_max: usize,
    pub events_max: usize,
    /// Every fault on the first matching write, none at a read, none by probability: the
    /// sharpest cases, for the first [`SHARP_CASES`].
    pub sharp: bool,
}

/// The first cases are sharp (see [`Size::sharp`]): the commonest failure is a write whose
/// answer goes wrong the first time, and a small case that shows it is found and shrunk
/// fastest.
pub const SHARP_CASES: u64 = 50;

/// The size of case `index` (see [`Size`]).
pub fn size_for(index: u64) -> Size {
    let step = (index / CASES_PER_SIZE).min(SIZE_STEPS) as usize;
    Size { intents_max: 2 + step, faults_max: 3 + step, events_max: 1 + step / 2, sharp: index < SHARP_CASES }
}

/// The contracts' random terms, before they are checked against faults. One set per
/// service; `build::patch` keeps the terms the service has.
#[derive(Debug, Clone)]
pub(super) struct Terms {
    pub(super) keys_honored: bool,
    pub(super) key_retention_ms: u64,
    pub(super) eventual_lag_ms: Option<u64>,
    pub(super) acks_may_lie: bool,
    pub(super) settle_ms_max: u64,
    pub(super) unique: bool,
    pub(super) guarded: bool,
}

pub(super) fn terms() -> impl Strategy<Value = Terms> {
    (
        prop::bool::weighted(0.7),
        prop::sample::select(vec![2_000u64, 5_000]),
        prop::option::weighted(0.6, prop::sample::select(vec![100u64, 300, 500])),
        prop::bool::weighted(0.25),
        prop::sample::select(vec![500u64, 1_500, 2_500, 2_500]),
        prop::bool::weighted(0.5),
        prop::bool::weighted(0.75),
    )
        .prop_map(
            |(
                keys_honored,
                key_retention_ms,
                eventual_lag_ms,
                acks_may_lie,
                settle_ms_max,
                unique,
                guarded,
            )| {
                Terms {
                    keys_honored,
                    key_retention_ms,
                    eventual_lag_ms,
                    acks_may_lie,
                    settle_ms_max,
                    unique,
                    guarded,
                }
            },
        )
}

/// Fault kinds, in the order [`fault_for`](super::build::fault_for) makes them. The first
/// four leave the caller unsure whether its write happened, the heart of every failure mode:
/// they weigh [`UNSURE_WEIGHT`] each in a draw, the others one.
/// The webhook faults come last and are drawn only where a draw aims at an intent a genuine
/// event starts (`build::Case::webhook_fault`): the swarm holds a flag for each of the others,
/// so that adding them moved no draw of any case.
pub(super) const FAULT_KINDS: usize =
    vocabulary::rule::FAULT_KINDS.len() - vocabulary::rule::WEBHOOK_FAULT_KINDS.len();
pub(super) const UNSURE_KINDS: usize = 4;
const UNSURE_WEIGHT: u32 = 3;
/// The late commit: the one unsure answer that a read-back right after it cannot settle,
/// so it weighs three times as much again.
pub(super) const COMMIT_AFTER_TIMEOUT: usize = 3;
/// The answers that say "not executed": a refused connection, a rejection (429 first).
/// They weigh twice the remaining kinds: the retries they cause are where the next fault
/// bites.
pub(super) const REFUSE: usize = 8;
pub(super) const REJECT: usize = 9;
const NOT_EXECUTED_WEIGHT: u32 = 2;
/// The stale read, which only a read can suffer.
pub(super) const STALE_READ: usize = 5;

pub(super) const IGNORE_KEYS: usize = 6;
pub(super) const FORGET_KEYS: usize = 7;
pub(super) const LATENCY: usize = 10;
/// The delivery faults, which only a service that delivers after its answer can suffer
/// ([`FaultSpec::services`]).
pub(super) const DELIVER_LATE: usize = 11;
pub(super) const REDELIVER: usize = 12;
/// The webhook faults, drawn only where aimed at an intent an event starts.
pub(super) const DUPLICATE_WEBHOOK: usize = 13;
pub(super) const DELAY_WEBHOOK: usize = 14;
pub(super) const LOSE_WEBHOOK_ACK: usize = 15;
pub(super) const WEBHOOK_ENDPOINT_DOWN: usize = 16;
/// The kinds that mean something at a read: a lost reply, a hang, a stale answer, a refusal,
/// a rejection, latency.
pub(super) const READ_KINDS: [usize; 6] = [0, 2, STALE_READ, 8, 9, 10];

/// Process events, in the order `build::build` makes them.
const EVENT_KINDS: usize = 8;

/// What a case may use at all (swarm testing): each flag turns one action, fault kind or
/// event kind *off*, so that shrinking (towards `false`) turns everything back on and the
/// shrunk case reads plainly. With nothing left on, everything is on.
#[derive(Debug, Clone)]
pub(super) struct Swarm {
    pub(super) actions_off: Vec<bool>,
    pub(super) faults_off: Vec<bool>,
    pub(super) events_off: Vec<bool>,
}

pub(super) fn swarm() -> impl Strategy<Value = Swarm> {
    (
        prop::collection::vec(prop::bool::weighted(0.5), vocabulary::ACTIONS.len()),
        prop::collection::vec(prop::bool::weighted(0.5), FAULT_KINDS),
        prop::collection::vec(prop::bool::weighted(0.5), EVENT_KINDS),
    )
        .prop_map(|(actions_off, faults_off, events_off)| Swarm { actions_off, faults_off, events_off })
}

/// The indices a swarm leaves on, out of `off.len()`.
pub(super) fn enabled(off: &[bool]) -> Vec<usize> {
    let on: Vec<usize> = (0..off.len()).filter(|i| !off[*i]).collect();
    if on.is_empty() { (0..off.len()).collect() } else { on }
}

/// The fault kind a draw picks among those `on`, the unsure ones weighing more.
pub(super) fn weighted_kind(on: &[usize], draw: u32) -> usize {
    let weight = |k: usize| match k {
        COMMIT_AFTER_TIMEOUT => UNSURE_WEIGHT * 3,
        k if k < UNSURE_KINDS => UNSURE_WEIGHT,
        REFUSE | REJECT => NOT_EXECUTED_WEIGHT,
        _ => 1,
    };
    let total: u32 = on.iter().map(|k| weight(*k)).sum();
    let mut left = draw % total.max(1);
    for k in on {
        if left < weight(*k) {
            return *k;
        }
        left -= weight(*k);
    }
    on[0]
}

/// A fault drawn before the swarm and the contract shape it.
#[derive(Debug, Clone)]
pub(super) struct FaultDraw {
    pub(super) service: usize,
    pub(super) kind: u32,
    /// At a read (the requests after a write) rather than at a write.
    pub(super) at_read: bool,
    pub(super) nth: u64,
    pub(super) times: Option<u64>,
    /// Fire on every matching request with probability `dense / 4` rather than on the `nth`.
    pub(super) dense: Option<u8>,
    /// Aim at one intent's requests only (`where` on its business key, or its object's path).
    pub(super) aim: Option<usize>,
    /// Fire on the request right after the previous fault's on the same service and method:
    /// a refusal and then a late commit, a lost reply and then a lost retry.
    pub(super) follows: bool,
    pub(super) param: u64,
}

pub(super) fn fault_draw() -> impl Strategy<Value = FaultDraw> {
    (
        (0usize..8, 0u32..64, prop::bool::weighted(0.2)),
        // The first matching request most often: a case may have only one.
        (prop_oneof![3 => Just(1u64), 1 => 2u64..=3], prop::option::weighted(0.3, 2u64..=4)),
        (prop::option::weighted(0.4, 1u8..=3), prop::option::weighted(0.2, 0usize..8), 0u64..=2),
        prop::bool::weighted(0.35),
    )
        .prop_map(|((service, kind, at_read), (nth, times), (dense, aim, param), follows)| FaultDraw {
            service,
            kind,
            at_read,
            nth,
            times,
            dense,
            aim,
            param,
            follows,
        })
}

/// An event drawn before the swarm shapes it.
#[derive(Debug, Clone)]
pub(super) struct EventDraw {
    pub(super) kind: usize,
    pub(super) service: usize,
    /// At a read (a lookup, reconciliation's requests) rather than at a write.
    pub(super) at_read: bool,
    pub(super) nth: u64,
    pub(super) intent: usize,
    pub(super) param: u64,
}

pub(super) fn event_draw() -> impl Strategy<Value = EventDraw> {
    (0usize..EVENT_KINDS * 4, 0usize..8, prop::bool::weighted(0.3), 1u64..=3, 0usize..8, 0u64..=2).prop_map(
        |(kind, service, at_read, nth, intent, param)| EventDraw {
            kind,
            service,
            at_read,
            nth,
            intent,
            param,
        },
    )
}

/// One intent drawn: an action, its size, whether it replaces an earlier intent of the same
/// action, and (for an action with a guard on existing objects) whether its object exists.
#[derive(Debug, Clone)]
pub(super) struct IntentDraw {
    pub(super) action: usize,
    pub(super) amount: u64,
    pub(super) replaces_previous: bool,
    /// For a put: the object exists before the run. For an action whose business key several
    /// intents may share (a refund, a transfer, a message), with `replaces_previous`: the
    /// intent is its predecessor's sibling on the same key (a second partial refund of the
    /// payment, a second message to the recipient) instead of its replacement. One draw for
    /// both keeps every other draw of a seed where it was.
    pub(super) exists: bool,
    /// A workflow's step: it comes after the intent before it.
    pub(super) after_previous: bool,
    /// As a step, a parameter reads the predecessor's result where the action table allows.
    pub(super) reads: bool,
}

pub(super) fn intent_draw() -> impl Strategy<Value = IntentDraw> {
    (
        0usize..16,
        1u64..=50,
        prop::bool::weighted(0.4),
        prop::bool::weighted(0.5),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.7),
    )
        .prop_map(|(action, amount, replaces_previous, exists, after_previous, reads)| IntentDraw {
            action,
            amount: amount * 100,
            replaces_previous,
            exists,
            after_previous,
            reads,
        })
}

/// The methods of a service's writes and reads, and for a JSON-RPC service the calls a rule
/// aims at with `where` (a chain's every call is a POST to the same path).
pub(super) struct Surface {
    pub(super) write: (&'static str, Option<&'static str>),
    pub(super) reads: [(&'static str, Option<&'static str>); 2],
}

pub(super) fn surface(service: &str) -> Surface {
    match service {
        "files" => Surface { write: ("PUT", None), reads: [("GET", None), ("HEAD", None)] },
        "chain" => Surface {
            write: ("POST", Some("eth_sendRawTransaction")),
            reads: [("POST", Some("eth_getTransactionReceipt")), ("POST", Some("eth_getTransactionCount"))],
        },
        _ => Surface { write: ("POST", None), reads: [("GET", None), ("GET", None)] },
    }
}

/// "Not now": a 429, which says the request was not executed and may be sent again.
pub(super) const NOT_NOW: FaultSpec = FaultSpec::Reject { status: 429, body: None };
/// The event kind of a pause shorter than the lease, with no one to take over.
pub(super) const PAUSE: usize = 3;

/// A fault aimed at one intent's first or second send, whatever its draw says (see
/// [`aimed_steps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    /// A 429 on the first send: the intent is sent again later.
    NotNow,
    /// An answer that leaves the caller unsure whether the second send (the retry after a
    /// "not now") took effect, of a kind the swarm leaves on.
    UnsureRetry,
    /// The first send commits after the caller's timeout (see [`COMMIT_AFTER_TIMEOUT`]).
    LateCommit,
}

/// The service an intent acts on.
pub(super) fn service_of(intent: &IntentSpec) -> &'static str {
    vocabulary::action(&intent.action).map_or("payments", |a| a.service)
}

/// Whether a rule can single out an intent's requests (see `build::aim_at`), and it has any:
/// not a transfer's, whose recipient is inside the signed bytes, nor a forgery's intent. A "not now" that would land on whichever
/// transfer goes first leaves a nonce gap behind it rather than the step it stands for.
fn aimable(intent: &IntentSpec) -> bool {
    service_of(intent) != "chain" && sent(intent)
}

/// Whether an intent is ever sent: not one only a forged event would start.
fn sent(intent: &IntentSpec) -> bool {
    intent.on_event.as_ref().is_none_or(|t| !t.forged)
}

/// Whether an intent's effect is looked up by the first read its service sees from it: a
/// GET that no precondition read (a put's HEAD) or shared JSON-RPC path (a chain's POSTs)
/// comes before, so that a request point on the service's first read is its read-back.
fn read_back_first(intent: &IntentSpec) -> bool {
    vocabulary::action(&intent.action).is_some_and(|a| {
        a.guard != Some(Guard::ConditionalWrites)
            && a.service != "chain"
            && surface(a.service).reads[0].0 == "GET"
    })
}

/// The faults of a case that aim at one intent's sends, by fault draw index, for two
/// sequences of steps that independent draws almost never line up, each a question that
/// one wrong belief answers wrongly:
///
/// - **A refusal in a lineage.** A replacement may run only once what it replaces has
///   certainly failed; a 429 is not that, as the original is sent again. In a case with a
///   lineage, the first fault answers the replaced intent's first send "not now", and the
///   second leaves its retry unsure (so the replacement must wait on an `unknown` original
///   too). Whatever the swarm says: the lineage is the case's question. Not for a transfer,
///   whose sends no rule can single out.
/// - **A stopped read-back.** A lookup's "not there" says nothing of a commit still on its
///   way, however long the worker takes to read it: what counts is when it was asked. In a
///   case with a pause and no takeover (and no lineage), the first fault makes one
///   intent's first send commit late, so that its read-back goes out before the commit
///   lands (the pause, see [`late_write`], stops the worker there), and the second answers
///   another intent's first send "not now", so that the run still has work while the
///   worker is stopped (a drain with nothing left to do ends, and with it the pause).
pub(super) fn aimed_steps<'a>(
    intents: &'a [IntentSpec],
    faults: usize,
    event_draws: &[EventDraw],
    events_on: &[usize],
    contracts: &BTreeMap<&str, Contract>,
) -> BTreeMap<usize, (Step, &'a IntentSpec)> {
    let mut steps = BTreeMap::new();
    let replaced =
        intents.iter().find(|i| intents.iter().any(|r| r.replaces.as_deref() == Some(i.id.as_str())));
    if let Some(original) = replaced {
        if aimable(original) {
            steps.insert(0, (Step::NotNow, original));
            steps.insert(1, (Step::UnsureRetry, original));
        }
        return steps;
    }
    let pauses = event_draws.iter().any(|d| events_on[d.kind % events_on.len()] == PAUSE);
    // Preferably where only the read-back can settle the intent (a resend under its key
    // cannot: the service ignores keys, forgets them before the read-back, or its acks may
    // lie), where a second effect could land at all (no unique business key to refuse it),
    // and where the settle bound leaves time for the pause within the lease.
    let late = intents.iter().filter(|i| read_back_first(i) && sent(i)).min_by_key(|i| {
        contracts.get(service_of(i)).map(|c| {
            let key_settles = c.idempotency_keys == KeyPolicy::Honored
                && c.acks == Acks::Reliable
                && c.key_retention_ms > 2 * REQUEST_TIMEOUT_MS + 100;
            (key_settles, c.unique_business_key, read_back_pause_ms(c) >= LEASE_MS - 100)
        })
    });
    let other =
        late.and_then(|l| intents.iter().find(|i| i.id != l.id && i.replaces.is_none() && aimable(i)));
    if let (true, true, Some(late), Some(other)) = (pauses, faults >= 2, late, other) {
        steps.insert(0, (Step::LateCommit, late));
        steps.insert(1, (Step::NotNow, other));
    }
    steps
}

/// Where a pause without a takeover stops the worker at a read-back that races a late
/// commit: the service of the first late commit at a write of a service whose intents read
/// back with its first read, that read's method, and how long the pause lasts (long enough
/// for the settle bound, counted from a read-back sent right after the timeout, to pass
/// while the worker is stopped).
pub(super) fn late_write(
    faults: &[ServiceFault],
    contracts: &BTreeMap<&str, Contract>,
) -> Option<(&'static str, &'static str, u64)> {
    let fault = faults.iter().find(|f| {
        matches!(f.rule.fault, FaultSpec::CommitAfterTimeout { .. })
            && f.rule.method.as_deref() == Some(surface(&f.service).write.0)
            && f.service != "chain"
            && f.service != "files"
    })?;
    let service = vocabulary::SERVICES.iter().copied().find(|s| *s == fault.service)?;
    let c = contracts.get(service)?;
    Some((service, surface(service).reads[0].0, read_back_pause_ms(c).min(LEASE_MS - 100)))
}

/// How long a worker stopped at a read-back sent right after the timeout must stay stopped
/// for the settle and read-lag bounds of the write to pass meanwhile. A pause is kept
/// shorter than the lease, which the worker took as it sent the read-back: a worker that
/// wakes without its lease may not act on what it read.
fn read_back_pause_ms(c: &Contract) -> u64 {
    c.settle_ms_max + c.read_lag_ms_max + 200
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::build::fault_for;
    use crate::generate::replay::case;
    use crate::model::{EventAction, Point};

    #[test]
    fn a_replaced_intent_is_told_not_now_then_left_unsure() {
        let mut lineages = 0;
        for index in 0..500 {
            let s = case(4, index).unwrap();
            let Some(original) =
                s.intents.iter().find(|i| s.intents.iter().any(|r| r.replaces.as_deref() == Some(&i.id)))
            else {
                continue;
            };
            if original.action == "chain.transfer" {
                continue;
            }
            lineages += 1;
            let first = &s.faults[0];
            assert_eq!(first.service, original.action.split('.').next().unwrap(), "{index}");
            assert_eq!((&first.rule.fault, first.rule.nth), (&NOT_NOW, Some(1)), "{index}");
            // The retry is left unsure where the swarm leaves an unsure kind on; otherwise the
            // second fault is an ordinary draw, which may also say nth = 2.
            let unsure = |f: &&ServiceFault| {
                (0..UNSURE_KINDS)
                    .any(|k| fault_for(k, 0, 0, &Contract::default(), false).kind() == f.rule.fault.kind())
            };
            if let Some(second) = s.faults.get(1).filter(|f| f.rule.nth == Some(2)).filter(unsure) {
                assert_eq!(second.rule.fields, first.rule.fields, "{index}: the same intent's retry");
            }
        }
        assert!(lineages >= 20, "only {lineages} lineages in 500 cases");
    }

    #[test]
    fn a_pause_can_stop_the_worker_at_a_read_back_of_a_late_commit() {
        let lined_up = (0..1_000)
            .map(|index| case(6, index).unwrap())
            .filter(|s| {
                let late = s.faults.iter().find(|f| {
                    matches!(f.rule.fault, FaultSpec::CommitAfterTimeout { .. }) && f.rule.nth == Some(1)
                });
                let not_now = s.faults.iter().any(|f| f.rule.fault == NOT_NOW);
                late.is_some_and(|late| {
                    let c = s.contract(&late.service).unwrap();
                    not_now
                        && s.events.iter().any(|e| {
                            matches!(&e.at, Point::Request { service, method, nth: 1, .. }
                                if *service == late.service && method.as_deref() == Some("GET"))
                                && matches!(e.action, EventAction::Pause { for_ms, .. }
                                    if for_ms > c.settle_ms_max + c.read_lag_ms_max && for_ms < LEASE_MS)
                        })
                })
            })
            .count();
        assert!(lined_up >= 3, "{lined_up} stopped read-backs in 1,000 cases");
    }

    #[test]
    fn cases_grow_with_their_index() {
        let most = |range: std::ops::Range<u64>| range.map(|i| case(2, i).unwrap().intents.len()).max();
        assert_eq!(most(0..CASES_PER_SIZE), Some(2));
        assert_eq!(most(CASES_PER_SIZE * SIZE_STEPS..CASES_PER_SIZE * (SIZE_STEPS + 1)), Some(6));
    }
}
