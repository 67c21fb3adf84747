//! The real `twice-executor` binary against bad input on its stdio protocol: every bad line
//! gets a definite `error` with the right code and the process keeps serving; `shutdown` and
//! the end of input end it with exit status 0, within a bound.

use std::time::Duration;

use serde_json::{Value, json};

use crate::process::{EXIT_WAIT, ExecutorProcess, REPLY_WAIT, fresh_dir};
use crate::world::{Services, init, propose, refund};

/// The protocol's error codes (design §6, Maelstrom's numbering).
const NOT_SUPPORTED: u64 = 10;
const TEMPORARILY_UNAVAILABLE: u64 = 11;
const MALFORMED_REQUEST: u64 = 12;

/// An `error` with `code`. (A reply to a request with a `msg_id` was already checked to name
/// it; a line without one is answered with `in_reply_to: null`.)
fn assert_error(reply: &Value, code: u64, what: &str) {
    assert_eq!(reply["type"], "error", "{what}: {reply}");
    assert_eq!(reply["code"], code, "{what}: {reply}");
    assert!(reply["text"].as_str().is_some_and(|t| !t.is_empty()), "{what}: no text: {reply}");
}

/// Proves the process still serves: a `status` gets `status_ok` (or, before `init`, the
/// definite "not yet" error).
async fn still_serving(ex: &mut ExecutorProcess, initialised: bool, after: &str) {
    let reply = ex.call(json!({"type": "status"})).await;
    if initialised {
        assert_eq!(reply["type"], "status_ok", "after {after}: {reply}");
    } else {
        assert_eq!(reply["code"], TEMPORARILY_UNAVAILABLE, "after {after}: {reply}");
    }
}

/// A raw line, and the reply to it.
async fn raw(ex: &mut ExecutorProcess, line: &[u8]) -> Value {
    ex.write_raw(line).await.expect("the executor is alive");
    ex.next_reply(REPLY_WAIT).await.expect("the executor answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_bad_input_gets_definite_errors_and_the_executor_keeps_serving() {
    let services = Services::start(201, json!({})).await;
    let dir = fresh_dir("protocol_bad_input");
    let mut ex = ExecutorProcess::spawn("protocol", &[], &[]);

    // Before init.
    let reply = raw(&mut ex, b"this is not json\n").await;
    assert_error(&reply, MALFORMED_REQUEST, "garbage");
    assert_eq!(reply["in_reply_to"], Value::Null, "garbage");
    still_serving(&mut ex, false, "garbage").await;

    let reply = raw(&mut ex, b"[1, 2, 3]\n").await;
    assert_error(&reply, MALFORMED_REQUEST, "a JSON array");
    assert_eq!(reply["in_reply_to"], Value::Null, "a JSON array");

    let reply = raw(&mut ex, b"{\"type\": \"status\"}\n").await;
    assert_error(&reply, MALFORMED_REQUEST, "no msg_id");
    assert_eq!(reply["in_reply_to"], Value::Null, "no msg_id");

    let reply = ex.call(json!({"type": "fly_to_the_moon"})).await;
    assert_error(&reply, NOT_SUPPORTED, "unknown request type");

    let reply = ex.call(propose(&refund("p.1", "pi_p1", 10))).await;
    assert_error(&reply, TEMPORARILY_UNAVAILABLE, "propose before init");

    let reply = ex.call(json!({"type": "drain", "timeout_ms": 10})).await;
    assert_error(&reply, TEMPORARILY_UNAVAILABLE, "drain before init");

    let mut wrong = init(&services, "w", &dir, json!({}));
    wrong["protocol"] = json!("twice/0");
    let reply = ex.call(wrong).await;
    assert_error(&reply, NOT_SUPPORTED, "an unknown protocol version");
    still_serving(&mut ex, false, "an unknown protocol version").await;

    // After init.
    ex.ok(init(&services, "w", &dir, json!({}))).await;
    let reply =
        ex.call(propose(&json!({"id": "p.2", "action": "files.shred", "params": {"bucket": "b"}}))).await;
    assert_error(&reply, NOT_SUPPORTED, "unknown action");
    still_serving(&mut ex, true, "unknown action").await;

    let reply = ex.call(json!({"type": "teleport"})).await;
    assert_error(&reply, NOT_SUPPORTED, "unknown request type after init");

    let reply = raw(&mut ex, b"{\"type\": \"propose\", \"msg_id\": 99, \"intent\": \n").await;
    assert_error(&reply, MALFORMED_REQUEST, "a truncated object");
    assert_eq!(reply["in_reply_to"], Value::Null, "a truncated object");
    still_serving(&mut ex, true, "a truncated object").await;

    // A line over 1 MiB: refused as a whole, and the next line is served.
    let mut long = b"{\"type\": \"status\", \"msg_id\": 77, \"pad\": \"".to_vec();
    long.resize(long.len() + 1_500_000, b'x');
    long.extend_from_slice(b"\"}\n");
    let reply = raw(&mut ex, &long).await;
    assert_error(&reply, MALFORMED_REQUEST, "an oversized line");
    assert_eq!(reply["in_reply_to"], Value::Null, "an oversized line");
    assert!(reply["text"].as_str().unwrap_or_default().contains("longer"), "{reply}");
    still_serving(&mut ex, true, "an oversized line").await;

    let status = ex.ok(json!({"type": "status"})).await;
    assert_eq!(status["intents"], json!([]), "bad input recorded nothing: {status}");

    ex.ok(json!({"type": "shutdown"})).await;
    let code = ex.wait_exit(EXIT_WAIT).await;
    assert_eq!(code.code(), Some(0), "exit after shutdown: {code}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_shutdown_exits_zero_promptly() {
    let services = Services::start(202, json!({})).await;
    let dir = fresh_dir("protocol_shutdown");
    let mut ex = ExecutorProcess::spawn("shutdown", &["--state-dir", dir.to_str().expect("UTF-8")], &[]);
    ex.ok(init(&services, "w", &dir, json!({}))).await;
    ex.ok(propose(&refund("s.1", "pi_s1", 10))).await;
    let started = tokio::time::Instant::now();
    let reply = ex.call(json!({"type": "shutdown"})).await;
    assert_eq!(reply["type"], "shutdown_ok", "{reply}");
    let status = ex.wait_exit(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{status}: {}", ex.stderr_tail());
    assert!(started.elapsed() < Duration::from_secs(5));

    // Shutdown before init is fine too.
    let mut ex = ExecutorProcess::spawn("shutdown-before-init", &[], &[]);
    ex.ok(json!({"type": "shutdown"})).await;
    let status = ex.wait_exit(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{status}: {}", ex.stderr_tail());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_end_of_input_exits_zero() {
    let services = Services::start(203, json!({})).await;
    let dir = fresh_dir("protocol_eof");
    let mut ex = ExecutorProcess::spawn("eof", &[], &[]);
    ex.ok(init(&services, "w", &dir, json!({}))).await;
    ex.close_stdin();
    let status = ex.wait_exit(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{status}: {}", ex.stderr_tail());

    // And before init, even in the middle of a line.
    let mut ex = ExecutorProcess::spawn("eof-mid-line", &[], &[]);
    ex.write_raw(b"{\"type\": \"sta").await.expect("alive");
    ex.close_stdin();
    // The half line may get an error reply; then the end.
    let status = ex.wait_exit(Duration::from_secs(5)).await;
    assert_eq!(status.code(), Some(0), "{status}: {}", ex.stderr_tail());
}

/// Proposals written together, without waiting for replies (one write, so they arrive
/// together and are committed as one batch): every one gets its reply, in order, each as it
/// would alone: accepted, refused as malformed or unsupported, the same intent again for a
/// repeated id, a conflict for a repeated id with another payload. Then a line that is not
/// a proposal, behind them in the same write, is served after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_proposals_written_together_get_every_reply_in_order() {
    let services = Services::start(204, json!({})).await;
    let dir = fresh_dir("protocol_batch");
    let mut ex = ExecutorProcess::spawn("batch", &["--state-dir", dir.to_str().expect("UTF-8")], &[]);
    ex.ok(init(&services, "w", &dir, json!({}))).await;
    for i in 0..6 {
        services.seed_payment_intent(&format!("pi_b{i}"));
    }
    let mut intents: Vec<Value> =
        (0..6).map(|i| refund(&format!("b.{i}"), &format!("pi_b{i}"), 10 + i)).collect();
    intents.insert(2, json!({"id": "b.bad", "action": "files.shred", "params": {"bucket": "b"}}));
    intents.insert(4, refund("b.1", "pi_b1", 11));
    intents.insert(5, refund("b.1", "pi_b1", 99));
    intents.push(json!({"id": "b.step", "action": "payments.refund", "after": ["b.0", "b.5"],
                        "params": {"payment_intent": "pi_b0", "amount": 1}}));
    let mut bytes = Vec::new();
    let first_id = 1_000u64;
    for (i, intent) in intents.iter().enumerate() {
        let mut request = propose(intent);
        request["msg_id"] = json!(first_id + i as u64);
        bytes.extend_from_slice(request.to_string().as_bytes());
        bytes.push(b'\n');
    }
    // A malformed propose and a status, in the same write.
    bytes.extend_from_slice(b"{\"type\": \"propose\", \"msg_id\": 2000}\n");
    bytes.extend_from_slice(b"{\"type\": \"status\", \"msg_id\": 2001}\n");
    ex.write_raw(&bytes).await.expect("the executor is alive");

    let mut replies = Vec::new();
    for _ in 0..intents.len() + 2 {
        replies.push(ex.next_reply(REPLY_WAIT).await.expect("the executor answers"));
    }
    let to: Vec<u64> = replies.iter().map(|r| r["in_reply_to"].as_u64().unwrap_or(0)).collect();
    let mut expected: Vec<u64> = (0..intents.len() as u64).map(|i| first_id + i).collect();
    expected.extend([2000, 2001]);
    assert_eq!(to, expected, "replies in the order of the requests");
    let kinds: Vec<String> = replies
        .iter()
        .map(|r| match r["type"].as_str() {
            Some("error") => format!("error {}", r["code"]),
            other => other.unwrap_or_default().to_string(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "propose_ok",
            "propose_ok",
            "error 10",
            "propose_ok",
            "propose_ok",
            "error 21",
            "propose_ok",
            "propose_ok",
            "propose_ok",
            "propose_ok",
            "error 12",
            "status_ok",
        ],
        "{replies:#?}"
    );
    assert_eq!(replies[4]["intent"], replies[1]["intent"], "the same id twice is one intent");
    assert_eq!(replies[9]["intent"]["state"], "blocked", "a step after intents of the same batch");
    let status = &replies[11]["intents"];
    assert_eq!(status.as_array().map(Vec::len), Some(7), "six refunds and the step: {status}");

    ex.ok(json!({"type": "shutdown"})).await;
    let code = ex.wait_exit(EXIT_WAIT).await;
    assert_eq!(code.code(), Some(0), "exit after shutdown: {code}");
}

#[path = "../../../tests/examples/fuzz_executor/driver.rs"]
mod fuzz_driver;

/// Fuzzed stdin (`cargo xtask fuzz-http --target executor`, short): random bytes, truncated
/// JSON, lines at and over the 1 MiB limit, blank lines, valid requests and valid requests
/// with fields of random types, interleaved, then the end of input. Every complete line gets
/// one reply until an acknowledged `shutdown`, the process exits 0 within a bound, and
/// nothing panics.
#[test]
fn protocol_fuzzed_stdin_gets_a_reply_per_line_and_a_clean_exit() {
    let scratch = fresh_dir("protocol_fuzz");
    let report = fuzz_driver::run(&crate::process::bin("twice-executor"), &scratch, 11, 0..150);
    report.print();
    assert!(report.failures.is_empty(), "{} sessions failed, listed above", report.failures.len());
    assert!(report.replies > 0);
}
