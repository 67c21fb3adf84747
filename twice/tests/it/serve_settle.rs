//! Serve's check judges a settled world, as `twice run` does: it waits for a late commit (or a
//! late delivery) before it reads the ledgers; `wait=false` judges at once and marks the
//! verdict "judged before the world settled" with what was pending; a request held at a step
//! the test never said it performed ends the wait at once with a single `world-unsettled`
//! verdict naming the step, the request and how to release it; and `liveness`, `nothing-lost`
//! and `expected-states` say what they say of an application's claims. Real serve, real HTTP.

use std::time::Duration;

use executor::world::{HttpTransport, Transport};
use serde_json::{Value, json};

use super::serve::{args, json_of, refund, runtime};

/// A refund that commits 4 s after it arrived, inside a 5 s settle bound; the client gives up
/// after 300 ms. (The catalog's `unknown_state_required` commits 1.5 s after; a longer delay
/// leaves a check asked "at once" seconds of room on a loaded machine.)
const LATE_REFUND: &str = r#"name = "late_refund"
description = "The first refund commits 4 s after it arrived; its caller gave up long before."
failure_mode = "no_unknown_state"

[limits]
request_timeout_ms = 300

[services.payments]
key_retention_ms = 2000
settle_ms_max = 5000

[payment_intents]
pi_7 = 5000

[[intents]]
id = "refund-7"
action = "payments.refund"
params = { payment_intent = "pi_7", amount = 700 }

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 1
fault = { kind = "commit_after_timeout", delay_ms = 4000 }

[expect]
refund-7 = "confirmed"
"#;

fn claims(id: &str, state: &str) -> Value {
    json!({"claims": [{"id": id, "action": "payments.refund", "state": state, "attempts": 2}]})
}

/// The one scenario result of a verdict.
fn result(verdict: &Value) -> &Value {
    &verdict["results"]["results"][0]
}

fn violated(verdict: &Value) -> Vec<String> {
    result(verdict)["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["status"] == "violated")
        .map(|v| v["invariant"].as_str().unwrap().to_string())
        .collect()
}

fn verdict_of<'a>(verdict: &'a Value, invariant: &str) -> &'a Value {
    result(verdict)["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["invariant"] == invariant)
        .unwrap_or_else(|| panic!("no {invariant} verdict: {verdict}"))
}

#[test]
fn the_check_waits_for_a_late_commit_and_no_wait_judges_at_once_marked() {
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let urls = served.urls();
        let (control, payments) = (urls["control"].clone(), urls["payments"].clone());
        let set = json!({"toml": LATE_REFUND});
        assert_eq!(json_of("POST", format!("{control}/__twice/scenario"), set).await.0, 200);

        // A naive app: its first refund times out, and it retries under a new key at once.
        let mut hasty = refund(&payments, "pi_7", 700, "k-1");
        hasty.timeout_ms = 300;
        assert!(HttpTransport.send(hasty).await.is_err(), "the first refund's caller gives up");
        assert_eq!(HttpTransport.send(refund(&payments, "pi_7", 700, "k-2")).await.unwrap().status, 200);

        let (status, at_once) =
            json_of("POST", format!("{control}/__twice/check?wait=false"), claims("refund-7", "confirmed"))
                .await;
        assert_eq!(status, 200, "{at_once}");
        let observed = &result(&at_once)["observed"];
        assert_eq!(observed["route"], "serve", "{observed}");
        assert_eq!(observed["settle"]["waited"], false, "{observed}");
        let read_at_ms = observed["ledgers_read_at_ms"].as_u64().expect("when the ledgers were read");
        let pending = observed["pending"].as_array().expect("the late commit, pending");
        let late: Vec<&Value> = pending.iter().filter(|p| p["what"] == "late-commit").collect();
        assert_eq!(late.len(), 1, "{observed}");
        assert_eq!(
            (&late[0]["service"], &late[0]["request"]),
            (&json!("payments"), &json!("POST /v1/refunds"))
        );
        let late_request = late[0]["request_id"].as_str().unwrap().to_string();
        assert!(late[0]["due_ms"].as_u64().unwrap() > read_at_ms, "due after the read: {observed}");
        assert_eq!(at_once["held"], true, "one refund so far: the invariants hold on what was read");
        assert_eq!(at_once["exit_code"], 3, "but nothing violated yet on an unsettled world is no pass");
        let summary = at_once["summary"].as_str().unwrap();
        assert!(summary.contains("judged before the world settled (asked not to wait)"), "{summary}");
        assert!(summary.contains("payments: late-commit of POST /v1/refunds"), "{summary}");

        let (status, settled) =
            json_of("POST", format!("{control}/__twice/check"), claims("refund-7", "confirmed")).await;
        assert_eq!(status, 200, "{settled}");
        assert_eq!(settled["exit_code"], 1, "{settled}");
        assert!(violated(&settled).contains(&"no-duplicate-effect".to_string()), "{settled}");
        let observed = &result(&settled)["observed"];
        assert_eq!(observed["settle"]["waited"], true, "{observed}");
        assert!(observed.get("pending").is_none(), "settled: nothing pending: {observed}");
        let ledger = observed["ledgers"]["payments"].as_array().unwrap();
        let landed =
            ledger.iter().find(|e| e["request_id"] == late_request.as_str()).expect("the late refund");
        assert!(
            observed["ledgers_read_at_ms"].as_u64().unwrap() >= landed["at_ms"].as_u64().unwrap(),
            "read after the late refund landed: {observed}"
        );
        let summary = settled["summary"].as_str().unwrap();
        assert!(!summary.contains("judged before the world settled"), "{summary}");
        served.stop().await;
    });
}

#[test]
fn a_request_held_at_a_step_never_done_is_named_in_a_single_verdict() {
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let urls = served.urls();
        let (control, payments) = (urls["control"].clone(), urls["payments"].clone());
        let set = json!({"name": "crash_while_refund_in_flight"});
        assert_eq!(json_of("POST", format!("{control}/__twice/scenario"), set).await.0, 200);
        let sent = tokio::spawn(HttpTransport.send(refund(&payments, "pi_2207", 800, "k-1")));
        let (_, step) = json_of("GET", format!("{control}/__twice/steps/0?wait_ms=20000"), Value::Null).await;
        assert_eq!(step["progress"], "reached", "{step}");

        // The test forgets the crash and checks: the check cannot wait the held request out.
        let (status, verdict) =
            json_of("POST", format!("{control}/__twice/check"), claims("refund-2207", "confirmed")).await;
        assert_eq!(status, 200, "{verdict}");
        assert_eq!((verdict["exit_code"].as_i64(), verdict["held"].as_bool()), (Some(1), Some(false)));
        let verdicts = result(&verdict)["verdicts"].as_array().unwrap();
        assert_eq!(verdicts.len(), 1, "no invariant judged on a moving world: {verdict}");
        assert_eq!(
            (&verdicts[0]["invariant"], &verdicts[0]["status"]),
            (&json!("world-unsettled"), &json!("violated"))
        );
        let first = verdicts[0]["evidence"][0].as_str().unwrap();
        for part in ["POST /v1/refunds at payments", "step 0 (crash)", "POST /__twice/steps/0/done"] {
            assert!(first.contains(part), "{part:?} missing from {first}");
        }
        assert_eq!(result(&verdict)["hazards"].as_array().map_or(0, Vec::len), 0, "{verdict}");
        assert!(
            result(&verdict)["observed"]["pending"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["what"] == "held-at-step"),
            "{verdict}"
        );
        let summary = verdict["summary"].as_str().unwrap();
        assert!(
            summary.contains("world-unsettled: POST /v1/refunds at payments is held unanswered at step 0"),
            "{summary}"
        );

        // Once the step is done the request goes on, and the same claims are judged.
        assert_eq!(json_of("POST", format!("{control}/__twice/steps/0/done"), Value::Null).await.0, 200);
        let answer = tokio::time::timeout(Duration::from_secs(30), sent).await.unwrap().unwrap();
        assert_eq!(answer.unwrap().status, 200);
        let (_, verdict) =
            json_of("POST", format!("{control}/__twice/check"), claims("refund-2207", "confirmed")).await;
        assert_eq!(verdict["held"], true, "{verdict}");
        served.stop().await;
    });
}

#[test]
fn liveness_under_serve_says_when_the_claims_were_checked() {
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let urls = served.urls();
        let (control, payments) = (urls["control"].clone(), urls["payments"].clone());
        let set = json!({"name": "lost_refund_reply"});
        assert_eq!(json_of("POST", format!("{control}/__twice/scenario"), set).await.0, 200);
        assert!(
            HttpTransport.send(refund(&payments, "pi_4812", 5000, "k-1")).await.is_err(),
            "the reply is lost"
        );

        let (_, verdict) =
            json_of("POST", format!("{control}/__twice/check"), claims("refund-4812", "unknown")).await;
        let liveness = verdict_of(&verdict, "liveness");
        assert_eq!(liveness["status"], "violated", "{verdict}");
        assert_eq!(
            liveness["evidence"],
            json!(["refund-4812 is still unknown when the application's claims were checked: not terminal"])
        );
        assert!(!verdict["summary"].as_str().unwrap().contains("reconcile round"), "{verdict}");
        served.stop().await;
    });
}

/// What docs/byo.md and docs/agents.md say of an intent the claims leave out: `nothing-lost`
/// judges only the claimed intents (each counts as recorded), so it cannot hold the left-out
/// one against the application; only `expected-states` does, where the scenario expects a
/// state; and its effects still count against `no-duplicate-effect`.
#[test]
fn an_intent_the_claims_leave_out_is_caught_by_expected_states_alone() {
    runtime().block_on(async {
        let served = serve::start(&args()).await.unwrap();
        let urls = served.urls();
        let (control, payments) = (urls["control"].clone(), urls["payments"].clone());
        let set = json!({"name": "lost_refund_reply"});
        assert_eq!(json_of("POST", format!("{control}/__twice/scenario"), set).await.0, 200);
        assert!(HttpTransport.send(refund(&payments, "pi_4812", 5000, "k-1")).await.is_err());

        let (_, verdict) = json_of("POST", format!("{control}/__twice/check"), json!({"claims": []})).await;
        assert_eq!(verdict["exit_code"], 1, "{verdict}");
        assert_eq!(verdict_of(&verdict, "nothing-lost")["status"], "not-judged", "{verdict}");
        let expected = verdict_of(&verdict, "expected-states");
        assert_eq!(expected["status"], "violated");
        assert_eq!(
            expected["evidence"],
            json!(["refund-4812: expected confirmed, but there is no claim for it"])
        );
        assert_eq!(violated(&verdict), ["expected-states"], "{verdict}");
        let observed = &result(&verdict)["observed"];
        assert_eq!(observed["unacknowledged"]["refund-4812"], "the application's claims do not name it");
        served.stop().await;
    });
}
