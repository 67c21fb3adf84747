//! `twice check-executor CMD`: a conformance kit for executors written by others.
//!
//! First the protocol rules of `twice/1` (`docs/protocol.md`), each a named check with a
//! one-line verdict. Every check is a short session of its own: a fresh process of `CMD` in
//! its own process group, on its own state directory, against the fakes on loopback (an
//! `init` needs real service URLs). Every line is awaited within a bound and the process group
//! is killed when the check ends, so an executor that stays silent, writes garbage, dies
//! mid-line or hangs costs one bound, never a hung harness. `init-answered` runs first; the
//! other rules need a working `init` and run side by side.
//!
//! Then, when `init` works, the catalog (narrowed with `--scenario`, plus `--cases` generated
//! cases) in the live driver, and the conformance table: one row per action the executor
//! announced (and per action the scenarios use that it did not announce), one column per
//! failure mode (the catalog's `failure_mode` slugs), each cell `passed`,
//! `violated (INVARIANTS)`, `unsupported`, or `-` where no scenario combines them.
//!
//! A scenario's verdicts belong to the whole scenario, so a scenario that uses two actions
//! counts for both rows (the checker does not tell which intent broke an invariant).

// What the crate does not export is `pub(crate)`, so that its API is what it says it is.
#![warn(unreachable_pub)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fake_services::{Fakes, Server};
use scenarios::{IntentSpec, Scenario};
use serde::Serialize;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use vocabulary::Clock;
use vocabulary::State;
use vocabulary::TokioClock;

use results::{Outcome, ScenarioResult, Source};
use runner::exit;
use runner::live;
use runner::pipeline::{self, Executor, RunPlan, Selection};
use runner::process::{self, Ending, ExecutorCommand, Frame, Out, Process, WriteError, describe, excerpt};
use runner::run::{self, Case, Progress};
use runner::setup;
use runner::shrink::QuietShrink;
use runner::world::World;

/// `init_ok` must come this soon after `init` (docs/protocol.md §9).
pub const INIT_MS_MAX: u64 = live::INIT_MS_MAX;
/// Every other reply of a check but the probe drain's (§9: `propose_ok`, `status_ok`).
pub const REPLY_MS_MAX: u64 = live::REPLY_MS_MAX;
/// The process must have exited this soon after `shutdown_ok` (§9).
pub const EXIT_AFTER_SHUTDOWN_MS_MAX: u64 = live::SHUTDOWN_MS_MAX;
/// The `timeout_ms` of the drain `replies-well-formed` asks for.
pub const PROBE_DRAIN_MS: u64 = 2_000;
/// Added to a drain's `timeout_ms` for its reply (§9: the drain's `timeout_ms` + 5 s).
const DRAIN_REPLY_SLACK_MS: u64 = 5_000;
/// After its last reply, `replies-well-formed` wants stdout quiet this long: a line then is one
/// nobody asked for.
pub const QUIET_MS: u64 = 300;
/// Stdout lines read ahead of the check that consumes them; an executor that floods stdout
/// waits for the check instead of growing the harness.
const QUEUED_LINES_MAX: usize = 64;
/// How many characters of a process's stderr (its newest) a verdict quotes.
const STDERR_QUOTE_CHARS_MAX: usize = 300;
/// How much of a rule's detail `conformance.md` keeps (a table cell, one line).
const DETAIL_CHARS_MAX: usize = 300;
/// Stopping the fakes' servers after the checks.
const SERVER_STOP_MS_MAX: u64 = 5_000;
/// The worker id of every check; a restart keeps it, as after a crash in a scenario.
const WORKER: &str = scenarios::model::FIRST_WORKER;
/// The table's column for generated cases, which have no failure mode.
pub const GENERATED_COLUMN: &str = "generated";
/// The table's column for scenario files without a `failure_mode`.
pub const UNCLASSIFIED_COLUMN: &str = "unclassified";
/// The files `check-executor` writes next to the usual report files.
pub const CONFORMANCE_MD: &str = "conformance.md";
pub const CONFORMANCE_JSON: &str = "conformance.json";
/// The version of `conformance.json`'s shape.
pub const CONFORMANCE_SCHEMA: &str = "twice.conformance/1";

mod checks;
mod rules;
mod session;
mod table;

pub use checks::*;
pub use rules::*;
use session::*;
pub use table::*;

/// What the catalog part did.
#[derive(Debug, Clone, Serialize)]
pub struct Catalog {
    pub ran: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
    pub scenarios: usize,
    pub passed: usize,
    pub violated: usize,
    pub executor_errors: usize,
    /// Hazards over all scenarios.
    pub hazards: usize,
    /// One line per kind of hazard seen: what it is, how often, what would exploit it and the
    /// command that runs that scenario.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hazard_kinds: Vec<HazardKind>,
}

impl Catalog {
    /// The catalog before it ran (or when it cannot run: `skipped` says why).
    fn not_run(skipped: Option<String>) -> Catalog {
        Catalog {
            ran: false,
            skipped,
            scenarios: 0,
            passed: 0,
            violated: 0,
            executor_errors: 0,
            hazards: 0,
            hazard_kinds: Vec::new(),
        }
    }
}

/// A kind of hazard a catalog run showed.
#[derive(Debug, Clone, Serialize)]
pub struct HazardKind {
    pub kind: String,
    /// Scenarios that showed it.
    pub scenarios: usize,
    /// One example of what was seen.
    pub example: String,
    pub exploited_by: String,
    pub command: String,
}

/// `conformance.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Conformance {
    pub schema: &'static str,
    pub tool_version: &'static str,
    pub executor: String,
    pub seed: u64,
    pub init: Init,
    pub rules: Vec<RuleVerdict>,
    pub catalog: Catalog,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<Table>,
    /// `--strict`: hazards fail the check as violations do.
    pub strict: bool,
}

impl Conformance {
    pub fn failed(&self) -> bool {
        self.rules.iter().any(|r| r.status == Status::Failed)
            || self.catalog.violated + self.catalog.executor_errors > 0
            || self.strict && self.catalog.hazards > 0
    }

    /// The rules' verdicts for a terminal: one line each, and for a failure what was expected
    /// and what came.
    pub fn rules_text(&self) -> String {
        let width = RULES.iter().map(|r| r.name.len()).max().unwrap_or(0);
        let mut out = format!(
            "protocol rules ({}, docs/protocol.md) against {}:\n",
            vocabulary::protocol::PROTOCOL,
            self.executor
        );
        for v in &self.rules {
            match v.status {
                Status::Failed => {
                    out.push_str(&format!(
                        "  {} {:<width$}  expected: {}\n",
                        v.status.label(),
                        v.rule,
                        v.expected
                    ));
                    out.push_str(&format!("       {:<width$}  came: {}\n", "", v.detail));
                }
                _ => out.push_str(&format!("  {} {:<width$}  {}\n", v.status.label(), v.rule, v.detail)),
            }
        }
        out
    }

    pub fn markdown(&self) -> String {
        use reports::summary::cell;
        let mut out = format!("# twice check-executor\n\nExecutor: {}", cell(&self.executor));
        if let (Some(name), Some(version)) = (&self.init.name, &self.init.version) {
            out.push_str(&format!(" ({} {})", cell(name), cell(version)));
        }
        out.push_str(&format!(
            ", seed {}.\n\n## Protocol rules ({})\n\n",
            self.seed,
            vocabulary::protocol::PROTOCOL
        ));
        out.push_str("| rule | verdict | detail | expected |\n|---|---|---|---|\n");
        for v in &self.rules {
            // What was expected matters only where something else came.
            let expected = if v.status == Status::Failed { cell(v.expected) } else { String::new() };
            out.push_str(&format!(
                "| `{}` | {} | {} | {expected} |\n",
                v.rule,
                v.status.word(),
                cell(&reports::summary::one_line(&v.detail, DETAIL_CHARS_MAX))
            ));
        }
        out.push_str("\n## Catalog\n\n");
        match &self.catalog.skipped {
            Some(why) => out.push_str(&format!("Not run: {why}.\n")),
            None => out.push_str(&format!(
                "{} scenarios: {} passed, {} violated, {} executor errors; {} hazards{}.\n",
                self.catalog.scenarios,
                self.catalog.passed,
                self.catalog.violated,
                self.catalog.executor_errors,
                self.catalog.hazards,
                if self.strict { " (`--strict`: hazards fail the check)" } else { "" }
            )),
        }
        if let Some(table) = &self.table {
            out.push('\n');
            out.push_str(&table.markdown());
        }
        if !self.catalog.hazard_kinds.is_empty() {
            out.push_str(
                "\n## Hazards\n\nSafeguards the contracts offered that the executor did not use, where nothing \
                 in the scenario exploited them: no harm happened, so they are not violations.\n\n\
                 | hazard | scenarios | example | exploited by | command |\n|---|---|---|---|---|\n",
            );
            for h in &self.catalog.hazard_kinds {
                out.push_str(&format!(
                    "| `{}` | {} | {} | `{}` | {} |\n",
                    h.kind,
                    h.scenarios,
                    cell(&reports::summary::one_line(&h.example, DETAIL_CHARS_MAX)),
                    h.exploited_by,
                    cell(&h.command)
                ));
            }
        }
        out
    }
}

/// The kinds of hazard in `results`, in order of their first appearance.
fn hazard_kinds(results: &[ScenarioResult]) -> Vec<HazardKind> {
    let mut kinds: Vec<HazardKind> = Vec::new();
    for result in results {
        let mut seen = BTreeSet::new();
        for hazard in &result.hazards {
            let first_here = seen.insert(hazard.kind.as_str());
            match kinds.iter_mut().find(|k| k.kind == hazard.kind) {
                Some(kind) => kind.scenarios += usize::from(first_here),
                None => kinds.push(HazardKind {
                    kind: hazard.kind.clone(),
                    scenarios: 1,
                    example: hazard.detail.clone(),
                    exploited_by: hazard.exploited_by.clone(),
                    command: hazard.command.clone(),
                }),
            }
        }
    }
    kinds
}

/// What `twice check-executor` checks.
#[derive(Debug, Clone)]
pub struct CheckPlan {
    /// The executor's command line.
    pub executor: String,
    pub selection: Selection,
    pub seed: u64,
    /// Where the report goes: the usual files plus conformance.md and conformance.json.
    pub report_dir: PathBuf,
    /// Scenarios at once (`None`: [`pipeline::LIVE_JOBS_DEFAULT`]).
    pub jobs: Option<usize>,
    /// Hazards fail the run as violations do.
    pub strict: bool,
}

/// `twice check-executor CMD`: the protocol rules, then (when `init` works) the plan's
/// scenarios in the live driver, then the conformance table; prints them and writes the
/// report. Returns the exit code.
pub fn check_executor(plan: &CheckPlan, progress: &dyn Progress) -> anyhow::Result<i32> {
    let started = std::time::Instant::now();
    let command = ExecutorCommand::parse(&plan.executor).map_err(anyhow::Error::msg)?;
    // Scenario names are checked before anything runs: a typo costs no protocol checks.
    pipeline::select(&plan.selection, plan.seed, true)?;
    let work = runner::workdir::WorkDir::create("twice-check-")?;
    progress.note(&format!("checking {} protocol rules against {command}", RULES.len()));
    let protocol = checked_protocol(&command, &work.path().join("protocol"), plan.seed)?;
    let mut report = Conformance {
        schema: CONFORMANCE_SCHEMA,
        tool_version: env!("CARGO_PKG_VERSION"),
        executor: command.to_string(),
        seed: plan.seed,
        init: protocol.init.clone(),
        rules: protocol.verdicts,
        strict: plan.strict,
        catalog: Catalog::not_run(None),
        table: None,
    };
    print!("{}", report.rules_text());
    let mut files = vec![CONFORMANCE_MD, CONFORMANCE_JSON];
    if protocol.init.works {
        run_catalog(plan, progress, &mut report)?;
        files.extend([reports::RESULTS_FILE, reports::SUMMARY_FILE, reports::JUNIT_FILE, reports::HTML_FILE]);
    } else {
        let why = "init does not work (see init-answered), so the live driver cannot run it";
        report.catalog.skipped = Some(why.into());
        println!("\ncatalog: not run: {why}");
    }
    if let Some(table) = &report.table {
        println!("\nconformance (failure mode x action):\n\n{}", table.markdown());
    }
    write_conformance(&report, &plan.report_dir)?;
    drop(work);
    println!(
        "report: {} ({}; {:.1} s)",
        plan.report_dir.display(),
        files.join(", "),
        started.elapsed().as_secs_f64()
    );
    Ok(if report.failed() { exit::VIOLATION } else { exit::OK })
}

/// The protocol rules checked on a runtime of their own, gone before the catalog's live runs
/// make theirs (runtimes cannot nest).
fn checked_protocol(command: &ExecutorCommand, dir: &std::path::Path, seed: u64) -> anyhow::Result<Protocol> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(check_protocol(command, dir, seed))
}

/// The plan's scenarios in the live driver: the catalog's totals and the conformance table
/// into `report`, the run's own report files written, its summary printed.
fn run_catalog(plan: &CheckPlan, progress: &dyn Progress, report: &mut Conformance) -> anyhow::Result<()> {
    let run_plan = RunPlan {
        executor: Executor::Command(plan.executor.clone()),
        selection: plan.selection.clone(),
        seed: plan.seed,
        shard: None,
        jobs: plan.jobs,
        strict: plan.strict,
        shrink_budget_s: None,
        shrink: false,
        report_dir: plan.report_dir.clone(),
    };
    let ran = pipeline::execute(&run_plan, progress, &QuietShrink)?;
    let run = ran.results;
    let t = &run.totals;
    report.catalog = Catalog {
        ran: true,
        skipped: None,
        scenarios: t.scenarios,
        passed: t.passed,
        violated: t.violated,
        executor_errors: t.executor_errors,
        hazards: t.hazards,
        hazard_kinds: hazard_kinds(&run.results),
    };
    let cases = ran
        .cases
        .iter()
        .map(|spec| spec.make().map(std::borrow::Cow::into_owned))
        .collect::<Result<Vec<_>, String>>()
        .map_err(anyhow::Error::msg)?;
    report.table = Some(table(&report.init, &cases, &run.results));
    pipeline::report(&run, &plan.report_dir)?;
    print!("\n{}", run::summary(&run));
    Ok(())
}

/// `conformance.md` and `conformance.json` into the report directory.
fn write_conformance(report: &Conformance, dir: &std::path::Path) -> anyhow::Result<()> {
    runner::interrupt::make_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let md = dir.join(CONFORMANCE_MD);
    std::fs::write(&md, report.markdown()).with_context(|| format!("cannot write {}", md.display()))?;
    let json_path = dir.join(CONFORMANCE_JSON);
    let json_text = serde_json::to_string(report).context("cannot render conformance.json")?;
    std::fs::write(&json_path, json_text).with_context(|| format!("cannot write {}", json_path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init(actions: &[&str]) -> Init {
        Init {
            works: true,
            name: None,
            version: None,
            actions: actions.iter().map(|a| a.to_string()).collect(),
        }
    }

    fn case(name: &str, mode: Option<&str>, actions: &[&str]) -> Case {
        let intents: Vec<Value> = actions
            .iter()
            .enumerate()
            .map(|(i, a)| json!({"id": format!("i{i}"), "action": a, "params": {}}))
            .collect();
        let scenario: Scenario =
            serde_json::from_value(json!({"name": name, "failure_mode": mode, "intents": intents})).unwrap();
        Case { scenario, source: Source::Catalog }
    }

    fn result(name: &str, violated: &[&str], unsupported: &[&str]) -> ScenarioResult {
        let mut r: ScenarioResult = serde_json::from_value(json!({
            "name": name, "position": 0, "source": {"kind": "catalog"}, "seed": 1,
            "outcome": if violated.is_empty() { "passed" } else { "violated" },
            "verdicts": violated.iter().map(|v| json!({"invariant": v, "held": false, "evidence": ["x"]})).collect::<Vec<_>>(),
            "claims": [], "intents": [], "effects": {}, "faults_applied": [], "events": [], "replay": "",
            "observed": results::Observed::default(),
        }))
        .unwrap();
        r.observed.unsupported = unsupported.iter().map(|a| a.to_string()).collect();
        r
    }

    #[test]
    fn the_table_has_a_cell_per_action_and_mode_and_dashes_elsewhere() {
        let cases = [
            case("a", Some("lost_reply"), &["payments.refund"]),
            case("b", Some("partial_retry"), &["payments.refund", "workspaces.create"]),
            case("c", Some("lost_reply"), &["payments.refund"]),
        ];
        let results = [
            result("a", &[], &[]),
            result("b", &[], &["workspaces.create"]),
            result("c", &["no-duplicate-effect", "liveness"], &[]),
        ];
        let t = table(&init(&["payments.refund", "files.put"]), &cases, &results);
        assert_eq!(t.failure_modes, ["lost_reply", "partial_retry"]);
        let rows: Vec<(&str, bool)> = t.rows.iter().map(|r| (r.action.as_str(), r.announced)).collect();
        assert_eq!(rows, [("files.put", true), ("payments.refund", true), ("workspaces.create", false)]);
        let md = t.markdown();
        assert!(
            md.starts_with("| failure mode | `files.put` | `payments.refund` | `workspaces.create` |"),
            "{md}"
        );
        assert!(md.contains("| lost_reply | - | violated (liveness, no-duplicate-effect) | - |"), "{md}");
        assert!(md.contains("| partial_retry | - | passed | unsupported |"), "{md}");
        assert_eq!(t.rows[1].cells["lost_reply"].scenarios, ["a", "c"]);

        // A skipped safeguard that nothing exploited shows beside the verdict, never as one.
        let mut hazardous = result("a", &[], &[]);
        hazardous.hazards = vec![results::Hazard {
            kind: "no-fencing-token".into(),
            service: "workspaces".into(),
            intent: None,
            detail: "created without a Fencing-Token".into(),
            exploited_by: "stale_worker_overwrite".into(),
            command: "twice run --scenario stale_worker_overwrite".into(),
        }];
        let t = table(&init(&["payments.refund"]), &cases[..1], &[hazardous]);
        assert!(
            t.markdown().contains("| lost_reply | passed (hazard: no-fencing-token) |"),
            "{}",
            t.markdown()
        );
    }

    #[test]
    fn init_ok_needs_an_executor_and_a_list_of_actions() {
        let shape = |v: Value| init_ok_problem(v.as_object().unwrap());
        assert_eq!(shape(json!({"executor": {"name": "x", "version": "1"}, "actions": ["a"]})), None);
        assert!(shape(json!({"executor": {"name": "x"}, "actions": []})).is_some());
        assert!(shape(json!({"executor": {"name": "x", "version": "1"}})).is_some());
        assert!(shape(json!({"executor": {"name": "x", "version": "1"}, "actions": [1]})).is_some());
        assert!(shape(json!({"actions": []})).is_some());
    }

    #[test]
    fn rules_have_unique_names() {
        let names: BTreeSet<&str> = RULES.iter().map(|r| r.name).collect();
        assert_eq!(names.len(), RULES.len());
    }
}
