//! What the tests of the example executors (Python, TypeScript) share: turns on the machine,
//! work directories, the whole catalog live, the table of bug switches, and the check that an
//! example's copy of the action table is the vocabulary's, and the check that an example's
//! intent log opens while another worker holds the new file's write lock.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use results::{Outcome, ScenarioResult, Source};
use runner::live::ExecutorCommand;
use runner::run::{self, Case, Driver, Progress, RunContext};

/// The run seed of every case here (`twice run`'s default).
pub(super) const SEED: u64 = 1;
/// Cases run at the same time, as `twice run` runs live scenarios by default.
pub(super) const JOBS: usize = runner::pipeline::LIVE_JOBS_DEFAULT;

/// Live runs of the example executors take turns: each already runs [`JOBS`] cases at a time.
static MACHINE: Mutex<()> = Mutex::new(());

pub(super) fn machine() -> MutexGuard<'static, ()> {
    // A test that failed while holding it leaves nothing half-done behind.
    MACHINE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh directory for one test's runs, private to this process: `PREFIX-PID/TEST`.
pub(super) fn work_dir(prefix: &str, test: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{prefix}-{}", std::process::id())).join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the work directory can be created");
    dir
}

pub(super) fn clean(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    if let Some(parent) = dir.parent() {
        // Gone once the last test of this process is done with it.
        let _ = std::fs::remove_dir(parent);
    }
}

pub(super) fn catalog_case(name: &str) -> Case {
    match scenarios::catalog::find(name) {
        Some(Ok(scenario)) => Case { scenario, source: Source::Catalog },
        Some(Err(e)) => panic!("catalog scenario {name} does not load: {e}"),
        None => panic!("no catalog scenario {name}"),
    }
}

/// Every catalog scenario, as cases.
pub(super) fn catalog_cases() -> Vec<Case> {
    scenarios::catalog()
        .expect("the catalog loads")
        .into_iter()
        .map(|scenario| Case { scenario, source: Source::Catalog })
        .collect()
}

/// What went wrong in a result, for a failure message: the outcome, the executor error and
/// every broken invariant with its first line of evidence.
pub(super) fn describe(result: &ScenarioResult) -> String {
    let broken: Vec<String> = checker::violations(&result.verdicts)
        .map(|v| format!("{}: {}", v.invariant, v.evidence.first().map(String::as_str).unwrap_or("")))
        .collect();
    let error = result.observed.executor_error.as_deref().unwrap_or("");
    format!("{} ({:?}) {error} [{}]", result.name, result.outcome, broken.join("; "))
}

pub(super) struct Quiet;

impl Progress for Quiet {
    fn started(&self, _: usize) {}
    fn finished(&self, _: &ScenarioResult) {}
    fn done(&self) {}
}

/// Runs the whole catalog live on `executor` (named `who` in messages): every scenario passes,
/// with no hazard, since a full example uses every safeguard the contracts offer.
pub(super) fn passes_the_whole_catalog(who: &str, prefix: &str, executor: ExecutorCommand) {
    let _turn = machine();
    let dir = work_dir(prefix, "catalog");
    let cases = catalog_cases();
    let results = run::run_cases(
        &cases,
        &RunContext::new(SEED, &Driver::Live(executor), &dir, "twice run"),
        JOBS,
        &Quiet,
    );
    clean(&dir);
    assert_eq!(results.len(), cases.len());
    let failed: Vec<String> = results.iter().filter(|r| r.outcome != Outcome::Passed).map(describe).collect();
    assert!(
        failed.is_empty(),
        "the {who} executor failed {} of {} catalog scenarios:\n{}",
        failed.len(),
        cases.len(),
        failed.join("\n")
    );
    let hazards: Vec<String> = results
        .iter()
        .flat_map(|r| r.hazards.iter().map(move |h| format!("{}: {}", r.name, h.detail)))
        .collect();
    assert!(hazards.is_empty(), "hazards of the full executor:\n{}", hazards.join("\n"));
}

/// `(bug, catalog scenario, invariant or hazard kind)`.
pub(super) type BugRow = (&'static str, &'static str, &'static str);

/// Each `--bug NAME` of `variants` must make its scenario violated with its invariant; each
/// of `hazards` must pass, list its hazard, and fail under `--strict`. `executor` makes the
/// command line of one bug. Several cases run at a time, each with its own command line.
pub(super) fn bug_table(
    prefix: &str,
    variants: &[BugRow],
    hazards: &[BugRow],
    executor: impl Fn(&str) -> ExecutorCommand + Sync,
) {
    let _turn = machine();
    let dir = work_dir(prefix, "variants");
    let next = AtomicUsize::new(0);
    let problems = Mutex::new(Vec::new());
    let all: Vec<(BugRow, bool)> =
        variants.iter().map(|row| (*row, false)).chain(hazards.iter().map(|row| (*row, true))).collect();
    std::thread::scope(|scope| {
        for _ in 0..JOBS {
            scope.spawn(|| {
                while let Some(((bug, scenario, expected), hazard)) =
                    all.get(next.fetch_add(1, Ordering::SeqCst))
                {
                    let driver = Driver::Live(executor(bug));
                    let result = run::run_case(
                        &catalog_case(scenario),
                        &RunContext::new(SEED, &driver, &dir, "twice run"),
                    );
                    let caught = if *hazard {
                        let strict = run::results(SEED, &driver, None, vec![result.clone()]);
                        let strict = results::RunResults { strict: true, ..strict };
                        result.outcome == Outcome::Passed
                            && result.hazards.iter().any(|h| h.kind == *expected)
                            && strict.failed()
                    } else {
                        result.outcome == Outcome::Violated
                            && checker::violations(&result.verdicts).any(|v| v.invariant == *expected)
                    };
                    if !caught {
                        let kinds: Vec<&str> = result.hazards.iter().map(|h| h.kind.as_str()).collect();
                        let problem = format!(
                            "--bug {bug} in {scenario}: expected {expected}, got {} (hazards {kinds:?})",
                            describe(&result)
                        );
                        problems.lock().unwrap_or_else(|p| p.into_inner()).push(problem);
                    }
                }
            });
        }
    });
    clean(&dir);
    let problems = problems.into_inner().unwrap_or_else(|p| p.into_inner());
    assert!(
        problems.is_empty(),
        "bugs the catalog does not catch as the table says:\n{}",
        problems.join("\n")
    );
}

/// An example's copy of the action table's workflow columns (JSON: `result_fields`,
/// `business_key`, `takes_reference`, per action) must say what `vocabulary::ACTIONS` says, or
/// a step the reference executor accepts is refused there.
pub(super) fn the_action_tables_are_the_vocabularys(tables: &serde_json::Value) {
    let mut want_fields = serde_json::Map::new();
    let mut want_keys = serde_json::Map::new();
    let mut want_refs = serde_json::Map::new();
    for spec in vocabulary::ACTIONS {
        want_fields.insert(spec.name.into(), spec.result_fields.iter().map(|f| f.name).collect());
        want_keys.insert(spec.name.into(), spec.business_key.into());
        let takes: Vec<&str> =
            spec.params.iter().map(|p| p.name).filter(|p| spec.param_takes_reference(p)).collect();
        want_refs.insert(spec.name.into(), takes.into());
    }
    assert_eq!(tables["result_fields"], serde_json::Value::Object(want_fields));
    assert_eq!(tables["business_key"], serde_json::Value::Object(want_keys));
    assert_eq!(tables["takes_reference"], serde_json::Value::Object(want_refs));
}

/// How long the other connection holds the new log's write lock: long enough that a log which
/// does not wait for it has failed by then.
const WAL_HOLD_MS: u64 = 300;
/// A lock script that has not finished by then is killed and the test fails.
const WAL_SCRIPT_LIMIT: Duration = Duration::from_secs(60);
/// How often a running lock script is looked at.
const WAL_SCRIPT_POLL: Duration = Duration::from_millis(20);

/// Workers started together on a new state directory: one creates the intent log while the
/// others switch it to WAL, which SQLite answers with "database is locked" at once, whatever
/// the busy timeout. `program script module dir hold_ms` (`tests/python/wal_busy.py`,
/// `tests/node/wal_busy.mjs`) opens the example's log (`module`) while another connection
/// holds the write lock for `hold_ms`; the log must wait for the lock and open.
pub(super) fn opens_a_new_log_while_another_holds_its_lock(
    prefix: &str,
    program: &Path,
    script: &str,
    module: &Path,
) {
    let dir = work_dir(prefix, "wal-busy");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let mut child = std::process::Command::new(program)
        .arg(&script)
        .arg(module)
        .arg(&dir)
        .arg(WAL_HOLD_MS.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} cannot start: {e}", program.display()));
    let deadline = Instant::now() + WAL_SCRIPT_LIMIT;
    while child.try_wait().expect("the script can be waited for").is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} did not finish within {WAL_SCRIPT_LIMIT:?}", script.display());
        }
        std::thread::sleep(WAL_SCRIPT_POLL);
    }
    let out = child.wait_with_output().expect("the script's output can be read");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}: {}\n{stdout}{}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let outcome: serde_json::Value = stdout
        .lines()
        .last()
        .and_then(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("no JSON line from {}: {stdout}", script.display()));
    assert_eq!(
        outcome["opened"], true,
        "a new intent log could not be opened while another worker held its write lock: {outcome}"
    );
    clean(&dir);
}
