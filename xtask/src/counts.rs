//! Counted costs: instructions (Callgrind) and fsyncs (strace) per unit of work, the measures
//! that do not move with the machine's neighbours, and the targets they are judged by.
//!
//! Every count is a difference of two runs of different lengths divided by the difference in
//! work, which cancels start-up and shut-down, and is taken twice; the spread is how far the
//! two differed. What is counted:
//!
//! - instructions per refund request served, in the server's process only (`count_server` of
//!   fake-services, one current-thread runtime, driven from another process over one keep-alive
//!   loopback connection): bare hyper answering a fixed body, the payments fake, the wiremock
//!   stub of the throughput benchmark;
//! - instructions per generated sim case and per catalog scenario, in the release `twice run
//!   --jobs 1` (the default generator and seed);
//! - instructions per intent in the reference executor's propose-and-drain (`count_intents` of
//!   the executor crate, the payments fake in another process);
//! - fsyncs and fdatasyncs per confirmed intent in batches of 1, 8 and 64, and per raw
//!   single-row SQLite commit, both with `synchronous=FULL`, on the disk the project builds on.
//!
//! `cargo xtask bench --counts` runs them alone and rewrites their block of
//! `docs/benchmarks.md`; `cargo xtask bench` runs them first; `--compare BASE` counts a
//! worktree of another commit beside this one (`compare.rs`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::records::Record;
use crate::{cargo, target_dir};

mod runs;

use runs::{Server, executor_instructions, fsyncs, server_instructions, sim_instructions};

/// The name of the counts in `BENCH` records and `docs/benchmarks.json`.
pub(crate) use crate::benches::COUNTS as BENCH;

/// Instructions per generated sim case before the work on counts, against which the target is
/// set (`cargo xtask bench --compare 74dcd85`): a count depends on the code, not the machine.
pub(crate) const SIM_CASE_BASELINE_INSTR: f64 = 3_012_103.0;
pub(crate) const SIM_CASE_TARGET: f64 = 0.75;
/// The payments fake's instructions per request over bare hyper's, at most.
pub(crate) const FAKE_OVER_BARE_MAX: f64 = 1.5;
/// Fsyncs per confirmed intent, at most, by batch size.
pub(crate) const FSYNC_TARGETS: [(usize, f64); 2] = [(8, 0.25), (64, 1.0 / 32.0)];

/// Why a target is not met, said under its figure while it is not.
const NOT_MET_FAKE: &str = " Why: in a Callgrind profile of `count_server`, hyper's own serving inside the fake \
    costs about as much as bare hyper's whole figure, and the fake's parsing, ledger, journal, keys and answer \
    add more, much of it allocation in the request and journal types every fake shares. The 1.5x was set on \
    wall-clock rates, where the kernel's loopback work weighs on bare hyper too; user-space instructions do \
    not see it.";
const NOT_MET_SIM: &str = " Why: a generated case holds more work than the count before this work measured: the \
    generator now draws intents that share a payment, a recipient or an address with an earlier one (a second \
    partial refund, a second message), which are sent where the replacements they were drawn as before mostly \
    were not; with those draws turned off the same code counts 2,228,664 (0.74x, Callgrind, the same two runs). \
    The rest of a case's cost is spread over the sim's worker tasks, the SQLite intent log, secp256k1 recovery \
    and signing, and allocation.";
const NOT_MET_FSYNC: &str = " Why: two waits per batch are the floor of what the log promises, one before a \
    proposal is acknowledged and one before anything is sent (a resend after a power cut must know a first \
    send may have landed); two per batch is the target exactly, and SQLite's checkpoints add two per 1,000 WAL \
    pages. Meeting it means giving up one of the two waits.";

/// Requests in the short and the long server run.
const REQUESTS: (u64, u64) = (100, 600);
/// Generated cases in the short and the long sim run.
const CASES: (u64, u64) = (0, 40);
/// Intents in the short and the long executor run, multiples of every batch size.
const INTENTS_INSTR: (u64, u64) = (64, 320);
const INTENTS_FSYNC: (u64, u64) = (256, 1_280);
const BATCHES: [usize; 3] = [1, 8, 64];

/// The built programs the counts run.
pub(crate) struct Programs {
    pub(crate) twice: PathBuf,
    pub(crate) count_server: PathBuf,
    pub(crate) count_intents: PathBuf,
    /// Scratch files, on the disk the project builds on.
    pub(crate) scratch: PathBuf,
}

impl Programs {
    /// Builds the release `twice` and the two counting programs of the checkout at `root`
    /// into `target` (the default target directory when `None`).
    pub(crate) fn build(root: &Path, target: Option<&Path>) -> Result<Programs> {
        println!("xtask: building twice, count_server and count_intents (release)");
        let mut build = cargo();
        build.args([
            "build",
            "--release",
            "-p",
            "twice",
            "--bin",
            "twice",
            "-p",
            "fake-services",
            "--example",
            "count_server",
            "-p",
            "executor",
            "--example",
            "count_intents",
        ]);
        build.current_dir(root);
        if let Some(t) = target {
            build.env("CARGO_TARGET_DIR", t);
        }
        let status = build.status().context("could not start cargo build")?;
        if !status.success() {
            bail!("cargo build failed in {} ({status})", root.display());
        }
        let target = target.map(Path::to_path_buf).unwrap_or_else(|| target_dir(root));
        let release = target.join("release");
        Ok(Programs {
            twice: release.join("twice"),
            count_server: release.join("examples/count_server"),
            count_intents: release.join("examples/count_intents"),
            scratch: target.join("count-tmp"),
        })
    }
}

/// One counted figure: its two measurements and what it is judged by.
struct Count {
    name: String,
    unit: &'static str,
    runs: [f64; 2],
    notes: String,
}

impl Count {
    fn value(&self) -> f64 {
        (self.runs[0] + self.runs[1]) / 2.0
    }

    fn spread_pct(&self) -> f64 {
        let v = self.value();
        if v == 0.0 { 0.0 } else { (self.runs[0] - self.runs[1]).abs() / v * 100.0 }
    }

    fn record(&self) -> Record {
        Record {
            bench: BENCH.to_string(),
            name: self.name.clone(),
            value: self.value(),
            unit: self.unit.to_string(),
            display: None,
            spread_pct: Some(self.spread_pct()),
            notes: Some(self.notes.clone()),
        }
    }
}

/// Checks that Valgrind and strace are there, with the hint to install them.
pub(crate) fn check_tools() -> Result<()> {
    for (tool, args) in [("valgrind", ["--version"]), ("strace", ["-V"])] {
        if crate::output_of(tool, &args).is_none() {
            bail!(
                "`{tool}` is needed to count instructions and fsyncs; install it (Debian: apt install valgrind strace)"
            );
        }
    }
    Ok(())
}

/// A cost per unit of work, taken twice: `measure` of a short and of a long run (`lengths`, in
/// units), the difference over the difference in units, which cancels start-up and teardown.
fn per_unit(lengths: (u64, u64), mut measure: impl FnMut(u64) -> Result<f64>) -> Result<[f64; 2]> {
    let mut runs = [0.0; 2];
    for run in &mut runs {
        let short = measure(lengths.0)?;
        let long = measure(lengths.1)?;
        *run = (long - short) / (lengths.1 - lengths.0) as f64;
    }
    Ok(runs)
}

/// Runs every count twice and returns its records, targets judged in their notes; prints
/// each figure and whether its target is met as it goes.
pub(crate) fn count(programs: &Programs) -> Result<Vec<Record>> {
    check_tools()?;
    std::fs::create_dir_all(&programs.scratch)
        .with_context(|| format!("could not create {}", programs.scratch.display()))?;
    let mut counts = server_counts(programs)?;
    counts.extend(sim_counts(programs)?);
    let server = Server::start(programs)?;
    counts.extend(executor_counts(programs, &server.url)?);
    counts.extend(fsync_counts(programs, &server.url)?);
    drop(server);
    let _ = std::fs::remove_dir_all(&programs.scratch);

    let records: Vec<Record> = counts.iter().map(Count::record).collect();
    for r in &records {
        println!(
            "xtask: count {}: {} {} (two runs {:.3} % apart)",
            r.name,
            crate::render::format_value(r.value, &r.unit),
            r.unit,
            r.spread_pct.unwrap_or(0.0)
        );
        if let Some(notes) = &r.notes
            && let Some((_, target)) = notes.split_once("Target: ")
        {
            println!("xtask:   target: {target}");
        }
    }
    Ok(records)
}

/// Instructions per refund request served by bare hyper, the payments fake and the wiremock
/// stub, and the fake's over the other two, judged by their targets.
fn server_counts(programs: &Programs) -> Result<Vec<Count>> {
    let per_request =
        |kind: &str| -> Result<[f64; 2]> { per_unit(REQUESTS, |n| server_instructions(programs, kind, n)) };
    let bare = per_request("bare")?;
    let fake = per_request("payments")?;
    let stub = per_request("wiremock")?;
    let about_server = format!(
        "Instructions in the server's process per POST /v1/refunds (form body, Bearer key, a fresh \
         Idempotency-Key each), one keep-alive loopback connection, one request at a time, the server \
         on one current-thread tokio runtime (fake-services' `count_server`): the difference between \
         {} and {} requests over {}.",
        REQUESTS.1,
        REQUESTS.0,
        REQUESTS.1 - REQUESTS.0
    );
    let ratio = |a: [f64; 2], b: [f64; 2]| [a[0] / b[0], a[1] / b[1]];
    let fake_bare = ratio(fake, bare);
    let met_bare = judged((fake_bare[0] + fake_bare[1]) / 2.0 <= FAKE_OVER_BARE_MAX);
    let fake_stub = ratio(fake, stub);
    let met_stub = judged((fake_stub[0] + fake_stub[1]) / 2.0 < 1.0);
    Ok(vec![
        Count {
            name: "refund request, bare hyper answering a fixed body".into(),
            unit: "instr",
            runs: bare,
            notes: about_server,
        },
        Count {
            name: "refund request, payments fake".into(),
            unit: "instr",
            runs: fake,
            notes: "As above; the fake keeps its ledger, journal, keys and fault plan.".into(),
        },
        Count {
            name: "refund request, wiremock stub".into(),
            unit: "instr",
            runs: stub,
            notes: "As above, the stateful refund stub of the throughput benchmark on wiremock 0.6, request \
                    recording on (`MockServer::start()`)."
                .into(),
        },
        Count {
            name: "payments fake / bare hyper, per request".into(),
            unit: "x",
            runs: fake_bare,
            notes: format!(
                "Target: at most {FAKE_OVER_BARE_MAX}x bare hyper's instructions per request; {met_bare}.{}",
                if met_bare == "met" { "" } else { NOT_MET_FAKE }
            ),
        },
        Count {
            name: "payments fake / wiremock stub, per request".into(),
            unit: "x",
            runs: fake_stub,
            notes: format!("Target: fewer instructions per request than the wiremock stub; {met_stub}."),
        },
    ])
}

/// Instructions per generated sim case, judged by its target, and per catalog scenario.
fn sim_counts(programs: &Programs) -> Result<Vec<Count>> {
    let mut sim = [(0.0, 0.0); 2];
    for run in &mut sim {
        *run = sim_instructions(programs)?;
    }
    let case = [sim[0].0, sim[1].0];
    let target = SIM_CASE_BASELINE_INSTR * SIM_CASE_TARGET;
    let value = (case[0] + case[1]) / 2.0;
    Ok(vec![
        Count {
            name: "generated sim case".into(),
            unit: "instr",
            runs: case,
            notes: format!(
                "`twice run --cases {} --jobs 1` minus `--cases {}`, over {}: the default generator and seed, \
                 each case run in process against the reference executor and checked, its results kept for \
                 the reports. Target: at most {SIM_CASE_TARGET}x {} (the count before this work) = {}; {} ({:.2}x).{}",
                CASES.1,
                CASES.0,
                CASES.1 - CASES.0,
                thousands(SIM_CASE_BASELINE_INSTR),
                thousands(target),
                judged(value <= target),
                value / SIM_CASE_BASELINE_INSTR,
                if value <= target { "" } else { NOT_MET_SIM }
            ),
        },
        Count {
            name: "catalog scenario, sim".into(),
            unit: "instr",
            runs: [sim[0].1, sim[1].1],
            notes:
                "`twice run --cases 0 --jobs 1` (the catalog) minus `--scenario lost_refund_reply`, over the \
                    catalog's size less one."
                    .into(),
        },
    ])
}

/// Instructions per intent of the reference executor, in each batch size, against the
/// payments fake at `url`.
fn executor_counts(programs: &Programs, url: &str) -> Result<Vec<Count>> {
    let mut counts = Vec::new();
    for batch in BATCHES {
        let runs = per_unit(INTENTS_INSTR, |n| executor_instructions(programs, url, n, batch))?;
        counts.push(Count {
            name: format!("intent, reference executor, batches of {batch}"),
            unit: "instr",
            runs,
            notes: if batch == BATCHES[0] {
                format!(
                    "Instructions in the executor's process per refund: `Executor::propose_batch` of {batch}, then \
                     `drain` until confirmed, repeated (executor's `count_intents`, Durability::Full, the \
                     payments fake in another process): {} intents minus {}, over the difference.",
                    INTENTS_INSTR.1, INTENTS_INSTR.0
                )
            } else {
                format!("As above, in batches of {batch}.")
            },
        });
    }
    Ok(counts)
}

/// Fsyncs per confirmed intent in each batch size, against the payments fake at `url`,
/// judged by their targets; and per raw single-row commit, the floor.
fn fsync_counts(programs: &Programs, url: &str) -> Result<Vec<Count>> {
    let mut counts = Vec::new();
    for batch in BATCHES {
        let runs = per_unit(INTENTS_FSYNC, |n| fsyncs(programs, Some(url), n, batch).map(|c| c as f64))?;
        let target = FSYNC_TARGETS.iter().find(|(b, _)| *b == batch).map(|(_, t)| *t);
        let value = (runs[0] + runs[1]) / 2.0;
        let judgement = match target {
            Some(t) if value <= t => format!(" Target: at most {}; met.", fraction(t)),
            Some(t) => format!(" Target: at most {}; {}.{NOT_MET_FSYNC}", fraction(t), judged(false)),
            None => String::new(),
        };
        counts.push(Count {
            name: format!("fsyncs per confirmed intent, batches of {batch}"),
            unit: "fsync",
            runs,
            notes: if batch == BATCHES[0] {
                format!(
                    "fsync and fdatasync calls (strace -f -c) per confirmed refund, proposed in batches of {batch} \
                     and drained after each (Durability::Full, WAL): {} intents minus {}. A batch costs one \
                     wait for its proposal and one for the markers before its sends; a write that only \
                     confirms does not wait (reconciliation can redo it); SQLite's checkpoints add two per \
                     1,000 WAL pages.{judgement}",
                    INTENTS_FSYNC.1, INTENTS_FSYNC.0
                )
            } else {
                format!("As above, in batches of {batch}.{judgement}")
            },
        });
    }
    let runs = per_unit(INTENTS_FSYNC, |n| fsyncs(programs, None, n, 1).map(|c| c as f64))?;
    counts.push(Count {
        name: "fsyncs per raw single-row commit".into(),
        unit: "fsync",
        runs,
        notes: "One INSERT of one small row per transaction, WAL, synchronous=FULL: the floor of anything \
                that must be durable before it answers."
            .into(),
    });
    Ok(counts)
}

/// A target's judgement as the notes say it.
fn judged(met: bool) -> &'static str {
    if met { "met" } else { "**not met**" }
}

/// A target as a fraction where it is one (`1/32`).
fn fraction(value: f64) -> String {
    let inverse = 1.0 / value;
    if (inverse - inverse.round()).abs() < 1e-9 {
        format!("1/{}", inverse.round())
    } else {
        format!("{value}")
    }
}

/// A count of instructions as the benchmarks page writes it (`3,012,103`).
pub(crate) fn thousands(value: f64) -> String {
    crate::render::format_value(value.round(), "instr")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_name_their_fraction() {
        assert_eq!(fraction(0.25), "1/4");
        assert_eq!(fraction(1.0 / 32.0), "1/32");
    }
}
