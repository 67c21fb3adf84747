//! The live backend's upkeep of its workers: listeners for each life, the queue of requests
//! to each process (one in flight at a time), polling while the engine waits (resuming pauses,
//! background rounds, noticing a worker that broke or died), and what a reply means.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fake_services::{Listener, Server, Tap};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::time::Instant;
use vocabulary::protocol::code;

use super::worker::{Answer, Pending, Queued};
use super::{BACKGROUND_ROUND_MS, LiveBackend, LiveCall, PAUSE_QUIET_MS, PAUSE_QUIET_MS_MAX, claims};
use crate::phase_engine::{CallError, Reply};
use crate::process::{EXIT_MS_MAX, WRITE_MS_MAX, WriteError, lock};
use crate::setup;
use results::Moment;

impl LiveBackend<'_> {
    pub(super) fn moment(&self, lane: &str, kind: &str, detail: String) {
        let at_ms = self.clock.now_ms();
        self.timeline.push(Moment { at_ms, lane: lane.into(), kind: kind.into(), detail });
    }

    /// Records the first executor error; later ones are consequences.
    pub(super) fn fail(&mut self, why: String) -> String {
        self.failure.get_or_insert(why).clone()
    }

    /// Starts one listener per announced service for the worker life `origin` (`w1#2`), and
    /// returns the services as that life is told them.
    pub(super) async fn listen(
        &mut self,
        origin: &str,
    ) -> Result<BTreeMap<String, vocabulary::protocol::Service>, String> {
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
                vocabulary::protocol::Service { url: server.url(), contract: contract.clone() },
            );
            self.servers.push(server);
        }
        Ok(services)
    }

    pub(super) async fn describe_loss(&mut self, name: &str, when: &str) -> String {
        match self.workers.get_mut(name) {
            Some(w) => w.failure(name, when).await,
            None => format!("worker {name} is gone {when}"),
        }
    }

    pub(super) async fn describe_hang(&mut self, name: &str, kind: &str, waited_ms: u64) -> String {
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
    pub(super) async fn enqueue(
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
            return Err(CallError::Broken(self.fail(why)));
        };
        let queued_ms: u64 = w.queue.iter().map(|q| q.pending.bound_ms).sum();
        let line = format!("{fields}\n");
        w.queue.push_back(Queued { msg_id, line, pending: Pending { kind, bound_ms, reply } });
        self.pump(name).await?;
        Ok((rx, ahead_ms + queued_ms + bound_ms))
    }

    /// Writes the worker's next queued request when none is in flight. A worker that is gone
    /// or broken drops its queue, which tells the waiting callers.
    pub(super) async fn pump(&mut self, name: &str) -> Result<(), CallError> {
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
        let why = match w.process.write(&next.line).await {
            Ok(()) => return Ok(()),
            // Its stdin is closed: it died, or is about to.
            Err(WriteError::Closed) => w.failure(name, &format!("during {kind}")).await,
            Err(WriteError::Stuck) => {
                w.reported = true;
                let tail = w.stderr_tail().await;
                format!("worker {name} did not read its stdin for {WRITE_MS_MAX} ms ({kind}); stderr: {tail}")
            }
        };
        Err(CallError::Broken(self.fail(why)))
    }

    /// A request the engine does not wait for (background work); its failures show up in
    /// [`Self::poll`].
    pub(super) async fn send_and_forget(&mut self, name: &str, kind: &'static str, fields: Value) {
        let _ = self.enqueue(name, kind, fields).await;
    }

    /// Resumes due pauses, sends background rounds that are due, and notices workers that
    /// broke the protocol or died in the background.
    pub(super) async fn poll(&mut self) {
        self.timing.polled();
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

    pub(super) async fn resume(&mut self, name: &str) {
        let Some(w) = self.workers.get_mut(name) else { return };
        if w.resume_at.take().is_none() {
            return;
        }
        let detail = match w.process.signal("CONT").await {
            Ok(()) => "SIGCONT".to_string(),
            Err(e) => format!("SIGCONT failed: {e}"),
        };
        self.moment(name, "resume", detail);
    }

    /// Reports a worker that broke the protocol or whose stdout ended while it was supposed
    /// to live, even when no request of the engine is waiting on it.
    pub(super) async fn check(&mut self, name: &str) {
        let Some(w) = self.workers.get_mut(name) else { return };
        if w.crashed || w.reported {
            return;
        }
        let (violation, closed, interrupted) = {
            let link = lock(&w.link);
            let in_flight = link.pending.values().next().map(|p| p.kind);
            (link.violation.is_some(), link.closed, link.interrupted.or(in_flight))
        };
        // A worker can exit while its stdout stays open: a child it left holds the pipe, so
        // no end of stdout ever comes. Its exit is noticed by itself.
        let exited = w.process.exited();
        if !violation && !closed && !exited {
            return;
        }
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
    pub(super) async fn quiet(&self, origin: &str) {
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

    /// Whether every announced fake has nothing in flight: no request being worked on, no
    /// late commit waiting, no transaction in a pool.
    pub(super) fn settled(&self) -> bool {
        self.fakes
            .all()
            .iter()
            .filter(|f| setup::announced(self.scenario, f.name()))
            .all(fake_services::Fake::settled)
    }

    /// What a worker's reply to `call` means to the engine.
    pub(super) fn reply(&mut self, call: &LiveCall, reply: Value) -> Result<Reply, CallError> {
        let name = &call.worker;
        let kind = call.kind;
        Ok(match (kind, Answer::of(reply)) {
            ("propose", Answer::Ok(_)) => Reply::Accepted,
            ("propose", Answer::Error { code, text }) => Reply::Refused {
                unsupported: code == u64::from(code::NOT_SUPPORTED),
                why: format!("code {code}: {text}"),
            },
            ("status", Answer::Ok(reply)) => match claims(&reply) {
                Ok(claims) => Reply::Claims(claims),
                Err(why) => {
                    let why = format!("worker {name} sent a malformed status_ok: {why}");
                    return Err(CallError::Broken(self.fail(why)));
                }
            },
            // A drain that ran out of time is not the executor's fault (another worker's
            // lease may hold an intent), as in sim. State changes came as events.
            (_, Answer::Ok(_)) => Reply::Changes(Vec::new()),
            ("drain", Answer::Error { code, .. }) if code == u64::from(code::TIMEOUT) => {
                Reply::Changes(Vec::new())
            }
            (_, Answer::Error { code, text }) => {
                Reply::Failed(format!("worker {name} failed {kind}: code {code}: {text}"))
            }
        })
    }
}
