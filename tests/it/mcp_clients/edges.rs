//! The MCP transports' edges, with a client written here (raw stdio lines, raw HTTP
//! requests), so that what an SDK client would never send is sent: each message the SDK
//! cannot take gets JSON-RPC's error on both transports, with the id it can trust (no JSON
//! `-32700`, an id that is no string or integer `-32600` with a null id, `arguments` that are
//! no object `-32602`); a message past 1 MiB is refused (a stdio line with `-32600`, an HTTP
//! body with 413, however large, the client still reading the answer); a second request under
//! an id still in flight is refused and the first one answered; a client that closes stdin
//! while a tool call is held ends `twice mcp` within a bound; and a client that vanishes over
//! HTTP in the middle of a call leaves one whole refund, no half.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::assert_lists_the_tools;
use super::wire::{
    ANSWER_WAIT, Answer, EXIT_WAIT, Proc, READY_WAIT, Serve, fresh, get_json, http, mcp_headers, path,
    read_answer, read_urls, requests, send_request, split_url, sse_reply, twice_mcp, twice_mcp_with,
    wait_for_request,
};

/// A refund whose reply is held 2 s after it commits; each tool request may take 5 s, so a
/// tool call on it is held the whole 2 s.
const HELD_REFUND: &str = r#"name = "held_refund"
description = "The refund commits and its reply is held 2 s, then the connection closes."
failure_mode = "timeout_after_commit"

[limits]
request_timeout_ms = 5000

[services.payments]
key_retention_ms = 2000
settle_ms_max = 500

[payment_intents]
pi_4812 = 5000

[[intents]]
id = "refund-4812"
action = "payments.refund"
params = { payment_intent = "pi_4812", amount = 5000 }

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 1
fault = { kind = "timeout_after_commit", hold_ms = 2000 }

[expect]
refund-4812 = "confirmed"
"#;

#[test]
fn bad_lines_on_stdio_get_json_rpc_errors_and_the_session_goes_on() {
    let dir = fresh("stdio-bad-lines");
    let mut mcp = twice_mcp(&dir, "lost_refund_reply");

    // A call before initialize is answered, not dropped: rmcp takes a request that comes
    // without a handshake for one of the 2026 protocol, which carries its version and the
    // client's capabilities in `_meta`; this one does not.
    mcp.send(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"list_refunds","arguments":{"payment_intent":"pi_4812"}}}"#);
    let early = mcp.reply(ANSWER_WAIT);
    assert_eq!(early["id"], 1, "{early}");
    assert_eq!(early["error"]["code"], -32602, "{early}");
    let message = early["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("_meta") && message.contains("io.modelcontextprotocol/protocolVersion"),
        "{early}"
    );

    mcp.send("{this is not JSON");
    let unparsable = mcp.reply(ANSWER_WAIT);
    assert_eq!(
        (&unparsable["id"], &unparsable["error"]["code"]),
        (&Value::Null, &json!(-32700)),
        "{unparsable}"
    );

    // A line past 1 MiB, a request that would be well-formed: refused unread.
    let padding = "x".repeat(1024 * 1024);
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{"_meta":{{"pad":"{padding}"}}}}}}"#
    );
    mcp.send_long(long);
    let too_long = mcp.reply(ANSWER_WAIT);
    assert_eq!((&too_long["id"], &too_long["error"]["code"]), (&Value::Null, &json!(-32600)), "{too_long}");
    assert!(
        too_long["error"]["message"].as_str().is_some_and(|m| m.contains("more than 1048576 bytes")),
        "{too_long}"
    );

    // The session goes on: the handshake, then the tools.
    let initialized = mcp.initialize(3);
    assert_eq!(initialized["result"]["serverInfo"]["name"], "twice", "{initialized}");
    mcp.send(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list"}"#);
    let listed = mcp.reply(ANSWER_WAIT);
    assert_eq!(listed["id"], 4, "{listed}");
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_lists_the_tools(&names, &listed.to_string());

    mcp.close_stdin();
    let status = mcp.wait(EXIT_WAIT);
    assert!(status.success(), "twice mcp exited with {status}:\n{}", mcp.stderr());
}

#[test]
fn closing_stdin_while_a_tool_call_is_held_ends_twice_mcp_within_a_bound() {
    let dir = fresh("stdio-close-held");
    let scenario = dir.join("held_refund.toml");
    std::fs::write(&scenario, HELD_REFUND).expect("the scenario file can be written");
    let urls = dir.join("urls.json");
    let mut mcp = twice_mcp(&dir, &path(&scenario));
    mcp.initialize(1);
    mcp.send(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"refund_payment","arguments":{"payment_intent":"pi_4812","amount":5000}}}"#);
    let payments = read_urls(&urls, READY_WAIT)["payments"].as_str().expect("payments' URL").to_string();
    // The refund has reached the fake and committed; its reply is held.
    wait_for_request(&payments, "POST", "/v1/refunds");
    assert_eq!(get_json(&payments, "/__twice/ledger")["effects"].as_array().map(Vec::len), Some(1));

    let closed_at = Instant::now();
    mcp.close_stdin();
    // twice finishes the call in flight (the fake lets it go after its 2 s hold), writes its
    // answer, stops its fakes and exits.
    let status = mcp.wait(EXIT_WAIT);
    let took = closed_at.elapsed();
    println!("twice mcp exited {took:?} after its stdin closed, with {status}");
    assert!(status.success(), "twice mcp exited with {status}:\n{}", mcp.stderr());
    assert!(took < Duration::from_secs(8), "twice mcp took {took:?} to exit");
    let answer = mcp.reply(ANSWER_WAIT);
    assert_eq!((&answer["id"], &answer["result"]["isError"]), (&json!(2), &json!(true)), "{answer}");
    assert_eq!(mcp.next_line(ANSWER_WAIT), None, "stdout goes on after exit");
    // Nothing of it is left listening.
    let address = payments.trim_start_matches("http://");
    assert!(TcpStream::connect(address).is_err(), "the payments fake still listens at {address}");
}

#[test]
fn a_client_that_vanishes_over_http_during_a_call_leaves_one_whole_refund() {
    let dir = fresh("http-vanish");
    let scenario = dir.join("held_refund.toml");
    std::fs::write(&scenario, HELD_REFUND).expect("the scenario file can be written");
    let serve = Serve::start(&dir, &path(&scenario));
    let endpoint = serve.url("mcp");
    let payments = serve.url("payments");

    // initialize, then the initialized notification, in a session.
    let (base, mcp_path) = split_url(endpoint);
    let version = "2025-11-25";
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
    let answer = http(base, "POST", mcp_path, &mcp_headers(None, None), initialize.to_string().as_bytes());
    assert_eq!(answer.status, 200, "{}", answer.text());
    let session = answer.header("mcp-session-id").expect("an Mcp-Session-Id").to_string();
    assert_eq!(sse_reply(&answer, 1)["result"]["protocolVersion"], version);
    let headers = mcp_headers(Some(&session), Some(version));
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let answer = http(base, "POST", mcp_path, &headers, initialized.to_string().as_bytes());
    assert_eq!(answer.status, 202, "{}", answer.text());

    // The call goes out; once the refund has reached the fake (and its reply is held), the
    // client is gone: its connection closes with nothing answered.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "refund_payment", "arguments": {"payment_intent": "pi_4812", "amount": 5000}}});
    let mut connection = send_request(base, "POST", mcp_path, &headers, call.to_string().as_bytes());
    wait_for_request(payments, "POST", "/v1/refunds");
    connection.set_read_timeout(Some(Duration::from_millis(100))).expect("a read timeout");
    let mut early = Vec::new();
    let _ = connection.read_to_end(&mut early);
    assert!(
        !String::from_utf8_lossy(&early).contains(r#""id":2"#),
        "the call was answered before the client left"
    );
    drop(connection);

    // Past the hold, the refund is whole: one effect, one finished request that made it.
    std::thread::sleep(Duration::from_millis(2500));
    let ledger = get_json(payments, "/__twice/ledger");
    let journal = get_json(payments, "/__twice/journal");
    let effects = ledger["effects"].as_array().expect("the ledger's effects");
    assert_eq!(effects.len(), 1, "{ledger}");
    assert_eq!(effects[0]["kind"], "refund.created", "{ledger}");
    let refunds = requests(&journal, "POST", "/v1/refunds");
    assert_eq!(refunds.len(), 1, "{journal}");
    let entry = refunds[0];
    assert_eq!(entry["request_id"], effects[0]["request_id"], "{journal}");
    assert_eq!(entry["status"], 200, "{journal}");
    assert!(
        entry["ended_ms"].as_u64().is_some_and(|end| end >= entry["at_ms"].as_u64().unwrap_or(u64::MAX)),
        "{journal}"
    );
    assert_eq!(entry["outcome"], "held", "{journal}");

    // The server is none the worse: the same session reads the one refund.
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "list_refunds", "arguments": {"payment_intent": "pi_4812"}}});
    let answer = http(base, "POST", mcp_path, &headers, list.to_string().as_bytes());
    assert_eq!(answer.status, 200, "{}", answer.text());
    let listed = sse_reply(&answer, 3);
    assert_eq!(listed["result"]["isError"], false, "{listed}");
    assert_eq!(listed["result"]["structuredContent"]["data"].as_array().map(Vec::len), Some(1), "{listed}");
    serve.stop();
}

// ---------------------------------------------------------------------------------------------
// What the SDK cannot take, over both transports of one `twice mcp --mcp-port 0`.

/// Every refund is held 2 s after it commits, then its connection closes: a tool call on one
/// stays in flight that long. The intent allows four partial refunds.
const EVERY_REFUND_HELD: &str = r#"name = "every_refund_held"
description = "Every refund commits and its reply is held 2 s, then the connection closes."
failure_mode = "timeout_after_commit"

[limits]
request_timeout_ms = 5000

[services.payments]
key_retention_ms = 2000
settle_ms_max = 500

[payment_intents]
pi_4812 = 10000

[[intents]]
id = "refund-4812"
action = "payments.refund"
params = { payment_intent = "pi_4812", amount = 2500 }

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
fault = { kind = "timeout_after_commit", hold_ms = 2000 }

[expect]
refund-4812 = "confirmed"
"#;

/// One `twice mcp --mcp-port 0`: its stdio session initialized (request 1), and a streamable
/// HTTP session on the same world, initialized.
struct Both {
    stdio: Proc,
    /// `http://host:port` and `/mcp`.
    base: String,
    mcp_path: String,
    /// The session's headers for each request after initialize.
    headers: Vec<(&'static str, String)>,
    payments: String,
}

impl Both {
    fn start(name: &str, scenario: &str) -> Both {
        let dir = fresh(name);
        let scenario_file = dir.join("scenario.toml");
        std::fs::write(&scenario_file, scenario).expect("the scenario file can be written");
        let mut stdio = twice_mcp_with(&dir, &path(&scenario_file), &["--mcp-port", "0"]);
        stdio.initialize(1);
        let urls = read_urls(&dir.join("urls.json"), READY_WAIT);
        let url =
            |name: &str| urls[name].as_str().unwrap_or_else(|| panic!("no {name} in {urls}")).to_string();
        let endpoint = url("mcp");
        let (base, mcp_path) = split_url(&endpoint);
        let (base, mcp_path) = (base.to_string(), mcp_path.to_string());
        let version = "2025-11-25";
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
        let answer =
            http(&base, "POST", &mcp_path, &mcp_headers(None, None), initialize.to_string().as_bytes());
        assert_eq!(answer.status, 200, "{}", answer.text());
        let session = answer.header("mcp-session-id").expect("an Mcp-Session-Id").to_string();
        let headers = mcp_headers(Some(&session), Some(version));
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let answer = http(&base, "POST", &mcp_path, &headers, initialized.to_string().as_bytes());
        assert_eq!(answer.status, 202, "{}", answer.text());
        Both { stdio, base, mcp_path, headers, payments: url("payments") }
    }

    /// `line` on stdio, and its one reply.
    fn over_stdio(&mut self, line: &str) -> Value {
        self.stdio.send(line);
        self.stdio.reply(ANSWER_WAIT)
    }

    /// `body` POSTed in the HTTP session.
    fn over_http(&self, body: &[u8]) -> Answer {
        http(&self.base, "POST", &self.mcp_path, &self.headers, body)
    }

    /// Both sessions still serve: `tools/list` answered on each.
    fn assert_still_serving(&mut self, id: u64) {
        let list = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}).to_string();
        let listed = self.over_stdio(&list);
        assert_eq!(listed["id"], id, "{listed}");
        let names: Vec<&str> = listed["result"]["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_lists_the_tools(&names, &listed.to_string());
        let answer = self.over_http(list.as_bytes());
        assert_eq!(answer.status, 200, "{}", answer.text());
        assert!(sse_reply(&answer, id)["result"]["tools"].is_array(), "{}", answer.text());
    }

    fn stop(mut self) {
        self.stdio.close_stdin();
        let status = self.stdio.wait(EXIT_WAIT);
        assert!(status.success(), "twice mcp exited with {status}:\n{}", self.stdio.stderr());
    }
}

/// An HTTP refusal: JSON-RPC's error as the whole body, as JSON.
fn refusal_body(answer: &Answer, status: u16) -> Value {
    assert_eq!(answer.status, status, "{}", answer.text());
    assert_eq!(answer.header("content-type"), Some("application/json"), "{}", answer.text());
    serde_json::from_slice(&answer.body).unwrap_or_else(|e| panic!("no JSON ({e}): {}", answer.text()))
}

/// Fails unless `reply` is JSON-RPC's error `code` under `id`.
fn assert_refused(reply: &Value, id: &Value, code: i64, shown: &str) {
    assert_eq!(reply["jsonrpc"], "2.0", "{shown}: {reply}");
    assert_eq!((&reply["id"], &reply["error"]["code"]), (id, &json!(code)), "{shown}: {reply}");
    assert!(reply.get("result").is_none(), "{shown}: {reply}");
}

#[test]
fn a_message_that_is_no_json_gets_a_parse_error_with_a_null_id_on_both_transports() {
    let mut both = Both::start("no-json", EVERY_REFUND_HELD);
    for text in ["{this is not JSON", r#"{"jsonrpc":"2.0","id":2,"method":"tools/list""#, "\u{1}"] {
        assert_refused(&both.over_stdio(text), &Value::Null, -32700, text);
        assert_refused(&refusal_body(&both.over_http(text.as_bytes()), 400), &Value::Null, -32700, text);
    }
    // An empty body is no JSON either (an empty stdio line is only a blank line, skipped).
    assert_refused(&refusal_body(&both.over_http(b""), 400), &Value::Null, -32700, "an empty body");
    both.assert_still_serving(9);
    both.stop();
}

#[test]
fn a_request_whose_id_is_no_string_or_integer_gets_invalid_request_with_a_null_id_on_both_transports() {
    let mut both = Both::start("bad-ids", EVERY_REFUND_HELD);
    for id in [r#"{"n":2}"#, "[2]", "true", "2.5", "null"] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
        let stdio = both.over_stdio(&line);
        assert_refused(&stdio, &Value::Null, -32600, &line);
        let message = stdio["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("an id is a string or an integer"), "{stdio}");
        assert_refused(&refusal_body(&both.over_http(line.as_bytes()), 400), &Value::Null, -32600, &line);
    }
    // A call under such an id never reaches a service.
    let call = r#"{"jsonrpc":"2.0","id":{"n":3},"method":"tools/call","params":{"name":"refund_payment","arguments":{"payment_intent":"pi_4812","amount":2500}}}"#;
    assert_refused(&both.over_stdio(call), &Value::Null, -32600, call);
    assert_refused(&refusal_body(&both.over_http(call.as_bytes()), 400), &Value::Null, -32600, call);
    assert_eq!(requests(&get_json(&both.payments, "/__twice/journal"), "POST", "/v1/refunds").len(), 0);
    both.assert_still_serving(9);
    both.stop();
}

#[test]
fn tool_arguments_that_are_no_object_get_invalid_params_under_the_requests_id_on_both_transports() {
    let mut both = Both::start("bad-arguments", EVERY_REFUND_HELD);
    for (n, arguments) in ["[1, 2]", r#""pi_4812""#, "2500", "true"].iter().enumerate() {
        let id = 10 + n as u64;
        let line = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"refund_payment","arguments":{arguments}}}}}"#
        );
        let stdio = both.over_stdio(&line);
        assert_refused(&stdio, &json!(id), -32602, &line);
        let message = stdio["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with("Invalid params for tools/call"), "{stdio}");
        assert_refused(&refusal_body(&both.over_http(line.as_bytes()), 400), &json!(id), -32602, &line);
    }
    // Arguments left out are no arguments: the tool's own error names what is missing.
    let bare = r#"{"jsonrpc":"2.0","id":20,"method":"tools/call","params":{"name":"refund_payment"}}"#;
    let result = both.over_stdio(bare);
    assert_eq!(result["result"]["isError"], true, "{result}");
    assert_eq!(requests(&get_json(&both.payments, "/__twice/journal"), "POST", "/v1/refunds").len(), 0);
    both.assert_still_serving(21);
    both.stop();
}

#[test]
fn a_message_past_one_mib_is_refused_on_both_transports_and_an_http_client_still_sending_reads_the_413() {
    let mut both = Both::start("too-large", EVERY_REFUND_HELD);
    // stdio: the line is refused unread, the next one read.
    let padding = "x".repeat(1024 * 1024);
    let long = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{"_meta":{{"pad":"{padding}"}}}}}}"#
    );
    both.stdio.send_long(long.clone());
    assert_refused(&both.stdio.reply(ANSWER_WAIT), &Value::Null, -32600, "a line past 1 MiB");
    // HTTP: the same message just past the bound, then bodies that only a client writing them
    // whole before it reads could have seen reset; each declared, and each sent chunked.
    let just_past = refusal_body(&both.over_http(long.as_bytes()), 413);
    assert_refused(&just_past, &Value::Null, -32600, "a body just past 1 MiB");
    assert!(
        just_past["error"]["message"].as_str().is_some_and(|m| m.contains("more than 1048576 bytes")),
        "{just_past}"
    );
    for mib in [2, 16, 256] {
        for chunked in [false, true] {
            let shown = format!("{mib} MiB{}", if chunked { ", chunked" } else { "" });
            let answer = post_large(&both, mib * 1024 * 1024, chunked);
            assert_refused(&refusal_body(&answer, 413), &Value::Null, -32600, &shown);
        }
    }
    // A client that waits for 100 Continue gets the 413 instead, and sends nothing more.
    let mut headers = both.headers.clone();
    headers.push(("Expect", "100-continue".into()));
    headers.push(("Content-Length", (64 * 1024 * 1024).to_string()));
    let answer = read_answer(raw_request(&both, &headers, b""), "a raw request");
    assert_refused(&refusal_body(&answer, 413), &Value::Null, -32600, "Expect: 100-continue");
    both.assert_still_serving(9);
    both.stop();
}

#[test]
fn a_second_request_under_an_id_in_flight_is_refused_and_the_first_still_answered_on_both_transports() {
    let mut both = Both::start("id-in-flight", EVERY_REFUND_HELD);
    let refund = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "refund_payment", "arguments": {"payment_intent": "pi_4812", "amount": 2500}}})
        .to_string()
    };
    let list = |id: u64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "list_refunds", "arguments": {"payment_intent": "pi_4812"}}})
        .to_string()
    };

    // stdio: the refund is held; a list under its id is refused at once, and the refund's own
    // answer still comes; then the id is free again.
    both.stdio.send(&refund(7));
    wait_for_request(&both.payments, "POST", "/v1/refunds");
    let started = Instant::now();
    let refused = both.over_stdio(&list(7));
    assert!(started.elapsed() < Duration::from_millis(1500), "the refusal waited for the held call");
    assert_refused(&refused, &json!(7), -32600, "id 7 again on stdio");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("id 7 is already in flight"), "{refused}");
    let first = both.stdio.reply(ANSWER_WAIT);
    assert_eq!((&first["id"], &first["result"]["isError"]), (&json!(7), &json!(true)), "{first}");
    let again = both.over_stdio(&list(7));
    assert_eq!(again["result"]["structuredContent"]["data"].as_array().map(Vec::len), Some(1), "{again}");

    // HTTP, in a session: the same, each request on a connection of its own.
    let held = send_request(&both.base, "POST", &both.mcp_path, &both.headers, refund(7).as_bytes());
    let journal = || requests(&get_json(&both.payments, "/__twice/journal"), "POST", "/v1/refunds").len();
    let deadline = Instant::now() + ANSWER_WAIT;
    while journal() < 2 {
        assert!(Instant::now() < deadline, "the second refund never reached the payments fake");
        std::thread::sleep(Duration::from_millis(25));
    }
    let answer = both.over_http(list(7).as_bytes());
    assert_eq!(answer.status, 200, "{}", answer.text());
    let refused = sse_reply(&answer, 7);
    assert_refused(&refused, &json!(7), -32600, "id 7 again over HTTP");
    let first = sse_reply(&read_answer(held, "the held call"), 7);
    assert_eq!(first["result"]["isError"], true, "{first}");
    let again = sse_reply(&both.over_http(list(7).as_bytes()), 7);
    assert_eq!(again["result"]["structuredContent"]["data"].as_array().map(Vec::len), Some(2), "{again}");
    // Two refunds, one per held call: the refused requests reached nothing.
    assert_eq!(journal(), 2);
    both.stop();
}

/// A POST of `bytes` bytes of spaces in the HTTP session, written whole before the answer is
/// read (as most HTTP clients do), declared or chunked.
fn post_large(both: &Both, bytes: usize, chunked: bool) -> Answer {
    let mut headers = both.headers.clone();
    if chunked {
        headers.push(("Transfer-Encoding", "chunked".into()));
    } else {
        headers.push(("Content-Length", bytes.to_string()));
    }
    let mut stream = raw_request(both, &headers, b"");
    let piece = vec![b' '; 1024 * 1024];
    let mut written = 0;
    while written < bytes {
        let n = piece.len().min(bytes - written);
        let sent = if chunked {
            stream
                .write_all(format!("{n:x}\r\n").as_bytes())
                .and_then(|()| stream.write_all(&piece[..n]))
                .and_then(|()| stream.write_all(b"\r\n"))
        } else {
            stream.write_all(&piece[..n])
        };
        sent.unwrap_or_else(|e| panic!("the body was cut off after {written} of {bytes} bytes: {e}"));
        written += n;
    }
    if chunked {
        stream.write_all(b"0\r\n\r\n").unwrap_or_else(|e| panic!("the last chunk was not taken: {e}"));
    }
    read_answer(stream, "a raw request")
}

/// A POST's head (and `body`) in the HTTP session, with `headers` as given and no length of
/// its own: the caller writes the rest.
fn raw_request(both: &Both, headers: &[(&str, String)], body: &[u8]) -> TcpStream {
    let host = both.base.strip_prefix("http://").expect("an http URL");
    let mut stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("cannot connect to {host}: {e}"));
    stream.set_read_timeout(Some(ANSWER_WAIT)).expect("a read timeout");
    stream.set_write_timeout(Some(ANSWER_WAIT)).expect("a write timeout");
    let mut head = format!("POST {} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n", both.mcp_path);
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .expect("the request can be written");
    stream
}
