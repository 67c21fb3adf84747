//! Shrinking: a failing generated case made as small as it can be while it still fails the
//! same way, within a number of candidate runs per failure and (live, where each candidate
//! costs seconds) a deadline for all of a run's failures together.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use scenarios::Scenario;
use scenarios::generate::ShrinkStop;

use crate::run::{Case, RunContext, run_case};
use results::{Outcome, SHRINK_BUDGET, SHRINK_MINIMAL, SHRINK_RUNS, ScenarioResult, Shrink, Source};

/// How far shrinking may go: candidate runs per failure, and (live) a deadline for all of it.
#[derive(Debug, Clone, Copy)]
pub struct ShrinkLimits {
    pub runs_max: usize,
    /// Shrinking stops at this instant, with what it found so far (`None`: no time budget, as
    /// in sim).
    pub deadline: Option<Instant>,
}

/// Hears about shrinking as it goes (the command line's progress).
pub trait ShrinkProgress: Sync {
    /// Shrinking `count` failures begins.
    fn started(&self, count: usize, deadline: Option<Instant>);
    /// `name` has a smaller failing scenario: `steps` steps, after `runs` candidate runs.
    fn smaller(&self, name: &str, steps: usize, runs: usize);
    /// Shrinking `name` ended.
    fn finished(&self, name: &str, shrink: &Shrink);
    /// Called on a thread of its own while shrinking goes on, until `done` is set: a place
    /// to say "still shrinking" when nothing else was said for a while.
    fn heartbeat(&self, done: &AtomicBool) {
        let _ = done;
    }
}

/// A [`ShrinkProgress`] that says nothing.
pub struct QuietShrink;

impl ShrinkProgress for QuietShrink {
    fn started(&self, _: usize, _: Option<Instant>) {}
    fn smaller(&self, _: &str, _: usize, _: usize) {}
    fn finished(&self, _: &str, _: &Shrink) {}
}

/// Shrinks generated case `index` of a run with `seed`, which failed: the smallest scenario
/// found that still fails the same way (breaks the first invariant, in the checker's order,
/// that the original broke, or, for an executor error, errs again), within `limits`, and how
/// far it got.
pub fn shrink_case(
    run: &RunContext<'_>,
    index: u64,
    limits: ShrinkLimits,
    progress: &dyn ShrinkProgress,
) -> Result<(Scenario, Shrink), String> {
    let run = run.unreplayed();
    let tree = scenarios::generate::case_tree(run.seed, index)?;
    let source = Source::Generated { index };
    let name = tree.current().name.clone();
    let steps_before = scenarios::generate::steps(&tree.current());
    let original = run_case(&Case { scenario: tree.current(), source: source.clone() }, &run);
    let broken =
        |r: &ScenarioResult| -> Vec<String> { r.violations().map(|v| v.invariant.clone()).collect() };
    // The first one only: a candidate that keeps a lesser violation and loses the headline one
    // would come back as a different failure.
    let wanted: Vec<String> = broken(&original).into_iter().take(1).collect();
    let mut runs = 0;
    let failing = |s: &Scenario| {
        if limits.deadline.is_some_and(|d| Instant::now() >= d) {
            return None;
        }
        let probe = Case { scenario: s.clone(), source: source.clone() };
        let result = run_case(&probe, &run);
        runs += 1;
        let fails = match (original.outcome, result.outcome) {
            (_, Outcome::Passed) | (Outcome::Passed, _) => false,
            (Outcome::ExecutorError, got) => got == Outcome::ExecutorError,
            _ => broken(&result).iter().any(|i| wanted.contains(i)),
        };
        if fails {
            progress.smaller(&name, scenarios::generate::steps(s), runs);
        }
        Some(fails)
    };
    let shrunk = scenarios::generate::shrink(tree, limits.runs_max, failing);
    let stopped = match shrunk.stopped {
        ShrinkStop::Minimal => SHRINK_MINIMAL,
        ShrinkStop::Runs => SHRINK_RUNS,
        ShrinkStop::Budget => SHRINK_BUDGET,
    };
    let shrink = Shrink {
        steps_before,
        steps_after: scenarios::generate::steps(&shrunk.scenario),
        runs: shrunk.runs,
        stopped: stopped.to_string(),
    };
    progress.finished(&name, &shrink);
    Ok((shrunk.scenario, shrink))
}

/// A failing case, by its position in the run, shrunk: the smallest failing scenario found and
/// how far shrinking got, or why it could not start.
pub type ShrunkCase = (usize, Result<(Scenario, Shrink), String>);

/// Shrinks every failing generated case of a run (by its results, in run order), up to `jobs` at a time, within `limits`; each gets its smallest failing scenario
/// and its [`Shrink`], or the error that kept it from shrinking.
pub fn shrink_failures(
    results: &[ScenarioResult],
    run: &RunContext<'_>,
    jobs: usize,
    limits: ShrinkLimits,
    progress: &dyn ShrinkProgress,
) -> Vec<ShrunkCase> {
    let failing: Vec<(usize, u64)> = results
        .iter()
        .enumerate()
        .filter_map(|(i, result)| match result.source {
            Source::Generated { index } if result.outcome != Outcome::Passed => Some((i, index)),
            _ => None,
        })
        .collect();
    if failing.is_empty() {
        return vec![];
    }
    progress.started(failing.len(), limits.deadline);
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<ShrunkCase>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.clamp(1, failing.len()) {
            scope.spawn(|| {
                while let Some((i, index)) = failing.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let shrunk = shrink_case(run, *index, limits, progress);
                    out.lock().unwrap_or_else(|p| p.into_inner()).push((*i, shrunk));
                }
            });
        }
    });
    let mut out = out.into_inner().unwrap_or_else(|p| p.into_inner());
    out.sort_by_key(|(i, _)| *i);
    out
}
