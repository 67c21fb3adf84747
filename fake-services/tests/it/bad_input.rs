//! Malformed requests get the real service's 4xx error shape, never a panic or a 5xx.

use serde_json::Value;

use crate::client::{self, Req, Running, Seen};

struct Case {
    service: &'static str,
    req: Req,
    status: u16,
    /// Text the error message must contain.
    says: &'static str,
}

fn p(req: Req, status: u16, says: &'static str) -> Case {
    Case { service: "payments", req, status, says }
}

fn w(req: Req, status: u16, says: &'static str) -> Case {
    Case { service: "workspaces", req, status, says }
}

fn ws_body(body: &str) -> Req {
    Req::new("POST", "/v1/workspaces")
        .header("Content-Type", "application/json")
        .body(body.as_bytes().to_vec())
}

/// A workspace create with `keys` metadata keys of `key_chars` characters (numbered, so
/// distinct) and values of `value_chars`.
fn ws_metadata(keys: usize, key_chars: usize, value_chars: usize) -> Req {
    let metadata: serde_json::Map<String, Value> =
        (0..keys).map(|i| (format!("{i:0>key_chars$}"), Value::from("v".repeat(value_chars)))).collect();
    ws_body(&serde_json::json!({"external_id": "e", "name": "n", "metadata": metadata}).to_string())
}

fn cases() -> Vec<Case> {
    let refund = Req::refund;
    let intents = |query: &str| Req::new("GET", format!("/v1/payment_intents?{query}")).authorized();
    vec![
        p(Req::new("POST", "/v1/refunds").body("payment_intent=pi_1"), 401, "did not provide an API key"),
        p(
            Req::new("POST", "/v1/refunds").header("Authorization", "Token x").body("payment_intent=pi_1"),
            401,
            "Invalid API Key",
        ),
        p(refund("payment_intent=pi_1&amount=abc"), 400, "Invalid integer: abc"),
        p(refund("payment_intent=pi_1&amount=0"), 400, "greater than or equal to 1"),
        p(refund("payment_intent=pi_1&amount=-5"), 400, "Invalid integer"),
        p(refund("payment_intent=pi_1&amount=1.5"), 400, "Invalid integer"),
        p(refund("payment_intent[x]=1"), 400, "Invalid string"),
        p(refund("payment_intent=pi_1&foo=1"), 400, "unknown parameter: foo"),
        p(refund("amount=100"), 400, "One of the following parameters is required"),
        p(refund("payment_intent=pi_nope"), 404, "No such payment_intent: 'pi_nope'"),
        p(refund("charge=ch_nope"), 404, "No such charge"),
        p(refund("payment_intent=pi_1&metadata[a=1"), 400, "unclosed bracket"),
        p(refund("payment_intent=pi_1&metadata=x"), 400, "Invalid object"),
        p(refund("payment_intent=pi_1&reason=bored"), 400, "Invalid reason"),
        p(refund("payment_intent=pi_1&amount=1&amount=2"), 400, "repeated parameter"),
        p(refund("payment_intent=pi_1&currency=dollars"), 400, "Invalid currency"),
        p(refund("payment_intent=pi_1&amount=6000"), 400, "greater than unrefunded amount"),
        p(refund("\u{0}\u{1}\u{ff}=&&=="), 400, "Invalid parameter name"),
        p(refund("payment_intent=pi_1").key(&"k".repeat(300)), 400, "at most 255 characters"),
        p(Req::new("GET", "/v1/nope").authorized(), 404, "Unrecognized request URL (GET: /v1/nope)"),
        p(Req::new("DELETE", "/v1/refunds").authorized(), 404, "Unrecognized request URL"),
        p(Req::new("GET", "/v1/refunds?limit=0").authorized(), 400, "Invalid limit"),
        p(Req::new("GET", "/v1/refunds?bogus=1").authorized(), 400, "unknown parameter: bogus"),
        p(Req::new("GET", "/v1/refunds?starting_after=re_nope").authorized(), 404, "No such refund"),
        p(Req::new("GET", "/v1/refunds/re_nope").authorized(), 404, "No such refund: 're_nope'"),
        p(intents("limit=0"), 400, "Invalid limit"),
        p(intents("limit=101"), 400, "Invalid limit"),
        p(intents("limit=ten"), 400, "Invalid limit"),
        p(intents("bogus=1"), 400, "unknown parameter: bogus"),
        p(intents("charge=ch_1"), 400, "unknown parameter: charge"),
        p(intents("created[gte]=1"), 400, "does not filter lists by created"),
        p(intents("starting_after=pi_1&ending_before=pi_1"), 400, "only specify one of these parameters"),
        p(intents("starting_after=pi_nope"), 404, "No such payment_intent: 'pi_nope'"),
        p(intents("ending_before=%FF"), 404, "No such payment_intent"),
        p(Req::new("GET", "/v1/payment_intents/pi_1/nope").authorized(), 404, "Unrecognized request URL"),
        p(refund("payment_intent=pi_1").body(vec![b'a'; 2 * 1024 * 1024]), 413, "larger than"),
        w(ws_body("{not json"), 400, "not valid JSON"),
        w(ws_body("[1,2]"), 400, "must be a JSON object"),
        w(ws_body(r#"{"external_id":"e"}"#), 400, "Missing required param: name"),
        w(ws_body(r#"{"external_id":7,"name":"n"}"#), 400, "Invalid external_id: must be a string"),
        w(ws_body(r#"{"external_id":"","name":"n"}"#), 400, "must be 1 to 200 characters"),
        w(ws_body(r#"{"external_id":"e","name":"n","plan":"pro"}"#), 400, "unknown parameter: plan"),
        w(
            ws_body(r#"{"external_id":"e","name":"n","metadata":"a=1"}"#),
            400,
            "Invalid metadata: must be an object",
        ),
        w(
            ws_body(r#"{"external_id":"e","name":"n","metadata":["a"]}"#),
            400,
            "Invalid metadata: must be an object",
        ),
        w(
            ws_body(r#"{"external_id":"e","name":"n","metadata":{"a":1}}"#),
            400,
            "metadata[a]: must be a string",
        ),
        w(
            ws_body(r#"{"external_id":"e","name":"n","metadata":{"a":null}}"#),
            400,
            "metadata[a]: must be a string",
        ),
        w(ws_metadata(51, 1, 1), 400, "Metadata can have up to 50 keys."),
        w(ws_metadata(1, 41, 1), 400, "keys can be up to 40 characters"),
        w(ws_metadata(1, 1, 501), 400, "values up to 500 characters"),
        w(Req::workspace("e").header("Fencing-Token", "soon"), 400, "Fencing-Token must be"),
        w(Req::new("GET", "/v1/workspaces?limit=x"), 400, "Invalid limit"),
        w(Req::new("GET", "/v1/workspaces/ws_nope"), 404, "No such workspace"),
        w(Req::new("PUT", "/v1/workspaces"), 404, "Unrecognized request URL"),
        w(ws_body("{}").body(vec![b' '; 2 * 1024 * 1024]), 413, "larger than"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_the_services_error_shape() {
    let running = Running::start(1).await;
    let mut failures = Vec::new();
    for case in cases() {
        let seen = client::send(running.addr(case.service), &case.req, 10_000).await;
        let error = seen.json().pointer("/error/message").and_then(Value::as_str).map(str::to_string);
        let kind = seen.json().pointer("/error/type").and_then(Value::as_str).map(str::to_string);
        let fine = seen.status() == Some(case.status)
            && kind.is_some()
            && error.as_deref().is_some_and(|m| m.contains(case.says));
        if !fine {
            failures.push(format!(
                "{} {} {}: expected {} \"{}\", saw {seen:?}",
                case.service, case.req.method, case.req.target, case.status, case.says
            ));
        }
        if case.service == "payments" && seen.header("request-id").is_none() {
            failures.push(format!("{}: no Request-Id header", case.req.target));
        }
    }
    // Nothing malformed left a trace in the ledgers, and the fakes still serve.
    assert!(running.fakes.all().iter().all(|f| f.ledger().is_empty()));
    let ok =
        client::send(running.addr("payments"), &Req::refund("payment_intent=pi_1&amount=1"), 10_000).await;
    assert_eq!(ok.status(), Some(200), "{ok:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_refunds_are_refused_with_stripes_codes() {
    let running = Running::start(1).await;
    let addr = running.addr("payments");
    let full = client::send(addr, &Req::refund("payment_intent=pi_1"), 10_000).await;
    assert_eq!(full.json()["amount"], 5000, "{full:?}");
    let again = client::send(addr, &Req::refund("payment_intent=pi_1&amount=1"), 10_000).await;
    assert_eq!(again.status(), Some(400));
    assert_eq!(again.json()["error"]["code"], "charge_already_refunded");
    assert_eq!(again.header("stripe-should-retry"), Some("false"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_socket_gets_a_400_not_a_crash() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let running = Running::start(1).await;
    for garbage in
        [&b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03"[..], b"GET / HTTP/9.9\r\n\r\n", b"NOT-HTTP\r\n\r\n"]
    {
        let mut stream = tokio::net::TcpStream::connect(running.addr("payments")).await.unwrap();
        stream.write_all(garbage).await.unwrap();
        let mut out = Vec::new();
        let read =
            tokio::time::timeout(std::time::Duration::from_secs(10), stream.read_to_end(&mut out)).await;
        assert!(read.is_ok(), "the fake answered or closed within the bound");
        let text = String::from_utf8_lossy(&out);
        assert!(out.is_empty() || text.starts_with("HTTP/1.1 4"), "{text}");
    }
    let ok =
        client::send(running.addr("payments"), &Req::refund("payment_intent=pi_1&amount=1"), 10_000).await;
    assert!(matches!(ok, Seen::Answer { status: 200, .. }), "{ok:?}");
}
