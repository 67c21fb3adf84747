//! Generated scenarios: contracts × intents × faults × process events, with shrinking.
//!
//! Every generated scenario stays inside the contracts it announces (only faults that
//! [`vocabulary::Contract::admits`] accepts), so a correct executor exists for each one and
//! a violation is always the executor's fault. Shrinking (proptest's) drops intents, faults
//! and events and moves numbers towards the simplest values, so a failure comes back as a
//! small scenario that replays by itself.
//!
//! Four things make the search find bugs in few cases, where uniform random choice would
//! need many (the first and the last are known from the testing literature to do so):
//!
//! - **Swarm testing**: each case first draws which actions, fault kinds and process events
//!   it may use at all, then draws its steps from those only. A case with one fault kind
//!   enabled hammers that kind, where a uniform draw over every kind spreads a few faults
//!   thinly; across cases every combination still comes up.
//! - **Faults where they bite**: a fault lands on a write (the request that changes the
//!   world) three times in four, and on the reads after it otherwise; the kinds that leave
//!   the caller unsure whether a write happened weigh three times as much as the others.
//!   Some faults fire on every matching request with a seeded probability instead of on
//!   one, and some aim at one intent's requests only (`where` on its business key).
//! - **Aimed steps** ([`aimed_steps`]): a few sequences that independent draws almost never
//!   line up (a refusal of an intent that a later one replaces; a worker stopped while its
//!   read-back of a late commit is out) are set up whole where a case has what they need.
//! - **Size that grows with the index** ([`size_for`]): the first cases are small (a bug a
//!   small case shows is found, and shrunk, fastest); later ones have more intents, faults
//!   and events, so bugs that need several steps still come up.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};
use vocabulary::{
    Acks, ActionSpec, Contract, ContractPatch, FaultRule, FaultSpec, Guard, KeyPolicy, ParamKind, ParamRef,
    Reads,
};

use crate::model::{
    Event, EventAction, IntentSpec, LimitOverrides, ObjectSeed, PhaseName, Point, Scenario, ServiceFault,
};

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

/// The longest clock jump: on a service that keeps no keys it moves no term.
const HOUR_MS: u64 = 3_600_000;
/// The bucket every generated `files.put` writes to.
const BUCKET: &str = "generated";

/// The contracts' random terms, before they are checked against faults. One set per
/// service; [`patch`] keeps the terms the service has.
#[derive(Debug, Clone)]
struct Terms {
    keys_honored: bool,
    key_retention_ms: u64,
    eventual_lag_ms: Option<u64>,
    acks_may_lie: bool,
    settle_ms_max: u64,
    unique: bool,
    guarded: bool,
}

fn terms() -> impl Strategy<Value = Terms> {
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

/// The terms `service`'s contract may vary in, as its default contract shows them: keys where
/// the service takes them, a unique business key where it can enforce one, and the guard its
/// actions can use (fencing or conditional writes); reads, acks and the settle bound
/// everywhere.
fn patch(t: &Terms, service: &str) -> ContractPatch {
    let default = Contract::default_for(service).unwrap_or_else(Contract::payments_default);
    let keys = default.idempotency_keys == KeyPolicy::Honored;
    let guard = vocabulary::ACTIONS.iter().find(|a| a.service == service).and_then(|a| a.guard);
    ContractPatch {
        idempotency_keys: keys.then_some(if t.keys_honored {
            KeyPolicy::Honored
        } else {
            KeyPolicy::Ignored
        }),
        key_retention_ms: keys.then_some(t.key_retention_ms),
        reads: Some(if t.eventual_lag_ms.is_some() { Reads::Eventual } else { Reads::Strong }),
        read_lag_ms_max: Some(t.eventual_lag_ms.unwrap_or(0)),
        acks: Some(if t.acks_may_lie { Acks::MayLie } else { Acks::Reliable }),
        settle_ms_max: Some(t.settle_ms_max),
        unique_business_key: (service == "workspaces").then_some(t.unique),
        fencing: (guard == Some(Guard::Fencing)).then_some(t.guarded),
        conditional_writes: (guard == Some(Guard::ConditionalWrites)).then_some(t.guarded),
    }
}

/// Fault kinds, in the order [`fault_for`] makes them. The first four leave the caller unsure
/// whether its write happened, the heart of every failure mode: they weigh
/// [`UNSURE_WEIGHT`] each in a draw, the others one.
const FAULT_KINDS: usize = vocabulary::rule::FAULT_KINDS.len();
const UNSURE_KINDS: usize = 4;
const UNSURE_WEIGHT: u32 = 3;
/// The late commit: the one unsure answer that a read-back right after it cannot settle,
/// so it weighs three times as much again.
const COMMIT_AFTER_TIMEOUT: usize = 3;
/// The answers that say "not executed": a refused connection, a rejection (429 first).
/// They weigh twice the remaining kinds: the retries they cause are where the next fault
/// bites.
const REFUSE: usize = 8;
const REJECT: usize = 9;
const NOT_EXECUTED_WEIGHT: u32 = 2;
/// The stale read, which only a read can suffer.
const STALE_READ: usize = 5;

const IGNORE_KEYS: usize = 6;
const FORGET_KEYS: usize = 7;
const LATENCY: usize = 10;
/// The delivery faults, which only a service that delivers after its answer can suffer
/// ([`FaultSpec::services`]).
const DELIVER_LATE: usize = 11;
/// The kinds that mean something at a read: a lost reply, a hang, a stale answer, a refusal,
/// a rejection, latency.
const READ_KINDS: [usize; 6] = [0, 2, STALE_READ, 8, 9, 10];

/// Process events, in the order [`build`] makes them.
const EVENT_KINDS: usize = 8;

/// What a case may use at all (swarm testing): each flag turns one action, fault kind or
/// event kind *off*, so that shrinking (towards `false`) turns everything back on and the
/// shrunk case reads plainly. With nothing left on, everything is on.
#[derive(Debug, Clone)]
struct Swarm {
    actions_off: Vec<bool>,
    faults_off: Vec<bool>,
    events_off: Vec<bool>,
}

fn swarm() -> impl Strategy<Value = Swarm> {
    (
        prop::collection::vec(prop::bool::weighted(0.5), vocabulary::ACTIONS.len()),
        prop::collection::vec(prop::bool::weighted(0.5), FAULT_KINDS),
        prop::collection::vec(prop::bool::weighted(0.5), EVENT_KINDS),
    )
        .prop_map(|(actions_off, faults_off, events_off)| Swarm { actions_off, faults_off, events_off })
}

/// The indices a swarm leaves on, out of `off.len()`.
fn enabled(off: &[bool]) -> Vec<usize> {
    let on: Vec<usize> = (0..off.len()).filter(|i| !off[*i]).collect();
    if on.is_empty() { (0..off.len()).collect() } else { on }
}

/// The fault kind a draw picks among those `on`, the unsure ones weighing more.
fn weighted_kind(on: &[usize], draw: u32) -> usize {
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
struct FaultDraw {
    service: usize,
    kind: u32,
    /// At a read (the requests after a write) rather than at a write.
    at_read: bool,
    nth: u64,
    times: Option<u64>,
    /// Fire on every matching request with probability `dense / 4` rather than on the `nth`.
    dense: Option<u8>,
    /// Aim at one intent's requests only (`where` on its business key, or its object's path).
    aim: Option<usize>,
    /// Fire on the request right after the previous fault's on the same service and method:
    /// a refusal and then a late commit, a lost reply and then a lost retry.
    follows: bool,
    param: u64,
}

fn fault_draw() -> impl Strategy<Value = FaultDraw> {
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
struct EventDraw {
    kind: usize,
    service: usize,
    /// At a read (a lookup, reconciliation's requests) rather than at a write.
    at_read: bool,
    nth: u64,
    intent: usize,
    param: u64,
}

fn event_draw() -> impl Strategy<Value = EventDraw> {
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
struct IntentDraw {
    action: usize,
    amount: u64,
    replaces_previous: bool,
    exists: bool,
    /// A workflow's step: it comes after the intent before it.
    after_previous: bool,
    /// As a step, a parameter reads the predecessor's result where the action table allows.
    reads: bool,
}

fn intent_draw() -> impl Strategy<Value = IntentDraw> {
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

/// Makes `intent` a step after `predecessor`; with `reads`, its first parameter that can take
/// a reference reads the predecessor's first result field, keeping its drawn value around it.
fn as_step(intent: &mut IntentSpec, predecessor: &IntentSpec, reads: bool) {
    intent.after = vec![predecessor.id.clone()];
    let (Some(action), Some(from)) =
        (vocabulary::action(&intent.action), vocabulary::action(&predecessor.action))
    else {
        return;
    };
    let (true, Some(field)) = (reads, from.result_fields.first()) else { return };
    let Some(param) = action.params.iter().find(|p| action.param_takes_reference(p.name)) else { return };
    let drawn = intent.params.get(param.name).and_then(Value::as_str).unwrap_or_default().to_string();
    let reference = ParamRef {
        from: predecessor.id.clone(),
        field: field.name.to_string(),
        format: Some(format!("{drawn} {{}}")),
    };
    intent.params[param.name] = reference.to_value();
}

/// The strategy for generated case `index` of any seed; `name` names every value it makes.
pub fn scenario_strategy(name: String, size: Size) -> BoxedStrategy<Scenario> {
    let services = vocabulary::SERVICES.len();
    (
        swarm(),
        prop::collection::vec(terms(), services),
        prop::collection::vec(intent_draw(), 1..=size.intents_max),
        prop::collection::vec(fault_draw(), 1..=size.faults_max),
        prop::collection::vec(event_draw(), 0..=size.events_max),
    )
        .prop_map(move |(swarm, terms, intents, faults, events)| {
            build(&name, size.sharp, &swarm, &terms, &intents, &faults, &events)
        })
        .boxed()
}

/// The value of parameter `kind` of a new intent `n` (1-based), from the intent's `amount`.
/// The business key is unique per lineage; the rest follows the amount.
fn param_value(action: &ActionSpec, name: &str, kind: ParamKind, n: usize, amount: u64) -> Value {
    let business = name == action.business_key;
    match kind {
        ParamKind::Text if business && action.service == "payments" => json!(format!("pi_{n}")),
        ParamKind::Text if business => json!(format!("{}-{n}", action.service)),
        ParamKind::Text => json!(format!("Item {amount}")),
        ParamKind::PositiveInteger => json!(amount),
        ParamKind::Bucket => json!(BUCKET),
        ParamKind::ObjectKey => json!(format!("doc-{n}.txt")),
        ParamKind::Address => json!(format!("0x{:040x}", 0xc0de_0000_u64 + n as u64)),
        ParamKind::Wei => json!((u128::from(amount) * 1_000_000_000_000).to_string()),
        ParamKind::Email => json!(format!("user-{n}@example.com")),
    }
}

/// An intent's parameters from the action table; a replacement keeps the business key of the
/// intent it replaces (the same payment intent, external id, object key or recipient).
fn params_for(action: &ActionSpec, n: usize, amount: u64, previous: Option<&IntentSpec>) -> Value {
    let mut params = serde_json::Map::new();
    for p in action.params {
        let value = match previous {
            Some(prev) if p.name == action.business_key => prev.params[p.name].clone(),
            _ => param_value(action, p.name, p.kind, n, amount),
        };
        params.insert(p.name.to_string(), value);
    }
    Value::Object(params)
}

/// The methods of a service's writes and reads, and for a JSON-RPC service the calls a rule
/// aims at with `where` (a chain's every call is a POST to the same path).
struct Surface {
    write: (&'static str, Option<&'static str>),
    reads: [(&'static str, Option<&'static str>); 2],
}

fn surface(service: &str) -> Surface {
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
const NOT_NOW: FaultSpec = FaultSpec::Reject { status: 429, body: None };
/// The event kind of a pause shorter than the lease, with no one to take over.
const PAUSE: usize = 3;

/// A fault aimed at one intent's first or second send, whatever its draw says (see
/// [`aimed_steps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// A 429 on the first send: the intent is sent again later.
    NotNow,
    /// An answer that leaves the caller unsure whether the second send (the retry after a
    /// "not now") took effect, of a kind the swarm leaves on.
    UnsureRetry,
    /// The first send commits after the caller's timeout (see [`COMMIT_AFTER_TIMEOUT`]).
    LateCommit,
}

/// The service an intent acts on.
fn service_of(intent: &IntentSpec) -> &'static str {
    vocabulary::action(&intent.action).map_or("payments", |a| a.service)
}

/// Whether a rule can single out an intent's requests (see [`aim_at`]): not a transfer's,
/// whose recipient is inside the signed bytes. A "not now" that would land on whichever
/// transfer goes first leaves a nonce gap behind it rather than the step it stands for.
fn aimable(intent: &IntentSpec) -> bool {
    service_of(intent) != "chain"
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
fn aimed_steps<'a>(
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
    let late = intents.iter().filter(|i| read_back_first(i)).min_by_key(|i| {
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
fn late_write(
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

fn build(
    name: &str,
    sharp: bool,
    swarm: &Swarm,
    terms: &[Terms],
    intent_draws: &[IntentDraw],
    fault_draws: &[FaultDraw],
    event_draws: &[EventDraw],
) -> Scenario {
    let actions_on = enabled(&swarm.actions_off);
    let mut intents: Vec<IntentSpec> = Vec::new();
    let mut objects = Vec::new();
    for (i, draw) in intent_draws.iter().enumerate() {
        let action = &vocabulary::ACTIONS[actions_on[draw.action % actions_on.len()]];
        let previous =
            intents.iter().rev().find(|p| p.action == action.name).filter(|_| draw.replaces_previous);
        let params = params_for(action, i + 1, draw.amount, previous);
        // An object that exists before the run, so that a put overwrites: what conditional
        // writes guard.
        if action.guard == Some(Guard::ConditionalWrites) && draw.exists && previous.is_none() {
            objects.push(ObjectSeed {
                bucket: params["bucket"].as_str().unwrap_or(BUCKET).to_string(),
                key: params["key"].as_str().unwrap_or_default().to_string(),
                body: "the version before".into(),
            });
        }
        let replaces = previous.map(|p| p.id.clone());
        let mut intent = IntentSpec {
            id: format!("i{}", i + 1),
            action: action.name.to_string(),
            params,
            replaces,
            after: Vec::new(),
        };
        // A step of a workflow: after the intent before it, when neither is part of a lineage
        // (a replacement's own order is its lineage's).
        if let Some(before) = intents.last().filter(|b| draw.after_previous && b.replaces.is_none())
            && intent.replaces.is_none()
            && !intents.iter().any(|x| x.replaces.as_deref() == Some(before.id.as_str()))
        {
            as_step(&mut intent, before, draw.reads);
        }
        intents.push(intent);
    }
    // The services the intents act on: faults and events aim at these, where they can fire.
    let used: Vec<&'static str> = vocabulary::SERVICES
        .iter()
        .copied()
        .filter(|s| intents.iter().any(|i| vocabulary::action(&i.action).is_some_and(|a| a.service == *s)))
        .collect();
    let mut services = BTreeMap::new();
    let mut contracts = BTreeMap::new();
    for (s, service) in vocabulary::SERVICES.iter().enumerate() {
        let patch = patch(&terms[s % terms.len()], service);
        let mut contract = Contract::default_for(service).unwrap_or_else(Contract::payments_default);
        contract.apply(patch.clone());
        // Announced where an intent uses the service; payments and workspaces always, as
        // every run has them.
        if s < 2 || used.contains(service) {
            services.insert(service.to_string(), patch);
        }
        contracts.insert(*service, contract);
    }
    let aim = |draw: usize| used[draw % used.len()];
    let faults_on = enabled(&swarm.faults_off);
    let events_on = enabled(&swarm.events_off);
    let steps = aimed_steps(&intents, fault_draws.len(), event_draws, &events_on, &contracts);
    let mut faults = Vec::new();
    for (i, d) in fault_draws.iter().enumerate() {
        let step = steps.get(&i).copied();
        let service = step.map(|(_, intent)| service_of(intent)).unwrap_or_else(|| aim(d.service));
        let contract = &contracts[service];
        // Among the kinds the swarm leaves on, those the contract admits: a fault it does not
        // admit would be unfair, and a draw spent on one would be wasted.
        // A rejection's status takes a second draw besides `param` (which sizes latencies and
        // late commits): the top bit of the kind's draw, which the kind's pick hardly feels.
        let pick = d.param + 3 * u64::from(d.kind >= 32);
        let fault_of = |kind: usize| fault_for(kind, d.param, pick, contract, service == "chain");
        // Keys faults only where the service takes keys at all: elsewhere they change nothing.
        let keys = Contract::default_for(service).is_some_and(|c| c.idempotency_keys == KeyPolicy::Honored);
        // A late commit needs a settle bound past the timeout; within it, it is latency.
        let late_commits = contract.settle_ms_max > REQUEST_TIMEOUT_MS + 100;
        let admitted: Vec<usize> = faults_on
            .iter()
            .copied()
            .filter(|k| keys || !matches!(*k, IGNORE_KEYS | FORGET_KEYS))
            .filter(|k| fault_of(*k).check_service(service).is_ok())
            .filter(|k| *k != COMMIT_AFTER_TIMEOUT || late_commits)
            .filter(|k| contract.admits(&fault_of(*k)).is_ok())
            .collect();
        // An aimed step keeps its fault where the contract admits it (the swarm gave it its
        // draws already).
        let unsure: Vec<usize> = admitted.iter().copied().filter(|k| *k < UNSURE_KINDS).collect();
        let step = step.filter(|(step, _)| match step {
            Step::NotNow => contract.admits(&NOT_NOW).is_ok(),
            Step::UnsureRetry => !unsure.is_empty(),
            Step::LateCommit => late_commits && contract.admits(&fault_of(COMMIT_AFTER_TIMEOUT)).is_ok(),
        });
        if admitted.is_empty() && step.is_none() {
            continue;
        }
        let surface = surface(service);
        // The fault before this one on the same service and method, which this one follows
        // (a retry after it meets this fault).
        let before = (d.follows && !sharp && step.is_none())
            .then(|| {
                let method = if d.at_read { surface.reads[d.nth as usize % 2].0 } else { surface.write.0 };
                faults.iter().rev().find(|f: &&ServiceFault| {
                    f.service == service && f.rule.method.as_deref() == Some(method) && f.rule.nth.is_some()
                })
            })
            .flatten();
        // After a refusal, the retry it causes is where an unsure answer does harm.
        let refused =
            before.is_some_and(|f| matches!(f.rule.fault, FaultSpec::Refuse | FaultSpec::Reject { .. }));
        let (kind, fault) = match step {
            Some((Step::NotNow, _)) => (REJECT, NOT_NOW),
            Some((Step::LateCommit, _)) => (COMMIT_AFTER_TIMEOUT, fault_of(COMMIT_AFTER_TIMEOUT)),
            Some((Step::UnsureRetry, _)) => {
                let kind = weighted_kind(&unsure, d.kind);
                (kind, fault_of(kind))
            }
            None => {
                let kind =
                    weighted_kind(if refused && !unsure.is_empty() { &unsure } else { &admitted }, d.kind);
                (kind, fault_of(kind))
            }
        };
        // A read can be lost, hang, be refused or rejected, lag or be slow; what happens to a
        // commit or a key happens at a write.
        let at_read =
            kind == STALE_READ || (d.at_read && !sharp && step.is_none() && READ_KINDS.contains(&kind));
        let (method, call) = if at_read { surface.reads[d.nth as usize % 2] } else { surface.write };
        let mut rule = FaultRule::always(fault);
        rule.id = Some(format!("f{}", i + 1));
        rule.method = Some(method.to_string());
        if let Some(call) = call {
            rule.fields.insert("rpc_method".into(), call.into());
        }
        if let Some(aimed) =
            step.map(|(_, intent)| intent).or_else(|| d.aim.map(|a| &intents[a % intents.len()]))
            && let Some(action) = vocabulary::action(&aimed.action)
            && action.service == service
        {
            aim_at(&mut rule, action, aimed);
        }
        // Right after the window of the fault it follows, if it still aims where that one did.
        let after = before
            .filter(|f| {
                f.rule.method == rule.method && f.rule.fields == rule.fields && f.rule.path == rule.path
            })
            .and_then(|f| f.rule.nth.map(|n| n + f.rule.times.unwrap_or(1)));
        match (after, d.dense) {
            // The first send, or the retry after it.
            _ if step.is_some() => {
                rule.nth = Some(if matches!(step, Some((Step::UnsureRetry, _))) { 2 } else { 1 })
            }
            (Some(next), _) => {
                rule.nth = Some(next);
                rule.times = d.times;
            }
            (None, _) if sharp => rule.nth = Some(1),
            (None, Some(p)) => rule.probability = Some(f64::from(p) * 0.25),
            (None, None) => {
                rule.nth = Some(d.nth);
                rule.times = d.times;
            }
        }
        faults.push(ServiceFault { service: service.to_string(), rule });
    }
    // Where reads are eventual, they lag as far as the contract allows, on every read: that is
    // the world an executor reading back must be ready for.
    for service in &used {
        let contract = &contracts[service];
        if contract.reads == Reads::Eventual && contract.read_lag_ms_max > 0 {
            let mut rule = FaultRule::always(FaultSpec::StaleRead { lag_ms: contract.read_lag_ms_max });
            rule.id = Some(format!("lag-{service}"));
            rule.method = Some(surface(service).reads[0].0.to_string());
            faults.push(ServiceFault { service: service.to_string(), rule });
        }
    }
    let mut events = Vec::new();
    let mut second_worker = false;
    for d in event_draws {
        let service = aim(d.service);
        let surface = surface(service);
        let (method, _) = if d.at_read { surface.reads[d.nth as usize % 2] } else { surface.write };
        // A chain's calls are all POSTs to one path: the n-th of them, up to the receipt reads
        // after the broadcast (so also right after signing).
        let nth = if service == "chain" { d.nth * 2 } else { d.nth };
        let request =
            Point::Request { service: service.to_string(), method: Some(method.into()), path: None, nth };
        let w1 = || "w1".to_string();
        match events_on[d.kind % events_on.len()] {
            0 => events.push(Event { at: request, action: EventAction::Crash { worker: w1() } }),
            1 => {
                let intent = &intents[d.intent % intents.len()];
                events.push(Event {
                    at: Point::AfterPropose { after_propose: intent.id.clone() },
                    action: EventAction::Crash { worker: w1() },
                });
            }
            2 if !second_worker => {
                second_worker = true;
                events.push(Event {
                    at: request.clone(),
                    action: EventAction::Pause { worker: w1(), for_ms: LEASE_MS * 2 },
                });
                events.push(Event { at: request, action: EventAction::StartWorker { worker: "w2".into() } });
            }
            // A pause shorter than the lease, and no one to take over. At a read, or where the
            // case lines up a stopped read-back (see [`aimed_steps`]), where a write commits
            // late it stops the worker at that write's read-back, past the settle bound.
            PAUSE => {
                let for_ms = LEASE_MS / 3 * (d.param + 1);
                let lined_up = steps.values().any(|(step, _)| *step == Step::LateCommit);
                let read_back = (d.at_read || lined_up).then(|| late_write(&faults, &contracts)).flatten();
                events.push(match read_back {
                    Some((service, read, outlast_ms)) => Event {
                        at: Point::Request {
                            service: service.to_string(),
                            method: Some(read.into()),
                            path: None,
                            nth: 1,
                        },
                        action: EventAction::Pause { worker: w1(), for_ms: outlast_ms },
                    },
                    None => Event { at: request, action: EventAction::Pause { worker: w1(), for_ms } },
                });
            }
            // Within the terms: never as far as a key's retention where the service keeps keys;
            // where it keeps none, as far as an hour, which moves no term at all but puts the
            // service's stamps far from the executor's clock.
            4 => {
                let contract = &contracts[service];
                let by_ms = match (contract.idempotency_keys, d.param) {
                    (KeyPolicy::Honored, p) => (250 * (p + 1)).min(contract.key_retention_ms / 2),
                    (_, 0) => 250,
                    (_, _) => HOUR_MS,
                };
                events.push(Event {
                    at: request,
                    action: EventAction::ClockJump { service: service.to_string(), by_ms: by_ms.max(1) },
                });
            }
            5 => events.push(Event { at: request, action: EventAction::Heal }),
            // A crash once a phase is over: with the work of `act` (or `drain`) in flight.
            6 => {
                let phase = if d.param == 0 { PhaseName::Drain } else { PhaseName::Act };
                events.push(Event {
                    at: Point::Phase { after_phase: phase },
                    action: EventAction::Crash { worker: w1() },
                });
            }
            _ => events.push(Event { at: request, action: EventAction::Reconcile { worker: w1() } }),
        }
    }
    Scenario {
        name: name.to_string(),
        description: "generated".into(),
        limits: LimitOverrides { request_timeout_ms: Some(REQUEST_TIMEOUT_MS), lease_ms: Some(LEASE_MS) },
        services,
        objects,
        intents,
        faults,
        events,
        ..Scenario::default()
    }
}

/// Narrows `rule` to the requests of one intent: `where` its business key is the intent's
/// (form, JSON or query field), or for an object store its object's path.
fn aim_at(rule: &mut FaultRule, action: &ActionSpec, intent: &IntentSpec) {
    let key = intent.params.get(action.business_key).and_then(|v| v.as_str()).unwrap_or_default();
    match action.param(action.business_key).map(|p| p.kind) {
        Some(ParamKind::ObjectKey) => {
            let bucket = intent.params.get("bucket").and_then(|v| v.as_str()).unwrap_or(BUCKET);
            rule.path = Some(format!("/{bucket}/{key}"));
        }
        // A transfer's recipient is inside the signed bytes, which no rule sees.
        Some(ParamKind::Address) => {}
        _ => {
            rule.fields.insert(action.business_key.to_string(), key.to_string());
        }
    }
}

/// Statuses a rejection answers, one per `pick` (0 to 5): half of them say "not now" (429 and
/// 503, retried) or "no" (402, a plain failure), half need a person's decision (403, 400,
/// 422: escalated, never retried). A rejection never executes, so every one is fair.
const REJECT_STATUSES: [u16; 6] = [429, 503, 402, 403, 400, 422];
/// A node's: it answers a raw transaction it will not take with a JSON-RPC error, never with
/// a 402, and over HTTP only the transient ones. A refusal for good (a gateway's 401 or 403)
/// would leave the refused transfer's nonce unused, and every transfer signed after it waiting
/// behind that gap for ever (filling it takes a transaction nobody authorised): a case no
/// correct executor could bring to an end.
const CHAIN_REJECT_STATUSES: [u16; 2] = [429, 503];

/// The fault of kind `kind` (see [`FAULT_KINDS`]), with parameters sized to the contract
/// (whether the contract admits it at all is checked by the caller); `pick` chooses a
/// rejection's status.
fn fault_for(kind: usize, param: u64, pick: u64, c: &Contract, chain: bool) -> FaultSpec {
    match kind {
        0 => FaultSpec::DropAfterCommit,
        1 => FaultSpec::ErrorAfterCommit { status: 500 },
        2 => FaultSpec::TimeoutAfterCommit { hold_ms: REQUEST_TIMEOUT_MS * 3 },
        // Past the caller's timeout when the settle bound allows it: the commit lands after
        // the caller gave up, and a read-back right away says "not there".
        COMMIT_AFTER_TIMEOUT => FaultSpec::CommitAfterTimeout {
            delay_ms: Some(c.settle_ms_max.min(REQUEST_TIMEOUT_MS + 200 * (param + 1))),
        },
        4 => FaultSpec::SilentNoop,
        STALE_READ => FaultSpec::StaleRead { lag_ms: c.read_lag_ms_max },
        IGNORE_KEYS => FaultSpec::IgnoreKeys,
        FORGET_KEYS => FaultSpec::ForgetKeys { older_than_ms: Some(c.key_retention_ms) },
        REFUSE => FaultSpec::Refuse,
        REJECT if chain => FaultSpec::Reject {
            status: CHAIN_REJECT_STATUSES[pick as usize % CHAIN_REJECT_STATUSES.len()],
            body: None,
        },
        REJECT => {
            FaultSpec::Reject { status: REJECT_STATUSES[pick as usize % REJECT_STATUSES.len()], body: None }
        }
        LATENCY => FaultSpec::Latency { before_ms: 100 * param, after_ms: 100 * (2 - param) },
        // Past the caller's read-back when the settle bound allows it, as a late commit is:
        // the inbox says "not there" for a message that is on its way.
        DELIVER_LATE => {
            FaultSpec::DeliverLate { delay_ms: c.settle_ms_max.min(REQUEST_TIMEOUT_MS + 200 * (param + 1)) }
        }
        _ => FaultSpec::Redeliver { after_ms: c.settle_ms_max.min(250 * param) },
    }
}

/// The value tree of generated case `index` of a run with `seed`: its current value is the
/// scenario, and shrinking it (`simplify` / `complicate`) finds a smaller failing one.
pub fn case_tree(seed: u64, index: u64) -> Result<Box<dyn ValueTree<Value = Scenario>>, String> {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    bytes[8..16].copy_from_slice(&index.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &bytes);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    scenario_strategy(format!("generated-{index}"), size_for(index))
        .new_tree(&mut runner)
        .map_err(|e| e.to_string())
}

/// Generated case `index` of a run with `seed`.
pub fn case(seed: u64, index: u64) -> Result<Scenario, String> {
    case_tree(seed, index).map(|t| t.current())
}

/// Why shrinking stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShrinkStop {
    /// No simpler candidate failed the same way: the scenario is as small as the search gets.
    Minimal,
    /// The limit of candidate runs was reached.
    Runs,
    /// The caller's `fails` gave up (a time budget ran out).
    Budget,
}

/// What shrinking found.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// The smallest failing scenario found.
    pub scenario: Scenario,
    /// Candidates run.
    pub runs: usize,
    pub stopped: ShrinkStop,
}

/// Shrinks a failing case: `fails` says whether a candidate still fails, or `None` to stop
/// (its budget is spent). Bounded by `runs_max` candidate runs.
pub fn shrink(
    mut tree: Box<dyn ValueTree<Value = Scenario>>,
    runs_max: usize,
    mut fails: impl FnMut(&Scenario) -> Option<bool>,
) -> Shrunk {
    // proptest's own order: after every simplify and every complicate, test the current value;
    // a failing one is kept and simplified further, a passing one is complicated back.
    let mut smallest = tree.current();
    let mut runs = 0;
    if tree.simplify() {
        loop {
            if runs == runs_max {
                return Shrunk { scenario: smallest, runs, stopped: ShrinkStop::Runs };
            }
            let candidate = tree.current();
            runs += 1;
            let more = match fails(&candidate) {
                None => return Shrunk { scenario: smallest, runs: runs - 1, stopped: ShrinkStop::Budget },
                Some(true) => {
                    smallest = candidate;
                    tree.simplify()
                }
                Some(false) => tree.complicate(),
            };
            if !more {
                break;
            }
        }
    }
    remove_steps(smallest, runs, runs_max, fails)
}

/// The last pass of [`shrink`]: proptest shrinks the draws behind a scenario, and a draw it
/// cannot drop (one the swarm or the contract turned into something else) may leave a fault
/// or an event the failure does not need. Each is removed in turn while the scenario still
/// fails, until none can be.
fn remove_steps(
    mut smallest: Scenario,
    mut runs: usize,
    runs_max: usize,
    mut fails: impl FnMut(&Scenario) -> Option<bool>,
) -> Shrunk {
    let mut removed = true;
    while removed {
        removed = false;
        let candidates = (0..smallest.faults.len())
            .map(|i| (true, i))
            .chain((0..smallest.events.len()).map(|i| (false, i)))
            .rev();
        for (fault, i) in candidates {
            let mut candidate = smallest.clone();
            if fault {
                candidate.faults.remove(i);
            } else {
                candidate.events.remove(i);
            }
            if runs == runs_max {
                return Shrunk { scenario: smallest, runs, stopped: ShrinkStop::Runs };
            }
            runs += 1;
            match fails(&candidate) {
                None => return Shrunk { scenario: smallest, runs: runs - 1, stopped: ShrinkStop::Budget },
                Some(true) => {
                    smallest = candidate;
                    removed = true;
                    break;
                }
                Some(false) => {}
            }
        }
    }
    Shrunk { scenario: smallest, runs, stopped: ShrinkStop::Minimal }
}

/// How many steps a scenario has: intents, faults and events.
pub fn steps(scenario: &Scenario) -> usize {
    scenario.intents.len() + scenario.faults.len() + scenario.events.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_and_index_give_the_same_scenario() {
        for index in 0..50 {
            assert_eq!(case(7, index).unwrap(), case(7, index).unwrap());
        }
        assert_ne!(case(7, 1).unwrap(), case(8, 1).unwrap());
    }

    #[test]
    fn generated_faults_stay_inside_their_contracts() {
        for index in 0..500 {
            let s = case(11, index).unwrap();
            for f in &s.faults {
                let contract = s.contract(&f.service).unwrap();
                assert!(
                    contract.admits(&f.rule.fault).is_ok(),
                    "{index}: {:?} under {contract:?}",
                    f.rule.fault
                );
                assert!(f.rule.validate().is_ok());
            }
        }
    }

    #[test]
    fn shrinking_reaches_a_small_case() {
        // A stand-in property: "fails" whenever the scenario has a workspace intent.
        let fails = |s: &Scenario| s.intents.iter().any(|i| i.action == "workspaces.create");
        let (index, tree) = (0..200)
            .map(|i| (i, case_tree(3, i).unwrap()))
            .find(|(_, t)| fails(&t.current()) && steps(&t.current()) > 3)
            .expect("some generated case fails the stand-in property");
        let shrunk = shrink(tree, 500, |s| Some(fails(s)));
        assert_eq!(shrunk.stopped, ShrinkStop::Minimal, "case {index}");
        let small = shrunk.scenario;
        assert!(fails(&small), "case {index}");
        assert_eq!(small.intents.len(), 1, "{small:#?}");
        assert!(steps(&small) <= 2, "{small:#?}");
    }

    #[test]
    fn the_fault_table_makes_every_kind_of_the_vocabulary() {
        let c = Contract::payments_default();
        let made: std::collections::BTreeSet<&str> =
            (0..FAULT_KINDS).map(|k| fault_for(k, 0, 0, &c, false).kind()).collect();
        let known: std::collections::BTreeSet<&str> = vocabulary::rule::FAULT_KINDS.iter().copied().collect();
        assert_eq!(made, known);
    }

    #[test]
    fn the_generator_draws_every_action_fault_kind_and_event() {
        use std::collections::BTreeSet;
        let mut seen: BTreeSet<String> = BTreeSet::new();
        for index in 0..3_000 {
            let s = case(1, index).unwrap();
            for i in &s.intents {
                seen.insert(format!("action {}", i.action));
                if i.replaces.is_some() {
                    seen.insert(format!("lineage {}", i.action));
                }
            }
            for f in &s.faults {
                let at = if f.rule.method.as_deref() == Some(surface(&f.service).write.0)
                    && f.rule.fields.get("rpc_method").is_none_or(|m| m == "eth_sendRawTransaction")
                {
                    "write"
                } else {
                    "read"
                };
                seen.insert(format!("{} {} at a {at}", f.service, f.rule.fault.kind()));
                if let FaultSpec::Reject { status, .. } = f.rule.fault
                    && vocabulary::needs_decision(status)
                    && at == "write"
                {
                    seen.insert(format!("{} a refusal that needs a decision at a write", f.service));
                }
                if f.rule.probability.is_some() {
                    seen.insert("probability".into());
                }
                if f.rule.fields.keys().any(|k| k != "rpc_method") || f.rule.path.is_some() {
                    seen.insert("where".into());
                }
            }
            let takeover = s.events.iter().any(|e| matches!(e.action, EventAction::StartWorker { .. }));
            for e in &s.events {
                let what = match (&e.at, &e.action) {
                    (Point::Request { service, method, .. }, EventAction::Crash { .. }) => {
                        let at = if method.as_deref() == Some(surface(service).write.0) {
                            "write"
                        } else {
                            "read"
                        };
                        format!("crash at a {service} {at}")
                    }
                    (Point::AfterPropose { .. }, EventAction::Crash { .. }) => "crash after propose".into(),
                    (Point::Phase { .. }, EventAction::Crash { .. }) => "crash after a phase".into(),
                    (_, EventAction::Pause { .. }) if takeover => "pause with a takeover".into(),
                    (_, EventAction::Pause { .. }) => "pause without a takeover".into(),
                    (_, EventAction::ClockJump { service, .. }) => format!("clock jump on {service}"),
                    (_, EventAction::Heal) => "heal".into(),
                    (_, EventAction::Reconcile { .. }) => "reconcile".into(),
                    (_, other) => format!("{other:?}"),
                };
                seen.insert(what);
            }
        }
        let mut missing = Vec::new();
        let mut want = |what: String| {
            if !seen.contains(&what) {
                missing.push(what);
            }
        };
        for action in vocabulary::ACTIONS {
            want(format!("action {}", action.name));
            want(format!("lineage {}", action.name));
        }
        for service in vocabulary::SERVICES {
            let keys =
                Contract::default_for(service).is_some_and(|c| c.idempotency_keys == KeyPolicy::Honored);
            let delivers = vocabulary::rule::DELIVERY_SERVICES.contains(service);
            for kind in vocabulary::rule::FAULT_KINDS {
                let delivery = matches!(*kind, "deliver_late" | "redeliver");
                if (keys || !matches!(*kind, "ignore_keys" | "forget_keys")) && (delivers || !delivery) {
                    let at = if *kind == "stale_read" { "read" } else { "write" };
                    want(format!("{service} {kind} at a {at}"));
                }
            }
            if *service != "chain" {
                want(format!("{service} a refusal that needs a decision at a write"));
            }
            want(format!("crash at a {service} write"));
            // A chain's reads are POSTs to the one path its writes use: a crash point counts
            // them all, so a crash during a lookup is not told apart there.
            if *service != "chain" {
                want(format!("crash at a {service} read"));
            }
            want(format!("clock jump on {service}"));
        }
        for what in [
            "crash after propose",
            "crash after a phase",
            "pause with a takeover",
            "pause without a takeover",
            "heal",
            "reconcile",
            "probability",
            "where",
        ] {
            want(what.to_string());
        }
        assert!(missing.is_empty(), "not drawn in 3,000 cases: {missing:?}");
    }

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

    #[test]
    fn shrinking_leaves_no_fault_or_event_the_failure_does_not_need() {
        // A stand-in property: "fails" while a drop after commit is armed.
        let needs = |s: &Scenario| s.faults.iter().any(|f| f.rule.fault == FaultSpec::DropAfterCommit);
        let (index, tree) = (0..2_000)
            .map(|i| (i, case_tree(5, i).unwrap()))
            .find(|(_, t)| {
                needs(&t.current()) && t.current().faults.len() >= 3 && !t.current().events.is_empty()
            })
            .expect("a generated case with a drop, other faults and an event");
        let shrunk = shrink(tree, 1_000, |s| Some(needs(s)));
        assert_eq!(shrunk.stopped, ShrinkStop::Minimal, "case {index}");
        let small = shrunk.scenario;
        assert_eq!(small.faults.len(), 1, "case {index}: {small:#?}");
        assert!(small.events.is_empty(), "case {index}: {small:#?}");
        assert!(needs(&small));
    }

    #[test]
    fn shrinking_says_why_it_stopped() {
        let fails = |s: &Scenario| s.intents.iter().any(|i| i.action == "workspaces.create");
        let tree = || {
            (0..200)
                .map(|i| case_tree(3, i).unwrap())
                .find(|t| fails(&t.current()) && steps(&t.current()) > 3)
        };
        let shrunk = shrink(tree().unwrap(), 2, |s| Some(fails(s)));
        assert_eq!((shrunk.stopped, shrunk.runs), (ShrinkStop::Runs, 2));
        let mut left = 3;
        let shrunk = shrink(tree().unwrap(), 500, |s| {
            left -= 1;
            (left > 0).then(|| fails(s))
        });
        assert_eq!((shrunk.stopped, shrunk.runs), (ShrinkStop::Budget, 2));
        assert!(fails(&shrunk.scenario), "what it found so far still fails");
    }
}
