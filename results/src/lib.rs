//! The run's model: what a run produced, as `results.json` holds it (schema
//! [`RESULTS_SCHEMA`], documented in `docs/reports.md`). What a case observed ([`Observed`]:
//! the intents, the executor's claims, the ledgers' effects, the moments of the timeline), the
//! verdicts judged from it ([`Verdict`], [`Hazard`]) and the run that holds them
//! ([`RunResults`]). The runner and `twice serve` fill these in, the checker reads what was
//! observed and writes verdicts, and every report renders them and nothing else, so a report
//! can always be rebuilt from `results.json` alone. [`names`] makes file names from the names
//! these carry.

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

pub mod names;
mod observed;
mod schema;
mod verdict;

pub use observed::{Claim, EffectRef, INTENT_MOMENTS, Moment, Observed, Pending, Route, SettleWait};
pub use verdict::{Hazard, Status, Verdict};

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    /// Every row of `results.json` carries them, whatever its outcome, so that a reader finds
    /// a case's verdicts in one place. Files written before that named a passed case's list
    /// in `verdict_set` instead; reading fills this in from it.
    #[serde(default)]
    pub verdicts: Vec<Verdict>,
    /// Deprecated, goes away with the next schema version: a passed case's entry in the
    /// file's `verdict_sets`, which holds the same list as `verdicts` (files only).
    /// Still written so that a reader of earlier files keeps working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("deprecated" = true))]
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

pub(crate) fn is_zero(n: &u32) -> bool {
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
