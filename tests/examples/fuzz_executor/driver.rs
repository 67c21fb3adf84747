//! Fuzzes an executor's stdin (docs/protocol.md): each input is one session, a process fed a
//! few lines (random bytes, truncated JSON, lines over the 1 MiB limit, blank lines, valid
//! requests, valid requests with fields of random types, interleaved) and then the end of
//! input. The process must answer every complete non-blank line with one reply (events
//! aside) until a `shutdown` it acknowledged, may answer a partial last line, must exit 0
//! within a bound, and must not panic (stderr has no "panicked").
//!
//! Std only: a writer thread (a full pipe never blocks the driver), reader threads, and a
//! polled wait that kills a process past its bound.

use std::io::{Read as _, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The protocol's line limit (`executor::protocol::LINE_BYTES_MAX`).
pub const LINE_BYTES_MAX: usize = 1024 * 1024;
/// A session's bound, from spawn to exit: its drains wait at most 100 ms each.
pub const SESSION_MS_MAX: u64 = 30_000;

/// A small, seeded, dependency-free PRNG (SplitMix64): the same seed and index give the same
/// session bytes.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64, index: u64) -> Rng {
        Rng(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// In `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// A JSON value of a random type: what a "valid request with random field types" puts in a
/// field. Integers stay small (a `drain` may wait as long as its `timeout_ms` says).
fn random_value(rng: &mut Rng, depth: u32) -> Value {
    match rng.below(if depth == 0 { 9 } else { 11 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.one_in(2)),
        2 => json!(rng.below(1_000)),
        3 => json!(-(rng.below(1_000) as i64) - 1),
        4 => json!(rng.below(1_000) as f64 / 7.0),
        5 => json!("x".repeat(rng.below(40) as usize)),
        6 => json!(""),
        7 => json!("18446744073709551616"),
        8 => json!("\u{0}\u{fffd}é\n"),
        9 => Value::Array((0..rng.below(3)).map(|_| random_value(rng, depth - 1)).collect()),
        _ => {
            let mut m = serde_json::Map::new();
            for _ in 0..rng.below(3) {
                let k = rng.pick(&["id", "action", "params", "type", "msg_id", "x"]).to_string();
                m.insert(k, random_value(rng, depth - 1));
            }
            Value::Object(m)
        }
    }
}

/// A valid request of some type (the `init` names a service on a port nothing listens on:
/// the executor's sends fail fast, which is not what is under test).
fn valid_request(rng: &mut Rng, msg_id: u64) -> Value {
    let intent = match rng.below(6) {
        0 => {
            json!({"id": format!("i{}", rng.below(8)), "action": "payments.refund", "params": {"payment_intent": "pi_1", "amount": 1 + rng.below(100)}})
        }
        1 => {
            json!({"id": format!("i{}", rng.below(8)), "action": "workspaces.create", "params": {"external_id": "e1", "name": "Acme"}})
        }
        2 => {
            json!({"id": format!("i{}", rng.below(8)), "action": "files.put", "params": {"bucket": "b", "key": "k", "body": "x"}})
        }
        3 => {
            json!({"id": "s", "action": "payments.refund", "after": ["i1"], "params": {"payment_intent": {"from": "i1", "field": "id"}, "amount": 1}})
        }
        4 => {
            json!({"id": format!("r{}", rng.below(4)), "action": "payments.refund", "replaces": "i1", "params": {"payment_intent": "pi_1", "amount": 2}})
        }
        _ => {
            json!({"id": "m", "action": "messages.send", "params": {"to": "ada@example.com", "subject": "s", "body": "b"}})
        }
    };
    let mut request = match rng.below(10) {
        0..=3 => json!({"type": "propose", "intent": intent}),
        4 => json!({"type": "status"}),
        5 => json!({"type": "drain", "timeout_ms": rng.below(100)}),
        6 => json!({"type": "reconcile"}),
        7 => init(rng),
        8 => json!({"type": rng.pick(&["escalations", "teleport", "", "event", "propose_ok"])}),
        _ => json!({"type": "status", "extra": random_value(rng, 1)}),
    };
    request["msg_id"] = json!(msg_id);
    request
}

fn init(rng: &mut Rng) -> Value {
    let service = json!({"url": "http://127.0.0.1:9", "contract": {"idempotency_keys": "honored"}});
    let mut init = json!({
        "type": "init", "protocol": "twice/1", "worker_id": "w",
        "services": {"payments": service, "workspaces": service},
        "limits": {"request_timeout_ms": 200, "attempts_max": 2, "pass_pause_ms": 1},
    });
    if rng.one_in(4) {
        init["secrets"] = json!({"chain_private_key": rng.pick(&["0x12", "nope", ""])});
    }
    init
}

/// Replaces one field, somewhere in the request, with a value of a random type.
fn mistype(rng: &mut Rng, request: &mut Value) {
    let mut at = &mut *request;
    for _ in 0..3 {
        let Value::Object(map) = at else { break };
        if map.is_empty() {
            break;
        }
        let keys: Vec<String> = map.keys().cloned().collect();
        let key = keys[rng.below(keys.len() as u64) as usize].clone();
        let descend = rng.one_in(2) && map.get(&key).is_some_and(Value::is_object);
        if !descend {
            map.insert(key, random_value(rng, 2));
            return;
        }
        let Some(next) = map.get_mut(&key) else { break };
        at = next;
    }
}

/// One session's input bytes.
pub fn session(seed: u64, index: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed, index);
    let mut out = Vec::new();
    if rng.one_in(2) {
        let mut first = init(&mut rng);
        first["msg_id"] = json!(0);
        out.extend_from_slice(first.to_string().as_bytes());
        out.push(b'\n');
    }
    let lines = 1 + rng.below(12);
    for n in 1..=lines {
        match rng.below(20) {
            0..=5 => {
                let request = valid_request(&mut rng, n);
                out.extend_from_slice(request.to_string().as_bytes());
            }
            6..=9 => {
                let mut request = valid_request(&mut rng, n);
                mistype(&mut rng, &mut request);
                out.extend_from_slice(request.to_string().as_bytes());
            }
            10..=11 => {
                let text = valid_request(&mut rng, n).to_string();
                let cut = rng.below(text.len() as u64) as usize;
                out.extend_from_slice(&text.as_bytes()[..cut]);
            }
            12..=13 => {
                // Random bytes, no newline among them.
                for _ in 0..rng.below(80) {
                    let b = (rng.next() & 0xff) as u8;
                    out.push(if b == b'\n' { b'\r' } else { b });
                }
            }
            14 => out.extend_from_slice(rng.pick(&["", "   ", "\t", "\r", "\u{a0}"]).as_bytes()),
            15 => {
                // A line at the limit (served), or just over it (refused as a whole).
                let over = rng.one_in(2);
                let head = format!("{{\"type\": \"status\", \"msg_id\": {n}, \"pad\": \"");
                let tail = "\"}";
                let len = LINE_BYTES_MAX + usize::from(over) - head.len() - tail.len();
                out.extend_from_slice(head.as_bytes());
                out.resize(out.len() + len, b'x');
                out.extend_from_slice(tail.as_bytes());
            }
            16 if rng.one_in(4) => {
                // Far over the limit, not JSON at all.
                out.resize(out.len() + LINE_BYTES_MAX * 2 + rng.below(1000) as usize, b'[');
            }
            17 => {
                let text = json!({"type": "status", "msg_id": random_value(&mut rng, 1)}).to_string();
                out.extend_from_slice(text.as_bytes());
            }
            18 if rng.one_in(3) => {
                let text = json!({"type": "shutdown", "msg_id": n}).to_string();
                out.extend_from_slice(text.as_bytes());
            }
            _ => out.extend_from_slice(b"[1, 2, 3]"),
        }
        out.push(b'\n');
    }
    if rng.one_in(5) {
        // A partial last line: the end of input in the middle of a request.
        let text = valid_request(&mut rng, 999).to_string();
        let cut = 1 + rng.below(text.len() as u64 - 1) as usize;
        out.extend_from_slice(&text.as_bytes()[..cut]);
    }
    out
}

/// What a session's input asks for: the complete lines that need a reply, and whether a
/// non-blank partial line ends it.
fn expected(input: &[u8]) -> (Vec<Vec<u8>>, bool) {
    let mut complete = Vec::new();
    let mut rest = input;
    while let Some(at) = rest.iter().position(|b| *b == b'\n') {
        let line = &rest[..at];
        // Blank as the executor judges it: whitespace once read as (lossy) UTF-8.
        if !String::from_utf8_lossy(line).trim().is_empty() || line.len() > LINE_BYTES_MAX {
            complete.push(line.to_vec());
        }
        rest = &rest[at + 1..];
    }
    let partial = !String::from_utf8_lossy(rest).trim().is_empty() || rest.len() > LINE_BYTES_MAX;
    (complete, partial)
}

/// One problem, with the seed and index that reproduce it.
#[derive(Debug)]
pub struct Failure {
    pub index: u64,
    pub what: String,
}

#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub sessions: u64,
    pub lines: u64,
    pub replies: u64,
    pub errors: u64,
    pub input_bytes: u64,
    pub elapsed_ms: u64,
    pub failures: Vec<Failure>,
}

impl Report {
    pub fn print(&self) {
        println!(
            "fuzz-executor: seed {}: {} sessions, {} lines ({} MiB), {} replies ({} errors) in {:.1} s; failures: {}",
            self.seed,
            self.sessions,
            self.lines,
            self.input_bytes / (1024 * 1024),
            self.replies,
            self.errors,
            self.elapsed_ms as f64 / 1000.0,
            self.failures.len()
        );
        for f in self.failures.iter().take(20) {
            println!("  FAILURE session {}: {}", f.index, f.what);
            println!(
                "    reproduce: cargo xtask fuzz-http --target executor --seed {} --only {}",
                self.seed, f.index
            );
        }
    }
}

/// Runs sessions `indices` of `seed` against `executor`, each with a fresh state directory
/// under `scratch`.
pub fn run(executor: &Path, scratch: &Path, seed: u64, indices: impl Iterator<Item = u64>) -> Report {
    let started = Instant::now();
    let mut report = Report { seed, ..Report::default() };
    for index in indices {
        let input = session(seed, index);
        let (complete, partial) = expected(&input);
        report.sessions += 1;
        report.lines += complete.len() as u64;
        report.input_bytes += input.len() as u64;
        let dir = scratch.join(format!("s{index}"));
        let _ = std::fs::remove_dir_all(&dir);
        match run_session(executor, &dir, &input) {
            Err(what) => report.failures.push(Failure { index, what }),
            Ok(out) => {
                if let Err(what) = judge(&complete, partial, &out, &mut report) {
                    report.failures.push(Failure { index, what });
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    report
}

struct SessionOutput {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    code: Option<i32>,
}

fn run_session(executor: &Path, dir: &Path, input: &[u8]) -> Result<SessionOutput, String> {
    let mut child = Command::new(executor)
        .arg("--state-dir")
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", executor.display()))?;
    let (Some(mut stdin), Some(mut stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("no pipes".into());
    };
    let bytes = input.to_vec();
    // An executor that exits early (a `shutdown`) breaks the pipe: not a failure.
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&bytes);
    });
    let out_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stdout.read_to_end(&mut b);
        b
    });
    let err_reader = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = stderr.read_to_end(&mut b);
        b
    });
    let deadline = Instant::now() + Duration::from_millis(SESSION_MS_MAX);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let _ = writer.join();
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(format!(
            "no exit within {SESSION_MS_MAX} ms (a hang); stderr: {}",
            String::from_utf8_lossy(&stderr[stderr.len().saturating_sub(500)..])
        ));
    };
    Ok(SessionOutput { stdout, stderr, code: status.code() })
}

fn judge(
    complete: &[Vec<u8>],
    partial: bool,
    out: &SessionOutput,
    report: &mut Report,
) -> Result<(), String> {
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("panicked") {
        return Err(format!("panicked: {}", &stderr[stderr.len().saturating_sub(800)..]));
    }
    if out.code != Some(0) {
        return Err(format!(
            "exit status {:?}; stderr: {}",
            out.code,
            &stderr[stderr.len().saturating_sub(500)..]
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut replies = Vec::new();
    for line in text.lines() {
        let value: Value = serde_json::from_str(line)
            .map_err(|e| format!("a stdout line that is not JSON ({e}): {line}"))?;
        match value["type"].as_str() {
            Some("event") => {}
            Some(_) => replies.push(value),
            None => return Err(format!("a stdout line without a type: {line}")),
        }
    }
    report.replies += replies.len() as u64;
    report.errors += replies.iter().filter(|r| r["type"] == "error").count() as u64;
    for r in &replies {
        if r["type"] == "error" && (!r["code"].is_u64() || !r["text"].is_string()) {
            return Err(format!("an error without an integer code and a text: {r}"));
        }
    }
    // Up to and including an acknowledged shutdown, one reply per complete line.
    let shut = replies.iter().position(|r| r["type"] == "shutdown_ok");
    let (want, extra_allowed) = match shut {
        Some(at) => (at + 1, 0),
        None => (complete.len(), usize::from(partial)),
    };
    if shut.is_some_and(|at| at >= complete.len() + usize::from(partial)) {
        return Err("a shutdown_ok to no shutdown line".into());
    }
    if replies.len() < want || replies.len() > want + extra_allowed {
        let line =
            complete.get(replies.len()).map(|l| String::from_utf8_lossy(&l[..l.len().min(200)]).into_owned());
        return Err(format!(
            "{} replies to {} complete lines{} (first unanswered: {line:?})",
            replies.len(),
            want,
            if partial { " and a partial one" } else { "" }
        ));
    }
    Ok(())
}
