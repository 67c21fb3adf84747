//! Two workers on one state directory, and one of them paused (SIGSTOP) past its lease:
//! design §5 invariant 6 (no stale write wins where the service can prevent it) and
//! invariant 1 (no duplicate effect), against real `twice-executor` processes.
//!
//! Worker A takes an intent and is paused while its write is on its way; worker B takes the
//! intent over once A's lease has run out, with a higher epoch (its fencing token); then A is
//! resumed. A must not commit a transition in the log, and its late write must not produce a
//! second effect: the workspaces fake (fencing on, unique external ids off, so only fencing
//! protects) refuses it with 409 `stale_fencing_token`.
//!
//! Two ways to have A's write "on its way":
//!
//! - held by the service before its commit (`latency.before_ms`, longer than the announced
//!   settle bound, so that B's "absent" is wrong and only the fencing token can save the
//!   day): the request arrived, the key is reserved, the commit comes after B's;
//! - not yet sent at all: A's connection is not established (the service's listen queue is
//!   full, so the SYN is dropped and retried by the kernel a second later) when A is paused,
//!   and the connection completes while A is stopped. On resuming, long after its lease ran
//!   out, A must send nothing, or be refused.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use executor::Durability;
use executor::log::IntentLog;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use vocabulary::Effect;
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

use crate::process::{EXIT_WAIT, ExecutorProcess, REPLY_WAIT, fresh_dir};
use crate::world::{Services, check, init, propose, refund, resolve, start_with, workspace};

const LEASE_MS: u64 = 1_500;
/// Longer than the time the test needs to see A's request arrive and stop A.
const REQUEST_TIMEOUT_MS: u64 = 1_000;
/// Fencing only: a second create for one external id is not refused by itself, and keys are
/// ignored, so a resend under the same key is not deduplicated either.
fn fencing_only() -> Value {
    json!({"unique_business_key": false, "fencing": true, "idempotency_keys": "ignored"})
}

/// The limits of [`paused_before_send`]: the test must see A's connect under way and stop A
/// within A's request timeout, or A times out first, records the failed attempt and tries
/// again (or is stopped in the middle of that commit, holding the log's write lock), which is
/// not the case under test. On a loaded machine (load average 10 on 2 cores) one second was
/// not always enough; four leave room. The lease is longer, so that A, resumed after B took over, has passed its request timeout too.
const PAUSED_REQUEST_TIMEOUT_MS: u64 = 4_000;
const PAUSED_LEASE_MS: u64 = 4_500;

fn limits() -> Value {
    json!({"lease_ms": LEASE_MS, "request_timeout_ms": REQUEST_TIMEOUT_MS})
}

/// `init` for `worker_id`, with `service` reached at `url` when given.
fn init_at(services: &Services, worker_id: &str, dir: &Path, service: &str, url: Option<&str>) -> Value {
    init_with(services, worker_id, dir, service, url, limits())
}

fn init_with(
    services: &Services,
    worker_id: &str,
    dir: &Path,
    service: &str,
    url: Option<&str>,
    limits: Value,
) -> Value {
    let mut request = init(services, worker_id, dir, limits);
    if let Some(url) = url {
        request["services"][service]["url"] = json!(url);
    }
    request
}

/// The history of `id` in the log: `(from, to, owner)` per state change, oldest first.
fn history(dir: &Path, id: &str) -> Vec<(Option<String>, String, Option<String>)> {
    let log = IntentLog::open(&dir.join(executor::intent_engine::LOG_FILE), Durability::Full)
        .expect("the log opens");
    log.history(id)
        .expect("a history")
        .into_iter()
        .map(|h| (h.from.map(|s| s.to_string()), h.to.to_string(), h.owner))
        .collect()
}

fn owned_by(owner: &Option<String>, worker: &str) -> bool {
    owner.as_deref().is_some_and(|o| o.starts_with(&format!("{worker}#")))
}

/// After B took over: every change from the takeover on is B's, and the last one is B's
/// `confirmed`.
fn assert_b_decided(history: &[(Option<String>, String, Option<String>)]) {
    let first_b = history
        .iter()
        .position(|(_, _, owner)| owned_by(owner, "b"))
        .unwrap_or_else(|| panic!("B changed nothing: {history:?}"));
    let stale: Vec<_> = history[first_b..].iter().filter(|(_, _, owner)| !owned_by(owner, "b")).collect();
    assert!(stale.is_empty(), "a change by another worker after B took over: {stale:?} in {history:?}");
    let last = history.last().expect("a history");
    assert_eq!(last.1, "confirmed", "{history:?}");
    let by_a: Vec<_> = history.iter().filter(|(_, _, owner)| owned_by(owner, "a")).collect();
    assert!(
        by_a.iter().all(|(_, to, _)| to == "submitted"),
        "A recorded more than its send: {by_a:?} in {history:?}"
    );
}

/// Waits for A's answer to the drain it was paused in; A must have recorded nothing new.
async fn resumed_a_settles(a: &mut ExecutorProcess, drain_id: u64) {
    let reply = a.next_reply(REPLY_WAIT).await.expect("A survives its pause");
    assert_eq!(reply["in_reply_to"], json!(drain_id), "{reply}");
    assert!(reply["type"] == "drain_ok" || reply["code"] == 0, "A's drain: {reply}");
    let moves: Vec<&Value> = a.events.iter().filter(|e| e["state"] != "submitted").collect();
    assert!(moves.is_empty(), "A made transitions after losing its lease: {moves:?}");
}

async fn shutdown(mut ex: ExecutorProcess) {
    ex.ok(json!({"type": "shutdown"})).await;
    assert_eq!(ex.wait_exit(EXIT_WAIT).await.code(), Some(0));
}

/// A's write arrives at the workspaces fake and is held there before its commit; A is paused
/// meanwhile; B takes over and creates the workspace with epoch 2; A's held write reaches its
/// commit last, with epoch 1, and is refused with 409 `stale_fencing_token`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_refuses_the_held_write_of_a_paused_worker() {
    let services = Services::start(301, fencing_only()).await;
    let dir = fresh_dir("fencing_held_write");
    let ws = services.workspaces();
    let hold = FaultSpec::Latency { before_ms: 4_000, after_ms: 0 };
    ws.add_rule(FaultRule::always(hold).method("POST").path("/v1/workspaces").nth(1)).expect("rule");
    let intent = workspace("fence-held.ws", "fence-held.ws");
    let id = "fence-held.ws";

    let mut a = start_with("A", init_at(&services, "a", &dir, "workspaces", None), &dir, None).await;
    let proposed = a.ok(propose(&intent)).await;
    let key_a = proposed["intent"]["evidence"]["key"].as_str().expect("a key").to_string();
    let drain_id = a.send(json!({"type": "drain", "timeout_ms": 20_000})).await.expect("alive");
    let arrived = services
        .await_journal(&ws, Duration::from_secs(5), |e| {
            e.method == "POST" && e.idempotency_key.as_deref() == Some(key_a.as_str())
        })
        .await;
    a.signal(libc::SIGSTOP);
    let stopped_at = Instant::now();
    assert_eq!(arrived.outcome, "pending", "A's write is held: {arrived:?}");

    // B, once A's lease has run out (it started before the request arrived).
    let mut b = start_with("B", init_at(&services, "b", &dir, "workspaces", None), &dir, None).await;
    tokio::time::sleep(
        (stopped_at + Duration::from_millis(LEASE_MS + 200)).saturating_duration_since(Instant::now()),
    )
    .await;
    let intents = resolve(&mut b, Duration::from_secs(10)).await;
    let by_b = &intents[0];
    assert_eq!(by_b["state"], "confirmed", "{by_b}");

    // A's held write ends now, under epoch 1, after B's epoch 2 committed.
    let late = services
        .await_journal(&ws, Duration::from_secs(10), |e| e.seq == arrived.seq && e.outcome != "pending")
        .await;
    assert_eq!(late.status, Some(409), "A's late write must be refused (stale_fencing_token): {late:?}");
    a.signal(libc::SIGCONT);
    resumed_a_settles(&mut a, drain_id).await;

    let ledger = ws.ledger();
    let [effect] = &ledger[..] else { panic!("exactly one workspace, B's: {ledger:#?}") };
    assert_eq!(effect.fencing_token, Some(2), "{effect:?}");

    // A's view is B's decision.
    let a_status = a.ok(json!({"type": "status", "ids": [id]})).await;
    assert_eq!(a_status["intents"][0]["state"], "confirmed");
    assert_eq!(a_status["intents"][0]["evidence"]["external_id"], effect.object_id.as_str());
    shutdown(a).await;
    shutdown(b).await;
    check("fence-held.", &BTreeSet::from([id.to_string()]), &intents, &services.effects());
    assert_b_decided(&history(&dir, id));
}

/// A listener whose accept queue is full: a connect to it is not established (the kernel
/// drops the SYN and the client's kernel retries it after a second) until [`Gate::open`]
/// makes room and forwards every connection to `target`.
struct Gate {
    listener: Option<std::net::TcpListener>,
    /// Fills the queue.
    _plug: std::net::TcpStream,
    target: SocketAddr,
}

impl Gate {
    fn closed(target: SocketAddr) -> Gate {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        // A listen queue of one: the plug fills it.
        // SAFETY: listen(2) on a socket we own; no memory is involved.
        let rc = unsafe { libc::listen(listener.as_raw_fd(), 0) };
        assert_eq!(rc, 0, "listen: {}", std::io::Error::last_os_error());
        let plug = std::net::TcpStream::connect(listener.local_addr().expect("addr")).expect("plug");
        Gate { listener: Some(listener), _plug: plug, target }
    }

    fn port(&self) -> u16 {
        self.listener.as_ref().expect("not yet open").local_addr().expect("addr").port()
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port())
    }

    /// Accepts and forwards from now on.
    fn open(&mut self) {
        let listener = self.listener.take().expect("opened once");
        listener.set_nonblocking(true).expect("nonblocking");
        let listener = TcpListener::from_std(listener).expect("a tokio listener");
        let target = self.target;
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
    }
}

/// Whether a connection to 127.0.0.1:`port` is in SYN-SENT (per `/proc/net/tcp`).
fn syn_sent_to(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let remote = format!("0100007F:{port:04X}");
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        fields.get(2) == Some(&remote.as_str()) && fields.get(3) == Some(&"02")
    })
}

/// What happened in [`paused_before_send`].
struct PausedBeforeSend {
    /// The service's ledger.
    effects: Vec<Effect>,
    /// B's final view of the intent.
    by_b: Value,
    /// Every write that reached the service after A was resumed: A's late ones, if it sent
    /// any (B had finished by then).
    late_writes: Vec<vocabulary::JournalEntry>,
}

/// A is paused before its write has left the process (its connection is not established),
/// then resumed long after its lease ran out; B took over meanwhile. Whatever A does on
/// resuming must neither commit a transition nor make a second effect.
async fn paused_before_send(services: &Services, intent: Value, service: &str) -> PausedBeforeSend {
    let id = intent["id"].as_str().expect("an id").to_string();
    let prefix = id.split('.').next().map(|p| format!("{p}.")).expect("a prefix");
    let dir = fresh_dir(&format!("fencing_paused_before_send_{service}"));
    let fake = services.fake(service);
    let target = if service == "payments" { services.payments.addr() } else { services.workspaces.addr() };
    let mut gate = Gate::closed(target);
    let gate_url = gate.url();

    let limits = json!({"lease_ms": PAUSED_LEASE_MS, "request_timeout_ms": PAUSED_REQUEST_TIMEOUT_MS});
    let init_for = |worker: &str| init_with(services, worker, &dir, service, Some(&gate_url), limits.clone());
    let mut a = start_with("A", init_for("a"), &dir, None).await;
    let proposed = a.ok(propose(&intent)).await;
    let key_a = proposed["intent"]["evidence"]["key"].as_str().expect("a key").to_string();
    let drain_id = a.send(json!({"type": "drain", "timeout_ms": 20_000})).await.expect("alive");
    let sent_at = Instant::now();
    // A marks the intent submitted and connects; the SYN is dropped. Pause it as soon as its
    // connect is under way (well within its request timeout).
    let deadline = Instant::now() + Duration::from_secs(5);
    while !syn_sent_to(gate.port()) {
        assert!(Instant::now() < deadline, "A never connected to {gate_url}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    a.signal(libc::SIGSTOP);
    assert!(fake.journal().is_empty(), "nothing reached {service} yet: {:?}", fake.journal());
    let row = history(&dir, &id);
    assert_eq!(row.last().map(|h| h.1.as_str()), Some("submitted"), "A took the intent: {row:?}");
    // The case under test: A stopped in its first attempt. An attempt that had already timed
    // out is in the log as a return to `recorded`.
    let submitted = row.iter().filter(|h| h.1 == "submitted").count();
    assert_eq!(
        submitted, 1,
        "A's first attempt timed out before it was stopped ({PAUSED_REQUEST_TIMEOUT_MS} ms): {row:?}"
    );

    // The kernel completes A's connection while A is stopped (the SYN is retried after 1 s).
    gate.open();
    // B, once A's lease has run out and the settle bound since A's send has passed.
    let mut b = start_with("B", init_for("b"), &dir, None).await;
    tokio::time::sleep(
        (sent_at + Duration::from_millis(PAUSED_LEASE_MS + 300)).saturating_duration_since(Instant::now()),
    )
    .await;
    let intents = resolve(&mut b, Duration::from_secs(10)).await;
    assert_eq!(intents[0]["state"], "confirmed", "B: {}", intents[0]);

    let before_resume = fake.journal().len();
    a.signal(libc::SIGCONT);
    resumed_a_settles(&mut a, drain_id).await;
    // Whatever A sent on resuming has been answered by now.
    let deadline = Instant::now() + Duration::from_secs(5);
    while fake.journal().iter().any(|e| e.outcome == "pending") {
        assert!(Instant::now() < deadline, "a request still pending: {:?}", fake.journal());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let late_writes: Vec<vocabulary::JournalEntry> = fake
        .journal()
        .into_iter()
        .skip(before_resume)
        .filter(|e| e.method == "POST" && e.idempotency_key.as_deref() == Some(key_a.as_str()))
        .collect();
    let status = b.ok(json!({"type": "status", "ids": [id]})).await;
    shutdown(a).await;
    shutdown(b).await;
    let intents = status["intents"].as_array().cloned().unwrap_or_default();
    // Design §5 against the ledger, "no duplicate effect" first.
    check(&prefix, &BTreeSet::from([id.clone()]), &intents, &services.effects());
    assert_b_decided(&history(&dir, &id));
    PausedBeforeSend { effects: fake.ledger(), by_b: intents[0].clone(), late_writes }
}

/// With fencing, A's create is refused however late it comes (if A sends it at all: with
/// the current engine its request timeout has run out by the time it resumes, and it sends
/// nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_refuses_the_late_send_of_a_worker_paused_before_sending() {
    let services = Services::start(302, fencing_only()).await;
    let intent = workspace("fence-late.ws", "fence-late.ws");
    let run = paused_before_send(&services, intent, "workspaces").await;
    let [effect] = &run.effects[..] else { panic!("exactly one workspace: {:#?}", run.effects) };
    assert_eq!(effect.fencing_token, Some(2), "B's, under epoch 2: {effect:?}");
    assert_eq!(run.by_b["evidence"]["external_id"], effect.object_id.as_str());
    assert!(
        run.late_writes.iter().all(|e| e.status == Some(409)),
        "a late create of A's under epoch 1 was not refused: {:?}",
        run.late_writes
    );
}

/// Payments has no fencing, but honours keys: a worker paused before its refund left must not
/// make a second refund when it resumes after losing its lease. B sent again under the same
/// key (keys are retained, acks reliable), so a late send of A's, if the pause caught it past
/// its lease check, can only be a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_before_send_past_the_lease_does_not_refund_twice() {
    let services = Services::start(303, json!({})).await;
    services.seed_payment_intent("pi_pause");
    let intent = refund("pause-late.refund", "pi_pause", 4_321);
    let run = paused_before_send(&services, intent, "payments").await;
    assert_eq!(run.effects.len(), 1, "one refund: {:#?}", run.effects);
    assert!(
        run.late_writes.iter().all(|e| e.replayed || e.status.is_some_and(|s| s >= 400)),
        "A's late refund executed instead of replaying: {:?}",
        run.late_writes
    );
}
