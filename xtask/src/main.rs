//! Project automation, run as `cargo xtask <command>` (an alias in `.cargo/config.toml`).
//!
//! - `cargo xtask test [ARGS...]`: prepares the Python venv that the SDK tests use, then runs
//!   `cargo test --workspace ARGS...` with `TWICE_PYTHON` pointing into it.
//! - `cargo xtask bench`: builds the release `twice-executor` (which `harness/run` drives) and
//!   prepares the Python venv (which `harness/python` drives, through `TWICE_PYTHON`), runs
//!   every benchmark in [`BENCHES`] and rewrites `docs/benchmarks.md` from what they report.
//!
//! # Benchmark records
//!
//! A benchmark reports each figure as one line on its standard output:
//!
//! ```text
//! BENCH {"bench":"fake-services/throughput","name":"payments fake, no rules","value":12345.6,"unit":"req/s","spread_pct":2.1,"notes":"..."}
//! ```
//!
//! - `bench` (string): the benchmark, `PACKAGE/TARGET`; records are grouped into one section
//!   per value, in the order of [`BENCHES`].
//! - `name` (string): the figure, one row of the section's table, in the order printed.
//! - `value` (number) and `unit` (string): the figure itself, e.g. `req/s`, `ms`; a ratio of
//!   two figures is a record of its own with unit `x`.
//! - `display` (string, optional): shown instead of the number, for a figure that is not
//!   one ("not found within 2,000 cases"); `value` still holds a number for comparisons.
//! - `spread_pct` (number, optional): how much repeated measurements varied, as
//!   (max - min) / median in percent.
//! - `notes` (string, optional): how to read the figure (setup, target met or not), printed
//!   under the table.
//!
//! A record with `table` (its title), `columns` (strings) and `rows` (arrays of strings) is a
//! table of its own, printed under the section's figures with its `notes`.
//!
//! Besides `docs/benchmarks.md`, a run writes every figure to `docs/benchmarks.json`; the next
//! run reads it back and prints each figure's change since then, so the document shows how
//! much figures move from one run to the next. The [`HEADLINES`] are written at the top of
//! the document and between the `bench:headlines` markers of README.md.
//!
//! The benchmarks build figure records with `bench_support::record`, and take medians and
//! spreads with `bench_support::summary`. Every other line is only echoed.

use std::collections::BTreeMap;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test [ARGS...]  prepare the Python venv for the SDK tests (target/twice-venv, from
                  tests/requirements.txt), then run `cargo test --workspace ARGS...`
                  with TWICE_PYTHON set to its interpreter
  bench           run the benchmarks and rewrite docs/benchmarks.md
  help            print this message";

/// A benchmark target that `cargo xtask bench` runs, in this order.
struct Bench {
    package: &'static str,
    target: &'static str,
    /// One paragraph under the section heading: what is measured.
    about: &'static str,
}

impl Bench {
    /// The value of `bench` in its records.
    fn id(&self) -> String {
        format!("{}/{}", self.package, self.target)
    }
}

const BENCHES: &[Bench] = &[
    Bench {
        package: "fake-services",
        target: "throughput",
        about: "Requests per second that the fakes serve over loopback HTTP with keep-alive: the payments \
                fake creating a refund per request, with and without fault rules armed, next to a stateful \
                refund stub built with the `wiremock` crate (what a user would write instead: a `Respond` \
                impl holding the same state) and bare hyper answering a fixed body on the same transport \
                (the ceiling); the files fake storing an object per S3 PUT; the chain fake taking a \
                pre-signed transfer per `eth_sendRawTransaction` (decoding and sender recovery included). \
                Target: within 1.5x of bare hyper.",
    },
    Bench {
        package: "executor",
        target: "intents",
        about: "Intents per second through the reference executor library (`Executor::propose`, each a \
                durable commit, then `drain` until the payments fake on loopback confirms every refund, \
                no faults), with `Durability::Full` and `Durability::Normal`, next to the raw rate of \
                single-row SQLite commits (WAL, synchronous FULL and NORMAL) on the same disk in the \
                same run. Target: within 2x of the raw commit rate.",
    },
    Bench {
        package: "harness",
        target: "run",
        about: "How fast `twice run` goes. Sim: generated cases per second against the reference executor \
                in process (`run::run_cases`, each case on its own paused tokio runtime with the fakes and a \
                real SQLite log, then checked), on 2 threads and on 1, and the virtual time those cases span \
                over the wall time they took. Live: the whole catalog against the release `twice-executor` \
                binary (real subprocesses, loopback HTTP, real signals), in total and per scenario, and the \
                same catalog in sim: cases per second in both and their ratio. Reports: \
                10,000 generated cases run in sim, then all four report files rendered and written from \
                their results. Targets: thousands of cases/s (at least 2,000) and 1,000x in sim on this 2-core machine; \
                the live catalog in under 60 s; the reports in under 10% of the sim time.",
    },
    Bench {
        package: "harness",
        target: "scaling",
        about: "How the sim's cost grows. With intents per scenario: one scenario of 1, 10, 100 and 1,000 \
                refunds (a tenth of the sends lose their reply after committing, so the share reconciled is \
                the same at every size), its wall time on one thread and the peak memory of a process that \
                runs it. With the size of the scenario set a run covers: 100, 1,000 and 10,000 generated \
                cases on 2 threads (the catalog has 39), cases per \
                second and the peak memory of a process that runs them and keeps their results. The \
                complexity is stated as the exponent b in cost ~ size^b.",
    },
    Bench {
        package: "twice-tests",
        target: "search",
        about: "Search power: for each mutant executor of the failure-mode list (one deliberate bug each, \
                `docs/failure-modes.md`), how many generated cases it takes to reach the first violation, \
                median over 20 seeds, for twice's generator and for a protocol-unaware baseline built into \
                the benchmark that does what a TCP fault proxy can: the same intents against services on \
                their default contracts, each request independently delayed past the timeout or reset with a \
                fixed probability; no semantic faults, no crashes or second workers, no clock control. Both \
                run in sim, against the same executors, checked by the same checker.",
    },
    Bench {
        package: "harness",
        target: "python",
        about: "Live runs against the Python executor of `examples/executors/python` (the conformance \
                kit's example: stripe-python, requests, boto3 and web3.py against the fakes, a SQLite intent \
                log, a Python process per worker), as a team meets them: the catalog and 20 generated cases at \
                `twice run`'s default of 8 scenarios at a time (target: at most 30 s on two cores); the same at \
                2, 8 and 16 at a time beside the `constant-fencing-token` variant on the stale-worker \
                scenarios, and whether every verdict held under that load; a run whose executor has a bug \
                (`--bug memory-only`) that generated cases expose, failures shrunk within the default 60 s \
                budget (target: at most 120 s from start to the last shrink); and the whole catalog alone on 2 \
                at a time, in total and per scenario (target: under 60 s).",
    },
];

/// The venv for the Python SDK tests, under the target directory.
const VENV_DIR: &str = "twice-venv";
/// In the venv: the hash of the requirements it was installed from.
const VENV_STAMP: &str = "twice-requirements.hash";
const REQUIREMENTS: &str = "tests/requirements.txt";
const BENCH_DOC: &str = "docs/benchmarks.md";
const RECORD_PREFIX: &str = "BENCH ";

fn main() {
    let args: Vec<String> = env::args().skip(1).collect();
    let code = match args.first().map(String::as_str) {
        Some("test") => run(|| test(&args[1..])),
        Some("bench") if args.len() == 1 => run(bench),
        Some("help" | "-h" | "--help") => {
            println!("{USAGE}");
            0
        }
        Some("bench") => usage_error(&format!("`bench` takes no arguments, got `{}`", args[1..].join(" "))),
        Some(other) => usage_error(&format!("unknown command `{other}`")),
        None => usage_error("no command given"),
    };
    std::process::exit(code);
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

// ---------------------------------------------------------------------------------------------
// cargo xtask test

fn test(args: &[String]) -> Result<i32> {
    let root = root();
    let python = prepare_venv(&root)?;
    // End-to-end tests run the project's binaries (`twice`, `twice-executor`) as real child
    // processes; cargo builds a package's binaries only for that package's own tests, so
    // build them all first and tell the tests where they are.
    println!("xtask: building the binaries (cargo build --workspace --bins)");
    let built = cargo().args(["build", "--workspace", "--bins"]).current_dir(&root).status();
    let built = built.context("could not start cargo build")?;
    if !built.success() {
        return Ok(exit_code(built));
    }
    let bin_dir = target_dir(&root).join("debug");
    let mut command = cargo();
    command.arg("test").env("TWICE_BIN_DIR", &bin_dir);
    // The HTML report test loads report.html in headless Chromium.
    match prepare_chromium() {
        Some(chromium) => {
            println!("xtask: TWICE_CHROMIUM={}", chromium.display());
            command.env("TWICE_CHROMIUM", chromium);
        }
        None => println!(
            "xtask: warning: no Chromium found; the HTML report test checks the page's structure only \
             (and fails under CI)"
        ),
    }
    // `--workspace` would override a `-p`, so add it only when no package is chosen.
    if !selects_package(args) {
        command.arg("--workspace");
    }
    command.args(args).current_dir(&root).env("TWICE_PYTHON", &python);
    println!("xtask: TWICE_PYTHON={}", python.display());
    println!("xtask: running cargo test{}", if selects_package(args) { "" } else { " --workspace" });
    let status = command.status().context("could not start cargo test")?;
    Ok(exit_code(status))
}

/// Where Chromium is looked for on the `PATH`, in this order (the HTML report test's order).
const CHROMIUM_NAMES: [&str; 3] = ["chromium", "chromium-browser", "google-chrome"];

/// Chromium for the HTML report test: `TWICE_CHROMIUM`, or the first of [`CHROMIUM_NAMES`] on
/// the `PATH`; when there is none and we are root on Linux with `apt-get`, installs Debian's
/// `chromium` package first. A failed install is a warning: only that test needs it.
fn prepare_chromium() -> Option<PathBuf> {
    if let Some(path) = env::var_os("TWICE_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(path));
    }
    if let Some(found) = find_on_path(&CHROMIUM_NAMES) {
        return Some(found);
    }
    let root_user = output_of("id", &["-u"]).is_some_and(|uid| uid == "0");
    if cfg!(target_os = "linux") && root_user && find_on_path(&["apt-get"]).is_some() {
        println!(
            "xtask: installing Chromium for the HTML report test (apt-get install -y --no-install-recommends chromium)"
        );
        let installed = Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "chromium"])
            .stdin(Stdio::null())
            .status();
        match installed {
            Ok(status) if status.success() => return find_on_path(&CHROMIUM_NAMES),
            Ok(status) => eprintln!("xtask: warning: apt-get install chromium failed ({status}); going on"),
            Err(e) => eprintln!("xtask: warning: could not run apt-get ({e}); going on"),
        }
    }
    None
}

/// The first of `names` found as a file in a directory of the `PATH`.
fn find_on_path(names: &[&str]) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    names.iter().flat_map(|name| env::split_paths(&path).map(move |dir| dir.join(name))).find(|p| p.is_file())
}

/// Whether cargo arguments (before any `--`) choose packages themselves.
fn selects_package(args: &[String]) -> bool {
    args.iter().take_while(|a| *a != "--").any(|a| {
        a == "-p"
            || a == "--package"
            || a.starts_with("--package=")
            || (a.starts_with("-p") && !a.starts_with("--"))
            || a == "--workspace"
            || a == "--all"
    })
}

/// Makes `target/twice-venv` hold exactly what `tests/requirements.txt` asks for; returns the
/// absolute path of its interpreter. Installs only when the requirements changed since the
/// last install (or none finished).
fn prepare_venv(root: &Path) -> Result<PathBuf> {
    let requirements_path = root.join(REQUIREMENTS);
    let requirements = fs::read(&requirements_path)
        .with_context(|| format!("could not read {}", requirements_path.display()))?;
    let hash = format!("fnv1a64:{:016x}\n", fnv1a64(&requirements));
    let venv = target_dir(root).join(VENV_DIR);
    let python = venv.join("bin").join("python");
    let stamp = venv.join(VENV_STAMP);
    let retry = format!(
        "fix the cause above and run `cargo xtask test` again; to start from scratch, delete {} first",
        venv.display()
    );

    if python.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == hash) {
        println!("xtask: Python venv {} is up to date with {REQUIREMENTS}", venv.display());
        return Ok(python);
    }
    if !python.exists() {
        println!("xtask: creating Python venv {} (python3 -m venv)", venv.display());
        let status = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .stdin(Stdio::null())
            .status()
            .with_context(|| {
                format!("could not run python3 to create the venv: is Python 3 installed?\n{retry}")
            })?;
        if !status.success() {
            bail!(
                "`python3 -m venv {}` failed ({status}); on Debian or Ubuntu the venv module is in the \
                 python3-venv package\n{retry}",
                venv.display()
            );
        }
    }
    // A stamp only after a complete install: an interrupted one is redone next time.
    let _ = fs::remove_file(&stamp);
    println!(
        "xtask: installing the Python test dependencies from {REQUIREMENTS} into {} \
         (pip; this can take a few minutes the first time)",
        venv.display()
    );
    let status = Command::new(&python)
        .args(["-m", "pip", "install", "--disable-pip-version-check", "-q", "-r"])
        .arg(&requirements_path)
        .stdin(Stdio::null())
        .status()
        .with_context(|| format!("could not run {}\n{retry}", python.display()))?;
    if !status.success() {
        bail!("`pip install -r {REQUIREMENTS}` into {} failed ({status})\n{retry}", venv.display());
    }
    fs::write(&stamp, &hash).with_context(|| format!("could not write {}", stamp.display()))?;
    println!("xtask: Python test dependencies installed");
    Ok(python)
}

/// FNV-1a, 64 bits: stable across Rust versions, enough to notice an edited file.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

// ---------------------------------------------------------------------------------------------
// cargo xtask bench

/// A figure: one `BENCH` line; see the module documentation.
#[derive(Debug, Clone, Deserialize, Serialize)]
struct Record {
    bench: String,
    name: String,
    value: f64,
    unit: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    display: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    spread_pct: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    notes: Option<String>,
}

/// A table: one `BENCH` line with `table`, `columns` and `rows`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    bench: String,
    table: String,
    columns: Vec<String>,
    rows: Vec<Vec<String>>,
    #[serde(default)]
    notes: Option<String>,
}

/// Everything the benchmarks reported, in the order they printed it.
#[derive(Debug, Default)]
struct Records {
    figures: Vec<Record>,
    tables: Vec<Table>,
}

impl Records {
    /// Parses the JSON after `BENCH `: a table when it names one, a figure otherwise.
    fn add(&mut self, json: &str) -> Result<()> {
        let value: serde_json::Value = serde_json::from_str(json).context("not JSON")?;
        if value.get("table").is_some() {
            let table: Table = serde_json::from_value(value).context("not a table record")?;
            if let Some(row) = table.rows.iter().find(|r| r.len() != table.columns.len()) {
                bail!(
                    "table `{}` has {} columns but a row with {} cells: {row:?}",
                    table.table,
                    table.columns.len(),
                    row.len()
                );
            }
            self.tables.push(table);
        } else {
            self.figures.push(serde_json::from_value(value).context("not a figure record")?);
        }
        Ok(())
    }

    fn figure(&self, bench: &str, name: &str) -> Option<&Record> {
        self.figures.iter().find(|r| r.bench == bench && r.name == name)
    }
}

/// The figures of one run, as `docs/benchmarks.json` keeps them for the next.
#[derive(Debug, Deserialize, Serialize)]
struct Saved {
    date: String,
    figures: Vec<Record>,
}

/// A sentence of the headlines: `{}` is replaced by the figure (its `display`, or its value
/// and unit); with a target, whether the figure meets it is added.
struct Headline {
    bench: &'static str,
    name: &'static str,
    sentence: &'static str,
    target: Option<Target>,
}

/// A design target for a figure.
struct Target {
    /// Met when the value is at most `limit` (otherwise at least).
    at_most: bool,
    limit: f64,
    /// The target in words, e.g. "within 1.5x of bare hyper".
    text: &'static str,
}

impl Target {
    fn met(&self, value: f64) -> bool {
        if self.at_most { value <= self.limit } else { value >= self.limit }
    }
}

/// The headline figures, at the top of `docs/benchmarks.md` and in README.md.
const HEADLINES: &[Headline] = &[
    Headline {
        bench: "fake-services/throughput",
        name: "payments fake / wiremock stub, recording on",
        sentence: "The payments fake, with its ledger, journal and fault engine, creates refunds at {} the rate \
                   of a stateful refund stub written with the `wiremock` crate (as `MockServer::start()` gives it).",
        target: None,
    },
    Headline {
        bench: "fake-services/throughput",
        name: "bare / fake, no rules",
        sentence: "Bare hyper answering a fixed body serves {} the payments fake's rate on the same transport.",
        target: Some(Target { at_most: true, limit: 1.5, text: "within 1.5x of bare hyper" }),
    },
    Headline {
        bench: "twice-tests/search",
        name: "mutants found, twice",
        sentence: "twice's generator catches {} mutant executors (one classic bug each) within 1,000 generated \
                   cases in at least half of 20 seeds.",
        target: None,
    },
    Headline {
        bench: "twice-tests/search",
        name: "mutants found, baseline at its best setting per mutant",
        sentence: "A protocol-unaware baseline that delays or resets requests as a TCP fault proxy does, on the \
                   same intents, catches {} even with its fault rate tuned per mutant: it cannot make a service \
                   ignore or forget keys, lie in its acks, or crash a worker.",
        target: None,
    },
    Headline {
        bench: "twice-tests/search",
        name: "baseline p = 0.5 over twice, cases to the first violation",
        sentence: "Where both catch a mutant, the baseline at its highest fault rate (half of all requests) needs \
                   {} the cases twice's generator needs: it faults every request it can, while the generator \
                   spreads 0 to 3 faults per case over eleven kinds, contract terms and process events.",
        target: None,
    },
    Headline {
        bench: "harness/run",
        name: "sim over live, same catalog, same executor",
        sentence: "The catalog runs {} as fast in sim as live: same scenarios, same seed, the reference executor \
                   in process against its release binary.",
        target: None,
    },
    Headline {
        bench: "harness/run",
        name: "sim, generated cases, 2 threads",
        sentence: "Sim runs and checks generated cases against the reference executor at {} on 2 cores.",
        target: Some(Target {
            at_most: false,
            limit: 2_000.0,
            text: "thousands of cases per second on two cores (at least 2,000)",
        }),
    },
    Headline {
        bench: "harness/run",
        name: "simulated over wall time, 2 threads",
        sentence: "Simulated time runs {} faster than the wall clock.",
        target: Some(Target { at_most: false, limit: 1_000.0, text: "1,000x" }),
    },
    Headline {
        bench: "harness/python",
        name: "live, catalog + 20 generated (59 scenarios), Python executor, 8 jobs",
        sentence: "The catalog and 20 generated cases run live against the Python example executor (a \
                   process per worker, the real SDKs) in {}, 8 scenarios at a time on 2 cores, as `twice run \
                   --executor` runs them by default; at 2, 8 and 16 at a time every timing-sensitive verdict held.",
        target: Some(Target { at_most: true, limit: 30.0, text: "at most 30 s" }),
    },
    Headline {
        bench: "harness/python",
        name: "live, a buggy executor: catalog + 30 generated, shrinking included",
        sentence: "A live run whose executor has a bug that a dozen generated cases expose ends in {}, every \
                   failure shrunk (or marked as stopped by the 60 s budget) side by side.",
        target: Some(Target { at_most: true, limit: 120.0, text: "at most 120 s" }),
    },
    Headline {
        bench: "executor/intents",
        name: "raw / intents, propose 2000 then drain, FULL",
        sentence: "Raw single-row SQLite commits (WAL, synchronous=FULL) run {} as fast as the reference \
                   executor's intents, each two durable commits and a send.",
        target: Some(Target { at_most: true, limit: 2.0, text: "within 2x of raw commits" }),
    },
    Headline {
        bench: "harness/scaling",
        name: "time exponent over intents per scenario, 10 to 1000",
        sentence: "Sim time grows as intents^b with b = {} from 10 to 1,000 intents in one scenario.",
        target: None,
    },
    Headline {
        bench: "harness/scaling",
        name: "run of 10000 generated cases, peak memory above an idle process",
        sentence: "A run of 10,000 generated cases peaks at {} of memory above an idle process.",
        target: None,
    },
];

/// Where README.md's headlines go: the lines between these two are rewritten.
const README: &str = "README.md";
const HEADLINES_BEGIN: &str = "<!-- bench:headlines:begin (written by `cargo xtask bench`) -->";
const HEADLINES_END: &str = "<!-- bench:headlines:end -->";
const BENCH_JSON: &str = "docs/benchmarks.json";

fn bench() -> Result<i32> {
    let root = root();
    // Refuse early, before minutes of measuring, when the results would have nowhere to go.
    let readme_path = root.join(README);
    let readme = fs::read_to_string(&readme_path)
        .with_context(|| format!("could not read {}", readme_path.display()))?;
    with_headlines(&readme, "")?;
    // harness/python runs the Python executor on the SDK venv, which `test` prepares too.
    let python = prepare_venv(&root)?;
    println!("xtask: TWICE_PYTHON={}", python.display());
    // harness/run drives the reference executor's binary for its live figures: build it from
    // the current sources, in the profile benchmarks are built with.
    println!("xtask: building twice-executor (cargo build --release -p executor --bin twice-executor)");
    let built = cargo()
        .args(["build", "--release", "-p", "executor", "--bin", "twice-executor"])
        .current_dir(&root)
        .status()
        .context("could not start cargo build")?;
    if !built.success() {
        return Ok(exit_code(built));
    }
    let mut records = Records::default();
    for bench in BENCHES {
        println!("xtask: running cargo bench -p {} --bench {}", bench.package, bench.target);
        let mut child = cargo()
            .args(["bench", "-p", bench.package, "--bench", bench.target])
            .current_dir(&root)
            .env("TWICE_PYTHON", &python)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .context("could not start cargo bench")?;
        let stdout = child.stdout.take().context("cargo bench has no standard output")?;
        let mut echo = std::io::stdout().lock();
        let mut found = 0;
        for line in BufReader::new(stdout).lines() {
            let line = line.context("could not read the output of cargo bench")?;
            writeln!(echo, "{line}")?;
            echo.flush()?;
            if let Some(json) = line.strip_prefix(RECORD_PREFIX) {
                records.add(json).with_context(|| format!("{}: malformed record: {line}", bench.id()))?;
                found += 1;
            }
        }
        drop(echo);
        let status = child.wait().context("could not wait for cargo bench")?;
        if !status.success() {
            eprintln!("xtask: benchmark {} failed ({status}); {BENCH_DOC} left as it was", bench.id());
            return Ok(exit_code(status));
        }
        if found == 0 {
            bail!(
                "benchmark {} printed no `{RECORD_PREFIX}{{json}}` line; {BENCH_DOC} left as it was",
                bench.id()
            );
        }
    }
    let headlines = headlines(&records)?;
    let machine = machine();
    let json_path = root.join(BENCH_JSON);
    // An unreadable previous run is no reason to lose this one: it is only left out.
    let previous = match fs::read_to_string(&json_path) {
        Ok(text) => match serde_json::from_str::<Saved>(&text) {
            Ok(saved) => Some(saved),
            Err(e) => {
                eprintln!("xtask: warning: {BENCH_JSON} is not a previous run ({e}); no changes are shown");
                None
            }
        },
        Err(_) => None,
    };
    let doc = render(&machine, &records, &headlines, previous.as_ref());
    let path = root.join(BENCH_DOC);
    fs::write(&path, doc).with_context(|| format!("could not write {}", path.display()))?;
    let saved = Saved { date: machine.date.clone(), figures: records.figures.clone() };
    fs::write(&json_path, serde_json::to_string_pretty(&saved)? + "\n")
        .with_context(|| format!("could not write {}", json_path.display()))?;
    let readme = with_headlines(&readme, &headlines.join("\n"))?;
    fs::write(&readme_path, readme).with_context(|| format!("could not write {}", readme_path.display()))?;
    println!("xtask: wrote {BENCH_DOC}, {BENCH_JSON} and the headlines of {README}");
    Ok(0)
}

/// The headline sentences, one Markdown bullet each; an error names a figure no benchmark
/// reported, so that no sentence goes out with a stale number.
fn headlines(records: &Records) -> Result<Vec<String>> {
    HEADLINES
        .iter()
        .map(|h| {
            let r = records.figure(h.bench, h.name).with_context(|| {
                format!("headline figure `{}` of {} was not reported; nothing written", h.name, h.bench)
            })?;
            let figure = match &r.display {
                Some(text) => text.clone(),
                // A large ratio reads better without its decimals.
                None if r.unit == "x" && r.value.abs() >= 10.0 => format!("{}x", format_value(r.value, "")),
                None if r.unit == "x" => format!("{}x", format_value(r.value, &r.unit)),
                None if r.unit.is_empty() => format_value(r.value, &r.unit),
                None => format!("{} {}", format_value(r.value, &r.unit), r.unit),
            };
            let verdict = match &h.target {
                Some(t) if t.met(r.value) => format!(" Target: {}; met.", t.text),
                Some(t) => format!(" Target: {}; **not met**.", t.text),
                None => String::new(),
            };
            Ok(format!("- {}{verdict}", h.sentence.replacen("{}", &figure, 1)))
        })
        .collect()
}

/// `readme` with the lines between the headline markers replaced by `body`.
fn with_headlines(readme: &str, body: &str) -> Result<String> {
    let (Some(begin), Some(end)) = (readme.find(HEADLINES_BEGIN), readme.find(HEADLINES_END)) else {
        bail!("{README} has no `{HEADLINES_BEGIN}` ... `{HEADLINES_END}` block for the benchmark headlines");
    };
    if end < begin {
        bail!("in {README}, `{HEADLINES_END}` comes before `{HEADLINES_BEGIN}`");
    }
    let head = &readme[..begin + HEADLINES_BEGIN.len()];
    let tail = &readme[end..];
    Ok(if body.is_empty() { format!("{head}\n{tail}") } else { format!("{head}\n{body}\n{tail}") })
}

/// What the figures were measured on.
struct Machine {
    date: String,
    cpu: String,
    cores: String,
    memory: String,
    kernel: String,
    rustc: String,
}

fn machine() -> Machine {
    let unknown = || "unknown".to_string();
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name").and_then(|rest| rest.split_once(':')).map(|(_, v)| v.trim())
        })
        .map(str::to_string)
        .unwrap_or_else(unknown);
    let listed = cpuinfo.lines().filter(|l| l.starts_with("processor") && l.contains(':')).count();
    let cores = match (listed, std::thread::available_parallelism()) {
        (0, Ok(n)) => n.to_string(),
        (0, Err(_)) => unknown(),
        (n, Ok(usable)) if usable.get() < n => format!("{n} ({usable} usable by this process)"),
        (n, _) => n.to_string(),
    };
    let memory = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let kib: f64 = m
                .lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))?
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .ok()?;
            Some(format!("{:.1} GiB", kib / (1024.0 * 1024.0)))
        })
        .unwrap_or_else(unknown);
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    Machine {
        date: utc_date_time(secs),
        cpu,
        cores,
        memory,
        kernel: output_of("uname", &["-r"]).unwrap_or_else(unknown),
        rustc: output_of("rustc", &["--version"]).unwrap_or_else(unknown),
    }
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

/// `YYYY-MM-DD HH:MM UTC` for seconds since the Unix epoch.
fn utc_date_time(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let (hour, minute) = ((secs % 86_400) / 3600, (secs % 3600) / 60);
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {hour:02}:{minute:02} UTC")
}

fn render(machine: &Machine, records: &Records, headlines: &[String], previous: Option<&Saved>) -> String {
    let mut doc = String::new();
    // Writing to a String cannot fail; the results are ignored for that reason.
    let _ = writeln!(doc, "# Benchmarks\n");
    let _ = writeln!(doc, "Generated by `cargo xtask bench`; do not edit by hand, run it again.\n");
    let _ = writeln!(doc, "| | |\n|---|---|");
    for (what, value) in [
        ("date", &machine.date),
        ("CPU", &machine.cpu),
        ("cores", &machine.cores),
        ("memory", &machine.memory),
        ("kernel", &machine.kernel),
        ("rustc", &machine.rustc),
    ] {
        let _ = writeln!(doc, "| {what} | {} |", cell(value));
    }
    let _ = writeln!(doc, "| command | `cargo xtask bench` |");
    if let Some(p) = previous {
        let _ = writeln!(doc, "| previous run | {} (the `previous` column) |", cell(&p.date));
    }
    if !headlines.is_empty() {
        let _ = writeln!(doc, "\n## Headlines\n");
        for h in headlines {
            let _ = writeln!(doc, "{h}");
        }
    }

    let before = |r: &Record| {
        previous.and_then(|p| {
            p.figures.iter().find(|q| q.bench == r.bench && q.name == r.name && q.unit == r.unit)
        })
    };
    // Sections in the order of BENCHES, then any other `bench` value in order of appearance.
    let mut order: Vec<String> = BENCHES.iter().map(Bench::id).collect();
    for bench in records.figures.iter().map(|r| &r.bench).chain(records.tables.iter().map(|t| &t.bench)) {
        if !order.contains(bench) {
            order.push(bench.clone());
        }
    }
    let about: BTreeMap<String, &str> = BENCHES.iter().map(|b| (b.id(), b.about)).collect();
    for id in &order {
        let rows: Vec<&Record> = records.figures.iter().filter(|r| &r.bench == id).collect();
        let tables: Vec<&Table> = records.tables.iter().filter(|t| &t.bench == id).collect();
        if rows.is_empty() && tables.is_empty() {
            continue;
        }
        let _ = writeln!(doc, "\n## {id}\n");
        if let Some(about) = about.get(id) {
            let _ = writeln!(doc, "{about}\n");
        }
        if !rows.is_empty() {
            if previous.is_some() {
                let _ = writeln!(
                    doc,
                    "| figure | value | unit | spread | previous | change |\n|---|--:|---|--:|--:|--:|"
                );
            } else {
                let _ = writeln!(doc, "| figure | value | unit | spread |\n|---|--:|---|--:|");
            }
            for r in &rows {
                let spread = r.spread_pct.map(|s| format!("{s:.1} %")).unwrap_or_default();
                let value = r.display.as_deref().map_or_else(|| format_value(r.value, &r.unit), cell);
                let _ = write!(doc, "| {} | {value} | {} | {spread} |", cell(&r.name), cell(&r.unit));
                if previous.is_some() {
                    let (was, change) = match before(r) {
                        Some(q) => (
                            q.display.as_deref().map_or_else(|| format_value(q.value, &q.unit), cell),
                            change_pct(q.value, r.value).map(|c| format!("{c:+.1} %")).unwrap_or_default(),
                        ),
                        None => ("new".to_string(), String::new()),
                    };
                    let _ = write!(doc, " {was} | {change} |");
                }
                doc.push('\n');
            }
            let notes: Vec<&Record> =
                rows.iter().copied().filter(|r| r.notes.as_deref().is_some_and(|n| !n.is_empty())).collect();
            if !notes.is_empty() {
                doc.push('\n');
                for r in notes {
                    let _ = writeln!(doc, "- {}: {}", r.name, r.notes.as_deref().unwrap_or_default());
                }
            }
        }
        for t in tables {
            let _ = writeln!(doc, "\n### {}\n", t.table);
            let _ =
                writeln!(doc, "| {} |", t.columns.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | "));
            let _ = writeln!(doc, "|{}", "---|".repeat(t.columns.len()));
            for row in &t.rows {
                let _ = writeln!(doc, "| {} |", row.iter().map(|c| cell(c)).collect::<Vec<_>>().join(" | "));
            }
            if let Some(notes) = t.notes.as_deref().filter(|n| !n.is_empty()) {
                let _ = writeln!(doc, "\n{notes}");
            }
        }
    }
    if let Some(p) = previous {
        let _ = writeln!(doc, "\n## From one run to the next\n");
        let _ = writeln!(doc, "{}", run_to_run(&records.figures, p));
    }
    let _ = writeln!(doc, "\nSpread is (max - min) / median over the repeated measurements within this run.");
    doc
}

/// The change from `was` to `now` in percent of `was`; none from zero.
fn change_pct(was: f64, now: f64) -> Option<f64> {
    (was != 0.0).then(|| (now - was) / was.abs() * 100.0)
}

/// A paragraph on how far the figures moved since the previous run: the typical change, how
/// many moved no more than their own spread, and the largest moves.
fn run_to_run(figures: &[Record], previous: &Saved) -> String {
    // Measured figures only: a figure without a spread is a count or a derived total.
    let mut moves: Vec<(&Record, f64, bool)> = figures
        .iter()
        .filter(|r| r.spread_pct.is_some())
        .filter_map(|r| {
            let q = previous
                .figures
                .iter()
                .find(|q| q.bench == r.bench && q.name == r.name && q.unit == r.unit)?;
            let change = change_pct(q.value, r.value)?;
            let bound = r.spread_pct.unwrap_or(0.0).max(q.spread_pct.unwrap_or(0.0));
            Some((r, change, change.abs() <= bound))
        })
        .collect();
    if moves.is_empty() {
        return format!("No figure with a spread was measured both now and in the run of {}.", previous.date);
    }
    let mut sizes: Vec<f64> = moves.iter().map(|m| m.1.abs()).collect();
    sizes.sort_by(f64::total_cmp);
    let median = sizes[sizes.len() / 2];
    let within = moves.iter().filter(|m| m.2).count();
    moves.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
    let largest: Vec<String> =
        moves.iter().take(3).map(|(r, c, _)| format!("{} ({}) {c:+.1} %", r.name, r.bench)).collect();
    format!(
        "Against the run of {}: {} measured figures appear in both; the median change is {median:.1} %, and \
         {within} of them moved by no more than their spread (the larger of the two runs'). The largest \
         changes: {}.",
        previous.date,
        moves.len(),
        largest.join("; ")
    )
}

/// Text safe inside a table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}

/// Ratios with two decimals; larger figures with fewer, thousands grouped.
fn format_value(value: f64, unit: &str) -> String {
    let places = if unit == "x" || value.abs() < 10.0 {
        2
    } else if value.abs() < 100.0 {
        1
    } else {
        0
    };
    let text = format!("{value:.places$}");
    let (int, frac) = text.split_once('.').map_or((text.as_str(), None), |(i, f)| (i, Some(f)));
    let (sign, digits) = int.strip_prefix('-').map_or(("", int), |d| ("-", d));
    let mut grouped = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_civil_utc() {
        assert_eq!(utc_date_time(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_date_time(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_date_time(1_767_225_599), "2025-12-31 23:59 UTC");
    }

    #[test]
    fn values_are_grouped() {
        assert_eq!(format_value(12_345.6, "req/s"), "12,346");
        assert_eq!(format_value(1_234_567.0, "req/s"), "1,234,567");
        assert_eq!(format_value(1.2345, "x"), "1.23");
        assert_eq!(format_value(42.0, "ms"), "42.0");
        assert_eq!(format_value(-1500.0, "ms"), "-1,500");
    }

    #[test]
    fn package_selection_is_noticed() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(selects_package(&args(&["-p", "xtask"])));
        assert!(selects_package(&args(&["-pxtask"])));
        assert!(selects_package(&args(&["--package=xtask"])));
        assert!(!selects_package(&args(&["--release", "--", "-p"])));
        assert!(!selects_package(&args(&[])));
    }

    #[test]
    fn records_render_in_order() {
        let line = r#"{"bench":"fake-services/throughput","name":"a | b","value":1500.0,"unit":"req/s","spread_pct":2.0,"notes":"n"}"#;
        let mut records = Records::default();
        records.add(line).expect("a valid record");
        let doc = render(&machine_for_tests(), &records, &[], None);
        assert!(doc.contains("| a \\| b | 1,500 | req/s | 2.0 % |"), "{doc}");
        assert!(doc.contains("- a | b: n"), "{doc}");
    }

    fn machine_for_tests() -> Machine {
        Machine {
            date: "d".into(),
            cpu: "c".into(),
            cores: "2".into(),
            memory: "m".into(),
            kernel: "k".into(),
            rustc: "r".into(),
        }
    }

    #[test]
    fn tables_and_displayed_figures_render() {
        let mut records = Records::default();
        records
            .add(r#"{"bench":"b/s","name":"found","value":2000,"unit":"cases","display":"not found within 2,000"}"#)
            .expect("a figure");
        records
            .add(r#"{"bench":"b/s","table":"per mutant","columns":["mutant","cases"],"rows":[["x","3"]],"notes":"n"}"#)
            .expect("a table");
        let doc = render(&machine_for_tests(), &records, &[], None);
        assert!(doc.contains("| found | not found within 2,000 | cases |  |"), "{doc}");
        assert!(doc.contains("### per mutant\n\n| mutant | cases |\n|---|---|\n| x | 3 |\n\nn"), "{doc}");
        let ragged = records.add(r#"{"bench":"b/s","table":"t","columns":["a","b"],"rows":[["x"]]}"#);
        assert!(ragged.is_err_and(|e| e.to_string().contains("2 columns but a row with 1")));
        assert!(records.add(r#"{"bench":"b/s","table":"t","columns":[],"rows":[],"extra":1}"#).is_err());
    }

    #[test]
    fn changes_since_the_previous_run_are_shown() {
        let mut records = Records::default();
        records
            .add(r#"{"bench":"b/s","name":"rate","value":110,"unit":"req/s","spread_pct":5}"#)
            .expect("ok");
        records.add(r#"{"bench":"b/s","name":"fresh","value":1,"unit":"x","spread_pct":1}"#).expect("ok");
        let previous = Saved {
            date: "then".into(),
            figures: vec![Record {
                bench: "b/s".into(),
                name: "rate".into(),
                value: 100.0,
                unit: "req/s".into(),
                display: None,
                spread_pct: Some(12.0),
                notes: None,
            }],
        };
        let doc = render(&machine_for_tests(), &records, &[], Some(&previous));
        assert!(doc.contains("| rate | 110 | req/s | 5.0 % | 100 | +10.0 % |"), "{doc}");
        assert!(doc.contains("| fresh | 1.00 | x | 1.0 % | new |  |"), "{doc}");
        assert!(doc.contains("Against the run of then: 1 measured figures appear in both"), "{doc}");
        assert!(doc.contains("1 of them moved by no more than their spread"), "{doc}");
    }

    #[test]
    fn headlines_go_between_the_markers_and_need_their_figures() {
        let readme = format!("# t\n\n{HEADLINES_BEGIN}\n- old\n{HEADLINES_END}\n\nrest\n");
        let written = with_headlines(&readme, "- new").expect("markers present");
        assert_eq!(written, format!("# t\n\n{HEADLINES_BEGIN}\n- new\n{HEADLINES_END}\n\nrest\n"));
        assert!(with_headlines("# no markers", "- x").is_err());
        // Every headline names a figure; with none reported, the first is named in the error.
        if let Some(first) = HEADLINES.first() {
            let error = headlines(&Records::default()).expect_err("no figures");
            assert!(error.to_string().contains(first.name), "{error}");
        }
    }

    #[test]
    fn the_readme_has_the_headline_markers() {
        let readme = fs::read_to_string(root().join(README)).expect("README.md is readable");
        assert!(with_headlines(&readme, "").is_ok());
    }
}
