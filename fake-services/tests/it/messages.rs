//! The messages fake in process: what a send answers, what lands in which inbox and when, what
//! the ledger records, and Resend's error shape for what it refuses.

use std::sync::Arc;

use fake_services::{Disposition, Fake, FakeRequest, Fakes};
use serde_json::{Value, json};
use vocabulary::FaultRule;
use vocabulary::FaultSpec;
use vocabulary::TokioClock;

use crate::client::manual_fakes;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
}

fn send_body(body: &Value) -> FakeRequest {
    FakeRequest::new("POST", "/emails")
        .header("Authorization", "Bearer re_test_x")
        .header("Content-Type", "application/json")
        .body(body.to_string())
}

fn email(to: Value) -> Value {
    json!({"from": "Acme <billing@acme.example>", "to": to, "subject": "Invoice 42", "text": "Your invoice.",
           "headers": {"X-Twice-Intent": "inv-42"}})
}

async fn answer(fake: &Fake, req: FakeRequest) -> (u16, Value) {
    match fake.handle(req).await {
        Disposition::Respond(r) => (r.status, r.body_json().unwrap_or(Value::Null)),
        other => panic!("no answer: {other:?}"),
    }
}

fn mailbox(address: &str) -> FakeRequest {
    FakeRequest::new("GET", &format!("/mailboxes/{address}/messages"))
}

fn retrieve(id: &str) -> FakeRequest {
    FakeRequest::new("GET", &format!("/emails/{id}")).header("Authorization", "Bearer re_test_x")
}

fn without(body: &mut Value, field: &str) {
    body.as_object_mut().expect("an object").remove(field);
}

fn messages(fakes: &Fakes) -> Fake {
    fakes.get("messages").unwrap()
}

#[test]
fn a_send_lands_in_every_recipients_inbox_and_in_the_ledger() {
    let (fakes, _clock) = manual_fakes(1);
    let fake = messages(&fakes);
    runtime().block_on(async {
        let mut body = email(json!(["ada@example.com"]));
        body["cc"] = json!("Grace <Grace@Example.com>");
        let (status, sent) = answer(&fake, send_body(&body)).await;
        assert_eq!(status, 200, "{sent}");
        let id = sent["id"].as_str().unwrap().to_string();
        assert_eq!(id.len(), 36, "a UUID: {id}");
        assert_eq!(sent.as_object().unwrap().len(), 1, "Resend answers the id alone: {sent}");

        let ledger = fake.ledger();
        let recipients: Vec<&str> = ledger.iter().map(|e| e.params["to"].as_str().unwrap()).collect();
        assert_eq!(recipients, ["ada@example.com", "grace@example.com"]);
        for effect in &ledger {
            assert_eq!((effect.kind.as_str(), effect.object_id.as_str()), ("message.delivered", id.as_str()));
            assert_eq!(effect.params["subject"], "Invoice 42");
            assert_eq!(effect.params["body"], "Your invoice.");
            assert_eq!(effect.params["from"], "billing@acme.example");
            assert!(!effect.by_provider());
        }

        let (status, inbox) = answer(&fake, mailbox("ada@example.com")).await;
        assert_eq!(status, 200, "{inbox}");
        let got = &inbox["data"][0];
        assert_eq!(inbox["data"].as_array().unwrap().len(), 1, "{inbox}");
        assert_eq!(got["email_id"], id.as_str());
        assert_eq!(got["subject"], "Invoice 42");
        assert_eq!(got["text"], "Your invoice.");
        assert_eq!(got["headers"]["X-Twice-Intent"], "inv-42");
        assert_eq!(got["message_id"], format!("<{id}@twice.invalid>"));
        assert!(got.get("idempotency_key").is_none(), "the inbox knows nothing of keys: {got}");
        // The address is read in any case, and escaped or not.
        let (_, again) = answer(&fake, mailbox("ADA%40example.com")).await;
        assert_eq!(again["data"], inbox["data"]);

        let (status, stored) = answer(&fake, retrieve(&id)).await;
        assert_eq!(status, 200, "{stored}");
        assert_eq!(stored["object"], "email");
        assert_eq!(stored["last_event"], "delivered");
        assert_eq!(stored["to"], json!(["ada@example.com"]));
        assert_eq!(stored["cc"], json!(["Grace <Grace@Example.com>"]));
    });
}

#[test]
fn malformed_requests_get_resends_error_shape() {
    let (fakes, _clock) = manual_fakes(1);
    let fake = messages(&fakes);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut body = email(json!("ada@example.com"));
        f(&mut body);
        send_body(&body)
    };
    let unkeyed = FakeRequest::new("POST", "/emails").body(email(json!("ada@example.com")).to_string());
    let cases: Vec<(FakeRequest, u16, &str, &str)> = vec![
        (unkeyed.clone(), 401, "missing_api_key", "Missing API key"),
        (
            unkeyed.clone().header("Authorization", "Bearer sk_test_x"),
            403,
            "invalid_api_key",
            "API key is invalid",
        ),
        (unkeyed.header("Authorization", "re_123"), 403, "invalid_api_key", "invalid"),
        (with(&|b| without(b, "to")), 422, "missing_required_field", "Missing `to` field."),
        (with(&|b| without(b, "from")), 422, "missing_required_field", "`from`"),
        (with(&|b| without(b, "subject")), 422, "missing_required_field", "`subject`"),
        (with(&|b| without(b, "text")), 422, "validation_error", "`html` or `text`"),
        (with(&|b| b["to"] = json!("ada")), 422, "validation_error", "Invalid `to` field"),
        (with(&|b| b["to"] = json!([])), 422, "missing_required_field", "`to`"),
        (with(&|b| b["to"] = json!(vec!["a@example.com"; 51])), 422, "validation_error", "at most 50"),
        (with(&|b| b["bcc"] = json!(vec!["a@example.com"; 51])), 422, "validation_error", "at most 50"),
        (with(&|b| b["from"] = json!("Acme <acme>")), 422, "validation_error", "Invalid `from` field"),
        (with(&|b| b["subject"] = json!(7)), 422, "validation_error", "`subject`"),
        (with(&|b| b["headers"] = json!({"X-A": 1})), 422, "validation_error", "`headers`"),
        (with(&|b| b["tags"] = json!([{"name": "a b", "value": "c"}])), 422, "validation_error", "`tags`"),
        (with(&|b| b["headers"] = json!("X-A: 1")), 422, "validation_error", "`headers`"),
        (with(&|b| b["headers"] = json!(["X-A"])), 422, "validation_error", "`headers`"),
        (with(&|b| b["tags"] = json!({"name": "a", "value": "b"})), 422, "validation_error", "`tags`"),
        (with(&|b| b["tags"] = json!([{"name": "a", "value": 1}])), 422, "validation_error", "`tags`"),
        (with(&|b| b["tags"] = json!([{"name": "a"}])), 422, "validation_error", "`tags`"),
        (with(&|b| b["tags"] = json!(["a"])), 422, "validation_error", "`tags`"),
        (
            with(&|b| b["tags"] = json!([{"name": "a", "value": "x".repeat(257)}])),
            422,
            "validation_error",
            "`tags`",
        ),
        (with(&|b| b["scheduled_at"] = json!("in 1 min")), 422, "validation_error", "not offered"),
        (with(&|b| b["bogus"] = json!(1)), 422, "validation_error", "Unknown field `bogus`"),
        (send_body(&json!([1])), 422, "validation_error", "JSON object"),
        (send_body(&json!({})).body("{not json"), 400, "validation_error", "not valid JSON"),
        (
            send_body(&email(json!("ada@example.com"))).header("Idempotency-Key", &"k".repeat(257)),
            400,
            "invalid_idempotency_key",
            "1-256",
        ),
        (retrieve("nope"), 422, "invalid_parameter", "valid UUID"),
        (retrieve("4ef9a417-02e9-4d39-ad75-9611e0fcc33c"), 404, "not_found", "Email not found"),
        (
            FakeRequest::new("GET", "/emails/4ef9a417-02e9-4d39-ad75-9611e0fcc33c"),
            401,
            "missing_api_key",
            "Missing",
        ),
        (FakeRequest::new("DELETE", "/emails"), 405, "method_not_allowed", "not allowed"),
        (
            FakeRequest::new("POST", "/mailboxes/ada@example.com/messages"),
            405,
            "method_not_allowed",
            "not allowed",
        ),
        (FakeRequest::new("GET", "/v1/refunds"), 404, "not_found", "does not exist"),
        (mailbox("not-an-address"), 422, "validation_error", "not an email address"),
        (
            FakeRequest::new("GET", "/mailboxes/ada@example.com/messages?limit=0"),
            422,
            "validation_error",
            "`limit`",
        ),
        (
            FakeRequest::new("GET", "/mailboxes/ada@example.com/messages?after=msg_x"),
            422,
            "validation_error",
            "`after`",
        ),
        (
            FakeRequest::new("GET", "/mailboxes/ada@example.com/messages?page=2"),
            422,
            "validation_error",
            "`page`",
        ),
    ];
    runtime().block_on(async {
        for (req, status, name, says) in cases {
            let what = format!("{} {}", req.method, req.path);
            let (got, body) = answer(&fake, req).await;
            assert_eq!(got, status, "{what}: {body}");
            assert_eq!(body["statusCode"], status, "{what}: {body}");
            assert_eq!(body["name"], name, "{what}: {body}");
            let message = body["message"].as_str().unwrap_or_default();
            assert!(message.contains(says), "{what}: {message:?} should say {says:?}");
        }
    });
    assert!(fake.ledger().is_empty(), "nothing refused was sent");
}

#[test]
fn a_mailbox_is_read_in_pages() {
    let (fakes, _clock) = manual_fakes(1);
    let fake = messages(&fakes);
    runtime().block_on(async {
        for _ in 0..3 {
            assert_eq!(answer(&fake, send_body(&email(json!("ada@example.com")))).await.0, 200);
        }
        let page =
            |query: String| FakeRequest::new("GET", &format!("/mailboxes/ada@example.com/messages?{query}"));
        let (_, first) = answer(&fake, page("limit=2".into())).await;
        assert_eq!((first["data"].as_array().unwrap().len(), &first["has_more"]), (2, &json!(true)));
        let last = first["data"][1]["id"].as_str().unwrap();
        let (_, rest) = answer(&fake, page(format!("limit=2&after={last}"))).await;
        assert_eq!((rest["data"].as_array().unwrap().len(), &rest["has_more"]), (1, &json!(false)));
        let (_, nobody) = answer(&fake, mailbox("grace@example.com")).await;
        assert_eq!(nobody["data"], json!([]));
    });
}

#[test]
fn a_late_delivery_lands_when_it_is_due_and_not_before() {
    let (fakes, clock) = manual_fakes(1);
    let fake = messages(&fakes);
    fake.add_rule(FaultRule::always(FaultSpec::DeliverLate { delay_ms: 800 })).unwrap();
    let t0 = fake.clock().now_ms();
    runtime().block_on(async {
        let (status, sent) = answer(&fake, send_body(&email(json!("ada@example.com")))).await;
        assert_eq!(status, 200, "the answer does not wait for the delivery");
        let id = sent["id"].as_str().unwrap();
        assert!(fake.ledger().is_empty());
        assert!(!fake.settled(), "a delivery is still to come");
        assert_eq!(answer(&fake, retrieve(id)).await.1["last_event"], "sent");
        clock.advance_ms(799);
        assert_eq!(answer(&fake, mailbox("ada@example.com")).await.1["data"], json!([]));
        clock.advance_ms(1);
        assert_eq!(answer(&fake, mailbox("ada@example.com")).await.1["data"].as_array().unwrap().len(), 1);
        assert_eq!(answer(&fake, retrieve(id)).await.1["last_event"], "delivered");
    });
    let ledger = fake.ledger();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].at_ms, t0 + 800, "stamped when it was due");
    assert!(fake.settled());
}

#[test]
fn a_late_commit_still_delivers_within_the_settle_bound_of_its_request() {
    // A late commit and a late delivery on one request: the delivery comes at the later of
    // the two, both counted from the request's arrival, never one after the other.
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
    runtime.block_on(async {
        let fakes = Fakes::new(Arc::new(TokioClock::starting_at(1_767_225_600_000)), 1);
        let fake = messages(&fakes);
        fake.add_rule(FaultRule::always(FaultSpec::CommitAfterTimeout { delay_ms: Some(500) })).unwrap();
        fake.add_rule(FaultRule::always(FaultSpec::DeliverLate { delay_ms: 400 })).unwrap();
        let t0 = fake.clock().now_ms();
        assert_eq!(answer(&fake, send_body(&email(json!("ada@example.com")))).await.0, 200);
        let ledger = fake.ledger();
        assert_eq!(ledger.len(), 1);
        assert_eq!(ledger[0].at_ms, t0 + 500);
    });
}

#[test]
fn a_redelivery_is_marked_as_the_providers() {
    let (fakes, clock) = manual_fakes(1);
    let fake = messages(&fakes);
    fake.add_rule(FaultRule::always(FaultSpec::Redeliver { after_ms: 300 })).unwrap();
    runtime().block_on(async {
        assert_eq!(answer(&fake, send_body(&email(json!("ada@example.com")))).await.0, 200);
        assert_eq!(fake.ledger().len(), 1, "the first delivery at once");
        clock.advance_ms(300);
        let (_, inbox) = answer(&fake, mailbox("ada@example.com")).await;
        let data = inbox["data"].as_array().unwrap();
        assert_eq!(data.len(), 2, "the recipient sees it twice: {inbox}");
        assert_eq!(data[0]["message_id"], data[1]["message_id"]);
        assert_ne!(data[0]["id"], data[1]["id"]);
    });
    let ledger = fake.ledger();
    assert_eq!(ledger.len(), 2);
    assert_eq!(ledger[0].object_id, ledger[1].object_id);
    assert_eq!((ledger[0].by_provider(), ledger[1].by_provider()), (false, true));
    assert_eq!(ledger[1].params["provider_redelivery"], true);
}

#[test]
fn a_silent_noop_is_reported_delivered_and_never_arrives() {
    let (fakes, clock) = manual_fakes(1);
    let fake = messages(&fakes);
    fake.add_rule(FaultRule::always(FaultSpec::SilentNoop)).unwrap();
    runtime().block_on(async {
        let (status, sent) = answer(&fake, send_body(&email(json!("ada@example.com")))).await;
        assert_eq!(status, 200);
        clock.advance_ms(60_000);
        let id = sent["id"].as_str().unwrap();
        assert_eq!(
            answer(&fake, retrieve(id)).await.1["last_event"],
            "delivered",
            "the provider's own view lies"
        );
        assert_eq!(answer(&fake, mailbox("ada@example.com")).await.1["data"], json!([]));
    });
    assert!(fake.ledger().is_empty());
    assert!(fake.settled());
}

#[test]
fn delivery_faults_are_refused_where_nothing_is_delivered() {
    let (fakes, _clock) = manual_fakes(1);
    for fake in fakes.all() {
        let armed = fake.add_rule(FaultRule::always(FaultSpec::Redeliver { after_ms: 0 }));
        assert_eq!(armed.is_ok(), fake.name() == "messages", "{}: {armed:?}", fake.name());
    }
    let payments = fakes.get("payments").unwrap();
    let req = FakeRequest::new("POST", "/__twice/rules")
        .body(json!({"fault": {"kind": "deliver_late", "delay_ms": 5}}).to_string());
    let (status, body) = runtime().block_on(answer(&payments, req));
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("applies only to messages"), "{body}");
}
