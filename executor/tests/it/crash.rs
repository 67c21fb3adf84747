//! Crash tests of the real `twice-executor` binary: SIGKILL at exact points of its work and
//! at random moments, restart on the same state directory, and check design §5 against the
//! fakes' ledgers: nothing lost, nothing done twice, every final state honest.
//!
//! The random test kills `TWICE_CRASH_KILLS` processes (1,000 unless set), each round's
//! proposals written in a few batches of lines at once (committed together); a longer soak:
//! `TWICE_CRASH_KILLS=5000 cargo xtask test -p executor crash`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use vocabulary::FaultRule;
use vocabulary::FaultSpec;

use crate::process::{Died, REPLY_WAIT, XorShift, fresh_dir};
use crate::world::{
    Services, Verdict, check, lines, propose, propose_in_batches, refund, resolve, start_executor, workspace,
};

const RESOLVE_WAIT: Duration = Duration::from_secs(30);

/// A refund and a workspace, with ids under `prefix`; seeds the refund's payment intent.
fn one_of_each(services: &Services, prefix: &str) -> Vec<Value> {
    let refund_id = format!("{prefix}refund");
    let pi = format!("pi_{refund_id}");
    services.seed_payment_intent(&pi);
    let ws_id = format!("{prefix}workspace");
    vec![refund(&refund_id, &pi, 1_234), workspace(&ws_id, &ws_id)]
}

fn ids(intents: &[Value]) -> BTreeSet<String> {
    intents.iter().map(|i| i["id"].as_str().expect("an id").to_string()).collect()
}

fn assert_sigkilled(died: &Died, what: &str) {
    assert!(died.by_sigkill(), "{what}: expected death by SIGKILL, got {}\n{}", died.status, died.stderr);
}

/// Restarts an executor on `dir` as worker `w`, resolves everything, checks, shuts down.
async fn restart_and_check(
    services: &Services,
    dir: &std::path::Path,
    prefix: &str,
    acked: &BTreeSet<String>,
) -> Verdict {
    let mut ex = start_executor(&format!("{prefix}restarted"), services, "w", dir, None).await;
    let intents = resolve(&mut ex, RESOLVE_WAIT).await;
    let verdict = check(prefix, acked, &intents, &services.effects());
    ex.ok(json!({"type": "shutdown"})).await;
    verdict
}

fn all_confirmed(n: usize) -> std::collections::BTreeMap<String, usize> {
    [("confirmed".to_string(), n)].into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_propose_ok_loses_nothing() {
    let services = Services::start(101, json!({})).await;
    let dir = fresh_dir("crash_after_propose_ok");
    let prefix = "ack.";
    let intents = one_of_each(&services, prefix);
    let mut ex = start_executor("first", &services, "w", &dir, None).await;
    for intent in &intents {
        ex.ok(propose(intent)).await;
    }
    // Killed the moment the harness has its acknowledgements: nothing was sent yet.
    let status = ex.kill().await;
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
    assert!(services.effects().is_empty(), "nothing was drained, yet: {:?}", services.effects());

    let verdict = restart_and_check(&services, &dir, prefix, &ids(&intents)).await;
    assert_eq!(verdict.states, all_confirmed(2));
}

/// `after_record` dies with the intent durable and its `propose_ok` unsent: the harness does
/// not know whether it was recorded, proposes it again after the restart, and must get one
/// intent and one effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_record_before_the_reply_then_propose_again() {
    let services = Services::start(102, json!({})).await;
    let dir = fresh_dir("crash_after_record");
    let prefix = "rec.";
    let intents = one_of_each(&services, prefix);
    // The second recording kills: the first proposal is acknowledged, the second is not.
    let mut ex = start_executor("first", &services, "w", &dir, Some("after_record:2")).await;
    ex.ok(propose(&intents[0])).await;
    let died = ex.request(propose(&intents[1]), REPLY_WAIT).await.expect_err("after_record:2 kills");
    assert_sigkilled(&died, "after_record:2");

    let mut ex = start_executor("second", &services, "w", &dir, None).await;
    // Both again, as a harness that lost track would: the same ids and payloads are accepted.
    for intent in &intents {
        let reply = ex.ok(propose(intent)).await;
        assert_eq!(reply["intent"]["id"], intent["id"]);
        assert_eq!(reply["intent"]["params"], intent["params"]);
    }
    let status = ex.ok(json!({"type": "status"})).await;
    assert_eq!(status["intents"].as_array().map(Vec::len), Some(2), "one row per id: {status}");
    ex.ok(json!({"type": "shutdown"})).await;

    let verdict = restart_and_check(&services, &dir, prefix, &ids(&intents)).await;
    assert_eq!(verdict.states, all_confirmed(2));
}

/// Proposals written at once (one write: they arrive together, and the executor commits them
/// as one batch); `after_record:3` dies after that commit with no reply written. Every one of
/// them is durable though none was acknowledged, and proposing them again gives one intent
/// and one effect each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_recording_a_batch_before_any_reply() {
    let services = Services::start(108, json!({})).await;
    let dir = fresh_dir("crash_after_record_batch");
    let prefix = "batch.";
    let mut intents = one_of_each(&services, prefix);
    for i in 0..3 {
        let id = format!("{prefix}r{i}");
        let pi = format!("pi_{id}");
        services.seed_payment_intent(&pi);
        intents.push(refund(&id, &pi, 100 + i));
    }
    let mut ex = start_executor("first", &services, "w", &dir, Some("after_record:3")).await;
    let requests: Vec<(u64, Value)> =
        intents.iter().enumerate().map(|(i, intent)| (100 + i as u64, propose(intent))).collect();
    ex.write_raw(&lines(&requests)).await.expect("alive");
    let died = ex.next_reply(REPLY_WAIT).await.expect_err("after_record:3 kills before any reply");
    assert_sigkilled(&died, "after_record:3");

    let mut ex = start_executor("second", &services, "w", &dir, None).await;
    let status = ex.ok(json!({"type": "status"})).await;
    assert_eq!(
        status["intents"].as_array().map(Vec::len),
        Some(intents.len()),
        "the whole batch was committed before the hook: {status}"
    );
    for intent in &intents {
        let reply = ex.ok(propose(intent)).await;
        assert_eq!(reply["intent"]["id"], intent["id"]);
    }
    ex.ok(json!({"type": "shutdown"})).await;

    let verdict = restart_and_check(&services, &dir, prefix, &ids(&intents)).await;
    assert_eq!(verdict.states, all_confirmed(intents.len()));
}

/// Killed by the hook at `point` (the first time it is reached) while draining.
async fn crash_at_hook(point: &str, seed: u64) -> Services {
    let services = Services::start(seed, json!({})).await;
    let dir = fresh_dir(&format!("crash_at_{point}"));
    let prefix = format!("{point}.");
    let intents = one_of_each(&services, &prefix);
    let mut ex = start_executor("first", &services, "w", &dir, Some(&format!("{point}:1"))).await;
    for intent in &intents {
        ex.ok(propose(intent)).await;
    }
    let died = ex.request(json!({"type": "drain", "timeout_ms": 10_000}), REPLY_WAIT).await;
    let died = died.expect_err("the hook kills during the drain");
    assert_sigkilled(&died, point);

    let verdict = restart_and_check(&services, &dir, &prefix, &ids(&intents)).await;
    assert_eq!(verdict.states, all_confirmed(2));
    services
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_before_send_then_restart_sends_once() {
    let services = crash_at_hook("before_send", 103).await;
    // One POST per service, from the restarted worker only.
    for fake in [services.payments(), services.workspaces()] {
        let posts = fake.journal().into_iter().filter(|e| e.method == "POST").count();
        assert_eq!(posts, 1, "{}: {:?}", fake.name(), fake.journal());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_after_reply_before_recording_it() {
    crash_at_hook("after_reply", 104).await;
}

/// The request reached the fake, which holds it (`latency`) with the effect committed
/// (`after_ms`) or not yet (`before_ms`); the executor is killed meanwhile.
async fn crash_while_the_fake_holds_the_request(committed: bool, seed: u64) {
    let services = Services::start(seed, json!({})).await;
    let name = if committed { "committed" } else { "uncommitted" };
    let dir = fresh_dir(&format!("crash_while_held_{name}"));
    let prefix = format!("held-{name}.");
    let intents = one_of_each(&services, &prefix);
    // Held past the executor's request timeout when committed; held within the settle bound
    // otherwise, as the contract promises for a request that has not committed yet.
    let fault = if committed {
        json!({"kind": "latency", "after_ms": 3_000})
    } else {
        json!({"kind": "latency", "before_ms": 250})
    };
    let fault: FaultSpec = serde_json::from_value(fault).expect("a fault");
    for fake in [services.payments(), services.workspaces()] {
        fake.add_rule(FaultRule::always(fault.clone()).method("POST").nth(1)).expect("rule");
    }
    let mut ex = start_executor("first", &services, "w", &dir, None).await;
    for intent in &intents {
        ex.ok(propose(intent)).await;
    }
    ex.send(json!({"type": "drain", "timeout_ms": 10_000})).await.expect("alive");
    for fake in [services.payments(), services.workspaces()] {
        services.await_journal(&fake, Duration::from_secs(10), |e| e.method == "POST").await;
    }
    if committed {
        // `after_ms` waits after the commit: wait for both effects, then kill.
        let deadline = Instant::now() + Duration::from_secs(5);
        while services.effects().len() < 2 {
            assert!(Instant::now() < deadline, "no commit: {:?}", services.effects());
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    let status = ex.kill().await;
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
    if !committed {
        assert!(services.effects().is_empty(), "committed too early: {:?}", services.effects());
    }

    let verdict = restart_and_check(&services, &dir, &prefix, &ids(&intents)).await;
    assert_eq!(verdict.states, all_confirmed(2));
    for fake in [services.payments(), services.workspaces()] {
        let posts: Vec<_> = fake
            .journal()
            .into_iter()
            .filter(|e| e.method == "POST")
            .map(|e| (e.outcome, e.status, e.replayed))
            .collect();
        eprintln!("{name}: {} POSTs (outcome, status, replayed): {posts:?}", fake.name());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_while_the_service_holds_a_committed_reply() {
    crash_while_the_fake_holds_the_request(true, 105).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_while_the_service_holds_an_uncommitted_request() {
    crash_while_the_fake_holds_the_request(false, 106).await;
}

// ---------------------------------------------------------------------------------------------
// Randomized kills

/// Independent executors (each its own state directory) that share the fakes.
const LANES: usize = 4;
/// Fixed, so that a failure names the choices that led to it.
const RANDOM_SEED: u64 = 0x7477_6963_6521;

/// How one lane's processes died.
#[derive(Debug, Default, Clone)]
struct LaneReport {
    rounds: usize,
    /// Died at the `TWICE_EXECUTOR_KILL_AT` point.
    hook_kills: usize,
    /// Killed by the test after a random delay, before the drain was answered.
    timed_kills: usize,
    /// Killed after the drain was answered (the hook's point was not reached, or the
    /// random delay was longer than the round's work).
    idle_kills: usize,
    acknowledged: usize,
    verdict: Verdict,
}

impl LaneReport {
    fn kills(&self) -> usize {
        self.hook_kills + self.timed_kills + self.idle_kills
    }
}

/// `msg_id`s of the proposals a lane writes itself, above the few its requests sent one by
/// one (`init`, `drain`) take.
const FIRST_PROPOSAL_MSG_ID: u64 = 1_000;

/// One lane: rounds of start, propose a few intents (and every one not yet acknowledged) in
/// one to three writes of several lines each (batches), drain, die by SIGKILL at a random
/// point; then a final restart that resolves everything, and the check.
async fn lane(services: Arc<Services>, lane: usize, kills_wanted: usize) -> LaneReport {
    let prefix = format!("lane{lane}.");
    let dir = fresh_dir(&format!("random_kills_{lane}"));
    let mut rng = XorShift::new(RANDOM_SEED ^ (lane as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut acked: BTreeSet<String> = BTreeSet::new();
    // Proposed without an acknowledgement seen: proposed again next round.
    let mut pending: Vec<Value> = Vec::new();
    let mut next_intent = 0usize;
    let mut report = LaneReport::default();

    while report.kills() < kills_wanted {
        report.rounds += 1;
        let round = report.rounds;
        let mut proposals = std::mem::take(&mut pending);
        for _ in 0..rng.range(1, 6) {
            next_intent += 1;
            let id = format!("{prefix}i{next_intent}");
            if rng.range(0, 1) == 0 {
                let pi = format!("pi_{id}");
                services.seed_payment_intent(&pi);
                proposals.push(refund(&id, &pi, rng.range(1, 10_000)));
            } else {
                proposals.push(workspace(&id, &id));
            }
        }
        let n = proposals.len() as u64;
        let kill_at = match rng.range(0, 3) {
            // Counted per intent, after the commit of its batch.
            0 => Some(format!("after_record:{}", rng.range(1, n))),
            1 => Some(format!("before_send:{}", rng.range(1, 3))),
            2 => Some(format!("after_reply:{}", rng.range(1, 3))),
            _ => None,
        };
        let label = format!("{prefix}round{round}[{}]", kill_at.as_deref().unwrap_or("timed"));
        let mut ex = start_executor(&label, &services, "w", &dir, kill_at.as_deref()).await;

        // Everything at once, as a harness in a hurry, then a drain.
        let (sent, alive) = propose_in_batches(&mut ex, &proposals, FIRST_PROPOSAL_MSG_ID, &mut rng).await;
        let mut drain_id = None;
        if alive {
            drain_id = ex.send(json!({"type": "drain", "timeout_ms": 5_000})).await.ok();
        }
        let timed = kill_at.is_none();
        if timed {
            // Half the time within the first 10 ms, where most of a round's work is.
            let most = if rng.range(0, 1) == 0 { 10 } else { 50 };
            tokio::time::sleep(Duration::from_millis(rng.range(0, most))).await;
            ex.signal(libc::SIGKILL);
        }
        // Read every reply until the drain's, or the end; proposals are answered in order.
        let mut last_proposal = None;
        let died = loop {
            match ex.next_reply(REPLY_WAIT).await {
                Err(died) => break Some(died),
                Ok(reply) => {
                    let to = reply["in_reply_to"].as_u64();
                    if to.is_some() && to == drain_id {
                        assert!(reply["type"] == "drain_ok" || reply["code"] == 0, "{label}: drain: {reply}");
                        break None;
                    }
                    let Some((_, intent)) = sent.iter().find(|(id, _)| Some(*id) == to) else {
                        panic!("{label}: a reply to nothing sent: {reply}");
                    };
                    assert_eq!(reply["type"], "propose_ok", "{label}: {intent} got {reply}");
                    assert!(last_proposal < to, "{label}: reply to {to:?} after {last_proposal:?}");
                    last_proposal = to;
                    acked.insert(intent["id"].as_str().unwrap_or_default().to_string());
                }
            }
        };
        match died {
            Some(died) => {
                assert_sigkilled(&died, &label);
                if timed {
                    report.timed_kills += 1;
                } else {
                    report.hook_kills += 1;
                }
            }
            None => {
                // The hook's point was not reached this round (or the timed kill came after
                // the drain): kill it idle.
                let status = ex.kill().await;
                assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
                report.idle_kills += 1;
            }
        }
        pending =
            proposals.into_iter().filter(|p| !acked.contains(p["id"].as_str().unwrap_or_default())).collect();
    }

    // The end: a worker that is left alone proposes what was never acknowledged, then
    // resolves everything.
    let mut ex = start_executor(&format!("{prefix}final"), &services, "w", &dir, None).await;
    for intent in std::mem::take(&mut pending) {
        ex.ok(propose(&intent)).await;
        acked.insert(intent["id"].as_str().unwrap_or_default().to_string());
    }
    let intents = resolve(&mut ex, Duration::from_secs(60)).await;
    ex.ok(json!({"type": "shutdown"})).await;
    report.acknowledged = acked.len();
    report.verdict = check(&prefix, &acked, &intents, &services.effects());
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_randomly_without_loss_or_duplicate() {
    let kills: usize = match std::env::var("TWICE_CRASH_KILLS") {
        Ok(v) => v.parse().unwrap_or_else(|_| panic!("TWICE_CRASH_KILLS={v:?} is not a count")),
        Err(_) => 1_000,
    };
    let started = Instant::now();
    let services = Arc::new(Services::start(107, json!({})).await);
    let mut lanes = tokio::task::JoinSet::new();
    for i in 0..LANES {
        let share = kills / LANES + usize::from(i < kills % LANES);
        lanes.spawn(lane(Arc::clone(&services), i, share));
    }
    let mut reports = Vec::new();
    while let Some(done) = lanes.join_next().await {
        match done {
            Ok(report) => reports.push(report),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("a lane was cancelled: {e}"),
        }
    }
    let total: usize = reports.iter().map(LaneReport::kills).sum();
    let mut states = std::collections::BTreeMap::<String, usize>::new();
    for r in &reports {
        for (s, n) in &r.verdict.states {
            *states.entry(s.clone()).or_default() += n;
        }
    }
    eprintln!(
        "random kills: {total} SIGKILLs ({} by hook, {} timed, {} idle) in {} rounds, {} intents acknowledged, final states {states:?}, {} effects, {:.1?}",
        reports.iter().map(|r| r.hook_kills).sum::<usize>(),
        reports.iter().map(|r| r.timed_kills).sum::<usize>(),
        reports.iter().map(|r| r.idle_kills).sum::<usize>(),
        reports.iter().map(|r| r.rounds).sum::<usize>(),
        reports.iter().map(|r| r.acknowledged).sum::<usize>(),
        reports.iter().map(|r| r.verdict.effects).sum::<usize>(),
        started.elapsed(),
    );
    assert!(total >= kills, "only {total} kills of {kills}");
    assert!(states.get("confirmed").copied().unwrap_or(0) > 0, "nothing was confirmed: {states:?}");
}
