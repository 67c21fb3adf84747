//! Tests of building a case: every generated fault stays inside its contract, the fault table
//! makes every kind of the vocabulary, and the generator draws every action, fault kind and
//! event somewhere in a few thousand cases.

use super::*;
use crate::generate::draw::FAULT_KINDS;
use crate::generate::replay::case;
use crate::model::{EventAction, Point};

#[test]
fn generated_faults_stay_inside_their_contracts() {
    for index in 0..500 {
        let s = case(11, index).unwrap();
        for f in &s.faults {
            let contract = s.contract(&f.service).unwrap();
            assert!(contract.admits(&f.rule.fault).is_ok(), "{index}: {:?} under {contract:?}", f.rule.fault);
            assert!(f.rule.validate().is_ok());
        }
    }
}

#[test]
fn the_fault_table_makes_every_kind_of_the_vocabulary() {
    let c = Contract::payments_default();
    let made: std::collections::BTreeSet<&str> = (0..FAULT_KINDS
        + vocabulary::rule::WEBHOOK_FAULT_KINDS.len())
        .map(|k| fault_for(k, 0, 0, &c, false).kind())
        .collect();
    let known: std::collections::BTreeSet<&str> = vocabulary::rule::FAULT_KINDS.iter().copied().collect();
    assert_eq!(made, known);
}

#[test]
fn the_generator_draws_every_action_fault_kind_and_event() {
    use std::collections::BTreeSet;
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for index in 0..3_000 {
        let s = case(1, index).unwrap();
        for (n, i) in s.intents.iter().enumerate() {
            seen.insert(format!("action {}", i.action));
            if let Some(t) = &i.on_event {
                let whose = if t.forged { "forged" } else { "genuine" };
                seen.insert(format!("intent a {whose} event starts"));
            }
            if i.replaces.is_some() {
                seen.insert(format!("lineage {}", i.action));
            }
            let key =
                |x: &IntentSpec| vocabulary::action(&x.action).map(|a| x.params[a.business_key].clone());
            let sibling = s.intents[..n]
                .iter()
                .any(|x| x.action == i.action && key(x) == key(i) && i.replaces.as_deref() != Some(&x.id));
            if sibling && i.replaces.is_none() {
                seen.insert(format!("siblings {}", i.action));
            }
        }
        for f in &s.faults {
            if f.rule.path.as_deref().is_some_and(|p| p.ends_with("/confirm")) {
                seen.insert(format!("{} on a payment's event", f.rule.fault.kind()));
                continue;
            }
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
                (Point::Request { path: Some(p), .. }, EventAction::Crash { .. })
                    if p.starts_with("/v1/payment_intents/pi_order_") =>
                {
                    "crash reading a paid order".into()
                }
                (Point::Request { service, method, .. }, EventAction::Crash { .. }) => {
                    let at =
                        if method.as_deref() == Some(surface(service).write.0) { "write" } else { "read" };
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
        if action.shares_business_key {
            want(format!("siblings {}", action.name));
        }
    }
    for service in vocabulary::SERVICES {
        let keys = Contract::default_for(service).is_some_and(|c| c.idempotency_keys == KeyPolicy::Honored);
        let delivers = vocabulary::rule::DELIVERY_SERVICES.contains(service);
        for kind in vocabulary::rule::FAULT_KINDS {
            let delivery = matches!(*kind, "deliver_late" | "redeliver");
            // On a payment's event only (below).
            let webhook = vocabulary::rule::WEBHOOK_FAULT_KINDS.contains(kind);
            if (keys || !matches!(*kind, "ignore_keys" | "forget_keys"))
                && (delivers || !delivery)
                && !webhook
            {
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
    for kind in vocabulary::rule::WEBHOOK_FAULT_KINDS {
        want(format!("{kind} on a payment's event"));
    }
    for what in [
        "intent a genuine event starts",
        "intent a forged event starts",
        "crash reading a paid order",
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
fn a_generated_event_fault_and_crash_aim_at_a_paid_order_and_the_case_is_valid() {
    let mut found = (0, 0);
    for index in 0..2_000 {
        let s = case(3, index).unwrap();
        let genuine: Vec<&str> = s
            .intents
            .iter()
            .filter_map(|i| i.on_event.as_ref().filter(|t| !t.forged).map(|t| t.payment_intent.as_str()))
            .collect();
        for f in s.faults.iter().filter(|f| f.rule.fault.is_webhook()) {
            let path = f.rule.path.as_deref().unwrap_or_default();
            assert!(
                genuine.iter().any(|pi| path == format!("/v1/payment_intents/{pi}/confirm")),
                "{index}: {path}"
            );
            assert_eq!((f.service.as_str(), f.rule.method.as_deref()), ("payments", Some("POST")));
            found.0 += 1;
        }
        for e in &s.events {
            if let Point::Request { path: Some(path), .. } = &e.at {
                assert!(genuine.iter().any(|pi| *path == format!("/v1/payment_intents/{pi}")), "{index}");
                found.1 += 1;
            }
        }
        for i in s.intents.iter().filter(|i| i.is_triggered()) {
            assert!(i.after.is_empty() && i.replaces.is_none(), "{index}: {}", i.id);
            assert!(!s.intents.iter().any(|x| x.after.contains(&i.id) || x.replaces == Some(i.id.clone())));
        }
        // The intents as a scenario file would hold them (the generator's own fairness rules
        // for events differ from a file's).
        let intents_only = Scenario { events: Vec::new(), faults: Vec::new(), ..s.clone() };
        assert!(intents_only.validate().is_ok(), "{index}: {:?}", intents_only.validate());
    }
    assert!(found.0 > 20 && found.1 > 5, "{found:?}");
}
