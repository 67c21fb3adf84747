//! One worker process of the live backend: the requests waiting for its replies, the lane
//! its stdout lines go to (events onto the timeline, replies to their requests), and what is
//! known of its life.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::oneshot;
use tokio::time::Instant;
use vocabulary::Clock;

use super::TIMELINE_MOMENTS_MAX;
use crate::phase_engine::{Life, Timeline};
use crate::process::{self, EXIT_MS_MAX, Ending, ExecutorCommand, Frame, Out, Process, excerpt, lock};
use results::Moment;

/// A request waiting for its reply.
pub(super) struct Pending {
    pub(super) kind: &'static str,
    /// How long the reply may take once the requests ahead of it are answered.
    pub(super) bound_ms: u64,
    pub(super) reply: oneshot::Sender<Value>,
}

/// What a worker's stdout reader shares with the backend.
#[derive(Default)]
pub(super) struct Link {
    pub(super) pending: HashMap<u64, Pending>,
    /// How the worker broke the protocol, if it did.
    pub(super) violation: Option<String>,
    /// Its stdout ended: it closed it, or died.
    pub(super) closed: bool,
    /// The request that was in flight when it broke or its stdout ended.
    pub(super) interrupted: Option<&'static str>,
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

/// Where a worker's stdout lines go: events onto the timeline, replies to their requests.
pub(super) struct Lane {
    pub(super) worker: String,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) timeline: Timeline,
    pub(super) link: Arc<Mutex<Link>>,
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

    /// What [`process::read_lines`] read; false once nothing more is to be read.
    fn take(&self, out: Out) -> bool {
        match out {
            Out::Line(line) => match self.handle(&line) {
                Ok(()) => return true,
                Err(why) => self.violate(why),
            },
            Out::TooLong => self.violate(process::too_long()),
            // A stream that ended inside a line: the process died mid-message, which its exit
            // status tells better than the fragment.
            Out::Partial(_) | Out::End => self.close(),
        }
        false
    }

    /// One stdout line; `Err` says how it breaks the protocol.
    fn handle(&self, line: &str) -> Result<(), String> {
        let Some(frame) = process::frame(line)? else { return Ok(()) };
        let (kind, in_reply_to, object) = match frame {
            Frame::Event { intent_id, state } => {
                let at_ms = self.clock.now_ms();
                let mut timeline = self.timeline.moments();
                if timeline.len() < TIMELINE_MOMENTS_MAX {
                    timeline.push(Moment {
                        at_ms,
                        lane: self.worker.clone(),
                        kind: "state".into(),
                        detail: format!("{intent_id} -> {state}"),
                    });
                }
                return Ok(());
            }
            Frame::Reply { kind, in_reply_to, object } => (kind, in_reply_to, object),
        };
        let Some(msg_id) = in_reply_to.as_ref().and_then(Value::as_u64) else {
            return Err(format!(
                "wrote a line that is neither an event nor a reply (no numeric in_reply_to): {}",
                excerpt(line.trim())
            ));
        };
        let mut link = lock(&self.link);
        let Some(pending) = link.pending.remove(&msg_id) else {
            return Err(format!(
                "replied to msg_id {msg_id}, which no request is waiting on: {}",
                excerpt(line.trim())
            ));
        };
        process::check_reply_type(&kind, &object, Some(pending.kind))?;
        // The caller may have stopped waiting (fire-and-forget requests): that is fine.
        let _ = pending.reply.send(Value::Object(object));
        Ok(())
    }
}

/// A request waiting for the one in flight to be answered.
pub(super) struct Queued {
    pub(super) msg_id: u64,
    pub(super) line: String,
    pub(super) pending: Pending,
}

/// One worker of a live run: a process and the requests for it.
pub struct LiveWorker {
    pub(super) incarnation: u32,
    pub(super) process: Process,
    pub(super) link: Arc<Mutex<Link>>,
    pub(super) next_msg_id: u64,
    /// Requests not yet written: the protocol has one request in flight at a time.
    pub(super) queue: VecDeque<Queued>,
    /// Killed by a crash event; it restarts when the reconcile phase begins.
    pub(super) crashed: bool,
    /// Stopped by a pause event until then.
    pub(super) resume_at: Option<Instant>,
    /// When its stdout was first seen closed while it was expected to live.
    pub(super) closed_since: Option<Instant>,
    /// Started by an event: it works in the background; next round not before this.
    pub(super) background: Option<Instant>,
    /// Its misbehaviour is already reported.
    pub(super) reported: bool,
}

impl LiveWorker {
    pub(super) fn spawn(
        command: &ExecutorCommand,
        lane: Lane,
        incarnation: u32,
    ) -> Result<LiveWorker, String> {
        let (process, stdout) = Process::spawn(command, &format!("{}#{incarnation}", lane.worker))?;
        let link = Arc::clone(&lane.link);
        let tag = process.tag();
        tokio::spawn(process::read_lines(stdout, tag, move |out| std::future::ready(lane.take(out))));
        Ok(LiveWorker {
            incarnation,
            process,
            link,
            next_msg_id: 1,
            queue: VecDeque::new(),
            crashed: false,
            resume_at: None,
            closed_since: None,
            background: None,
            reported: false,
        })
    }

    pub(super) async fn stderr_tail(&mut self) -> String {
        self.process.stderr_tail().await
    }

    /// Why its stdout ended while an answer was due.
    pub(super) async fn failure(&mut self, name: &str, when: &str) -> String {
        self.reported = true;
        let violation = lock(&self.link).violation.clone();
        if let Some(why) = violation {
            let tail = self.stderr_tail().await;
            return format!("worker {name} broke the protocol {when}: {why}; stderr: {tail}");
        }
        let ending = self.process.ending().await;
        let tail = self.stderr_tail().await;
        match ending {
            Ending::Exited(status) => format!("worker {name} exited with {status} {when}; stderr: {tail}"),
            Ending::NoStatus(e) => {
                format!("worker {name} stopped answering {when} (no exit status: {e}); stderr: {tail}")
            }
            Ending::StillRunning => format!(
                "worker {name} closed its stdout {when} and did not exit within {EXIT_MS_MAX} ms; stderr: {tail}"
            ),
        }
    }
}

impl Life for LiveWorker {
    fn incarnation(&self) -> u32 {
        self.incarnation
    }

    fn crashed(&self) -> bool {
        self.crashed
    }
}

/// A reply: `<type>_ok` with its fields, or `error`.
pub(super) enum Answer {
    Ok(Value),
    Error { code: u64, text: String },
}

impl Answer {
    pub(super) fn of(reply: Value) -> Answer {
        if reply.get("type").and_then(Value::as_str) == Some("error") {
            let code = reply.get("code").and_then(Value::as_u64).unwrap_or(u64::MAX);
            let text = reply.get("text").and_then(Value::as_str).unwrap_or_default().to_string();
            Answer::Error { code, text }
        } else {
            Answer::Ok(reply)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vocabulary::TokioClock;

    #[test]
    fn stdout_lines_follow_the_protocol_rules() {
        let lane = Lane {
            worker: "w1".into(),
            clock: Arc::new(TokioClock::starting_at(0)),
            timeline: Timeline::default(),
            link: Arc::new(Mutex::new(Link::default())),
        };
        let (tx, mut rx) = oneshot::channel();
        lock(&lane.link).pending.insert(7, Pending { kind: "drain", bound_ms: 1, reply: tx });
        assert_eq!(lane.handle("\n"), Ok(()));
        assert_eq!(lane.handle(r#"{"type":"event","intent_id":"a","state":"confirmed"}"#), Ok(()));
        assert_eq!(lane.timeline.moments()[0].detail, "a -> confirmed");
        assert_eq!(lane.timeline.moments()[0].kind, "state");
        assert_eq!(lane.handle(r#"{"type":"drain_ok","in_reply_to":7}"#), Ok(()));
        assert!(rx.try_recv().is_ok());
        let bad: [(&str, &str); 6] = [
            ("hello", "not JSON"),
            ("[1]", "not an object"),
            (r#"{"type":"event","intent_id":"a"}"#, "without string intent_id and state"),
            (r#"{"type":"drain_ok"}"#, "no numeric in_reply_to"),
            (r#"{"type":"drain_ok","in_reply_to":8}"#, "which no request is waiting on"),
            (r#"{"type":"error","in_reply_to":9}"#, "without a numeric code"),
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
        let err = lane.handle(r#"{"type":"drain_ok","in_reply_to":10}"#).unwrap_err();
        assert!(err.contains("answered a status with type \"drain_ok\""), "{err}");
    }
}
