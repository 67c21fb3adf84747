//! Project automation, run as `cargo xtask <command>` (an alias in `.cargo/config.toml`).
//! `cargo xtask help` lists every command; `cargo xtask <command> --help` shows one.
//!
//! One module per command or concern: `test.rs` (`test`: the venv, then the suite), `venv.rs`
//! (the Python venv the tests and benchmarks use), `node.rs` (Node and the kits' npm installs),
//! `flake.rs` (`flake`), `soak.rs` (`soak` and its section of `docs/reliability.md`),
//! `engines.rs` (`engines` and `docs/engines.md`), `package.rs` (`package`), `fuzz_http.rs`,
//! `fuzz_api.rs` and `fuzz_parsers.rs` (the three fuzzers); for `bench`: `bench.rs` (the
//! command), `benches.rs` (the timed targets), `counts.rs` (instructions and fsyncs),
//! `compare.rs` (`--compare`), `records.rs` (the `BENCH` lines), `headlines.rs` (the headline
//! sentences and README.md's block), `machine.rs` (what the figures were measured on) and
//! `render.rs` (`docs/benchmarks.md`). This file parses the command line and dispatches.

mod bench;
mod benches;
mod ci_log;
mod compare;
mod counts;
mod engines;
mod engines_log;
mod engines_run;
mod flake;
mod fuzz_api;
mod fuzz_http;
mod fuzz_parsers;
mod headlines;
mod inner_loop;
mod machine;
mod matrix;
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

/// Each command's name and its lines of the usage text.
const COMMANDS: [(&str, &str); 11] = [
    ("test", TEST),
    ("soak", SOAK),
    ("flake", FLAKE),
    ("accuracy", ACCURACY),
    ("bench", BENCH),
    ("engines", engines::USAGE),
    ("package", package::USAGE),
    ("fuzz-http", fuzz_http::USAGE),
    ("fuzz-api", fuzz_api::USAGE),
    ("fuzz-parsers", fuzz_parsers::USAGE),
    ("help", HELP),
];

const TEST: &str = "\
  test [ARGS...]  prepare the Python venv for the SDK tests (target/twice-venv, from
                  tests/requirements.txt), Node's lockfiles, the binaries and packages,
                  then run `cargo nextest run --workspace ARGS...` (or `cargo test` when
                  cargo-nextest is not installed) with TWICE_* naming what it prepared";
const SOAK: &str = "\
  soak [--kills N] [--seed S] [--workers W]
                  the release executor under N random SIGKILLs (default 10,000) and
                  SIGSTOP/SIGCONT pairs, W workers on one state directory, faults armed;
                  then the checker; writes the figures into docs/reliability.md";
const FLAKE: &str = "\
  flake N [ARGS...]
                  build the suite once, run it N times (cargo test --no-fail-fast ARGS...),
                  report every test that failed at least once; logs in target/flake/";
const ACCURACY: &str = "\
  accuracy        run the accuracy grid (tests/it/accuracy.rs: every mutant over a grid
                  of executor timings, every honest executor over the catalog and
                  generated cases) and rewrite docs/accuracy.md";
const BENCH: &str = "\
  bench           run the benchmarks and rewrite docs/benchmarks.md
  bench --counts  count instructions (Callgrind) and fsyncs (strace) per unit of work, judge
                  the targets, and rewrite only their section of docs/benchmarks.md
  bench --compare BASE
                  the same counts for commit BASE (a worktree under target/compare/) and
                  for this checkout, side by side; writes nothing
  bench --only ID run one timed benchmark again (say twice/python) and rewrite only its
                  section of docs/benchmarks.md, its figures and the headlines
  bench --from-log FILE
                  rewrite docs/benchmarks.md from the output of a run saved in FILE
                  (on this machine), without measuring again
  bench --ci-log FILE
                  rewrite section xtask/ci from the saved output of a fresh-clone .ci/run
  bench --engines-log FILE
                  rewrite section xtask/engines from the saved output of a full
                  cargo xtask engines";
const HELP: &str = "\
  help [COMMAND]  print this message, or one command's lines of it (also COMMAND --help)";

/// The whole usage text: every command's lines.
fn usage() -> String {
    let lines: Vec<String> = COMMANDS.iter().map(|(_, text)| indented(text)).collect();
    format!("usage: cargo xtask <command>\n\ncommands:\n{}", lines.join("\n"))
}

/// One command's usage, for `help COMMAND` and `COMMAND --help`.
fn command_usage(name: &str) -> Option<String> {
    COMMANDS
        .iter()
        .find(|(command, _)| *command == name)
        .map(|(_, text)| format!("usage: cargo xtask\n{}", indented(text)))
}

/// A command's lines with its first line indented as the rest are (a `\` line continuation in
/// a string literal drops the first line's leading spaces).
fn indented(text: &str) -> String {
    format!("  {}", text.trim_start())
}

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    let code = match help_asked(&args) {
        Some(text) => {
            println!("{text}");
            0
        }
        None => dispatch(&args),
    };
    std::process::exit(code);
}

/// The text to print when the command line asks for help: `help`, `help COMMAND`, `--help`,
/// or `COMMAND --help` / `COMMAND -h` as the command's first argument (after it, `test` and
/// `flake` pass their arguments on to cargo test).
fn help_asked(args: &[String]) -> Option<String> {
    let is_help = |a: &String| a == "--help" || a == "-h";
    match args {
        [first, ..] if first == "help" || is_help(first) => {
            Some(args.get(1).and_then(|c| command_usage(c)).unwrap_or_else(usage))
        }
        [command, second, ..] if is_help(second) => command_usage(command),
        _ => None,
    }
}

fn dispatch(args: &[String]) -> i32 {
    match args.first().map(String::as_str) {
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
        Some("bench") if args.len() == 3 && args[1] == "--ci-log" => {
            run(|| bench::bench_saved_log(Path::new(&args[2]), bench::SavedLog::Ci))
        }
        Some("bench") if args.len() == 3 && args[1] == "--engines-log" => {
            run(|| bench::bench_saved_log(Path::new(&args[2]), bench::SavedLog::Engines))
        }
        Some("engines") => run(|| engines::engines(&args[1..])),
        Some("package") => run(|| package::package(&args[1..])),
        Some("fuzz-http") => run(|| fuzz_http::fuzz_http(&args[1..])),
        Some("fuzz-api") => run(|| fuzz_api::fuzz_api(&args[1..])),
        Some("fuzz-parsers") => run(|| fuzz_parsers::fuzz_parsers(&args[1..])),
        Some("bench") => usage_error(&format!(
            "`bench` takes --counts, --compare BASE, --only ID, --from-log FILE, --ci-log FILE or --engines-log \
             FILE, got `{}`",
            args[1..].join(" ")
        )),
        Some("accuracy") => {
            usage_error(&format!("`accuracy` takes no arguments, got `{}`", args[1..].join(" ")))
        }
        Some(other) => usage_error(&format!("unknown command `{other}`")),
        None => usage_error("no command given"),
    }
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
    eprintln!("xtask: {message}\n\n{}", usage());
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
    // `cargo run` names the manifest's folder at run time; the compile-time one is kept by a
    // build that cargo found fresh in another checkout sharing the target directory.
    let manifest = env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    manifest.parent().map_or_else(|| manifest.clone(), Path::to_path_buf)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_command_answers_help_with_its_own_lines() {
        for (name, _) in COMMANDS {
            for flag in ["--help", "-h"] {
                let text = help_asked(&args(&[name, flag])).expect("a command answers --help");
                assert!(text.contains(&format!("  {name}")), "{name} {flag}: {text}");
            }
            let text = help_asked(&args(&["help", name])).expect("help COMMAND answers");
            assert!(text.contains(&format!("  {name}")), "help {name}: {text}");
        }
        let whole = help_asked(&args(&["help"])).expect("help answers");
        assert!(COMMANDS.iter().all(|(name, _)| whole.contains(&format!("\n  {name}"))), "{whole}");
    }

    #[test]
    fn arguments_after_the_first_go_to_the_command() {
        // `cargo xtask test -- --help` passes --help on to the test binaries.
        assert_eq!(help_asked(&args(&["test", "--", "--help"])), None);
        assert_eq!(help_asked(&args(&["test", "-p", "twice"])), None);
    }
}
