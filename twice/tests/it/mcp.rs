//! `twice mcp` and `twice serve --mcp-port` as an agent meets them: JSON-RPC over a real
//! child's stdin and stdout, and streamable HTTP on loopback. An agent that retries a refund
//! whose reply was lost makes a second refund, which the verdict on its claims names; one that
//! reads back first passes; every call is on the verdict's timeline with its request id and
//! session.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};
use serve::client::{self, Request};

use super::{WAIT_MS_MAX, read_urls, twice, wait_bounded};

/// A partial refund whose first reply is lost after the commit: a second refund can land.
const PARTIAL_LOST_REPLY: &str = r#"
name = "agent_partial_refund_lost_reply"
description = "A partial refund commits and its reply is lost; a retry without a key refunds again."
failure_mode = "lost_reply"

[services.payments]
key_retention_ms = 60000
settle_ms_max = 500

[payment_intents]
pi_7301 = 10000

[[intents]]
id = "refund-7301"
action = "payments.refund"
params = { payment_intent = "pi_7301", amount = 2500 }

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 1
fault = "drop_after_commit"

[expect]
refund-7301 = "confirmed"
"#;

/// `twice mcp` as a child, spoken to line by line.
struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    urls: serde_json::Map<String, Value>,
    next_id: u64,
    _dir: PathBuf,
}

impl Session {
    fn start(tag: &str, scenario: &str) -> Session {
        Session::start_with(tag, scenario, &[])
    }

    fn start_with(tag: &str, scenario: &str, options: &[&str]) -> Session {
        let dir = std::env::temp_dir().join(format!("twice-mcp-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("scenario.toml");
        std::fs::write(&file, scenario).unwrap();
        let urls_file = dir.join("urls.json");
        let mut child = twice()
            .args(["mcp", "--scenario"])
            .arg(&file)
            .arg("--urls-file")
            .arg(&urls_file)
            .args(options)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let urls = read_urls(&urls_file, &mut child).as_object().cloned().unwrap();
        let stdin = child.stdin.take();
        let mut session = Session { child, stdin, lines, urls, next_id: 1, _dir: dir };
        let init = session.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}),
        );
        assert_eq!(init["result"]["serverInfo"]["name"], "twice", "{init}");
        session.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        session
    }

    fn send(&mut self, message: Value) {
        let stdin = self.stdin.as_mut().unwrap();
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let line = self.lines.recv_timeout(Duration::from_millis(WAIT_MS_MAX)).expect("an answer in time");
        let answer: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))["result"].clone()
    }

    fn url(&self, name: &str) -> String {
        self.urls[name].as_str().unwrap().to_string()
    }

    /// Closes stdin, as a client that is done does: the server exits by itself.
    fn close(mut self) -> Option<i32> {
        drop(self.stdin.take());
        wait_bounded(&mut self.child)
    }
}

impl Drop for Session {
    /// A failed assertion leaves no server behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A child killed when the test ends, however it ends.
pub(crate) struct Killed(pub(crate) Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn exchange(
    method: &'static str,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> client::Answer {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime
        .block_on(client::exchange(Request { method, url, headers, body, timeout_ms: WAIT_MS_MAX }))
        .unwrap()
}

fn verdict(control: &str, state: &str) -> Value {
    let claims = json!({"claims": [{"id": "refund-7301", "action": "payments.refund", "state": state}]});
    let answer = exchange(
        "POST",
        format!("{control}/__twice/check"),
        vec![("content-type".into(), "application/json".into())],
        claims.to_string().into_bytes(),
    );
    assert_eq!(answer.status, 200, "{}", String::from_utf8_lossy(&answer.body));
    serde_json::from_slice(&answer.body).unwrap()
}

fn violated(verdict: &Value) -> Vec<String> {
    verdict["results"]["results"][0]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["status"] == "violated")
        .map(|v| v["invariant"].as_str().unwrap().to_string())
        .collect()
}

fn tool_calls(verdict: &Value) -> Vec<String> {
    verdict["results"]["results"][0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["lane"] == "mcp")
        .map(|m| m["detail"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_naive_retry_after_a_lost_reply_is_a_second_refund_and_the_verdict_names_it() {
    let mut session = Session::start("naive", PARTIAL_LOST_REPLY);
    let args = json!({"payment_intent": "pi_7301", "amount": 2500});
    let lost = session.call("refund_payment", args.clone());
    assert_eq!(lost["isError"], true, "{lost}");
    assert_eq!(
        lost["content"][0]["text"],
        "An error occurred with the connection to the payments API: the connection was closed before a response was received."
    );
    let again = session.call("refund_payment", args);
    assert_ne!(again["isError"], true, "{again}");
    assert_eq!(again["structuredContent"]["amount"], 2500);
    let verdict = verdict(&session.url("control"), "confirmed");
    // Two refunds; and "confirmed" is a claim the ledger contradicts, since one was meant.
    assert_eq!(violated(&verdict), ["no-duplicate-effect", "honest-terminal-states"], "{verdict}");
    let calls = tool_calls(&verdict);
    assert_eq!(calls.len(), 2, "{calls:?}");
    assert!(
        calls[0].starts_with("refund_payment (request 2, session stdio): error: An error occurred"),
        "{calls:?}"
    );
    assert!(calls[1].starts_with("refund_payment (request 3, session stdio): ok: re_"), "{calls:?}");
    assert_eq!(session.close(), Some(0));
}

#[test]
fn a_careful_agent_reads_back_before_it_retries_and_passes() {
    let mut session = Session::start("careful", PARTIAL_LOST_REPLY);
    let key = "refund:pi_7301:2500:step-1";
    let lost = session
        .call("refund_payment", json!({"payment_intent": "pi_7301", "amount": 2500, "idempotency_key": key}));
    assert_eq!(lost["isError"], true, "{lost}");
    let listed = session.call("list_refunds", json!({"payment_intent": "pi_7301"}));
    let refunds = listed["structuredContent"]["data"].as_array().unwrap().clone();
    assert_eq!(refunds.len(), 1, "{listed}");
    // The same key again: the first answer, not a second refund.
    let replayed = session
        .call("refund_payment", json!({"payment_intent": "pi_7301", "amount": 2500, "idempotency_key": key}));
    assert_eq!(replayed["structuredContent"]["id"], refunds[0]["id"], "{replayed}");
    let verdict = verdict(&session.url("control"), "confirmed");
    assert!(violated(&verdict).is_empty(), "{verdict}");
    assert_eq!(verdict["held"], true, "{verdict}");
    assert_eq!(session.close(), Some(0));
}

#[test]
fn a_bad_call_gets_the_specifications_error_and_changes_nothing() {
    let mut session = Session::start("bad", PARTIAL_LOST_REPLY);
    let unknown = session.request("tools/call", json!({"name": "refund_everything", "arguments": {}}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    let invalid =
        session.call("refund_payment", json!({"payment_intent": "pi_7301", "amount": -5, "extra": 1}));
    assert_eq!(invalid["isError"], true);
    let text = invalid["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("Invalid arguments for tool refund_payment: unknown argument \"extra\""),
        "{text}"
    );
    let tools = session.request("tools/list", json!({}));
    let names: Vec<&str> =
        tools["result"]["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 11, "{names:?}");
    let ledger = exchange("GET", format!("{}/__twice/ledger", session.url("payments")), vec![], vec![]);
    let ledger: Value = serde_json::from_slice(&ledger.body).unwrap();
    assert_eq!(ledger["effects"].as_array().map(Vec::len), Some(0), "{ledger}");
    assert_eq!(session.close(), Some(0));
}

/// A success that lies, an answer held past the tool's bound, and a 429 with its Retry-After:
/// one of each, as docs/agents.md's table says the agent sees them.
const NOOP_TIMEOUT_AND_429: &str = r#"
name = "agent_sees_each_kind_of_answer"
description = "A silent no-op, a held answer and a rate limit, one request each."
failure_mode = "silent_noop"

[services.payments]
acks = "may_lie"
settle_ms_max = 500

[payment_intents]
pi_7302 = 10000

[[intents]]
id = "refund-7302"
action = "payments.refund"
params = { payment_intent = "pi_7302", amount = 1000 }

[[intents]]
id = "mail-1"
action = "messages.send"
params = { to = "ada@example.com", subject = "refund", body = "done" }

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 1
fault = "silent_noop"

[[faults]]
service = "payments"
method = "POST"
path = "/v1/refunds"
nth = 2
fault = { kind = "timeout_after_commit", hold_ms = 3000 }

[[faults]]
service = "messages"
method = "POST"
path = "/emails"
nth = 1
fault = { kind = "reject", status = 429 }
"#;

#[test]
fn a_lying_success_a_held_answer_and_a_rate_limit_reach_the_agent_as_the_docs_say() {
    let mut session = Session::start_with("answers", NOOP_TIMEOUT_AND_429, &["--tool-timeout-ms", "500"]);
    let args = json!({"payment_intent": "pi_7302", "amount": 1000});
    let lying = session.call("refund_payment", args.clone());
    assert_ne!(lying["isError"], true, "a silent no-op is a success: {lying}");
    let listed = session.call("list_refunds", json!({"payment_intent": "pi_7302"}));
    assert_eq!(
        listed["structuredContent"]["data"].as_array().map(Vec::len),
        Some(0),
        "and did nothing: {listed}"
    );
    let held = session.call("refund_payment", args);
    assert_eq!(held["isError"], true, "{held}");
    assert_eq!(held["content"][0]["text"], "Request to the payments API timed out after 500 ms.");
    let limited =
        session.call("send_message", json!({"to": "ada@example.com", "subject": "refund", "body": "done"}));
    assert_eq!(limited["isError"], true, "{limited}");
    let text = limited["content"][0]["text"].as_str().unwrap();
    assert!(text.starts_with("The messages API refused the request: HTTP 429"), "{text}");
    assert!(text.ends_with("Retry after 1 s."), "{text}");
    assert_eq!(session.close(), Some(0));
}

/// The JSON-RPC message of a streamable-HTTP answer: the body, or its SSE `data:` line.
fn mcp_message(answer: &client::Answer) -> Value {
    let text = String::from_utf8_lossy(&answer.body);
    let json_text = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .find(|data| data.starts_with('{'))
        .unwrap_or(text.trim());
    serde_json::from_str(json_text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

fn post_mcp(url: &str, session: Option<&str>, message: Value) -> client::Answer {
    let mut headers = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("accept".to_string(), "application/json, text/event-stream".to_string()),
        ("mcp-protocol-version".to_string(), "2025-06-18".to_string()),
    ];
    if let Some(session) = session {
        headers.push(("mcp-session-id".into(), session.into()));
    }
    exchange("POST", url.to_string(), headers, message.to_string().into_bytes())
}

#[test]
fn serve_answers_mcp_over_streamable_http_and_journals_the_session() {
    let dir = std::env::temp_dir().join(format!("twice-mcp-http-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file: PathBuf = dir.join("scenario.toml");
    std::fs::write(&file, PARTIAL_LOST_REPLY).unwrap();
    let urls_file = dir.join("urls.json");
    let _ = std::fs::remove_file(&urls_file);
    let mut child = twice()
        .args(["serve", "--mcp-port", "0", "--scenario"])
        .arg(&file)
        .arg("--urls-file")
        .arg(&urls_file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let urls = read_urls(&urls_file, &mut child);
    let _serve = Killed(child);
    let mcp = urls["mcp"].as_str().unwrap().to_string();
    assert!(mcp.ends_with("/mcp"), "{urls}");
    let init = post_mcp(
        &mcp,
        None,
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "it", "version": "0"}}}),
    );
    assert_eq!(init.status, 200, "{}", String::from_utf8_lossy(&init.body));
    let session = init.header("mcp-session-id").expect("a session id").to_string();
    assert_eq!(mcp_message(&init)["result"]["serverInfo"]["name"], "twice");
    let initialized =
        post_mcp(&mcp, Some(&session), json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    assert_eq!(initialized.status, 202);
    let call = post_mcp(
        &mcp,
        Some(&session),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "refund_payment", "arguments": {"payment_intent": "pi_7301", "amount": 2500}}}),
    );
    assert_eq!(mcp_message(&call)["result"]["isError"], true);
    let control = urls["control"].as_str().unwrap();
    let verdict = verdict(control, "confirmed");
    assert!(violated(&verdict).is_empty(), "one refund, claimed confirmed: {verdict}");
    let calls = tool_calls(&verdict);
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(
        calls[0].starts_with(&format!("refund_payment (request 2, session {session}): error:")),
        "{calls:?}"
    );
    let elsewhere = exchange("GET", mcp.replace("/mcp", "/other"), vec![], vec![]);
    assert_eq!(elsewhere.status, 404);
    let _ = std::fs::remove_dir_all(&dir);
}

/// One write of each tagging service, no faults: what each tool's tags become.
const EVERY_TAGGED_WRITE: &str = r#"
name = "agent_tags_every_write"
description = "A refund, a workspace, a file and an email, each tagged by the agent that writes it."
failure_mode = "lost_reply"

[payment_intents]
pi_7303 = 10000

[[intents]]
id = "refund-7303"
action = "payments.refund"
params = { payment_intent = "pi_7303", amount = 2500 }

[[intents]]
id = "ws-1"
action = "workspaces.create"
params = { external_id = "org-7303", name = "Org 7303" }

[[intents]]
id = "file-1"
action = "files.put"
params = { bucket = "reports", key = "q3.csv", body = "revenue,42" }

[[intents]]
id = "mail-1"
action = "messages.send"
params = { to = "ada@example.com", subject = "refund", body = "done" }
"#;

fn ledger(url: &str) -> Vec<Value> {
    let answer = exchange("GET", format!("{url}/__twice/ledger"), vec![], vec![]);
    let ledger: Value = serde_json::from_slice(&answer.body).unwrap();
    ledger["effects"].as_array().cloned().unwrap_or_default()
}

#[test]
fn each_write_tool_takes_the_tags_its_real_api_takes_and_the_reads_and_the_ledger_show_them() {
    let mut session = Session::start("tags", EVERY_TAGGED_WRITE);
    let refund = session.call(
        "refund_payment",
        json!({"payment_intent": "pi_7303", "amount": 2500, "metadata": {"twice_intent": "refund-7303"}}),
    );
    assert_eq!(refund["structuredContent"]["metadata"], json!({"twice_intent": "refund-7303"}), "{refund}");
    let listed = session.call("list_refunds", json!({"payment_intent": "pi_7303"}));
    assert_eq!(listed["structuredContent"]["data"][0]["metadata"]["twice_intent"], "refund-7303", "{listed}");

    let created = session.call(
        "create_workspace",
        json!({"external_id": "org-7303", "name": "Org 7303", "metadata": {"twice_intent": "ws-1"}}),
    );
    assert_ne!(created["isError"], true, "{created}");
    let found = session.call("find_workspace", json!({"external_id": "org-7303"}));
    assert_eq!(
        found["structuredContent"]["workspace"]["metadata"],
        json!({"twice_intent": "ws-1"}),
        "{found}"
    );

    let put = session.call(
        "put_file",
        json!({"bucket": "reports", "key": "q3.csv", "body": "revenue,42", "metadata": {"Twice-Intent": "file-1"}}),
    );
    assert_ne!(put["isError"], true, "{put}");
    let got = session.call("get_file", json!({"bucket": "reports", "key": "q3.csv"}));
    assert_eq!(got["structuredContent"]["metadata"], json!({"twice-intent": "file-1"}), "{got}");

    let sent = session.call(
        "send_message",
        json!({"to": "ada@example.com", "subject": "refund", "body": "done",
               "headers": {"X-Twice-Intent": "mail-1"}, "tags": [{"name": "intent", "value": "mail-1"}]}),
    );
    assert_ne!(sent["isError"], true, "{sent}");
    let inbox = session.call("list_mailbox", json!({"address": "ada@example.com"}));
    let message = &inbox["structuredContent"]["data"][0];
    assert_eq!(message["headers"], json!({"X-Twice-Intent": "mail-1"}), "{inbox}");
    assert_eq!(message["tags"], json!([{"name": "intent", "value": "mail-1"}]), "{inbox}");

    // The ledgers keep each tag where the checker reads it.
    let tag = |service: &str, pointer: &str| -> Vec<Value> {
        ledger(&session.url(service)).iter().filter_map(|e| e["params"].pointer(pointer).cloned()).collect()
    };
    assert_eq!(tag("payments", "/metadata/twice_intent"), [json!("refund-7303")]);
    assert_eq!(tag("workspaces", "/metadata/twice_intent"), [json!("ws-1")]);
    assert_eq!(tag("files", "/metadata/twice-intent"), [json!("file-1")]);
    assert_eq!(tag("messages", "/headers/X-Twice-Intent"), [json!("mail-1")]);
    assert_eq!(tag("messages", "/tags/0/value"), [json!("mail-1")]);

    // A tag the real API refuses is the tool's error, sent nowhere.
    let bad = session.call(
        "send_message",
        json!({"to": "ada@example.com", "subject": "s", "body": "b", "tags": [{"name": "in tent", "value": "x"}]}),
    );
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(bad["content"][0]["text"].as_str().unwrap().contains("tags must be a list"), "{bad}");
    assert_eq!(session.close(), Some(0));
}

/// docs/agents.md's careful agent, by tag: it tags its refund with the intent's id; after the
/// lost reply it lists the payment's refunds and finds its own by the tag, so it neither
/// refunds again nor needs the service to keep its key.
#[test]
fn a_careful_agent_finds_its_own_refund_by_its_tag_after_a_lost_reply_and_passes() {
    let mut session = Session::start("by-tag", PARTIAL_LOST_REPLY);
    let tagged =
        json!({"payment_intent": "pi_7301", "amount": 2500, "metadata": {"twice_intent": "refund-7301"}});
    let lost = session.call("refund_payment", tagged);
    assert_eq!(lost["isError"], true, "{lost}");
    let listed = session.call("list_refunds", json!({"payment_intent": "pi_7301"}));
    let refunds = listed["structuredContent"]["data"].as_array().unwrap().clone();
    let mine: Vec<&Value> =
        refunds.iter().filter(|r| r["metadata"]["twice_intent"] == "refund-7301").collect();
    assert_eq!(mine.len(), 1, "the lost refund, found by its tag: {listed}");
    let verdict = verdict(&session.url("control"), "confirmed");
    assert!(violated(&verdict).is_empty(), "{verdict}");
    assert_eq!(verdict["held"], true, "{verdict}");
    assert_eq!(ledger(&session.url("payments")).len(), 1);
    assert_eq!(session.close(), Some(0));
}
