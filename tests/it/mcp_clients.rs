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
//! The transport's edges, with a client written here, are `edges.rs`; the processes and the
//! raw HTTP both use are `wire.rs`.
//!
//! Every wait is bounded; every process started here is killed and reaped when its test ends.

mod edges;
mod wire;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use wire::{ANSWER_WAIT, EXIT_WAIT, Proc, Serve, fresh, get_json, path, read_urls, requests, twice};

/// The longest a client script may take to print what it saw (Python's start, the SDK's
/// handshake, six calls).
const CLIENT_WAIT: Duration = Duration::from_secs(90);

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
pub(super) fn assert_lists_the_tools(listed: &[&str], shown: &str) {
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

// ---------------------------------------------------------------------------------------------
// The SDK clients.

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_python_sdk_client_negotiates_the_2026_protocol_over_stdio_and_sees_the_lost_reply() {
    let dir = fresh("python-stdio-auto");
    let urls = dir.join("urls.json");
    let run = run_client(python_client(&["auto", "stdio", &twice(), &path(&urls)]), &dir, &urls);
    // `mode="auto"`: the SDK probes server/discover and adopts the modern protocol.
    assert_saw_the_lost_refund(&run, "2026-07-28");
    assert_eq!(run.seen["mode"], "auto");
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
#[test]
fn the_python_sdk_client_initializes_over_stdio_and_sees_the_lost_reply() {
    let dir = fresh("python-stdio-legacy");
    let urls = dir.join("urls.json");
    let run = run_client(python_client(&["legacy", "stdio", &twice(), &path(&urls)]), &dir, &urls);
    // `mode="legacy"`: the initialize handshake, at the newest handshake-era version.
    assert_saw_the_lost_refund(&run, "2025-11-25");
}

#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
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
/// asked right away, judges the one refund it can see, marks the verdict judged before the
/// world settled, naming the late commit, and exits 3 (no verdict yet), not 0.
#[ignore = "needs the SDK venv that cargo xtask test prepares (TWICE_PYTHON)"]
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
        // Read before the late commit landed: one refund, the mark naming what was to come,
        // and no verdict yet (exit 3, not a pass: the late refund is still on its way).
        assert_eq!(seen["check_no_wait"]["exit_code"], 3, "{seen}");
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
