//! `cargo xtask fuzz-parsers`: the coverage-guided fuzz targets of `fuzz/` (`cargo fuzz`,
//! libFuzzer) run one after the other, each for a fixed time, growing its corpus in
//! `fuzz/corpus/<target>/`; then a table of what each run did (executions, executions a
//! second, coverage, corpus files, crash). Not part of CI: the suite replays the corpora.
//!
//! cargo-fuzz is installed into `target/cargo-fuzz/` when it is neither there nor on the
//! PATH. libFuzzer needs nightly compiler flags; on a stable toolchain `RUSTC_BOOTSTRAP=1`
//! allows them.

use std::fs;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result, bail};

use crate::machine::machine;
use crate::{cargo, exit_code, output_of, root, target_dir};

pub const TARGETS: [&str; 5] = ["forms", "s3_xml", "tx_decode", "json_rpc", "scenario_toml"];

pub const USAGE: &str = "\
  fuzz-parsers [--seconds S] [--cmin] [TARGET...]
                  run each cargo fuzz target of fuzz/ (default all: forms s3_xml
                  tx_decode json_rpc scenario_toml) for S seconds (default 300), growing
                  fuzz/corpus/TARGET; --cmin then minimises each corpus; prints execs,
                  execs/s, cov, ft, corpus files and any crash file; exit 1 on a crash";

/// What one libFuzzer run did, read from its output.
#[derive(Default)]
struct Run {
    target: String,
    execs: Option<u64>,
    execs_per_s: Option<u64>,
    cov: Option<u64>,
    ft: Option<u64>,
    corpus_files: usize,
    crash: Option<String>,
    exit: i32,
}

pub fn fuzz_parsers(args: &[String]) -> Result<i32> {
    let mut seconds: u64 = 300;
    let mut cmin = false;
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--seconds" => {
                let value = it.next().context("--seconds needs a value")?;
                seconds = value
                    .parse()
                    .with_context(|| format!("--seconds takes a whole number, got `{value}`"))?;
            }
            "--cmin" => cmin = true,
            t if TARGETS.contains(&t) => targets.push(t.to_string()),
            other => bail!("unknown argument `{other}` (targets: {})\n\n{USAGE}", TARGETS.join(" ")),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().map(|t| t.to_string()).collect();
    }
    let root = root();
    let path = cargo_fuzz_path(&root)?;
    let logs = target_dir(&root).join("fuzz-parsers");
    fs::create_dir_all(&logs)?;
    let mut runs = Vec::new();
    for target in &targets {
        let run = run_target(&root, &path, &logs, target, seconds)?;
        if cmin && run.exit == 0 {
            let status = fuzz_command(&root, &path).args(["cmin", target.as_str()]).status()?;
            if !status.success() {
                bail!("cargo fuzz cmin {target} failed");
            }
        }
        runs.push(Run { corpus_files: corpus_files(&root, target), ..run });
    }
    let m = machine();
    let commit = output_of("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!(
        "\nfuzz-parsers: {seconds} s a target, {} ({} cores), {}, commit {commit}",
        m.cpu, m.cores, m.date
    );
    println!("| target | execs | execs/s | cov | ft | corpus files | crash |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: | --- |");
    let show = |n: Option<u64>| n.map_or_else(|| "?".to_string(), |n| n.to_string());
    for run in &runs {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            run.target,
            show(run.execs),
            show(run.execs_per_s),
            show(run.cov),
            show(run.ft),
            run.corpus_files,
            run.crash.as_deref().unwrap_or(if run.exit == 0 { "none" } else { "(failed, see log)" })
        );
    }
    println!("logs: {}", logs.display());
    Ok(if runs.iter().all(|r| r.exit == 0) { 0 } else { 1 })
}

/// The PATH with cargo-fuzz on it, installing it into `target/cargo-fuzz/` if needed.
fn cargo_fuzz_path(root: &Path) -> Result<std::ffi::OsString> {
    let install_root = target_dir(root).join("cargo-fuzz");
    let mut dirs = vec![install_root.join("bin")];
    dirs.extend(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()));
    let path = std::env::join_paths(&dirs)?;
    if !dirs.iter().any(|dir| dir.join("cargo-fuzz").is_file()) {
        eprintln!("xtask: installing cargo-fuzz into {}", install_root.display());
        let status = cargo()
            .args(["install", "cargo-fuzz", "--locked", "--root"])
            .arg(&install_root)
            .status()
            .context("running cargo install cargo-fuzz")?;
        if !status.success() {
            bail!("cargo install cargo-fuzz failed");
        }
    }
    Ok(path)
}

fn fuzz_command(root: &Path, path: &std::ffi::OsStr) -> Command {
    let mut command = cargo();
    command.current_dir(root).env("PATH", path).env("RUSTC_BOOTSTRAP", "1").arg("fuzz");
    command
}

/// Runs one target for `seconds`, its output copied to `logs/<target>.log` and, less the
/// lines of every new and reduced input and of the dictionary, to the terminal.
fn run_target(root: &Path, path: &std::ffi::OsStr, logs: &Path, target: &str, seconds: u64) -> Result<Run> {
    eprintln!("xtask: cargo fuzz run {target} for {seconds} s");
    let log_path = logs.join(format!("{target}.log"));
    let mut log = fs::File::create(&log_path).with_context(|| log_path.display().to_string())?;
    let mut child = fuzz_command(root, path)
        .args([
            "run",
            target,
            "--",
            &format!("-max_total_time={seconds}"),
            "-print_final_stats=1",
            "-timeout=10",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .spawn()
        .context("running cargo fuzz")?;
    let mut run = Run { target: target.to_string(), ..Run::default() };
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines() {
            let line = line?;
            writeln!(log, "{line}")?;
            // The line of every new or reduced input, and the recommended dictionary, are
            // many; they stay in the log.
            let noisy = line.contains("\tNEW ") || line.contains("\tREDUCE ") || line.contains("# Uses: ");
            if !noisy {
                eprintln!("{line}");
            }
            read_line(&line, &mut run);
        }
    }
    run.exit = exit_code(child.wait()?);
    Ok(run)
}

/// Takes what a line of libFuzzer's output says: the status lines
/// (`#123 pulse  cov: 45 ft: 67 corp: 8/90b exec/s: 1000 rss: 30Mb`), the final stats and
/// the crash file.
fn read_line(line: &str, run: &mut Run) {
    if line.starts_with('#') {
        let words: Vec<&str> = line.split_whitespace().collect();
        let after =
            |key: &str| words.iter().position(|w| *w == key).and_then(|i| words.get(i + 1)?.parse().ok());
        run.cov = after("cov:").or(run.cov);
        run.ft = after("ft:").or(run.ft);
        if let Some(n) = words.first().and_then(|w| w[1..].parse().ok()) {
            run.execs = Some(n);
        }
    } else if let Some(n) = line.strip_prefix("stat::number_of_executed_units:") {
        run.execs = n.trim().parse().ok().or(run.execs);
    } else if let Some(n) = line.strip_prefix("stat::average_exec_per_sec:") {
        run.execs_per_s = n.trim().parse().ok();
    } else if let Some(rest) = line.split_once("Test unit written to ").map(|(_, r)| r) {
        run.crash = Some(rest.trim().to_string());
    }
}

fn corpus_files(root: &Path, target: &str) -> usize {
    let dir: PathBuf = root.join("fuzz").join("corpus").join(target);
    fs::read_dir(dir).map(|entries| entries.filter_map(|e| e.ok()).count()).unwrap_or(0)
}
