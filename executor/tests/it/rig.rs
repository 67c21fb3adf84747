//! A rig for the executor's acceptance tests: the fakes on loopback, `pi_1`, the bucket
//! `reports` (with one object) and the harness's chain account seeded, each
//! fake's contract patched and announced to a library [`Executor`] on a fresh state
//! directory, and the ledger read back to judge what the executor claims.
//!
//! Time terms are short (settle 800 ms, request timeout 500 ms) so that a test waits them
//! out for real; every wait is bounded.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use executor::services::INTENT_METADATA_KEY;
use executor::{Durability, Executor, Intent, Proposal, World};
use fake_services::{Fake, Fakes, Server};
use scenarios::model::CHAIN_ACCOUNT_BALANCE_WEI;
use serde_json::{Value, json};
use vocabulary::ContractPatch;
use vocabulary::Effect;
use vocabulary::FaultRule;
use vocabulary::State;
use vocabulary::TokioClock;
use vocabulary::protocol::Config;
use vocabulary::protocol::{Limits, Service};

pub const PAYMENTS: &str = "payments";
pub const WORKSPACES: &str = "workspaces";
pub const FILES: &str = "files";
pub const CHAIN: &str = "chain";
pub const MESSAGES: &str = "messages";
/// The bucket every rig creates, and the object it seeds there (for puts that overwrite).
pub const BUCKET: &str = "reports";
pub const SEEDED_KEY: &str = "seeded/summary.txt";
/// What `pi_1` is seeded with.
pub const PI_AMOUNT: u64 = 5_000;
/// The settle bound every rig announces unless a test says otherwise.
pub const SETTLE_MS: u64 = 800;
/// The executor's timeout for each HTTP request.
pub const REQUEST_TIMEOUT_MS: u64 = 500;
/// Bound on one `drain`.
pub const DRAIN_MS: u64 = 5_000;

/// Limits with short terms, generous escalation.
pub fn limits() -> Limits {
    Limits {
        request_timeout_ms: REQUEST_TIMEOUT_MS,
        lease_ms: 5_000,
        attempts_max: 5,
        escalate_after_ms: 60_000,
        pass_pause_ms: 20,
        batch_max: 64,
    }
}

/// The contract terms every rig starts from: the fake's defaults with a short settle bound.
pub fn base_patch() -> ContractPatch {
    ContractPatch { settle_ms_max: Some(SETTLE_MS), ..ContractPatch::default() }
}

/// `extra` on top of [`base_patch`]: the fields `extra` sets win.
pub fn patch(extra: ContractPatch) -> ContractPatch {
    let base = base_patch();
    ContractPatch {
        idempotency_keys: extra.idempotency_keys.or(base.idempotency_keys),
        key_retention_ms: extra.key_retention_ms.or(base.key_retention_ms),
        reads: extra.reads.or(base.reads),
        read_lag_ms_max: extra.read_lag_ms_max.or(base.read_lag_ms_max),
        acks: extra.acks.or(base.acks),
        settle_ms_max: extra.settle_ms_max.or(base.settle_ms_max),
        unique_business_key: extra.unique_business_key.or(base.unique_business_key),
        fencing: extra.fencing.or(base.fencing),
        conditional_writes: extra.conditional_writes.or(base.conditional_writes),
    }
}

/// The fake's contract as the executor is told it: the same `vocabulary::Contract`, so an
/// added term reaches both sides at once (this used to convert between two types field by
/// field).
pub fn announce(contract: &vocabulary::Contract) -> vocabulary::Contract {
    contract.clone()
}

/// A state directory of its own under the system's temp directory, removed on drop.
pub struct StateDir(pub PathBuf);

impl StateDir {
    pub fn new(tag: &str) -> StateDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let clean: String = tag.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
        let dir = std::env::temp_dir().join(format!("twice-it-{}-{n}-{clean}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        StateDir(dir)
    }
}

impl Drop for StateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The fakes, their servers and an executor that knows their contracts.
pub struct Rig {
    pub fakes: Fakes,
    // Kept for their lifetime: dropping a server stops it.
    _servers: Vec<Server>,
    pub executor: Executor,
    _state: StateDir,
}

impl Rig {
    /// Starts the fakes, seeds `pi_1`, patches each fake's contract with `patches` (the base
    /// patch for a service not named), arms `rules` on their services, checks that each rule
    /// stays inside its service's contract, and opens the executor.
    pub async fn start(
        tag: &str,
        seed: u64,
        patches: &[(&str, ContractPatch)],
        rules: &[(&str, FaultRule)],
        limits: Limits,
    ) -> Result<Rig, String> {
        let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), seed);
        let mut servers = Vec::new();
        let mut services = BTreeMap::new();
        for fake in fakes.all() {
            let server = Server::start(fake.clone(), "127.0.0.1:0".parse().expect("a loopback address"))
                .await
                .map_err(|e| format!("cannot start {}: {e}", fake.name()))?;
            let patch = patches
                .iter()
                .find(|(s, _)| *s == fake.name())
                .map(|(_, p)| patch(p.clone()))
                .unwrap_or_else(base_patch);
            let contract = fake.patch_contract(patch);
            services.insert(
                fake.name().to_string(),
                Service { url: server.url(), contract: announce(&contract) },
            );
            servers.push(server);
        }
        fakes.payments.seed_payment_intent(Some("pi_1"), PI_AMOUNT, "usd")?;
        fakes.files.seed_bucket(BUCKET)?;
        fakes.files.seed_object(BUCKET, SEEDED_KEY, b"version 1")?;
        let account = fake_services::chain::address_of(vocabulary::protocol::CHAIN_PRIVATE_KEY)?;
        fakes.chain.seed_account(&account, CHAIN_ACCOUNT_BALANCE_WEI)?;
        let rig_fakes = fakes.clone();
        for (service, rule) in rules {
            let fake = fakes.get(service).ok_or_else(|| format!("no service {service}"))?;
            fake.contract().admits(&rule.fault).map_err(|e| format!("unfair rule {rule:?}: {e}"))?;
            fake.add_rule(rule.clone()).map_err(|e| format!("rule {rule:?}: {e}"))?;
        }
        let state = StateDir::new(tag);
        let config =
            Config { worker_id: "w1".into(), services, secrets: vocabulary::protocol::secrets(), limits };
        let executor = Executor::open(config, &state.0, Durability::Normal, World::real())
            .map_err(|e| format!("cannot open the executor: {e}"))?;
        Ok(Rig { fakes: rig_fakes, _servers: servers, executor, _state: state })
    }

    pub fn fake(&self, service: &str) -> Fake {
        self.fakes.get(service).expect("a known service")
    }

    /// Clears every fault rule on every fake.
    pub fn heal(&self) {
        for fake in self.fakes.all() {
            fake.clear_rules();
        }
    }

    pub fn status(&self) -> Result<Vec<Intent>, String> {
        self.executor.status(None).map_err(|e| e.to_string())
    }

    pub fn intent(&self, id: &str) -> Intent {
        self.executor
            .status(Some(&[id.to_string()]))
            .expect("the log answers")
            .pop()
            .unwrap_or_else(|| panic!("intent {id} is not in the log"))
    }

    pub async fn drain(&self) -> Result<(), String> {
        self.executor.drain(DRAIN_MS).await.map(|_| ()).map_err(|e| format!("drain: {e}"))
    }

    pub async fn pass(&self) -> Result<(), String> {
        self.executor.pass().await.map(|_| ()).map_err(|e| format!("pass: {e}"))
    }

    /// Passes (each followed by a drain) for about `ms`, `pause_ms` apart.
    pub async fn passes_for(&self, ms: u64, pause_ms: u64) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(ms);
        while tokio::time::Instant::now() < deadline {
            self.pass().await?;
            self.drain().await?;
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
        Ok(())
    }

    /// Reconciliation: up to `rounds` rounds of a pass and a drain, `pause_ms` apart, until
    /// no intent is unresolved. Returns every intent as it ends.
    pub async fn reconcile(&self, rounds: usize, pause_ms: u64) -> Result<Vec<Intent>, String> {
        for _ in 0..rounds {
            self.pass().await?;
            self.drain().await?;
            let all = self.status()?;
            if all.iter().all(|i| !i.state.is_unresolved()) {
                return Ok(all);
            }
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
        self.status()
    }

    /// The effects in `service`'s ledger that belong to `intent`.
    pub fn effects_of(&self, intent: &Intent) -> Vec<Effect> {
        let service = service_of(&intent.action);
        self.fake(service).ledger().into_iter().filter(|e| belongs_to(e, intent)).collect()
    }

    /// One line per intent, with its history, for failure messages.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for intent in self.status().unwrap_or_default() {
            out.push_str(&format!(
                "\n    {} {} attempts={} evidence={}",
                intent.id,
                intent.state,
                intent.attempts,
                serde_json::to_string(&intent.evidence).unwrap_or_default()
            ));
            if let Ok(history) = self.executor.log().history(&intent.id) {
                for h in history {
                    let from = h.from.map(|s| s.as_str()).unwrap_or("-");
                    out.push_str(&format!("\n      {from} -> {} ({})", h.to, h.note));
                }
            }
        }
        for fake in self.fakes.all() {
            for e in fake.ledger() {
                out.push_str(&format!(
                    "\n    ledger {}: {} {} {}",
                    fake.name(),
                    e.kind,
                    e.object_id,
                    e.params
                ));
            }
        }
        out
    }
}

/// The service an action is carried out by.
pub fn service_of(action: &str) -> &'static str {
    match action.split_once('.').map(|(service, _)| service) {
        Some("payments") => PAYMENTS,
        Some("files") => FILES,
        Some("chain") => CHAIN,
        Some("messages") => MESSAGES,
        _ => WORKSPACES,
    }
}

/// Whether a ledger effect is `intent`'s: refunds by the intent id in their metadata,
/// workspaces by external id, objects by bucket and key, transfers and messages by recipient
/// (each unique per intent). A message the provider delivered again by itself is nobody's.
pub fn belongs_to(effect: &Effect, intent: &Intent) -> bool {
    let params: Value = serde_json::from_str(&intent.params).unwrap_or(Value::Null);
    match effect.kind.as_str() {
        "refund.created" => {
            effect.params.pointer(&format!("/metadata/{INTENT_METADATA_KEY}")).and_then(Value::as_str)
                == Some(intent.id.as_str())
        }
        "workspace.created" => {
            effect.params.get("external_id").is_some_and(|e| Some(e) == params.get("external_id"))
        }
        "object.put" => {
            effect.params.get("bucket").is_some_and(|b| Some(b) == params.get("bucket"))
                && effect.params.get("key").is_some_and(|k| Some(k) == params.get("key"))
        }
        "tx.mined" => effect.params.get("to").is_some_and(|t| Some(t) == params.get("to")),
        "message.delivered" => {
            !effect.by_provider() && effect.params.get("to").is_some_and(|t| Some(t) == params.get("to"))
        }
        _ => false,
    }
}

/// The id the executor's evidence names an effect by: an object's ETag, otherwise the id the
/// service gave the effect (a refund, a workspace, a transaction hash).
pub fn evidence_id(effect: &Effect) -> &str {
    match effect.kind.as_str() {
        "object.put" => effect.params.get("etag").and_then(Value::as_str).unwrap_or_default(),
        _ => &effect.object_id,
    }
}

/// Whether an effect carries exactly the intent's authorised parameters.
pub fn same_params(effect: &Effect, intent: &Intent) -> bool {
    let params: Value = serde_json::from_str(&intent.params).unwrap_or(Value::Null);
    match effect.kind.as_str() {
        "refund.created" => {
            effect.params.get("payment_intent") == params.get("payment_intent")
                && effect.params.get("amount") == params.get("amount")
        }
        "workspace.created" => {
            effect.params.get("external_id") == params.get("external_id")
                && effect.params.get("name") == params.get("name")
        }
        "object.put" => effect.params.get("body") == params.get("body"),
        "tx.mined" => {
            effect.params.get("to") == params.get("to") && effect.params.get("value") == params.get("value")
        }
        "message.delivered" => {
            ["to", "subject", "body"].iter().all(|p| effect.params.get(p) == params.get(p))
        }
        _ => false,
    }
}

/// What the ledger says of `intent` against the state it ends in: exactly one effect with
/// the authorised parameters (and its id as evidence) when confirmed, none when failed, at
/// most one otherwise; never two.
pub fn judge(intent: &Intent, effects: &[Effect]) -> Result<(), String> {
    if effects.len() > 1 {
        let ids: Vec<&str> = effects.iter().map(|e| e.object_id.as_str()).collect();
        return Err(format!("{}: {} effects for one intent: {ids:?}", intent.id, effects.len()));
    }
    match intent.state {
        State::Confirmed => {
            let Some(effect) = effects.first() else {
                return Err(format!("{}: confirmed, but the ledger holds no effect", intent.id));
            };
            if !same_params(effect, intent) {
                return Err(format!(
                    "{}: confirmed, but the effect has other parameters: {} vs {}",
                    intent.id, effect.params, intent.params
                ));
            }
            if intent.evidence.external_id.as_deref() != Some(evidence_id(effect)) {
                return Err(format!(
                    "{}: confirmed with external id {:?}, but the effect is {}",
                    intent.id,
                    intent.evidence.external_id,
                    evidence_id(effect)
                ));
            }
        }
        State::Failed if !effects.is_empty() => {
            return Err(format!("{}: failed, but the ledger holds {}", intent.id, effects[0].object_id));
        }
        State::Escalated if intent.evidence.key.is_none() => {
            return Err(format!("{}: escalated without evidence", intent.id));
        }
        State::Escalated if intent.evidence.could_duplicate == Some(false) && !effects.is_empty() => {
            return Err(format!(
                "{}: escalated saying going on cannot write twice, but the ledger holds {}",
                intent.id, effects[0].object_id
            ));
        }
        _ => {}
    }
    Ok(())
}

pub fn refund(id: &str, amount: u64) -> Proposal {
    Proposal {
        id: id.into(),
        action: "payments.refund".into(),
        params: json!({"payment_intent": "pi_1", "amount": amount}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

/// A put into [`BUCKET`].
pub fn put(id: &str, key: &str, body: &str) -> Proposal {
    Proposal {
        id: id.into(),
        action: "files.put".into(),
        params: json!({"bucket": BUCKET, "key": key, "body": body}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

/// A transfer from the harness's chain account.
pub fn transfer(id: &str, to: &str, value_wei: u128) -> Proposal {
    Proposal {
        id: id.into(),
        action: "chain.transfer".into(),
        params: json!({"to": to, "value": value_wei.to_string()}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

/// A message to `to`.
pub fn message(id: &str, to: &str) -> Proposal {
    Proposal {
        id: id.into(),
        action: "messages.send".into(),
        params: json!({"to": to, "subject": "Your invoice", "body": "Invoice 42 is ready."}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

pub fn workspace(id: &str, external_id: &str) -> Proposal {
    Proposal {
        id: id.into(),
        action: "workspaces.create".into(),
        params: json!({"external_id": external_id, "name": "Acme"}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}
