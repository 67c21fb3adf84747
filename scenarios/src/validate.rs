//! What a scenario must satisfy beyond its shape: known services, actions, intents, workers
//! and states; consistent lineages; bounded waits; and fairness, so that a correct executor
//! exists for every scenario that validates.
//!
//! Errors name the offending field with a [`FieldPath`] (`faults[1].fault`); the parser turns
//! that path into `file:line:col` by looking it up in the spanned document.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;
use vocabulary::rule::{HOLD_MS_MAX, closest};
use vocabulary::{Contract, FaultRule, FaultSpec, KeyPolicy, State};

mod intents;
mod values;

use values::*;

use crate::model::{
    CHAIN_ACCOUNT_BALANCE_WEI, ETHER_WEI, EventAction, Expected, FIRST_WORKER, Point, Scenario,
};

/// Every service a scenario can name.
pub use vocabulary::SERVICES;

/// Every state an executor can report (design §5b), as `expect` values name them.
pub const STATES: &[&str] = &State::NAMES;

/// Every action a scenario can propose (design §6), with its parameters: the one action
/// table. A parameter of kind [`ParamKind::Text`] or [`ParamKind::ObjectKey`] has at most
/// [`TEXT_MAX`] characters here, a [`ParamKind::PositiveInteger`] is at most [`AMOUNT_MAX`]
/// and a [`ParamKind::Wei`] at most [`TRANSFER_WEI_MAX`].
pub use vocabulary::action::{ACTIONS, ActionSpec, Param, ParamKind, action};

// The bounds a scenario is checked against. They are defined in `bounds.rs`, below the model
// (whose schema states some of them), and public here, with the rules that use them.
pub use crate::bounds::{
    AMOUNT_MAX, CLOCK_JUMP_MS_MAX, EVENTS_MAX, FAULTS_MAX, ID_MAX, INTENTS_MAX, KEY_RETENTION_MS_MAX,
    LEASE_MS, OBJECTS_MAX, PAUSE_MS_MAX, REQUEST_TIMEOUT_MS, TEXT_MAX,
};

/// Largest single transfer: the whole balance the harness seeds the chain account with.
pub const TRANSFER_WEI_MAX: u128 = CHAIN_ACCOUNT_BALANCE_WEI;
/// What the transfers of a scenario leave of the chain account's balance, at least: enough
/// for the gas of every one of them, so that no transfer can only be refused.
pub const GAS_RESERVE_WEI: u128 = ETHER_WEI;

/// One step of a [`FieldPath`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    Key(String),
    Index(usize),
}

/// Where in a scenario a problem is: `intents[2].params.amount`. It may point at a key's
/// value (the usual case) or at the key itself (an unknown service name, say).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldPath {
    segments: Vec<Segment>,
    key: bool,
}

impl FieldPath {
    /// The whole scenario.
    pub fn root() -> Self {
        FieldPath::default()
    }

    /// The value of `key` inside this one.
    pub fn key(&self, key: &str) -> Self {
        let mut next = self.clone();
        next.segments.push(Segment::Key(key.to_string()));
        next.key = false;
        next
    }

    /// Item `index` of this array.
    pub fn index(&self, index: usize) -> Self {
        let mut next = self.clone();
        next.segments.push(Segment::Index(index));
        next.key = false;
        next
    }

    /// The last key's name rather than its value.
    pub fn name_of_key(mut self) -> Self {
        self.key = true;
        self
    }

    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Whether the path names the last key itself rather than its value.
    pub fn points_at_key(&self) -> bool {
        self.key
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.segments.is_empty() {
            return f.write_str("scenario");
        }
        for (i, segment) in self.segments.iter().enumerate() {
            match segment {
                Segment::Key(k) if is_bare_key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(k)?;
                }
                Segment::Key(k) => {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    write!(f, "{k:?}")?;
                }
                Segment::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// Whether `key` can be written without quotes in TOML.
pub(crate) fn is_bare_key(key: &str) -> bool {
    !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A scenario that breaks a rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}{}", render_hint(hint))]
pub struct Invalid {
    pub path: FieldPath,
    pub message: String,
    /// How to fix it, when there is something to say: `did you mean "..."?`.
    pub hint: Option<String>,
}

/// Why `value` is not a valid `name` parameter of `kind`, with how to fix it; `None` when it
/// is. The same checks as a scenario's intents get, for values that come from elsewhere
/// (`twice mcp`'s tool arguments).
pub fn param_problem(kind: vocabulary::ParamKind, name: &str, value: &Value) -> Option<String> {
    param_value(kind, name, value, FieldPath::root().key(name))
        .err()
        .map(|invalid| format!("{}{}", invalid.message, render_hint(&invalid.hint)))
}

pub(crate) fn render_hint(hint: &Option<String>) -> String {
    hint.as_ref().map(|h| format!(" ({h})")).unwrap_or_default()
}

impl Invalid {
    fn new(path: FieldPath, message: impl Into<String>) -> Self {
        Invalid { path, message: message.into(), hint: None }
    }

    fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// `unknown <what> "<word>"`, with the nearest candidate or the list as a hint.
    pub(crate) fn unknown(path: FieldPath, what: &str, word: &str, candidates: &[&str]) -> Self {
        Invalid::new(path, format!("unknown {what} \"{word}\"")).hint(suggest(word, candidates))
    }
}

/// `did you mean "x"?` when a candidate is close, else the list of candidates.
pub(crate) fn suggest(word: &str, candidates: &[&str]) -> String {
    match closest(word, candidates) {
        Some(near) => format!("did you mean \"{near}\"?"),
        None if candidates.is_empty() => "nothing is allowed here".to_string(),
        None => format!("expected one of: {}", candidates.join(", ")),
    }
}

type Check = Result<(), Invalid>;

impl Scenario {
    /// Checks every rule of `docs/scenarios.md` ("Validation" and "Fairness"), and returns
    /// the first one broken, in file order.
    pub fn validate(&self) -> Result<(), Invalid> {
        let root = FieldPath::root();
        slug(&self.name, root.key("name"), "name")?;
        if let Some(mode) = &self.failure_mode {
            slug(mode, root.key("failure_mode"), "failure_mode")?;
        }
        self.check_limits(&root.key("limits"))?;
        self.check_services(&root.key("services"))?;
        self.check_payment_intents(&root.key("payment_intents"))?;
        self.check_objects(&root.key("objects"))?;
        self.check_intents(&root.key("intents"))?;
        self.check_faults(&root.key("faults"))?;
        self.check_events(&root.key("events"))?;
        self.check_expect(&root.key("expect"))
    }

    fn check_limits(&self, at: &FieldPath) -> Check {
        let limits = &self.limits;
        within(
            limits.request_timeout_ms,
            REQUEST_TIMEOUT_MS,
            at.key("request_timeout_ms"),
            "request_timeout_ms",
        )?;
        within(limits.lease_ms, LEASE_MS, at.key("lease_ms"), "lease_ms")
    }

    fn check_services(&self, at: &FieldPath) -> Check {
        for (name, patch) in &self.services {
            let here = at.key(name);
            if !SERVICES.contains(&name.as_str()) {
                return Err(Invalid::unknown(here.name_of_key(), "service", name, SERVICES));
            }
            if let Some(ms) = patch.key_retention_ms {
                at_most(ms, KEY_RETENTION_MS_MAX, here.key("key_retention_ms"), "key_retention_ms")?;
            }
            if let Some(ms) = patch.settle_ms_max {
                at_most(ms, HOLD_MS_MAX, here.key("settle_ms_max"), "settle_ms_max")?;
            }
            if let Some(ms) = patch.read_lag_ms_max {
                at_most(ms, HOLD_MS_MAX, here.key("read_lag_ms_max"), "read_lag_ms_max")?;
            }
        }
        Ok(())
    }

    fn check_payment_intents(&self, at: &FieldPath) -> Check {
        for (id, amount) in &self.payment_intents {
            text(id, at.key(id).name_of_key(), "a payment intent id")?;
            if *amount == 0 || *amount > AMOUNT_MAX {
                return Err(Invalid::new(
                    at.key(id),
                    format!("payment intent {id} has amount {amount}; it must be 1 to {AMOUNT_MAX}"),
                ));
            }
        }
        Ok(())
    }

    fn check_objects(&self, at: &FieldPath) -> Check {
        if self.objects.len() > OBJECTS_MAX {
            return Err(Invalid::new(
                at.index(OBJECTS_MAX),
                format!("{} objects; a scenario seeds at most {OBJECTS_MAX}", self.objects.len()),
            ));
        }
        let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for (i, object) in self.objects.iter().enumerate() {
            let here = at.index(i);
            param_value(
                ParamKind::Bucket,
                "bucket",
                &Value::from(object.bucket.as_str()),
                here.key("bucket"),
            )?;
            param_value(ParamKind::ObjectKey, "key", &Value::from(object.key.as_str()), here.key("key"))?;
            param_value(ParamKind::Text, "body", &Value::from(object.body.as_str()), here.key("body"))?;
            if let Some(first) = seen.insert((&object.bucket, &object.key), i) {
                return Err(Invalid::new(
                    here.key("key"),
                    format!("{}/{} is already seeded by objects[{first}]", object.bucket, object.key),
                )
                .hint("an object is seeded once; its body is what the service holds before the run"));
            }
        }
        Ok(())
    }

    fn check_faults(&self, at: &FieldPath) -> Check {
        if self.faults.len() > FAULTS_MAX {
            return Err(Invalid::new(
                at.index(FAULTS_MAX),
                format!("{} fault rules; a scenario has at most {FAULTS_MAX}", self.faults.len()),
            ));
        }
        let mut ids: BTreeSet<(&str, &str)> = BTreeSet::new();
        for (i, armed) in self.faults.iter().enumerate() {
            let here = at.index(i);
            let Some(contract) = self.contract(&armed.service) else {
                return Err(Invalid::unknown(here.key("service"), "service", &armed.service, SERVICES));
            };
            let rule = &armed.rule;
            if let Some(id) = &rule.id {
                identifier(id, here.key("id"), "a rule id")?;
                if !ids.insert((&armed.service, id)) {
                    return Err(Invalid::new(
                        here.key("id"),
                        format!("rule id \"{id}\" is already used on {}", armed.service),
                    ));
                }
            }
            check_rule(rule, &here)?;
            rule.fault.check_service(&armed.service).map_err(|message| {
                Invalid::new(here.key("fault"), message).hint("arm it on messages, or pick another fault")
            })?;
            fair(&contract, &armed.service, &rule.fault, here.key("fault"))?;
        }
        Ok(())
    }

    fn check_events(&self, at: &FieldPath) -> Check {
        if self.events.len() > EVENTS_MAX {
            return Err(Invalid::new(
                at.index(EVENTS_MAX),
                format!("{} events; a scenario has at most {EVENTS_MAX}", self.events.len()),
            ));
        }
        let mut workers: Vec<&str> = vec![FIRST_WORKER];
        let mut jumped: BTreeMap<&str, u64> = BTreeMap::new();
        let intent_ids: Vec<&str> = self.intents.iter().map(|i| i.id.as_str()).collect();
        for (i, event) in self.events.iter().enumerate() {
            let here = at.index(i);
            let point = here.key("at");
            match &event.at {
                Point::Request { service, method, path, nth } => {
                    if !SERVICES.contains(&service.as_str()) {
                        return Err(Invalid::unknown(point.key("service"), "service", service, SERVICES));
                    }
                    if let Some(m) = method {
                        http_method(m, point.key("method"))?;
                    }
                    if let Some(p) = path {
                        http_path(p, point.key("path"))?;
                    }
                    if *nth == 0 {
                        return Err(Invalid::new(
                            point.key("nth"),
                            "nth is 1-based: the first matching request is nth = 1",
                        ));
                    }
                }
                Point::AfterPropose { after_propose } => {
                    if !intent_ids.contains(&after_propose.as_str()) {
                        return Err(Invalid::unknown(
                            point.key("after_propose"),
                            "intent",
                            after_propose,
                            &intent_ids,
                        ));
                    }
                }
                Point::Phase { .. } => {}
            }
            match &event.action {
                EventAction::Crash { worker } | EventAction::Reconcile { worker } => {
                    known_worker(worker, &workers, here.key("worker"))?;
                }
                EventAction::Pause { worker, for_ms } => {
                    known_worker(worker, &workers, here.key("worker"))?;
                    if *for_ms == 0 || *for_ms > PAUSE_MS_MAX {
                        return Err(Invalid::new(
                            here.key("for_ms"),
                            format!("a pause of {for_ms} ms; a pause lasts 1 to {PAUSE_MS_MAX} ms"),
                        ));
                    }
                }
                EventAction::StartWorker { worker } => {
                    identifier(worker, here.key("worker"), "a worker id")?;
                    if workers.contains(&worker.as_str()) {
                        return Err(Invalid::new(
                            here.key("worker"),
                            format!("worker \"{worker}\" is already running"),
                        )
                        .hint("give the new worker another id, e.g. \"w2\""));
                    }
                    workers.push(worker);
                }
                EventAction::ClockJump { service, by_ms } => {
                    let Some(contract) = self.contract(service) else {
                        return Err(Invalid::unknown(here.key("service"), "service", service, SERVICES));
                    };
                    if *by_ms == 0 || *by_ms > CLOCK_JUMP_MS_MAX {
                        return Err(Invalid::new(
                            here.key("by_ms"),
                            format!("a clock jump of {by_ms} ms; a jump is 1 to {CLOCK_JUMP_MS_MAX} ms"),
                        ));
                    }
                    let total = jumped.entry(service).or_insert(0);
                    *total = total.saturating_add(*by_ms);
                    let timeout = self.request_timeout_ms();
                    if contract.idempotency_keys == KeyPolicy::Honored && *total >= timeout {
                        return Err(Invalid::new(
                            here.key("by_ms"),
                            format!(
                                "unfair: clock jumps on {service} add up to {total} ms, not under the request \
                                 timeout ({timeout} ms); {service} honours idempotency keys, and a jump ages \
                                 them on its clock only"
                            ),
                        )
                        .hint(
                            "to expire keys, announce a short key_retention_ms and let real time pass; \
                             or jump a service whose idempotency_keys are \"ignored\"",
                        ));
                    }
                }
                EventAction::Heal => {}
            }
        }
        Ok(())
    }

    fn check_expect(&self, at: &FieldPath) -> Check {
        let ids: Vec<&str> = self.intents.iter().map(|i| i.id.as_str()).collect();
        for (id, expected) in &self.expect {
            if !ids.contains(&id.as_str()) {
                return Err(Invalid::unknown(at.key(id).name_of_key(), "intent", id, &ids));
            }
            let one = matches!(expected, Expected::One(_));
            for (i, state) in expected.states().iter().enumerate() {
                let here = if one { at.key(id) } else { at.key(id).index(i) };
                if !STATES.contains(&state.as_str()) {
                    return Err(Invalid::unknown(here, "state", state, STATES));
                }
                if expected.states()[..i].contains(state) {
                    return Err(Invalid::new(here, format!("`{state}` is listed twice")));
                }
            }
        }
        Ok(())
    }
}
