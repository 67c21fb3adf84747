//! The world a real executor process runs against in these tests: the payments and
//! workspaces fakes on loopback with short contracts, the `init` that announces them, and the
//! check of the executor's final claims against the fakes' ledgers (design §5).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use fake_services::{Fake, Fakes, Server};
use serde_json::{Value, json};
use vocabulary::ContractPatch;
use vocabulary::Effect;
use vocabulary::JournalEntry;
use vocabulary::TokioClock;

use crate::process::{ExecutorProcess, REPLY_WAIT, XorShift};

/// Refundable amount of every seeded payment intent: far more than any test refunds.
pub const PAYMENT_AMOUNT: u64 = 1_000_000_000_000;

/// Short terms, so that a negative answer becomes authoritative within a second.
pub const SETTLE_MS_MAX: u64 = 300;
pub const REQUEST_TIMEOUT_MS: u64 = 500;

/// The fakes, served on loopback.
pub struct Services {
    pub fakes: Fakes,
    pub payments: Server,
    pub workspaces: Server,
}

impl Services {
    /// Starts both fakes with `settle_ms_max` [`SETTLE_MS_MAX`] and the given extra terms
    /// (a JSON contract patch) on both.
    pub async fn start(seed: u64, patch: Value) -> Services {
        let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), seed);
        let mut terms = json!({"settle_ms_max": SETTLE_MS_MAX});
        if let (Some(t), Value::Object(extra)) = (terms.as_object_mut(), patch) {
            t.extend(extra);
        }
        let patch: ContractPatch = serde_json::from_value(terms).expect("a valid contract patch");
        let loopback = "127.0.0.1:0".parse().expect("an address");
        let payments = Fake::Payments(fakes.payments.clone());
        let workspaces = Fake::Workspaces(fakes.workspaces.clone());
        payments.patch_contract(patch.clone());
        workspaces.patch_contract(patch);
        let payments = Server::start(payments, loopback).await.expect("payments fake starts");
        let workspaces = Server::start(workspaces, loopback).await.expect("workspaces fake starts");
        Services { fakes, payments, workspaces }
    }

    pub fn payments(&self) -> Fake {
        Fake::Payments(self.fakes.payments.clone())
    }

    pub fn workspaces(&self) -> Fake {
        Fake::Workspaces(self.fakes.workspaces.clone())
    }

    pub fn fake(&self, name: &str) -> Fake {
        self.fakes.get(name).unwrap_or_else(|| panic!("no fake {name}"))
    }

    /// `services` for `init`: each fake's URL and its contract, exactly as the fake keeps it.
    pub fn announced(&self) -> Value {
        let entry = |fake: Fake, server: &Server| json!({"url": server.url(), "contract": serde_json::to_value(fake.contract()).expect("a contract")});
        json!({
            "payments": entry(self.payments(), &self.payments),
            "workspaces": entry(self.workspaces(), &self.workspaces),
        })
    }

    /// Seeds payment intent `id` with [`PAYMENT_AMOUNT`] to refund.
    pub fn seed_payment_intent(&self, id: &str) {
        self.fakes.payments.seed_payment_intent(Some(id), PAYMENT_AMOUNT, "usd").expect("seeding");
    }

    /// Both ledgers.
    pub fn effects(&self) -> Vec<Effect> {
        let mut all = self.payments().ledger();
        all.extend(self.workspaces().ledger());
        all
    }

    /// Polls `fake`'s journal (every 2 ms, at most `wait`) until an entry satisfies `pred`.
    pub async fn await_journal(
        &self,
        fake: &Fake,
        wait: Duration,
        pred: impl Fn(&JournalEntry) -> bool,
    ) -> JournalEntry {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(entry) = fake.journal().into_iter().find(|e| pred(e)) {
                return entry;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: no such request within {wait:?}; journal: {:?}",
                fake.name(),
                fake.journal()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// The `init` request for `worker_id` on `state_dir`, with short limits (`limits` patches them).
pub fn init(services: &Services, worker_id: &str, state_dir: &Path, limits: Value) -> Value {
    let mut all = json!({
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
        "lease_ms": 5_000,
        "attempts_max": 50,
        "pass_pause_ms": 10,
    });
    if let (Some(a), Value::Object(extra)) = (all.as_object_mut(), limits) {
        a.extend(extra);
    }
    json!({
        "type": "init",
        "protocol": "twice/1",
        "worker_id": worker_id,
        "state_dir": state_dir,
        "services": services.announced(),
        "limits": all,
    })
}

/// A `payments.refund` intent of a small amount from payment intent `pi`.
pub fn refund(id: &str, pi: &str, amount: u64) -> Value {
    json!({"id": id, "action": "payments.refund", "params": {"payment_intent": pi, "amount": amount}})
}

/// A `workspaces.create` intent for `external_id`.
pub fn workspace(id: &str, external_id: &str) -> Value {
    json!({"id": id, "action": "workspaces.create", "params": {"external_id": external_id, "name": format!("ws {id}")}})
}

pub fn propose(intent: &Value) -> Value {
    json!({"type": "propose", "intent": intent})
}

/// Request lines with the given `msg_id`s, to be written at once.
pub fn lines(requests: &[(u64, Value)]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for (id, request) in requests {
        let mut request = request.clone();
        request["msg_id"] = json!(id);
        bytes.extend_from_slice(request.to_string().as_bytes());
        bytes.push(b'\n');
    }
    bytes
}

/// Everything at once, as a harness in a hurry: `proposals` in one to three writes (each a
/// batch, if the executor has not read the previous one yet; the cuts drawn from `rng`), with
/// `msg_id`s from `first_msg_id` on. Returns the proposals written, with their ids, and
/// whether the process still read its stdin after the last write.
pub async fn propose_in_batches(
    ex: &mut ExecutorProcess,
    proposals: &[Value],
    first_msg_id: u64,
    rng: &mut XorShift,
) -> (Vec<(u64, Value)>, bool) {
    let n = proposals.len() as u64;
    let mut sent: Vec<(u64, Value)> = Vec::new();
    let writes = rng.range(1, 3).min(n) as usize;
    let mut cuts: Vec<usize> = (1..writes).map(|_| rng.range(1, n - 1) as usize).collect();
    cuts.extend([0, proposals.len()]);
    cuts.sort_unstable();
    for pair in cuts.windows(2) {
        let group: Vec<(u64, Value)> = proposals[pair[0]..pair[1]]
            .iter()
            .enumerate()
            .map(|(i, intent)| (first_msg_id + (pair[0] + i) as u64, intent.clone()))
            .collect();
        if group.is_empty() {
            continue;
        }
        let requests: Vec<(u64, Value)> = group.iter().map(|(id, i)| (*id, propose(i))).collect();
        if ex.write_raw(&lines(&requests)).await.is_err() {
            return (sent, false);
        }
        sent.extend(group);
    }
    (sent, true)
}

/// Reconcile and drain rounds until no intent is recorded, blocked, submitted or unknown,
/// within `wait`; returns the final `status` intents.
pub async fn resolve(ex: &mut ExecutorProcess, wait: Duration) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        ex.ok(json!({"type": "reconcile"})).await;
        let drain = ex.call(json!({"type": "drain", "timeout_ms": 5_000})).await;
        assert!(
            drain["type"] == "drain_ok" || drain["code"] == 0,
            "drain: neither done nor a timeout: {drain}"
        );
        let status = ex.ok(json!({"type": "status"})).await;
        let intents = status["intents"].as_array().cloned().unwrap_or_default();
        let open: Vec<&Value> = intents
            .iter()
            .filter(|i| matches!(i["state"].as_str(), Some("recorded" | "blocked" | "submitted" | "unknown")))
            .collect();
        if open.is_empty() {
            return intents;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "still unresolved after {wait:?}: {}",
            serde_json::to_string_pretty(&open).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The effects in `ledger` that belong to `intent` (a status entry): a refund by the intent id
/// it carries in `metadata.twice_intent`, a workspace by its external id.
pub fn effects_of<'a>(intent: &Value, ledger: &'a [Effect]) -> Vec<&'a Effect> {
    let id = intent["id"].as_str().unwrap_or_default();
    match intent["action"].as_str() {
        Some("payments.refund") => ledger
            .iter()
            .filter(|e| e.kind == "refund.created" && e.params["metadata"]["twice_intent"] == id)
            .collect(),
        Some("workspaces.create") => ledger
            .iter()
            .filter(|e| {
                e.kind == "workspace.created" && e.params["external_id"] == intent["params"]["external_id"]
            })
            .collect(),
        other => panic!("an intent with an unknown action {other:?}: {intent}"),
    }
}

/// What the check counted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Intents per final state.
    pub states: BTreeMap<String, usize>,
    pub effects: usize,
}

/// Design §5 against the ledgers, for the intents whose ids start with `prefix`:
///
/// - nothing lost: every id in `acknowledged` (it got `propose_ok`) is in `intents`, once;
/// - no duplicate effect: at most one effect per intent, and no effect for an intent the
///   executor does not know;
/// - honest terminal states: `confirmed` ⇔ exactly one effect, with the authorised
///   parameters and the executor's evidence naming it; `failed` ⇒ none;
/// - resolved: nothing left recorded, blocked, submitted or unknown.
pub fn check(prefix: &str, acknowledged: &BTreeSet<String>, intents: &[Value], ledger: &[Effect]) -> Verdict {
    let mine: Vec<&Value> =
        intents.iter().filter(|i| i["id"].as_str().is_some_and(|id| id.starts_with(prefix))).collect();
    let ids: Vec<&str> = mine.iter().filter_map(|i| i["id"].as_str()).collect();
    let unique: BTreeSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "an intent id appears twice in status: {ids:?}");
    let lost: Vec<&String> = acknowledged.iter().filter(|a| !unique.contains(a.as_str())).collect();
    assert!(lost.is_empty(), "LOST: acknowledged intents missing from status: {lost:?}");

    let mut verdict = Verdict::default();
    let mut attributed = BTreeSet::new();
    for intent in &mine {
        let state = intent["state"].as_str().unwrap_or_default();
        let effects = effects_of(intent, ledger);
        attributed.extend(effects.iter().map(|e| (e.kind.clone(), e.object_id.clone())));
        assert!(effects.len() <= 1, "DUPLICATE: {} effects for {intent}: {effects:#?}", effects.len());
        match state {
            "confirmed" => {
                let [effect] = effects[..] else { panic!("confirmed without an effect: {intent}") };
                assert_eq!(
                    intent["evidence"]["external_id"], effect.object_id,
                    "confirmed with evidence naming another object: {intent} vs {effect:?}"
                );
                let params = &intent["params"];
                let same = match intent["action"].as_str() {
                    Some("payments.refund") => {
                        effect.params["payment_intent"] == params["payment_intent"]
                            && effect.params["amount"] == params["amount"]
                    }
                    _ => effect.params["name"] == params["name"],
                };
                assert!(same, "confirmed, but the effect has other parameters: {intent} vs {effect:?}");
            }
            "failed" => assert!(effects.is_empty(), "failed, but the effect exists: {intent}: {effects:?}"),
            "escalated" => {}
            other => panic!("unresolved at the end ({other}): {intent}"),
        }
        *verdict.states.entry(state.to_string()).or_default() += 1;
        verdict.effects += effects.len();
    }

    // An effect of one of ours that no intent in the log accounts for.
    let orphans: Vec<&Effect> = ledger
        .iter()
        .filter(|e| {
            let ours = match e.kind.as_str() {
                "refund.created" => e.params["metadata"]["twice_intent"].as_str(),
                _ => e.params["external_id"].as_str(),
            };
            ours.is_some_and(|o| o.starts_with(prefix))
                && !attributed.contains(&(e.kind.clone(), e.object_id.clone()))
        })
        .collect();
    assert!(orphans.is_empty(), "effects of intents the executor does not know: {orphans:#?}");
    verdict
}

/// Spawns an executor on `state_dir` (passed with `--state-dir` too) and sends `init`.
pub async fn start_executor(
    label: &str,
    services: &Services,
    worker_id: &str,
    state_dir: &Path,
    kill_at: Option<&str>,
) -> ExecutorProcess {
    start_with(label, init(services, worker_id, state_dir, json!({})), state_dir, kill_at).await
}

/// Spawns an executor on `state_dir` and sends it `init_request`.
pub async fn start_with(
    label: &str,
    init_request: Value,
    state_dir: &Path,
    kill_at: Option<&str>,
) -> ExecutorProcess {
    let dir = state_dir.to_str().expect("a UTF-8 path");
    let env: Vec<(&str, &str)> = kill_at.map(|k| ("TWICE_EXECUTOR_KILL_AT", k)).into_iter().collect();
    let mut ex = ExecutorProcess::spawn(label, &["--state-dir", dir], &env);
    match ex.request(init_request, REPLY_WAIT).await {
        Ok(r) if r["type"] == "init_ok" => ex,
        Ok(r) => panic!("{label}: init refused: {r}"),
        Err(died) => panic!("{label}: died during init: {died:?}"),
    }
}
