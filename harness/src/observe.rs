//! What a run observed: the executor's claims, the ledgers' truth, and the timeline between.
//! Drivers produce an [`Observed`]; the checker reads it and nothing else.

use std::collections::BTreeMap;

use fake_services::{Effect, JournalEntry};
use serde::{Deserialize, Serialize};

/// One intent as the executor finally described it (`status`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Claim {
    pub id: String,
    /// `recorded`, `blocked`, `submitted`, `confirmed`, `failed`, `unknown` or `escalated`.
    pub state: String,
    pub attempts: u64,
    /// Whatever the executor sent as evidence (key, external id, last error, ...).
    #[serde(default)]
    pub evidence: serde_json::Value,
}

/// Something that happened during the run, for the timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Moment {
    /// Service time (ms since the Unix epoch) on the run's base clock.
    pub at_ms: u64,
    /// Who: a worker (`w1`), a service (`payments`) or the harness.
    pub lane: String,
    /// What: `proposed`, `state`, `crash`, `pause`, `resume`, `clock_jump`, `heal`, `phase`, ...
    pub kind: String,
    /// Details, e.g. the intent id and the new state.
    pub detail: String,
}

/// Everything a run observed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Observed {
    /// Intents the executor acknowledged as recorded (`propose_ok`), in order.
    pub acknowledged: Vec<String>,
    /// Intents whose proposal got no acknowledgement (the worker died first, or refused it),
    /// with the reason.
    pub unacknowledged: BTreeMap<String, String>,
    /// The final `status`, after the reconcile phase.
    pub claims: Vec<Claim>,
    /// Per service, every effect that really happened.
    pub ledgers: BTreeMap<String, Vec<Effect>>,
    /// Per service, every request the fake saw.
    pub journals: BTreeMap<String, Vec<JournalEntry>>,
    /// Reconciliation rounds the executor needed before nothing was unresolved.
    pub reconcile_rounds: u32,
    /// Events and state changes in time order.
    pub timeline: Vec<Moment>,
    /// Set when the executor itself misbehaved (garbage, hang, unexpected exit): the run
    /// could not be checked, and this says why.
    pub executor_error: Option<String>,
    /// Actions the executor said it does not support; intents using them were not run.
    pub unsupported: Vec<String>,
}
