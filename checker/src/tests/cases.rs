//! The checker's cases as data: `check/cases/*.toml`, one file per group of invariants,
//! read into [`Case`]s, and the helpers that build scenarios and observations in a line.
//!
//! A case is a `[[case]]` table:
//!
//! - `name`: what it shows (other tests find cases by it).
//! - `intents`: one row per intent, in scenario order, each a table with one of
//!   `refund = [id, payment_intent, amount]`, `create = [id, external_id, name]`,
//!   `put = [id, key, body]` (bucket `reports`), `transfer = [id, to, value]`,
//!   `message = [id, to, subject, body]` or `mail = id` (an action no row of the action table
//!   has), and optionally `replaces = "id"`, `after = [ids]`,
//!   `reads = { param = { from, field, format } }` (parameters read from an earlier result) and
//!   `on_event = { type, payment_intent, forged }` (the webhook that triggers it).
//! - `expect` (optional): `[id, state]` pairs, the scenario's `expect` table (`state` a name,
//!   or an array of the names that are each honest).
//! - `services` (optional): contract changes per service, e.g.
//!   `services.workspaces = { fencing = false }`.
//! - `acknowledged`: the ids the executor acknowledged as recorded.
//! - `claims`: the final status, `[id, state]` (with the evidence of an honest executor,
//!   `{"key": "key-ID"}`) or `{ id, state, evidence = {...} }`.
//! - `effects`: ledger lines, each a table with one of `refunded = [seq, at_ms, object,
//!   payment_intent, amount]`, `created = [seq, at_ms, object, external_id, name]`,
//!   `stored = [seq, key, body]` (at `seq * 100` ms), `mined = [seq, to, value, nonce]` or
//!   `delivered = [seq, object, to, subject, body]` (at `seq * 100` ms), and optionally `token`
//!   (a fencing token), `replaced` and `if_match` (quoted ETags, for `stored`), `key` (the
//!   idempotency key), `by_provider` (for `delivered`: the provider's own second delivery) and
//!   `tag` (the intent id the caller tagged the write with, where its service keeps tags); or
//!   `deleted = [seq, key]`, an object deleted (a kind no action makes).
//! - `timeline` (optional): state moments `[at_ms, id, state]` on lane `w1`, after a start
//!   moment at 0 ms.
//! - `sent` (optional): per service, journal entries `[request_id, origin, arrived_ms]`, or
//!   `{ id, origin, at_ms, key }` with the idempotency key the request carried.
//! - `refused` (optional): per service, journal entries of writes refused with a status that
//!   needs a decision, `[request_id, status, arrived_ms, params]` (`params`: what the request
//!   asked for, as a fake records it), or `{ id, status, at_ms, params }` with any of
//!   `answered_ms` (when the answer left, else on arrival), `outcome` (else `answered`) and
//!   `key` (its idempotency key). With refusals, each journal is in arrival order.
//! - `stops` (optional): `[at_ms, worker, for_ms]`, a worker paused for `for_ms` from `at_ms`
//!   (a `pause` moment on the worker's lane).
//! - `unsupported` (optional): actions the executor did not announce; `unsupported_steps`
//!   (optional): workflow steps not proposed to an executor without `workflows`.
//! - `reconcile_rounds` (optional, default 1).
//! - `broken`: exactly the verdicts that must not hold, in verdict order.
//! - `says`: `[verdict, text]` pairs: one of the verdict's evidence lines contains the text.

use std::collections::BTreeMap;

use scenarios::{IntentSpec, Scenario};
use serde::Deserialize;
use serde_json::{Value, json};
use vocabulary::{ContractPatch, Effect, JournalEntry};

use crate::{STATE_MOMENT, state_detail};
use results::{Claim, Moment, Observed};

/// One checker case.
pub(super) struct Case {
    pub(super) name: String,
    pub(super) scenario: Scenario,
    pub(super) observed: Observed,
    /// Exactly the verdicts that must not hold.
    pub(super) broken: Vec<String>,
    /// (verdict, text one of its evidence lines must contain).
    pub(super) says: Vec<(String, String)>,
}

/// The case files, by name.
const FILES: [(&str, &str); 8] = [
    ("attribution.toml", include_str!("../cases/attribution.toml")),
    ("claims.toml", include_str!("../cases/claims.toml")),
    ("duplicates.toml", include_str!("../cases/duplicates.toml")),
    ("lineage.toml", include_str!("../cases/lineage.toml")),
    ("refusals.toml", include_str!("../cases/refusals.toml")),
    ("stale_writes.toml", include_str!("../cases/stale_writes.toml")),
    ("status.toml", include_str!("../cases/status.toml")),
    ("workflow.toml", include_str!("../cases/workflow.toml")),
];

/// Every case of every file.
pub(super) fn cases() -> Vec<Case> {
    FILES
        .iter()
        .flat_map(|(file, text)| {
            let parsed: CaseFile = toml::from_str(text).unwrap_or_else(|e| panic!("check/cases/{file}: {e}"));
            parsed.case.into_iter().map(move |row| row.build(file))
        })
        .collect()
}

/// The case called `name`.
pub(super) fn case(name: &str) -> Case {
    cases().into_iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no case {name}"))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    case: Vec<CaseRow>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseRow {
    name: String,
    intents: Vec<IntentRow>,
    #[serde(default)]
    expect: Vec<(String, scenarios::Expected)>,
    #[serde(default)]
    services: BTreeMap<String, ContractPatch>,
    acknowledged: Vec<String>,
    claims: Vec<ClaimRow>,
    effects: Vec<EffectRow>,
    timeline: Option<Vec<(u64, String, String)>>,
    #[serde(default)]
    sent: BTreeMap<String, Vec<SentRow>>,
    #[serde(default)]
    refused: BTreeMap<String, Vec<RefusedRow>>,
    #[serde(default)]
    stops: Vec<(u64, String, u64)>,
    #[serde(default)]
    unsupported: Vec<String>,
    #[serde(default)]
    unsupported_steps: Vec<String>,
    reconcile_rounds: Option<u32>,
    broken: Vec<String>,
    says: Vec<(String, String)>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct IntentRow {
    refund: Option<(String, String, u64)>,
    create: Option<(String, String, String)>,
    put: Option<(String, String, String)>,
    transfer: Option<(String, String, String)>,
    message: Option<(String, String, String, String)>,
    mail: Option<String>,
    replaces: Option<String>,
    /// The intents it comes after.
    #[serde(default)]
    after: Vec<String>,
    /// Parameters that read an earlier intent's result: name to `{from, field, format}`.
    #[serde(default)]
    reads: BTreeMap<String, Value>,
    /// The webhook that triggers it: `{ type, payment_intent, forged }`.
    on_event: Option<scenarios::Trigger>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum SentRow {
    Plain(String, String, u64),
    With { id: String, origin: String, at_ms: u64, key: String },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RefusedRow {
    Plain(String, u16, u64, Value),
    With {
        id: String,
        status: u16,
        at_ms: u64,
        params: Value,
        answered_ms: Option<u64>,
        outcome: Option<String>,
        key: Option<String>,
    },
}

#[derive(Deserialize)]
#[serde(untagged)]
enum ClaimRow {
    Honest(String, String),
    With { id: String, state: String, evidence: Value },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EffectRow {
    refunded: Option<(u64, u64, String, String, u64)>,
    created: Option<(u64, u64, String, String, String)>,
    stored: Option<(u64, String, String)>,
    mined: Option<(u64, String, String, u64)>,
    delivered: Option<(u64, String, String, String, String)>,
    deleted: Option<(u64, String)>,
    #[serde(default)]
    by_provider: bool,
    tag: Option<String>,
    token: Option<u64>,
    replaced: Option<String>,
    if_match: Option<String>,
    key: Option<String>,
}

impl CaseRow {
    fn build(self, file: &str) -> Case {
        let name = self.name;
        let whose = |what: &str| format!("check/cases/{file}: case {name:?}: {what}");
        let intents = self
            .intents
            .into_iter()
            .map(|row| {
                let spec = match row {
                    IntentRow { refund: Some((id, pi, amount)), .. } => refund(&id, &pi, amount),
                    IntentRow { create: Some((id, external_id, n)), .. } => create(&id, &external_id, &n),
                    IntentRow { put: Some((id, key, body)), .. } => put(&id, &key, &body),
                    IntentRow { transfer: Some((id, to, value)), .. } => transfer(&id, &to, &value),
                    IntentRow { message: Some((id, to, subject, body)), .. } => {
                        message(&id, &to, &subject, &body)
                    }
                    IntentRow { mail: Some(ref id), .. } => mail(id),
                    _ => {
                        panic!("{}", whose("an intent needs refund, create, put, transfer, message or mail"))
                    }
                };
                let mut spec = match row.replaces {
                    Some(predecessor) => replacing(spec, &predecessor),
                    None => spec,
                };
                spec.after = row.after;
                spec.on_event = row.on_event;
                for (param, reference) in row.reads {
                    spec.params[param.as_str()] = reference;
                }
                spec
            })
            .collect();
        let mut scenario = scenario(intents);
        scenario.expect = self.expect.into_iter().collect();
        scenario.services = self.services;

        let acknowledged: Vec<&str> = self.acknowledged.iter().map(String::as_str).collect();
        let claims = self
            .claims
            .into_iter()
            .map(|row| match row {
                ClaimRow::Honest(id, state) => claim(&id, &state),
                ClaimRow::With { id, state, evidence } => claim_with(&id, &state, evidence),
            })
            .collect();
        let effects = self
            .effects
            .into_iter()
            .map(|row| {
                let entry = match &row {
                    EffectRow { refunded: Some((seq, at_ms, object, pi, amount)), .. } => {
                        refunded(*seq, *at_ms, object, pi, *amount)
                    }
                    EffectRow { created: Some((seq, at_ms, object, external_id, n)), .. } => {
                        created(*seq, *at_ms, object, external_id, n, row.token)
                    }
                    EffectRow { stored: Some((seq, key, body)), .. } => {
                        stored(*seq, key, body, row.replaced.as_deref(), row.if_match.as_deref())
                    }
                    EffectRow { mined: Some((seq, to, value, nonce)), .. } => mined(*seq, to, value, *nonce),
                    EffectRow { delivered: Some((seq, object, to, subject, body)), .. } => {
                        delivered(*seq, object, to, subject, body, row.by_provider)
                    }
                    EffectRow { deleted: Some((seq, key)), .. } => deleted(*seq, key),
                    _ => panic!(
                        "{}",
                        whose("an effect needs refunded, created, stored, mined, delivered or deleted")
                    ),
                };
                let entry = match &row.tag {
                    Some(tag) => tagged(entry, tag),
                    None => entry,
                };
                match &row.key {
                    Some(key) => keyed(entry, key),
                    None => entry,
                }
            })
            .collect();
        let mut observed = observed(&acknowledged, claims, effects);
        if let Some(timeline) = self.timeline {
            observed = timed(
                observed,
                timeline.iter().map(|(at_ms, id, state)| moment(*at_ms, id, state)).collect(),
            );
        }
        for (service, rows) in &self.sent {
            let requests: Vec<(&str, &str, u64)> = rows
                .iter()
                .map(|row| match row {
                    SentRow::Plain(id, origin, at_ms) | SentRow::With { id, origin, at_ms, .. } => {
                        (id.as_str(), origin.as_str(), *at_ms)
                    }
                })
                .collect();
            observed = sent(observed, service, &requests);
            for row in rows {
                if let SentRow::With { id, key, .. } = row {
                    journal_entry(&mut observed, service, id).idempotency_key = Some(key.clone());
                }
            }
        }
        for (service, rows) in &self.refused {
            let requests: Vec<(String, u16, u64, Value)> = rows
                .iter()
                .map(|row| match row {
                    RefusedRow::Plain(id, status, at_ms, params)
                    | RefusedRow::With { id, status, at_ms, params, .. } => {
                        (id.clone(), *status, *at_ms, params.clone())
                    }
                })
                .collect();
            observed = refused(observed, service, &requests);
            for row in rows {
                if let RefusedRow::With { id, answered_ms, outcome, key, .. } = row {
                    let entry = journal_entry(&mut observed, service, id);
                    if let Some(answered_ms) = answered_ms {
                        entry.ended_ms = Some(*answered_ms);
                    }
                    if let Some(outcome) = outcome {
                        entry.outcome = outcome.clone();
                    }
                    entry.idempotency_key = key.clone();
                }
            }
        }
        for (at_ms, worker, for_ms) in &self.stops {
            observed.timeline.push(Moment {
                at_ms: *at_ms,
                lane: worker.clone(),
                kind: "pause".into(),
                detail: format!("for {for_ms} ms"),
            });
        }
        observed.timeline.sort_by_key(|m| m.at_ms);
        observed.unsupported = self.unsupported;
        observed.unsupported_steps = self.unsupported_steps;
        if let Some(rounds) = self.reconcile_rounds {
            observed.reconcile_rounds = rounds;
        }
        Case { name, scenario, observed, broken: self.broken, says: self.says }
    }
}

pub(super) fn refund(id: &str, payment_intent: &str, amount: u64) -> IntentSpec {
    IntentSpec {
        id: id.into(),
        action: "payments.refund".into(),
        params: json!({"payment_intent": payment_intent, "amount": amount}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

pub(super) fn create(id: &str, external_id: &str, name: &str) -> IntentSpec {
    IntentSpec {
        id: id.into(),
        action: "workspaces.create".into(),
        params: json!({"external_id": external_id, "name": name}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

pub(super) fn put(id: &str, key: &str, body: &str) -> IntentSpec {
    IntentSpec {
        id: id.into(),
        action: "files.put".into(),
        params: json!({"bucket": "reports", "key": key, "body": body}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

pub(super) fn transfer(id: &str, to: &str, value: &str) -> IntentSpec {
    IntentSpec {
        id: id.into(),
        action: "chain.transfer".into(),
        params: json!({"to": to, "value": value}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

pub(super) fn message(id: &str, to: &str, subject: &str, body: &str) -> IntentSpec {
    IntentSpec {
        id: id.into(),
        action: "messages.send".into(),
        params: json!({"to": to, "subject": subject, "body": body}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

/// An action no rule attributes.
pub(super) fn mail(id: &str) -> IntentSpec {
    IntentSpec {
        id: id.into(),
        action: "mail.send".into(),
        params: json!({"to": "ops@example.com", "text": "x"}),
        replaces: None,
        after: Vec::new(),
        on_event: None,
    }
}

pub(super) fn replacing(spec: IntentSpec, predecessor: &str) -> IntentSpec {
    IntentSpec { replaces: Some(predecessor.into()), ..spec }
}

/// A scenario with only these intents; built from JSON so that fields added to the model
/// later (all defaulted) do not break these tables.
pub(super) fn scenario(intents: Vec<IntentSpec>) -> Scenario {
    serde_json::from_value(json!({"name": "case", "intents": intents})).unwrap()
}

pub(super) type Entry = (&'static str, Effect);

pub(super) fn effect(
    seq: u64,
    at_ms: u64,
    kind: &str,
    object: &str,
    params: Value,
    token: Option<u64>,
) -> Effect {
    Effect {
        seq,
        at_ms,
        kind: kind.into(),
        object_id: object.into(),
        params,
        idempotency_key: None,
        fencing_token: token,
        request_id: format!("req_{seq}"),
    }
}

pub(super) fn refunded(seq: u64, at_ms: u64, object: &str, payment_intent: &str, amount: u64) -> Entry {
    let params = json!({
        "payment_intent": payment_intent,
        "charge": format!("ch_{payment_intent}"),
        "amount": amount,
        "currency": "usd",
        "reason": null,
        "metadata": {},
    });
    ("payments", effect(seq, at_ms, "refund.created", object, params, None))
}

pub(super) fn keyed(entry: Entry, key: &str) -> Entry {
    let (service, mut effect) = entry;
    effect.idempotency_key = Some(key.into());
    (service, effect)
}

pub(super) fn created(
    seq: u64,
    at_ms: u64,
    object: &str,
    external_id: &str,
    name: &str,
    token: Option<u64>,
) -> Entry {
    let params = json!({"external_id": external_id, "name": name});
    ("workspaces", effect(seq, at_ms, "workspace.created", object, params, token))
}

/// An object stored by a PUT; `replaced` and `if_match` are quoted ETags.
pub(super) fn stored(
    seq: u64,
    key: &str,
    body: &str,
    replaced: Option<&str>,
    if_match: Option<&str>,
) -> Entry {
    let params = json!({
        "bucket": "reports",
        "key": key,
        "body": body,
        "etag": format!("\"etag-{seq}\""),
        "size": body.len(),
        "if_match": if_match,
        "if_none_match": replaced.is_none(),
        "replaced": replaced,
    });
    ("files", effect(seq, seq * 100, "object.put", &format!("reports/{key}"), params, None))
}

/// A transfer mined in block `seq`.
pub(super) fn mined(seq: u64, to: &str, value: &str, nonce: u64) -> Entry {
    let hash = format!("0x{seq:064x}");
    let params = json!({
        "from": "0x00000000000000000000000000000000000000a0",
        "to": to,
        "value": value,
        "nonce": nonce,
        "hash": hash,
        "block": seq,
    });
    ("chain", effect(seq, seq * 100, "tx.mined", &hash, params, None))
}

/// A message delivered into `to`'s inbox; `by_provider`: the provider's own second delivery.
pub(super) fn delivered(
    seq: u64,
    object: &str,
    to: &str,
    subject: &str,
    body: &str,
    by_provider: bool,
) -> Entry {
    let mut params = json!({"to": to, "from": "executor@twice.invalid", "subject": subject, "body": body});
    if by_provider {
        params[vocabulary::PROVIDER_REDELIVERY] = json!(true);
    }
    ("messages", effect(seq, seq * 100, "message.delivered", object, params, None))
}

/// An object deleted: a kind of effect no action makes.
pub(super) fn deleted(seq: u64, key: &str) -> Entry {
    let params =
        json!({"bucket": "reports", "key": key, "replaced": format!("\"etag-{seq}\""), "if_match": null});
    ("files", effect(seq, seq * 100, "object.deleted", &format!("reports/{key}"), params, None))
}

/// The write tagged with intent `tag`, where its service keeps a caller's tags: a refund's or
/// a workspace's metadata, an object's user metadata, a message's header.
pub(super) fn tagged(entry: Entry, tag: &str) -> Entry {
    let (service, mut effect) = entry;
    match service {
        "payments" | "workspaces" => effect.params["metadata"] = json!({"twice_intent": tag}),
        "files" => effect.params["metadata"] = json!({"twice-intent": tag}),
        "messages" => effect.params["headers"] = json!({"X-Twice-Intent": tag}),
        other => panic!("{other} keeps no tags"),
    }
    (service, effect)
}

/// A claim with the evidence an honest executor sends.
pub(super) fn claim(id: &str, state: &str) -> Claim {
    Claim { id: id.into(), state: state.into(), attempts: 1, evidence: json!({"key": format!("key-{id}")}) }
}

pub(super) fn claim_with(id: &str, state: &str, evidence: Value) -> Claim {
    Claim { id: id.into(), state: state.into(), attempts: 1, evidence }
}

pub(super) fn moment(at_ms: u64, id: &str, state: &str) -> Moment {
    Moment { at_ms, lane: "w1".into(), kind: STATE_MOMENT.into(), detail: state_detail(id, state) }
}

pub(super) fn observed(acknowledged: &[&str], claims: Vec<Claim>, effects: Vec<Entry>) -> Observed {
    let mut ledgers: BTreeMap<String, Vec<Effect>> = BTreeMap::new();
    for (service, effect) in effects {
        ledgers.entry(service.to_string()).or_default().push(effect);
    }
    Observed {
        acknowledged: acknowledged.iter().map(|id| id.to_string()).collect(),
        claims,
        ledgers,
        reconcile_rounds: 1,
        ..Observed::default()
    }
}

/// The timeline of a run that started at 0 ms, as every run's does with its first worker.
pub(super) fn timed(mut observed: Observed, timeline: Vec<Moment>) -> Observed {
    let start = Moment { at_ms: 0, lane: "w1".into(), kind: "start".into(), detail: "incarnation 1".into() };
    observed.timeline = std::iter::once(start).chain(timeline).collect();
    observed
}

/// The journal entry of request `id` at `service`.
fn journal_entry<'o>(observed: &'o mut Observed, service: &str, id: &str) -> &'o mut JournalEntry {
    let journal = observed.journals.get_mut(service).unwrap_or_else(|| panic!("no journal of {service}"));
    journal.iter_mut().find(|e| e.request_id == id).unwrap_or_else(|| panic!("no request {id} at {service}"))
}

/// Adds refused writes to `service`'s journal: `(request_id, status, arrived_ms, params)`,
/// from worker `w1#1`, then puts the journal in arrival order (as a fake numbers it).
pub(super) fn refused(
    mut observed: Observed,
    service: &str,
    requests: &[(String, u16, u64, Value)],
) -> Observed {
    let journal = observed.journals.entry(service.to_string()).or_default();
    for (request_id, status, at_ms, params) in requests {
        journal.push(JournalEntry {
            seq: 0,
            at_ms: *at_ms,
            method: "POST".into(),
            path: "/".into(),
            idempotency_key: None,
            request_id: request_id.clone(),
            origin: Some("w1#1".into()),
            faults: vec![],
            outcome: "answered".into(),
            status: Some(*status),
            replayed: false,
            ended_ms: Some(*at_ms),
            params: Some(params.clone()),
        });
    }
    journal.sort_by_key(|e| e.at_ms);
    for (i, entry) in journal.iter_mut().enumerate() {
        entry.seq = i as u64 + 1;
    }
    observed
}

/// Adds journal entries to `service`: `(request_id, origin, arrived_ms)`, as a transport
/// that labels its requests records them.
pub(super) fn sent(mut observed: Observed, service: &str, requests: &[(&str, &str, u64)]) -> Observed {
    let journal = observed.journals.entry(service.to_string()).or_default();
    for (request_id, origin, at_ms) in requests {
        journal.push(JournalEntry {
            seq: journal.len() as u64 + 1,
            at_ms: *at_ms,
            method: "POST".into(),
            path: "/".into(),
            idempotency_key: None,
            request_id: request_id.to_string(),
            origin: Some(origin.to_string()),
            faults: vec![],
            outcome: "answered".into(),
            status: Some(200),
            replayed: false,
            ended_ms: Some(*at_ms),
            params: None,
        });
    }
    observed
}
