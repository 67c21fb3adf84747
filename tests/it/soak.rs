//! The soak (`cargo xtask soak`; ignored by `cargo test`): the real `twice-executor` binary
//! under thousands of SIGKILLs and SIGSTOP/SIGCONT pairs, several worker processes on one
//! state directory, every action of the action table, faults armed in the fakes; then a final
//! reconciliation and the project's own checker (`checker`) on the whole run.
//!
//! Knobs (environment, set by `cargo xtask soak`): `TWICE_SOAK_KILLS` (10,000), `TWICE_SOAK_SEED`,
//! `TWICE_SOAK_WORKERS` (4), `TWICE_SOAK_REPORT` (a path: the figures as JSON). The seed fixes
//! every choice (intents, which life dies how, delays, fault draws in the fakes); the timing of
//! processes on a shared machine does not repeat, so two runs with one seed differ in where
//! the random-time kills land.
//!
//! Each worker lane repeats: start the worker's next life (`wK#N`, its own listeners, so that
//! journals say which life sent what), write its proposals in one to three batches and a
//! drain, then end the life in one of three ways: at a `TWICE_EXECUTOR_KILL_AT` point (the
//! executor kills itself), by SIGKILL after a random delay, or by one or two SIGSTOP/SIGCONT
//! pairs (some longer than the lease, so another worker takes the intents over while this one
//! sleeps) followed by SIGKILL. Every life ends by SIGKILL. A life whose hook point is not
//! reached within [`LIFE_DEADLINE_MS`] is killed there.
//!
//! The figures count every escalated intent by its reason, read from its evidence and checked
//! against the journals (a claimed refusal must be one a fake answered); the soak fails on an
//! escalation no reason accounts for.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fake_services::{Bounds, FakeRequest, Fakes, Gate, Listener, Server, Tap};
use runner::setup;
use scenarios::Scenario;
use serde_json::{Value, json};
use vocabulary::TokioClock;

use crate::process::{ExecutorProcess, REPLY_WAIT, XorShift, fresh_dir};
use crate::world::{propose, propose_in_batches};

/// Requests each fake journals in a soak (the default bound, 100,000, fits a scenario).
const SOAK_JOURNAL_ENTRIES_MAX: usize = 10_000_000;
const SERVICES: [&str; 5] = ["payments", "workspaces", "files", "chain", "messages"];
const ACTIONS: [&str; 5] =
    ["payments.refund", "workspaces.create", "files.put", "chain.transfer", "messages.send"];
const BUCKET: &str = "soak";
/// Every refund's payment intent is its own, with this much to refund.
const PI_AMOUNT: u64 = 10_000;
/// Short terms: an unsure write settles within this, so a negative read is final soon.
const SETTLE_MS_MAX: u64 = 300;
const READ_LAG_MS_MAX: u64 = 200;
const REQUEST_TIMEOUT_MS: u64 = 500;
const LEASE_MS: u64 = 600;
/// A life is killed this long after its drain was written, whatever its plan.
const LIFE_DEADLINE_MS: u64 = 300;
/// A life's listeners outlive it this long, so that its held requests end as they would.
const LISTENER_GRACE: Duration = Duration::from_secs(2);
/// The final reconciliation's bound.
/// The final reconciliation may take as long as it needs while intents keep resolving (its
/// pace is the machine's: 25,000 intents took 159 s on one run and more than 240 s on a
/// busier one), but gives up when no intent has resolved for this long.
const FINAL_STALL: Duration = Duration::from_secs(120);
/// And it never takes longer than this.
const FINAL_WAIT_MAX: Duration = Duration::from_secs(1_800);
const FIRST_PROPOSAL_MSG_ID: u64 = 1_000;
/// An intent unresolved this long after its first send is escalated. Above the longest the
/// kills keep an intent unresolved (39.8 s in a run of 10,000): with 30 s, seven transfers
/// waiting in the node's pool behind a nonce that lives kept dying before broadcasting were
/// escalated 0.6 s before that nonce landed and they were mined. Below the final
/// reconciliation's [`FINAL_STALL`], so that an intent that is really stuck is escalated
/// before that gives up.
const ESCALATE_AFTER_MS: u64 = 90_000;
/// The origin of the final reconciliation's worker, which runs with every fault healed.
const FINAL_ORIGIN: &str = "final#1";

/// The knobs, from the environment.
#[derive(Debug, Clone)]
struct Knobs {
    kills: usize,
    seed: u64,
    workers: usize,
    report: Option<PathBuf>,
}

fn knob(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
        Err(_) => default,
    }
}

impl Knobs {
    fn from_env() -> Knobs {
        Knobs {
            kills: knob("TWICE_SOAK_KILLS", 10_000) as usize,
            seed: knob("TWICE_SOAK_SEED", 0x736f_616b),
            workers: knob("TWICE_SOAK_WORKERS", 4).max(1) as usize,
            report: std::env::var_os("TWICE_SOAK_REPORT").map(PathBuf::from),
        }
    }
}

/// The contract changes: every service settles fast, and admits as many faults as its kind
/// allows (eventual reads for stale reads, acks that may lie for silent no-ops).
fn contract_patches() -> BTreeMap<String, Value> {
    SERVICES
        .iter()
        .map(|s| {
            let mut patch = json!({"settle_ms_max": SETTLE_MS_MAX, "reads": "eventual", "read_lag_ms_max": READ_LAG_MS_MAX, "acks": "may_lie"});
            if *s == "chain" {
                // A transaction pooled and never mined cannot be told from one still to come;
                // the chain's acks stay reliable.
                patch["acks"] = json!("reliable");
            }
            (s.to_string(), patch)
        })
        .collect()
}

/// The fault rules, as scenario files write them: on writes, every unsure answer the
/// contracts admit, each with a small seeded probability; on reads, stale views.
fn fault_rules() -> Vec<Value> {
    let mut rules = Vec::new();
    for service in SERVICES {
        let (method, only) = match service {
            "files" => ("PUT", json!({})),
            "chain" => ("POST", json!({"method": "eth_sendRawTransaction"})),
            _ => ("POST", json!({})),
        };
        let mut writes = vec![
            (json!({"kind": "drop_after_commit"}), 0.03),
            (json!({"kind": "error_after_commit", "status": 500}), 0.03),
            (json!({"kind": "timeout_after_commit", "hold_ms": 700}), 0.02),
            (json!({"kind": "commit_after_timeout", "delay_ms": 250}), 0.02),
            (json!({"kind": "latency", "before_ms": 40, "after_ms": 40}), 0.05),
            (json!({"kind": "refuse"}), 0.02),
            (json!({"kind": "reject", "status": 503}), 0.02),
        ];
        if service != "chain" {
            // A refusal a person must act on: the intent is escalated, never sent again.
            writes.push((json!({"kind": "reject", "status": 422}), 0.005));
        }
        if service != "chain" {
            writes.push((json!({"kind": "silent_noop"}), 0.02));
        }
        if service == "messages" {
            writes.push((json!({"kind": "deliver_late", "delay_ms": 200}), 0.03));
            writes.push((json!({"kind": "redeliver", "after_ms": 100}), 0.01));
        }
        for (fault, p) in writes {
            let mut rule = json!({"service": service, "method": method, "probability": p, "fault": fault});
            if only.as_object().is_some_and(|o| !o.is_empty()) {
                rule["where"] = only.clone();
            }
            rules.push(rule);
        }
        let read = if service == "chain" { "POST" } else { "GET" };
        let mut stale = json!({"service": service, "method": read, "probability": 0.1,
                               "fault": {"kind": "stale_read", "lag_ms": READ_LAG_MS_MAX}});
        if service == "chain" {
            stale["where"] = json!({"method": "eth_getTransactionCount"});
        }
        rules.push(stale);
    }
    rules
}

/// The soak's scenario: its contracts, faults and `intents`, for the fakes' setup and the
/// checker (`name` is fixed).
fn scenario(intents: &[Value]) -> Scenario {
    let faults: Vec<Value> = fault_rules();
    serde_json::from_value(json!({
        "name": "soak",
        "services": contract_patches(),
        "intents": intents,
        "faults": faults,
    }))
    .expect("the soak's scenario is well formed")
}

/// Intent number `n` of lane `lane`, of a kind drawn from `rng`.
fn new_intent(rng: &mut XorShift, lane: usize, n: usize) -> Value {
    let id = format!("w{lane}.i{n}");
    let action = ACTIONS[rng.range(0, ACTIONS.len() as u64 - 1) as usize];
    let params = match action {
        "payments.refund" => json!({"payment_intent": format!("pi_{id}"), "amount": rng.range(1, PI_AMOUNT)}),
        "workspaces.create" => json!({"external_id": id, "name": format!("ws {id}")}),
        "files.put" => {
            json!({"bucket": BUCKET, "key": format!("{id}.txt"), "body": format!("body of {id}: {}", rng.next_u64())})
        }
        "chain.transfer" => {
            // A fresh address per intent: the checker's business key is `to`.
            json!({"to": format!("0x5eed{lane:04x}{n:032x}"), "value": rng.range(1, 1_000_000).to_string()})
        }
        _ => {
            json!({"to": format!("{}@example.com", id.replace('.', "-")), "subject": "Soak", "body": format!("message {id}")})
        }
    };
    json!({"id": id, "action": action, "params": params})
}

/// The last request each worker life sent to any fake: what a kill is classified by.
#[derive(Default)]
struct Arrivals(Mutex<HashMap<String, (&'static str, bool)>>);

impl Tap for Arrivals {
    fn arrived(&self, service: &'static str, request: &FakeRequest) -> Option<Gate> {
        if let Some(origin) = &request.origin {
            let write = match service {
                "chain" => request.body.windows(22).any(|w| w == b"eth_sendRawTransaction"),
                _ => matches!(request.method.as_str(), "POST" | "PUT" | "DELETE"),
            };
            self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(origin.clone(), (service, write));
        }
        None
    }
}

impl Arrivals {
    fn last(&self, origin: &str) -> Option<(&'static str, bool)> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).get(origin).copied()
    }
}

/// What every lane shares.
struct World {
    fakes: Fakes,
    contracts: BTreeMap<String, vocabulary::Contract>,
    arrivals: Arc<Arrivals>,
    state_dir: PathBuf,
    seed: u64,
}

impl World {
    /// One listener per service for worker life `origin`; the services as it is told them.
    async fn listen(&self, origin: &str) -> (Vec<Server>, Value) {
        let mut servers = Vec::new();
        let mut services = serde_json::Map::new();
        for (name, contract) in &self.contracts {
            let fake = self.fakes.get(name).expect("a known service");
            let listener = Listener {
                origin: Some(origin.to_string()),
                tap: Some(Arc::clone(&self.arrivals) as Arc<dyn Tap>),
            };
            let loopback = "127.0.0.1:0".parse().expect("an address");
            let server = Server::start_with(fake, loopback, listener).await.expect("a listener on loopback");
            services.insert(name.clone(), json!({"url": server.url(), "contract": contract}));
            servers.push(server);
        }
        (servers, Value::Object(services))
    }

    fn init(&self, worker_id: &str, services: Value) -> Value {
        json!({
            "type": "init",
            "protocol": "twice/1",
            "worker_id": worker_id,
            "state_dir": self.state_dir,
            "services": services,
            "secrets": vocabulary::protocol::secrets(),
            "limits": {
                "request_timeout_ms": REQUEST_TIMEOUT_MS,
                "lease_ms": LEASE_MS,
                "attempts_max": 50,
                "escalate_after_ms": ESCALATE_AFTER_MS,
                "pass_pause_ms": 10,
            },
        })
    }

    /// Seeds what `intent` needs before it is first proposed.
    fn seed_for(&self, intent: &Value) {
        if intent["action"] == "payments.refund" {
            let pi = intent["params"]["payment_intent"].as_str().expect("a payment intent");
            self.fakes.payments.seed_payment_intent(Some(pi), PI_AMOUNT, "usd").expect("seeding");
        }
    }

    /// Starts a life of `worker_id` labelled `origin`, with its `TWICE_EXECUTOR_KILL_AT`.
    async fn start(
        &self,
        worker_id: &str,
        origin: &str,
        kill_at: Option<&str>,
    ) -> (ExecutorProcess, Vec<Server>) {
        let (servers, services) = self.listen(origin).await;
        let dir = self.state_dir.to_str().expect("a UTF-8 path");
        let env: Vec<(&str, &str)> = kill_at.map(|k| ("TWICE_EXECUTOR_KILL_AT", k)).into_iter().collect();
        let mut ex = ExecutorProcess::spawn(origin, &["--state-dir", dir], &env);
        match ex.request(self.init(worker_id, services), REPLY_WAIT).await {
            Ok(r) if r["type"] == "init_ok" => (ex, servers),
            Ok(r) => panic!("{origin}: init refused: {r}"),
            Err(died) => panic!("{origin}: died during init: {died:?}"),
        }
    }
}

/// How a life was planned to end.
#[derive(Debug, Clone)]
enum Plan {
    /// `TWICE_EXECUTOR_KILL_AT=POINT:N`.
    Hook(&'static str, u64),
    /// SIGKILL this long after the drain was written.
    Timed(u64),
    /// SIGSTOP after the first delay, for the second; again for each pair; SIGKILL after the
    /// last delay.
    Stops(Vec<(u64, u64)>, u64),
}

/// What one lane saw.
#[derive(Debug, Default)]
struct LaneReport {
    kills: usize,
    stop_pairs: usize,
    /// Stops longer than the lease.
    long_stops: usize,
    /// Where lives ended, by label.
    points: BTreeMap<String, usize>,
    intents: Vec<Value>,
    acknowledged: Vec<String>,
    pending: Vec<Value>,
}

/// Where a life was when it died, from the protocol (replies it had written) and the last
/// request of this life any fake saw.
fn classify(all_answered: bool, drained: bool, last: Option<(&'static str, bool)>) -> String {
    if drained {
        return "idle (drain answered)".into();
    }
    if !all_answered {
        return "proposing (a proposal unanswered)".into();
    }
    match last {
        None => "draining, before any request".into(),
        Some((service, true)) => format!("draining, after a {service} write"),
        Some((service, false)) => format!("draining, after a {service} read"),
    }
}

async fn lane(world: Arc<World>, lane: usize, kills_wanted: usize, progress: Arc<Progress>) -> LaneReport {
    let worker_id = format!("w{lane}");
    let mut rng = XorShift::new(world.seed ^ (lane as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut report = LaneReport::default();
    let mut next_intent = 0usize;
    let mut retired: VecDeque<(Instant, Vec<Server>)> = VecDeque::new();

    while report.kills < kills_wanted {
        let life = report.kills + 1;
        let origin = format!("{worker_id}#{life}");
        let mut proposals = std::mem::take(&mut report.pending);
        for _ in 0..rng.range(1, 4) {
            next_intent += 1;
            let intent = new_intent(&mut rng, lane, next_intent);
            world.seed_for(&intent);
            report.intents.push(intent.clone());
            proposals.push(intent);
        }
        let n = proposals.len() as u64;
        let plan = match rng.range(0, 99) {
            0..=11 => Plan::Hook("after_record", rng.range(1, n)),
            12..=23 => Plan::Hook("before_send", rng.range(1, 2)),
            24..=35 => Plan::Hook("after_reply", rng.range(1, 2)),
            36..=74 => {
                let most = match rng.range(0, 9) {
                    0..=4 => 10,
                    5..=7 => 60,
                    _ => 250,
                };
                Plan::Timed(rng.range(0, most))
            }
            _ => {
                let pairs = (0..rng.range(1, 2))
                    .map(|_| {
                        let stopped = if rng.range(0, 4) == 0 {
                            LEASE_MS + rng.range(50, 200)
                        } else {
                            rng.range(1, 80)
                        };
                        (rng.range(0, 40), stopped)
                    })
                    .collect();
                Plan::Stops(pairs, rng.range(0, 60))
            }
        };
        let kill_at = match &plan {
            Plan::Hook(point, nth) => Some(format!("{point}:{nth}")),
            _ => None,
        };
        let (mut ex, servers) = world.start(&worker_id, &origin, kill_at.as_deref()).await;

        let (sent, alive) = propose_in_batches(&mut ex, &proposals, FIRST_PROPOSAL_MSG_ID, &mut rng).await;
        let mut drain_id = None;
        if alive {
            drain_id = ex.send(json!({"type": "drain", "timeout_ms": 2_000})).await.ok();
        }

        let started = Instant::now();
        let deadline = started + Duration::from_millis(LIFE_DEADLINE_MS);
        let mut killed_by_us = true;
        let mut kind = "timed";
        match &plan {
            Plan::Hook(..) => {
                kind = "deadline";
                while Instant::now() < deadline {
                    if ex.has_exited() {
                        killed_by_us = false;
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            }
            Plan::Timed(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Plan::Stops(pairs, last_ms) => {
                kind = "after SIGSTOP/SIGCONT";
                for (before_ms, stopped_ms) in pairs {
                    tokio::time::sleep(Duration::from_millis(*before_ms)).await;
                    if ex.has_exited() {
                        break;
                    }
                    ex.signal(libc::SIGSTOP);
                    tokio::time::sleep(Duration::from_millis(*stopped_ms)).await;
                    ex.signal(libc::SIGCONT);
                    report.stop_pairs += 1;
                    report.long_stops += usize::from(*stopped_ms > LEASE_MS);
                }
                tokio::time::sleep(Duration::from_millis(*last_ms)).await;
            }
        }
        let status = ex.kill().await;
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "{origin}: not ended by SIGKILL: {status}\n{}",
            ex.stderr_tail()
        );

        // Every reply it wrote before dying, in order.
        let mut last_proposal = None;
        let mut drained = false;
        while let Ok(reply) = ex.next_reply(REPLY_WAIT).await {
            let to = reply["in_reply_to"].as_u64();
            if to.is_some() && to == drain_id {
                assert!(reply["type"] == "drain_ok" || reply["code"] == 0, "{origin}: drain: {reply}");
                drained = true;
                continue;
            }
            let Some((_, intent)) = sent.iter().find(|(id, _)| Some(*id) == to) else {
                panic!("{origin}: a reply to nothing sent: {reply}");
            };
            assert_eq!(reply["type"], "propose_ok", "{origin}: {intent} got {reply}");
            assert!(last_proposal < to, "{origin}: reply to {to:?} after {last_proposal:?}");
            last_proposal = to;
            let id = intent["id"].as_str().unwrap_or_default().to_string();
            if !report.acknowledged.contains(&id) {
                report.acknowledged.push(id);
            }
        }
        let all_answered = sent.len() == proposals.len()
            && sent.iter().all(|(_, i)| report.acknowledged.iter().any(|a| i["id"] == a.as_str()));
        let label = if killed_by_us {
            format!("{kind}: {}", classify(all_answered, drained, world.arrivals.last(&origin)))
        } else {
            let Plan::Hook(point, _) = plan else { unreachable!("only a hook kills by itself") };
            format!("hook: {point}")
        };
        *report.points.entry(label).or_default() += 1;
        report.kills += 1;
        progress.kill();
        report.pending = proposals
            .into_iter()
            .filter(|p| !report.acknowledged.iter().any(|a| p["id"] == a.as_str()))
            .collect();

        retired.push_back((Instant::now(), servers));
        while retired.front().is_some_and(|(at, _)| at.elapsed() > LISTENER_GRACE) {
            retired.pop_front();
        }
    }
    // The last lives' listeners: held requests end before the final reconciliation.
    if let Some((at, _)) = retired.back() {
        tokio::time::sleep(LISTENER_GRACE.saturating_sub(at.elapsed())).await;
    }
    report
}

/// Kills so far, printed every few hundred.
struct Progress {
    started: Instant,
    total: usize,
    done: std::sync::atomic::AtomicUsize,
    /// When the last kill came, since `started` (ms).
    last_ms: std::sync::atomic::AtomicU64,
}

impl Progress {
    fn kill(&self) {
        let done = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.last_ms
            .fetch_max(self.started.elapsed().as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
        if done.is_multiple_of(500) || done == self.total {
            let s = self.started.elapsed().as_secs_f64();
            eprintln!("soak: {done}/{} kills, {s:.0} s, {:.0} kills/min", self.total, done as f64 * 60.0 / s);
        }
    }
}

/// The final reconciliation: faults healed, one worker proposes every proposal never
/// acknowledged, then reconciles and drains until nothing is recorded, blocked, submitted or
/// unknown. Returns the final status and the rounds it took.
async fn reconcile_all(
    world: &World,
    pending: &[Value],
    acknowledged: &mut Vec<String>,
) -> (Vec<Value>, u32) {
    setup::heal(&world.fakes);
    let (mut ex, _servers) = world.start("final", FINAL_ORIGIN, None).await;
    for intent in pending {
        ex.ok(propose(intent)).await;
        acknowledged.push(intent["id"].as_str().unwrap_or_default().to_string());
    }
    let started = Instant::now();
    let mut last_progress = started;
    let mut fewest_open = usize::MAX;
    let mut rounds = 0u32;
    loop {
        rounds += 1;
        ex.ok(json!({"type": "reconcile"})).await;
        let drain = ex.call(json!({"type": "drain", "timeout_ms": 5_000})).await;
        assert!(drain["type"] == "drain_ok" || drain["code"] == 0, "final drain: {drain}");
        let status = ex.ok(json!({"type": "status"})).await;
        let intents = status["intents"].as_array().cloned().unwrap_or_default();
        let open = intents
            .iter()
            .filter(|i| matches!(i["state"].as_str(), Some("recorded" | "blocked" | "submitted" | "unknown")))
            .count();
        if open == 0 {
            ex.ok(json!({"type": "shutdown"})).await;
            // Late commits and deliveries land within the settle bound.
            tokio::time::sleep(Duration::from_millis(2 * (SETTLE_MS_MAX + READ_LAG_MS_MAX))).await;
            return (intents, rounds);
        }
        if open < fewest_open {
            fewest_open = open;
            last_progress = Instant::now();
        }
        if rounds.is_multiple_of(10) {
            eprintln!("soak: final reconciliation, round {rounds}: {open} intents open");
        }
        assert!(
            last_progress.elapsed() < FINAL_STALL,
            "{open} intents still open, none resolved in the last {FINAL_STALL:?}"
        );
        assert!(started.elapsed() < FINAL_WAIT_MAX, "{open} intents still open after {FINAL_WAIT_MAX:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The bucket of an escalation no recorded reason accounts for: no `evidence.reason`, or a
/// refusal claimed (`evidence.decision`) that no journal shows the service answering.
const UNEXPLAINED: &str = "unexplained";

/// What the fakes answered an intent that needs a decision ([`vocabulary::needs_decision`]),
/// read from their journals.
#[derive(Debug, Default)]
struct Refusals {
    /// Intent id -> each such answer to a request of it: the status, and whether an armed
    /// `reject` made it (rather than the fake's own reading of the request).
    by_intent: HashMap<String, Vec<(u16, bool)>>,
    /// Writes the soak's injected 422 could be drawn on (every write of a service that arms
    /// it, but the final worker's, sent with the faults healed), and how many it would answer
    /// by the rules' probabilities.
    writes_eligible: usize,
    expected_injected_422: f64,
    /// Injected 422s the journals hold, and how many of them no intent could be found for.
    injected_422: usize,
    unattributed: usize,
}

/// The method the soak's injected 422 is armed on for `service` (none on the chain), and the
/// probability that such a write is answered with it: its rule's draw, times no `refuse` (a
/// reset wins over any answer) and no earlier `reject` (the first armed one is the answer)
/// firing on the same request.
fn injected_422(service: &str) -> Option<(String, f64)> {
    let rules: Vec<Value> = fault_rules().into_iter().filter(|r| r["service"] == service).collect();
    let at = rules.iter().position(|r| r["fault"]["kind"] == "reject" && r["fault"]["status"] == 422)?;
    let method = rules[at]["method"].as_str()?.to_string();
    let p = |r: &Value| r["probability"].as_f64().unwrap_or(1.0);
    let probability = rules
        .iter()
        .enumerate()
        .filter(|(i, r)| {
            r["method"] == method.as_str()
                && (r["fault"]["kind"] == "refuse" || (r["fault"]["kind"] == "reject" && *i < at))
        })
        .fold(p(&rules[at]), |acc, (_, r)| acc * (1.0 - p(r)));
    Some((method, probability))
}

/// The decision refusals in `journals`, attributed to the intents of `status`: by the
/// idempotency key (every key an intent used is in its evidence) or, for a request without
/// one (S3's puts), by the business key the fake read from the refused request.
fn refusals(status: &[Value], journals: &BTreeMap<String, Vec<vocabulary::JournalEntry>>) -> Refusals {
    let mut by_key = HashMap::<&str, &str>::new();
    let mut by_business_key = HashMap::<(&str, String), &str>::new();
    for claim in status {
        let Some(id) = claim["id"].as_str() else { continue };
        let evidence = &claim["evidence"];
        let previous = evidence["previous_keys"].as_array().into_iter().flatten();
        for key in std::iter::once(&evidence["key"]).chain(previous).filter_map(Value::as_str) {
            by_key.insert(key, id);
        }
        let Some(spec) = claim["action"].as_str().and_then(vocabulary::action::action) else { continue };
        if let Some(value) = claim["params"][spec.business_key].as_str() {
            by_business_key.insert((spec.service, value.to_string()), id);
        }
    }
    let mut found = Refusals::default();
    for (service, journal) in journals {
        let armed_on = injected_422(service);
        for entry in journal {
            let armed = entry.origin.as_deref() != Some(FINAL_ORIGIN);
            if let Some((method, p)) = &armed_on
                && armed
                && *method == entry.method
            {
                found.writes_eligible += 1;
                found.expected_injected_422 += p;
            }
            let Some(answered) = entry.status.filter(|s| vocabulary::needs_decision(*s)) else { continue };
            let injected = entry.faults.iter().any(|f| f.fault == "reject");
            found.injected_422 += usize::from(injected && answered == 422);
            let business = entry.params.as_ref().and_then(|params| {
                let spec = vocabulary::action::ACTIONS.iter().find(|a| a.service == service.as_str())?;
                let value = params.get(spec.business_key)?.as_str()?;
                by_business_key.get(&(spec.service, value.to_string())).copied()
            });
            match entry.idempotency_key.as_deref().and_then(|k| by_key.get(k).copied()).or(business) {
                Some(id) => found.by_intent.entry(id.to_string()).or_default().push((answered, injected)),
                None => found.unattributed += usize::from(injected),
            }
        }
    }
    found
}

/// Why `claim`, an escalated intent, was escalated: one of a few named reasons, read from its
/// evidence and checked against what the fakes answered it.
fn escalation_reason(claim: &Value, refusals: &Refusals) -> String {
    let evidence = &claim["evidence"];
    let Some(reason) = evidence["reason"].as_str().filter(|r| !r.is_empty()) else {
        return UNEXPLAINED.into();
    };
    // The executor's wording (executor/src/intent_engine/send.rs and reconcile.rs); a reason worded
    // otherwise still lands in `other: ...`, never in `unexplained`.
    if reason.contains("parameters other than the authorised ones") {
        return "an effect with other parameters than the authorised ones".into();
    }
    if let Some(status) = evidence["decision"]["status"].as_u64() {
        let id = claim["id"].as_str().unwrap_or_default();
        let answers = refusals.by_intent.get(id).map(Vec::as_slice).unwrap_or_default();
        let answered = |injected: bool| answers.iter().any(|&(s, i)| u64::from(s) == status && i == injected);
        return if answered(true) {
            format!("refused {status} (a decision), by the soak's injected reject")
        } else if answered(false) {
            format!("refused {status} (a decision), by the fake itself")
        } else {
            UNEXPLAINED.into()
        };
    }
    if reason.contains("unresolved past its deadline") {
        return "unresolved past escalate_after_ms, its lookup failing".into();
    }
    format!("other: {reason}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a long soak: cargo xtask soak"]
async fn soak() {
    let knobs = Knobs::from_env();
    eprintln!("soak: {knobs:?}");
    // The contracts and faults are checked as any scenario's are (fairness included).
    let sample: Vec<Value> =
        (0..ACTIONS.len() * 4).map(|n| new_intent(&mut XorShift::new(n as u64 + 1), 0, n)).collect();
    if let Err(e) = scenario(&sample).validate() {
        panic!("the soak's contracts and faults are not a valid scenario: {e}");
    }

    let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), knobs.seed);
    // A run's bounds fit a scenario, not ten thousand kills: the chain's receipt polls alone
    // pass the default journal's 100,000 requests, after which the fake would refuse them.
    for service in SERVICES {
        let fake = fakes.get(service).expect("a known service");
        fake.set_bounds(Bounds { journal_entries_max: SOAK_JOURNAL_ENTRIES_MAX, ..Bounds::default() });
    }
    let setup_scenario = scenario(&sample[..1]);
    setup::prepare(&setup_scenario, &fakes).expect("the fakes are set up");
    fakes.files.seed_bucket(BUCKET).expect("the bucket");
    fakes
        .chain
        .seed_account(&setup::chain_account(), scenarios::model::CHAIN_ACCOUNT_BALANCE_WEI)
        .expect("the account");
    let mut contracts = BTreeMap::new();
    for service in SERVICES {
        contracts.insert(service.to_string(), setup_scenario.contract(service).expect("a known service"));
    }
    let world = Arc::new(World {
        fakes,
        contracts,
        arrivals: Arc::new(Arrivals::default()),
        state_dir: fresh_dir("soak"),
        seed: knobs.seed,
    });

    let started = Instant::now();
    let progress = Arc::new(Progress { started, total: knobs.kills, done: 0.into(), last_ms: 0.into() });
    let mut lanes = tokio::task::JoinSet::new();
    for i in 0..knobs.workers {
        let share = knobs.kills / knobs.workers + usize::from(i < knobs.kills % knobs.workers);
        lanes.spawn(lane(Arc::clone(&world), i + 1, share, Arc::clone(&progress)));
    }
    let mut reports = Vec::new();
    while let Some(done) = lanes.join_next().await {
        match done {
            Ok(report) => reports.push(report),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a lane was cancelled: {e}"),
        }
    }
    // From the start to the last kill (the lanes then wait for their last listeners).
    let kill_phase_s = progress.last_ms.load(std::sync::atomic::Ordering::Relaxed) as f64 / 1000.0;
    reports.sort_by_key(|r| r.intents.first().map(|i| i["id"].to_string()));

    let mut intents = Vec::new();
    let mut acknowledged = Vec::new();
    let mut pending = Vec::new();
    let mut points = BTreeMap::<String, usize>::new();
    for r in &mut reports {
        intents.append(&mut r.intents);
        acknowledged.append(&mut r.acknowledged);
        pending.append(&mut r.pending);
        for (p, n) in &r.points {
            *points.entry(p.clone()).or_default() += n;
        }
    }
    let acknowledged_in_kills = acknowledged.len();
    let final_started = Instant::now();
    let (status, rounds) = reconcile_all(&world, &pending, &mut acknowledged).await;
    let final_s = final_started.elapsed().as_secs_f64();

    let claims: Vec<Value> = status
        .iter()
        .map(|i| json!({"id": i["id"], "state": i["state"], "attempts": i["attempts"], "evidence": i["evidence"]}))
        .collect();
    let observed: results::Observed = serde_json::from_value(json!({
        "acknowledged": acknowledged,
        "claims": claims,
        "reconcile_rounds": rounds,
    }))
    .expect("an observation");
    let mut observed = observed;
    let mut journals_full = Vec::new();
    for service in SERVICES {
        let fake = world.fakes.get(service).expect("a known service");
        observed.ledgers.insert(service.to_string(), fake.ledger());
        let journal = fake.journal();
        // A full journal refuses every further request with 503: the soak would then judge
        // refusals, not the executor.
        if journal.len() >= SOAK_JOURNAL_ENTRIES_MAX {
            journals_full.push(service);
        }
        observed.journals.insert(service.to_string(), journal);
    }
    let check_started = Instant::now();
    let verdicts = checker::check(&scenario(&intents), &observed);
    let check_s = check_started.elapsed().as_secs_f64();

    let mut states = BTreeMap::<String, usize>::new();
    for i in &status {
        *states.entry(i["state"].as_str().unwrap_or("?").to_string()).or_default() += 1;
    }
    // Every escalation by its reason, `unexplained` always present (it should stay 0); and
    // what became of the intents the soak's injected 422 refused.
    let refused = refusals(&status, &observed.journals);
    let mut escalations = BTreeMap::from([(UNEXPLAINED.to_string(), 0usize)]);
    let mut unexplained = Vec::new();
    for claim in status.iter().filter(|i| i["state"] == "escalated") {
        let reason = escalation_reason(claim, &refused);
        if reason == UNEXPLAINED {
            unexplained.push(json!({"id": claim["id"], "evidence": claim["evidence"]}));
        }
        *escalations.entry(reason).or_default() += 1;
    }
    let mut refused_became = BTreeMap::<String, usize>::new();
    for claim in &status {
        let id = claim["id"].as_str().unwrap_or_default();
        let injected = refused.by_intent.get(id).is_some_and(|a| a.iter().any(|&(s, i)| s == 422 && i));
        if injected {
            *refused_became.entry(claim["state"].as_str().unwrap_or("?").to_string()).or_default() += 1;
        }
    }
    let effects: BTreeMap<&str, usize> =
        observed.ledgers.iter().map(|(s, l)| (s.as_str(), l.len())).collect();
    let requests: BTreeMap<&str, usize> =
        observed.journals.iter().map(|(s, j)| (s.as_str(), j.len())).collect();
    let kills: usize = reports.iter().map(|r| r.kills).sum();
    let mut fired = BTreeMap::<String, usize>::new();
    for entry in observed.journals.values().flatten() {
        for applied in &entry.faults {
            *fired.entry(applied.fault.clone()).or_default() += 1;
        }
    }
    let figures = json!({
        "kills": kills,
        "seed": knobs.seed,
        "workers": knobs.workers,
        "stop_pairs": reports.iter().map(|r| r.stop_pairs).sum::<usize>(),
        "stops_past_lease": reports.iter().map(|r| r.long_stops).sum::<usize>(),
        "kill_phase_s": kill_phase_s,
        "kills_per_min": kills as f64 * 60.0 / kill_phase_s,
        "final_reconcile_s": final_s,
        "final_reconcile_rounds": rounds,
        "check_s": check_s,
        "points": points,
        "intents": intents.len(),
        "acknowledged_during_kills": acknowledged_in_kills,
        "proposed_again_at_the_end": pending.len(),
        "states": states,
        "escalations": escalations,
        "unexplained_escalations": unexplained.iter().take(5).collect::<Vec<_>>(),
        "injected_422": {
            "writes_eligible": refused.writes_eligible,
            "expected": refused.expected_injected_422,
            "answered": refused.injected_422,
            "unattributed": refused.unattributed,
            "intents_became": refused_became,
        },
        "effects": effects,
        "requests": requests,
        "journals_full": journals_full,
        "faults_fired": fired,
        "faults": fault_rules(),
        "verdicts": verdicts.iter().map(|v| json!({
            "invariant": v.invariant,
            "status": v.status,
            "evidence": v.evidence.iter().take(5).collect::<Vec<_>>(),
            "evidence_lines": v.evidence.len(),
            "reason": v.reason,
        })).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&figures).expect("JSON");
    eprintln!("soak: figures\n{text}");
    if let Some(path) = &knobs.report {
        std::fs::write(path, &text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }
    let violated: Vec<_> = checker::violations(&verdicts).collect();
    assert!(violated.is_empty(), "violated: {violated:#?}");
    assert!(journals_full.is_empty(), "journals that filled up and refused requests: {journals_full:?}");
    // An escalation whose reason the evidence and the journals cannot give is a claim a person
    // could not act on.
    assert!(unexplained.is_empty(), "escalations without a reason the journals bear out: {unexplained:#?}");
    assert!(kills >= knobs.kills, "only {kills} kills of {}", knobs.kills);
}
