//! The messages fake against the real resend SDK over loopback HTTP: sends with and without an
//! idempotency key, a replay and a conflicting one, a lost reply, an email read back, errors
//! in Resend's shape; and what the recipient's inbox and the ledger say happened.

use std::sync::Arc;

use fake_services::{Fake, Fakes};
use serde_json::Value;
use vocabulary::Effect;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;
use vocabulary::JournalEntry;
use vocabulary::TokioClock;

use crate::python::{SEED, run_script};

const SCRIPT: &str = "messages_resend.py";

/// What one `messages_resend.py` run left behind.
struct Run {
    steps: Vec<Value>,
    ledger: Vec<Effect>,
    journal: Vec<JournalEntry>,
}

impl Run {
    fn step(&self, i: usize) -> &Value {
        self.steps.get(i).unwrap_or_else(|| panic!("no step {i} in {:#?}", self.steps))
    }

    /// The deliveries the ledger holds, as (recipient, email id).
    fn deliveries(&self) -> Vec<(String, String)> {
        self.ledger
            .iter()
            .filter(|e| e.kind == "message.delivered")
            .map(|e| (e.params["to"].as_str().unwrap_or_default().to_string(), e.object_id.clone()))
            .collect()
    }
}

async fn run_resend(steps: &[&str], rules: Vec<FaultRule>) -> Run {
    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), SEED);
    let fake = Fake::Messages(fakes.messages.clone());
    for rule in rules {
        fake.add_rule(rule).unwrap();
    }
    let steps: Vec<String> = steps.iter().map(|s| s.to_string()).collect();
    let seen = run_script(SCRIPT, &fake, &steps).await;
    let steps = seen["steps"].as_array().cloned().unwrap_or_default();
    Run { steps, ledger: fake.ledger(), journal: fake.journal() }
}

fn id_of(step: &Value) -> &str {
    assert_eq!(step["ok"], true, "{step}");
    step["object"]["id"].as_str().unwrap_or_else(|| panic!("no id: {step}"))
}

/// The SDK's exception: (class, status code, Resend's error name).
fn error_of(step: &Value) -> (&str, &str, &str) {
    assert_eq!(step["ok"], false, "{step}");
    let e = &step["error"];
    (
        e["class"].as_str().unwrap_or_default(),
        e["code"].as_str().unwrap_or_default(),
        e["error_type"].as_str().unwrap_or_default(),
    )
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_sends_under_a_key_and_its_replay_is_the_same_email() {
    let run = run_resend(
        &["send key=welcome-ada", "send key=welcome-ada", "send", "inbox address=ada@example.com"],
        vec![],
    )
    .await;
    let first = id_of(run.step(0));
    // The replay answers the first email's id, and says it is a replay.
    assert_eq!(id_of(run.step(1)), first);
    assert_eq!(run.step(1)["headers"]["idempotent-replayed"], "true", "{}", run.step(1));
    // Without a key the same payload is a new email.
    let keyless = id_of(run.step(2));
    assert_ne!(keyless, first);
    assert_eq!(
        run.deliveries(),
        [
            ("ada@example.com".to_string(), first.to_string()),
            ("ada@example.com".to_string(), keyless.to_string())
        ]
    );
    // The inbox holds the two emails, each with the provider's id and no key.
    let inbox = &run.step(3)["object"]["data"];
    let ids: Vec<&str> = inbox.as_array().unwrap().iter().map(|m| m["email_id"].as_str().unwrap()).collect();
    assert_eq!(ids, [first, keyless]);
    assert_eq!(inbox[0]["subject"], "Invoice 42");
    assert_eq!(inbox[0]["text"], "Your invoice.");
    let keys: Vec<Option<&str>> =
        run.journal.iter().filter(|e| e.method == "POST").map(|e| e.idempotency_key.as_deref()).collect();
    assert_eq!(keys, [Some("welcome-ada"), Some("welcome-ada"), None]);
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_replayed_with_another_payload_is_resends_409() {
    let run = run_resend(&["send key=k1", "send key=k1 to=grace@example.com"], vec![]).await;
    id_of(run.step(0));
    let (class, code, name) = error_of(run.step(1));
    assert_eq!((class, code, name), ("ResendError", "409", "invalid_idempotent_request"), "{}", run.step(1));
    assert_eq!(run.deliveries().len(), 1, "{:#?}", run.ledger);
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_reply_is_survived_by_resending_under_the_key() {
    let lost = FaultRule::always(FaultSpec::DropAfterCommit).method("POST").path("/emails").nth(1);
    let run = run_resend(&["send key=reset-1", "send key=reset-1"], vec![lost]).await;
    // The SDK wraps the closed connection in its own error; the message was delivered anyway.
    let (class, _, name) = error_of(run.step(0));
    assert_eq!((class, name), ("ResendError", "HttpClientError"), "{}", run.step(0));
    let replayed = id_of(run.step(1));
    assert_eq!(run.deliveries(), [("ada@example.com".to_string(), replayed.to_string())]);
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_reads_an_email_back_and_sees_errors_in_resends_shape() {
    let busy = FaultRule::always(FaultSpec::Reject { status: 429, body: None })
        .method("POST")
        .field("to", "busy@example.com");
    let run = run_resend(
        &[
            "send to=linus@example.com",
            "get",
            "get id=4ef9a417-02e9-4d39-ad75-9611e0fcc33c",
            "send without=subject",
            "send api_key=sk_live_1",
            "send to=not-an-address",
            "send to=busy@example.com",
        ],
        vec![busy],
    )
    .await;
    let id = id_of(run.step(0));
    let email = &run.step(1)["object"];
    assert_eq!((&email["id"], &email["object"]), (&Value::from(id), &"email".into()), "{email}");
    assert_eq!(email["to"], serde_json::json!(["linus@example.com"]));
    assert_eq!(email["last_event"], "delivered");
    let cases = [
        (2, ("ResendError", "404", "not_found")),
        (3, ("MissingRequiredFieldsError", "422", "missing_required_field")),
        (4, ("InvalidApiKeyError", "403", "invalid_api_key")),
        (5, ("ValidationError", "422", "validation_error")),
        (6, ("RateLimitError", "429", "rate_limit_exceeded")),
    ];
    for (i, want) in cases {
        assert_eq!(error_of(run.step(i)), want, "step {i}: {}", run.step(i));
    }
    assert_eq!(run.step(6)["headers"]["retry-after"], "1");
    assert_eq!(
        run.deliveries(),
        [("linus@example.com".to_string(), id.to_string())],
        "only the good send landed"
    );
}

/// resend's own ways to tag an email, `headers` and `tags`, reach every delivery's effect,
/// the email as Resend shows it (its tags) and the inbox (both).
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resend_headers_and_tags_land_in_the_ledger_the_email_and_the_inbox() {
    let run = run_resend(
        &[
            "send headers=X-Twice-Intent:mail-1 tags=intent:mail-1,kind:invoice",
            "get",
            "inbox address=ada@example.com",
            "send to=grace@example.com",
        ],
        vec![],
    )
    .await;
    let headers = serde_json::json!({"X-Twice-Intent": "mail-1"});
    let tags =
        serde_json::json!([{"name": "intent", "value": "mail-1"}, {"name": "kind", "value": "invoice"}]);
    id_of(run.step(0));
    assert_eq!(run.step(1)["object"]["tags"], tags, "{}", run.step(1));
    let message = &run.step(2)["object"]["data"][0];
    assert_eq!((&message["headers"], &message["tags"]), (&headers, &tags), "{message}");
    let delivered: Vec<&Effect> = run.ledger.iter().filter(|e| e.kind == "message.delivered").collect();
    assert_eq!(delivered.len(), 2, "{:#?}", run.ledger);
    assert_eq!((&delivered[0].params["headers"], &delivered[0].params["tags"]), (&headers, &tags));
    // An untagged send's delivery says nothing of tags.
    assert!(delivered[1].params.get("headers").is_none() && delivered[1].params.get("tags").is_none());
}
