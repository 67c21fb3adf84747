//! The answer classifiers' tables (refunds, puts, broadcasts) and the rule that nothing is
//! sent without what its first send records.

use super::*;

fn answer(status: u16, body: Value) -> Result<HttpResponse, SendError> {
    Ok(HttpResponse { status, headers: vec![], body: body.to_string().into_bytes() })
}

#[test]
fn a_timeout_is_never_a_no() {
    let refund = Action::Refund { payment_intent: "pi_1".into(), amount: 100 };
    let err = |code: &str| json!({"error": {"type": "invalid_request_error", "code": code, "message": "m"}});
    let cases: Vec<(Result<HttpResponse, SendError>, &str)> = vec![
        (answer(200, json!({"id": "re_1", "payment_intent": "pi_1", "amount": 100})), "done"),
        (answer(200, json!({"id": "re_1", "payment_intent": "pi_1", "amount": 99})), "ambiguous"),
        (answer(200, json!("not an object")), "ambiguous"),
        (Ok(HttpResponse { status: 200, headers: vec![], body: b"<html>".to_vec() }), "ambiguous"),
        (answer(500, err("")), "ambiguous"),
        (answer(503, json!({})), "ambiguous"),
        (answer(409, err("idempotency_key_in_use")), "ambiguous"),
        (answer(409, err("workspace_exists")), "ambiguous"),
        (answer(409, err("stale_fencing_token")), "fenced"),
        (answer(429, err("")), "not_executed"),
        (answer(402, err("card_declined")), "rejected"),
        (answer(404, err("resource_missing")), "rejected"),
        // A person must act on these: a credential, a permission, the input.
        (answer(400, err("amount_too_large")), "decision"),
        (answer(400, err("charge_already_refunded")), "decision"),
        (
            answer(401, json!({"error": {"type": "invalid_request_error", "message": "Invalid API Key"}})),
            "decision",
        ),
        (answer(403, err("")), "decision"),
        (answer(422, err("name_invalid")), "decision"),
        // The key held other parameters: whose, only a lookup can tell.
        (
            answer(
                400,
                json!({"error": {"type": "idempotency_error", "message": "Keys for idempotent requests can only be used with the same parameters"}}),
            ),
            "ambiguous",
        ),
        (Err(SendError::NotSent("refused".into())), "not_executed"),
        (Err(SendError::Ambiguous("timeout".into())), "ambiguous"),
    ];
    for (answer, want) in cases {
        assert_eq!(
            kind(&classify_write(&refund, &intent(Evidence::default()), answer.clone())),
            want,
            "{answer:?}"
        );
    }
}

fn kind(outcome: &WriteOutcome) -> &'static str {
    match outcome {
        WriteOutcome::Done { .. } => "done",
        WriteOutcome::Rejected { .. } => "rejected",
        WriteOutcome::NeedsDecision { .. } => "decision",
        WriteOutcome::NotExecuted { .. } => "not_executed",
        WriteOutcome::Ambiguous { .. } => "ambiguous",
        WriteOutcome::Fenced { .. } => "fenced",
        WriteOutcome::Conflict { definite: true, .. } => "conflict",
        WriteOutcome::Conflict { definite: false, .. } => "race",
    }
}

fn intent(evidence: Evidence) -> Intent {
    Intent {
        id: "i1".into(),
        action: String::new(),
        params: String::new(),
        params_hash: String::new(),
        key: "k".into(),
        state: vocabulary::State::Submitted,
        attempts: 1,
        replaces: None,
        after: Vec::new(),
        evidence,
        maybe_executed: false,
        lease_owner: None,
        lease_epoch: 1,
        lease_until_ms: 0,
        version: 1,
        created_ms: 0,
        updated_ms: 0,
        key_first_sent_ms: None,
        last_sent_ms: None,
    }
}

fn with_headers(status: u16, headers: &[(&str, &str)], body: &str) -> Result<HttpResponse, SendError> {
    Ok(HttpResponse {
        status,
        headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
        body: body.as_bytes().to_vec(),
    })
}

#[test]
fn a_put_is_done_only_with_the_md5_of_its_body_and_a_412_is_for_a_read_back() {
    let put = Action::PutObject { bucket: "b".into(), key: "k".into(), body: "v2".into() };
    let ours = quoted_md5(b"v2");
    assert_eq!(ours, "\"1b267619c4812cc46ee281747884ca50\"");
    let s3 = |code: &str| format!("<Error><Code>{code}</Code><Message>m</Message></Error>");
    let cases: Vec<(Result<HttpResponse, SendError>, &str)> = vec![
        (with_headers(200, &[("ETag", &ours)], ""), "done"),
        (with_headers(200, &[("etag", "\"0000\"")], ""), "ambiguous"),
        (with_headers(200, &[], ""), "ambiguous"),
        (with_headers(412, &[], &s3("PreconditionFailed")), "conflict"),
        (with_headers(409, &[], &s3("ConditionalRequestConflict")), "race"),
        (with_headers(500, &[], &s3("InternalError")), "ambiguous"),
        (with_headers(503, &[], &s3("SlowDown")), "ambiguous"),
        (with_headers(404, &[], &s3("NoSuchBucket")), "rejected"),
        (with_headers(403, &[], &s3("AccessDenied")), "decision"),
        (with_headers(400, &[], &s3("InvalidArgument")), "decision"),
        (with_headers(400, &[], &s3("RequestTimeout")), "not_executed"),
        (with_headers(429, &[], ""), "not_executed"),
        (Err(SendError::Ambiguous("timeout".into())), "ambiguous"),
    ];
    for (answer, want) in cases {
        assert_eq!(
            kind(&classify_write(&put, &intent(Evidence::default()), answer.clone())),
            want,
            "{answer:?}"
        );
    }
    let error =
        classify_write(&put, &intent(Evidence::default()), with_headers(412, &[], &s3("PreconditionFailed")));
    assert_eq!(
        error,
        WriteOutcome::Conflict { error: "HTTP 412: PreconditionFailed: m".into(), definite: true }
    );
}

#[test]
fn a_broadcast_is_read_in_geths_words() {
    let transfer = Action::Transfer { to: format!("0x{}", "b".repeat(40)), value_wei: 1 };
    let hash = format!("0x{}", "ab".repeat(32));
    let sent = intent(Evidence { tx_hash: Some(hash.clone()), ..Evidence::default() });
    let rpc = |body: Value| answer(200, body);
    let error = |code: i64, message: &str| {
        rpc(json!({"jsonrpc": "2.0", "id": 1, "error": {"code": code, "message": message}}))
    };
    let cases: Vec<(Result<HttpResponse, SendError>, &str)> = vec![
        (rpc(json!({"jsonrpc": "2.0", "id": 1, "result": hash})), "done"),
        (rpc(json!({"jsonrpc": "2.0", "id": 1, "result": hash.to_uppercase().replace("0X", "0x")})), "done"),
        (rpc(json!({"jsonrpc": "2.0", "id": 1, "result": format!("0x{}", "cd".repeat(32))})), "ambiguous"),
        (error(-32000, "already known"), "done"),
        (error(-32000, "nonce too low: next nonce 3, tx nonce 2"), "conflict"),
        (error(-32000, "replacement transaction underpriced"), "race"),
        (
            error(-32000, "insufficient funds for gas * price + value: balance 0, tx cost 1, overshot 1"),
            "rejected",
        ),
        (error(-32602, "invalid argument 0"), "rejected"),
        (error(-32603, "internal error"), "ambiguous"),
        (answer(500, json!({"error": "boom"})), "ambiguous"),
        (answer(429, json!({})), "not_executed"),
        (
            answer(
                403,
                json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "invalid host specified"}}),
            ),
            "decision",
        ),
        (
            answer(
                401,
                json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "missing token"}}),
            ),
            "decision",
        ),
        (answer(200, json!("garbage")), "ambiguous"),
        (Err(SendError::NotSent("refused".into())), "not_executed"),
    ];
    for (answer, want) in cases {
        assert_eq!(kind(&classify_write(&transfer, &sent, answer.clone())), want, "{answer:?}");
    }
}

/// A refusal that needs a decision carries the service's own code and message, not the
/// HTTP status (which it keeps apart).
#[test]
fn a_refusal_that_needs_a_decision_keeps_the_services_own_words() {
    let refund = Action::Refund { payment_intent: "pi_1".into(), amount: 8000 };
    let too_large = json!({"error": {"type": "invalid_request_error", "code": "amount_too_large",
        "message": "Refund amount (8000) is greater than unrefunded amount on charge (5000)", "param": "amount"}});
    let put = Action::PutObject { bucket: "audit".into(), key: "k".into(), body: "v".into() };
    let denied = "<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>";
    let transfer = Action::Transfer { to: format!("0x{}", "b".repeat(40)), value_wei: 1 };
    let host =
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32600, "message": "invalid host specified"}});
    let cases = [
        (
            classify_write(&refund, &intent(Evidence::default()), answer(400, too_large)),
            (
                400,
                "amount_too_large: Refund amount (8000) is greater than unrefunded amount on charge (5000)",
            ),
        ),
        (
            classify_write(&put, &intent(Evidence::default()), with_headers(403, &[], denied)),
            (403, "AccessDenied: Access Denied"),
        ),
        (
            classify_write(&transfer, &intent(Evidence::default()), answer(403, host)),
            (403, "JSON-RPC error -32600: invalid host specified"),
        ),
    ];
    for (outcome, (status, error)) in cases {
        assert_eq!(outcome, WriteOutcome::NeedsDecision { status, error: error.into() });
    }
}

#[test]
fn nothing_is_sent_without_what_the_first_send_records() {
    let config = Config::default();
    let service = Service {
        url: "http://x".into(),
        contract: Contract { conditional_writes: true, ..Contract::default() },
    };
    let put = Action::PutObject { bucket: "b".into(), key: "k/1".into(), body: "v".into() };
    assert!(write_request(&put, &intent(Evidence::default()), &config, &service, 1).is_err());
    let guarded = intent(Evidence {
        precondition: Some(Precondition::IfMatch("\"e0\"".into())),
        ..Evidence::default()
    });
    let request = write_request(&put, &guarded, &config, &service, 1).unwrap();
    assert_eq!((request.method, request.url.as_str()), ("PUT", "http://x/b/k/1"));
    assert!(request.headers.contains(&("if-match".to_string(), "\"e0\"".to_string())));
    let transfer = Action::Transfer { to: format!("0x{}", "b".repeat(40)), value_wei: 1 };
    assert!(write_request(&transfer, &intent(Evidence::default()), &config, &service, 1).is_err());
    let signed = intent(Evidence { raw_tx: Some("0x02f8".into()), ..Evidence::default() });
    let body: Value =
        serde_json::from_slice(&write_request(&transfer, &signed, &config, &service, 1).unwrap().body)
            .unwrap();
    assert_eq!(body["method"], "eth_sendRawTransaction");
    assert_eq!(body["params"], json!(["0x02f8"]));
}

#[test]
fn an_accepted_message_is_never_confirmed_by_its_answer_and_errors_read_in_resends_words() {
    let message =
        Action::SendMessage { to: "ada@example.com".into(), subject: "Invoice".into(), body: "Due".into() };
    let resend =
        |status: u16, name: &str| answer(status, json!({"statusCode": status, "message": "m", "name": name}));
    let cases: Vec<(Result<HttpResponse, SendError>, &str)> = vec![
        (answer(200, json!({"id": "4ef9a417-02e9-4d39-ad75-9611e0fcc33c"})), "done"),
        (answer(200, json!({})), "ambiguous"),
        (answer(200, json!("accepted")), "ambiguous"),
        (resend(409, "concurrent_idempotent_requests"), "ambiguous"),
        (resend(409, "invalid_idempotent_request"), "ambiguous"),
        (resend(429, "rate_limit_exceeded"), "not_executed"),
        (resend(500, "application_error"), "ambiguous"),
        (resend(422, "validation_error"), "decision"),
        (Err(SendError::Ambiguous("timeout".into())), "ambiguous"),
    ];
    for (answer, want) in cases {
        assert_eq!(
            kind(&classify_write(&message, &intent(Evidence::default()), answer.clone())),
            want,
            "{answer:?}"
        );
    }
    let refused = classify_write(&message, &intent(Evidence::default()), resend(422, "validation_error"));
    assert_eq!(refused, WriteOutcome::NeedsDecision { status: 422, error: "validation_error: m".into() });
    // Whatever the contract says, the inbox decides, and "not there" is never settled by a key.
    let reliable = Contract { acks: Acks::Reliable, ..Contract::default() };
    assert!(read_back_success(&message, &reliable));
    assert!(success_may_be_hollow(&message, &reliable));
    let refund = Action::Refund { payment_intent: "pi_1".into(), amount: 1 };
    assert!(!success_may_be_hollow(&refund, &reliable));
}

#[test]
fn a_message_is_sent_with_its_key_and_its_intent_and_found_by_its_intent() {
    let mut config = Config::default();
    config.secrets.insert("messages_api_key".into(), "re_live_1".into());
    let service = Service { url: "http://m/".into(), contract: Contract::messages_default() };
    let message =
        Action::SendMessage { to: "ada@example.com".into(), subject: "Invoice".into(), body: "Due".into() };
    let sent = intent(Evidence::default());
    let request = write_request(&message, &sent, &config, &service, 1).unwrap();
    assert_eq!((request.method, request.url.as_str()), ("POST", "http://m/emails"));
    assert!(request.headers.contains(&("idempotency-key".to_string(), "k".to_string())));
    assert!(request.headers.contains(&("authorization".to_string(), "Bearer re_live_1".to_string())));
    let body: Value = serde_json::from_slice(&request.body).unwrap();
    assert_eq!(body["to"], "ada@example.com");
    assert_eq!((&body["subject"], &body["text"]), (&json!("Invoice"), &json!("Due")));
    assert_eq!(body["headers"][INTENT_HEADER], "i1");

    let lookup = lookup_request(&message, &sent, &config, &service, Some("msg_2"));
    assert_eq!(lookup.url, "http://m/mailboxes/ada@example.com/messages?limit=100&after=msg_2");
    let item = |intent_id: &str, text: &str| {
        json!({"id": "msg_9", "email_id": "e-1", "subject": "Invoice", "text": text,
               "headers": {"x-twice-intent": intent_id}})
    };
    let page =
        |data: Value, more: bool| answer(200, json!({"object": "list", "has_more": more, "data": data}));
    let cases = [
        (
            page(json!([item("i1", "Due")]), false),
            Ok(Lookup::Found { external_id: "e-1".into(), params_match: true }),
        ),
        (
            page(json!([item("i1", "Late")]), false),
            Ok(Lookup::Found { external_id: "e-1".into(), params_match: false }),
        ),
        (page(json!([item("i2", "Due")]), false), Ok(Lookup::Absent)),
        (page(json!([item("i2", "Due")]), true), Err("msg_9".to_string())),
        (page(json!([]), false), Ok(Lookup::Absent)),
    ];
    for (answer, want) in cases {
        assert_eq!(classify_lookup_page(&message, &sent, answer.clone()), want, "{answer:?}");
    }
}
