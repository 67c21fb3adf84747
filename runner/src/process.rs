//! The stdio client of `twice/1` (`docs/protocol.md`): one executor process, as the live
//! backend ([`crate::live`]) and `twice check-executor` (`conformance` (its own crate)) both run it.
//!
//! A [`Process`] is started in a process group of its own, so that every signal reaches
//! whatever it starts (`sh -c`, `uv run`, ...): a crash is a SIGKILL to the group, a pause a
//! SIGSTOP. Its stdin takes one line per request, written within [`WRITE_MS_MAX`] (an
//! executor that stops reading its stdin cannot block the harness); its stdout is read line
//! by line by [`read_lines`], at most [`LINE_BYTES_MAX`] bytes a line; the last
//! [`STDERR_TAIL_BYTES`] of its stderr are kept for error messages. [`frame`] holds the
//! framing rules every stdout line must follow, and [`check_reply_type`] those of a reply;
//! both users apply them, each on top of its own bookkeeping (the live backend matches
//! replies to requests in flight; the conformance kit expects one reply at a time and checks
//! more).

pub mod command;
mod kill;

use std::collections::VecDeque;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinHandle;
use tokio::time::Instant;

pub use command::{CommandLineError, ExecutorCommand, LocateError, REFERENCE_BINARY};
use kill::{MARKED_GONE_MS_MAX, running_groups};
pub use kill::{
    MARKER_VARIABLE, become_subreaper, kill_every_group, kill_marked, kill_orphans, signal_group,
};

/// Longest stdout line read from an executor: the protocol's limit.
pub use vocabulary::protocol::LINE_BYTES_MAX;
/// How much of a process's stderr is kept for error messages.
pub const STDERR_TAIL_BYTES: usize = 4 * 1024;
/// How much of an offending stdout line an error message quotes.
const EXCERPT_CHARS_MAX: usize = 200;
/// Writing one line to a process's stdin.
pub const WRITE_MS_MAX: u64 = 5_000;
/// Waiting for a process's exit status once it has closed its stdout or been killed.
pub const EXIT_MS_MAX: u64 = 2_000;
/// Waiting for the rest of a dead process's stderr.
pub const STDERR_FLUSH_MS_MAX: u64 = 200;
/// How long [`Process::stopped`] waits for a SIGSTOP to take hold.
const STOP_MS_MAX: u64 = 200;

/// How much of a line exchanged with an executor a `twice::executor` log line quotes; the
/// line's whole length is said beside it.
pub const LOG_LINE_BYTES_MAX: usize = 1024;

/// Every stdout line is one JSON object: the rule an error message quotes.
const LINE_RULE: &str = "every stdout line must be one JSON object; logs belong on stderr";

pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The newest bytes a process wrote to stderr.
#[derive(Default)]
pub struct Tail(VecDeque<u8>);

impl Tail {
    pub fn push(&mut self, bytes: &[u8]) {
        self.0.extend(bytes);
        let excess = self.0.len().saturating_sub(STDERR_TAIL_BYTES);
        self.0.drain(..excess);
    }

    pub fn text(&self) -> String {
        let bytes: Vec<u8> = self.0.iter().copied().collect();
        let text = String::from_utf8_lossy(&bytes).trim().to_string();
        if text.is_empty() { "(nothing)".to_string() } else { text }
    }
}

/// Why a line could not be written to a process's stdin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteError {
    /// Its stdin is closed: it died, or is about to.
    Closed,
    /// It did not read its stdin within [`WRITE_MS_MAX`].
    Stuck,
}

/// Who a line exchanged with an executor came from or went to, for its log line: the
/// worker life (`w1#2`) or the conformance kit's session, and the process id.
#[derive(Debug, Clone)]
pub struct Tag {
    pub worker: Arc<str>,
    pub pid: u32,
}

impl Tag {
    /// Logs one line exchanged with the executor (`twice::executor` at debug): `direction`
    /// is `out` (to its stdin) or `in` (from its stdout). Nothing is cut or copied unless
    /// the line is logged.
    pub fn log(&self, direction: &'static str, line: &str) {
        if !tracing::enabled!(target: "twice::executor", tracing::Level::DEBUG) {
            return;
        }
        let line = line.strip_suffix('\n').unwrap_or(line);
        let shown = &line[..line.floor_char_boundary(LOG_LINE_BYTES_MAX)];
        tracing::debug!(
            target: "twice::executor",
            direction,
            worker = %self.worker,
            pid = self.pid,
            bytes = line.len(),
            truncated = shown.len() < line.len(),
            line = shown,
            "line"
        );
    }
}

/// One executor process: its group, its stdin, its stderr's tail.
pub struct Process {
    child: Child,
    /// The process group it leads.
    pgid: u32,
    tag: Tag,
    stdin: ChildStdin,
    stderr: Arc<Mutex<Tail>>,
    stderr_task: JoinHandle<()>,
    /// `MARKER_VARIABLE=VALUE`, as it reads in `/proc/PID/environ` of its processes.
    marker: Vec<u8>,
    /// [`Process::kill`] ran: nothing of it is left to end when it is dropped.
    killed: bool,
}

impl Process {
    /// Starts `command` in a process group of its own; its stdout is the caller's to read
    /// (see [`read_lines`]). `worker` names it in log lines.
    pub fn spawn(command: &ExecutorCommand, worker: &str) -> Result<(Process, ChildStdout), String> {
        // Spawned and registered under the lock an interrupt kills the groups under: a process
        // is either registered before the interrupt's kill, or never started.
        let mut groups = running_groups();
        if crate::interrupt::interrupted() {
            drop(groups);
            crate::interrupt::hold_if_interrupted();
            return Err(format!("`{command}` not started: the run was interrupted"));
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let marker_value = format!("{}.{n}", std::process::id());
        let mut child = Command::new(&command.program)
            .args(&command.args)
            .env(MARKER_VARIABLE, &marker_value)
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
        groups.insert(pgid);
        drop(groups);
        let tail = Arc::new(Mutex::new(Tail::default()));
        let stderr_task = tokio::spawn(read_stderr(stderr, Arc::clone(&tail)));
        let tag = Tag { worker: Arc::from(worker), pid: pgid };
        tracing::debug!(target: "twice::executor", worker, pid = pgid, command = %command, "executor started");
        let marker = format!("{MARKER_VARIABLE}={marker_value}").into_bytes();
        Ok((Process { child, pgid, tag, stdin, stderr: tail, stderr_task, marker, killed: false }, stdout))
    }

    /// Who it is in log lines; [`read_lines`] takes it too.
    pub fn tag(&self) -> Tag {
        self.tag.clone()
    }

    /// Writes `line` (which ends in `\n`), within [`WRITE_MS_MAX`].
    pub async fn write(&mut self, line: &str) -> Result<(), WriteError> {
        self.tag.log("out", line);
        let write = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.flush().await
        };
        match tokio::time::timeout(Duration::from_millis(WRITE_MS_MAX), write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(WriteError::Closed),
            Err(_) => Err(WriteError::Stuck),
        }
    }

    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Sends `signal` (`KILL`, `STOP`, `CONT`) to its group, if it still runs.
    pub async fn signal(&mut self, signal: &str) -> Result<(), String> {
        if !self.alive() {
            return Ok(());
        }
        signal_group(self.pgid, signal)
    }

    /// Waits (at most [`STOP_MS_MAX`]) until the process shows as stopped in `/proc`, so that
    /// an answer let go after a SIGSTOP reaches a process that can no longer act on it at once.
    pub async fn stopped(&self) {
        let deadline = Instant::now() + Duration::from_millis(STOP_MS_MAX);
        let path = format!("/proc/{}/stat", self.pgid);
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

    /// Kills the process itself (its group is the caller's to signal).
    pub fn start_kill(&mut self) {
        let _ = self.child.start_kill();
    }

    /// SIGKILL to the whole group (a wrapper's children too), reaps the leader, then kills
    /// every process that still carries its marker (children that left the group, daemons
    /// that called `setsid()`), within bounds. Also after the process exited by itself: what
    /// it left running is ended too.
    pub async fn kill(&mut self) {
        // The group even when the leader has exited: its children keep the group (and so its
        // id) alive, and the id cannot be reused while any member lives.
        let _ = signal_group(self.pgid, "KILL");
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(Duration::from_millis(EXIT_MS_MAX), self.child.wait()).await;
        let spared = i32::try_from(self.pgid).ok();
        let deadline = Instant::now() + Duration::from_millis(MARKED_GONE_MS_MAX);
        while kill_marked(&self.marker, spared) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.killed = true;
    }

    /// Waits up to `ms` for the process to exit by itself.
    pub async fn exit_within(&mut self, ms: u64) -> Option<ExitStatus> {
        tokio::time::timeout(Duration::from_millis(ms), self.child.wait()).await.ok().and_then(Result::ok)
    }

    /// How its stdout ended: its exit status within [`EXIT_MS_MAX`], or why there is none.
    pub async fn ending(&mut self) -> Ending {
        match tokio::time::timeout(Duration::from_millis(EXIT_MS_MAX), self.child.wait()).await {
            Ok(Ok(status)) => Ending::Exited(describe(status)),
            Ok(Err(e)) => Ending::NoStatus(e.to_string()),
            Err(_) => Ending::StillRunning,
        }
    }

    /// What it wrote to stderr, including what it wrote just before dying.
    pub async fn stderr_tail(&mut self) -> String {
        if !self.stderr_task.is_finished() {
            let _ =
                tokio::time::timeout(Duration::from_millis(STDERR_FLUSH_MS_MAX), &mut self.stderr_task).await;
        }
        lock(&self.stderr).text()
    }
}

/// How a process whose stdout ended is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// It exited: `status 3`, `signal 9`.
    Exited(String),
    /// It is gone, and its status could not be read.
    NoStatus(String),
    /// It did not exit within [`EXIT_MS_MAX`].
    StillRunning,
}

async fn read_stderr(mut stderr: impl AsyncRead + Unpin, tail: Arc<Mutex<Tail>>) {
    // Large reads: an executor flooding stderr is drained at pipe speed, into a bounded tail.
    let mut buffer = vec![0u8; 64 * 1024];
    while let Ok(n) = stderr.read(&mut buffer).await {
        if n == 0 {
            return;
        }
        lock(&tail).push(&buffer[..n]);
    }
}

/// What came on a process's stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Out {
    /// A whole line, without its `\n`.
    Line(String),
    /// The stream ended inside a line: the process died (or closed stdout) mid-message.
    Partial(String),
    /// A line longer than [`LINE_BYTES_MAX`].
    TooLong,
    /// Stdout ended.
    End,
}

/// Reads `stdout` line by line into `sink` until it ends, a line breaks the framing
/// ([`Out::Partial`], [`Out::TooLong`]), or `sink` says to stop (its future answers whether
/// to go on; it may wait, which holds the reader and so, once the pipe is full, the writer).
pub async fn read_lines<F>(stdout: ChildStdout, tag: Tag, mut sink: impl FnMut(Out) -> F)
where
    F: std::future::Future<Output = bool>,
{
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = (&mut reader).take(LINE_BYTES_MAX as u64 + 1).read_until(b'\n', &mut line).await;
        let out = if !matches!(read, Ok(n) if n > 0) {
            Out::End
        } else if line.len() > LINE_BYTES_MAX {
            Out::TooLong
        } else if let Some(whole) = line.strip_suffix(b"\n") {
            Out::Line(String::from_utf8_lossy(whole).into_owned())
        } else {
            Out::Partial(String::from_utf8_lossy(&line).into_owned())
        };
        match &out {
            Out::Line(text) | Out::Partial(text) => tag.log("in", text),
            Out::TooLong => tracing::debug!(
                target: "twice::executor",
                direction = "in", worker = %tag.worker, pid = tag.pid, bytes_more_than = LINE_BYTES_MAX,
                "line too long"
            ),
            Out::End => tracing::debug!(
                target: "twice::executor", worker = %tag.worker, pid = tag.pid, "stdout closed"
            ),
        }
        let last = !matches!(out, Out::Line(_));
        if !sink(out).await || last {
            return;
        }
    }
}

/// Why a line longer than [`LINE_BYTES_MAX`] breaks the protocol.
pub fn too_long() -> String {
    format!("a stdout line longer than {LINE_BYTES_MAX} bytes ({LINE_RULE})")
}

/// One stdout line, framed: an event, or a reply (to be matched to its request).
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Event { intent_id: String, state: String },
    Reply { kind: String, in_reply_to: Option<Value>, object: Map<String, Value> },
}

/// Frames one stdout line (`None`: a blank line, which is ignored); `Err` says how the line
/// breaks the protocol: it is not one JSON object with a string `type`, or it is an event
/// without a string `intent_id` and `state`.
pub fn frame(line: &str) -> Result<Option<Frame>, String> {
    let text = line.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let object = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(object)) => object,
        Ok(_) => {
            return Err(format!(
                "a stdout line of JSON that is not an object: {} ({LINE_RULE})",
                excerpt(text)
            ));
        }
        Err(_) => return Err(format!("a stdout line that is not JSON: {} ({LINE_RULE})", excerpt(text))),
    };
    let Some(kind) = object.get("type").and_then(Value::as_str).map(str::to_string) else {
        return Err(format!("an object without a string type: {}", excerpt(text)));
    };
    if kind == "event" {
        let field = |name: &str| object.get(name).and_then(Value::as_str).map(str::to_string);
        return match (field("intent_id"), field("state")) {
            (Some(intent_id), Some(state)) => Ok(Some(Frame::Event { intent_id, state })),
            _ => Err(format!("an event without string intent_id and state: {}", excerpt(text))),
        };
    }
    let in_reply_to = object.get("in_reply_to").cloned();
    Ok(Some(Frame::Reply { kind, in_reply_to, object }))
}

/// Checks a reply's type against the request it answers (`None`: a line that had no
/// `msg_id`, which only an `error` answers): `<kind>_ok`, or `error` with a numeric `code`.
pub fn check_reply_type(
    reply_kind: &str,
    object: &Map<String, Value>,
    asked: Option<&str>,
) -> Result<(), String> {
    // The line, for an error message only: a well-formed reply costs no copy.
    let text = || Value::Object(object.clone()).to_string();
    if reply_kind == "error" {
        return match object.get("code").and_then(Value::as_i64) {
            Some(_) => Ok(()),
            None => Err(format!("an error without a numeric code: {}", excerpt(&text()))),
        };
    }
    if asked.is_some_and(|k| reply_kind.strip_suffix("_ok") == Some(k)) {
        return Ok(());
    }
    let expected = asked.map(|k| format!("{k}_ok"));
    let what = asked.map_or("line without msg_id".to_string(), str::to_string);
    let wanted = expected.map_or("error".to_string(), |e| format!("{e} or error"));
    Err(format!("answered a {what} with type \"{reply_kind}\" (expected {wanted}): {}", excerpt(&text())))
}

/// A line, quoted and cut short for an error message.
pub fn excerpt(text: &str) -> String {
    let mut short: String = text.chars().take(EXCERPT_CHARS_MAX).collect();
    if short.len() < text.len() {
        short.push('…');
    }
    format!("{short:?}")
}

/// `status 3`, `signal 9`.
pub fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("status {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => status.to_string(),
    }
}

impl Drop for Process {
    /// A process dropped without [`Process::kill`] (an early return) takes its group and its
    /// marked processes with it, in one pass: kill_on_drop alone would end the leader only.
    fn drop(&mut self) {
        running_groups().remove(&self.pgid);
        if !self.killed {
            let _ = signal_group(self.pgid, "KILL");
            kill_marked(&self.marker, i32::try_from(self.pgid).ok());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An executor that never reads its stdin: a line longer than the pipe holds cannot be
    /// written, and the write gives up after its bound instead of blocking the harness; the
    /// kill that follows ends the process.
    #[test]
    fn a_write_to_a_process_that_does_not_read_is_bounded() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let command = ExecutorCommand::parse("sleep 1000").unwrap();
            let (mut process, _stdout) = Process::spawn(&command, "deaf").unwrap();
            let line = format!("{}\n", "a".repeat(LINE_BYTES_MAX));
            let started = std::time::Instant::now();
            assert_eq!(process.write(&line).await, Err(WriteError::Stuck));
            assert!(started.elapsed() >= Duration::from_millis(WRITE_MS_MAX));
            process.kill().await;
            assert!(process.exited());
        });
    }

    #[test]
    fn lines_are_framed_by_the_protocol_rules() {
        assert_eq!(frame("  \n"), Ok(None));
        assert_eq!(
            frame(r#"{"type":"event","intent_id":"a","state":"confirmed"}"#),
            Ok(Some(Frame::Event { intent_id: "a".into(), state: "confirmed".into() }))
        );
        let bad = [
            ("hello", "not JSON"),
            ("[1]", "not an object"),
            (r#"{"in_reply_to":1}"#, "without a string type"),
            (r#"{"type":"event","intent_id":"a"}"#, "without string intent_id and state"),
        ];
        for (line, want) in bad {
            let err = frame(line).unwrap_err();
            assert!(err.contains(want), "{line}: {err}");
        }
    }

    #[test]
    fn a_reply_answers_its_request_or_is_an_error_with_a_code() {
        let object = |text: &str| match frame(text).unwrap() {
            Some(Frame::Reply { kind, object, .. }) => (kind, object),
            other => panic!("{other:?}"),
        };
        let (kind, o) = object(r#"{"type":"drain_ok","in_reply_to":1}"#);
        assert_eq!(check_reply_type(&kind, &o, Some("drain")), Ok(()));
        let err = check_reply_type(&kind, &o, Some("status")).unwrap_err();
        assert!(err.contains("answered a status with type \"drain_ok\""), "{err}");
        let err = check_reply_type(&kind, &o, None).unwrap_err();
        assert!(err.contains("(expected error)"), "{err}");
        let (kind, o) = object(r#"{"type":"error","in_reply_to":1,"code":12,"text":"bad"}"#);
        assert_eq!(check_reply_type(&kind, &o, None), Ok(()));
        let (kind, o) = object(r#"{"type":"error","in_reply_to":1}"#);
        assert!(check_reply_type(&kind, &o, Some("drain")).unwrap_err().contains("without a numeric code"));
    }
}
