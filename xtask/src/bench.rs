//! `cargo xtask bench`: the run of the benchmark targets ([`BENCHES`], in `benches.rs`):
//! build what they drive, run each, collect its `BENCH` records, then write
//! `docs/benchmarks.md`, `docs/benchmarks.json` and README.md's headlines.
//!
//! Only this module runs anything or touches files; the rendering it calls is pure.

use std::fs;
use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, Result, bail};

// Also public here, where `main.rs` and `records.rs` name the table in their docs.
pub(crate) use crate::benches::BENCHES;
use crate::headlines::{README, headlines, with_headlines};
use crate::machine::machine;
use crate::records::{Records, Saved};
use crate::render::render;
use crate::venv::prepare_venv;
use crate::{cargo, exit_code, root};

const BENCH_DOC: &str = "docs/benchmarks.md";
const RECORD_PREFIX: &str = "BENCH ";

const BENCH_JSON: &str = "docs/benchmarks.json";

pub(crate) fn bench() -> Result<i32> {
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
    println!("xtask: building twice-executor (cargo build --release -p twice --bin twice-executor)");
    let built = cargo()
        .args(["build", "--release", "-p", "twice", "--bin", "twice-executor"])
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
    write(&root, &readme, &records)
}

/// `cargo xtask bench --from-log FILE`: the documents rewritten from the `BENCH` lines of a
/// run's saved output, without measuring again (a run whose figures could not be written,
/// say because a headline no longer matched, is not lost). The machine and the date are
/// taken now, so the log must come from this machine.
pub(crate) fn bench_from_log(log: &Path) -> Result<i32> {
    let root = root();
    let readme_path = root.join(README);
    let readme = fs::read_to_string(&readme_path)
        .with_context(|| format!("could not read {}", readme_path.display()))?;
    let text = fs::read_to_string(log).with_context(|| format!("could not read {}", log.display()))?;
    let mut records = Records::default();
    for (n, line) in text.lines().enumerate() {
        if let Some(json) = line.strip_prefix(RECORD_PREFIX) {
            records.add(json).with_context(|| format!("{}:{}: malformed record", log.display(), n + 1))?;
        }
    }
    if records.figures.is_empty() {
        bail!("{} holds no `{RECORD_PREFIX}{{json}}` line; {BENCH_DOC} left as it was", log.display());
    }
    write(&root, &readme, &records)
}

/// Writes `docs/benchmarks.md`, its JSON and README.md's headlines from `records`.
fn write(root: &Path, readme: &str, records: &Records) -> Result<i32> {
    let readme_path = root.join(README);
    let headlines = headlines(records)?;
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
    let doc = render(&machine, records, &headlines, previous.as_ref());
    let path = root.join(BENCH_DOC);
    fs::write(&path, doc).with_context(|| format!("could not write {}", path.display()))?;
    let saved = Saved { date: machine.date.clone(), figures: records.figures.clone() };
    fs::write(&json_path, serde_json::to_string_pretty(&saved)? + "\n")
        .with_context(|| format!("could not write {}", json_path.display()))?;
    let readme = with_headlines(readme, &headlines.join("\n"))?;
    fs::write(&readme_path, readme).with_context(|| format!("could not write {}", readme_path.display()))?;
    println!("xtask: wrote {BENCH_DOC}, {BENCH_JSON} and the headlines of {README}");
    Ok(0)
}
