//! The parser's key lists and the validator's vocabularies agree with the types they stand
//! for (the fakes' rules and contracts, the model's serde shape, the reference executor).

use std::collections::BTreeSet;

use scenarios::parse::OBJECT_KEYS;
use scenarios::parse::{
    CONTRACT_TERMS, EVENT_ACTIONS, FAULT_PARAMS, INTENT_KEYS, LIMIT_KEYS, PHASES, POINT_KEYS, RULE_KEYS,
    TOP_KEYS, TRIGGER_KEYS, TermKind,
};
use scenarios::validate::{ACTIONS, STATES};
use scenarios::{
    Event, EventAction, IntentSpec, LimitOverrides, ObjectSeed, PhaseName, Point, Scenario, ServiceFault,
    Trigger,
};
use serde_json::{Value, json};
use vocabulary::rule::FAULT_KINDS;
use vocabulary::{Acks, ContractPatch, FaultRule, FaultSpec, KeyPolicy, Reads};

fn keys(value: impl serde::Serialize) -> BTreeSet<String> {
    match serde_json::to_value(value).unwrap() {
        Value::Object(map) => map.keys().cloned().collect(),
        other => panic!("not an object: {other}"),
    }
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// One of each fault, every optional parameter given.
fn every_fault() -> Vec<FaultSpec> {
    let all = vec![
        FaultSpec::Refuse,
        FaultSpec::Reject { status: 503, body: Some(json!({})) },
        FaultSpec::ErrorAfterCommit { status: 500 },
        FaultSpec::DropAfterCommit,
        FaultSpec::TimeoutAfterCommit { hold_ms: 1 },
        FaultSpec::CommitAfterTimeout { delay_ms: Some(1) },
        FaultSpec::SilentNoop,
        FaultSpec::StaleRead { lag_ms: 1 },
        FaultSpec::ForgetKeys { older_than_ms: Some(1) },
        FaultSpec::IgnoreKeys,
        FaultSpec::Latency { before_ms: 1, after_ms: 1 },
        FaultSpec::DeliverLate { delay_ms: 1 },
        FaultSpec::Redeliver { after_ms: 1 },
        FaultSpec::DuplicateWebhook { after_ms: 1 },
        FaultSpec::DelayWebhook { delay_ms: 1 },
        FaultSpec::LoseWebhookAck,
        FaultSpec::WebhookEndpointDown { for_ms: 1 },
        FaultSpec::StaleWebhook,
    ];
    // A new fault must be added above (the match fails to compile without it).
    for f in &all {
        match f {
            FaultSpec::Refuse
            | FaultSpec::Reject { .. }
            | FaultSpec::ErrorAfterCommit { .. }
            | FaultSpec::DropAfterCommit
            | FaultSpec::TimeoutAfterCommit { .. }
            | FaultSpec::CommitAfterTimeout { .. }
            | FaultSpec::SilentNoop
            | FaultSpec::StaleRead { .. }
            | FaultSpec::ForgetKeys { .. }
            | FaultSpec::IgnoreKeys
            | FaultSpec::Latency { .. }
            | FaultSpec::DeliverLate { .. }
            | FaultSpec::Redeliver { .. }
            | FaultSpec::DuplicateWebhook { .. }
            | FaultSpec::DelayWebhook { .. }
            | FaultSpec::LoseWebhookAck
            | FaultSpec::WebhookEndpointDown { .. }
            | FaultSpec::StaleWebhook => {}
        }
    }
    all
}

#[test]
fn fault_parameters_are_the_fakes() {
    let kinds: Vec<&str> = FAULT_PARAMS.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, FAULT_KINDS);
    let faults = every_fault();
    assert_eq!(faults.len(), FAULT_KINDS.len());
    for fault in faults {
        let (_, params) = FAULT_PARAMS.iter().find(|(k, _)| *k == fault.kind()).unwrap();
        let mut want = set(params);
        want.insert("kind".into());
        assert_eq!(keys(&fault), want, "{}", fault.kind());
    }
}

#[test]
fn rule_keys_are_the_fakes() {
    let mut rule =
        FaultRule::always(FaultSpec::Refuse).method("POST").path("/").field("a", "b").nth(1).times(1);
    rule.id = Some("r".into());
    rule.probability = Some(0.5);
    assert_eq!(keys(&rule), set(RULE_KEYS));
    // A [[faults]] table is a rule plus its service.
    let mut with_service = set(RULE_KEYS);
    with_service.insert("service".into());
    assert_eq!(keys(ServiceFault { service: "payments".into(), rule }), with_service);
}

#[test]
fn contract_terms_are_the_fakes() {
    let names: Vec<&str> = CONTRACT_TERMS.iter().map(|(n, _)| *n).collect();
    assert_eq!(keys(ContractPatch::default()), set(&names));
    for (name, kind) in CONTRACT_TERMS {
        let TermKind::Choice(choices) = kind else { continue };
        let serialized: Vec<String> = match *name {
            "idempotency_keys" => {
                [KeyPolicy::Honored, KeyPolicy::Ignored].iter().map(|v| json!(v).to_string()).collect()
            }
            "reads" => [Reads::Strong, Reads::Eventual].iter().map(|v| json!(v).to_string()).collect(),
            "acks" => [Acks::Reliable, Acks::MayLie].iter().map(|v| json!(v).to_string()).collect(),
            other => panic!("a choice term the test does not know: {other}"),
        };
        let quoted: Vec<String> = choices.iter().map(|c| format!("\"{c}\"")).collect();
        assert_eq!(serialized, quoted, "{name}");
    }
}

#[test]
fn scenario_keys_are_the_models() {
    let limits = LimitOverrides { request_timeout_ms: Some(1), lease_ms: Some(1) };
    assert_eq!(keys(&limits), set(LIMIT_KEYS));
    let intent = IntentSpec {
        id: "a".into(),
        action: "b".into(),
        params: json!({}),
        replaces: Some("c".into()),
        after: vec!["d".into()],
        on_event: Some(Trigger { kind: "e".into(), payment_intent: "f".into(), forged: true }),
    };
    assert_eq!(keys(&intent), set(INTENT_KEYS));
    assert_eq!(keys(intent.on_event.as_ref().unwrap()), set(TRIGGER_KEYS));
    let scenario = Scenario {
        name: "n".into(),
        description: "d".into(),
        failure_mode: Some("f".into()),
        limits,
        services: [("payments".to_string(), ContractPatch::default())].into(),
        payment_intents: [("pi".to_string(), 1)].into(),
        objects: vec![ObjectSeed { bucket: "b".into(), key: "k".into(), body: "v".into() }],
        strict_keys: true,
        intents: vec![intent],
        faults: vec![ServiceFault { service: "payments".into(), rule: FaultRule::always(FaultSpec::Refuse) }],
        events: vec![Event { at: Point::Phase { after_phase: PhaseName::Act }, action: EventAction::Heal }],
        expect: [("a".to_string(), "confirmed".into())].into(),
    };
    assert_eq!(keys(&scenario), set(TOP_KEYS));
    assert_eq!(keys(&scenario.objects[0]), set(OBJECT_KEYS));
}

#[test]
fn events_and_points_are_the_models() {
    let w = || "w".to_string();
    let actions = [
        EventAction::Crash { worker: w() },
        EventAction::Pause { worker: w(), for_ms: 1 },
        EventAction::StartWorker { worker: w() },
        EventAction::ClockJump { service: w(), by_ms: 1 },
        EventAction::Heal,
        EventAction::Reconcile { worker: w() },
    ];
    assert_eq!(actions.len(), EVENT_ACTIONS.len());
    for (action, (name, params)) in actions.iter().zip(EVENT_ACTIONS) {
        assert_eq!(action.name(), *name);
        let mut want = set(params);
        want.insert("do".into());
        assert_eq!(keys(action), want, "{name}");
    }
    let request = Point::Request { service: w(), method: Some(w()), path: Some(w()), nth: 2 };
    let mut all = keys(&request);
    all.extend(keys(Point::AfterPropose { after_propose: w() }));
    all.extend(keys(Point::Phase { after_phase: PhaseName::Drain }));
    assert_eq!(all, set(POINT_KEYS));
    let phases: Vec<&str> = [PhaseName::Act, PhaseName::Drain].iter().map(|p| p.as_str()).collect();
    assert_eq!(phases, PHASES);
    for phase in [PhaseName::Act, PhaseName::Drain] {
        assert_eq!(json!(phase), json!(phase.as_str()));
    }
}

#[test]
fn actions_and_states_are_the_reference_executors() {
    let names: Vec<&str> = ACTIONS.iter().map(|a| a.name).collect();
    assert_eq!(names, executor::model::ACTIONS);
    let states: Vec<&str> = vocabulary::State::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(states, STATES);
    for spec in ACTIONS {
        let params: serde_json::Map<String, Value> =
            spec.params.iter().map(|p| (p.name.to_string(), p.kind.example())).collect();
        let parsed = executor::Action::parse(spec.name, &Value::Object(params)).unwrap();
        assert_eq!(parsed.service(), spec.service);
    }
}
