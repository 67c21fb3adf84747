//! `cargo xtask bench`: the run of the benchmark targets ([`BENCHES`], in `benches.rs`):
//! build what they drive, run each, collect its `BENCH` records, then write
//! `docs/benchmarks.md`, `docs/benchmarks.json` and README.md's headlines. The counts
//! (`counts.rs`) run first, and alone with `--counts`.
//!
//! Only this module runs anything or touches files; the rendering it calls is pure.

use std::fs;
use std::io::{BufRead, BufReader, Write as _};
use std::path::Path;
use std::process::Stdio;

use anyhow::{Context, Result, bail};

// Also public here, where `main.rs` and `records.rs` name the table in their docs.
pub(crate) use crate::benches::BENCHES;
use crate::benches::Bench;
use crate::counts::{BENCH as COUNTS, Programs, count};
use crate::headlines::{README, headlines, with_headlines};
use crate::machine::machine;
use crate::records::{Records, Saved};
use crate::render::{COUNTS_END, COUNTS_START, counts_block, render, section_block};
use crate::venv::prepare_venv;
use crate::{cargo, exit_code, root};
use crate::{ci_log, engines_log, inner_loop};

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
    // twice/python runs the Python executor on the SDK venv, which `test` prepares too.
    let python = prepare_venv(&root)?;
    println!("xtask: TWICE_PYTHON={}", python.display());
    // twice/run drives the reference executor's binary for its live figures: build it from
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
    // The counts first: they judge the targets, and they do not care what runs beside them.
    let programs = Programs::build(&root, None)?;
    records.figures.extend(count(&programs)?);
    records.figures.extend(inner_loop::measure(&root)?);
    // CI's stage times are read from its output, not measured here: the last ones read stay.
    records.figures.extend(saved_figures(&root, ci_log::BENCH));
    records.figures.extend(saved_figures(&root, engines_log::BENCH));
    for bench in BENCHES.iter().filter(|b| b.package != "xtask") {
        if let Some(failed) = run_bench(&root, bench, &python, &mut records)? {
            return Ok(failed);
        }
    }
    write(&root, &readme, &records)
}

/// Runs one timed benchmark target and adds its `BENCH` records to `records`, echoing its
/// output; `Some(code)` when it failed (the documents are then left as they were).
fn run_bench(root: &Path, bench: &Bench, python: &Path, records: &mut Records) -> Result<Option<i32>> {
    println!("xtask: running cargo bench -p {} --bench {}", bench.package, bench.target);
    let mut child = cargo()
        .args(["bench", "-p", bench.package, "--bench", bench.target])
        .current_dir(root)
        .env("TWICE_PYTHON", python)
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
        return Ok(Some(exit_code(status)));
    }
    if found == 0 {
        bail!(
            "benchmark {} printed no `{RECORD_PREFIX}{{json}}` line; {BENCH_DOC} left as it was",
            bench.id()
        );
    }
    Ok(None)
}

/// `cargo xtask bench --only ID`: one timed benchmark target, run again alone; rewrites its
/// section of `docs/benchmarks.md`, its figures in `docs/benchmarks.json` and the headlines,
/// and leaves every other figure as the last full run (or `--counts`) left it: for a figure
/// that changed with the code, without the hour of a whole run.
pub(crate) fn bench_only(id: &str) -> Result<i32> {
    let read_from_logs = |b: &str| b == COUNTS || b == ci_log::BENCH || b == engines_log::BENCH;
    let Some(bench) = BENCHES.iter().find(|b| b.id() == id && !read_from_logs(&b.id())) else {
        let ids: Vec<String> = BENCHES.iter().map(Bench::id).filter(|b| !read_from_logs(b)).collect();
        bail!("no timed benchmark `{id}` (the counts run with --counts); there are: {}", ids.join(", "));
    };
    let root = root();
    let (doc, saved) = read_saved(&root)?;
    // Refused before minutes of measuring when the section has nowhere to go.
    let doc = with_place_for(&doc, id)?;
    with_section(&doc, id, "")?;
    let python = prepare_venv(&root)?;
    println!("xtask: TWICE_PYTHON={}", python.display());
    let mut records = Records::default();
    if id == inner_loop::BENCH {
        records.figures.extend(inner_loop::measure(&root)?);
    } else if let Some(failed) = run_bench(&root, bench, &python, &mut records)? {
        return Ok(failed);
    }
    let measured = format!(
        "Measured {} by `cargo xtask bench --only {id}`, on {}; the other timed sections are from the run \
         dated above.",
        machine().date,
        code_measured(&root)
    );
    write_section(&root, (&doc, saved), bench, &records, &measured)
}

/// A run too long to repeat inside a benchmark run, read from its saved output instead.
pub(crate) enum SavedLog {
    /// A fresh-clone `.ci/run` (`ci_log.rs`): section `xtask/ci`.
    Ci,
    /// A full `cargo xtask engines` (`engines_log.rs`): section `xtask/engines`.
    Engines,
}

/// `cargo xtask bench --ci-log FILE` or `--engines-log FILE`: that section rewritten from the
/// run's saved output, every other figure left as it was.
pub(crate) fn bench_saved_log(log: &Path, kind: SavedLog) -> Result<i32> {
    let root = root();
    let text = fs::read_to_string(log).with_context(|| format!("could not read {}", log.display()))?;
    let (id, figures, option, what) = match kind {
        SavedLog::Ci => (ci_log::BENCH, ci_log::figures(&text)?, "--ci-log", "a fresh-clone run"),
        SavedLog::Engines => {
            (engines_log::BENCH, engines_log::figures(&text)?, "--engines-log", "a full engines run")
        }
    };
    let records = Records { figures, tables: Vec::new() };
    let bench =
        BENCHES.iter().find(|b| b.id() == id).with_context(|| format!("no section {id} in BENCHES"))?;
    let (doc, saved) = read_saved(&root)?;
    let doc = with_place_for(&doc, id)?;
    let run = ci_log::commit(&text)
        .map_or("a commit its output does not name".to_string(), |c| format!("commit {c}"));
    let measured = format!(
        "Read {} by `cargo xtask bench {option}`, from {what} of {run}; the other sections are from the runs \
         dated above.",
        machine().date,
    );
    write_section(&root, (&doc, saved), bench, &records, &measured)
}

/// Writes `records` as `bench`'s section of `doc` and into `saved`, then both documents.
fn write_section(
    root: &Path,
    (doc, mut saved): (&str, Saved),
    bench: &Bench,
    records: &Records,
    measured: &str,
) -> Result<i32> {
    let id = bench.id();
    let block = section_block(&id, Some(bench.about), records, Some(&saved), measured);
    let doc = with_section(doc, &id, &block)?;
    saved.figures.retain(|r| r.bench != id);
    saved.figures.extend(records.figures.iter().cloned());
    write_partial(root, &doc, &saved)?;
    println!("xtask: rewrote {id} in {BENCH_DOC} and {BENCH_JSON}, and the headlines");
    Ok(0)
}

/// `doc` as it is when it has a section `## ID`; else with an empty one where a full run puts it,
/// before the section of the first benchmark after it in [`BENCHES`] that `doc` has (a
/// benchmark new since the last full run).
fn with_place_for(doc: &str, id: &str) -> Result<String> {
    if doc.contains(&format!("\n## {id}\n")) {
        return Ok(doc.to_string());
    }
    let after = BENCHES.iter().map(Bench::id).skip_while(|b| b != id).skip(1);
    let at = after.filter_map(|b| doc.find(&format!("\n## {b}\n"))).next().with_context(|| {
        format!("{BENCH_DOC} has no section {id} nor any after it; run `cargo xtask bench` once")
    })?;
    Ok(format!("{}\n## {id}\n{}", &doc[..at], &doc[at..]))
}

/// `doc` with the section `## ID` (up to the next section) replaced by `block`, which starts
/// with the newline before its heading.
fn with_section(doc: &str, id: &str, block: &str) -> Result<String> {
    let heading = format!("\n## {id}\n");
    let start = doc
        .find(&heading)
        .with_context(|| format!("{BENCH_DOC} has no section {id}; run `cargo xtask bench` once"))?;
    let end = doc[start + 1..].find("\n## ").map_or(doc.len(), |n| start + 1 + n);
    Ok(format!("{}{}{}", &doc[..start], block, &doc[end..]))
}

/// Which code was measured: a commit, or a commit with changes beside it. What the bench
/// commands write (docs/, README.md) is not a change of the code.
fn code_measured(root: &Path) -> String {
    let git_root = root.to_string_lossy();
    let commit = crate::output_of("git", &["-C", &git_root, "rev-parse", "--short=12", "HEAD"])
        .unwrap_or_else(|| "unknown".into());
    let changed = crate::output_of(
        "git",
        &[
            "-C",
            &git_root,
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            ":!docs",
            ":!README.md",
        ],
    );
    match changed {
        None => format!("the code of commit {commit}"),
        Some(_) => format!("commit {commit} with uncommitted changes"),
    }
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

/// `cargo xtask bench --counts`: the counts alone (`counts.rs`), a minute or two; rewrites
/// their section of `docs/benchmarks.md` between its markers and their figures in
/// `docs/benchmarks.json`, and leaves every other figure as the last full run measured it.
pub(crate) fn bench_counts() -> Result<i32> {
    let root = root();
    let (doc, mut saved) = read_saved(&root)?;
    let programs = Programs::build(&root, None)?;
    let figures = count(&programs)?;
    let records = Records { figures: figures.clone(), tables: Vec::new() };
    let code = code_measured(&root);
    let counted = format!(
        "Counted {} by `cargo xtask bench --counts`, on {code}; the other sections are from the run dated \
         above.",
        machine().date
    );
    let block = counts_block(&records, Some(&saved), &counted);
    let doc = match (doc.find(COUNTS_START), doc.find(COUNTS_END)) {
        (Some(start), Some(end)) if start < end => {
            // The block starts with a newline before its start marker and ends after its end
            // marker's line.
            let from = doc[..start].rfind('\n').unwrap_or(start);
            let to = doc[end..].find('\n').map_or(doc.len(), |n| end + n + 1);
            format!("{}{}{}", &doc[..from], block, &doc[to..])
        }
        _ => {
            // A document from before the counts: the block goes where a full run puts it, before
            // the first section after the headlines.
            let at = doc
                .match_indices("\n## ")
                .map(|(at, _)| at)
                .find(|at| !doc[*at..].starts_with("\n## Headlines"))
                .context("docs/benchmarks.md has no section to put the counts before")?;
            format!("{}{}{}", &doc[..at], block, &doc[at..])
        }
    };
    saved.figures.retain(|r| r.bench != COUNTS);
    saved.figures.splice(0..0, figures);
    write_partial(&root, &doc, &saved)?;
    println!("xtask: rewrote the counts in {BENCH_DOC} and {BENCH_JSON}, and the headlines");
    Ok(0)
}

/// The figures of section `id` that `docs/benchmarks.json` holds (none when it is unreadable).
fn saved_figures(root: &Path, id: &str) -> Vec<crate::records::Record> {
    let text = fs::read_to_string(root.join(BENCH_JSON)).unwrap_or_default();
    let saved: Option<Saved> = serde_json::from_str(&text).ok();
    saved.map(|s| s.figures.into_iter().filter(|r| r.bench == id).collect()).unwrap_or_default()
}

/// `docs/benchmarks.md` and the figures of `docs/benchmarks.json`, for a command that
/// rewrites part of them.
fn read_saved(root: &Path) -> Result<(String, Saved)> {
    let doc_path = root.join(BENCH_DOC);
    let doc =
        fs::read_to_string(&doc_path).with_context(|| format!("could not read {}", doc_path.display()))?;
    let json_path = root.join(BENCH_JSON);
    let saved: Saved = serde_json::from_str(
        &fs::read_to_string(&json_path).with_context(|| format!("could not read {}", json_path.display()))?,
    )
    .with_context(|| format!("{BENCH_JSON} is not a run's figures; run `cargo xtask bench` once"))?;
    Ok((doc, saved))
}

/// Writes `doc` and `saved` back after a part of them was measured again, with the headlines
/// of every saved figure (those not measured again as the run that measured them left them)
/// in the document and in README.md.
fn write_partial(root: &Path, doc: &str, saved: &Saved) -> Result<()> {
    let merged = Records { figures: saved.figures.clone(), tables: Vec::new() };
    let headlines = headlines(&merged)?;
    let doc = with_doc_headlines(doc, &headlines)?;
    let readme_path = root.join(README);
    let readme = fs::read_to_string(&readme_path)
        .with_context(|| format!("could not read {}", readme_path.display()))?;
    let readme = with_headlines(&readme, &headlines.join("\n"))?;
    let doc_path = root.join(BENCH_DOC);
    fs::write(&doc_path, doc).with_context(|| format!("could not write {}", doc_path.display()))?;
    fs::write(&readme_path, readme).with_context(|| format!("could not write {}", readme_path.display()))?;
    let json_path = root.join(BENCH_JSON);
    fs::write(&json_path, serde_json::to_string_pretty(saved)? + "\n")
        .with_context(|| format!("could not write {}", json_path.display()))?;
    Ok(())
}

/// `doc` with the bullets of its `## Headlines` section replaced by `headlines`.
fn with_doc_headlines(doc: &str, headlines: &[String]) -> Result<String> {
    let heading = "\n## Headlines\n\n";
    let start = doc.find(heading).context("docs/benchmarks.md has no Headlines section")? + heading.len();
    let end = doc[start..].find("\n\n").map_or(doc.len(), |n| start + n);
    Ok(format!("{}{}{}", &doc[..start], headlines.join("\n"), &doc[end..]))
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

#[cfg(test)]
mod tests {
    use super::{BENCHES, Bench, with_doc_headlines, with_place_for, with_section};

    #[test]
    fn a_new_section_goes_before_the_next_one_a_full_run_writes() {
        let ids: Vec<String> = BENCHES.iter().map(Bench::id).collect();
        let (new, next) = (&ids[1], &ids[2]);
        let doc = format!("# B\n\n## {next}\n\nx\n");
        assert_eq!(
            with_place_for(&doc, new).expect("a place"),
            format!("# B\n\n## {new}\n\n## {next}\n\nx\n")
        );
        assert_eq!(with_place_for(&doc, next).expect("its own section"), doc);
        assert!(with_place_for("# B\n", new).is_err());
    }

    #[test]
    fn one_section_is_replaced_up_to_the_next_and_nothing_else() {
        let doc = "# B\n\n## a/x\n\nold x\n\n## a/y\n\nold y\n\n## From one run to the next\n\nz\n";
        let new = with_section(doc, "a/x", "\n## a/x\n\nnew x\n").expect("a section a/x");
        assert_eq!(new, "# B\n\n## a/x\n\nnew x\n\n## a/y\n\nold y\n\n## From one run to the next\n\nz\n");
        let last = with_section(doc, "a/y", "\n## a/y\n\nnew y\n").expect("a section a/y");
        assert_eq!(last, "# B\n\n## a/x\n\nold x\n\n## a/y\n\nnew y\n\n## From one run to the next\n\nz\n");
        // A prefix of another section's name is not that section.
        assert!(with_section(doc, "a", "").is_err());
        assert!(
            with_section("# B\n\n## a/x\n\nx\n", "a/x", "\n## a/x\n\nx2\n")
                .is_ok_and(|d| d.ends_with("x2\n"))
        );
    }

    #[test]
    fn the_documents_headlines_are_replaced_and_nothing_else() {
        let doc = "# B\n\n## Headlines\n\n- old one\n- old two\n\n<!-- counts:start -->\n## xtask/counts\n";
        let new = with_doc_headlines(doc, &["- new".to_string()]).expect("a Headlines section");
        assert_eq!(new, "# B\n\n## Headlines\n\n- new\n\n<!-- counts:start -->\n## xtask/counts\n");
        assert!(with_doc_headlines("# B\n", &[]).is_err());
    }
}
