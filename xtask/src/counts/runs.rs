//! How each count is taken: the counted processes (under Callgrind or strace, each within
//! a bound and killed past it), the payments fake the executor counts run against, and the
//! figures read back from Callgrind's output files and strace's summaries.

use std::io::{BufRead, BufReader, Read as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::{CASES, Programs};

/// The longest any one counted process may take; Callgrind runs programs some fifty times
/// slower than natively, and the longest run here takes well under a minute.
const RUN_MS_MAX: u64 = 600_000;
/// The longest a server may take to print its URL under Callgrind.
const READY_MS_MAX: u64 = 60_000;

/// A payments fake for the executor counts, in a process of its own and not counted.
pub(super) struct Server {
    child: Child,
    pub(super) url: String,
}

impl Server {
    /// Starts `count_server serve payments` and reads its URL.
    pub(super) fn start(programs: &Programs) -> Result<Server> {
        let mut command = Command::new(&programs.count_server);
        command.args(["serve", "payments"]);
        let (child, url) = start_server(command)?;
        Ok(Server { child, url })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Closing stdin stops it; a kill is the fallback.
        drop(self.child.stdin.take());
        if wait_bounded(&mut self.child, Duration::from_secs(10)).is_err() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts a `count_server serve` command (perhaps under Valgrind) and reads its URL.
fn start_server(mut command: Command) -> Result<(Child, String)> {
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child = command.spawn().with_context(|| format!("could not start {command:?}"))?;
    let stdout = child.stdout.take().context("the server has no standard output")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    match rx.recv_timeout(Duration::from_millis(READY_MS_MAX)) {
        Ok(line) if line.starts_with("http://") => Ok((child, line.trim().to_string())),
        other => {
            let _ = child.kill();
            let _ = child.wait();
            bail!("{command:?} printed no URL within {READY_MS_MAX} ms ({other:?})")
        }
    }
}

/// Waits for `child` at most `limit`.
fn wait_bounded(child: &mut Child, limit: Duration) -> Result<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        if Instant::now() >= deadline {
            bail!("a counted process did not end within {} ms", limit.as_millis());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `command` to its end within [`RUN_MS_MAX`], failing on a non-zero exit.
fn run_bounded(mut command: Command) -> Result<()> {
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = command.spawn().with_context(|| format!("could not start {command:?}"))?;
    let mut stderr = child.stderr.take().context("no standard error")?;
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let status = match wait_bounded(&mut child, Duration::from_millis(RUN_MS_MAX)) {
        Ok(status) => status,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e.context(format!("{command:?}")));
        }
    };
    let stderr = reader.join().unwrap_or_default();
    if !status.success() {
        bail!("{command:?} failed ({status}): {}", stderr.trim());
    }
    Ok(())
}

/// A Callgrind output file in the scratch directory, removed when read.
fn callgrind_file(programs: &Programs, label: &str) -> PathBuf {
    programs.scratch.join(format!("callgrind-{label}-{}.out", std::process::id()))
}

/// `valgrind --tool=callgrind`, writing its counts to `out`.
fn callgrind(out: &Path) -> Command {
    let mut command = Command::new("valgrind");
    command.args(["--tool=callgrind", "-q"]).arg(format!("--callgrind-out-file={}", out.display()));
    command
}

/// The instructions a Callgrind output file counts (its `summary:` or `totals:` line).
fn instructions(out: &Path) -> Result<f64> {
    let text = std::fs::read_to_string(out).with_context(|| format!("could not read {}", out.display()))?;
    let _ = std::fs::remove_file(out);
    text.lines()
        .find_map(|l| l.strip_prefix("summary:").or_else(|| l.strip_prefix("totals:")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| format!("{} has no instruction total", out.display()))
}

/// Instructions of a `count_server serve KIND` process that answered `n` requests.
pub(super) fn server_instructions(programs: &Programs, kind: &str, n: u64) -> Result<f64> {
    let out = callgrind_file(programs, &format!("server-{kind}-{n}"));
    let mut command = callgrind(&out);
    command.arg(&programs.count_server).args(["serve", kind]);
    let (mut child, url) = start_server(command)?;
    let mut drive = Command::new(&programs.count_server);
    drive.args(["drive", &url, &n.to_string()]);
    let driven = run_bounded(drive);
    drop(child.stdin.take());
    let ended = wait_bounded(&mut child, Duration::from_millis(RUN_MS_MAX));
    if ended.is_err() {
        let _ = child.kill();
        let _ = child.wait();
    }
    driven?;
    let status = ended?;
    if !status.success() {
        bail!("count_server serve {kind} under Callgrind ended with {status}");
    }
    instructions(&out)
}

/// Instructions per generated case and per catalog scenario, from three runs of `twice run`.
pub(super) fn sim_instructions(programs: &Programs) -> Result<(f64, f64)> {
    let run = |label: &str, args: &[&str]| -> Result<(f64, usize)> {
        let out = callgrind_file(programs, label);
        let reports = programs.scratch.join(format!("report-{label}"));
        let mut command = callgrind(&out);
        command
            .arg(&programs.twice)
            .args(["run", "--jobs", "1", "-q", "--report-dir"])
            .arg(&reports)
            .args(args);
        run_bounded(command)?;
        let results = std::fs::read_to_string(reports.join("results.json"))
            .with_context(|| format!("`twice run {}` wrote no results.json", args.join(" ")))?;
        let results: serde_json::Value = serde_json::from_str(&results)?;
        let n = results["results"].as_array().map_or(0, Vec::len);
        let _ = std::fs::remove_dir_all(&reports);
        Ok((instructions(&out)?, n))
    };
    let (short, catalog) = run("sim-short", &["--cases", &CASES.0.to_string()])?;
    let (long, _) = run("sim-long", &["--cases", &CASES.1.to_string()])?;
    let (one, _) = run("sim-one", &["--scenario", "lost_refund_reply"])?;
    if catalog < 2 {
        bail!("`twice run --cases 0` ran {catalog} scenarios; the catalog count needs two or more");
    }
    Ok(((long - short) / (CASES.1 - CASES.0) as f64, (short - one) / (catalog - 1) as f64))
}

/// A fresh directory for one executor run.
fn state_dir(programs: &Programs, label: &str) -> PathBuf {
    let dir = programs.scratch.join(format!("{label}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Instructions of a `count_intents intents` process that proposed and drained `n` intents.
pub(super) fn executor_instructions(programs: &Programs, url: &str, n: u64, batch: usize) -> Result<f64> {
    let out = callgrind_file(programs, &format!("intents-{batch}-{n}"));
    let dir = state_dir(programs, &format!("intents-{batch}-{n}"));
    let mut command = callgrind(&out);
    command.arg(&programs.count_intents).arg("intents").arg(url).arg(&dir).args([
        n.to_string(),
        batch.to_string(),
        "full".into(),
    ]);
    run_bounded(command)?;
    let _ = std::fs::remove_dir_all(&dir);
    instructions(&out)
}

/// fsync and fdatasync calls of a `count_intents` run: `n` intents in batches of `batch`
/// against the fake at `url`, or `n` raw commits when `url` is `None`.
pub(super) fn fsyncs(programs: &Programs, url: Option<&str>, n: u64, batch: usize) -> Result<u64> {
    let label = match url {
        Some(_) => format!("fsync-{batch}-{n}"),
        None => format!("raw-{n}"),
    };
    let dir = state_dir(programs, &label);
    let summary = programs.scratch.join(format!("{label}.strace"));
    let mut command = Command::new("strace");
    command
        .args(["-f", "-c", "-e", "trace=fsync,fdatasync", "-o"])
        .arg(&summary)
        .arg(&programs.count_intents);
    match url {
        Some(url) => command.arg("intents").arg(url).arg(&dir).args([n.to_string(), batch.to_string()]),
        None => command.arg("raw").arg(&dir).arg(n.to_string()),
    };
    command.arg("full");
    run_bounded(command)?;
    let _ = std::fs::remove_dir_all(&dir);
    let text =
        std::fs::read_to_string(&summary).with_context(|| format!("could not read {}", summary.display()))?;
    let _ = std::fs::remove_file(&summary);
    Ok(syscalls(&text, &["fsync", "fdatasync"]))
}

/// The calls `strace -c` counted for the named system calls.
fn syscalls(summary: &str, names: &[&str]) -> u64 {
    summary
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let name = fields.last()?;
            if !names.contains(name) {
                return None;
            }
            // % time, seconds, usecs/call, calls, [errors], syscall.
            fields.get(3)?.parse::<u64>().ok()
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_strace_summary_is_read_for_the_named_calls() {
        let summary = "% time     seconds  usecs/call     calls    errors syscall\n\
                       ------ ----------- ----------- --------- --------- ----------------\n\
                        90.00    0.013030         119       109           fsync\n\
                        10.00    0.000100          10        10         1 fdatasync\n\
                       ------ ----------- ----------- --------- --------- ----------------\n\
                       100.00    0.013130         110       119         1 total\n";
        assert_eq!(syscalls(summary, &["fsync", "fdatasync"]), 119);
        assert_eq!(syscalls(summary, &["fsync"]), 109);
    }

    #[test]
    fn a_callgrind_total_is_read_from_its_summary_line() {
        let dir = std::env::temp_dir().join(format!("xtask-counts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("cg.out");
        std::fs::write(&out, "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 438161672\n")
            .unwrap();
        assert_eq!(instructions(&out).unwrap(), 438_161_672.0);
        assert!(!out.exists(), "read files are removed");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
