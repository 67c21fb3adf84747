//! Steps that build on steps (`docs/protocol.md` §3.2), in the real `twice-executor` binary on
//! a real SQLite log against the fakes on loopback: a step waits for the intents it comes
//! after, takes parameter values from their recorded results, resolves them once (a crash or
//! a second worker reuses the recorded values), is cancelled or escalated without a send when
//! a predecessor failed or is escalated, and malformed steps are refused before anything is
//! recorded.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use executor::Durability;
use executor::log::{Change, IntentLog};
use fake_services::{Fakes, Server};
use serde_json::{Value, json};
use vocabulary::ContractPatch;
use vocabulary::Effect;
use vocabulary::FaultRule;
use vocabulary::JournalEntry;
use vocabulary::State;
use vocabulary::TokioClock;

use crate::process::{ExecutorProcess, REPLY_WAIT, fresh_dir};
use crate::world::{propose, resolve};

/// The services a workflow here uses.
const SERVICES: [&str; 3] = ["payments", "workspaces", "files"];
/// The bucket every flow creates.
pub const BUCKET: &str = "reports";
/// Short terms: a negative answer is final within about a second.
const SETTLE_MS_MAX: u64 = 300;
const REQUEST_TIMEOUT_MS: u64 = 500;
/// Bound on reconciliation after a crash.
const RESOLVE_WAIT: Duration = Duration::from_secs(30);

/// The fakes a workflow runs against, on loopback, with short settle bounds.
pub struct Flow {
    pub fakes: Fakes,
    servers: BTreeMap<&'static str, Server>,
}

impl Flow {
    pub async fn start(seed: u64) -> Flow {
        let fakes = Fakes::new(Arc::new(TokioClock::from_wall_clock()), seed);
        let mut servers = BTreeMap::new();
        for name in SERVICES {
            let fake = fakes.get(name).expect("a known service");
            fake.patch_contract(ContractPatch {
                settle_ms_max: Some(SETTLE_MS_MAX),
                ..ContractPatch::default()
            });
            let loopback = "127.0.0.1:0".parse().expect("an address");
            servers.insert(name, Server::start(fake, loopback).await.expect("the fake starts"));
        }
        fakes.files.seed_bucket(BUCKET).expect("a bucket");
        Flow { fakes, servers }
    }

    /// `init` for `worker_id` on `state_dir`, with short limits (`limits` patches them).
    pub fn init(&self, worker_id: &str, state_dir: &Path, limits: Value) -> Value {
        let services: serde_json::Map<String, Value> = self
            .servers
            .iter()
            .map(|(name, server)| {
                let fake = self.fakes.get(name).expect("a known service");
                let contract = serde_json::to_value(fake.contract()).expect("a contract");
                (name.to_string(), json!({"url": server.url(), "contract": contract}))
            })
            .collect();
        let mut all = json!({
            "request_timeout_ms": REQUEST_TIMEOUT_MS,
            "lease_ms": 5_000,
            "attempts_max": 5,
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
            "services": services,
            "limits": all,
        })
    }

    pub fn ledger(&self, service: &str) -> Vec<Effect> {
        self.fakes.get(service).expect("a known service").ledger()
    }

    pub fn journal(&self, service: &str) -> Vec<JournalEntry> {
        self.fakes.get(service).expect("a known service").journal()
    }

    /// The puts of `key` in the files ledger.
    pub fn puts_of(&self, key: &str) -> Vec<Effect> {
        self.ledger("files").into_iter().filter(|e| e.params["key"] == key).collect()
    }

    /// The one workspace created with `external_id`: its id.
    pub fn workspace_id(&self, external_id: &str) -> String {
        let created: Vec<Effect> = self
            .ledger("workspaces")
            .into_iter()
            .filter(|e| e.params["external_id"] == external_id)
            .collect();
        assert_eq!(created.len(), 1, "one workspace {external_id}: {created:#?}");
        created[0].object_id.clone()
    }

    /// Adds a fault rule (JSON, as scenario files write it) to `service`.
    pub fn add_rule(&self, service: &str, rule: Value) {
        let rule: FaultRule = serde_json::from_value(rule).expect("a valid rule");
        self.fakes.get(service).expect("a known service").add_rule(rule).expect("the rule is armed");
    }
}

/// A reference to result `field` of intent `from`, with an optional format.
pub fn reference(from: &str, field: &str, format: Option<&str>) -> Value {
    let mut r = json!({"from": from, "field": field});
    if let Some(f) = format {
        r["format"] = json!(f);
    }
    r
}

pub fn create(id: &str, external_id: &str, name: Value, after: &[&str]) -> Value {
    json!({"id": id, "action": "workspaces.create", "after": after,
           "params": {"external_id": external_id, "name": name}})
}

pub fn put(id: &str, key: &str, body: Value, after: &[&str]) -> Value {
    json!({"id": id, "action": "files.put", "after": after,
           "params": {"bucket": BUCKET, "key": key, "body": body}})
}

/// The executor a workflow test runs: the reference binary, the Python example (with one of
/// its bugs switched on, or none), or the TypeScript example (`TWICE_NODE_EXECUTOR`).
#[derive(Debug, Clone, Copy)]
pub enum Under<'a> {
    Reference,
    Python { bug: Option<&'a str> },
    Node,
}

impl Under<'_> {
    /// The executor on `dir`, answering `init_request`, and its `init_ok`. `kill_at` is the
    /// reference's `TWICE_EXECUTOR_KILL_AT`.
    pub async fn start(
        &self,
        label: &str,
        init_request: Value,
        dir: &Path,
        kill_at: Option<&str>,
    ) -> (ExecutorProcess, Value) {
        let dir_arg = dir.to_str().expect("a UTF-8 path");
        let env: Vec<(&str, &str)> = kill_at.map(|k| ("TWICE_EXECUTOR_KILL_AT", k)).into_iter().collect();
        let mut ex = match self {
            Under::Reference => ExecutorProcess::spawn(label, &["--state-dir", dir_arg], &env),
            Under::Python { bug } => {
                assert!(kill_at.is_none(), "the Python executor has no kill points");
                let python = std::env::var_os("TWICE_PYTHON")
                    .expect("TWICE_PYTHON is not set: run cargo xtask test, or set it to the venv's python");
                let script =
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/executors/python/executor.py");
                let script = script.to_str().expect("a UTF-8 path").to_string();
                let mut args = vec![script.as_str()];
                if let Some(bug) = bug {
                    args.extend(["--bug", bug]);
                }
                ExecutorProcess::spawn_program(label, Path::new(&python), &args, &[])
            }
            Under::Node => {
                assert!(kill_at.is_none(), "the TypeScript executor has no kill points");
                let script = crate::typescript_executor::node_executor_script();
                let script = script.to_str().expect("a UTF-8 path");
                ExecutorProcess::spawn_program(label, Path::new("node"), &[script], &[])
            }
        };
        match ex.request(init_request, REPLY_WAIT).await {
            Ok(r) if r["type"] == "init_ok" => (ex, r),
            Ok(r) => panic!("{label}: init refused: {r}"),
            Err(died) => panic!("{label}: died during init: {died:?}"),
        }
    }
}

impl Under<'_> {
    /// A state directory name of its own for `test` under this executor.
    pub fn dir(&self, test: &str) -> String {
        match self {
            Under::Reference => format!("reference_{test}"),
            Under::Python { bug: None } => format!("python_{test}"),
            Under::Python { bug: Some(bug) } => format!("python_{bug}_{test}"),
            Under::Node => format!("node_{test}"),
        }
    }
}

/// The reference binary.
async fn start(
    label: &str,
    init_request: Value,
    dir: &Path,
    kill_at: Option<&str>,
) -> (ExecutorProcess, Value) {
    Under::Reference.start(label, init_request, dir, kill_at).await
}

/// Every intent of `status`, by id.
pub async fn status(ex: &mut ExecutorProcess) -> BTreeMap<String, Value> {
    let reply = ex.ok(json!({"type": "status"})).await;
    reply["intents"]
        .as_array()
        .expect("a list of intents")
        .iter()
        .map(|i| (i["id"].as_str().expect("an id").to_string(), i.clone()))
        .collect()
}

pub async fn drain(ex: &mut ExecutorProcess) {
    ex.ok(json!({"type": "drain", "timeout_ms": 10_000})).await;
}

pub async fn a_put_takes_the_id_of_the_workspace_its_create_made(under: Under<'_>) {
    let flow = Flow::start(301).await;
    let dir = fresh_dir(&under.dir("workflow_put_after_create"));
    let (mut ex, init_ok) = under.start("w", flow.init("w", &dir, json!({})), &dir, None).await;
    let features = init_ok["features"].as_array().cloned().unwrap_or_default();
    assert!(features.contains(&json!("workflows")), "{init_ok}");

    ex.ok(propose(&create("create", "acme-1", json!("Acme"), &[]))).await;
    let body = reference("create", "id", Some("Welcome to {}"));
    let step = ex.ok(propose(&put("welcome", "welcome/acme.txt", body.clone(), &["create"]))).await;
    // Recorded as authorised, waiting for its predecessor.
    assert_eq!(step["intent"]["state"], "blocked", "{step}");
    assert_eq!(step["intent"]["after"], json!(["create"]), "{step}");
    assert_eq!(step["intent"]["params"]["body"], body, "{step}");
    assert!(step["intent"]["evidence"].get("resolved").is_none(), "{step}");

    // One drain runs both: the step is released by the pass after the one that confirmed its
    // predecessor.
    drain(&mut ex).await;
    let intents = status(&mut ex).await;
    assert_eq!(intents["create"]["state"], "confirmed", "{intents:#?}");
    assert_eq!(intents["welcome"]["state"], "confirmed", "{intents:#?}");
    let workspace = flow.workspace_id("acme-1");
    assert_eq!(intents["create"]["evidence"]["external_id"], workspace.as_str());

    let puts = flow.puts_of("welcome/acme.txt");
    assert_eq!(puts.len(), 1, "{puts:#?}");
    let want = format!("Welcome to {workspace}");
    assert_eq!(puts[0].params["body"], want.as_str(), "the body names the workspace the create made");
    let welcome = &intents["welcome"];
    assert_eq!(welcome["evidence"]["resolved"], json!({"body": want}), "{welcome}");
    assert_eq!(welcome["evidence"]["external_id"], puts[0].params["etag"], "{welcome}");
    // The view keeps the authorised parameters.
    assert_eq!(welcome["params"]["body"], body, "{welcome}");
    ex.ok(json!({"type": "shutdown"})).await;
}

/// A workspace, a document naming it, and an archive note naming the document's version (its
/// ETag): three steps, each reading the one before, in one drain; a step proposed once its
/// predecessors are confirmed is recorded, not blocked.
pub async fn a_chain_of_three_steps_each_reads_the_step_before(under: Under<'_>) {
    let flow = Flow::start(302).await;
    let dir = fresh_dir(&under.dir("workflow_chain_of_three"));
    let (mut ex, _) = under.start("w", flow.init("w", &dir, json!({})), &dir, None).await;
    ex.ok(propose(&create("create", "chain-1", json!("Chain"), &[]))).await;
    ex.ok(propose(&put(
        "doc",
        "chain/doc.txt",
        reference("create", "id", Some("Workspace {}")),
        &["create"],
    )))
    .await;
    // A workspace name could not hold an ETag's quotes (the service refuses such a name with
    // 422): the archive is a note in the bucket.
    let archive =
        put("archive", "chain/archive.txt", reference("doc", "etag", Some("Archive of {}")), &["doc"]);
    ex.ok(propose(&archive)).await;
    drain(&mut ex).await;
    let intents = status(&mut ex).await;
    for id in ["create", "doc", "archive"] {
        assert_eq!(intents[id]["state"], "confirmed", "{id}: {intents:#?}");
    }
    let workspace = flow.workspace_id("chain-1");
    let doc = flow.puts_of("chain/doc.txt");
    assert_eq!(doc.len(), 1, "{doc:#?}");
    assert_eq!(doc[0].params["body"], format!("Workspace {workspace}").as_str());
    let etag = doc[0].params["etag"].as_str().expect("an ETag");
    assert!(etag.starts_with('"') && etag.ends_with('"'), "the quoted ETag S3 answered: {etag}");
    let archived = flow.puts_of("chain/archive.txt");
    assert_eq!(archived.len(), 1, "{archived:#?}");
    assert_eq!(archived[0].params["body"], format!("Archive of {etag}").as_str());

    // Its predecessors are confirmed: a new step goes straight to recorded, and reads two.
    let receipt = json!({"id": "receipt", "action": "files.put", "after": ["archive", "doc"],
        "params": {"bucket": BUCKET, "key": "chain/receipt.txt", "body": reference("archive", "etag", None)}});
    let recorded = ex.ok(propose(&receipt)).await;
    assert_eq!(recorded["intent"]["state"], "recorded", "{recorded}");
    drain(&mut ex).await;
    let receipts = flow.puts_of("chain/receipt.txt");
    assert_eq!(receipts.len(), 1, "{receipts:#?}");
    assert_eq!(receipts[0].params["body"], archived[0].params["etag"]);
    ex.ok(json!({"type": "shutdown"})).await;
}

/// A refund the service refuses (402) fails; the workspace that comes after it is cancelled
/// without a request, whether proposed before the refusal (blocked, then failed) or after it
/// (failed at once).
pub async fn a_step_after_a_failed_intent_is_cancelled_and_never_sent(under: Under<'_>) {
    let flow = Flow::start(303).await;
    flow.fakes.payments.seed_payment_intent(Some("pi_wf"), 5_000, "usd").expect("seeding");
    flow.add_rule(
        "payments",
        json!({"method": "POST", "path": "/v1/refunds", "fault": {"kind": "reject", "status": 402}}),
    );
    let dir = fresh_dir(&under.dir("workflow_after_failed"));
    let (mut ex, _) = under.start("w", flow.init("w", &dir, json!({})), &dir, None).await;
    let refund = json!({"id": "refund", "action": "payments.refund",
                        "params": {"payment_intent": "pi_wf", "amount": 700}});
    ex.ok(propose(&refund)).await;
    let name = reference("refund", "id", Some("Refund {}"));
    ex.ok(propose(&create("notify", "after-refund", name.clone(), &["refund"]))).await;
    drain(&mut ex).await;
    let intents = status(&mut ex).await;
    assert_eq!(intents["refund"]["state"], "failed", "{intents:#?}");
    let notify = &intents["notify"];
    assert_eq!(notify["state"], "failed", "{notify}");
    assert_eq!(notify["evidence"]["reason"], "cancelled: the intent it comes after (refund) failed");
    assert_eq!(notify["attempts"], 0, "{notify}");
    assert!(notify["evidence"].get("resolved").is_none(), "{notify}");

    let late = ex.ok(propose(&create("late", "after-refund-2", name, &["refund"]))).await;
    assert_eq!(late["intent"]["state"], "failed", "{late}");
    assert_eq!(late["intent"]["evidence"]["reason"], "cancelled: the intent it comes after (refund) failed");
    drain(&mut ex).await;
    let writes: Vec<JournalEntry> =
        flow.journal("workspaces").into_iter().filter(|e| e.method == "POST").collect();
    assert!(writes.is_empty(), "no workspace request was sent: {writes:#?}");
    assert!(flow.ledger("workspaces").is_empty());
    ex.ok(json!({"type": "shutdown"})).await;
}

/// A create that finds its external id taken by a workspace with another name is escalated;
/// the put that comes after it is escalated too, saying whom it waits for, that continuing
/// cannot write twice, and with no request sent.
pub async fn a_step_after_an_escalated_intent_is_escalated_and_never_sent(under: Under<'_>) {
    let flow = Flow::start(304).await;
    let dir = fresh_dir(&under.dir("workflow_after_escalated"));
    let (mut ex, _) = under.start("w", flow.init("w", &dir, json!({})), &dir, None).await;
    ex.ok(propose(&create("other", "taken", json!("Someone else"), &[]))).await;
    drain(&mut ex).await;
    ex.ok(propose(&create("create", "taken", json!("Acme"), &[]))).await;
    ex.ok(propose(&put("welcome", "welcome/taken.txt", reference("create", "id", None), &["create"]))).await;
    let intents = resolve(&mut ex, RESOLVE_WAIT).await;
    let by_id = |id: &str| intents.iter().find(|i| i["id"] == id).cloned().expect("the intent");
    let create = by_id("create");
    assert_eq!(create["state"], "escalated", "{create}");
    let welcome = by_id("welcome");
    assert_eq!(welcome["state"], "escalated", "{welcome}");
    assert_eq!(welcome["evidence"]["reason"], "waits for create, which is escalated");
    assert_eq!(welcome["evidence"]["could_duplicate"], false, "{welcome}");
    assert_eq!(welcome["attempts"], 0, "{welcome}");
    let sent: Vec<JournalEntry> =
        flow.journal("files").into_iter().filter(|e| e.path.contains("welcome/taken.txt")).collect();
    assert!(sent.is_empty(), "nothing of the step reached the files service: {sent:#?}");
    ex.ok(json!({"type": "shutdown"})).await;
}

/// Kills the first worker the moment a step's resolved value is durable with its `submitted`
/// and before any byte of it left, then forges the predecessor's recorded result in the log
/// (what a re-resolution would now read), and lets `worker_id` (the same worker restarted, or
/// a second one taking the lease over) finish. The value sent must be the one recorded.
async fn the_recorded_value_outlives_a_crash(seed: u64, tag: &str, worker_id: &str) {
    let flow = Flow::start(seed).await;
    let dir = fresh_dir(tag);
    let limits = json!({"lease_ms": 1_500});
    let (mut first, _) =
        start("first", flow.init("w", &dir, limits.clone()), &dir, Some("after_resolve")).await;
    first.ok(propose(&create("create", "crash-1", json!("Crash"), &[]))).await;
    let body = reference("create", "id", Some("Welcome to {}"));
    first.ok(propose(&put("welcome", "welcome/crash.txt", body, &["create"]))).await;
    let died = match first.request(json!({"type": "drain", "timeout_ms": 10_000}), REPLY_WAIT).await {
        Err(died) => died,
        Ok(reply) => panic!("the drain should have died at after_resolve, got {reply}"),
    };
    assert!(died.by_sigkill(), "{}: {}", died.status, died.stderr);
    let workspace = flow.workspace_id("crash-1");
    let want = format!("Welcome to {workspace}");
    let puts: Vec<JournalEntry> = flow.journal("files").into_iter().filter(|e| e.method == "PUT").collect();
    assert!(puts.is_empty(), "killed before the first byte of the put: {puts:#?}");

    {
        let mut log = IntentLog::open(&dir.join("intents.sqlite"), Durability::Full).expect("the log opens");
        let step = log.get("welcome").expect("a read").expect("the step");
        assert_eq!(step.state, State::Submitted, "{step:?}");
        assert_eq!(step.evidence.resolved.get("body"), Some(&want), "recorded before the send: {step:?}");
        let create = log.get("create").expect("a read").expect("the create");
        let mut forged = create.clone();
        forged.evidence.external_id = Some("ws_forged".into());
        let change = Change {
            new: &forged,
            expect_version: create.version,
            from_state: create.state,
            note: Some("forged"),
        };
        assert_eq!(log.update(&[change]).expect("the forgery is written"), [true]);
    }

    let (mut second, _) = start("second", flow.init(worker_id, &dir, limits), &dir, None).await;
    let intents = resolve(&mut second, RESOLVE_WAIT).await;
    let welcome = intents.iter().find(|i| i["id"] == "welcome").cloned().expect("the step");
    assert_eq!(welcome["state"], "confirmed", "{welcome}");
    assert_eq!(welcome["evidence"]["resolved"], json!({"body": want}), "never resolved again: {welcome}");
    let puts = flow.puts_of("welcome/crash.txt");
    assert_eq!(puts.len(), 1, "{puts:#?}");
    assert_eq!(puts[0].params["body"], want.as_str(), "the recorded value, not the forged result");
    second.ok(json!({"type": "shutdown"})).await;

    let log = IntentLog::open(&dir.join("intents.sqlite"), Durability::Full).expect("the log opens");
    let history = log.history("welcome").expect("the history");
    let last = history.last().expect("a change");
    assert_eq!(last.to, State::Confirmed);
    let owner = last.owner.as_deref().unwrap_or_default();
    assert!(
        owner.starts_with(&format!("{worker_id}#")),
        "confirmed by {owner}, not {worker_id}: {history:#?}"
    );
}

/// A predecessor confirmed without the result a step reads (a damaged log: the executor
/// always records it) escalates the step, saying so, rather than sending a guess.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_predecessor_without_the_result_escalates_the_step_unsent() {
    let flow = Flow::start(311).await;
    let dir = fresh_dir("workflow_missing_result");
    let (mut ex, _) = start("first", flow.init("w", &dir, json!({})), &dir, None).await;
    ex.ok(propose(&create("create", "missing-1", json!("Missing"), &[]))).await;
    drain(&mut ex).await;
    ex.ok(json!({"type": "shutdown"})).await;
    {
        let mut log = IntentLog::open(&dir.join("intents.sqlite"), Durability::Full).expect("the log opens");
        let create = log.get("create").expect("a read").expect("the create");
        assert_eq!(create.state, State::Confirmed);
        let mut damaged = create.clone();
        damaged.evidence.external_id = None;
        let change = Change {
            new: &damaged,
            expect_version: create.version,
            from_state: create.state,
            note: Some("damaged"),
        };
        assert_eq!(log.update(&[change]).expect("written"), [true]);
    }
    let (mut ex, _) = start("second", flow.init("w", &dir, json!({})), &dir, None).await;
    let step = ex
        .ok(propose(&put("welcome", "welcome/missing.txt", reference("create", "id", None), &["create"])))
        .await;
    assert_eq!(step["intent"]["state"], "recorded", "{step}");
    drain(&mut ex).await;
    let intents = status(&mut ex).await;
    let welcome = &intents["welcome"];
    assert_eq!(welcome["state"], "escalated", "{welcome}");
    let reason = welcome["evidence"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("create is confirmed but recorded no \"id\""), "{reason}");
    assert_eq!(welcome["evidence"]["could_duplicate"], false, "{welcome}");
    assert_eq!(welcome["attempts"], 0, "{welcome}");
    assert!(flow.journal("files").is_empty(), "nothing of the step was sent: {:#?}", flow.journal("files"));
    ex.ok(json!({"type": "shutdown"})).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_the_resolved_value_is_recorded_sends_that_value() {
    the_recorded_value_outlives_a_crash(305, "workflow_crash_restart", "w").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_worker_taking_the_lease_over_sends_the_recorded_value() {
    the_recorded_value_outlives_a_crash(306, "workflow_crash_takeover", "w2").await;
}

pub async fn malformed_steps_are_refused_with_code_12_naming_the_problem(under: Under<'_>) {
    let flow = Flow::start(307).await;
    let dir = fresh_dir(&under.dir("workflow_malformed"));
    let (mut ex, _) = under.start("w", flow.init("w", &dir, json!({})), &dir, None).await;
    ex.ok(propose(&create("create", "malformed-1", json!("M"), &[]))).await;
    let id = reference("create", "id", None);
    let cases = [
        (
            put("s1", "a.txt", id.clone(), &["nobody"]),
            "comes after nobody, which this executor has never recorded",
        ),
        (
            put("s2", "a.txt", id.clone(), &[]),
            "reads from \"create\", which must also be listed in \"after\"",
        ),
        (
            json!({"id": "s3", "action": "files.put", "after": ["create"],
                   "params": {"bucket": BUCKET, "key": id.clone(), "body": "x"}}),
            "parameter \"key\" of files.put cannot take a reference",
        ),
        (
            create("s4", "malformed-2", reference("create", "etag", None), &["create"]),
            "has no result field \"etag\"; it has: id",
        ),
        (put("s5", "a.txt", reference("create", "id", Some("no placeholder")), &["create"]), "exactly once"),
        (
            put("s6", "a.txt", json!({"from": "create", "field": "id", "fromat": "{}"}), &["create"]),
            "unknown field \"fromat\"",
        ),
        (
            put("s7", "a.txt", reference("ghost", "id", None), &["create"]),
            "reads from \"ghost\", which is no earlier intent",
        ),
        (put("s8", "a.txt", id.clone(), &["create", "create"]), "lists create twice"),
        (
            json!({"id": "s9", "action": "files.put", "after": "create",
                   "params": {"bucket": BUCKET, "key": "a.txt", "body": id.clone()}}),
            "invalid type",
        ),
        (
            json!({"id": "s10", "action": "payments.refund", "after": ["create"],
                   "params": {"payment_intent": "pi_x", "amount": id.clone()}}),
            "parameter \"amount\" of payments.refund cannot take a reference",
        ),
    ];
    for (intent, says) in &cases {
        let reply = ex.call(propose(intent)).await;
        assert_eq!(reply["type"], "error", "{intent}: {reply}");
        assert_eq!(reply["code"], 12, "{intent}: {reply}");
        let text = reply["text"].as_str().unwrap_or_default();
        assert!(text.contains(says), "{intent}: {text:?} should say {says:?}");
    }
    let intents = status(&mut ex).await;
    assert_eq!(intents.keys().collect::<Vec<_>>(), ["create"], "nothing refused was recorded");
    ex.ok(json!({"type": "shutdown"})).await;
}

/// `propose` is idempotent by id over everything authorised, `after` and the references
/// included: the same step again is the same intent; other `after` or another reference is
/// another payload (21).
pub async fn a_step_proposed_again_with_other_after_is_another_payload(under: Under<'_>) {
    let flow = Flow::start(308).await;
    let dir = fresh_dir(&under.dir("workflow_propose_again"));
    let (mut ex, _) = under.start("w", flow.init("w", &dir, json!({})), &dir, None).await;
    ex.ok(propose(&create("create", "again-1", json!("A"), &[]))).await;
    ex.ok(propose(&create("other", "again-2", json!("B"), &[]))).await;
    let step = put("step", "again.txt", reference("create", "id", Some("ws {}")), &["create"]);
    let first = ex.ok(propose(&step)).await;
    let again = ex.ok(propose(&step)).await;
    assert_eq!(again["intent"]["evidence"]["key"], first["intent"]["evidence"]["key"], "the same intent");
    let others = [
        put("step", "again.txt", reference("create", "id", Some("ws {}")), &["create", "other"]),
        put("step", "again.txt", reference("create", "id", Some("workspace {}")), &["create"]),
        put("step", "again.txt", json!("ws plain"), &["create"]),
    ];
    for other in &others {
        let reply = ex.call(propose(other)).await;
        assert_eq!(reply["code"], 21, "{other}: {reply}");
    }
    let intents = status(&mut ex).await;
    assert_eq!(intents["step"]["after"], json!(["create"]), "unchanged: {:?}", intents["step"]);
    ex.ok(json!({"type": "shutdown"})).await;
}

/// What [`a_resend_after_the_predecessor_changed`] saw: the step's body as resolved before its
/// first send, as it landed, and as a resolution after the change would make it.
#[derive(Debug)]
pub struct Resend {
    pub recorded: String,
    pub sent: String,
    pub changed_to: String,
}

/// A put `a`, and a put `b` whose body is `a`'s ETag: `b`'s first send is reset before the fake
/// reads it (no answer, nothing landed), then `a` is overwritten by someone else, and `b` is
/// sent again. A correct executor sends the value it recorded before the first send.
pub async fn a_resend_after_the_predecessor_changed(under: Under<'_>) -> Resend {
    let flow = Flow::start(309).await;
    flow.add_rule(
        "files",
        json!({"method": "PUT", "path": format!("/{BUCKET}/resend/b.txt"), "nth": 1, "fault": {"kind": "refuse"}}),
    );
    let dir = fresh_dir(&under.dir("workflow_resend"));
    let (mut ex, _) = under.start("w", flow.init("w", &dir, json!({})), &dir, None).await;
    ex.ok(propose(&put("a", "resend/a.txt", json!("version 1"), &[]))).await;
    ex.ok(propose(&put("b", "resend/b.txt", reference("a", "etag", Some("after {}")), &["a"]))).await;
    drain(&mut ex).await;
    let intents = status(&mut ex).await;
    assert_eq!(intents["a"]["state"], "confirmed", "{intents:#?}");
    assert_ne!(intents["b"]["state"], "confirmed", "the first send of b was reset: {intents:#?}");
    assert!(flow.puts_of("resend/b.txt").is_empty(), "nothing of b landed yet");
    let first = flow.puts_of("resend/a.txt");
    assert_eq!(first.len(), 1, "{first:#?}");
    let recorded = format!("after {}", first[0].params["etag"].as_str().expect("an ETag"));
    assert_eq!(intents["b"]["evidence"]["resolved"]["body"], recorded.as_str(), "{:?}", intents["b"]);

    let changed = flow.fakes.files.seed_object(BUCKET, "resend/a.txt", b"version 2").expect("overwritten");
    let intents = resolve(&mut ex, RESOLVE_WAIT).await;
    let b = intents.iter().find(|i| i["id"] == "b").expect("b");
    assert_eq!(b["state"], "confirmed", "{b}");
    let landed = flow.puts_of("resend/b.txt");
    assert_eq!(landed.len(), 1, "{landed:#?}");
    ex.ok(json!({"type": "shutdown"})).await;
    Resend {
        recorded,
        sent: landed[0].params["body"].as_str().expect("a body").to_string(),
        changed_to: format!("after {changed}"),
    }
}

/// What [`a_restart_before_the_last_step`] saw.
#[derive(Debug)]
pub struct Redo {
    /// Effects in the ledger of the workflow's first step, confirmed before the restart.
    pub first_step_effects: usize,
    /// The last step's effects.
    pub last_step_effects: usize,
}

/// A put `a`, confirmed; a put `b` after it, proposed; the worker killed before it drains `b`
/// and started again: `a` is done, and a correct executor never sends it again.
pub async fn a_restart_before_the_last_step(under: Under<'_>) -> Redo {
    let flow = Flow::start(310).await;
    let dir = fresh_dir(&under.dir("workflow_redo"));
    let (mut ex, _) = under.start("first", flow.init("w", &dir, json!({})), &dir, None).await;
    ex.ok(propose(&put("a", "redo/a.txt", json!("version 1"), &[]))).await;
    drain(&mut ex).await;
    ex.ok(propose(&put("b", "redo/b.txt", reference("a", "etag", None), &["a"]))).await;
    ex.kill().await;
    assert_eq!(flow.puts_of("redo/a.txt").len(), 1);
    let (mut ex, _) = under.start("restarted", flow.init("w", &dir, json!({})), &dir, None).await;
    let intents = resolve(&mut ex, RESOLVE_WAIT).await;
    for i in &intents {
        assert_eq!(i["state"], "confirmed", "{i}");
    }
    ex.ok(json!({"type": "shutdown"})).await;
    let a = flow.puts_of("redo/a.txt");
    let b = flow.puts_of("redo/b.txt");
    if let Some(last) = b.last() {
        let etag = a.last().map(|e| e.params["etag"].clone()).unwrap_or_default();
        assert_eq!(last.params["body"], etag, "b took the ETag of a's newest put");
    }
    Redo { first_step_effects: a.len(), last_step_effects: b.len() }
}

/// The tests above that any executor with workflows must pass, on the reference binary (the
/// Python example runs them in `python_executor.rs`).
mod reference {
    use super::Under;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_put_takes_the_id_of_the_workspace_its_create_made() {
        super::a_put_takes_the_id_of_the_workspace_its_create_made(Under::Reference).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_chain_of_three_steps_each_reads_the_step_before() {
        super::a_chain_of_three_steps_each_reads_the_step_before(Under::Reference).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_after_a_failed_intent_is_cancelled_and_never_sent() {
        super::a_step_after_a_failed_intent_is_cancelled_and_never_sent(Under::Reference).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_after_an_escalated_intent_is_escalated_and_never_sent() {
        super::a_step_after_an_escalated_intent_is_escalated_and_never_sent(Under::Reference).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malformed_steps_are_refused_with_code_12_naming_the_problem() {
        super::malformed_steps_are_refused_with_code_12_naming_the_problem(Under::Reference).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_step_proposed_again_with_other_after_is_another_payload() {
        super::a_step_proposed_again_with_other_after_is_another_payload(Under::Reference).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_resend_after_the_predecessor_changed_sends_the_recorded_value() {
        let report = super::a_resend_after_the_predecessor_changed(Under::Reference).await;
        assert_eq!(report.sent, report.recorded, "{report:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_restart_before_the_last_step_leaves_the_completed_steps_alone() {
        let report = super::a_restart_before_the_last_step(Under::Reference).await;
        assert_eq!((report.first_step_effects, report.last_step_effects), (1, 1), "{report:?}");
    }
}
