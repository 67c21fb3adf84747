//! `twice mcp` checked by real MCP clients: the official Python SDK's (`mcp`, pinned in
//! `tests/requirements.txt`, run with the venv's interpreter in `TWICE_PYTHON`) and the official
//! TypeScript SDK's (`@modelcontextprotocol/sdk`, pinned in `tests/mcp/package-lock.json`, which
//! `cargo xtask test` installs with `npm ci`). Each client script (`tests/mcp/`) connects to
//! `twice mcp --scenario lost_refund_reply` over stdio, or to `twice serve --mcp-port 0` over
//! streamable HTTP, lists the tools and calls them, and prints what it saw; the SDKs parse every
//! message with the specification's schemas, so a malformed one fails the script. The tests
//! assert on what the clients saw and on the payments fake's ledger and journal, read through
//! the URLs file while the client still holds its session.
//!
//! The Python client also plays a naive agent under a late commit (`unknown_state_required`)
//! and runs `twice check` on the URLs file, at once with `--no-wait` and as it is by default.
//!
//! Then the transport's edges, with a client written here: bad lines on stdio (before
//! `initialize`, no JSON, past the 1 MiB bound) each get JSON-RPC's error and the session goes
//! on; a client that closes stdin while a tool call is held ends `twice mcp` within a bound; and
//! a client that vanishes over HTTP in the middle of a call leaves one whole refund, no half.
//!
//! Every wait is bounded; every process started here is killed and reaped when its test ends.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::executor_process::bin;

/// The longest a client script may take to print what it saw (Python's start, the SDK's
/// handshake, six calls).
const CLIENT_WAIT: Duration = Duration::from_secs(90);
/// The longest a process may take to exit once asked (stdin closed, or SIGTERM).
const EXIT_WAIT: Duration = Duration::from_secs(15);
/// The longest one answer on stdio or one HTTP exchange may take.
const ANSWER_WAIT: Duration = Duration::from_secs(20);
/// How long `twice serve` may take to write its URLs file.
const READY_WAIT: Duration = Duration::from_secs(30);
/// How often something awaited is looked at.
const POLL: Duration = Duration::from_millis(25);

/// Tools `twice mcp` must list (it may list more: each listed tool is checked all the same).
const TOOLS: [&str; 10] = [
    "refund_payment",
    "create_workspace",
    "put_file",
    "transfer",
    "send_message",
    "list_refunds",
    "find_workspace",
    "get_file",
    "get_transaction_receipt",
    "list_mailbox",
];

/// Fails unless `listed` holds every tool of [`TOOLS`], each once.
fn assert_lists_the_tools(listed: &[&str], shown: &str) {
    for tool in TOOLS {
        assert_eq!(
            listed.iter().filter(|name| **name == tool).count(),
            1,
            "{tool} is not listed once: {shown}"
        );
    }
}

/// What a tool call whose reply was lost after the refund committed reads (the text a real
/// payments SDK shows for a closed connection).
const LOST_REPLY: &str = "An error occurred with the connection to the payments API: the connection was closed before a response was received.";

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

// ---------------------------------------------------------------------------------------------
// The SDK clients.

#[test]
fn the_python_sdk_client_negotiates_the_2026_protocol_over_stdio_and_sees_the_lost_reply() {
    let dir = fresh("python-stdio-auto");
    let urls = dir.join("urls.json");
    let run = run_client(python_client(&["auto", "stdio", &twice(), &path(&urls)]), &dir, &urls);
    // `mode="auto"`: the SDK probes server/discover and adopts the modern protocol.
    assert_saw_the_lost_refund(&run, "2026-07-28");
    assert_eq!(run.seen["mode"], "auto");
}

#[test]
fn the_python_sdk_client_initializes_over_stdio_and_sees_the_lost_reply() {
    let dir = fresh("python-stdio-legacy");
    let urls = dir.join("urls.json");
    let run = run_client(python_client(&["legacy", "stdio", &twice(), &path(&urls)]), &dir, &urls);
    // `mode="legacy"`: the initialize handshake, at the newest handshake-era version.
    assert_saw_the_lost_refund(&run, "2025-11-25");
}

#[test]
fn the_python_sdk_client_negotiates_the_2026_protocol_over_streamable_http() {
    let dir = fresh("python-http-auto");
    let serve = Serve::start(&dir, "lost_refund_reply");
    let run = run_client(python_client(&["auto", "http", serve.url("mcp")]), &dir, &serve.urls_file);
    assert_saw_the_lost_refund(&run, "2026-07-28");
    serve.stop();
}

#[test]
fn the_node_sdk_client_sees_the_lost_reply_over_stdio_and_twice_exits_when_it_closes() {
    let dir = fresh("node-stdio");
    let urls = dir.join("urls.json");
    let run = run_client(node_client(&["stdio", &twice(), &path(&urls)]), &dir, &urls);
    assert_saw_the_lost_refund(&run, "2025-11-25");
    assert_eq!(run.seen["session_id"], Value::Null);
    // The SDK closes twice's stdin and gives it 2 s before SIGTERM: twice was gone before that.
    let closed = &run.closed["closed"];
    assert_eq!(closed["server_alive_after_close"], false, "{}", run.closed);
    assert!(
        closed["close_ms"].as_u64().is_some_and(|ms| ms < 2000),
        "twice outlived its stdin: {}",
        run.closed
    );
}

#[test]
fn the_node_sdk_client_sees_the_lost_reply_over_streamable_http_in_a_session() {
    let dir = fresh("node-http");
    let serve = Serve::start(&dir, "lost_refund_reply");
    let run = run_client(node_client(&["http", serve.url("mcp")]), &dir, &serve.urls_file);
    assert_saw_the_lost_refund(&run, "2025-11-25");
    assert!(
        run.seen["session_id"].as_str().is_some_and(|id| !id.is_empty()),
        "no Mcp-Session-Id: {}",
        run.seen
    );
    // The session ends with DELETE, which the server accepts.
    assert_eq!(run.closed["closed"]["terminated"], true, "{}", run.closed);
    serve.stop();
}

/// A naive agent under `unknown_state_required`: its first refund times out and commits 1.5 s
/// after it arrived, its blind retry lands at once. `twice check` on the URLs file `twice mcp`
/// wrote waits for the late commit and fails the agent with `no-duplicate-effect`; `--no-wait`,
/// asked right away, judges the one refund it can see and marks the verdict judged before the
/// world settled, naming the late commit.
#[test]
fn the_check_of_a_naive_agent_waits_for_the_late_commit_and_no_wait_is_marked() {
    let dir = fresh("python-stdio-late-commit");
    let urls = dir.join("urls.json");
    let run =
        run_client(python_client(&["auto", "stdio", &twice(), &path(&urls), "late_commit"]), &dir, &urls);
    let seen = &run.seen;
    assert!(seen["refund"]["text"].as_str().is_some_and(|t| t.contains("timed out after 500 ms")), "{seen}");
    assert_eq!(seen["refund_again"]["isError"], false, "{seen}");
    let refunds = requests(&run.journal, "POST", "/v1/refunds");
    let [first, _] = refunds[..] else { panic!("two refunds: {}", run.journal) };
    let results = |check: &str| -> Value {
        let report = seen[check]["report_dir"].as_str().expect("a report directory");
        let text = std::fs::read_to_string(Path::new(report).join("results.json"))
            .unwrap_or_else(|e| panic!("{check}: no results.json ({e}): {seen}"));
        serde_json::from_str::<Value>(&text).expect("results.json")["results"][0].clone()
    };

    assert_eq!(seen["check"]["exit_code"], 1, "the settled check fails the agent: {seen}");
    let settled = results("check");
    let violated: Vec<&Value> = settled["verdicts"]
        .as_array()
        .expect("verdicts")
        .iter()
        .filter(|v| v["status"] == "violated")
        .collect();
    assert!(violated.iter().any(|v| v["invariant"] == "no-duplicate-effect"), "{settled}");
    assert_eq!(
        (&settled["observed"]["settle"]["waited"], settled["observed"].get("pending")),
        (&json!(true), None)
    );
    let ledger = settled["observed"]["ledgers"]["payments"].as_array().expect("the payments ledger");
    assert_eq!(ledger.len(), 2, "{settled}");
    let late = ledger
        .iter()
        .find(|e| e["request_id"] == first["request_id"])
        .expect("the first refund, landed late");

    let at_once = results("check_no_wait");
    let observed = &at_once["observed"];
    assert_eq!(observed["settle"]["waited"], false, "{observed}");
    let read_at_ms = observed["ledgers_read_at_ms"].as_u64().expect("when the ledgers were read");
    if read_at_ms < late["at_ms"].as_u64().expect("at_ms") {
        // Read before the late commit landed: one refund, and the mark naming what was to come.
        assert_eq!(seen["check_no_wait"]["exit_code"], 0, "{seen}");
        let pending = observed["pending"].as_array().expect("pending");
        assert!(
            pending.iter().any(|p| p["what"] == "late-commit" && p["request_id"] == first["request_id"]),
            "{observed}"
        );
        let summary = std::fs::read_to_string(dir.join("report-no-wait/summary.md")).expect("summary.md");
        assert!(summary.contains("Judged before the world settled"), "{summary}");
    } else {
        // A machine slower than the late commit: what it read had settled, and it says so.
        println!("the --no-wait check read the ledgers after the late commit landed");
        assert_eq!((seen["check_no_wait"]["exit_code"].as_i64(), observed.get("pending")), (Some(1), None));
    }
}

/// What a client saw over one session of `lost_refund_reply`, and the fake's record of it.
struct ClientRun {
    /// The script's first line: what the client saw.
    seen: Value,
    /// The script's second line, if any (the Node script's: how closing went).
    closed: Value,
    /// `GET {payments}/__twice/ledger` and `/__twice/journal` while the session was up.
    ledger: Value,
    journal: Value,
}

/// The facts every client must have seen, and the ledger's: one refund, committed by the
/// first call (whose reply was lost), refused on the repeat; the bad arguments never sent.
fn assert_saw_the_lost_refund(run: &ClientRun, protocol_version: &str) {
    let seen = &run.seen;
    let shown = serde_json::to_string_pretty(seen).unwrap_or_default();
    assert_eq!(seen["protocol_version"], protocol_version, "{shown}");
    assert_eq!(seen["server_info"]["name"], "twice", "{shown}");
    assert_eq!(seen["has_instructions"], true, "{shown}");
    let tools: Vec<&str> =
        seen["tools"].as_array().expect("tools").iter().filter_map(Value::as_str).collect();
    assert_lists_the_tools(&tools, &shown);
    assert_eq!(seen["tool_problems"], json!({}), "a listed tool lacks what a client needs: {shown}");
    let annotations = &seen["annotations"];
    assert_eq!(
        annotations.as_object().map(|a| a.len()),
        Some(tools.len()),
        "a tool without annotations: {shown}"
    );
    assert_eq!(annotations["refund_payment"]["readOnlyHint"], false, "{shown}");
    assert_eq!(annotations["refund_payment"]["idempotentHint"], false, "{shown}");
    assert_eq!(annotations["list_refunds"]["readOnlyHint"], true, "{shown}");

    assert_eq!(seen["refund"]["isError"], true, "{shown}");
    assert_eq!(seen["refund"]["text"], LOST_REPLY, "{shown}");
    assert_eq!(seen["refund_again"]["isError"], true, "{shown}");
    let again = seen["refund_again"]["text"].as_str().unwrap_or_default();
    assert!(again.contains("HTTP 400 (charge_already_refunded)"), "{shown}");
    assert_eq!(seen["list_refunds"]["isError"], false, "{shown}");
    let listed = seen["list_refunds"]["structuredContent"]["data"].as_array().expect("list_refunds' data");
    assert_eq!(listed.len(), 1, "{shown}");
    assert_eq!((&listed[0]["payment_intent"], &listed[0]["amount"]), (&json!("pi_4812"), &json!(5000)));
    // An unknown tool is a protocol error, not a tool result.
    assert_eq!(seen["unknown_tool"]["error"]["code"], -32602, "{shown}");
    let message = seen["unknown_tool"]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("Unknown tool: no_such_tool"), "{shown}");
    assert_eq!(seen["bad_arguments"]["isError"], true, "{shown}");
    let bad = seen["bad_arguments"]["text"].as_str().unwrap_or_default();
    assert!(bad.starts_with("Invalid arguments for tool refund_payment"), "{shown}");

    // Exactly one refund, by the first request; two requests in all (the bad arguments were
    // refused before any request).
    let effects = run.ledger["effects"].as_array().expect("the ledger's effects");
    assert_eq!(effects.len(), 1, "{}", run.ledger);
    assert_eq!(effects[0]["kind"], "refund.created", "{}", run.ledger);
    assert_eq!(
        (&effects[0]["params"]["payment_intent"], &effects[0]["params"]["amount"]),
        (&json!("pi_4812"), &json!(5000))
    );
    let refunds = requests(&run.journal, "POST", "/v1/refunds");
    assert_eq!(refunds.len(), 2, "{}", run.journal);
    assert_eq!(refunds[0]["request_id"], effects[0]["request_id"], "{}", run.journal);
    assert_eq!(refunds[0]["faults"][0]["fault"], "drop_after_commit", "{}", run.journal);
    assert_eq!(refunds[1]["status"], 400, "{}", run.journal);
}

/// Runs a client script: waits for its line of what it saw, reads the payments ledger and
/// journal through `urls_file` while the script holds its session, then closes the script's
/// stdin and waits for it to close the session and exit 0.
fn run_client(mut command: Command, dir: &Path, urls_file: &Path) -> ClientRun {
    command.env("NO_PROXY", "127.0.0.1,localhost").env("no_proxy", "127.0.0.1,localhost");
    let mut client = Proc::spawn(command, dir, "client");
    let seen = client.line(CLIENT_WAIT);
    let seen: Value = serde_json::from_str(&seen)
        .unwrap_or_else(|e| panic!("{}: no JSON ({e}): {seen}\n{}", client.shown, client.stderr()));
    println!("{}: {seen}", client.shown);
    let payments = read_urls(urls_file, ANSWER_WAIT)["payments"].as_str().expect("payments' URL").to_string();
    let ledger = get_json(&payments, "/__twice/ledger");
    let journal = get_json(&payments, "/__twice/journal");
    client.close_stdin();
    let closed = match client.next_line(CLIENT_WAIT) {
        Some(line) => {
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{}: no JSON ({e}): {line}", client.shown))
        }
        None => Value::Null,
    };
    if !closed.is_null() {
        println!("{}: {closed}", client.shown);
    }
    let status = client.wait(EXIT_WAIT);
    assert!(status.success(), "{} exited with {status}:\n{}", client.shown, client.stderr());
    ClientRun { seen, closed, ledger, journal }
}

/// `$TWICE_PYTHON tests/mcp/python_client.py ARGS`.
fn python_client(args: &[&str]) -> Command {
    let python = std::env::var_os("TWICE_PYTHON").unwrap_or_else(|| {
        panic!(
            "TWICE_PYTHON is not set: the Python MCP client runs on the venv built from \
             tests/requirements.txt (mcp is pinned there). Run the tests with `cargo xtask test`, \
             or set TWICE_PYTHON=target/twice-venv/bin/python."
        )
    });
    let probe = Command::new(&python).args(["-c", "import mcp.client"]).stdin(Stdio::null()).output();
    let probe = probe.unwrap_or_else(|e| panic!("cannot run TWICE_PYTHON={}: {e}", python.to_string_lossy()));
    assert!(
        probe.status.success(),
        "TWICE_PYTHON={} has no `mcp` package (run `cargo xtask test`, which installs tests/requirements.txt): {}",
        python.to_string_lossy(),
        String::from_utf8_lossy(&probe.stderr)
    );
    let mut command = Command::new(python);
    command.arg(mcp_dir().join("python_client.py")).args(args).env("PYTHONDONTWRITEBYTECODE", "1");
    command
}

/// `node tests/mcp/node_client.mjs ARGS`, on the packages `npm ci` installed there.
fn node_client(args: &[&str]) -> Command {
    let sdk = mcp_dir().join("node_modules/@modelcontextprotocol/sdk/package.json");
    assert!(
        sdk.is_file(),
        "{} is missing: the Node MCP client runs on the packages of tests/mcp/package-lock.json. Run the \
         tests with `cargo xtask test`, which runs `npm ci` there, or run `npm ci` in tests/mcp yourself.",
        sdk.display()
    );
    let mut command = Command::new("node");
    command.arg(mcp_dir().join("node_client.mjs")).args(args);
    command
}

fn mcp_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("mcp")
}

// ---------------------------------------------------------------------------------------------
// The transport's edges.

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

/// The headers of a streamable HTTP request: JSON in, JSON or an event stream out; the
/// session and protocol version once there are.
fn mcp_headers(session: Option<&str>, version: Option<&str>) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("Content-Type", "application/json".to_string()),
        ("Accept", "application/json, text/event-stream".into()),
    ];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session.to_string()));
    }
    if let Some(version) = version {
        headers.push(("MCP-Protocol-Version", version.to_string()));
    }
    headers
}

/// The JSON-RPC message with `id` in an answer's event stream (or its JSON body).
fn sse_reply(answer: &Answer, id: u64) -> Value {
    let text = answer.text();
    let direct = serde_json::from_str::<Value>(&text).ok().into_iter();
    let events = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .filter_map(|data| serde_json::from_str(data.trim()).ok());
    direct
        .chain(events)
        .find(|message: &Value| message["id"] == id)
        .unwrap_or_else(|| panic!("no reply {id} in:\n{text}"))
}

// ---------------------------------------------------------------------------------------------
// Processes.

fn twice() -> String {
    path(&bin("twice"))
}

fn path(path: &Path) -> String {
    path.to_str().expect("a UTF-8 path").to_string()
}

/// A fresh directory for one test, under cargo's per-target temp dir.
fn fresh(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mcp-clients").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// `twice mcp --scenario SCENARIO --urls-file DIR/urls.json`, its stdin and stdout ours.
fn twice_mcp(dir: &Path, scenario: &str) -> Proc {
    let mut command = Command::new(bin("twice"));
    command.args(["mcp", "--scenario", scenario, "--urls-file"]).arg(dir.join("urls.json"));
    Proc::spawn(command, dir, "twice-mcp")
}

/// A child process with its stdin, its stdout read line by line, its stderr in a file; killed
/// and reaped when dropped.
struct Proc {
    shown: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    stderr_path: PathBuf,
}

impl Proc {
    fn spawn(mut command: Command, dir: &Path, label: &str) -> Proc {
        let shown = format!("{command:?}");
        let stderr_path = dir.join(format!("{label}.stderr"));
        let stderr = std::fs::File::create(&stderr_path).expect("the stderr file can be created");
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr);
        let mut child = command.spawn().unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stdin = child.stdin.take();
        Proc { shown, child, stdin, lines, stderr_path }
    }

    /// The next line of stdout; `None` once stdout has closed. Fails after `within`.
    fn next_line(&mut self, within: Duration) -> Option<String> {
        match self.lines.recv_timeout(within) {
            Ok(line) => Some(line),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("{}: no line within {within:?}; stderr:\n{}", self.shown, self.stderr())
            }
        }
    }

    /// The next line of stdout, which must come.
    fn line(&mut self, within: Duration) -> String {
        self.next_line(within).unwrap_or_else(|| {
            let status = self.child.try_wait().ok().flatten();
            panic!("{}: stdout closed ({status:?}); stderr:\n{}", self.shown, self.stderr())
        })
    }

    /// The next line of stdout as JSON.
    fn reply(&mut self, within: Duration) -> Value {
        let line = self.line(within);
        serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{}: a line that is no JSON ({e}): {line}", self.shown))
    }

    fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin.write_all(format!("{line}\n").as_bytes()).expect("the line can be written");
        stdin.flush().expect("stdin can be flushed");
    }

    /// Writes a line too long for a pipe's buffer from another thread, so that a reader that
    /// stopped reading fails the test rather than hanging it.
    fn send_long(&mut self, line: String) {
        let mut stdin = self.stdin.take().expect("stdin is open");
        let (done_tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            let written = stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.write_all(b"\n"))
                .and_then(|()| stdin.flush());
            let _ = done_tx.send((written.map_err(|e| e.to_string()), stdin));
        });
        let (written, stdin) = done
            .recv_timeout(ANSWER_WAIT)
            .unwrap_or_else(|_| panic!("{}: a long line was not read within {ANSWER_WAIT:?}", self.shown));
        written.unwrap_or_else(|e| panic!("{}: the long line could not be written: {e}", self.shown));
        self.stdin = Some(stdin);
    }

    /// The handshake: initialize (as request `id`) and the initialized notification.
    fn initialize(&mut self, id: u64) -> Value {
        let initialize = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}});
        self.send(&initialize.to_string());
        let reply = self.reply(ANSWER_WAIT);
        assert_eq!(reply["id"], id, "{reply}");
        assert_eq!(reply["result"]["protocolVersion"], "2025-11-25", "{reply}");
        self.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        reply
    }

    fn close_stdin(&mut self) {
        drop(self.stdin.take());
    }

    /// Waits for the process to exit; kills it and fails after `within`.
    fn wait(&mut self, within: Duration) -> ExitStatus {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("the status can be read") {
                return status;
            }
            if started.elapsed() > within {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("{} did not exit within {within:?}; stderr:\n{}", self.shown, self.stderr());
            }
            std::thread::sleep(POLL);
        }
    }

    fn stderr(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr_path).unwrap_or_default();
        let start = text.len().saturating_sub(16 * 1024);
        let start = (start..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(0);
        text[start..].to_string()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// `twice serve --mcp-port 0 --scenario SCENARIO --urls-file DIR/serve-urls.json`, ready.
struct Serve {
    process: Proc,
    urls_file: PathBuf,
    urls: BTreeMap<String, String>,
}

impl Serve {
    fn start(dir: &Path, scenario: &str) -> Serve {
        let urls_file = dir.join("serve-urls.json");
        let mut command = Command::new(bin("twice"));
        command.args(["serve", "--mcp-port", "0", "--scenario", scenario, "--urls-file"]).arg(&urls_file);
        let process = Proc::spawn(command, dir, "twice-serve");
        let urls = read_urls(&urls_file, READY_WAIT);
        let urls = urls
            .as_object()
            .expect("the URLs file holds an object")
            .iter()
            // The string entries are URLs; `accounts` lists the funded dev accounts.
            .filter_map(|(name, url)| Some((name.clone(), url.as_str()?.to_string())))
            .collect();
        Serve { process, urls_file, urls }
    }

    fn url(&self, name: &str) -> &str {
        self.urls.get(name).unwrap_or_else(|| panic!("no {name} in {:?}", self.urls))
    }

    /// SIGTERM, and a clean exit within [`EXIT_WAIT`].
    fn stop(mut self) {
        let pid = libc::pid_t::try_from(self.process.child.id()).expect("a pid");
        // SAFETY: a signal to our own child, which has not been reaped yet.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = self.process.wait(EXIT_WAIT);
        assert!(status.success(), "twice serve exited with {status}:\n{}", self.process.stderr());
    }
}

/// The URLs file once it is there (serve writes it whole, then renames it into place).
fn read_urls(file: &Path, within: Duration) -> Value {
    let started = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(file) {
            return serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{}: no JSON ({e}): {text}", file.display()));
        }
        assert!(started.elapsed() < within, "no {} within {within:?}", file.display());
        std::thread::sleep(POLL);
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP, by hand: one exchange per connection.

/// An answer: status, headers (lowercase names) and the whole body, de-chunked.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `http://host:port/path` → (`http://host:port`, `/path`).
fn split_url(url: &str) -> (&str, &str) {
    let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("not an http URL: {url}"));
    let at = rest.find('/').map_or(url.len(), |i| i + "http://".len());
    (&url[..at], if at < url.len() { &url[at..] } else { "/" })
}

/// Opens a connection to `base` and writes one request on it (`Connection: close`).
fn send_request(base: &str, method: &str, path: &str, headers: &[(&str, String)], body: &[u8]) -> TcpStream {
    let host = base.strip_prefix("http://").unwrap_or_else(|| panic!("not an http URL: {base}"));
    let mut stream = TcpStream::connect(host).unwrap_or_else(|e| panic!("cannot connect to {host}: {e}"));
    stream.set_read_timeout(Some(ANSWER_WAIT)).expect("a read timeout");
    stream.set_write_timeout(Some(ANSWER_WAIT)).expect("a write timeout");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
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

/// One exchange, read to the end of the connection within [`ANSWER_WAIT`].
fn http(base: &str, method: &str, path: &str, headers: &[(&str, String)], body: &[u8]) -> Answer {
    let mut stream = send_request(base, method, path, headers, body);
    let started = Instant::now();
    let mut raw = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buffer[..n]),
            Err(e) => {
                panic!("{method} {base}{path}: {e} after {:?}, with {} bytes", started.elapsed(), raw.len())
            }
        }
        assert!(started.elapsed() < ANSWER_WAIT, "{method} {base}{path}: no end within {ANSWER_WAIT:?}");
    }
    parse_answer(&raw)
        .unwrap_or_else(|| panic!("{method} {base}{path}: no HTTP answer: {}", String::from_utf8_lossy(&raw)))
}

fn parse_answer(raw: &[u8]) -> Option<Answer> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let mut body = raw[end + 4..].to_vec();
    let chunked = headers.iter().any(|(n, v)| n == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    if chunked {
        body = dechunk(&body)?;
    }
    Some(Answer { status, headers, body })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&rest[..line_end]).ok()?.split(';').next()?.trim().to_string();
        let size = usize::from_str_radix(&size, 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// `GET base+path` as JSON; a status other than 200 fails.
fn get_json(base: &str, path: &str) -> Value {
    let answer = http(base, "GET", path, &[], b"");
    assert_eq!(answer.status, 200, "GET {base}{path}: {}", answer.text());
    serde_json::from_slice(&answer.body)
        .unwrap_or_else(|e| panic!("GET {base}{path}: no JSON ({e}): {}", answer.text()))
}

/// The journal entries of one method and path, oldest first.
fn requests<'a>(journal: &'a Value, method: &str, path: &str) -> Vec<&'a Value> {
    let entries = journal["entries"].as_array().map(Vec::as_slice).unwrap_or_default();
    entries.iter().filter(|e| e["method"] == method && e["path"] == path).collect()
}

/// Waits until the fake's journal holds a request of `method` and `path`.
fn wait_for_request(base: &str, method: &str, path: &str) {
    let started = Instant::now();
    while requests(&get_json(base, "/__twice/journal"), method, path).is_empty() {
        assert!(started.elapsed() < ANSWER_WAIT, "no {method} {path} reached {base} within {ANSWER_WAIT:?}");
        std::thread::sleep(POLL);
    }
}
