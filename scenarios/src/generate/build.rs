//! Building a case: the draws of [`super::draw`] turned into a [`Scenario`]. Intents and
//! their parameters come from the action table, contracts from the terms, and each fault
//! is picked among the kinds its service's contract admits (so every scenario is fair by
//! construction) and aimed at a write, a read or one intent; events land on the services
//! the intents use.

use std::collections::BTreeMap;

use proptest::prelude::*;
use serde_json::{Value, json};
use vocabulary::{
    Acks, ActionSpec, Contract, ContractPatch, FaultRule, FaultSpec, Guard, KeyPolicy, ParamKind, ParamRef,
    Reads,
};

use super::draw::{
    COMMIT_AFTER_TIMEOUT, DUPLICATE_WEBHOOK, EventDraw, FORGET_KEYS, FaultDraw, IGNORE_KEYS, IntentDraw,
    LEASE_MS, NOT_NOW, READ_KINDS, REJECT, REQUEST_TIMEOUT_MS, STALE_READ, Size, Step, Swarm, Terms,
    UNSURE_KINDS, aimed_steps, enabled, event_draw, fault_draw, intent_draw, service_of, surface, swarm,
    terms, weighted_kind,
};
use crate::model::{IntentSpec, LimitOverrides, ObjectSeed, Scenario, ServiceFault, TRIGGER_EVENT, Trigger};

/// The longest clock jump: on a service that keeps no keys it moves no term.
const HOUR_MS: u64 = 3_600_000;
/// The bucket every generated `files.put` writes to.
const BUCKET: &str = "generated";

/// The terms `service`'s contract may vary in, as its default contract shows them: keys where
/// the service takes them, a unique business key where it can enforce one, and the guard its
/// actions can use (fencing or conditional writes); reads, acks and the settle bound
/// everywhere.
fn patch(t: &Terms, service: &str) -> ContractPatch {
    let default = Contract::default_for(service).unwrap_or_else(Contract::payments_default);
    let keys = default.idempotency_keys == KeyPolicy::Honored;
    let guard = vocabulary::ACTIONS.iter().find(|a| a.service == service).and_then(|a| a.guard);
    ContractPatch {
        idempotency_keys: keys.then_some(if t.keys_honored {
            KeyPolicy::Honored
        } else {
            KeyPolicy::Ignored
        }),
        key_retention_ms: keys.then_some(t.key_retention_ms),
        reads: Some(if t.eventual_lag_ms.is_some() { Reads::Eventual } else { Reads::Strong }),
        read_lag_ms_max: Some(t.eventual_lag_ms.unwrap_or(0)),
        acks: Some(if t.acks_may_lie { Acks::MayLie } else { Acks::Reliable }),
        settle_ms_max: Some(t.settle_ms_max),
        unique_business_key: (service == "workspaces").then_some(t.unique),
        fencing: (guard == Some(Guard::Fencing)).then_some(t.guarded),
        conditional_writes: (guard == Some(Guard::ConditionalWrites)).then_some(t.guarded),
    }
}

/// Makes `intent` a step after `predecessor`; with `reads`, its first parameter that can take
/// a reference reads the predecessor's first result field, keeping its drawn value around it.
fn as_step(intent: &mut IntentSpec, predecessor: &IntentSpec, reads: bool) {
    intent.after = vec![predecessor.id.clone()];
    let (Some(action), Some(from)) =
        (vocabulary::action(&intent.action), vocabulary::action(&predecessor.action))
    else {
        return;
    };
    let (true, Some(field)) = (reads, from.result_fields.first()) else { return };
    let Some(param) = action.params.iter().find(|p| action.param_takes_reference(p.name)) else { return };
    let drawn = intent.params.get(param.name).and_then(Value::as_str).unwrap_or_default().to_string();
    let reference = ParamRef {
        from: predecessor.id.clone(),
        field: field.name.to_string(),
        format: Some(format!("{drawn} {{}}")),
    };
    intent.params[param.name] = reference.to_value();
}

/// The strategy for generated case `index` of any seed; `name` names every value it makes.
pub fn scenario_strategy(name: String, size: Size) -> BoxedStrategy<Scenario> {
    let services = vocabulary::SERVICES.len();
    (
        swarm(),
        prop::collection::vec(terms(), services),
        prop::collection::vec(intent_draw(), 1..=size.intents_max),
        prop::collection::vec(fault_draw(), 1..=size.faults_max),
        prop::collection::vec(event_draw(), 0..=size.events_max),
    )
        .prop_map(move |(swarm, terms, intents, faults, events)| {
            build(&name, size.sharp, &swarm, &terms, &intents, &faults, &events)
        })
        .boxed()
}

/// The value of parameter `kind` of a new intent `n` (1-based), from the intent's `amount`.
/// The business key is unique per lineage; the rest follows the amount.
fn param_value(action: &ActionSpec, name: &str, kind: ParamKind, n: usize, amount: u64) -> Value {
    let business = name == action.business_key;
    match kind {
        ParamKind::Text if business && action.service == "payments" => json!(format!("pi_{n}")),
        ParamKind::Text if business => json!(format!("{}-{n}", action.service)),
        ParamKind::Text => json!(format!("Item {amount}")),
        ParamKind::PositiveInteger => json!(amount),
        ParamKind::Bucket => json!(BUCKET),
        ParamKind::ObjectKey => json!(format!("doc-{n}.txt")),
        ParamKind::Address => json!(format!("0x{:040x}", 0xc0de_0000_u64 + n as u64)),
        ParamKind::Wei => json!((u128::from(amount) * 1_000_000_000_000).to_string()),
        ParamKind::Email => json!(format!("user-{n}@example.com")),
    }
}

/// An intent's parameters from the action table; a replacement keeps the business key of the
/// intent it replaces (the same payment intent, external id, object key or recipient).
fn params_for(action: &ActionSpec, n: usize, amount: u64, previous: Option<&IntentSpec>) -> Value {
    let mut params = serde_json::Map::new();
    for p in action.params {
        let value = match previous {
            Some(prev) if p.name == action.business_key => prev.params[p.name].clone(),
            _ => param_value(action, p.name, p.kind, n, amount),
        };
        params.insert(p.name.to_string(), value);
    }
    Value::Object(params)
}

/// A case from its draws: the intents (and the objects they find), the contract each service
/// announces, the faults aimed where they bite, the lag of eventual reads, and the process
/// events. Nothing is drawn here: the same draws always build the same case.
fn build(
    name: &str,
    sharp: bool,
    swarm: &Swarm,
    terms: &[Terms],
    intent_draws: &[IntentDraw],
    fault_draws: &[FaultDraw],
    event_draws: &[EventDraw],
) -> Scenario {
    let (intents, objects) = intents(swarm, intent_draws);
    let used = used_services(&intents);
    let (services, contracts) = contracts(terms, &used);
    let faults_on = enabled(&swarm.faults_off);
    let events_on = enabled(&swarm.events_off);
    let steps = aimed_steps(&intents, fault_draws.len(), event_draws, &events_on, &contracts);
    let case = Case { sharp, intents: &intents, used: &used, contracts: &contracts, steps: &steps };
    let mut faults = Vec::new();
    for (i, d) in fault_draws.iter().enumerate() {
        if let Some(fault) = case.fault(i, d, &faults_on, &faults) {
            faults.push(fault);
        }
    }
    faults.extend(lag_faults(&used, &contracts));
    let events = case.events(event_draws, &events_on, &faults);
    Scenario {
        name: name.to_string(),
        description: "generated".into(),
        limits: LimitOverrides { request_timeout_ms: Some(REQUEST_TIMEOUT_MS), lease_ms: Some(LEASE_MS) },
        services,
        objects,
        intents,
        faults,
        events,
        ..Scenario::default()
    }
}

/// The intents of a case, one per draw among the actions the swarm leaves on, with the
/// objects that exist before the run for puts to overwrite. A draw may make its intent the
/// replacement of the last one of its action, a sibling sharing its business key, a step
/// after the intent before it, or (a message) one that a payment's webhook starts.
fn intents(swarm: &Swarm, intent_draws: &[IntentDraw]) -> (Vec<IntentSpec>, Vec<ObjectSeed>) {
    let actions_on = enabled(&swarm.actions_off);
    let mut intents: Vec<IntentSpec> = Vec::new();
    let mut objects = Vec::new();
    for (i, draw) in intent_draws.iter().enumerate() {
        let action = &vocabulary::ACTIONS[actions_on[draw.action % actions_on.len()]];
        // An intent an event starts is replaced by nothing.
        let previous = intents
            .iter()
            .rev()
            .find(|p| p.action == action.name && !p.is_triggered())
            .filter(|_| draw.replaces_previous);
        // A sibling shares its predecessor's key without replacing it: what the checker must
        // tell apart by tag or by parameters.
        let sibling = action.shares_business_key && draw.exists;
        let params = params_for(action, i + 1, draw.amount, previous);
        let previous = previous.filter(|_| !sibling);
        // An object that exists before the run, so that a put overwrites: what conditional
        // writes guard.
        if action.guard == Some(Guard::ConditionalWrites) && draw.exists && previous.is_none() {
            objects.push(ObjectSeed {
                bucket: params["bucket"].as_str().unwrap_or(BUCKET).to_string(),
                key: params["key"].as_str().unwrap_or_default().to_string(),
                body: "the version before".into(),
            });
        }
        let replaces = previous.map(|p| p.id.clone());
        let mut intent = IntentSpec {
            id: format!("i{}", i + 1),
            action: action.name.to_string(),
            params,
            replaces,
            after: Vec::new(),
            on_event: triggered(action, draw, i + 1),
        };
        // A step of a workflow: after the intent before it, when neither is part of a lineage
        // (a replacement's own order is its lineage's) nor waits for an event.
        if let Some(before) =
            intents.last().filter(|b| draw.after_previous && b.replaces.is_none() && !b.is_triggered())
            && intent.replaces.is_none()
            && !intent.is_triggered()
            && !intents.iter().any(|x| x.replaces.as_deref() == Some(before.id.as_str()))
        {
            as_step(&mut intent, before, draw.reads);
        }
        intents.push(intent);
    }
    (intents, objects)
}

/// The event that starts intent `n`, if its draw makes it one a webhook starts: a message
/// drawn as a sibling and a step without a predecessor to be either (a welcome email once an
/// order is paid; one message in eleven, so that plain messages keep most draws). Its
/// payment intent is its own, paid by the customer once the executor listens, or, where the
/// draw reads no reference, paid by nobody and claimed by a forged event.
fn triggered(action: &ActionSpec, draw: &IntentDraw, n: usize) -> Option<Trigger> {
    let drawn = draw.exists && !draw.replaces_previous;
    (action.name == "messages.send" && drawn).then(|| Trigger {
        kind: TRIGGER_EVENT.to_string(),
        payment_intent: format!("pi_order_{n}"),
        forged: !draw.reads && draw.after_previous,
    })
}

/// The services the intents act on, in the vocabulary's order: faults and events aim at
/// these, where they can fire.
fn used_services(intents: &[IntentSpec]) -> Vec<&'static str> {
    vocabulary::SERVICES
        .iter()
        .copied()
        .filter(|s| intents.iter().any(|i| vocabulary::action(&i.action).is_some_and(|a| a.service == *s)))
        .collect()
}

/// The terms each service announces (payments and workspaces always, as every run has them;
/// the others where an intent uses them), and the contract every service then holds.
fn contracts(
    terms: &[Terms],
    used: &[&'static str],
) -> (BTreeMap<String, ContractPatch>, BTreeMap<&'static str, Contract>) {
    let mut services = BTreeMap::new();
    let mut contracts = BTreeMap::new();
    for (s, service) in vocabulary::SERVICES.iter().enumerate() {
        let patch = patch(&terms[s % terms.len()], service);
        let mut contract = Contract::default_for(service).unwrap_or_else(Contract::payments_default);
        contract.apply(patch.clone());
        // Announced where an intent uses the service; payments and workspaces always, as
        // every run has them.
        if s < 2 || used.contains(service) {
            services.insert(service.to_string(), patch);
        }
        contracts.insert(*service, contract);
    }
    (services, contracts)
}

/// Where reads are eventual, they lag as far as the contract allows, on every read: that is
/// the world an executor reading back must be ready for.
fn lag_faults(used: &[&'static str], contracts: &BTreeMap<&'static str, Contract>) -> Vec<ServiceFault> {
    let mut faults = Vec::new();
    for service in used {
        let contract = &contracts[service];
        if contract.reads == Reads::Eventual && contract.read_lag_ms_max > 0 {
            let mut rule = FaultRule::always(FaultSpec::StaleRead { lag_ms: contract.read_lag_ms_max });
            rule.id = Some(format!("lag-{service}"));
            rule.method = Some(surface(service).reads[0].0.to_string());
            faults.push(ServiceFault { service: service.to_string(), rule });
        }
    }
    faults
}

/// What the faults and events of a case are aimed with: its intents, the services they use
/// and every service's contract, and the aimed steps the faults set up first.
struct Case<'a> {
    sharp: bool,
    intents: &'a [IntentSpec],
    used: &'a [&'static str],
    contracts: &'a BTreeMap<&'static str, Contract>,
    steps: &'a BTreeMap<usize, (Step, &'a IntentSpec)>,
}

/// The fault kinds a draw may pick on one service: those the swarm leaves on and the
/// contract admits, and the unsure ones among them.
struct Kinds {
    admitted: Vec<usize>,
    unsure: Vec<usize>,
    /// Whether a late commit can land past the timeout (within the settle bound).
    late_commits: bool,
}

impl Case<'_> {
    /// The service a draw aims at, among those the intents use.
    fn aim(&self, draw: usize) -> &'static str {
        self.used[draw % self.used.len()]
    }

    /// Fault `i` of the case, from its draw `d`, after the `faults` built so far (which it
    /// may follow); `None` where nothing the swarm leaves on is fair on its service.
    fn fault(
        &self,
        i: usize,
        d: &FaultDraw,
        faults_on: &[usize],
        faults: &[ServiceFault],
    ) -> Option<ServiceFault> {
        let step = self.steps.get(&i).copied();
        if step.is_none()
            && !d.at_read
            && let Some(pi) = d.aim.and_then(|a| self.genuine_trigger(a))
        {
            return self.webhook_fault(i, d, pi);
        }
        let service = step.map(|(_, intent)| service_of(intent)).unwrap_or_else(|| self.aim(d.service));
        let contract = &self.contracts[service];
        // A rejection's status takes a second draw besides `param` (which sizes latencies and
        // late commits): the top bit of the kind's draw, which the kind's pick hardly feels.
        let pick = d.param + 3 * u64::from(d.kind >= 32);
        let fault_of = |kind: usize| fault_for(kind, d.param, pick, contract, service == "chain");
        let kinds = admitted_kinds(faults_on, service, contract, &fault_of);
        // An aimed step keeps its fault where the contract admits it (the swarm gave it its
        // draws already).
        let step = step.filter(|(step, _)| match step {
            Step::NotNow => contract.admits(&NOT_NOW).is_ok(),
            Step::UnsureRetry => !kinds.unsure.is_empty(),
            Step::LateCommit => {
                kinds.late_commits && contract.admits(&fault_of(COMMIT_AFTER_TIMEOUT)).is_ok()
            }
        });
        if kinds.admitted.is_empty() && step.is_none() {
            return None;
        }
        let surface = surface(service);
        // The fault before this one on the same service and method, which this one follows
        // (a retry after it meets this fault).
        let before = (d.follows && !self.sharp && step.is_none())
            .then(|| {
                let method = if d.at_read { surface.reads[d.nth as usize % 2].0 } else { surface.write.0 };
                faults.iter().rev().find(|f: &&ServiceFault| {
                    f.service == service && f.rule.method.as_deref() == Some(method) && f.rule.nth.is_some()
                })
            })
            .flatten();
        // After a refusal, the retry it causes is where an unsure answer does harm.
        let refused =
            before.is_some_and(|f| matches!(f.rule.fault, FaultSpec::Refuse | FaultSpec::Reject { .. }));
        let (kind, fault) = match step {
            Some((Step::NotNow, _)) => (REJECT, NOT_NOW),
            Some((Step::LateCommit, _)) => (COMMIT_AFTER_TIMEOUT, fault_of(COMMIT_AFTER_TIMEOUT)),
            Some((Step::UnsureRetry, _)) => {
                let kind = weighted_kind(&kinds.unsure, d.kind);
                (kind, fault_of(kind))
            }
            None => {
                let on = if refused && !kinds.unsure.is_empty() { &kinds.unsure } else { &kinds.admitted };
                let kind = weighted_kind(on, d.kind);
                (kind, fault_of(kind))
            }
        };
        let mut rule = self.rule(i, d, service, step, kind, fault);
        place_window(&mut rule, d, before, step, self.sharp);
        Some(ServiceFault { service: service.to_string(), rule })
    }

    /// The payment intent whose genuine event starts the intent draw `aim` points at, if it is
    /// one an event starts and the event is not forged.
    fn genuine_trigger(&self, aim: usize) -> Option<&str> {
        let intent = &self.intents[aim % self.intents.len()];
        intent.on_event.as_ref().filter(|t| !t.forged).map(|t| t.payment_intent.as_str())
    }

    /// One of the payment intents whose genuine event starts an intent, by draw `n`.
    fn paid_order(&self, n: usize) -> Option<&str> {
        let paid: Vec<&str> = (0..self.intents.len()).filter_map(|a| self.genuine_trigger(a)).collect();
        (!paid.is_empty()).then(|| paid[n % paid.len()])
    }

    /// Fault `i` as a webhook fault on the event of payment intent `pi`: its kind among the
    /// five by the draw, sized to the payments contract, on the payment's confirmation (where
    /// the event is made). `None` where the contract does not admit it.
    fn webhook_fault(&self, i: usize, d: &FaultDraw, pi: &str) -> Option<ServiceFault> {
        let contract = &self.contracts["payments"];
        let kind = DUPLICATE_WEBHOOK + d.kind as usize % vocabulary::rule::WEBHOOK_FAULT_KINDS.len();
        let fault = fault_for(kind, d.param, d.param, contract, false);
        contract.admits(&fault).ok()?;
        let mut rule = FaultRule::always(fault);
        rule.id = Some(format!("f{}", i + 1));
        rule.method = Some("POST".into());
        rule.path = Some(format!("/v1/payment_intents/{pi}/confirm"));
        Some(ServiceFault { service: "payments".into(), rule })
    }

    /// The rule of fault `i` (of `kind`) on `service`: at a read or at the write, narrowed to
    /// the intent the step or the draw aims at where that intent acts on this service.
    fn rule(
        &self,
        i: usize,
        d: &FaultDraw,
        service: &'static str,
        step: Option<(Step, &IntentSpec)>,
        kind: usize,
        fault: FaultSpec,
    ) -> FaultRule {
        let surface = surface(service);
        // A read can be lost, hang, be refused or rejected, lag or be slow; what happens to a
        // commit or a key happens at a write.
        let at_read =
            kind == STALE_READ || (d.at_read && !self.sharp && step.is_none() && READ_KINDS.contains(&kind));
        let (method, call) = if at_read { surface.reads[d.nth as usize % 2] } else { surface.write };
        let mut rule = FaultRule::always(fault);
        rule.id = Some(format!("f{}", i + 1));
        rule.method = Some(method.to_string());
        if let Some(call) = call {
            rule.fields.insert("rpc_method".into(), call.into());
        }
        if let Some(aimed) =
            step.map(|(_, intent)| intent).or_else(|| d.aim.map(|a| &self.intents[a % self.intents.len()]))
            && let Some(action) = vocabulary::action(&aimed.action)
            && action.service == service
        {
            aim_at(&mut rule, action, aimed);
        }
        rule
    }
}

/// The kinds among `faults_on` that are fair on `service` under `contract`: keys faults only
/// where the service takes keys, a late commit only where it can land past the timeout, and
/// nothing the contract does not admit (a draw spent on an unfair fault would be wasted).
fn admitted_kinds(
    faults_on: &[usize],
    service: &str,
    contract: &Contract,
    fault_of: &impl Fn(usize) -> FaultSpec,
) -> Kinds {
    // Keys faults only where the service takes keys at all: elsewhere they change nothing.
    let keys = Contract::default_for(service).is_some_and(|c| c.idempotency_keys == KeyPolicy::Honored);
    // A late commit needs a settle bound past the timeout; within it, it is latency.
    let late_commits = contract.settle_ms_max > REQUEST_TIMEOUT_MS + 100;
    let admitted: Vec<usize> = faults_on
        .iter()
        .copied()
        .filter(|k| keys || !matches!(*k, IGNORE_KEYS | FORGET_KEYS))
        .filter(|k| fault_of(*k).check_service(service).is_ok())
        // A webhook fault acts on an event's deliveries: drawn only where aimed at an intent
        // an event starts (`Case::webhook_fault`), never on a service's writes.
        .filter(|k| !fault_of(*k).is_webhook())
        .filter(|k| *k != COMMIT_AFTER_TIMEOUT || late_commits)
        .filter(|k| contract.admits(&fault_of(*k)).is_ok())
        .collect();
    let unsure: Vec<usize> = admitted.iter().copied().filter(|k| *k < UNSURE_KINDS).collect();
    Kinds { admitted, unsure, late_commits }
}

/// When `rule` fires: an aimed step's on the first send or the retry after it; a fault that
/// follows `before` right after that one's window, if it still aims where that one did;
/// otherwise on the drawn request (the first in a sharp case) or with the drawn probability.
fn place_window(
    rule: &mut FaultRule,
    d: &FaultDraw,
    before: Option<&ServiceFault>,
    step: Option<(Step, &IntentSpec)>,
    sharp: bool,
) {
    // Right after the window of the fault it follows, if it still aims where that one did.
    let after = before
        .filter(|f| f.rule.method == rule.method && f.rule.fields == rule.fields && f.rule.path == rule.path)
        .and_then(|f| f.rule.nth.map(|n| n + f.rule.times.unwrap_or(1)));
    match (after, d.dense) {
        // The first send, or the retry after it.
        _ if step.is_some() => {
            rule.nth = Some(if matches!(step, Some((Step::UnsureRetry, _))) { 2 } else { 1 })
        }
        (Some(next), _) => {
            rule.nth = Some(next);
            rule.times = d.times;
        }
        (None, _) if sharp => rule.nth = Some(1),
        (None, Some(p)) => rule.probability = Some(f64::from(p) * 0.25),
        (None, None) => {
            rule.nth = Some(d.nth);
            rule.times = d.times;
        }
    }
}

/// Narrows `rule` to the requests of one intent: `where` its business key is the intent's
/// (form, JSON or query field), or for an object store its object's path.
fn aim_at(rule: &mut FaultRule, action: &ActionSpec, intent: &IntentSpec) {
    let key = intent.params.get(action.business_key).and_then(|v| v.as_str()).unwrap_or_default();
    match action.param(action.business_key).map(|p| p.kind) {
        Some(ParamKind::ObjectKey) => {
            let bucket = intent.params.get("bucket").and_then(|v| v.as_str()).unwrap_or(BUCKET);
            rule.path = Some(format!("/{bucket}/{key}"));
        }
        // A transfer's recipient is inside the signed bytes, which no rule sees.
        Some(ParamKind::Address) => {}
        _ => {
            rule.fields.insert(action.business_key.to_string(), key.to_string());
        }
    }
}

mod events;
mod fault_table;

pub(super) use fault_table::fault_for;

#[cfg(test)]
mod tests;
