//! What a run observed, the only thing the checker reads: the executor's [`Claim`]s, the
//! ledgers' effects and journals, the timeline of [`Moment`]s, and when and how the ledgers
//! were read ([`Route`], [`Pending`], [`SettleWait`]), all in [`Observed`].

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use vocabulary::{Effect, JournalEntry};

/// One intent as the executor finally described it (`status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Claim {
    /// The intent's id.
    pub id: String,
    /// `recorded`, `blocked`, `submitted`, `confirmed`, `failed`, `unknown` or `escalated`.
    pub state: String,
    /// Write requests the executor sent for it.
    pub attempts: u64,
    /// Whatever the executor sent as evidence (key, external id, last error, ...).
    #[serde(default)]
    #[schemars(schema_with = "crate::schema::claim_evidence")]
    pub evidence: serde_json::Value,
}

/// Something that happened during the run, for the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Moment {
    /// Service time (ms since the Unix epoch) on the run's base clock.
    pub at_ms: u64,
    /// Who: a worker (`w1`), a service (`payments`) or the harness.
    pub lane: String,
    /// What: `proposed`, `state`, `crash`, `pause`, `resume`, `clock_jump`, `heal`, ...
    pub kind: String,
    /// Details, e.g. the intent id and the new state.
    pub detail: String,
}

/// The timeline kinds that are intents' own progress rather than process events.
pub const INTENT_MOMENTS: [&str; 2] = ["proposed", "state"];

/// Everything a run observed. A passed case's result keeps only the small parts
/// ([`ScenarioResult::compact`]): what was not acknowledged or not supported, the reconcile
/// rounds, the route, and what was pending when the ledgers were read (with when they were);
/// every field is left out of the file when empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Observed {
    /// Intents the executor acknowledged as recorded (`propose_ok`), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub acknowledged: Vec<String>,
    /// Intents whose proposal got no acknowledgement (the worker died first, or refused it),
    /// with the reason.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub unacknowledged: BTreeMap<String, String>,
    /// The final `status`, after the reconcile phase.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Claim>,
    /// Per service, every effect that really happened.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ledgers: BTreeMap<String, Vec<Effect>>,
    /// Per service, every request the fake saw.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub journals: BTreeMap<String, Vec<JournalEntry>>,
    /// Reconciliation rounds the executor needed before nothing was unresolved.
    #[serde(default, skip_serializing_if = "crate::is_zero")]
    pub reconcile_rounds: u32,
    /// Events and state changes in time order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<Moment>,
    /// Set when the executor itself misbehaved (garbage, hang, unexpected exit): the run
    /// could not be checked, and this says why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub executor_error: Option<String>,
    /// Actions the executor said it does not support; intents using them were not run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported: Vec<String>,
    /// Workflow steps (intents with `after`) not proposed because the executor does not
    /// announce the `workflows` feature; they and their effects are exempt from the checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsupported_steps: Vec<String>,
    /// Which route made this observation: `run` (left out of the file) or `serve`.
    #[serde(default, skip_serializing_if = "Route::is_run")]
    pub route: Route,
    /// Service time (ms since the Unix epoch, on the run's base clock) when the ledgers and
    /// journals were read. Absent in files written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledgers_read_at_ms: Option<u64>,
    /// What could still change a ledger when the ledgers were read, fake by fake; empty when
    /// the world had settled. Verdicts judged with something here were judged before the world
    /// settled ([`Observed::judged_unsettled`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<Pending>,
    /// How serve's check waited for the world to settle before it read the ledgers; absent
    /// for `twice run`, whose engine always waits for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle: Option<SettleWait>,
    /// Set when the world could not settle without the caller (a request held at a step the
    /// test never said was done) or was still moving past its settle bound: what was still
    /// moving, one line each. No invariant is judged on it: the verdict is a single
    /// `world-unsettled`, violated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unsettled: Vec<String>,
}

impl Observed {
    /// Whether the verdicts were judged while something could still change a ledger: the
    /// ledgers were read with [`Observed::pending`] not empty (serve's check asked not to wait,
    /// or something waits for its sender), and the invariants judged all the same.
    pub fn judged_unsettled(&self) -> bool {
        !self.pending.is_empty() && self.unsettled.is_empty() && self.executor_error.is_none()
    }

    /// What [`Observed::judged_unsettled`] says in words: a headline, then one line per
    /// pending thing. Empty when the verdicts were judged on a settled world.
    pub fn unsettled_lines(&self) -> Vec<String> {
        if !self.judged_unsettled() {
            return Vec::new();
        }
        let why = match &self.settle {
            Some(settle) if !settle.waited => " (asked not to wait)".to_string(),
            Some(settle) => {
                format!(" (after waiting {} ms of at most {} ms)", settle.waited_ms, settle.bound_ms)
            }
            None => String::new(),
        };
        let mut lines = vec![format!(
            "judged before the world settled{why}: {} thing{} could still change a ledger when it was read",
            self.pending.len(),
            if self.pending.len() == 1 { "" } else { "s" }
        )];
        lines.extend(self.pending.iter().map(|p| p.line(self.ledgers_read_at_ms)));
        lines
    }
}

/// Which route observed a scenario's world.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// `twice run` (and `replay`, `check-executor`): the harness drove the executor through
    /// the scenario's phases, heal and reconcile rounds included.
    #[default]
    Run,
    /// `twice serve`'s check (`twice check`, `POST /__twice/check`, the kits' `check`, an MCP
    /// agent's claims): an application's claims, at the moment its test asked.
    Serve,
}

impl Route {
    /// Whether this is the default route, which `results.json` leaves out.
    pub fn is_run(&self) -> bool {
        *self == Route::Run
    }
}

/// One thing a fake still had to do, when the ledgers were read, that could change a ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Pending {
    /// The service.
    pub service: String,
    /// `request` (being worked on), `late-commit` (a write that commits later, its caller
    /// answered or gone), `delivery` (a message not in its inbox yet), `webhook` (an event an
    /// app's endpoint has not answered 2xx yet, with attempts left), `awaiting-listener` (a
    /// payment that happens once an application registers a webhook endpoint), `pooled-tx` (a
    /// transaction a block will take), `queued-tx` (a transaction no block takes until its
    /// sender sends more), or `held-at-step` (a request serve holds at a step's point until the
    /// test says the step is done).
    pub what: String,
    /// The request it comes from, as `METHOD path` (a transaction's: `eth_sendRawTransaction`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
    /// That request's id: its journal entry's, and its effect's once it lands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Service time (ms since the Unix epoch, on the service's own clock) when it is due,
    /// where the fake knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_ms: Option<u64>,
    /// What it is, in words.
    pub detail: String,
}

impl Pending {
    /// One line: `payments: late-commit of POST /v1/refunds (req_…), due 1200 ms after the
    /// ledgers were read: commits late ...`.
    pub fn line(&self, read_at_ms: Option<u64>) -> String {
        let request = match (&self.request, &self.request_id) {
            (Some(request), Some(id)) => format!(" of {request} ({id})"),
            (Some(request), None) => format!(" of {request}"),
            (None, Some(id)) => format!(" of request {id}"),
            (None, None) => String::new(),
        };
        let due = match (self.due_ms, read_at_ms) {
            (Some(due), Some(read)) if due > read => {
                format!(", due {} ms after the ledgers were read", due - read)
            }
            (Some(_), Some(_)) => ", due when the ledgers were read".to_string(),
            (Some(due), None) => format!(", due at {due} ms"),
            (None, _) => String::new(),
        };
        format!("{}: {}{request}{due}: {}", self.service, self.what, self.detail)
    }
}

/// How serve's check waited for the world to settle before reading the ledgers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SettleWait {
    /// Whether it waited at all: false when the caller asked it not to (`twice check
    /// --no-wait`, `wait=false`).
    pub waited: bool,
    /// How long it waited, in ms of wall time.
    pub waited_ms: u64,
    /// The longest it would have waited: the scenario's settle bound (the longest its
    /// services take to commit or die, plus their read lag) and serve's margin.
    pub bound_ms: u64,
}

/// An effect in a ledger, by reference.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct EffectRef {
    /// The service whose ledger holds it.
    pub service: String,
    /// Its position in the service's ledger, from 1.
    pub seq: u64,
    /// The id of the object the effect created or changed.
    pub object_id: String,
    /// Service time of the commit.
    pub at_ms: u64,
}
