//! The run's model: what a run produced, as `results.json` holds it (schema
//! [`RESULTS_SCHEMA`], documented in `docs/reports.md`). What a case observed ([`Observed`]:
//! the intents, the executor's claims, the ledgers' effects, the moments of the timeline), the
//! verdicts judged from it ([`Verdict`], [`Hazard`]) and the run that holds them
//! ([`RunResults`]). The runner and `twice serve` fill these in, the checker reads what was
//! observed and writes verdicts, and every report renders them and nothing else, so a report
//! can always be rebuilt from `results.json` alone. [`names`] makes file names from the names
//! these carry.

pub mod names;
mod schema;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use vocabulary::{Effect, JournalEntry};

/// The results file format; bumped when a field changes meaning or goes away (new fields may
/// appear within a version, and readers ignore fields they do not know).
pub const RESULTS_SCHEMA: &str = "twice.results/2";

/// Where a scenario came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// A scenario of the built-in catalog.
    Catalog,
    /// A scenario file.
    File {
        /// The file's path, as given.
        path: String,
    },
    /// A generated case.
    Generated {
        /// The case's index: with the run's seed, it makes the case again.
        index: u64,
    },
}

/// `--shard K/N`: this run takes every case whose position modulo N is K-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Shard {
    /// K, from 1.
    #[schemars(range(min = 1))]
    pub index: u32,
    /// N.
    #[schemars(range(min = 1))]
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (k, n) = s.split_once('/').ok_or_else(|| format!("--shard takes K/N, e.g. 1/4; got \"{s}\""))?;
        let index: u32 = k.parse().map_err(|_| format!("--shard: \"{k}\" is not a number"))?;
        let count: u32 = n.parse().map_err(|_| format!("--shard: \"{n}\" is not a number"))?;
        if count == 0 || index == 0 || index > count {
            return Err(format!("--shard {s}: K must be between 1 and N"));
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    pub fn takes(&self, position: usize) -> bool {
        position % self.count as usize == (self.index - 1) as usize
    }
}

/// The verdict of one scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    Passed,
    Violated,
    ExecutorError,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Passed => "passed",
            Outcome::Violated => "violated",
            Outcome::ExecutorError => "executor-error",
        }
    }
}

/// How one invariant came out on one run.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// The run gave the checker something to judge, and nothing broke the invariant.
    #[default]
    Held,
    /// Something bad happened in this run; the evidence says what.
    Violated,
    /// The run gave the checker nothing to judge (no replacement to time, no second writer,
    /// ...); the reason says why. Never a failure, never a silent pass.
    NotJudged,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Held => "held",
            Status::Violated => "violated",
            Status::NotJudged => "not judged",
        }
    }
}

/// The outcome of one invariant on one run.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(from = "VerdictFields")]
pub struct Verdict {
    /// A stable slug, e.g. `no-duplicate-effect`, `expected-states` or `executor-error`.
    pub invariant: String,
    /// Held, violated or not judged. Verdicts written before the field existed carry only
    /// `held`, which says held or violated; reading fills the status in from it.
    pub status: Status,
    /// False exactly when the invariant was violated (a verdict not judged did not fail).
    pub held: bool,
    /// One concrete line per problem (empty unless the invariant was violated).
    pub evidence: Vec<String>,
    /// Why the invariant was not judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A verdict as files hold it, `status` perhaps missing (files older than the field).
#[derive(Deserialize, JsonSchema)]
struct VerdictFields {
    invariant: String,
    #[serde(default)]
    status: Option<Status>,
    held: bool,
    evidence: Vec<String>,
    #[serde(default)]
    reason: Option<String>,
}

impl From<VerdictFields> for Verdict {
    fn from(v: VerdictFields) -> Verdict {
        let status = v.status.unwrap_or(if v.held { Status::Held } else { Status::Violated });
        Verdict { invariant: v.invariant, status, held: v.held, evidence: v.evidence, reason: v.reason }
    }
}

impl Verdict {
    /// Held when there is no evidence against it, violated otherwise.
    pub fn from_evidence(invariant: &str, evidence: Vec<String>) -> Verdict {
        let status = if evidence.is_empty() { Status::Held } else { Status::Violated };
        Verdict {
            invariant: invariant.to_string(),
            status,
            held: evidence.is_empty(),
            evidence,
            reason: None,
        }
    }

    /// Not judged, for `reason`.
    pub fn not_judged(invariant: &str, reason: impl Into<String>) -> Verdict {
        Verdict {
            invariant: invariant.to_string(),
            status: Status::NotJudged,
            held: true,
            evidence: vec![],
            reason: Some(reason.into()),
        }
    }

    pub fn violated(&self) -> bool {
        self.status == Status::Violated
    }

    pub fn judged(&self) -> bool {
        self.status != Status::NotJudged
    }
}

/// A safeguard the service's contract offered and the executor did not use, in a run where
/// nothing exploited it: no harm happened, so it is no violation, but the catalog scenario
/// named here would turn it into one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
pub struct Hazard {
    /// A stable slug: `no-fencing-token`, `no-precondition` or `key-past-retention`.
    pub kind: String,
    pub service: String,
    /// The intent the unguarded write belongs to, when the checker can tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intent: Option<String>,
    /// What was seen, naming the request or effect.
    pub detail: String,
    /// The catalog scenario that would exploit it.
    pub exploited_by: String,
    /// The command that runs that scenario against the same executor.
    pub command: String,
}

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
    #[serde(default, skip_serializing_if = "is_zero")]
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
    /// answered or gone), `delivery` (a message not in its inbox yet), `pooled-tx` (a
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

/// One intent of the scenario at the end of the run: what the executor claims, and what the
/// checker attributed to it from the ledgers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct IntentResult {
    /// The intent's id.
    pub id: String,
    /// Its action, e.g. `payments.refund`.
    pub action: String,
    /// The executor's final state; `None` when it never reported the intent.
    pub state: Option<String>,
    /// Sends the executor counted; `None` when it never reported the intent.
    pub attempts: Option<u64>,
    /// The ledger effects carrying this intent's business key and parameters.
    pub effects: Vec<EffectRef>,
    /// The executor does not support the action: the intent was not checked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsupported: bool,
    /// A workflow's step: the intents it comes after (the scenario's `after`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

/// A fault that fired on a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FaultApplied {
    /// The service the fault fired on.
    pub service: String,
    /// The request's position in the service's journal.
    pub request_seq: u64,
    /// Service time at which the request arrived.
    pub at_ms: u64,
    /// The request's method.
    pub method: String,
    /// The request's path.
    pub path: String,
    /// The rule's id.
    pub rule: String,
    /// The fault's kind.
    pub fault: String,
}

/// One scenario's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScenarioResult {
    /// The scenario's name.
    pub name: String,
    /// Position in the unsharded run's list of cases: shards and merges keep it.
    #[serde(default)]
    pub position: u64,
    /// Where the scenario came from.
    pub source: Source,
    /// The case's own seed, from the run's seed and the case's identity.
    pub seed: u64,
    /// Passed, violated or executor-error.
    pub outcome: Outcome,
    /// One per invariant, then the scenario's expected states (or a single executor-error).
    /// In `results.json` a passed case names an entry of the run's table of verdict lists
    /// instead (`verdict_sets`, see `json::render`); reading fills this in from it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub verdicts: Vec<Verdict>,
    /// The entry of the file's `verdict_sets` that holds this case's verdicts (files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict_set: Option<usize>,
    /// The executor's final claims (failed cases only: a passed one has its [`Summary`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Claim>,
    /// Final state, attempts and attributed effects per intent, in scenario order (failed
    /// cases only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intents: Vec<IntentResult>,
    /// Effects per service, as the ledgers hold them.
    pub effects: BTreeMap<String, usize>,
    /// Every fault that fired, in service then journal order (failed cases only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub faults_applied: Vec<FaultApplied>,
    /// Process events: starts, crashes, pauses, resumes, clock jumps, heals (failed cases
    /// only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub events: Vec<Moment>,
    /// What happened in a passed case, in counts: set by [`ScenarioResult::compact`], which
    /// drops the details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Summary>,
    /// The command that runs this scenario again, alone.
    pub replay: String,
    /// Safeguards the contracts offered and the executor did not use, though nothing in this
    /// run exploited them; never a failure unless the run is `--strict`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hazards: Vec<Hazard>,
    /// The minimal scenario that shows a violation, when the search shrank one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrunk: Option<String>,
    /// How far shrinking this failing generated case got, and why it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shrink: Option<Shrink>,
    /// Everything observed, for reports; of a passed case only the small parts (see
    /// [`Observed`]).
    #[serde(default)]
    pub observed: Observed,
}

impl ScenarioResult {
    /// The verdicts that did not hold.
    pub fn violations(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| v.violated())
    }

    /// A passed case's compact form: its verdicts, hazards and replay command stay, and a
    /// [`Summary`] in counts replaces the claims, intents, faults, events and the bulk of the
    /// observation (ledgers, journals, timeline), which are dropped. A run's memory then grows
    /// with its failures, not with its cases. A case that did not pass keeps everything; so
    /// does a result compacted already.
    pub fn compact(&mut self) {
        if self.outcome != Outcome::Passed || self.summary.is_some() {
            return;
        }
        let mut faults: BTreeMap<String, usize> = BTreeMap::new();
        for fault in &self.faults_applied {
            *faults.entry(fault.fault.clone()).or_default() += 1;
        }
        let summary = Summary {
            observed_digest: observed_digest(&self.observed),
            intents: self.intents.iter().map(IntentBrief::of).collect(),
            faults,
            events: self.events.len(),
            requests: self.observed.journals.values().map(Vec::len).sum(),
        };
        self.summary = Some(summary);
        self.claims = Vec::new();
        self.intents = Vec::new();
        self.faults_applied = Vec::new();
        self.events = Vec::new();
        let observed = std::mem::take(&mut self.observed);
        // When the ledgers were read matters to a reader only with something pending then.
        let ledgers_read_at_ms = if observed.pending.is_empty() { None } else { observed.ledgers_read_at_ms };
        self.observed = Observed {
            unacknowledged: observed.unacknowledged,
            reconcile_rounds: observed.reconcile_rounds,
            unsupported: observed.unsupported,
            unsupported_steps: observed.unsupported_steps,
            route: observed.route,
            ledgers_read_at_ms,
            pending: observed.pending,
            settle: observed.settle,
            ..Observed::default()
        };
    }

    /// Per intent: id, final state, attempts and effects attributed, from the full result or
    /// from the summary of a compacted one.
    pub fn intent_briefs(&self) -> Vec<IntentBrief> {
        match &self.summary {
            Some(summary) => summary.intents.clone(),
            None => self.intents.iter().map(IntentBrief::of).collect(),
        }
    }
}

/// What a state count calls an intent the executor never reported.
pub const NOT_REPORTED: &str = "not reported";

/// A passed case in counts (see [`ScenarioResult::compact`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Summary {
    /// FNV-1a (64 bits, hex) of the full observation's JSON before it was dropped: the same
    /// behaviour gives the same digest, so a digest of `results.json` still changes when
    /// anything a passed case observed (a request, an effect, a moment) does.
    pub observed_digest: String,
    /// Per intent, in scenario order: id, final state, attempts and effects attributed, as
    /// `[id, state, attempts, effects]` (state and attempts `null` when never reported).
    /// Baselines compare these.
    pub intents: Vec<IntentBrief>,
    /// Faults fired, per fault kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub faults: BTreeMap<String, usize>,
    /// Process events: starts, crashes, pauses, resumes, clock jumps, heals.
    pub events: usize,
    /// Requests the fakes saw, over every service.
    pub requests: usize,
}

impl Summary {
    /// Intents per final state ([`NOT_REPORTED`] for those never reported).
    pub fn states(&self) -> BTreeMap<&str, usize> {
        let mut states = BTreeMap::new();
        for i in &self.intents {
            *states.entry(i.state.as_deref().unwrap_or(NOT_REPORTED)).or_default() += 1;
        }
        states
    }
}

/// One intent of a passed case, written as an array `[id, state, attempts, effects]`.
// Its schema is written by hand (`schema.rs`): the derive would describe the row tuple
// without saying which item is which.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "IntentBriefRow", into = "IntentBriefRow")]
pub struct IntentBrief {
    pub id: String,
    pub state: Option<String>,
    pub attempts: Option<u64>,
    pub effects: usize,
}

type IntentBriefRow = (String, Option<String>, Option<u64>, usize);

impl IntentBrief {
    /// The brief of one intent's full result.
    pub fn of(intent: &IntentResult) -> IntentBrief {
        IntentBrief {
            id: intent.id.clone(),
            state: intent.state.clone(),
            attempts: intent.attempts,
            effects: intent.effects.len(),
        }
    }
}

impl From<IntentBriefRow> for IntentBrief {
    fn from((id, state, attempts, effects): IntentBriefRow) -> IntentBrief {
        IntentBrief { id, state, attempts, effects }
    }
}

impl From<IntentBrief> for IntentBriefRow {
    fn from(i: IntentBrief) -> IntentBriefRow {
        (i.id, i.state, i.attempts, i.effects)
    }
}

/// FNV-1a (64 bits, 16 hex digits) of an observation's JSON, as [`Summary::observed_digest`]
/// holds it; streamed, so nothing is built in memory.
pub fn observed_digest(observed: &Observed) -> String {
    struct Fnv(u64);
    impl std::io::Write for Fnv {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = bytes.iter().fold(self.0, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3));
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut fnv = Fnv(0xcbf2_9ce4_8422_2325);
    // Serializing plain data into a writer that never fails cannot fail either.
    let _ = serde_json::to_writer(&mut fnv, observed);
    format!("{:016x}", fnv.0)
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How far shrinking one failing generated case got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Shrink {
    /// Steps (intents, faults and events) of the case as generated.
    pub steps_before: usize,
    /// Steps of the smallest scenario found that still fails the same way.
    pub steps_after: usize,
    /// Candidate scenarios run.
    pub runs: usize,
    /// Why it stopped: [`SHRINK_MINIMAL`], [`SHRINK_RUNS`] or [`SHRINK_BUDGET`].
    pub stopped: String,
}

impl Shrink {
    /// Why shrinking stopped, in words; `None` for a value this version does not know.
    pub fn why_stopped(&self) -> Option<&'static str> {
        match self.stopped.as_str() {
            SHRINK_MINIMAL => Some("minimal"),
            SHRINK_RUNS => Some("run limit"),
            SHRINK_BUDGET => Some("time budget"),
            _ => None,
        }
    }

    /// One line for people, e.g. `shrunk from 9 to 3 steps in 41 runs; stopped: time budget`
    /// (or `not shrunk (9 steps) in 4 runs; ...` when no smaller candidate failed).
    pub fn line(&self) -> String {
        let how = if self.steps_after < self.steps_before {
            format!("shrunk from {} to {} steps", self.steps_before, self.steps_after)
        } else {
            format!("not shrunk ({} steps)", self.steps_after)
        };
        let runs = if self.runs == 1 { "1 run".to_string() } else { format!("{} runs", self.runs) };
        format!("{how} in {runs}; stopped: {}", self.why_stopped().unwrap_or(&self.stopped))
    }
}

/// Shrinking stopped because no smaller candidate failed the same way.
pub const SHRINK_MINIMAL: &str = "minimal";
/// Shrinking stopped at its limit of candidate runs.
pub const SHRINK_RUNS: &str = "runs";
/// Shrinking stopped at its time budget (`--shrink-budget`, live runs).
pub const SHRINK_BUDGET: &str = "budget";

/// Counts of outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Totals {
    /// Cases run.
    pub scenarios: usize,
    /// Cases that passed.
    pub passed: usize,
    /// Cases with a violation.
    pub violated: usize,
    /// Cases the executor's own failure kept from being checked.
    pub executor_errors: usize,
    /// Hazards over every scenario (see [`Hazard`]).
    #[serde(default)]
    pub hazards: usize,
}

impl Totals {
    pub fn of(results: &[ScenarioResult]) -> Totals {
        let mut totals = Totals { scenarios: results.len(), ..Totals::default() };
        for r in results {
            totals.hazards += r.hazards.len();
            match r.outcome {
                Outcome::Passed => totals.passed += 1,
                Outcome::Violated => totals.violated += 1,
                Outcome::ExecutorError => totals.executor_errors += 1,
            }
        }
        totals
    }
}

/// What a run produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunResults {
    pub schema: String,
    pub tool_version: String,
    pub seed: u64,
    /// `sim` or `live`.
    pub driver: String,
    pub executor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// `--strict`: hazards fail the run as violations do.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub strict: bool,
    pub totals: Totals,
    pub results: Vec<ScenarioResult>,
}

impl RunResults {
    /// Whether the run fails: a violation or an executor error, or under `--strict` a hazard.
    pub fn failed(&self) -> bool {
        self.totals.violated + self.totals.executor_errors > 0 || self.strict && self.totals.hazards > 0
    }
}
