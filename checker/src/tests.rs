//! The checker's tests: its cases (data, in `check/cases/`) and what every verdict must do.

use serde_json::json;
use vocabulary::Contract;

use super::attribution::param_diff;
use super::*;
use results::Moment;
use results::{Status, Verdict};

mod cases;

use cases::{case, cases, claim, keyed, observed, refund, refunded, replacing, scenario};

fn slugs() -> Vec<&'static str> {
    INVARIANTS.iter().copied().chain([EXPECTED_STATES]).collect()
}

#[test]
fn every_case_breaks_exactly_what_it_should() {
    // Every case is looked at before failing, so that one change to the checker shows all the
    // cases it moves at once.
    let mut wrong = Vec::new();
    for case in cases() {
        let verdicts = check(&case.scenario, &case.observed);
        let order: Vec<&str> = verdicts.iter().map(|v| v.invariant.as_str()).collect();
        assert_eq!(order, slugs(), "{}: verdict order", case.name);
        let broken: Vec<&str> = violations(&verdicts).map(|v| v.invariant.as_str()).collect();
        if broken != case.broken {
            wrong.push(format!(
                "{}: breaks {broken:?}, should break {:?}: {verdicts:#?}",
                case.name, case.broken
            ));
            continue;
        }
        assert_eq!(all_held(&verdicts), case.broken.is_empty(), "{}", case.name);
        for verdict in &verdicts {
            assert_eq!(verdict.held, verdict.evidence.is_empty(), "{}: {verdict:?}", case.name);
        }
        for (slug, text) in &case.says {
            let verdict = verdicts.iter().find(|v| v.invariant == *slug).unwrap();
            if !verdict.evidence.iter().any(|line| line.contains(text)) {
                wrong
                    .push(format!("{}: {slug} should say {text:?}, says {:#?}", case.name, verdict.evidence));
            }
        }
    }
    assert!(wrong.is_empty(), "{} cases:\n{}", wrong.len(), wrong.join("\n"));
}

/// Every action is exclusive (one effect per lineage), so a stale write, which needs two
/// effects on one business key, is always a duplicate too: `no-stale-write` says which of
/// the two won wrongly. So is a replacement that did harm (its predecessor took effect too):
/// `lineage` says it ran while its predecessor was unresolved, or after it took effect. Every
/// other verdict breaks alone somewhere.
#[test]
fn every_verdict_holds_somewhere_and_breaks_alone_somewhere() {
    let cases = cases();
    for slug in slugs() {
        let held = cases.iter().any(|c| {
            check(&c.scenario, &c.observed).iter().any(|v| v.invariant == slug && v.status == Status::Held)
        });
        assert!(held, "a case where {slug} is judged and holds");
        let alone: &[&str] = match slug {
            NO_STALE_WRITE => &[NO_DUPLICATE_EFFECT, NO_STALE_WRITE],
            LINEAGE => &[NO_DUPLICATE_EFFECT, LINEAGE],
            _ => &[slug],
        };
        assert!(
            cases.iter().any(|c| c.broken == alone),
            "a case where {slug} breaks alone (or, for {NO_STALE_WRITE} and {LINEAGE}, with {NO_DUPLICATE_EFFECT} only)"
        );
    }
}

/// Where a run gives an invariant nothing to judge, its verdict says so, and why.
#[test]
fn what_a_run_cannot_show_is_not_judged_with_a_reason() {
    let want: &[(&str, &str, &str)] = &[
        (
            "a create without a fencing token by one worker: a hazard, not a violation",
            NO_STALE_WRITE,
            "only one worker life reached workspaces",
        ),
        (
            "a create without a fencing token by one worker: a hazard, not a violation",
            LINEAGE,
            "no intent replaces another",
        ),
        (
            "a create without a fencing token by one worker: a hazard, not a violation",
            EXPECTED_STATES,
            "the scenario expects no states",
        ),
        ("without state moments, timing is not judged", LINEAGE, "the executor sent no state events for r1"),
        (
            "one intent, two effects",
            NO_STALE_WRITE,
            "no intent writes to a service that offers fencing or conditional writes",
        ),
        (
            "unsupported actions are exempt from everything",
            NOTHING_LOST,
            "the executor acknowledged no intent",
        ),
        (
            "unsupported actions are exempt from everything",
            NO_DUPLICATE_EFFECT,
            "no intent's action has a ledger",
        ),
        (
            "an honest run holds everything",
            REFUSAL_RESPECTED,
            "no service refused a write of an intent with 400, 401, 403 or 422",
        ),
        (
            "a refusal that asked for what no intent authorised is no intent's",
            REFUSAL_RESPECTED,
            "no service refused a write of an intent",
        ),
        (
            "a refusal answered while the worker was stopped past its timeout is not held against it",
            REFUSAL_RESPECTED,
            "w1 was refused by workspaces with 422 (request req_r, at 100 ms), but w1 was stopped from 120 ms to 3120 ms, \
             past its request timeout of 2000 ms, with the answer the service gave at 110 ms not yet read",
        ),
        (
            "a refusal whose connection closed first was never read",
            REFUSAL_RESPECTED,
            "its answer never reached the worker (the request ended abandoned)",
        ),
        (
            "whose refund it was cannot be told",
            HONEST_TERMINAL_STATES,
            "it depends on which of r1, r2 made payments re_1 (seq 1): it carries parameters",
        ),
        (
            "whose refund it was cannot be told",
            UNKNOWN_IS_NOT_A_LIE,
            "depends on which of r1, r2 made payments re_1 (seq 1)",
        ),
    ];
    let cases = cases();
    for (name, slug, reason) in want {
        let case = cases.iter().find(|c| c.name == *name).unwrap_or_else(|| panic!("no case {name}"));
        let verdicts = check(&case.scenario, &case.observed);
        let verdict = verdicts.iter().find(|v| v.invariant == *slug).unwrap();
        assert_eq!(verdict.status, Status::NotJudged, "{name}: {verdict:?}");
        assert!(verdict.held && verdict.evidence.is_empty(), "{name}: {verdict:?}");
        let said = verdict.reason.as_deref().unwrap_or_default();
        assert!(said.contains(reason), "{name}: {slug} should say {reason:?}, says {said:?}");
    }
}

/// A safeguard the contract offered and a write skipped is a hazard, with the scenario that
/// would exploit it; where the contract offers none, or the write used it, there is none.
#[test]
fn unused_safeguards_are_hazards_with_the_scenario_that_exploits_them() {
    let cases = cases();
    let kinds = |name: &str| -> Vec<(String, Option<String>, String)> {
        let case = cases.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"));
        hazards(&case.scenario, &case.observed)
            .into_iter()
            .map(|h| (h.kind, h.intent, h.exploited_by))
            .collect()
    };
    let one = |kind: &str, intent: &str, scenario: &str| {
        vec![(kind.to_string(), Some(intent.to_string()), scenario.to_string())]
    };
    assert_eq!(
        kinds("a create without a fencing token by one worker: a hazard, not a violation"),
        one(HAZARD_NO_FENCING_TOKEN, "w1", "stale_worker_overwrite")
    );
    assert_eq!(
        kinds("a blind overwrite by one worker: a hazard, not a violation"),
        one(HAZARD_NO_PRECONDITION, "f1", "files_stale_worker_overwrite")
    );
    assert_eq!(
        kinds("a replacement runs while its predecessor is in flight, which never takes effect"),
        one(HAZARD_EARLY_REPLACEMENT, "r2", "amount_changed_while_unknown")
    );
    assert_eq!(
        kinds("a replacement runs before its predecessor had any state, which never takes effect"),
        one(HAZARD_EARLY_REPLACEMENT, "w2", "amount_changed_while_unknown")
    );
    assert_eq!(kinds("a replacement runs after its predecessor failed"), vec![]);
    assert_eq!(kinds("no stale write where the contract offers no fencing"), vec![]);
    assert_eq!(kinds("a stale worker's create lands after its successor's"), vec![], "tokens were sent");
    assert_eq!(kinds("an honest run holds everything"), vec![]);
    assert_eq!(
        kinds("a resend under a new key after an unread refusal is a hazard"),
        one(HAZARD_NEW_KEY_AFTER_UNREAD_REFUSAL, "r1", "key_regenerated_per_attempt")
    );
    assert!(
        kinds("a refusal answered while the worker was stopped past its timeout is not held against it")
            .iter()
            .all(|(kind, _, _)| kind != HAZARD_NEW_KEY_AFTER_UNREAD_REFUSAL),
        "the resend repeated the refused request under its key"
    );

    let scenario = scenario(vec![refund("r1", "pi_1", 500)]);
    let mut observed = observed(
        &["r1"],
        vec![claim("r1", "confirmed")],
        vec![keyed(refunded(1, 0, "re_1", "pi_1", 500), "key-r1")],
    );
    let sent_under_key = |at_ms: u64| vocabulary::JournalEntry {
        seq: at_ms,
        at_ms,
        method: "POST".into(),
        path: "/v1/refunds".into(),
        idempotency_key: Some("key-r1".into()),
        request_id: format!("req_{at_ms}"),
        origin: Some("w1#1".into()),
        faults: vec![],
        outcome: "answered".into(),
        status: Some(200),
        replayed: false,
        ended_ms: Some(at_ms),
        params: None,
    };
    let retention_ms = Contract::payments_default().key_retention_ms;
    observed.journals.insert("payments".into(), vec![sent_under_key(0), sent_under_key(retention_ms)]);
    assert_eq!(hazards(&scenario, &observed), vec![], "still within the retention");
    observed.journals.insert("payments".into(), vec![sent_under_key(0), sent_under_key(retention_ms + 1)]);
    let found = hazards(&scenario, &observed);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!((found[0].kind.as_str(), found[0].intent.as_deref()), (HAZARD_KEY_PAST_RETENTION, Some("r1")));
    assert!(found[0].detail.contains("after a write under it took effect"), "{found:?}");
    // A resend after a send that never took effect repeats nothing: no hazard.
    observed.ledgers.clear();
    assert_eq!(hazards(&scenario, &observed), vec![], "nothing took effect under the key");
}

#[test]
fn liveness_evidence_counts_rounds_and_names_every_stuck_intent() {
    let case = case("stuck after reconciliation");
    let verdicts = check(&case.scenario, &case.observed);
    let liveness = verdicts.iter().find(|v| v.invariant == LIVENESS).unwrap();
    assert_eq!(liveness.evidence.len(), 4, "{liveness:?}");
    assert!(liveness.evidence.iter().all(|l| l.contains("after 3 reconcile rounds")));
}

#[test]
fn an_executor_error_is_the_only_verdict() {
    let mut observed = observed(&["r1"], vec![], vec![]);
    observed.executor_error = Some("garbage on stdout: line 3".into());
    let verdicts = check(&scenario(vec![refund("r1", "pi_1", 500)]), &observed);
    assert_eq!(
        verdicts,
        vec![Verdict {
            invariant: EXECUTOR_ERROR.into(),
            status: Status::Violated,
            held: false,
            evidence: vec!["garbage on stdout: line 3".into()],
            reason: None,
        }]
    );
    observed.executor_error = Some(String::new());
    let verdicts = check(&scenario(vec![]), &observed);
    assert!(verdicts[0].evidence[0].contains("no reason given"));
}

#[test]
fn verdicts_do_not_depend_on_ledger_order() {
    for case in cases() {
        let want = check(&case.scenario, &case.observed);
        let mut shuffled = case.observed.clone();
        for ledger in shuffled.ledgers.values_mut() {
            ledger.reverse();
        }
        assert_eq!(check(&case.scenario, &shuffled), want, "{}", case.name);
    }
}

#[test]
fn state_details_parse_tolerantly() {
    let cases = [
        ("r1 -> failed", Some(("r1", "failed"))),
        ("r1->confirmed", Some(("r1", "confirmed"))),
        ("  r1   ->   unknown  ", Some(("r1", "unknown"))),
        ("r1 → escalated", Some(("r1", "escalated"))),
        ("r1 -> failed (card declined)", Some(("r1", "failed"))),
        ("r1 -> failed, after 2 attempts", Some(("r1", "failed"))),
        ("a->b -> submitted", Some(("a->b", "submitted"))),
        ("r1 -> ", None),
        ("-> failed", None),
        ("r1 failed", None),
        ("", None),
    ];
    for (detail, want) in cases {
        assert_eq!(parse_state_detail(detail), want, "{detail:?}");
    }
    assert_eq!(parse_state_detail(&state_detail("r7", "blocked")), Some(("r7", "blocked")));
}

#[test]
fn timeline_states_compare_without_case() {
    let scenario = scenario(vec![refund("r1", "pi_1", 500), replacing(refund("r2", "pi_1", 400), "r1")]);
    let mut observed = observed(
        &["r1", "r2"],
        vec![claim("r1", "failed"), claim("r2", "confirmed")],
        vec![refunded(1, 500, "re_2", "pi_1", 400)],
    );
    observed.timeline =
        vec![Moment { at_ms: 400, lane: "w2".into(), kind: "State".into(), detail: "r1 → FAILED".into() }];
    assert!(all_held(&check(&scenario, &observed)));
}

#[test]
fn terminal_states_agree_with_the_reference_vocabulary() {
    for state in vocabulary::State::ALL {
        assert_eq!(is_terminal(state.as_str()), state.is_terminal(), "{state}");
    }
    assert!(!is_terminal("pending"));
}

#[test]
fn verdicts_round_trip_through_json() {
    let case = case("one intent, two effects");
    let verdicts = check(&case.scenario, &case.observed);
    let text = serde_json::to_string(&verdicts).unwrap();
    let back: Vec<Verdict> = serde_json::from_str(&text).unwrap();
    assert_eq!(back, verdicts);
}

#[test]
fn numbers_compare_by_value() {
    assert!(param_diff(&json!({"amount": 500}), &json!({"amount": 500.0, "currency": "usd"})).is_empty());
    assert_eq!(param_diff(&json!({"amount": 500}), &json!({})), vec!["amount missing (authorised 500)"]);
    assert_eq!(param_diff(&json!({"amount": -1}), &json!({"amount": 1})), vec!["amount 1 (authorised -1)"]);
}

/// A claim that names its own effect (its transaction's hash, its refund's id, its key) tells
/// whose an effect is among intents that authorised the same parameters: the claims are then
/// judged, not left open.
#[test]
fn a_claim_naming_its_effect_settles_whose_it_is() {
    let case = case("a claim that names its transfer's hash tells whose it is");
    let verdicts = check(&case.scenario, &case.observed);
    for slug in [HONEST_TERMINAL_STATES, UNKNOWN_IS_NOT_A_LIE] {
        let verdict = verdicts.iter().find(|v| v.invariant == slug).unwrap();
        assert_eq!(verdict.status, Status::Held, "{verdict:?}");
    }
    let owned = attribute(&case.scenario, &case.observed);
    assert_eq!(owned.keys().collect::<Vec<_>>(), ["t1"], "{owned:?}");
}
