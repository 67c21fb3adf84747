//! Generated scenarios: contracts × intents × faults × process events, with shrinking.
//!
//! Every generated scenario stays inside the contracts it announces (only faults that
//! [`vocabulary::Contract::admits`] accepts), so a correct executor exists for each one and
//! a violation is always the executor's fault. Shrinking (proptest's) drops intents, faults
//! and events and moves numbers towards the simplest values, so a failure comes back as a
//! small scenario that replays by itself.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::json;
use vocabulary::{Acks, ContractPatch, FaultRule, FaultSpec, KeyPolicy, Reads};

use crate::model::{Event, EventAction, IntentSpec, LimitOverrides, Point, Scenario, ServiceFault};

/// Request timeout announced to executors in generated scenarios.
pub const REQUEST_TIMEOUT_MS: u64 = 1_000;
/// Lease announced to executors in generated scenarios.
pub const LEASE_MS: u64 = 3_000;

/// The contracts' random terms, before they are checked against faults.
#[derive(Debug, Clone)]
struct Terms {
    keys_honored: bool,
    key_retention_ms: u64,
    eventual_lag_ms: Option<u64>,
    acks_may_lie: bool,
    settle_ms_max: u64,
    unique: bool,
    fencing: bool,
}

fn terms() -> impl Strategy<Value = Terms> {
    (
        prop::bool::weighted(0.7),
        prop::sample::select(vec![2_000u64, 5_000]),
        prop::option::weighted(0.3, prop::sample::select(vec![100u64, 300, 500])),
        prop::bool::weighted(0.2),
        prop::sample::select(vec![300u64, 500, 1_000, 1_500, 2_500]),
        prop::bool::weighted(0.5),
        prop::bool::weighted(0.5),
    )
        .prop_map(
            |(
                keys_honored,
                key_retention_ms,
                eventual_lag_ms,
                acks_may_lie,
                settle_ms_max,
                unique,
                fencing,
            )| {
                Terms {
                    keys_honored,
                    key_retention_ms,
                    eventual_lag_ms,
                    acks_may_lie,
                    settle_ms_max,
                    unique,
                    fencing,
                }
            },
        )
}

fn patch(t: &Terms, workspaces: bool) -> ContractPatch {
    ContractPatch {
        idempotency_keys: Some(if t.keys_honored { KeyPolicy::Honored } else { KeyPolicy::Ignored }),
        key_retention_ms: Some(t.key_retention_ms),
        reads: Some(if t.eventual_lag_ms.is_some() { Reads::Eventual } else { Reads::Strong }),
        read_lag_ms_max: Some(t.eventual_lag_ms.unwrap_or(0)),
        acks: Some(if t.acks_may_lie { Acks::MayLie } else { Acks::Reliable }),
        settle_ms_max: Some(t.settle_ms_max),
        unique_business_key: workspaces.then_some(t.unique),
        fencing: workspaces.then_some(t.fencing),
        conditional_writes: None,
    }
}

/// A fault kind and its parameters, chosen before the contract filters it.
#[derive(Debug, Clone)]
struct FaultDraw {
    service: usize,
    kind: usize,
    method: usize,
    nth: u64,
    times: Option<u64>,
    param: u64,
}

fn fault_draw() -> impl Strategy<Value = FaultDraw> {
    (0usize..2, 0usize..11, 0usize..3, 1u64..=3, prop::option::of(1u64..=3), 0u64..=2).prop_map(
        |(service, kind, method, nth, times, param)| FaultDraw { service, kind, method, nth, times, param },
    )
}

/// An event drawn before it is fitted to the scenario.
#[derive(Debug, Clone)]
struct EventDraw {
    kind: usize,
    service: usize,
    nth: u64,
    intent: usize,
}

fn event_draw() -> impl Strategy<Value = EventDraw> {
    (0usize..4, 0usize..2, 1u64..=2, 0usize..4).prop_map(|(kind, service, nth, intent)| EventDraw {
        kind,
        service,
        nth,
        intent,
    })
}

/// One intent drawn: an action and whether it replaces the previous intent.
#[derive(Debug, Clone)]
struct IntentDraw {
    workspace: bool,
    amount: u64,
    replaces_previous: bool,
}

fn intent_draw() -> impl Strategy<Value = IntentDraw> {
    (prop::bool::weighted(0.4), 1u64..=50, prop::bool::weighted(0.15)).prop_map(
        |(workspace, amount, replaces_previous)| IntentDraw {
            workspace,
            amount: amount * 100,
            replaces_previous,
        },
    )
}

const SERVICES: [&str; 2] = ["payments", "workspaces"];
const METHODS: [Option<&str>; 3] = [Some("POST"), Some("GET"), None];

/// The strategy for whole scenarios; `name` names every value it makes.
pub fn scenario_strategy(name: String) -> BoxedStrategy<Scenario> {
    (
        terms(),
        terms(),
        prop::collection::vec(intent_draw(), 1..=4),
        prop::collection::vec(fault_draw(), 0..=3),
        prop::collection::vec(event_draw(), 0..=2),
    )
        .prop_map(move |(pay, ws, intents, faults, events)| {
            build(&name, &pay, &ws, &intents, &faults, &events)
        })
        .boxed()
}

fn build(
    name: &str,
    pay: &Terms,
    ws: &Terms,
    intent_draws: &[IntentDraw],
    fault_draws: &[FaultDraw],
    event_draws: &[EventDraw],
) -> Scenario {
    let mut services = BTreeMap::new();
    services.insert("payments".to_string(), patch(pay, false));
    services.insert("workspaces".to_string(), patch(ws, true));
    let mut intents: Vec<IntentSpec> = Vec::new();
    for (i, draw) in intent_draws.iter().enumerate() {
        let id = format!("i{}", i + 1);
        let previous = intents.last().filter(|p| draw.replaces_previous && p.action == action_of(draw));
        let (params, replaces) = match (draw.workspace, previous) {
            (false, Some(p)) => (
                json!({"payment_intent": p.params["payment_intent"], "amount": draw.amount}),
                Some(p.id.clone()),
            ),
            (false, None) => {
                (json!({"payment_intent": format!("pi_{}", i + 1), "amount": draw.amount}), None)
            }
            (true, Some(p)) => (
                json!({"external_id": p.params["external_id"], "name": format!("Team {}", draw.amount)}),
                Some(p.id.clone()),
            ),
            (true, None) => (
                json!({"external_id": format!("org-{}", i + 1), "name": format!("Team {}", draw.amount)}),
                None,
            ),
        };
        intents.push(IntentSpec { id, action: action_of(draw).to_string(), params, replaces });
    }
    let contracts: Vec<vocabulary::Contract> = SERVICES
        .iter()
        .map(|s| {
            let mut c =
                crate::model::default_contract(s).unwrap_or_else(vocabulary::Contract::payments_default);
            if let Some(p) = services.get(*s) {
                c.apply(p.clone());
            }
            c
        })
        .collect();
    let mut faults = Vec::new();
    for (i, d) in fault_draws.iter().enumerate() {
        let contract = &contracts[d.service];
        let fault = fault_for(d, contract);
        if contract.admits(&fault).is_err() {
            continue;
        }
        let mut rule = FaultRule::always(fault);
        rule.id = Some(format!("f{}", i + 1));
        rule.method = METHODS[d.method].map(str::to_string);
        rule.nth = Some(d.nth);
        rule.times = d.times;
        faults.push(ServiceFault { service: SERVICES[d.service].to_string(), rule });
    }
    // Where reads are eventual, they lag as far as the contract allows, on every read: that is
    // the world an executor reading back must be ready for.
    for (service, contract) in SERVICES.iter().zip(&contracts) {
        if contract.reads == Reads::Eventual && contract.read_lag_ms_max > 0 {
            let mut rule = FaultRule::always(FaultSpec::StaleRead { lag_ms: contract.read_lag_ms_max });
            rule.id = Some(format!("lag-{service}"));
            rule.method = Some("GET".into());
            faults.push(ServiceFault { service: service.to_string(), rule });
        }
    }
    let mut events = Vec::new();
    let mut second_worker = false;
    for d in event_draws {
        let service = SERVICES[d.service].to_string();
        let request =
            Point::Request { service: service.clone(), method: Some("POST".into()), path: None, nth: d.nth };
        match d.kind {
            0 => events.push(Event { at: request, action: EventAction::Crash { worker: "w1".into() } }),
            1 => {
                let intent = &intents[d.intent % intents.len()];
                events.push(Event {
                    at: Point::AfterPropose { after_propose: intent.id.clone() },
                    action: EventAction::Crash { worker: "w1".into() },
                });
            }
            2 if !second_worker => {
                second_worker = true;
                events.push(Event {
                    at: request.clone(),
                    action: EventAction::Pause { worker: "w1".into(), for_ms: LEASE_MS * 2 },
                });
                events.push(Event { at: request, action: EventAction::StartWorker { worker: "w2".into() } });
            }
            _ => events.push(Event { at: request, action: EventAction::Reconcile { worker: "w1".into() } }),
        }
    }
    Scenario {
        name: name.to_string(),
        description: "generated".into(),
        limits: LimitOverrides { request_timeout_ms: Some(REQUEST_TIMEOUT_MS), lease_ms: Some(LEASE_MS) },
        services,
        intents,
        faults,
        events,
        ..Scenario::default()
    }
}

fn action_of(draw: &IntentDraw) -> &'static str {
    if draw.workspace { "workspaces.create" } else { "payments.refund" }
}

/// The fault a draw names, with parameters sized to the contract (whether the contract admits
/// it at all is checked by the caller).
fn fault_for(d: &FaultDraw, c: &vocabulary::Contract) -> FaultSpec {
    match d.kind {
        0 => FaultSpec::Refuse,
        1 => FaultSpec::Reject { status: [503, 429, 402][d.param as usize % 3], body: None },
        2 => FaultSpec::ErrorAfterCommit { status: 500 },
        3 => FaultSpec::DropAfterCommit,
        4 => FaultSpec::TimeoutAfterCommit { hold_ms: REQUEST_TIMEOUT_MS * 3 },
        // Past the caller's timeout when the settle bound allows it: the commit lands after
        // the caller gave up, and a read-back right away says "not there".
        5 => FaultSpec::CommitAfterTimeout {
            delay_ms: Some(c.settle_ms_max.min(REQUEST_TIMEOUT_MS + 200 * (d.param + 1))),
        },
        6 => FaultSpec::SilentNoop,
        7 => FaultSpec::StaleRead { lag_ms: c.read_lag_ms_max },
        8 => FaultSpec::ForgetKeys { older_than_ms: Some(c.key_retention_ms) },
        9 => FaultSpec::IgnoreKeys,
        _ => FaultSpec::Latency { before_ms: 100 * d.param, after_ms: 100 * (2 - d.param) },
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
    scenario_strategy(format!("generated-{index}")).new_tree(&mut runner).map_err(|e| e.to_string())
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
    if !tree.simplify() {
        return Shrunk { scenario: smallest, runs: 0, stopped: ShrinkStop::Minimal };
    }
    for runs in 0..runs_max {
        let candidate = tree.current();
        let more = match fails(&candidate) {
            None => return Shrunk { scenario: smallest, runs, stopped: ShrinkStop::Budget },
            Some(true) => {
                smallest = candidate;
                tree.simplify()
            }
            Some(false) => tree.complicate(),
        };
        if !more {
            return Shrunk { scenario: smallest, runs: runs + 1, stopped: ShrinkStop::Minimal };
        }
    }
    Shrunk { scenario: smallest, runs: runs_max, stopped: ShrinkStop::Runs }
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
