//! Project automation, run as `cargo xtask <command>` (an alias in `.cargo/config.toml`).
//!
//! - `cargo xtask test [ARGS...]`: prepares the Python venv that the SDK tests use, then runs
//!   `cargo test --workspace ARGS...` with `TWICE_PYTHON` pointing into it.
//! - `cargo xtask bench`: builds the release `twice-executor` (which `harness/run` drives) and
//!   prepares the Python venv (which `harness/python` drives, through `TWICE_PYTHON`), runs
//!   every benchmark in [`BENCHES`](bench::BENCHES) and rewrites `docs/benchmarks.md` from what they report.
//! - `cargo xtask bench --counts`: only the counted costs (`counts.rs`: instructions under
//!   Callgrind, fsyncs under strace), their targets judged; rewrites their section.
//! - `cargo xtask bench --compare BASE`: the same counts for another commit beside this
//!   checkout's (`compare.rs`), printed as a table.
//! - `cargo xtask bench --from-log FILE`: rewrites the same documents from the `BENCH` lines of
//!   a saved run's output, without measuring again.
//!
//!
//! - `cargo xtask accuracy`: the accuracy grid (`tests/it/accuracy.rs`) with
//!   `UPDATE_ACCURACY=1`, which rewrites `docs/accuracy.md`.
//! - `cargo xtask soak [--kills N] [--seed S] [--workers W]`: the release `twice-executor` under
//!   random SIGKILLs and SIGSTOP/SIGCONT pairs (`tests/it/soak.rs`, an ignored test), its
//!   figures written into `docs/reliability.md`. Not part of CI.
//! - `cargo xtask flake N [ARGS...]`: the suite built once and run N times; every test that
//!   failed at least once, with its output.
//! - `cargo xtask engines [--short] [--only ENGINE]... [-- PYTEST_ARGS...]`: the real engines
//!   of `examples/engines/` (Celery with Redis, DBOS, LangGraph, Restate, Temporal), each app
//!   through twice; a full run rewrites each engine's `findings.json` and the table of
//!   `docs/engines.md` (`engines.rs`). `.ci/run` runs `--short`.
//! - `cargo xtask fuzz-api [--examples N] [--seed S] [--release]`: schemathesis against the
//!   control APIs of a real `twice serve`, driven by `docs/openapi/` (`fuzz_api.rs`). Not part
//!   of CI.
//! - `cargo xtask package [--target TRIPLE] [--bin-dir DIR] [--out DIR]`: the release
//!   binaries as a Python wheel and npm packages (`package.rs`, docs/release.md).
//! - `cargo xtask fuzz-parsers [--seconds S] [--cmin] [TARGET...]`: the `cargo fuzz` targets of
//!   `fuzz/` (the parsers), each for S seconds, with their figures. Not part of CI.
//!
//! One module per concern: `test.rs` (the `test` command), `soak.rs` (the `soak` command and
//! its section of `docs/reliability.md`), `flake.rs` (the `flake` command and its reading of
//! libtest's output), `venv.rs` (the Python venv both
//! commands prepare), `bench.rs` (the benchmark targets and the `bench` command that runs
//! them), `records.rs` (the `BENCH` lines they print), `headlines.rs` (the headline sentences
//! and README.md's block), `machine.rs` (what the figures were measured on) and `render.rs`
//! (`docs/benchmarks.md`). This file parses the command line and dispatches.

mod bench;
mod benches;
mod compare;
mod counts;
mod engines;
mod flake;
mod fuzz_api;
mod fuzz_http;
mod fuzz_parsers;
mod headlines;
mod machine;
mod node;
mod package;
mod records;
mod render;
mod soak;
mod test;
mod venv;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use anyhow::Result;

use bench::bench;
use test::test;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test [ARGS...]  prepare the Python venv for the SDK tests (target/twice-venv, from
                  tests/requirements.txt), then run `cargo test --workspace ARGS...`
                  with TWICE_PYTHON set to its interpreter
  soak [--kills N] [--seed S] [--workers W]
                  the release executor under N random SIGKILLs (default 10,000) and
                  SIGSTOP/SIGCONT pairs, W workers on one state directory, faults armed;
                  then the checker; writes the figures into docs/reliability.md
  flake N [ARGS...]
                  build the suite once, run it N times (cargo test --no-fail-fast ARGS...),
                  report every test that failed at least once; logs in target/flake/
  accuracy        run the accuracy grid (tests/it/accuracy.rs: every mutant over a grid
                  of executor timings, every honest executor over the catalog and
                  generated cases) and rewrite docs/accuracy.md
  bench           run the benchmarks and rewrite docs/benchmarks.md
  bench --counts  count instructions (Callgrind) and fsyncs (strace) per unit of work, judge
                  the targets, and rewrite only their section of docs/benchmarks.md
  bench --compare BASE
                  the same counts for commit BASE (a worktree under target/compare/) and
                  for this checkout, side by side; writes nothing
  bench --only ID run one timed benchmark again (say harness/python) and rewrite only its
                  section of docs/benchmarks.md, its figures and the headlines
  bench --from-log FILE
                  rewrite docs/benchmarks.md from the output of a run saved in FILE
                  (on this machine), without measuring again
  help            print this message";

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("test") => run(|| test(&args[1..])),
        Some("soak") => run(|| soak::soak(&args[1..])),
        Some("flake") => run(|| flake::flake(&args[1..])),
        Some("accuracy") if args.len() == 1 => run(accuracy),
        Some("bench") if args.len() == 1 => run(bench),
        Some("bench") if args.len() == 2 && args[1] == "--counts" => run(bench::bench_counts),
        Some("bench") if args.len() == 3 && args[1] == "--compare" => run(|| compare::compare(&args[2])),
        Some("bench") if args.len() == 3 && args[1] == "--only" => run(|| bench::bench_only(&args[2])),
        Some("bench") if args.len() == 3 && args[1] == "--from-log" => {
            run(|| bench::bench_from_log(Path::new(&args[2])))
        }
        Some("engines") => run(|| engines::engines(&args[1..])),
        Some("package") => run(|| package::package(&args[1..])),
        Some("fuzz-http") => run(|| fuzz_http::fuzz_http(&args[1..])),
        Some("fuzz-api") => run(|| fuzz_api::fuzz_api(&args[1..])),
        Some("fuzz-parsers") => run(|| fuzz_parsers::fuzz_parsers(&args[1..])),
        Some("help" | "-h" | "--help") => {
            println!(
                "{USAGE}\n{}\n{}\n{}\n{}\n{}",
                engines::USAGE,
                package::USAGE,
                fuzz_http::USAGE,
                fuzz_api::USAGE,
                fuzz_parsers::USAGE
            );
            0
        }
        Some("bench") => usage_error(&format!(
            "`bench` takes --counts, --compare BASE, --only ID or --from-log FILE, got `{}`",
            args[1..].join(" ")
        )),
        Some("accuracy") => {
            usage_error(&format!("`accuracy` takes no arguments, got `{}`", args[1..].join(" ")))
        }
        Some(other) => usage_error(&format!("unknown command `{other}`")),
        None => usage_error("no command given"),
    };
    std::process::exit(code);
}

/// `cargo xtask accuracy`: the accuracy test with `UPDATE_ACCURACY=1`, which rewrites
/// docs/accuracy.md from what it measured (and still fails on a miss or a failure). It runs in
/// the sim backend only: no venv and no binaries.
fn accuracy() -> Result<i32> {
    println!("xtask: running the accuracy grid; it rewrites docs/accuracy.md");
    let status = cargo()
        .args(["test", "-p", "twice-tests", "--test", "it", "--", "accuracy::", "--nocapture"])
        .env("UPDATE_ACCURACY", "1")
        .current_dir(root())
        .status()
        .map_err(|e| anyhow::anyhow!("could not start cargo test: {e}"))?;
    Ok(exit_code(status))
}

fn usage_error(message: &str) -> i32 {
    eprintln!("xtask: {message}\n\n{USAGE}");
    2
}

/// Runs a command; an error is printed with its causes and exits 1.
fn run(command: impl FnOnce() -> Result<i32>) -> i32 {
    match command() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            1
        }
    }
}

/// The workspace root: xtask lives one level below it.
fn root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

/// The target directory: `CARGO_TARGET_DIR` when set, `target/` at the root otherwise.
fn target_dir(root: &Path) -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// The cargo that runs us (cargo sets `CARGO` for `cargo run`), or the one on the PATH.
fn cargo() -> Command {
    Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// The exit code to pass on for a child's status: its code, or 128 + the signal that ended it.
fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1)
}

/// The first line a command prints, if it runs and succeeds.
fn output_of(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).stdin(Stdio::null()).output().ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines().next().map(|l| l.trim().to_string()).filter(|l| !l.is_empty())
}
