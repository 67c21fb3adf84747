//! Writing a scenario and reading it back gives the same scenario, for any valid scenario:
//! the generator relies on it to write shrunk failures that replay.

use proptest::collection::{btree_map, vec};
use proptest::option;
use proptest::prelude::*;
use scenarios::model::DEFAULT_PAYMENT_INTENT_AMOUNT;
use scenarios::validate::{AMOUNT_MAX, KEY_RETENTION_MS_MAX};
use scenarios::{
    Event, EventAction, IntentSpec, LimitOverrides, ObjectSeed, PhaseName, Point, Scenario, ServiceFault,
    catalog, parse_scenario, to_toml,
};
use serde_json::{Value, json};
use vocabulary::rule::HOLD_MS_MAX;
use vocabulary::{Acks, ContractPatch, FaultRule, FaultSpec, KeyPolicy, Reads};

const SERVICES: [&str; 2] = ["payments", "workspaces"];

/// Any text at all: quotes, backslashes, newlines, control characters, any script.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![any::<String>(), "[ -~]{0,12}", Just("\"\\\n\t\u{0}\u{7f}é 中 '''".to_string())]
}

/// Text for ids: no white space or control characters, 1 to 10 characters.
fn id() -> impl Strategy<Value = String> {
    "[\\PC&&\\S]{1,10}"
}

/// Text for parameters and keys: 1 to 20 characters of anything.
fn label() -> impl Strategy<Value = String> {
    "(?s).{1,20}"
}

fn patch() -> impl Strategy<Value = ContractPatch> {
    (
        option::of(prop_oneof![Just(KeyPolicy::Honored), Just(KeyPolicy::Ignored)]),
        option::of(0..=KEY_RETENTION_MS_MAX),
        option::of(prop_oneof![Just(Reads::Strong), Just(Reads::Eventual)]),
        option::of(0..=HOLD_MS_MAX),
        option::of(prop_oneof![Just(Acks::Reliable), Just(Acks::MayLie)]),
        option::of(0..=HOLD_MS_MAX),
        (option::of(any::<bool>()), option::of(any::<bool>()), option::of(any::<bool>())),
    )
        .prop_map(|(keys, retention, reads, lag, acks, settle, (unique, fencing, conditional))| {
            ContractPatch {
                idempotency_keys: keys,
                key_retention_ms: retention,
                reads,
                read_lag_ms_max: lag,
                acks,
                settle_ms_max: settle,
                unique_business_key: unique,
                fencing,
                conditional_writes: conditional,
            }
        })
}

/// JSON without nulls (which TOML cannot write) and with finite numbers.
fn body() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e9f64..1e9).prop_map(Value::from),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            btree_map(label(), inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn fault() -> impl Strategy<Value = FaultSpec> {
    let ms = || 0..=HOLD_MS_MAX;
    prop_oneof![
        Just(FaultSpec::Refuse),
        (400u16..=599, option::of(body())).prop_map(|(status, body)| FaultSpec::Reject { status, body }),
        (400u16..=599).prop_map(|status| FaultSpec::ErrorAfterCommit { status }),
        Just(FaultSpec::DropAfterCommit),
        ms().prop_map(|hold_ms| FaultSpec::TimeoutAfterCommit { hold_ms }),
        option::of(ms()).prop_map(|delay_ms| FaultSpec::CommitAfterTimeout { delay_ms }),
        Just(FaultSpec::SilentNoop),
        ms().prop_map(|lag_ms| FaultSpec::StaleRead { lag_ms }),
        option::of(0..=2 * KEY_RETENTION_MS_MAX)
            .prop_map(|older_than_ms| FaultSpec::ForgetKeys { older_than_ms }),
        Just(FaultSpec::IgnoreKeys),
        (ms(), ms()).prop_map(|(before_ms, after_ms)| FaultSpec::Latency { before_ms, after_ms }),
    ]
}

fn rule() -> impl Strategy<Value = (usize, FaultRule)> {
    (
        0..2usize,
        any::<bool>(),
        option::of(prop_oneof![Just("POST"), Just("get"), Just("Delete")]),
        option::of(prop_oneof![Just("/v1/refunds"), Just("/v1/*"), Just("/")]),
        btree_map(label(), text(), 0..3),
        (option::of(1..5u64), option::of(1..5u64), option::of(0.0..=1.0f64)),
        fault(),
    )
        .prop_map(|(service, named, method, path, fields, (nth, times, probability), fault)| {
            let rule = FaultRule {
                id: named.then(String::new),
                method: method.map(str::to_string),
                path: path.map(str::to_string),
                fields,
                nth,
                times,
                probability,
                fault,
            };
            (service, rule)
        })
}

/// An intent before its ids and lineage are made consistent.
#[derive(Debug, Clone)]
struct Draft {
    refund: bool,
    id: String,
    replace: Option<usize>,
    amount: u64,
    name: String,
    key: String,
}

fn draft() -> impl Strategy<Value = Draft> {
    (any::<bool>(), id(), option::of(any::<usize>()), 1..=DEFAULT_PAYMENT_INTENT_AMOUNT, label(), label())
        .prop_map(|(refund, id, replace, amount, name, key)| Draft { refund, id, replace, amount, name, key })
}

/// Intents with unique ids, lineages that obey the rules, and unique lineage keys.
fn intents(drafts: Vec<Draft>) -> Vec<IntentSpec> {
    let mut out: Vec<IntentSpec> = Vec::new();
    let mut replaced: Vec<bool> = Vec::new();
    for (i, d) in drafts.into_iter().enumerate() {
        let action = if d.refund { "payments.refund" } else { "workspaces.create" };
        let candidates: Vec<usize> = (0..i).filter(|&j| out[j].action == action && !replaced[j]).collect();
        let older = d.replace.filter(|_| !candidates.is_empty()).map(|r| candidates[r % candidates.len()]);
        // The lineage key: the predecessor's, or one unique to this intent.
        let key = match older {
            Some(j) => out[j].params[if d.refund { "payment_intent" } else { "external_id" }].clone(),
            None => json!(format!("{i}{}", d.key)),
        };
        let params = if d.refund {
            json!({"payment_intent": key, "amount": d.amount})
        } else {
            json!({"external_id": key, "name": d.name})
        };
        if let Some(j) = older {
            replaced[j] = true;
        }
        replaced.push(false);
        out.push(IntentSpec {
            id: format!("{i}{}", d.id),
            action: action.to_string(),
            params,
            replaces: older.map(|j| out[j].id.clone()),
            after: Vec::new(),
            on_event: None,
        });
    }
    out
}

/// An event before its references are made valid.
#[derive(Debug, Clone)]
struct EventDraft {
    point: u8,
    service: usize,
    method: Option<&'static str>,
    path: Option<&'static str>,
    nth: u64,
    pick: usize,
    action: u8,
    ms: u64,
}

fn event_draft() -> impl Strategy<Value = EventDraft> {
    (
        0..3u8,
        0..2usize,
        option::of(prop_oneof![Just("POST"), Just("GET")]),
        option::of(Just("/v1/refunds")),
        1..4u64,
        any::<usize>(),
        0..6u8,
        1..=60_000u64,
    )
        .prop_map(|(point, service, method, path, nth, pick, action, ms)| EventDraft {
            point,
            service,
            method,
            path,
            nth,
            pick,
            action,
            ms,
        })
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        ("[a-z0-9][a-z0-9_-]{0,20}", text(), option::of("[a-z][a-z_]{0,15}")),
        (option::of(50..=60_000u64), option::of(100..=600_000u64)),
        btree_map(prop_oneof![Just("payments"), Just("workspaces")], patch(), 0..=2),
        btree_map(label(), DEFAULT_PAYMENT_INTENT_AMOUNT..=AMOUNT_MAX, 0..3),
        vec(draft(), 1..6),
        vec(rule(), 0..4),
        vec(event_draft(), 0..5),
        vec((any::<usize>(), 0..7usize), 0..4),
        vec((any::<bool>(), label()), 0..3),
    )
        .prop_map(|(head, limits, services, payment_intents, drafts, rules, events, expect, objects)| {
            let (name, description, failure_mode) = head;
            let intents = intents(drafts);
            // Keys unique by position; bodies any text (escaping is what is tested).
            let objects = objects
                .into_iter()
                .enumerate()
                .map(|(i, (archive, body))| ObjectSeed {
                    bucket: if archive { "archive" } else { "reports" }.into(),
                    key: format!("objects/o{i}.txt"),
                    body,
                })
                .collect();
            let mut s = Scenario {
                name,
                description,
                failure_mode,
                limits: LimitOverrides { request_timeout_ms: limits.0, lease_ms: limits.1 },
                services: services.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
                payment_intents,
                objects,
                expect: expect
                    .into_iter()
                    .map(|(i, state)| {
                        (intents[i % intents.len()].id.clone(), scenarios::validate::STATES[state].into())
                    })
                    .collect(),
                intents,
                ..Scenario::default()
            };
            for (i, (service, mut rule)) in rules.into_iter().enumerate() {
                if let Some(id) = &mut rule.id {
                    *id = format!("rule-{i}");
                }
                s.faults.push(ServiceFault { service: SERVICES[service].to_string(), rule });
            }
            let mut workers = vec!["w1".to_string()];
            for d in events {
                let at = match d.point {
                    0 => Point::Request {
                        service: SERVICES[d.service].into(),
                        method: d.method.map(str::to_string),
                        path: d.path.map(str::to_string),
                        nth: d.nth,
                    },
                    1 => {
                        Point::AfterPropose { after_propose: s.intents[d.pick % s.intents.len()].id.clone() }
                    }
                    _ => Point::Phase {
                        after_phase: if d.nth % 2 == 0 { PhaseName::Act } else { PhaseName::Drain },
                    },
                };
                let worker = workers[d.pick % workers.len()].clone();
                let action = match d.action {
                    0 => EventAction::Crash { worker },
                    1 => EventAction::Pause { worker, for_ms: d.ms },
                    2 => {
                        let new = format!("w{}", workers.len() + 1);
                        workers.push(new.clone());
                        EventAction::StartWorker { worker: new }
                    }
                    3 => EventAction::ClockJump { service: SERVICES[d.service].into(), by_ms: d.ms },
                    4 => EventAction::Heal,
                    _ => EventAction::Reconcile { worker },
                };
                s.events.push(Event { at, action });
            }
            make_fair(&mut s);
            s
        })
}

/// Announces in the contracts whatever the faults and clock jumps need to be fair.
fn make_fair(s: &mut Scenario) {
    for i in 0..s.faults.len() {
        let service = s.faults[i].service.clone();
        let contract = s.contract(&service).unwrap();
        let patch = s.services.entry(service).or_default();
        match &mut s.faults[i].rule.fault {
            FaultSpec::IgnoreKeys => patch.idempotency_keys = Some(KeyPolicy::Ignored),
            FaultSpec::SilentNoop => patch.acks = Some(Acks::MayLie),
            FaultSpec::StaleRead { lag_ms } => {
                patch.reads = Some(Reads::Eventual);
                patch.read_lag_ms_max = Some(contract.read_lag_ms_max.max(*lag_ms));
            }
            FaultSpec::CommitAfterTimeout { delay_ms: Some(d) } => {
                patch.settle_ms_max = Some(contract.settle_ms_max.max(*d));
            }
            FaultSpec::ForgetKeys { older_than_ms } if contract.idempotency_keys == KeyPolicy::Honored => {
                *older_than_ms = Some(older_than_ms.unwrap_or(0).max(contract.key_retention_ms));
            }
            _ => {}
        }
    }
    // A jump is fair where keys are ignored; that only widens what the faults above may do.
    for e in &s.events {
        if let EventAction::ClockJump { service, .. } = &e.action {
            s.services.entry(service.clone()).or_default().idempotency_keys = Some(KeyPolicy::Ignored);
        }
    }
}

/// Checks one scenario: it validates, and writing then reading it gives it back.
fn round_trip(s: &Scenario) -> Result<(), TestCaseError> {
    let text = to_toml(s, "seed 42\n\nreplay: twice replay failures/0001.toml\u{7}")
        .map_err(|e| TestCaseError::fail(format!("the generator made an invalid scenario: {e}")))?;
    let back =
        parse_scenario(&text, "generated.toml").map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
    prop_assert_eq!(&back, s, "{}", text);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn any_valid_scenario_survives_writing_and_reading(s in scenario()) {
        round_trip(&s)?;
    }
}

#[test]
fn every_catalog_scenario_survives_writing_and_reading() {
    for s in catalog().unwrap() {
        round_trip(&s).unwrap();
        // Writing is canonical: a written file written again is the same text.
        let text = to_toml(&s, "").unwrap();
        assert_eq!(to_toml(&parse_scenario(&text, "x.toml").unwrap(), "").unwrap(), text);
    }
}

#[test]
fn the_header_becomes_comments_and_defaults_stay_implicit() {
    let s = catalog().unwrap().into_iter().find(|s| s.name == "crash_after_record").unwrap();
    let text = to_toml(&s, "found by seed 7\ntwice replay failures/0001.toml").unwrap();
    assert!(text.starts_with("# found by seed 7\n# twice replay failures/0001.toml\n\nname = "), "{text}");
    // `worker = "w1"` is the default and is not written; bare fault names stay bare.
    assert!(!text.contains("worker ="), "{text}");
    let lost = catalog().unwrap().into_iter().find(|s| s.name == "lost_refund_reply").unwrap();
    assert!(to_toml(&lost, "").unwrap().contains("fault = \"drop_after_commit\"\n"));
}

/// A file that would not load is not written.
#[test]
fn an_invalid_scenario_is_not_written() {
    let mut s = catalog().unwrap().into_iter().find(|s| s.name == "lost_refund_reply").unwrap();
    s.expect.insert("refund-4812".into(), "done".into());
    let err = to_toml(&s, "").unwrap_err().to_string();
    assert!(err.starts_with("expect.refund-4812: unknown state \"done\""), "{err}");
}

/// What the generator makes is valid, and a shrunk failure written to a file replays as is.
#[test]
fn generated_scenarios_validate_and_survive_writing() {
    for index in 0..300 {
        let s = scenarios::generate::case(5, index).unwrap();
        if let Err(e) = round_trip(&s) {
            panic!("generated case {index}: {e}");
        }
    }
}
