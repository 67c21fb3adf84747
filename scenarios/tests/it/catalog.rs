//! The catalog: embedded, valid, short in time, and covering every failure mode.

use std::collections::BTreeSet;

use scenarios::catalog::{self, CATALOG};
use scenarios::parse::EVENT_ACTIONS;
use scenarios::validate::action;
use scenarios::{EventAction, Point, Scenario};
use vocabulary::rule::FAULT_KINDS;
use vocabulary::{FaultSpec, KeyPolicy, Reads};

fn all() -> Vec<Scenario> {
    match catalog::catalog() {
        Ok(all) => all,
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn every_file_is_embedded_and_every_entry_is_a_file() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("catalog");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    for file in &files {
        assert!(file.ends_with(".toml"), "catalog/{file}: only scenario files belong in catalog/");
    }
    let stems: Vec<&str> = files.iter().map(|f| f.trim_end_matches(".toml")).collect();
    let embedded: Vec<&str> = CATALOG.iter().map(|(name, _)| *name).collect();
    assert_eq!(embedded, stems, "CATALOG in src/catalog.rs must list every file of catalog/, in order");
    for (name, text) in CATALOG {
        assert_eq!(std::fs::read_to_string(dir.join(format!("{name}.toml"))).unwrap(), *text);
    }
}

#[test]
fn every_scenario_parses_validates_and_is_named_after_its_file() {
    let all = all();
    assert_eq!(all.len(), CATALOG.len());
    for (scenario, (name, _)) in all.iter().zip(CATALOG) {
        assert_eq!(&scenario.name, name, "catalog/{name}.toml: name must be the file stem");
        let sentences = scenario.description.matches(". ").count() + 1;
        assert!(
            !scenario.description.is_empty() && sentences <= 3 && scenario.description.ends_with('.'),
            "{name}: the description is one or two sentences"
        );
        assert!(scenario.failure_mode.is_some(), "{name}: failure_mode is missing");
        assert!(!scenario.expect.is_empty(), "{name}: say what a correct executor ends with");
        assert!(catalog::find(name).is_some_and(|s| s.as_ref() == Ok(scenario)));
    }
    assert!(catalog::find("no_such_scenario").is_none());
}

/// Live runs wait terms out for real, so every term and wait in the catalog is short.
#[test]
fn time_terms_are_short() {
    const MS_MAX: u64 = 5_000;
    for s in all() {
        let services: BTreeSet<&str> =
            s.intents.iter().filter_map(|i| action(&i.action)).map(|a| a.service).collect();
        for service in services {
            assert!(s.services.contains_key(service), "{}: announce the {service} contract", s.name);
            let c = s.contract(service).unwrap();
            assert!(c.settle_ms_max <= MS_MAX, "{}: {service} settle_ms_max", s.name);
            assert!(c.read_lag_ms_max <= 500, "{}: {service} read_lag_ms_max", s.name);
            // A message is never resent on its key's word (its 200 only says accepted), so no
            // executor waits a messages key out, and a long one makes the old key replay.
            if c.idempotency_keys == KeyPolicy::Honored && service != "messages" {
                assert!(c.key_retention_ms <= MS_MAX, "{}: {service} key_retention_ms", s.name);
            }
        }
        for f in &s.faults {
            let waits = match f.rule.fault {
                FaultSpec::TimeoutAfterCommit { hold_ms } => hold_ms,
                FaultSpec::CommitAfterTimeout { delay_ms } => delay_ms.unwrap_or(MS_MAX),
                FaultSpec::StaleRead { lag_ms } => lag_ms,
                FaultSpec::Latency { before_ms, after_ms } => before_ms + after_ms,
                _ => 0,
            };
            assert!(waits <= MS_MAX, "{}: a fault waits {waits} ms", s.name);
        }
        for e in &s.events {
            if let EventAction::Pause { for_ms, .. } = e.action {
                assert!(for_ms <= MS_MAX, "{}: a pause of {for_ms} ms", s.name);
            }
        }
    }
}

/// Each scenario rehearses what it says: a timeout is a timeout, a stale worker is stale.
#[test]
fn timings_produce_the_failure_they_name() {
    for s in all() {
        let timeout = s.request_timeout_ms();
        for f in &s.faults {
            let contract = s.contract(&f.service).unwrap();
            match f.rule.fault {
                FaultSpec::TimeoutAfterCommit { hold_ms } => {
                    assert!(hold_ms > timeout, "{}: hold_ms must outlast the request timeout", s.name);
                }
                FaultSpec::CommitAfterTimeout { delay_ms } => {
                    let delay = delay_ms.unwrap_or(contract.settle_ms_max);
                    assert!(delay > timeout, "{}: the commit must come after the timeout", s.name);
                }
                FaultSpec::StaleRead { .. } => assert_eq!(contract.reads, Reads::Eventual),
                _ => {}
            }
        }
        for e in &s.events {
            if let EventAction::Pause { for_ms, .. } = e.action
                && s.events
                    .iter()
                    .any(|o| matches!(o.action, EventAction::StartWorker { .. }) && o.at == e.at)
            {
                // Either a hand-over (the paused worker's lease runs out and the new one takes
                // over) or a stall inside the lease the paused worker took (it wakes still
                // holding it, and races the new one): never in between, where the executor's
                // own lease decides which.
                assert!(
                    for_ms > s.lease_ms() || for_ms < s.lease_ms() / 2,
                    "{}: a pause beside a new worker must outlast the lease (a hand-over) or last \
                     less than half of it (a stall inside it)",
                    s.name
                );
            }
        }
    }
}

#[test]
fn every_fault_kind_and_every_event_is_rehearsed() {
    let all = all();
    for kind in FAULT_KINDS {
        let name = format!("fault_{kind}");
        let s = all.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no scenario {name}"));
        assert!(s.faults.iter().any(|f| f.rule.fault.kind() == *kind), "{name} does not inject {kind}");
    }
    for (event, _) in EVENT_ACTIONS {
        assert!(
            all.iter().any(|s| s.events.iter().any(|e| e.action.name() == *event)),
            "no catalog scenario uses the {event} event"
        );
    }
    let points = |pred: fn(&Point) -> bool| all.iter().any(|s| s.events.iter().any(|e| pred(&e.at)));
    assert!(points(|p| matches!(p, Point::Request { .. })));
    assert!(points(|p| matches!(p, Point::AfterPropose { .. })));
    assert!(points(|p| matches!(p, Point::Phase { .. })));
    assert!(all.iter().any(|s| s.intents.iter().any(|i| i.replaces.is_some())));
}

/// The failure modes of design §4 and of the seed texts, each with a scenario.
#[test]
fn every_known_failure_mode_has_a_scenario() {
    let modes: BTreeSet<String> = all().into_iter().filter_map(|s| s.failure_mode).collect();
    let known = [
        "lost_reply",
        "timeout_as_failure",
        "key_per_attempt",
        "memory_only_state",
        "lost_intent",
        "no_unknown_state",
        "no_reconciliation",
        "silent_noop",
        "stale_read_back",
        "key_retention",
        "keys_ignored",
        "replacement_while_unknown",
        "replacement_after_failure",
        "stale_worker",
        "duplicate_create",
        "partial_retry",
        "concurrent_workers",
        "crash_in_reconcile",
        "clock_skew",
    ];
    for mode in known {
        assert!(modes.contains(mode), "no catalog scenario for failure mode {mode}");
    }
}

/// The reference executor accepts every intent of the catalog as it is written (a workflow
/// step's references with a stand-in value: the real one exists only once its predecessor ran).
#[test]
fn the_reference_executor_accepts_every_intent() {
    for s in all() {
        for intent in &s.intents {
            let mut params = intent.params.clone();
            for (name, reference) in intent.references() {
                params[name.as_str()] = reference.render("x").into();
            }
            if let Err(e) = executor::Action::parse(&intent.action, &params) {
                panic!("{}: intent {}: {e}", s.name, intent.id);
            }
        }
    }
}

/// The model's helpers, read off catalog scenarios.
#[test]
fn helpers_read_lineages_seeds_and_limits() {
    let find = |name: &str| catalog::find(name).unwrap().unwrap();
    let lineage = find("amount_changed_while_unknown");
    let cases = [
        ("refund-5521-revised", Some("refund-5521")),
        ("refund-5521", Some("refund-5521")),
        ("no-such-intent", None),
    ];
    for (id, root) in cases {
        assert_eq!(lineage.lineage_root(id), root, "{id}");
    }
    // Listed amounts stay; refunds' unlisted payment intents get the default.
    assert_eq!(lineage.payment_intents_to_seed(), [("pi_5521".to_string(), 9000)].into());
    let partial = find("only_failed_step_retried");
    assert_eq!(partial.payment_intents_to_seed(), [("pi_setup_fee".to_string(), 1500)].into());
    let unlisted = find("lost_refund_reply");
    assert_eq!(unlisted.payment_intents_to_seed(), [("pi_4812".to_string(), 5000)].into());
    let defaulted = find("timeout_taken_as_no");
    assert_eq!(
        defaulted.payment_intents_to_seed(),
        [("pi_7301".to_string(), scenarios::model::DEFAULT_PAYMENT_INTENT_AMOUNT)].into()
    );
    let stale = find("stale_worker_overwrite");
    assert_eq!((stale.request_timeout_ms(), stale.lease_ms()), (500, 1500));
    assert_eq!(
        (unlisted.request_timeout_ms(), unlisted.lease_ms()),
        (scenarios::model::DEFAULT_REQUEST_TIMEOUT_MS, scenarios::model::DEFAULT_LEASE_MS)
    );
    assert!(unlisted.contract("mail").is_none());
    assert!(unlisted.contract("files").is_some_and(|c| c.conditional_writes));
}
