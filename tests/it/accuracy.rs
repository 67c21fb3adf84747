//! Accuracy: every verdict must hold whatever honest choices an executor makes, and every
//! catalog scenario must catch the mistake it names whatever timing a careful executor picks.
//!
//! - **The grid.** The timing choices a careful executor makes for itself, within the limits
//!   the scenario announces: its request timeout, the safety margin it adds to the settle and
//!   read-lag bounds, its backoff between attempts, its lease and its pause between passes.
//!   Each is tried at three settings (the executor's defaults, a shorter and a longer or
//!   shorter one), one at a time, and all short and all long together: [`GRID`].
//! - **Mutants.** Each mutant of `mutant_table.rs`, against the catalog scenarios of its own
//!   failure mode, must be caught with the invariant the table names at every grid point.
//! - **Honest executors.** The reference executor and the naive one in both styles, and the
//!   naive one making each other honest choice ([`Choices`]): `failed` for refusals, one
//!   worker without leases, only some actions. Each passes the whole catalog at every grid
//!   point, and [`GENERATED_CASES`] generated cases at its defaults, with no violation
//!   (hazards allowed: a safeguard skipped where nothing exploited it).
//!
//! `docs/accuracy.md` is this test's table, byte for byte: `cargo xtask accuracy` (which sets
//! `UPDATE_ACCURACY=1`) rewrites it, and otherwise the test fails when it is out of date, so a
//! scenario that stops catching its mutant at some grid point fails here twice: on the miss,
//! and on the table.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use results::{Outcome, ScenarioResult, Source};
use runner::run::{self, Case, Driver, RunContext};
use runner::sim::{Reference, SimExecutor, SimFactory, WorkerSetup};
use scenarios::Scenario;

use crate::mutant_naive::{Choices, Naive, Style, Timing};
use crate::mutant_table::MUTANTS;

/// The run seed of every catalog case here.
const SEED: u64 = 1;
/// Generated cases each honest executor passes, at its default timing, from [`SEED`].
const GENERATED_CASES: u64 = 1_000;
/// Threads the runs spread over.
const THREADS: usize = 2;
const DOC_PATH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/accuracy.md");

/// One setting of the grid: a name and the timing it gives an executor in a scenario.
pub struct GridPoint {
    pub name: &'static str,
    pub timing: fn(&Scenario) -> Timing,
}

/// The default margin, in ms, and the short and long ones.
const MARGIN_MS: [u64; 3] = [100, 25, 500];
/// The short and long pauses between passes, in ms (the default is the announced 20 ms).
const PASS_PAUSE_MS: [u64; 2] = [1, 200];
/// The shortest request timeout a careful executor picks, in ms.
const SHORT_TIMEOUT_MS: u64 = 200;

fn short_timeout(s: &Scenario) -> u64 {
    SHORT_TIMEOUT_MS.min(s.request_timeout_ms())
}

/// A lease shorter than the announced one, still long enough for two requests and the margin:
/// a lease that runs out while its own request is out is not a careful choice.
fn short_lease(s: &Scenario, timeout_ms: u64, margin_ms: u64) -> u64 {
    (s.lease_ms() / 2).max(2 * timeout_ms + margin_ms).min(s.lease_ms())
}

/// The grid: the defaults, each choice moved alone to its other two settings, then all short
/// and all long together.
pub const GRID: &[GridPoint] = &[
    GridPoint { name: "defaults", timing: |_| Timing::default() },
    GridPoint {
        name: "timeout 200 ms",
        timing: |s| Timing { request_timeout_ms: Some(short_timeout(s)), ..Timing::default() },
    },
    GridPoint {
        name: "timeout 1/2",
        timing: |s| Timing { request_timeout_ms: Some(s.request_timeout_ms() / 2), ..Timing::default() },
    },
    GridPoint { name: "margin 25 ms", timing: |_| Timing { margin_ms: MARGIN_MS[1], ..Timing::default() } },
    GridPoint { name: "margin 500 ms", timing: |_| Timing { margin_ms: MARGIN_MS[2], ..Timing::default() } },
    GridPoint {
        name: "backoff 1/2",
        timing: |s| Timing { backoff_ms: Some(s.request_timeout_ms() / 2), ..Timing::default() },
    },
    GridPoint {
        name: "backoff 2x",
        timing: |s| Timing { backoff_ms: Some(s.request_timeout_ms() * 2), ..Timing::default() },
    },
    GridPoint {
        name: "lease short",
        timing: |s| Timing {
            lease_ms: Some(short_lease(s, s.request_timeout_ms(), MARGIN_MS[0])),
            ..Timing::default()
        },
    },
    GridPoint {
        name: "lease 3/4",
        timing: |s| Timing {
            lease_ms: Some((s.lease_ms() * 3 / 4).max(short_lease(s, s.request_timeout_ms(), MARGIN_MS[0]))),
            ..Timing::default()
        },
    },
    GridPoint {
        name: "pause 1 ms",
        timing: |_| Timing { pass_pause_ms: Some(PASS_PAUSE_MS[0]), ..Timing::default() },
    },
    GridPoint {
        name: "pause 200 ms",
        timing: |_| Timing { pass_pause_ms: Some(PASS_PAUSE_MS[1]), ..Timing::default() },
    },
    GridPoint {
        name: "all short",
        timing: |s| {
            let timeout = short_timeout(s);
            Timing {
                request_timeout_ms: Some(timeout),
                margin_ms: MARGIN_MS[1],
                backoff_ms: Some(timeout / 2),
                lease_ms: Some(short_lease(s, timeout, MARGIN_MS[1])),
                pass_pause_ms: Some(PASS_PAUSE_MS[0]),
            }
        },
    },
    GridPoint {
        name: "all long",
        timing: |s| Timing {
            request_timeout_ms: None,
            margin_ms: MARGIN_MS[2],
            backoff_ms: Some(s.request_timeout_ms() * 2),
            lease_ms: None,
            pass_pause_ms: Some(PASS_PAUSE_MS[1]),
        },
    },
];

/// An executor to judge at a grid point: the naive one with a timing, or the reference with
/// the limits it reads changed to the timing's (its margin and backoff are fixed).
#[derive(Clone, Copy)]
enum Subject {
    Naive(Naive),
    Reference,
}

/// The reference executor started with a timing's request timeout, lease and pass pause.
struct TimedReference(Timing);

impl SimFactory for TimedReference {
    fn name(&self) -> String {
        Reference.name()
    }

    fn supports_workflows(&self) -> bool {
        Reference.supports_workflows()
    }

    fn start(&self, mut setup: WorkerSetup) -> Result<Box<dyn SimExecutor>, String> {
        self.0.apply(&mut setup.limits);
        Reference.start(setup)
    }
}

impl Subject {
    /// This executor with `timing`.
    fn factory(&self, timing: Timing) -> Box<dyn SimFactory> {
        match self {
            Subject::Naive(naive) => Box::new(naive.choosing(Choices { timing, ..naive.choices })),
            Subject::Reference => Box::new(TimedReference(timing)),
        }
    }

    /// One catalog scenario, with this executor at `point`.
    fn run(&self, scenario: &Scenario, point: &GridPoint, dir: &Path) -> ScenarioResult {
        let factory = self.factory((point.timing)(scenario));
        let case = Case { scenario: scenario.clone(), source: Source::Catalog };
        run::run_case(&case, &RunContext::new(SEED, &Driver::Sim(factory.as_ref()), dir, ""))
    }
}

/// An honest executor of the table: its name, the choices it makes, and the executor.
struct Honest {
    name: &'static str,
    choices: &'static str,
    subject: Subject,
}

/// Every action but `files.put`.
pub(crate) const WITHOUT_FILES: &[&str] =
    &["payments.refund", "workspaces.create", "chain.transfer", "messages.send"];

fn honest_executors() -> Vec<Honest> {
    let naive = |style| Naive::correct(style);
    vec![
        Honest {
            name: "reference",
            choices: "escalates refusals; leases and fencing tokens; margin 100 ms and backoff of one request timeout per attempt, fixed",
            subject: Subject::Reference,
        },
        Honest {
            name: "naive, key retry",
            choices: "leaves an uncertain send unknown and resends under its key while the key is safe; absence judged from when the lookup was asked; a new key for every message resend once absence is final",
            subject: Subject::Naive(naive(Style::KeyRetry)),
        },
        Honest {
            name: "naive, lookup first",
            choices: "reads an uncertain send back at once, and in every later pass",
            subject: Subject::Naive(naive(Style::LookupFirst)),
        },
        Honest {
            name: "naive, refusals failed",
            choices: "a write refused for a decision, certainly without effect, ends `failed`, not `escalated`",
            subject: Subject::Naive(
                naive(Style::KeyRetry).choosing(Choices { refusals_fail: true, ..Choices::default() }),
            ),
        },
        Honest {
            name: "naive, one worker",
            choices: "a lock on its state: no leases, no fencing tokens; a second worker stands by until the lock is free",
            subject: Subject::Naive(
                naive(Style::KeyRetry).choosing(Choices { single_worker: true, ..Choices::default() }),
            ),
        },
        Honest {
            name: "naive, without files.put",
            choices: "supports every action but `files.put`; a step after a put is never proposed to it",
            subject: Subject::Naive(
                naive(Style::KeyRetry)
                    .choosing(Choices { actions: Some(WITHOUT_FILES), ..Choices::default() }),
            ),
        },
    ]
}

/// This process's directory of runs.
fn root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("accuracy-{}", std::process::id()))
}

/// A fresh directory for one part of the test.
fn work_dir(part: &str) -> PathBuf {
    let dir = root().join(part);
    std::fs::create_dir_all(&dir).expect("the work directory can be created");
    dir
}

fn catalog() -> Vec<Scenario> {
    scenarios::catalog().expect("the catalog loads")
}

/// Runs `jobs` over [`THREADS`] threads, in order.
fn spread<T: Send, R: Send>(jobs: Vec<T>, each: impl Fn(T) -> R + Sync) -> Vec<R> {
    let queue = std::sync::Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                loop {
                    let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop();
                    let Some((i, job)) = next else { break };
                    let result = each(job);
                    done.lock().unwrap_or_else(|p| p.into_inner()).push((i, result));
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

fn violated(result: &ScenarioResult) -> Vec<String> {
    checker::violations(&result.verdicts).map(|v| v.invariant.clone()).collect()
}

/// One mutant against one scenario: the grid points where it was caught with the named
/// invariant, and a line for each where it was not.
struct MutantRow {
    mode: String,
    mutant: &'static str,
    scenario: &'static str,
    invariant: &'static str,
    caught: usize,
    /// The grid point, and what the run showed there.
    misses: Vec<(&'static str, String)>,
}

fn mutant_rows() -> Vec<MutantRow> {
    let dir = work_dir("mutants");
    let catalog = catalog();
    let jobs: Vec<_> = MUTANTS.iter().flat_map(|m| m.catalog.iter().map(move |pair| (m, pair))).collect();
    spread(jobs, |(m, (scenario, invariant))| {
        let s = catalog.iter().find(|s| s.name == *scenario).expect("a catalog scenario");
        let subject = Subject::Naive(m.factory());
        let mut row = MutantRow {
            mode: s.failure_mode.clone().unwrap_or_default(),
            mutant: m.name,
            scenario,
            invariant,
            caught: 0,
            misses: vec![],
        };
        for point in GRID {
            let result = subject.run(s, point, &dir);
            if violated(&result).iter().any(|v| v == invariant) {
                row.caught += 1;
            } else {
                let what = format!("{} ({:?}, violated {:?})", point.name, result.outcome, violated(&result));
                row.misses.push((point.name, what));
            }
        }
        row
    })
}

/// One honest executor over the catalog at every grid point and over generated cases.
struct HonestRow {
    name: &'static str,
    choices: &'static str,
    runs: usize,
    passed: usize,
    hazards: BTreeMap<String, usize>,
    generated_passed: u64,
    failures: Vec<String>,
}

fn honest_rows() -> Vec<HonestRow> {
    let dir = work_dir("honest");
    let catalog = catalog();
    let executors = honest_executors();
    let jobs: Vec<(usize, usize)> =
        (0..executors.len()).flat_map(|e| (0..GRID.len()).map(move |g| (e, g))).collect();
    let results = spread(jobs, |(e, g)| {
        let point = &GRID[g];
        let results: Vec<ScenarioResult> =
            catalog.iter().map(|s| executors[e].subject.run(s, point, &dir)).collect();
        (e, point.name, results)
    });
    let generated = spread((0..executors.len()).collect(), |e| {
        let mut failures = Vec::new();
        let mut passed = 0;
        let factory = executors[e].subject.factory(Timing::default());
        for index in 0..GENERATED_CASES {
            let scenario = scenarios::generate::case(SEED, index).expect("the generator works");
            let case = Case { scenario, source: Source::Generated { index } };
            let result =
                run::run_case(&case, &RunContext::new(SEED, &Driver::Sim(factory.as_ref()), &dir, ""));
            if result.outcome == Outcome::Passed {
                passed += 1;
            } else {
                failures.push(format!(
                    "generated case {index}: {:?} {:?}",
                    result.outcome,
                    violated(&result)
                ));
            }
        }
        (passed, failures)
    });
    executors
        .iter()
        .zip(generated)
        .enumerate()
        .map(|(e, (honest, (generated_passed, mut failures)))| {
            let mut row = HonestRow {
                name: honest.name,
                choices: honest.choices,
                runs: 0,
                passed: 0,
                hazards: BTreeMap::new(),
                generated_passed,
                failures: vec![],
            };
            for (_, point, results) in results.iter().filter(|(i, _, _)| *i == e) {
                for r in results {
                    row.runs += 1;
                    if r.outcome == Outcome::Passed {
                        row.passed += 1;
                    } else {
                        row.failures.push(format!("{point}: {} {:?} {:?}", r.name, r.outcome, violated(r)));
                    }
                    for h in &r.hazards {
                        *row.hazards.entry(h.kind.clone()).or_default() += 1;
                    }
                }
            }
            row.failures.append(&mut failures);
            row
        })
        .collect()
}

fn render(mutants: &[MutantRow], honest: &[HonestRow]) -> String {
    let mut out = String::new();
    out.push_str(
        "# Accuracy

Written by `cargo xtask accuracy` (the test `tests/it/accuracy.rs` with `UPDATE_ACCURACY=1`);
the same test, in `cargo xtask test`, fails when this page is out of date, when a catalog
scenario misses its mutant at any grid point, or when an honest executor fails anything.

A verdict is a promise in two directions. An executor with the mistake a scenario names must
fail that scenario whatever careful timing it picks; a correct executor that makes other
honest choices than the reference executor (docs/protocol.md §7, \"What each terminal state
promises\") must pass everything. Both are measured here in the sim backend, the executors in
process. The live sample is the Python example executor (`tests/it/python_executor.rs`): the
whole catalog with `--refusals failed`, with `--actions` leaving out `files.put`, and at two
points of the grid, `--timing short` (200 ms, 25 ms, half the lease, 1 ms) and `--timing long`
(500 ms margin, 200 ms pause), where each of its classic bugs (`--bug`) is caught too.

## The grid

The timing choices a careful executor makes for itself, within the limits a scenario
announces (`request_timeout_ms`, `lease_ms`): each choice at its default and at two other
settings, one at a time, then all short and all long together.

| point | request timeout | margin | backoff per attempt | lease | pause between passes |
|---|---|---|---|---|---|
",
    );
    let example = Scenario { limits: Default::default(), ..Default::default() };
    for point in GRID {
        let t = (point.timing)(&example);
        let timeout =
            t.request_timeout_ms.map_or("announced (2,000 ms)".to_string(), |ms| format!("{ms} ms"));
        let backoff = t.backoff_ms.map_or("the request timeout".to_string(), |ms| format!("{ms} ms"));
        let lease = t.lease_ms.map_or("announced (10,000 ms)".to_string(), |ms| format!("{ms} ms"));
        let pause = t.pass_pause_ms.map_or("announced (20 ms)".to_string(), |ms| format!("{ms} ms"));
        let _ = writeln!(
            out,
            "| {} | {timeout} | {} ms | {backoff} | {lease} | {pause} |",
            point.name, t.margin_ms
        );
    }
    out.push_str(
        "
Figures for a scenario that announces the default limits (2,000 ms, 10,000 ms); the others
scale with what a scenario announces: the short request timeout is at most 200 ms, halves and
doubles are of the announced timeout, and a short lease is half the announced one, but never
less than two request timeouts and the margin. The reference executor reads its request
timeout, lease and pause from what it is told, and keeps its margin (100 ms) and backoff (one
request timeout per attempt) fixed: at the margin and backoff points it runs as at the
defaults.

## Mutants

Each mutant of `docs/failure-modes.md` against the catalog scenarios of its failure mode, at
every grid point: caught means the invariant named was among the violations.

| failure mode | mutant | scenario | invariant | caught at |
|---|---|---|---|---|
",
    );
    for r in mutants {
        let _ = writeln!(
            out,
            "| `{}` | `{}` | `{}` | `{}` | {}/{}{} |",
            r.mode,
            r.mutant,
            r.scenario,
            r.invariant,
            r.caught,
            GRID.len(),
            if r.misses.is_empty() {
                String::new()
            } else {
                format!(" (missed at: {})", r.misses.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(", "))
            }
        );
    }
    let _ = write!(
        out,
        "
## Honest executors

Each against the whole catalog at every grid point, and against the first {GENERATED_CASES}
generated cases of seed {SEED} at its defaults. Hazards are safeguards skipped where nothing
in the run exploited them; they are listed, never violations.

| executor | its choices | catalog runs passed | generated cases passed | hazards |
|---|---|---|---|---|
"
    );
    for r in honest {
        let hazards = if r.hazards.is_empty() {
            "none".to_string()
        } else {
            r.hazards.iter().map(|(k, n)| format!("`{k}` {n}")).collect::<Vec<_>>().join(", ")
        };
        let _ = writeln!(
            out,
            "| {} | {} | {}/{} | {}/{GENERATED_CASES} | {hazards} |",
            r.name, r.choices, r.passed, r.runs, r.generated_passed
        );
    }
    out
}

#[test]
fn every_mutant_is_caught_and_every_honest_executor_passes_at_every_grid_point() {
    let mutants = mutant_rows();
    let honest = honest_rows();
    let _ = std::fs::remove_dir_all(root());
    let mut problems = Vec::new();
    for r in &mutants {
        for (_, miss) in &r.misses {
            problems
                .push(format!("{} in {}: not caught with {} at {miss}", r.mutant, r.scenario, r.invariant));
        }
    }
    for r in &honest {
        for f in &r.failures {
            problems.push(format!("{}: {f}", r.name));
        }
    }
    let doc = render(&mutants, &honest);
    if std::env::var_os("UPDATE_ACCURACY").is_some() {
        std::fs::write(DOC_PATH, &doc).expect("docs/accuracy.md writes");
    } else {
        let current = std::fs::read_to_string(DOC_PATH).unwrap_or_default();
        if current != doc {
            problems.push("docs/accuracy.md is out of date: run `cargo xtask accuracy`".into());
        }
    }
    assert!(problems.is_empty(), "accuracy:\n{}", problems.join("\n"));
}
