//! Regression baselines: a canonical trace of each scenario's behaviour, committed, and
//! compared with later runs.
//!
//! A [`Trace`] keeps what a change in an executor's behaviour would change and nothing that
//! varies between identical runs: the outcome, the invariants violated, and per intent the
//! final state, the attempts and the effects attributed to it, plus the effects per service.
//! No wall-clock time, no idempotency key, no object id (they differ between live runs).
//!
//! A baseline directory holds one `<scenario>.json` trace per scenario and a
//! [`BASELINE_FILE`] naming the run it came from. [`compare`] lists every scenario whose trace
//! changed. A change is a *regression* unless it is a fix (the baseline failed and the run
//! passes); a scenario the baseline lacks is a regression only if it failed; a baseline
//! scenario the run did not include (a filter, a shard) is counted, not judged. Violations the
//! baseline already records are known and do not count again.
//!
//! A live run compared with a live baseline reports a change only in what is stable live: the
//! outcome, the invariants violated, final states and effect counts. How many attempts an
//! intent took is left out there, because live it depends on timing (a reply that arrives
//! just before or just after the request timeout); the sim driver is deterministic, so a sim
//! comparison (or a mixed one) still compares attempts exactly.
//!
//! Only violations enter a trace: a verdict that was not judged is not one (it did not fail),
//! and hazards stay out altogether (nothing broke).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::ReportError;
use results::{Outcome, RunResults, ScenarioResult, Source};

/// The file that describes a baseline directory.
pub const BASELINE_FILE: &str = "baseline.json";
/// Its format.
pub const BASELINE_SCHEMA: &str = "twice.baseline/1";

/// The run a baseline came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaselineMeta {
    pub schema: String,
    pub seed: u64,
    pub driver: String,
    pub executor: String,
}

/// One intent's behaviour.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IntentTrace {
    pub id: String,
    /// The final state; `None` when the executor never reported the intent.
    pub state: Option<String>,
    pub attempts: Option<u64>,
    /// Effects attributed to it.
    pub effects: usize,
}

/// One scenario's behaviour, canonical: the same behaviour gives the same trace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trace {
    pub scenario: String,
    pub source: Source,
    pub outcome: Outcome,
    /// The invariants that did not hold, in checker order.
    pub violated: Vec<String>,
    pub intents: Vec<IntentTrace>,
    /// Effects per service, attributed or not.
    pub effects: BTreeMap<String, usize>,
}

impl Trace {
    pub fn of(result: &ScenarioResult) -> Trace {
        Trace {
            scenario: result.name.clone(),
            source: result.source.clone(),
            outcome: result.outcome,
            violated: result.violations().map(|v| v.invariant.clone()).collect(),
            // From the intents of a failed case, or the summary of a passed (compact) one:
            // both hold every field a trace compares.
            intents: result
                .intent_briefs()
                .into_iter()
                .map(|i| IntentTrace { id: i.id, state: i.state, attempts: i.attempts, effects: i.effects })
                .collect(),
            effects: result.effects.clone(),
        }
    }

    /// A few lines for people and for snapshot diffs.
    pub fn to_text(&self) -> String {
        let mut out = format!("{}: {}", self.scenario, self.outcome.as_str());
        if !self.violated.is_empty() {
            let _ = write!(out, " ({})", self.violated.join(", "));
        }
        out.push('\n');
        for i in &self.intents {
            let _ = writeln!(
                out,
                "  {}: {}, attempts {}, effects {}",
                i.id,
                i.state.as_deref().unwrap_or("(not reported)"),
                i.attempts.map(|a| a.to_string()).unwrap_or_else(|| "-".into()),
                i.effects
            );
        }
        let ledgers: Vec<String> = self.effects.iter().map(|(s, n)| format!("{s} {n}")).collect();
        let _ =
            writeln!(out, "  ledgers: {}", if ledgers.is_empty() { "-".into() } else { ledgers.join(", ") });
        out
    }
}

/// The traces of a whole run, as one text (for snapshots).
pub fn traces_text(run: &RunResults) -> String {
    run.results.iter().map(|r| Trace::of(r).to_text()).collect::<Vec<_>>().join("\n")
}

/// A file name for a scenario's trace: `results::names::file_name_part`, so that a results
/// file's names (which anyone may write) cannot reach outside the baseline directory.
fn file_name(scenario: &str) -> String {
    format!("{}.json", results::names::file_name_part(scenario))
}

/// A saved baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Baseline {
    pub meta: BaselineMeta,
    pub traces: BTreeMap<String, Trace>,
}

/// Reads a baseline directory.
pub fn read(dir: &Path) -> Result<Baseline, ReportError> {
    let meta_path = dir.join(BASELINE_FILE);
    let text = std::fs::read_to_string(&meta_path).map_err(|e| ReportError::io(&meta_path, e))?;
    let meta: BaselineMeta =
        serde_json::from_str(&text).map_err(|e| ReportError::Json { path: meta_path.clone(), source: e })?;
    if meta.schema != BASELINE_SCHEMA {
        return Err(ReportError::Invalid(format!(
            "{}: baseline schema \"{}\", this twice reads \"{BASELINE_SCHEMA}\"",
            meta_path.display(),
            meta.schema
        )));
    }
    let mut traces = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| ReportError::io(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| ReportError::io(dir, e))?.path();
        if path.extension().is_none_or(|e| e != "json") || path.file_name() == Some(BASELINE_FILE.as_ref()) {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|e| ReportError::io(&path, e))?;
        let trace: Trace =
            serde_json::from_str(&text).map_err(|e| ReportError::Json { path: path.clone(), source: e })?;
        traces.insert(trace.scenario.clone(), trace);
    }
    Ok(Baseline { meta, traces })
}

/// Writes the run's traces as the baseline in `dir`, removing traces of scenarios the run no
/// longer has. Refuses a sharded run: it holds only part of the scenarios.
pub fn write(dir: &Path, run: &RunResults) -> Result<usize, ReportError> {
    if let Some(shard) = run.shard {
        return Err(ReportError::Invalid(format!(
            "a baseline needs the whole run; this one is shard {shard} (merge the shards first)"
        )));
    }
    let mut files = BTreeMap::new();
    for result in &run.results {
        let name = file_name(&result.name);
        if let Some(other) = files.insert(name.clone(), result.name.clone()) {
            return Err(ReportError::Invalid(format!(
                "scenarios \"{other}\" and \"{}\" would share the baseline file {name}: give them different names",
                result.name
            )));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| ReportError::io(dir, e))?;
    let entries = std::fs::read_dir(dir).map_err(|e| ReportError::io(dir, e))?;
    for entry in entries {
        let path = entry.map_err(|e| ReportError::io(dir, e))?.path();
        let stale = path.extension().is_some_and(|e| e == "json")
            && path.file_name().and_then(|n| n.to_str()).is_some_and(|n| !files.contains_key(n));
        if stale {
            std::fs::remove_file(&path).map_err(|e| ReportError::io(&path, e))?;
        }
    }
    let meta = BaselineMeta {
        schema: BASELINE_SCHEMA.into(),
        seed: run.seed,
        driver: run.driver.clone(),
        executor: run.executor.clone(),
    };
    write_json(&dir.join(BASELINE_FILE), &meta)?;
    for result in &run.results {
        write_json(&dir.join(file_name(&result.name)), &Trace::of(result))?;
    }
    Ok(run.results.len())
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), ReportError> {
    let mut text = serde_json::to_string_pretty(value)
        .map_err(|e| ReportError::Invalid(format!("cannot serialize {}: {e}", path.display())))?;
    text.push('\n');
    std::fs::write(path, text).map_err(|e| ReportError::io(path, e))
}

/// How one scenario's behaviour differs from its baseline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioChange {
    pub scenario: String,
    /// Not a fix: counts against the run.
    pub regression: bool,
    /// One line per difference, e.g. `refund-1: attempts 1 -> 2`.
    pub differences: Vec<String>,
}

/// A run compared with a baseline.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Scenarios whose behaviour changed, in run order.
    pub changed: Vec<ScenarioChange>,
    pub unchanged: usize,
    /// Scenarios the baseline lacks that passed.
    pub new_passed: usize,
    /// Baseline scenarios the run did not include.
    pub not_run: usize,
}

impl Comparison {
    pub fn regressions(&self) -> usize {
        self.changed.iter().filter(|c| c.regression).count()
    }

    /// What changed, for the terminal.
    pub fn render(&self, baseline: &str) -> String {
        let mut out = format!(
            "baseline {baseline}: {} unchanged, {} changed ({} regressions)",
            self.unchanged,
            self.changed.len(),
            self.regressions()
        );
        if self.new_passed > 0 {
            let _ = write!(out, ", {} new scenarios passed", self.new_passed);
        }
        if self.not_run > 0 {
            let _ = write!(out, ", {} baseline scenarios not run", self.not_run);
        }
        out.push('\n');
        for change in &self.changed {
            let tag = if change.regression { "REGRESSION" } else { "fixed" };
            let _ = writeln!(out, "  {tag:<10} {}", change.scenario);
            for d in &change.differences {
                let _ = writeln!(out, "             {d}");
            }
        }
        out
    }
}

/// Compares a run with a baseline; errs when they cannot be compared (another seed, so other
/// generated scenarios).
pub fn compare(baseline: &Baseline, run: &RunResults) -> Result<Comparison, ReportError> {
    if baseline.meta.seed != run.seed {
        return Err(ReportError::Invalid(format!(
            "the baseline was recorded with seed {}, this run used seed {}: run with --seed {}",
            baseline.meta.seed, run.seed, baseline.meta.seed
        )));
    }
    let compare_attempts = !(baseline.meta.driver == LIVE_DRIVER && run.driver == LIVE_DRIVER);
    let mut comparison = Comparison::default();
    let mut seen = 0;
    for result in &run.results {
        let now = Trace::of(result);
        let Some(before) = baseline.traces.get(&result.name) else {
            if now.outcome == Outcome::Passed {
                comparison.new_passed += 1;
            } else {
                comparison.changed.push(ScenarioChange {
                    scenario: now.scenario.clone(),
                    regression: true,
                    differences: vec![format!(
                        "not in the baseline, and {}: {}",
                        now.outcome.as_str(),
                        now.violated.join(", ")
                    )],
                });
            }
            continue;
        };
        seen += 1;
        let differences = differences(before, &now, compare_attempts);
        if differences.is_empty() {
            comparison.unchanged += 1;
            continue;
        }
        let fixed = before.outcome != Outcome::Passed && now.outcome == Outcome::Passed;
        comparison.changed.push(ScenarioChange {
            scenario: now.scenario.clone(),
            regression: !fixed,
            differences,
        });
    }
    comparison.not_run = baseline.traces.len() - seen;
    Ok(comparison)
}

/// The driver whose attempt counts vary between identical runs.
const LIVE_DRIVER: &str = "live";

/// Every difference between two traces of one scenario; attempts only when `compare_attempts`.
fn differences(before: &Trace, now: &Trace, compare_attempts: bool) -> Vec<String> {
    let mut out = Vec::new();
    if before.outcome != now.outcome {
        out.push(format!("outcome {} -> {}", before.outcome.as_str(), now.outcome.as_str()));
    }
    let newly: Vec<&str> =
        now.violated.iter().filter(|v| !before.violated.contains(v)).map(String::as_str).collect();
    if !newly.is_empty() {
        out.push(format!("new violation: {}", newly.join(", ")));
    }
    let fixed: Vec<&str> =
        before.violated.iter().filter(|v| !now.violated.contains(v)).map(String::as_str).collect();
    if !fixed.is_empty() {
        out.push(format!("no longer violated: {}", fixed.join(", ")));
    }
    let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "(not reported)".into());
    let show_n = |v: &Option<u64>| v.map(|n| n.to_string()).unwrap_or_else(|| "-".into());
    let now_intents: BTreeMap<&str, &IntentTrace> = now.intents.iter().map(|i| (i.id.as_str(), i)).collect();
    for b in &before.intents {
        let Some(n) = now_intents.get(b.id.as_str()) else {
            out.push(format!("{}: gone from the scenario", b.id));
            continue;
        };
        if b.state != n.state {
            out.push(format!("{}: state {} -> {}", b.id, show(&b.state), show(&n.state)));
        }
        if compare_attempts && b.attempts != n.attempts {
            out.push(format!("{}: attempts {} -> {}", b.id, show_n(&b.attempts), show_n(&n.attempts)));
        }
        if b.effects != n.effects {
            out.push(format!("{}: effects {} -> {}", b.id, b.effects, n.effects));
        }
    }
    for n in &now.intents {
        if !before.intents.iter().any(|b| b.id == n.id) {
            out.push(format!("{}: new in the scenario", n.id));
        }
    }
    if before.effects != now.effects {
        let show = |m: &BTreeMap<String, usize>| {
            m.iter().map(|(s, n)| format!("{s} {n}")).collect::<Vec<_>>().join(", ")
        };
        out.push(format!("ledgers: {} -> {}", show(&before.effects), show(&now.effects)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use results::{EffectRef, Hazard, IntentResult, Observed, RESULTS_SCHEMA, Totals, Verdict};

    /// A scenario with one refund intent in `state` after `attempts` sends, with `effects`
    /// effects, and `verdicts` from the checker.
    fn scenario(state: &str, attempts: u64, effects: usize, verdicts: Vec<Verdict>) -> ScenarioResult {
        let outcome =
            if verdicts.iter().any(Verdict::violated) { Outcome::Violated } else { Outcome::Passed };
        ScenarioResult {
            name: "refund".into(),
            position: 0,
            source: Source::Catalog,
            seed: 3,
            outcome,
            verdicts,
            claims: vec![],
            intents: vec![IntentResult {
                id: "refund-1".into(),
                action: "payments.refund".into(),
                state: Some(state.into()),
                attempts: Some(attempts),
                effects: (1..=effects as u64)
                    .map(|seq| EffectRef {
                        service: "payments".into(),
                        seq,
                        object_id: format!("re_{seq}"),
                        at_ms: seq,
                    })
                    .collect(),
                unsupported: false,
                after: vec![],
            }],
            effects: BTreeMap::from([("payments".to_string(), effects)]),
            faults_applied: vec![],
            events: vec![],
            replay: "twice run --scenario refund".into(),
            hazards: vec![],
            shrunk: None,
            shrink: None,
            verdict_set: None,
            summary: None,
            observed: Observed::default(),
        }
    }

    fn held() -> Vec<Verdict> {
        vec![Verdict::from_evidence("no-duplicate-effect", vec![])]
    }

    fn run(driver: &str, result: ScenarioResult) -> RunResults {
        let results = vec![result];
        RunResults {
            schema: RESULTS_SCHEMA.into(),
            tool_version: "0.1.0".into(),
            seed: 1,
            driver: driver.into(),
            executor: "test executor".into(),
            shard: None,
            strict: false,
            totals: Totals::of(&results),
            results,
        }
    }

    fn baseline_of(run: &RunResults) -> Baseline {
        Baseline {
            meta: BaselineMeta {
                schema: BASELINE_SCHEMA.into(),
                seed: run.seed,
                driver: run.driver.clone(),
                executor: run.executor.clone(),
            },
            traces: run.results.iter().map(|r| (r.name.clone(), Trace::of(r))).collect(),
        }
    }

    /// (changed scenarios, regressions, every difference) of `after` against a baseline of
    /// `before`.
    fn compared(before: &RunResults, after: &RunResults) -> (usize, usize, Vec<String>) {
        let c = compare(&baseline_of(before), after).expect("same seed");
        let differences = c.changed.iter().flat_map(|s| s.differences.clone()).collect();
        (c.changed.len(), c.regressions(), differences)
    }

    #[test]
    fn live_attempts_alone_are_no_change() {
        let before = run("live", scenario("confirmed", 1, 1, held()));
        let after = run("live", scenario("confirmed", 3, 1, held()));
        assert_eq!(compared(&before, &after), (0, 0, vec![]));
    }

    #[test]
    fn sim_attempts_are_a_change() {
        let before = run("sim", scenario("confirmed", 1, 1, held()));
        let after = run("sim", scenario("confirmed", 3, 1, held()));
        assert_eq!(compared(&before, &after), (1, 1, vec!["refund-1: attempts 1 -> 3".to_string()]));
        // A live run against a sim baseline is not the live rule's case: attempts still count.
        let live = run("live", scenario("confirmed", 3, 1, held()));
        assert_eq!(compared(&before, &live).0, 1);
    }

    #[test]
    fn a_live_final_state_or_effect_count_is_a_regression() {
        let before = run("live", scenario("confirmed", 1, 1, held()));
        let after = run("live", scenario("failed", 2, 0, held()));
        let (changed, regressions, differences) = compared(&before, &after);
        assert_eq!((changed, regressions), (1, 1));
        // The attempts differ too, and are left out as they would be alone.
        assert_eq!(
            differences,
            [
                "refund-1: state confirmed -> failed",
                "refund-1: effects 1 -> 0",
                "ledgers: payments 1 -> payments 0"
            ]
        );
    }

    #[test]
    fn not_judged_verdicts_and_hazards_stay_out_of_traces() {
        let plain = scenario("confirmed", 1, 1, held());
        let mut other = plain.clone();
        other.verdicts.push(Verdict::not_judged("no-stale-write", "no second writer in this run"));
        other.hazards.push(Hazard {
            kind: "no-fencing-token".into(),
            service: "payments".into(),
            intent: Some("refund-1".into()),
            detail: "POST /v1/refunds without a fencing token".into(),
            exploited_by: "zombie_worker".into(),
            command: "twice run --scenario zombie_worker".into(),
        });
        assert_eq!(Trace::of(&other), Trace::of(&plain));
        assert!(Trace::of(&other).violated.is_empty());
    }
}
