//! A scenario is data: the contracts services announce, the intents an agent proposes, the
//! faults the fakes inject, the process events the harness applies, and what must hold.
//! The TOML form is documented in `docs/scenarios.md`.

use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use vocabulary::{Contract, ContractPatch, FaultRule};

/// The worker every scenario starts with.
pub const FIRST_WORKER: &str = "w1";

/// What a payment intent that the intents mention, but `payment_intents` does not list, is
/// seeded with.
pub const DEFAULT_PAYMENT_INTENT_AMOUNT: u64 = 10_000;

/// The request timeout a driver announces when a scenario does not set one (design §6; the
/// reference executor's default).
pub const DEFAULT_REQUEST_TIMEOUT_MS: u64 = 2_000;

/// The lease a driver announces when a scenario does not set one.
pub const DEFAULT_LEASE_MS: u64 = 10_000;

/// One ether in wei.
pub const ETHER_WEI: u128 = 1_000_000_000_000_000_000;

/// What the harness seeds the scenario's one chain account with: 1000 ether.
pub const CHAIN_ACCOUNT_BALANCE_WEI: u128 = 1_000 * ETHER_WEI;

/// One scenario.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Unique within a catalog; also the file name without `.toml`.
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]*$"), length(min = 1, max = crate::bounds::ID_MAX))]
    pub name: String,
    /// What the scenario rehearses, for people.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The failure mode this scenario rehearses: a short stable slug, listed per catalog
    /// scenario in `docs/scenarios.md`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[a-z0-9][a-z0-9_-]*$"), length(min = 1, max = crate::bounds::ID_MAX))]
    pub failure_mode: Option<String>,
    /// Limits the driver announces to the executor in `init`, where the scenario's timing
    /// depends on them (a pause past the lease, a hold past the request timeout).
    #[serde(default, skip_serializing_if = "LimitOverrides::is_empty")]
    pub limits: LimitOverrides,
    /// The contract each service announces, as changes to its defaults (see `docs/faults.md`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema_parts::services")]
    pub services: BTreeMap<String, ContractPatch>,
    /// Payment intents to create before anything runs: id to refundable amount. Payment
    /// intents that intents mention but that are not listed here get 10 000.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub payment_intents: BTreeMap<String, u64>,
    /// Objects to store in the files service before anything runs (not ledger effects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<ObjectSeed>,
    /// The payments fake accepts only the key every worker is given
    /// (`secrets.payments_api_key`) and answers any other with Stripe's 401, as the real
    /// service answers a key it never issued. Off: any non-empty key is accepted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict_keys: bool,
    /// What the agent proposes, in order.
    #[schemars(length(min = 1, max = crate::bounds::INTENTS_MAX))]
    pub intents: Vec<IntentSpec>,
    /// Fault rules armed on the fakes before the act phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults: Vec<ServiceFault>,
    /// Process events, each at an observation point.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Event>,
    /// Final states the scenario accepts (intent id to one state, or to every state that is
    /// honest there), beyond the invariants.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "crate::schema_parts::expect")]
    pub expect: BTreeMap<String, Expected>,
}

/// The terminal states a scenario accepts for one intent: one, or each of several where more
/// than one is honest (a write refused for a person's decision may end `escalated` or
/// `failed`: both say truly that nothing was done). Written as a string or an array of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Expected {
    One(String),
    AnyOf(Vec<String>),
}

impl Expected {
    /// The accepted states, in the order the scenario lists them.
    pub fn states(&self) -> &[String] {
        match self {
            Expected::One(state) => std::slice::from_ref(state),
            Expected::AnyOf(states) => states,
        }
    }

    /// Whether `state` (as an executor reports it) is one of the accepted states.
    pub fn accepts(&self, state: &str) -> bool {
        self.states().iter().any(|s| s.trim().eq_ignore_ascii_case(state.trim()))
    }
}

impl From<&str> for Expected {
    fn from(state: &str) -> Self {
        Expected::One(state.to_string())
    }
}

/// "escalated", or "escalated or failed".
impl std::fmt::Display for Expected {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.states().join(" or "))
    }
}

impl Scenario {
    /// The contract `service` announces in this scenario: its defaults with the scenario's
    /// changes applied. `None` for a service that does not exist.
    pub fn contract(&self, service: &str) -> Option<Contract> {
        let mut contract = default_contract(service)?;
        if let Some(patch) = self.services.get(service) {
            contract.apply(patch.clone());
        }
        Some(contract)
    }

    /// The request timeout to announce: the scenario's, or [`DEFAULT_REQUEST_TIMEOUT_MS`].
    pub fn request_timeout_ms(&self) -> u64 {
        self.limits.request_timeout_ms.unwrap_or(DEFAULT_REQUEST_TIMEOUT_MS)
    }

    /// How long the scenario's pauses stop workers, all of them together.
    pub fn pauses_ms(&self) -> u64 {
        self.events
            .iter()
            .map(|e| match e.action {
                EventAction::Pause { for_ms, .. } => for_ms,
                _ => 0,
            })
            .sum()
    }

    /// The lease to announce: the scenario's, or [`DEFAULT_LEASE_MS`].
    pub fn lease_ms(&self) -> u64 {
        self.limits.lease_ms.unwrap_or(DEFAULT_LEASE_MS)
    }

    /// Every payment intent to seed before the run, with its refundable amount: those listed
    /// in `payment_intents`, and those the refund intents mention with
    /// [`DEFAULT_PAYMENT_INTENT_AMOUNT`].
    pub fn payment_intents_to_seed(&self) -> BTreeMap<String, u64> {
        let unpaid = self.unpaid_payment_intents();
        let mut seeded: BTreeMap<String, u64> = self
            .payment_intents
            .iter()
            .filter(|(id, _)| !unpaid.contains_key(*id))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for intent in &self.intents {
            if intent.action == "payments.refund"
                && let Some(id) = intent.params.get("payment_intent").and_then(|v| v.as_str())
            {
                seeded.entry(id.to_string()).or_insert(DEFAULT_PAYMENT_INTENT_AMOUNT);
            }
        }
        seeded
    }

    /// The payment intents the triggers name, seeded unpaid for the customer to pay once the
    /// application listens: each with its amount (`payment_intents`, or
    /// [`DEFAULT_PAYMENT_INTENT_AMOUNT`]) and whether the payment is forged, in intent order.
    pub fn unpaid_payment_intents(&self) -> BTreeMap<String, u64> {
        self.triggers()
            .map(|t| {
                let amount = self
                    .payment_intents
                    .get(&t.payment_intent)
                    .copied()
                    .unwrap_or(DEFAULT_PAYMENT_INTENT_AMOUNT);
                (t.payment_intent.clone(), amount)
            })
            .collect()
    }

    /// Every trigger, in intent order.
    pub fn triggers(&self) -> impl Iterator<Item = &Trigger> {
        self.intents.iter().filter_map(|i| i.on_event.as_ref())
    }

    /// Whether some intent waits for a webhook: such a scenario needs an application that
    /// receives webhooks: an app through `twice serve`, or an executor that announces
    /// `webhooks` under `twice run`.
    pub fn needs_webhooks(&self) -> bool {
        self.intents.iter().any(IntentSpec::is_triggered)
    }

    /// Every bucket to create before the run: those `objects` and `files.put` intents name.
    pub fn buckets_to_seed(&self) -> BTreeSet<String> {
        let from_intents = self
            .intents
            .iter()
            .filter(|i| i.action == "files.put")
            .filter_map(|i| i.params.get("bucket").and_then(|v| v.as_str()));
        self.objects.iter().map(|o| o.bucket.as_str()).chain(from_intents).map(str::to_string).collect()
    }

    /// The body `objects` seeds at `bucket`/`key`, if any.
    pub fn seeded_object(&self, bucket: &str, key: &str) -> Option<&str> {
        self.objects.iter().find(|o| o.bucket == bucket && o.key == key).map(|o| o.body.as_str())
    }

    /// The indexes of the events whose point satisfies `at`, in the order they are listed
    /// (the order in which they fire).
    pub fn events_at(&self, at: impl Fn(&Point) -> bool) -> Vec<usize> {
        self.events.iter().enumerate().filter(|(_, e)| at(&e.at)).map(|(i, _)| i).collect()
    }

    /// The first intent of `id`'s lineage (`id` itself when it replaces nothing), following
    /// `replaces`; `None` when `id` is not an intent of this scenario or the chain is broken.
    pub fn lineage_root<'a>(&'a self, id: &'a str) -> Option<&'a str> {
        let mut current = self.intents.iter().find(|i| i.id == id)?;
        for _ in 0..self.intents.len() {
            match &current.replaces {
                None => return Some(&current.id),
                Some(older) => current = self.intents.iter().find(|i| &i.id == older)?,
            }
        }
        None
    }
}

/// The contract a service announces by default (before a scenario's changes).
pub fn default_contract(service: &str) -> Option<Contract> {
    Contract::default_for(service)
}

/// An object the files service holds before the run: `[[objects]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObjectSeed {
    /// The bucket, created before the run.
    pub bucket: String,
    /// The object's key.
    pub key: String,
    /// The object's content, as text.
    pub body: String,
}

/// Limits a scenario sets for the executor; absent ones take the driver's defaults
/// ([`DEFAULT_REQUEST_TIMEOUT_MS`], [`DEFAULT_LEASE_MS`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitOverrides {
    /// Each HTTP request the executor makes, connect to last byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<u64>,
    /// How long a worker owns an intent after taking it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
}

impl LimitOverrides {
    /// Whether nothing is overridden.
    pub fn is_empty(&self) -> bool {
        self == &LimitOverrides::default()
    }
}

/// One intent, as the model proposes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = crate::schema_parts::params_by_action)]
pub struct IntentSpec {
    /// Unique within the scenario: 1 to 64 characters, no white space.
    #[schemars(regex(pattern = r"^\S+$"), length(min = 1, max = crate::bounds::ID_MAX))]
    pub id: String,
    /// e.g. `payments.refund`.
    #[schemars(schema_with = "crate::schema_parts::action_name")]
    pub action: String,
    /// The action's parameters, each of its kind; text parameters and object keys other than
    /// the business key may instead be a reference to an earlier intent's result.
    #[schemars(schema_with = "crate::schema_parts::params")]
    pub params: serde_json::Value,
    /// The intent this one replaces (lineage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
    /// The earlier intents this one comes after: a step of a workflow runs only once every
    /// one of them took effect, and its parameters may take values from their results
    /// (`{ from = "create", field = "id" }`, `vocabulary::ParamRef`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
    /// The webhook event that authorises this intent: no agent proposes it; the application
    /// does its work when the event arrives at the endpoint it registered, once however often
    /// the event arrives, and never for a forged one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_event: Option<Trigger>,
}

/// The event that authorises an intent (`on_event`). The payment intent is seeded unpaid, and
/// the customer pays it once the application listens (it registered a webhook endpoint that
/// wants the event's type): its `payment_intent.succeeded` event then goes to the endpoint. A
/// fault rule on `POST /v1/payment_intents/{id}/confirm` of payments shapes that event's
/// webhooks (`duplicate_webhook`, `delay_webhook`, ...).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Trigger {
    /// The event's type; `payment_intent.succeeded` is the one a trigger can be.
    #[serde(rename = "type")]
    pub kind: String,
    /// The payment intent the customer pays.
    pub payment_intent: String,
    /// The customer never pays: an attacker sends a forged `payment_intent.succeeded` (signed
    /// without the endpoint's secret, an id the service never gave) once the application
    /// listens. The intent is then authorised by nothing: any effect for it is unauthorised.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub forged: bool,
}

/// The only event type a trigger can name.
pub const TRIGGER_EVENT: &str = "payment_intent.succeeded";

impl IntentSpec {
    /// Whether a webhook event, not a proposal, starts it.
    pub fn is_triggered(&self) -> bool {
        self.on_event.is_some()
    }

    /// Whether it uses what only an executor announcing `workflows` understands.
    pub fn is_step(&self) -> bool {
        !self.after.is_empty()
    }

    /// Its parameter references, by parameter name (malformed ones are skipped: validation
    /// refuses them).
    pub fn references(&self) -> Vec<(String, vocabulary::ParamRef)> {
        vocabulary::workflow::references(&self.params).unwrap_or_default()
    }
}

/// A fault rule and the service it is armed on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
// The parser refuses an unknown key here; serde's `flatten` alone would not.
#[schemars(deny_unknown_fields)]
pub struct ServiceFault {
    /// The service the rule is armed on.
    #[schemars(schema_with = "crate::schema_parts::service_name")]
    pub service: String,
    #[serde(flatten)]
    pub rule: FaultRule,
}

/// Where in a run an event fires.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
#[schemars(deny_unknown_fields)]
pub enum Point {
    /// When `service` has received the `nth` request matching `method` and `path`, and
    /// before it answers.
    Request {
        /// The service the request reaches.
        #[schemars(schema_with = "crate::schema_parts::service_name")]
        service: String,
        /// The HTTP method to count (any when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        method: Option<String>,
        /// The path to count: exact, or a prefix when it ends with `*` (any when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        /// Which matching request, from 1 (default 1).
        #[serde(default = "one")]
        #[schemars(range(min = 1))]
        nth: u64,
    },
    /// Right after the executor acknowledged this intent as recorded.
    AfterPropose {
        /// The intent's id.
        after_propose: String,
    },
    /// At the end of a phase: `act` or `drain`.
    Phase {
        /// The phase.
        after_phase: PhaseName,
    },
}

fn one() -> u64 {
    1
}

/// Phases a point can follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PhaseName {
    Act,
    Drain,
}

impl PhaseName {
    /// The name as written in scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            PhaseName::Act => "act",
            PhaseName::Drain => "drain",
        }
    }
}

/// What the harness does at a point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum EventAction {
    /// SIGKILL the worker (sim: drop it mid-flight); it restarts on the same state directory
    /// when the reconcile phase begins.
    Crash {
        /// The worker (default `w1`).
        #[serde(default = "first_worker")]
        worker: String,
    },
    /// SIGSTOP the worker for `for_ms`, then SIGCONT.
    Pause {
        /// The worker (default `w1`).
        #[serde(default = "first_worker")]
        worker: String,
        /// How long the worker stays stopped.
        for_ms: u64,
    },
    /// Start another worker on the same state directory; it drains and reconciles.
    StartWorker {
        /// The new worker's name.
        worker: String,
    },
    /// Move a service's clock forward.
    ClockJump {
        /// The service whose clock jumps.
        #[schemars(schema_with = "crate::schema_parts::service_name")]
        service: String,
        /// How far forward.
        by_ms: u64,
    },
    /// Disarm every fault on every service.
    Heal,
    /// Ask the worker for a reconciliation pass now.
    Reconcile {
        /// The worker (default `w1`).
        #[serde(default = "first_worker")]
        worker: String,
    },
}

fn first_worker() -> String {
    FIRST_WORKER.to_string()
}

impl EventAction {
    /// The action's name, as written in `do`.
    pub fn name(&self) -> &'static str {
        match self {
            EventAction::Crash { .. } => "crash",
            EventAction::Pause { .. } => "pause",
            EventAction::StartWorker { .. } => "start_worker",
            EventAction::ClockJump { .. } => "clock_jump",
            EventAction::Heal => "heal",
            EventAction::Reconcile { .. } => "reconcile",
        }
    }

    /// The worker the action applies to, if it applies to one.
    pub fn worker(&self) -> Option<&str> {
        match self {
            EventAction::Crash { worker }
            | EventAction::Pause { worker, .. }
            | EventAction::StartWorker { worker }
            | EventAction::Reconcile { worker } => Some(worker),
            EventAction::ClockJump { .. } | EventAction::Heal => None,
        }
    }
}

/// An event: a point and what happens there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
// The parser refuses an unknown key here; serde's `flatten` alone would not.
#[schemars(deny_unknown_fields)]
pub struct Event {
    /// Where in the run the event fires.
    pub at: Point,
    #[serde(flatten)]
    pub action: EventAction,
}
