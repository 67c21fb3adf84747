//! `twice check-executor CMD`: a conformance kit for executors written by others.
//!
//! First the protocol rules of `twice/1` (`docs/protocol.md`), each a named check with a
//! one-line verdict. Every check is a short session of its own: a fresh process of `CMD` in
//! its own process group, on its own state directory, against the fakes on loopback (an
//! `init` needs real service URLs). Every line is awaited within a bound and the process group
//! is killed when the check ends, so an executor that stays silent, writes garbage, dies
//! mid-line or hangs costs one bound, never a hung harness. `init-answered` runs first; the
//! other rules need a working `init` and run side by side.
//!
//! Then, when `init` works, the catalog (narrowed with `--scenario`, plus `--cases` generated
//! cases) in the live driver, and the conformance table: one row per action the executor
//! announced (and per action the scenarios use that it did not announce), one column per
//! failure mode (the catalog's `failure_mode` slugs), each cell `passed`,
//! `violated (INVARIANTS)`, `unsupported`, or `-` where no scenario combines them.
//!
//! A scenario's verdicts belong to the whole scenario, so a scenario that uses two actions
//! counts for both rows (the checker does not tell which intent broke an invariant).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use executor::model::State;
use fake_services::{Clock, Fakes, Server, TokioClock};
use scenarios::{IntentSpec, Scenario};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::cli::{self, CheckArgs};
use crate::exit;
use crate::live::{
    self, ExecutorCommand, Spawned, Tail, describe, excerpt, lock, signal_group, spawn_executor,
};
use crate::run::{self, Case, Driver, Outcome, RunResults, ScenarioResult, Source};
use crate::setup;

/// `init_ok` must come this soon after `init` (docs/protocol.md §9).
pub const INIT_MS_MAX: u64 = live::INIT_MS_MAX;
/// Every other reply of a check but the probe drain's (§9: `propose_ok`, `status_ok`).
pub const REPLY_MS_MAX: u64 = live::REPLY_MS_MAX;
/// The process must have exited this soon after `shutdown_ok` (§9).
pub const EXIT_AFTER_SHUTDOWN_MS_MAX: u64 = live::SHUTDOWN_MS_MAX;
/// The `timeout_ms` of the drain `replies-well-formed` asks for.
pub const PROBE_DRAIN_MS: u64 = 2_000;
/// Added to a drain's `timeout_ms` for its reply (§9: the drain's `timeout_ms` + 5 s).
const DRAIN_REPLY_SLACK_MS: u64 = 5_000;
/// After its last reply, `replies-well-formed` wants stdout quiet this long: a line then is one
/// nobody asked for.
pub const QUIET_MS: u64 = 300;
/// Stdout lines read ahead of the check that consumes them; an executor that floods stdout
/// waits for the check instead of growing the harness.
const QUEUED_LINES_MAX: usize = 64;
/// How many characters of a process's stderr (its newest) a verdict quotes.
const STDERR_QUOTE_CHARS_MAX: usize = 300;
/// How much of a rule's detail `conformance.md` keeps (a table cell, one line).
const DETAIL_CHARS_MAX: usize = 300;
/// Stopping the fakes' servers after the checks.
const SERVER_STOP_MS_MAX: u64 = 5_000;
/// The worker id of every check; a restart keeps it, as after a crash in a scenario.
const WORKER: &str = scenarios::model::FIRST_WORKER;
/// The table's column for generated cases, which have no failure mode.
pub const GENERATED_COLUMN: &str = "generated";
/// The table's column for scenario files without a `failure_mode`.
pub const UNCLASSIFIED_COLUMN: &str = "unclassified";
/// The files `check-executor` writes next to the usual report files.
pub const CONFORMANCE_MD: &str = "conformance.md";
pub const CONFORMANCE_JSON: &str = "conformance.json";
/// The version of `conformance.json`'s shape.
pub const CONFORMANCE_SCHEMA: &str = "twice.conformance/1";

// ---------------------------------------------------------------------------------------------
// The rules

/// One protocol rule: a stable name, what its check sends and what it expects back.
#[derive(Debug, Clone, Copy)]
pub struct Rule {
    pub name: &'static str,
    pub sends: &'static str,
    pub expects: &'static str,
}

pub const INIT_ANSWERED: Rule = Rule {
    name: "init-answered",
    sends: "init, as the live driver sends it (the four services on loopback with their contracts, \
            secrets, limits, a fresh state_dir)",
    expects: "init_ok within 10 s, in_reply_to 1, with executor {name, version} (strings) and \
              actions (a list of strings), and nothing else on stdout before it",
};

pub const REPLIES_WELL_FORMED: Rule = Rule {
    name: "replies-well-formed",
    sends: "init, propose (an intent of the first announced action the catalog uses) twice, \
            status, status with ids, reconcile, drain (timeout_ms 2000)",
    expects: "every stdout line one JSON object with a string type: events with string intent_id \
              and a known state; replies with in_reply_to the request's msg_id and type \
              <request>_ok or error (integer code, string text); propose_ok and status_ok \
              carrying intent views (string id, known state); nothing on stdout for 300 ms after \
              the last reply",
};

pub const BAD_LINE_CODE_12: Rule = Rule {
    name: "bad-line-code-12",
    sends: "init, then three lines that are no request (`this is not json`, `[1, 2, 3]`, \
            `{\"type\": \"status\"}` without msg_id), then status",
    expects: "an error with code 12 and in_reply_to null for each bad line, then status_ok: the \
              executor keeps serving",
};

pub const UNKNOWN_TYPE_CODE_10: Rule = Rule {
    name: "unknown-type-code-10",
    sends: "a request of type teleport before init, init, teleport again, then status",
    expects: "an error with code 10 to both teleports (§3.7), init_ok, then status_ok",
};

pub const UNKNOWN_ACTION_REFUSED: Rule = Rule {
    name: "unknown-action-refused",
    sends: "init, a propose of an action the executor did not announce (mail.send), then status \
            with its id",
    expects: "an error with code 10 (§3.2, §4), and a status_ok that does not list the intent (a \
              definite error did nothing)",
};

pub const PROPOSE_SURVIVES_SIGKILL: Rule = Rule {
    name: "propose-survives-sigkill",
    sends: "init, propose; SIGKILL to the process group; a new process on the same state_dir \
            and worker_id: init, status",
    expects: "propose_ok, then a status_ok after the restart that lists the intent (§8: \
              propose_ok means durable)",
};

pub const SHUTDOWN_CLEAN: Rule = Rule {
    name: "shutdown-clean",
    sends: "init, shutdown",
    expects: "shutdown_ok, then the process exits with status 0 within 5 s",
};

/// Every rule, in the order they are reported.
pub const RULES: [Rule; 7] = [
    INIT_ANSWERED,
    REPLIES_WELL_FORMED,
    BAD_LINE_CODE_12,
    UNKNOWN_TYPE_CODE_10,
    UNKNOWN_ACTION_REFUSED,
    PROPOSE_SURVIVES_SIGKILL,
    SHUTDOWN_CLEAN,
];

/// A rule's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Passed,
    Failed,
    /// Not judged: what the rule needs is missing (a working `init`, an announced action).
    Skipped,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Passed => "PASS",
            Status::Failed => "FAIL",
            Status::Skipped => "SKIP",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
        }
    }
}

/// One rule's verdict: what was expected, and what came (or what passed).
#[derive(Debug, Clone, Serialize)]
pub struct RuleVerdict {
    pub rule: &'static str,
    pub status: Status,
    /// What the check sends, for the reader of `conformance.json`.
    pub sends: &'static str,
    pub expected: &'static str,
    pub detail: String,
}

/// What a check found: `Ok` a pass with a note, `Err` what came instead of what was expected.
type Checked = Result<String, String>;

fn verdict(rule: &Rule, checked: Checked) -> RuleVerdict {
    let (status, detail) = match checked {
        Ok(detail) => (Status::Passed, detail),
        Err(detail) => (Status::Failed, detail),
    };
    RuleVerdict { rule: rule.name, status, sends: rule.sends, expected: rule.expects, detail }
}

fn skipped(rule: &Rule, why: &str) -> RuleVerdict {
    RuleVerdict {
        rule: rule.name,
        status: Status::Skipped,
        sends: rule.sends,
        expected: rule.expects,
        detail: why.to_string(),
    }
}

/// What the executor said in `init_ok`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Init {
    /// It answered `init` with an `init_ok`: the live driver can run it.
    pub works: bool,
    pub name: Option<String>,
    pub version: Option<String>,
    /// The actions it announced, sorted.
    pub actions: Vec<String>,
}

impl Init {
    fn of(reply: &Map<String, Value>) -> Init {
        let executor = reply.get("executor");
        let text = |field: &str| executor.and_then(|e| e.get(field)).and_then(Value::as_str).map(plain);
        let mut actions: Vec<String> = reply
            .get("actions")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        actions.sort();
        actions.dedup();
        Init { works: true, name: text("name"), version: text("version"), actions }
    }

    fn supports(&self, action: &str) -> bool {
        self.actions.iter().any(|a| a == action)
    }
}

/// Why an `init_ok` is not the shape §3.1 gives, if it is not.
fn init_ok_problem(reply: &Map<String, Value>) -> Option<&'static str> {
    let executor = reply.get("executor").and_then(Value::as_object);
    let string = |field: &str| executor.and_then(|e| e.get(field)).is_some_and(Value::is_string);
    if executor.is_none() {
        return Some("an init_ok without an executor object");
    }
    if !string("name") || !string("version") {
        return Some("an init_ok whose executor lacks a string name and version");
    }
    match reply.get("actions").and_then(Value::as_array) {
        None => Some("an init_ok without an actions list"),
        Some(actions) if !actions.iter().all(Value::is_string) => {
            Some("an init_ok whose actions are not all strings")
        }
        Some(_) => None,
    }
}

/// Executor text made safe for one terminal line: no control characters, bounded length.
fn plain(text: &str) -> String {
    const CHARS_MAX: usize = 120;
    let mut out: String =
        text.chars().take(CHARS_MAX).map(|c| if c.is_control() { '?' } else { c }).collect();
    if text.chars().count() > CHARS_MAX {
        out.push('…');
    }
    out
}

fn known_state(state: &str) -> bool {
    State::ALL.iter().any(|s| s.as_str() == state)
}

// ---------------------------------------------------------------------------------------------
// A session with one process

/// What the stdout reader hands on.
enum Out {
    Line(String),
    /// The stream ended inside a line: the process died (or closed stdout) mid-message.
    Partial(String),
    TooLong,
}

/// A reply to a request (or to a bad line), well-formed as far as the rules go.
enum Reply {
    Ok { object: Map<String, Value>, line: String },
    Error { code: i64, line: String },
}

impl Reply {
    fn line(&self) -> &str {
        match self {
            Reply::Ok { line, .. } | Reply::Error { line, .. } => line,
        }
    }
}

/// One process of the executor, in its own process group, spoken to one request at a time.
struct Session {
    child: Child,
    pgid: u32,
    stdin: ChildStdin,
    out: mpsc::Receiver<Out>,
    stderr: Arc<Mutex<Tail>>,
    stderr_task: JoinHandle<()>,
    next_msg_id: u64,
}

async fn read_stdout(stdout: ChildStdout, tx: mpsc::Sender<Out>) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader).take(live::LINE_BYTES_MAX as u64 + 1).read_until(b'\n', &mut line).await;
        if !matches!(read, Ok(n) if n > 0) {
            // Dropping the sender tells the session that stdout ended.
            return;
        }
        let out = if line.len() > live::LINE_BYTES_MAX {
            Out::TooLong
        } else if !line.ends_with(b"\n") {
            Out::Partial(String::from_utf8_lossy(&line).into_owned())
        } else {
            Out::Line(String::from_utf8_lossy(&line).into_owned())
        };
        let last = !matches!(out, Out::Line(_));
        if tx.send(out).await.is_err() || last {
            return;
        }
    }
}

impl Session {
    fn start(command: &ExecutorCommand) -> Result<Session, String> {
        let Spawned { child, pgid, stdin, stdout, stderr, stderr_task } = spawn_executor(command)?;
        let (tx, out) = mpsc::channel(QUEUED_LINES_MAX);
        tokio::spawn(read_stdout(stdout, tx));
        Ok(Session { child, pgid, stdin, out, stderr, stderr_task, next_msg_id: 1 })
    }

    /// The newest of its stderr, for a verdict.
    async fn stderr_note(&mut self) -> String {
        if !self.stderr_task.is_finished() {
            let bound = Duration::from_millis(live::STDERR_FLUSH_MS_MAX);
            let _ = tokio::time::timeout(bound, &mut self.stderr_task).await;
        }
        let text = lock(&self.stderr).text();
        let chars: Vec<char> = text.chars().collect();
        let start = chars.len().saturating_sub(STDERR_QUOTE_CHARS_MAX);
        let newest: String = chars[start..].iter().collect();
        let cut = if start > 0 { "…" } else { "" };
        format!(
            "stderr: {cut}{}",
            newest.replace(|c: char| c.is_control() && c != '\n', "?").replace('\n', " / ")
        )
    }

    /// Why stdout ended: the exit status if the process is gone within the bound.
    async fn ended_note(&mut self) -> String {
        let bound = Duration::from_millis(live::EXIT_MS_MAX);
        let exit = match tokio::time::timeout(bound, self.child.wait()).await {
            Ok(Ok(status)) => format!("the process exited with {}", describe(status)),
            Ok(Err(e)) => format!("no exit status: {e}"),
            Err(_) => format!("it closed stdout and did not exit within {} ms", live::EXIT_MS_MAX),
        };
        format!("{exit}; {}", self.stderr_note().await)
    }

    /// Writes one line (a `\n` is added), within a bound.
    async fn send_line(&mut self, line: &str) -> Result<(), String> {
        let bytes = format!("{line}\n");
        let write = async {
            self.stdin.write_all(bytes.as_bytes()).await?;
            self.stdin.flush().await
        };
        match tokio::time::timeout(Duration::from_millis(live::WRITE_MS_MAX), write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(format!("its stdin is closed ({})", self.ended_note().await)),
            Err(_) => Err(format!(
                "it did not read its stdin for {} ms; {}",
                live::WRITE_MS_MAX,
                self.stderr_note().await
            )),
        }
    }

    /// Sends a request of type `kind` and waits up to `bound_ms` for its reply.
    async fn request(&mut self, kind: &str, mut fields: Value, bound_ms: u64) -> Result<Reply, String> {
        let msg_id = self.next_msg_id;
        self.next_msg_id += 1;
        if let Some(map) = fields.as_object_mut() {
            map.insert("type".into(), json!(kind));
            map.insert("msg_id".into(), json!(msg_id));
        }
        self.send_line(&fields.to_string()).await.map_err(|e| format!("{kind}: {e}"))?;
        self.reply(Some(msg_id), Some(kind), bound_ms).await.map_err(|e| format!("{kind}: {e}"))
    }

    /// The next reply, every line before it checked: events must be well-formed, and the
    /// reply must answer `reply_to` (`None`: a line without a msg_id, answered with
    /// `in_reply_to` null) with `<kind>_ok` or `error`.
    async fn reply(
        &mut self,
        reply_to: Option<u64>,
        kind: Option<&str>,
        bound_ms: u64,
    ) -> Result<Reply, String> {
        let deadline = Instant::now() + Duration::from_millis(bound_ms);
        loop {
            let out = match tokio::time::timeout_at(deadline, self.out.recv()).await {
                Err(_) => return Err(format!("no reply within {bound_ms} ms; {}", self.stderr_note().await)),
                Ok(None) => {
                    return Err(format!("stdout ended before the reply ({})", self.ended_note().await));
                }
                Ok(Some(out)) => out,
            };
            let line = match out {
                Out::Line(line) => line,
                Out::TooLong => {
                    return Err(format!("a stdout line longer than {} bytes", live::LINE_BYTES_MAX));
                }
                Out::Partial(fragment) => {
                    return Err(format!(
                        "half a line, then stdout ended: {} ({})",
                        excerpt(fragment.trim_end()),
                        self.ended_note().await
                    ));
                }
            };
            let text = line.trim();
            if text.is_empty() {
                continue;
            }
            let object = match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(object)) => object,
                Ok(_) => return Err(format!("a line that is JSON but not an object: {}", excerpt(text))),
                Err(_) => return Err(format!("a line that is not JSON: {}", excerpt(text))),
            };
            let Some(ty) = object.get("type").and_then(Value::as_str) else {
                return Err(format!("an object without a string type: {}", excerpt(text)));
            };
            if ty == "event" {
                let field = |name: &str| object.get(name).and_then(Value::as_str);
                match (field("intent_id"), field("state")) {
                    (Some(_), Some(state)) if known_state(state) => continue,
                    _ => {
                        return Err(format!(
                            "an event without a string intent_id and a known state: {}",
                            excerpt(text)
                        ));
                    }
                }
            }
            let in_reply_to = object.get("in_reply_to");
            let answers = match reply_to {
                Some(id) => in_reply_to.and_then(Value::as_u64) == Some(id),
                None => in_reply_to.is_none_or(Value::is_null),
            };
            if !answers {
                let want = reply_to.map_or("null".to_string(), |id| id.to_string());
                let got = in_reply_to.map_or("missing".to_string(), Value::to_string);
                return Err(format!(
                    "a reply with in_reply_to {got} where {want} was due: {}",
                    excerpt(text)
                ));
            }
            if ty == "error" {
                let Some(code) = object.get("code").and_then(Value::as_i64) else {
                    return Err(format!("an error without an integer code: {}", excerpt(text)));
                };
                if !object.get("text").is_some_and(Value::is_string) {
                    return Err(format!("an error without a string text: {}", excerpt(text)));
                }
                return Ok(Reply::Error { code, line: text.to_string() });
            }
            let expected = kind.map(|k| format!("{k}_ok"));
            if expected.as_deref() != Some(ty) {
                let wanted = expected.map_or("error".to_string(), |e| format!("{e} or error"));
                return Err(format!("a reply of type {ty:?} where {wanted} was due: {}", excerpt(text)));
            }
            return Ok(Reply::Ok { object, line: text.to_string() });
        }
    }

    /// Stdout stays quiet for `ms`: any line then is one nobody asked for.
    async fn quiet(&mut self, ms: u64) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_millis(ms);
        loop {
            match tokio::time::timeout_at(deadline, self.out.recv()).await {
                Err(_) | Ok(None) => return Ok(()),
                Ok(Some(Out::Line(line))) if line.trim().is_empty() => {}
                Ok(Some(Out::Line(line) | Out::Partial(line))) => {
                    return Err(format!(
                        "a line after the last reply, with no request: {}",
                        excerpt(line.trim())
                    ));
                }
                Ok(Some(Out::TooLong)) => return Err("a stdout line longer than 1 MiB".into()),
            }
        }
    }

    /// Waits up to `ms` for the process to exit by itself.
    async fn exit_within(&mut self, ms: u64) -> Option<ExitStatus> {
        tokio::time::timeout(Duration::from_millis(ms), self.child.wait()).await.ok().and_then(Result::ok)
    }

    /// SIGKILL to the whole process group (a wrapper's children too), then reaps the leader.
    async fn kill(mut self) {
        let _ = signal_group(self.pgid, "KILL").await;
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_millis(live::EXIT_MS_MAX), self.child.wait()).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The checks

/// What every check shares: the command, the fakes' services and one sample intent per action.
struct Probe<'a> {
    command: &'a ExecutorCommand,
    dir: PathBuf,
    services: BTreeMap<String, executor::Service>,
    samples: Vec<IntentSpec>,
}

/// The scenario the checks' fakes are prepared for: one intent per action, whose parameters
/// the samples reuse, so that a refund has its payment intent, a put its bucket and a transfer
/// its funded account.
fn fixture() -> Result<Scenario, serde_json::Error> {
    serde_json::from_value(json!({
        "name": "conformance",
        "intents": [
            {"id": "probe-refund", "action": "payments.refund",
             "params": {"payment_intent": "pi_conformance", "amount": 100}},
            {"id": "probe-workspace", "action": "workspaces.create",
             "params": {"external_id": "ws-conformance", "name": "Conformance"}},
            {"id": "probe-file", "action": "files.put",
             "params": {"bucket": "conformance", "key": "probe.txt", "body": "twice"}},
            {"id": "probe-transfer", "action": "chain.transfer",
             "params": {"to": format!("0x{:0>40}", "c0de"), "value": "1000"}},
        ],
    }))
}

impl Probe<'_> {
    fn state_dir(&self, rule: &Rule) -> Result<PathBuf, String> {
        let dir = self.dir.join(rule.name).join("state");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("the harness cannot create {}: {e}", dir.display()))?;
        Ok(dir)
    }

    fn init(&self, state_dir: &Path) -> Value {
        json!({
            "protocol": executor::protocol::PROTOCOL,
            "worker_id": WORKER,
            "state_dir": state_dir,
            "services": self.services,
            "secrets": setup::secrets(),
            "limits": setup::limits(),
        })
    }

    /// An intent with id `id` for the first announced action that has a sample.
    fn sample(&self, init: &Init, id: &str) -> Option<Value> {
        let spec = self.samples.iter().find(|s| init.supports(&s.action))?;
        Some(json!({"id": id, "action": spec.action, "params": spec.params}))
    }

    /// A new process, answered `init` with `init_ok`.
    async fn start_and_init(&self, state_dir: &Path) -> Result<Session, String> {
        let mut session = Session::start(self.command)?;
        match session.request("init", self.init(state_dir), INIT_MS_MAX).await {
            Ok(Reply::Ok { .. }) => Ok(session),
            Ok(Reply::Error { code, line, .. }) => {
                session.kill().await;
                Err(format!("init was refused with code {code}: {}", excerpt(&line)))
            }
            Err(e) => {
                session.kill().await;
                Err(e)
            }
        }
    }
}

fn unsupported_note() -> String {
    let known = executor::model::ACTIONS.join(", ");
    format!("the executor announced none of the actions this rule can propose ({known})")
}

async fn init_answered(probe: &Probe<'_>) -> (Checked, Init) {
    let state_dir = match probe.state_dir(&INIT_ANSWERED) {
        Ok(dir) => dir,
        Err(e) => return (Err(e), Init::default()),
    };
    let mut session = match Session::start(probe.command) {
        Ok(s) => s,
        Err(e) => return (Err(e), Init::default()),
    };
    let reply = session.request("init", probe.init(&state_dir), INIT_MS_MAX).await;
    session.kill().await;
    match reply {
        Err(e) => (Err(e), Init::default()),
        Ok(Reply::Error { code, line, .. }) => {
            (Err(format!("an error instead of init_ok, code {code}: {}", excerpt(&line))), Init::default())
        }
        Ok(Reply::Ok { object, line }) => {
            let init = Init::of(&object);
            let checked = match init_ok_problem(&object) {
                Some(why) => Err(format!("{why}: {}", excerpt(&line))),
                None => Ok(format!(
                    "init_ok within {INIT_MS_MAX} ms: {} {}, actions: {}",
                    init.name.as_deref().unwrap_or("?"),
                    init.version.as_deref().unwrap_or("?"),
                    if init.actions.is_empty() {
                        "none".to_string()
                    } else {
                        plain(&init.actions.join(", "))
                    }
                )),
            };
            (checked, init)
        }
    }
}

/// An intent view (§6) as far as the rules need it: a string id (`id` if given) and a known
/// state.
fn intent_view(view: Option<&Value>, id: Option<&str>) -> Result<(), String> {
    let view = view.and_then(Value::as_object).ok_or("no intent object")?;
    let got = view.get("id").and_then(Value::as_str).ok_or("an intent without a string id")?;
    if id.is_some_and(|id| id != got) {
        return Err(format!("an intent with id {got:?}, not the one proposed"));
    }
    match view.get("state").and_then(Value::as_str) {
        Some(state) if known_state(state) => Ok(()),
        _ => Err(format!("intent {got:?} without a known state")),
    }
}

fn status_views(reply: &Reply) -> Result<Vec<(String, String)>, String> {
    let Reply::Ok { object, line } = reply else { return Ok(Vec::new()) };
    let intents = object
        .get("intents")
        .and_then(Value::as_array)
        .ok_or(format!("a status_ok without an intents list: {}", excerpt(line)))?;
    intents
        .iter()
        .map(|view| {
            intent_view(Some(view), None)
                .map_err(|why| format!("status_ok with {why}: {}", excerpt(line)))?;
            let field = |name: &str| view.get(name).and_then(Value::as_str).unwrap_or_default().to_string();
            Ok((field("id"), field("state")))
        })
        .collect()
}

async fn replies_well_formed(probe: &Probe<'_>, init: &Init) -> Checked {
    let state_dir = probe.state_dir(&REPLIES_WELL_FORMED)?;
    let mut session = probe.start_and_init(&state_dir).await?;
    let checked = replies_session(&mut session, probe, init).await;
    session.kill().await;
    checked
}

async fn replies_session(session: &mut Session, probe: &Probe<'_>, init: &Init) -> Checked {
    const ID: &str = "replies-well-formed-1";
    let mut asked = vec!["init"];
    if let Some(intent) = probe.sample(init, ID) {
        // The same intent twice: `propose` is idempotent by id (§3.2), and both replies count.
        for _ in 0..2 {
            let reply = session.request("propose", json!({"intent": intent}), REPLY_MS_MAX).await?;
            if let Reply::Ok { object, line } = &reply {
                intent_view(object.get("intent"), Some(ID))
                    .map_err(|why| format!("propose: a propose_ok with {why}: {}", excerpt(line)))?;
            }
            asked.push("propose");
        }
    }
    let reply = session.request("status", json!({}), REPLY_MS_MAX).await?;
    status_views(&reply)?;
    let reply = session.request("status", json!({"ids": [ID, "never-proposed"]}), REPLY_MS_MAX).await?;
    status_views(&reply)?;
    asked.extend(["status", "status"]);
    session.request("reconcile", json!({}), REPLY_MS_MAX).await?;
    asked.push("reconcile");
    let drain = json!({"timeout_ms": PROBE_DRAIN_MS});
    session.request("drain", drain, PROBE_DRAIN_MS + DRAIN_REPLY_SLACK_MS).await?;
    asked.push("drain");
    session.quiet(QUIET_MS).await?;
    Ok(format!("{} requests ({}), every line well-formed", asked.len(), asked.join(", ")))
}

/// Lines that are no request: not JSON, not an object, and an object without a msg_id.
pub const BAD_LINES: [&str; 3] = ["this is not json", "[1, 2, 3]", r#"{"type": "status"}"#];

async fn bad_line_code_12(probe: &Probe<'_>) -> Checked {
    let state_dir = probe.state_dir(&BAD_LINE_CODE_12)?;
    let mut session = probe.start_and_init(&state_dir).await?;
    let checked = bad_line_session(&mut session).await;
    session.kill().await;
    checked
}

async fn bad_line_session(session: &mut Session) -> Checked {
    for bad in BAD_LINES {
        session.send_line(bad).await.map_err(|e| format!("writing {bad:?}: {e}"))?;
        match session.reply(None, None, REPLY_MS_MAX).await {
            Ok(Reply::Error { code: 12, .. }) => {}
            Ok(reply) => {
                return Err(format!("{bad:?} was answered with {}", excerpt(reply.line())));
            }
            Err(e) => return Err(format!("after {bad:?}: {e}")),
        }
    }
    match session.request("status", json!({}), REPLY_MS_MAX).await {
        Ok(Reply::Ok { .. }) => {
            Ok(format!("code 12 to each of {} bad lines, then status_ok", BAD_LINES.len()))
        }
        Ok(reply) => Err(format!("after the bad lines, status got {}", excerpt(reply.line()))),
        Err(e) => Err(format!("after the bad lines, it stopped serving: {e}")),
    }
}

async fn unknown_type_code_10(probe: &Probe<'_>) -> Checked {
    let state_dir = probe.state_dir(&UNKNOWN_TYPE_CODE_10)?;
    let mut session = Session::start(probe.command)?;
    let checked = unknown_type_session(&mut session, probe, &state_dir).await;
    session.kill().await;
    checked
}

async fn teleport(session: &mut Session, when: &str) -> Result<(), String> {
    match session.request("teleport", json!({}), REPLY_MS_MAX).await {
        Ok(Reply::Error { code: 10, .. }) => Ok(()),
        Ok(reply) => Err(format!("a teleport {when} was answered with {}", excerpt(reply.line()))),
        Err(e) => Err(format!("{e} (a teleport {when})")),
    }
}

async fn unknown_type_session(session: &mut Session, probe: &Probe<'_>, state_dir: &Path) -> Checked {
    teleport(session, "before init").await?;
    match session.request("init", probe.init(state_dir), INIT_MS_MAX).await? {
        Reply::Ok { .. } => {}
        Reply::Error { line, .. } => {
            return Err(format!("init after a teleport was refused: {}", excerpt(&line)));
        }
    }
    teleport(session, "after init").await?;
    match session.request("status", json!({}), REPLY_MS_MAX).await? {
        Reply::Ok { .. } => Ok("code 10 before and after init, then status_ok".into()),
        reply => Err(format!("after the teleports, status got {}", excerpt(reply.line()))),
    }
}

async fn unknown_action_refused(probe: &Probe<'_>, init: &Init) -> Checked {
    let state_dir = probe.state_dir(&UNKNOWN_ACTION_REFUSED)?;
    let mut session = probe.start_and_init(&state_dir).await?;
    let checked = unknown_action_session(&mut session, init).await;
    session.kill().await;
    checked
}

async fn unknown_action_session(session: &mut Session, init: &Init) -> Checked {
    const ID: &str = "unknown-action-1";
    let action =
        ["mail.send", "twice.unannounced"].into_iter().find(|a| !init.supports(a)).unwrap_or("mail.send");
    let intent = json!({"id": ID, "action": action, "params": {"to": "ops@example.com", "text": "x"}});
    match session.request("propose", json!({"intent": intent}), REPLY_MS_MAX).await? {
        Reply::Error { code: 10, .. } => {}
        reply => return Err(format!("a propose of {action} was answered with {}", excerpt(reply.line()))),
    }
    let reply = session.request("status", json!({"ids": [ID]}), REPLY_MS_MAX).await?;
    if let Reply::Error { line, .. } = &reply {
        return Err(format!("status after the refusal got {}", excerpt(line)));
    }
    if status_views(&reply)?.iter().any(|(id, _)| id == ID) {
        return Err(format!("the refused intent is listed by status: {}", excerpt(reply.line())));
    }
    Ok(format!("code 10 to a propose of {action}, and status does not list it"))
}

async fn propose_survives_sigkill(probe: &Probe<'_>, init: &Init) -> Option<Checked> {
    const ID: &str = "propose-survives-sigkill-1";
    let intent = probe.sample(init, ID)?;
    Some(survives(probe, intent, ID).await)
}

async fn survives(probe: &Probe<'_>, intent: Value, id: &str) -> Checked {
    let state_dir = probe.state_dir(&PROPOSE_SURVIVES_SIGKILL)?;
    let mut first = probe.start_and_init(&state_dir).await?;
    let proposed = first.request("propose", json!({"intent": intent}), REPLY_MS_MAX).await;
    // The crash: SIGKILL to the group right after propose_ok, no shutdown.
    first.kill().await;
    match proposed? {
        Reply::Ok { .. } => {}
        Reply::Error { line, .. } => {
            return Err(format!(
                "propose got an error, not the propose_ok this rule needs: {}",
                excerpt(&line)
            ));
        }
    }
    let mut second = probe
        .start_and_init(&state_dir)
        .await
        .map_err(|e| format!("after the SIGKILL, a new process: {e}"))?;
    let reply = second.request("status", json!({}), REPLY_MS_MAX).await;
    second.kill().await;
    let reply = reply.map_err(|e| format!("after the SIGKILL and a restart: {e}"))?;
    if let Reply::Error { line, .. } = &reply {
        return Err(format!("status after the restart got {}", excerpt(line)));
    }
    match status_views(&reply)?.into_iter().find(|(got, _)| got == id) {
        Some((_, state)) => {
            Ok(format!("{id} listed as {state} after SIGKILL and a restart on the same state_dir"))
        }
        None => Err(format!(
            "intent {id} got propose_ok, but after SIGKILL and a restart on the same state_dir status does not list it: {}",
            excerpt(reply.line())
        )),
    }
}

async fn shutdown_clean(probe: &Probe<'_>) -> Checked {
    let state_dir = probe.state_dir(&SHUTDOWN_CLEAN)?;
    let mut session = probe.start_and_init(&state_dir).await?;
    let checked = shutdown_session(&mut session).await;
    session.kill().await;
    checked
}

async fn shutdown_session(session: &mut Session) -> Checked {
    match session.request("shutdown", json!({}), REPLY_MS_MAX).await? {
        Reply::Ok { .. } => {}
        Reply::Error { line, .. } => return Err(format!("shutdown got {}", excerpt(&line))),
    }
    match session.exit_within(EXIT_AFTER_SHUTDOWN_MS_MAX).await {
        Some(status) if status.success() => Ok("shutdown_ok, then exit status 0".into()),
        Some(status) => Err(format!(
            "shutdown_ok, then the process exited with {}; {}",
            describe(status),
            session.stderr_note().await
        )),
        None => Err(format!(
            "shutdown_ok, but the process was still running {EXIT_AFTER_SHUTDOWN_MS_MAX} ms later"
        )),
    }
}

/// The protocol rules' verdicts, and what `init_ok` said.
#[derive(Debug, Clone)]
pub struct Protocol {
    pub init: Init,
    pub verdicts: Vec<RuleVerdict>,
}

/// Runs every protocol rule against `command`, with the fakes on loopback; `dir` holds the
/// checks' state directories. An `Err` is a harness problem (the fakes could not start).
pub async fn check_protocol(command: &ExecutorCommand, dir: &Path, seed: u64) -> anyhow::Result<Protocol> {
    let fixture = fixture().context("the conformance fixture")?;
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::from_wall_clock());
    let fakes = Fakes::new(clock, seed);
    setup::prepare(&fixture, &fakes)?;
    let contracts = setup::contracts(&fixture, &fakes);
    let mut servers = Vec::new();
    for fake in fakes.all().into_iter().filter(|f| contracts.contains_key(f.name())) {
        let server = Server::start(fake, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .context("cannot listen on 127.0.0.1")?;
        servers.push(server);
    }
    let services = contracts
        .iter()
        .filter_map(|(name, contract)| {
            let server = servers.iter().find(|s| s.name() == name)?;
            Some((name.clone(), executor::Service { url: server.url(), contract: setup::announce(contract) }))
        })
        .collect();
    let probe = Probe { command, dir: dir.to_path_buf(), services, samples: fixture.intents.clone() };
    let (first, init) = init_answered(&probe).await;
    let mut verdicts = vec![verdict(&INIT_ANSWERED, first)];
    if init.works {
        // Independent processes on independent state directories: side by side, so that an
        // executor that hangs costs one bound, not one per rule.
        let (replies, bad_line, unknown_type, unknown_action, survives, shutdown) = tokio::join!(
            replies_well_formed(&probe, &init),
            bad_line_code_12(&probe),
            unknown_type_code_10(&probe),
            unknown_action_refused(&probe, &init),
            propose_survives_sigkill(&probe, &init),
            shutdown_clean(&probe),
        );
        verdicts.push(verdict(&REPLIES_WELL_FORMED, replies));
        verdicts.push(verdict(&BAD_LINE_CODE_12, bad_line));
        verdicts.push(verdict(&UNKNOWN_TYPE_CODE_10, unknown_type));
        verdicts.push(verdict(&UNKNOWN_ACTION_REFUSED, unknown_action));
        verdicts.push(match survives {
            Some(checked) => verdict(&PROPOSE_SURVIVES_SIGKILL, checked),
            None => skipped(&PROPOSE_SURVIVES_SIGKILL, &unsupported_note()),
        });
        verdicts.push(verdict(&SHUTDOWN_CLEAN, shutdown));
    } else {
        for rule in &RULES[1..] {
            verdicts.push(skipped(rule, "needs a working init (see init-answered)"));
        }
    }
    for server in servers {
        let _ = tokio::time::timeout(Duration::from_millis(SERVER_STOP_MS_MAX), server.stop()).await;
    }
    Ok(Protocol { init, verdicts })
}

// ---------------------------------------------------------------------------------------------
// The table

/// What a cell says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CellOutcome {
    Unsupported,
    Passed,
    Violated,
}

/// One action × failure mode: the worst outcome of the scenarios that combine them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    pub outcome: CellOutcome,
    /// The invariants violated (sorted), for `violated`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub invariants: Vec<String>,
    /// The kinds of hazard the scenarios behind the cell showed (sorted): safeguards the
    /// executor skipped where nothing exploited them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hazards: Vec<String>,
    /// The scenarios behind the cell, sorted.
    pub scenarios: Vec<String>,
}

impl Cell {
    pub fn text(&self) -> String {
        let hazards = if self.hazards.is_empty() {
            String::new()
        } else {
            format!("; hazard: {}", self.hazards.join(", "))
        };
        match self.outcome {
            CellOutcome::Passed if hazards.is_empty() => "passed".into(),
            CellOutcome::Passed => format!("passed ({})", &hazards[2..]),
            CellOutcome::Unsupported => "unsupported".into(),
            CellOutcome::Violated => format!("violated ({}{hazards})", self.invariants.join(", ")),
        }
    }
}

/// One action's row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub action: String,
    /// Whether `init_ok` listed it.
    pub announced: bool,
    /// Failure mode → cell; a mode no scenario combines with the action is absent (`-`).
    pub cells: BTreeMap<String, Cell>,
}

/// Actions × failure modes, both sorted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Table {
    pub failure_modes: Vec<String>,
    pub rows: Vec<Row>,
}

/// The column a case goes to.
fn column(case: &Case) -> String {
    match (&case.scenario.failure_mode, &case.source) {
        (Some(mode), _) => mode.clone(),
        (None, Source::Generated { .. }) => GENERATED_COLUMN.into(),
        (None, _) => UNCLASSIFIED_COLUMN.into(),
    }
}

/// The table of a run: `results` in the order of `cases`.
pub fn table(init: &Init, cases: &[Case], results: &[ScenarioResult]) -> Table {
    let mut modes = BTreeSet::new();
    let mut cells: BTreeMap<String, BTreeMap<String, Cell>> =
        init.actions.iter().map(|a| (a.clone(), BTreeMap::new())).collect();
    for (case, result) in cases.iter().zip(results) {
        let mode = column(case);
        modes.insert(mode.clone());
        let actions: BTreeSet<&str> = case.scenario.intents.iter().map(|i| i.action.as_str()).collect();
        for action in actions {
            let outcome = if !init.supports(action) || result.observed.unsupported.iter().any(|a| a == action)
            {
                CellOutcome::Unsupported
            } else if result.outcome == Outcome::Passed {
                CellOutcome::Passed
            } else {
                CellOutcome::Violated
            };
            let cell = cells.entry(action.to_string()).or_default().entry(mode.clone()).or_insert(Cell {
                outcome,
                invariants: Vec::new(),
                hazards: Vec::new(),
                scenarios: Vec::new(),
            });
            cell.outcome = cell.outcome.max(outcome);
            cell.scenarios.push(result.name.clone());
            if outcome == CellOutcome::Violated {
                cell.invariants.extend(result.violations().map(|v| v.invariant.clone()));
            }
            if outcome != CellOutcome::Unsupported {
                cell.hazards.extend(result.hazards.iter().map(|h| h.kind.clone()));
            }
        }
    }
    let rows = cells
        .into_iter()
        .map(|(action, mut cells)| {
            for cell in cells.values_mut() {
                for list in [&mut cell.invariants, &mut cell.hazards, &mut cell.scenarios] {
                    list.sort();
                    list.dedup();
                }
            }
            Row { announced: init.supports(&action), action, cells }
        })
        .collect();
    Table { failure_modes: modes.into_iter().collect(), rows }
}

impl Table {
    /// The table in Markdown, one row per failure mode and one column per action (a catalog has
    /// dozens of failure modes and a handful of actions, so this way round fits a terminal);
    /// executor text (action names) in code spans.
    pub fn markdown(&self) -> String {
        let mut out = String::from("| failure mode |");
        for row in &self.rows {
            out.push_str(&format!(" {} |", reports::summary::cell(&row.action)));
        }
        out.push_str("\n|---|");
        out.push_str(&"---|".repeat(self.rows.len()));
        out.push('\n');
        for mode in &self.failure_modes {
            out.push_str(&format!("| {mode} |"));
            for row in &self.rows {
                let text = row.cells.get(mode).map_or("-".to_string(), Cell::text);
                out.push_str(&format!(" {text} |"));
            }
            out.push('\n');
        }
        out
    }
}

// ---------------------------------------------------------------------------------------------
// The command

/// What the catalog part did.
#[derive(Debug, Clone, Serialize)]
pub struct Catalog {
    pub ran: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    pub scenarios: usize,
    pub passed: usize,
    pub violated: usize,
    pub executor_errors: usize,
    /// Hazards over all scenarios.
    pub hazards: usize,
    /// One line per kind of hazard seen: what it is, how often, what would exploit it and the
    /// command that runs that scenario.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hazard_kinds: Vec<HazardKind>,
}

/// A kind of hazard a catalog run showed.
#[derive(Debug, Clone, Serialize)]
pub struct HazardKind {
    pub kind: String,
    /// Scenarios that showed it.
    pub scenarios: usize,
    /// One example of what was seen.
    pub example: String,
    pub exploited_by: String,
    pub command: String,
}

/// `conformance.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Conformance {
    pub schema: &'static str,
    pub tool_version: &'static str,
    pub executor: String,
    pub seed: u64,
    pub init: Init,
    pub rules: Vec<RuleVerdict>,
    pub catalog: Catalog,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<Table>,
    /// `--strict`: hazards fail the check as violations do.
    pub strict: bool,
}

impl Conformance {
    pub fn failed(&self) -> bool {
        self.rules.iter().any(|r| r.status == Status::Failed)
            || self.catalog.violated + self.catalog.executor_errors > 0
            || self.strict && self.catalog.hazards > 0
    }

    /// The rules' verdicts for a terminal: one line each, and for a failure what was expected
    /// and what came.
    pub fn rules_text(&self) -> String {
        let width = RULES.iter().map(|r| r.name.len()).max().unwrap_or(0);
        let mut out = format!(
            "protocol rules ({}, docs/protocol.md) against {}:\n",
            executor::protocol::PROTOCOL,
            self.executor
        );
        for v in &self.rules {
            match v.status {
                Status::Failed => {
                    out.push_str(&format!(
                        "  {} {:<width$}  expected: {}\n",
                        v.status.label(),
                        v.rule,
                        v.expected
                    ));
                    out.push_str(&format!("       {:<width$}  came: {}\n", "", v.detail));
                }
                _ => out.push_str(&format!("  {} {:<width$}  {}\n", v.status.label(), v.rule, v.detail)),
            }
        }
        out
    }

    pub fn markdown(&self) -> String {
        use reports::summary::cell;
        let mut out = format!("# twice check-executor\n\nExecutor: {}", cell(&self.executor));
        if let (Some(name), Some(version)) = (&self.init.name, &self.init.version) {
            out.push_str(&format!(" ({} {})", cell(name), cell(version)));
        }
        out.push_str(&format!(
            ", seed {}.\n\n## Protocol rules ({})\n\n",
            self.seed,
            executor::protocol::PROTOCOL
        ));
        out.push_str("| rule | verdict | detail | expected |\n|---|---|---|---|\n");
        for v in &self.rules {
            // What was expected matters only where something else came.
            let expected = if v.status == Status::Failed { cell(v.expected) } else { String::new() };
            out.push_str(&format!(
                "| `{}` | {} | {} | {expected} |\n",
                v.rule,
                v.status.word(),
                cell(&reports::summary::one_line(&v.detail, DETAIL_CHARS_MAX))
            ));
        }
        out.push_str("\n## Catalog\n\n");
        match &self.catalog.skipped {
            Some(why) => out.push_str(&format!("Not run: {why}.\n")),
            None => out.push_str(&format!(
                "{} scenarios: {} passed, {} violated, {} executor errors; {} hazards{}.\n",
                self.catalog.scenarios,
                self.catalog.passed,
                self.catalog.violated,
                self.catalog.executor_errors,
                self.catalog.hazards,
                if self.strict { " (`--strict`: hazards fail the check)" } else { "" }
            )),
        }
        if let Some(table) = &self.table {
            out.push('\n');
            out.push_str(&table.markdown());
        }
        if !self.catalog.hazard_kinds.is_empty() {
            out.push_str(
                "\n## Hazards\n\nSafeguards the contracts offered that the executor did not use, where nothing \
                 in the scenario exploited them: no harm happened, so they are not violations.\n\n\
                 | hazard | scenarios | example | exploited by | command |\n|---|---|---|---|---|\n",
            );
            for h in &self.catalog.hazard_kinds {
                out.push_str(&format!(
                    "| `{}` | {} | {} | `{}` | {} |\n",
                    h.kind,
                    h.scenarios,
                    cell(&reports::summary::one_line(&h.example, DETAIL_CHARS_MAX)),
                    h.exploited_by,
                    cell(&h.command)
                ));
            }
        }
        out
    }
}

/// The kinds of hazard in `results`, in order of their first appearance.
fn hazard_kinds(results: &[ScenarioResult]) -> Vec<HazardKind> {
    let mut kinds: Vec<HazardKind> = Vec::new();
    for result in results {
        let mut seen = BTreeSet::new();
        for hazard in &result.hazards {
            let first_here = seen.insert(hazard.kind.as_str());
            match kinds.iter_mut().find(|k| k.kind == hazard.kind) {
                Some(kind) => kind.scenarios += usize::from(first_here),
                None => kinds.push(HazardKind {
                    kind: hazard.kind.clone(),
                    scenarios: 1,
                    example: hazard.detail.clone(),
                    exploited_by: hazard.exploited_by.clone(),
                    command: hazard.command.clone(),
                }),
            }
        }
    }
    kinds
}

fn cases(args: &CheckArgs) -> anyhow::Result<Vec<Case>> {
    let mut cases = Vec::new();
    if args.scenarios.is_empty() {
        let catalog = scenarios::catalog::catalog().map_err(|e| anyhow::anyhow!("{e}"))?;
        cases.extend(catalog.into_iter().map(|scenario| Case { scenario, source: Source::Catalog }));
    } else {
        for s in &args.scenarios {
            cases.push(cli::load(s)?);
        }
    }
    for index in 0..args.cases {
        let scenario = scenarios::generate::case(args.seed, index).map_err(anyhow::Error::msg)?;
        cases.push(Case { scenario, source: Source::Generated { index } });
    }
    Ok(cases)
}

/// `twice check-executor CMD`.
pub fn check_executor(args: CheckArgs) -> anyhow::Result<i32> {
    let started = std::time::Instant::now();
    let command = ExecutorCommand::parse(&args.executor).map_err(anyhow::Error::msg)?;
    // Scenario names are checked before anything runs: a typo costs no protocol checks.
    let cases = cases(&args)?;
    let work_dir = std::env::temp_dir().join(format!("twice-check-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work_dir);
    std::fs::create_dir_all(&work_dir).with_context(|| format!("cannot create {}", work_dir.display()))?;
    eprintln!("twice: checking {} protocol rules against {command}", RULES.len());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let protocol = runtime.block_on(check_protocol(&command, &work_dir.join("protocol"), args.seed));
    // The catalog's live runs make runtimes of their own, which cannot nest in this one.
    drop(runtime);
    let protocol = protocol?;
    let mut report = Conformance {
        schema: CONFORMANCE_SCHEMA,
        tool_version: env!("CARGO_PKG_VERSION"),
        executor: command.to_string(),
        seed: args.seed,
        init: protocol.init.clone(),
        rules: protocol.verdicts,
        strict: args.strict,
        catalog: Catalog {
            ran: false,
            skipped: None,
            scenarios: 0,
            passed: 0,
            violated: 0,
            executor_errors: 0,
            hazards: 0,
            hazard_kinds: Vec::new(),
        },
        table: None,
    };
    print!("{}", report.rules_text());
    let mut written = Vec::new();
    if protocol.init.works {
        let driver = Driver::Live(command.clone());
        let prefix = cli::replay_prefix(&Some(args.executor.clone()), false);
        let reporter = cli::Reporter::new();
        let catalog_dir = work_dir.join("catalog");
        let results = run::run_cases(
            &cases,
            args.seed,
            &driver,
            &catalog_dir,
            cli::jobs(args.jobs, true),
            &reporter,
            &prefix,
        );
        let mut run: RunResults = run::results(args.seed, &driver, None, results);
        run.strict = args.strict;
        let t = &run.totals;
        report.catalog = Catalog {
            ran: true,
            skipped: None,
            scenarios: t.scenarios,
            passed: t.passed,
            violated: t.violated,
            executor_errors: t.executor_errors,
            hazards: t.hazards,
            hazard_kinds: hazard_kinds(&run.results),
        };
        report.table = Some(table(&protocol.init, &cases, &run.results));
        reports::write_all(&args.report_dir, &run)?;
        written.extend([
            reports::RESULTS_FILE,
            reports::SUMMARY_FILE,
            reports::JUNIT_FILE,
            reports::HTML_FILE,
        ]);
        print!("\n{}", run::summary(&run));
    } else {
        let why = "init does not work (see init-answered), so the live driver cannot run it";
        report.catalog.skipped = Some(why.into());
        println!("\ncatalog: not run: {why}");
    }
    if let Some(table) = &report.table {
        println!("\nconformance (failure mode x action):\n\n{}", table.markdown());
    }
    std::fs::create_dir_all(&args.report_dir)
        .with_context(|| format!("cannot create {}", args.report_dir.display()))?;
    let md = args.report_dir.join(CONFORMANCE_MD);
    std::fs::write(&md, report.markdown()).with_context(|| format!("cannot write {}", md.display()))?;
    let json_path = args.report_dir.join(CONFORMANCE_JSON);
    let json_text = serde_json::to_string(&report).context("cannot render conformance.json")?;
    std::fs::write(&json_path, json_text).with_context(|| format!("cannot write {}", json_path.display()))?;
    let _ = std::fs::remove_dir_all(&work_dir);
    let mut files = vec![CONFORMANCE_MD, CONFORMANCE_JSON];
    files.extend(written);
    println!(
        "report: {} ({}; {:.1} s)",
        args.report_dir.display(),
        files.join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(if report.failed() { exit::VIOLATION } else { exit::OK })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init(actions: &[&str]) -> Init {
        Init {
            works: true,
            name: None,
            version: None,
            actions: actions.iter().map(|a| a.to_string()).collect(),
        }
    }

    fn case(name: &str, mode: Option<&str>, actions: &[&str]) -> Case {
        let intents: Vec<Value> = actions
            .iter()
            .enumerate()
            .map(|(i, a)| json!({"id": format!("i{i}"), "action": a, "params": {}}))
            .collect();
        let scenario: Scenario =
            serde_json::from_value(json!({"name": name, "failure_mode": mode, "intents": intents})).unwrap();
        Case { scenario, source: Source::Catalog }
    }

    fn result(name: &str, violated: &[&str], unsupported: &[&str]) -> ScenarioResult {
        let mut r: ScenarioResult = serde_json::from_value(json!({
            "name": name, "position": 0, "source": {"kind": "catalog"}, "seed": 1,
            "outcome": if violated.is_empty() { "passed" } else { "violated" },
            "verdicts": violated.iter().map(|v| json!({"invariant": v, "held": false, "evidence": ["x"]})).collect::<Vec<_>>(),
            "claims": [], "intents": [], "effects": {}, "faults_applied": [], "events": [], "replay": "",
            "observed": crate::observe::Observed::default(),
        }))
        .unwrap();
        r.observed.unsupported = unsupported.iter().map(|a| a.to_string()).collect();
        r
    }

    #[test]
    fn the_table_has_a_cell_per_action_and_mode_and_dashes_elsewhere() {
        let cases = [
            case("a", Some("lost_reply"), &["payments.refund"]),
            case("b", Some("partial_retry"), &["payments.refund", "workspaces.create"]),
            case("c", Some("lost_reply"), &["payments.refund"]),
        ];
        let results = [
            result("a", &[], &[]),
            result("b", &[], &["workspaces.create"]),
            result("c", &["no-duplicate-effect", "liveness"], &[]),
        ];
        let t = table(&init(&["payments.refund", "files.put"]), &cases, &results);
        assert_eq!(t.failure_modes, ["lost_reply", "partial_retry"]);
        let rows: Vec<(&str, bool)> = t.rows.iter().map(|r| (r.action.as_str(), r.announced)).collect();
        assert_eq!(rows, [("files.put", true), ("payments.refund", true), ("workspaces.create", false)]);
        let md = t.markdown();
        assert!(
            md.starts_with("| failure mode | `files.put` | `payments.refund` | `workspaces.create` |"),
            "{md}"
        );
        assert!(md.contains("| lost_reply | - | violated (liveness, no-duplicate-effect) | - |"), "{md}");
        assert!(md.contains("| partial_retry | - | passed | unsupported |"), "{md}");
        assert_eq!(t.rows[1].cells["lost_reply"].scenarios, ["a", "c"]);

        // A skipped safeguard that nothing exploited shows beside the verdict, never as one.
        let mut hazardous = result("a", &[], &[]);
        hazardous.hazards = vec![reports::model::Hazard {
            kind: "no-fencing-token".into(),
            service: "workspaces".into(),
            intent: None,
            detail: "created without a Fencing-Token".into(),
            exploited_by: "stale_worker_overwrite".into(),
            command: "twice run --scenario stale_worker_overwrite".into(),
        }];
        let t = table(&init(&["payments.refund"]), &cases[..1], &[hazardous]);
        assert!(
            t.markdown().contains("| lost_reply | passed (hazard: no-fencing-token) |"),
            "{}",
            t.markdown()
        );
    }

    #[test]
    fn init_ok_needs_an_executor_and_a_list_of_actions() {
        let shape = |v: Value| init_ok_problem(v.as_object().unwrap());
        assert_eq!(shape(json!({"executor": {"name": "x", "version": "1"}, "actions": ["a"]})), None);
        assert!(shape(json!({"executor": {"name": "x"}, "actions": []})).is_some());
        assert!(shape(json!({"executor": {"name": "x", "version": "1"}})).is_some());
        assert!(shape(json!({"executor": {"name": "x", "version": "1"}, "actions": [1]})).is_some());
        assert!(shape(json!({"actions": []})).is_some());
    }

    #[test]
    fn rules_have_unique_names() {
        let names: BTreeSet<&str> = RULES.iter().map(|r| r.name).collect();
        assert_eq!(names.len(), RULES.len());
    }
}
