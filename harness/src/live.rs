//! The live driver: any executor as a real subprocess, the fakes on real loopback HTTP, real
//! SIGKILL / SIGSTOP / SIGCONT, real time.
//!
//! It runs the same phases as the sim driver ([`crate::sim`]): **act** (propose every intent
//! to `w1`), **drain**, **heal** (faults off, then the settle bound waited out),
//! **reconcile** (paused workers resumed, then up to [`RECONCILE_ROUNDS_MAX`] rounds, each
//! restarting crashed workers on the same state directory and asking every worker for
//! `reconcile` + `drain`, until `status` shows nothing unresolved), **finish** (the settle bound
//! again, crashed workers restarted, `status`, ledgers and journals), then every worker is shut
//! down and the servers stopped. Requests to one worker go one at a time, as the protocol
//! promises: a request for a busy worker (a second worker's background work, a `reconcile`
//! event) waits in the driver's queue.
//!
//! Timeline moments are stamped with the run's base clock (wall time, before any service's
//! clock jump) when the driver sees them; an executor's `event` lines become `state` moments
//! `ID -> STATE` in the worker's lane.
//!
//! # Workers
//!
//! A worker is one process of [`ExecutorCommand`], speaking `twice/1` on its stdin and stdout
//! (see `docs/protocol.md`). Each process leads its own process group, and every signal goes
//! to the group (`kill(2)` on the group id), so an executor started through a wrapper (`sh -c`,
//! `uv run`, ...) is crashed or paused whole. The last [`STDERR_TAIL_BYTES`] of its stderr are
//! kept for error messages.
//!
//! Each life of a worker (`w1#1`, then `w1#2` after a restart) gets listeners of its own on
//! every fake, labelled with that life: the fakes' journals then say which life sent each
//! request, which is how the checker tells a stale worker's write from its successor's
//! without taking any executor's word for it.
//!
//! # Observation points
//!
//! A request point ("when payments has received the first refund request and before it
//! answers") is watched by the listeners' [`fake_services::Tap`]: the request that reaches it
//! is processed by the fake as usual, but its answer (whatever it is: a reply, a reset, a
//! closed connection) is held at a gate while the driver applies the point's events, and only
//! then let go. A crash is a SIGKILL before the answer is written, so the caller never sees
//! it; a pause is a SIGSTOP that has taken hold before the answer is written, so the stopped
//! worker finds it on its socket when it is resumed (even past its own timeout, as in sim).
//! The stop comes once the worker has sent nothing for [`PAUSE_QUIET_MS`]: the rest of a batch
//! it was sending together with the request at the point leaves first (as in sim, where a
//! pause takes hold after the instant it began);
//! a heal or a clock jump is done before the caller sees the answer. Starting a worker and
//! asking one for a pass come after the gate opens, since a worker's start takes seconds.
//!
//! # Misbehaving executors
//!
//! Every wait is bounded (the `*_MS_MAX` constants, and per scenario the drain and reconcile
//! bounds derived from its limits and settle bound). An executor that breaks
//! the protocol, hangs or exits gets [`Observed::executor_error`] with the reason and the tail
//! of its stderr, and the run returns. The protocol rules the driver enforces on stdout:
//!
//! - every line is one JSON object (blank lines are ignored); anything else, including a line
//!   longer than [`LINE_BYTES_MAX`], is a protocol violation: logs belong on stderr;
//! - an object with `"type": "event"` carries string `intent_id` and `state`;
//! - any other object is a reply: a numeric `in_reply_to` naming an outstanding request, and
//!   `type` either `<request type>_ok` or `error` with a numeric `code`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use executor::protocol::code;
use fake_services::{Clock, Contract, FakeRequest, Fakes, Gate, Listener, Server, Tap, TokioClock};
use scenarios::model::FIRST_WORKER;
use scenarios::{EventAction, IntentSpec, PhaseName, Point, Scenario};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::observe::{Claim, Moment, Observed};
use crate::points::RequestPoints;
use crate::setup::{self, RECONCILE_ROUNDS_MAX};

/// A worker has this long to answer `init`.
pub const INIT_MS_MAX: u64 = 10_000;
/// And this long to answer `propose`, `status` or `shutdown` (beyond requests queued ahead).
pub const REPLY_MS_MAX: u64 = 10_000;
/// The longest drain the driver asks for, whatever the scenario's bounds.
pub const DRAIN_MS_MAX: u64 = 60_000;
/// Added to the drain the executor is asked for: passes in flight when its deadline comes.
const DRAIN_SLACK_MS: u64 = 2_000;
/// Added to a drain's `timeout_ms` for the answer to come back.
const CALL_SLACK_MS: u64 = 5_000;
/// How often the driver looks at the pauses and the workers while it waits.
pub const POLL_MS: u64 = 5;
/// How long every fake must have had nothing in flight before the driver takes the world as
/// settled (rather than waiting out the whole announced settle bound).
pub const SETTLED_MS: u64 = 20;
/// How long the driver waits for a SIGSTOP to take hold before it lets a held answer go.
const STOP_MS_MAX: u64 = 200;
/// A pause takes hold once the worker has sent nothing for this long: what it set out to send
/// together with the request at the point (the rest of a batch, on threads of its own) leaves
/// first, as in sim, where a pause takes hold after the instant it began. Without it a stop
/// could land between an executor's last check and its send, where no executor can defend a
/// service that offers no guard, and the verdict would not be the executor's fault.
pub const PAUSE_QUIET_MS: u64 = 50;
/// The longest the driver waits for that quiet before it stops the worker anyway.
pub const PAUSE_QUIET_MS_MAX: u64 = 500;
/// A worker started by an event works in the background until the run finishes: a drain,
/// then a `reconcile` whenever it is idle and this long has passed since the last (as in sim,
/// [`crate::sim::BACKGROUND_ROUND_MS`]).
pub const BACKGROUND_ROUND_MS: u64 = crate::sim::BACKGROUND_ROUND_MS;
/// Longest stdout line read from an executor.
pub const LINE_BYTES_MAX: usize = 1024 * 1024;
/// How much of a worker's stderr is kept for error messages.
pub const STDERR_TAIL_BYTES: usize = 4 * 1024;
/// How much of an offending stdout line an error message quotes.
const EXCERPT_CHARS_MAX: usize = 200;
/// Writing one request to a worker's stdin.
pub(crate) const WRITE_MS_MAX: u64 = 5_000;
/// A worker has this long to exit after `shutdown` before it is killed.
pub(crate) const SHUTDOWN_MS_MAX: u64 = 5_000;
/// Waiting for a process's exit status once it has closed its stdout or been killed.
pub(crate) const EXIT_MS_MAX: u64 = 2_000;
/// Waiting for the rest of a dead process's stderr.
pub(crate) const STDERR_FLUSH_MS_MAX: u64 = 200;
/// Stopping the fakes' servers.
const SERVER_STOP_MS_MAX: u64 = 5_000;
/// At most this many moments on a timeline: an executor flooding stdout with events cannot
/// grow the harness without bound (later events are dropped).
pub const TIMELINE_MOMENTS_MAX: usize = 100_000;
/// The payments API key every worker is given.
pub const PAYMENTS_API_KEY: &str = setup::PAYMENTS_API_KEY;

// ---------------------------------------------------------------------------------------------
// The executor's command line

/// How to start one worker of the executor under test: a program and its arguments, run
/// without a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// Why a command line could not be split into words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandLineError {
    #[error("the executor command is empty")]
    Empty,
    #[error("the executor command has an unterminated {quote} quote: {line}")]
    Unterminated { quote: char, line: String },
    #[error("the executor command ends with a lone backslash: {0}")]
    TrailingBackslash(String),
}

/// Why the reference executor binary was not found.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error("cannot tell where the running program is: {0}")]
    CurrentExe(std::io::Error),
    #[error(
        "no {name} binary at {} (it is looked for next to the running program); build it with `cargo build --workspace --bins`",
        path.display()
    )]
    Missing { name: &'static str, path: PathBuf },
}

/// The reference executor's binary name.
pub const REFERENCE_BINARY: &str = "twice-executor";

impl ExecutorCommand {
    /// Splits a command line such as `python3 my_executor.py --flag` into a program and its
    /// arguments: words are separated by whitespace; `'...'` quotes literally; `"..."` quotes
    /// with `\"` and `\\` as escapes; outside quotes a backslash escapes the next character.
    /// No shell runs: no variables, globs, pipes or redirections.
    pub fn parse(line: &str) -> Result<ExecutorCommand, CommandLineError> {
        let mut words = split_words(line)?.into_iter();
        let program = words.next().ok_or(CommandLineError::Empty)?;
        Ok(ExecutorCommand { program: PathBuf::from(program), args: words.collect() })
    }

    /// The reference executor, `twice-executor`, next to the running program (as `cargo`
    /// builds them, and as they are installed together).
    pub fn reference() -> Result<ExecutorCommand, LocateError> {
        let exe = std::env::current_exe().map_err(LocateError::CurrentExe)?;
        let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
        ExecutorCommand::reference_in(&dir)
    }

    /// The reference executor in `dir`.
    pub fn reference_in(dir: &Path) -> Result<ExecutorCommand, LocateError> {
        let path = dir.join(REFERENCE_BINARY);
        if !path.is_file() {
            return Err(LocateError::Missing { name: REFERENCE_BINARY, path });
        }
        Ok(ExecutorCommand { program: path, args: Vec::new() })
    }
}

impl fmt::Display for ExecutorCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words =
            std::iter::once(self.program.to_string_lossy().into_owned()).chain(self.args.iter().cloned());
        for (i, word) in words.enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            if word.is_empty() || word.chars().any(|c| c.is_whitespace() || "'\"\\".contains(c)) {
                write!(f, "'{}'", word.replace('\'', "'\\''"))?;
            } else {
                f.write_str(&word)?;
            }
        }
        Ok(())
    }
}

fn split_words(line: &str) -> Result<Vec<String>, CommandLineError> {
    let unterminated = |quote| CommandLineError::Unterminated { quote, line: line.to_string() };
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(unterminated('\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(unterminated('"')),
                        },
                        Some(c) => word.push(c),
                        None => return Err(unterminated('"')),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => word.push(c),
                    None => return Err(CommandLineError::TrailingBackslash(line.to_string())),
                }
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

// ---------------------------------------------------------------------------------------------
// One worker process

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// A request waiting for its reply.
struct Pending {
    kind: &'static str,
    /// How long the reply may take once the requests ahead of it are answered.
    bound_ms: u64,
    reply: oneshot::Sender<Value>,
}

/// What a worker's stdout reader shares with the driver.
#[derive(Default)]
struct Link {
    pending: HashMap<u64, Pending>,
    /// How the worker broke the protocol, if it did.
    violation: Option<String>,
    /// Its stdout ended: it closed it, or died.
    closed: bool,
    /// The request that was in flight when it broke or its stdout ended.
    interrupted: Option<&'static str>,
}

impl Link {
    /// Drops every waiting request, which tells its caller that no reply will come.
    fn abandon(&mut self) {
        if let Some(p) = self.pending.values().next() {
            self.interrupted = Some(p.kind);
        }
        self.pending.clear();
    }
}

/// The newest bytes a worker wrote to stderr.
#[derive(Default)]
pub(crate) struct Tail(VecDeque<u8>);

impl Tail {
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        self.0.extend(bytes);
        let excess = self.0.len().saturating_sub(STDERR_TAIL_BYTES);
        self.0.drain(..excess);
    }

    pub(crate) fn text(&self) -> String {
        let bytes: Vec<u8> = self.0.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes).trim().to_string();
        if text.is_empty() { "(nothing)".to_string() } else { text }
    }
}

/// Where a worker's stdout lines go.
struct Lane {
    worker: String,
    clock: Arc<dyn Clock>,
    timeline: Arc<Mutex<Vec<Moment>>>,
    link: Arc<Mutex<Link>>,
}

impl Lane {
    fn close(&self) {
        let mut link = lock(&self.link);
        link.closed = true;
        link.abandon();
    }

    fn violate(&self, why: String) {
        let mut link = lock(&self.link);
        link.violation.get_or_insert(why);
        link.abandon();
    }

    /// One stdout line; `Err` says how it breaks the protocol.
    fn handle(&self, line: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(line);
        let text = text.trim();
        if text.is_empty() {
            return Ok(());
        }
        let rule = "every stdout line must be one JSON object; logs belong on stderr";
        let value: Value = serde_json::from_str(text)
            .map_err(|_| format!("wrote a line that is not JSON on stdout: {} ({rule})", excerpt(text)))?;
        let Value::Object(object) = value else {
            return Err(format!("wrote JSON that is not an object on stdout: {} ({rule})", excerpt(text)));
        };
        let kind = object.get("type").and_then(Value::as_str).unwrap_or_default();
        if kind == "event" {
            let field = |name: &str| object.get(name).and_then(Value::as_str);
            let (Some(intent_id), Some(state)) = (field("intent_id"), field("state")) else {
                return Err(format!("sent an event without string intent_id and state: {}", excerpt(text)));
            };
            let at_ms = self.clock.now_ms();
            let mut timeline = lock(&self.timeline);
            if timeline.len() >= TIMELINE_MOMENTS_MAX {
                return Ok(());
            }
            timeline.push(Moment {
                at_ms,
                lane: self.worker.clone(),
                kind: "state".into(),
                detail: format!("{intent_id} -> {state}"),
            });
            return Ok(());
        }
        let Some(msg_id) = object.get("in_reply_to").and_then(Value::as_u64) else {
            return Err(format!(
                "wrote a line that is neither an event nor a reply (no numeric in_reply_to): {}",
                excerpt(text)
            ));
        };
        let mut link = lock(&self.link);
        let Some(pending) = link.pending.remove(&msg_id) else {
            return Err(format!(
                "replied to msg_id {msg_id}, which no request is waiting on: {}",
                excerpt(text)
            ));
        };
        let expected = format!("{}_ok", pending.kind);
        if kind == "error" {
            if object.get("code").and_then(Value::as_u64).is_none() {
                return Err(format!("sent an error without a numeric code: {}", excerpt(text)));
            }
        } else if kind != expected {
            return Err(format!(
                "answered a {} with type \"{kind}\" (expected {expected} or error): {}",
                pending.kind,
                excerpt(text)
            ));
        }
        // The caller may have stopped waiting (fire-and-forget requests): that is fine.
        let _ = pending.reply.send(Value::Object(object));
        Ok(())
    }
}

pub(crate) fn excerpt(text: &str) -> String {
    let mut short: String = text.chars().take(EXCERPT_CHARS_MAX).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    format!("{short:?}")
}

async fn read_stdout(stdout: ChildStdout, lane: Lane) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader).take(LINE_BYTES_MAX as u64 + 1).read_until(b'\n', &mut line).await;
        if !matches!(read, Ok(n) if n > 0) {
            return lane.close();
        }
        if line.len() > LINE_BYTES_MAX {
            let rule = "every stdout line must be one JSON object";
            return lane.violate(format!("wrote a stdout line longer than {LINE_BYTES_MAX} bytes ({rule})"));
        }
        if !line.ends_with(b"\n") {
            // The stream ended inside a line: the process died mid-message, which its exit
            // status tells better than the fragment.
            return lane.close();
        }
        if let Err(why) = lane.handle(&line) {
            return lane.violate(why);
        }
    }
}

async fn read_stderr(mut stderr: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>) {
    let mut buffer = vec![0u8; 4096];
    while let Ok(n) = stderr.read(&mut buffer).await {
        if n == 0 {
            return;
        }
        lock(&tail).push(&buffer[..n]);
    }
}

pub(crate) fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("status {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => status.to_string(),
    }
}

/// Sends `signal` (`KILL`, `STOP`, `CONT`) to a process group.
pub(crate) async fn signal_group(pgid: u32, signal: &str) -> Result<(), String> {
    let number = match signal {
        "KILL" => libc::SIGKILL,
        "STOP" => libc::SIGSTOP,
        "CONT" => libc::SIGCONT,
        other => return Err(format!("no signal SIG{other}")),
    };
    let group = i32::try_from(pgid).map_err(|_| format!("process group {pgid} is out of range"))?;
    // SAFETY: kill(2) takes two integers and touches no memory of ours; a negative pid names
    // the process group, which each worker leads (it was spawned with `process_group(0)`).
    let rc = unsafe { libc::kill(-group, number) };
    if rc == 0 {
        return Ok(());
    }
    let error = std::io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::ESRCH) {
        return Ok(()); // the whole group is gone already
    }
    Err(format!("kill(-{pgid}, SIG{signal}): {error}"))
}

/// Waits (at most [`STOP_MS_MAX`]) until process `pid` shows as stopped in `/proc`, so that
/// an answer let go after a SIGSTOP reaches a process that can no longer act on it at once.
async fn stopped(pid: u32) {
    let deadline = Instant::now() + Duration::from_millis(STOP_MS_MAX);
    let path = format!("/proc/{pid}/stat");
    while Instant::now() < deadline {
        let Ok(stat) = std::fs::read_to_string(&path) else { return };
        // `pid (comm) S ...`: the state follows the last parenthesis (comm may hold spaces).
        let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
        if matches!(state, Some("T" | "t") | None) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A request waiting for the one in flight to be answered.
struct Queued {
    msg_id: u64,
    line: String,
    pending: Pending,
}

struct Worker {
    incarnation: u32,
    child: Child,
    /// The process group the worker leads.
    pgid: u32,
    stdin: ChildStdin,
    link: Arc<Mutex<Link>>,
    stderr: Arc<Mutex<Tail>>,
    stderr_task: JoinHandle<()>,
    next_msg_id: u64,
    /// Requests not yet written: the protocol has one request in flight at a time.
    queue: VecDeque<Queued>,
    /// Killed by a crash event; it restarts when the reconcile phase begins.
    crashed: bool,
    /// Stopped by a pause event until then.
    resume_at: Option<Instant>,
    /// When its stdout was first seen closed while it was expected to live.
    closed_since: Option<Instant>,
    /// Started by an event: it works in the background; next round not before this.
    background: Option<Instant>,
    /// Its misbehaviour is already reported.
    reported: bool,
}

/// An executor process just started: in a process group of its own (so that signals reach
/// whatever it starts), its stdin to write, its stdout to read, and its stderr's tail kept by a
/// task for verdicts.
pub(crate) struct Spawned {
    pub child: Child,
    pub pgid: u32,
    pub stdin: ChildStdin,
    pub stdout: ChildStdout,
    pub stderr: Arc<Mutex<Tail>>,
    pub stderr_task: JoinHandle<()>,
}

/// Starts `command` as the live driver and `twice check-executor` run executors.
pub(crate) fn spawn_executor(command: &ExecutorCommand) -> Result<Spawned, String> {
    let mut child = Command::new(&command.program)
        .args(&command.args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run `{command}`: {e}"))?;
    let pgid = child.id().ok_or_else(|| format!("`{command}` exited at once"))?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(format!("`{command}` started without its pipes"));
    };
    let tail = Arc::new(Mutex::new(Tail::default()));
    let stderr_task = tokio::spawn(read_stderr(stderr, Arc::clone(&tail)));
    Ok(Spawned { child, pgid, stdin, stdout, stderr: tail, stderr_task })
}

impl Worker {
    fn spawn(command: &ExecutorCommand, lane: Lane, incarnation: u32) -> Result<Worker, String> {
        let Spawned { child, pgid, stdin, stdout, stderr, stderr_task } = spawn_executor(command)?;
        let link = Arc::clone(&lane.link);
        tokio::spawn(read_stdout(stdout, lane));
        Ok(Worker {
            incarnation,
            child,
            pgid,
            stdin,
            link,
            stderr,
            stderr_task,
            next_msg_id: 1,
            queue: VecDeque::new(),
            crashed: false,
            resume_at: None,
            closed_since: None,
            background: None,
            reported: false,
        })
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    async fn signal(&mut self, signal: &str) -> Result<(), String> {
        if !self.alive() {
            return Ok(());
        }
        signal_group(self.pgid, signal).await
    }

    /// Kills the whole group and reaps the process, within bounds.
    async fn kill(&mut self) {
        let _ = self.signal("KILL").await;
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_millis(EXIT_MS_MAX), self.child.wait()).await;
    }

    /// What it wrote to stderr, including what it wrote just before dying.
    async fn stderr_tail(&mut self) -> String {
        if !self.stderr_task.is_finished() {
            let _ =
                tokio::time::timeout(Duration::from_millis(STDERR_FLUSH_MS_MAX), &mut self.stderr_task).await;
        }
        lock(&self.stderr).text()
    }

    /// Why its stdout ended while an answer was due.
    async fn failure(&mut self, name: &str, when: &str) -> String {
        self.reported = true;
        let violation = lock(&self.link).violation.clone();
        if let Some(why) = violation {
            let tail = self.stderr_tail().await;
            return format!("worker {name} broke the protocol {when}: {why}; stderr: {tail}");
        }
        let status = tokio::time::timeout(Duration::from_millis(EXIT_MS_MAX), self.child.wait()).await;
        let tail = self.stderr_tail().await;
        match status {
            Ok(Ok(status)) => {
                format!("worker {name} exited with {} {when}; stderr: {tail}", describe(status))
            }
            Ok(Err(e)) => {
                format!("worker {name} stopped answering {when} (no exit status: {e}); stderr: {tail}")
            }
            Err(_) => format!(
                "worker {name} closed its stdout {when} and did not exit within {EXIT_MS_MAX} ms; stderr: {tail}"
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The run

/// A request that reached a point: the events due, and the gate holding its answer.
struct Reached {
    events: Vec<usize>,
    gate: oneshot::Sender<()>,
}

/// The listeners' tap: counts requests against the scenario's request points and hands each
/// point reached to the driver, holding the request's answer until the driver opens the gate;
/// and notes when each worker life last sent anything.
struct PointTap {
    points: RequestPoints,
    reached: mpsc::UnboundedSender<Reached>,
    last_arrival: Mutex<HashMap<String, Instant>>,
}

impl PointTap {
    /// When a request of worker life `origin` (`w1#2`) last arrived at any fake.
    fn last_arrival(&self, origin: &str) -> Option<Instant> {
        lock(&self.last_arrival).get(origin).copied()
    }
}

impl Tap for PointTap {
    fn arrived(&self, service: &'static str, request: &FakeRequest) -> Option<Gate> {
        if let Some(origin) = &request.origin {
            lock(&self.last_arrival).insert(origin.clone(), Instant::now());
        }
        let events = self.points.reached(service, &request.method, &request.path);
        if events.is_empty() {
            return None;
        }
        let (gate, held) = oneshot::channel();
        // A run that is over has dropped the receiver: the gate's sender goes with the message,
        // which opens it.
        let _ = self.reached.send(Reached { events, gate });
        Some(held)
    }
}

/// How long the driver waits for each kind of answer, from one scenario's terms.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// The `timeout_ms` of every drain the driver asks for.
    drain_ms: u64,
    /// Waiting for a `reconcile_ok`: one pass, a lookup and a send per intent at most.
    reconcile_ms: u64,
    /// Every pause the scenario makes, added to every wait (a stopped worker answers late).
    pauses_ms: u64,
}

impl Bounds {
    fn of(scenario: &Scenario, limits: &executor::Limits, settle_ms: u64) -> Bounds {
        // Long enough for a lease held by a dead worker to run out and for every attempt of
        // an intent to time out.
        let drain_ms = (limits.lease_ms
            + u64::from(limits.attempts_max) * limits.request_timeout_ms
            + settle_ms
            + DRAIN_SLACK_MS)
            .min(DRAIN_MS_MAX);
        let intents = scenario.intents.len() as u64 + 1;
        let reconcile_ms = intents * 2 * limits.request_timeout_ms + REPLY_MS_MAX;
        Bounds { drain_ms, reconcile_ms, pauses_ms: scenario.pauses_ms() }
    }

    fn reply_ms(&self, kind: &str) -> u64 {
        match kind {
            "init" => INIT_MS_MAX,
            "drain" => self.drain_ms + CALL_SLACK_MS,
            "reconcile" => self.reconcile_ms,
            _ => REPLY_MS_MAX,
        }
    }
}

/// A reply: `<type>_ok` with its fields, or `error`.
enum Answer {
    Ok(Value),
    Error { code: u64, text: String },
}

impl Answer {
    fn of(reply: Value) -> Answer {
        if reply.get("type").and_then(Value::as_str) == Some("error") {
            let code = reply.get("code").and_then(Value::as_u64).unwrap_or(u64::MAX);
            let text = reply.get("text").and_then(Value::as_str).unwrap_or_default().to_string();
            Answer::Error { code, text }
        } else {
            Answer::Ok(reply)
        }
    }
}

/// Why a call returned no answer.
enum CallError {
    /// The worker is gone: crashed by an event.
    Gone,
    /// The executor misbehaved; [`Observed::executor_error`] says how.
    Broken,
}

struct Run<'a> {
    scenario: &'a Scenario,
    command: &'a ExecutorCommand,
    fakes: Fakes,
    clock: Arc<dyn Clock>,
    /// The contract each announced service offers; every worker life is told them.
    contracts: BTreeMap<String, Contract>,
    /// Every listener of every worker life, stopped when the run ends (a dead life's
    /// listeners stay up: a request of it may still be in flight at a fake).
    servers: Vec<Server>,
    tap: Arc<PointTap>,
    reached: mpsc::UnboundedReceiver<Reached>,
    limits: executor::Limits,
    state_dir: PathBuf,
    bounds: Bounds,
    workers: BTreeMap<String, Worker>,
    /// Until the finish, workers started by events work in the background.
    background: bool,
    timeline: Arc<Mutex<Vec<Moment>>>,
    observed: Observed,
    fired: Vec<bool>,
}

impl Run<'_> {
    fn moment(&mut self, lane: &str, kind: &str, detail: String) {
        let at_ms = self.clock.now_ms();
        lock(&self.timeline).push(Moment { at_ms, lane: lane.into(), kind: kind.into(), detail });
    }

    /// Records the first executor error; later ones are consequences.
    fn fail(&mut self, why: String) {
        self.observed.executor_error.get_or_insert(why);
    }

    fn broken(&self) -> bool {
        self.observed.executor_error.is_some()
    }

    /// Starts (or restarts) a worker and waits for its `init_ok`.
    async fn start_worker(&mut self, name: &str) -> Result<(), String> {
        let incarnation = self.workers.get(name).map_or(1, |w| w.incarnation + 1);
        if let Some(mut old) = self.workers.remove(name) {
            // A restart: the earlier life must be gone before the next opens the state.
            old.kill().await;
        }
        let lane = Lane {
            worker: name.to_string(),
            clock: Arc::clone(&self.clock),
            timeline: Arc::clone(&self.timeline),
            link: Arc::new(Mutex::new(Link::default())),
        };
        let services = self.listen(&format!("{name}#{incarnation}")).await?;
        let worker = Worker::spawn(self.command, lane, incarnation)
            .map_err(|e| format!("worker {name} did not start: {e}"))?;
        self.workers.insert(name.to_string(), worker);
        let init = json!({
            "protocol": executor::protocol::PROTOCOL,
            "worker_id": name,
            "state_dir": self.state_dir,
            "services": services,
            "secrets": setup::secrets(),
            "limits": self.limits,
        });
        let rx = match self.send(name, "init", init).await {
            Ok((rx, _)) => rx,
            Err(_) => return Err(self.describe_loss(name, "during init").await),
        };
        // No polling here: points fire from the callers' waits, never from inside an event.
        match tokio::time::timeout(Duration::from_millis(INIT_MS_MAX), rx).await {
            Ok(Ok(reply)) => match Answer::of(reply) {
                Answer::Ok(_) => {
                    self.moment(name, "start", format!("incarnation {incarnation}"));
                    Ok(())
                }
                Answer::Error { code, text } => {
                    Err(format!("worker {name} refused init: code {code}: {text}"))
                }
            },
            Ok(Err(_)) => Err(self.describe_loss(name, "during init").await),
            Err(_) => Err(self.describe_hang(name, "init", INIT_MS_MAX).await),
        }
    }

    /// Starts one listener per announced service for the worker life `origin` (`w1#2`), and
    /// returns the services as that life is told them.
    async fn listen(&mut self, origin: &str) -> Result<BTreeMap<String, executor::Service>, String> {
        let mut services = BTreeMap::new();
        for (name, contract) in &self.contracts {
            let Some(fake) = self.fakes.get(name) else { continue };
            let listener = Listener {
                origin: Some(origin.to_string()),
                tap: Some(Arc::clone(&self.tap) as Arc<dyn Tap>),
            };
            let server = Server::start_with(fake, SocketAddr::from(([127, 0, 0, 1], 0)), listener)
                .await
                .map_err(|e| format!("cannot listen on 127.0.0.1 for {origin}: {e}"))?;
            services.insert(
                name.clone(),
                executor::Service { url: server.url(), contract: setup::announce(contract) },
            );
            self.servers.push(server);
        }
        Ok(services)
    }

    async fn describe_loss(&mut self, name: &str, when: &str) -> String {
        match self.workers.get_mut(name) {
            Some(w) => w.failure(name, when).await,
            None => format!("worker {name} is gone {when}"),
        }
    }

    async fn describe_hang(&mut self, name: &str, kind: &str, waited_ms: u64) -> String {
        let tail = match self.workers.get_mut(name) {
            Some(w) => {
                w.reported = true;
                w.stderr_tail().await
            }
            None => "(nothing)".into(),
        };
        format!("worker {name} did not answer {kind} within {waited_ms} ms; stderr: {tail}")
    }

    /// Queues one request and writes it if nothing else is in flight; returns the receiver of
    /// its reply and how long the answer may take, counting the requests ahead of it.
    async fn send(
        &mut self,
        name: &str,
        kind: &'static str,
        mut fields: Value,
    ) -> Result<(oneshot::Receiver<Value>, u64), CallError> {
        let bound_ms = self.bounds.reply_ms(kind);
        let Some(w) = self.workers.get_mut(name).filter(|w| !w.crashed) else { return Err(CallError::Gone) };
        let msg_id = w.next_msg_id;
        w.next_msg_id += 1;
        if let Some(map) = fields.as_object_mut() {
            map.insert("type".into(), json!(kind));
            map.insert("msg_id".into(), json!(msg_id));
        }
        let (reply, rx) = oneshot::channel();
        let ahead_ms = {
            let link = lock(&w.link);
            let usable = !link.closed && link.violation.is_none();
            usable.then(|| link.pending.values().map(|p| p.bound_ms).sum::<u64>())
        };
        let Some(ahead_ms) = ahead_ms else {
            let why = w.failure(name, &format!("during {kind}")).await;
            self.fail(why);
            return Err(CallError::Broken);
        };
        let queued_ms: u64 = w.queue.iter().map(|q| q.pending.bound_ms).sum();
        let line = format!("{fields}\n");
        w.queue.push_back(Queued { msg_id, line, pending: Pending { kind, bound_ms, reply } });
        self.pump(name).await?;
        Ok((rx, ahead_ms + queued_ms + bound_ms))
    }

    /// Writes the worker's next queued request when none is in flight. A worker that is gone
    /// or broken drops its queue, which tells the waiting callers.
    async fn pump(&mut self, name: &str) -> Result<(), CallError> {
        let Some(w) = self.workers.get_mut(name) else { return Ok(()) };
        let (in_flight, usable) = {
            let link = lock(&w.link);
            (!link.pending.is_empty(), !link.closed && link.violation.is_none())
        };
        if w.crashed || !usable {
            w.queue.clear();
            return Ok(());
        }
        if in_flight {
            return Ok(());
        }
        let Some(next) = w.queue.pop_front() else { return Ok(()) };
        let kind = next.pending.kind;
        lock(&w.link).pending.insert(next.msg_id, next.pending);
        let write = async {
            w.stdin.write_all(next.line.as_bytes()).await?;
            w.stdin.flush().await
        };
        let written = tokio::time::timeout(Duration::from_millis(WRITE_MS_MAX), write).await;
        match written {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => {
                // Its stdin is closed: it died, or is about to.
                let why = w.failure(name, &format!("during {kind}")).await;
                self.fail(why);
                Err(CallError::Broken)
            }
            Err(_) => {
                w.reported = true;
                let tail = w.stderr_tail().await;
                self.fail(format!(
                    "worker {name} did not read its stdin for {WRITE_MS_MAX} ms ({kind}); stderr: {tail}"
                ));
                Err(CallError::Broken)
            }
        }
    }

    /// A request the driver does not wait for (background work); its failures show up in
    /// [`Self::poll`].
    async fn send_and_forget(&mut self, name: &str, kind: &'static str, fields: Value) {
        let _ = self.send(name, kind, fields).await;
    }

    /// Sends a request and waits for its answer, firing points and resuming pauses meanwhile.
    async fn call(&mut self, name: &str, kind: &'static str, fields: Value) -> Result<Answer, CallError> {
        let (mut rx, ahead_ms) = self.send(name, kind, fields).await?;
        let incarnation = self.workers.get(name).map(|w| w.incarnation);
        let bound_ms = ahead_ms + self.bounds.pauses_ms;
        let deadline = Instant::now() + Duration::from_millis(bound_ms);
        loop {
            tokio::select! {
                biased;
                Some(reached) = self.reached.recv() => self.on_reached(reached).await,
                reply = &mut rx => {
                    return match reply {
                        Ok(reply) => Ok(Answer::of(reply)),
                        // Crashed by an event (and perhaps started again since).
                        Err(_) if self.workers.get(name).is_none_or(|w| w.crashed || Some(w.incarnation) != incarnation) => {
                            Err(CallError::Gone)
                        }
                        Err(_) => {
                            let why = self.describe_loss(name, &format!("during {kind}")).await;
                            self.fail(why);
                            Err(CallError::Broken)
                        }
                    };
                }
                () = tokio::time::sleep(Duration::from_millis(POLL_MS)) => {
                    self.poll().await;
                    if self.broken() {
                        return Err(CallError::Broken);
                    }
                    if Instant::now() >= deadline {
                        let why = self.describe_hang(name, kind, bound_ms).await;
                        self.fail(why);
                        return Err(CallError::Broken);
                    }
                }
            }
        }
    }

    /// Waits `ms` of real time, polling and applying the points reached meanwhile.
    async fn wait(&mut self, ms: u64) {
        let deadline = Instant::now() + Duration::from_millis(ms);
        while Instant::now() < deadline && !self.broken() {
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::select! {
                biased;
                Some(reached) = self.reached.recv() => self.on_reached(reached).await,
                () = tokio::time::sleep(left.min(Duration::from_millis(POLL_MS))) => {}
            }
            self.poll().await;
        }
    }

    /// Waits, polling, until every announced fake has had nothing in flight (no request being
    /// worked on, no late commit waiting, no transaction in a pool) for [`SETTLED_MS`], and at
    /// most `bound_ms`: a wall-clock run need not wait out a settle bound that nothing uses.
    async fn wait_settled(&mut self, bound_ms: u64) {
        let deadline = Instant::now() + Duration::from_millis(bound_ms);
        let mut quiet_since: Option<Instant> = None;
        while Instant::now() < deadline && !self.broken() {
            let settled = self
                .fakes
                .all()
                .iter()
                .filter(|f| setup::announced(self.scenario, f.name()))
                .all(fake_services::Fake::settled);
            let now = Instant::now();
            match (settled, quiet_since) {
                (false, _) => quiet_since = None,
                (true, None) => quiet_since = Some(now),
                (true, Some(since)) if now - since >= Duration::from_millis(SETTLED_MS) => return,
                (true, Some(_)) => {}
            }
            self.wait(POLL_MS).await;
        }
    }

    /// Applies the events of a point some request reached: first what must happen before its
    /// answer goes (signals, heal, clock jumps, asking for a pass), then the gate opens, then
    /// new workers start (a start takes seconds, which no answer should wait for).
    async fn on_reached(&mut self, reached: Reached) {
        let Reached { events, gate } = reached;
        let mut later = Vec::new();
        for i in events {
            match self.scenario.events.get(i).map(|e| &e.action) {
                Some(EventAction::StartWorker { .. }) => later.push(i),
                _ => self.fire(i).await,
            }
        }
        let _ = gate.send(());
        for i in later {
            self.fire(i).await;
        }
    }

    /// Resumes due pauses, and notices workers that broke the protocol or died in the
    /// background.
    async fn poll(&mut self) {
        let now = Instant::now();
        let resuming: Vec<String> = self
            .workers
            .iter()
            .filter(|(_, w)| w.resume_at.is_some_and(|at| at <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for name in resuming {
            self.resume(&name).await;
        }
        if self.background {
            let due: Vec<String> = self
                .workers
                .iter()
                .filter(|(_, w)| {
                    !w.crashed
                        && w.resume_at.is_none()
                        && w.queue.is_empty()
                        && w.background.is_some_and(|at| at <= now)
                        && lock(&w.link).pending.is_empty()
                })
                .map(|(n, _)| n.clone())
                .collect();
            for name in due {
                self.send_and_forget(&name, "reconcile", json!({})).await;
                if let Some(w) = self.workers.get_mut(&name) {
                    w.background = Some(Instant::now() + Duration::from_millis(BACKGROUND_ROUND_MS));
                }
            }
        }
        let names: Vec<String> = self.workers.keys().cloned().collect();
        for name in names {
            if self.pump(&name).await.is_err() {
                return;
            }
            self.check(&name).await;
        }
    }

    async fn resume(&mut self, name: &str) {
        let Some(w) = self.workers.get_mut(name) else { return };
        if w.resume_at.take().is_none() {
            return;
        }
        let detail = match w.signal("CONT").await {
            Ok(()) => "SIGCONT".to_string(),
            Err(e) => format!("SIGCONT failed: {e}"),
        };
        self.moment(name, "resume", detail);
    }

    /// Reports a worker that broke the protocol or whose stdout ended while it was supposed
    /// to live, even when no request of the driver is waiting on it.
    async fn check(&mut self, name: &str) {
        let Some(w) = self.workers.get_mut(name) else { return };
        if w.crashed || w.reported {
            return;
        }
        let (violation, closed, interrupted) = {
            let link = lock(&w.link);
            (link.violation.is_some(), link.closed, link.interrupted)
        };
        if !violation && !closed {
            return;
        }
        let exited = matches!(w.child.try_wait(), Ok(Some(_)));
        let since = *w.closed_since.get_or_insert_with(Instant::now);
        if violation || exited || since.elapsed() >= Duration::from_millis(EXIT_MS_MAX) {
            let when = match interrupted {
                Some(kind) => format!("during {kind}"),
                None => "while no request was waiting on it".to_string(),
            };
            let why = w.failure(name, &when).await;
            self.fail(why);
        }
    }

    /// Waits until worker life `origin` has sent nothing for [`PAUSE_QUIET_MS`], at most
    /// [`PAUSE_QUIET_MS_MAX`].
    async fn quiet(&self, origin: &str) {
        let deadline = Instant::now() + Duration::from_millis(PAUSE_QUIET_MS_MAX);
        let quiet = Duration::from_millis(PAUSE_QUIET_MS);
        loop {
            let now = Instant::now();
            let since = self.tap.last_arrival(origin).map_or(quiet, |at| now.saturating_duration_since(at));
            if since >= quiet || now >= deadline {
                return;
            }
            tokio::time::sleep((quiet - since).min(deadline - now)).await;
        }
    }

    async fn fire_point(&mut self, matches: impl Fn(&Point) -> bool) {
        for i in self.scenario.events_at(matches) {
            self.fire(i).await;
        }
    }

    async fn fire(&mut self, i: usize) {
        if self.fired.get(i).copied().unwrap_or(true) {
            return;
        }
        self.fired[i] = true;
        let Some(event) = self.scenario.events.get(i).cloned() else { return };
        match event.action {
            EventAction::Crash { worker } => {
                let mut detail = "not running".to_string();
                if let Some(w) = self.workers.get_mut(&worker).filter(|w| !w.crashed) {
                    w.crashed = true;
                    w.resume_at = None;
                    w.queue.clear();
                    detail = match w.signal("KILL").await {
                        Ok(()) => "SIGKILL".into(),
                        Err(e) => format!("SIGKILL to the group failed ({e}); killed directly"),
                    };
                    let _ = w.child.start_kill();
                }
                self.moment(&worker, "crash", detail);
            }
            EventAction::Pause { worker, for_ms } => {
                let mut detail = format!("for {for_ms} ms (not running)");
                if let Some(incarnation) =
                    self.workers.get(&worker).filter(|w| !w.crashed).map(|w| w.incarnation)
                {
                    self.quiet(&format!("{worker}#{incarnation}")).await;
                }
                if let Some(w) = self.workers.get_mut(&worker).filter(|w| !w.crashed) {
                    detail = match w.signal("STOP").await {
                        Ok(()) => {
                            stopped(w.pgid).await;
                            let until = Instant::now() + Duration::from_millis(for_ms);
                            w.resume_at = Some(w.resume_at.map_or(until, |at| at.max(until)));
                            format!("for {for_ms} ms")
                        }
                        Err(e) => format!("for {for_ms} ms: SIGSTOP failed: {e}"),
                    };
                }
                self.moment(&worker, "pause", detail);
            }
            EventAction::StartWorker { worker } => {
                if self.workers.get(&worker).is_some_and(|w| !w.crashed) {
                    self.moment(&worker, "start", "already running".into());
                    return;
                }
                match self.start_worker(&worker).await {
                    Ok(()) => {
                        // The new worker takes over what it can, in the background: a drain,
                        // then a reconcile round whenever it is idle (see `poll`).
                        let drain = json!({"timeout_ms": self.bounds.drain_ms});
                        self.send_and_forget(&worker, "drain", drain).await;
                        if let Some(w) = self.workers.get_mut(&worker) {
                            w.background = Some(Instant::now() + Duration::from_millis(BACKGROUND_ROUND_MS));
                        }
                    }
                    Err(e) => self.fail(e),
                }
            }
            EventAction::ClockJump { service, by_ms } => {
                if let Some(fake) = self.fakes.get(&service) {
                    fake.clock().jump_ms(by_ms);
                }
                self.moment(&service, "clock_jump", format!("+{by_ms} ms"));
            }
            EventAction::Heal => {
                setup::heal(&self.fakes);
                self.moment("harness", "heal", "every fault disarmed".into());
            }
            EventAction::Reconcile { worker } => {
                self.send_and_forget(&worker, "reconcile", json!({})).await;
                self.moment(&worker, "reconcile", "asked for a pass".into());
            }
        }
    }

    async fn act(&mut self) {
        for intent in self.scenario.intents.clone() {
            let fields = json!({"intent": intent_message(&intent)});
            match self.call(FIRST_WORKER, "propose", fields).await {
                Ok(Answer::Ok(_)) => {
                    self.observed.acknowledged.push(intent.id.clone());
                    self.moment(FIRST_WORKER, "proposed", intent.id.clone());
                    let id = intent.id.clone();
                    self.fire_point(
                        |p| matches!(p, Point::AfterPropose { after_propose } if *after_propose == id),
                    )
                    .await;
                }
                Ok(Answer::Error { code, text }) => {
                    if code == u64::from(code::NOT_SUPPORTED)
                        && !self.observed.unsupported.contains(&intent.action)
                    {
                        self.observed.unsupported.push(intent.action.clone());
                    }
                    self.observed.unacknowledged.insert(intent.id.clone(), format!("code {code}: {text}"));
                }
                Err(CallError::Gone) => {
                    self.observed.unacknowledged.insert(intent.id.clone(), "the worker was down".into());
                }
                Err(CallError::Broken) => return,
            }
        }
        self.fire_point(|p| matches!(p, Point::Phase { after_phase: PhaseName::Act })).await;
    }

    /// One drain on `name`; false when the executor broke. A drain that times out is not the
    /// executor's fault (another worker's lease may hold an intent), as in sim.
    async fn drain_on(&mut self, name: &str) -> bool {
        match self.call(name, "drain", json!({"timeout_ms": self.bounds.drain_ms})).await {
            Ok(Answer::Ok(_)) | Err(CallError::Gone) => true,
            Ok(Answer::Error { code, .. }) if code == u64::from(code::TIMEOUT) => true,
            Ok(Answer::Error { code, text }) => {
                self.fail(format!("worker {name} failed drain: code {code}: {text}"));
                false
            }
            Err(CallError::Broken) => false,
        }
    }

    async fn drain(&mut self) {
        if self.drain_on(FIRST_WORKER).await {
            self.fire_point(|p| matches!(p, Point::Phase { after_phase: PhaseName::Drain })).await;
        }
    }

    async fn reconcile(&mut self, settle_ms: u64) {
        setup::heal(&self.fakes);
        self.moment("harness", "heal", "every fault disarmed".into());
        // Until nothing is in flight at any fake, at most the announced settle bound (and read
        // lags, which the heal ended: no read lags from here on).
        self.wait_settled(settle_ms).await;
        if self.broken() {
            return;
        }
        let paused: Vec<String> =
            self.workers.iter().filter(|(_, w)| w.resume_at.is_some()).map(|(n, _)| n.clone()).collect();
        for name in paused {
            self.resume(&name).await;
        }
        let round_pause_ms = self.limits.request_timeout_ms + settle_ms + executor::engine::SAFETY_MARGIN_MS;
        let names: Vec<String> = self.workers.keys().cloned().collect();
        for round in 1..=RECONCILE_ROUNDS_MAX {
            self.observed.reconcile_rounds = round;
            // Crashed workers come back first; a crash point may also fire during a round.
            if !self.restart_crashed().await {
                return;
            }
            for name in &names {
                match self.call(name, "reconcile", json!({})).await {
                    Ok(Answer::Ok(_)) | Err(CallError::Gone) => {}
                    Ok(Answer::Error { code, text }) => {
                        return self.fail(format!("worker {name} failed reconcile: code {code}: {text}"));
                    }
                    Err(CallError::Broken) => return,
                }
                if !self.drain_on(name).await {
                    return;
                }
            }
            match self.status().await {
                Ok(Some(claims)) if claims.iter().all(|c| !unresolved(&c.state)) => break,
                Ok(_) => {}
                Err(CallError::Broken) => return,
                Err(CallError::Gone) => {}
            }
            self.wait(round_pause_ms).await;
            if self.broken() {
                return;
            }
        }
    }

    /// Restarts every crashed worker on the shared state directory; false if one would not
    /// start (the executor error says why).
    async fn restart_crashed(&mut self) -> bool {
        let crashed: Vec<String> =
            self.workers.iter().filter(|(_, w)| w.crashed).map(|(n, _)| n.clone()).collect();
        for name in crashed {
            if let Err(e) = self.start_worker(&name).await {
                self.fail(e);
                return false;
            }
        }
        true
    }

    /// `w1`'s claims; `None` when it answered with an error.
    async fn status(&mut self) -> Result<Option<Vec<Claim>>, CallError> {
        match self.call(FIRST_WORKER, "status", json!({})).await? {
            Answer::Ok(reply) => match claims(&reply) {
                Ok(claims) => Ok(Some(claims)),
                Err(why) => {
                    self.fail(format!("worker {FIRST_WORKER} sent a malformed status_ok: {why}"));
                    Err(CallError::Broken)
                }
            },
            Answer::Error { .. } => Ok(None),
        }
    }

    async fn finish(&mut self, settle_ms: u64) {
        // The driver has the last word: no more background rounds.
        self.background = false;
        // Late commits land within the settle bound: once none waits and no request is being
        // worked on, a ledger is final.
        self.wait_settled(settle_ms).await;
        if self.broken() || !self.restart_crashed().await {
            return;
        }
        match self.call(FIRST_WORKER, "status", json!({})).await {
            Ok(Answer::Ok(reply)) => match claims(&reply) {
                Ok(claims) => self.observed.claims = claims,
                Err(why) => self.fail(format!("worker {FIRST_WORKER} sent a malformed status_ok: {why}")),
            },
            Ok(Answer::Error { code, text }) => {
                self.fail(format!("worker {FIRST_WORKER} failed status: code {code}: {text}"));
            }
            Err(CallError::Gone) => self.fail(format!("worker {FIRST_WORKER} is gone at the end")),
            Err(CallError::Broken) => {}
        }
        self.collect();
    }

    /// Ledgers and journals of the announced services.
    fn collect(&mut self) {
        for fake in self.fakes.all().into_iter().filter(|f| setup::announced(self.scenario, f.name())) {
            self.observed.ledgers.insert(fake.name().to_string(), fake.ledger());
            self.observed.journals.insert(fake.name().to_string(), fake.journal());
        }
    }

    /// Ends every worker: `shutdown` and a bounded wait for a healthy run, SIGKILL otherwise
    /// or after the bound.
    async fn shutdown(&mut self) {
        let graceful = !self.broken();
        let names: Vec<String> = self.workers.keys().cloned().collect();
        for name in names {
            let Some(w) = self.workers.get_mut(&name) else { continue };
            if w.resume_at.take().is_some() {
                let _ = w.signal("CONT").await;
            }
            let idle = lock(&w.link).pending.is_empty() && w.queue.is_empty();
            if graceful && idle && !w.crashed && w.alive() {
                let msg_id = w.next_msg_id;
                w.next_msg_id += 1;
                let line = format!("{}\n", json!({"type": "shutdown", "msg_id": msg_id}));
                let asked = async {
                    w.stdin.write_all(line.as_bytes()).await?;
                    w.stdin.flush().await
                };
                let written = tokio::time::timeout(Duration::from_millis(WRITE_MS_MAX), asked).await;
                let exited = matches!(written, Ok(Ok(())))
                    && tokio::time::timeout(Duration::from_millis(SHUTDOWN_MS_MAX), w.child.wait())
                        .await
                        .is_ok();
                if exited {
                    continue;
                }
            }
            w.kill().await;
        }
    }
}

fn intent_message(intent: &IntentSpec) -> Value {
    let mut message = json!({"id": intent.id, "action": intent.action, "params": intent.params});
    if let (Some(replaces), Some(map)) = (&intent.replaces, message.as_object_mut()) {
        map.insert("replaces".into(), json!(replaces));
    }
    message
}

/// The claims in a `status_ok`.
fn claims(reply: &Value) -> Result<Vec<Claim>, String> {
    let intents = reply.get("intents").and_then(Value::as_array).ok_or("no intents list")?;
    intents
        .iter()
        .map(|i| {
            let id = i
                .get("id")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("an intent without a string id: {i}"))?;
            let state = i
                .get("state")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("intent {id} has no string state"))?;
            Ok(Claim {
                id: id.to_string(),
                state: state.to_string(),
                attempts: i.get("attempts").and_then(Value::as_u64).unwrap_or(0),
                evidence: i.get("evidence").cloned().unwrap_or(Value::Null),
            })
        })
        .collect()
}

fn unresolved(state: &str) -> bool {
    matches!(state, "recorded" | "blocked" | "submitted" | "unknown")
}

fn rejected(scenario: &Scenario, problem: String) -> setup::SetupError {
    setup::SetupError::Rejected { scenario: scenario.name.clone(), problem }
}

/// Runs one scenario in the live driver, on real time: the fakes on loopback, the executor as
/// subprocesses of `executor` sharing `work_dir/state`. Needs a tokio runtime with I/O and
/// time enabled (see [`run_blocking`]). An executor that misbehaves ends the run early with
/// [`Observed::executor_error`]; an `Err` is a scenario or harness problem.
pub async fn run(
    scenario: &Scenario,
    seed: u64,
    executor: &ExecutorCommand,
    work_dir: &Path,
) -> Result<Observed, setup::SetupError> {
    let clock: Arc<dyn Clock> = Arc::new(TokioClock::from_wall_clock());
    let fakes = Fakes::new(Arc::clone(&clock), seed);
    setup::prepare(scenario, &fakes)?;
    let contracts = setup::contracts(scenario, &fakes);
    let settle_ms = setup::settle_ms(scenario, &contracts);
    let limits = setup::limits_for(scenario);
    let state_dir = work_dir.join("state");
    std::fs::create_dir_all(&state_dir)
        .map_err(|e| rejected(scenario, format!("cannot create {}: {e}", state_dir.display())))?;
    let (reached_tx, reached) = mpsc::unbounded_channel();
    let tap = Arc::new(PointTap {
        points: RequestPoints::new(scenario),
        reached: reached_tx,
        last_arrival: Mutex::new(HashMap::new()),
    });
    let mut run = Run {
        scenario,
        command: executor,
        fakes,
        clock,
        contracts,
        servers: Vec::new(),
        tap,
        reached,
        bounds: Bounds::of(scenario, &limits, settle_ms),
        limits,
        state_dir,
        workers: BTreeMap::new(),
        background: true,
        timeline: Arc::new(Mutex::new(Vec::new())),
        observed: Observed::default(),
        fired: vec![false; scenario.events.len()],
    };
    match run.start_worker(FIRST_WORKER).await {
        Err(e) => run.fail(e),
        Ok(()) => {
            run.act().await;
            if !run.broken() {
                run.drain().await;
            }
            if !run.broken() {
                run.reconcile(settle_ms).await;
            }
            if !run.broken() {
                run.finish(settle_ms).await;
            }
        }
    }
    run.shutdown().await;
    if run.observed.ledgers.is_empty() {
        // The run ended early: what the fakes saw still explains the executor's error.
        run.collect();
    }
    // Held answers go (their gates open as the channel closes), then the listeners stop.
    run.reached.close();
    while let Ok(reached) = run.reached.try_recv() {
        let _ = reached.gate.send(());
    }
    for server in std::mem::take(&mut run.servers) {
        let _ = tokio::time::timeout(Duration::from_millis(SERVER_STOP_MS_MAX), server.stop()).await;
    }
    let mut observed = run.observed;
    observed.timeline = std::mem::take(&mut *lock(&run.timeline));
    observed.timeline.sort_by_key(|m| m.at_ms);
    Ok(observed)
}

/// Runs one scenario on a fresh current-thread runtime, in a fresh directory of its own under
/// `work_dir` that is removed afterwards.
pub fn run_blocking(
    scenario: &Scenario,
    seed: u64,
    executor: &ExecutorCommand,
    work_dir: &Path,
) -> Result<Observed, RunError> {
    let runtime =
        tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(RunError::Runtime)?;
    // A number of its own per run, as in sim: the same scenario may run twice at once (two
    // executors, or a shrink beside the run), and must never share a state directory.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = work_dir.join(format!("{}-{seed}-{n}", scenario.name));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| RunError::WorkDir(dir.display().to_string(), e))?;
    let observed = runtime.block_on(run(scenario, seed, executor, &dir)).map_err(RunError::Setup);
    drop(runtime);
    let _ = std::fs::remove_dir_all(&dir);
    observed
}

/// Why the live driver could not run a scenario (a harness problem, not a verdict).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start the live driver's runtime: {0}")]
    Runtime(std::io::Error),
    #[error("cannot create the work directory {0}: {1}")]
    WorkDir(String, std::io::Error),
    #[error(transparent)]
    Setup(setup::SetupError),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        let c = ExecutorCommand::parse(line).unwrap();
        std::iter::once(c.program.to_string_lossy().into_owned()).chain(c.args).collect()
    }

    #[test]
    fn command_lines_split_on_whitespace_and_respect_quotes() {
        assert_eq!(words("python3 my_executor.py --flag"), ["python3", "my_executor.py", "--flag"]);
        assert_eq!(words("  a\t b  "), ["a", "b"]);
        assert_eq!(words(r#"run "two words" 'it''s' x\ y"#), ["run", "two words", "its", "x y"]);
        assert_eq!(words(r#"e "a \"q\" \\ \n" '' "#), ["e", r#"a "q" \ \n"#, ""]);
        assert_eq!(words("a'b c'd"), ["ab cd"]);
    }

    #[test]
    fn bad_command_lines_say_what_is_wrong() {
        assert_eq!(ExecutorCommand::parse("  "), Err(CommandLineError::Empty));
        assert!(matches!(
            ExecutorCommand::parse("a 'b"),
            Err(CommandLineError::Unterminated { quote: '\'', .. })
        ));
        assert!(matches!(
            ExecutorCommand::parse("a \"b"),
            Err(CommandLineError::Unterminated { quote: '"', .. })
        ));
        assert!(matches!(ExecutorCommand::parse("a\\"), Err(CommandLineError::TrailingBackslash(_))));
    }

    #[test]
    fn a_command_displays_as_a_line_that_parses_back() {
        let c = ExecutorCommand {
            program: "/opt/my exec".into(),
            args: vec!["--x".into(), "it's".into(), "".into()],
        };
        assert_eq!(ExecutorCommand::parse(&c.to_string()).unwrap(), c);
    }

    #[test]
    fn the_run_can_be_spawned_on_a_multi_thread_runtime() {
        fn send<T: Send>(_: &T) {}
        let scenario: Scenario = serde_json::from_value(json!({"name": "x", "intents": []})).unwrap();
        let command = ExecutorCommand::parse("true").unwrap();
        send(&run(&scenario, 1, &command, Path::new("/nonexistent")));
    }

    #[test]
    fn a_missing_reference_binary_names_the_path_and_the_fix() {
        let err = ExecutorCommand::reference_in(Path::new("/nonexistent-dir")).unwrap_err().to_string();
        assert!(err.contains("/nonexistent-dir/twice-executor") && err.contains("cargo build"), "{err}");
    }

    #[test]
    fn stdout_lines_follow_the_protocol_rules() {
        let lane = Lane {
            worker: "w1".into(),
            clock: Arc::new(TokioClock::starting_at(0)),
            timeline: Arc::new(Mutex::new(Vec::new())),
            link: Arc::new(Mutex::new(Link::default())),
        };
        let (tx, mut rx) = oneshot::channel();
        lock(&lane.link).pending.insert(7, Pending { kind: "drain", bound_ms: 1, reply: tx });
        assert_eq!(lane.handle(b"\n"), Ok(()));
        assert_eq!(lane.handle(br#"{"type":"event","intent_id":"a","state":"confirmed"}"#), Ok(()));
        assert_eq!(lock(&lane.timeline)[0].detail, "a -> confirmed");
        assert_eq!(lock(&lane.timeline)[0].kind, "state");
        assert_eq!(lane.handle(br#"{"type":"drain_ok","in_reply_to":7}"#), Ok(()));
        assert!(rx.try_recv().is_ok());
        let bad: [(&[u8], &str); 6] = [
            (b"hello", "not JSON"),
            (b"[1]", "not an object"),
            (br#"{"type":"event","intent_id":"a"}"#, "without string intent_id and state"),
            (br#"{"type":"drain_ok"}"#, "no numeric in_reply_to"),
            (br#"{"type":"drain_ok","in_reply_to":8}"#, "which no request is waiting on"),
            (br#"{"type":"error","in_reply_to":9}"#, "without a numeric code"),
        ];
        for (line, want) in bad {
            lock(&lane.link)
                .pending
                .insert(9, Pending { kind: "status", bound_ms: 1, reply: oneshot::channel().0 });
            let err = lane.handle(line).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
        lock(&lane.link)
            .pending
            .insert(10, Pending { kind: "status", bound_ms: 1, reply: oneshot::channel().0 });
        let err = lane.handle(br#"{"type":"drain_ok","in_reply_to":10}"#).unwrap_err();
        assert!(err.contains("answered a status with type \"drain_ok\""), "{err}");
    }
}
